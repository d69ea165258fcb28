//! `--read-buffers ring`: the relay's reads through the worker's
//! provided-buffer ring (`uring::buffers::provided`), behind the same relay
//! machine as the other modes.
//!
//! The relay asks for one read at a time per pipe and gets "what the buffer
//! holds". Here a socket's multishot receive stays armed and its CQEs are
//! queued in order on the socket's [`RingRecv`]; each relay read takes the
//! next chunk (or waits for one), and the relay's write sends that chunk
//! straight from the ring buffer, which goes back once the send completes.
//! When the relay reads again without having forwarded the chunk, the client
//! side consumed it (given back), and the backend side is keeping it (a
//! server ERR arriving in pieces): those few bytes are copied into the
//! connection's own buffer, as the other modes keep them there.
//!
//! The receive ends with -ENOBUFS when the ring is empty; the bytes stay in
//! the socket. When the relay next reads with the queue empty, it is
//! re-armed at the end of the batch of completions, one such receive per
//! batch while the ring has buffers (`Worker::ring_rearm_starved`), or,
//! while the ring is empty, that read is a plain read into the connection's
//! own buffer (as in heap mode), so an empty ring never stalls a connection
//! whose peer waits on it.
//!
//! A session with a client leg (compression) reads as in heap mode: its
//! transform copies every byte anyway.
//!
//! Transaction pooling: a park that keeps its connection as it is leaves
//! the backend's receive armed, the pool's while the connection is idle
//! (any completion of it there is the server speaking or closing), and the
//! next lease's relay takes it over: no cancel at the park, no re-arm at
//! the lease (`ring_give_back`, `ring_idle_recv`). What else would read the
//! connection cancels it first (`ring_pool_op`, `ring_lease_waits`).
//!
//! By role: `receive.rs` arms the multishot receive and queues its CQEs;
//! `deliver.rs` hands a relay read its next chunk (or the end);
//! `forward.rs` sends a chunk from its ring buffer and gives it back; and
//! `give_back.rs` settles a backend's receive when its session gives the
//! backend back (what the give-back asked for waits in the pool meanwhile:
//! `machines::pool::PendingGiveBack`).

use std::sync::atomic::Ordering::Relaxed;

use super::*;
use uring::buffers::provided::RingRecv;

mod deliver;
mod forward;
mod give_back;
mod receive;

/// Which socket of a session the relay reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    Client,
    Backend,
}

/// Count bytes copied out of ring buffers into a connection's own buffer:
/// the relay path is meant to copy none, and the tests check that a large
/// result costs none.
fn copied(shared: &Shared, worker: usize, n: usize) {
    shared
        .metrics
        .worker(worker)
        .ring_copied_bytes_total
        .fetch_add(n as u64, Relaxed);
}

/// Where bytes copied out of ring buffers are counted ([`copied`]).
#[derive(Clone, Copy)]
struct Copied<'a>(&'a Shared, usize);

impl Copied<'_> {
    fn count(self, n: usize) {
        copied(self.0, self.1, n)
    }
}

impl Worker {
    /// Bytes of a ring chunk that had to be kept in the connection's own
    /// buffer did not fit it (`ReadBuffer::append` copied nothing). Each
    /// site says why that cannot happen; if it does anyway, the session may
    /// not go on with bytes missing from the MySQL stream (rule: nothing
    /// lost). Debug builds stop here; release builds log one error line
    /// and end the session: the side's receive drops what it queued and
    /// ends with a fault (`Fault::BytesLost`), so no byte behind the gap is
    /// handed over, and both sockets are shut: the backend's at once
    /// (nothing more reaches the server; the connection is discarded), the
    /// client's too, or, for a direct descriptor, by an IORING_OP_SHUTDOWN
    /// (the session's own packets, whole ones, may still go out before it
    /// lands).
    fn ring_lost(&mut self, sid: SessionId, side: Side, site: &'static str, bytes: usize) {
        debug_assert!(
            false,
            "ring mode: {site} ({bytes} bytes) do not fit the buffer"
        );
        tracing::error!(
            worker = self.id,
            site,
            bytes,
            "ring mode: bytes to keep did not fit the connection's buffer; closing the session \
             rather than losing them"
        );
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let how = slot.io.shutdown();
        let backend = slot.backend;
        self.shutdown_client(sid, how);
        if let Some(b) = backend.and_then(|b| self.backends.get_mut(b)) {
            b.shutdown();
        }
        let Some(recv) = self.recv_of(sid, side) else {
            return;
        };
        recv.end = Some(RecvEnd::Fault(Fault::BytesLost));
        let queued = std::mem::take(&mut recv.queue);
        if let Some(ring) = self.buffers.buf_ring() {
            for c in queued {
                let _ = ring.put(c);
            }
        }
    }

    fn recv_of(&mut self, sid: SessionId, side: Side) -> Option<&mut RingRecv<RecvEnd>> {
        side_io(&mut self.sessions, &mut self.backends, sid, side)?
            .recv
            .as_mut()
    }
}

/// The connection I/O the session reads on `side`: its client's, or its
/// backend's. A function of the two tables rather than a method, so that
/// the caller may use the worker's other fields (buffers, metrics) while
/// it holds the result.
fn side_io<'a>(
    sessions: &'a mut Slab<SessionSlot>,
    backends: &'a mut backend_table::BackendTable,
    sid: SessionId,
    side: Side,
) -> Option<&'a mut ConnIo> {
    let slot = sessions.slot(sid)?;
    match side {
        Side::Client => Some(&mut slot.io),
        Side::Backend => slot.backend.and_then(|b| backends.get_mut(b)),
    }
}

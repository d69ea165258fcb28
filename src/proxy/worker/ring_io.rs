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

use std::sync::atomic::Ordering::Relaxed;

use io_uring::cqueue;

use super::*;
use uring::buffers::provided::{BufRing, Chunk, RingRecv};
use uring::buffers::ReadBuffer;

/// What the driver does with a backend once its cancelled receive has
/// ended (the session gave it back while the receive was armed).
pub(super) enum PendingRelease {
    /// `Pool::release` (the relay ended).
    Release,
    /// `Pool::relet` (COM_CHANGE_USER resets it in place).
    Relet,
    /// Transaction pooling parks the session: `Pool::release_kept` with
    /// what the connection carries, or `Pool::release` with a reset.
    Park {
        kept: Option<(Option<String>, Settings)>,
        reset: bool,
        /// `Pool::park_asking` for this session first.
        ask: Option<SessionId>,
    },
    /// `Pool::statement` (transaction pooling: a prepared statement is
    /// looked up, or prepared, on the session's connection).
    Statement(Box<StatementAsk>),
    /// The pool's own exchange (a reset, a lease's setup statements) on a
    /// connection whose receive a park left armed: these operations, in
    /// order, once the receive has ended (`Worker::ring_pool_op`).
    Ops(Vec<BackendOp>),
    /// A lease of such a connection to a session that reads its backend
    /// into the connection's own buffer (a client leg or client TLS): the
    /// `PoolEvent::Leased` again once the receive has ended
    /// (`Worker::ring_lease_waits`).
    Lease(SessionId),
}

/// A [`PendingRelease::Statement`]'s arguments.
#[derive(Clone, Debug)]
pub(super) struct StatementAsk {
    pub key: std::sync::Arc<machines::prepared::StmtKey>,
    pub want_response: bool,
    pub types: Option<Vec<u8>>,
}

/// Which socket of a session the relay reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    Client,
    Backend,
}

/// Queue what a receive CQE brought; ENOBUFS is counted and is no end (the
/// receive is starved: its re-arm waits for a buffer).
fn on_cqe(recv: &mut RingRecv, ring: &mut BufRing, res: i32, flags: u32, wm: &WorkerMetrics) {
    if !cqueue::more(flags) {
        recv.armed = false;
    }
    if res > 0 {
        recv.took = true;
        if !ring.take(res, flags, &mut recv.queue) {
            // A receive without a buffer: nothing we can deliver.
            recv.end = Some(-libc::EIO);
        }
    } else if res == -libc::ENOBUFS {
        wm.ring_enobufs_total.fetch_add(1, Relaxed);
        if !recv.took {
            // Armed for nothing: the busy loop's mark.
            wm.ring_enobufs_empty_total.fetch_add(1, Relaxed);
        }
        recv.starved = true;
    } else if recv.end.is_none() {
        recv.end = Some(res);
    }
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

/// How a backend's receive that a give-back cancels has ended. Bytes that
/// beat the cancel: the server is talking between commands, so the
/// connection is not reusable. Ended by -ENOBUFS before the cancel reached
/// it, with no byte in userspace: the kernel takes a buffer before it reads
/// the socket, so that says only that the receive was issued on an empty
/// ring, or that the socket woke it (bytes or an EOF waiting there). A peek
/// tells which: with nothing waiting the connection is as clean as the
/// cancel would have left it, and taking this end for a dirty one cost a
/// backend connection.
fn settle_give_back_end(io: &mut ConnIo, worker: usize, bid: BackendId) {
    let Some(recv) = io.recv.as_mut() else {
        return;
    };
    if recv.release_pending && !recv.queue.is_empty() {
        recv.end = Some(-libc::EPROTO);
    }
    if !(recv.release_pending && !recv.armed && recv.end.is_none()) {
        return;
    }
    let clean = io.idle_peer_alive();
    tracing::debug!(
        worker,
        backend = bid.index,
        clean,
        "ring receive of a backend given back ended with -ENOBUFS before its cancel"
    );
    if let Some(recv) = io.recv.as_mut() {
        recv.end = Some(if clean {
            -libc::ECANCELED
        } else {
            -libc::EPROTO
        });
    }
}

/// A new relay read gives back the chunk the last one was handed. The
/// backend's is kept for the next read, as the backend buffer keeps it in
/// the other modes. It fits: the relay reads its backend again without
/// forwarding only for a partial unsolicited ERR between commands (or one
/// that beat a park's cancel), which the tracker bounds below 4 +
/// MAX_UNSOLICITED_ERR = 4096 bytes, the smallest --read-buffer-size;
/// longer data, even a chunk joined at delivery (a response owed, up to
/// --large-read-size), is forwarded whole or ends the relay. A current
/// chunk was handed over only to an empty buffer, and nothing fills that
/// buffer before this read. The bytes lost if it did not fit.
fn put_back_current(
    recv: &mut RingRecv,
    own: &mut Option<ReadBuffer>,
    buffers: &mut BufferPool,
    side: Side,
    copy: Copied,
) -> usize {
    let Some(chunk) = recv.current.take() else {
        return 0;
    };
    let mut lost = 0;
    if side == Side::Backend {
        let buf = buffers.ensure(own, Owner::Backend);
        if let Some(ring) = buffers.buf_ring() {
            if buf.append(ring.bytes(&chunk)) {
                copy.count(chunk.len());
            } else {
                lost = chunk.len();
            }
        }
    }
    if let Some(ring) = buffers.buf_ring() {
        if let Err(c) = ring.put(chunk) {
            debug_assert!(false, "relay read while its chunk is being sent");
            recv.current = Some(c);
        }
    }
    lost
}

/// Whether the next chunk is a tail to join with what follows. Only the
/// client's commands need the join: the tracker follows server bytes across
/// any cut, so a backend's chunks (a large result: every 16 KiB chunk ends
/// its buffer) go out as they are, without a copy.
fn needs_join(recv: &RingRecv, side: Side) -> bool {
    side == Side::Client && recv.queue.front().is_some_and(|c| c.is_tail())
}

/// A chunk that ends its ring buffer with more bytes behind it may end
/// inside a packet header (a 5-byte COM_QUIT cut 3 + 2 would have its first
/// bytes forwarded alone, and the connection could not be reused): join it
/// with what follows in the connection's own buffer (a copy of up to a read
/// buffer per ring buffer's worth of client traffic). The tail, then as
/// much of the next chunk as fits: (joined, bytes lost).
fn join_tail(
    recv: &mut RingRecv,
    buf: Option<&mut ReadBuffer>,
    ring: &mut BufRing,
    copy: Copied,
) -> (bool, usize) {
    let Some(buf) = buf.filter(|b| !b.in_flight()) else {
        return (false, 0);
    };
    let mut joined = false;
    for _ in 0..2 {
        let Some(mut c) = recv.queue.pop_front() else {
            break;
        };
        let n = c.len().min(buf.capacity() - buf.filled_len());
        if !buf.append(&ring.bytes(&c)[..n]) {
            // Cannot happen: `n` is the room left.
            recv.queue.push_front(c);
            return (joined, n);
        }
        copy.count(n);
        joined = true;
        if n == c.len() {
            let _ = ring.put(c);
        } else {
            c.advance(n);
            recv.queue.push_front(c);
            break;
        }
    }
    (joined, 0)
}

/// What a ring read hands the session next: the joined bytes in the
/// connection's own buffer, the next chunk (behind bytes kept there, or on
/// its own as the receive's current chunk), or the receive's end; none
/// while nothing is there. (result, bytes, bytes lost)
fn next_delivery<'a>(
    recv: &'a mut RingRecv,
    buf: Option<&'a mut ReadBuffer>,
    ring: &'a mut BufRing,
    joined: bool,
    gather: bool,
    copy: Copied,
) -> Option<(i32, &'a mut [u8], usize)> {
    if joined {
        let buf = buf?;
        return Some((buf.filled_len() as i32, buf.filled_mut(), 0));
    }
    let Some(mut chunk) = recv.queue.pop_front() else {
        let end = recv.end?;
        return Some((end, buf.map_or(&mut [][..], |b| b.filled_mut()), 0));
    };
    let kept = buf.as_ref().is_some_and(|b| b.filled_len() > 0);
    if gather && !kept {
        // Give the relay every queued chunk that follows this one in
        // memory (a bundle's buffers, the next pieces of an incremental
        // buffer), up to a large read's size, for one send instead of one
        // per ring buffer.
        while let Some(next) = recv.queue.pop_front() {
            if let Err(next) = ring.join(&mut chunk, next) {
                recv.queue.push_front(next);
                break;
            }
        }
    }
    let res = chunk.len() as i32;
    Some(match buf.filter(|b| b.filled_len() > 0) {
        Some(buf) => {
            let (data, lost) = append_behind_kept(recv, buf, ring, chunk, copy);
            (res, data, lost)
        }
        None => (res, ring.bytes_mut(recv.current.insert(chunk)), 0),
    })
}

/// Bytes kept from earlier reads come first; what does not fit stays
/// queued for the next read. (the buffer's bytes, bytes lost)
fn append_behind_kept<'a>(
    recv: &mut RingRecv,
    buf: &'a mut ReadBuffer,
    ring: &mut BufRing,
    mut chunk: Chunk,
    copy: Copied,
) -> (&'a mut [u8], usize) {
    let n = chunk.len().min(buf.capacity() - buf.filled_len());
    if !buf.append(&ring.bytes(&chunk)[..n]) {
        // Cannot happen: `n` is the room left.
        recv.queue.push_front(chunk);
        return (&mut [][..], n);
    }
    copy.count(n);
    if n == chunk.len() {
        let _ = ring.put(chunk);
    } else {
        chunk.advance(n);
        recv.queue.push_front(chunk);
    }
    (buf.filled_mut(), 0)
}

impl Worker {
    /// A relay read of `side` in ring mode. False when the worker is not in
    /// ring mode (the caller reads as the other modes do).
    pub(super) fn ring_read(&mut self, sid: SessionId, side: Side) -> bool {
        if !self.buffers.is_ring() {
            return false;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return true;
        };
        if slot.leg.is_some() || slot.tls.is_some() {
            // A client leg (compression, TLS) copies every byte through its
            // transform anyway: its session reads as in heap mode. (Its
            // lease waited for any receive a park left armed to end:
            // `ring_lease_waits`.)
            debug_assert!(
                side == Side::Client
                    || slot
                        .backend
                        .and_then(|b| self.pool.get_mut(b))
                        .and_then(|b| b.io.recv.as_ref())
                        .is_none_or(|r| !r.armed),
                "a backend read beside an armed ring receive"
            );
            return false;
        }
        let backend = slot.backend;
        if side == Side::Backend && backend.is_some_and(|b| self.backend_tls_on(b)) {
            // So does backend TLS, on the backend's side.
            return false;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return true;
        };
        let io = match side {
            Side::Client => &mut slot.io,
            Side::Backend => match slot.backend.and_then(|b| self.pool.get_mut(b)) {
                Some(b) => &mut b.io,
                None => return true,
            },
        };
        let recv = io.recv.get_or_insert_with(RingRecv::default);
        recv.owner = Some((sid.index, sid.generation));
        // A new read: any cancel of the previous one has been delivered.
        recv.cancelling = false;
        let copy = Copied(&self.shared, self.id);
        let lost = put_back_current(recv, &mut io.buf, &mut self.buffers, side, copy);
        if lost > 0 {
            self.ring_lost(sid, side, "a backend's kept bytes", lost);
            // The read ends with the error ring_lost left on the receive.
            self.ring_deliver(sid, side);
            return true;
        }
        if recv.ready() {
            self.ring_deliver(sid, side);
        } else {
            recv.waiting = true;
            recv.shrink_idle();
            // Waiting for bytes: hold no buffer meanwhile.
            self.buffers.shed(&mut io.buf);
            self.ring_arm(sid, side);
        }
        true
    }

    /// Make sure something will complete the relay's read: the multishot
    /// receive, or, while the ring is empty, a plain read into the
    /// connection's own buffer. A receive that -ENOBUFS ended is re-armed
    /// only at the end of the batch, if a buffer is there for it
    /// ([`Self::ring_rearm_starved`]).
    fn ring_arm(&mut self, sid: SessionId, side: Side) {
        let Some(available) = self.buffers.buf_ring().map(|r| r.available()) else {
            return;
        };
        let Some(recv) = self.recv_of(sid, side) else {
            return;
        };
        if recv.armed {
            return;
        }
        if available == 0 {
            return self.ring_read_plain(sid, side);
        }
        if recv.starved {
            if !recv.rearm_queued {
                recv.rearm_queued = true;
                self.ring_starved.push_back((sid, side));
            }
            return;
        }
        self.ring_submit_recv(sid, side);
    }

    /// Arm the multishot receive of `side`.
    fn ring_submit_recv(&mut self, sid: SessionId, side: Side) {
        let Some(ring) = self.buffers.buf_ring() else {
            return;
        };
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let (io, token) = match side {
            Side::Client => (
                &mut slot.io,
                Token::new(OpTag::ClientRecv, sid.index, sid.generation),
            ),
            Side::Backend => match slot
                .backend
                .and_then(|b| self.pool.get_mut(b).map(|c| (b, c)))
            {
                Some((bid, b)) => (
                    &mut b.io,
                    Token::new(OpTag::BackendRecv, bid.index, bid.generation),
                ),
                None => return,
            },
        };
        let fd = io.fd();
        let Some(recv) = io.recv.as_mut() else { return };
        recv.armed = true;
        recv.starved = false;
        recv.took = false;
        recv.user_data = token.into();
        let sqe = ring.recv_multi_sqe(fd, token.into());
        io.op_started();
        self.submit(sqe);
    }

    /// The relay's read while the ring has no buffer for it: a plain read
    /// into the connection's own buffer, as in heap mode, so a connection
    /// whose peer waits on it makes progress even when other connections'
    /// queues hold every buffer.
    fn ring_read_plain(&mut self, sid: SessionId, side: Side) {
        if let Some(recv) = self.recv_of(sid, side) {
            recv.waiting = false;
            // This read takes what waits in the socket: the next receive is
            // armed as a first one.
            recv.starved = false;
        }
        self.metrics().heap_fallbacks_total.fetch_add(1, Relaxed);
        match side {
            Side::Client => self.client_read(sid, false),
            Side::Backend => self.relay_submit(sid, RelayIo::DownRead),
        }
    }

    /// End of a batch of completions: re-arm one receive that -ENOBUFS
    /// ended and whose relay waits (the first to starve); the others wait
    /// for the next batch, or, with the ring empty, read into their
    /// connection's own buffer.
    ///
    /// Why here, and why one: the kernel takes a buffer for a receive
    /// before it reads the socket (io_ring_buffer_select: head == tail is
    /// -ENOBUFS), and a multishot receive whose socket stays non-empty goes
    /// on taking buffers until the ring is empty (it retries while
    /// IORING_CQE_F_SOCK_NONEMPTY). A starved receive has bytes waiting, so
    /// of k re-armed together the first takes every buffer back and the
    /// others end with -ENOBUFS before reading a byte. Re-armed whenever a
    /// buffer was back, they did that again and again: in the tiny-ring
    /// test two -ENOBUFS per completion that carried bytes, most of them
    /// from receives that got none. The one re-armed completes at once
    /// (bytes, or -ENOBUFS if an armed receive beat it to the buffers),
    /// and that completion brings the next batch and the next re-arm. At
    /// the end of a batch every reaped completion is accounted for, so
    /// `available()` is what the kernel sees at the next submit (mid-batch
    /// it still counts buffers that later completions of the batch took).
    /// If the one re-armed has no bytes after all (its -ENOBUFS came as it
    /// was armed on a ring already empty), the others wait for the
    /// worker's next completion, a tick (100 ms) at worst.
    pub(super) fn ring_rearm_starved(&mut self) {
        let mut armed = false;
        let mut keep = Vec::new();
        // Bounded: a pass only arms, reads or delivers; a delivery may set
        // off a read that queues again, which the next pass (or batch) sees.
        for _ in 0..4 {
            if self.ring_starved.is_empty() {
                break;
            }
            let queued = std::mem::take(&mut self.ring_starved);
            for &(sid, side) in &queued {
                if self.ring_rearm_one(sid, side, &mut armed) {
                    keep.push((sid, side));
                }
            }
            self.drive();
        }
        self.ring_starved.extend(keep);
    }

    /// One starved receive at the end of a batch. True: it waits for the
    /// next batch (still queued).
    fn ring_rearm_one(&mut self, sid: SessionId, side: Side, armed: &mut bool) -> bool {
        let Some(available) = self.buffers.buf_ring().map(|r| r.available()) else {
            return false;
        };
        let closing = self.sessions.slot(sid).is_none_or(|s| s.closing);
        let Some(recv) = self.recv_of(sid, side) else {
            return false;
        };
        if !std::mem::take(&mut recv.rearm_queued) || closing {
            return false;
        }
        if recv.armed || !recv.waiting || recv.owner != Some((sid.index, sid.generation)) {
            return false;
        }
        if recv.ready() {
            // The relay cancelled the read meanwhile (`ring_cancel_backend`).
            self.ring_deliver(sid, side);
            return false;
        }
        if available == 0 {
            self.ring_read_plain(sid, side);
            return false;
        }
        if *armed {
            recv.rearm_queued = true;
            return true;
        }
        *armed = true;
        self.metrics().ring_rearms_total.fetch_add(1, Relaxed);
        self.ring_submit_recv(sid, side);
        false
    }

    /// Hand the next chunk (or the receive's end) to the session.
    fn ring_deliver(&mut self, sid: SessionId, side: Side) {
        if !self.buffers.is_ring() {
            return;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let SessionSlot {
            io: client_io,
            session,
            backend,
            ..
        } = slot;
        let io = match side {
            Side::Client => client_io,
            Side::Backend => match backend.and_then(|b| self.pool.get_mut(b)) {
                Some(b) => &mut b.io,
                None => return,
            },
        };
        let Some(recv) = io.recv.as_mut() else { return };
        let join = needs_join(recv, side);
        if join && (recv.queue.len() >= 2 || !recv.armed) {
            // The join below needs the connection's own buffer (a
            // client's: only a client's chunks are joined).
            self.buffers.ensure(&mut io.buf, Owner::Client);
        }
        let Some(ring) = self.buffers.buf_ring() else {
            return;
        };
        let copy = Copied(&self.shared, self.id);
        let mut joined = false;
        if join {
            if recv.queue.len() < 2 && recv.armed {
                // The continuation's CQE is on its way.
                recv.waiting = true;
                return;
            }
            let lost;
            (joined, lost) = join_tail(recv, io.buf.as_mut(), ring, copy);
            if lost > 0 {
                self.ring_lost(sid, side, "a client's joined command", lost);
                return self.ring_deliver(sid, side);
            }
        }
        recv.waiting = false;
        // A response is owed when the relay reads its backend other than
        // between commands: it forwards all it is handed.
        let gather = side == Side::Backend && !session.relay_between_commands();
        let Some((res, data, lost)) =
            next_delivery(recv, io.buf.as_mut(), ring, joined, gather, copy)
        else {
            return;
        };
        if lost > 0 {
            self.ring_lost(sid, side, "bytes behind kept ones", lost);
            return self.ring_deliver(sid, side);
        }
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        let backend = *backend;
        match side {
            Side::Client => session.on_client_read(completion(res), data, &ctx, &mut out),
            Side::Backend => session.on_backend_read(completion(res), data, &ctx, &mut out),
        }
        if side == Side::Backend && res == -libc::ECANCELED && session.in_statement_flow() {
            self.ring_watch_end_seen(backend);
        }
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
    }

    /// The relay stopped at a statement command, and this was the end of
    /// its own watch, cancelled at the stop: it has been seen. A session
    /// that keeps its connection (pinned, in a transaction) and goes on
    /// without the pool's exchange (COM_STMT_CLOSE) would otherwise read it
    /// again in its next relay as the server closing the connection.
    fn ring_watch_end_seen(&mut self, backend: Option<BackendId>) {
        if let Some(recv) = backend
            .and_then(|b| self.pool.get_mut(b))
            .and_then(|b| b.io.recv.as_mut())
            .filter(|r| !r.armed && r.queue.is_empty())
        {
            recv.end = None;
        }
    }

    /// A CQE of a client's multishot receive.
    pub(super) fn on_client_recv(&mut self, sid: SessionId, res: i32, flags: u32) {
        let wm = self.shared.metrics.worker(self.id);
        let (Some(ring), Some(slot)) = (self.buffers.buf_ring(), self.sessions.slot(sid)) else {
            return;
        };
        let Some(recv) = slot.io.recv.as_mut() else {
            return;
        };
        on_cqe(recv, ring, res, flags, wm);
        let ended = !recv.armed;
        if slot.closing {
            recv.drain_into(ring);
        }
        if ended {
            slot.io.op_done();
        }
        if slot.closing {
            return self.try_finish_session(sid);
        }
        self.ring_after_cqe(sid, Side::Client);
    }

    /// A CQE of a backend's multishot receive.
    pub(super) fn on_backend_recv(&mut self, bid: BackendId, res: i32, flags: u32) {
        let wm = self.shared.metrics.worker(self.id);
        let (Some(ring), Some(b)) = (self.buffers.buf_ring(), self.pool.get_mut(bid)) else {
            return;
        };
        let Some(recv) = b.io.recv.as_mut() else {
            return;
        };
        on_cqe(recv, ring, res, flags, wm);
        if recv.cancelling && !recv.armed {
            recv.cancelling = false;
            if recv.end.is_none() {
                // Ended before the relay's cancel reached it (-ENOBUFS):
                // the read is over all the same, as the cancel's end.
                tracing::debug!(
                    worker = self.id,
                    backend = bid.index,
                    res,
                    "ring receive ended before the relay's cancel reached it; taken as cancelled"
                );
                recv.end = Some(-libc::ECANCELED);
            }
        }
        let owner = recv
            .owner
            .map(|(index, generation)| SessionId { index, generation });
        settle_give_back_end(&mut b.io, self.id, bid);
        let Some(recv) = b.io.recv.as_mut() else {
            return;
        };
        let release = !recv.armed && recv.release_pending;
        if !recv.armed {
            b.io.op_done();
        }
        let session = owner.and_then(|sid| {
            self.sessions
                .slot(sid)
                .filter(|s| !s.closing && s.backend == Some(bid))
                .map(|_| sid)
        });
        if release {
            self.ring_finish_release(bid);
            return self.try_finish_backend(Some(bid));
        }
        match session {
            Some(sid) => self.ring_after_cqe(sid, Side::Backend),
            None => self.ring_idle_recv(bid),
        }
        self.try_finish_backend(Some(bid));
    }

    /// A CQE of a backend receive that no session reads: one a park left
    /// armed (`ring_give_back`), on a connection idle in the pool or just
    /// leased (its session has not read yet), or a receive of a connection
    /// being closed.
    fn ring_idle_recv(&mut self, bid: BackendId) {
        let (Some(ring), Some(b)) = (self.buffers.buf_ring(), self.pool.get_mut(bid)) else {
            return;
        };
        let Some(recv) = b.io.recv.as_mut() else {
            return;
        };
        if b.conn.is_leased() {
            // Leased, and its session's first read has not come yet: that
            // read takes what is queued (bytes, or the end), as any relay
            // read of an armed receive would.
            return;
        }
        let spoke = recv.ready();
        recv.drain_into(ring);
        if !b.conn.is_idle() {
            // Nobody reads this backend any more: it is being closed.
            return;
        }
        if !spoke {
            if recv.armed {
                return;
            }
            // -ENOBUFS ended the receive with no byte delivered: the socket
            // woke it, or the ring was empty as it retried. As at a release
            // whose receive ends so before its cancel, a peek decides: with
            // nothing waiting the connection
            // is kept, and its next lease arms a new receive.
            let done = recv.quiescent() && recv.current.is_none();
            if b.io.idle_peer_alive() {
                if done {
                    b.io.recv = None;
                }
                return;
            }
        }
        // Bytes, an EOF or an error on an idle connection: the server spoke
        // or closed it (wait_timeout, KILL, shutdown). Discarded as the
        // close watch does, and its last session hears of it.
        let mut events = Vec::new();
        self.pool.on_watch(bid, Completion::Done(0), &mut events);
        self.pool_q.extend(events);
    }

    /// The pool's own operation `op` on backend `bid`. In ring mode, while
    /// a receive a park left armed names the connection (or is being
    /// cancelled for an earlier operation), the receive would take the
    /// server's answer: it is cancelled and `op` runs at its last CQE
    /// (None). Otherwise `op` back, to run now.
    pub(super) fn ring_pool_op(&mut self, bid: BackendId, op: BackendOp) -> Option<BackendOp> {
        if !self.buffers.is_ring() || matches!(op, BackendOp::Close | BackendOp::Connect) {
            return Some(op);
        }
        let key = (bid.index, bid.generation);
        if let Some(PendingRelease::Ops(ops)) = self.ring_pending.get_mut(&key) {
            ops.push(op);
            return None;
        }
        if matches!(op, BackendOp::Clear) || !self.ring_cancel_idle_recv(bid) {
            return Some(op);
        }
        self.ring_pending.insert(key, PendingRelease::Ops(vec![op]));
        None
    }

    /// A lease of backend `bid` to `session`. True: it waits, because a
    /// receive a park left armed names the connection and the session reads
    /// its backend into the connection's own buffer (a client leg or TLS
    /// on either side), where that receive would take the answer; it is
    /// cancelled and the lease is handed over at its last CQE.
    pub(super) fn ring_lease_waits(&mut self, session: SessionId, bid: BackendId) -> bool {
        if !self.buffers.is_ring() {
            return false;
        }
        let plain = self
            .sessions
            .slot(session)
            .is_some_and(|s| s.leg.is_some() || s.tls.is_some() || s.session.has_client_leg());
        if !plain && !self.backend_tls_on(bid) {
            return false;
        }
        if !self.ring_cancel_idle_recv(bid) {
            return false;
        }
        self.ring_pending
            .insert((bid.index, bid.generation), PendingRelease::Lease(session));
        true
    }

    /// Cancel the receive a park left armed on `bid`, if any (true); what
    /// to do at its last CQE is the caller's `ring_pending` entry.
    fn ring_cancel_idle_recv(&mut self, bid: BackendId) -> bool {
        let Some(recv) = self
            .pool
            .get_mut(bid)
            .and_then(|b| b.io.recv.as_mut())
            .filter(|r| r.armed && r.owner.is_none() && !r.release_pending)
        else {
            return false;
        };
        recv.release_pending = true;
        let target = recv.user_data;
        self.metrics()
            .ring_idle_recv_cancels_total
            .fetch_add(1, Relaxed);
        let token = Token::new(OpTag::BackendRecvCancel, bid.index, bid.generation);
        self.submit(ops::cancel_user_data(target, token));
        true
    }

    /// After a CQE: deliver to a waiting relay, or re-arm a receive that
    /// ENOBUFS ended while the relay waits.
    fn ring_after_cqe(&mut self, sid: SessionId, side: Side) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let recv = match side {
            Side::Client => slot.io.recv.as_ref(),
            Side::Backend => slot
                .backend
                .and_then(|b| self.pool.get_mut(b))
                .and_then(|b| b.io.recv.as_ref()),
        };
        let Some(recv) = recv else { return };
        if !recv.waiting {
            return;
        }
        if recv.ready() {
            self.ring_deliver(sid, side);
        } else if !recv.armed {
            self.ring_arm(sid, side);
        }
    }

    /// The relay's write source: the chunk it was handed, if any (else the
    /// connection's own buffer). Builds the send and marks it in flight.
    pub(super) fn ring_send_sqe(
        &mut self,
        sid: SessionId,
        io: RelayIo,
        fd: SockRef,
        user_data: u64,
    ) -> Option<Sqe> {
        let ring = self.buffers.buf_ring()?;
        let slot = self.sessions.slot(sid)?;
        let (recv, pos, end) = match io {
            RelayIo::UpWrite { pos, end } => (slot.io.recv.as_mut()?, pos, end),
            RelayIo::DownWrite { pos, end } => {
                let b = slot.backend.and_then(|b| self.pool.get_mut(b))?;
                (b.io.recv.as_mut()?, pos, end)
            }
            RelayIo::DownRead => return None,
        };
        let chunk = recv.current.as_mut()?;
        Some(ring.send_sqe(chunk, fd, pos, end, user_data))
    }

    /// A relay write completed: clear the in-flight mark of the chunk it
    /// sent. False when it was sent from the connection's own buffer.
    pub(super) fn ring_write_done(&mut self, sid: SessionId, side: Side) -> bool {
        let Some(recv) = self.recv_of(sid, side) else {
            return false;
        };
        match recv.current.as_mut().filter(|c| c.in_flight()) {
            Some(c) => {
                c.complete_write();
                true
            }
            None => false,
        }
    }

    /// The relay wrote `..end` of its chunk: give it back to the ring. Bytes
    /// behind `end` (a COM_CHANGE_USER the relay stopped at) are kept in the
    /// connection's own buffer for the session, as the other modes keep them.
    pub(super) fn ring_forwarded(&mut self, sid: SessionId, side: Side, end: usize) {
        if !self.buffers.is_ring() {
            return;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let io = match side {
            Side::Client => &mut slot.io,
            Side::Backend => match slot.backend.and_then(|b| self.pool.get_mut(b)) {
                Some(b) => &mut b.io,
                None => return,
            },
        };
        let Some(chunk) = io.recv.as_mut().and_then(|r| r.current.take()) else {
            return;
        };
        let mut lost = 0;
        // A backend's chunk is forwarded whole: `end` is all the relay was
        // handed, less the session-state blocks it stripped in place; an
        // unsolicited ERR with bytes behind it ends the relay.
        if chunk.len() > end && side == Side::Client {
            // They fit: only the client's side gets here, and
            // a client's chunk is never joined, so it is one ring buffer of
            // --read-buffer-size at most, the connection buffer's size; the
            // relay wrote it from the chunk, handed over to an empty
            // buffer, which the write's completion cleared.
            let owner = match side {
                Side::Client => Owner::Client,
                Side::Backend => Owner::Backend,
            };
            let buf = self.buffers.ensure(&mut io.buf, owner);
            if let Some(ring) = self.buffers.buf_ring() {
                if buf.append(&ring.bytes(&chunk)[end..]) {
                    copied(&self.shared, self.id, chunk.len() - end);
                } else {
                    lost = chunk.len() - end;
                }
            }
        }
        let Some(ring) = self.buffers.buf_ring() else {
            return;
        };
        if let Err(c) = ring.put(chunk) {
            debug_assert!(false, "forwarded chunk still in flight");
            if let Some(r) = io.recv.as_mut() {
                r.current = Some(c);
            }
        }
        if lost > 0 {
            self.ring_lost(sid, side, "bytes behind a forwarded command", lost);
        }
    }

    /// Keep the client's current chunk in its own buffer (a KILL is about
    /// to be rewritten there) and give the chunk back.
    pub(super) fn ring_stage_client(&mut self, sid: SessionId) {
        if !self.buffers.is_ring() {
            return;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let Some(chunk) = slot.io.recv.as_mut().and_then(|r| r.current.take()) else {
            return;
        };
        // It fits: a client's chunk is never joined (one ring buffer of
        // --read-buffer-size at most, the connection buffer's size), and a
        // current chunk was handed over only to an empty buffer.
        let buf = self.buffers.ensure(&mut slot.io.buf, Owner::Client);
        let Some(ring) = self.buffers.buf_ring() else {
            return;
        };
        let kept = buf.append(ring.bytes(&chunk));
        let n = chunk.len();
        let _ = ring.put(chunk);
        if kept {
            copied(&self.shared, self.id, n);
        } else {
            self.ring_lost(sid, Side::Client, "a client's staged command", n);
        }
    }

    /// Bytes of a ring chunk that had to be kept in the connection's own
    /// buffer did not fit it (`ReadBuffer::append` copied nothing). Each
    /// site says why that cannot happen; if it does anyway, the session may
    /// not go on with bytes missing from the MySQL stream (rule: nothing
    /// lost). Debug builds stop here; release builds log one error line
    /// and end the session: the side's receive drops what it queued and
    /// ends with -EIO, so no byte behind the gap is handed over, and both
    /// sockets are shut: the backend's at once (nothing more reaches the
    /// server; the connection is discarded), the client's too, or, for a
    /// direct descriptor, by an IORING_OP_SHUTDOWN (the session's own
    /// packets, whole ones, may still go out before it lands).
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
        if let Some(b) = backend.and_then(|b| self.pool.get_mut(b)) {
            b.io.shutdown();
        }
        let Some(recv) = self.recv_of(sid, side) else {
            return;
        };
        recv.end = Some(-libc::EIO);
        let queued = std::mem::take(&mut recv.queue);
        if let Some(ring) = self.buffers.buf_ring() {
            for c in queued {
                let _ = ring.put(c);
            }
        }
    }

    /// Transaction pooling hands a client read to the session again once
    /// it has a connection: in ring mode its bytes are the current chunk
    /// (false: none, they are in the connection's own buffer).
    pub(super) fn ring_redeliver(&mut self, sid: SessionId, res: Completion) -> bool {
        let (Some(ring), Some(slot)) = (self.buffers.buf_ring(), self.sessions.slot(sid)) else {
            return false;
        };
        let Some(chunk) = slot.io.recv.as_ref().and_then(|r| r.current.as_ref()) else {
            return false;
        };
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        slot.session
            .on_client_read(res, ring.bytes(chunk), &ctx, &mut out);
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
        true
    }

    /// The client's chunk was consumed (ClearBuffer).
    pub(super) fn ring_drop_client_chunk(&mut self, sid: SessionId) {
        self.ring_forwarded(sid, Side::Client, usize::MAX);
    }

    fn recv_of(&mut self, sid: SessionId, side: Side) -> Option<&mut RingRecv> {
        let slot = self.sessions.slot(sid)?;
        match side {
            Side::Client => slot.io.recv.as_mut(),
            Side::Backend => {
                let b = slot.backend.and_then(|b| self.pool.get_mut(b))?;
                b.io.recv.as_mut()
            }
        }
    }

    /// The multishot receive on `sid`'s backend, if armed (its user_data,
    /// for the clean end's cancel).
    pub(super) fn ring_backend_armed(&mut self, sid: SessionId) -> Option<u64> {
        self.recv_of(sid, Side::Backend)
            .filter(|r| r.armed)
            .map(|r| r.user_data)
    }

    /// The relay cancels its backend read: the armed receive's user_data
    /// (the cancel's target), marked so that any end of that receive is
    /// the read's end (`RingRecv::cancelling`). None: not armed.
    pub(super) fn ring_cancel_backend(&mut self, sid: SessionId) -> Option<u64> {
        let recv = self.recv_of(sid, Side::Backend)?;
        if recv.armed {
            recv.cancelling = true;
            return Some(recv.user_data);
        }
        if recv.rearm_queued && recv.waiting && !recv.ready() {
            // The read waits for its re-arm at the end of the batch: no
            // operation names it, so nothing would end it. It ends as the
            // cancel's end; the re-arm pass delivers it.
            recv.end = Some(-libc::ECANCELED);
        }
        None
    }

    /// The session gives its backend back (`kind`). In ring mode it is
    /// reusable only if nothing is left of the relay's receive: no bytes
    /// queued, and no receive armed. A clean end usually finds the receive
    /// still armed (it stays armed while the answer is written): it is
    /// cancelled, and `kind` is carried out at its last CQE (`None` here),
    /// unless `kind` is a park that keeps the connection as it is, which
    /// leaves it armed for the pool. Otherwise: whether the connection is
    /// still clean.
    pub(super) fn ring_give_back(
        &mut self,
        bid: BackendId,
        clean: bool,
        kind: PendingRelease,
    ) -> Option<bool> {
        if self.buffers.is_ring() {
            if let Some(b) = self.pool.get_mut(bid) {
                // A TLS session's relay reads its backend into the
                // connection's own buffer (not the ring): an idle backend
                // gives it back, as the ring's readers hold none.
                self.buffers.shed(&mut b.io.buf);
            }
        }
        let (Some(ring), Some(b)) = (self.buffers.buf_ring(), self.pool.get_mut(bid)) else {
            return Some(clean);
        };
        let Some(recv) = b.io.recv.as_mut() else {
            return Some(clean);
        };
        let leftover = !recv.queue.is_empty() || recv.end.is_some_and(|e| e != -libc::ECANCELED);
        recv.owner = None;
        recv.waiting = false;
        recv.cancelling = false;
        recv.rearm_queued = false;
        recv.drain_into(ring);
        let kept = matches!(
            kind,
            PendingRelease::Park {
                reset: false,
                ask: None,
                ..
            }
        );
        if recv.armed && clean && !leftover && kept && recv.end.is_none() && recv.current.is_none()
        {
            // Transaction pooling parks the session and the connection goes
            // back to the idle list as it is: its receive stays armed, the
            // pool's from here on, and the next lease's relay takes it over
            // without arming another (the cancel here and the re-arm at the
            // lease were two of ring mode's four SQEs per query). While the
            // connection is idle the receive is its close watch: whatever it
            // completes with (bytes, EOF, an error) means the server spoke
            // or closed (`ring_idle_recv`). The pool's own exchanges on it
            // cancel it first (`ring_pool_op`), as does a lease to a session
            // that does not read through the ring (`ring_lease_waits`).
            return Some(true);
        }
        if recv.armed && clean && !leftover {
            recv.release_pending = true;
            self.ring_pending.insert((bid.index, bid.generation), kind);
            let token = Token::new(OpTag::BackendRecvCancel, bid.index, bid.generation);
            let target = recv.user_data;
            self.submit(ops::cancel_user_data(target, token));
            return None;
        }
        let armed = recv.armed;
        if recv.quiescent() && recv.current.is_none() {
            b.io.recv = None;
        }
        Some(clean && !leftover && !armed)
    }

    /// COM_CHANGE_USER resets the session's backend in place (the pool's
    /// own reads follow, so no receive of the relay may stay armed). True:
    /// reset now. False: the armed receive is being cancelled, and the
    /// reset happens at its last CQE.
    pub(super) fn ring_relet_backend(&mut self, bid: BackendId) -> bool {
        self.ring_own_backend(bid, PendingRelease::Relet)
    }

    /// The pool's own exchange on a session's backend (`kind`: a relet or a
    /// statement), like [`Self::ring_relet_backend`].
    pub(super) fn ring_own_backend(&mut self, bid: BackendId, kind: PendingRelease) -> bool {
        match self.ring_give_back(bid, true, kind) {
            None => false,
            Some(clean) => {
                if !clean {
                    // The server spoke between commands: the reset fails on
                    // a shut socket, and the pool's failure path answers
                    // the session.
                    if let Some(b) = self.pool.get_mut(bid) {
                        b.io.shutdown();
                    }
                }
                true
            }
        }
    }

    /// The cancel of a released backend's receive completed. Anything but
    /// success (or "already done") leaves the receive armed: shut the
    /// backend down so it ends, and the release becomes a discard.
    pub(super) fn on_backend_recv_cancel(&mut self, bid: BackendId, res: i32) {
        if res == 0 || res == -libc::ENOENT {
            return;
        }
        if let Some(b) = self.pool.get_mut(bid) {
            if b.io.recv.as_ref().is_some_and(|r| r.armed) {
                b.io.shutdown();
            }
        }
    }

    /// The last CQE of a receive cancelled at a clean release: hand the
    /// backend to the pool, reusable only if the cancel ended it (no bytes
    /// and no EOF beat the cancel).
    fn ring_finish_release(&mut self, bid: BackendId) {
        let (Some(ring), Some(b)) = (self.buffers.buf_ring(), self.pool.get_mut(bid)) else {
            return;
        };
        let Some(recv) = b.io.recv.as_mut() else {
            return;
        };
        let clean = recv.queue.is_empty() && recv.end == Some(-libc::ECANCELED);
        recv.release_pending = false;
        recv.drain_into(ring);
        if recv.current.is_none() {
            b.io.recv = None;
        }
        let kind = self
            .ring_pending
            .remove(&(bid.index, bid.generation))
            .unwrap_or(PendingRelease::Release);
        self.ring_carry_out_pending(bid, kind, clean);
    }

    /// What the give-back asked for, now that the receive has ended. Not
    /// clean, the server spoke or closed while the connection was idle:
    /// what runs on the connection next fails on a shut socket, and the
    /// pool's failure path tells the session. A flat match: one arm per
    /// pending give-back.
    fn ring_carry_out_pending(&mut self, bid: BackendId, kind: PendingRelease, clean: bool) {
        let now = self.now;
        let mut events = Vec::new();
        match kind {
            PendingRelease::Ops(ops) => return self.ring_run_pending_ops(bid, ops, clean),
            PendingRelease::Lease(session) => {
                // The session's relay finds the socket shut.
                self.shut_backend_unless(bid, clean);
                events.push(PoolEvent::Leased {
                    session,
                    backend: bid,
                });
            }
            PendingRelease::Release => self.pool.release(bid, clean, now, &mut events),
            PendingRelease::Relet => {
                self.shut_backend_unless(bid, clean);
                self.pool.relet(bid, now, &mut events);
            }
            PendingRelease::Statement(ask) => {
                self.shut_backend_unless(bid, clean);
                let StatementAsk {
                    key,
                    want_response,
                    types,
                } = *ask;
                self.pool
                    .statement(bid, key, want_response, types, now, &mut events);
            }
            PendingRelease::Park {
                kept,
                reset,
                ask: Some(session),
            } if clean => self
                .pool
                .park_asking(bid, session, kept, reset, now, &mut events),
            PendingRelease::Park { reset: true, .. } if clean => {
                self.pool.release(bid, true, now, &mut events)
            }
            PendingRelease::Park { kept, .. } if clean => {
                self.pool.release_kept(bid, kept, now, &mut events)
            }
            PendingRelease::Park { ask, .. } => {
                if let Some(session) = ask {
                    events.push(PoolEvent::LastInsertId {
                        session,
                        value: None,
                    });
                }
                self.pool.release(bid, false, now, &mut events)
            }
        }
        self.pool_q.extend(events);
    }

    /// The pool's own exchange on a connection whose receive a park left
    /// armed, in order (`ring_pool_op`).
    fn ring_run_pending_ops(&mut self, bid: BackendId, ops: Vec<BackendOp>, clean: bool) {
        let Some(b) = self.pool.get_mut(bid) else {
            return;
        };
        if b.conn.is_closed() {
            return;
        }
        self.shut_backend_unless(bid, clean);
        for op in ops {
            self.backend_op(bid, op);
        }
    }

    fn shut_backend_unless(&mut self, bid: BackendId, clean: bool) {
        if clean {
            return;
        }
        if let Some(b) = self.pool.get_mut(bid) {
            b.io.shutdown();
        }
    }
}

//! The multishot receive of a socket in ring mode: arming it, re-arming
//! one that -ENOBUFS starved, and queueing what its CQEs bring on the
//! socket's [`RingRecv`].

use std::sync::atomic::Ordering::Relaxed;

use io_uring::cqueue;

use super::give_back::settle_give_back_end;
use super::*;
use uring::buffers::provided::{BufRing, RingRecv};

/// Queue what a receive CQE brought; ENOBUFS is counted and is no end (the
/// receive is starved: its re-arm waits for a buffer).
fn on_cqe(
    recv: &mut RingRecv<RecvEnd>,
    ring: &mut BufRing,
    res: i32,
    flags: u32,
    wm: &WorkerMetrics,
) {
    if !cqueue::more(flags) {
        recv.armed = false;
    }
    if res > 0 {
        recv.took = true;
        if !ring.take(res, flags, &mut recv.queue) {
            // A receive without a buffer: nothing we can deliver.
            recv.end = Some(RecvEnd::Fault(Fault::BytesLost));
        }
    } else if res == -libc::ENOBUFS {
        wm.ring_enobufs_total.fetch_add(1, Relaxed);
        if !recv.took {
            // Armed for nothing: the busy loop's mark.
            wm.ring_enobufs_empty_total.fetch_add(1, Relaxed);
        }
        recv.starved = true;
    } else if recv.end.is_none() {
        recv.end = Some(RecvEnd::of(completion(res)));
    }
}

impl Worker {
    /// Make sure something will complete the relay's read: the multishot
    /// receive, or, while the ring is empty, a plain read into the
    /// connection's own buffer. A receive that -ENOBUFS ended is re-armed
    /// only at the end of the batch, if a buffer is there for it
    /// ([`Self::ring_rearm_starved`]).
    pub(super) fn ring_arm(&mut self, sid: SessionId, side: Side) {
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
                .and_then(|b| self.backends.get_mut(b).map(|c| (b, c)))
            {
                Some((bid, b)) => (b, Token::new(OpTag::BackendRecv, bid.index, bid.generation)),
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
    pub(super) fn ring_read_plain(&mut self, sid: SessionId, side: Side) {
        if let Some(recv) = self.recv_of(sid, side) {
            recv.waiting = false;
            // This read takes what waits in the socket: the next receive is
            // armed as a first one.
            recv.starved = false;
        }
        self.metrics().heap_fallbacks_total.fetch_add(1, Relaxed);
        // Heap mode's read: no layer (else the path is not the ring's), and
        // no poll (fixed mode's alone).
        match side {
            Side::Client => self.own_read_client(sid, false, false),
            Side::Backend => self.own_read_backend(sid, false),
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
    pub(in crate::proxy::worker) fn ring_rearm_starved(&mut self) {
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

    /// A CQE of a client's multishot receive.
    pub(in crate::proxy::worker) fn on_client_recv(
        &mut self,
        sid: SessionId,
        res: i32,
        flags: u32,
    ) {
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
    pub(in crate::proxy::worker) fn on_backend_recv(
        &mut self,
        bid: BackendId,
        res: i32,
        flags: u32,
    ) {
        let wm = self.shared.metrics.worker(self.id);
        let (Some(ring), Some(b)) = (self.buffers.buf_ring(), self.backends.get_mut(bid)) else {
            return;
        };
        let Some(recv) = b.recv.as_mut() else {
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
                recv.end = Some(RecvEnd::Cancelled);
            }
        }
        let owner = recv
            .owner
            .map(|(index, generation)| SessionId { index, generation });
        settle_give_back_end(b, self.id, bid);
        let Some(recv) = b.recv.as_mut() else {
            return;
        };
        let release = !recv.armed && recv.release_pending;
        if !recv.armed {
            b.op_done();
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
        let Some(conn) = self.pool.conn(bid) else {
            return;
        };
        let (leased, idle) = (conn.is_leased(), conn.is_idle());
        let (Some(ring), Some(b)) = (self.buffers.buf_ring(), self.backends.get_mut(bid)) else {
            return;
        };
        let Some(recv) = b.recv.as_mut() else {
            return;
        };
        if leased {
            // Leased, and its session's first read has not come yet: that
            // read takes what is queued (bytes, or the end), as any relay
            // read of an armed receive would.
            return;
        }
        let spoke = recv.ready();
        recv.drain_into(ring);
        if !idle {
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
            if b.idle_peer_alive() {
                if done {
                    b.recv = None;
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
                .and_then(|b| self.backends.get_mut(b))
                .and_then(|b| b.recv.as_ref()),
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

    /// The multishot receive on `sid`'s backend, if armed (its user_data,
    /// for the clean end's cancel).
    pub(in crate::proxy::worker) fn ring_backend_armed(&mut self, sid: SessionId) -> Option<u64> {
        self.recv_of(sid, Side::Backend)
            .filter(|r| r.armed)
            .map(|r| r.user_data)
    }

    /// The relay cancels its backend read: the armed receive's user_data
    /// (the cancel's target), marked so that any end of that receive is
    /// the read's end (`RingRecv::cancelling`). None: not armed.
    pub(in crate::proxy::worker) fn ring_cancel_backend(&mut self, sid: SessionId) -> Option<u64> {
        let recv = self.recv_of(sid, Side::Backend)?;
        if recv.armed {
            recv.cancelling = true;
            return Some(recv.user_data);
        }
        if recv.rearm_queued && recv.waiting && !recv.ready() {
            // The read waits for its re-arm at the end of the batch: no
            // operation names it, so nothing would end it. It ends as the
            // cancel's end; the re-arm pass delivers it.
            recv.end = Some(RecvEnd::Cancelled);
        }
        None
    }
}

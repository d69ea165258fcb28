//! A session gives its backend back while the relay's receive may still be
//! armed: the receive is cancelled (or, at a park that keeps the
//! connection as it is, left armed for the pool). What the give-back asked
//! for waits in the pool (`Pool::defer_give_back`) and is carried out at
//! the receive's last CQE (`Pool::finish_give_back`); the driver keeps only
//! the pool's own operations that wait for that end, and shuts the socket
//! when the pool says so.

use std::sync::atomic::Ordering::Relaxed;

use super::*;
use machines::pool::{self, GiveBack, PendingGiveBack, ReceiveEnd, ReceiveLeft};

/// How a backend's receive that a give-back cancels has ended. Bytes that
/// beat the cancel: the server is talking between commands, so the
/// connection is not reusable. Ended by -ENOBUFS before the cancel reached
/// it, with no byte in userspace: the kernel takes a buffer before it reads
/// the socket, so that says only that the receive was issued on an empty
/// ring, or that the socket woke it (bytes or an EOF waiting there). A peek
/// tells which: with nothing waiting the connection is as clean as the
/// cancel would have left it, and taking this end for a dirty one cost a
/// backend connection.
pub(super) fn settle_give_back_end(io: &mut ConnIo, worker: usize, bid: BackendId) {
    let Some(recv) = io.recv.as_mut() else {
        return;
    };
    if recv.release_pending && !recv.queue.is_empty() {
        recv.end = Some(RecvEnd::Fault(Fault::Unsolicited));
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
        recv.end = Some(match clean {
            true => RecvEnd::Cancelled,
            false => RecvEnd::Fault(Fault::Unsolicited),
        });
    }
}

impl Worker {
    /// The pool's own operation `op` on backend `bid`. In ring mode, while
    /// a receive a park left armed names the connection (or is being
    /// cancelled for an earlier operation), the receive would take the
    /// server's answer: it is cancelled and `op` runs at its last CQE
    /// (None). Otherwise `op` back, to run now.
    pub(in crate::proxy::worker) fn ring_pool_op(
        &mut self,
        bid: BackendId,
        op: BackendOp,
    ) -> Option<BackendOp> {
        if !self.buffers.is_ring() || matches!(op, BackendOp::Close | BackendOp::Connect) {
            return Some(op);
        }
        let key = (bid.index, bid.generation);
        if let Some(ops) = self.ring_pending_ops.get_mut(&key) {
            ops.push(op);
            return None;
        }
        if matches!(op, BackendOp::Clear) || !self.ring_cancel_idle_recv(bid) {
            return Some(op);
        }
        self.ring_pending_ops.insert(key, vec![op]);
        None
    }

    /// A lease of backend `bid` to `session`. True: it waits, because a
    /// receive a park left armed names the connection and the session reads
    /// its backend into the connection's own buffer (a client leg or TLS
    /// on either side), where that receive would take the answer; it is
    /// cancelled and the lease is handed over at its last CQE.
    pub(in crate::proxy::worker) fn ring_lease_waits(
        &mut self,
        session: SessionId,
        bid: BackendId,
    ) -> bool {
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
        self.pool
            .defer_give_back(bid, PendingGiveBack::Lease(session));
        true
    }

    /// Cancel the receive a park left armed on `bid`, if any (true); what
    /// to do at its last CQE is the caller's (held by the pool, or in
    /// `ring_pending_ops`).
    pub(super) fn ring_cancel_idle_recv(&mut self, bid: BackendId) -> bool {
        let Some(recv) = self
            .backends
            .get_mut(bid)
            .and_then(|b| b.recv.as_mut())
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

    /// The session gives its backend back (`keeps_as_is`: a park that keeps
    /// the connection as it is). In ring mode it is reusable only if
    /// nothing is left of the relay's receive: no bytes queued, and no
    /// receive armed. A clean end usually finds the receive still armed (it
    /// stays armed while the answer is written): it is cancelled, and the
    /// give-back is carried out at its last CQE (`None` here: the caller
    /// has the pool hold it), unless it is a park that keeps the connection
    /// as it is, which leaves the receive armed for the pool. Otherwise:
    /// whether the connection is still clean. The decision is the pool's
    /// (`pool::give_back`), from what is left of the receive.
    pub(in crate::proxy::worker) fn ring_give_back(
        &mut self,
        bid: BackendId,
        clean: bool,
        keeps_as_is: bool,
    ) -> Option<bool> {
        if self.buffers.is_ring() {
            if let Some(b) = self.backends.get_mut(bid) {
                // A TLS session's relay reads its backend into the
                // connection's own buffer (not the ring): an idle backend
                // gives it back, as the ring's readers hold none.
                self.buffers.shed(&mut b.buf);
            }
        }
        let (Some(ring), Some(b)) = (self.buffers.buf_ring(), self.backends.get_mut(bid)) else {
            return Some(clean);
        };
        let Some(recv) = b.recv.as_mut() else {
            return Some(clean);
        };
        let bytes_queued = !recv.queue.is_empty();
        recv.owner = None;
        recv.waiting = false;
        recv.cancelling = false;
        recv.rearm_queued = false;
        recv.drain_into(ring);
        let left = ReceiveLeft {
            armed: recv.armed,
            bytes_queued,
            end: ReceiveEnd::of(recv.end.map(RecvEnd::completion)),
            chunk_in_flight: recv.current.is_some(),
        };
        let clean = match pool::give_back(clean, keeps_as_is, left) {
            GiveBack::KeepArmed => {
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
            GiveBack::CancelFirst => {
                recv.release_pending = true;
                // The give-back replaces whatever waited for that end.
                self.ring_pending_ops.remove(&(bid.index, bid.generation));
                let token = Token::new(OpTag::BackendRecvCancel, bid.index, bid.generation);
                let target = recv.user_data;
                self.submit(ops::cancel_user_data(target, token));
                return None;
            }
            GiveBack::Now { clean } => clean,
        };
        if recv.quiescent() && recv.current.is_none() {
            b.recv = None;
        }
        Some(clean)
    }

    /// The cancel of a released backend's receive completed. Anything but
    /// success (or "already done") leaves the receive armed: shut the
    /// backend down so it ends, and the release becomes a discard.
    pub(in crate::proxy::worker) fn on_backend_recv_cancel(&mut self, bid: BackendId, res: i32) {
        if res == 0 || res == -libc::ENOENT {
            return;
        }
        if let Some(b) = self.backends.get_mut(bid) {
            if b.recv.as_ref().is_some_and(|r| r.armed) {
                b.shutdown();
            }
        }
    }

    /// The last CQE of a receive cancelled at a clean release: the pool's
    /// own operations that waited for it run now, or the pool carries out
    /// what the give-back asked for; reusable only if the cancel ended the
    /// receive (no bytes and no EOF beat the cancel).
    pub(super) fn ring_finish_release(&mut self, bid: BackendId) {
        let (Some(ring), Some(b)) = (self.buffers.buf_ring(), self.backends.get_mut(bid)) else {
            return;
        };
        let Some(recv) = b.recv.as_mut() else {
            return;
        };
        let end = ReceiveEnd::of(recv.end.map(RecvEnd::completion));
        let clean = pool::clean_after_cancel(!recv.queue.is_empty(), end);
        recv.release_pending = false;
        recv.drain_into(ring);
        if recv.current.is_none() {
            b.recv = None;
        }
        if let Some(ops) = self.ring_pending_ops.remove(&(bid.index, bid.generation)) {
            return self.ring_run_pending_ops(bid, ops, clean);
        }
        let mut events = Vec::new();
        if self
            .pool
            .finish_give_back(bid, clean, self.now, &mut events)
        {
            // The server spoke or closed while the connection was idle.
            self.shut_backend(bid);
        }
        self.pool_q.extend(events);
    }

    /// The pool's own exchange on a connection whose receive a park left
    /// armed, in order (`ring_pool_op`).
    fn ring_run_pending_ops(&mut self, bid: BackendId, ops: Vec<BackendOp>, clean: bool) {
        if self.backends.get(bid).is_none() || self.backend_closed(bid) {
            return;
        }
        if !clean {
            self.shut_backend(bid);
        }
        for op in ops {
            self.backend_op(bid, op);
        }
    }

    fn shut_backend(&mut self, bid: BackendId) {
        if let Some(b) = self.backends.get_mut(bid) {
            b.shutdown();
        }
    }
}

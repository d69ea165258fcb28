//! Fixed mode: an idle backend connection holds no slot either (issue 13
//! item 2, the backend half; `idle_io.rs` is the client's).
//!
//! Between commands the relay keeps its read of the backend armed
//! (`Down::Watching` in relay.rs), so that a server closing an idle
//! connection (wait_timeout, KILL, shutdown), or its unsolicited ERR, is
//! noticed at once. As a READ_FIXED that read held a registered slot for as
//! long as the client idled: every idle session-pooled client cost a slot
//! through its backend. Now a down read that would start on an empty
//! backend buffer gives the slot back and waits on a readability poll of
//! the backend's socket, which names the fd and no memory:
//! - The poll is the backend connection's (`OpTag::BackendPoll`, backend
//!   token) and multishot, with the same state (`ConnIo::poll`) and SQEs as
//!   a client's: armed at the first wait, it stays armed across queries and
//!   leases until the connection closes, so a query costs no poll SQE.
//!   `try_finish_backend` cancels it once the connection is closed; a
//!   failed cancel is sent again (`OpTag::BackendPollCancel`).
//! - The wait is the relay's read: counted in the session's `relay_ops`
//!   while it waits (`SessionSlot::down_wait`), so the relay still sees one
//!   read and one completion. When the poll fires, the backend takes a slot
//!   (a heap buffer when none is free: it never queues behind clients, which
//!   may be waiting for it) and reads with READ_FIXED RWF_NOWAIT under the
//!   read's own token
//!   (`OpTag::DownRead`): the relay gets the response, the ERR or the EOF
//!   exactly as from the armed read, and no byte is read before there is a
//!   buffer to read it into. -EAGAIN (a stale wake-up) waits again.
//! - A clean end's `CancelReadBackend` completes a waiting read at once with
//!   -ECANCELED (nothing is in the kernel to cancel), as does a closing
//!   session; only then can the backend be released, and the poll left
//!   armed names only the backend's own fd.
//! - A shut-down socket wakes the poll (POLLHUP): the read after it finds
//!   the EOF, so `AbortBackend` still ends a waiting read.
//!
//! Idle pool connections give their slot back too (at `BackendOp::Clear` or
//! when their session gives them back, once idle); the pool's own exchanges
//! (login, reset, prepares) hold one from their write to their last read.
//! Backend TLS waits the same way: its records are decoded in place in the
//! buffer, so one that holds a partial record is not empty and keeps it.

use super::idle_io::{arm_poll, poll_cancel_failed, read_after_poll, IdleWait};
use super::*;

impl Worker {
    /// The relay's backend read is about to be submitted: in fixed mode,
    /// when the backend buffer holds nothing, it waits on the backend's poll
    /// without a slot, or reads now after a wake-up that already came
    /// (true). False: submit it as in the other modes.
    pub(super) fn idle_down_read(&mut self, sid: SessionId) -> bool {
        if !self.idle_poll {
            return false;
        }
        let Some(bid) = self
            .sessions
            .get_mut(sid.index, sid.generation)
            .and_then(|s| s.backend)
        else {
            return false;
        };
        let (Some(slot), Some(b)) = (
            self.sessions.get_mut(sid.index, sid.generation),
            self.pool.get_mut(bid),
        ) else {
            return false;
        };
        // Bytes kept in the buffer (an ERR arriving in pieces, a partial
        // TLS record) are read behind, with the slot.
        if b.io
            .buf
            .as_ref()
            .is_some_and(|b| b.in_flight() || b.filled_len() > 0 || b.wire_len() > 0)
        {
            return false;
        }
        debug_assert_eq!(slot.down_wait, IdleWait::None, "second backend read");
        if self.down_read_is_hot(sid, bid) {
            // A busy connection keeps its slot and a plain read
            // (`hot_read.rs`).
            return false;
        }
        let (Some(slot), Some(b)) = (
            self.sessions.get_mut(sid.index, sid.generation),
            self.pool.get_mut(bid),
        ) else {
            return false;
        };
        // The read is the relay's from now on, waiting or in the kernel.
        slot.relay_ops += 1;
        if b.io.poll.ready() {
            self.down_read_now(sid, bid);
        } else {
            self.buffers.give_back_empty(&mut b.io.buf);
            self.wait_down_readable(sid, bid);
        }
        true
    }

    /// Wait on the backend's poll (armed now unless it is already).
    pub(super) fn wait_down_readable(&mut self, sid: SessionId, bid: BackendId) {
        let multi = self.poll_multi;
        let (Some(slot), Some(b)) = (
            self.sessions.get_mut(sid.index, sid.generation),
            self.pool.get_mut(bid),
        ) else {
            return;
        };
        slot.down_wait = IdleWait::Polling;
        let token = Token::new(OpTag::BackendPoll, bid.index, bid.generation);
        if let Some(sqe) = arm_poll(&mut b.io, multi, token) {
            self.submit(sqe);
        }
    }

    /// The backend is readable: read with its buffer, or a free slot, or a
    /// heap buffer (counted as a heap fallback). Unlike a client it never
    /// queues for a slot: its bytes are an answer some client waits for, and
    /// in transaction pooling the clients holding slots (their commands
    /// waiting for a connection) may be waiting for it to finish.
    pub(super) fn down_read_now(&mut self, sid: SessionId, bid: BackendId) {
        let (Some(slot), Some(b)) = (
            self.sessions.get_mut(sid.index, sid.generation),
            self.pool.get_mut(bid),
        ) else {
            return;
        };
        slot.down_wait = IdleWait::None;
        let token = Token::new(OpTag::DownRead, sid.index, sid.generation);
        // `ensure` takes a free slot, else a heap buffer.
        let sqe = read_after_poll(&mut b.io, &mut self.buffers, Owner::Backend, token);
        self.submit(sqe);
        self.hot_down_submitted(sid);
    }

    /// A relay read of the backend completed (before the relay sees it):
    /// true when it was a RWF_NOWAIT read that found nothing, and it waits
    /// on the backend's poll again without a slot. One that found nothing
    /// after the relay asked to cancel it is what the cancel would have
    /// made it: `res` becomes -ECANCELED (the backend stays reusable).
    pub(super) fn idle_down_read_done(&mut self, sid: SessionId, res: &mut i32) -> bool {
        let res_in = *res;
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return false;
        };
        let Some((bid, b)) = slot
            .backend
            .and_then(|bid| self.pool.get_mut(bid).map(|b| (bid, b)))
        else {
            return false;
        };
        let Some(buf) = b.io.buf.as_ref() else {
            return false;
        };
        let full =
            res_in > 0 && buf.filled_len() + buf.wire_len() + res_in as usize >= buf.capacity();
        if !b.io.poll.read_done(res_in, full) || slot.closing {
            return false;
        }
        if slot.down_cancelled {
            *res = -libc::ECANCELED;
            return false;
        }
        b.io.op_done();
        if let Some(buf) = b.io.buf.as_mut() {
            buf.complete(0);
        }
        self.buffers.give_back_empty(&mut b.io.buf);
        // The relay's read goes on waiting: `relay_ops` keeps counting it.
        self.wait_down_readable(sid, bid);
        true
    }

    /// End the relay's read of the backend that waits on the poll without a
    /// slot as if the kernel had completed it with
    /// `res`: -ECANCELED for a clean end's cancel, anything else for a
    /// closing session. False when none waits.
    pub(super) fn end_down_wait(&mut self, sid: SessionId, res: i32) -> bool {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return false;
        };
        if slot.down_wait == IdleWait::None {
            return false;
        }
        slot.down_wait = IdleWait::None;
        self.down_read_done(sid, res, false);
        true
    }

    /// A CQE of a backend's poll: readable (or its socket was shut down, or
    /// the poll failed or ended). The relay read waiting on it takes a slot
    /// and reads; with none waiting it is remembered for the next wait.
    pub(super) fn on_backend_poll(&mut self, bid: BackendId, res: i32, flags: u32) {
        let Some(b) = self.pool.get_mut(bid) else {
            return;
        };
        let ended = b.io.poll.on_cqe(res, flags);
        if ended {
            b.io.op_done();
        }
        let closed = b.conn.is_closed();
        let waiter = b.leased_to.filter(|sid| {
            self.sessions
                .get_mut(sid.index, sid.generation)
                .is_some_and(|s| s.backend == Some(bid) && s.down_wait == IdleWait::Polling)
        });
        if closed {
            // Its cancel (sent when it closed) ends the poll.
            if let Some(sid) = waiter {
                self.end_down_wait(sid, 0);
            }
            return self.try_finish_backend(Some(bid));
        }
        if self.multishot_poll_refused(res, ended) {
            if let Some(sid) = waiter {
                self.wait_down_readable(sid, bid);
            }
            return;
        }
        let Some(sid) = waiter else {
            // A read is in flight, or the pool reads for itself, or the
            // connection idles in the pool.
            if let Some(b) = self.pool.get_mut(bid) {
                b.io.poll.readable = true;
            }
            return;
        };
        if res < 0 && res != -libc::ECANCELED {
            // The poll itself failed: the relay sees it as a failed read.
            self.end_down_wait(sid, res);
            return;
        }
        self.down_read_now(sid, bid);
    }

    /// A closed backend connection's poll must end before it can be freed
    /// (`try_finish_backend`): cancel it, once.
    pub(super) fn cancel_backend_poll(&mut self, bid: BackendId) {
        let Some(b) = self.pool.get_mut(bid) else {
            return;
        };
        if b.io.poll.armed && !b.io.poll.cancel_sent {
            b.io.poll.cancel_sent = true;
            let target = Token::new(OpTag::BackendPoll, bid.index, bid.generation);
            let me = Token::new(OpTag::BackendPollCancel, bid.index, bid.generation);
            self.submit(ops::cancel_user_data(target.into(), me));
        }
    }

    /// The cancel of a closed backend's poll completed: one that failed is
    /// sent again (`idle_io::poll_cancel_failed`).
    pub(super) fn on_backend_poll_cancel(&mut self, bid: BackendId, res: i32) {
        if !poll_cancel_failed(res) {
            return;
        }
        if let Some(b) = self.pool.get_mut(bid) {
            if b.io.poll.armed {
                b.io.poll.cancel_sent = false;
                self.cancel_backend_poll(bid);
            }
        }
    }

    /// Fixed mode: a connection idle in the pool gives its empty buffer
    /// back (its next read takes one). Called at `BackendOp::Clear` and after
    /// a session released or parked it; only once it is idle, so that the
    /// pool's own exchanges (a reset, a replay) keep the slot from their
    /// write to their last read instead of taking one again, a heap buffer
    /// when slots are short.
    pub(super) fn shed_idle_backend_slot(&mut self, bid: BackendId) {
        if !self.idle_poll {
            return;
        }
        if let Some(b) = self.pool.get_mut(bid).filter(|b| b.conn.is_idle()) {
            self.buffers.give_back_empty(&mut b.io.buf);
        }
    }
}

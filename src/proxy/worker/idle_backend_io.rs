//! Fixed mode: an idle backend connection holds no slot either (the
//! backend half; `idle_io.rs` is the client's): the slots go to busy
//! connections, however many are open.
//!
//! Between commands the relay keeps its read of the backend armed
//! (`Down::Watching` in relay.rs), so that a server closing an idle
//! connection (wait_timeout, KILL, shutdown), or its unsolicited ERR, is
//! noticed at once. As a READ_FIXED that read holds a registered slot, so
//! while the session is busy it stays one (a hot read, `hot_read.rs`), and
//! once it has been pending on an empty buffer for a while, or when the
//! read would start without a slot (the connection was idle in the pool),
//! it waits on a readability poll of the backend's socket instead, which
//! names the fd and no memory:
//! - The poll is the backend connection's (`OpTag::BackendPoll`, backend
//!   token) and one-shot, with the same SQEs as a client's: armed when the
//!   read starts waiting, ended by its one wake-up, or by the shutdown when
//!   the connection closes (`BackendOp::Close`). A command written while
//!   the read waits turns it into a READ_FIXED at once (`hot_read.rs`); the
//!   poll stays in flight until the answer wakes it, and a wake-up that
//!   finds no read waiting is dropped (a poll armed later checks readiness
//!   itself).
//! - The wait is the relay's read: counted in the session's `relay_ops`
//!   while it waits (`SessionSlot::down_wait`), so the relay still sees one
//!   read and one completion. When the poll fires, the backend takes a slot
//!   (a heap buffer when none is free: it never queues behind clients, which
//!   may be waiting for it) and reads with READ_FIXED under the read's own
//!   token (`OpTag::DownRead`): the relay gets the response, the ERR or the
//!   EOF exactly as from the armed read, and no byte is read before there
//!   is a buffer to read it into.
//! - A clean end's `CancelReadBackend` completes a waiting read at once with
//!   -ECANCELED (nothing is in the kernel to cancel), as does a closing
//!   session; only then can the backend be released, and a poll still in
//!   flight names only the backend's own fd.
//! - A shut-down socket wakes the poll (POLLHUP): the read after it finds
//!   the EOF, so `AbortBackend` still ends a waiting read.
//!
//! Idle pool connections give their slot back too (at `BackendOp::Clear` or
//! when their session gives them back, once idle); the pool's own exchanges
//! (login, reset, prepares) hold one from their write to their last read.
//! Backend TLS waits the same way: its records are decoded in place in the
//! buffer, so one that holds a partial record is not empty and keeps it.

use super::idle_io::{arm_poll, read_after_poll, IdleWait};
use super::*;

impl Worker {
    /// The relay's backend read is about to be submitted on a path that
    /// polls when idle (`read_path.rs`: fixed mode): when the backend
    /// buffer holds nothing and the read is not hot, it waits on the
    /// backend's poll without a slot (true). False: submit it now.
    pub(super) fn idle_down_read(&mut self, sid: SessionId) -> bool {
        let Some(bid) = self.sessions.slot(sid).and_then(|s| s.backend) else {
            return false;
        };
        let (Some(slot), Some(b)) = (self.sessions.slot(sid), self.backends.get_mut(bid)) else {
            return false;
        };
        // Bytes kept in the buffer (an ERR arriving in pieces, a partial
        // TLS record) are read behind, with the slot.
        if b.buf
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
        let (Some(slot), Some(b)) = (self.sessions.slot(sid), self.backends.get_mut(bid)) else {
            return false;
        };
        // The read is the relay's from now on, waiting or in the kernel.
        slot.relay_ops += 1;
        self.buffers.give_back_empty(&mut b.buf);
        self.wait_down_readable(sid, bid);
        true
    }

    /// Wait on a new one-shot poll of the backend's socket.
    pub(super) fn wait_down_readable(&mut self, sid: SessionId, bid: BackendId) {
        let (Some(slot), Some(b)) = (self.sessions.slot(sid), self.backends.get_mut(bid)) else {
            return;
        };
        slot.down_wait = IdleWait::Polling;
        let token = Token::new(OpTag::BackendPoll, bid.index, bid.generation);
        let sqe = arm_poll(b, token);
        self.submit(sqe);
    }

    /// The backend is readable: read with its buffer, or a free slot, or a
    /// heap buffer (counted as a heap fallback). Unlike a client it never
    /// queues for a slot: its bytes are an answer some client waits for, and
    /// in transaction pooling the clients holding slots (their commands
    /// waiting for a connection) may be waiting for it to finish.
    pub(super) fn down_read_now(&mut self, sid: SessionId, bid: BackendId) {
        let (Some(slot), Some(b)) = (self.sessions.slot(sid), self.backends.get_mut(bid)) else {
            return;
        };
        slot.down_wait = IdleWait::None;
        let token = Token::new(OpTag::DownRead, sid.index, sid.generation);
        // `ensure` takes a free slot, else a heap buffer.
        let sqe = read_after_poll(b, &mut self.buffers, Owner::Backend, token);
        self.submit(sqe);
        self.hot_down_submitted(sid);
    }

    /// End the relay's read of the backend that waits on the poll without a
    /// slot as if the kernel had completed it with
    /// `res`: cancelled for a clean end's cancel, anything else for a
    /// closing session. False when none waits.
    pub(super) fn end_down_wait(&mut self, sid: SessionId, res: Completion) -> bool {
        let Some(slot) = self.sessions.slot(sid) else {
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
    /// the poll failed). The relay read waiting on it takes a slot and
    /// reads; with none waiting (a command turned the wait into a read
    /// meanwhile) it is dropped.
    pub(super) fn on_backend_poll(&mut self, bid: BackendId, res: Completion) {
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        b.op_done();
        let closed = self.backend_closed(bid);
        let waiter = self.pool.leased_to(bid).filter(|sid| {
            self.sessions
                .slot(*sid)
                .is_some_and(|s| s.backend == Some(bid) && s.down_wait == IdleWait::Polling)
        });
        if closed {
            // Its shutdown (`BackendOp::Close`) ended the poll.
            if let Some(sid) = waiter {
                self.end_down_wait(sid, Completion::Done(0));
            }
            return self.try_finish_backend(Some(bid));
        }
        let Some(sid) = waiter else {
            return;
        };
        if let Completion::Failed(_) = res {
            // The poll itself failed: the relay sees it as a failed read.
            self.end_down_wait(sid, res);
            return;
        }
        self.down_read_now(sid, bid);
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
        if !self.pool.conn(bid).is_some_and(|c| c.is_idle()) {
            return;
        }
        if let Some(b) = self.backends.get_mut(bid) {
            self.buffers.give_back_empty(&mut b.buf);
        }
    }
}

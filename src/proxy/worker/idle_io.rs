//! Fixed mode: an idle client holds no slot (issue 13 item 2).
//!
//! A client read that would start on an empty buffer (between commands, or
//! while the answer to a forwarded command is still coming) gives the
//! client's slot back and waits for readability with a one-shot POLL_ADD,
//! which names the fd and no memory. When the poll completes the client
//! takes a slot and reads with READ_FIXED as before. So 10,000 idle clients
//! hold no slot between them, for one more SQE per client read
//! (docs/benchmarks.md has the figures; `--hold-idle-slots` keeps the old
//! behaviour).
//!
//! Slot exhaustion queues, never fails: a readable client that finds no free
//! slot waits in FIFO order (`ringgate_read_buffer_slot_waits_total`) and
//! gets the next slot given back; its bytes wait in the socket meanwhile.
//! Slots that are never given back (backend connections hold theirs for
//! life) cannot stall it: a client still waiting at the next tick reads
//! into a heap buffer, counted as a heap fallback.
//!
//! A poll is an operation on the client's fd like a read: counted by
//! `ConnIo::op_started`, so a closing session waits for its completion
//! (the shutdown at close completes it with POLLHUP).

use std::sync::atomic::Ordering::Relaxed;

use super::*;

/// Where an idle client's next read stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum IdleWait {
    /// Not waiting without a slot (a read may be in flight, with one).
    #[default]
    None,
    /// A poll for readability is in flight; no slot held.
    Polling,
    /// Readable, queued in `Worker::slot_waiters` for a free slot.
    ForSlot,
}

impl Worker {
    /// The client read `client_read` is about to submit: in fixed mode,
    /// for a relaying session whose buffer holds nothing, give the slot back
    /// and poll instead (true). False: read now, as in the other modes.
    pub(super) fn idle_client_read(&mut self, sid: SessionId) -> bool {
        if !self.idle_poll {
            return false;
        }
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return false;
        };
        // Login phases keep their slot (a handshake is short and bounded
        // by --handshake-timeout); a client leg (compression) and TLS read
        // through their own steps, which keep their slot; bytes kept in the
        // buffer are read behind.
        if slot.leg.is_some()
            || slot.tls.is_some()
            || !slot.session.is_relaying()
            || slot
                .io
                .buf
                .as_ref()
                .is_some_and(|b| b.in_flight() || b.filled_len() > 0 || b.wire_len() > 0)
        {
            return false;
        }
        debug_assert_eq!(slot.idle_wait, IdleWait::None, "second idle read");
        if slot.idle_wait != IdleWait::None {
            return true;
        }
        self.buffers.give_back_empty(&mut slot.io.buf);
        slot.idle_wait = IdleWait::Polling;
        slot.io.op_started();
        let token = Token::new(OpTag::ClientPoll, sid.index, sid.generation);
        let sqe = ops::poll_readable(slot.io.fd(), token);
        self.metrics().clients_polling.fetch_add(1, Relaxed);
        self.submit(sqe);
        true
    }

    /// The client became readable (or its socket was shut down, or the
    /// poll failed): take a slot and read, or queue for one.
    pub(super) fn on_client_poll(&mut self, sid: SessionId, res: i32) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        slot.io.op_done();
        slot.idle_wait = IdleWait::None;
        self.metrics().clients_polling.fetch_sub(1, Relaxed);
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        if slot.closing {
            return self.try_finish_session(sid);
        }
        if res < 0 {
            // The poll itself failed: the session sees it as a failed read.
            return self.with_session(sid, |s, _, ctx, out| s.on_client_read(res, &[], ctx, out));
        }
        match self.buffers.try_acquire_slot(Owner::Client) {
            Some(buf) => {
                slot.io.buf = Some(buf);
                self.submit_client_read(sid);
            }
            None => {
                slot.idle_wait = IdleWait::ForSlot;
                self.slot_waiters.push_back(sid);
                self.metrics().slot_waits_total.fetch_add(1, Relaxed);
            }
        }
    }

    /// Hand free slots to the clients waiting for one, in order. With
    /// `heap_fallback` (at a tick) every client still waiting reads into a
    /// heap buffer instead of waiting longer.
    pub(super) fn serve_slot_waiters(&mut self, heap_fallback: bool) {
        while let Some(&sid) = self.slot_waiters.front() {
            let waiting = self
                .sessions
                .get_mut(sid.index, sid.generation)
                .is_some_and(|s| s.idle_wait == IdleWait::ForSlot && !s.closing);
            if !waiting {
                // Closed (or gone) while it waited.
                self.slot_waiters.pop_front();
                continue;
            }
            let buf = match self.buffers.try_acquire_slot(Owner::Client) {
                Some(buf) => buf,
                // `acquire` on an exhausted pool: a heap buffer, counted.
                None if heap_fallback => self.buffers.acquire(Owner::Client),
                None => return,
            };
            self.slot_waiters.pop_front();
            if let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) {
                slot.idle_wait = IdleWait::None;
                slot.io.buf = Some(buf);
                self.submit_client_read(sid);
            } else if self.buffers.release(buf).is_err() {
                debug_assert!(false, "a fresh buffer is never in flight");
            }
        }
    }
}

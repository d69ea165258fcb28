//! Fixed mode: an idle client holds no slot: the slots go to busy clients,
//! however many are open.
//!
//! A client read that would start on an empty buffer while the client is
//! idle (a freshly logged-in client, or one whose hot read stayed pending
//! on an empty buffer and was cancelled: `hot_read.rs`) gives the client's
//! slot back and waits for readability with a poll, which names the fd and
//! no memory. When the poll reports readability the client takes a slot and
//! reads with READ_FIXED as before. So 10,000 idle clients hold no slot
//! between them, while a busy client keeps its slot and a plain read
//! (docs/benchmarks.md has the cost per query; `--hold-idle-slots` keeps
//! every slot held).
//!
//! The poll is one-shot (IORING_OP_POLL_ADD): armed when the connection
//! goes idle, it ends at its one wake-up, which checks readiness at arming
//! too, so bytes that arrived before it are never missed; a close ends it,
//! since the socket is shut down first (a shut-down socket reports
//! POLLHUP), and the session is freed only after its CQE (it is counted by
//! `ConnIo::op_started` like any operation on the fd). A multishot poll,
//! armed once per connection, would save the poll SQE per idle period, but
//! it posts a completion at every arrival of a connection that is busy
//! again, each one a stale wake-up for its next idle wait; the worker ran
//! that way while every read waited on the poll (it needed RWF_NOWAIT reads
//! after each wake-up, remembered and stale readiness, and a cancel at
//! close).
//!
//! Slot exhaustion never queues: a readable client that finds no free slot
//! (`ringgate_read_buffer_slot_waits_total`) reads into a heap buffer at
//! once, counted as a heap fallback. A queue would wait on the busy
//! connections, which keep their slots while busy.
//!
//! Backend connections wait the same way between commands
//! (`idle_backend_io.rs`), with the same poll and read SQEs.

use std::sync::atomic::Ordering::Relaxed;

use super::*;

/// Where an idle client's next read (or the relay's next read of its
/// backend, `SessionSlot::down_wait`) stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum IdleWait {
    /// Not waiting without a slot (a read may be in flight, with one).
    #[default]
    None,
    /// A poll for readability is in flight; no slot held.
    Polling,
}

/// The one-shot poll SQE that makes `io` wait for readability, counted on
/// its fd.
pub(super) fn arm_poll(io: &mut ConnIo, token: Token) -> Sqe {
    io.op_started();
    ops::poll_readable(io.fd(), token)
}

/// The read after a wake-up into `io`'s buffer (taken now if it has none:
/// a free slot, else a heap buffer), counted on its fd.
pub(super) fn read_after_poll(
    io: &mut ConnIo,
    buffers: &mut BufferPool,
    owner: Owner,
    token: Token,
) -> Sqe {
    let fd = io.fd();
    let buf = buffers.ensure(&mut io.buf, owner);
    let sqe = buf.read_sqe(fd, token.into());
    io.op_started();
    sqe
}

impl Worker {
    /// The client read about to be submitted on a path that polls when
    /// idle (`read_path.rs`: fixed mode, no layer): for an idle relaying
    /// session whose buffer holds nothing, give the slot back and poll
    /// instead (true). False: read now (a busy client's hot read among
    /// them).
    pub(super) fn idle_client_read(&mut self, sid: SessionId) -> bool {
        let Some(slot) = self.sessions.slot(sid) else {
            return false;
        };
        // Login phases keep their slot (a handshake is short and bounded
        // by --handshake-timeout); bytes kept in the buffer are read
        // behind.
        if !slot.session.is_relaying()
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
        if self.client_read_is_hot(sid) {
            // A busy client keeps its slot and a plain read (`hot_read.rs`).
            return false;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return false;
        };
        self.buffers.give_back_empty(&mut slot.io.buf);
        self.wait_readable(sid);
        true
    }

    /// Wait for readability without a slot, on a new one-shot poll.
    pub(super) fn wait_readable(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.idle_wait = IdleWait::Polling;
        self.shared
            .metrics
            .worker(self.id)
            .clients_polling
            .fetch_add(1, Relaxed);
        let token = Token::new(OpTag::ClientPoll, sid.index, sid.generation);
        let sqe = arm_poll(&mut slot.io, token);
        self.submit(sqe);
    }

    /// A CQE of the client's poll: readable (or its socket was shut down,
    /// or the poll failed). A client waiting for it takes a slot, or a heap
    /// buffer when none is free, and reads.
    pub(super) fn on_client_poll(&mut self, sid: SessionId, res: Completion) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.io.op_done();
        let waiting = std::mem::take(&mut slot.idle_wait) == IdleWait::Polling;
        if waiting {
            self.metrics().clients_polling.fetch_sub(1, Relaxed);
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.closing {
            return self.try_finish_session(sid);
        }
        if !waiting {
            // Never: the poll is armed only by a client that waits on it,
            // and only its wake-up ends the wait.
            return;
        }
        if let Completion::Failed(_) = res {
            // The poll itself failed: the session sees it as a failed read.
            return self.with_session(sid, |s, _, ctx, out| s.on_client_read(res, &[], ctx, out));
        }
        if self.buffers.free_count() == 0 {
            self.metrics().slot_waits_total.fetch_add(1, Relaxed);
        }
        // A free slot, else at once a heap buffer (counted as a heap
        // fallback): never a queue, since the clients holding the slots
        // keep them while busy (`hot_read.rs`).
        self.submit_client_read(sid);
    }
}

//! Fixed mode: an idle client holds no slot (issue 13 item 2).
//!
//! A client read that would start on an empty buffer while the client is
//! idle (a freshly logged-in client, or one whose hot read stayed pending
//! for a whole tick and was cancelled: `hot_read.rs`) gives the client's
//! slot back and waits for readability with a poll, which names the fd and
//! no memory. When the poll reports readability the client takes a slot and
//! reads with READ_FIXED as before. So 10,000 idle clients hold no slot
//! between them, while a busy client keeps its slot and a plain read
//! (docs/benchmarks.md has the cost per query; `--hold-idle-slots` keeps
//! every slot held).
//!
//! The polls are one-shot (`Worker::poll_multi` is false since busy
//! connections keep their reads hot): armed when the connection goes idle,
//! ended by their one wake-up, or at close by the socket's shutdown. The
//! multishot state machine below (RWF_NOWAIT reads after a wake-up,
//! remembered and stale readiness, the cancel sent again at close) is what
//! the worker ran before the hot reads, when every client read waited on
//! the poll; it stays correct for `poll_multi`:
//! - A readiness CQE while the client is not waiting ([`IdleWait::None`]:
//!   a read is in flight, or the session reads for itself) is remembered
//!   (`PollState::readable`, in conn_io.rs); the next idle read then reads at once
//!   instead of waiting for a wake-up that already happened.
//! - Readiness may be stale (the read in flight took the bytes), so a read
//!   after a poll is READ_FIXED with RWF_NOWAIT: -EAGAIN gives the slot
//!   back and waits on the poll again, with no new SQE.
//! - A read that filled the buffer may have left bytes in the socket that
//!   will raise no new wake-up: it counts as readable too.
//! - The peer's FIN often shares a wake-up with its last bytes, and the read
//!   that returns the bytes leaves the EOF unread: the poll asks for
//!   POLLRDHUP, and once a CQE reports it (or POLLHUP/POLLERR) every idle
//!   read reads at once (`PollState::hup`).
//! - A CQE without IORING_CQE_F_MORE ends the poll (the kernel may end a
//!   multishot, e.g. on CQ overflow); the next idle read arms a new one.
//! - Close cancels it; the session is freed only after its last CQE (it is
//!   counted by `ConnIo::op_started` like any operation on the fd). A
//!   cancel that fails is sent again (`OpTag::ClientPollCancel`): shutting
//!   the socket down is not sure to end a multishot poll.
//!
//! Slot exhaustion never queues: a readable client that finds no free slot
//! (`ringgate_read_buffer_slot_waits_total`) reads into a heap buffer at
//! once, counted as a heap fallback. A queue would wait on the busy
//! connections, which keep their slots while busy.
//!
//! Backend connections wait the same way between commands
//! (`idle_backend_io.rs`): the poll state (`conn_io::PollState`), the
//! poll and read SQEs and the cancel are shared here.

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

/// The poll SQE that makes `io` wait for readability, counted on its fd;
/// `None` while its multishot poll is armed already (it keeps firing).
/// `multi`: multishot (armed until cancelled), else one-shot.
pub(super) fn arm_poll(io: &mut ConnIo, multi: bool, token: Token) -> Option<Sqe> {
    if io.poll.armed {
        return None;
    }
    io.op_started();
    Some(if multi {
        io.poll.armed = true;
        ops::poll_readable_multi(io.fd(), token)
    } else {
        ops::poll_readable(io.fd(), token)
    })
}

/// The read after a wake-up into `io`'s buffer (taken now if it has none),
/// counted on its fd: RWF_NOWAIT while the multishot poll stays armed, so
/// that a stale wake-up's -EAGAIN can go back to waiting on it; a plain
/// read after a one-shot poll.
pub(super) fn read_after_poll(
    io: &mut ConnIo,
    buffers: &mut BufferPool,
    owner: Owner,
    token: Token,
) -> Sqe {
    let nowait = io.poll.armed;
    io.poll.reading(nowait);
    let fd = io.fd();
    let buf = buffers.ensure(&mut io.buf, owner);
    let sqe = match nowait {
        true => buf.read_sqe_nowait(fd, token.into()),
        false => buf.read_sqe(fd, token.into()),
    };
    io.op_started();
    sqe
}

/// A cancel of a closing connection's poll failed and must be sent again.
/// 0: cancelled; -ENOENT/-EALREADY: the poll had ended or is ending on its
/// own. Anything else (a submission that could not be queued comes back as
/// a synthetic failure) leaves it armed: a multishot poll is not sure to
/// end when the socket is shut down (a wake-up reporting POLLHUP leaves it
/// armed), and without its last CQE the connection, its fd and its slot
/// are never freed.
pub(super) fn poll_cancel_failed(res: i32) -> bool {
    !(res >= 0 || res == -libc::ENOENT || res == -libc::EALREADY)
}

impl Worker {
    /// A poll ended with -EINVAL while polls were multishot: this kernel
    /// has none (before 5.13), so every idle wait from now on uses one-shot
    /// polls (true), with one log line.
    pub(super) fn multishot_poll_refused(&mut self, res: i32, ended: bool) -> bool {
        if !(ended && res == -libc::EINVAL && self.poll_multi) {
            return false;
        }
        self.poll_multi = false;
        if self.id == 0 {
            tracing::info!(
                "idle connections wait with one-shot polls (multishot POLL_ADD needs Linux 5.13+)"
            );
        }
        true
    }

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
        if slot.io.poll.ready() {
            // A wake-up already came: read now (RWF_NOWAIT, in case the
            // bytes were read meanwhile), keeping the slot.
            self.submit_idle_read(sid);
            return true;
        }
        if self.client_read_is_hot(sid) {
            // A busy client keeps its slot and a plain read (`hot_read.rs`).
            return false;
        }
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return false;
        };
        self.buffers.give_back_empty(&mut slot.io.buf);
        self.wait_readable(sid);
        true
    }

    /// Wait for readability without a slot: on the armed multishot poll,
    /// or arm a poll.
    pub(super) fn wait_readable(&mut self, sid: SessionId) {
        let multi = self.poll_multi;
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        slot.idle_wait = IdleWait::Polling;
        self.shared
            .metrics
            .worker(self.id)
            .clients_polling
            .fetch_add(1, Relaxed);
        let token = Token::new(OpTag::ClientPoll, sid.index, sid.generation);
        if let Some(sqe) = arm_poll(&mut slot.io, multi, token) {
            self.submit(sqe);
        }
    }

    /// A client read once a poll said readable: RWF_NOWAIT while the
    /// multishot poll stays armed (so -EAGAIN can go back to it), else a
    /// plain read.
    fn submit_idle_read(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        let empty = slot
            .io
            .buf
            .as_ref()
            .is_some_and(|b| b.filled_len() == 0 && b.wire_len() == 0);
        if !(slot.io.poll.armed && empty) {
            return self.submit_client_read(sid);
        }
        let token = Token::new(OpTag::ClientRead, sid.index, sid.generation);
        let sqe = read_after_poll(&mut slot.io, &mut self.buffers, Owner::Client, token);
        self.submit(sqe);
    }

    /// A client read completed (before the session sees it): true when it
    /// was a RWF_NOWAIT read that found nothing, and the client waits on
    /// its poll again without its slot.
    pub(super) fn idle_read_done(&mut self, sid: SessionId, res: i32) -> bool {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return false;
        };
        // The buffer's completion was recorded already.
        let full = slot
            .io
            .buf
            .as_ref()
            .is_some_and(|b| b.filled_len() + b.wire_len() >= b.capacity());
        let again = slot.io.poll.read_done(res, full);
        if slot.closing || !again {
            return false;
        }
        self.buffers.give_back_empty(&mut slot.io.buf);
        if slot.io.buf.is_some() {
            // Not empty after all (never on this path): read as usual.
            slot.io.poll.readable = true;
            self.submit_client_read(sid);
            return true;
        }
        self.wait_readable(sid);
        true
    }

    /// The session closes: end its multishot poll (its last CQE lets the
    /// session be freed).
    pub(super) fn cancel_idle_poll(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        if slot.io.poll.armed {
            slot.io.poll.cancel_sent = true;
            let target = Token::new(OpTag::ClientPoll, sid.index, sid.generation);
            let me = Token::new(OpTag::ClientPollCancel, sid.index, sid.generation);
            self.submit(ops::cancel_user_data(target.into(), me));
        }
    }

    /// The cancel of a closing client's poll completed: one that failed is
    /// sent again ([`poll_cancel_failed`]).
    pub(super) fn on_client_poll_cancel(&mut self, sid: SessionId, res: i32) {
        if !poll_cancel_failed(res) {
            return;
        }
        let armed = self
            .sessions
            .get_mut(sid.index, sid.generation)
            .is_some_and(|s| s.closing && s.io.poll.armed);
        if armed {
            self.cancel_idle_poll(sid);
        }
    }

    /// A CQE of the client's poll: readable (or its socket was shut down,
    /// or the poll failed or ended). A client waiting for it takes a slot,
    /// or a heap buffer when none is free, and reads; any other client
    /// remembers it.
    pub(super) fn on_client_poll(&mut self, sid: SessionId, res: i32, flags: u32) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        let ended = slot.io.poll.on_cqe(res, flags);
        if ended {
            slot.io.op_done();
        }
        if slot.closing {
            if slot.idle_wait == IdleWait::Polling {
                slot.idle_wait = IdleWait::None;
                self.metrics().clients_polling.fetch_sub(1, Relaxed);
            }
            return self.try_finish_session(sid);
        }
        let waiting = slot.idle_wait == IdleWait::Polling;
        if self.multishot_poll_refused(res, ended) {
            if waiting {
                if let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) {
                    slot.idle_wait = IdleWait::None;
                }
                self.metrics().clients_polling.fetch_sub(1, Relaxed);
                self.wait_readable(sid);
            }
            return;
        }
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        if !waiting {
            // Not waiting: a read is in flight, or the session
            // reads for itself. Remember it for the next idle read.
            slot.io.poll.readable = true;
            return;
        }
        slot.idle_wait = IdleWait::None;
        self.metrics().clients_polling.fetch_sub(1, Relaxed);
        if res < 0 && res != -libc::ECANCELED {
            // The poll itself failed: the session sees it as a failed read.
            return self.with_session(sid, |s, _, ctx, out| s.on_client_read(res, &[], ctx, out));
        }
        if self.buffers.free_count() == 0 {
            self.metrics().slot_waits_total.fetch_add(1, Relaxed);
        }
        // A free slot, else at once a heap buffer (counted as a heap
        // fallback): never a queue, since the clients holding the slots
        // keep them while busy (`hot_read.rs`).
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        self.buffers.ensure(&mut slot.io.buf, Owner::Client);
        self.submit_idle_read(sid);
    }
}

//! A command's write to the backend linked to the read of its answer, so
//! that one `io_uring_enter` submits both and sleeps until the answer
//! comes.
//!
//! Where: a relay that sends a command with no backend read in flight
//! asks, in the same batch, for the write and then the read of its answer
//! (`WriteBackend`, `ReadBackend` with `Relay::awaits_answer`):
//! transaction pooling's lease, every statement. Only a read owed an
//! answer: its CQE is certain to come (the server answers a complete
//! command, or the backend read timeout shuts the connection down), while
//! an idle read behind a command with no answer or behind part of one
//! would leave the write unfinished for the relay until the next query. The
//! write is held until the read's SQE is built, and the pair goes out with
//! `Ring::push_write_then_read`: the write posts no CQE when it writes
//! everything. Unlinked, its CQE (loopback writes complete inline) ended
//! the enter at once, and the worker entered again to sleep for the
//! answer: 4 enters and CQEs per query at c=1 in transaction pooling, now 3.
//! Session pooling's idle read is armed between commands (relay.rs), so its
//! command writes find the answer's read in flight and stay unlinked.
//!
//! The write carries RWF_NOWAIT: linked behind a write that waits for room
//! (a server busy writing a large result to us, not reading), the read of
//! that result would never be issued, the half-duplex deadlock the relay
//! exists to avoid. A NOWAIT write the socket cannot take whole comes back
//! (-EAGAIN or short) and is finished unlinked.
//!
//! Completions (buffers rule 5; kernel facts in `uring::ring::link_tests`):
//! - The read's CQE, whatever its result, proves the write wrote
//!   everything: the write is completed first (`on_down_read`), as its CQE
//!   would have been.
//! - The write's own CQE (failure, -EAGAIN, short) means the read was
//!   dropped without running and without a CQE: its accounting is undone
//!   and, unless the session is closing, it is issued again on its own,
//!   since the relay still waits for it.

use super::read_path::{Layers, ReadPath};
use super::ring_io::Side;
use super::*;

impl Worker {
    /// The up write about to be built for `io` goes out linked to the
    /// backend read the relay asked for right behind it.
    pub(super) fn up_write_links(&mut self, sid: SessionId, io: RelayIo) -> bool {
        let RelayIo::UpWrite { pos: 0, .. } = io else {
            return false;
        };
        if !self.link_up_write {
            return false;
        }
        let next_is_read = matches!(
            self.session_q.front(),
            Some((s, SessionAction::Relay(RelayOp::ReadBackend))) if *s == sid
        );
        // The command goes out of the client's plain own buffer (not a ring
        // chunk, not a layer's copy), and then so does the answer's read:
        // one read SQE to link to.
        next_is_read
            && matches!(
                self.read_path(sid, Side::Client, true),
                Some(ReadPath::OwnBuffer {
                    layers: Layers::NONE,
                    ..
                })
            )
            && self.sessions.slot(sid).is_some_and(|s| {
                s.linked_write.is_none()
                    // Only a read owed an answer: the idle read behind a
                    // command with no answer (COM_STMT_CLOSE) or behind part
                    // of a command might complete at the next query or
                    // never, and the relay would wait for its write.
                    && s.session.relay_awaits_answer()
            })
    }

    /// Hold the counted up write `sqe` of `len` bytes until the read behind
    /// it is built ([`Worker::submit_down_read`]).
    pub(super) fn hold_up_write(&mut self, sid: SessionId, sqe: Sqe, len: usize) {
        self.flush_held_write();
        self.held_write = Some((sid, sqe, len));
    }

    /// Submit the relay's backend read `sqe`: linked behind the up write
    /// held for it, if there is one.
    pub(super) fn submit_down_read(&mut self, sid: SessionId, sqe: Sqe) {
        match self.held_write.take() {
            Some((held, write, len)) if held == sid => {
                if let Some(slot) = self.sessions.slot(sid) {
                    slot.linked_write = Some(len);
                }
                self.ring.push_write_then_read(write, sqe);
            }
            other => {
                self.held_write = other;
                self.submit(sqe);
            }
        }
    }

    /// A CQE of the relay's backend read: if the up write linked before it
    /// had no CQE, it wrote everything (the read ran after it), and is
    /// completed now, before the read.
    pub(super) fn linked_write_proven(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if let Some(len) = slot.linked_write.take() {
            self.up_write_done(sid, Completion::Done(len), false);
        }
    }

    /// The CQE of a linked up write: it failed or was short, so the read
    /// linked behind it was dropped, never run. Its accounting is undone,
    /// and the relay, which still waits for it, gets it issued again.
    pub(super) fn linked_write_ended(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.linked_write.take().is_none() {
            return;
        }
        slot.relay_ops -= 1;
        slot.hot.read_dropped();
        let closing = slot.closing;
        if let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) {
            b.op_done();
            if let Some(buf) = b.buf.as_mut() {
                buf.read_dropped();
            }
        }
        if !closing {
            self.read_backend(sid);
        }
    }
}

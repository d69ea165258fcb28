//! What the relay asks for: one read or write on the client's or the
//! backend's socket at a time, the cancel of its backend read, and the
//! abort of its backend connection.

use crate::proxy::worker::read_path::ReadPath;
use crate::proxy::worker::ring_io::Side;
use crate::proxy::worker::*;

impl Worker {
    /// A flat dispatch, one line per operation.
    pub(super) fn relay_op(&mut self, sid: SessionId, op: RelayOp) {
        match op {
            RelayOp::ReadClient => self.relay_read_client(sid),
            RelayOp::WriteBackend { end } => self.relay_write_backend(sid, end),
            RelayOp::ReadBackend => self.relay_read_backend(sid),
            RelayOp::WriteClient { end } => self.relay_write_client(sid, end),
            RelayOp::CancelReadBackend => self.relay_cancel_read_backend(sid),
        }
    }

    /// The relay's read of the client: what it was handed is consumed.
    fn relay_read_client(&mut self, sid: SessionId) {
        match self.read_path(sid, Side::Client, true) {
            Some(ReadPath::Ring) => self.ring_read_consumed(sid),
            Some(ReadPath::OwnBuffer { poll_when_idle, .. }) => {
                self.own_read_client(sid, true, poll_when_idle)
            }
            None => {}
        }
    }

    fn relay_write_backend(&mut self, sid: SessionId, end: usize) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if let Some(leg) = slot.leg.as_mut() {
            // The write sends all of `up`: bytes behind `end` (a command
            // the relay stopped at) wait beside it.
            leg.hold_rest(end);
        }
        slot.up_write = (0, end);
        self.answer_imminent(sid);
        self.link_up_write = true;
        self.relay_submit(sid, RelayIo::UpWrite { pos: 0, end });
        self.link_up_write = false;
    }

    fn relay_read_backend(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.down_cancelled = false;
        self.read_backend(sid)
    }

    /// The relay's read of its backend (asked for, or read again: a TLS
    /// record still incomplete, a linked read dropped with its write).
    pub(in crate::proxy::worker) fn read_backend(&mut self, sid: SessionId) {
        match self.read_path(sid, Side::Backend, true) {
            Some(ReadPath::Ring) => self.ring_read(sid, Side::Backend),
            Some(ReadPath::OwnBuffer { poll_when_idle, .. }) => {
                self.debug_assert_no_armed_receive(sid);
                self.own_read_backend(sid, poll_when_idle)
            }
            None => {}
        }
    }

    fn relay_write_client(&mut self, sid: SessionId, end: usize) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.kill_answer.hold(end) {
            return self.held_kill_answers.push((sid, self.now));
        }
        if slot.leg.is_none() {
            slot.down_write = (0, end);
            return self.relay_submit(sid, RelayIo::DownWrite { pos: 0, end });
        }
        // Behind a leg the write sends the framing of those bytes.
        match self.leg_frame_down(sid, end) {
            Some(0) => self.leg_down_write_skipped(sid),
            Some(framed) => {
                if let Some(slot) = self.sessions.slot(sid) {
                    slot.down_write = (0, framed);
                }
                let io = RelayIo::DownWrite {
                    pos: 0,
                    end: framed,
                };
                self.relay_submit(sid, io)
            }
            None => {}
        }
    }

    fn relay_cancel_read_backend(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.down_cancelled = true;
        // Debug builds: a test may hold the worker here (the window a
        // server close can land in; debug_park.rs).
        self.debug_park_delay();
        // Fixed mode: a read waiting on the backend's poll is not in the
        // kernel; it ends now, as a cancelled read would.
        if self.end_down_wait(sid, Completion::Cancelled) {
            return;
        }
        // The cancel names the read's user_data, not a socket or a buffer:
        // the read's own completion (-ECANCELED) is what lets the backend
        // go.
        let read = Token::new(OpTag::DownRead, sid.index, sid.generation);
        let target = self.ring_cancel_backend(sid).unwrap_or(read.into());
        let token = Token::new(OpTag::DownCancel, sid.index, sid.generation);
        self.submit(ops::cancel_user_data(target, token));
    }

    pub(super) fn abort_backend(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) {
            b.shutdown();
        }
        // Fixed mode: a read waiting on the backend's poll ends as the
        // shut-down socket would end it (EOF), without counting on the
        // wake-up.
        self.end_down_wait(sid, Completion::Done(0));
    }
}

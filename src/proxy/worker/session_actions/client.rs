//! What a session asks of its client's socket and of the bytes read from
//! it: writes, reads, the session buffer's edits, shutdowns and the close.

use crate::proxy::worker::read_path::{Layers, ReadPath};
use crate::proxy::worker::ring_io::Side;
use crate::proxy::worker::session_io::plain_buffered;
use crate::proxy::worker::*;

impl Worker {
    pub(super) fn send_client(&mut self, sid: SessionId, bytes: Vec<u8>) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        match slot.leg.as_mut() {
            Some(leg) => {
                let out = slot.io.out.bytes_mut();
                out.clear();
                leg.leg.output(&bytes, out);
            }
            None => *slot.io.out.bytes_mut() = bytes,
        }
        slot.io.out_pos = 0;
        if slot.tls.is_some() {
            slot.io.op_started();
            return self.tls_send(sid, tls_io::Upper::Client, (0, 0));
        }
        let token = Token::new(OpTag::ClientWrite, sid.index, sid.generation);
        let fd = slot.io.fd();
        let sqe = slot.io.out.write_sqe(fd, 0, token.into());
        slot.io.op_started();
        self.submit(sqe);
    }

    /// The session's own read of its client (a login's, a parked
    /// session's; TLS reads on through it while a record is incomplete).
    pub(in crate::proxy::worker) fn read_client(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let relaying = slot.session.is_relaying();
        match self.read_path(sid, Side::Client, relaying) {
            Some(ReadPath::Ring) => self.ring_read(sid, Side::Client),
            Some(ReadPath::OwnBuffer { poll_when_idle, .. }) => {
                self.own_read_client(sid, false, poll_when_idle)
            }
            None => {}
        }
    }

    pub(super) fn consume_client(&mut self, sid: SessionId, n: usize) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        match slot.leg.as_mut() {
            Some(leg) => {
                let plain = leg.up.bytes_mut();
                plain.drain(..n.min(plain.len()));
            }
            None => {
                if let Some(buf) = slot.io.buf.as_mut() {
                    buf.consume(n);
                }
            }
        }
    }

    pub(super) fn clear_client_buffer(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if let Some(leg) = slot.leg.as_mut() {
            leg.up.bytes_mut().clear();
        }
        if let Some(buf) = slot.io.buf.as_mut() {
            buf.clear();
        }
        self.ring_drop_client_chunk(sid);
    }

    pub(super) fn replace_buffered(&mut self, sid: SessionId, len: usize, with: Vec<u8>) {
        // Ring mode: the command is rewritten in the client's own buffer,
        // not in the ring buffer (whose tail the kernel may be filling).
        self.ring_stage_client(sid);
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let done = match slot.leg.as_mut() {
            Some(leg) => {
                let plain = leg.up.bytes_mut();
                let fits = len <= plain.len();
                if fits {
                    plain.splice(..len, with);
                }
                fits
            }
            None => slot
                .io
                .buf
                .as_mut()
                .is_some_and(|b| b.replace_prefix(len, &with)),
        };
        // The session checked that the rewrite fits.
        debug_assert!(done, "rewritten command does not fit the buffer");
    }

    pub(super) fn examine_buffer(&mut self, sid: SessionId) {
        // Ring mode: the packet the relay stopped at is still in its ring
        // chunk; the session reads it from its own buffer.
        self.ring_stage_client(sid);
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        if let Some(slot) = self.sessions.slot(sid) {
            let data = plain_buffered(&slot.leg, &slot.io);
            slot.session.on_buffered(data, &ctx, &mut out);
        }
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
    }

    pub(super) fn redeliver(&mut self, sid: SessionId, res: Completion) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let relaying = slot.session.is_relaying();
        match self.read_path(sid, Side::Client, relaying) {
            // Behind a leg the session buffer is the leg's plain one.
            Some(ReadPath::OwnBuffer {
                layers: Layers { leg: true, .. },
                ..
            }) => self.deliver_plain_read(sid, res),
            // The bytes are still the client's current chunk (else the
            // relay kept them in the client's own buffer).
            Some(ReadPath::Ring) if self.ring_redeliver(sid, res) => {}
            Some(_) => self.with_session(sid, |s, io, ctx, out| {
                let data = io.buf.as_ref().map_or(&[][..], |b| b.filled());
                s.on_client_read(res, data, ctx, out)
            }),
            None => {}
        }
    }

    pub(super) fn abort_client(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let how = slot.io.shutdown();
        self.shutdown_client(sid, how);
    }

    pub(super) fn half_close(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let how = slot.io.shutdown_write();
        self.shutdown_client(sid, how);
    }

    /// This session's KILL woke a victim held as a direct descriptor: its
    /// answer waits for the victim's shutdown (`direct.rs`).
    pub(super) fn wake_killed_by(&mut self, sid: SessionId, wake: machines::registry::RingWake) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.kill_answer = direct::KillAnswer::Awaited;
        let killer = slot.conn.entry().id();
        self.wake_killed(wake, killer)
    }

    pub(super) fn close_session(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.closing = true;
        // Also ends a poll the client waits on (POLLHUP).
        let how = slot.io.shutdown_for_close();
        self.shutdown_client(sid, how);
        // A backend read waiting on its poll ends now (no wake-up is sure
        // to come for it).
        self.end_down_wait(sid, Completion::Done(0));
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.relay_ops > 0 {
            // Normally unreachable (the relay releases first); make the
            // relay's operations on the backend complete now.
            if let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) {
                b.shutdown();
            }
        }
        self.try_finish_session(sid);
    }
}

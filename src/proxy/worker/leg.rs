//! The driver's half of a client leg (`machines::client_leg`): the buffers the
//! kernel writes from when a session's client bytes pass a transform, and
//! the steps that move bytes through it.
//!
//! Without a leg nothing here runs and the relay is zero-copy: client bytes
//! are forwarded from the session's read slot, backend bytes from the
//! backend's slot. With one (docs/architecture.md, "The client leg"):
//! - up: the client's wire bytes land in the session slot as always, are
//!   decoded into `LegIo::up` (a copy, at most one read buffer's worth:
//!   more waits in the leg), and the tracker reads and the backend write
//!   sends that plain buffer;
//! - down: the backend's bytes land in its slot as always, the tracker reads
//!   them there, and they are framed into `LegIo::down` (a copy), which the
//!   client write sends; the proxy's own packets are framed the same way.

use std::sync::atomic::Ordering::Relaxed;

use super::*;
use machines::client_leg::{ClientLeg, LegKind};
use uring::buffers::WriteBuf;

pub(super) struct LegIo {
    pub leg: ClientLeg,
    /// Plain client bytes: what the session and tracker see, and what the
    /// relay writes to the backend.
    pub up: WriteBuf,
    /// Framed bytes for the client.
    pub down: WriteBuf,
    /// Plain bytes behind the relay's write to the backend (a command the
    /// relay stopped at); they go back to `up` once the write is done.
    rest: Vec<u8>,
}

impl LegIo {
    /// The relay writes `up[..end]` to the backend: set what lies behind
    /// aside, so the write sends exactly that.
    pub fn hold_rest(&mut self, end: usize) {
        let up = self.up.bytes_mut();
        if up.len() > end {
            self.rest.extend_from_slice(&up[end..]);
            up.truncate(end);
        }
    }

    /// The write to the backend is done: `up` holds what was set aside.
    pub fn written(&mut self) {
        let up = self.up.bytes_mut();
        up.clear();
        up.append(&mut self.rest);
    }

    /// Neither buffer is named by an operation in the kernel.
    pub fn quiescent(&self) -> bool {
        !self.up.in_flight() && !self.down.in_flight()
    }
}

impl Worker {
    /// The session negotiated a transform and its login OK is written.
    pub(super) fn start_client_leg(&mut self, sid: SessionId, kind: LegKind) {
        let limit = self.shared.config.read_buffer_size as usize;
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.leg.is_some() {
            // A COM_CHANGE_USER ends with the login OK again: the leg (its
            // counters, its held input) carries on.
            return;
        }
        let mut leg = Box::new(LegIo {
            leg: ClientLeg::new(kind, limit),
            up: WriteBuf::default(),
            down: WriteBuf::default(),
            rest: Vec::new(),
        });
        if let Some(buf) = slot.io.buf.as_mut().filter(|b| !b.in_flight()) {
            // Pipelined behind the login: already the transform's input.
            leg.leg.queue_input(buf.filled());
            buf.clear();
        }
        slot.leg = Some(leg);
        self.metrics()
            .client_compressed_sessions_total
            .fetch_add(1, Relaxed);
    }

    /// A client read completed on a session with a leg: decode what it
    /// read, then hand the session the plain bytes.
    pub(super) fn leg_client_read_done(&mut self, sid: SessionId, mut res: Completion) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let (Some(leg), Some(buf)) = (slot.leg.as_mut(), slot.io.buf.as_mut()) else {
            return;
        };
        if res.brought_bytes() {
            if let Err(e) = leg.leg.input(buf.filled(), leg.up.bytes_mut()) {
                if self.log_limiter.allow(self.now) {
                    tracing::info!(worker = self.id, peer = %slot.peer, "client sent a broken compressed packet: {e}");
                }
                res = Completion::Fault(Fault::Compression);
            }
            buf.clear();
        }
        self.deliver_plain_read(sid, res);
    }

    /// The relay asks for client bytes: serve them from input the leg holds
    /// back, if any (true), instead of reading the socket (false).
    pub(super) fn leg_client_read(&mut self, sid: SessionId, clear: bool) -> bool {
        let Some(slot) = self.sessions.slot(sid) else {
            return false;
        };
        let Some(leg) = slot.leg.as_mut() else {
            return false;
        };
        if clear {
            leg.up.bytes_mut().clear();
        }
        if !leg.leg.has_pending() {
            return false;
        }
        let res = match leg.leg.resume(leg.up.bytes_mut()) {
            // Any positive count: the session reads the plain buffer.
            Ok(()) => Completion::Done(1),
            Err(e) => {
                if self.log_limiter.allow(self.now) {
                    tracing::info!(worker = self.id, peer = %slot.peer, "client sent a broken compressed packet: {e}");
                }
                Completion::Fault(Fault::Compression)
            }
        };
        self.deliver_plain_read(sid, res);
        true
    }

    /// Give the session a client read's result with the leg's plain bytes
    /// (queued like any completion's actions: nothing recurses).
    pub(super) fn deliver_plain_read(&mut self, sid: SessionId, res: Completion) {
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        if let Some(slot) = self.sessions.slot(sid) {
            if let Some(leg) = slot.leg.as_mut() {
                note_stats(self.shared.metrics.worker(self.id), &mut leg.leg);
                slot.session
                    .on_client_read(res, leg.up.as_slice(), &ctx, &mut out);
            }
        }
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
    }

    /// The relay writes `backend buffer[..end]` to the client: frame it.
    /// Returns the framed length (0: everything was held back as part of a
    /// packet still arriving), or None without a leg.
    pub(super) fn leg_frame_down(&mut self, sid: SessionId, end: usize) -> Option<usize> {
        let slot = self.sessions.slot(sid)?;
        let leg = slot.leg.as_mut()?;
        let b = slot.backend.and_then(|b| self.backends.get_mut(b))?;
        let plain = b.buf.as_ref().map_or(&[][..], |b| &b.filled()[..end]);
        let wire = leg.down.bytes_mut();
        wire.clear();
        leg.leg.output(plain, wire);
        let n = wire.len();
        note_stats(self.shared.metrics.worker(self.id), &mut leg.leg);
        Some(n)
    }

    /// The framing held everything back: the relay's write is done without
    /// an operation.
    pub(super) fn leg_down_write_skipped(&mut self, sid: SessionId) {
        let backend = self.sessions.slot(sid).and_then(|s| s.backend);
        if let Some(buf) = backend
            .and_then(|b| self.backends.get_mut(b))
            .and_then(|b| b.buf.as_mut())
        {
            buf.clear();
        }
        self.with_session(sid, |s, _, ctx, out| {
            s.on_relay_client_write(Completion::Done(1), ctx, out)
        });
    }
}

/// Add what the leg moved to the worker's compression counters.
fn note_stats(m: &WorkerMetrics, leg: &mut ClientLeg) {
    let s = leg.take_stats();
    let c = &m.client_compressed_bytes_total;
    for (i, v) in [s.wire_in, s.plain_in, s.plain_out, s.wire_out]
        .into_iter()
        .enumerate()
    {
        if v > 0 {
            c[i].fetch_add(v, Relaxed);
        }
    }
}

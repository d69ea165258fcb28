//! Session completions: the client reads and the relay's reads and writes
//! (tokened by the session), and freeing a finished session. The session
//! actions the driver carries out are in `session_actions/`; the relay's
//! writes pick their transport in `relay_execute.rs`, every read its path
//! in `read_path.rs`.

use std::sync::atomic::Ordering::Relaxed;

use super::read_path::{client_layers, Layers};
use super::ring_io::Side;
use super::*;

impl Worker {
    // ---- session completions ----

    pub(super) fn on_client_read(&mut self, sid: SessionId, res: Completion) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.io.op_done();
        let layers = client_layers(slot);
        if let Some(buf) = slot.io.buf.as_mut() {
            // TLS decodes the records in place (`tls_io.rs`).
            match layers.tls {
                true => buf.complete_wire(res.bytes()),
                false => buf.complete(res.bytes()),
            }
        }
        if self.idle_poll && self.client_read_cooled(sid, res) {
            return;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.closing {
            return self.try_finish_session(sid);
        }
        if !slot.session.is_relaying() {
            // A login may be verified now: see a SIGHUP reload at once.
            self.users = self.shared.users();
        }
        // Up the layers the read came through (`read_path.rs`).
        match layers {
            Layers { tls: true, .. } => self.tls_read_done(sid, res),
            Layers { leg: true, .. } => self.leg_client_read_done(sid, res),
            Layers { .. } => self.with_session(sid, |s, io, ctx, out| {
                let data = io.buf.as_ref().map_or(&[][..], |b| b.filled());
                s.on_client_read(res, data, ctx, out)
            }),
        }
    }

    pub(super) fn on_client_write(&mut self, sid: SessionId, res: Completion) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.io.op_done();
        slot.io.out.complete();
        if slot.closing {
            return self.try_finish_session(sid);
        }
        let res = written(res);
        if let Completion::Done(n) = res {
            slot.io.out_pos += n;
            if slot.io.out_pos < slot.io.out.len() {
                let token = Token::new(OpTag::ClientWrite, sid.index, sid.generation);
                let fd = slot.io.fd();
                let sqe = slot.io.out.write_sqe(fd, slot.io.out_pos, token.into());
                slot.io.op_started();
                return self.submit(sqe);
            }
        }
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        if let Some(slot) = self.sessions.slot(sid) {
            let buffered = plain_buffered(&slot.leg, &slot.io);
            slot.session.on_client_write(res, buffered, &ctx, &mut out);
        }
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
    }

    pub(super) fn on_up_write(&mut self, sid: SessionId, res: Completion) {
        // A linked write's CQE: the read behind it never ran.
        self.linked_write_ended(sid);
        self.up_write_done(sid, res, false)
    }

    /// An up write completed; `sealed`: it went through backend TLS, which
    /// wrote a sealed copy (the source was never in flight).
    pub(super) fn up_write_done(&mut self, sid: SessionId, res: Completion, sealed: bool) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.relay_ops -= 1;
        // Ring mode: the write sent a ring chunk (never behind a leg).
        if !sealed && (slot.leg.is_some() || !self.ring_write_done(sid, Side::Client)) {
            let Some(slot) = self.sessions.slot(sid) else {
                return;
            };
            match slot.leg.as_mut() {
                Some(leg) => leg.up.complete(),
                None => {
                    if let Some(buf) = slot.io.buf.as_mut() {
                        buf.complete_write();
                    }
                }
            }
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let backend = slot.backend;
        if let Some(b) = backend.and_then(|b| self.backends.get_mut(b)) {
            b.op_done();
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.closing {
            self.try_finish_session(sid);
            return self.try_finish_backend(backend);
        }
        let res = match res {
            // A linked write (RWF_NOWAIT, `link_write.rs`) found no room:
            // nothing written; the rest goes out waiting for room.
            Completion::Failed(libc::EAGAIN) => Completion::Done(0),
            res => written(res),
        };
        if let Completion::Done(n) = res {
            if self.up_write_advance(sid, n) {
                return;
            }
        }
        self.with_session(sid, |s, _, ctx, out| s.on_backend_write(res, ctx, out));
        self.try_finish_backend(backend);
    }

    /// `n` more bytes of the command went to the backend: true when the
    /// rest is still to write (its write is submitted); else the written
    /// bytes leave the client's buffer and the session hears of the write.
    fn up_write_advance(&mut self, sid: SessionId, n: usize) -> bool {
        self.shared
            .metrics
            .worker(self.id)
            .bytes_client_to_backend_total
            .fetch_add(n as u64, Relaxed);
        let Some(slot) = self.sessions.slot(sid) else {
            return false;
        };
        slot.up_write.0 += n;
        let (pos, end) = slot.up_write;
        if pos < end {
            self.relay_submit(sid, RelayIo::UpWrite { pos, end });
            return true;
        }
        match slot.leg.as_mut() {
            Some(leg) => leg.written(),
            None => {
                if let Some(buf) = slot.io.buf.as_mut() {
                    // Bytes behind the write (a COM_CHANGE_USER the
                    // relay stopped at) stay for the session.
                    if buf.filled().len() > end {
                        buf.consume(end);
                    } else {
                        buf.clear();
                    }
                }
            }
        }
        self.ring_forwarded(sid, Side::Client, end);
        false
    }

    pub(super) fn on_down_read(&mut self, sid: SessionId, res: Completion) {
        // Linked behind the command's write, the read ran after all of it.
        self.linked_write_proven(sid);
        // Fixed mode: a hot read the worker cancelled because it went idle
        // waits on the backend's poll now.
        if self.idle_poll && self.down_read_cooled(sid, res) {
            return;
        }
        self.down_read_done(sid, res, true)
    }

    /// The relay's read of the backend completed with `res`. `real`: the
    /// kernel's completion of a read it was given; false: a read that waited
    /// on the backend's poll without a slot and ends before it was submitted
    /// (`idle_backend_io.rs`), which names no buffer and no fd.
    pub(super) fn down_read_done(&mut self, sid: SessionId, res: Completion, real: bool) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.relay_ops -= 1;
        let closing = slot.closing;
        let backend = slot.backend;
        let tls = backend.is_some_and(|b| self.backend_tls_on(b));
        let Some(b) = backend.and_then(|b| self.backends.get_mut(b)) else {
            return;
        };
        let mut res = res;
        if real {
            b.op_done();
            let Some(buf) = b.buf.as_mut() else {
                return;
            };
            if closing {
                match tls {
                    true => buf.complete_wire(res.bytes()),
                    false => buf.complete(res.bytes()),
                }
            } else if !tls {
                buf.complete(res.bytes());
            }
        }
        if closing {
            self.try_finish_session(sid);
            return self.try_finish_backend(backend);
        }
        if let (true, true, Some(bid)) = (real, tls, backend) {
            // Ciphertext: decoded in place, or read again for a whole record.
            if !self.backend_tls_down_read(sid, bid, &mut res) {
                return;
            }
        }
        let Some(b) = backend.and_then(|b| self.backends.get_mut(b)) else {
            return;
        };
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        let data = b.buf.as_mut().map_or(&mut [][..], |b| b.filled_mut());
        if let Some(slot) = self.sessions.slot(sid) {
            slot.session.on_backend_read(res, data, &ctx, &mut out);
        }
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
        self.try_finish_backend(backend);
    }

    pub(super) fn on_down_write(&mut self, sid: SessionId, res: Completion) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.relay_ops -= 1;
        slot.io.op_done();
        let backend = slot.backend;
        match slot.leg.as_mut() {
            Some(leg) => leg.down.complete(),
            // Behind TLS the write sent a sealed copy.
            None if slot.tls.is_some() => {}
            None => {
                if !self.ring_write_done(sid, Side::Backend) {
                    if let Some(buf) = backend
                        .and_then(|b| self.backends.get_mut(b))
                        .and_then(|b| b.buf.as_mut())
                    {
                        buf.complete_write();
                    }
                }
            }
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.closing {
            self.try_finish_session(sid);
            return self.try_finish_backend(backend);
        }
        let res = written(res);
        if let Completion::Done(n) = res {
            self.shared
                .metrics
                .worker(self.id)
                .bytes_backend_to_client_total
                .fetch_add(n as u64, Relaxed);
            slot.down_write.0 += n;
            let (pos, end) = slot.down_write;
            if pos < end {
                return self.relay_submit(sid, RelayIo::DownWrite { pos, end });
            }
            // Large results: only on the plain path, where the relay
            // writes the backend buffer itself (a leg or TLS re-frames it).
            let plain = slot.leg.is_none() && slot.tls.is_none();
            if let Some(leg) = slot.leg.as_mut() {
                leg.down.bytes_mut().clear();
            }
            let plain = plain && !backend.is_some_and(|b| self.backend_tls_on(b));
            if let Some(b) = backend.and_then(|b| self.backends.get_mut(b)) {
                let read = b.buf.as_ref().map_or(0, |buf| buf.filled_len());
                if let Some(buf) = b.buf.as_mut() {
                    buf.clear();
                }
                // A large result reads in large pieces.
                self.buffers.fit_to_result(&mut b.buf, read, plain);
                self.buffers.shed(&mut b.buf);
            }
            self.ring_forwarded(sid, Side::Backend, end);
        }
        self.with_session(sid, |s, _, ctx, out| s.on_relay_client_write(res, ctx, out));
        self.try_finish_backend(backend);
    }

    /// The cancel of an idle backend read completed. 0: the read completes
    /// with -ECANCELED; -ENOENT: it had completed already. Any other result
    /// leaves the read in flight: the kernel could not cancel it (already
    /// running, -EALREADY), or the cancel itself never reached the kernel (a
    /// push that failed comes back as -EAGAIN, -EIO, ...), and without
    /// another completion the session would wait for it forever. So the
    /// backend is shut down, which completes the read; the relay then
    /// discards the connection.
    pub(super) fn on_down_cancel(&mut self, sid: SessionId, res: i32) {
        if res == 0 || res == -libc::ENOENT {
            return;
        }
        let ring_armed = self.ring_backend_armed(sid).is_some();
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.relay_ops == 0 && !ring_armed {
            return;
        }
        // The EOF the shutdown brings is the proxy's own, not the server's.
        slot.session.on_backend_cancel_failed();
        if let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) {
            b.shutdown();
        }
    }

    // ---- finishing ----

    /// Free a closing session once nothing in the kernel names it.
    pub(super) fn try_finish_session(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if !slot.closing
            || slot.relay_ops > 0
            || !slot.io.quiescent()
            || !slot.leg.as_ref().is_none_or(|l| l.quiescent())
            || !slot.tls.as_ref().is_none_or(|t| t.quiescent())
        {
            return;
        }
        let Some(mut slot) = self.sessions.remove_checked(sid.index, sid.generation) else {
            return;
        };
        if let Some(b) = slot.backend.take() {
            let mut events = Vec::new();
            self.pool.release(b, false, self.now, &mut events);
            self.pool_q.extend(events);
        }
        if let (Some(recv), Some(ring)) = (slot.io.recv.as_mut(), self.buffers.buf_ring()) {
            recv.drain_into(ring);
        }
        if let Some(buf) = slot.io.buf.take() {
            if self.buffers.release(buf).is_err() {
                tracing::error!("session buffer still in flight at close; leaked");
            }
        }
        if slot.counted {
            unreserve(&self.shared.clients);
        }
        self.metrics().client_connections.fetch_sub(1, Relaxed);
        // The socket closes here, after its last CQE (a direct descriptor
        // by an IORING_OP_CLOSE of its slot).
        if let Some(n) = slot.io.fixed_slot() {
            self.close_direct(n);
        }
    }
}

/// What the session reads of its client's bytes: the plain bytes behind a
/// leg, else the read buffer's filled part (none while a read is in flight).
/// Takes the two fields, not the slot, so the caller can borrow the session
/// mutably beside it.
pub(super) fn plain_buffered<'a>(
    leg: &'a Option<Box<super::leg::LegIo>>,
    io: &'a ConnIo,
) -> &'a [u8] {
    match leg.as_ref() {
        Some(leg) => leg.up.as_slice(),
        None => io
            .buf
            .as_ref()
            .filter(|b| !b.in_flight())
            .map_or(&[][..], |b| b.filled()),
    }
}

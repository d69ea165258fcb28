//! The driver's half of front-end TLS (`tls::record_layer`): it sits between
//! the client's socket and everything above it (the session, the relay and
//! a compression leg), which keep working on plain bytes.
//!
//! - Reads land in the session's read buffer as always (a registered slot
//!   in fixed mode), after any partial record already there; the leg
//!   decodes them in place and the plaintext becomes the buffer's valid
//!   bytes (`ReadBuffer::{parts_mut, set_parts}`). No buffer is added.
//! - Every write to the client (the session's own packets, the relay's
//!   down writes) is sealed into [`TlsOutbox::next`] and written from there by
//!   one TLS write at a time (`OpTag::TlsWrite`). The write it stands for
//!   is completed, with its plain length, once its last record is written
//!   (in order), so the layers above see the whole write done as before.
//!   Those writes stay counted on the socket (and the relay's on the
//!   session) until then, so a closing session waits for them.
//! - Handshake records (and tickets, alerts) join the same queue.
//!
//! In `--read-buffers ring` mode a TLS session reads both of its sockets
//! as in heap mode (into its connections' own buffers), as a compressed
//! session does: the transform copies every byte anyway.

use std::sync::atomic::Ordering::Relaxed;

use rustls::server::UnbufferedServerConnection;

use super::read_path::client_layers;
use super::tls_outbox::{TlsOutbox, Written};
use super::*;
use crate::tls::record_layer::TlsLeg;

/// Which write of the layers above a run of records stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Upper {
    /// A proxy-made packet (`OpTag::ClientWrite`).
    Client,
    /// The relay's down write (`OpTag::DownWrite`).
    Down,
}

pub(super) struct TlsIo {
    leg: TlsLeg<UnbufferedServerConnection>,
    /// Sealed records on their way to the client.
    outbox: TlsOutbox<Upper>,
    /// Bytes behind the SSLRequest are in the buffer, not decoded yet.
    unread: bool,
    /// The handshake's end was counted (full or resumed).
    handshake_counted: bool,
}

impl TlsIo {
    pub fn quiescent(&self) -> bool {
        !self.outbox.in_flight()
    }
}

impl Worker {
    /// The session's SSLRequest was read: start the TLS handshake.
    pub(super) fn start_tls(&mut self, sid: SessionId) {
        let config = self.shared.tls.as_ref().map(|t| t.current());
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let conn = match config.map(UnbufferedServerConnection::new) {
            Some(Ok(conn)) => conn,
            // Only reachable if rustls refuses its own config.
            other => {
                let why = other.and_then(|r| r.err()).map(|e| e.to_string());
                tracing::error!(worker = self.id, peer = %slot.peer, "cannot start TLS: {why:?}");
                let how = slot.io.shutdown();
                self.shutdown_client(sid, how);
                return;
            }
        };
        let unread = match slot.io.buf.as_mut() {
            Some(buf) => {
                buf.to_wire();
                buf.wire_len() > 0
            }
            None => false,
        };
        slot.tls = Some(Box::new(TlsIo {
            leg: TlsLeg::new(conn),
            outbox: TlsOutbox::new(),
            unread,
            handshake_counted: false,
        }));
        self.metrics()
            .client_tls_sessions_total
            .fetch_add(1, Relaxed);
    }

    /// A client read is asked for: serve it from bytes that arrived with
    /// the SSLRequest (true), or refuse it when a record cannot fit (true),
    /// else let the socket be read (false).
    pub(super) fn tls_client_read(&mut self, sid: SessionId) -> bool {
        let Some(slot) = self.sessions.slot(sid) else {
            return true;
        };
        let (Some(tls), Some(buf)) = (slot.tls.as_mut(), slot.io.buf.as_ref()) else {
            return false;
        };
        if std::mem::take(&mut tls.unread) {
            self.tls_decode(sid);
            return true;
        }
        if !buf.has_room() {
            // Plaintext not consumed plus a partial record fill the buffer.
            self.tls_deliver(sid, Completion::Fault(Fault::TooLarge));
            return true;
        }
        false
    }

    /// A client read completed behind TLS (its bytes are wire bytes).
    pub(super) fn tls_read_done(&mut self, sid: SessionId, res: Completion) {
        if !res.brought_bytes() {
            return self.tls_deliver(sid, res);
        }
        self.tls_decode(sid);
    }

    /// Decode what the buffer holds; hand the session its plaintext, or
    /// read on while a handshake or a record is incomplete.
    fn tls_decode(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let (Some(tls), Some(buf)) = (slot.tls.as_mut(), slot.io.buf.as_mut()) else {
            return;
        };
        let (bytes, plain, wire) = buf.parts_mut();
        let result = tls.leg.input(bytes, plain, wire, &mut tls.outbox.next);
        let finished = (!tls.handshake_counted && !tls.leg.is_handshaking())
            .then(|| tls.leg.conn().handshake_kind());
        if finished.is_some() {
            tls.handshake_counted = true;
        }
        let outcome = match result {
            Ok(r) => {
                buf.set_parts(r.plain_end, r.wire_end);
                if r.plain_end > plain {
                    Ok(Completion::Done(r.plain_end - plain))
                } else if r.peer_closed {
                    Ok(Completion::Done(0))
                } else {
                    Err(None)
                }
            }
            Err(e) => Err(Some(e)),
        };
        if let Some(kind) = finished {
            // Resumed: a ticket or a cached session spared the certificate
            // and the key exchange's signature.
            let resumed = kind == Some(rustls::HandshakeKind::Resumed);
            self.metrics().client_tls_handshakes_total[usize::from(resumed)].fetch_add(1, Relaxed);
        }
        self.tls_kick(sid);
        match outcome {
            Ok(res) => self.tls_deliver(sid, res),
            // Nothing for the session yet: read on.
            Err(None) => self.read_client(sid),
            Err(Some(e)) => {
                self.metrics().client_tls_errors_total.fetch_add(1, Relaxed);
                if self.log_limiter.allow(self.now) {
                    let peer = self
                        .sessions
                        .slot(sid)
                        .map(|s| s.peer.clone())
                        .unwrap_or_default();
                    tracing::info!(worker = self.id, peer = %peer, "client TLS failed, closing: {e}");
                }
                self.tls_deliver(sid, Completion::Fault(Fault::Tls))
            }
        }
    }

    /// Give the layers above a client read's result: the plaintext is the
    /// read buffer's valid bytes.
    fn tls_deliver(&mut self, sid: SessionId, res: Completion) {
        let has_leg = self
            .sessions
            .slot(sid)
            .is_some_and(|s| client_layers(s).leg);
        if has_leg {
            // Compression inside TLS: its wire bytes are TLS's plaintext.
            return self.leg_client_read_done(sid, res);
        }
        self.with_session(sid, |s, io, ctx, out| {
            let data = io.buf.as_ref().map_or(&[][..], |b| b.filled());
            s.on_client_read(res, data, ctx, out)
        });
    }

    /// Seal the bytes of a write to the client (`ClientWrite`: the slot's
    /// `out`; `DownWrite`: the leg's framing or the backend buffer's
    /// `pos..end`) and queue them. The caller counted the write as started.
    pub(super) fn tls_send(&mut self, sid: SessionId, upper: Upper, range: (usize, usize)) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.closing {
            return self.upper_done(sid, upper, Completion::Fault(Fault::Closing));
        }
        let Some(tls) = slot.tls.as_mut() else {
            return;
        };
        let backend_buf = slot
            .backend
            .and_then(|b| self.backends.get_mut(b))
            .and_then(|b| b.buf.as_ref());
        let plain: &[u8] = match upper {
            Upper::Client => slot.io.out.as_slice(),
            Upper::Down => match slot.leg.as_ref() {
                Some(leg) => &leg.down.as_slice()[range.0..range.1],
                None => backend_buf.map_or(&[][..], |b| &b.filled()[range.0..range.1]),
            },
        };
        let leg = &mut tls.leg;
        let sealed = tls
            .outbox
            .seal(upper, plain.len(), |next| leg.encrypt(plain, next));
        match sealed {
            Ok(()) => self.tls_kick(sid),
            Err(e) => self.upper_done(sid, upper, e),
        }
    }

    /// Start the next TLS write if none is in flight and records wait.
    fn tls_kick(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let Some(tls) = slot.tls.as_mut() else {
            return;
        };
        if slot.closing {
            return;
        }
        let token = Token::new(OpTag::TlsWrite, sid.index, sid.generation);
        if let Some(sqe) = tls.outbox.start(slot.io.fd(), token.into()) {
            slot.io.op_started();
            self.submit(sqe);
        }
    }

    /// A TLS write completed.
    pub(super) fn on_tls_write(&mut self, sid: SessionId, res: Completion) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.io.op_done();
        let closing = slot.closing;
        let Some(tls) = slot.tls.as_mut() else {
            return;
        };
        let token = Token::new(OpTag::TlsWrite, sid.index, sid.generation);
        let done = match tls
            .outbox
            .on_written(res, closing, slot.io.fd(), token.into())
        {
            Written::Again(sqe) => {
                slot.io.op_started();
                return self.submit(sqe);
            }
            Written::Done(done) => done,
        };
        self.tls_kick(sid);
        for (upper, result) in done {
            self.upper_done(sid, upper, result);
        }
        self.try_finish_session(sid);
    }

    /// Complete a write of the layers above with `res`.
    fn upper_done(&mut self, sid: SessionId, upper: Upper, res: Completion) {
        match upper {
            Upper::Client => self.on_client_write(sid, res),
            Upper::Down => self.on_down_write(sid, res),
        }
    }
}

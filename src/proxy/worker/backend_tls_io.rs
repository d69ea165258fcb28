//! The driver's half of backend TLS (`--backend-tls`): `tls::record_layer`
//! as a client, beneath a backend connection's own exchanges (the login
//! after the SSLRequest, schema selection, resets, statements) and the
//! relay's reads and writes on it. The machines above keep working on
//! plain bytes, as with front-end TLS (`tls_io.rs`).
//!
//! - Reads land in the backend's read buffer as always (a registered slot
//!   in fixed mode), behind any partial record; the leg decodes them in
//!   place and the plaintext becomes the buffer's valid bytes. A read that
//!   completes only part of a record is read again before anything above
//!   hears of it. No buffer is added.
//! - Every write to the server (the connection's own packets, the relay's
//!   up writes) is sealed into [`TlsOutbox::next`] and written by one
//!   `BackendTlsWrite` at a time; the write it stands for completes, with
//!   its plain length, once its last record is written. The relay's up
//!   writes stay counted on the backend's socket and on their session
//!   until then.
//! - In `--read-buffers ring` mode the relay reads a TLS backend as in heap
//!   mode (into its own buffer): the record layer copies every byte anyway.
//!   The client side may still read through the ring; an up write then
//!   seals straight from the ring chunk.
//!
//! The state lives beside the pool, in [`Worker::backend_tls`], keyed by
//! the connection's id; it is dropped when the connection is freed.

use std::sync::atomic::Ordering::Relaxed;

use rustls::client::UnbufferedClientConnection;

use super::tls_outbox::{TlsOutbox, Written};
use super::*;
use crate::tls::record_layer::{TlsLeg, TlsLegError};
use metrics::BackendTlsError;

/// Which write a run of records stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BackendUpper {
    /// A packet of the connection's own exchange (`BackendOp::Send`).
    Own,
    /// The relay's up write of this session (`OpTag::UpWrite`).
    Up(SessionId),
}

pub(super) struct BackendTlsIo {
    leg: TlsLeg<UnbufferedClientConnection>,
    /// Sealed records on their way to the server.
    outbox: TlsOutbox<BackendUpper>,
    /// The handshake runs: the login waits for [`Decoded::HandshakeDone`].
    handshaking: bool,
}

/// What a read's bytes came to.
enum Decoded {
    /// This many plaintext bytes are now the buffer's valid bytes' tail.
    Plain(usize),
    /// The server sent close_notify.
    Closed,
    /// Nothing for the layers above yet (a partial record, a handshake
    /// message, a ticket): read on.
    More,
    /// The handshake just completed.
    HandshakeDone,
    /// The leg failed: the cause, and whether it was in the handshake.
    Failed(String, bool),
}

fn tls_key(bid: BackendId) -> (u32, u32) {
    (bid.index, bid.generation)
}

impl Worker {
    /// The connection runs TLS (its records go through [`BackendTlsIo`]).
    pub(super) fn backend_tls_on(&self, bid: BackendId) -> bool {
        !self.backend_tls.is_empty() && self.backend_tls.contains_key(&tls_key(bid))
    }

    /// `BackendOp::StartTls`: the SSLRequest is out; send the ClientHello
    /// and read the server's answer.
    pub(super) fn backend_start_tls(&mut self, bid: BackendId) {
        let conn = match self.shared.backend_tls.as_ref() {
            Some(t) => UnbufferedClientConnection::new(
                std::sync::Arc::clone(&t.config),
                t.server_name.clone(),
            )
            .map_err(|e| format!("cannot start the backend TLS handshake: {e}")),
            None => Err("TLS asked for with --backend-tls disabled".to_string()),
        };
        let conn = match conn {
            Ok(c) => c,
            Err(cause) => return self.backend_tls_established(bid, Err(cause)),
        };
        self.backend_tls.insert(
            tls_key(bid),
            Box::new(BackendTlsIo {
                leg: TlsLeg::new(conn),
                outbox: TlsOutbox::new(),
                handshaking: true,
            }),
        );
        // Decoding nothing makes the ClientHello.
        self.backend_own_decoded(bid);
    }

    /// Tell the connection how its handshake ended.
    fn backend_tls_established(&mut self, bid: BackendId, result: Result<(), String>) {
        let m = self.metrics();
        match &result {
            Ok(()) => m.backend_tls_sessions_total.fetch_add(1, Relaxed),
            Err(_) => m.backend_tls_errors_total[BackendTlsError::Handshake as usize]
                .fetch_add(1, Relaxed),
        };
        let mut events = Vec::new();
        self.pool.on_tls(bid, result, self.now, &mut events);
        self.pool_q.extend(events);
        self.try_finish_backend(Some(bid));
    }

    /// Decode what the backend buffer holds (see [`Decoded`]) and start
    /// writing what the leg made (handshake records, alerts).
    fn backend_tls_decode(&mut self, bid: BackendId) -> Decoded {
        let failed = || Decoded::Failed("connection state missing".into(), false);
        let (Some(b), Some(tls)) = (
            self.backends.get_mut(bid),
            self.backend_tls.get_mut(&tls_key(bid)),
        ) else {
            return failed();
        };
        // Ring mode may have shed an empty buffer (before the ClientHello).
        let buf = self.buffers.ensure(&mut b.buf, Owner::Backend);
        if buf.in_flight() {
            return failed();
        }
        let (bytes, plain, wire) = buf.parts_mut();
        let decoded = match tls.leg.input(bytes, plain, wire, &mut tls.outbox.next) {
            Ok(r) => {
                buf.set_parts(r.plain_end, r.wire_end);
                if tls.handshaking && !tls.leg.is_handshaking() {
                    tls.handshaking = false;
                    Decoded::HandshakeDone
                } else if r.plain_end > plain {
                    Decoded::Plain(r.plain_end - plain)
                } else if r.peer_closed {
                    Decoded::Closed
                } else {
                    Decoded::More
                }
            }
            Err(e) => {
                let cause = match (&e, tls.handshaking) {
                    (TlsLegError::Tls(err), true) => crate::tls::backend_client::handshake_failure(
                        err,
                        self.shared.config.backend_tls,
                        self.shared.config.backend_tls_ca.as_deref(),
                    ),
                    (_, true) => format!("TLS handshake with the server failed: {e}"),
                    (_, false) => format!("TLS record from the server: {e}"),
                };
                Decoded::Failed(cause, tls.handshaking)
            }
        };
        self.backend_tls_kick(bid);
        decoded
    }

    /// Room for a read behind the plaintext and the partial record.
    pub(super) fn backend_tls_room(&mut self, bid: BackendId) -> bool {
        self.backends
            .get(bid)
            .and_then(|b| b.buf.as_ref())
            .is_none_or(|b| b.has_room())
    }

    /// A read of the connection's own exchange completed on a TLS
    /// connection.
    pub(super) fn backend_tls_own_read(&mut self, bid: BackendId, res: Completion) {
        if let Some(buf) = self.backends.get_mut(bid).and_then(|b| b.buf.as_mut()) {
            buf.complete_wire(res.bytes());
        }
        let handshaking = self
            .backend_tls
            .get(&tls_key(bid))
            .is_some_and(|t| t.handshaking);
        if !res.brought_bytes() {
            if handshaking {
                let why = match res {
                    Completion::Done(_) => "the server closed the connection".to_string(),
                    // The kernel's cancel, in the system's words as before.
                    Completion::Cancelled => {
                        std::io::Error::from_raw_os_error(libc::ECANCELED).to_string()
                    }
                    res => res.error().to_string(),
                };
                return self.backend_tls_established(
                    bid,
                    Err(format!(
                        "TLS handshake with the server failed: {why}; check the server's TLS \
                         set-up (ssl-cert, ssl-key, tls_version)"
                    )),
                );
            }
            return self.backend_own_read_result(bid, res);
        }
        self.backend_own_decoded(bid);
    }

    /// Decode and hand the connection what came of it.
    fn backend_own_decoded(&mut self, bid: BackendId) {
        match self.backend_tls_decode(bid) {
            Decoded::Plain(n) => self.backend_own_read_result(bid, Completion::Done(n)),
            Decoded::Closed => self.backend_own_read_result(bid, Completion::Done(0)),
            Decoded::HandshakeDone => self.backend_tls_established(bid, Ok(())),
            Decoded::More if self.backend_tls_room(bid) => self.backend_op(bid, BackendOp::Read),
            Decoded::More => self.backend_own_read_result(bid, Completion::Fault(Fault::TooLarge)),
            Decoded::Failed(cause, true) => self.backend_tls_established(bid, Err(cause)),
            Decoded::Failed(cause, false) => {
                self.backend_tls_record_failed(&cause);
                self.backend_own_read_result(bid, Completion::Fault(Fault::Tls))
            }
        }
    }

    fn backend_tls_record_failed(&mut self, cause: &str) {
        self.metrics().backend_tls_errors_total[BackendTlsError::Record as usize]
            .fetch_add(1, Relaxed);
        if self.log_limiter.allow(self.now) {
            tracing::info!(
                worker = self.id,
                "backend TLS failed, closing the connection: {cause}"
            );
        }
    }

    /// Hand the pool a read's result (plaintext bytes, or an error).
    fn backend_own_read_result(&mut self, bid: BackendId, res: Completion) {
        self.pool_read(bid, res);
        self.try_finish_backend(Some(bid));
    }

    /// The relay's read of a TLS backend completed: true when the caller
    /// delivers `*res` (the plaintext length, or an error) to the session,
    /// false when the read was submitted again (a partial record).
    pub(super) fn backend_tls_down_read(
        &mut self,
        sid: SessionId,
        bid: BackendId,
        res: &mut Completion,
    ) -> bool {
        if let Some(buf) = self.backends.get_mut(bid).and_then(|b| b.buf.as_mut()) {
            buf.complete_wire(res.bytes());
        }
        if !res.brought_bytes() {
            return true;
        }
        *res = match self.backend_tls_decode(bid) {
            Decoded::Plain(n) => Completion::Done(n),
            Decoded::Closed => Completion::Done(0),
            Decoded::More | Decoded::HandshakeDone => {
                let cancelled = self.sessions.slot(sid).is_some_and(|s| s.down_cancelled);
                if cancelled {
                    // The relay cancelled the read it asked for; the
                    // cancel may have found it completed already.
                    Completion::Cancelled
                } else if self.backend_tls_room(bid) {
                    self.read_backend(sid);
                    return false;
                } else {
                    Completion::Fault(Fault::TooLarge)
                }
            }
            Decoded::Failed(cause, _) => {
                self.backend_tls_record_failed(&cause);
                Completion::Fault(Fault::Tls)
            }
        };
        true
    }

    /// `BackendOp::Send` on a TLS connection: seal and queue the packet.
    pub(super) fn backend_tls_send_own(&mut self, bid: BackendId, mut bytes: Vec<u8>) {
        let Some(tls) = self.backend_tls.get_mut(&tls_key(bid)) else {
            return;
        };
        let sealed = seal(tls, BackendUpper::Own, &bytes);
        // The login's packets may hold the cleartext password (full
        // authentication inside TLS): only the sealed copy stays.
        zeroize::Zeroize::zeroize(&mut bytes);
        match sealed {
            Ok(()) => self.backend_tls_kick(bid),
            Err(e) => self.backend_upper_done(bid, BackendUpper::Own, e),
        }
    }

    /// The relay's up write `pos..end` to a TLS backend: seal the bytes it
    /// would have written (the leg's `up`, the ring chunk, or the session
    /// buffer) and queue them; counted as the plain write would be.
    pub(super) fn backend_tls_up_write(
        &mut self,
        sid: SessionId,
        bid: BackendId,
        pos: usize,
        end: usize,
    ) {
        let (Some(slot), Some(b), Some(tls)) = (
            self.sessions.slot(sid),
            self.backends.get_mut(bid),
            self.backend_tls.get_mut(&tls_key(bid)),
        ) else {
            return;
        };
        b.op_started();
        slot.relay_ops += 1;
        let ring = self.buffers.buf_ring();
        let chunk = slot.io.recv.as_ref().and_then(|r| r.current.as_ref());
        let plain: &[u8] = match (slot.leg.as_ref(), chunk, ring) {
            (Some(leg), _, _) => leg.up.as_slice(),
            (None, Some(chunk), Some(ring)) => ring.bytes(chunk),
            _ => slot
                .io
                .buf
                .as_ref()
                .filter(|b| !b.in_flight())
                .map_or(&[][..], |b| b.filled()),
        };
        let sealed = match plain.get(pos..end) {
            Some(p) => seal(tls, BackendUpper::Up(sid), p),
            None => Err(Completion::Fault(Fault::OutOfRange)),
        };
        match sealed {
            Ok(()) => self.backend_tls_kick(bid),
            Err(e) => self.backend_upper_done(bid, BackendUpper::Up(sid), e),
        }
    }

    /// Start the next TLS write if none is in flight and records wait.
    fn backend_tls_kick(&mut self, bid: BackendId) {
        let (Some(b), Some(tls)) = (
            self.backends.get_mut(bid),
            self.backend_tls.get_mut(&tls_key(bid)),
        ) else {
            return;
        };
        let token = Token::new(OpTag::BackendTlsWrite, bid.index, bid.generation);
        if let Some(sqe) = tls.outbox.start(b.fd(), token.into()) {
            b.op_started();
            self.submit(sqe);
        }
    }

    /// A backend TLS write completed.
    pub(super) fn on_backend_tls_write(&mut self, bid: BackendId, res: Completion) {
        let (Some(b), Some(tls)) = (
            self.backends.get_mut(bid),
            self.backend_tls.get_mut(&tls_key(bid)),
        ) else {
            return;
        };
        b.op_done();
        let token = Token::new(OpTag::BackendTlsWrite, bid.index, bid.generation);
        let done = match tls.outbox.on_written(res, false, b.fd(), token.into()) {
            Written::Again(sqe) => {
                b.op_started();
                return self.submit(sqe);
            }
            Written::Done(done) => done,
        };
        self.backend_tls_kick(bid);
        for (upper, result) in done {
            self.backend_upper_done(bid, upper, result);
        }
        self.try_finish_backend(Some(bid));
    }

    /// Complete a write of the layers above with `res`.
    fn backend_upper_done(&mut self, bid: BackendId, upper: BackendUpper, res: Completion) {
        match upper {
            BackendUpper::Own => {
                let mut events = Vec::new();
                self.pool.on_write(bid, res, self.now, &mut events);
                self.pool_q.extend(events);
                self.try_finish_backend(Some(bid));
            }
            BackendUpper::Up(sid) => self.up_write_done(sid, res, true),
        }
    }

    /// A connection is freed: its TLS state goes with it.
    pub(super) fn backend_tls_forget(&mut self, bid: BackendId) {
        if !self.backend_tls.is_empty() {
            self.backend_tls.remove(&tls_key(bid));
        }
    }
}

/// Seal `plain` into the outbox and remember which write it stands for.
fn seal(tls: &mut BackendTlsIo, upper: BackendUpper, plain: &[u8]) -> Result<(), Completion> {
    let leg = &mut tls.leg;
    tls.outbox
        .seal(upper, plain.len(), |next| leg.encrypt(plain, next))
}

//! The TLS record layer of a leg, sans-IO: ciphertext in, plaintext out,
//! in the caller's buffer; plaintext in, records out, into the caller's
//! `Vec`. Built on rustls's unbuffered API, generic over the side
//! ([`UnbufferedConn`] is implemented for the server and the client
//! connection), so the backend leg can use it as a client.
//!
//! # The caller's buffer
//! [`TlsLeg::input`] takes one buffer laid out as
//! `[plain (0..plain_end) | wire (plain_end..wire_end) | free]`: plain bytes
//! the caller has not consumed yet, then ciphertext not decoded yet. It
//! decodes every whole record of the wire part, appends each record's
//! plaintext at the end of the plain part (it always fits: a record's
//! plaintext is shorter than the record, which is consumed first) and
//! moves what is left of the wire part (a partial record) right behind it.
//! So a connection's read buffer holds both, and no buffer of its own is
//! needed for the plaintext.
//!
//! # Copies (rustls 0.23)
//! rustls decrypts in place in the caller's buffer (the AEAD writes the
//! plaintext over the ciphertext), then its unbuffered API hands the
//! record's payload out of an owned `Vec` it copies it into (rustls 0.23's
//! `ReadTraffic` says "to support in-place decryption in the future"). We
//! copy that into the plain part: two userspace copies per byte received,
//! one transient allocation per record (dropped at once; at most one
//! record's worth alive). Outbound, [`TlsLeg::encrypt`] seals plaintext
//! into records appended to the caller's `Vec`: one copy (the AEAD's
//! output), and the caller owns and bounds that `Vec`.

use rustls::client::ClientConnectionData;
use rustls::client::UnbufferedClientConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, UnbufferedStatus,
};
use thiserror::Error;

/// A rustls unbuffered connection of either side.
pub trait UnbufferedConn {
    type Data;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
    fn handshaking(&self) -> bool;
}

impl UnbufferedConn for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }
    fn handshaking(&self) -> bool {
        self.is_handshaking()
    }
}

impl UnbufferedConn for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }
    fn handshaking(&self) -> bool {
        self.is_handshaking()
    }
}

#[derive(Debug, Error)]
pub enum TlsLegError {
    /// The peer broke the protocol (or its certificate was refused).
    #[error("{0}")]
    Tls(#[from] rustls::Error),
    /// Application data to send before the handshake finished, or after
    /// the connection closed.
    #[error("TLS connection not ready for application data")]
    NotReady,
    /// rustls reported a record layout this leg does not expect.
    #[error("TLS record layout: {0}")]
    Layout(&'static str),
}

/// What [`TlsLeg::input`] left in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    /// The plain part now ends here...
    pub plain_end: usize,
    /// ...and the undecoded wire bytes after it end here.
    pub wire_end: usize,
    /// The peer sent close_notify: no more plaintext will come.
    pub peer_closed: bool,
}

/// What one step of [`TlsLeg::input`] asks for next.
enum Step {
    Again,
    Read,
    Wait,
    Closed,
    Failed(rustls::Error),
    Unexpected,
}

/// Room for one record's header, tag and padding beyond its payload.
const RECORD_OVERHEAD: usize = 64;
/// TLS's largest plaintext fragment.
const MAX_FRAGMENT: usize = 16384;
/// No connection state needs this many steps for one call; a bound keeps a
/// rustls surprise from spinning the worker.
const MAX_STEPS: usize = 4096;

pub struct TlsLeg<C> {
    conn: C,
    /// rustls panicked inside a call: the connection is unusable.
    poisoned: bool,
}

/// Run a call into rustls so that a panic in it (a misuse this leg did
/// not foresee, e.g. an input layout rustls does not expect) ends this
/// connection with an error instead of the worker thread with every
/// other session on it.
fn guarded<C, T>(
    leg: &mut TlsLeg<C>,
    f: impl FnOnce(&mut TlsLeg<C>) -> Result<T, TlsLegError>,
) -> Result<T, TlsLegError> {
    if leg.poisoned {
        return Err(TlsLegError::Layout("connection failed before"));
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *leg))) {
        Ok(r) => r,
        Err(_) => {
            leg.poisoned = true;
            Err(TlsLegError::Layout("rustls panicked"))
        }
    }
}

impl<C: UnbufferedConn> TlsLeg<C> {
    pub fn new(conn: C) -> TlsLeg<C> {
        TlsLeg {
            conn,
            poisoned: false,
        }
    }

    pub fn is_handshaking(&self) -> bool {
        self.conn.handshaking()
    }

    pub fn conn(&self) -> &C {
        &self.conn
    }

    /// Decode `buf[plain_end..wire_end]` (see the module doc); handshake
    /// and alert bytes to send are appended to `out`.
    pub fn input(
        &mut self,
        buf: &mut [u8],
        plain_end: usize,
        wire_end: usize,
        out: &mut Vec<u8>,
    ) -> Result<Input, TlsLegError> {
        guarded(self, |leg| leg.input_inner(buf, plain_end, wire_end, out))
    }

    fn input_inner(
        &mut self,
        buf: &mut [u8],
        plain_end: usize,
        wire_end: usize,
        out: &mut Vec<u8>,
    ) -> Result<Input, TlsLegError> {
        let mut plain = plain_end;
        let mut wire = plain_end;
        let mut peer_closed = false;
        for _ in 0..MAX_STEPS {
            // One step; the status borrows `buf` and ends with this block.
            let (discard, step) = {
                let status = self.conn.process(&mut buf[wire..wire_end]);
                let discard = status.discard;
                let step = match status.state {
                    Err(e) => Step::Failed(e),
                    // The records' payloads are rustls's own now; they are
                    // read through an empty input so the buffer is ours.
                    Ok(ConnectionState::ReadTraffic(_)) => Step::Read,
                    Ok(ConnectionState::EncodeTlsData(mut e)) => {
                        encode(out, |b| e.encode(b))?;
                        Step::Again
                    }
                    Ok(ConnectionState::TransmitTlsData(t)) => {
                        t.done();
                        Step::Again
                    }
                    Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => Step::Closed,
                    Ok(ConnectionState::BlockedHandshake | ConnectionState::WriteTraffic(_)) => {
                        Step::Wait
                    }
                    // Early data (never enabled) or a state added later.
                    Ok(_) => Step::Unexpected,
                };
                (discard, step)
            };
            wire += discard;
            match step {
                Step::Again => {}
                Step::Read => plain = self.drain_plaintext(buf, plain, wire)?,
                Step::Wait => break,
                Step::Closed => {
                    peer_closed = true;
                    break;
                }
                Step::Failed(e) => {
                    // rustls may hold an alert for the peer: send it.
                    flush_alert(&mut self.conn, out);
                    return Err(e.into());
                }
                Step::Unexpected => return Err(TlsLegError::Layout("unexpected connection state")),
            }
        }
        let left = wire_end - wire;
        buf.copy_within(wire..wire_end, plain);
        Ok(Input {
            plain_end: plain,
            wire_end: plain + left,
            peer_closed,
        })
    }

    /// Copy every record rustls holds decoded to `buf[plain..]`, never
    /// past `limit` (the first wire byte not consumed).
    fn drain_plaintext(
        &mut self,
        buf: &mut [u8],
        mut plain: usize,
        limit: usize,
    ) -> Result<usize, TlsLegError> {
        let status = self.conn.process(&mut []);
        let Ok(ConnectionState::ReadTraffic(mut r)) = status.state else {
            return Err(TlsLegError::Layout("decoded records went missing"));
        };
        while let Some(record) = r.next_record() {
            let payload = record?.payload;
            let end = plain + payload.len();
            if end > limit {
                return Err(TlsLegError::Layout("plaintext overtook the ciphertext"));
            }
            buf[plain..end].copy_from_slice(payload);
            plain = end;
        }
        Ok(plain)
    }

    /// Seal `plain` into records appended to `out` (with any handshake
    /// bytes rustls has queued first, e.g. a key update).
    pub fn encrypt(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), TlsLegError> {
        guarded(self, |leg| leg.encrypt_inner(plain, out))
    }

    fn encrypt_inner(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), TlsLegError> {
        for _ in 0..MAX_STEPS {
            let status = self.conn.process(&mut []);
            match status.state? {
                ConnectionState::EncodeTlsData(mut e) => encode(out, |b| e.encode(b))?,
                ConnectionState::TransmitTlsData(t) => t.done(),
                ConnectionState::WriteTraffic(mut w) => {
                    if plain.is_empty() {
                        return Ok(());
                    }
                    let records = plain.len().div_ceil(MAX_FRAGMENT);
                    let room = plain.len() + records * RECORD_OVERHEAD;
                    return encrypt_into(out, room, |b| w.encrypt(plain, b));
                }
                ConnectionState::PeerClosed => continue,
                _ => return Err(TlsLegError::NotReady),
            }
        }
        Err(TlsLegError::Layout(
            "encrypt did not reach a writable state",
        ))
    }

    /// A close_notify alert for the peer, appended to `out` (best effort).
    pub fn close_notify(&mut self, out: &mut Vec<u8>) {
        let _ = guarded(self, |leg| {
            leg.close_notify_inner(out);
            Ok(())
        });
    }

    fn close_notify_inner(&mut self, out: &mut Vec<u8>) {
        let status = self.conn.process(&mut []);
        if let Ok(ConnectionState::WriteTraffic(mut w)) = status.state {
            let _ = encrypt_into(out, 64, |b| w.queue_close_notify(b));
        }
    }
}

/// After an error rustls may hold an alert to send; take it. One call
/// only: a queued record is handed out before any input is looked at,
/// but a second call would deframe, and rustls's handshake deframer may
/// still point into the buffer of the call that failed.
fn flush_alert<C: UnbufferedConn>(conn: &mut C, out: &mut Vec<u8>) {
    let status = conn.process(&mut []);
    if let Ok(ConnectionState::EncodeTlsData(mut e)) = status.state {
        let _ = encode(out, |b| e.encode(b));
    }
}

/// Run `f` on spare room at the end of `out`, growing it to what rustls
/// says it needs.
fn encode(
    out: &mut Vec<u8>,
    mut f: impl FnMut(&mut [u8]) -> Result<usize, EncodeError>,
) -> Result<(), TlsLegError> {
    let mut room = 4096;
    loop {
        let start = out.len();
        out.resize(start + room, 0);
        match f(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size }))
                if required_size > room =>
            {
                out.truncate(start);
                room = required_size;
            }
            Err(_) => {
                out.truncate(start);
                return Err(TlsLegError::Layout("handshake record encoding"));
            }
        }
    }
}

fn encrypt_into(
    out: &mut Vec<u8>,
    mut room: usize,
    mut f: impl FnMut(&mut [u8]) -> Result<usize, EncryptError>,
) -> Result<(), TlsLegError> {
    loop {
        let start = out.len();
        out.resize(start + room, 0);
        match f(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(EncryptError::InsufficientSize(InsufficientSizeError { required_size }))
                if required_size > room =>
            {
                out.truncate(start);
                room = required_size;
            }
            Err(EncryptError::EncryptExhausted) => {
                out.truncate(start);
                return Err(TlsLegError::NotReady);
            }
            Err(_) => {
                out.truncate(start);
                return Err(TlsLegError::Layout("record encryption"));
            }
        }
    }
}

#[cfg(test)]
mod tests;

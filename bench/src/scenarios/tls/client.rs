//! The section's own MySQL client: greeting, optional SSLRequest and TLS upgrade with
//! rustls, HandshakeResponse41 with mysql_native_password, COM_QUERY, COM_QUIT, over a
//! blocking socket. It tells whether a TLS handshake resumed, which no client library does.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use sha1::{Digest, Sha1};

use super::TlsTarget;
use crate::model::Res;

const CLIENT_LONG_PASSWORD: u32 = 0x1;
const CLIENT_CONNECT_WITH_DB: u32 = 0x8;
const CLIENT_PROTOCOL_41: u32 = 0x200;
const CLIENT_SSL: u32 = 0x800;
const CLIENT_TRANSACTIONS: u32 = 0x2000;
const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
const CLIENT_PLUGIN_AUTH: u32 = 0x80000;
const NATIVE: &str = "mysql_native_password";

/// Accepts any certificate: the bench measures the servers' side, and the
/// client's verification would only add client CPU on the shared cores.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client TLS config; `resume`: keep sessions (tickets) in memory and
/// offer them (shared by every thread of a step, as one application's
/// connection pool would).
pub fn client_config(resume: bool) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("rustls's default versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    cfg.resumption = if resume {
        rustls::client::Resumption::in_memory_sessions(4096)
    } else {
        rustls::client::Resumption::disabled()
    };
    Arc::new(cfg)
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

pub struct Conn {
    io: BufReader<Stream>,
    seq: u8,
    /// Whether the TLS handshake resumed (None without TLS).
    pub resumed: Option<bool>,
}

fn io_err(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

fn read_packet(r: &mut impl Read, seq: &mut u8) -> Res<Vec<u8>> {
    let mut h = [0u8; 4];
    r.read_exact(&mut h).map_err(|e| io_err("read", e))?;
    let len = usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16;
    *seq = h[3].wrapping_add(1);
    let mut p = vec![0; len];
    r.read_exact(&mut p).map_err(|e| io_err("read", e))?;
    Ok(p)
}

fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut v = Vec::with_capacity(n + 4);
    v.extend_from_slice(&[n as u8, (n >> 8) as u8, (n >> 16) as u8, seq]);
    v.extend_from_slice(payload);
    v
}

fn err_text(p: &[u8]) -> String {
    let code = p.get(1..3).map_or(0, |c| u16::from_le_bytes([c[0], c[1]]));
    let msg = p.get(9..).unwrap_or_default();
    format!("server error {code}: {}", String::from_utf8_lossy(msg))
}

/// mysql_native_password: SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw))).
fn native_scramble(password: &str, scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = Sha1::digest(password.as_bytes());
    let h2 = Sha1::digest(h1);
    let mut h = Sha1::new();
    h.update(scramble);
    h.update(h2);
    let h3 = h.finalize();
    h1.iter().zip(h3.iter()).map(|(a, b)| a ^ b).collect()
}

/// The greeting's 20-byte scramble.
fn greeting_scramble(g: &[u8]) -> Res<Vec<u8>> {
    let bad = || "malformed greeting".to_string();
    if g.first() != Some(&10) {
        return Err(if g.first() == Some(&0xff) {
            err_text(g)
        } else {
            bad()
        });
    }
    let ver_end = g.iter().skip(1).position(|&b| b == 0).ok_or_else(bad)? + 1;
    let p = ver_end + 1 + 4;
    let mut s = g.get(p..p + 8).ok_or_else(bad)?.to_vec();
    // filler 1, caps 2, charset 1, status 2, caps 2, auth len 1, reserved 10
    let q = p + 8 + 1 + 2 + 1 + 2 + 2 + 1 + 10;
    s.extend_from_slice(g.get(q..q + 12).ok_or_else(bad)?);
    Ok(s)
}

impl Conn {
    /// Connect and log in; with `tls`, upgrade with an SSLRequest first.
    pub fn open(t: &TlsTarget, tls: Option<&Arc<ClientConfig>>) -> Res<Conn> {
        let sock = TcpStream::connect(("127.0.0.1", t.port)).map_err(|e| io_err("connect", e))?;
        let _ = sock.set_nodelay(true);
        let _ = sock.set_read_timeout(Some(Duration::from_secs(20)));
        let mut io = BufReader::new(Stream::Plain(sock));
        let mut seq = 0;
        let greeting = read_packet(&mut io, &mut seq)?;
        let scramble = greeting_scramble(&greeting)?;
        let mut caps = CLIENT_LONG_PASSWORD
            | CLIENT_CONNECT_WITH_DB
            | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH;
        let mut resumed = None;
        if let Some(cfg) = tls {
            caps |= CLIENT_SSL;
            let Stream::Plain(sock) = io.into_inner() else {
                unreachable!("plain before the upgrade")
            };
            let (s, was_resumed) = upgrade(sock, seq, caps, cfg)?;
            seq = seq.wrapping_add(1);
            resumed = Some(was_resumed);
            io = BufReader::new(Stream::Tls(Box::new(s)));
        }
        let mut c = Conn { io, seq, resumed };
        c.send(&handshake_response(t, caps, &scramble))?;
        c.finish_login(t)?;
        Ok(c)
    }

    /// Reads the login's answers until OK, answering an auth switch to
    /// mysql_native_password.
    fn finish_login(&mut self, t: &TlsTarget) -> Res<()> {
        loop {
            let p = self.read()?;
            match p.first() {
                Some(0x00) => return Ok(()),
                Some(0xff) => return Err(err_text(&p)),
                Some(0xfe) => {
                    // Auth switch: only mysql_native_password is spoken here.
                    let rest = &p[1..];
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    let plugin = String::from_utf8_lossy(&rest[..end]).to_string();
                    if plugin != NATIVE {
                        return Err(format!("auth switch to {plugin} (not spoken here)"));
                    }
                    let data = rest.get(end + 1..).unwrap_or_default();
                    let scr = &data[..data.len().min(20)];
                    let a = native_scramble(&t.password, scr);
                    self.send(&a)?;
                }
                _ => return Err(format!("unexpected login answer {:?}", p.first())),
            }
        }
    }

    fn send(&mut self, payload: &[u8]) -> Res<()> {
        let f = frame(self.seq, payload);
        self.seq = self.seq.wrapping_add(1);
        let w = self.io.get_mut();
        w.write_all(&f).map_err(|e| io_err("write", e))?;
        w.flush().map_err(|e| io_err("write", e))
    }

    fn read(&mut self) -> Res<Vec<u8>> {
        read_packet(&mut self.io, &mut self.seq)
    }

    /// A text query whose result is read to its end; returns the rows.
    pub fn query(&mut self, sql: &str) -> Res<usize> {
        self.seq = 0;
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(0x03);
        p.extend_from_slice(sql.as_bytes());
        self.send(&p)?;
        let first = self.read()?;
        match first.first() {
            Some(0x00) => return Ok(0),
            Some(0xff) => return Err(err_text(&first)),
            _ => {}
        }
        let is_eof = |p: &[u8]| p.first() == Some(&0xfe) && p.len() < 9;
        // Column definitions up to their EOF, then rows up to the last EOF.
        loop {
            let p = self.read()?;
            if is_eof(&p) {
                break;
            }
        }
        let mut rows = 0;
        loop {
            let p = self.read()?;
            if is_eof(&p) {
                return Ok(rows);
            }
            if p.first() == Some(&0xff) {
                return Err(err_text(&p));
            }
            rows += 1;
        }
    }

    /// COM_QUIT (no answer), then the socket closes with the value.
    pub fn quit(mut self) {
        self.seq = 0;
        let _ = self.send(&[0x01]);
        if let Stream::Tls(s) = self.io.get_mut() {
            s.conn.send_close_notify();
            let _ = s.flush();
        }
    }
}

/// Capabilities, max packet size and charset: the head of SSLRequest and of
/// HandshakeResponse41.
fn response_head(caps: u32, into: &mut Vec<u8>) {
    into.extend_from_slice(&caps.to_le_bytes());
    into.extend_from_slice(&(1u32 << 24).to_le_bytes());
    into.push(45);
    into.extend_from_slice(&[0; 23]);
}

/// Sends the SSLRequest as packet `seq` and runs the TLS handshake; whether it resumed.
fn upgrade(
    mut sock: TcpStream,
    seq: u8,
    caps: u32,
    cfg: &Arc<ClientConfig>,
) -> Res<(StreamOwned<ClientConnection, TcpStream>, bool)> {
    let mut req = Vec::with_capacity(32);
    response_head(caps, &mut req);
    sock.write_all(&frame(seq, &req))
        .map_err(|e| io_err("write", e))?;
    let name = ServerName::try_from("localhost").expect("a valid name");
    let conn =
        ClientConnection::new(Arc::clone(cfg), name).map_err(|e| format!("TLS client: {e}"))?;
    let mut s = StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn
            .complete_io(&mut s.sock)
            .map_err(|e| io_err("TLS handshake", e))?;
    }
    let resumed = s.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    Ok((s, resumed))
}

/// HandshakeResponse41: the user, mysql_native_password's token, the database.
fn handshake_response(t: &TlsTarget, caps: u32, scramble: &[u8]) -> Vec<u8> {
    let mut resp = Vec::with_capacity(128);
    response_head(caps, &mut resp);
    resp.extend_from_slice(t.user.as_bytes());
    resp.push(0);
    let auth = native_scramble(&t.password, scramble);
    resp.push(auth.len() as u8);
    resp.extend_from_slice(&auth);
    resp.extend_from_slice(t.db.as_bytes());
    resp.push(0);
    resp.extend_from_slice(NATIVE.as_bytes());
    resp.push(0);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_scramble_matches_the_protocol_example() {
        // An empty password sends an empty response.
        assert!(native_scramble("", &[1; 20]).is_empty());
        // SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw))): XOR with SHA1(pw)
        // again gives SHA1(scramble + SHA1(SHA1(pw))).
        let s = [7u8; 20];
        let r = native_scramble("pw", &s);
        let h1 = Sha1::digest(b"pw");
        let mut h = Sha1::new();
        h.update(s);
        h.update(Sha1::digest(h1));
        let back: Vec<u8> = r.iter().zip(h1.iter()).map(|(a, b)| a ^ b).collect();
        assert_eq!(back, h.finalize().to_vec());
    }

    #[test]
    fn greeting_scramble_takes_both_parts() {
        let mut g = vec![10];
        g.extend_from_slice(b"10.11.0-MariaDB\0");
        g.extend_from_slice(&[1, 0, 0, 0]);
        g.extend_from_slice(b"abcdefgh");
        g.push(0);
        g.extend_from_slice(&[0xff, 0xf7, 45, 2, 0, 0xff, 0x81, 21]);
        g.extend_from_slice(&[0; 10]);
        g.extend_from_slice(b"ijklmnopqrst\0");
        g.extend_from_slice(b"mysql_native_password\0");
        assert_eq!(greeting_scramble(&g).unwrap(), b"abcdefghijklmnopqrst");
        assert!(greeting_scramble(&[0xff, 0x10, 0x04, b'#']).is_err());
    }
}

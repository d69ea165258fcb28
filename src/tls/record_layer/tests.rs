//! The TLS leg without sockets: a rustls client leg and the server leg
//! trade bytes through buffers laid out as a connection's read buffer.

use std::sync::Arc;

use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::UnbufferedServerConnection;
use rustls::{ClientConfig, RootCertStore};

use super::*;
use crate::tls::{load_server_config, provider, TlsFiles};

fn testdata(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/tls/testdata")
        .join(name)
}

fn server() -> TlsLeg<UnbufferedServerConnection> {
    let cfg = load_server_config(&TlsFiles {
        cert: testdata("server.pem"),
        key: testdata("server.key"),
        client_ca: None,
        session_tickets: true,
    })
    .unwrap();
    TlsLeg::new(UnbufferedServerConnection::new(cfg).unwrap())
}

fn client(
    version: &'static rustls::SupportedProtocolVersion,
) -> TlsLeg<UnbufferedClientConnection> {
    let mut roots = RootCertStore::empty();
    let ca = std::fs::read(testdata("ca.pem")).unwrap();
    roots
        .add(CertificateDer::from_pem_slice(&ca).unwrap())
        .unwrap();
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    TlsLeg::new(UnbufferedClientConnection::new(Arc::new(cfg), name).unwrap())
}

/// One side's read buffer: `[plain | wire | free]`.
struct Side {
    buf: Vec<u8>,
    plain: usize,
    wire: usize,
}

impl Side {
    fn new(cap: usize) -> Side {
        Side {
            buf: vec![0; cap],
            plain: 0,
            wire: 0,
        }
    }

    /// Receive `bytes` in reads of at most `chunk`, decoding after each.
    fn receive<C: UnbufferedConn>(
        &mut self,
        leg: &mut TlsLeg<C>,
        bytes: &[u8],
        chunk: usize,
        out: &mut Vec<u8>,
    ) -> bool {
        let mut closed = false;
        for piece in bytes.chunks(chunk.max(1)) {
            self.buf[self.wire..self.wire + piece.len()].copy_from_slice(piece);
            self.wire += piece.len();
            let r = leg
                .input(&mut self.buf, self.plain, self.wire, out)
                .unwrap();
            self.plain = r.plain_end;
            self.wire = r.wire_end;
            closed |= r.peer_closed;
        }
        closed
    }

    fn take_plain(&mut self) -> Vec<u8> {
        let got = self.buf[..self.plain].to_vec();
        self.buf.copy_within(self.plain..self.wire, 0);
        self.wire -= self.plain;
        self.plain = 0;
        got
    }
}

/// Run the handshake, each flight delivered in `chunk`-byte reads.
fn handshake(
    c: &mut TlsLeg<UnbufferedClientConnection>,
    s: &mut TlsLeg<UnbufferedServerConnection>,
    cs: &mut Side,
    ss: &mut Side,
    chunk: usize,
) {
    let mut to_server = Vec::new();
    let mut to_client = Vec::new();
    // The client speaks first.
    c.input(&mut [], 0, 0, &mut to_server).unwrap();
    for _ in 0..10 {
        if !c.is_handshaking()
            && !s.is_handshaking()
            && to_server.is_empty()
            && to_client.is_empty()
        {
            return;
        }
        ss.receive(s, &std::mem::take(&mut to_server), chunk, &mut to_client);
        cs.receive(c, &std::mem::take(&mut to_client), chunk, &mut to_server);
    }
    panic!("handshake did not finish");
}

fn round_trip(version: &'static rustls::SupportedProtocolVersion, chunk: usize) {
    let (mut c, mut s) = (client(version), server());
    let (mut cs, mut ss) = (Side::new(40000), Side::new(40000));
    handshake(&mut c, &mut s, &mut cs, &mut ss, chunk);
    // Client → server: a login packet and a 20 KiB command (two records).
    let mut wire = Vec::new();
    let big: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8).collect();
    c.encrypt(b"login", &mut wire).unwrap();
    c.encrypt(&big, &mut wire).unwrap();
    let mut ignored = Vec::new();
    ss.receive(&mut s, &wire, chunk, &mut ignored);
    let got = ss.take_plain();
    assert_eq!(&got[..5], b"login");
    assert!(got[5..] == big[..]);
    assert_eq!(ss.wire, 0, "nothing left undecoded");
    // Server → client.
    let mut down = Vec::new();
    s.encrypt(b"OK packet", &mut down).unwrap();
    cs.receive(&mut c, &down, chunk, &mut ignored);
    assert_eq!(cs.take_plain(), b"OK packet");
    // close_notify ends the stream.
    let mut bye = Vec::new();
    c.close_notify(&mut bye);
    assert!(ss.receive(&mut s, &bye, chunk, &mut ignored));
}

#[test]
fn tls13_round_trip_whole_reads() {
    round_trip(&rustls::version::TLS13, 1 << 20);
}

#[test]
fn tls12_round_trip_whole_reads() {
    round_trip(&rustls::version::TLS12, 1 << 20);
}

#[test]
fn records_cut_anywhere_decode_the_same() {
    for chunk in [1, 7, 1000] {
        round_trip(&rustls::version::TLS13, chunk);
    }
    round_trip(&rustls::version::TLS12, 3);
}

#[test]
fn plain_bytes_already_in_the_buffer_stay_in_front() {
    let (mut c, mut s) = (client(&rustls::version::TLS13), server());
    let (mut cs, mut ss) = (Side::new(40000), Side::new(40000));
    handshake(&mut c, &mut s, &mut cs, &mut ss, 1 << 20);
    let mut wire = Vec::new();
    c.encrypt(b"abc", &mut wire).unwrap();
    c.encrypt(b"def", &mut wire).unwrap();
    let mut ignored = Vec::new();
    // The first record and half of the second arrive; "abc" stays unread.
    let cut = wire.len() - 10;
    ss.receive(&mut s, &wire[..cut], 1 << 20, &mut ignored);
    assert_eq!(&ss.buf[..ss.plain], b"abc");
    assert!(ss.wire > ss.plain, "the partial record waits behind it");
    ss.receive(&mut s, &wire[cut..], 1 << 20, &mut ignored);
    assert_eq!(ss.take_plain(), b"abcdef");
}

#[test]
fn garbage_instead_of_a_client_hello_is_an_error_with_an_alert() {
    let mut s = server();
    let mut buf = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let n = buf.len();
    let mut out = Vec::new();
    assert!(s.input(&mut buf, 0, n, &mut out).is_err());
}

#[test]
fn application_data_before_the_handshake_is_refused() {
    let mut s = server();
    let mut out = Vec::new();
    assert!(matches!(
        s.encrypt(b"x", &mut out),
        Err(TlsLegError::NotReady)
    ));
}

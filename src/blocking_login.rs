//! Logging in to a backend over a blocking socket with the login code the
//! pool's connections use ([`ClientLogin`]), TLS per `--backend-tls`: what
//! `ringgate check` and the cluster monitor share. The connection stays
//! open for the caller (the check quits it, the monitor runs its probe).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::tls::backend_client::BackendTlsConfig;
use wire::auth::Credential;
use wire::client_login::{ClientLogin, LoginError, LoginParams, LoginStep, TlsWish};
use wire::client_sha2::FullAuthTransport;
use wire::constants::{COM_QUIT, NATIVE_LOGIN_CAPS, UTF8MB4_GENERAL_CI};
use wire::handshake::Greeting;
use wire::packet::{split_packet, write_packet};
use wire::reply::com_payload;
use wire::sha2_rsa::RsaPublic;

mod stream;

pub use stream::Stream;

/// Why a blocking login to a backend failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// TCP connect, read or write failed (refused, timed out, reset).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The server sent an ERR instead of its greeting (too many connections,
    /// host blocked): it refused before any login.
    #[error("server refused the connection: {0}")]
    Refused(LoginError),
    /// The login itself failed: the credentials were refused, the server
    /// wants another plugin, or it answered something unexpected.
    #[error("{0}")]
    Login(LoginError),
    /// `--backend-tls`: the configuration (CA file) or the handshake
    /// failed (a certificate that does not verify, no common protocol).
    #[error("{0}")]
    Tls(String),
}

/// Whom to log in as, where, and how.
pub struct LoginTarget<'a> {
    pub addr: SocketAddr,
    pub user: &'a str,
    pub password: &'a [u8],
    pub tls: &'a Option<BackendTlsConfig>,
    /// Names the TLS settings in a TLS error ("--backend-tls required").
    pub tls_flags: String,
    /// `--backend-rsa-public-key`, for caching_sha2_password over plain TCP.
    pub server_key: Option<Arc<RsaPublic>>,
    /// For the connect, and for the whole login.
    pub timeout: Duration,
}

/// An open, logged-in connection.
pub struct LoggedIn {
    pub stream: Stream,
    pub greeting: Greeting,
    /// The greeting offers TLS (CLIENT_SSL).
    pub tls_offered: bool,
    /// Bytes read past the login's last packet (none from a server that
    /// waits for a command).
    pub buf: Vec<u8>,
}

impl LoggedIn {
    /// COM_QUIT, best effort: the caller is done either way.
    pub fn quit(mut self) {
        let mut quit = Vec::with_capacity(5);
        write_packet(&mut quit, 0, &com_payload(COM_QUIT, &[]));
        let _ = self.stream.write_all(&quit);
    }
}

/// Connects and logs in.
pub fn login(t: &LoginTarget<'_>) -> Result<LoggedIn, BackendError> {
    let deadline = Instant::now() + t.timeout;
    let sock = TcpStream::connect_timeout(&t.addr, t.timeout)?;
    sock.set_write_timeout(Some(t.timeout))?;
    let mut s = Stream::Plain(sock);
    let mut login = ClientLogin::new(LoginParams {
        user: t.user.to_owned(),
        credential: Credential::Plaintext(t.password.to_vec()),
        database: None,
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    })
    .with_full_auth_transport(FullAuthTransport {
        secure: false,
        server_key: t.server_key.clone(),
    })
    .with_tls(tls_wish(t.tls));
    let mut buf = Vec::new();
    let mut greeted = false;
    let mut tls_offered = false;
    loop {
        let (seq, payload) = read_packet(&mut s, &mut buf, deadline)?;
        if !greeted {
            tls_offered = greeting_offers_tls(&payload);
        }
        let mut step = login.on_packet(seq, &payload);
        if let Ok(LoginStep::StartTls(ssl_request)) = step {
            greeted = true;
            s = start_tls(s, &ssl_request, t.tls, &t.tls_flags)?;
            step = login.on_tls_established();
        }
        match step {
            Ok(LoginStep::Send(bytes)) => {
                greeted = true;
                s.write_all(&bytes)?;
            }
            Ok(LoginStep::Wait) => {}
            Ok(LoginStep::StartTls(_)) => {
                return Err(BackendError::Tls("a second TLS request".into()))
            }
            Ok(LoginStep::Done { greeting, .. }) => {
                return Ok(LoggedIn {
                    stream: s,
                    greeting,
                    tls_offered,
                    buf,
                })
            }
            Err(e @ LoginError::Server { .. }) if !greeted => return Err(BackendError::Refused(e)),
            Err(e) => return Err(BackendError::Login(e)),
        }
    }
}

pub fn tls_wish(tls: &Option<BackendTlsConfig>) -> TlsWish {
    match tls {
        None => TlsWish::Off,
        Some(t) if t.required() => TlsWish::Required,
        Some(_) => TlsWish::Preferred,
    }
}

/// Writes the SSLRequest and runs the TLS handshake; `flags` names the
/// settings in an error.
pub fn start_tls(
    mut s: Stream,
    ssl_request: &[u8],
    tls: &Option<BackendTlsConfig>,
    flags: &str,
) -> Result<Stream, BackendError> {
    s.write_all(ssl_request)?;
    let Some(tls) = tls else {
        return Err(BackendError::Tls(
            "TLS asked for without a configuration".into(),
        ));
    };
    s.start_tls(tls)
        .map_err(|e| BackendError::Tls(format!("{e} ({flags})")))
}

/// Reads one whole packet: (sequence id, payload), by `deadline`. Login
/// and probe packets are small, so a physical packet is all that is ever
/// needed.
pub fn read_packet(
    s: &mut Stream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<(u8, Vec<u8>), std::io::Error> {
    use std::io::{Error, ErrorKind};
    loop {
        if let Some((p, used)) = split_packet(buf) {
            let out = (p.seq, p.payload.to_vec());
            buf.drain(..used);
            return Ok(out);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::new(
                ErrorKind::TimedOut,
                "timed out waiting for the server",
            ));
        }
        s.tcp().set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) => {
                return Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // What a read timeout looks like on a socket (EAGAIN).
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    "timed out waiting for the server",
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

pub fn greeting_offers_tls(payload: &[u8]) -> bool {
    wire::handshake::parse_greeting(payload)
        .is_ok_and(|g| g.capabilities & wire::constants::CLIENT_SSL != 0)
}

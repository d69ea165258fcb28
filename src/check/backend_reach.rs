//! The backend check: reach `--backend`, speak its TLS mode, and (shared identity) log in with
//! the same client login code the proxy's backend connections use; with passthrough identity
//! only the greeting is read, since each client logs in as itself.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::tls::Stream;
use super::Item;
use crate::config::{BackendIdentity, Config};
use crate::tls::backend_client::{self, BackendTlsConfig};
use wire::auth::Credential;
use wire::client_login::{ClientLogin, LoginError, LoginParams, LoginStep, TlsWish};
use wire::client_sha2::FullAuthTransport;
use wire::constants::{COM_QUIT, NATIVE_LOGIN_CAPS, UTF8MB4_GENERAL_CI};
use wire::packet::{split_packet, write_packet};
use wire::reply::com_payload;
use wire::sha2_rsa::RsaPublic;

/// Why `ringgate check` could not log into the backend.
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

/// What a successful check connection learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSummary {
    pub server_version: String,
    /// The greeting offers TLS (CLIENT_SSL).
    pub tls_offered: bool,
    /// TLS in use ("TLSv1.3, TLS13_…"), None for plain.
    pub tls: Option<String>,
}

impl BackendSummary {
    /// "; TLS offered, used (TLSv1.3, …)" for the report.
    fn tls_words(&self, cfg: &Config) -> String {
        let offer = if self.tls_offered {
            "offers TLS"
        } else {
            "does not offer TLS"
        };
        match &self.tls {
            Some(t) => format!(
                "; the server {offer}; TLS in use ({t}, --backend-tls {})",
                cfg.backend_tls
            ),
            None => format!(
                "; the server {offer}; no TLS (--backend-tls {})",
                cfg.backend_tls
            ),
        }
    }
}

/// `--backend-tls`, as the proxy will read it.
pub(super) fn backend_tls_config(cfg: &Config) -> Result<Option<BackendTlsConfig>, BackendError> {
    backend_client::client_config(
        cfg.backend_tls,
        cfg.backend_tls_ca.as_deref(),
        cfg.backend.ip(),
    )
    .map_err(|e| BackendError::Tls(e.to_string()))
}

pub(super) fn tls_wish(tls: &Option<BackendTlsConfig>) -> TlsWish {
    match tls {
        None => TlsWish::Off,
        Some(t) if t.required() => TlsWish::Required,
        Some(_) => TlsWish::Preferred,
    }
}

/// Writes the SSLRequest and runs the TLS handshake.
pub(super) fn start_tls(
    s: Stream,
    ssl_request: &[u8],
    tls: &Option<BackendTlsConfig>,
    cfg: &Config,
) -> Result<Stream, BackendError> {
    let mut s = s;
    s.write_all(ssl_request)?;
    let Some(tls) = tls else {
        return Err(BackendError::Tls(
            "TLS asked for without a configuration".into(),
        ));
    };
    s.start_tls(tls).map_err(|e| {
        BackendError::Tls(format!(
            "{} (--backend-tls {}{})",
            e,
            cfg.backend_tls,
            cfg.backend_tls_ca
                .as_ref()
                .map(|p| format!(", --backend-tls-ca {}", p.display()))
                .unwrap_or_default()
        ))
    })
}

/// Reads one whole packet: (sequence id, payload). Login packets are small,
/// so a physical packet is all that is ever needed.
pub(super) fn read_packet(
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

/// Logs into the backend with the login code the pool's connections use
/// ([`ClientLogin`]), over a blocking socket (TLS after the SSLRequest
/// with `--backend-tls`), then quits.
pub fn backend_login(cfg: &Config, timeout: Duration) -> Result<BackendSummary, BackendError> {
    let deadline = Instant::now() + timeout;
    let tls = backend_tls_config(cfg)?;
    let sock = TcpStream::connect_timeout(&cfg.backend, timeout)?;
    sock.set_write_timeout(Some(timeout))?;
    let mut s = Stream::Plain(sock);
    let mut login = ClientLogin::new(LoginParams {
        user: cfg.backend_user.clone(),
        credential: Credential::Plaintext(cfg.backend_password.as_bytes().to_vec()),
        database: None,
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    })
    .with_full_auth_transport(FullAuthTransport {
        secure: false,
        server_key: backend_public_key(cfg)?,
    })
    .with_tls(tls_wish(&tls));
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
            s = start_tls(s, &ssl_request, &tls, cfg)?;
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
                // COM_QUIT, best effort: the check is over either way.
                let mut quit = Vec::with_capacity(5);
                write_packet(&mut quit, 0, &com_payload(COM_QUIT, &[]));
                let _ = s.write_all(&quit);
                return Ok(BackendSummary {
                    server_version: greeting.server_version,
                    tls_offered,
                    tls: s.tls_summary(),
                });
            }
            Err(e @ LoginError::Server { .. }) if !greeted => return Err(BackendError::Refused(e)),
            Err(e) => return Err(BackendError::Login(e)),
        }
    }
}

pub(super) fn greeting_offers_tls(payload: &[u8]) -> bool {
    wire::handshake::parse_greeting(payload)
        .is_ok_and(|g| g.capabilities & wire::constants::CLIENT_SSL != 0)
}

/// `--backend-rsa-public-key`, read as the proxy reads it at start-up.
pub(super) fn backend_public_key(cfg: &Config) -> Result<Option<Arc<RsaPublic>>, BackendError> {
    cfg.backend_rsa_public_key
        .as_deref()
        .map(|path| {
            RsaPublic::load(path)
                .map(Arc::new)
                .map_err(|e| BackendError::Login(LoginError::Rsa(e.to_string())))
        })
        .transpose()
}

/// With passthrough identity ringgate has no account of its own to log in
/// as: read the greeting, check that it is one ringgate can log in to (the
/// same checks the login machine makes), with `--backend-tls` run the TLS
/// handshake (which verifies the certificate), and hang up.
pub fn backend_greeting(cfg: &Config, timeout: Duration) -> Result<BackendSummary, BackendError> {
    let deadline = Instant::now() + timeout;
    let tls = backend_tls_config(cfg)?;
    let sock = TcpStream::connect_timeout(&cfg.backend, timeout)?;
    sock.set_write_timeout(Some(timeout))?;
    let mut s = Stream::Plain(sock);
    let mut login = ClientLogin::new(LoginParams {
        user: String::new(),
        credential: Credential::Plaintext(Vec::new()),
        database: None,
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    })
    .with_tls(tls_wish(&tls));
    let (seq, payload) = read_packet(&mut s, &mut Vec::new(), deadline)?;
    let step = match login.on_packet(seq, &payload) {
        Ok(step) => step,
        Err(e @ LoginError::Server { .. }) => return Err(BackendError::Refused(e)),
        Err(e) => return Err(BackendError::Login(e)),
    };
    if let LoginStep::StartTls(ssl_request) = step {
        s = start_tls(s, &ssl_request, &tls, cfg)?;
    }
    Ok(BackendSummary {
        server_version: wire::handshake::parse_greeting(&payload)
            .map(|g| g.server_version)
            .unwrap_or_default(),
        tls_offered: greeting_offers_tls(&payload),
        tls: s.tls_summary(),
    })
}

pub(super) fn check_backend(cfg: &Config) -> Item {
    let what = "backend";
    let timeout = cfg
        .backend_connect_timeout
        .clamp(Duration::from_secs(1), Duration::from_secs(10));
    if cfg.backend_identity == BackendIdentity::Passthrough {
        return check_backend_greeting(cfg, timeout);
    }
    let user = &cfg.backend_user;
    match backend_login(cfg, timeout) {
        Ok(b) => Item::ok(
            what,
            format!(
                "{} reachable, logged in as '{user}' (server {}){}",
                cfg.backend,
                b.server_version,
                b.tls_words(cfg)
            ),
        ),
        Err(e @ BackendError::Tls(_)) => tls_failure(cfg, &e),
        Err(BackendError::Login(e @ LoginError::TlsUnavailable(_))) => tls_failure(cfg, &e),
        Err(e @ (BackendError::Io(_) | BackendError::Refused(_))) => before_login_failure(cfg, &e),
        Err(BackendError::Login(e @ LoginError::Server { .. })) => Item::fail(
            what,
            format!(
                "{} refused --backend-user '{user}': login refused: {e}",
                cfg.backend
            ),
            format!(
                "check --backend-user and RINGGATE_BACKEND_PASSWORD; on the server: \
                 CREATE USER '{user}'@'<ringgate host>' IDENTIFIED WITH mysql_native_password \
                 BY '...' and GRANT it what clients need"
            ),
        ),
        Err(BackendError::Login(e @ LoginError::UnsupportedPlugin(_))) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            format!(
                "ALTER USER '{user}'@'<ringgate host>' IDENTIFIED WITH caching_sha2_password \
                 BY '...' (or mysql_native_password)"
            ),
        ),
        Err(BackendError::Login(
            e @ (LoginError::Rsa(_)
            | LoginError::Sha2WithoutSha2Hash
            | LoginError::FullAuthWithoutPassword),
        )) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            "caching_sha2_password full authentication over plain TCP sends the password \
             RSA-encrypted: check --backend-rsa-public-key (the server's public_key.pem), or \
             leave it unset to ask the server for its key",
        ),
        Err(e @ BackendError::Login(LoginError::Protocol { .. })) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            "is --backend a MySQL/MariaDB server?",
        ),
    }
}

pub(super) fn tls_failure(cfg: &Config, e: &dyn std::fmt::Display) -> Item {
    Item::fail(
        "backend",
        format!("{}: {e}", cfg.backend),
        "check --backend-tls and --backend-tls-ca against the server's ssl-cert/ssl-ca (its \
         certificate must chain to --backend-tls-ca; verify-identity also needs the --backend \
         address in its subjectAltName), or use --backend-tls preferred",
    )
}

/// The backend failures that come before any login, the same whether
/// `check` logs in (shared identity) or only reads the greeting.
pub(super) fn before_login_failure(cfg: &Config, e: &BackendError) -> Item {
    let what = "backend";
    match e {
        BackendError::Io(_) => Item::fail(
            what,
            format!("cannot reach {}: {e}", cfg.backend),
            "start the server, or fix --backend; check firewalls between this host and it",
        ),
        // Refused: the callers pass only these two variants.
        _ => Item::fail(
            what,
            format!("{} {e}", cfg.backend),
            "the server refused before login (too many connections? host blocked? \
             `FLUSH HOSTS` clears a host blocked by max_connect_errors)",
        ),
    }
}

pub(super) fn check_backend_greeting(cfg: &Config, timeout: Duration) -> Item {
    let what = "backend";
    match backend_greeting(cfg, timeout) {
        Ok(b) => Item::ok(
            what,
            format!(
                "{} reachable (server {}){}; --backend-identity passthrough: each client \
                 logs in as itself, so no login was tried",
                cfg.backend,
                b.server_version,
                b.tls_words(cfg)
            ),
        ),
        Err(e @ BackendError::Tls(_)) => tls_failure(cfg, &e),
        Err(BackendError::Login(e @ LoginError::TlsUnavailable(_))) => tls_failure(cfg, &e),
        Err(e @ (BackendError::Io(_) | BackendError::Refused(_))) => before_login_failure(cfg, &e),
        Err(e @ BackendError::Login(_)) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            "is --backend a MySQL/MariaDB server?",
        ),
    }
}

//! The backend check: reach `--backend`, speak its TLS mode, and (shared identity) log in with
//! the same client login code the proxy's backend connections use; with passthrough identity
//! only the greeting is read, since each client logs in as itself.

use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Item;
use crate::blocking_login::{
    self, greeting_offers_tls, read_packet, start_tls, tls_wish, BackendError, LoginTarget, Stream,
};
use crate::config::{BackendIdentity, Config};
use crate::tls::backend_client::{self, BackendTlsConfig};
use wire::auth::Credential;
use wire::client_login::{ClientLogin, LoginError, LoginParams, LoginStep};
use wire::constants::{NATIVE_LOGIN_CAPS, UTF8MB4_GENERAL_CI};
use wire::sha2_rsa::RsaPublic;

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

/// `--backend-tls` and `--backend-tls-ca` as a TLS error names them.
fn tls_flags(cfg: &Config) -> String {
    format!(
        "--backend-tls {}{}",
        cfg.backend_tls,
        cfg.backend_tls_ca
            .as_ref()
            .map(|p| format!(", --backend-tls-ca {}", p.display()))
            .unwrap_or_default()
    )
}

/// Logs into the backend with the login code the pool's connections use
/// ([`ClientLogin`]), over a blocking socket (TLS after the SSLRequest
/// with `--backend-tls`), then quits.
pub fn backend_login(cfg: &Config, timeout: Duration) -> Result<BackendSummary, BackendError> {
    let tls = backend_tls_config(cfg)?;
    let conn = blocking_login::login(&LoginTarget {
        addr: cfg.backend,
        user: &cfg.backend_user,
        password: cfg.backend_password.as_bytes(),
        tls: &tls,
        tls_flags: tls_flags(cfg),
        server_key: backend_public_key(cfg)?,
        timeout,
    })?;
    let summary = BackendSummary {
        server_version: conn.greeting.server_version.clone(),
        tls_offered: conn.tls_offered,
        tls: conn.stream.tls_summary(),
    };
    conn.quit();
    Ok(summary)
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
        s = start_tls(s, &ssl_request, &tls, &tls_flags(cfg))?;
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
        Err(e) => reach_failure(cfg, &e).unwrap_or_else(|| login_failure(cfg, e)),
    }
}

/// Why `check` could not log in as `--backend-user`, once the server was
/// reached (the failures before that are [`reach_failure`]'s).
fn login_failure(cfg: &Config, e: BackendError) -> Item {
    let what = "backend";
    let user = &cfg.backend_user;
    match e {
        BackendError::Login(e @ LoginError::Server { .. }) => Item::fail(
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
        BackendError::Login(e @ LoginError::UnsupportedPlugin(_)) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            format!(
                "ALTER USER '{user}'@'<ringgate host>' IDENTIFIED WITH caching_sha2_password \
                 BY '...' (or mysql_native_password)"
            ),
        ),
        BackendError::Login(
            e @ (LoginError::Rsa(_)
            | LoginError::Sha2WithoutSha2Hash
            | LoginError::FullAuthWithoutPassword),
        ) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            "caching_sha2_password full authentication over plain TCP sends the password \
             RSA-encrypted: check --backend-rsa-public-key (the server's public_key.pem), or \
             leave it unset to ask the server for its key",
        ),
        // The rest were taken by reach_failure: listed, so that a new
        // variant must be placed.
        e @ (BackendError::Login(LoginError::Protocol { .. } | LoginError::TlsUnavailable(_))
        | BackendError::Tls(_)
        | BackendError::Io(_)
        | BackendError::Refused(_)) => Item::fail(
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
        Err(e) => reach_failure(cfg, &e).unwrap_or_else(|| {
            Item::fail(
                what,
                format!("{}: {e}", cfg.backend),
                "is --backend a MySQL/MariaDB server?",
            )
        }),
    }
}

/// The failures that read the same whether `check` logs in or only reads
/// the greeting: TLS, and everything before the login.
fn reach_failure(cfg: &Config, e: &BackendError) -> Option<Item> {
    match e {
        BackendError::Tls(_) => Some(tls_failure(cfg, e)),
        BackendError::Login(l @ LoginError::TlsUnavailable(_)) => Some(tls_failure(cfg, l)),
        BackendError::Io(_) | BackendError::Refused(_) => Some(before_login_failure(cfg, e)),
        BackendError::Login(_) => None,
    }
}

//! The proxy: per-worker event loops that accept clients, log them in,
//! lease them a pooled backend connection and relay bytes between the two.
//!
//! Sans-IO machines on a thin driver (docs/architecture.md has the picture):
//! - [`session`]: one client (greeting, login, waiting, relay, closing);
//! - [`relay`]: one session paired with its backend, full duplex;
//! - [`client_leg`]: the transform between the client's socket and the
//!   plain packet stream (the compressed protocol), when negotiated;
//! - [`backend`]: one backend connection (connect, login, idle, leased,
//!   resetting, closing);
//! - [`pool`]: the backend connections, the idle list and the waiters;
//! - [`worker`]: the driver, the only code that touches the ring; it maps
//!   completions to machines, submits what they return, and owns the fds
//!   ([`conn_io`]).
//!
//! Leaf types shared by the machines live in [`ids`]; [`presentation`]
//! decides how the greeting presents the proxy (MySQL or MariaDB);
//! [`identity`] maps a pool key's backend identity to its account and
//! credential; `slab` stores
//! sessions and backends with generations. No machine imports another
//! except the session, which owns its relay, and the pool, which owns its
//! backend connections.

mod backend;
mod client_charset;
mod client_leg;
mod conn_io;
mod connect_attrs;
mod identity;
mod idle_cut;
mod ids;
mod listen;
mod multiplex;
mod pool;
pub use pool::BackendShare;
mod presentation;
pub mod registry;
mod relay;
mod session;
mod slab;
mod statement_limits;
mod statements;
pub mod tls_leg;
mod tx_settings;
pub mod worker;

#[cfg(test)]
mod test_packets;

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::metrics::Metrics;
use crate::mysql::sha2_rsa::{RsaPrivate, RsaPublic};
use crate::mysql::Users;

/// The little state every worker sees. Everything else is per worker.
///
/// Cross-thread state is the exception, and each field says why it must be
/// global: limits that the operator sets for the whole process, the users
/// (reloaded in one place), and the shutdown flag.
pub struct Shared {
    pub config: Config,
    pub metrics: Arc<Metrics>,
    /// `--users-file`; swapped whole on reload, read once per login.
    pub users: RwLock<Arc<Users>>,
    /// Open client sessions across workers, against `--max-connections`.
    pub clients: AtomicUsize,
    /// Open (or opening) backend connections across workers, against
    /// `--backend-max-connections`.
    /// `--backend-max-connections`, and each worker's demand, so that the
    /// workers' pools share it by need (`pool_share.rs`).
    pub backends: Arc<pool::BackendShare>,
    /// Set by SIGTERM/SIGINT: stop accepting and drain.
    pub shutdown: AtomicBool,
    /// Proxy connection id → user and backend thread, for KILL: a KILL
    /// arrives on any worker, the session it names lives on one.
    pub registry: Arc<registry::Registry>,
    /// `--rsa-key`: caching_sha2 full authentication over plain TCP.
    pub rsa_key: Option<Arc<RsaPrivate>>,
    /// `--backend-rsa-public-key`.
    pub backend_rsa_public_key: Option<Arc<RsaPublic>>,
    /// Front-end TLS (`--tls-cert`, `--tls-key`); its config is swapped
    /// whole on SIGHUP and read once per SSLRequest.
    pub tls: Option<crate::tls::TlsState>,
    /// `--backend-tls` (None: disabled): the rustls client configuration
    /// every backend connection's TLS handshake uses.
    pub backend_tls: Option<crate::backend_tls::BackendTlsConfig>,
}

impl Shared {
    pub fn users(&self) -> Arc<Users> {
        match self.users.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }
}

/// Reserve one unit of a global limit; false when it is reached.
fn try_reserve(counter: &AtomicUsize, max: usize) -> bool {
    use std::sync::atomic::Ordering::{AcqRel, Acquire};
    counter
        .fetch_update(AcqRel, Acquire, |n| (n < max).then_some(n + 1))
        .is_ok()
}

fn unreserve(counter: &AtomicUsize) {
    counter.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
}

/// At most a few log lines per second for per-connection failures, so a
/// storm of bad clients cannot flood the disk.
#[derive(Default)]
struct LogLimiter {
    window_start: Option<Instant>,
    count: u32,
}

impl LogLimiter {
    const WINDOW: Duration = Duration::from_secs(1);
    const PER_WINDOW: u32 = 20;

    fn allow(&mut self, now: Instant) -> bool {
        match self.window_start {
            Some(t) if now.duration_since(t) < Self::WINDOW => {
                self.count += 1;
                self.count <= Self::PER_WINDOW
            }
            _ => {
                self.window_start = Some(now);
                self.count = 1;
                true
            }
        }
    }
}

/// `--backend-max-prepared`, or its default (see `backend_statements.rs`).
pub fn backend_max_prepared(cfg: &crate::config::Config) -> usize {
    match cfg.backend_max_prepared {
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => backend::statements::default_max_prepared(
            backend::statements::MARIADB_MAX_PREPARED_STMT_COUNT,
            cfg.backend_max_connections as u64,
        ),
    }
}

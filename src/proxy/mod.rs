//! The driver's shared state and its worker: per-worker event loops that
//! accept clients, carry out what the machines (the `machines` crate) decide,
//! and own every fd ([`conn_io`]).

mod conn_io;
mod listen;
pub mod switchover;
pub mod worker;

pub use machines::pool::BackendShare;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, RwLock};

use crate::config::Config;
use metrics::Metrics;
use wire::sha2_rsa::{RsaPrivate, RsaPublic};
use wire::Users;

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
    /// workers' pools share it by need (`crates/machines/src/pool/share.rs`).
    pub backends: Arc<machines::pool::BackendShare>,
    /// The monitor's published view of the servers (several `--backend`s);
    /// None with one server.
    pub cluster: Option<Arc<crate::monitor::ClusterViewCell>>,
    /// SIGUSR1's switchover hold (`switchover.rs`).
    pub switchover: switchover::SwitchoverHold,
    /// Set by SIGTERM/SIGINT: stop accepting and drain.
    pub shutdown: AtomicBool,
    /// Proxy connection id → user and backend thread, for KILL: a KILL
    /// arrives on any worker, the session it names lives on one.
    pub registry: Arc<machines::registry::Registry>,
    /// `--rsa-key`: caching_sha2 full authentication over plain TCP.
    pub rsa_key: Option<Arc<RsaPrivate>>,
    /// `--backend-rsa-public-key`.
    pub backend_rsa_public_key: Option<Arc<RsaPublic>>,
    /// Front-end TLS (`--tls-cert`, `--tls-key`); its config is swapped
    /// whole on SIGHUP and read once per SSLRequest.
    pub tls: Option<crate::tls::TlsState>,
    /// `--backend-tls` (None: disabled): the rustls client configuration
    /// every backend connection's TLS handshake uses.
    pub backend_tls: Option<crate::tls::backend_client::BackendTlsConfig>,
    /// `--read-only-functions`, upper-cased, for every session's lexer;
    /// `'static` as the lexer's options want it (made once, at start).
    pub read_only_functions: &'static [Box<str>],
    /// Every `--backend` address, in configured order: the pool's server
    /// numbers index it (named in what a client is told of a lost server).
    pub server_addrs: Box<[std::net::SocketAddr]>,
    /// `--causal-reads`, with global mode's position, which every worker's
    /// sessions raise and read (`crates/machines/src/causal.rs`).
    pub causal: machines::causal::CausalConfig,
}

impl Shared {
    pub fn users(&self) -> Arc<Users> {
        match self.users.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }
}

/// `--backend-max-prepared`, or its default (see `crates/machines/src/backend/server_prepared.rs`).
pub fn backend_max_prepared(cfg: &crate::config::Config) -> usize {
    match cfg.backend_max_prepared {
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => machines::backend::server_prepared::default_max_prepared(
            machines::backend::server_prepared::MARIADB_MAX_PREPARED_STMT_COUNT,
            cfg.backend_max_connections as u64,
        ),
    }
}

/// A completion queue entry's result as the machines take it: the kernel's
/// `-errno` convention read once, here, so that no machine needs errno
/// numbers. -ECANCELED is the driver's own cancel or a linked timeout.
pub(crate) fn completion(res: i32) -> machines::completion::Completion {
    use machines::completion::Completion;
    match res {
        n if n >= 0 => Completion::Done(n as usize),
        n if n == -libc::ECANCELED => Completion::Cancelled,
        n => Completion::Failed(-n),
    }
}

/// A write's completion as its machine reads it: a write that moved no
/// byte (the kernel's 0, not an error) means the peer accepts nothing
/// more, and fails the write.
pub(crate) fn written(res: machines::completion::Completion) -> machines::completion::Completion {
    use machines::completion::{Completion, Fault};
    match res {
        Completion::Done(0) => Completion::Fault(Fault::WroteNothing),
        res => res,
    }
}

//! The servers a run measures (ringgate, HAProxy, MariaDB directly) and the MariaDB behind
//! them.

use std::net::SocketAddr;
use std::path::PathBuf;

use mysql_async::{Opts, OptsBuilder};

/// The suffix of a baseline twin's name: `tx@base` is `tx` run by the baseline binary
/// (`--baseline-bin`), with the same flags, in the same rounds.
pub const BASELINE_SUFFIX: &str = "@base";

/// The target a name stands for: `tx` for both `tx` and `tx@base`. Flags, buffer mode and
/// ports follow from it, so a twin differs from its target in the binary only.
pub fn own_name(name: &str) -> &str {
    name.strip_suffix(BASELINE_SUFFIX).unwrap_or(name)
}

/// Is this target the baseline binary's twin of another?
pub fn is_baseline(name: &str) -> bool {
    name.ends_with(BASELINE_SUFFIX)
}

/// What sits behind a target's port, and where its counters are read.
#[derive(Clone, Debug)]
pub enum Kind {
    Ringgate { metrics: SocketAddr },
    Haproxy { stats_sock: PathBuf },
    Direct,
}

/// One server the cells run against.
#[derive(Clone, Debug)]
pub struct Target {
    pub name: String,
    pub ep: Endpoint,
    pub kind: Kind,
    /// The proxy process (none for direct).
    pub pid: Option<u32>,
}

/// The MariaDB every target leads to, and the account the bench administers it with.
pub struct Backend {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    /// mariadbd's pid, for its CPU time (when its pid file is readable).
    pub pid: Option<u32>,
}

impl Backend {
    pub fn endpoint(&self, db: &str) -> Endpoint {
        Endpoint {
            host: self.host.clone(),
            port: self.port,
            user: self.user.clone(),
            password: self.password.clone(),
            db: db.into(),
        }
    }
}

impl Target {
    /// The same target on another port (HAProxy listens in front of the backend's account).
    pub fn with_port(mut self, port: u16) -> Target {
        self.ep.port = port;
        self
    }
}

/// Where and as whom to connect.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub db: String,
}

impl Endpoint {
    pub fn opts(&self) -> Opts {
        OptsBuilder::default()
            .ip_or_hostname(self.host.clone())
            .tcp_port(self.port)
            .user(Some(self.user.clone()))
            .pass(Some(self.password.clone()))
            .db_name(Some(self.db.clone()))
            // Without this, mysql_async asks for @@socket on a loopback connection and
            // silently reconnects to the *backend's* unix socket, bypassing the proxy.
            .prefer_socket(false)
            .into()
    }
}

//! The label values of the metric families: buffer modes, refusal
//! reasons, authentication paths, backend TLS errors, the internal query
//! kinds of transaction pooling and the pin reasons. Each enum indexes its
//! family's per-worker counter array; the exposition writes the names.

use std::fmt;

/// Where read buffers come from. Exported as the `mode` label so dashboards
/// can tell a pool-backed run from one that fell back to the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferMode {
    /// Kernel-registered fixed buffers (`IORING_REGISTER_BUFFERS`).
    Fixed,
    /// Plain heap buffers (registration unavailable or disabled).
    Heap,
    /// A provided-buffer ring per worker, filled by multishot receives.
    Ring,
}

impl BufferMode {
    /// Label value used in the exposition (`"fixed"` / `"heap"`).
    pub fn as_str(self) -> &'static str {
        match self {
            BufferMode::Fixed => "fixed",
            BufferMode::Heap => "heap",
            BufferMode::Ring => "ring",
        }
    }

    pub(super) fn to_u8(self) -> u8 {
        match self {
            BufferMode::Fixed => 0,
            BufferMode::Heap => 1,
            BufferMode::Ring => 2,
        }
    }

    pub(super) fn from_u8(v: u8) -> BufferMode {
        match v {
            0 => BufferMode::Fixed,
            2 => BufferMode::Ring,
            _ => BufferMode::Heap,
        }
    }
}

impl fmt::Display for BufferMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a client connection was turned away. Each reason is its own series of
/// `ringgate_client_rejected_total` so an auth storm is distinguishable from
/// capacity exhaustion or a dead backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Credentials refused.
    Auth,
    /// `max_connections` reached.
    MaxConnections,
    /// Malformed or timed-out handshake.
    Handshake,
    /// No backend connection could be obtained.
    BackendUnavailable,
    /// The backend refused the user's own account (passthrough identity):
    /// the client got the server's ERR.
    BackendAuth,
    /// `--require-secure-transport`: a TCP login without TLS (ERR 3159).
    InsecureTransport,
    /// Several servers: no writer within `--writer-wait-timeout` (ERR
    /// 1105); a login ends, a parked session's statement is refused and
    /// the session stays.
    NoWriter,
}

impl RejectReason {
    /// Every reason, in exposition order (also the index order of
    /// [`crate::Snapshot::client_rejected_total`]).
    pub const ALL: [RejectReason; 7] = [
        RejectReason::Auth,
        RejectReason::MaxConnections,
        RejectReason::Handshake,
        RejectReason::BackendUnavailable,
        RejectReason::BackendAuth,
        RejectReason::InsecureTransport,
        RejectReason::NoWriter,
    ];

    /// Label value used in the exposition.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Auth => "auth",
            RejectReason::MaxConnections => "max_connections",
            RejectReason::Handshake => "handshake",
            RejectReason::BackendUnavailable => "backend_unavailable",
            RejectReason::BackendAuth => "backend_auth",
            RejectReason::InsecureTransport => "insecure_transport",
            RejectReason::NoWriter => "no_writer",
        }
    }

    /// Index into `client_rejected_total` arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How a login was authenticated (`ringgate_client_auth_total{path}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthPath {
    Native,
    Sha2Fast,
    Sha2Full,
    /// mysql_clear_password, over TLS or the unix socket.
    Clear,
}

impl AuthPath {
    pub const ALL: [AuthPath; 4] = [
        AuthPath::Native,
        AuthPath::Sha2Fast,
        AuthPath::Sha2Full,
        AuthPath::Clear,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AuthPath::Native => "native",
            AuthPath::Sha2Fast => "caching_sha2_fast",
            AuthPath::Sha2Full => "caching_sha2_full",
            AuthPath::Clear => "clear_password",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `reason` labels of `ringgate_backend_tls_errors_total`.
pub const BACKEND_TLS_ERRORS: [&str; 3] = ["unavailable", "handshake", "record"];
/// Index into [`BACKEND_TLS_ERRORS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendTlsError {
    /// `required` or stricter, and the server's greeting offers no TLS.
    Unavailable = 0,
    /// The handshake failed (certificate refused, protocol error).
    Handshake = 1,
    /// A record did not decode (or could not be sealed) after the handshake.
    Record = 2,
}

/// The `kind` labels of `ringgate_internal_queries_total`: statements
/// transaction pooling runs on a backend connection for a session, besides
/// the session's own (see [`InternalQuery`]).
pub const INTERNAL_QUERY_KINDS: [&str; 4] = [
    "init_db",
    "settings",
    "last_insert_id_set",
    "last_insert_id_read",
];

/// Indexes into [`INTERNAL_QUERY_KINDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InternalQuery {
    /// COM_INIT_DB of the session's schema on lease.
    InitDb = 0,
    /// One `SET` of the settings that differ, on lease.
    Settings = 1,
    /// `DO LAST_INSERT_ID(n)` on lease.
    LastInsertIdSet = 2,
    /// `SELECT LAST_INSERT_ID()` before the connection goes back.
    LastInsertIdRead = 3,
}

/// The `held` labels of `ringgate_sessions_idle_cut_total`, in the order
/// of `machines::idle_cut::Held::index`.
pub const IDLE_CUT_HELD: [&str; 2] = ["transaction", "pinned"];

/// The `outcome` labels of `ringgate_writer_lost_total`, in the order of
/// `machines::session::LostOutcome::index`.
pub const WRITER_LOST_OUTCOMES: [&str; 5] =
    ["rolled_back", "pinned", "unknown", "none", "replayed"];

/// The `outcome` labels of `ringgate_transaction_replays_total`, in the
/// order of `machines::session::ReplayResult::index`.
pub const TRANSACTION_REPLAY_OUTCOMES: [&str; 4] = ["replayed", "mismatch", "failed", "too_large"];

/// The `reason` labels of `ringgate_sessions_pinned_total`, in the order
/// of `machines::multiplex::PinReason::ALL` (a unit test there checks it).
pub const PIN_REASONS: [&str; 17] = [
    "user_variable",
    "temporary_table",
    "lock_function",
    "lock_tables",
    "flush_read_lock",
    "found_rows",
    "text_prepare",
    "prepared_statement",
    "multi_statement",
    "state_change",
    "set_option",
    "session_command",
    "unclassified",
    "too_many_settings",
    "compressed_client",
    "previous_statement_state",
    "stored_function",
];

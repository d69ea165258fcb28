//! Leaf types that the proxy's machines share: the ids that name sessions
//! and backend connections, the pool key, and a queued lease request. They
//! import nothing from the machines, so no machine imports another.

pub use wire::client_login::TlsWish;

pub use crate::tx_settings::Settings;

use wire::constants::{
    CLIENT_MULTI_RESULTS, CLIENT_MULTI_STATEMENTS, CLIENT_PS_MULTI_RESULTS, UTF8MB4_GENERAL_CI,
};

/// A client session: its slab index and the generation of that slot, so a
/// completion for a torn-down session never reaches the slot's next owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId {
    pub index: u32,
    pub generation: u32,
}

/// A backend connection, named like [`SessionId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendId {
    pub index: u32,
    pub generation: u32,
}

/// The backend account a connection is logged in as: an index into its
/// worker's identity table (`identity::Identities`), which holds the user
/// name and credential. A number, so that [`PoolKey`] stays `Copy` and
/// cheap to compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IdentityId(pub u32);

impl IdentityId {
    /// `--backend-identity shared`: every client is `--backend-user`.
    pub const SHARED: IdentityId = IdentityId(0);
}

/// What a pooled connection must match to be leased: the capability bits
/// fixed at the backend handshake that change what the server sends or how
/// it parses (`SESSION_KEY_CAPS`), the client's collation, the MariaDB
/// extended capabilities it negotiated (`MIRRORED_EXT_CAPS`: a client that
/// did not ask for extended metadata must never get a connection that
/// sends it), and the backend account it is logged in as (so that one
/// user's connection is never leased to another), and whether it asks the
/// server for TLS (`--backend-tls`: a TLS connection and a plain one are
/// never leased in place of each other; the pool stamps it on every key),
/// and the server it reaches: so pools are per server and user key, and
/// each server's idle list, waiters and share of the cap are apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub caps: u32,
    pub collation: u8,
    pub ext_caps: u32,
    pub identity: IdentityId,
    pub tls: TlsWish,
    /// None: the writer, whichever server that is now (the pool follows
    /// it, `pool/writer.rs`); `Some(i)`: the replica at index `i` of the
    /// `--backend` list, for reads (`--read-write-split`). Sessions keep
    /// None; the driver sets a replica on a read's lease request. A byte,
    /// so that the key stays 16 bytes (it is in every session): servers
    /// past the 256th of the list take no reads.
    pub server: Option<u8>,
}

impl PoolKey {
    /// What the pool warms up before any client has logged in (shared
    /// identity only): the multi-result settings that the common
    /// connectors all ask for.
    pub fn default_warm() -> PoolKey {
        PoolKey {
            caps: CLIENT_MULTI_STATEMENTS | CLIENT_MULTI_RESULTS | CLIENT_PS_MULTI_RESULTS,
            collation: UTF8MB4_GENERAL_CI,
            ext_caps: 0,
            identity: IdentityId::SHARED,
            tls: TlsWish::Off,
            server: None,
        }
    }
}

/// What a session asks the pool for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRequest {
    pub session: SessionId,
    pub key: PoolKey,
    /// The schema the client gave at connect. A connection with another
    /// schema can be switched (COM_INIT_DB); one with a schema cannot be
    /// given to a client that asked for none, since nothing unselects it.
    pub schema: Option<String>,
    /// Transaction pooling, a lease for a command mid-session: what the
    /// connection must run first. None at login and in session pooling.
    pub setup: Option<Box<LeaseSetup>>,
}

/// [`LeaseSetup::settings`] of a transaction-pooled login: any connection
/// of the key will do, whatever settings it carries, since the session
/// gives it back unchanged before any command runs on it.
pub const ANY_SETTINGS: u64 = u64::MAX;

/// What a connection leased for a command must run before it (transaction
/// pooling; see `multiplex.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseSetup {
    /// Fingerprint of the session's settings (0: none). A connection
    /// released by a session carries that session's fingerprint.
    pub settings: u64,
    /// The session's settings: a connection whose fingerprint is not
    /// `settings` (nor `alt`) gets the difference from its own
    /// ([`Settings::diff_from`]).
    pub wanted: Settings,
    /// Statements run before the command on whatever connection it gets.
    pub always: Vec<Vec<u8>>,
    /// LAST_INSERT_ID() the connection must return before the command
    /// (`DO LAST_INSERT_ID(n)`, skipped when the connection is known to
    /// hold `n` already).
    pub last_insert_id: Option<u64>,
    /// Another fingerprint a connection may carry and be used as it is
    /// (0: none): when the command is itself a `SET` of constants, a
    /// connection that already carries the settings it leads to gives the
    /// same state after running it again.
    pub alt: u64,
    /// Causal reads: what the command must wait for if its connection
    /// goes to a replica (`SELECT MASTER_GTID_WAIT(...)`, the last setup
    /// statement); ignored on the writer, where the wait would time out.
    pub causal: Option<crate::causal::CausalWait>,
}

//! Command-line configuration. Every flag is dashed and documented; `--help`
//! prints each one with its default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser, ValueEnum};
use serde::{Deserialize, Serialize};

mod backends;

pub use backends::{
    first_writer, parse_backend, BackendList, BackendRole, BackendSpec, BackendTable,
};

/// Which memory the per-connection read buffers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ReadBufferMode {
    /// One page-aligned region per worker, registered with its io_uring as
    /// fixed buffers; I/O uses READ_FIXED / WRITE_FIXED.
    Fixed,
    /// One heap allocation per connection; I/O uses plain READ / WRITE.
    /// The A/B baseline, and the fallback when registration fails.
    Heap,
    /// One provided-buffer ring per worker (IORING_REGISTER_PBUF_RING) of
    /// `--read-buffer-count` buffers, filled by multishot receives only when
    /// bytes arrive and forwarded with a send straight from the buffer.
    /// Falls back to `fixed` on kernels without buffer rings or multishot
    /// receive.
    Ring,
}

/// Whether clients are accepted into direct descriptors (`--direct-descriptors`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DirectDescriptors {
    /// Accept clients into each worker ring's registered file table
    /// (IORING_FILE_INDEX_ALLOC, Linux 5.19) when the kernel has it, and
    /// fall back to plain fds (one start-up warning) when it does not.
    Auto,
    /// Plain fds for every client.
    Off,
}

/// How clients appear on the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum BackendIdentity {
    /// Each client logs in to the backend as itself (or as the account its
    /// users-file entry names in `BackendUser`), so the server's own
    /// privileges, PROCESSLIST and KILL rules apply to it.
    Passthrough,
    /// Every client runs as `--backend-user`: each can see and KILL the
    /// others' queries and has that account's privileges.
    Shared,
}

/// TLS towards the backend (`--backend-tls`), as MySQL's `--ssl-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum BackendTls {
    /// No TLS.
    Disabled,
    /// TLS if the server offers it, else plain; the certificate is not checked.
    Preferred,
    /// TLS or fail; the certificate is not checked.
    Required,
    /// TLS, and the certificate chains to --backend-tls-ca.
    VerifyCa,
    /// verify-ca, and the certificate names the --backend address.
    VerifyIdentity,
}

impl std::fmt::Display for BackendTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&value_enum_name(self))
    }
}

/// When a client holds a backend connection (`--pooling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Pooling {
    /// From login to close (then COM_RESET_CONNECTION): every session
    /// feature works, and clients need as many backend connections.
    Session,
    /// Only while a statement or a transaction runs; session state the
    /// proxy cannot carry over pins the session to its connection
    /// (docs/operations.md, "Transaction pooling").
    Transaction,
}

/// What transaction pooling does with binary prepared statements
/// (`--tx-prepared-statements`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum TxPreparedStatements {
    /// Statements move with the session: ringgate gives the client its own
    /// statement ids and prepares a statement again on a connection that
    /// lacks it. Costs a PREPARE round trip the first time a session's
    /// statement lands on a connection, and up to --backend-max-prepared
    /// server statements kept per connection.
    Move,
    /// The session's first statement command pins it to its backend
    /// connection until it ends: ids are the server's, nothing is
    /// re-prepared, but every client that prepares holds a connection for
    /// its whole life, as in session pooling (so 1,000 sysbench clients on
    /// 64 connections get ERR 1040).
    Pin,
}

impl TxPreparedStatements {
    pub fn moves(self) -> bool {
        self == TxPreparedStatements::Move
    }
}

/// Causal reads (`--causal-reads`): what a read sent to a replica waits
/// for first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum CausalReads {
    /// No wait: a read on a replica may miss a write made just before.
    Off,
    /// A session's read waits until the replica has that session's last
    /// write (MASTER_GTID_WAIT of the GTID its OK packets reported).
    Session,
    /// A read waits until the replica has the last write any session of
    /// this ringgate saw.
    Global,
}

impl CausalReads {
    pub fn mode(self) -> machines::causal::CausalMode {
        use machines::causal::CausalMode;
        match self {
            CausalReads::Off => CausalMode::Off,
            CausalReads::Session => CausalMode::Session,
            CausalReads::Global => CausalMode::Global,
        }
    }
}

/// What a reload does to the live sessions of a user it removed from the
/// users file (`--on-user-removed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum OnUserRemoved {
    /// Their sessions end at the reload, as a KILL CONNECTION would end
    /// them: the client's next read sees the connection closed.
    Close,
    /// Their sessions stay, as MySQL's DROP USER leaves them, but can open
    /// no backend connection: a session that holds one (session pooling,
    /// or inside a transaction) keeps it to its end; one that needs a new
    /// one gets ERR 1045 and is closed.
    Keep,
}

/// The flag that `--tx-prepared-statements move` replaced; the command
/// line still takes it (it asks for what is now the default), the config
/// file does not (a file that said `false` meant "pin", which the new key
/// must say).
pub const RENAMED_TX_MOVE_FLAG: &str = "--tx-move-prepared-statements";

/// The kernel caps a registered buffer table at 16384 entries
/// (IORING_MAX_REG_BUFFERS, Linux 5.13+).
pub const MAX_READ_BUFFER_COUNT: u32 = 16384;

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 5s, 2m)"))
}

/// A monitor interval: checks more often than ten a second load the
/// servers for no faster decision (a server is down after three).
pub(crate) fn parse_monitor_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) {
        return Err("must be 100ms or more".into());
    }
    Ok(d)
}

/// `--read-only-functions`: names of `[A-Za-z0-9_$]`, at most one `.`
/// between a schema and a function; kept as given, split by
/// [`read_only_function_list`].
pub(crate) fn parse_read_only_functions(s: &str) -> Result<String, String> {
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let parts: Vec<&str> = name.split('.').collect();
        let word = |p: &&str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
        };
        if parts.len() > 2 || !parts.iter().all(word) {
            return Err(format!(
                "{name:?} is not a function name (NAME or SCHEMA.NAME, unquoted)"
            ));
        }
    }
    Ok(s.to_owned())
}

/// The names of `--read-only-functions`, upper-cased as the lexer compares
/// them (`wire::lexer::LexOptions::read_only_functions`).
pub fn read_only_function_list(s: &str) -> Vec<Box<str>> {
    s.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| n.to_ascii_uppercase().into_boxed_str())
        .collect()
}

/// `--backend`'s default, the one server of the simple case.
const DEFAULT_BACKEND: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    3306,
));

/// Keepalive times are whole seconds in the kernel (1..=32767).
pub(crate) fn parse_keepalive_secs(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.subsec_nanos() != 0 || !(1..=32767).contains(&d.as_secs()) {
        return Err("must be whole seconds between 1s and 32767s".into());
    }
    Ok(d)
}

/// Keepalive probes: the kernel takes 1..=127 (TCP_KEEPCNT).
pub(crate) fn parse_keepalive_count(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if !(1..=127).contains(&v) {
        return Err("must be between 1 and 127".into());
    }
    Ok(v)
}

pub(crate) fn parse_busy_poll_us(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if v > 10_000 {
        return Err("must be between 0 and 10000".into());
    }
    Ok(v)
}

pub(crate) fn parse_buffer_size(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|e| format!("{e}"))?;
    // A slot must hold at least a packet header plus a useful payload, and
    // page-multiple sizes keep every slot page-aligned inside the region.
    if !(4096..=(1 << 24)).contains(&v) || v % 4096 != 0 {
        return Err("must be a multiple of 4096 between 4096 and 16777216".into());
    }
    Ok(v)
}

pub(crate) fn parse_large_read_size(s: &str) -> Result<u32, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_buffer_size(s).map_err(|e| format!("0 (off) or {e}"))
}

pub(crate) fn parse_buffer_count(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if v == 0 || v > MAX_READ_BUFFER_COUNT {
        return Err(format!(
            "must be between 1 and {MAX_READ_BUFFER_COUNT} (the kernel's limit per registered buffer table)"
        ));
    }
    Ok(v)
}

/// ringgate: a MySQL-protocol proxy on io_uring whose per-connection read
/// buffers are kernel-registered fixed buffers.
///
/// `Debug` is written by hand so that the backend password never reaches a
/// log line or a panic message.
#[derive(Parser, Clone)]
#[command(name = "ringgate", version, about, long_about = None)]
pub struct Config {
    /// Address clients connect to. Every worker binds it with SO_REUSEPORT.
    #[arg(long, default_value = "127.0.0.1:15306", value_name = "ADDR")]
    pub listen: SocketAddr,

    /// Start even though another process already listens on --listen, and
    /// share new connections with it (SO_REUSEPORT) until it stops: for a
    /// deliberate hand-over from a running ringgate. Without it ringgate
    /// refuses to start, so that a second instance cannot split the traffic.
    #[arg(long)]
    pub reuse_port_handover: bool,

    /// Worker threads, each with its own io_uring, listener, buffer pool and
    /// backend pool. Default: the number of CPUs.
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,

    /// The MySQL/MariaDB server to proxy to. Repeat it for a replicated
    /// cluster, each as ADDR or ADDR,role=R,weight=N,max-lag=DURATION: role
    /// `auto` (the default) follows the server's read_only, or `primary` /
    /// `replica`; weight (default 1) is its share of reads, 0 for none; a
    /// replica further behind than max-lag takes no reads (default: no
    /// bound). Several servers need --monitor-user. Until reads and writes
    /// are routed, every session goes to the role=primary server, else the
    /// first.
    #[arg(
        long = "backend",
        id = "backend",
        default_value = "127.0.0.1:3306",
        value_parser = parse_backend,
        value_name = "ADDR[,OPTIONS]"
    )]
    pub backends: Vec<BackendSpec>,

    /// The server every session goes to: the first writer of `backends`,
    /// set by [`Config::resolve_backends`].
    #[arg(skip = DEFAULT_BACKEND)]
    pub backend: SocketAddr,

    /// Who clients are on the backend. `passthrough` (the default): each
    /// client logs in to the backend as itself, with the credential it gave
    /// ringgate (or as the account its users-file entry names in
    /// BackendUser/BackendPassword); the server's privileges, PROCESSLIST
    /// and KILL rules apply per user. `shared`: every client runs as
    /// --backend-user, so every user has that account's privileges and can
    /// see and KILL the others' queries.
    #[arg(long, value_enum, default_value_t = BackendIdentity::Passthrough)]
    pub backend_identity: BackendIdentity,

    /// When a client holds a backend connection. `transaction` (the
    /// default): only while a statement or a transaction runs, so many idle
    /// clients share few backend connections; a session whose state cannot
    /// move between connections (user variables, temporary tables, locks...)
    /// is pinned to its connection, and CONNECTION_ID() names whichever
    /// backend thread ran the statement. `session`: from login to close,
    /// every session feature works, and each client holds a backend
    /// connection. See docs/operations.md, "Transaction pooling".
    #[arg(long, value_enum, default_value_t = Pooling::Transaction)]
    pub pooling: Pooling,

    /// With --backend-identity shared: the account every client runs as
    /// (mysql_native_password or caching_sha2_password). Refused with
    /// passthrough identity.
    #[arg(long, default_value = "ringgate", value_name = "USER")]
    pub backend_user: String,

    /// Password for --backend-user (shared identity only). Prefer the
    /// RINGGATE_BACKEND_PASSWORD environment variable, which keeps it out of `ps`.
    #[arg(
        long,
        env = "RINGGATE_BACKEND_PASSWORD",
        hide_env_values = true,
        default_value = "",
        value_name = "PASSWORD"
    )]
    pub backend_password: String,

    /// The backend's RSA public key (PEM, as MySQL's public_key.pem) for
    /// caching_sha2_password full authentication over an unencrypted
    /// backend connection: the password goes RSA-encrypted without first
    /// asking the server for its key. Unset: ringgate asks for it (which
    /// trusts the network path to the backend once per full auth).
    #[arg(long, value_name = "FILE")]
    pub backend_rsa_public_key: Option<PathBuf>,

    /// TLS towards the backend, as MySQL's --ssl-mode: disabled, preferred
    /// (TLS if offered), required (TLS, certificate not checked), verify-ca
    /// (chains to --backend-tls-ca), verify-identity (and names the
    /// --backend address). Any mode but disabled needs read buffers of
    /// 24576 bytes or more, as front-end TLS does (the default grows to it).
    #[arg(long, value_enum, default_value_t = BackendTls::Disabled)]
    pub backend_tls: BackendTls,

    /// The CA certificate(s) (PEM) that sign the backend's certificate,
    /// for --backend-tls verify-ca and verify-identity.
    #[arg(long, value_name = "FILE")]
    pub backend_tls_ca: Option<PathBuf>,

    /// The account the cluster monitor logs in as to check each --backend
    /// (up or down, primary or replica, replication lag) every
    /// --monitor-interval; unset: no monitor, which only one --backend
    /// allows. Least privilege: GRANT SLAVE MONITOR, BINLOG MONITOR.
    #[arg(long, default_value = "", value_name = "USER")]
    pub monitor_user: String,

    /// Password for --monitor-user. Prefer the RINGGATE_MONITOR_PASSWORD
    /// environment variable, which keeps it out of `ps`.
    #[arg(
        long,
        env = "RINGGATE_MONITOR_PASSWORD",
        hide_env_values = true,
        default_value = "",
        value_name = "PASSWORD"
    )]
    pub monitor_password: String,

    /// How often the monitor checks each server (at least 100ms). A server
    /// is down after 3 failed checks in a row and up again after 3 good
    /// ones; while it is down its checks back off up to 8 intervals.
    #[arg(long, default_value = "1s", value_parser = parse_monitor_interval, value_name = "DURATION")]
    pub monitor_interval: Duration,

    /// Several servers: how long SIGUSR1's switchover hold lasts at most.
    /// New transactions wait while those in flight finish on the writer;
    /// the hold ends when the monitor names another writer, on SIGUSR2,
    /// or after this, cut to --backend-wait-timeout, which bounds every
    /// waiting client. See docs/operations.md, "Several servers".
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub switchover_hold_timeout: Duration,

    /// Several servers: how long a client waits for a writer when there is
    /// none (the old one died and the monitor has not named another, or
    /// connects to it fail) before its statement gets ERR 1105 naming
    /// this flag. Default and most: --backend-wait-timeout, which bounds
    /// every waiting client. See docs/operations.md, "Several servers".
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub writer_wait_timeout: Option<Duration>,

    /// Several servers, transaction pooling: send each safe read of a
    /// session between transactions (an autocommit SELECT with no locking
    /// clause, INTO, user variable or side-effect function; the rules are
    /// in docs/operations.md, "Read/write split"), and every START
    /// TRANSACTION READ ONLY, to a replica within its max-lag, chosen by
    /// weight; everything else to the writer. Comments force either way:
    /// /* ringgate:writer */, /* ringgate:replica */. Off: all to the writer.
    #[arg(long)]
    pub read_write_split: bool,

    /// Stored functions that only read, comma-separated (NAME for any
    /// schema, or SCHEMA.NAME): a call of one neither pins the session
    /// nor keeps a read on the writer. Any other stored function does both
    /// (it may set user variables or take locks the server never reports).
    #[arg(long, default_value = "", value_parser = parse_read_only_functions, value_name = "NAME,...")]
    pub read_only_functions: String,
    /// `--read-write-split` (several servers, `--pooling transaction`):
    /// after a write, make a read sent to a replica wait first until that
    /// replica has applied the write: `session` (the session's own last write), `global` (the
    /// last write any session made), or `off`. Costs one round trip per
    /// read on a replica after a write. See docs/operations.md, "Causal
    /// reads".
    #[arg(long, value_enum, default_value_t = CausalReads::Off, value_name = "MODE")]
    pub causal_reads: CausalReads,

    /// How long a causal read waits for its replica to apply the write
    /// before it goes to the writer instead. The default, 1s, is more than
    /// a healthy replica needs (it applies in milliseconds) and bounds
    /// what a lagging one adds to a read.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub causal_read_timeout: Duration,

    /// Several servers, `--pooling transaction`: when the writer dies under
    /// an open transaction that was certainly rolled back, run its
    /// statements again on the new writer (waiting for one at most
    /// --writer-wait-timeout) and carry on unseen if every answer is the
    /// same as the client's; otherwise the client gets ERR 1213 as without
    /// it. Never an interrupted COMMIT. See docs/operations.md, "What
    /// clients see when the writer changes".
    #[arg(
        long,
        default_value_t = false,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub transaction_replay: bool,

    /// --transaction-replay: statement text one transaction may record.
    /// Over it (or with one statement over 64 KiB) the transaction is not
    /// replayed, and its loss gets ERR 1213.
    #[arg(long, default_value = "1048576", value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    pub transaction_replay_max_size: u64,

    /// Users allowed to connect, in Vitess's static auth JSON format:
    /// {"user": [{"Password": "..."}]} or {"user": [{"MysqlNativePassword": "*HEX"}]}.
    #[arg(long, value_name = "PATH")]
    pub users_file: PathBuf,

    /// RSA private key (PEM, PKCS#1 or PKCS#8, as MySQL's private_key.pem)
    /// for caching_sha2_password full authentication over plain TCP: a
    /// client may ask for the public half and send its password
    /// RSA-encrypted. Unset: such a client gets 1045, as from MySQL without
    /// RSA keys.
    #[arg(long, value_name = "FILE")]
    pub rsa_key: Option<PathBuf>,

    /// Where read buffers come from: `fixed` (kernel-registered, the default),
    /// `ring` (a provided-buffer ring per worker filled by multishot receives;
    /// falls back to `fixed`) or `heap` (the baseline; also the automatic
    /// fallback when registration fails).
    #[arg(long, value_enum, default_value_t = ReadBufferMode::Fixed)]
    pub read_buffers: ReadBufferMode,

    /// Bytes per read buffer (16384, as in Vitess). A multiple of 4096.
    #[arg(long, default_value = "16384", value_parser = parse_buffer_size, value_name = "BYTES")]
    pub read_buffer_size: u32,

    /// Registered read buffers per worker (at most 16384). Client and backend
    /// connections each hold one; beyond this a connection gets a heap buffer.
    /// With `--read-buffers ring`: the buffers in each worker's ring.
    #[arg(long, default_value = "1024", value_parser = parse_buffer_count, value_name = "N")]
    pub read_buffer_count: u32,

    /// Bytes per read of a large result (0 = off). A backend read that fills
    /// its read buffer means more of a result is behind it: the connection
    /// then reads into a heap buffer of this size, from a small per-worker
    /// pool, and gives it back at its first read smaller than a read buffer
    /// (fewer, larger trips through the network stack; docs/benchmarks.md).
    /// A multiple of 4096; at most the read buffer size turns it off.
    #[arg(long, default_value = "262144", value_parser = parse_large_read_size, value_name = "BYTES")]
    pub large_read_size: u32,

    /// Client sessions allowed at once, across all workers. One more gets ERR 1040.
    #[arg(long, default_value = "4096", value_name = "N")]
    pub max_connections: usize,

    /// Backend connections each worker opens at start-up and keeps ready.
    #[arg(long, default_value = "4", value_name = "N")]
    pub backend_pool_size: usize,

    /// Backend connections allowed at once, across all workers.
    #[arg(long, default_value = "256", value_name = "N")]
    pub backend_max_connections: usize,

    /// Passthrough identity: backend connections one backend account may
    /// hold at once, across all workers ("0" = no limit but
    /// --backend-max-connections): a user at its share waits for one of its
    /// own, so one user cannot take every connection from the others. Not
    /// applied with --backend-identity shared (everyone is one account).
    #[arg(long, default_value = "0", value_name = "N")]
    pub backend_max_connections_per_user: usize,

    /// `--pooling transaction`: prepared statements each backend connection
    /// keeps on the server; the least recently used one is closed to make
    /// room. Default: three quarters of MariaDB's default
    /// max_prepared_stmt_count (16382) divided by --backend-max-connections
    /// (at least 8), so that every connection full stays under the server's
    /// limit. Set it when the server's limit differs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub backend_max_prepared: Option<u64>,

    /// `--pooling transaction`: binary prepared statements one session may
    /// keep open. One more prepare gets the server's own ERR 1461 (42000)
    /// "Can't create more than max_prepared_stmt_count statements". Default:
    /// MariaDB's default max_prepared_stmt_count (the server's limit never
    /// sees a repeated prepare that ringgate answers itself).
    #[arg(long, default_value = "16382", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_prepared_statements: u64,

    /// `--pooling transaction`: bytes one session's prepared statements may
    /// keep: each distinct SQL text once, plus 2 per parameter. A prepare
    /// beyond gets ERR 1461. See docs/operations.md, "Prepared statements".
    #[arg(long, default_value = "8388608", value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_prepared_bytes: u64,

    /// `--pooling transaction`: what binary prepared statements
    /// (COM_STMT_PREPARE: connector `prepared=True`, mysql2 `execute()`,
    /// sysbench's default) do: `move` with the session between backend
    /// connections, or `pin` it to one. See docs/operations.md, "Prepared
    /// statements (binary protocol)".
    #[arg(long, value_enum, default_value_t = TxPreparedStatements::Move, value_name = "MODE")]
    pub tx_prepared_statements: TxPreparedStatements,

    /// What a SIGHUP reload does to the live sessions of users it removed
    /// from the users file: `close` them at once, or `keep` them without
    /// any new backend connection (ERR 1045 at their next statement that
    /// needs one). Either way their backend credentials are forgotten and
    /// overwritten. See docs/operations.md, "Reloading the users file".
    #[arg(long, value_enum, default_value_t = OnUserRemoved::Close, value_name = "MODE")]
    pub on_user_removed: OnUserRemoved,

    /// How long a client waits for a backend connection when the pool is
    /// saturated, before it gets an error.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub backend_wait_timeout: Duration,

    /// Idle backend connections beyond --backend-pool-size per worker are
    /// closed after this long unused, so a connection storm's pool shrinks back.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub backend_idle_timeout: Duration,

    /// How long opening and authenticating a new backend connection may take.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub backend_connect_timeout: Duration,

    /// A client that has not completed its login within this time is dropped.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub handshake_timeout: Duration,

    /// A session with no command for this long is closed ("0" = never).
    #[arg(long, default_value = "0", value_parser = parse_duration, value_name = "DURATION")]
    pub idle_timeout: Duration,

    /// A session idle inside a transaction for this long is cut while other
    /// clients wait for a backend connection: its transaction is rolled
    /// back, it gets ERR 4031 and is closed ("0" = never). Only under
    /// contention, so a quiet pool never cuts (docs/operations.md, "Idle
    /// sessions that hold a backend connection").
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub idle_transaction_timeout: Duration,

    /// `--pooling transaction`: a session pinned to its backend connection
    /// (or holding it for LOCK TABLES, warnings, a cursor) and idle this long
    /// is cut while other clients wait for a backend connection, as by
    /// --idle-transaction-timeout ("0" = never).
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub idle_pinned_timeout: Duration,

    /// A client that does not take result bytes for this long is cut off
    /// and its backend connection discarded, so a stalled reader cannot pin
    /// a backend forever.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub client_write_timeout: Duration,

    /// SO_KEEPALIVE on client and backend sockets, so a peer whose host
    /// vanished without a FIN (power loss, a dropped NAT entry) is noticed and
    /// its slot and backend come back. `--tcp-keepalive=false` turns it off.
    #[arg(
        long,
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub tcp_keepalive: bool,

    /// Idle time before the first keepalive probe (TCP_KEEPIDLE).
    #[arg(long, default_value = "60s", value_parser = parse_keepalive_secs, value_name = "DURATION")]
    pub tcp_keepalive_idle: Duration,

    /// Time between keepalive probes (TCP_KEEPINTVL).
    #[arg(long, default_value = "10s", value_parser = parse_keepalive_secs, value_name = "DURATION")]
    pub tcp_keepalive_interval: Duration,

    /// Unanswered keepalive probes before the connection is dropped (TCP_KEEPCNT).
    #[arg(long, default_value = "6", value_parser = parse_keepalive_count, value_name = "N")]
    pub tcp_keepalive_count: u32,

    /// Drop a connection whose sent data stays unacknowledged this long
    /// (TCP_USER_TIMEOUT; "0" = the kernel's default, about 15 minutes of
    /// retransmissions). Covers a peer that vanished while we were writing,
    /// which keepalive does not. The default is keepalive's own give-up time
    /// (idle 60 s + 10 s × 6 probes): a smaller value makes Linux reset an
    /// idle connection at its first unanswered probe (a warning says so).
    #[arg(long, default_value = "120s", value_parser = parse_duration, value_name = "DURATION")]
    pub tcp_user_timeout: Duration,

    /// Cut a backend that sends nothing for this long while a response is
    /// owed ("0" = never, the default). Off by default because a long query
    /// legitimately sends nothing for minutes; set it above your longest query.
    #[arg(long, default_value = "0", value_parser = parse_duration, value_name = "DURATION")]
    pub backend_read_timeout: Duration,

    /// Largest client packet accepted (bytes); a larger one gets ERR 1153 and
    /// the connection is closed.
    #[arg(long, default_value = "67108864", value_name = "BYTES")]
    pub max_packet_size: u64,

    /// After a batch of completions, poll for the next one for up to this
    /// many microseconds before sleeping in the kernel ("0" = off, the
    /// default). Saves the sleep and wake-up per query at low concurrency
    /// (lower latency) at the cost of CPU spent polling; at most 10000.
    #[arg(long, default_value = "0", value_parser = parse_busy_poll_us, value_name = "MICROSECONDS")]
    pub busy_poll_us: u32,

    /// On SIGTERM/SIGINT: how long sessions inside a command or transaction
    /// may take to finish before they are cut.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub drain_timeout: Duration,

    /// Also serve clients on this unix socket path (same auth as TCP).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Let clients use LOAD DATA LOCAL INFILE (the CLIENT_LOCAL_FILES capability).
    /// Off by default, as in MySQL 8: it lets a server read client files.
    #[arg(long)]
    pub allow_local_infile: bool,

    /// Fixed mode: keep a connection's registered slot for its whole life,
    /// idle or not. By default a busy connection keeps its slot and read
    /// between commands, and one idle for 10 ms gives the slot back and
    /// waits for readability with a poll, then takes a slot to read (a
    /// cancel, a poll and one more wake-up when it comes back;
    /// docs/benchmarks.md).
    #[arg(long)]
    pub hold_idle_slots: bool,

    /// Accept clients into each worker ring's file table (direct
    /// descriptors: no fd per client, no fd lookup per I/O) when the kernel
    /// supports it (`auto`), or as plain fds (`off`). A client beyond the
    /// table (sized from --max-connections per worker) gets a plain fd.
    #[arg(long, value_enum, default_value_t = DirectDescriptors::Auto)]
    pub direct_descriptors: DirectDescriptors,

    /// Do not offer the compressed protocol (CLIENT_COMPRESS) to clients.
    /// Offered by default; it runs between the client and ringgate only
    /// (the backend leg stays uncompressed) and costs proxy CPU.
    #[arg(long)]
    pub no_client_compression: bool,

    /// PEM certificate chain for TLS with clients (with --tls-key). Clients
    /// that ask (an SSLRequest) get TLS 1.3, or 1.2 if that is all they
    /// speak. Reloaded on SIGHUP. A whole TLS record must fit in a read
    /// buffer: without --read-buffer-size, TLS makes it 24576 (and says so
    /// in the log); a size given below that is refused.
    #[arg(long, value_name = "PATH")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PATH")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates: TLS clients must present a certificate signed
    /// by one of them (client certificates are not asked for without it).
    #[arg(long, value_name = "PATH")]
    pub tls_client_ca: Option<PathBuf>,

    /// TLS session resumption with stateless tickets (TLS 1.3 and 1.2),
    /// whose key all workers share, so a client that reconnects to another
    /// worker resumes too. The key is random, in memory only, rotated every
    /// 6 hours and replaced on SIGHUP reload (a ticket lives at most 12
    /// hours, and none made before a reload resumes after it). `false`:
    /// no tickets; sessions resume from a shared in-memory cache instead.
    #[arg(
        long,
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub tls_session_tickets: bool,

    /// Refuse TCP logins without TLS with MySQL's ERR 3159; unix-socket
    /// clients count as secure (as in MySQL).
    #[arg(long)]
    pub require_secure_transport: bool,

    /// Serve Prometheus metrics at http://ADDR/metrics (off when unset).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

    /// Log filter (error, warn, info, debug, trace, or a tracing
    /// EnvFilter directive). RUST_LOG overrides it.
    #[arg(long, default_value = "info", value_name = "FILTER")]
    pub log_level: String,

    /// Log line format: `text` for people, `json` for log pipelines.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum LogFormat {
    Text,
    Json,
}

/// A flag's enum value from the config file: the same names as on the
/// command line, and the same "possible values" help when it is wrong.
fn value_enum_from_str<T: ValueEnum>(s: &str) -> Result<T, String> {
    if let Ok(v) = T::from_str(s, false) {
        return Ok(v);
    }
    let names: Vec<String> = T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|p| p.get_name().to_owned())
        .collect();
    let mut why = format!("possible values: {}", names.join(", "));
    // As clap suggests for a flag: the closest name by Jaro similarity.
    let best = names
        .iter()
        .map(|n| (strsim::jaro(s, n), n))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((score, name)) = best {
        if score > 0.7 {
            why.push_str(&format!(" (did you mean \"{name}\"?)"));
        }
    }
    Err(why)
}

fn value_enum_name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_owned())
        .unwrap_or_default()
}

macro_rules! value_enum_serde {
    ($($t:ty),*) => {$(
        impl TryFrom<String> for $t {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                value_enum_from_str(&s)
            }
        }
        impl From<$t> for String {
            fn from(v: $t) -> String {
                value_enum_name(&v)
            }
        }
    )*};
}
value_enum_serde!(
    ReadBufferMode,
    DirectDescriptors,
    LogFormat,
    BackendIdentity,
    Pooling,
    TxPreparedStatements,
    OnUserRemoved,
    BackendTls,
    CausalReads
);

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mask = |p: &str| if p.is_empty() { "" } else { "********" };
        let password = mask(&self.backend_password);
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("reuse_port_handover", &self.reuse_port_handover)
            .field("workers", &self.workers)
            .field("backends", &self.backends)
            .field("backend", &self.backend)
            .field("backend_identity", &self.backend_identity)
            .field("pooling", &self.pooling)
            .field("backend_user", &self.backend_user)
            .field("backend_password", &password)
            .field("backend_rsa_public_key", &self.backend_rsa_public_key)
            .field("backend_tls", &self.backend_tls)
            .field("backend_tls_ca", &self.backend_tls_ca)
            .field("monitor_user", &self.monitor_user)
            .field("monitor_password", &mask(&self.monitor_password))
            .field("monitor_interval", &self.monitor_interval)
            .field("switchover_hold_timeout", &self.switchover_hold_timeout)
            .field("writer_wait_timeout", &self.writer_wait_timeout)
            .field("read_write_split", &self.read_write_split)
            .field("read_only_functions", &self.read_only_functions)
            .field("transaction_replay", &self.transaction_replay)
            .field(
                "transaction_replay_max_size",
                &self.transaction_replay_max_size,
            )
            .field("causal_reads", &self.causal_reads)
            .field("causal_read_timeout", &self.causal_read_timeout)
            .field("users_file", &self.users_file)
            .field("rsa_key", &self.rsa_key)
            .field("read_buffers", &self.read_buffers)
            .field("read_buffer_size", &self.read_buffer_size)
            .field("read_buffer_count", &self.read_buffer_count)
            .field("max_connections", &self.max_connections)
            .field("backend_pool_size", &self.backend_pool_size)
            .field("backend_max_connections", &self.backend_max_connections)
            .field(
                "backend_max_connections_per_user",
                &self.backend_max_connections_per_user,
            )
            .field("backend_wait_timeout", &self.backend_wait_timeout)
            .field("backend_idle_timeout", &self.backend_idle_timeout)
            .field("backend_connect_timeout", &self.backend_connect_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("idle_transaction_timeout", &self.idle_transaction_timeout)
            .field("idle_pinned_timeout", &self.idle_pinned_timeout)
            .field("client_write_timeout", &self.client_write_timeout)
            .field("tcp_keepalive", &self.tcp_keepalive)
            .field("tcp_keepalive_idle", &self.tcp_keepalive_idle)
            .field("tcp_keepalive_interval", &self.tcp_keepalive_interval)
            .field("tcp_keepalive_count", &self.tcp_keepalive_count)
            .field("tcp_user_timeout", &self.tcp_user_timeout)
            .field("tx_prepared_statements", &self.tx_prepared_statements)
            .field("max_prepared_statements", &self.max_prepared_statements)
            .field("max_prepared_bytes", &self.max_prepared_bytes)
            .field("on_user_removed", &self.on_user_removed)
            .field("backend_read_timeout", &self.backend_read_timeout)
            .field("max_packet_size", &self.max_packet_size)
            .field("busy_poll_us", &self.busy_poll_us)
            .field("drain_timeout", &self.drain_timeout)
            .field("socket", &self.socket)
            .field("allow_local_infile", &self.allow_local_infile)
            .field("hold_idle_slots", &self.hold_idle_slots)
            .field("direct_descriptors", &self.direct_descriptors)
            .field("large_read_size", &self.large_read_size)
            .field("no_client_compression", &self.no_client_compression)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_client_ca", &self.tls_client_ca)
            .field("tls_session_tickets", &self.tls_session_tickets)
            .field("require_secure_transport", &self.require_secure_transport)
            .field("metrics_listen", &self.metrics_listen)
            .field("log_level", &self.log_level)
            .field("log_format", &self.log_format)
            .finish()
    }
}

/// The smallest read buffer that holds a whole TLS record (16 KiB of
/// plaintext + 261 bytes in TLS 1.3) beside the plaintext not yet forwarded.
pub const TLS_MIN_READ_BUFFER: u32 = 24576;

impl Config {
    /// With TLS configured, grow a read-buffer size that came from the
    /// built-in default (`explicit` false) to [`TLS_MIN_READ_BUFFER`], and
    /// return the size it replaced: the leg decodes each record in place
    /// in the connection's read buffer, so a whole record must fit, and a
    /// user who only added `--tls-cert` should not meet an error first. A
    /// size the user gave is left alone (and refused by [`Self::tls_files`]
    /// when too small: they asked for that memory budget).
    pub fn size_read_buffers_for_tls(&mut self, explicit: bool) -> Option<u32> {
        let tls = (self.tls_cert.is_some() && self.tls_key.is_some())
            || self.backend_tls != BackendTls::Disabled;
        if !tls || explicit || self.read_buffer_size >= TLS_MIN_READ_BUFFER {
            return None;
        }
        let old = self.read_buffer_size;
        self.read_buffer_size = TLS_MIN_READ_BUFFER;
        Some(old)
    }

    /// The front end's TLS files, when TLS is configured; an error names a
    /// flag missing its partner or a read buffer too small for a record.
    pub fn tls_files(&self) -> Result<Option<crate::tls::TlsFiles>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => {
                if self.tls_client_ca.is_some() {
                    return Err("--tls-client-ca needs --tls-cert and --tls-key".into());
                }
                if self.require_secure_transport && self.socket.is_none() {
                    return Err(
                        "--require-secure-transport with neither TLS (--tls-cert, --tls-key) \
                         nor --socket would refuse every client"
                            .into(),
                    );
                }
                Ok(None)
            }
            (Some(_), None) => Err("--tls-cert needs --tls-key".into()),
            (None, Some(_)) => Err("--tls-key needs --tls-cert".into()),
            (Some(cert), Some(key)) => {
                if self.read_buffer_size < TLS_MIN_READ_BUFFER {
                    return Err(format!(
                        "TLS needs --read-buffer-size {TLS_MIN_READ_BUFFER} or more (is {}): \
                         a whole TLS record must fit in a connection's read buffer (fix: \
                         raise it, or leave it out and TLS sizes it)",
                        self.read_buffer_size
                    ));
                }
                Ok(Some(crate::tls::TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: self.tls_client_ca.clone(),
                    session_tickets: self.tls_session_tickets,
                }))
            }
        }
    }

    /// Locked memory the fixed read-buffer pools register, in bytes:
    /// workers × slots × slot size (0 with `--read-buffers heap`, and with
    /// `ring`, whose buffers are not pinned; only the ring's one page of
    /// entries is, a rounding error beside the io_uring's own rings).
    pub fn locked_memory_bytes(&self) -> u64 {
        match self.read_buffers {
            ReadBufferMode::Heap | ReadBufferMode::Ring => 0,
            ReadBufferMode::Fixed => {
                self.worker_count() as u64
                    * u64::from(self.read_buffer_count)
                    * u64::from(self.read_buffer_size)
            }
        }
    }

    /// Sets [`Self::backend`] from the list, then checks the list against
    /// itself and the monitor settings.
    pub fn resolve_backends(&mut self) -> Result<(), String> {
        self.backend = first_writer(&self.backends).ok_or("no --backend given")?;
        if !self.monitor_password.is_empty() && self.monitor_user.is_empty() {
            return Err("--monitor-password without --monitor-user".into());
        }
        // The workers' backend TLS names one address; each server's own
        // name is not checked yet.
        if self.backends.len() > 1 && self.backend_tls == BackendTls::VerifyIdentity {
            return Err(
                "--backend-tls verify-identity with several --backend is not supported yet: use verify-ca".into(),
            );
        }
        // The file's value comes in unchecked (the flag's is parsed).
        parse_read_only_functions(&self.read_only_functions)
            .map_err(|e| format!("--read-only-functions: {e}"))?;
        backends::validate(&self.backends, &self.monitor_user)
    }

    /// The busy-poll budget, `None` when off.
    /// `--writer-wait-timeout`, cut to `--backend-wait-timeout` (its
    /// default): no client waits longer than that for anything.
    pub fn writer_wait(&self) -> Duration {
        self.writer_wait_timeout
            .map_or(self.backend_wait_timeout, |w| {
                w.min(self.backend_wait_timeout)
            })
    }

    pub fn busy_poll(&self) -> Option<Duration> {
        (self.busy_poll_us > 0).then(|| Duration::from_micros(u64::from(self.busy_poll_us)))
    }

    /// Worker count after applying the default (one per CPU).
    pub fn worker_count(&self) -> usize {
        self.workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }
}

#[cfg(test)]
mod tests;

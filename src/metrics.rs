//! Per-worker counters and the Prometheus `/metrics` endpoint.
//!
//! ringgate is thread-per-core and share-nothing, so metrics follow the same
//! shape: every worker owns exactly one [`WorkerMetrics`] inside a shared
//! [`Metrics`] and only ever touches its own entry, with `Relaxed` atomics.
//! Nothing on the data path takes a lock or bounces a cache line between
//! cores (entries are 128-byte aligned so neighbouring workers never share a
//! line, including the adjacent-line prefetcher's pair). The one exception is
//! the connect-duration histogram, which sits behind a per-worker mutex that
//! is only contended by a scrape, and is touched once per accepted
//! connection, never per packet.
//!
//! The HTTP endpoint runs on its own OS thread ([`serve`]) and sums across
//! workers at scrape time; [`exposition`] hands the sums to the
//! `prometheus-client` crate, which writes the text format. Because each worker is read independently, a
//! scrape is not an atomic cut across workers; every individual series is
//! still monotonic (counters) or a plausible instantaneous value (gauges),
//! which is all Prometheus asks for.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;

mod exposition;

/// Content type of the Prometheus text exposition format we emit.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Name of the thread that serves `/metrics`; named so it is recognisable in
/// `top -H`, `perf` and panic messages.
pub const THREAD_NAME: &str = "ringgate-metrics";

/// Lowest value (µs) the connect histogram tracks with full precision.
const HIST_LOW_US: u64 = 1;
/// Highest value (µs) the connect histogram tracks; longer connects saturate
/// here in the quantile gauges (the exact buckets and `_sum` still see them).
const HIST_HIGH_US: u64 = 60_000_000;
/// Significant figures: 0.1% relative error is plenty for latency percentiles.
const HIST_SIGFIG: u8 = 3;

/// Upper bounds of the `ringgate_connect_duration_seconds` buckets, in
/// nanoseconds (integers, so that a duration exactly on a bound is counted
/// exactly; the `le` labels are these divided by 1e9).
const CONNECT_BUCKETS_NS: [u64; 16] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Number of histogram buckets including the implicit `+Inf` one.
pub const CONNECT_BUCKET_COUNT: usize = CONNECT_BUCKETS_NS.len() + 1;

/// Errors from starting the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listen address could not be bound (in use, no permission, not a
    /// local address, ...). Carries the address so start-up logs are
    /// actionable.
    #[error("cannot bind metrics endpoint on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The serving thread could not be spawned.
    #[error("cannot spawn {THREAD_NAME} thread: {0}")]
    Spawn(#[source] std::io::Error),
}

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

    fn to_u8(self) -> u8 {
        match self {
            BufferMode::Fixed => 0,
            BufferMode::Heap => 1,
            BufferMode::Ring => 2,
        }
    }

    fn from_u8(v: u8) -> BufferMode {
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
}

impl RejectReason {
    /// Every reason, in exposition order (also the index order of
    /// [`Snapshot::client_rejected_total`]).
    pub const ALL: [RejectReason; 6] = [
        RejectReason::Auth,
        RejectReason::MaxConnections,
        RejectReason::Handshake,
        RejectReason::BackendUnavailable,
        RejectReason::BackendAuth,
        RejectReason::InsecureTransport,
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

/// Connect-duration state of one worker. The hdrhistogram gives exact-ish
/// percentiles; the fixed buckets and the nanosecond sum are kept separately
/// so the Prometheus histogram is exact (hdrhistogram bins values, which would
/// put a value sitting right on a bucket bound on either side of it).
struct ConnectHist {
    hdr: Histogram<u64>,
    /// Non-cumulative counts per bucket; the last entry is `+Inf`.
    buckets: [u64; CONNECT_BUCKET_COUNT],
    sum_ns: u64,
    count: u64,
}

impl ConnectHist {
    fn new() -> ConnectHist {
        ConnectHist {
            hdr: new_hdr(),
            buckets: [0; CONNECT_BUCKET_COUNT],
            sum_ns: 0,
            count: 0,
        }
    }
}

fn new_hdr() -> Histogram<u64> {
    // Constant, valid bounds (low >= 1, high >= 2 * low, sigfig <= 5): this
    // cannot fail, and nothing here depends on input from the network.
    Histogram::new_with_bounds(HIST_LOW_US, HIST_HIGH_US, HIST_SIGFIG)
        .expect("constant histogram bounds are valid")
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

/// The `reason` labels of `ringgate_sessions_pinned_total`, in the order
/// of `proxy::multiplex::PinReason::ALL` (a unit test there checks it).
pub const PIN_REASONS: [&str; 16] = [
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
];

/// Counters and gauges owned by one worker thread.
///
/// Only the owning worker writes (with `Relaxed` ordering: the values are
/// statistics, nothing synchronises through them); the metrics thread reads.
/// Gauges are signed so a transiently unbalanced inc/dec pair cannot wrap to
/// 2^64 in a scrape.
#[repr(align(128))]
pub struct WorkerMetrics {
    /// Slots in this worker's registered buffer table (0 in heap mode).
    pub read_buffers_total: AtomicU64,
    /// Free slots in the registered table.
    pub read_buffers_free: AtomicI64,
    /// Buffers (fixed slots or heap buffers) held by client connections now.
    pub read_buffers_in_use_client: AtomicI64,
    /// Buffers (fixed slots or heap buffers) held by backend connections now.
    pub read_buffers_in_use_backend: AtomicI64,
    /// Pool exhausted, a heap buffer was handed out instead.
    pub heap_fallbacks_total: AtomicU64,
    /// Buffers in this worker's provided-buffer ring (ring mode).
    pub ring_buffers_total: AtomicU64,
    /// Ring buffers holding bytes userspace has not given back.
    pub ring_buffers_in_use: AtomicI64,
    /// Multishot receives ended by an empty ring (-ENOBUFS).
    pub ring_enobufs_total: AtomicU64,
    /// Bytes copied from ring buffers into a connection's own buffer.
    pub ring_copied_bytes_total: AtomicU64,
    /// Fixed mode: readable idle clients that found no free slot and
    /// waited for one.
    pub slot_waits_total: AtomicU64,
    /// Fixed mode: idle clients waiting for readability without a slot
    /// (a poll in flight).
    pub clients_polling: AtomicI64,
    /// Client sessions open now.
    pub client_connections: AtomicI64,
    /// Client connections accepted since start.
    pub client_connections_total: AtomicU64,
    /// Rejected clients, indexed by [`RejectReason::index`]; prefer
    /// [`WorkerMetrics::reject`].
    pub client_rejected_total: [AtomicU64; 6],
    /// Authenticated logins, indexed by [`AuthPath::index`].
    pub client_auth_total: [AtomicU64; 4],
    /// Pooled backend connections idle now.
    pub backend_idle: AtomicI64,
    /// Backend connections currently bound to a client.
    pub backend_busy: AtomicI64,
    /// Backend connections successfully established.
    pub backend_connects_total: AtomicU64,
    /// Backend connection attempts that failed.
    pub backend_connect_failures_total: AtomicU64,
    /// Backend connections thrown away (broken, dirty state, over limit).
    pub backend_discarded_total: AtomicU64,
    /// Client commands forwarded to a backend.
    pub commands_total: AtomicU64,
    /// Backend connections reset (COM_RESET_CONNECTION) to be reused.
    pub backend_resets_total: AtomicU64,
    /// Transaction pooling: backend connections leased for a command
    /// mid-session (not at login).
    pub tx_leases_total: AtomicU64,
    /// Transaction pooling: backend connections given back between
    /// transactions without a reset.
    pub tx_releases_total: AtomicU64,
    /// Backend connections a session kept (transaction pooling: until the
    /// KILL's answer) or closed (at its end) instead of giving them to
    /// another session, because a KILL of their thread was on its way.
    pub kill_fenced_total: AtomicU64,
    /// Transaction pooling: prepared statements the backend connections
    /// hold on the server now (each connection's LRU).
    pub backend_prepared_statements: AtomicI64,
    /// Transaction pooling: prepared statements the client sessions hold
    /// now (their registries).
    pub client_prepared_statements: AtomicI64,
    /// Transaction pooling: statements the proxy prepared on a backend
    /// connection for a command of a session that had prepared them on
    /// another (or on this one before an eviction or a reset).
    pub statement_reprepares_total: AtomicU64,
    /// Transaction pooling: statements closed on a backend connection to
    /// stay within `--backend-max-prepared`.
    pub statement_evictions_total: AtomicU64,
    /// Transaction pooling: sessions pinned to their backend connection,
    /// indexed like [`PIN_REASONS`].
    pub sessions_pinned_total: [AtomicU64; PIN_REASONS.len()],
    /// Transaction pooling: proxy-internal statements, indexed like
    /// [`INTERNAL_QUERY_KINDS`].
    pub internal_queries_total: [AtomicU64; INTERNAL_QUERY_KINDS.len()],
    /// Bytes forwarded client → backend.
    pub bytes_client_to_backend_total: AtomicU64,
    /// Bytes forwarded backend → client.
    pub bytes_backend_to_client_total: AtomicU64,
    /// Client sessions that negotiated the compressed protocol.
    pub client_compressed_sessions_total: AtomicU64,
    /// Client sessions that sent an SSLRequest (TLS started).
    pub client_tls_sessions_total: AtomicU64,
    /// TLS sessions that ended on a TLS error (a failed handshake, a bad
    /// record, a refused client certificate).
    pub client_tls_errors_total: AtomicU64,
    /// Client TLS handshakes completed: [full, resumed].
    pub client_tls_handshakes_total: [AtomicU64; 2],
    /// Backend connections whose TLS handshake completed (`--backend-tls`).
    pub backend_tls_sessions_total: AtomicU64,
    /// Backend TLS failures, indexed like [`BACKEND_TLS_ERRORS`].
    pub backend_tls_errors_total: [AtomicU64; BACKEND_TLS_ERRORS.len()],
    /// Compressed sessions' bytes: [client→proxy wire, client→proxy plain,
    /// proxy→client plain, proxy→client wire].
    pub client_compressed_bytes_total: [AtomicU64; 4],
    /// Sessions waiting for a backend connection now (the pool is at its
    /// limit, or the connection they wait for is being reset).
    pub pool_waiters: AtomicI64,
    /// Times the ring's submission met EBUSY (completion ring full) and
    /// reaped completions into its backlog instead of spinning. The worker
    /// stores its ring's running total here.
    pub ring_ebusy_reaps: AtomicU64,
    /// Times the ring flushed the kernel's CQ overflow list
    /// (IORING_SQ_CQ_OVERFLOW). Stored from the ring's running total.
    pub ring_overflow_flushes: AtomicU64,
    /// Operations that could not be queued and were completed with a
    /// synthetic error so their owner rolled back. Stored from the ring's
    /// running total.
    pub ring_synthetic_failures: AtomicU64,
    /// io_uring_enter calls (the ring's running total; the bench divides
    /// by commands for enters per query).
    pub ring_enters: AtomicU64,
    /// Of those, the ones that asked to wait for a completion.
    pub ring_enter_waits: AtomicU64,
    /// SQEs the kernel consumed (the ring's running total).
    pub ring_sqes: AtomicU64,
    /// `--busy-poll-us`: polls that found a completion / that ran out and
    /// slept in the kernel.
    pub ring_busy_poll_hits: AtomicU64,
    pub ring_busy_poll_sleeps: AtomicU64,
    /// Accept → auth OK durations, in microseconds for the hdrhistogram.
    connect_duration: Mutex<ConnectHist>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for WorkerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerMetrics")
            .field("client_connections", &self.client_connections)
            .field("client_connections_total", &self.client_connections_total)
            .field("commands_total", &self.commands_total)
            .finish_non_exhaustive()
    }
}

impl WorkerMetrics {
    /// All-zero metrics for one worker.
    pub fn new() -> WorkerMetrics {
        WorkerMetrics {
            read_buffers_total: AtomicU64::new(0),
            read_buffers_free: AtomicI64::new(0),
            read_buffers_in_use_client: AtomicI64::new(0),
            read_buffers_in_use_backend: AtomicI64::new(0),
            heap_fallbacks_total: AtomicU64::new(0),
            ring_buffers_total: AtomicU64::new(0),
            ring_buffers_in_use: AtomicI64::new(0),
            ring_enobufs_total: AtomicU64::new(0),
            ring_copied_bytes_total: AtomicU64::new(0),
            slot_waits_total: AtomicU64::new(0),
            clients_polling: AtomicI64::new(0),
            client_connections: AtomicI64::new(0),
            client_connections_total: AtomicU64::new(0),
            client_rejected_total: Default::default(),
            client_auth_total: Default::default(),
            backend_idle: AtomicI64::new(0),
            backend_busy: AtomicI64::new(0),
            backend_connects_total: AtomicU64::new(0),
            backend_connect_failures_total: AtomicU64::new(0),
            backend_discarded_total: AtomicU64::new(0),
            commands_total: AtomicU64::new(0),
            backend_resets_total: AtomicU64::new(0),
            tx_leases_total: AtomicU64::new(0),
            tx_releases_total: AtomicU64::new(0),
            kill_fenced_total: AtomicU64::new(0),
            backend_prepared_statements: AtomicI64::new(0),
            client_prepared_statements: AtomicI64::new(0),
            statement_reprepares_total: AtomicU64::new(0),
            statement_evictions_total: AtomicU64::new(0),
            sessions_pinned_total: Default::default(),
            internal_queries_total: Default::default(),
            bytes_client_to_backend_total: AtomicU64::new(0),
            bytes_backend_to_client_total: AtomicU64::new(0),
            client_compressed_sessions_total: AtomicU64::new(0),
            client_tls_sessions_total: AtomicU64::new(0),
            client_tls_errors_total: AtomicU64::new(0),
            client_tls_handshakes_total: Default::default(),
            backend_tls_sessions_total: AtomicU64::new(0),
            backend_tls_errors_total: Default::default(),
            client_compressed_bytes_total: Default::default(),
            pool_waiters: AtomicI64::new(0),
            ring_ebusy_reaps: AtomicU64::new(0),
            ring_overflow_flushes: AtomicU64::new(0),
            ring_synthetic_failures: AtomicU64::new(0),
            ring_enters: AtomicU64::new(0),
            ring_enter_waits: AtomicU64::new(0),
            ring_sqes: AtomicU64::new(0),
            ring_busy_poll_hits: AtomicU64::new(0),
            ring_busy_poll_sleeps: AtomicU64::new(0),
            connect_duration: Mutex::new(ConnectHist::new()),
        }
    }

    /// Records one accept → auth OK duration. Called once per connection, so
    /// the (uncontended except during a scrape) mutex is off the hot path.
    pub fn record_connect(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let idx = CONNECT_BUCKETS_NS
            .iter()
            .position(|&le_ns| ns <= le_ns)
            .unwrap_or(CONNECT_BUCKETS_NS.len());
        let mut h = self.hist();
        // Saturating: a >60 s connect clamps to 60 s in the percentiles
        // instead of being dropped.
        h.hdr.saturating_record(us);
        h.buckets[idx] += 1;
        h.sum_ns = h.sum_ns.saturating_add(ns);
        h.count += 1;
    }

    /// Counts one rejected client.
    pub fn reject(&self, reason: RejectReason) {
        self.client_rejected_total[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Locks the histogram, recovering from poison: a panic elsewhere while
    /// holding it cannot leave plain counters inconsistent in a harmful way,
    /// and metrics must never take the proxy down.
    fn hist(&self) -> MutexGuard<'_, ConnectHist> {
        self.connect_duration
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Summary of the merged connect-duration histogram.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectDurationSnapshot {
    /// Number of recorded connects.
    pub count: u64,
    /// Sum of all recorded durations (exact, not binned).
    pub sum: Duration,
    /// Cumulative counts per bucket; bounds as in [`connect_bucket_bounds`],
    /// the last entry is `+Inf` and equals `count`.
    pub buckets: [u64; CONNECT_BUCKET_COUNT],
    /// Median from the merged hdrhistogram; `None` when nothing was recorded.
    pub p50: Option<Duration>,
    /// 99th percentile; `None` when nothing was recorded.
    pub p99: Option<Duration>,
    /// 99.9th percentile; `None` when nothing was recorded.
    pub p999: Option<Duration>,
}

/// Upper bounds (seconds) of the connect-duration buckets, excluding `+Inf`.
pub fn connect_bucket_bounds() -> impl Iterator<Item = f64> {
    CONNECT_BUCKETS_NS.iter().map(|&ns| ns as f64 / 1e9)
}

/// All metrics summed over workers as plain numbers: for the shutdown log
/// line and for tests, which want values rather than exposition text.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub mode: BufferMode,
    pub workers: usize,
    pub read_buffers_total: u64,
    pub read_buffers_free: i64,
    pub read_buffers_in_use_client: i64,
    pub read_buffers_in_use_backend: i64,
    pub heap_fallbacks_total: u64,
    pub ring_buffers_total: u64,
    pub ring_buffers_in_use: i64,
    pub ring_enobufs_total: u64,
    pub ring_copied_bytes_total: u64,
    pub slot_waits_total: u64,
    pub clients_polling: i64,
    pub client_connections: i64,
    pub client_connections_total: u64,
    /// Indexed by [`RejectReason::index`]; see [`Snapshot::rejected`].
    pub client_rejected_total: [u64; 6],
    /// Indexed by [`AuthPath::index`].
    pub client_auth_total: [u64; 4],
    pub backend_idle: i64,
    pub backend_busy: i64,
    pub backend_connects_total: u64,
    pub backend_connect_failures_total: u64,
    pub backend_discarded_total: u64,
    pub commands_total: u64,
    pub backend_resets_total: u64,
    pub tx_leases_total: u64,
    pub tx_releases_total: u64,
    pub kill_fenced_total: u64,
    pub backend_prepared_statements: i64,
    pub client_prepared_statements: i64,
    pub statement_reprepares_total: u64,
    pub statement_evictions_total: u64,
    /// Indexed like [`PIN_REASONS`].
    pub sessions_pinned_total: [u64; PIN_REASONS.len()],
    /// Indexed like [`INTERNAL_QUERY_KINDS`].
    pub internal_queries_total: [u64; INTERNAL_QUERY_KINDS.len()],
    pub bytes_client_to_backend_total: u64,
    pub bytes_backend_to_client_total: u64,
    pub client_compressed_sessions_total: u64,
    pub client_tls_sessions_total: u64,
    pub client_tls_errors_total: u64,
    /// As [`WorkerMetrics::client_tls_handshakes_total`].
    pub client_tls_handshakes_total: [u64; 2],
    pub backend_tls_sessions_total: u64,
    /// As [`WorkerMetrics::backend_tls_errors_total`].
    pub backend_tls_errors_total: [u64; BACKEND_TLS_ERRORS.len()],
    /// As [`WorkerMetrics::client_compressed_bytes_total`].
    pub client_compressed_bytes_total: [u64; 4],
    pub pool_waiters: i64,
    pub ring_ebusy_reaps_total: u64,
    pub ring_cq_overflow_flushes_total: u64,
    pub ring_synthetic_failures_total: u64,
    pub ring_enters_total: u64,
    pub ring_enter_waits_total: u64,
    pub ring_sqes_total: u64,
    pub ring_busy_poll_hits_total: u64,
    pub ring_busy_poll_sleeps_total: u64,
    pub connect_duration: ConnectDurationSnapshot,
}

impl Snapshot {
    /// Rejections for one reason.
    pub fn rejected(&self, reason: RejectReason) -> u64 {
        self.client_rejected_total[reason.index()]
    }

    /// Rejections over all reasons.
    pub fn rejected_total(&self) -> u64 {
        self.client_rejected_total
            .iter()
            .fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// One-line human summary, meant for the shutdown log.
impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us =
            |d: Option<Duration>| d.map_or_else(|| "-".to_string(), |d| d.as_micros().to_string());
        write!(
            f,
            "mode={} workers={} slots_free={}/{} buffers_held_client={} buffers_held_backend={} \
             backend_idle={} backend_busy={} clients_open={} clients_total={} rejected={} \
             (auth={} max_connections={} handshake={} backend_unavailable={} backend_auth={}) \
             commands={} bytes_c2b={} bytes_b2c={} backend_connects={} \
             backend_connect_failures={} backend_discarded={} heap_fallbacks={} \
             connect_us_p50={} p99={} p999={} pool_waiters={} ring_ebusy_reaps={} \
             ring_cq_overflow_flushes={} ring_synthetic_failures={} ring_buffers_in_use={}/{} \
             ring_enobufs={}",
            self.mode,
            self.workers,
            self.read_buffers_free,
            self.read_buffers_total,
            self.read_buffers_in_use_client,
            self.read_buffers_in_use_backend,
            self.backend_idle,
            self.backend_busy,
            self.client_connections,
            self.client_connections_total,
            self.rejected_total(),
            self.rejected(RejectReason::Auth),
            self.rejected(RejectReason::MaxConnections),
            self.rejected(RejectReason::Handshake),
            self.rejected(RejectReason::BackendUnavailable),
            self.rejected(RejectReason::BackendAuth),
            self.commands_total,
            self.bytes_client_to_backend_total,
            self.bytes_backend_to_client_total,
            self.backend_connects_total,
            self.backend_connect_failures_total,
            self.backend_discarded_total,
            self.heap_fallbacks_total,
            us(self.connect_duration.p50),
            us(self.connect_duration.p99),
            us(self.connect_duration.p999),
            self.pool_waiters,
            self.ring_ebusy_reaps_total,
            self.ring_cq_overflow_flushes_total,
            self.ring_synthetic_failures_total,
            self.ring_buffers_in_use,
            self.ring_buffers_total,
            self.ring_enobufs_total,
        )
    }
}

/// All workers' metrics plus process-wide state. Shared as `Arc<Metrics>`
/// between the workers and the metrics thread.
pub struct Metrics {
    workers: Box<[WorkerMetrics]>,
    mode: AtomicU8,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("workers", &self.workers.len())
            .field("mode", &self.mode())
            .finish()
    }
}

impl Metrics {
    /// Allocates one zeroed entry per worker.
    pub fn new(workers: usize, mode: BufferMode) -> Arc<Metrics> {
        Arc::new(Metrics {
            workers: (0..workers).map(|_| WorkerMetrics::new()).collect(),
            mode: AtomicU8::new(mode.to_u8()),
        })
    }

    /// Changes the reported buffer mode; start-up calls this when buffer
    /// registration fails and the proxy falls back to heap buffers.
    pub fn set_mode(&self, mode: BufferMode) {
        self.mode.store(mode.to_u8(), Ordering::Relaxed);
    }

    /// The currently reported buffer mode.
    pub fn mode(&self) -> BufferMode {
        BufferMode::from_u8(self.mode.load(Ordering::Relaxed))
    }

    /// Number of workers.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// The entry owned by worker `i`.
    ///
    /// # Panics
    /// If `i >= worker_count()`: that is a start-up wiring bug, not a
    /// runtime condition.
    pub fn worker(&self, i: usize) -> &WorkerMetrics {
        &self.workers[i]
    }

    /// Sums every worker into plain numbers.
    pub fn snapshot(&self) -> Snapshot {
        let u = |f: fn(&WorkerMetrics) -> &AtomicU64| -> u64 {
            self.workers
                .iter()
                .fold(0u64, |a, w| a.wrapping_add(f(w).load(Ordering::Relaxed)))
        };
        let i = |f: fn(&WorkerMetrics) -> &AtomicI64| -> i64 {
            self.workers
                .iter()
                .fold(0i64, |a, w| a.wrapping_add(f(w).load(Ordering::Relaxed)))
        };
        let mut rejected = [0u64; 6];
        for w in self.workers.iter() {
            for (sum, c) in rejected.iter_mut().zip(&w.client_rejected_total) {
                *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        let mut auth = [0u64; 4];
        for w in self.workers.iter() {
            for (sum, c) in auth.iter_mut().zip(&w.client_auth_total) {
                *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        let mut pinned = [0u64; PIN_REASONS.len()];
        for w in self.workers.iter() {
            for (sum, c) in pinned.iter_mut().zip(&w.sessions_pinned_total) {
                *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        let mut internal = [0u64; INTERNAL_QUERY_KINDS.len()];
        for w in self.workers.iter() {
            for (sum, c) in internal.iter_mut().zip(&w.internal_queries_total) {
                *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        Snapshot {
            mode: self.mode(),
            workers: self.workers.len(),
            read_buffers_total: u(|w| &w.read_buffers_total),
            read_buffers_free: i(|w| &w.read_buffers_free),
            read_buffers_in_use_client: i(|w| &w.read_buffers_in_use_client),
            read_buffers_in_use_backend: i(|w| &w.read_buffers_in_use_backend),
            heap_fallbacks_total: u(|w| &w.heap_fallbacks_total),
            ring_buffers_total: u(|w| &w.ring_buffers_total),
            ring_buffers_in_use: i(|w| &w.ring_buffers_in_use),
            ring_enobufs_total: u(|w| &w.ring_enobufs_total),
            ring_copied_bytes_total: u(|w| &w.ring_copied_bytes_total),
            slot_waits_total: u(|w| &w.slot_waits_total),
            clients_polling: i(|w| &w.clients_polling),
            client_connections: i(|w| &w.client_connections),
            client_connections_total: u(|w| &w.client_connections_total),
            client_rejected_total: rejected,
            client_auth_total: auth,
            backend_idle: i(|w| &w.backend_idle),
            backend_busy: i(|w| &w.backend_busy),
            backend_connects_total: u(|w| &w.backend_connects_total),
            backend_connect_failures_total: u(|w| &w.backend_connect_failures_total),
            backend_discarded_total: u(|w| &w.backend_discarded_total),
            commands_total: u(|w| &w.commands_total),
            backend_resets_total: u(|w| &w.backend_resets_total),
            tx_leases_total: u(|w| &w.tx_leases_total),
            tx_releases_total: u(|w| &w.tx_releases_total),
            kill_fenced_total: u(|w| &w.kill_fenced_total),
            backend_prepared_statements: i(|w| &w.backend_prepared_statements),
            client_prepared_statements: i(|w| &w.client_prepared_statements),
            statement_reprepares_total: u(|w| &w.statement_reprepares_total),
            statement_evictions_total: u(|w| &w.statement_evictions_total),
            sessions_pinned_total: pinned,
            internal_queries_total: internal,
            bytes_client_to_backend_total: u(|w| &w.bytes_client_to_backend_total),
            bytes_backend_to_client_total: u(|w| &w.bytes_backend_to_client_total),
            client_compressed_sessions_total: u(|w| &w.client_compressed_sessions_total),
            client_tls_sessions_total: u(|w| &w.client_tls_sessions_total),
            client_tls_errors_total: u(|w| &w.client_tls_errors_total),
            client_tls_handshakes_total: [
                u(|w| &w.client_tls_handshakes_total[0]),
                u(|w| &w.client_tls_handshakes_total[1]),
            ],
            backend_tls_sessions_total: u(|w| &w.backend_tls_sessions_total),
            backend_tls_errors_total: [
                u(|w| &w.backend_tls_errors_total[0]),
                u(|w| &w.backend_tls_errors_total[1]),
                u(|w| &w.backend_tls_errors_total[2]),
            ],
            client_compressed_bytes_total: [
                u(|w| &w.client_compressed_bytes_total[0]),
                u(|w| &w.client_compressed_bytes_total[1]),
                u(|w| &w.client_compressed_bytes_total[2]),
                u(|w| &w.client_compressed_bytes_total[3]),
            ],
            pool_waiters: i(|w| &w.pool_waiters),
            ring_ebusy_reaps_total: u(|w| &w.ring_ebusy_reaps),
            ring_cq_overflow_flushes_total: u(|w| &w.ring_overflow_flushes),
            ring_synthetic_failures_total: u(|w| &w.ring_synthetic_failures),
            ring_enters_total: u(|w| &w.ring_enters),
            ring_enter_waits_total: u(|w| &w.ring_enter_waits),
            ring_sqes_total: u(|w| &w.ring_sqes),
            ring_busy_poll_hits_total: u(|w| &w.ring_busy_poll_hits),
            ring_busy_poll_sleeps_total: u(|w| &w.ring_busy_poll_sleeps),
            connect_duration: self.connect_snapshot(),
        }
    }

    /// Merges the workers' histograms. Each worker's lock is held only for
    /// the copy of its own histogram, so a scrape delays at most one connect
    /// on one worker by a few microseconds.
    fn connect_snapshot(&self) -> ConnectDurationSnapshot {
        let mut merged = new_hdr();
        let mut buckets = [0u64; CONNECT_BUCKET_COUNT];
        let mut sum_ns = 0u64;
        let mut count = 0u64;
        for w in self.workers.iter() {
            let h = w.hist();
            if let Err(e) = merged.add(&h.hdr) {
                // Same bounds everywhere, so this is unreachable in practice;
                // losing percentiles beats failing the scrape.
                tracing::warn!(error = ?e, "cannot merge connect histogram");
            }
            for (b, &c) in buckets.iter_mut().zip(&h.buckets) {
                *b = b.saturating_add(c);
            }
            sum_ns = sum_ns.saturating_add(h.sum_ns);
            count = count.saturating_add(h.count);
        }
        let mut acc = 0u64;
        for b in buckets.iter_mut() {
            acc = acc.saturating_add(*b);
            *b = acc;
        }
        let q = |q: f64| {
            (!merged.is_empty()).then(|| Duration::from_micros(merged.value_at_quantile(q)))
        };
        ConnectDurationSnapshot {
            count,
            sum: Duration::from_nanos(sum_ns),
            buckets,
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
        }
    }

    /// Renders the Prometheus text exposition format 0.0.4 (see
    /// [`exposition`]).
    pub fn render(&self) -> String {
        exposition::render(self.snapshot())
    }
}

/// Binds `addr` and serves `GET /metrics` on a dedicated thread named
/// [`THREAD_NAME`], never on a worker's ring: a slow scraper must not be able
/// to stall the data path.
///
/// Binding happens before this returns so a bad or busy address fails
/// start-up with the address in the error, instead of surfacing later on a
/// background thread. Returns the actually bound address (useful with port
/// 0) and the thread handle; the thread runs for the life of the process.
pub fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> Result<(SocketAddr, JoinHandle<()>), MetricsError> {
    let server =
        tiny_http::Server::http(addr).map_err(|source| MetricsError::Bind { addr, source })?;
    let bound = server.server_addr().to_ip().unwrap_or(addr);
    let handle = std::thread::Builder::new()
        .name(THREAD_NAME.to_string())
        .spawn(move || serve_loop(&server, &metrics))
        .map_err(MetricsError::Spawn)?;
    tracing::info!(addr = %bound, "metrics endpoint listening");
    Ok((bound, handle))
}

fn serve_loop(server: &tiny_http::Server, metrics: &Metrics) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("");
        let method = request.method().clone();
        let response = match (&method, path) {
            (tiny_http::Method::Get | tiny_http::Method::Head, "/metrics") => with_content_type(
                tiny_http::Response::from_string(metrics.render()),
                CONTENT_TYPE,
            ),
            (_, "/metrics") => with_content_type(
                tiny_http::Response::from_string("method not allowed\n").with_status_code(405),
                "text/plain; charset=utf-8",
            ),
            _ => with_content_type(
                tiny_http::Response::from_string("not found; try /metrics\n").with_status_code(404),
                "text/plain; charset=utf-8",
            ),
        };
        // A scraper that hangs up mid-response is its problem, not ours.
        if let Err(e) = request.respond(response) {
            tracing::debug!(error = %e, "metrics response not delivered");
        }
    }
}

fn with_content_type<R: std::io::Read>(
    response: tiny_http::Response<R>,
    value: &str,
) -> tiny_http::Response<R> {
    match tiny_http::Header::from_bytes(&b"Content-Type"[..], value.as_bytes()) {
        Ok(h) => response.with_header(h),
        // Only constant ASCII values are passed; unreachable in practice.
        Err(()) => response,
    }
}

#[cfg(test)]
mod tests;

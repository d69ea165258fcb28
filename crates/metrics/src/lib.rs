//! Per-worker counters and their Prometheus `/metrics` exposition.
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
//! The HTTP endpoint runs on its own OS thread (the binary's) and sums across
//! workers at scrape time; [`exposition`] hands the sums to the
//! `prometheus-client` crate, which writes the text format. Because each worker is read independently, a
//! scrape is not an atomic cut across workers; every individual series is
//! still monotonic (counters) or a plausible instantaneous value (gauges),
//! which is all Prometheus asks for.
//!
//! This file holds the per-worker counters and their owner [`Metrics`];
//! `labels.rs` the label enums, `snapshot.rs` the sums, `exposition.rs`
//! the text format, `text.rs` the text read back as samples (for the tests
//! and the harness); the HTTP thread is `src/metrics_endpoint.rs`.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hdrhistogram::Histogram;

mod exposition;
mod labels;
mod pool_wait;
mod servers;
mod snapshot;
pub mod text;
mod user_usage;

pub use labels::{
    AuthPath, BackendTlsError, BufferMode, InternalQuery, RejectReason, BACKEND_TLS_ERRORS,
    IDLE_CUT_HELD, INTERNAL_QUERY_KINDS, PIN_REASONS, TRANSACTION_REPLAY_OUTCOMES,
    WRITER_LOST_OUTCOMES,
};
pub use pool_wait::{pool_wait_bucket_bounds, PoolWaitSnapshot, POOL_WAIT_BUCKET_COUNT};
pub use servers::{RoutedSample, ServerSample, ServerTable, SERVER_ROLES, SERVER_STATES};
pub use snapshot::{connect_bucket_bounds, ConnectDurationSnapshot, Snapshot};
pub use user_usage::{UserTable, UserUsage};

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

/// The bucket of a `ns` duration among upper bounds `bounds_ns` (ascending,
/// inclusive); `bounds_ns.len()` is the implicit `+Inf` one.
fn bucket_index(bounds_ns: &[u64], ns: u64) -> usize {
    bounds_ns
        .iter()
        .position(|&le| ns <= le)
        .unwrap_or(bounds_ns.len())
}

/// Per-bucket counts made cumulative in place, as Prometheus reports them;
/// returns the total.
fn accumulate(buckets: &mut [u64]) -> u64 {
    let mut acc = 0u64;
    for b in buckets.iter_mut() {
        acc = acc.saturating_add(*b);
        *b = acc;
    }
    acc
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
    /// Receives re-armed after -ENOBUFS, each with a buffer back for it.
    pub ring_rearms_total: AtomicU64,
    /// Of the -ENOBUFS ends, those of receives that had delivered no byte.
    pub ring_enobufs_empty_total: AtomicU64,
    /// Backend receives a park kept armed, cancelled before the pool's own
    /// exchange on the idle connection or a lease that reads without the ring.
    pub ring_idle_recv_cancels_total: AtomicU64,
    /// Bytes copied from ring buffers into a connection's own buffer.
    pub ring_copied_bytes_total: AtomicU64,
    /// Large-result reads started: a backend read filled its buffer and
    /// the connection took a large buffer for the rest of the result.
    pub large_reads_total: AtomicU64,
    /// Large-result buffers held by connections now.
    pub large_read_buffers_in_use: AtomicI64,
    /// Fixed mode: readable idle clients that found no free slot (and
    /// read into a heap buffer at once).
    pub slot_waits_total: AtomicU64,
    /// Fixed mode: reads (client or backend) still pending on an empty
    /// buffer 10 ms after they were submitted, cancelled so that the idle
    /// connection gives its slot back and waits on a poll.
    pub idle_read_cancels_total: AtomicU64,
    /// Fixed mode: idle clients waiting for readability without a slot
    /// (a poll in flight).
    pub clients_polling: AtomicI64,
    /// Client sockets held as direct descriptors now (accepted into the
    /// ring's file table and not yet closed by IORING_OP_CLOSE).
    pub direct_descriptors_in_use: AtomicI64,
    /// Clients accepted as plain fds while direct descriptors are on (the
    /// table was full), or direct accepts that failed.
    pub direct_descriptor_fallbacks_total: AtomicU64,
    /// Client sessions open now.
    pub client_connections: AtomicI64,
    /// Client connections accepted since start.
    pub client_connections_total: AtomicU64,
    /// Rejected clients, indexed by [`RejectReason::index`]; prefer
    /// [`WorkerMetrics::reject`].
    pub client_rejected_total: [AtomicU64; 7],
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
    /// Sessions a reload closed because their user left the users file
    /// (`--on-user-removed close`).
    pub removed_user_sessions_closed_total: AtomicU64,
    /// Transaction pooling: prepared statements the backend connections
    /// hold on the server now (each connection's LRU).
    pub backend_prepared_statements: AtomicI64,
    /// Transaction pooling: prepared statements the client sessions hold
    /// now (their registries).
    pub client_prepared_statements: AtomicI64,
    /// Transaction pooling: bytes the client sessions' statements keep (each
    /// session's distinct texts once, plus 2 per parameter).
    pub client_prepared_statement_bytes: AtomicI64,
    /// Transaction pooling: prepares refused by --max-prepared-statements
    /// or --max-prepared-bytes (ERR 1461).
    pub client_prepares_refused_total: AtomicU64,
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
    /// Sessions cut for holding a backend connection idle while others
    /// waited, indexed like [`IDLE_CUT_HELD`].
    pub sessions_idle_cut_total: [AtomicU64; IDLE_CUT_HELD.len()],
    /// Several servers: sessions whose backend connection was lost before
    /// any of the answer reached the client, indexed like
    /// [`WRITER_LOST_OUTCOMES`].
    pub writer_lost_total: [AtomicU64; WRITER_LOST_OUTCOMES.len()],
    /// `--transaction-replay`: replays of a transaction the writer took
    /// down, indexed like [`TRANSACTION_REPLAY_OUTCOMES`].
    pub transaction_replays_total: [AtomicU64; TRANSACTION_REPLAY_OUTCOMES.len()],
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
    /// How long sessions waited for a backend connection (`pool_wait.rs`).
    pool_wait: pool_wait::PoolWaitHist,
    /// Causal reads: how long each `MASTER_GTID_WAIT` on a replica took
    /// (the same buckets: a healthy replica answers within the first,
    /// `--causal-read-timeout` lands in one of the second's).
    causal_wait: pool_wait::PoolWaitHist,
    /// Causal reads sent to the writer instead of a replica: the wait
    /// timed out (or answered NULL or an error), or the session cannot
    /// learn its GTIDs.
    pub causal_fallbacks_total: AtomicU64,
    /// Backend connections this worker's pool holds against
    /// `--backend-max-connections` (opening, idle, leased or closing: from
    /// the reservation until its slot is freed). Exported per worker: the
    /// workers share the cap, and a skewed split is what starves one
    /// worker's clients.
    pub backend_held: AtomicI64,
    /// Backend connections closed so that another worker, whose clients
    /// waited, could open one (see `crates/machines/src/pool/share.rs`).
    pub backend_rebalanced_total: AtomicU64,
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
            ring_rearms_total: AtomicU64::new(0),
            ring_idle_recv_cancels_total: AtomicU64::new(0),
            ring_enobufs_empty_total: AtomicU64::new(0),
            ring_copied_bytes_total: AtomicU64::new(0),
            large_reads_total: AtomicU64::new(0),
            large_read_buffers_in_use: AtomicI64::new(0),
            slot_waits_total: AtomicU64::new(0),
            idle_read_cancels_total: AtomicU64::new(0),
            clients_polling: AtomicI64::new(0),
            direct_descriptors_in_use: AtomicI64::new(0),
            direct_descriptor_fallbacks_total: AtomicU64::new(0),
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
            removed_user_sessions_closed_total: AtomicU64::new(0),
            backend_prepared_statements: AtomicI64::new(0),
            client_prepared_statements: AtomicI64::new(0),
            client_prepared_statement_bytes: AtomicI64::new(0),
            client_prepares_refused_total: AtomicU64::new(0),
            statement_reprepares_total: AtomicU64::new(0),
            statement_evictions_total: AtomicU64::new(0),
            sessions_pinned_total: Default::default(),
            sessions_idle_cut_total: Default::default(),
            writer_lost_total: Default::default(),
            transaction_replays_total: Default::default(),
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
            pool_wait: Default::default(),
            causal_wait: Default::default(),
            causal_fallbacks_total: AtomicU64::new(0),
            backend_held: AtomicI64::new(0),
            backend_rebalanced_total: AtomicU64::new(0),
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
        let idx = bucket_index(&CONNECT_BUCKETS_NS, ns);
        let mut h = self.hist();
        // Saturating: a >60 s connect clamps to 60 s in the percentiles
        // instead of being dropped.
        h.hdr.saturating_record(us);
        h.buckets[idx] += 1;
        h.sum_ns = h.sum_ns.saturating_add(ns);
        h.count += 1;
    }

    /// Records how long a session waited for a backend connection (served
    /// or timed out).
    pub fn record_pool_wait(&self, waited: Duration) {
        self.pool_wait.record(waited);
    }

    /// Records one causal read's wait on a replica (reached or not).
    pub fn record_causal_wait(&self, waited: Duration) {
        self.causal_wait.record(waited);
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

/// All workers' metrics plus process-wide state. Shared as `Arc<Metrics>`
/// between the workers and the metrics thread.
pub struct Metrics {
    workers: Box<[WorkerMetrics]>,
    mode: AtomicU8,
    /// Per backend account (`users.rs`).
    users: UserTable,
    /// Per server of a cluster, from the monitor (`servers.rs`).
    servers: ServerTable,
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
            users: UserTable::default(),
            servers: ServerTable::default(),
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

    /// The per-account counters, shared by all workers.
    pub fn users(&self) -> &UserTable {
        &self.users
    }

    /// The per-server list the monitor publishes.
    pub fn servers(&self) -> &ServerTable {
        &self.servers
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

    /// Renders the Prometheus text exposition format 0.0.4 (see
    /// [`exposition`]).
    pub fn render(&self) -> String {
        exposition::render(self.snapshot())
    }
}

#[cfg(test)]
mod tests;

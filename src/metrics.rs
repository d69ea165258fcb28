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
//! workers at scrape time. Because each worker is read independently, a
//! scrape is not an atomic cut across workers; every individual series is
//! still monotonic (counters) or a plausible instantaneous value (gauges),
//! which is all Prometheus asks for.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Content type of the Prometheus text exposition format we emit.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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

/// Upper bounds of the `ringgate_connect_duration_seconds` buckets: the label
/// text exactly as rendered, and the bound in nanoseconds. Kept as text so the
/// `le` labels are stable strings rather than whatever float formatting gives.
const CONNECT_BUCKETS: [(&str, u64); 16] = [
    ("0.0001", 100_000),
    ("0.00025", 250_000),
    ("0.0005", 500_000),
    ("0.001", 1_000_000),
    ("0.0025", 2_500_000),
    ("0.005", 5_000_000),
    ("0.01", 10_000_000),
    ("0.025", 25_000_000),
    ("0.05", 50_000_000),
    ("0.1", 100_000_000),
    ("0.25", 250_000_000),
    ("0.5", 500_000_000),
    ("1", 1_000_000_000),
    ("2.5", 2_500_000_000),
    ("5", 5_000_000_000),
    ("10", 10_000_000_000),
];

/// Number of histogram buckets including the implicit `+Inf` one.
pub const CONNECT_BUCKET_COUNT: usize = CONNECT_BUCKETS.len() + 1;

/// Quantiles exported as `ringgate_connect_duration_seconds_quantile`.
const QUANTILES: [(&str, f64); 3] = [("0.5", 0.5), ("0.99", 0.99), ("0.999", 0.999)];

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
}

impl BufferMode {
    /// Label value used in the exposition (`"fixed"` / `"heap"`).
    pub fn as_str(self) -> &'static str {
        match self {
            BufferMode::Fixed => "fixed",
            BufferMode::Heap => "heap",
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            BufferMode::Fixed => 0,
            BufferMode::Heap => 1,
        }
    }

    fn from_u8(v: u8) -> BufferMode {
        if v == 0 {
            BufferMode::Fixed
        } else {
            BufferMode::Heap
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
}

impl RejectReason {
    /// Every reason, in exposition order (also the index order of
    /// [`Snapshot::client_rejected_total`]).
    pub const ALL: [RejectReason; 4] = [
        RejectReason::Auth,
        RejectReason::MaxConnections,
        RejectReason::Handshake,
        RejectReason::BackendUnavailable,
    ];

    /// Label value used in the exposition.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Auth => "auth",
            RejectReason::MaxConnections => "max_connections",
            RejectReason::Handshake => "handshake",
            RejectReason::BackendUnavailable => "backend_unavailable",
        }
    }

    /// Index into `client_rejected_total` arrays.
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
    /// Client sessions open now.
    pub client_connections: AtomicI64,
    /// Client connections accepted since start.
    pub client_connections_total: AtomicU64,
    /// Rejected clients, indexed by [`RejectReason::index`]; prefer
    /// [`WorkerMetrics::reject`].
    pub client_rejected_total: [AtomicU64; 4],
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
    /// Bytes forwarded client → backend.
    pub bytes_client_to_backend_total: AtomicU64,
    /// Bytes forwarded backend → client.
    pub bytes_backend_to_client_total: AtomicU64,
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
            client_connections: AtomicI64::new(0),
            client_connections_total: AtomicU64::new(0),
            client_rejected_total: Default::default(),
            backend_idle: AtomicI64::new(0),
            backend_busy: AtomicI64::new(0),
            backend_connects_total: AtomicU64::new(0),
            backend_connect_failures_total: AtomicU64::new(0),
            backend_discarded_total: AtomicU64::new(0),
            commands_total: AtomicU64::new(0),
            bytes_client_to_backend_total: AtomicU64::new(0),
            bytes_backend_to_client_total: AtomicU64::new(0),
            connect_duration: Mutex::new(ConnectHist::new()),
        }
    }

    /// Records one accept → auth OK duration. Called once per connection, so
    /// the (uncontended except during a scrape) mutex is off the hot path.
    pub fn record_connect(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let idx = CONNECT_BUCKETS
            .iter()
            .position(|&(_, le_ns)| ns <= le_ns)
            .unwrap_or(CONNECT_BUCKETS.len());
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
    CONNECT_BUCKETS.iter().map(|&(_, ns)| ns as f64 / 1e9)
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
    pub client_connections: i64,
    pub client_connections_total: u64,
    /// Indexed by [`RejectReason::index`]; see [`Snapshot::rejected`].
    pub client_rejected_total: [u64; 4],
    pub backend_idle: i64,
    pub backend_busy: i64,
    pub backend_connects_total: u64,
    pub backend_connect_failures_total: u64,
    pub backend_discarded_total: u64,
    pub commands_total: u64,
    pub bytes_client_to_backend_total: u64,
    pub bytes_backend_to_client_total: u64,
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
             (auth={} max_connections={} handshake={} backend_unavailable={}) \
             commands={} bytes_c2b={} bytes_b2c={} backend_connects={} \
             backend_connect_failures={} backend_discarded={} heap_fallbacks={} \
             connect_us_p50={} p99={} p999={}",
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
        let mut rejected = [0u64; 4];
        for w in self.workers.iter() {
            for (sum, c) in rejected.iter_mut().zip(&w.client_rejected_total) {
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
            client_connections: i(|w| &w.client_connections),
            client_connections_total: u(|w| &w.client_connections_total),
            client_rejected_total: rejected,
            backend_idle: i(|w| &w.backend_idle),
            backend_busy: i(|w| &w.backend_busy),
            backend_connects_total: u(|w| &w.backend_connects_total),
            backend_connect_failures_total: u(|w| &w.backend_connect_failures_total),
            backend_discarded_total: u(|w| &w.backend_discarded_total),
            commands_total: u(|w| &w.commands_total),
            bytes_client_to_backend_total: u(|w| &w.bytes_client_to_backend_total),
            bytes_backend_to_client_total: u(|w| &w.bytes_backend_to_client_total),
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

    /// Renders the Prometheus text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let s = self.snapshot();
        let mut out = String::with_capacity(4096);
        let o = &mut out;
        let mode = format!("mode=\"{}\"", s.mode);

        header(o, "ringgate_workers", "gauge", "Number of worker threads.");
        sample(o, "ringgate_workers", "", s.workers);

        header(
            o,
            "ringgate_read_buffers_total",
            "gauge",
            "Slots in the registered read-buffer tables (0 in heap mode); mode is the effective buffer mode.",
        );
        sample(
            o,
            "ringgate_read_buffers_total",
            &mode,
            s.read_buffers_total,
        );
        header(
            o,
            "ringgate_read_buffers_in_use",
            "gauge",
            "Read buffers (fixed slots or heap buffers) currently held, by owning connection side.",
        );
        sample(
            o,
            "ringgate_read_buffers_in_use",
            "owner=\"client\"",
            s.read_buffers_in_use_client,
        );
        sample(
            o,
            "ringgate_read_buffers_in_use",
            "owner=\"backend\"",
            s.read_buffers_in_use_backend,
        );
        header(
            o,
            "ringgate_read_buffers_free",
            "gauge",
            "Free slots in the registered read-buffer tables.",
        );
        sample(o, "ringgate_read_buffers_free", "", s.read_buffers_free);
        header(
            o,
            "ringgate_read_buffer_heap_fallbacks_total",
            "counter",
            "Times the fixed-buffer pool was exhausted and a heap buffer was handed out.",
        );
        sample(
            o,
            "ringgate_read_buffer_heap_fallbacks_total",
            "",
            s.heap_fallbacks_total,
        );

        header(
            o,
            "ringgate_client_connections",
            "gauge",
            "Client sessions currently open.",
        );
        sample(o, "ringgate_client_connections", "", s.client_connections);
        header(
            o,
            "ringgate_client_connections_total",
            "counter",
            "Client connections accepted since start.",
        );
        sample(
            o,
            "ringgate_client_connections_total",
            "",
            s.client_connections_total,
        );
        header(
            o,
            "ringgate_client_rejected_total",
            "counter",
            "Client connections rejected, by reason.",
        );
        for r in RejectReason::ALL {
            let labels = format!("reason=\"{}\"", r.as_str());
            sample(o, "ringgate_client_rejected_total", &labels, s.rejected(r));
        }

        header(
            o,
            "ringgate_backend_connections",
            "gauge",
            "Backend connections, by state.",
        );
        sample(
            o,
            "ringgate_backend_connections",
            "state=\"idle\"",
            s.backend_idle,
        );
        sample(
            o,
            "ringgate_backend_connections",
            "state=\"busy\"",
            s.backend_busy,
        );
        header(
            o,
            "ringgate_backend_connects_total",
            "counter",
            "Backend connections established.",
        );
        sample(
            o,
            "ringgate_backend_connects_total",
            "",
            s.backend_connects_total,
        );
        header(
            o,
            "ringgate_backend_connect_failures_total",
            "counter",
            "Backend connection attempts that failed.",
        );
        sample(
            o,
            "ringgate_backend_connect_failures_total",
            "",
            s.backend_connect_failures_total,
        );
        header(
            o,
            "ringgate_backend_discarded_total",
            "counter",
            "Backend connections discarded instead of being returned to the pool.",
        );
        sample(
            o,
            "ringgate_backend_discarded_total",
            "",
            s.backend_discarded_total,
        );

        header(
            o,
            "ringgate_commands_total",
            "counter",
            "Client commands forwarded to a backend.",
        );
        sample(o, "ringgate_commands_total", "", s.commands_total);
        header(
            o,
            "ringgate_bytes_total",
            "counter",
            "Bytes forwarded, by direction.",
        );
        sample(
            o,
            "ringgate_bytes_total",
            "direction=\"client_to_backend\"",
            s.bytes_client_to_backend_total,
        );
        sample(
            o,
            "ringgate_bytes_total",
            "direction=\"backend_to_client\"",
            s.bytes_backend_to_client_total,
        );

        let cd = &s.connect_duration;
        header(
            o,
            "ringgate_connect_duration_seconds",
            "histogram",
            "Time from client accept to successful authentication.",
        );
        for (i, &cum) in cd.buckets.iter().enumerate() {
            let le = CONNECT_BUCKETS.get(i).map_or("+Inf", |&(le, _)| le);
            let labels = format!("le=\"{le}\"");
            sample(o, "ringgate_connect_duration_seconds_bucket", &labels, cum);
        }
        sample(
            o,
            "ringgate_connect_duration_seconds_sum",
            "",
            Float(cd.sum.as_secs_f64()),
        );
        sample(o, "ringgate_connect_duration_seconds_count", "", cd.count);
        header(
            o,
            "ringgate_connect_duration_seconds_quantile",
            "gauge",
            "Quantiles of the connect duration since start, from an HDR histogram (3 significant digits); NaN until the first connect.",
        );
        for ((label, _), v) in QUANTILES.iter().zip([cd.p50, cd.p99, cd.p999]) {
            let labels = format!("quantile=\"{label}\"");
            let v = v.map_or(f64::NAN, |d| d.as_secs_f64());
            sample(
                o,
                "ringgate_connect_duration_seconds_quantile",
                &labels,
                Float(v),
            );
        }
        out
    }
}

/// A float sample value, formatted the Prometheus way (`+Inf`, `-Inf`,
/// `NaN`; Rust's `Display` would print `inf`). Rust's float `Display` never
/// uses exponent notation and round-trips, which Prometheus accepts.
struct Float(f64);

impl fmt::Display for Float {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v.is_nan() {
            f.write_str("NaN")
        } else if v.is_infinite() {
            f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" })
        } else {
            write!(f, "{v}")
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: impl fmt::Display) {
    let _ = if labels.is_empty() {
        writeln!(out, "{name} {value}")
    } else {
        writeln!(out, "{name}{{{labels}}} {value}")
    };
}

/// Parses Prometheus text exposition into `name{labels}` → value, with the
/// key exactly as written on the line (so `ringgate_bytes_total{direction="client_to_backend"}`
/// is looked up verbatim). Comments, blank lines and unparsable lines are
/// skipped; a trailing timestamp is ignored. Meant for tests and the bench,
/// not as a general-purpose parser.
pub fn parse_prometheus_text(text: &str) -> HashMap<String, f64> {
    let mut map = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(split) = key_end(line) else { continue };
        let (key, rest) = line.split_at(split);
        let Some(value) = rest.split_whitespace().next().and_then(parse_value) else {
            continue;
        };
        map.insert(key.to_string(), value);
    }
    map
}

/// Byte index where the `name{labels}` part of a sample line ends. Label
/// values are quoted and may contain spaces, braces and escaped quotes, so
/// the closing brace is found by scanning with quote awareness.
fn key_end(line: &str) -> Option<usize> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    if !line[name_end..].starts_with('{') {
        return Some(name_end);
    }
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in line.char_indices().skip_while(|&(i, _)| i <= name_end) {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '}' if !in_quotes => return Some(i + 1),
            _ => {}
        }
    }
    None
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
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
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    const ALL_NAMES: [(&str, &str); 16] = [
        ("ringgate_workers", "gauge"),
        ("ringgate_read_buffers_total", "gauge"),
        ("ringgate_read_buffers_in_use", "gauge"),
        ("ringgate_read_buffers_free", "gauge"),
        ("ringgate_read_buffer_heap_fallbacks_total", "counter"),
        ("ringgate_client_connections", "gauge"),
        ("ringgate_client_connections_total", "counter"),
        ("ringgate_client_rejected_total", "counter"),
        ("ringgate_backend_connections", "gauge"),
        ("ringgate_backend_connects_total", "counter"),
        ("ringgate_backend_connect_failures_total", "counter"),
        ("ringgate_backend_discarded_total", "counter"),
        ("ringgate_commands_total", "counter"),
        ("ringgate_bytes_total", "counter"),
        ("ringgate_connect_duration_seconds", "histogram"),
        ("ringgate_connect_duration_seconds_quantile", "gauge"),
    ];

    fn populated() -> Arc<Metrics> {
        let m = Metrics::new(2, BufferMode::Fixed);
        for (i, k) in [(0usize, 1u64), (1, 10)] {
            let w = m.worker(i);
            let ki = k as i64;
            w.read_buffers_total.store(100 * k, Ordering::Relaxed);
            w.read_buffers_free.store(90 * ki, Ordering::Relaxed);
            w.read_buffers_in_use_client
                .store(3 * ki, Ordering::Relaxed);
            w.read_buffers_in_use_backend
                .store(4 * ki, Ordering::Relaxed);
            w.heap_fallbacks_total.fetch_add(5 * k, Ordering::Relaxed);
            w.client_connections.fetch_add(6 * ki, Ordering::Relaxed);
            w.client_connections_total
                .fetch_add(7 * k, Ordering::Relaxed);
            w.backend_idle.fetch_add(8 * ki, Ordering::Relaxed);
            w.backend_busy.fetch_add(9 * ki, Ordering::Relaxed);
            w.backend_connects_total
                .fetch_add(11 * k, Ordering::Relaxed);
            w.backend_connect_failures_total
                .fetch_add(12 * k, Ordering::Relaxed);
            w.backend_discarded_total
                .fetch_add(13 * k, Ordering::Relaxed);
            w.commands_total.fetch_add(14 * k, Ordering::Relaxed);
            w.bytes_client_to_backend_total
                .fetch_add(15 * k, Ordering::Relaxed);
            w.bytes_backend_to_client_total
                .fetch_add(16 * k, Ordering::Relaxed);
            w.reject(RejectReason::Auth);
            w.reject(RejectReason::BackendUnavailable);
        }
        m.worker(1).reject(RejectReason::MaxConnections);
        m
    }

    #[test]
    fn worker_entries_do_not_share_cache_lines() {
        assert!(std::mem::align_of::<WorkerMetrics>() >= 128);
        assert_eq!(std::mem::size_of::<WorkerMetrics>() % 128, 0);
    }

    #[test]
    fn render_has_help_and_type_for_every_name() {
        let text = populated().render();
        for (name, kind) in ALL_NAMES {
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "missing HELP for {name}"
            );
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "missing TYPE for {name}"
            );
        }
        // Every sample line belongs to a declared family.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = &line[..line.find(['{', ' ']).unwrap()];
            let family = name
                .strip_suffix("_bucket")
                .or_else(|| name.strip_suffix("_sum"))
                .or_else(|| name.strip_suffix("_count"))
                .filter(|f| *f == "ringgate_connect_duration_seconds")
                .unwrap_or(name);
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "undeclared {name}"
            );
        }
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn sums_across_two_workers() {
        let m = populated();
        let p = parse_prometheus_text(&m.render());
        let get = |k: &str| *p.get(k).unwrap_or_else(|| panic!("missing {k}"));
        assert_eq!(get("ringgate_workers"), 2.0);
        assert_eq!(get("ringgate_read_buffers_total{mode=\"fixed\"}"), 1100.0);
        assert_eq!(get("ringgate_read_buffers_free"), 990.0);
        assert_eq!(get("ringgate_read_buffers_in_use{owner=\"client\"}"), 33.0);
        assert_eq!(get("ringgate_read_buffers_in_use{owner=\"backend\"}"), 44.0);
        assert_eq!(get("ringgate_read_buffer_heap_fallbacks_total"), 55.0);
        assert_eq!(get("ringgate_client_connections"), 66.0);
        assert_eq!(get("ringgate_client_connections_total"), 77.0);
        assert_eq!(get("ringgate_client_rejected_total{reason=\"auth\"}"), 2.0);
        assert_eq!(
            get("ringgate_client_rejected_total{reason=\"max_connections\"}"),
            1.0
        );
        assert_eq!(
            get("ringgate_client_rejected_total{reason=\"handshake\"}"),
            0.0
        );
        assert_eq!(
            get("ringgate_client_rejected_total{reason=\"backend_unavailable\"}"),
            2.0
        );
        assert_eq!(get("ringgate_backend_connections{state=\"idle\"}"), 88.0);
        assert_eq!(get("ringgate_backend_connections{state=\"busy\"}"), 99.0);
        assert_eq!(get("ringgate_backend_connects_total"), 121.0);
        assert_eq!(get("ringgate_backend_connect_failures_total"), 132.0);
        assert_eq!(get("ringgate_backend_discarded_total"), 143.0);
        assert_eq!(get("ringgate_commands_total"), 154.0);
        assert_eq!(
            get("ringgate_bytes_total{direction=\"client_to_backend\"}"),
            165.0
        );
        assert_eq!(
            get("ringgate_bytes_total{direction=\"backend_to_client\"}"),
            176.0
        );

        let s = m.snapshot();
        assert_eq!(s.commands_total, 154);
        assert_eq!(s.rejected_total(), 5);
        assert_eq!(s.rejected(RejectReason::MaxConnections), 1);
        assert!(s.to_string().contains("commands=154"));
    }

    #[test]
    fn mode_switch_changes_label() {
        let m = Metrics::new(1, BufferMode::Fixed);
        m.set_mode(BufferMode::Heap);
        assert_eq!(m.mode(), BufferMode::Heap);
        let p = parse_prometheus_text(&m.render());
        assert_eq!(
            p.get("ringgate_read_buffers_total{mode=\"heap\"}"),
            Some(&0.0)
        );
        assert!(!p.contains_key("ringgate_read_buffers_total{mode=\"fixed\"}"));
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_count_is_right() {
        let m = Metrics::new(2, BufferMode::Heap);
        let us = Duration::from_micros;
        // Exactly on a bound counts in that bucket (le is "<=").
        m.worker(0).record_connect(us(100));
        m.worker(0).record_connect(us(101));
        m.worker(1).record_connect(us(2_500));
        m.worker(1).record_connect(Duration::from_secs(1));
        m.worker(1).record_connect(Duration::from_secs(90)); // beyond 10 s and the hdr range
        let p = parse_prometheus_text(&m.render());
        let b = |le: &str| p[&format!("ringgate_connect_duration_seconds_bucket{{le=\"{le}\"}}")];
        assert_eq!(b("0.0001"), 1.0);
        assert_eq!(b("0.00025"), 2.0);
        assert_eq!(b("0.001"), 2.0);
        assert_eq!(b("0.0025"), 3.0);
        assert_eq!(b("0.5"), 3.0);
        assert_eq!(b("1"), 4.0);
        assert_eq!(b("10"), 4.0);
        assert_eq!(b("+Inf"), 5.0);
        assert_eq!(p["ringgate_connect_duration_seconds_count"], 5.0);
        let sum = p["ringgate_connect_duration_seconds_sum"];
        assert!((sum - 91.002701).abs() < 1e-9, "sum {sum}");

        let mut prev = 0.0;
        let mut n = 0;
        for line in m.render().lines().filter(|l| l.contains("_bucket{")) {
            let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(v >= prev, "not cumulative: {line}");
            prev = v;
            n += 1;
        }
        assert_eq!(n, CONNECT_BUCKET_COUNT);

        let s = m.snapshot().connect_duration;
        assert_eq!(s.count, 5);
        assert_eq!(s.buckets[CONNECT_BUCKET_COUNT - 1], 5);
        assert_eq!(connect_bucket_bounds().count(), CONNECT_BUCKET_COUNT - 1);
    }

    #[test]
    fn quantiles_come_from_merged_histogram() {
        let m = Metrics::new(2, BufferMode::Fixed);
        let p = parse_prometheus_text(&m.render());
        assert!(p["ringgate_connect_duration_seconds_quantile{quantile=\"0.5\"}"].is_nan());
        assert_eq!(m.snapshot().connect_duration.p99, None);

        for i in 1..=1000u64 {
            m.worker((i % 2) as usize)
                .record_connect(Duration::from_micros(i));
        }
        let p = parse_prometheus_text(&m.render());
        let q =
            |q: &str| p[&format!("ringgate_connect_duration_seconds_quantile{{quantile=\"{q}\"}}")];
        assert!((q("0.5") - 0.000500).abs() < 1e-6, "{}", q("0.5"));
        assert!((q("0.99") - 0.000990).abs() < 1e-6, "{}", q("0.99"));
        assert!((q("0.999") - 0.000999).abs() < 1e-6, "{}", q("0.999"));
        let s = m.snapshot().connect_duration;
        assert_eq!(s.p50, Some(Duration::from_micros(500)));
    }

    #[test]
    fn parse_round_trip_and_edge_cases() {
        let m = populated();
        m.worker(0).record_connect(Duration::from_micros(300));
        let text = m.render();
        let p = parse_prometheus_text(&text);
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        assert_eq!(p.len(), samples);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (k, v) = line.rsplit_once(' ').unwrap();
            let parsed = p[k];
            let expected = parse_value(v).unwrap();
            assert!(
                parsed == expected || (parsed.is_nan() && expected.is_nan()),
                "{line}"
            );
        }

        let odd = "# comment\n\nfoo{a=\"x y}\\\"z\"} 1.5 1700000000\nbar +Inf\nbaz NaN\nbroken{a=\"b\" 3\nnovalue\nqux -2\n";
        let p = parse_prometheus_text(odd);
        assert_eq!(p["foo{a=\"x y}\\\"z\"}"], 1.5);
        assert_eq!(p["bar"], f64::INFINITY);
        assert!(p["baz"].is_nan());
        assert_eq!(p["qux"], -2.0);
        assert_eq!(p.len(), 4);
    }

    fn http_get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp
    }

    #[test]
    fn serve_answers_real_http() {
        let m = populated();
        let (addr, handle) = serve("127.0.0.1:0".parse().unwrap(), Arc::clone(&m)).unwrap();
        assert_ne!(addr.port(), 0);
        assert_eq!(handle.thread().name(), Some(THREAD_NAME));

        let resp = http_get(addr, "/metrics");
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(
            resp.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{resp}"
        );
        let body = &resp[resp.find("\r\n\r\n").unwrap() + 4..];
        let p = parse_prometheus_text(body);
        assert_eq!(p["ringgate_commands_total"], 154.0);

        // Live values: the next scrape sees new counts.
        m.worker(0).commands_total.fetch_add(1, Ordering::Relaxed);
        let resp = http_get(addr, "/metrics?x=1");
        assert!(resp.contains("\nringgate_commands_total 155\n"), "{resp}");

        let resp = http_get(addr, "/");
        assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    }

    #[test]
    fn serve_reports_bind_failure_with_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let err = serve(addr, Metrics::new(1, BufferMode::Fixed)).unwrap_err();
        assert!(matches!(err, MetricsError::Bind { .. }));
        assert!(err.to_string().contains(&addr.to_string()), "{err}");
    }
}

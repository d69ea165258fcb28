//! The pool wait histogram (`ringgate_pool_wait_duration_seconds`): how
//! long sessions waited for a backend connection, from the moment they
//! were queued until a connection was found for them or
//! `--backend-wait-timeout` failed them (ERR 1040). Sessions that found one
//! at once never wait and are not counted; nor are those that closed while
//! waiting.
//!
//! Lock-free, unlike the connect histogram (no percentiles from an HDR
//! histogram here): a worker records one wait per served waiter, which
//! under load is once per statement, so the record is a few relaxed adds
//! on the worker's own cache line.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the buckets in nanoseconds: from a wait that ended with
/// the batch of completions it began in (tens of µs) to past the default
/// `--backend-wait-timeout` (5 s) and the bench's 30 s.
const BOUNDS_NS: [u64; 15] = [
    100_000,
    500_000,
    1_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
    60_000_000_000,
];

/// Buckets including the implicit `+Inf` one.
pub const POOL_WAIT_BUCKET_COUNT: usize = BOUNDS_NS.len() + 1;

/// One worker's waits: per-bucket (not cumulative) counts, sum and count.
#[derive(Default)]
pub struct PoolWaitHist {
    buckets: [AtomicU64; POOL_WAIT_BUCKET_COUNT],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

/// The workers' waits summed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolWaitSnapshot {
    pub count: u64,
    pub sum: Duration,
    /// Cumulative counts per bucket (bounds: [`pool_wait_bucket_bounds`]);
    /// the last is `+Inf` and equals `count`.
    pub buckets: [u64; POOL_WAIT_BUCKET_COUNT],
}

/// Upper bounds (seconds) of the buckets, excluding `+Inf`.
pub fn pool_wait_bucket_bounds() -> impl Iterator<Item = f64> {
    BOUNDS_NS.iter().map(|&ns| ns as f64 / 1e9)
}

impl PoolWaitHist {
    pub fn record(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[super::bucket_index(&BOUNDS_NS, ns)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }
}

impl PoolWaitSnapshot {
    /// Sum `hists` (one per worker) and make the buckets cumulative.
    pub fn sum<'a>(hists: impl Iterator<Item = &'a PoolWaitHist>) -> PoolWaitSnapshot {
        let mut s = PoolWaitSnapshot::default();
        let mut sum_ns = 0u64;
        for h in hists {
            for (b, c) in s.buckets.iter_mut().zip(&h.buckets) {
                *b = b.saturating_add(c.load(Relaxed));
            }
            sum_ns = sum_ns.saturating_add(h.sum_ns.load(Relaxed));
            s.count = s.count.saturating_add(h.count.load(Relaxed));
        }
        let acc = super::accumulate(&mut s.buckets);
        // A worker may have counted a wait between reading its buckets and
        // its count: keep `+Inf` equal to the count, as Prometheus wants.
        s.count = s.count.max(acc);
        s.buckets[POOL_WAIT_BUCKET_COUNT - 1] = s.count;
        s.sum = Duration::from_nanos(sum_ns);
        s
    }
}

//! Every worker's metrics summed into plain numbers ([`Snapshot`]): what a
//! scrape renders, the shutdown log line prints and tests compare. Workers
//! are read one at a time, so a snapshot is not an atomic cut across them.

use super::*;

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
    pub ring_rearms_total: u64,
    pub ring_idle_recv_cancels_total: u64,
    pub ring_enobufs_empty_total: u64,
    pub ring_copied_bytes_total: u64,
    pub large_reads_total: u64,
    pub large_read_buffers_in_use: i64,
    pub slot_waits_total: u64,
    pub idle_read_cancels_total: u64,
    pub clients_polling: i64,
    pub direct_descriptors_in_use: i64,
    pub direct_descriptor_fallbacks_total: u64,
    pub client_connections: i64,
    pub client_connections_total: u64,
    /// Indexed by [`RejectReason::index`]; see [`Snapshot::rejected`].
    pub client_rejected_total: [u64; 7],
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
    pub removed_user_sessions_closed_total: u64,
    pub backend_prepared_statements: i64,
    pub client_prepared_statements: i64,
    pub client_prepared_statement_bytes: i64,
    pub client_prepares_refused_total: u64,
    pub statement_reprepares_total: u64,
    pub statement_evictions_total: u64,
    /// Indexed like [`PIN_REASONS`].
    pub sessions_pinned_total: [u64; PIN_REASONS.len()],
    /// Indexed like [`IDLE_CUT_HELD`].
    pub sessions_idle_cut_total: [u64; IDLE_CUT_HELD.len()],
    pub writer_lost_total: [u64; WRITER_LOST_OUTCOMES.len()],
    pub transaction_replays_total: [u64; TRANSACTION_REPLAY_OUTCOMES.len()],
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
    /// Per worker, by worker index: [`WorkerMetrics::backend_held`].
    pub worker_backend_held: Vec<i64>,
    /// Per worker: [`WorkerMetrics::pool_waiters`].
    pub worker_pool_waiters: Vec<i64>,
    pub backend_rebalanced_total: u64,
    pub ring_ebusy_reaps_total: u64,
    pub ring_cq_overflow_flushes_total: u64,
    pub ring_synthetic_failures_total: u64,
    pub ring_enters_total: u64,
    pub ring_enter_waits_total: u64,
    pub ring_sqes_total: u64,
    pub ring_busy_poll_hits_total: u64,
    pub ring_busy_poll_sleeps_total: u64,
    pub connect_duration: ConnectDurationSnapshot,
    /// How long sessions waited for a backend connection, summed.
    pub pool_wait: PoolWaitSnapshot,
    /// [`WorkerMetrics::record_causal_wait`], summed.
    pub causal_wait: PoolWaitSnapshot,
    pub causal_fallbacks_total: u64,
    /// Per backend account: (user, backend connections, limit waits).
    pub users: Vec<(String, usize, u64)>,
    /// Per server of a cluster, as the monitor last published it.
    pub servers: Vec<crate::ServerSample>,
    /// `--read-write-split`: statements routed to each server.
    pub routed: Vec<crate::RoutedSample>,
    /// Several servers: backend connections to each, all workers.
    pub pooled: Vec<(String, i64)>,
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

impl Metrics {
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
        let mut rejected = [0u64; 7];
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
        let mut idle_cut = [0u64; IDLE_CUT_HELD.len()];
        for w in self.workers.iter() {
            for (sum, c) in idle_cut.iter_mut().zip(&w.sessions_idle_cut_total) {
                *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        let mut writer_lost = [0u64; WRITER_LOST_OUTCOMES.len()];
        for w in self.workers.iter() {
            for (sum, c) in writer_lost.iter_mut().zip(&w.writer_lost_total) {
                *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        let mut replays = [0u64; TRANSACTION_REPLAY_OUTCOMES.len()];
        for w in self.workers.iter() {
            for (sum, c) in replays.iter_mut().zip(&w.transaction_replays_total) {
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
            ring_rearms_total: u(|w| &w.ring_rearms_total),
            ring_idle_recv_cancels_total: u(|w| &w.ring_idle_recv_cancels_total),
            ring_enobufs_empty_total: u(|w| &w.ring_enobufs_empty_total),
            ring_copied_bytes_total: u(|w| &w.ring_copied_bytes_total),
            large_reads_total: u(|w| &w.large_reads_total),
            large_read_buffers_in_use: i(|w| &w.large_read_buffers_in_use),
            slot_waits_total: u(|w| &w.slot_waits_total),
            idle_read_cancels_total: u(|w| &w.idle_read_cancels_total),
            clients_polling: i(|w| &w.clients_polling),
            direct_descriptors_in_use: i(|w| &w.direct_descriptors_in_use),
            direct_descriptor_fallbacks_total: u(|w| &w.direct_descriptor_fallbacks_total),
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
            removed_user_sessions_closed_total: u(|w| &w.removed_user_sessions_closed_total),
            backend_prepared_statements: i(|w| &w.backend_prepared_statements),
            client_prepared_statements: i(|w| &w.client_prepared_statements),
            client_prepared_statement_bytes: i(|w| &w.client_prepared_statement_bytes),
            client_prepares_refused_total: u(|w| &w.client_prepares_refused_total),
            statement_reprepares_total: u(|w| &w.statement_reprepares_total),
            statement_evictions_total: u(|w| &w.statement_evictions_total),
            sessions_pinned_total: pinned,
            sessions_idle_cut_total: idle_cut,
            writer_lost_total: writer_lost,
            transaction_replays_total: replays,
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
            worker_backend_held: self
                .workers
                .iter()
                .map(|w| w.backend_held.load(Ordering::Relaxed))
                .collect(),
            worker_pool_waiters: self
                .workers
                .iter()
                .map(|w| w.pool_waiters.load(Ordering::Relaxed))
                .collect(),
            backend_rebalanced_total: u(|w| &w.backend_rebalanced_total),
            ring_ebusy_reaps_total: u(|w| &w.ring_ebusy_reaps),
            ring_cq_overflow_flushes_total: u(|w| &w.ring_overflow_flushes),
            ring_synthetic_failures_total: u(|w| &w.ring_synthetic_failures),
            ring_enters_total: u(|w| &w.ring_enters),
            ring_enter_waits_total: u(|w| &w.ring_enter_waits),
            ring_sqes_total: u(|w| &w.ring_sqes),
            ring_busy_poll_hits_total: u(|w| &w.ring_busy_poll_hits),
            ring_busy_poll_sleeps_total: u(|w| &w.ring_busy_poll_sleeps),
            connect_duration: self.connect_snapshot(),
            pool_wait: PoolWaitSnapshot::sum(self.workers.iter().map(|w| &w.pool_wait)),
            causal_wait: PoolWaitSnapshot::sum(self.workers.iter().map(|w| &w.causal_wait)),
            causal_fallbacks_total: u(|w| &w.causal_fallbacks_total),
            users: self.users.snapshot(),
            servers: self.servers.snapshot(),
            routed: self.servers.routed_snapshot(),
            pooled: self.servers.pooled_snapshot(),
        }
    }

    /// Merges the workers' histograms. Each worker's lock is held only for
    /// the copy of its own histogram, so a scrape delays at most one connect
    /// on one worker by a few microseconds.
    pub(super) fn connect_snapshot(&self) -> ConnectDurationSnapshot {
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
        accumulate(&mut buckets);
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
}

//! The `/metrics` text: a [`Snapshot`] written in the Prometheus text
//! format 0.0.4 by the `prometheus-client` crate.
//!
//! The workers keep their own plain atomics (see [`super::WorkerMetrics`]),
//! because the data path must not share anything between cores; the crate's
//! own metric types would be one shared value per series. So each scrape
//! sums the workers into a [`Snapshot`] and registers it as one
//! [`Collector`] in a fresh [`Registry`]: the crate then does the naming
//! (`_total` on counters, `_bucket`/`_sum`/`_count` on histograms), HELP and
//! TYPE lines, label escaping and float formatting (`NaN`, `+Inf`, `le`
//! labels as Prometheus's Go client writes them).
//!
//! Metric names, labels and meanings are an interface: dashboards, alerts,
//! `docs/operations.md` and the tests rely on them.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{
    connect_bucket_bounds, pool_wait_bucket_bounds, AuthPath, RejectReason, ServerSample, Snapshot,
    BACKEND_TLS_ERRORS, IDLE_CUT_HELD, INTERNAL_QUERY_KINDS, PIN_REASONS, SERVER_ROLES,
    SERVER_STATES, TRANSACTION_REPLAY_OUTCOMES, WRITER_LOST_OUTCOMES,
};

/// Writes `snapshot` as Prometheus text.
pub(super) fn render(snapshot: Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposition(snapshot)));
    let mut out = String::with_capacity(8192);
    // Only fails when the writer fails, and a String never does.
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
        tracing::warn!(error = %e, "cannot encode metrics");
    }
    out
}

/// One scrape's values.
#[derive(Debug)]
struct Exposition(Snapshot);

/// A label set of one pair, e.g. `owner="client"`.
type Label = [(&'static str, &'static str); 1];

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        gauge(
            &mut enc,
            "ringgate_workers",
            "Number of worker threads.",
            s.workers,
        )?;

        gauges(
            &mut enc,
            "ringgate_read_buffers_total",
            "Slots in the registered read-buffer tables (0 in heap mode); mode is the effective \
             buffer mode.",
            &[([("mode", s.mode.as_str())], s.read_buffers_total)],
        )?;
        gauges(
            &mut enc,
            "ringgate_read_buffers_in_use",
            "Read buffers (fixed slots or heap buffers) currently held, by owning connection side.",
            &[
                ([("owner", "client")], s.read_buffers_in_use_client),
                ([("owner", "backend")], s.read_buffers_in_use_backend),
            ],
        )?;
        gauge(
            &mut enc,
            "ringgate_read_buffers_free",
            "Free slots in the registered read-buffer tables.",
            s.read_buffers_free,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_heap_fallbacks_total",
            "Times the fixed-buffer pool was exhausted and a heap buffer was handed out; in \
             ring mode, reads made into a connection's heap buffer because the ring was empty.",
            s.heap_fallbacks_total,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_slot_waits_total",
            "Fixed mode: idle clients that became readable while no slot was free (they read \
             into a heap buffer at once, counted as a heap fallback too).",
            s.slot_waits_total,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_idle_cancels_total",
            "Fixed mode: reads (client or backend) still pending 10 ms after they were \
             submitted, cancelled so that the idle connection gives its slot back and waits on \
             a poll (a failed cancel, sent again, counts again).",
            s.idle_read_cancels_total,
        )?;
        gauge(
            &mut enc,
            "ringgate_clients_polling",
            "Fixed mode: clients waiting for their next bytes holding no slot (a poll in flight).",
            s.clients_polling,
        )?;
        gauge(
            &mut enc,
            "ringgate_read_buffer_ring_buffers",
            "Buffers in the workers' provided-buffer rings (ring mode; 0 otherwise).",
            s.ring_buffers_total as i64,
        )?;
        gauge(
            &mut enc,
            "ringgate_read_buffer_ring_in_use",
            "Provided-ring buffers holding bytes not yet forwarded or consumed.",
            s.ring_buffers_in_use,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_ring_enobufs_total",
            "Multishot receives ended because the buffer ring was empty (-ENOBUFS); each is \
             re-armed once a buffer is back for it, or served by a plain read.",
            s.ring_enobufs_total,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_ring_rearms_total",
            "Multishot receives re-armed after -ENOBUFS, one at the end of each batch of \
             completions while the ring has buffers (with the ring empty a plain read serves).",
            s.ring_rearms_total,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_ring_idle_recv_cancels_total",
            "Backend receives that transaction pooling's park kept armed on an idle connection, \
             cancelled before the pool's own exchange on it (a reset, a lease's setup) or a lease \
             to a session that reads without the ring (client TLS or compression).",
            s.ring_idle_recv_cancels_total,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_ring_enobufs_empty_total",
            "Of the -ENOBUFS ends, those of receives that had delivered no byte since they were \
             armed (armed for nothing: a few when the ring runs dry, never most of them).",
            s.ring_enobufs_empty_total,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_ring_copied_bytes_total",
            "Bytes copied out of ring buffers into a connection's own buffer (a client command \
             cut at a ring buffer's end, bytes kept across reads); relayed results are sent \
             straight from the ring and copy none.",
            s.ring_copied_bytes_total,
        )?;
        counter(
            &mut enc,
            "ringgate_read_buffer_large_reads_total",
            "Large-result reads started: a backend read filled its read buffer, and the \
             connection read the rest of the result into a --large-read-size buffer.",
            s.large_reads_total,
        )?;
        gauge(
            &mut enc,
            "ringgate_read_buffer_large_in_use",
            "Large-result buffers held now (at most 16 per worker; 0 whenever no large result \
             is being relayed).",
            s.large_read_buffers_in_use,
        )?;

        gauge(
            &mut enc,
            "ringgate_direct_descriptors_in_use",
            "Client sockets held as direct descriptors (slots of the workers' io_uring file \
             tables) now; 0 with --direct-descriptors off or when the kernel lacks them.",
            s.direct_descriptors_in_use,
        )?;
        counter(
            &mut enc,
            "ringgate_direct_descriptor_fallbacks_total",
            "Clients accepted as plain fds although direct descriptors are on (a worker's file \
             table was full), and direct accepts that failed.",
            s.direct_descriptor_fallbacks_total,
        )?;
        gauge(
            &mut enc,
            "ringgate_client_connections",
            "Client sessions currently open.",
            s.client_connections,
        )?;
        counter(
            &mut enc,
            "ringgate_client_connections_total",
            "Client connections accepted since start.",
            s.client_connections_total,
        )?;
        let rejected: Vec<(Label, u64)> = RejectReason::ALL
            .iter()
            .map(|&r| ([("reason", r.as_str())], s.rejected(r)))
            .collect();
        counters(
            &mut enc,
            "ringgate_client_rejected_total",
            "Client connections rejected, by reason.",
            &rejected,
        )?;
        let auth: Vec<(Label, u64)> = AuthPath::ALL
            .iter()
            .map(|&p| ([("path", p.as_str())], s.client_auth_total[p.index()]))
            .collect();
        counters(
            &mut enc,
            "ringgate_client_auth_total",
            "Client logins authenticated, by plugin and path (native, caching_sha2 fast or full, clear_password).",
            &auth,
        )?;

        gauges(
            &mut enc,
            "ringgate_backend_connections",
            "Backend connections, by state.",
            &[
                ([("state", "idle")], s.backend_idle),
                ([("state", "busy")], s.backend_busy),
            ],
        )?;
        counter(
            &mut enc,
            "ringgate_backend_connects_total",
            "Backend connections established.",
            s.backend_connects_total,
        )?;
        counter(
            &mut enc,
            "ringgate_backend_connect_failures_total",
            "Backend connection attempts that failed.",
            s.backend_connect_failures_total,
        )?;
        counter(
            &mut enc,
            "ringgate_backend_discarded_total",
            "Backend connections discarded instead of being returned to the pool.",
            s.backend_discarded_total,
        )?;
        gauge(
            &mut enc,
            "ringgate_pool_waiters",
            "Client sessions waiting for a backend connection.",
            s.pool_waiters,
        )?;
        // Per worker: the workers share --backend-max-connections, and a
        // split that leaves one worker few connections while its clients
        // wait is invisible in the sums above.
        let per_worker = |values: &[i64]| -> Vec<_> {
            (values.iter().enumerate())
                .map(|(i, &v)| ([("worker", i.to_string())], v))
                .collect()
        };
        gauges(
            &mut enc,
            "ringgate_worker_backend_connections",
            "Backend connections each worker holds against --backend-max-connections (opening, \
             idle, leased or closing).",
            &per_worker(&s.worker_backend_held),
        )?;
        gauges(
            &mut enc,
            "ringgate_worker_pool_waiters",
            "Client sessions waiting for a backend connection, per worker.",
            &per_worker(&s.worker_pool_waiters),
        )?;
        per_user(&mut enc, &s.users)?;
        per_server(&mut enc, &s.servers)?;
        routed(&mut enc, &s.routed)?;
        if !s.pooled.is_empty() {
            let series: Vec<_> = s
                .pooled
                .iter()
                .map(|(server, n)| ([("server", server.clone())], *n))
                .collect();
            gauges(
                &mut enc,
                "ringgate_server_backend_connections",
                "Several servers: backend connections to each server, all workers (opening, \
                 idle, leased or closing).",
                &series,
            )?;
        }
        counter(
            &mut enc,
            "ringgate_backend_rebalanced_total",
            "Backend connections a worker closed so that another worker, whose clients waited, \
             could open one within --backend-max-connections.",
            s.backend_rebalanced_total,
        )?;

        counter(
            &mut enc,
            "ringgate_commands_total",
            "Client commands forwarded to a backend.",
            s.commands_total,
        )?;
        counter(
            &mut enc,
            "ringgate_backend_resets_total",
            "Backend connections reset (COM_RESET_CONNECTION) before reuse.",
            s.backend_resets_total,
        )?;
        counter(
            &mut enc,
            "ringgate_tx_leases_total",
            "Transaction pooling: backend connections leased for a command mid-session.",
            s.tx_leases_total,
        )?;
        counter(
            &mut enc,
            "ringgate_tx_releases_total",
            "Transaction pooling: backend connections given back between transactions without \
             a reset.",
            s.tx_releases_total,
        )?;
        counter(
            &mut enc,
            "ringgate_removed_user_sessions_closed_total",
            "Sessions a users-file reload closed because their user was removed from it \
             (--on-user-removed close).",
            s.removed_user_sessions_closed_total,
        )?;
        counter(
            &mut enc,
            "ringgate_kill_fenced_total",
            "Backend connections kept until a KILL of their thread was answered, or closed, \
             instead of going to another session.",
            s.kill_fenced_total,
        )?;
        gauge(
            &mut enc,
            "ringgate_backend_prepared_statements",
            "Transaction pooling: prepared statements the backend connections hold on the server.",
            s.backend_prepared_statements,
        )?;
        gauge(
            &mut enc,
            "ringgate_client_prepared_statements",
            "Transaction pooling: prepared statements the client sessions hold.",
            s.client_prepared_statements,
        )?;
        gauge(
            &mut enc,
            "ringgate_client_prepared_statement_bytes",
            "Transaction pooling: bytes the client sessions' prepared statements keep (each \
             session's distinct SQL texts once, plus 2 per parameter; each session at most \
             --max-prepared-bytes).",
            s.client_prepared_statement_bytes,
        )?;
        counter(
            &mut enc,
            "ringgate_client_prepares_refused_total",
            "Transaction pooling: prepares refused with ERR 1461 by --max-prepared-statements or \
             --max-prepared-bytes.",
            s.client_prepares_refused_total,
        )?;
        counter(
            &mut enc,
            "ringgate_statement_reprepares_total",
            "Transaction pooling: statements prepared again on another backend connection for a \
             session's command.",
            s.statement_reprepares_total,
        )?;
        counter(
            &mut enc,
            "ringgate_statement_evictions_total",
            "Transaction pooling: statements closed on a backend connection to stay within \
             --backend-max-prepared.",
            s.statement_evictions_total,
        )?;
        let pinned: Vec<(Label, u64)> = PIN_REASONS
            .iter()
            .zip(s.sessions_pinned_total)
            .map(|(&r, n)| ([("reason", r)], n))
            .collect();
        counters(
            &mut enc,
            "ringgate_sessions_pinned_total",
            "Transaction pooling: sessions pinned to their backend connection, by reason.",
            &pinned,
        )?;
        let idle_cut: Vec<(Label, u64)> = IDLE_CUT_HELD
            .iter()
            .zip(s.sessions_idle_cut_total)
            .map(|(&h, n)| ([("held", h)], n))
            .collect();
        counters(
            &mut enc,
            "ringgate_sessions_idle_cut_total",
            "Sessions cut (transaction rolled back, ERR 4031, closed) for holding a backend \
             connection idle past --idle-transaction-timeout or --idle-pinned-timeout while \
             other clients waited, by what they held.",
            &idle_cut,
        )?;
        let writer_lost: Vec<(Label, u64)> = WRITER_LOST_OUTCOMES
            .iter()
            .zip(s.writer_lost_total)
            .map(|(&o, n)| ([("outcome", o)], n))
            .collect();
        counters(
            &mut enc,
            "ringgate_writer_lost_total",
            "Several servers: sessions whose backend connection was lost (the writer died) \
             before any of the answer reached the client, by what the client was told: \
             rolled_back (ERR 1213 or OK, the session goes on), pinned (ERR 1927, closed), \
             unknown (outcome unknown, closed as direct), none (nothing lost, goes on), \
             replayed (the transaction was replayed on the new writer, goes on told nothing).",
            &writer_lost,
        )?;
        let replays: Vec<(Label, u64)> = TRANSACTION_REPLAY_OUTCOMES
            .iter()
            .zip(s.transaction_replays_total)
            .map(|(&o, n)| ([("outcome", o)], n))
            .collect();
        counters(
            &mut enc,
            "ringgate_transaction_replays_total",
            "--transaction-replay: transactions the writer took down, by how their replay on \
             the new writer ended: replayed (every answer the same, the client saw nothing), \
             mismatch (an answer differed: ERR 1213), failed (no new writer in time, or an \
             error: ERR 1213), too_large (over --transaction-replay-max-size, not tried: ERR \
             1213).",
            &replays,
        )?;
        let internal: Vec<(Label, u64)> = INTERNAL_QUERY_KINDS
            .iter()
            .zip(s.internal_queries_total)
            .map(|(&k, n)| ([("kind", k)], n))
            .collect();
        counters(
            &mut enc,
            "ringgate_internal_queries_total",
            "Transaction pooling: statements ringgate ran on a backend connection for a \
             session (schema, settings, LAST_INSERT_ID), by kind.",
            &internal,
        )?;
        counters(
            &mut enc,
            "ringgate_bytes_total",
            "Bytes forwarded, by direction.",
            &[
                (
                    [("direction", "client_to_backend")],
                    s.bytes_client_to_backend_total,
                ),
                (
                    [("direction", "backend_to_client")],
                    s.bytes_backend_to_client_total,
                ),
            ],
        )?;
        counter(
            &mut enc,
            "ringgate_client_compressed_sessions_total",
            "Client sessions that negotiated the compressed protocol (CLIENT_COMPRESS).",
            s.client_compressed_sessions_total,
        )?;
        counter(
            &mut enc,
            "ringgate_client_tls_sessions_total",
            "Client sessions that sent an SSLRequest (front-end TLS started).",
            s.client_tls_sessions_total,
        )?;
        counter(
            &mut enc,
            "ringgate_client_tls_errors_total",
            "Client TLS sessions ended by a TLS error (failed handshake, bad record, refused client certificate).",
            s.client_tls_errors_total,
        )?;
        counters(
            &mut enc,
            "ringgate_client_tls_handshakes_total",
            "Client TLS handshakes completed, full or resumed (a session ticket or cached session).",
            &[
                ([("kind", "full")], s.client_tls_handshakes_total[0]),
                ([("kind", "resumed")], s.client_tls_handshakes_total[1]),
            ],
        )?;
        counter(
            &mut enc,
            "ringgate_backend_tls_sessions_total",
            "Backend connections whose TLS handshake completed (--backend-tls).",
            s.backend_tls_sessions_total,
        )?;
        let e = &s.backend_tls_errors_total;
        counters(
            &mut enc,
            "ringgate_backend_tls_errors_total",
            "Backend TLS failures: the server offers no TLS under --backend-tls required or \
             stricter (unavailable), the handshake failed, e.g. a certificate refused \
             (handshake), or a record did not decode on an open connection (record).",
            &[
                ([("reason", BACKEND_TLS_ERRORS[0])], e[0]),
                ([("reason", BACKEND_TLS_ERRORS[1])], e[1]),
                ([("reason", BACKEND_TLS_ERRORS[2])], e[2]),
            ],
        )?;
        let c = &s.client_compressed_bytes_total;
        counters(
            &mut enc,
            "ringgate_client_compressed_bytes_total",
            "Bytes of compressed sessions on the client leg: on the wire (compressed) and \
             plain (the MySQL packets inside), by direction.",
            &[
                ([("direction", "client_to_proxy"), ("form", "wire")], c[0]),
                ([("direction", "client_to_proxy"), ("form", "plain")], c[1]),
                ([("direction", "proxy_to_client"), ("form", "plain")], c[2]),
                ([("direction", "proxy_to_client"), ("form", "wire")], c[3]),
            ],
        )?;

        counter(
            &mut enc,
            "ringgate_ring_ebusy_reaps_total",
            "Times a submission met EBUSY (completion ring full) and completions were reaped \
             into a backlog instead of spinning.",
            s.ring_ebusy_reaps_total,
        )?;
        counter(
            &mut enc,
            "ringgate_ring_cq_overflow_flushes_total",
            "Times the kernel's completion overflow list was flushed (IORING_SQ_CQ_OVERFLOW).",
            s.ring_cq_overflow_flushes_total,
        )?;
        counter(
            &mut enc,
            "ringgate_ring_synthetic_failures_total",
            "Operations that could not be queued and were failed locally so their owner rolled \
             back.",
            s.ring_synthetic_failures_total,
        )?;
        counter(
            &mut enc,
            "ringgate_ring_enters_total",
            "io_uring_enter system calls made by the workers (submit, wait, flush).",
            s.ring_enters_total,
        )?;
        counter(
            &mut enc,
            "ringgate_ring_enter_waits_total",
            "io_uring_enter calls that asked to wait for a completion (the worker may sleep).",
            s.ring_enter_waits_total,
        )?;
        counter(
            &mut enc,
            "ringgate_ring_sqes_total",
            "Submission queue entries the kernel consumed.",
            s.ring_sqes_total,
        )?;
        counters(
            &mut enc,
            "ringgate_ring_busy_polls_total",
            "--busy-poll-us polls: found a completion without sleeping (hit) or ran out and \
             slept in the kernel (sleep).",
            &[
                ([("outcome", "hit")], s.ring_busy_poll_hits_total),
                ([("outcome", "sleep")], s.ring_busy_poll_sleeps_total),
            ],
        )?;

        pool_wait(&mut enc, s)?;
        causal_reads(&mut enc, s)?;
        connect_duration(&mut enc, s)
    }
}

/// A histogram without labels from a snapshot's cumulative bucket counts.
/// The crate wants per-bucket counts and accumulates them itself; `+Inf` is
/// written from `count`.
fn histogram(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    bounds: impl Iterator<Item = f64>,
    cumulative: &[u64],
    sum: std::time::Duration,
    count: u64,
) -> fmt::Result {
    let mut buckets = Vec::with_capacity(cumulative.len());
    let mut below = 0u64;
    for (bound, &c) in bounds.zip(cumulative) {
        buckets.push((bound, c.saturating_sub(below)));
        below = c;
    }
    enc.encode_descriptor(name, help, None, MetricType::Histogram)?
        .encode_histogram::<NoLabelSet>(sum.as_secs_f64(), count, &buckets, None)
}

fn causal_reads(enc: &mut DescriptorEncoder, s: &Snapshot) -> fmt::Result {
    let w = &s.causal_wait;
    histogram(
        enc,
        "ringgate_causal_wait_duration_seconds",
        "Causal reads: time a replica took to answer MASTER_GTID_WAIT for the writes a read \
         must see (reached, or --causal-read-timeout passed).",
        pool_wait_bucket_bounds(),
        &w.buckets,
        w.sum,
        w.count,
    )?;
    counter(
        enc,
        "ringgate_causal_fallbacks_total",
        "Causal reads sent to the writer instead of a replica: the wait timed out (or answered \
         NULL or an error, or the replica was lost during it), or the session's client turned the \
         last_gtid tracker off.",
        s.causal_fallbacks_total,
    )
}

fn pool_wait(enc: &mut DescriptorEncoder, s: &Snapshot) -> fmt::Result {
    let w = &s.pool_wait;
    histogram(
        enc,
        "ringgate_pool_wait_duration_seconds",
        "Time client sessions waited for a backend connection (all were busy), until one was \
         found or --backend-wait-timeout failed them with ERR 1040.",
        pool_wait_bucket_bounds(),
        &w.buckets,
        w.sum,
        w.count,
    )
}

fn connect_duration(enc: &mut DescriptorEncoder, s: &Snapshot) -> fmt::Result {
    let cd = &s.connect_duration;
    histogram(
        enc,
        "ringgate_connect_duration_seconds",
        "Time from client accept to successful authentication.",
        connect_bucket_bounds(),
        &cd.buckets,
        cd.sum,
        cd.count,
    )?;

    let quantile = |d: Option<std::time::Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    gauges(
        enc,
        "ringgate_connect_duration_seconds_quantile",
        "Quantiles of the connect duration since start, from an HDR histogram (3 significant \
         digits); NaN until the first connect.",
        &[
            ([("quantile", "0.5")], quantile(cd.p50)),
            ([("quantile", "0.99")], quantile(cd.p99)),
            ([("quantile", "0.999")], quantile(cd.p999)),
        ],
    )
}

fn gauge<V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: V,
) -> fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(L, V)],
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        family.encode_family(labels)?.encode_gauge(value)?;
    }
    Ok(())
}

/// The crate appends `_total` to a counter's name; the full name is written
/// here so that every exported name can be found with grep.
fn counter_name(name: &str) -> &str {
    debug_assert!(name.ends_with("_total"), "{name}");
    name.strip_suffix("_total").unwrap_or(name)
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    let mut m = enc.encode_descriptor(counter_name(name), help, None, MetricType::Counter)?;
    encode_counter(&mut m, value)
}

/// The per-account series. A name goes into a label value as it is, but
/// for the three characters the text format would have to escape.
fn per_user(enc: &mut DescriptorEncoder, users: &[(String, usize, u64)]) -> fmt::Result {
    let label = |name: &str| {
        let clean: String = name
            .chars()
            .map(|c| {
                if matches!(c, '"' | '\\' | '\n') {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        [("user", clean)]
    };
    let held: Vec<_> = users
        .iter()
        .map(|(n, held, _)| (label(n), *held as i64))
        .collect();
    gauges(
        enc,
        "ringgate_backend_connections_by_user",
        "Backend connections each backend account holds (opening, idle, leased or closing), \
         against --backend-max-connections-per-user; passthrough identity.",
        &held,
    )?;
    let waits: Vec<_> = users
        .iter()
        .map(|(n, _, waits)| (label(n), *waits))
        .collect();
    counters(
        enc,
        "ringgate_backend_user_limit_waits_total",
        "Lease requests that waited because their backend account held \
         --backend-max-connections-per-user connections.",
        &waits,
    )
}

/// The per-server series; none without a monitor.
fn per_server(enc: &mut DescriptorEncoder, servers: &[ServerSample]) -> fmt::Result {
    if servers.is_empty() {
        return Ok(());
    }
    let one_of = |name: &'static str, values: &[&'static str], own: fn(&ServerSample) -> &str| {
        let series: Vec<_> = servers
            .iter()
            .flat_map(|s| {
                values.iter().map(move |&v| {
                    let labels = [("server", s.server.clone()), (name, v.to_owned())];
                    (labels, i64::from(own(s) == v))
                })
            })
            .collect();
        series
    };
    gauges(
        enc,
        "ringgate_server_state",
        "1 for each server's state as the monitor sees it (up, down, shunned: answering again \
         but not yet trusted), 0 for the others.",
        &one_of("state", &SERVER_STATES, |s| s.state),
    )?;
    gauges(
        enc,
        "ringgate_server_role",
        "1 for each server's role (primary, replica, unknown), from its configured role or \
         @@read_only, 0 for the others.",
        &one_of("role", &SERVER_ROLES, |s| s.role),
    )?;
    let by_server = |v: &dyn Fn(&ServerSample) -> Option<f64>| -> Vec<_> {
        servers
            .iter()
            .filter_map(|s| Some(([("server", s.server.clone())], v(s)?)))
            .collect()
    };
    gauges(
        enc,
        "ringgate_server_writer",
        "1 for the server that takes writes, 0 for the others.",
        &by_server(&|s| Some(f64::from(u8::from(s.writer)))),
    )?;
    gauges(
        enc,
        "ringgate_server_lag_seconds",
        "A replica's lag behind its primary: the larger of Seconds_Behind_Master and the time \
         since its applied GTID position last covered the writer's; NaN when unknown (never 0 \
         for a NULL); no series for a server that is not a replica.",
        &by_server(&|s| s.lag_seconds),
    )?;
    gauges(
        enc,
        "ringgate_server_stale",
        "1 for a replica whose replication IO or SQL thread is not running: it may be behind \
         writes it has not received, whatever its lag says.",
        &by_server(&|s| (s.role == "replica").then(|| f64::from(u8::from(s.stale)))),
    )?;
    gauges(
        enc,
        "ringgate_server_check_seconds",
        "Duration of the monitor's last check of each server (login kept, probe queries); NaN \
         before the first.",
        &by_server(&|s| Some(s.check_seconds)),
    )?;
    let failed: Vec<_> = servers
        .iter()
        .map(|s| ([("server", s.server.clone())], s.checks_failed_total))
        .collect();
    counters(
        enc,
        "ringgate_server_checks_failed_total",
        "Monitor checks of each server that failed (connect, login, timeout, probe).",
        &failed,
    )
}

/// `--read-write-split`'s counters; none with the split off.
fn routed(enc: &mut DescriptorEncoder, routed: &[crate::RoutedSample]) -> fmt::Result {
    if routed.is_empty() {
        return Ok(());
    }
    let series: Vec<_> = routed
        .iter()
        .flat_map(|(server, reads, writes)| {
            [("read", *reads), ("write", *writes)]
                .map(|(route, n)| ([("server", server.clone()), ("route", route.to_owned())], n))
        })
        .collect();
    counters(
        enc,
        "ringgate_routed_total",
        "--read-write-split: lease requests for a statement (a transaction's first) sent to each \
         server; route=\"read\" for those the split classed as reads (on a replica, or on the \
         writer when no replica qualified), \"write\" for the rest.",
        &series,
    )
}

fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(L, u64)],
) -> fmt::Result {
    let mut family = enc.encode_descriptor(counter_name(name), help, None, MetricType::Counter)?;
    for (labels, value) in series {
        encode_counter(&mut family.encode_family(labels)?, *value)?;
    }
    Ok(())
}

fn encode_counter(m: &mut MetricEncoder, value: u64) -> fmt::Result {
    m.encode_counter::<NoLabelSet, u64, u64>(&value, None)
}

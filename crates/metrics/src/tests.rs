//! Unit tests of the metrics: sums over workers, the exposition text, read back through
//! [`text::Samples`], the reader the integration tests use too.

use super::*;
use text::{parse_value, Samples};

const ALL_NAMES: [(&str, &str); 61] = [
    ("ringgate_workers", "gauge"),
    ("ringgate_read_buffers_total", "gauge"),
    ("ringgate_read_buffers_in_use", "gauge"),
    ("ringgate_read_buffers_free", "gauge"),
    ("ringgate_read_buffer_heap_fallbacks_total", "counter"),
    ("ringgate_read_buffer_ring_buffers", "gauge"),
    ("ringgate_read_buffer_ring_in_use", "gauge"),
    ("ringgate_read_buffer_ring_enobufs_total", "counter"),
    ("ringgate_read_buffer_ring_rearms_total", "counter"),
    (
        "ringgate_read_buffer_ring_idle_recv_cancels_total",
        "counter",
    ),
    ("ringgate_read_buffer_ring_enobufs_empty_total", "counter"),
    ("ringgate_read_buffer_ring_copied_bytes_total", "counter"),
    ("ringgate_read_buffer_large_reads_total", "counter"),
    ("ringgate_read_buffer_large_in_use", "gauge"),
    ("ringgate_client_connections", "gauge"),
    ("ringgate_client_connections_total", "counter"),
    ("ringgate_client_rejected_total", "counter"),
    ("ringgate_client_auth_total", "counter"),
    ("ringgate_backend_connections", "gauge"),
    ("ringgate_backend_connects_total", "counter"),
    ("ringgate_backend_connect_failures_total", "counter"),
    ("ringgate_backend_discarded_total", "counter"),
    ("ringgate_commands_total", "counter"),
    ("ringgate_backend_resets_total", "counter"),
    ("ringgate_tx_leases_total", "counter"),
    ("ringgate_tx_releases_total", "counter"),
    ("ringgate_kill_fenced_total", "counter"),
    ("ringgate_removed_user_sessions_closed_total", "counter"),
    ("ringgate_backend_prepared_statements", "gauge"),
    ("ringgate_client_prepared_statements", "gauge"),
    ("ringgate_client_prepared_statement_bytes", "gauge"),
    ("ringgate_client_prepares_refused_total", "counter"),
    ("ringgate_statement_reprepares_total", "counter"),
    ("ringgate_statement_evictions_total", "counter"),
    ("ringgate_sessions_pinned_total", "counter"),
    ("ringgate_sessions_idle_cut_total", "counter"),
    ("ringgate_writer_lost_total", "counter"),
    ("ringgate_transaction_replays_total", "counter"),
    ("ringgate_bytes_total", "counter"),
    ("ringgate_client_compressed_sessions_total", "counter"),
    ("ringgate_client_tls_sessions_total", "counter"),
    ("ringgate_client_tls_errors_total", "counter"),
    ("ringgate_client_tls_handshakes_total", "counter"),
    ("ringgate_backend_tls_sessions_total", "counter"),
    ("ringgate_backend_tls_errors_total", "counter"),
    ("ringgate_client_compressed_bytes_total", "counter"),
    ("ringgate_pool_waiters", "gauge"),
    ("ringgate_backend_connections_by_user", "gauge"),
    ("ringgate_backend_user_limit_waits_total", "counter"),
    ("ringgate_ring_ebusy_reaps_total", "counter"),
    ("ringgate_ring_cq_overflow_flushes_total", "counter"),
    ("ringgate_ring_synthetic_failures_total", "counter"),
    ("ringgate_ring_enters_total", "counter"),
    ("ringgate_ring_enter_waits_total", "counter"),
    ("ringgate_ring_sqes_total", "counter"),
    ("ringgate_ring_busy_polls_total", "counter"),
    ("ringgate_pool_wait_duration_seconds", "histogram"),
    ("ringgate_causal_wait_duration_seconds", "histogram"),
    ("ringgate_causal_fallbacks_total", "counter"),
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
        w.pool_waiters.fetch_add(17 * ki, Ordering::Relaxed);
        w.ring_ebusy_reaps.store(18 * k, Ordering::Relaxed);
        w.ring_overflow_flushes.store(19 * k, Ordering::Relaxed);
        w.ring_synthetic_failures.store(20 * k, Ordering::Relaxed);
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
            .filter(|f| {
                *f == "ringgate_connect_duration_seconds"
                    || *f == "ringgate_pool_wait_duration_seconds"
                    || *f == "ringgate_causal_wait_duration_seconds"
            })
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
    let p = Samples::parse(&m.render());
    let get = |k: &str| p.get(k);
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
    assert_eq!(
        get("ringgate_client_rejected_total{reason=\"backend_auth\"}"),
        0.0
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
    assert_eq!(get("ringgate_pool_waiters"), 187.0);
    assert_eq!(get("ringgate_ring_ebusy_reaps_total"), 198.0);
    assert_eq!(get("ringgate_ring_cq_overflow_flushes_total"), 209.0);
    assert_eq!(get("ringgate_ring_synthetic_failures_total"), 220.0);

    let s = m.snapshot();
    assert_eq!(s.commands_total, 154);
    assert_eq!(s.rejected_total(), 5);
    assert_eq!(s.rejected(RejectReason::MaxConnections), 1);
    assert!(s.to_string().contains("commands=154"));
    assert!(s
        .to_string()
        .contains("pool_waiters=187 ring_ebusy_reaps=198"));
}

#[test]
fn mode_switch_changes_label() {
    let m = Metrics::new(1, BufferMode::Fixed);
    m.set_mode(BufferMode::Heap);
    assert_eq!(m.mode(), BufferMode::Heap);
    let p = Samples::parse(&m.render());
    assert_eq!(
        p.try_get("ringgate_read_buffers_total{mode=\"heap\"}"),
        Some(0.0)
    );
    assert!(p
        .try_get("ringgate_read_buffers_total{mode=\"fixed\"}")
        .is_none());
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
    let p = Samples::parse(&m.render());
    let b = |le: &str| {
        p.get(&format!(
            "ringgate_connect_duration_seconds_bucket{{le=\"{le}\"}}"
        ))
    };
    assert_eq!(b("0.0001"), 1.0);
    assert_eq!(b("0.00025"), 2.0);
    assert_eq!(b("0.001"), 2.0);
    assert_eq!(b("0.0025"), 3.0);
    assert_eq!(b("0.5"), 3.0);
    assert_eq!(b("1"), 4.0);
    assert_eq!(b("10"), 4.0);
    assert_eq!(b("+Inf"), 5.0);
    assert_eq!(p.get("ringgate_connect_duration_seconds_count"), 5.0);
    let sum = p.get("ringgate_connect_duration_seconds_sum");
    assert!((sum - 91.002701).abs() < 1e-9, "sum {sum}");

    let mut prev = 0.0;
    let mut n = 0;
    for line in m
        .render()
        .lines()
        .filter(|l| l.starts_with("ringgate_connect_duration_seconds_bucket{"))
    {
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
fn pool_wait_histogram_sums_workers_and_is_cumulative() {
    let m = Metrics::new(2, BufferMode::Heap);
    m.worker(0).record_pool_wait(Duration::from_micros(100)); // on a bound
    m.worker(0).record_pool_wait(Duration::from_millis(3));
    m.worker(1).record_pool_wait(Duration::from_secs(5));
    m.worker(1).record_pool_wait(Duration::from_secs(90));
    let p = Samples::parse(&m.render());
    let b = |le: &str| {
        p.get(&format!(
            "ringgate_pool_wait_duration_seconds_bucket{{le=\"{le}\"}}"
        ))
    };
    assert_eq!(b("0.0001"), 1.0);
    assert_eq!(b("0.001"), 1.0);
    assert_eq!(b("0.005"), 2.0);
    assert_eq!(b("5"), 3.0);
    assert_eq!(b("60"), 3.0);
    assert_eq!(b("+Inf"), 4.0);
    assert_eq!(p.get("ringgate_pool_wait_duration_seconds_count"), 4.0);
    let sum = p.get("ringgate_pool_wait_duration_seconds_sum");
    assert!((sum - 95.0031).abs() < 1e-9, "sum {sum}");
    let s = m.snapshot().pool_wait;
    assert_eq!(s.buckets[POOL_WAIT_BUCKET_COUNT - 1], 4);
    assert_eq!(
        pool_wait_bucket_bounds().count(),
        POOL_WAIT_BUCKET_COUNT - 1
    );
}

#[test]
fn quantiles_come_from_merged_histogram() {
    let m = Metrics::new(2, BufferMode::Fixed);
    let p = Samples::parse(&m.render());
    assert!(p
        .get("ringgate_connect_duration_seconds_quantile{quantile=\"0.5\"}")
        .is_nan());
    assert_eq!(m.snapshot().connect_duration.p99, None);

    for i in 1..=1000u64 {
        m.worker((i % 2) as usize)
            .record_connect(Duration::from_micros(i));
    }
    let p = Samples::parse(&m.render());
    let q = |q: &str| {
        p.get(&format!(
            "ringgate_connect_duration_seconds_quantile{{quantile=\"{q}\"}}"
        ))
    };
    assert!((q("0.5") - 0.000500).abs() < 1e-6, "{}", q("0.5"));
    assert!((q("0.99") - 0.000990).abs() < 1e-6, "{}", q("0.99"));
    assert!((q("0.999") - 0.000999).abs() < 1e-6, "{}", q("0.999"));
    let s = m.snapshot().connect_duration;
    assert_eq!(s.p50, Some(Duration::from_micros(500)));
}

#[test]
fn the_exposition_reads_back_line_for_line() {
    let m = populated();
    m.worker(0).record_connect(Duration::from_micros(300));
    let text = m.render();
    let p = Samples::parse(&text);
    let samples = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    assert_eq!(p.samples.len(), samples);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (k, v) = line.rsplit_once(' ').unwrap();
        let parsed = p.get(k);
        let expected = parse_value(v).unwrap();
        assert!(
            parsed == expected || (parsed.is_nan() && expected.is_nan()),
            "{line}"
        );
    }
}

#[test]
fn exposition_text_keeps_the_names_labels_and_formats_of_the_hand_written_one() {
    let m = populated();
    m.worker(0).record_connect(Duration::from_micros(300));
    let text = m.render();
    // The `le` labels as they were written before prometheus-client (dashboards
    // select buckets by these strings).
    for le in [
        "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
        "0.25", "0.5", "1", "2.5", "5", "10", "+Inf",
    ] {
        let line = format!("ringgate_connect_duration_seconds_bucket{{le=\"{le}\"}} ");
        assert!(text.contains(&line), "missing {line:?} in:\n{text}");
    }
    for line in [
        "# HELP ringgate_workers Number of worker threads.\n",
        "# TYPE ringgate_commands_total counter\nringgate_commands_total 154\n",
        "ringgate_read_buffers_total{mode=\"fixed\"} 1100\n",
        "ringgate_read_buffers_in_use{owner=\"client\"} 33\n",
        "ringgate_client_rejected_total{reason=\"backend_unavailable\"} 2\n",
        "ringgate_bytes_total{direction=\"client_to_backend\"} 165\n",
        "ringgate_connect_duration_seconds_count 1\n",
        "ringgate_connect_duration_seconds_sum 0.0003\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    // Prometheus 0.0.4 text, not OpenMetrics: no EOF marker.
    assert!(!text.contains("# EOF"), "{text}");
    assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
}

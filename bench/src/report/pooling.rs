//! The tables of the transaction-pooling scenarios: many-clients' sysbench runs against
//! direct, and the idle scenarios' memory, server connections and served-client latency.

use super::grid::grid;
use crate::model::pooling::{IdleRecord, McRecord, MuxReport};

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The transaction-pooling scenarios' tables.
pub fn table(rep: &MuxReport, markdown: bool) -> String {
    let mut o = String::new();
    if let Some(first) = rep.many_clients.first() {
        many_clients_table(&mut o, rep, first, markdown);
    }
    if !rep.idle.is_empty() {
        idle_table(&mut o, rep, markdown);
    }
    o
}

/// many-clients: QPS against direct's, latency, and the server connections each side used.
fn many_clients_table(o: &mut String, rep: &MuxReport, first: &McRecord, markdown: bool) {
    let cols = [
        "test",
        "ps",
        "target",
        "QPS",
        "QPS/dir",
        "p95 ms",
        "p99 ms",
        "errors",
        "Threads_connected",
        "rg backends",
        "proxy µs/q",
        "srv µs/q",
        "failed",
    ];
    let rows: Vec<Vec<String>> = rep
        .many_clients
        .iter()
        .map(|r| {
            let direct = rep
                .many_clients
                .iter()
                .find(|d| d.target == "direct" && d.test == r.test && d.ps_mode == r.ps_mode)
                .map_or(0.0, |d| d.qps);
            vec![
                r.test.clone(),
                r.ps_mode.clone(),
                r.target.clone(),
                format!("{:.0}", r.qps),
                ratio(r.qps, direct),
                format!("{:.2}", r.p95_ms),
                format!("{:.2}", r.p99_ms),
                r.errors.to_string(),
                format!(
                    "{:.0}→{:.0}",
                    r.threads_connected_before, r.threads_connected_peak
                ),
                opt(r.ringgate_backends_peak, 0),
                opt(r.cpu_us_per_query(r.proxy_cpu_s), 1),
                opt(r.cpu_us_per_query(r.server_cpu_s), 1),
                r.failed
                    .as_deref()
                    .map_or(String::new(), |f| f.chars().take(70).collect()),
            ]
        })
        .collect();
    let title = format!(
        "many-clients: sysbench, {} client connections; tx = ringgate --pooling transaction \
         on ≤ {} backend connections",
        first.threads,
        first.backend_cap.unwrap_or(64)
    );
    grid(o, &title, &cols, &rows, "", markdown);
}

/// The idle table's columns.
const IDLE_COLUMNS: [&str; 22] = [
    "scenario",
    "mode",
    "clients",
    "aim",
    "login s",
    "RSS B/client",
    "after query",
    "VmPin KiB",
    "rg backends",
    "Threads_connected",
    "held c/b/ring",
    "fallbacks",
    "served p50 alone/idle",
    "p99 alone/idle",
    "served fail",
    "idle s",
    "open after",
    "answered/failed",
    "backlog max",
    "backlog drops",
    "timeout resets",
    "stopped by",
];

/// The idle scenarios: clients held, memory per client, buffers and server connections held,
/// the served client's latency, and whether every idle client still answered.
fn idle_table(o: &mut String, rep: &MuxReport, markdown: bool) {
    let rows: Vec<Vec<String>> = rep.idle.iter().map(idle_row).collect();
    grid(
        o,
        "idle clients through ringgate --pooling transaction (64 backend connections)",
        &IDLE_COLUMNS,
        &rows,
        "",
        markdown,
    );
}

/// One idle scenario in one mode.
fn idle_row(r: &IdleRecord) -> Vec<String> {
    vec![
        r.scenario.clone(),
        r.mode.clone(),
        r.clients.to_string(),
        match r.aim_before_fd_cap {
            Some(a) => format!("{} (of {a}: fd hard limit {})", r.aim, r.nofile_hard),
            None => r.aim.to_string(),
        },
        format!("{:.1}", r.login_s),
        format!("{:.0}", r.rss_per_client_b),
        opt(r.rss_per_client_after_query_b, 0),
        r.vm_pin_kib.to_string(),
        format!("{:.0}", r.backends_peak),
        format!(
            "{:.0}→{:.0}",
            r.threads_connected_before, r.threads_connected_peak
        ),
        format!(
            "{:.0}/{:.0}/{:.0}",
            r.held_client, r.held_backend, r.held_ring
        ),
        format!("{:.0}", r.heap_fallbacks),
        format!("{}/{} µs", r.served_alone.p50_us, r.served_with_idle.p50_us),
        format!("{}/{} µs", r.served_alone.p99_us, r.served_with_idle.p99_us),
        (r.served_alone.failures + r.served_with_idle.failures).to_string(),
        format!("{:.0}", r.hold_s),
        format!("{:.0}", r.open_after_hold),
        format!("{}/{}", r.answered, r.answer_failures),
        match (r.netdev_max_backlog, r.netdev_max_backlog_raised_from) {
            (Some(v), Some(was)) => format!("{v} (was {was})"),
            (Some(v), None) => v.to_string(),
            (None, _) => "-".into(),
        },
        r.softnet_drops.map_or("-".into(), |v| v.to_string()),
        r.tcp_abort_on_timeout.map_or("-".into(), |v| v.to_string()),
        r.failed
            .clone()
            .or_else(|| r.stopped_by.clone())
            .map_or("-".into(), |s| s.chars().take(70).collect()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_show_ratios_and_failures() {
        let rep = MuxReport {
            many_clients: vec![
                McRecord {
                    test: "oltp_point_select".into(),
                    target: "direct".into(),
                    ps_mode: "auto".into(),
                    threads: 1000,
                    qps: 1000.0,
                    ..Default::default()
                },
                McRecord {
                    test: "oltp_point_select".into(),
                    target: "tx".into(),
                    ps_mode: "auto".into(),
                    threads: 1000,
                    backend_cap: Some(64),
                    qps: 1500.0,
                    failed: Some("boom".into()),
                    ..Default::default()
                },
            ],
            idle: vec![IdleRecord {
                scenario: "idle-max".into(),
                mode: "ring".into(),
                clients: 18_900,
                aim: 18_900,
                aim_before_fd_cap: Some(100_000),
                nofile_hard: 20_000,
                ..Default::default()
            }],
            warnings: Vec::new(),
        };
        let t = table(&rep, false);
        assert!(t.contains("1.50"), "{t}");
        assert!(t.contains("boom"), "{t}");
        assert!(t.contains("18900 (of 100000: fd hard limit 20000)"), "{t}");
        let m = table(&rep, true);
        assert!(
            m.contains("| oltp_point_select | auto | tx | 1500 | 1.50 |"),
            "{m}"
        );
    }
}

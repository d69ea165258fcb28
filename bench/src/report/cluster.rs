//! The cluster scenario's tables: where reads landed per server, the proxy's CPU per routed
//! query against the single-server front, and what writing clients saw through a failover
//! and a switchover.

use std::fmt::Write as _;

use super::grid::grid;
use crate::model::cluster::{ClusterReport, WriterChange};
use crate::model::records::Record;

/// The front every CPU ratio is taken against.
const SINGLE: &str = "1 server";

/// All three tables, then the scenario's notes and problems.
pub fn table(rep: &ClusterReport, markdown: bool) -> String {
    let mut o = String::new();
    if !rep.reads.is_empty() {
        reads_table(&mut o, rep, markdown);
    }
    if !rep.cost.is_empty() {
        cost_table(&mut o, rep, markdown);
    }
    if !rep.changes.is_empty() {
        changes_table(&mut o, rep, markdown);
    }
    let bullet = if markdown { "- " } else { "  " };
    let _ = writeln!(
        o,
        "{bullet}cluster: nodes {}; split {}; monitor interval {}; {:.0} s",
        rep.nodes.join(", "),
        if rep.split_supported {
            "on"
        } else {
            "not in this binary"
        },
        rep.monitor_interval,
        rep.elapsed_s
    );
    for n in &rep.notes {
        let _ = writeln!(o, "{bullet}note: {n}");
    }
    for p in &rep.problems {
        let _ = writeln!(o, "{bullet}PROBLEM: {p}");
    }
    let _ = writeln!(o);
    o
}

fn reads_table(o: &mut String, rep: &ClusterReport, markdown: bool) {
    let cols = ["front", "server", "role", "selects", "share", "writes"];
    let mut rows = Vec::new();
    let mut note = String::new();
    for r in &rep.reads {
        for (n, share) in r.per_node.iter().zip(r.select_shares()) {
            rows.push(vec![
                r.front.clone(),
                n.node.clone(),
                n.role.clone(),
                n.selects.to_string(),
                format!("{:.0}%", share * 100.0),
                n.writes.to_string(),
            ]);
        }
        let counted: u64 = r.per_node.iter().map(|n| n.selects).sum();
        let _ = writeln!(
            note,
            "{}: the bench ran {} selects and {} INSERTs ({} clients, {:.0} s), {} failed; the \
             servers counted {} selects more (the client library's set-up query per \
             connection, and ringgate's SELECT LAST_INSERT_ID() after each INSERT: \
             transaction pooling carries it to the client's next connection)",
            r.front,
            r.selects_sent,
            r.writes_sent,
            r.clients,
            r.seconds,
            r.failures,
            counted as i64 - r.selects_sent as i64
        );
    }
    grid(
        o,
        "cluster: where reads land (9 point selects : 1 INSERT; the app account's commands per server)",
        &cols,
        &rows,
        &note,
        markdown,
    );
}

/// One row per (concurrency, front): rate, latency, the proxy's CPU per query and its ratio
/// to the single-server front at the same concurrency, the primary's CPU per query.
fn cost_table(o: &mut String, rep: &ClusterReport, markdown: bool) {
    let cost = &rep.cost;
    // The cells keep no server CPU that did not move; where another front's moved, the
    // primary's was read and stood still (every read went to a replica).
    let primary_read = cost.iter().any(|r| r.backend_cpu_s.is_some());
    let cols = [
        "c",
        "front",
        "QPS",
        "p50 µs",
        "p99 µs",
        "proxy µs/q",
        "× 1 server",
        "primary µs/q",
        "failures",
    ];
    let rows: Vec<Vec<String>> = cost
        .iter()
        .map(|r| {
            let single = cost
                .iter()
                .find(|s| s.target == SINGLE && s.concurrency == r.concurrency);
            vec![
                r.concurrency.to_string(),
                format!("{}{}", r.target, if r.verified.ok { "" } else { " (!)" }),
                format!("{:.0}", r.rate),
                r.latency.p50_us.to_string(),
                r.latency.p99_us.to_string(),
                cpu(r).map_or("-".into(), |c| format!("{c:.1}")),
                match (cpu(r), single.and_then(cpu)) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                    _ => "-".into(),
                },
                match r.backend_cpu_s.or(Some(0.0).filter(|_| primary_read)) {
                    Some(c) if r.count > 0 => format!("{:.1}", c * 1e6 / r.count as f64),
                    _ => "-".into(),
                },
                (r.failures + r.timeouts + r.setup_failures).to_string(),
            ]
        })
        .collect();
    let idle: Vec<String> = rep
        .idle_cpu_ms_per_s
        .iter()
        .map(|(f, ms)| format!("{f} {ms:.1} ms/s"))
        .collect();
    let note = if idle.is_empty() {
        String::new()
    } else {
        format!("CPU with no client connected: {}", idle.join(", "))
    };
    grid(
        o,
        "cluster: ringgate's CPU per point select, against one server (same rounds)",
        &cols,
        &rows,
        &note,
        markdown,
    );
}

fn cpu(r: &Record) -> Option<f64> {
    r.proxy.as_ref().map(|p| p.cpu_us_per_op)
}

fn changes_table(o: &mut String, rep: &ClusterReport, markdown: bool) {
    let cols = [
        "change",
        "writer",
        "acked",
        "errors (most, 1 client)",
        "gap ms",
        "gap at ms",
        "orchestrator ms",
        "held ms",
        "p99 before ms",
        "p99/max around ms",
        "rows",
        "lost",
    ];
    let rows: Vec<Vec<String>> = rep.changes.iter().map(change_row).collect();
    let mut note = String::new();
    for c in &rep.changes {
        for (e, n) in &c.error_kinds {
            let _ = writeln!(note, "{}: {n} × {e}", c.kind);
        }
        if let Some(f) = &c.failed {
            let _ = writeln!(note, "{}: FAILED: {f}", c.kind);
        }
    }
    let writers = rep.changes.first().map_or(0, |c| c.writers);
    grid(
        o,
        &format!(
            "cluster: the writer changes under {writers} writing clients (autocommit INSERTs)"
        ),
        &cols,
        &rows,
        &note,
        markdown,
    );
}

fn change_row(c: &WriterChange) -> Vec<String> {
    vec![
        c.kind.clone(),
        format!("node {} → {}", c.from_node, c.to_node),
        c.acked.to_string(),
        format!("{} ({})", c.errors, c.most_errors_one_client),
        format!("{:.0}", c.gap_ms),
        format!("{:+.0} → {:+.0}", c.gap_from_ms, c.gap_to_ms),
        format!("{:.0}", c.orchestrator_ms),
        c.held_ms.map_or("-".into(), |h| format!("{h:.0}")),
        format!("{:.1}", c.steady_p99_ms),
        format!("{:.0}/{:.0}", c.around_p99_ms, c.around_max_ms),
        c.rows.to_string(),
        c.lost.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cluster::{NodeCommands, ReadLanding};
    use crate::model::records::ProcFig;

    fn cost(target: &str, c: usize, cpu_us: f64) -> Record {
        Record {
            target: target.into(),
            concurrency: c,
            count: 1000,
            verified: crate::model::records::Verification {
                ok: true,
                detail: String::new(),
            },
            proxy: Some(ProcFig {
                cpu_us_per_op: cpu_us,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn cpu_is_a_ratio_of_the_single_server_front_at_the_same_concurrency() {
        let rep = ClusterReport {
            cost: vec![
                Record {
                    backend_cpu_s: Some(0.1),
                    ..cost("1 server", 1, 50.0)
                },
                cost("3 servers", 1, 55.0),
                cost("1 server", 16, 20.0),
                cost("3 servers", 16, 30.0),
            ],
            idle_cpu_ms_per_s: vec![("3 servers".into(), 12.34)],
            ..Default::default()
        };
        let t = table(&rep, true);
        assert!(
            t.contains("CPU with no client connected: 3 servers 12.3 ms/s"),
            "{t}"
        );
        assert!(
            t.contains("| 1 | 3 servers | 0 | 0 | 0 | 55.0 | 1.10 |"),
            "{t}"
        );
        assert!(
            t.contains("| 16 | 3 servers | 0 | 0 | 0 | 30.0 | 1.50 |"),
            "{t}"
        );
        // 0.1 s over 1000 queries; a front whose primary did not move shows 0.
        assert!(t.contains("| 50.0 | 1.00 | 100.0 | 0 |"), "{t}");
        assert!(t.contains("| 55.0 | 1.10 | 0.0 | 0 |"), "{t}");
        assert!(
            t.contains("| 16 | 1 server | 0 | 0 | 0 | 20.0 | 1.00 |"),
            "{t}"
        );
    }

    #[test]
    fn reads_show_each_servers_share_and_a_change_its_gap_and_errors() {
        let node = |n: &str, role: &str, selects| NodeCommands {
            node: n.into(),
            role: role.into(),
            selects,
            writes: 0,
        };
        let rep = ClusterReport {
            reads: vec![ReadLanding {
                front: "3 servers".into(),
                per_node: vec![
                    node("a:1", "primary", 900),
                    node("a:2", "replica", 100),
                    node("a:3", "replica", 0),
                ],
                ..Default::default()
            }],
            changes: vec![WriterChange {
                kind: "failover".into(),
                from_node: 1,
                to_node: 2,
                errors: 2,
                error_kinds: [("2013 lost".to_string(), 2)].into_iter().collect(),
                gap_ms: 1234.4,
                gap_from_ms: -3.0,
                gap_to_ms: 1231.4,
                ..Default::default()
            }],
            problems: vec!["boom".into()],
            ..Default::default()
        };
        let t = table(&rep, false);
        assert!(t.contains("90%") && t.contains("10%"), "{t}");
        assert!(
            t.contains("node 1 → 2") && t.contains("1234") && t.contains("-3 → +1231"),
            "{t}"
        );
        assert!(t.contains("failover: 2 × 2013 lost"), "{t}");
        assert!(t.contains("PROBLEM: boom"), "{t}");
    }
}

//! The table printed at the end of a run and embedded in summary.md: one block per cell with
//! a row per target, then sysbench, then the transaction-pooling scenarios.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::grid::grid;
use super::{cluster, pooling};
use crate::model::records::{Record, RingFig, Summary, SysbenchRecord};
use crate::model::target::{is_baseline, own_name};

/// The columns of a cell's block. Latencies in µs unless marked; `/dir` ratios are target /
/// direct.
const COLUMNS: [&str; 20] = [
    "target",
    "p50",
    "p90",
    "p99",
    "p99.9",
    "max",
    "ops/s",
    "MB/s",
    "fail",
    "p99 spr",
    "p50/dir",
    "p99/dir",
    "p999/dir",
    "cpu µs/op",
    "sys %",
    "srv µs/op",
    "RSS MiB",
    "SQE/op",
    "enter/op",
    "vcs/op",
];

fn fmt_us(us: u64) -> String {
    if us >= 10_000_000 {
        format!("{:.1}s", us as f64 / 1e6)
    } else if us >= 10_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{us}")
    }
}

fn ratio(a: f64, b: f64) -> String {
    if a > 0.0 && b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

/// Cells in first-seen order, each with its records in target order.
fn cells(s: &Summary) -> Vec<(String, Vec<&Record>)> {
    let mut order: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
    for r in &s.records {
        let l = r.cell_label();
        if !by.contains_key(&l) {
            order.push(l.clone());
        }
        by.entry(l).or_default().push(r);
    }
    order
        .into_iter()
        .map(|l| {
            let mut v = by.remove(&l).unwrap();
            v.sort_by_key(|r| s.targets.iter().position(|t| *t == r.target));
            (l, v)
        })
        .collect()
}

fn ring_fig(r: &Record, f: impl Fn(&RingFig) -> f64) -> String {
    r.proxy
        .as_ref()
        .and_then(|p| p.ring.as_ref())
        .map_or("-".into(), |x| format!("{:.2}", f(x)))
}

/// MariaDB's CPU µs per operation in a cell, with the same denominator as the proxy's
/// `cpu µs/op` (successful measured operations; both CPU times include the warm-up).
fn srv_cpu(r: &Record) -> String {
    match r.backend_cpu_s {
        Some(c) if r.count > 0 => format!("{:.1}", c * 1e6 / r.count as f64),
        _ => "-".into(),
    }
}

/// The table printed at the end of a run (and embedded in summary.md).
/// Latencies in µs unless marked; ratios are target / direct.
/// The table printed at the end of a run (and embedded in summary.md).
/// Latencies in µs unless marked; ratios are target / direct.
pub fn table(s: &Summary, markdown: bool) -> String {
    let mut o = String::new();
    for (label, recs) in cells(s) {
        let direct = recs.iter().find(|r| r.target == "direct").copied();
        let rows: Vec<Vec<String>> = recs.iter().map(|r| cell_row(r, direct)).collect();
        grid(&mut o, &label, &COLUMNS, &rows, &notes(&recs), markdown);
    }
    if !s.sysbench.is_empty() {
        sysbench_table(&mut o, s, markdown);
    }
    if let Some(m) = &s.mux {
        o.push_str(&pooling::table(m, markdown));
    }
    if let Some(c) = &s.cluster {
        o.push_str(&cluster::table(c, markdown));
    }
    o
}

/// One target's row of a cell's block.
fn cell_row(r: &Record, direct: Option<&Record>) -> Vec<String> {
    let (d50, d99, d999) = match direct {
        Some(d) => (
            ratio(r.latency.p50_us as f64, d.latency.p50_us as f64),
            ratio(r.latency.p99_us as f64, d.latency.p99_us as f64),
            ratio(r.latency.p999_us as f64, d.latency.p999_us as f64),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    vec![
        format!("{}{}", r.target, if r.verified.ok { "" } else { " (!)" }),
        fmt_us(r.latency.p50_us),
        fmt_us(r.latency.p90_us),
        fmt_us(r.latency.p99_us),
        fmt_us(r.latency.p999_us),
        fmt_us(r.latency.max_us),
        format!("{:.0}", r.rate),
        r.mb_per_s.map_or("-".into(), |m| format!("{m:.0}")),
        format!("{}", r.failures + r.timeouts + r.setup_failures),
        format!("±{:.0}%", r.spread.p99_spread_pct / 2.0),
        d50,
        d99,
        d999,
        r.proxy
            .as_ref()
            .map_or("-".into(), |p| format!("{:.1}", p.cpu_us_per_op)),
        r.proxy
            .as_ref()
            .and_then(|p| p.system_cpu_share)
            .map_or("-".into(), |s| format!("{:.0}", s * 100.0)),
        srv_cpu(r),
        r.proxy.as_ref().map_or("-".into(), |p| {
            format!("{:.1}", p.peak_rss_kib as f64 / 1024.0)
        }),
        ring_fig(r, |f| f.sqes_per_op),
        ring_fig(r, |f| f.enters_per_op),
        r.proxy
            .as_ref()
            .and_then(|p| p.voluntary_ctx_switches_per_op)
            .map_or("-".into(), |v| format!("{v:.2}")),
    ]
}

/// The lines under a cell's block: the buffer modes against heap, then each target against
/// its baseline twin.
fn notes(recs: &[&Record]) -> String {
    let modes = mode_ratios(recs);
    std::iter::once(modes)
        .filter(|m| !m.is_empty())
        .chain(baseline_ratios(recs))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `tx/tx@base: ...` for each twin in the cell: the new binary's figures over the baseline's,
/// so a regression reads as a latency or cost ratio above 1 (ops/s below 1).
fn baseline_ratios(recs: &[&Record]) -> Vec<String> {
    let cost = |r: &Record| r.proxy.as_ref().map_or(0.0, |p| p.cpu_us_per_op);
    let rss = |r: &Record| r.proxy.as_ref().map_or(0.0, |p| p.peak_rss_kib as f64);
    recs.iter()
        .filter(|b| is_baseline(&b.target))
        .filter_map(|b| {
            let n = recs.iter().find(|r| r.target == own_name(&b.target))?;
            Some(format!(
                "{}/{}: p50 {} p99 {} p99.9 {} ops/s {} cpu/op {} RSS {}",
                n.target,
                b.target,
                ratio(n.latency.p50_us as f64, b.latency.p50_us as f64),
                ratio(n.latency.p99_us as f64, b.latency.p99_us as f64),
                ratio(n.latency.p999_us as f64, b.latency.p999_us as f64),
                ratio(n.rate, b.rate),
                ratio(cost(n), cost(b)),
                ratio(rss(n), rss(b)),
            ))
        })
        .collect()
}

/// The buffer modes against each other under a cell's block: fixed/heap and ring/heap, when
/// the cell has them.
fn mode_ratios(recs: &[&Record]) -> String {
    let find = |t: &str| recs.iter().find(|r| r.target == t);
    let heap = find("heap");
    let against_heap = |name: &str, f: &Record, h: &Record| {
        format!(
            "{name}/heap: p50 {} p99 {} p99.9 {} ops/s {}",
            ratio(f.latency.p50_us as f64, h.latency.p50_us as f64),
            ratio(f.latency.p99_us as f64, h.latency.p99_us as f64),
            ratio(f.latency.p999_us as f64, h.latency.p999_us as f64),
            ratio(f.rate, h.rate),
        )
    };
    let parts: Vec<String> = ["fixed", "ring"]
        .iter()
        .filter_map(|&m| Some(against_heap(m, find(m)?, heap?)))
        .collect();
    parts.join("; ")
}

/// sysbench's runs, QPS against direct's at the same test and threads.
fn sysbench_table(o: &mut String, s: &Summary, markdown: bool) {
    let direct: BTreeMap<String, f64> = s
        .sysbench
        .iter()
        .filter(|r| r.target == "direct")
        .map(|r| (format!("{}/{}", r.test, r.threads), r.qps))
        .collect();
    if markdown {
        let _ = writeln!(o, "#### sysbench\n");
        let _ = writeln!(
            o,
            "| test | threads | target | QPS | QPS/direct | avg ms | p95 ms | p99 ms | max ms | errors |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        );
    } else {
        let _ = writeln!(o, "── sysbench {}", "─".repeat(52));
        let _ = writeln!(
            o,
            "  {:<18} {:>7}  {:<8} {:>9} {:>8} {:>7} {:>7} {:>7} {:>8} {:>6}",
            "test",
            "threads",
            "target",
            "QPS",
            "QPS/dir",
            "avg ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "errors"
        );
    }
    for r in &s.sysbench {
        let d = direct
            .get(&format!("{}/{}", r.test, r.threads))
            .copied()
            .unwrap_or(0.0);
        let tgt = if r.failed.is_some() {
            format!("{} FAILED", r.target)
        } else if !r.verified.ok {
            format!("{} (!)", r.target)
        } else {
            r.target.clone()
        };
        sysbench_row(o, r, &tgt, d, markdown);
    }
    let _ = writeln!(o);
}

/// One sysbench run: `tgt` is the target as shown, `d` direct's QPS.
fn sysbench_row(o: &mut String, r: &SysbenchRecord, tgt: &str, d: f64, markdown: bool) {
    if markdown {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            r.test,
            r.threads,
            tgt,
            r.qps,
            ratio(r.qps, d),
            r.avg_ms,
            r.p95_ms,
            r.p99_ms,
            r.max_ms,
            r.errors
        );
    } else {
        let _ = writeln!(
            o,
            "  {:<18} {:>7}  {:<8} {:>9.0} {:>8} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>6}",
            r.test,
            r.threads,
            tgt,
            r.qps,
            ratio(r.qps, d),
            r.avg_ms,
            r.p95_ms,
            r.p99_ms,
            r.max_ms,
            r.errors
        );
    }
}

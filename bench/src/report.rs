//! Results: the records of summary.json, summary.md, the terminal table and
//! the SVG plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::hist::Percentiles;

#[derive(Clone, Debug, Default, Serialize)]
pub struct RoundFig {
    pub round: usize,
    pub count: u64,
    pub rate: f64,
    pub failures: u64,
    pub timeouts: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_peak_rss_kib: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Spread {
    pub rate_min: f64,
    pub rate_max: f64,
    pub p50_min_us: u64,
    pub p50_max_us: u64,
    pub p99_min_us: u64,
    pub p99_max_us: u64,
    /// (max - min) / median of the per-round p99, in percent.
    pub p99_spread_pct: f64,
    /// (max - min) / median of the per-round rate, in percent.
    pub rate_spread_pct: f64,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn rel_spread(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let mut s = v.to_vec();
    let med = median(&mut s);
    if med <= 0.0 {
        return 0.0;
    }
    let (mn, mx) = (s[0], s[s.len() - 1]);
    ((mx - mn) / med * 1000.0).round() / 10.0
}

impl Spread {
    pub fn of(rounds: &[RoundFig]) -> Spread {
        if rounds.is_empty() {
            return Spread::default();
        }
        let rates: Vec<f64> = rounds.iter().map(|r| r.rate).collect();
        let p99: Vec<f64> = rounds.iter().map(|r| r.p99_us as f64).collect();
        Spread {
            rate_min: rates.iter().cloned().fold(f64::INFINITY, f64::min),
            rate_max: rates.iter().cloned().fold(0.0, f64::max),
            p50_min_us: rounds.iter().map(|r| r.p50_us).min().unwrap_or(0),
            p50_max_us: rounds.iter().map(|r| r.p50_us).max().unwrap_or(0),
            p99_min_us: rounds.iter().map(|r| r.p99_us).min().unwrap_or(0),
            p99_max_us: rounds.iter().map(|r| r.p99_us).max().unwrap_or(0),
            p99_spread_pct: rel_spread(&p99),
            rate_spread_pct: rel_spread(&rates),
        }
    }
}

/// CPU and memory of the proxy process while the cell ran (all rounds).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcFig {
    pub cpu_s: f64,
    /// Proxy CPU per successful operation, µs.
    pub cpu_us_per_op: f64,
    /// The part of `cpu_s` spent in the kernel (system time), 0..1: for a proxy mostly the
    /// network stack's work on its sockets, which any proxy pays; the rest is its own code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_cpu_share: Option<f64>,
    /// Highest VmHWM seen in any round (reset before each round when the kernel allows).
    pub peak_rss_kib: u64,
    pub peak_rss_reset_per_round: bool,
    /// Voluntary context switches of all the proxy's threads per operation
    /// (a thread that sleeps switches out voluntarily: its wake-ups).
    /// Operations here include the warm-up, as the counters do; per query
    /// in the query scenarios, per connection in connect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub voluntary_ctx_switches_per_op: Option<f64>,
    /// ringgate only: its ring's own counters per operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingFig>,
}

/// What ringgate's ring did per operation (from its /metrics): SQEs the
/// kernel consumed, io_uring_enter calls, and of those the ones that waited.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RingFig {
    pub sqes_per_op: f64,
    pub enters_per_op: f64,
    pub waits_per_op: f64,
}

/// ringgate's pool figures from /metrics, sampled every 100 ms during the cell.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PoolFig {
    pub mode: String,
    pub read_buffers_total: f64,
    pub peak_in_use_client: f64,
    pub peak_in_use_backend: f64,
    pub peak_backend_busy: f64,
    pub peak_backend_idle: f64,
    pub peak_client_connections: f64,
    pub heap_fallbacks: f64,
    pub backend_connects: f64,
    pub backend_connect_failures: f64,
    pub backend_discarded: f64,
    pub client_connections_accepted: f64,
    pub clients_rejected: f64,
    pub commands: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Verification {
    pub ok: bool,
    pub detail: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Record {
    pub target: String,
    pub scenario: String,
    pub concurrency: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_bytes: Option<u64>,
    /// "closed-loop" or "open-loop" (coordinated-omission corrected).
    pub mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_rate: Option<f64>,
    pub rounds: usize,
    pub count: u64,
    pub duration_s: f64,
    /// Successful operations per second.
    pub rate: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb_per_s: Option<f64>,
    pub failures: u64,
    pub timeouts: u64,
    pub setup_failures: u64,
    /// p50_us … max_us, mean_us: flattened, so summary.json keeps flat keys.
    #[serde(flatten)]
    pub latency: Percentiles,
    pub spread: Spread,
    pub per_round: Vec<RoundFig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProcFig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ringgate: Option<PoolFig>,
    pub verified: Verification,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    pub hgrm: String,
}

impl Record {
    /// "connect c=16", "large-result 64KiB c=8".
    pub fn cell_label(&self) -> String {
        cell_label(&self.scenario, self.concurrency, self.row_bytes)
    }
}

pub fn cell_label(scenario: &str, concurrency: usize, row_bytes: Option<u64>) -> String {
    match row_bytes {
        Some(b) => format!("{scenario} {} c={concurrency}", human_bytes(b)),
        None => format!("{scenario} c={concurrency}"),
    }
}

pub fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// One sysbench run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SysbenchRecord {
    pub target: String,
    pub test: String,
    pub threads: usize,
    pub duration_s: f64,
    pub tps: f64,
    pub qps: f64,
    pub avg_ms: f64,
    pub p95_ms: f64,
    /// From sysbench's latency histogram (--histogram=on).
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub reconnects: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_cpu_s: Option<f64>,
    pub verified: Verification,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub started: String,
    pub profile: String,
    pub machine: BTreeMap<String, String>,
    pub settings: BTreeMap<String, String>,
    pub targets: Vec<String>,
    pub records: Vec<Record>,
    pub sysbench: Vec<SysbenchRecord>,
    /// ringgate state after the run (leak check): target → metric → value.
    pub after_run: BTreeMap<String, BTreeMap<String, f64>>,
    /// many-clients, idle-10k, idle-max (mux.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mux: Option<crate::mux::MuxReport>,
    pub warnings: Vec<String>,
    pub elapsed_s: f64,
}

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
pub fn table(s: &Summary, markdown: bool) -> String {
    let mut o = String::new();
    let cols = [
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
    for (label, recs) in cells(s) {
        let direct = recs.iter().find(|r| r.target == "direct");
        let rows: Vec<Vec<String>> = recs
            .iter()
            .map(|r| {
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
            })
            .collect();
        let fixed = recs.iter().find(|r| r.target == "fixed");
        let heap = recs.iter().find(|r| r.target == "heap");
        let fh = match (fixed, heap) {
            (Some(f), Some(h)) => format!(
                "fixed/heap: p50 {} p99 {} p99.9 {} ops/s {}",
                ratio(f.latency.p50_us as f64, h.latency.p50_us as f64),
                ratio(f.latency.p99_us as f64, h.latency.p99_us as f64),
                ratio(f.latency.p999_us as f64, h.latency.p999_us as f64),
                ratio(f.rate, h.rate),
            ),
            _ => String::new(),
        };
        let ring = recs.iter().find(|r| r.target == "ring");
        let fh = match (ring, heap) {
            (Some(r), Some(h)) => {
                let rh = format!(
                    "ring/heap: p50 {} p99 {} p99.9 {} ops/s {}",
                    ratio(r.latency.p50_us as f64, h.latency.p50_us as f64),
                    ratio(r.latency.p99_us as f64, h.latency.p99_us as f64),
                    ratio(r.latency.p999_us as f64, h.latency.p999_us as f64),
                    ratio(r.rate, h.rate),
                );
                if fh.is_empty() {
                    rh
                } else {
                    format!("{fh}; {rh}")
                }
            }
            _ => fh,
        };
        if markdown {
            let _ = writeln!(o, "#### {label}\n");
            let _ = writeln!(o, "| {} |", cols.join(" | "));
            let _ = writeln!(
                o,
                "|{}",
                cols.iter()
                    .enumerate()
                    .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
                    .collect::<String>()
            );
            for r in &rows {
                let _ = writeln!(o, "| {} |", r.join(" | "));
            }
            if !fh.is_empty() {
                let _ = writeln!(o, "\n{fh}");
            }
            let _ = writeln!(o);
        } else {
            let widths: Vec<usize> = (0..cols.len())
                .map(|i| {
                    rows.iter()
                        .map(|r| r[i].chars().count())
                        .chain(std::iter::once(cols[i].chars().count()))
                        .max()
                        .unwrap()
                })
                .collect();
            let _ = writeln!(
                o,
                "── {label} {}",
                "─".repeat(60usize.saturating_sub(label.len()))
            );
            let line = |o: &mut String, cells: Vec<String>| {
                let mut l = String::new();
                for (i, c) in cells.iter().enumerate() {
                    let pad = widths[i] - c.chars().count();
                    if i == 0 {
                        l.push_str(&format!("  {c}{}", " ".repeat(pad)));
                    } else {
                        l.push_str(&format!("  {}{c}", " ".repeat(pad)));
                    }
                }
                let _ = writeln!(o, "{l}");
            };
            line(&mut o, cols.iter().map(|c| c.to_string()).collect());
            for r in rows {
                line(&mut o, r);
            }
            if !fh.is_empty() {
                let _ = writeln!(o, "  {fh}");
            }
            let _ = writeln!(o);
        }
    }
    if !s.sysbench.is_empty() {
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
        let _ = writeln!(o);
    }
    if let Some(m) = &s.mux {
        o.push_str(&crate::mux::table(m, markdown));
    }
    o
}

/// summary.md: settings, the table, pool figures, verification, warnings.
pub fn markdown(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# ringgate bench — {} ({} profile)\n",
        s.started, s.profile
    );
    let _ = writeln!(o, "## Machine\n");
    for (k, v) in &s.machine {
        let _ = writeln!(o, "- {k}: {v}");
    }
    let _ = writeln!(o, "\n## Settings\n");
    for (k, v) in &s.settings {
        let _ = writeln!(o, "- {k}: {v}");
    }
    let _ = writeln!(
        o,
        "\n## Results\n\nLatency in µs (ms/s where marked), merged over all rounds. `p99 spr` is ±half \
         the spread of the per-round p99 around its median. `/dir` columns are ratios to the direct \
         connection. `cpu µs/op` and `RSS MiB` are the proxy process's CPU time per successful \
         operation and its peak RSS; `srv µs/op` is MariaDB's (mariadbd's) CPU time per \
         operation, the same way (in connect cells the server's cost per client connect, \
         direct or through a pool). `SQE/op` and `enter/op` are ringgate's ring counters \
         (SQEs the kernel consumed, io_uring_enter calls) per operation, `vcs/op` the proxy's \
         voluntary context switches (sleeps, so wake-ups) per operation, all threads; these \
         three count the warm-up too, per query (per connection in connect). `busy` is fixed \
         mode with --busy-poll-us, `tx` fixed mode with --pooling transaction. `(!)` marks a target whose counters did not confirm that the \
         load reached it.\n"
    );
    o.push_str(&table(s, true));
    let pools: Vec<&Record> = s.records.iter().filter(|r| r.ringgate.is_some()).collect();
    if !pools.is_empty() {
        let _ = writeln!(
            o,
            "## ringgate pool figures (from /metrics, sampled every 100 ms; peaks over all rounds, counters summed)\n"
        );
        let _ = writeln!(
            o,
            "| cell | target | mode | slots | peak in use client | peak in use backend | heap fallbacks | backend busy peak | backend idle peak | backend connects | accepted | rejected |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for r in pools {
            let p = r.ringgate.as_ref().unwrap();
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.cell_label(),
                r.target,
                p.mode,
                p.read_buffers_total,
                p.peak_in_use_client,
                p.peak_in_use_backend,
                p.heap_fallbacks,
                p.peak_backend_busy,
                p.peak_backend_idle,
                p.backend_connects,
                p.client_connections_accepted,
                p.clients_rejected
            );
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "## Per-round figures\n");
    let _ = writeln!(
        o,
        "| cell | target | round | ops/s | p50 | p99 | p99.9 | max | fail | proxy CPU s | proxy peak RSS KiB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &s.records {
        for x in &r.per_round {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
                r.cell_label(),
                r.target,
                x.round + 1,
                x.rate,
                x.p50_us,
                x.p99_us,
                x.p999_us,
                x.max_us,
                x.failures + x.timeouts,
                x.proxy_cpu_s.map_or("-".into(), |c| format!("{c:.2}")),
                x.proxy_peak_rss_kib.map_or("-".into(), |c| c.to_string()),
            );
        }
    }
    let _ = writeln!(o, "\n## Verification (was every target really reached?)\n");
    for r in &s.records {
        let _ = writeln!(
            o,
            "- {} / {}: {} — {}",
            r.cell_label(),
            r.target,
            if r.verified.ok { "ok" } else { "NOT CONFIRMED" },
            r.verified.detail
        );
    }
    for r in &s.sysbench {
        let _ = writeln!(
            o,
            "- sysbench {} / {}: {} — {}",
            r.test,
            r.target,
            if r.verified.ok { "ok" } else { "NOT CONFIRMED" },
            r.verified.detail
        );
    }
    let errs: Vec<&Record> = s.records.iter().filter(|r| !r.errors.is_empty()).collect();
    if !errs.is_empty() {
        let _ = writeln!(o, "\n## Errors\n");
        for r in errs {
            for (e, n) in &r.errors {
                let _ = writeln!(
                    o,
                    "- {} / {}: {n} × `{}`",
                    r.cell_label(),
                    r.target,
                    e.replace('`', "'")
                );
            }
        }
    }
    if !s.after_run.is_empty() {
        let _ = writeln!(
            o,
            "\n## ringgate after the run (leak check: no clients left, no busy backends)\n"
        );
        for (t, m) in &s.after_run {
            let kv: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(o, "- {t}: {}", kv.join(", "));
        }
    }
    if !s.warnings.is_empty() {
        let _ = writeln!(o, "\n## Warnings\n");
        for w in &s.warnings {
            let _ = writeln!(o, "- {w}");
        }
    }
    let _ = writeln!(o, "\nRun time: {:.0} s.", s.elapsed_s);
    o
}

pub fn target_color(t: &str) -> &'static str {
    match t {
        "fixed" => "#d62728",
        "heap" => "#1f77b4",
        "ring" => "#ff7f0e",
        "busy" => "#8c564b",
        "direct" => "#2ca02c",
        "haproxy" => "#9467bd",
        _ => "#7f7f7f",
    }
}

/// One panel of an SVG: a title and one line per target of (percentile, µs) points.
pub struct Panel {
    pub title: String,
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Latency by percentile, HdrHistogram style: x = log10(1/(1-p)) labelled
/// 0%, 90%, 99%, ...; y = latency on a log scale. Panels stack vertically.
pub fn svg(title: &str, panels: &[Panel]) -> String {
    let (w, ph, top, left, right, bottom) = (820.0, 300.0, 50.0, 80.0, 150.0, 50.0);
    let pw = w - left - right;
    let total_h = top + panels.len() as f64 * (ph + bottom) + 10.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{total_h}" viewBox="0 0 {w} {total_h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="16">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    for (i, p) in panels.iter().enumerate() {
        let y0 = top + i as f64 * (ph + bottom);
        let inner_h = ph - 30.0;
        let plot_top = y0 + 20.0;
        // Axis ranges.
        let mut xmax: f64 = 2.0;
        let (mut ymin, mut ymax) = (f64::INFINITY, 0.0f64);
        for (_, pts) in &p.lines {
            for &(q, v) in pts {
                if q < 1.0 {
                    xmax = xmax.max((1.0 / (1.0 - q)).log10());
                }
                ymin = ymin.min(v.max(1.0));
                ymax = ymax.max(v);
            }
        }
        let xmax = xmax.ceil().min(7.0);
        if !ymin.is_finite() {
            ymin = 1.0;
            ymax = 10.0;
        }
        let ylo = ymin.log10().floor();
        let yhi = ymax.log10().ceil().max(ylo + 1.0);
        let px = |q: f64| -> f64 {
            let x = if q >= 1.0 {
                xmax
            } else {
                (1.0 / (1.0 - q)).log10().min(xmax)
            };
            left + x / xmax * pw
        };
        let py = |v: f64| -> f64 {
            let y = (v.max(1.0).log10() - ylo) / (yhi - ylo);
            plot_top + inner_h - y * inner_h
        };
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
            left + pw / 2.0,
            y0 + 12.0,
            esc(&p.title)
        );
        let _ = writeln!(
            o,
            r##"<rect x="{left}" y="{plot_top}" width="{pw}" height="{inner_h}" fill="none" stroke="#333"/>"##
        );
        // X grid: 0%, 90%, 99%, ...
        for k in 0..=(xmax as i32) {
            let x = left + k as f64 / xmax * pw;
            let label = match k {
                0 => "0%".to_string(),
                1 => "90%".to_string(),
                k => format!("99.{}%", "9".repeat((k - 2) as usize)).replace("99.%", "99%"),
            };
            let _ = writeln!(
                o,
                r##"<line x1="{x}" y1="{plot_top}" x2="{x}" y2="{}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle">{label}</text>"##,
                plot_top + inner_h,
                plot_top + inner_h + 15.0
            );
        }
        let _ = writeln!(
            o,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">percentile (log "1 in N" scale)</text>"##,
            left + pw / 2.0,
            plot_top + inner_h + 30.0
        );
        // Y grid: decades with 2x and 5x marks.
        let mut d = ylo;
        while d <= yhi {
            for m in [1.0, 2.0, 5.0] {
                let v = 10f64.powf(d) * m;
                if v.log10() > yhi + 1e-9 {
                    continue;
                }
                let y = py(v);
                let label = if v >= 1e6 {
                    format!("{}s", v / 1e6)
                } else if v >= 1e3 {
                    format!("{}ms", v / 1e3)
                } else {
                    format!("{v}µs")
                };
                let stroke = if m == 1.0 { "#ccc" } else { "#eee" };
                let _ = writeln!(
                    o,
                    r#"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="{stroke}"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"#,
                    left + pw,
                    left - 6.0,
                    y + 4.0
                );
            }
            d += 1.0;
        }
        // Lines and legend.
        for (j, (name, pts)) in p.lines.iter().enumerate() {
            let color = target_color(name);
            let path: Vec<String> = pts
                .iter()
                .map(|&(q, v)| format!("{:.1},{:.1}", px(q), py(v)))
                .collect();
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            let ly = plot_top + 10.0 + j as f64 * 18.0;
            let lx = left + pw + 15.0;
            let _ = writeln!(
                o,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                esc(name)
            );
        }
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::{new_hist, plot_points};

    fn rec(target: &str, p99: u64, rate: f64) -> Record {
        let mut r = Record {
            target: target.into(),
            scenario: "connect".into(),
            concurrency: 16,
            mode: "closed-loop".into(),
            rounds: 2,
            count: 1000,
            duration_s: 2.0,
            rate,
            verified: Verification {
                ok: true,
                detail: "x".into(),
            },
            hgrm: format!("connect-c16-{target}.hgrm"),
            ..Default::default()
        };
        r.latency = Percentiles {
            p50_us: p99 / 2,
            p90_us: p99 - 10,
            p99_us: p99,
            p999_us: p99 * 2,
            max_us: p99 * 3,
            mean_us: 1.5,
        };
        r
    }

    fn summary() -> Summary {
        Summary {
            started: "2025-01-01T00:00:00Z".into(),
            profile: "quick".into(),
            targets: vec!["fixed".into(), "heap".into(), "direct".into()],
            records: vec![
                rec("heap", 800, 900.0),
                rec("direct", 400, 1000.0),
                rec("fixed", 600, 950.0),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn spread_of_rounds() {
        let rounds = vec![
            RoundFig {
                rate: 100.0,
                p50_us: 10,
                p99_us: 100,
                ..Default::default()
            },
            RoundFig {
                rate: 110.0,
                p50_us: 12,
                p99_us: 120,
                ..Default::default()
            },
            RoundFig {
                rate: 90.0,
                p50_us: 11,
                p99_us: 80,
                ..Default::default()
            },
        ];
        let s = Spread::of(&rounds);
        assert_eq!(s.rate_min, 90.0);
        assert_eq!(s.rate_max, 110.0);
        assert_eq!((s.p99_min_us, s.p99_max_us), (80, 120));
        assert_eq!((s.p50_min_us, s.p50_max_us), (10, 12));
        assert_eq!(s.p99_spread_pct, 40.0); // (120-80)/100
        assert_eq!(s.rate_spread_pct, 20.0); // (110-90)/100
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(Spread::of(&rounds[..1]).p99_spread_pct, 0.0);
    }

    #[test]
    fn json_has_one_record_per_cell_with_required_fields() {
        let s = summary();
        let v: serde_json::Value = serde_json::to_value(&s).unwrap();
        let recs = v["records"].as_array().unwrap();
        assert_eq!(recs.len(), 3);
        for r in recs {
            for k in [
                "target",
                "scenario",
                "concurrency",
                "count",
                "rate",
                "failures",
                "p50_us",
                "p90_us",
                "p99_us",
                "p999_us",
                "max_us",
            ] {
                assert!(r.get(k).is_some(), "missing {k} in {r}");
            }
            assert!(r.get("row_bytes").is_none(), "None fields are omitted");
        }
        assert_eq!(recs[0]["p99_us"], 800);
        assert_eq!(recs[0]["p999_us"], 1600);
    }

    #[test]
    fn table_orders_targets_and_computes_ratios() {
        let t = table(&summary(), false);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("── connect c=16"), "{t}");
        assert!(lines[2].trim_start().starts_with("fixed"), "{t}");
        assert!(lines[3].trim_start().starts_with("heap"), "{t}");
        assert!(lines[4].trim_start().starts_with("direct"), "{t}");
        // fixed p99 600 / direct 400 = 1.50; heap 800/400 = 2.00
        assert!(lines[2].contains("1.50"), "{t}");
        assert!(lines[3].contains("2.00"), "{t}");
        assert!(
            t.contains("fixed/heap: p50 0.75 p99 0.75 p99.9 0.75 ops/s 1.06"),
            "{t}"
        );
    }

    #[test]
    fn markdown_table_is_well_formed() {
        let md = markdown(&summary());
        let rows: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.starts_with("#### connect c=16"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(rows.len(), 5, "{md}"); // header, separator, 3 targets
        let ncols = rows[0].matches('|').count();
        assert!(rows.iter().all(|r| r.matches('|').count() == ncols), "{md}");
        assert!(md.contains("## Verification"));
    }

    #[test]
    fn svg_is_well_formed() {
        let mut h = new_hist();
        for v in 1..=10_000u64 {
            h.record(100 + v % 977).unwrap();
        }
        let panel = Panel {
            title: "connect c=16".into(),
            lines: vec![
                ("fixed".into(), plot_points(&h)),
                ("direct".into(), plot_points(&h)),
            ],
        };
        let s = svg("connect <test>", &[panel]);
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("99.9%"));
        assert!(s.contains("connect &lt;test&gt;"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }
}

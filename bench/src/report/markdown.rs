//! summary.md: the machine, the settings, the table, ringgate's pool figures, the per-round
//! figures, the verification of every target, errors, the leak check and warnings.

use std::fmt::Write as _;

use super::results::table;
use crate::model::records::{Record, Summary};

/// summary.md: settings, the table, pool figures, verification, warnings.
pub fn markdown(s: &Summary) -> String {
    let mut o = String::new();
    header(&mut o, s);
    o.push_str(&table(s, true));
    pool_figures(&mut o, s);
    per_round(&mut o, s);
    verification(&mut o, s);
    let _ = writeln!(o, "\nRun time: {:.0} s.", s.elapsed_s);
    o
}

/// The title, the machine, the settings, and how to read the table.
fn header(o: &mut String, s: &Summary) {
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
}

/// ringgate's pool figures per cell, when a ringgate target ran.
fn pool_figures(o: &mut String, s: &Summary) {
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
}

/// The cells' records and the cluster scenario's, which are measured the same way.
fn all_records(s: &Summary) -> Vec<&Record> {
    s.records
        .iter()
        .chain(s.cluster.iter().flat_map(|c| c.cost.iter()))
        .collect()
}

/// Every round of every cell and target.
fn per_round(o: &mut String, s: &Summary) {
    let records = all_records(s);
    if records.is_empty() {
        return;
    }
    let _ = writeln!(o, "## Per-round figures\n");
    let _ = writeln!(
        o,
        "| cell | target | round | ops/s | p50 | p99 | p99.9 | max | fail | proxy CPU s | proxy peak RSS KiB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in records {
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
}

/// Whether each record's and sysbench run's load reached its target; then errors, the
/// leak check and warnings.
fn verification(o: &mut String, s: &Summary) {
    let _ = writeln!(o, "\n## Verification (was every target really reached?)\n");
    for r in all_records(s) {
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
    let errs: Vec<&Record> = all_records(s)
        .into_iter()
        .filter(|r| !r.errors.is_empty())
        .collect();
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
}

//! The run's summary: its settings, summary.json and summary.md, the `latest` link, and what
//! is printed at the end.

use std::collections::BTreeMap;
use std::path::Path;

use super::outputs::Outputs;
use super::plan::Plan;
use crate::model::records::Summary;
use crate::model::target::Backend;
use crate::model::tls::TlsReport;
use crate::model::Res;
use crate::report;

/// How the run measured, for summary.md: rounds, timings, loop, order, client, proxies,
/// backend, sysbench, and the plot files.
pub fn settings(plan: &Plan, backend: &Backend, svgs: &[String]) -> BTreeMap<String, String> {
    let prof = &plan.prof;
    let mut settings = BTreeMap::new();
    settings.insert("rounds".into(), prof.rounds.to_string());
    settings.insert("warm-up per step".into(), format!("{:?}", prof.warmup));
    settings.insert("measured per step".into(), format!("{:?}", prof.duration));
    settings.insert(
        "loop".into(),
        match plan.rate {
            Some(r) => format!(
                "open loop at {r} ops/s per cell, coordinated-omission corrected (record_correct)"
            ),
            None => "closed loop".into(),
        },
    );
    settings.insert(
        "order".into(),
        "per cell: rounds of all targets, rotated (A B C D, B C D A, ...)".into(),
    );
    settings.insert(
        "client".into(),
        "mysql_async 0.37 (prefer_socket=false), tokio 2 worker threads, text protocol".into(),
    );
    settings.insert(
        "ringgate".into(),
        format!(
            "{} --workers 2, read buffers 16 KiB × 1024/worker",
            plan.bin.display()
        ),
    );
    if let Some(b) = &plan.baseline {
        settings.insert(
            "baseline".into(),
            format!(
                "{}: each `X@base` row is X run by this binary with the same flags, in the \
                 same rounds; the `X/X@base` line under a block is new over baseline",
                b.display()
            ),
        );
    }
    settings.insert(
        "haproxy".into(),
        "mode tcp, nbthread 2, no health checks".into(),
    );
    settings.insert(
        "backend".into(),
        format!(
            "MariaDB on 127.0.0.1:{}, sbtest1 {} rows",
            backend.port, prof.table_size
        ),
    );
    if prof.sysbench {
        settings.insert("sysbench".into(), format!("{} s per run, threads {:?}, --rand-type=uniform, prepared statements (sysbench default)", prof.sysbench_time, prof.sysbench_threads));
    }
    settings.insert("plots".into(), svgs.join(", "));
    settings
}

/// The machine as it was at the start, with the load average at the end added.
pub fn machine_at_end(mut machine: BTreeMap<String, String>) -> BTreeMap<String, String> {
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        machine.insert(
            "loadavg at end".into(),
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        );
    }
    machine
}

/// summary.json and summary.md in the results directory; a full run's default directory
/// also becomes bench/results/latest.
pub fn write(summary: &Summary, out: &Outputs, smoke: bool) -> Res<()> {
    let json = serde_json::to_string_pretty(summary).map_err(|e| e.to_string())?;
    std::fs::write(out.dir.join("summary.json"), json).map_err(|e| e.to_string())?;
    std::fs::write(out.dir.join("summary.md"), report::markdown(summary))
        .map_err(|e| e.to_string())?;
    if !smoke && !out.chosen {
        let latest = out.results_root.join("latest");
        let _ = std::fs::remove_file(&latest);
        let _ = std::os::unix::fs::symlink(&out.stamp, &latest);
    }
    Ok(())
}

/// The table, the TLS section's table, the warnings and where the results are.
pub fn print(summary: &Summary, tls: Option<&TlsReport>, out_dir: &Path) {
    println!();
    print!("{}", report::table(summary, false));
    if let Some(r) = tls {
        print!("\n{}", report::tls::table(r));
    }
    for w in &summary.warnings {
        println!("WARNING: {w}");
    }
    println!(
        "results: {} ({:.0} s)",
        out_dir.display(),
        summary.elapsed_s
    );
}

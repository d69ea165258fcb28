//! The smoke run is a test: its verdict over every record, sysbench run, leak check, TLS
//! step and transaction-pooling scenario.

use crate::model::records::Summary;
use crate::model::tls::TlsReport;
use crate::model::Res;

/// Prints how many checks passed; fails on errors, unverified targets, leaks, or a run that
/// measured nothing.
pub fn verdict(summary: &Summary, leaks: &[String], tls: Option<&TlsReport>) -> Res<()> {
    let bad = problems(summary, leaks, tls);
    // One leak check per ringgate target counts as a check of its own.
    let n = summary.records.len()
        + summary.sysbench.len()
        + summary.after_run.len()
        + tls.map_or(0, |r| r.records.len() + 1)
        + summary
            .mux
            .as_ref()
            .map_or(0, |m| m.many_clients.len() + m.idle.len())
        + summary
            .cluster
            .as_ref()
            .map_or(0, |c| c.reads.len() + c.cost.len() + c.changes.len());
    println!(
        "bench-smoke: {} passed, {} failed",
        n - bad.len(),
        bad.len()
    );
    // The scenarios with processes of their own measure without a cell.
    if summary.records.is_empty()
        && tls.is_none()
        && summary.mux.is_none()
        && summary.cluster.is_none()
    {
        return Err("smoke run failed: it measured nothing (no scenario cell ran)".into());
    }
    if !bad.is_empty() {
        return Err(format!("smoke run failed:\n  {}", bad.join("\n  ")));
    }
    Ok(())
}

/// Every failed check, one line each.
fn problems(summary: &Summary, leaks: &[String], tls: Option<&TlsReport>) -> Vec<String> {
    summary
        .records
        .iter()
        .filter(|r| {
            !r.verified.ok || r.failures + r.timeouts + r.setup_failures > 0 || r.count == 0
        })
        .map(|r| {
            format!(
                "{} / {}: count {} failures {} timeouts {} set-up failures {} verified {} {:?}",
                r.cell_label(),
                r.target,
                r.count,
                r.failures,
                r.timeouts,
                r.setup_failures,
                r.verified.ok,
                r.errors
            )
        })
        .chain(
            summary
                .sysbench
                .iter()
                .filter(|r| r.failed.is_some() || !r.verified.ok)
                .map(|r| format!("sysbench {} / {}: {:?}", r.test, r.target, r.failed)),
        )
        .chain(leaks.iter().map(|l| format!("leak check: {l}")))
        .chain(tls.iter().flat_map(|r| r.problems()))
        .chain(summary.mux.iter().flat_map(|m| m.problems()))
        .chain(
            summary
                .cluster
                .iter()
                .flat_map(|c| c.problems.iter().map(|p| format!("cluster: {p}"))),
        )
        .collect()
}

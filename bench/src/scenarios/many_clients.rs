//! `many-clients`: sysbench with 1,000 client connections through ringgate
//! `--pooling transaction` capped at 64 backend connections (`--backend-max-connections`),
//! against MariaDB directly with 1,000 connections. Reports QPS, p95/p99, and how many server
//! connections each used: MariaDB's Threads_connected, polled every 100 ms during the run (its
//! peak minus its value before the run: other ringgates' idle pools and the poll itself are in
//! the baseline), and ringgate's own backend-connection gauge.
//!
//! sysbench prepares its statements (COM_STMT_PREPARE) at thread start unless
//! `--db-ps-mode=disable`. ringgate's transaction pooling moves the statements with the session
//! by default; with `--tx-prepared-statements pin` a session's first statement command pins it,
//! so 1,000 preparing clients need 1,000 backend connections (the run fails by design: it shows
//! what the opt-out costs). The runs cover both, and `--db-ps-mode=disable` (text queries) for
//! both sides.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::args::env_num;
use crate::measure::poller::{threads_connected, Poller};
use crate::model::pooling::{McRecord, MuxReport};
use crate::model::{addr, BENCH_DB, BENCH_PASSWORD, BENCH_USER};
use crate::procs;
use crate::setup::host::raise_nofile_to;
use crate::setup::launch::start_ringgate;
use crate::setup::Ctx;
use crate::sysbench_output;

/// The runs: (target, ps mode). Pinning only matters with prepared statements.
pub const RUNS: [(&str, &str); 5] = [
    ("direct", "auto"),
    ("tx", "auto"),
    ("tx-pin", "auto"),
    ("direct", "disable"),
    ("tx", "disable"),
];

pub const TESTS: [&str; 2] = ["oltp_point_select", "oltp_read_write"];

/// The ringgate flags: transaction pooling on `backends` server connections, room for the
/// clients, and a pool wait long enough for 1,000 clients queueing on 64 connections.
pub fn ringgate_args(threads: usize, backends: usize, pin_ps: bool) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--pooling".into(),
        "transaction".into(),
        "--backend-max-connections".into(),
        backends.to_string(),
        "--max-connections".into(),
        (threads + 200).to_string(),
        "--backend-wait-timeout".into(),
        "30s".into(),
    ];
    if pin_ps {
        a.extend(["--tx-prepared-statements".into(), "pin".into()]);
    }
    a
}

/// Every run of the scenario, each through a fresh ringgate (none for direct).
pub fn run_all(ctx: &Ctx, rep: &mut MuxReport) {
    let threads: usize = env_num("BENCH_MANY_CLIENTS", 1000);
    let backends: usize = env_num("BENCH_MANY_BACKENDS", 64);
    let time_s: u64 = env_num(
        "BENCH_MANY_TIME",
        if ctx.prof.name == "full" { 30 } else { 10 },
    );
    raise_nofile_to(threads as u64 * 2 + 1100);
    for test in TESTS {
        for (target, ps) in RUNS {
            // A fresh ringgate per run: sessions pinned by an earlier run keep their backend
            // connections open until --backend-idle-timeout, and would count in this one.
            let proxy = if target == "direct" {
                None
            } else {
                let i = u16::from(target == "tx-pin");
                let (port, mport) = (ctx.base_port + 20 + i, ctx.base_port + 30 + i);
                match start_ringgate(
                    ctx,
                    &format!("fixed-mc-{target}-{test}-ps-{ps}"),
                    port,
                    mport,
                    &ringgate_args(threads, backends, target == "tx-pin"),
                ) {
                    Ok(t) => t.pid.map(|pid| Proxy {
                        port,
                        metrics: addr(mport),
                        pid,
                    }),
                    Err(e) => {
                        rep.warnings
                            .push(format!("many-clients {test} {target}: {e}"));
                        continue;
                    }
                }
            };
            let rec = McRecord {
                test: test.into(),
                target: target.into(),
                ps_mode: ps.into(),
                threads,
                backend_cap: proxy.as_ref().map(|_| backends),
                ..Default::default()
            };
            let r = run_one(ctx, rec, time_s, proxy.as_ref());
            if let Some(p) = proxy {
                procs::stop(p.pid, Duration::from_secs(15));
            }
            if let Some(f) = &r.failed {
                rep.warnings
                    .push(format!("many-clients {test} {target} ps={ps}: {f}"));
            }
            rep.many_clients.push(r);
        }
    }
}

/// A ringgate target of the scenario: its port, metrics address and pid.
pub struct Proxy {
    pub port: u16,
    pub metrics: SocketAddr,
    pub pid: u32,
}

/// One sysbench run (blocking) of the test, target, ps mode and threads `rec` names, for
/// `time_s` seconds, through `proxy` (none: MariaDB directly); returns `rec` filled in.
pub fn run_one(ctx: &Ctx, mut rec: McRecord, time_s: u64, proxy: Option<&Proxy>) -> McRecord {
    let server = ctx.server_login();
    rec.threads_connected_before = threads_connected(&server);
    let acc0 = proxy.map(accepted);
    let cmd = sysbench_command(ctx, &rec, time_s, proxy);
    let log = ctx.run_dir.join(format!(
        "many-clients-{}-{}-ps-{}-t{}.log",
        rec.test, rec.target, rec.ps_mode, rec.threads
    ));
    let poller = Poller::start(server, proxy.map(|p| p.metrics), Duration::from_millis(100));
    let cpu = |pid: Option<u32>| pid.and_then(procs::cpu_seconds);
    let (pcpu0, scpu0) = (cpu(proxy.map(|p| p.pid)), cpu(ctx.backend.pid));
    let name = format!("sysbench {} ({})", rec.test, rec.target);
    let outcome = procs::spawn(&name, cmd, &log)
        .map_err(|e| format!("sysbench: {e}"))
        .and_then(|pid| wait_and_parse(pid, &log, time_s));
    let delta = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| b - a);
    rec.proxy_cpu_s = delta(pcpu0, cpu(proxy.map(|p| p.pid)));
    rec.server_cpu_s = delta(scpu0, cpu(ctx.backend.pid));
    let (tc, backs) = poller.finish();
    rec.threads_connected_peak = tc;
    if let Some(p) = proxy {
        rec.ringgate_backends_peak = Some(backs);
        rec.ringgate_accepted = acc0.map(|a| accepted(p) - a);
    }
    match outcome {
        Ok(p) => fill(&mut rec, &p),
        Err(e) => rec.failed = Some(e),
    }
    log_run(&rec);
    // Let the 1,000 connections close before the next run's baseline.
    std::thread::sleep(Duration::from_secs(2));
    rec
}

/// Client connections ringgate accepted so far (0 when it does not answer).
fn accepted(p: &Proxy) -> f64 {
    procs::http_get(p.metrics, "/metrics")
        .ok()
        .and_then(|t| {
            procs::parse_prometheus(&t)
                .get("ringgate_client_connections_total")
                .copied()
        })
        .unwrap_or(0.0)
}

/// sysbench through the proxy as the bench's user, or to MariaDB as the backend's account.
fn sysbench_command(ctx: &Ctx, rec: &McRecord, time_s: u64, proxy: Option<&Proxy>) -> Command {
    let port = proxy.map_or(ctx.backend.port, |p| p.port);
    let (user, password) = match proxy {
        Some(_) => (BENCH_USER, BENCH_PASSWORD),
        None => (ctx.backend.user.as_str(), ctx.backend.password.as_str()),
    };
    let mut cmd = Command::new("sysbench");
    cmd.arg(&rec.test)
        .arg("--db-driver=mysql")
        .arg("--mysql-host=127.0.0.1")
        .arg(format!("--mysql-port={port}"))
        .arg(format!("--mysql-user={user}"))
        .arg(format!("--mysql-password={password}"))
        .arg(format!("--mysql-db={}", BENCH_DB))
        .arg(format!("--db-ps-mode={}", rec.ps_mode))
        .arg("--tables=1")
        .arg(format!("--table-size={}", ctx.prof.table_size))
        .arg(format!("--threads={}", rec.threads))
        .arg(format!("--time={time_s}"))
        .arg("--events=0")
        .arg("--rand-type=uniform")
        .arg("--percentile=95")
        .arg("--histogram=on")
        .arg("run");
    cmd
}

/// Waits for sysbench (its run time and 3 minutes for 1,000 connections to come and go)
/// and parses its log; a failed run's error carries the log's error lines.
fn wait_and_parse(pid: u32, log: &Path, time_s: u64) -> Result<sysbench_output::Parsed, String> {
    let started = Instant::now();
    let st = procs::wait_child(pid, Duration::from_secs(time_s + 180));
    let out = std::fs::read_to_string(log).unwrap_or_default();
    match st {
        Some(s) if s.success() => sysbench_output::parse(&out),
        other => Err(format!(
            "sysbench exited with {other:?} after {:.0} s: {}",
            started.elapsed().as_secs_f64(),
            out.lines()
                .filter(|l| l.contains("FATAL") || l.contains("ALERT") || l.contains("rror"))
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        )),
    }
}

fn fill(rec: &mut McRecord, p: &sysbench_output::Parsed) {
    rec.duration_s = p.total_time_s;
    rec.qps = p.qps;
    rec.tps = p.tps;
    rec.avg_ms = p.avg_ms;
    rec.p95_ms = p.p95_ms;
    rec.p99_ms = p.p99_ms;
    rec.max_ms = p.max_ms;
    rec.errors = p.errors;
    rec.reconnects = p.reconnects;
}

/// The run's progress line on stderr.
fn log_run(rec: &McRecord) {
    let (test, target, ps_mode, threads) = (&rec.test, &rec.target, &rec.ps_mode, rec.threads);
    eprintln!(
        "bench: many-clients {test:<18} {target:<8} ps={ps_mode:<7} t={threads} {:>8.0} QPS  \
         p99 {:.2} ms  server connections {:.0} (Threads_connected {:.0} -> peak {:.0}){}{}",
        rec.qps,
        rec.p99_ms,
        rec.server_connections(),
        rec.threads_connected_before,
        rec.threads_connected_peak,
        rec.ringgate_backends_peak
            .map(|b| format!(", ringgate backends peak {b:.0}"))
            .unwrap_or_default(),
        rec.failed
            .as_deref()
            .map(|f| format!("  FAILED: {f}"))
            .unwrap_or_default()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_cap_backends_and_admit_the_clients() {
        let a = ringgate_args(1000, 64, false).join(" ");
        assert!(a.contains("--pooling transaction"));
        assert!(a.contains("--backend-max-connections 64"));
        assert!(a.contains("--max-connections 1200"));
        assert!(!a.contains("--tx-prepared-statements"));
        assert!(ringgate_args(1000, 64, true)
            .join(" ")
            .contains("--tx-prepared-statements pin"));
    }

    #[test]
    fn server_connections_and_cpu_per_query() {
        let r = McRecord {
            threads_connected_before: 20.0,
            threads_connected_peak: 84.0,
            qps: 1000.0,
            duration_s: 10.0,
            ..Default::default()
        };
        assert_eq!(r.server_connections(), 64.0);
        assert_eq!(r.cpu_us_per_query(Some(1.0)), Some(100.0));
        assert_eq!(r.cpu_us_per_query(None), None);
        let failed = McRecord::default();
        assert_eq!(failed.cpu_us_per_query(Some(1.0)), None);
    }

    #[test]
    fn every_test_runs_both_ps_modes_on_both_sides() {
        for ps in ["auto", "disable"] {
            assert!(RUNS.contains(&("direct", ps)));
            assert!(RUNS.contains(&("tx", ps)));
        }
        assert!(RUNS.contains(&("tx-pin", "auto")));
    }
}

//! sysbench (`oltp_point_select`, `oltp_read_only`) through one target, its figures checked
//! against the target's counters.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::measure::counters::{read_counters, verify};
use crate::model::profile::Profile;
use crate::model::records::SysbenchRecord;
use crate::model::target::Target;
use crate::procs;
use crate::sysbench_output;

/// One sysbench run of `test` with `threads` clients through `t`.
pub async fn run_sysbench(
    t: &Target,
    test: &str,
    threads: usize,
    prof: &Profile,
    admin: &mut mysql_async::Conn,
    run_dir: &Path,
) -> SysbenchRecord {
    let before = read_counters(t, admin).await;
    let cpu0 = t.pid.and_then(procs::cpu_seconds);
    let cmd = sysbench_command(t, test, threads, prof);
    let log = run_dir.join(format!("sysbench-{test}-t{threads}-{}.log", t.name));
    let mut rec = SysbenchRecord {
        target: t.name.clone(),
        test: test.into(),
        threads,
        ..Default::default()
    };
    let outcome = procs::spawn(&format!("sysbench {test} ({})", t.name), cmd, &log)
        .map_err(|e| format!("sysbench: {e}"))
        .and_then(|pid| wait_and_parse(pid, &log, prof.sysbench_time));
    let cpu = match (cpu0, t.pid.and_then(procs::cpu_seconds)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = read_counters(t, admin).await;
    match outcome {
        Ok(p) => {
            let queries = (p.qps * p.total_time_s * 0.9) as u64;
            let mut r = p.into_record(&t.name, test, threads);
            r.proxy_cpu_s = cpu;
            if let (Ok(b), Ok(a)) = (&before, &after) {
                r.verified = verify(t, b, a, threads as u64, queries, true, 20.0);
            }
            rec = r;
        }
        Err(e) => {
            eprintln!("bench: sysbench {test} via {}: {e}", t.name);
            rec.failed = Some(e);
        }
    }
    log_run(&rec);
    rec
}

fn sysbench_command(t: &Target, test: &str, threads: usize, prof: &Profile) -> Command {
    let mut cmd = Command::new("sysbench");
    cmd.arg(test)
        .arg("--db-driver=mysql")
        .arg(format!("--mysql-host={}", t.ep.host))
        .arg(format!("--mysql-port={}", t.ep.port))
        .arg(format!("--mysql-user={}", t.ep.user))
        .arg(format!("--mysql-password={}", t.ep.password))
        .arg(format!("--mysql-db={}", t.ep.db))
        .arg("--tables=1")
        .arg(format!("--table-size={}", prof.table_size))
        .arg(format!("--threads={threads}"))
        .arg(format!("--time={}", prof.sysbench_time))
        .arg("--events=0")
        .arg("--rand-type=uniform")
        .arg("--percentile=95")
        .arg("--histogram=on")
        .arg("run");
    cmd
}

/// Waits for sysbench (its run time and a minute) and parses its log; a failed run's error
/// carries the log's last lines.
fn wait_and_parse(pid: u32, log: &Path, time_s: u64) -> Result<sysbench_output::Parsed, String> {
    let st = procs::wait_child(pid, Duration::from_secs(time_s + 60));
    let out = std::fs::read_to_string(log).unwrap_or_default();
    match st {
        Some(s) if s.success() => sysbench_output::parse(&out),
        other => Err(format!(
            "sysbench exited with {other:?}: {}",
            out.lines()
                .rev()
                .take(6)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ")
        )),
    }
}

/// The run's progress line on stderr.
fn log_run(rec: &SysbenchRecord) {
    eprintln!(
        "bench: sysbench {:<18} {:<8} t={:<4} {:>9.0} QPS  p95 {:.2}ms  p99 {:.2}ms{}",
        rec.test,
        rec.target,
        rec.threads,
        rec.qps,
        rec.p95_ms,
        rec.p99_ms,
        if rec.failed.is_some() {
            "  FAILED"
        } else if rec.verified.ok {
            ""
        } else {
            "  NOT VERIFIED"
        }
    );
}

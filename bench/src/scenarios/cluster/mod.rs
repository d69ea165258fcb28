//! `cluster`: ringgate in front of a three-node MariaDB GTID replication set of its own
//! (`scripts/mariadb-cluster.sh` on BENCH_CLUSTER_PORT, default 3461-3463, in
//! target/bench-cluster). In order:
//!
//! 1. **Where reads land** (`reads`): a read-heavy load through ringgate with the three
//!    servers, and with `--read-write-split` when the binary offers it; each server's
//!    selects and writes for the app account.
//! 2. **CPU per routed query** (`cost`): point selects through ringgate with the primary
//!    alone, with the three servers (and the split), in the rounds every cell uses; the
//!    proxy's CPU per query as a ratio of the single-server front's.
//! 3. **Failover** and 4. **switchover** (`change`): a steady write load through a fresh
//!    ringgate while the primary is killed and a replica promoted, then while the writer is
//!    switched under SIGUSR1's hold: the client-visible gap, latency, errors, lost writes.
//!
//! The set is healed after each change and stopped at the end when the run started it.
//! Knobs (environment): BENCH_CLUSTER_PORT (3461), BENCH_CLUSTER_WRITERS (4),
//! BENCH_CLUSTER_WRITE_MS (each writer's interval, 10), BENCH_CLUSTER_READ_CLIENTS (16),
//! BENCH_CLUSTER_READ_SECONDS (5), BENCH_CLUSTER_MONITOR_INTERVAL (ringgate's default).

mod change;
mod cost;
mod fronts;
mod reads;
mod set;
mod writes;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use crate::args::env_num;
use crate::checks;
use crate::model::cluster::ClusterReport;
use crate::model::target::{Kind, Target};
use crate::model::{Res, BENCH_DB};
use crate::procs;
use crate::setup::backend::load_data;
use crate::setup::Ctx;
use change::Change;
use fronts::Front;
use set::{ReplicationSet, APP_USER, DEFAULT_PORT};

/// The scenario's knobs.
pub struct Settings {
    pub writers: usize,
    pub write_every: Duration,
    pub read_clients: usize,
    pub read_seconds: f64,
    /// `--monitor-interval` for the fronts; None: ringgate's default.
    pub monitor_interval: Option<String>,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            writers: env_num("BENCH_CLUSTER_WRITERS", 4),
            write_every: Duration::from_millis(env_num("BENCH_CLUSTER_WRITE_MS", 10)),
            read_clients: env_num("BENCH_CLUSTER_READ_CLIENTS", 16),
            read_seconds: env_num("BENCH_CLUSTER_READ_SECONDS", 5.0),
            monitor_interval: std::env::var("BENCH_CLUSTER_MONITOR_INTERVAL")
                .ok()
                .filter(|s| !s.trim().is_empty()),
        }
    }
}

/// The whole scenario; what failed is in the report's problems.
pub async fn section(ctx: &Ctx<'_>, root: &Path) -> ClusterReport {
    let t0 = Instant::now();
    let how = Settings::from_env();
    let port: u16 = env_num("BENCH_CLUSTER_PORT", DEFAULT_PORT);
    let mut set = ReplicationSet::new(root, root.join("target/bench-cluster"), port);
    let mut rep = ClusterReport {
        nodes: (1..=3).map(|n| set.addr(n)).collect(),
        split_supported: fronts::split_supported(ctx.bin),
        monitor_interval: how
            .monitor_interval
            .clone()
            .unwrap_or_else(|| "ringgate's default".into()),
        ..Default::default()
    };
    if !rep.split_supported {
        rep.notes.push(format!(
            "{} has no {}: every statement goes to the writer, so every read lands on the \
             primary (the replicas only apply its writes)",
            ctx.bin.display(),
            fronts::SPLIT_FLAG
        ));
    }
    procs::register_cluster_stop(set.command(&["stop"]));
    let started = tokio::task::block_in_place(|| set.start());
    if !set.started_here {
        // A set this run did not start is left running, also on Ctrl-C.
        procs::forget_cluster_stop();
    }
    match started {
        Ok(()) => {
            if let Err(e) = phases(ctx, &set, &how, &mut rep).await {
                eprintln!("bench: cluster: {e}");
                rep.problems.push(e);
            }
        }
        Err(e) => rep
            .problems
            .push(format!("starting the replication set: {e}")),
    }
    if set.started_here {
        if let Err(e) = tokio::task::block_in_place(|| set.run(&["stop"])) {
            rep.problems
                .push(format!("stopping the replication set: {e}"));
        }
    }
    procs::forget_cluster_stop();
    let findings = rep.findings();
    rep.problems.extend(findings);
    rep.elapsed_s = t0.elapsed().as_secs_f64();
    rep
}

/// The data, then the four measures in order.
async fn phases(
    ctx: &Ctx<'_>,
    set: &ReplicationSet,
    how: &Settings,
    rep: &mut ClusterReport,
) -> Res<()> {
    prepare(ctx, set).await?;
    routed(ctx, set, how, rep).await?;
    for kind in [Change::Failover, Change::Switchover] {
        let (rec, healed) = change::run(ctx, set, how, kind).await;
        if let Some(f) = &rec.failed {
            rep.problems.push(format!("{}: {f}", rec.kind));
        }
        rep.changes.push(rec);
        // A fresh set has none of the bench's data.
        if healed? {
            prepare(ctx, set).await?;
        }
    }
    Ok(())
}

/// The bench's database on the set: the app account may use it, every server takes the
/// rounds' connections, the tables exist on every node.
async fn prepare(ctx: &Ctx<'_>, set: &ReplicationSet) -> Res<()> {
    let primary = set.primary()?;
    for n in 1..=3 {
        let mut c = set.root(n).await?;
        // Not replicated: each server's own limit (three fronts' pools and 128 clients).
        c.query_drop("SET GLOBAL max_connections = 2000")
            .await
            .map_err(|e| format!("node {n}: {e}"))?;
        if n == primary {
            c.query_drop(format!(
                "GRANT ALL ON `{BENCH_DB}`.* TO '{APP_USER}'@'127.0.0.1'"
            ))
            .await
            .map_err(|e| format!("node {n}: {e}"))?;
        }
        let _ = c.disconnect().await;
    }
    let backend = fronts::primary_backend(set, primary);
    load_data(&backend, ctx.prof, false).await?;
    let mut c = set.app(primary, BENCH_DB).await?;
    c.query_drop(writes::CREATE_TABLE)
        .await
        .map_err(|e| format!("{}: {e}", writes::TABLE))?;
    let _ = c.disconnect().await;
    caught_up(set, primary).await
}

/// Waits until every replica applied the primary's binlog position.
async fn caught_up(set: &ReplicationSet, primary: u8) -> Res<()> {
    let mut p = set.root(primary).await?;
    let pos: Option<(String, String)> = p
        .query_first("SHOW GLOBAL VARIABLES LIKE 'gtid_binlog_pos'")
        .await
        .map_err(|e| e.to_string())?;
    let _ = p.disconnect().await;
    let pos = pos.map(|(_, v)| v).unwrap_or_default();
    for n in (1..=3).filter(|&n| n != primary) {
        let mut c = set.root(n).await?;
        let got: Option<i64> = c
            .exec_first("SELECT MASTER_GTID_WAIT(?, 60)", (pos.clone(),))
            .await
            .map_err(|e| format!("node {n}: {e}"))?;
        let _ = c.disconnect().await;
        if got != Some(0) {
            return Err(format!("node {n} did not apply {pos} within 60 s"));
        }
    }
    Ok(())
}

/// Where reads land and the CPU per query, with the fronts of the routing (one server, three,
/// three with the split) running side by side.
async fn routed(
    ctx: &Ctx<'_>,
    set: &ReplicationSet,
    how: &Settings,
    rep: &mut ClusterReport,
) -> Res<()> {
    let primary = set.primary()?;
    let backend = fronts::primary_backend(set, primary);
    let mut which = vec![Front::One, Front::Three];
    if rep.split_supported {
        which.push(Front::Split);
    }
    let mut started: Vec<Target> = Vec::new();
    for f in &which {
        let flags = fronts::front_flags(*f, set, primary, how.monitor_interval.as_deref(), &[]);
        match fronts::start(ctx, &backend, *f, f.target_name(), &flags) {
            Ok(t) => started.push(t),
            Err(e) => {
                started.iter().for_each(fronts::stop);
                return Err(e);
            }
        }
    }
    // The monitor names the writer at its first check; leases wait for it until then.
    tokio::time::sleep(Duration::from_secs(2)).await;
    rep.idle_cpu_ms_per_s = idle_cpu(&which, &started).await;
    let r = measure_routed(set, how, ctx, &which, &started, rep).await;
    for t in &started {
        if let Kind::Ringgate { metrics } = &t.kind {
            for p in leak_check(*metrics).await {
                rep.problems
                    .push(format!("ringgate ({}) after the load: {p}", t.name));
            }
        }
        fronts::stop(t);
    }
    r
}

async fn measure_routed(
    set: &ReplicationSet,
    how: &Settings,
    ctx: &Ctx<'_>,
    which: &[Front],
    started: &[Target],
    rep: &mut ClusterReport,
) -> Res<()> {
    for (f, t) in which.iter().zip(started) {
        if *f == Front::One {
            continue;
        }
        let r = reads::measure(
            set,
            t,
            f.label(),
            how.read_clients,
            how.read_seconds,
            ctx.prof.table_size,
        )
        .await?;
        rep.reads.push(r);
    }
    let primary = set.primary()?;
    let mut admin = set.app(primary, BENCH_DB).await?;
    let mut cost = cost::rounds(started, ctx.prof, &mut admin, set.pid(primary)).await?;
    let _ = admin.disconnect().await;
    for r in &mut cost {
        if let Some(f) = which.iter().find(|f| f.target_name() == r.target) {
            r.target = f.label().into();
        }
    }
    rep.cost = cost;
    Ok(())
}

/// Each front's CPU over a few seconds with no client: the monitor's checks (and the
/// workers' ticks) are all it does.
async fn idle_cpu(which: &[Front], started: &[Target]) -> Vec<(String, f64)> {
    // CPU time moves in clock ticks (10 ms): 10 s resolve 1 ms per second.
    const IDLE: Duration = Duration::from_secs(10);
    let cpu = |t: &Target| t.pid.and_then(procs::cpu_seconds);
    let before: Vec<Option<f64>> = started.iter().map(cpu).collect();
    tokio::time::sleep(IDLE).await;
    which
        .iter()
        .zip(started)
        .zip(before)
        .filter_map(|((f, t), b)| {
            let used = cpu(t)? - b?;
            Some((f.label().to_string(), used * 1e3 / IDLE.as_secs_f64()))
        })
        .collect()
}

/// What ringgate still holds once its clients are gone, polled for up to 10 s.
pub async fn leak_check(metrics: SocketAddr) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m: HashMap<String, f64> = match procs::http_get(metrics, "/metrics") {
            Ok(t) => procs::parse_prometheus(&t),
            Err(e) => return vec![format!("/metrics: {e}")],
        };
        let problems = checks::leak_problems(&m, false);
        if problems.is_empty() || Instant::now() > deadline {
            return problems;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

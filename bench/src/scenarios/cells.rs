//! The cells of the interleaved rounds (connect, point-select, large-result): one round of
//! one cell on one target, measured by the load generator and checked against the target's
//! counters, and its rounds merged into a result row.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::hist::{new_hist, Percentiles};
use crate::load::{self, LoadResult, LoadSpec};
use crate::measure::counters::{metric_delta, read_counters, rejected_total, verify, Counters};
use crate::measure::peaks::{sample_metrics, Peaks};
use crate::model::profile::Profile;
use crate::model::records::{PoolFig, ProcFig, Record, RingFig, RoundFig, Spread, Verification};
use crate::model::scenario::{Cell, Scenario};
use crate::model::target::{Kind, Target};
use crate::model::Res;
use crate::procs;

/// Everything gathered for one (cell, target) over its rounds.
#[derive(Default)]
pub struct Acc {
    hist: Option<Histogram<u64>>,
    count: u64,
    failures: u64,
    timeouts: u64,
    setup_failures: u64,
    bytes: u64,
    measured: f64,
    rounds: Vec<RoundFig>,
    errors: BTreeMap<String, u64>,
    cpu: f64,
    /// Of `cpu`, the system (kernel) time.
    system_cpu: f64,
    peak_rss: u64,
    rss_reset: bool,
    backend_cpu: f64,
    pool: Option<PoolFig>,
    verified: Vec<Verification>,
    /// Operations (warm-up included, as the counters below) and what the
    /// proxy did for them: ringgate's ring counters, every proxy's
    /// voluntary context switches (its sleeps, so its wake-ups).
    sys_ops: f64,
    sqes: f64,
    enters: f64,
    waits: f64,
    vcs: Option<f64>,
}

/// `n / ops`, if there were operations.
fn per(n: f64, ops: f64) -> Option<f64> {
    (ops > 0.0).then(|| n / ops)
}

/// What the target's and MariaDB's processes had used when a step began.
struct ProcStart {
    cpu: Option<procs::CpuTimes>,
    vcs: Option<u64>,
    rss_reset: bool,
    backend_cpu: Option<f64>,
}

impl ProcStart {
    fn now(pid: Option<u32>, backend_pid: Option<u32>) -> ProcStart {
        ProcStart {
            cpu: pid.and_then(procs::cpu_times),
            vcs: pid.and_then(procs::voluntary_ctx_switches),
            rss_reset: pid.map(procs::reset_peak_rss).unwrap_or(false),
            backend_cpu: backend_pid.and_then(procs::cpu_seconds),
        }
    }
}

/// What the processes used during a step.
struct ProcUse {
    cpu_times: Option<procs::CpuTimes>,
    /// User + system seconds of the proxy.
    cpu: Option<f64>,
    peak_rss: Option<u64>,
    rss_reset: bool,
    vcs: Option<f64>,
    backend_cpu: Option<f64>,
}

impl ProcUse {
    fn since(start: ProcStart, pid: Option<u32>, backend_pid: Option<u32>) -> ProcUse {
        let cpu_times = match (start.cpu, pid.and_then(procs::cpu_times)) {
            (Some(a), Some(b)) => Some(a.until(b)),
            _ => None,
        };
        ProcUse {
            cpu_times,
            cpu: cpu_times.map(|c| c.user_s + c.system_s),
            peak_rss: pid.and_then(procs::peak_rss_kib),
            rss_reset: start.rss_reset,
            vcs: match (start.vcs, pid.and_then(procs::voluntary_ctx_switches)) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64),
                _ => None,
            },
            backend_cpu: match (start.backend_cpu, backend_pid.and_then(procs::cpu_seconds)) {
                (Some(a), Some(b)) => Some(b - a),
                _ => None,
            },
        }
    }
}

/// What every step of a run shares: the profile's timings, the open loop's rate, and
/// mariadbd's pid for its CPU time.
pub struct StepSettings<'a> {
    pub prof: &'a Profile,
    pub rate: Option<f64>,
    pub backend_pid: Option<u32>,
}

/// One step: `cell` on target `t` for one round (or the unrecorded warm-up round when
/// `round` is None), added to `acc`.
pub async fn run_step(
    cell: &Cell,
    t: &Target,
    round: Option<usize>,
    admin: &mut mysql_async::Conn,
    how: &StepSettings<'_>,
    acc: &mut Acc,
) -> Res<()> {
    let spec = LoadSpec {
        scenario: cell.scenario,
        concurrency: cell.concurrency,
        row_bytes: cell.row_bytes.unwrap_or(0),
        table_size: how.prof.table_size,
        warmup: how.prof.warmup,
        duration: how.prof.duration,
        rate: how.rate,
        op_timeout: Duration::from_secs(10),
    };
    let before = read_counters(t, admin).await?;
    let start = ProcStart::now(t.pid, how.backend_pid);
    let sampler = match &t.kind {
        Kind::Ringgate { metrics } => {
            let stop = Arc::new(AtomicBool::new(false));
            Some((stop.clone(), sample_metrics(*metrics, stop)))
        }
        _ => None,
    };

    let res = load::run(&t.ep, &spec).await;

    let peaks = sampler.map(|(stop, h)| {
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap_or_default()
    });
    let used = ProcUse::since(start, t.pid, how.backend_pid);
    // Let the proxies count the last quits before reading the counters.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = read_counters(t, admin).await?;
    let v = verify_step(cell, t, &before, &after, &res);
    let p = Percentiles::of(&res.hist);
    log_step(cell, t, round, &res, &p, v.ok);
    let Some(round) = round else { return Ok(()) };
    let counted = Counted {
        before: &before,
        after: &after,
        query: cell.scenario != Scenario::Connect,
    };
    acc.add_round(round, res, &p, &used, v, &counted)?;
    if let Some(pk) = peaks {
        acc.add_pool(&pk, &counted);
    }
    Ok(())
}

/// The target's counters around a step, and whether its operations were queries (else
/// connects).
struct Counted<'a> {
    before: &'a Counters,
    after: &'a Counters,
    query: bool,
}

/// Did the step's connects and operations reach the target? HAProxy's bytes out must be at
/// least a row per query (the row size in large-result, 120 bytes else).
fn verify_step(
    cell: &Cell,
    t: &Target,
    before: &Counters,
    after: &Counters,
    res: &LoadResult,
) -> Verification {
    let query = cell.scenario != Scenario::Connect;
    let min_bytes = match cell.scenario {
        Scenario::LargeResult => cell.row_bytes.unwrap_or(0) as f64,
        _ => 120.0,
    };
    verify(
        t,
        before,
        after,
        res.connects_total,
        res.ops_total,
        query,
        min_bytes,
    )
}

/// The step's progress line on stderr.
fn log_step(
    cell: &Cell,
    t: &Target,
    round: Option<usize>,
    res: &LoadResult,
    p: &Percentiles,
    verified: bool,
) {
    let rate_now = res.count as f64 / res.measured.as_secs_f64();
    let tag = match round {
        Some(r) => format!("round {}", r + 1),
        None => "warm-up".into(),
    };
    eprintln!(
        "bench: {:<26} {:<8} {:<8} {:>8.0} ops/s  p50 {:>7}µs  p99 {:>8}µs  fail {}{}",
        cell.label(),
        t.name,
        tag,
        rate_now,
        p.p50_us,
        p.p99_us,
        res.failures + res.timeouts + res.setup_failures,
        if verified { "" } else { "  NOT VERIFIED" }
    );
}

impl Acc {
    /// Adds a recorded round's load result and process figures.
    fn add_round(
        &mut self,
        round: usize,
        res: LoadResult,
        p: &Percentiles,
        used: &ProcUse,
        v: Verification,
        counted: &Counted,
    ) -> Res<()> {
        self.rounds.push(RoundFig {
            round,
            count: res.count,
            rate: res.count as f64 / res.measured.as_secs_f64(),
            failures: res.failures + res.setup_failures,
            timeouts: res.timeouts,
            p50_us: p.p50_us,
            p99_us: p.p99_us,
            p999_us: p.p999_us,
            max_us: p.max_us,
            proxy_cpu_s: used.cpu,
            proxy_peak_rss_kib: used.peak_rss,
        });
        self.hist
            .get_or_insert_with(new_hist)
            .add(&res.hist)
            .map_err(|e| format!("{e:?}"))?;
        self.count += res.count;
        self.failures += res.failures;
        self.timeouts += res.timeouts;
        self.setup_failures += res.setup_failures;
        self.bytes += res.bytes;
        self.measured += res.measured.as_secs_f64();
        for (k, n) in res.errors {
            *self.errors.entry(k).or_insert(0) += n;
        }
        self.add_proc_use(used);
        self.verified.push(v);
        self.sys_ops += if counted.query {
            res.ops_total
        } else {
            res.connects_total
        } as f64;
        let (b, a) = (counted.before, counted.after);
        self.sqes += metric_delta(b, a, "ringgate_ring_sqes_total");
        self.enters += metric_delta(b, a, "ringgate_ring_enters_total");
        self.waits += metric_delta(b, a, "ringgate_ring_enter_waits_total");
        Ok(())
    }

    fn add_proc_use(&mut self, used: &ProcUse) {
        self.cpu += used.cpu.unwrap_or(0.0);
        self.system_cpu += used.cpu_times.map_or(0.0, |c| c.system_s);
        self.peak_rss = self.peak_rss.max(used.peak_rss.unwrap_or(0));
        self.rss_reset = used.rss_reset;
        self.backend_cpu += used.backend_cpu.unwrap_or(0.0);
        if let Some(n) = used.vcs {
            *self.vcs.get_or_insert(0.0) += n;
        }
    }

    /// Adds ringgate's pool figures of a round: the gauges' peaks and the counters' growth.
    fn add_pool(&mut self, pk: &Peaks, counted: &Counted) {
        let (before, after) = (counted.before, counted.after);
        let pool = self.pool.get_or_insert_with(PoolFig::default);
        if let Some((k, v)) = after
            .metrics
            .iter()
            .find(|(k, _)| k.starts_with("ringgate_read_buffers_total"))
        {
            pool.mode = k.split('"').nth(1).unwrap_or("?").to_string();
            pool.read_buffers_total = *v;
        }
        pool.peak_in_use_client = pool.peak_in_use_client.max(pk.in_use_client);
        pool.peak_in_use_backend = pool.peak_in_use_backend.max(pk.in_use_backend);
        pool.peak_backend_busy = pool.peak_backend_busy.max(pk.backend_busy);
        pool.peak_backend_idle = pool.peak_backend_idle.max(pk.backend_idle);
        pool.peak_client_connections = pool.peak_client_connections.max(pk.clients);
        pool.heap_fallbacks +=
            metric_delta(before, after, "ringgate_read_buffer_heap_fallbacks_total");
        pool.backend_connects += metric_delta(before, after, "ringgate_backend_connects_total");
        pool.backend_connect_failures +=
            metric_delta(before, after, "ringgate_backend_connect_failures_total");
        pool.backend_discarded += metric_delta(before, after, "ringgate_backend_discarded_total");
        pool.client_connections_accepted += after.accepted - before.accepted;
        pool.clients_rejected += rejected_total(after) - rejected_total(before);
        pool.commands += after.work - before.work;
    }
}

/// The result row of one (cell, target) from its rounds, and the merged histogram.
pub fn finish_record(
    cell: &Cell,
    t: &Target,
    acc: Acc,
    rate: Option<f64>,
    hgrm_name: String,
) -> (Record, Histogram<u64>) {
    let proxy = t.pid.map(|_| proc_fig(t, &acc));
    let hist = acc.hist.unwrap_or_else(new_hist);
    let mut r = Record {
        target: t.name.clone(),
        scenario: cell.scenario.name().into(),
        concurrency: cell.concurrency,
        row_bytes: cell.row_bytes,
        mode: if rate.is_some() {
            "open-loop".into()
        } else {
            "closed-loop".into()
        },
        target_rate: rate,
        rounds: acc.rounds.len(),
        count: acc.count,
        duration_s: acc.measured,
        rate: if acc.measured > 0.0 {
            acc.count as f64 / acc.measured
        } else {
            0.0
        },
        mb_per_s: cell.row_bytes.map(|_| {
            if acc.measured > 0.0 {
                acc.bytes as f64 / acc.measured / 1e6
            } else {
                0.0
            }
        }),
        failures: acc.failures,
        timeouts: acc.timeouts,
        setup_failures: acc.setup_failures,
        spread: Spread::of(&acc.rounds),
        per_round: acc.rounds,
        proxy,
        backend_cpu_s: Some(acc.backend_cpu).filter(|c| *c > 0.0),
        ringgate: acc.pool,
        verified: Verification {
            ok: !acc.verified.is_empty() && acc.verified.iter().all(|v| v.ok),
            detail: acc
                .verified
                .iter()
                .map(|v| v.detail.clone())
                .collect::<Vec<_>>()
                .join("; "),
        },
        errors: acc.errors,
        hgrm: hgrm_name,
        ..Default::default()
    };
    r.latency = Percentiles::of(&hist);
    (r, hist)
}

/// The proxy process's CPU, memory and wake-ups over the rounds; the ring figures for
/// ringgate.
fn proc_fig(t: &Target, acc: &Acc) -> ProcFig {
    ProcFig {
        cpu_s: acc.cpu,
        cpu_us_per_op: if acc.count > 0 {
            acc.cpu * 1e6 / acc.count as f64
        } else {
            0.0
        },
        system_cpu_share: (acc.cpu > 0.0).then(|| acc.system_cpu / acc.cpu),
        peak_rss_kib: acc.peak_rss,
        peak_rss_reset_per_round: acc.rss_reset,
        voluntary_ctx_switches_per_op: acc.vcs.and_then(|n| per(n, acc.sys_ops)),
        ring: matches!(t.kind, Kind::Ringgate { .. }).then(|| RingFig {
            sqes_per_op: per(acc.sqes, acc.sys_ops).unwrap_or(0.0),
            enters_per_op: per(acc.enters, acc.sys_ops).unwrap_or(0.0),
            waits_per_op: per(acc.waits, acc.sys_ops).unwrap_or(0.0),
        }),
    }
}

//! The load generator: mysql_async clients running one scenario against one
//! endpoint, closed-loop by default or open-loop at a fixed rate with
//! coordinated-omission correction.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use tokio::time::{sleep_until, timeout, Instant};

use crate::hist::{clamp_us, new_hist};
use crate::model::scenario::Scenario;
use crate::model::target::Endpoint;

#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub scenario: Scenario,
    pub concurrency: usize,
    /// Row size for large-result (selects the row `id = row_bytes`).
    pub row_bytes: u64,
    /// Rows 1..=table_size exist in sbtest1.
    pub table_size: u64,
    pub warmup: Duration,
    pub duration: Duration,
    /// Open loop: total operations per second over all workers.
    pub rate: Option<f64>,
    /// One connect or query taking longer than this counts as a timeout.
    pub op_timeout: Duration,
}

#[derive(Debug)]
pub struct LoadResult {
    /// Latency of every successful operation started in the measurement window (µs).
    pub hist: Histogram<u64>,
    /// Successful operations in the window (before coordinated-omission correction).
    pub count: u64,
    pub failures: u64,
    pub timeouts: u64,
    /// Persistent connections that could not be opened before the run.
    pub setup_failures: u64,
    /// Error text → occurrences (failures and setup failures).
    pub errors: BTreeMap<String, u64>,
    /// Result bytes received in the window (large-result: the row payloads).
    pub bytes: u64,
    /// Length of the measurement window.
    pub measured: Duration,
    /// Operations of any kind (warm-up included) that reached the target.
    pub ops_total: u64,
    /// Connections opened (warm-up and set-up included).
    pub connects_total: u64,
}

#[derive(Default)]
struct WorkerOut {
    hist: Option<Histogram<u64>>,
    count: u64,
    failures: u64,
    timeouts: u64,
    errors: BTreeMap<String, u64>,
    bytes: u64,
    ops_total: u64,
    connects_total: u64,
}

fn note_error(errors: &mut BTreeMap<String, u64>, e: &str) {
    let mut s: String = e.chars().take(160).collect();
    // Keep distinct messages few: strip digits that differ per connection (ids, ports).
    if errors.len() >= 20 && !errors.contains_key(&s) {
        s = "(other errors)".into();
    }
    *errors.entry(s).or_insert(0) += 1;
}

/// A tiny xorshift PRNG: ids for point selects, no extra dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

enum OpOutcome {
    Ok { bytes: u64 },
    Failed(String),
    TimedOut,
}

async fn query_op(conn: &mut Conn, spec: &LoadSpec, rng: &mut Rng) -> OpOutcome {
    let fut = async {
        match spec.scenario {
            Scenario::PointSelect => {
                let id = rng.next() % spec.table_size + 1;
                let q = format!("SELECT c FROM sbtest1 WHERE id={id}");
                match conn.query_first::<Vec<u8>, _>(q).await {
                    Ok(Some(c)) if c.len() == 120 => OpOutcome::Ok {
                        bytes: c.len() as u64,
                    },
                    Ok(Some(c)) => OpOutcome::Failed(format!("wrong row: {} bytes", c.len())),
                    Ok(None) => OpOutcome::Failed(format!("row {id} missing")),
                    Err(e) => OpOutcome::Failed(e.to_string()),
                }
            }
            Scenario::LargeResult => {
                let q = format!("SELECT b FROM bench_blobs WHERE id={}", spec.row_bytes);
                match conn.query_first::<Vec<u8>, _>(q).await {
                    Ok(Some(b)) if b.len() as u64 == spec.row_bytes => OpOutcome::Ok {
                        bytes: b.len() as u64,
                    },
                    Ok(Some(b)) => OpOutcome::Failed(format!(
                        "wrong row: {} bytes, expected {}",
                        b.len(),
                        spec.row_bytes
                    )),
                    Ok(None) => OpOutcome::Failed("blob row missing".into()),
                    Err(e) => OpOutcome::Failed(e.to_string()),
                }
            }
            Scenario::Connect => unreachable!(),
        }
    };
    match timeout(spec.op_timeout, fut).await {
        Ok(o) => o,
        Err(_) => OpOutcome::TimedOut,
    }
}

async fn connect_op(opts: &Opts, spec: &LoadSpec) -> (OpOutcome, Option<Conn>) {
    match timeout(spec.op_timeout, Conn::new(opts.clone())).await {
        Ok(Ok(c)) => (OpOutcome::Ok { bytes: 0 }, Some(c)),
        Ok(Err(e)) => (OpOutcome::Failed(e.to_string()), None),
        Err(_) => (OpOutcome::TimedOut, None),
    }
}

struct Window {
    start: Instant,
    measure_from: Instant,
    end: Instant,
    /// Open loop: time between one worker's operations.
    interval: Option<Duration>,
}

async fn worker(
    idx: usize,
    spec: Arc<LoadSpec>,
    opts: Opts,
    mut conn: Option<Conn>,
    win: Arc<Window>,
) -> WorkerOut {
    let mut out = WorkerOut {
        hist: Some(new_hist()),
        ..Default::default()
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (idx as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let interval_us = win.interval.map(|d| d.as_micros().max(1) as u64);
    // Open loop: spread the workers' first operations over one interval.
    let mut next = match win.interval {
        Some(iv) => win.start + iv.mul_f64(idx as f64 / spec.concurrency.max(1) as f64),
        None => win.start,
    };
    loop {
        if let Some(iv) = win.interval {
            if Instant::now() < next {
                sleep_until(next).await;
            }
            next += iv;
        }
        let t0 = Instant::now();
        if t0 >= win.end {
            break;
        }
        let (outcome, elapsed) = match spec.scenario {
            Scenario::Connect => connect_and_quit(&opts, &spec, &mut out).await,
            _ => {
                let Some(c) = conn.as_mut() else { break };
                let o = query_op(c, &spec, &mut rng).await;
                let elapsed = t0.elapsed();
                if !matches!(o, OpOutcome::Ok { .. }) {
                    // The connection may be unusable now: open a new one.
                    if let Some(c) = conn.take() {
                        let _ = timeout(Duration::from_secs(2), c.disconnect()).await;
                    }
                    conn = reconnect(&opts, &spec, &mut out).await;
                }
                (o, elapsed)
            }
        };
        out.ops_total += 1;
        out.tally(outcome, elapsed, t0 >= win.measure_from, interval_us);
        if conn.is_none() && spec.scenario != Scenario::Connect {
            // Could not reconnect: back off a little rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            conn = reconnect(&opts, &spec, &mut out).await;
        }
    }
    if let Some(c) = conn {
        let _ = timeout(Duration::from_secs(5), c.disconnect()).await;
    }
    out
}

/// One connect, timed up to a usable connection; the quit that follows is part of the
/// loop, not of the time.
async fn connect_and_quit(
    opts: &Opts,
    spec: &LoadSpec,
    out: &mut WorkerOut,
) -> (OpOutcome, Duration) {
    let t0 = Instant::now();
    let (o, c) = connect_op(opts, spec).await;
    let elapsed = t0.elapsed();
    if let Some(c) = c {
        out.connects_total += 1;
        let _ = timeout(spec.op_timeout, c.disconnect()).await;
    }
    (o, elapsed)
}

/// A new persistent connection, counted, or None when it cannot be opened.
async fn reconnect(opts: &Opts, spec: &LoadSpec, out: &mut WorkerOut) -> Option<Conn> {
    match connect_op(opts, spec).await {
        (OpOutcome::Ok { .. }, Some(c)) => {
            out.connects_total += 1;
            Some(c)
        }
        _ => None,
    }
}

impl WorkerOut {
    /// Counts an operation that started in the measurement window (`recording`); open loop
    /// records its latency corrected for coordinated omission.
    fn tally(
        &mut self,
        outcome: OpOutcome,
        elapsed: Duration,
        recording: bool,
        interval_us: Option<u64>,
    ) {
        if !recording {
            return;
        }
        match outcome {
            OpOutcome::Ok { bytes } => {
                let us = clamp_us(elapsed.as_micros() as u64);
                if let Some(h) = self.hist.as_mut() {
                    let _ = match interval_us {
                        Some(iv) => h.record_correct(us, iv),
                        None => h.record(us),
                    };
                }
                self.count += 1;
                self.bytes += bytes;
            }
            OpOutcome::Failed(e) => {
                self.failures += 1;
                note_error(&mut self.errors, &e);
            }
            OpOutcome::TimedOut => {
                self.timeouts += 1;
                note_error(&mut self.errors, "timed out");
            }
        }
    }
}

/// The persistent connections of the query scenarios, opened in parallel before the clock
/// starts: the connections (None for each that failed), and the set-up failures.
async fn open_persistent(
    opts: &Opts,
    spec: &LoadSpec,
    errors: &mut BTreeMap<String, u64>,
) -> (Vec<Option<Conn>>, u64) {
    let mut conns = Vec::new();
    let mut setup_failures = 0;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..spec.concurrency {
        let o = opts.clone();
        let t = spec.op_timeout;
        set.spawn(async move { timeout(t, Conn::new(o)).await });
    }
    while let Some(r) = set.join_next().await {
        let e = match r {
            Ok(Ok(Ok(c))) => {
                conns.push(Some(c));
                continue;
            }
            Ok(Ok(Err(e))) => format!("set-up: {e}"),
            Ok(Err(_)) => "set-up: timed out".to_string(),
            Err(e) => format!("set-up task: {e}"),
        };
        setup_failures += 1;
        note_error(errors, &e);
    }
    (conns, setup_failures)
}

/// Runs one scenario against one endpoint: set-up (persistent connections),
/// warm-up (not recorded), then the measurement window.
pub async fn run(ep: &Endpoint, spec: &LoadSpec) -> LoadResult {
    let opts = ep.opts();
    let spec = Arc::new(spec.clone());
    let mut errors = BTreeMap::new();
    let (conns, setup_failures) = if spec.scenario != Scenario::Connect {
        open_persistent(&opts, &spec, &mut errors).await
    } else {
        ((0..spec.concurrency).map(|_| None).collect(), 0)
    };
    let mut connects_total = conns.iter().filter(|c| c.is_some()).count() as u64;

    let interval = spec
        .rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(spec.concurrency.max(1) as f64 / r));
    let start = Instant::now() + Duration::from_millis(20);
    let win = Arc::new(Window {
        start,
        measure_from: start + spec.warmup,
        end: start + spec.warmup + spec.duration,
        interval,
    });

    let mut set = tokio::task::JoinSet::new();
    for (idx, c) in conns.into_iter().enumerate() {
        set.spawn(worker(idx, spec.clone(), opts.clone(), c, win.clone()));
    }
    let mut total = WorkerOut {
        hist: Some(new_hist()),
        errors,
        ..Default::default()
    };
    while let Some(r) = set.join_next().await {
        match r {
            Ok(w) => total.merge(w),
            Err(e) => {
                total.failures += 1;
                note_error(&mut total.errors, &format!("worker panicked: {e}"));
            }
        }
    }
    connects_total += total.connects_total;
    LoadResult {
        hist: total.hist.unwrap_or_else(new_hist),
        count: total.count,
        failures: total.failures,
        timeouts: total.timeouts,
        setup_failures,
        errors: total.errors,
        bytes: total.bytes,
        measured: spec.duration,
        ops_total: total.ops_total,
        connects_total,
    }
}

impl WorkerOut {
    /// Adds a finished worker's figures.
    fn merge(&mut self, w: WorkerOut) {
        if let (Some(total), Some(h)) = (self.hist.as_mut(), &w.hist) {
            total.add(h).expect("same bounds");
        }
        self.count += w.count;
        self.failures += w.failures;
        self.timeouts += w.timeouts;
        self.bytes += w.bytes;
        self.ops_total += w.ops_total;
        self.connects_total += w.connects_total;
        for (k, v) in w.errors {
            *self.errors.entry(k).or_insert(0) += v;
        }
    }
}

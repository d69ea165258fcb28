//! The section's load: closed-loop steps of one mode on one target, each a thread per
//! client, and the rounds that run every mode on every target in rotated order.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rustls::ClientConfig;

use super::client::{client_config, Conn};
use super::{TlsSpec, TlsTarget};
use crate::hist::{self, Percentiles};
use crate::model::tls::{Mode, TlsRecord, TlsReport};
use crate::model::Res;
use crate::procs;
use crate::report;

/// What one step measured, or several merged.
struct StepOut {
    hist: Histogram<u64>,
    count: u64,
    failures: u64,
    first_error: Option<String>,
    resumed: u64,
    handshakes: u64,
    seconds: f64,
    proxy_cpu_s: Option<f64>,
    mariadb_cpu_s: Option<f64>,
}

impl StepOut {
    fn empty() -> StepOut {
        StepOut {
            hist: hist::new_hist(),
            count: 0,
            failures: 0,
            first_error: None,
            resumed: 0,
            handshakes: 0,
            seconds: 0.0,
            proxy_cpu_s: None,
            mariadb_cpu_s: None,
        }
    }

    /// Adds another round's step; the first error seen stays.
    fn merge(&mut self, o: StepOut) {
        let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (x, None) | (None, x) => x,
        };
        self.hist.add(&o.hist).ok();
        self.count += o.count;
        self.failures += o.failures;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.resumed += o.resumed;
        self.handshakes += o.handshakes;
        self.seconds += o.seconds;
        self.proxy_cpu_s = add(self.proxy_cpu_s, o.proxy_cpu_s);
        self.mariadb_cpu_s = add(self.mariadb_cpu_s, o.mariadb_cpu_s);
    }
}

/// What a step's client threads share: the switches and what they counted while recording.
struct Shared {
    recording: AtomicBool,
    stop: AtomicBool,
    resumed: AtomicU64,
    handshakes: AtomicU64,
    hist: Mutex<Histogram<u64>>,
    failures: AtomicU64,
    count: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            recording: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            resumed: AtomicU64::new(0),
            handshakes: AtomicU64::new(0),
            hist: Mutex::new(hist::new_hist()),
            failures: AtomicU64::new(0),
            count: AtomicU64::new(0),
            first_error: Mutex::new(None),
        }
    }

    /// A failure counts only while recording; the first one's text is kept.
    fn fail(&self, e: String) {
        if self.recording.load(Ordering::Relaxed) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            self.first_error.lock().unwrap().get_or_insert(e);
        }
    }

    fn record(&self, local: &mut Histogram<u64>, since: Instant) {
        local
            .record(hist::clamp_us(since.elapsed().as_micros() as u64))
            .ok();
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// One closed-loop step: `warmup` unrecorded, then `duration` measured.
fn step(
    t: &TlsTarget,
    mode: Mode,
    concurrency: usize,
    spec: &TlsSpec,
    tls: Option<Arc<ClientConfig>>,
) -> StepOut {
    let shared = Arc::new(Shared::new());
    let table = spec.table_size.max(1);
    let threads: Vec<_> = (0..concurrency)
        .map(|i| {
            let (t, tls, shared) = (t.clone(), tls.clone(), Arc::clone(&shared));
            std::thread::spawn(move || client(i, &t, mode, tls.as_ref(), table, &shared))
        })
        .collect();
    std::thread::sleep(spec.warmup);
    let cpu = |pid: Option<u32>| pid.and_then(procs::cpu_seconds);
    let (p0, m0) = (cpu(t.proxy_pid), cpu(spec.mariadb_pid));
    let start = Instant::now();
    shared.recording.store(true, Ordering::Relaxed);
    std::thread::sleep(spec.duration);
    shared.recording.store(false, Ordering::Relaxed);
    let seconds = start.elapsed().as_secs_f64();
    let (p1, m1) = (cpu(t.proxy_pid), cpu(spec.mariadb_pid));
    shared.stop.store(true, Ordering::Relaxed);
    for th in threads {
        let _ = th.join();
    }
    let hist = std::mem::replace(&mut *shared.hist.lock().unwrap(), hist::new_hist());
    let first_error = shared.first_error.lock().unwrap().take();
    StepOut {
        hist,
        count: shared.count.load(Ordering::Relaxed),
        failures: shared.failures.load(Ordering::Relaxed),
        first_error,
        resumed: shared.resumed.load(Ordering::Relaxed),
        handshakes: shared.handshakes.load(Ordering::Relaxed),
        seconds,
        proxy_cpu_s: p0.zip(p1).map(|(a, b)| b - a),
        mariadb_cpu_s: m0.zip(m1).map(|(a, b)| b - a),
    }
}

/// One client thread of a step until it stops: connects, or point selects on one
/// connection, each timed while recording.
fn client(
    i: usize,
    t: &TlsTarget,
    mode: Mode,
    tls: Option<&Arc<ClientConfig>>,
    table: u64,
    sh: &Shared,
) {
    let mut local = hist::new_hist();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ ((i as u64 + 1) * 0x2545_f491_4f6c_dd1d);
    let mut held: Option<Conn> = None;
    while !sh.stop.load(Ordering::Relaxed) {
        let rec = sh.recording.load(Ordering::Relaxed);
        let t0 = Instant::now();
        if mode.connects() {
            if connect_once(t, tls, rec, sh) && rec {
                sh.record(&mut local, t0);
            }
            continue;
        }
        if held.is_none() {
            match Conn::open(t, tls) {
                Ok(c) => held = Some(c),
                Err(e) => {
                    sh.fail(e);
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let sql = format!("SELECT c FROM sbtest1 WHERE id={}", seed % table + 1);
        let t1 = Instant::now();
        match held.as_mut().map(|c| c.query(&sql)) {
            Some(Ok(_)) if rec => sh.record(&mut local, t1),
            Some(Ok(_)) | None => {}
            Some(Err(e)) => {
                held = None;
                sh.fail(e);
            }
        }
    }
    if let Some(c) = held {
        c.quit();
    }
    sh.hist.lock().unwrap().add(&local).ok();
}

/// Connect, log in and quit; counts the TLS handshake (resumed or not) while recording.
fn connect_once(t: &TlsTarget, tls: Option<&Arc<ClientConfig>>, rec: bool, sh: &Shared) -> bool {
    match Conn::open(t, tls) {
        Ok(c) => {
            if rec {
                if let Some(r) = c.resumed {
                    sh.handshakes.fetch_add(1, Ordering::Relaxed);
                    sh.resumed.fetch_add(u64::from(r), Ordering::Relaxed);
                }
            }
            c.quit();
            true
        }
        Err(e) => {
            sh.fail(e);
            false
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Run every mode on every target, `rounds` times, the targets' order
/// rotated each round; `out_dir` gets `tls.json`, `tls.md` and `.hgrm`s.
pub fn run(targets: &[TlsTarget], spec: &TlsSpec, out_dir: &Path) -> Res<TlsReport> {
    let mut report = TlsReport {
        loadavg_start: loadavg(),
        ..Default::default()
    };
    let mut accs: Vec<Vec<Option<StepOut>>> = Mode::ALL
        .iter()
        .map(|_| targets.iter().map(|_| None).collect())
        .collect();
    for round in 0..spec.rounds.max(1) {
        for (mi, &mode) in Mode::ALL.iter().enumerate() {
            let conc = concurrency(mode, spec);
            for k in 0..targets.len() {
                let ti = (k + round) % targets.len();
                let t = &targets[ti];
                // One client config per step: its session store starts empty,
                // and the warm-up's first handshakes fill it.
                let cfg = mode
                    .tls()
                    .then(|| client_config(mode == Mode::ConnectResumed));
                eprintln!(
                    "bench: tls round {}/{} {} c={conc} {}",
                    round + 1,
                    spec.rounds,
                    mode.name(),
                    t.name
                );
                let o = step(t, mode, conc, spec, cfg);
                accs[mi][ti].get_or_insert_with(StepOut::empty).merge(o);
            }
        }
    }
    for (mi, &mode) in Mode::ALL.iter().enumerate() {
        for (ti, t) in targets.iter().enumerate() {
            let Some(a) = accs[mi][ti].take() else {
                continue;
            };
            let name = format!("tls-{}-{}.hgrm", mode.name(), t.name);
            std::fs::write(out_dir.join(&name), hist::hgrm(&a.hist, 1000.0))
                .map_err(|e| e.to_string())?;
            report.records.push(record(t, mode, spec, a));
        }
    }
    report.loadavg_end = loadavg();
    std::fs::write(
        out_dir.join("tls.json"),
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(out_dir.join("tls.md"), report::tls::table(&report))
        .map_err(|e| e.to_string())?;
    Ok(report)
}

fn concurrency(mode: Mode, spec: &TlsSpec) -> usize {
    if mode.connects() {
        spec.connect_concurrency
    } else {
        spec.select_concurrency
    }
}

/// The row of one target and mode from its merged steps; CPU per operation to 0.1 µs.
fn record(t: &TlsTarget, mode: Mode, spec: &TlsSpec, a: StepOut) -> TlsRecord {
    let per = |s: Option<f64>| {
        s.filter(|_| a.count > 0)
            .map(|s| (s * 1e6 / a.count as f64 * 10.0).round() / 10.0)
    };
    TlsRecord {
        target: t.name.clone(),
        mode,
        concurrency: concurrency(mode, spec),
        count: a.count,
        failures: a.failures,
        first_error: a.first_error.clone(),
        rate: if a.seconds > 0.0 {
            (a.count as f64 / a.seconds).round()
        } else {
            0.0
        },
        latency: Percentiles::of(&a.hist),
        resumed: a.resumed,
        handshakes: a.handshakes,
        proxy_cpu_us_per_op: per(a.proxy_cpu_s),
        mariadb_cpu_us_per_op: per(a.mariadb_cpu_s),
        seconds: a.seconds,
    }
}

//! `idle-10k` and `idle-max`: many logged-in clients that sit idle
//! through one ringgate with `--pooling transaction`, while another client keeps being served.
//!
//! The method is tests/idle.rs's, in the release bench: raw protocol clients (testkit's rawclient)
//! log in and send nothing more; RSS per idle client = (RSS with them − RSS before them) / N,
//! each RSS the largest of five samples 100 ms apart, so the registered region (fixed mode),
//! mapped at start, is in the baseline and excluded; buffers and backend connections held come
//! from ringgate's /metrics and MariaDB's Threads_connected. The served client is a raw client
//! running point selects back to back, measured alone before the idle clients log in and again
//! while they idle (idle-10k), or throughout logins and the idle hold (idle-max).
//!
//! fds: every idle client is one fd in the bench and one in ringgate. The bench raises its soft
//! RLIMIT_NOFILE to the hard limit at start (and the hard limit too when it may: root with
//! CAP_SYS_RESOURCE); ringgate inherits it and raises its own soft limit to its hard one. The
//! number of clients is capped below the hard limit (`fd_cap`) and the record says so.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::args::env_num;
use crate::hist::{clamp_us, new_hist};
use crate::measure::poller::{scrape, threads_connected, Poller};
use crate::model::pooling::{IdleRecord, MuxReport, Probe};
use crate::model::scenario::PoolingScenario;
use crate::model::{addr, BENCH_DB, BENCH_PASSWORD, BENCH_USER};
use crate::procs;
use crate::rawclient::{self, Login};
use crate::setup::host::raise_nofile_to;
use crate::setup::launch::start_ringgate;
use crate::setup::Ctx;
use crate::sysctl;

/// fds the bench and ringgate keep for themselves beyond the idle clients (listeners, backend
/// connections, the metrics scrape, the served client, MariaDB polls, files): tests/idle.rs's
/// margin.
const FD_MARGIN: u64 = 1100;
/// Clients per 127.0.0.x source address in idle-max: below net.ipv4.ip_local_port_range's
/// 28,232 ports of a default Linux, so one address never runs out of ephemeral ports.
const PER_SOURCE: usize = 20_000;
/// net.core.netdev_max_backlog that idle-max sets at least (sysctl.rs).
const BACKLOG_FLOOR: u64 = 20_000;
/// Threads that log the idle clients in.
const LOGIN_THREADS: usize = 4;

/// One idle scenario in one buffer mode.
#[derive(Clone, Debug)]
pub struct IdleSpec {
    /// "idle-10k" or "idle-max".
    pub scenario: &'static str,
    /// fixed, ring or heap.
    pub mode: String,
    pub aim: usize,
    /// Clients from 127.0.0.2, .3, … (PER_SOURCE each) instead of 127.0.0.1.
    pub many_sources: bool,
    /// How long the clients sit idle before each one is asked to answer.
    pub hold: Duration,
    /// Probe length for the served client (alone, then with the idle clients).
    pub probe: Duration,
    pub port: u16,
    pub metrics_port: u16,
    /// More ringgate flags (BENCH_IDLE_MAX_ARGS: e.g. `--tcp-keepalive=false`).
    pub extra_args: Vec<String>,
}

/// Packets the kernel dropped because a CPU's input backlog was full (net.core.
/// netdev_max_backlog): the second column of /proc/net/softnet_stat, summed over CPUs. Loopback
/// traffic goes through that backlog, so a burst of keepalive probes can be dropped there.
pub fn softnet_drops() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/net/softnet_stat").ok()?;
    Some(
        t.lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter_map(|h| u64::from_str_radix(h, 16).ok())
            .sum(),
    )
}

/// A TcpExt counter of /proc/net/netstat (header line of names, then a line of values).
pub fn tcp_ext(name: &str) -> Option<u64> {
    let t = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = t.lines();
    while let Some(head) = lines.next() {
        let vals = lines.next()?;
        if head.starts_with("TcpExt:") {
            let i = head.split_whitespace().position(|n| n == name)?;
            return vals.split_whitespace().nth(i)?.parse().ok();
        }
    }
    None
}

/// Idle clients that fit under a hard fd limit (each is an fd in the bench and in ringgate).
pub fn fd_cap(hard: u64) -> usize {
    hard.saturating_sub(FD_MARGIN) as usize
}

/// The source address of idle client `i`.
pub fn source_of(i: usize, many_sources: bool) -> Option<Ipv4Addr> {
    many_sources.then(|| Ipv4Addr::new(127, 0, 0, 2 + (i / PER_SOURCE).min(250) as u8))
}

fn settle_rss_kib(pid: u32) -> u64 {
    let mut v = 0;
    for _ in 0..5 {
        v = v.max(procs::rss_kib(pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    v
}

fn pinned_kib(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let f = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (f("VmPin:"), f("VmLck:"))
}

fn point_select(i: u64, table_size: u64) -> String {
    format!(
        "SELECT c FROM sbtest1 WHERE id={}",
        1 + i.wrapping_mul(2_654_435_761) % table_size.max(1)
    )
}

/// The served client: point selects back to back for `dur` (pausing `pause` between them),
/// or until `stop`.
fn serve(
    login: &Login,
    table_size: u64,
    dur: Duration,
    pause: Duration,
    stop: Option<&AtomicBool>,
) -> Probe {
    let mut h = new_hist();
    let mut failures = 0;
    let mut first_error = None;
    let mut conn: Option<TcpStream> = None;
    let end = Instant::now() + dur;
    let mut i = 0u64;
    while Instant::now() < end && !stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
        if conn.is_none() {
            match rawclient::login(login, None) {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    failures += 1;
                    first_error.get_or_insert(format!("login: {e}"));
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let t = Instant::now();
        match rawclient::query(c, &point_select(i, table_size)) {
            Ok(_) => {
                let _ = h.record(clamp_us(t.elapsed().as_micros() as u64));
            }
            Err(e) => {
                failures += 1;
                first_error.get_or_insert(e);
                conn = None;
            }
        }
        i += 1;
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    if let Some(c) = conn {
        rawclient::quit(c);
    }
    Probe::of(&h, failures, first_error)
}

/// Logs `n` clients in on LOGIN_THREADS threads; stops at the first failure. The clients, and
/// the first error.
fn log_in(login: &Login, n: usize, many_sources: bool) -> (Vec<TcpStream>, Option<String>) {
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let first_error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let handles: Vec<_> = (0..LOGIN_THREADS)
        .map(|_| {
            let (next, failed, first_error, login) = (
                next.clone(),
                failed.clone(),
                first_error.clone(),
                login.clone(),
            );
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                while !failed.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let src = source_of(i, many_sources);
                    match rawclient::login(&login, src) {
                        Ok(s) => mine.push(s),
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            let mut f = first_error.lock().unwrap_or_else(|e| e.into_inner());
                            f.get_or_insert(format!(
                                "client {i}{}: {e}",
                                src.map(|a| format!(" from {a}")).unwrap_or_default()
                            ));
                        }
                    }
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for h in handles {
        all.extend(h.join().unwrap_or_default());
    }
    let e = first_error.lock().unwrap_or_else(|e| e.into_inner()).take();
    (all, e)
}

/// Asks every idle client for `SELECT 1`, on LOGIN_THREADS threads: (answered, failed, errors).
fn answer_all(clients: Vec<TcpStream>) -> (usize, usize, BTreeMap<String, u64>, Vec<TcpStream>) {
    let per = clients.len().div_ceil(LOGIN_THREADS).max(1);
    let mut chunks: Vec<Vec<TcpStream>> = Vec::new();
    let mut it = clients.into_iter().peekable();
    while it.peek().is_some() {
        chunks.push(it.by_ref().take(per).collect());
    }
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|mut chunk| {
            std::thread::spawn(move || {
                let (mut ok, mut bad, mut errs) = (0, 0, BTreeMap::new());
                for c in chunk.iter_mut() {
                    match rawclient::query(c, "SELECT 1") {
                        Ok(_) => ok += 1,
                        Err(e) => {
                            bad += 1;
                            let k: String = e.chars().take(100).collect();
                            *errs.entry(k).or_insert(0) += 1;
                        }
                    }
                }
                (ok, bad, errs, chunk)
            })
        })
        .collect();
    let (mut ok, mut bad, mut errs, mut back) = (0, 0, BTreeMap::new(), Vec::new());
    for h in handles {
        if let Ok((o, b, e, c)) = h.join() {
            ok += o;
            bad += b;
            for (k, n) in e {
                *errs.entry(k).or_insert(0) += n;
            }
            back.extend(c);
        }
    }
    (ok, bad, errs, back)
}

/// The ringgate flags of an idle scenario: transaction pooling, 64 backend connections, room
/// for the clients, logins that may take long under load, and tests/idle.rs's buffer counts
/// (far fewer fixed slots and ring buffers than clients: only clients that hold none while
/// idle fit).
fn ringgate_args(spec: &IdleSpec) -> Vec<String> {
    let mut a: Vec<String> = [
        "--pooling",
        "transaction",
        "--backend-max-connections",
        "64",
        "--backend-wait-timeout",
        "60s",
        "--handshake-timeout",
        "10m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push("--max-connections".into());
    a.push((spec.aim + 200).to_string());
    match spec.mode.as_str() {
        "fixed" => a.extend(["--read-buffer-count".into(), "128".into()]),
        "ring" => a.extend(["--read-buffer-count".into(), "256".into()]),
        _ => {}
    }
    a.extend(spec.extra_args.iter().cloned());
    a
}

/// Runs idle-10k (in each of BENCH_IDLE_MODES) or idle-max.
pub fn run_all(ctx: &Ctx, x: PoolingScenario, rep: &mut MuxReport) {
    let mut specs = Vec::new();
    let smoke = ctx.prof.name == "smoke";
    if x == PoolingScenario::Idle10k {
        let modes = std::env::var("BENCH_IDLE_MODES")
            .unwrap_or(if smoke { "fixed" } else { "fixed,ring,heap" }.into());
        for (i, mode) in modes.split(',').map(str::trim).enumerate() {
            if !["fixed", "ring", "heap"].contains(&mode) {
                rep.warnings
                    .push(format!("BENCH_IDLE_MODES: unknown mode {mode:?}"));
                continue;
            }
            specs.push(IdleSpec {
                scenario: "idle-10k",
                mode: mode.into(),
                aim: env_num("BENCH_IDLE_CLIENTS", if smoke { 200 } else { 10_000 }),
                many_sources: false,
                hold: Duration::ZERO,
                probe: Duration::from_secs(if smoke { 1 } else { 3 }),
                port: ctx.base_port + 22 + i as u16,
                metrics_port: ctx.base_port + 32 + i as u16,
                extra_args: Vec::new(),
            });
        }
    } else {
        specs.push(IdleSpec {
            scenario: "idle-max",
            mode: "ring".into(),
            aim: env_num("BENCH_IDLE_MAX", 100_000),
            many_sources: true,
            hold: Duration::from_secs(env_num("BENCH_IDLE_MAX_HOLD", 200)),
            probe: Duration::from_secs(3),
            port: ctx.base_port + 25,
            metrics_port: ctx.base_port + 35,
            extra_args: std::env::var("BENCH_IDLE_MAX_ARGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect(),
        });
    }
    for s in specs {
        let r = run(ctx, &s);
        if let Some(f) = &r.failed {
            rep.warnings
                .push(format!("{} ({}): {f}", r.scenario, r.mode));
        }
        if r.answer_failures > 0 {
            rep.warnings.push(format!(
                "{} ({}): {} of {} idle clients did not answer after {:.0} s idle: {:?}",
                r.scenario, r.mode, r.answer_failures, r.clients, r.hold_s, r.answer_errors
            ));
        }
        rep.idle.push(r);
    }
}

/// Runs one idle scenario in one mode (blocking).
pub fn run(ctx: &Ctx, spec: &IdleSpec) -> IdleRecord {
    let mut rec = IdleRecord {
        scenario: spec.scenario.into(),
        mode: spec.mode.clone(),
        aim: spec.aim,
        extra_args: spec.extra_args.clone(),
        ..Default::default()
    };
    if let Err(e) = run_inner(ctx, spec, &mut rec) {
        eprintln!("bench: {} ({}): {e}", spec.scenario, spec.mode);
        rec.failed = Some(e);
    }
    rec
}

fn run_inner(ctx: &Ctx, spec: &IdleSpec, rec: &mut IdleRecord) -> Result<(), String> {
    let (soft, hard) = raise_nofile_to(spec.aim as u64 + FD_MARGIN);
    rec.nofile_soft = soft;
    rec.nofile_hard = hard;
    let aim = spec.aim.min(fd_cap(soft.min(hard)));
    if aim < spec.aim {
        eprintln!(
            "bench: {}: the fd limit is {soft} (hard {hard}; raising it needs CAP_SYS_RESOURCE): \
             aiming at {aim} idle clients instead of {}",
            spec.scenario, spec.aim
        );
        rec.aim_before_fd_cap = Some(spec.aim);
        rec.aim = aim;
    }
    let spec = IdleSpec {
        aim,
        ..spec.clone()
    };
    // idle-max holds its clients past the 60 s keepalive time: one input-backlog slot per idle
    // client at least, and 20,000 (measured: no drops with 18,900 clients) at least.
    let _backlog = (spec.scenario == "idle-max").then(|| {
        let b = sysctl::Raised::at_least(
            std::path::Path::new(sysctl::NETDEV_MAX_BACKLOG),
            (spec.aim as u64).max(BACKLOG_FLOOR),
            "bursts of keepalive probes may be dropped and their connections reset",
        );
        rec.netdev_max_backlog = b.now;
        rec.netdev_max_backlog_raised_from = b.raised_from();
        b
    });
    let name = format!("{}-{}", spec.mode, spec.scenario);
    let t = start_ringgate(
        ctx,
        &name,
        spec.port,
        spec.metrics_port,
        &ringgate_args(&spec),
    )?;
    let pid = t.pid.ok_or("ringgate has no pid")?;
    let maddr = addr(spec.metrics_port);
    let res = measure(ctx, &spec, pid, maddr, rec);
    procs::stop(pid, Duration::from_secs(15));
    res
}

/// The ringgate under measurement: its pid and /metrics address.
struct Proxy {
    pid: u32,
    metrics: SocketAddr,
}

fn measure(
    ctx: &Ctx,
    spec: &IdleSpec,
    pid: u32,
    maddr: SocketAddr,
    rec: &mut IdleRecord,
) -> Result<(), String> {
    let client = Login {
        addr: addr(spec.port),
        user: BENCH_USER.into(),
        password: BENCH_PASSWORD.into(),
        db: Some(BENCH_DB.into()),
        timeout: Duration::from_secs(60),
    };
    let server = ctx.server_login();
    let table_size = ctx.prof.table_size;
    let proxy = Proxy {
        pid,
        metrics: maddr,
    };

    // The served client alone; it also warms the pool.
    rec.served_alone = serve(&client, table_size, spec.probe, Duration::ZERO, None);
    if rec.served_alone.queries == 0 {
        return Err(format!(
            "the served client got no answer: {:?}",
            rec.served_alone.first_error
        ));
    }
    let m0 = scrape(maddr);
    let base = settle_rss_kib(pid);
    rec.rss_base_kib = base;
    rec.threads_connected_before = threads_connected(&server);

    let poller = Poller::start(server, Some(maddr), Duration::from_millis(500));
    // idle-max: the served client runs throughout, one point select every 20 ms.
    let background = (spec.scenario == "idle-max").then(|| Background::start(&client, table_size));
    let (drops0, aborts0) = (softnet_drops(), tcp_ext("TCPAbortOnTimeout"));
    let clients = log_in_all(spec, &client, &proxy, rec);
    record_idle_state(spec, &proxy, &m0, base, rec);
    hold(spec, &client, table_size, &proxy, rec);
    let delta = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
    rec.softnet_drops = delta(drops0, softnet_drops());
    rec.tcp_abort_on_timeout = delta(aborts0, tcp_ext("TCPAbortOnTimeout"));
    if let Some(bg) = background {
        rec.served_with_idle = bg.finish();
    }
    (rec.threads_connected_peak, rec.backends_peak) = poller.finish();
    answer(spec, clients, &proxy, base, rec);
    Ok(())
}

/// The served client on a thread of its own until stopped.
struct Background {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Probe>,
}

impl Background {
    fn start(client: &Login, table_size: u64) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (client.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            serve(
                &c,
                table_size,
                Duration::from_secs(86_400),
                Duration::from_millis(20),
                Some(&s),
            )
        });
        Background { stop, handle }
    }

    fn finish(self) -> Probe {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// Logs the idle clients in and waits (up to 30 s) until ringgate counts them all.
fn log_in_all(
    spec: &IdleSpec,
    client: &Login,
    proxy: &Proxy,
    rec: &mut IdleRecord,
) -> Vec<TcpStream> {
    eprintln!(
        "bench: {} ({}): logging in {} idle clients{}",
        spec.scenario,
        spec.mode,
        spec.aim,
        if spec.many_sources {
            " from 127.0.0.2.."
        } else {
            ""
        }
    );
    let t0 = Instant::now();
    let (clients, stopped) = log_in(client, spec.aim, spec.many_sources);
    rec.login_s = t0.elapsed().as_secs_f64();
    rec.clients = clients.len();
    rec.stopped_by = stopped;
    let deadline = Instant::now() + Duration::from_secs(30);
    while scrape(proxy.metrics)
        .get("ringgate_client_connections")
        .copied()
        .unwrap_or(0.0)
        < rec.clients as f64
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    clients
}

fn gauge(m: &HashMap<String, f64>, k: &str) -> f64 {
    m.get(k).copied().unwrap_or(0.0)
}

/// What the idle clients cost: RSS per client over `base`, pinned memory, the buffers held,
/// and the heap fallbacks since `m0`.
fn record_idle_state(
    spec: &IdleSpec,
    proxy: &Proxy,
    m0: &HashMap<String, f64>,
    base: u64,
    rec: &mut IdleRecord,
) {
    let idle_m = scrape(proxy.metrics);
    let rss = settle_rss_kib(proxy.pid);
    rec.rss_idle_kib = rss;
    rec.rss_per_client_b = rss.saturating_sub(base) as f64 * 1024.0 / rec.clients.max(1) as f64;
    (rec.vm_pin_kib, rec.vm_lck_kib) = pinned_kib(proxy.pid);
    rec.held_client = gauge(&idle_m, r#"ringgate_read_buffers_in_use{owner="client"}"#);
    rec.held_backend = gauge(&idle_m, r#"ringgate_read_buffers_in_use{owner="backend"}"#);
    rec.held_ring = gauge(&idle_m, "ringgate_read_buffer_ring_in_use");
    rec.heap_fallbacks = gauge(&idle_m, "ringgate_read_buffer_heap_fallbacks_total")
        - gauge(m0, "ringgate_read_buffer_heap_fallbacks_total");
    eprintln!(
        "bench: {} ({}): {} idle clients in {:.1} s; RSS {:.1} -> {:.1} MiB = {:.0} B per client",
        spec.scenario,
        spec.mode,
        rec.clients,
        rec.login_s,
        base as f64 / 1024.0,
        rss as f64 / 1024.0,
        rec.rss_per_client_b
    );
}

/// The hold: idle-10k probes the served client now; idle-max lets the clients idle long
/// enough for keepalive (60 s idle, then probes) and TCP_USER_TIMEOUT to act.
fn hold(spec: &IdleSpec, client: &Login, table_size: u64, proxy: &Proxy, rec: &mut IdleRecord) {
    let t_hold = Instant::now();
    if spec.scenario == "idle-10k" {
        rec.served_with_idle = serve(client, table_size, spec.probe, Duration::ZERO, None);
    }
    while t_hold.elapsed() < spec.hold {
        std::thread::sleep(Duration::from_secs(1).min(spec.hold - t_hold.elapsed().min(spec.hold)));
    }
    rec.hold_s = t_hold.elapsed().as_secs_f64();
    rec.open_after_hold = gauge(&scrape(proxy.metrics), "ringgate_client_connections");
}

/// Every idle client still answers; idle-10k then measures RSS again, with every client
/// having run a query.
fn answer(
    spec: &IdleSpec,
    clients: Vec<TcpStream>,
    proxy: &Proxy,
    base: u64,
    rec: &mut IdleRecord,
) {
    let (ok, bad, errs, clients) = answer_all(clients);
    rec.answered = ok;
    rec.answer_failures = bad;
    rec.answer_errors = errs;
    if spec.scenario == "idle-10k" {
        let after = settle_rss_kib(proxy.pid);
        rec.rss_per_client_after_query_b =
            Some(after.saturating_sub(base) as f64 * 1024.0 / rec.clients.max(1) as f64);
    }
    eprintln!(
        "bench: {} ({}): after {:.0} s idle, {} client connections open in ringgate; {ok} \
         answered, {bad} failed; served client p50 {} µs alone, {} µs with them ({} failures)",
        spec.scenario,
        spec.mode,
        rec.hold_s,
        rec.open_after_hold,
        rec.served_alone.p50_us,
        rec.served_with_idle.p50_us,
        rec.served_with_idle.failures
    );
    for c in clients {
        rawclient::quit(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_addresses_change_every_per_source_clients() {
        assert_eq!(source_of(0, false), None);
        assert_eq!(source_of(0, true), Some(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(
            source_of(PER_SOURCE - 1, true),
            Some(Ipv4Addr::new(127, 0, 0, 2))
        );
        assert_eq!(
            source_of(PER_SOURCE, true),
            Some(Ipv4Addr::new(127, 0, 0, 3))
        );
        assert_eq!(source_of(99_999, true), Some(Ipv4Addr::new(127, 0, 0, 6)));
    }

    #[test]
    fn the_fd_cap_leaves_the_margin() {
        assert_eq!(fd_cap(20_000), 18_900);
        assert_eq!(fd_cap(500), 0);
    }

    #[test]
    fn ringgate_flags_fit_the_clients() {
        let spec = IdleSpec {
            scenario: "idle-10k",
            mode: "fixed".into(),
            aim: 10_000,
            many_sources: false,
            hold: Duration::ZERO,
            probe: Duration::ZERO,
            port: 1,
            metrics_port: 2,
            extra_args: vec!["--tcp-keepalive=false".into()],
        };
        let a = ringgate_args(&spec).join(" ");
        assert!(a.contains("--pooling transaction"), "{a}");
        assert!(a.contains("--max-connections 10200"), "{a}");
        assert!(a.contains("--read-buffer-count 128"), "{a}");
        assert!(a.ends_with("--tcp-keepalive=false"), "{a}");
    }

    #[test]
    fn kernel_counters_are_readable() {
        assert!(softnet_drops().is_some());
        assert!(tcp_ext("TCPAbortOnTimeout").is_some());
        assert_eq!(tcp_ext("NoSuchCounter"), None);
    }

    #[test]
    fn probe_of_an_empty_histogram() {
        let p = Probe::of(&new_hist(), 2, Some("x".into()));
        assert_eq!((p.queries, p.failures, p.p50_us), (0, 2, 0));
    }
}

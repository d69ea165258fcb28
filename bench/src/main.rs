//! ringgate-bench: `make bench`.
//!
//!   ringgate-bench run   [options]   the whole benchmark: MariaDB sandbox, HAProxy, ringgate
//!                                    fixed + busy (fixed with --busy-poll-us) + tx (fixed with
//!                                    --pooling transaction) + ring + heap, direct;
//!                                    scenarios in interleaved rounds; sysbench; then the
//!                                    transaction-pooling scenarios (mux.rs) with their own
//!                                    ringgates; results under bench/results/<timestamp>/
//!   ringgate-bench smoke [options]   the same with the smoke profile (a few seconds per
//!                                    scenario, fixed + direct), reusing a running sandbox
//!                                    when RINGGATE_TEST_MYSQL_PORT etc. are set
//!   ringgate-bench load  [options]   one scenario against one endpoint (no set-up)
//!
//! Options (each also as an environment variable):
//!   --profile quick|full|smoke       BENCH_PROFILE      (default quick)
//!   --targets fixed,busy,hold,tx,plainfd,ring,heap,direct,haproxy   BENCH_TARGETS (hold = fixed
//!                   with --hold-idle-slots, not in the default set; tx = fixed with --pooling
//!                   transaction; plainfd = fixed with --direct-descriptors off, not in the
//!                   default set: the A/B of direct descriptors)
//!   --select-concurrency 1,32  point-select concurrencies   BENCH_SELECT_CONC
//!   --large-cells 1048576:1,1048576:8  large-result cells, ROW_BYTES:CONCURRENCY   BENCH_LARGE_CELLS
//!   --ringgate-args "FLAGS"  extra flags for every ringgate target   BENCH_RINGGATE_ARGS
//!   --busy-poll-us N  the busy target's --busy-poll-us   BENCH_BUSY_POLL_US (default 100)
//!   --scenarios connect,point-select,large-result,tls,many-clients,idle-10k,idle-max
//!                   BENCH_SCENARIOS (tls: src/tls.rs; default: all but idle-max, which the full
//!                   profile adds; knobs of the last three: see mux.rs)
//!   --rate N        open loop, N operations/s per cell, coordinated-omission corrected  BENCH_RATE
//!   --rounds N      BENCH_ROUNDS        --duration SECS  BENCH_DURATION (per round)
//!   --warmup SECS   BENCH_WARMUP        --sysbench on|off BENCH_SYSBENCH
//!   --out DIR       BENCH_OUT           (default bench/results/<timestamp>)
//!   --ringgate-bin PATH  RINGGATE_BIN   (default target/release/ringgate)
//!   --mysql-port N  BENCH_MYSQL_PORT    (default 3408; sandbox in target/bench-mariadb)
//!   --base-port N   BENCH_BASE_PORT     (default 16400: haproxy +0, fixed +1, heap +2, ring +3,
//!                                       busy +4, hold +5, tx +6, plainfd +7, metrics +11..+17;
//!                                       mux.rs's
//!                                       ringgates +20..+25, metrics +30..+35)
//! load: --host H --port P --user U --password PW --db D --scenario S --concurrency N
//!       [--row-bytes N] [--table-size N] [--duration S] [--warmup S] [--rate N]

#![allow(clippy::too_many_arguments)]

mod checks;
mod hist;
mod idle;
mod load;
mod many_clients;
mod mux;
mod procs;
mod rawclient;
mod report;
mod schedule;
mod sysbench;
mod sysctl;
mod tls;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use mysql_async::prelude::Queryable;

use hist::{new_hist, Percentiles};
use load::{Endpoint, LoadSpec, Scenario};
use report::{PoolFig, ProcFig, Record, RoundFig, Spread, Summary, SysbenchRecord, Verification};

const BENCH_DB: &str = "ringgate_bench";
const BENCH_USER: &str = "bench";
const BENCH_PASSWORD: &str = "bench-secret";

type Res<T> = Result<T, String>;

// ───────────────────────────── options ─────────────────────────────

#[derive(Clone, Debug)]
struct Profile {
    name: String,
    connect: Vec<usize>,
    select: Vec<usize>,
    /// (row bytes, concurrency)
    large: Vec<(u64, usize)>,
    rounds: usize,
    warmup: Duration,
    duration: Duration,
    warmup_round: bool,
    sysbench: bool,
    sysbench_time: u64,
    sysbench_threads: Vec<usize>,
    table_size: u64,
    targets: Vec<String>,
}

fn profile(name: &str) -> Res<Profile> {
    let all = || {
        ["fixed", "busy", "tx", "ring", "heap", "direct", "haproxy"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    Ok(match name {
        "quick" => Profile {
            name: name.into(),
            connect: vec![16, 128, 512],
            select: vec![1, 16, 128],
            large: vec![(64 << 10, 8), (1 << 20, 8)],
            rounds: 3,
            warmup: Duration::from_millis(500),
            duration: Duration::from_millis(1500),
            warmup_round: false,
            sysbench: true,
            sysbench_time: 6,
            sysbench_threads: vec![16],
            table_size: 10_000,
            targets: all(),
        },
        "full" => Profile {
            name: name.into(),
            connect: vec![16, 128, 512, 1024],
            select: vec![1, 16, 128, 512],
            large: vec![(64 << 10, 8), (1 << 20, 8), (64 << 10, 64)],
            rounds: 5,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(5),
            warmup_round: true,
            sysbench: true,
            sysbench_time: 30,
            sysbench_threads: vec![16, 128],
            table_size: 100_000,
            targets: all(),
        },
        "smoke" => Profile {
            name: name.into(),
            connect: vec![16],
            select: vec![16],
            large: vec![(64 << 10, 2), (1 << 20, 2)],
            rounds: 2,
            warmup: Duration::from_millis(200),
            duration: Duration::from_millis(500),
            warmup_round: false,
            sysbench: false,
            sysbench_time: 2,
            sysbench_threads: vec![4],
            table_size: 1_000,
            targets: vec!["fixed".into(), "direct".into()],
        },
        other => return Err(format!("unknown profile {other:?} (quick, full, smoke)")),
    })
}

/// `--name value` from the command line, else the environment variable.
struct Args {
    flags: HashMap<String, String>,
}

impl Args {
    fn parse(v: &[String]) -> Res<Args> {
        let mut flags = HashMap::new();
        let mut i = 0;
        while i < v.len() {
            let a = &v[i];
            let Some(name) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument {a:?}"));
            };
            if let Some((k, val)) = name.split_once('=') {
                flags.insert(k.to_string(), val.to_string());
                i += 1;
            } else {
                let val = v.get(i + 1).ok_or(format!("--{name} needs a value"))?;
                flags.insert(name.to_string(), val.clone());
                i += 2;
            }
        }
        Ok(Args { flags })
    }

    fn get(&self, flag: &str, env: &str) -> Option<String> {
        self.flags
            .get(flag)
            .cloned()
            .or_else(|| std::env::var(env).ok())
            .filter(|s| !s.trim().is_empty())
    }

    fn num<T: std::str::FromStr>(&self, flag: &str, env: &str) -> Res<Option<T>> {
        match self.get(flag, env) {
            None => Ok(None),
            Some(s) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("--{flag}/{env}: not a number: {s:?}")),
        }
    }
}

fn secs(d: f64) -> Duration {
    Duration::from_secs_f64(d.max(0.0))
}

// ───────────────────────────── targets ─────────────────────────────

#[derive(Clone, Debug)]
enum Kind {
    Ringgate { metrics: SocketAddr },
    Haproxy { stats_sock: PathBuf },
    Direct,
}

#[derive(Clone, Debug)]
struct Target {
    name: String,
    ep: Endpoint,
    kind: Kind,
    pid: Option<u32>,
}

/// A target's counters, read before and after each step.
#[derive(Clone, Debug, Default)]
struct Counters {
    /// Connections the target accepted since it started.
    accepted: f64,
    /// ringgate: commands forwarded; HAProxy: bytes sent to clients.
    work: f64,
    metrics: HashMap<String, f64>,
}

struct Backend {
    host: String,
    port: u16,
    user: String,
    password: String,
    pid: Option<u32>,
}

impl Backend {
    fn endpoint(&self, db: &str) -> Endpoint {
        Endpoint {
            host: self.host.clone(),
            port: self.port,
            user: self.user.clone(),
            password: self.password.clone(),
            db: db.into(),
        }
    }
}

async fn admin_conn(b: &Backend, db: &str) -> Res<mysql_async::Conn> {
    mysql_async::Conn::new(b.endpoint(db).opts())
        .await
        .map_err(|e| format!("admin connection to MariaDB {}:{}: {e}", b.host, b.port))
}

async fn mariadb_connections(admin: &mut mysql_async::Conn) -> Res<f64> {
    let row: Option<(String, String)> = admin
        .query_first("SHOW GLOBAL STATUS LIKE 'Connections'")
        .await
        .map_err(|e| e.to_string())?;
    row.and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| "no Connections status".into())
}

async fn read_counters(t: &Target, admin: &mut mysql_async::Conn) -> Res<Counters> {
    match &t.kind {
        Kind::Ringgate { metrics } => {
            let m = procs::parse_prometheus(&procs::http_get(*metrics, "/metrics")?);
            Ok(Counters {
                accepted: m
                    .get("ringgate_client_connections_total")
                    .copied()
                    .unwrap_or(0.0),
                work: m.get("ringgate_commands_total").copied().unwrap_or(0.0),
                metrics: m,
            })
        }
        Kind::Haproxy { stats_sock } => {
            let s = procs::haproxy_frontend_stats(stats_sock, "fe_mysql")?;
            let f = |k: &str| s.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            Ok(Counters {
                accepted: f("stot"),
                work: f("bout"),
                metrics: HashMap::new(),
            })
        }
        Kind::Direct => Ok(Counters {
            accepted: mariadb_connections(admin).await?,
            work: 0.0,
            metrics: HashMap::new(),
        }),
    }
}

/// Did the load really go through this target? `connects` = connections the
/// bench opened, `ops` = operations it ran, `min_bytes_per_op` for HAProxy.
fn verify(
    t: &Target,
    before: &Counters,
    after: &Counters,
    connects: u64,
    ops: u64,
    query_scenario: bool,
    min_bytes_per_op: f64,
) -> Verification {
    let d_acc = after.accepted - before.accepted;
    let d_work = after.work - before.work;
    let mut ok = d_acc >= connects as f64 && connects > 0;
    let detail = match &t.kind {
        Kind::Ringgate { .. } => {
            if query_scenario {
                ok &= d_work >= ops as f64;
            }
            format!(
                "ringgate_client_connections_total +{d_acc} (bench opened {connects}), ringgate_commands_total +{d_work} (bench ran {ops} operations)"
            )
        }
        Kind::Haproxy { .. } => {
            if query_scenario {
                ok &= d_work >= ops as f64 * min_bytes_per_op;
            }
            format!("HAProxy frontend stot +{d_acc} (bench opened {connects}), bout +{d_work} bytes ({ops} operations)")
        }
        Kind::Direct => format!("MariaDB Connections +{d_acc} (bench opened {connects})"),
    };
    Verification { ok, detail }
}

// ───────────────────────────── set-up ─────────────────────────────

fn repo_root() -> PathBuf {
    if let Ok(r) = std::env::var("RINGGATE_REPO") {
        return PathBuf::from(r);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

fn raise_nofile() {
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max.min(1 << 20);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

fn run_checked(what: &str, cmd: &mut Command) -> Res<String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn read_pidfile(p: &Path) -> Option<u32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn which(cmd: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .any(|d| Path::new(d).join(cmd).is_file())
}

/// The MariaDB to run against: the test sandbox from the environment
/// (smoke), or our own sandbox started here.
fn start_backend(root: &Path, prof: &Profile, args: &Args) -> Res<(Backend, bool)> {
    let reuse = prof.name == "smoke" || args.get("reuse-sandbox", "BENCH_REUSE_SANDBOX").is_some();
    if reuse {
        if let Ok(port) = std::env::var("RINGGATE_TEST_MYSQL_PORT") {
            let port: u16 = port.parse().map_err(|_| "bad RINGGATE_TEST_MYSQL_PORT")?;
            let pid = std::env::var("RINGGATE_TEST_MYSQL_SOCKET")
                .ok()
                .and_then(|s| read_pidfile(&Path::new(&s).parent()?.join("mysqld.pid")));
            eprintln!("bench: reusing the running MariaDB on port {port}");
            return Ok((
                Backend {
                    host: std::env::var("RINGGATE_TEST_MYSQL_HOST").unwrap_or("127.0.0.1".into()),
                    port,
                    user: std::env::var("RINGGATE_TEST_BACKEND_USER").unwrap_or("ringgate".into()),
                    password: std::env::var("RINGGATE_TEST_BACKEND_PASSWORD")
                        .unwrap_or("ringgate-backend".into()),
                    pid,
                },
                false,
            ));
        }
    }
    let port: u16 = args.num("mysql-port", "BENCH_MYSQL_PORT")?.unwrap_or(3408);
    let dir = root.join("target/bench-mariadb");
    let script = root.join("scripts/mariadb-sandbox.sh");
    let mut stop = Command::new(&script);
    stop.arg("stop").arg(&dir).arg(port.to_string());
    procs::register_sandbox_stop(stop);
    eprintln!(
        "bench: starting a MariaDB sandbox on 127.0.0.1:{port} ({})",
        dir.display()
    );
    run_checked(
        "mariadb-sandbox.sh start",
        Command::new(&script)
            .arg("start")
            .arg(&dir)
            .arg(port.to_string())
            // MariaDB's own TLS, for the TLS section (tls.rs).
            .env("RINGGATE_SANDBOX_TLS", "1"),
    )?;
    Ok((
        Backend {
            host: "127.0.0.1".into(),
            port,
            user: "ringgate".into(),
            password: "ringgate-backend".into(),
            pid: read_pidfile(&dir.join("mysqld.pid")),
        },
        true,
    ))
}

async fn load_data(b: &Backend, prof: &Profile, own_server: bool) -> Res<()> {
    let mut c = admin_conn(b, "").await?;
    let e = |e: mysql_async::Error| e.to_string();
    if own_server {
        // Room for the storms (direct 512 + both ringgate pools + HAProxy), and no
        // host blocking after clients that give up mid-handshake.
        c.query_drop("SET GLOBAL max_connections = 5000")
            .await
            .map_err(e)?;
        c.query_drop("SET GLOBAL max_connect_errors = 1000000")
            .await
            .map_err(e)?;
    }
    c.query_drop(format!("CREATE DATABASE IF NOT EXISTS `{BENCH_DB}`"))
        .await
        .map_err(e)?;
    c.query_drop(format!("USE `{BENCH_DB}`")).await.map_err(e)?;
    let n = prof.table_size;
    let have: Option<u64> = c
        .query_first("SELECT COUNT(*) FROM sbtest1")
        .await
        .unwrap_or(None);
    if have != Some(n) {
        eprintln!("bench: loading sbtest1 ({n} rows)");
        c.query_drop("DROP TABLE IF EXISTS sbtest1")
            .await
            .map_err(e)?;
        // sysbench's own schema, so `sysbench oltp_*` runs against it as is.
        c.query_drop(
            "CREATE TABLE sbtest1 (id INTEGER NOT NULL AUTO_INCREMENT, k INTEGER DEFAULT '0' NOT NULL, \
             c CHAR(120) DEFAULT '' NOT NULL, pad CHAR(60) DEFAULT '' NOT NULL, PRIMARY KEY (id)) ENGINE=InnoDB",
        )
        .await
        .map_err(e)?;
        c.query_drop("SET SESSION max_recursive_iterations = 100000000")
            .await
            .ok();
        c.query_drop(format!(
            "INSERT INTO sbtest1 (id, k, c, pad) SELECT n, FLOOR(1 + RAND(n) * {n}), \
             RPAD(CONCAT(n, '-', MD5(n), '-', SHA1(n)), 120, '-'), RPAD(MD5(n + 1), 60, '-') \
             FROM (WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {n}) SELECT n FROM s) AS seq"
        ))
        .await
        .map_err(e)?;
        c.query_drop("CREATE INDEX k_1 ON sbtest1(k)")
            .await
            .map_err(e)?;
    }
    c.query_drop(
        "CREATE TABLE IF NOT EXISTS bench_blobs (id BIGINT PRIMARY KEY, b LONGBLOB NOT NULL) ENGINE=InnoDB",
    )
    .await
    .map_err(e)?;
    let mut sizes: Vec<u64> = prof.large.iter().map(|l| l.0).collect();
    sizes.sort();
    sizes.dedup();
    for s in sizes {
        c.query_drop(format!(
            "INSERT INTO bench_blobs VALUES ({s}, REPEAT('r', {s})) ON DUPLICATE KEY UPDATE b = VALUES(b)"
        ))
        .await
        .map_err(e)?;
    }
    c.disconnect().await.map_err(e)?;
    Ok(())
}

struct Ports {
    haproxy: u16,
    fixed: u16,
    heap: u16,
    ring: u16,
    busy: u16,
    tx: u16,
    fixed_metrics: u16,
    heap_metrics: u16,
    ring_metrics: u16,
    busy_metrics: u16,
    hold: u16,
    hold_metrics: u16,
    tx_metrics: u16,
    plainfd: u16,
    plainfd_metrics: u16,
}

/// The buffer mode of a ringgate target: its name, except `busy`, which is
/// `fixed` with `--busy-poll-us`, `hold`, which is `fixed` with
/// `--hold-idle-slots` (an idle client keeps its slot instead of polling), and `tx`, `fixed`
/// with `--pooling transaction`; the scenarios of mux.rs name theirs `MODE-what`
/// (`ring-idle-max`).
fn ringgate_mode(name: &str) -> &str {
    match name {
        "busy" | "hold" | "tx" | "tls" | "plainfd" => "fixed",
        n => n.split_once('-').map_or(n, |(m, _)| m),
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn max_concurrency(prof: &Profile) -> usize {
    prof.connect
        .iter()
        .chain(prof.select.iter())
        .chain(prof.large.iter().map(|l| &l.1))
        .chain(prof.sysbench_threads.iter())
        .copied()
        .max()
        .unwrap_or(16)
}

fn start_ringgate(
    name: &str,
    bin: &Path,
    port: u16,
    metrics_port: u16,
    b: &Backend,
    users: &Path,
    run_dir: &Path,
    prof: &Profile,
    extra: &[String],
) -> Res<Target> {
    for p in [port, metrics_port] {
        if procs::port_busy(addr(p)) {
            return Err(format!(
                "port {p} is in use; set BENCH_BASE_PORT to another range"
            ));
        }
    }
    let conc = max_concurrency(prof);
    let mut cmd = Command::new(bin);
    cmd.arg("--listen")
        .arg(addr(port).to_string())
        .arg("--workers")
        .arg("2")
        .arg("--backend")
        .arg(format!("{}:{}", b.host, b.port))
        // The bench's users live only in its users file: they all run as
        // the sandbox's account.
        .arg("--backend-identity")
        .arg("shared")
        .arg("--backend-user")
        .arg(&b.user)
        .arg("--users-file")
        .arg(users)
        .arg("--read-buffers")
        .arg(ringgate_mode(name))
        .args(extra);
    // The limits fit the profile's concurrency unless the caller sets its own (mux.rs).
    if !extra.iter().any(|a| a == "--max-connections") {
        cmd.arg("--max-connections")
            .arg((conc * 2 + 64).to_string());
    }
    if !extra.iter().any(|a| a == "--backend-max-connections") {
        cmd.arg("--backend-max-connections")
            .arg((conc + 64).to_string());
    }
    cmd.arg("--metrics-listen")
        .arg(addr(metrics_port).to_string())
        .arg("--log-level")
        .arg("warn")
        .env("RINGGATE_BACKEND_PASSWORD", &b.password);
    let log = run_dir.join(format!("ringgate-{name}.log"));
    let pid = procs::spawn(&format!("ringgate ({name})"), cmd, &log)
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    procs::wait_for_port(addr(port), Duration::from_secs(15), Some(pid))
        .and_then(|_| procs::wait_for_port(addr(metrics_port), Duration::from_secs(5), Some(pid)))
        .map_err(|e| {
            format!(
                "ringgate ({name}): {e}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        })?;
    Ok(Target {
        name: name.into(),
        ep: Endpoint {
            host: "127.0.0.1".into(),
            port,
            user: BENCH_USER.into(),
            password: BENCH_PASSWORD.into(),
            db: BENCH_DB.into(),
        },
        kind: Kind::Ringgate {
            metrics: addr(metrics_port),
        },
        pid: Some(pid),
    })
}

fn haproxy_config(port: u16, backend: &str, stats_sock: &Path, maxconn: usize) -> String {
    format!(
        "# generated by ringgate-bench\n\
         global\n    maxconn {maxconn}\n    nbthread 2\n    stats socket {} mode 600 level admin\n\n\
         defaults\n    mode tcp\n    maxconn {maxconn}\n    timeout connect 5s\n    timeout client 300s\n    timeout server 300s\n\n\
         frontend fe_mysql\n    bind 127.0.0.1:{port}\n    default_backend be_mysql\n\n\
         backend be_mysql\n    server mariadb {backend} maxconn {maxconn}\n",
        stats_sock.display()
    )
}

fn start_haproxy(port: u16, b: &Backend, run_dir: &Path, prof: &Profile) -> Res<Target> {
    if procs::port_busy(addr(port)) {
        return Err(format!(
            "port {port} is in use; set BENCH_BASE_PORT to another range"
        ));
    }
    let sock = run_dir.join("haproxy.sock");
    let _ = std::fs::remove_file(&sock);
    let cfg = run_dir.join("haproxy.cfg");
    let maxconn = (max_concurrency(prof) * 4).max(4096);
    std::fs::write(
        &cfg,
        haproxy_config(port, &format!("{}:{}", b.host, b.port), &sock, maxconn),
    )
    .map_err(|e| e.to_string())?;
    procs::register_file(sock.clone());
    let bin = if which("haproxy") {
        "haproxy"
    } else {
        "/usr/sbin/haproxy"
    };
    let mut cmd = Command::new(bin);
    cmd.arg("-db").arg("-f").arg(&cfg);
    let log = run_dir.join("haproxy.log");
    let pid = procs::spawn("haproxy", cmd, &log).map_err(|e| format!("starting haproxy: {e}"))?;
    procs::wait_for_port(addr(port), Duration::from_secs(10), Some(pid)).map_err(|e| {
        format!(
            "haproxy: {e}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    })?;
    Ok(Target {
        name: "haproxy".into(),
        ep: b.endpoint(BENCH_DB),
        kind: Kind::Haproxy { stats_sock: sock },
        pid: Some(pid),
    }
    .with_port(port))
}

impl Target {
    fn with_port(mut self, port: u16) -> Target {
        self.ep.port = port;
        self
    }
}

// ───────────────────────────── measuring ─────────────────────────────

#[derive(Clone, Debug)]
struct Cell {
    scenario: Scenario,
    concurrency: usize,
    row_bytes: Option<u64>,
}

impl Cell {
    fn label(&self) -> String {
        report::cell_label(self.scenario.name(), self.concurrency, self.row_bytes)
    }
    fn file_stem(&self) -> String {
        match self.row_bytes {
            Some(b) => format!(
                "{}-{}-c{}",
                self.scenario.name(),
                report::human_bytes(b),
                self.concurrency
            ),
            None => format!("{}-c{}", self.scenario.name(), self.concurrency),
        }
    }
}

/// Peaks of ringgate's gauges while a step runs.
#[derive(Default, Clone, Debug)]
struct Peaks {
    in_use_client: f64,
    in_use_backend: f64,
    backend_busy: f64,
    backend_idle: f64,
    clients: f64,
}

fn sample_metrics(addr: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Peaks> {
    std::thread::spawn(move || {
        let mut p = Peaks::default();
        loop {
            if let Ok(t) = procs::http_get(addr, "/metrics") {
                let m = procs::parse_prometheus(&t);
                let g = |k: &str| m.get(k).copied().unwrap_or(0.0);
                p.in_use_client = p
                    .in_use_client
                    .max(g("ringgate_read_buffers_in_use{owner=\"client\"}"));
                p.in_use_backend = p
                    .in_use_backend
                    .max(g("ringgate_read_buffers_in_use{owner=\"backend\"}"));
                p.backend_busy = p
                    .backend_busy
                    .max(g("ringgate_backend_connections{state=\"busy\"}"));
                p.backend_idle = p
                    .backend_idle
                    .max(g("ringgate_backend_connections{state=\"idle\"}"));
                p.clients = p.clients.max(g("ringgate_client_connections"));
            }
            if stop.load(Ordering::Relaxed) {
                return p;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

/// Everything gathered for one (cell, target) over its rounds.
#[derive(Default)]
struct Acc {
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

fn metric_delta(a: &Counters, b: &Counters, k: &str) -> f64 {
    b.metrics.get(k).copied().unwrap_or(0.0) - a.metrics.get(k).copied().unwrap_or(0.0)
}

fn rejected_total(c: &Counters) -> f64 {
    c.metrics
        .iter()
        .filter(|(k, _)| k.starts_with("ringgate_client_rejected_total"))
        .map(|(_, v)| *v)
        .sum()
}

async fn run_step(
    cell: &Cell,
    t: &Target,
    admin: &mut mysql_async::Conn,
    backend_pid: Option<u32>,
    prof: &Profile,
    rate: Option<f64>,
    round: Option<usize>,
    acc: &mut Acc,
) -> Res<()> {
    let spec = LoadSpec {
        scenario: cell.scenario,
        concurrency: cell.concurrency,
        row_bytes: cell.row_bytes.unwrap_or(0),
        table_size: prof.table_size,
        warmup: prof.warmup,
        duration: prof.duration,
        rate,
        op_timeout: Duration::from_secs(10),
    };
    let before = read_counters(t, admin).await?;
    let cpu0 = t.pid.and_then(procs::cpu_times);
    let vcs0 = t.pid.and_then(procs::voluntary_ctx_switches);
    let rss_reset = t.pid.map(procs::reset_peak_rss).unwrap_or(false);
    let bcpu0 = backend_pid.and_then(procs::cpu_seconds);
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
    let cpu_times = match (cpu0, t.pid.and_then(procs::cpu_times)) {
        (Some(a), Some(b)) => Some(a.until(b)),
        _ => None,
    };
    let cpu = cpu_times.map(|c| c.user_s + c.system_s);
    let rss = t.pid.and_then(procs::peak_rss_kib);
    let vcs = match (vcs0, t.pid.and_then(procs::voluntary_ctx_switches)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64),
        _ => None,
    };
    let bcpu = match (bcpu0, backend_pid.and_then(procs::cpu_seconds)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    // Let the proxies count the last quits before reading the counters.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = read_counters(t, admin).await?;
    let query = cell.scenario != Scenario::Connect;
    let min_bytes = match cell.scenario {
        Scenario::LargeResult => cell.row_bytes.unwrap_or(0) as f64,
        _ => 120.0,
    };
    let v = verify(
        t,
        &before,
        &after,
        res.connects_total,
        res.ops_total,
        query,
        min_bytes,
    );

    let p = Percentiles::of(&res.hist);
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
        if v.ok { "" } else { "  NOT VERIFIED" }
    );
    let Some(round) = round else { return Ok(()) };

    acc.rounds.push(RoundFig {
        round,
        count: res.count,
        rate: rate_now,
        failures: res.failures + res.setup_failures,
        timeouts: res.timeouts,
        p50_us: p.p50_us,
        p99_us: p.p99_us,
        p999_us: p.p999_us,
        max_us: p.max_us,
        proxy_cpu_s: cpu,
        proxy_peak_rss_kib: rss,
    });
    acc.hist
        .get_or_insert_with(new_hist)
        .add(&res.hist)
        .map_err(|e| format!("{e:?}"))?;
    acc.count += res.count;
    acc.failures += res.failures;
    acc.timeouts += res.timeouts;
    acc.setup_failures += res.setup_failures;
    acc.bytes += res.bytes;
    acc.measured += res.measured.as_secs_f64();
    for (k, n) in res.errors {
        *acc.errors.entry(k).or_insert(0) += n;
    }
    acc.cpu += cpu.unwrap_or(0.0);
    acc.system_cpu += cpu_times.map_or(0.0, |c| c.system_s);
    acc.peak_rss = acc.peak_rss.max(rss.unwrap_or(0));
    acc.rss_reset = rss_reset;
    acc.backend_cpu += bcpu.unwrap_or(0.0);
    acc.verified.push(v);
    acc.sys_ops += if query {
        res.ops_total
    } else {
        res.connects_total
    } as f64;
    acc.sqes += metric_delta(&before, &after, "ringgate_ring_sqes_total");
    acc.enters += metric_delta(&before, &after, "ringgate_ring_enters_total");
    acc.waits += metric_delta(&before, &after, "ringgate_ring_enter_waits_total");
    if let Some(n) = vcs {
        *acc.vcs.get_or_insert(0.0) += n;
    }
    if let Some(pk) = peaks {
        let pool = acc.pool.get_or_insert_with(PoolFig::default);
        let m = &after.metrics;
        if let Some((k, v)) = m
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
            metric_delta(&before, &after, "ringgate_read_buffer_heap_fallbacks_total");
        pool.backend_connects += metric_delta(&before, &after, "ringgate_backend_connects_total");
        pool.backend_connect_failures +=
            metric_delta(&before, &after, "ringgate_backend_connect_failures_total");
        pool.backend_discarded += metric_delta(&before, &after, "ringgate_backend_discarded_total");
        pool.client_connections_accepted += after.accepted - before.accepted;
        pool.clients_rejected += rejected_total(&after) - rejected_total(&before);
        pool.commands += after.work - before.work;
    }
    Ok(())
}

fn finish_record(
    cell: &Cell,
    t: &Target,
    acc: Acc,
    rate: Option<f64>,
    hgrm_name: String,
) -> (Record, Histogram<u64>) {
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
        proxy: t.pid.map(|_| ProcFig {
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
            ring: matches!(t.kind, Kind::Ringgate { .. }).then(|| report::RingFig {
                sqes_per_op: per(acc.sqes, acc.sys_ops).unwrap_or(0.0),
                enters_per_op: per(acc.enters, acc.sys_ops).unwrap_or(0.0),
                waits_per_op: per(acc.waits, acc.sys_ops).unwrap_or(0.0),
            }),
        }),
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

// ───────────────────────────── sysbench ─────────────────────────────

async fn run_sysbench(
    t: &Target,
    test: &str,
    threads: usize,
    prof: &Profile,
    admin: &mut mysql_async::Conn,
    run_dir: &Path,
) -> SysbenchRecord {
    let before = read_counters(t, admin).await;
    let cpu0 = t.pid.and_then(procs::cpu_seconds);
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
    let log = run_dir.join(format!("sysbench-{test}-t{threads}-{}.log", t.name));
    let mut rec = SysbenchRecord {
        target: t.name.clone(),
        test: test.into(),
        threads,
        ..Default::default()
    };
    let outcome = procs::spawn(&format!("sysbench {test} ({})", t.name), cmd, &log)
        .map_err(|e| format!("sysbench: {e}"))
        .and_then(|pid| {
            let st = procs::wait_child(pid, Duration::from_secs(prof.sysbench_time + 60));
            let out = std::fs::read_to_string(&log).unwrap_or_default();
            match st {
                Some(s) if s.success() => sysbench::parse(&out),
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
        });
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
    eprintln!(
        "bench: sysbench {:<18} {:<8} t={:<4} {:>9.0} QPS  p95 {:.2}ms  p99 {:.2}ms{}",
        test,
        t.name,
        threads,
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
    rec
}

// ───────────────────────────── the run ─────────────────────────────

fn utc_stamp(t: SystemTime) -> (String, String) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    (
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z"),
        format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}"),
    )
}

fn machine() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    m.insert("nproc".into(), cpus.to_string());
    if let Ok(c) = std::fs::read_to_string("/proc/cpuinfo") {
        if let Some(l) = c.lines().find(|l| l.starts_with("model name")) {
            m.insert(
                "cpu".into(),
                l.split(':').nth(1).unwrap_or("").trim().to_string(),
            );
        }
    }
    if let Ok(c) = std::fs::read_to_string("/proc/meminfo") {
        if let Some(l) = c.lines().find(|l| l.starts_with("MemTotal")) {
            let kib: f64 = l
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            m.insert("memory".into(), format!("{:.1} GiB", kib / 1024.0 / 1024.0));
        }
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        m.insert("kernel".into(), k.trim().to_string());
    }
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        m.insert(
            "loadavg at start".into(),
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        );
    }
    for (name, cmd, arg) in [
        ("haproxy", "haproxy", "-v"),
        ("sysbench", "sysbench", "--version"),
        ("mariadbd", "mariadbd", "--version"),
    ] {
        if let Ok(o) = Command::new(cmd).arg(arg).output() {
            let s = String::from_utf8_lossy(&o.stdout);
            if let Some(l) = s.lines().next() {
                m.insert(name.into(), l.trim().to_string());
            }
        }
    }
    m
}

async fn run_bench(args: Args, default_profile: &str) -> Res<()> {
    let t_start = Instant::now();
    let root = repo_root();
    let prof_name = args
        .get("profile", "BENCH_PROFILE")
        .unwrap_or(default_profile.into());
    let mut prof = profile(&prof_name)?;
    if let Some(r) = args.num("rounds", "BENCH_ROUNDS")? {
        prof.rounds = r;
    }
    if let Some(d) = args.num::<f64>("duration", "BENCH_DURATION")? {
        prof.duration = secs(d);
    }
    if let Some(d) = args.num::<f64>("warmup", "BENCH_WARMUP")? {
        prof.warmup = secs(d);
    }
    if let Some(s) = args.get("sysbench", "BENCH_SYSBENCH") {
        prof.sysbench = matches!(s.as_str(), "1" | "on" | "yes" | "true");
    }
    if let Some(t) = args.get("targets", "BENCH_TARGETS") {
        prof.targets = t
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        for t in &prof.targets {
            if ![
                "fixed", "busy", "hold", "tx", "plainfd", "ring", "heap", "direct", "haproxy",
            ]
            .contains(&t.as_str())
            {
                return Err(format!(
                    "unknown target {t:?} (fixed, busy, hold, tx, plainfd, ring, heap, direct, \
                     haproxy)"
                ));
            }
        }
    }
    if let Some(c) = args.get("select-concurrency", "BENCH_SELECT_CONC") {
        prof.select = c
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .map_err(|_| format!("bad concurrency {x:?}"))
            })
            .collect::<Res<_>>()?;
    }
    // Large-result cells as ROW_BYTES:CONCURRENCY pairs (1048576:1,1048576:8).
    if let Some(c) = args.get("large-cells", "BENCH_LARGE_CELLS") {
        prof.large = c
            .split(',')
            .map(|x| {
                let bad = || format!("bad large-result cell {x:?} (ROW_BYTES:CONCURRENCY)");
                let (rows, conc) = x.trim().split_once(':').ok_or_else(bad)?;
                Ok((
                    rows.parse().map_err(|_| bad())?,
                    conc.parse().map_err(|_| bad())?,
                ))
            })
            .collect::<Res<_>>()?;
    }
    let (run_tls, scenario_list) =
        tls::split_scenarios(args.get("scenarios", "BENCH_SCENARIOS").as_deref());
    let (scenarios, extras): (Vec<Scenario>, Vec<mux::Extra>) = match scenario_list {
        Some(s) => {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for x in s.split(',').filter(|x| !x.trim().is_empty()) {
                match (Scenario::parse(x), mux::Extra::parse(x)) {
                    (Some(sc), _) => a.push(sc),
                    (None, Some(e)) => b.push(e),
                    _ => return Err(format!("unknown scenario {x:?}")),
                }
            }
            (a, b)
        }
        None => (
            vec![
                Scenario::Connect,
                Scenario::PointSelect,
                Scenario::LargeResult,
            ],
            mux::Extra::defaults(&prof.name),
        ),
    };
    let rate: Option<f64> = args.num("rate", "BENCH_RATE")?;
    let smoke = prof.name == "smoke";
    let machine_at_start = machine();
    raise_nofile();

    // Where results go.
    let (started, stamp) = utc_stamp(SystemTime::now());
    let results_root = root.join("bench/results");
    let out_dir = match args.get("out", "BENCH_OUT") {
        Some(o) => PathBuf::from(o),
        None if smoke => root.join("target/bench-smoke").join(&stamp),
        None => results_root.join(&stamp),
    };
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let run_dir = out_dir.join("logs");
    std::fs::create_dir_all(&run_dir).map_err(|e| e.to_string())?;

    // Dependencies.
    if !smoke && args.get("skip-deps", "BENCH_SKIP_DEPS").is_none() {
        eprintln!("bench: scripts/ensure-deps.sh --bench");
        let st = Command::new(root.join("scripts/ensure-deps.sh"))
            .arg("--bench")
            .status()
            .map_err(|e| format!("ensure-deps.sh: {e}"))?;
        if !st.success() {
            return Err("scripts/ensure-deps.sh --bench failed".into());
        }
    }
    if prof.targets.iter().any(|t| t == "haproxy") && !which("haproxy") {
        return Err("haproxy is not installed (scripts/ensure-deps.sh --bench installs it)".into());
    }
    if prof.sysbench && !which("sysbench") {
        return Err(
            "sysbench is not installed (scripts/ensure-deps.sh --bench installs it)".into(),
        );
    }
    let bin = args
        .get("ringgate-bin", "RINGGATE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/ringgate"));
    if (prof
        .targets
        .iter()
        .any(|t| ["fixed", "busy", "hold", "tx", "plainfd", "heap", "ring"].contains(&t.as_str()))
        || !extras.is_empty())
        && !bin.is_file()
    {
        return Err(format!(
            "{} not found: build it first (cargo build --release)",
            bin.display()
        ));
    }

    let (backend, own_server) = start_backend(&root, &prof, &args)?;
    load_data(&backend, &prof, own_server).await?;
    let users = run_dir.join("users.json");
    std::fs::write(
        &users,
        format!("{{\"{BENCH_USER}\": [{{\"Password\": \"{BENCH_PASSWORD}\"}}]}}\n"),
    )
    .map_err(|e| e.to_string())?;

    let base: u16 = args
        .num("base-port", "BENCH_BASE_PORT")?
        .unwrap_or(if smoke { 16440 } else { 16400 });
    let ports = Ports {
        haproxy: base,
        fixed: base + 1,
        heap: base + 2,
        ring: base + 3,
        busy: base + 4,
        tx: base + 6,
        fixed_metrics: base + 11,
        heap_metrics: base + 12,
        ring_metrics: base + 13,
        busy_metrics: base + 14,
        hold: base + 5,
        hold_metrics: base + 15,
        tx_metrics: base + 16,
        plainfd: base + 7,
        plainfd_metrics: base + 17,
    };
    let busy_poll_us: u32 = args
        .num("busy-poll-us", "BENCH_BUSY_POLL_US")?
        .unwrap_or(100);
    // Flags for every ringgate target (an A/B of --read-buffer-size, say).
    let common: Vec<String> = args
        .get("ringgate-args", "BENCH_RINGGATE_ARGS")
        .map(|a| a.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let with = |extra: &[&str]| -> Vec<String> {
        common
            .iter()
            .cloned()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let busy_us = busy_poll_us.to_string();
    // fixed, ring, heap, busy and hold measure session pooling (their recorded figures, the
    // COM_RESET_CONNECTION per connect): they say so, now that transaction is the default.
    let busy_args = with(&["--pooling", "session", "--busy-poll-us", &busy_us]);
    let hold_args = with(&["--pooling", "session", "--hold-idle-slots"]);
    let tx_args = with(&["--pooling", "transaction"]);
    let plain_args = with(&["--pooling", "session"]);
    let plainfd_args = with(&["--pooling", "session", "--direct-descriptors", "off"]);
    let mut targets = Vec::new();
    let mut warnings = Vec::new();
    for name in &prof.targets {
        let t = match name.as_str() {
            "fixed" => start_ringgate(
                "fixed",
                &bin,
                ports.fixed,
                ports.fixed_metrics,
                &backend,
                &users,
                &run_dir,
                &prof,
                &plain_args,
            )?,
            "heap" => start_ringgate(
                "heap",
                &bin,
                ports.heap,
                ports.heap_metrics,
                &backend,
                &users,
                &run_dir,
                &prof,
                &plain_args,
            )?,
            "ring" => start_ringgate(
                "ring",
                &bin,
                ports.ring,
                ports.ring_metrics,
                &backend,
                &users,
                &run_dir,
                &prof,
                &plain_args,
            )?,
            "busy" => start_ringgate(
                "busy",
                &bin,
                ports.busy,
                ports.busy_metrics,
                &backend,
                &users,
                &run_dir,
                &prof,
                &busy_args,
            )?,
            "plainfd" => start_ringgate(
                "plainfd",
                &bin,
                ports.plainfd,
                ports.plainfd_metrics,
                &backend,
                &users,
                &run_dir,
                &prof,
                &plainfd_args,
            )?,
            "hold" => start_ringgate(
                "hold",
                &bin,
                ports.hold,
                ports.hold_metrics,
                &backend,
                &users,
                &run_dir,
                &prof,
                &hold_args,
            )?,
            "tx" => start_ringgate(
                "tx",
                &bin,
                ports.tx,
                ports.tx_metrics,
                &backend,
                &users,
                &run_dir,
                &prof,
                &tx_args,
            )?,
            "haproxy" => start_haproxy(ports.haproxy, &backend, &run_dir, &prof)?,
            _ => Target {
                name: "direct".into(),
                ep: backend.endpoint(BENCH_DB),
                kind: Kind::Direct,
                pid: None,
            },
        };
        eprintln!("bench: target {:<8} 127.0.0.1:{}", t.name, t.ep.port);
        targets.push(t);
    }
    let mut admin = admin_conn(&backend, BENCH_DB).await?;

    // Is "fixed" really fixed? A failed registration falls back to heap silently otherwise.
    // The smoke run (a test) stops here; a full run records a warning next to its figures.
    for t in &targets {
        if let Kind::Ringgate { metrics } = &t.kind {
            let m = procs::parse_prometheus(&procs::http_get(*metrics, "/metrics")?);
            if let Some(p) = checks::mode_problem(&m, ringgate_mode(&t.name)) {
                let w = format!("ringgate ({}): {p}", t.name);
                if smoke {
                    return Err(format!("smoke run failed: {w}"));
                }
                eprintln!("bench: WARNING: {w}");
                warnings.push(w);
            }
        }
    }

    // Cells.
    let mut cells = Vec::new();
    for s in &scenarios {
        match s {
            Scenario::Connect => cells.extend(prof.connect.iter().map(|&c| Cell {
                scenario: *s,
                concurrency: c,
                row_bytes: None,
            })),
            Scenario::PointSelect => cells.extend(prof.select.iter().map(|&c| Cell {
                scenario: *s,
                concurrency: c,
                row_bytes: None,
            })),
            Scenario::LargeResult => cells.extend(prof.large.iter().map(|&(b, c)| Cell {
                scenario: *s,
                concurrency: c,
                row_bytes: Some(b),
            })),
        }
    }

    // One unrecorded pass to warm caches, pools and page tables everywhere.
    if !cells.is_empty() {
        eprintln!("bench: warm-up");
        for t in &targets {
            let warm = LoadSpec {
                scenario: Scenario::PointSelect,
                concurrency: 8,
                row_bytes: 0,
                table_size: prof.table_size,
                warmup: Duration::ZERO,
                duration: prof.warmup.max(Duration::from_millis(300)),
                rate: None,
                op_timeout: Duration::from_secs(10),
            };
            let r = load::run(&t.ep, &warm).await;
            if r.count == 0 {
                return Err(format!(
                    "target {} does not answer queries: {:?}",
                    t.name, r.errors
                ));
            }
        }
    }

    let steps = schedule::schedule(
        cells.len(),
        targets.len(),
        prof.rounds,
        prof.warmup_round,
        true,
    );
    let mut accs: Vec<Vec<Acc>> = cells
        .iter()
        .map(|_| targets.iter().map(|_| Acc::default()).collect())
        .collect();
    for st in &steps {
        let cell = &cells[st.cell];
        let t = &targets[st.target];
        run_step(
            cell,
            t,
            &mut admin,
            backend.pid,
            &prof,
            rate,
            st.round,
            &mut accs[st.cell][st.target],
        )
        .await?;
        if let Some(pid) = t.pid {
            if !procs::child_alive(pid) {
                return Err(format!(
                    "{} (pid {pid}) died during {}",
                    t.name,
                    cell.label()
                ));
            }
        }
    }

    // Leak check: after the load, every client slot should be free again and no backend busy.
    // Polled for up to 10 s (sessions close asynchronously); what is still wrong then fails
    // the smoke run and is a warning of a full run.
    let mut after_run = BTreeMap::new();
    let mut leaks = Vec::new();
    for t in &targets {
        if let Kind::Ringgate { metrics } = &t.kind {
            let deadline = Instant::now() + Duration::from_secs(10);
            let (m, problems) = loop {
                let m = procs::parse_prometheus(&procs::http_get(*metrics, "/metrics")?);
                let problems = checks::leak_problems(&m, t.name == "hold");
                if problems.is_empty() || Instant::now() > deadline {
                    break (m, problems);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            let keys = [
                ("client_connections", "ringgate_client_connections"),
                (
                    "read_buffers_in_use_client",
                    "ringgate_read_buffers_in_use{owner=\"client\"}",
                ),
                (
                    "read_buffers_in_use_backend",
                    "ringgate_read_buffers_in_use{owner=\"backend\"}",
                ),
                ("read_buffers_free", "ringgate_read_buffers_free"),
                (
                    "backend_busy",
                    "ringgate_backend_connections{state=\"busy\"}",
                ),
                (
                    "backend_idle",
                    "ringgate_backend_connections{state=\"idle\"}",
                ),
                (
                    "heap_fallbacks_total",
                    "ringgate_read_buffer_heap_fallbacks_total",
                ),
                (
                    "client_connections_total",
                    "ringgate_client_connections_total",
                ),
            ];
            let mut fig = BTreeMap::new();
            for (short, k) in keys {
                fig.insert(short.to_string(), m.get(k).copied().unwrap_or(f64::NAN));
            }
            if let Some(rss) = t.pid.and_then(procs::rss_kib) {
                fig.insert("rss_kib".into(), rss as f64);
            }
            if !problems.is_empty() {
                let w = format!(
                    "ringgate ({}) after the run (all bench clients gone): {}",
                    t.name,
                    problems.join("; ")
                );
                eprintln!("bench: WARNING: {w}");
                warnings.push(w.clone());
                leaks.push(w);
            }
            after_run.insert(t.name.clone(), fig);
        }
    }

    let tls_report = if run_tls {
        Some(
            tls::section(
                &root, &bin, &backend, &users, &run_dir, &out_dir, &prof, base, own_server,
            )
            .await?,
        )
    } else {
        None
    };

    // sysbench, interleaved over targets.
    let mut sb = Vec::new();
    if prof.sysbench && !targets.is_empty() {
        for test in ["oltp_point_select", "oltp_read_only"] {
            for &threads in &prof.sysbench_threads {
                for t in &targets {
                    sb.push(run_sysbench(t, test, threads, &prof, &mut admin, &run_dir).await);
                }
            }
        }
    }
    let _ = admin.disconnect().await;

    // The transaction-pooling scenarios (mux.rs), each with its own ringgate(s).
    let mux = if extras.is_empty() {
        None
    } else {
        let ctx = mux::Ctx {
            bin: &bin,
            backend: &backend,
            users: &users,
            run_dir: &run_dir,
            prof: &prof,
            base_port: base,
        };
        let m = mux::run(&ctx, &extras).await;
        warnings.extend(m.warnings.iter().cloned());
        Some(m)
    };

    // Results.
    let mut records = Vec::new();
    let mut by_scenario: BTreeMap<Scenario, Vec<report::Panel>> = BTreeMap::new();
    for (ci, cell) in cells.iter().enumerate() {
        let mut panel = report::Panel {
            title: cell.label(),
            lines: Vec::new(),
        };
        for (ti, t) in targets.iter().enumerate() {
            let acc = std::mem::take(&mut accs[ci][ti]);
            let name = format!("{}-{}.hgrm", cell.file_stem(), t.name);
            let (rec, hist) = finish_record(cell, t, acc, rate, name.clone());
            std::fs::write(out_dir.join(&name), hist::hgrm(&hist, 1000.0))
                .map_err(|e| e.to_string())?;
            panel.lines.push((t.name.clone(), hist::plot_points(&hist)));
            if !rec.verified.ok {
                warnings.push(format!(
                    "{} / {}: not confirmed that the load reached the target: {}",
                    cell.label(),
                    t.name,
                    rec.verified.detail
                ));
            }
            records.push(rec);
        }
        by_scenario.entry(cell.scenario).or_default().push(panel);
    }
    let mut svgs = Vec::new();
    for (s, panels) in &by_scenario {
        let title = format!(
            "ringgate bench — {} latency by percentile ({}{})",
            s.name(),
            if rate.is_some() {
                "open loop, CO-corrected"
            } else {
                "closed loop"
            },
            if *s == Scenario::Connect {
                ", connect → usable"
            } else {
                ""
            }
        );
        let file = format!("{}.svg", s.name());
        std::fs::write(out_dir.join(&file), report::svg(&title, panels))
            .map_err(|e| e.to_string())?;
        svgs.push(file);
    }
    let mut settings = BTreeMap::new();
    settings.insert("rounds".into(), prof.rounds.to_string());
    settings.insert("warm-up per step".into(), format!("{:?}", prof.warmup));
    settings.insert("measured per step".into(), format!("{:?}", prof.duration));
    settings.insert(
        "loop".into(),
        match rate {
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
            bin.display()
        ),
    );
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
    let mut mach = machine_at_start;
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        mach.insert(
            "loadavg at end".into(),
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        );
    }
    let summary = Summary {
        started,
        profile: prof.name.clone(),
        machine: mach,
        settings,
        targets: targets.iter().map(|t| t.name.clone()).collect(),
        records,
        sysbench: sb,
        after_run,
        mux,
        warnings,
        elapsed_s: t_start.elapsed().as_secs_f64(),
    };
    std::fs::write(
        out_dir.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(out_dir.join("summary.md"), report::markdown(&summary))
        .map_err(|e| e.to_string())?;
    if !smoke && args.get("out", "BENCH_OUT").is_none() {
        let latest = results_root.join("latest");
        let _ = std::fs::remove_file(&latest);
        let _ = std::os::unix::fs::symlink(&stamp, &latest);
    }
    println!();
    print!("{}", report::table(&summary, false));
    if let Some(r) = &tls_report {
        print!("\n{}", r.table());
    }
    for w in &summary.warnings {
        println!("WARNING: {w}");
    }
    println!(
        "results: {} ({:.0} s)",
        out_dir.display(),
        summary.elapsed_s
    );

    // The smoke run is a test: fail on errors or unverified targets.
    if smoke {
        let bad: Vec<String> = summary
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
            .chain(tls_report.iter().flat_map(|r| r.problems()))
            .chain(summary.mux.iter().flat_map(|m| m.problems()))
            .collect();
        // One leak check per ringgate target counts as a check of its own.
        let n = summary.records.len()
            + summary.sysbench.len()
            + summary.after_run.len()
            + tls_report.as_ref().map_or(0, |r| r.records.len() + 1)
            + summary
                .mux
                .as_ref()
                .map_or(0, |m| m.many_clients.len() + m.idle.len());
        println!(
            "bench-smoke: {} passed, {} failed",
            n - bad.len(),
            bad.len()
        );
        if summary.records.is_empty() && tls_report.is_none() {
            return Err("smoke run failed: it measured nothing (no scenario cell ran)".into());
        }
        if !bad.is_empty() {
            return Err(format!("smoke run failed:\n  {}", bad.join("\n  ")));
        }
    }
    Ok(())
}

async fn run_load(args: Args) -> Res<()> {
    let req = |k: &str| {
        args.flags
            .get(k)
            .cloned()
            .ok_or(format!("load: --{k} is required"))
    };
    let ep = Endpoint {
        host: args
            .flags
            .get("host")
            .cloned()
            .unwrap_or("127.0.0.1".into()),
        port: req("port")?.parse().map_err(|_| "bad --port")?,
        user: req("user")?,
        password: args.flags.get("password").cloned().unwrap_or_default(),
        db: args.flags.get("db").cloned().unwrap_or(BENCH_DB.into()),
    };
    let scenario = Scenario::parse(&req("scenario")?).ok_or("unknown --scenario")?;
    let f = |k: &str, d: f64| {
        args.flags
            .get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(d)
    };
    let spec = LoadSpec {
        scenario,
        concurrency: f("concurrency", 16.0) as usize,
        row_bytes: f("row-bytes", 65536.0) as u64,
        table_size: f("table-size", 10000.0) as u64,
        warmup: secs(f("warmup", 1.0)),
        duration: secs(f("duration", 5.0)),
        rate: args.flags.get("rate").and_then(|v| v.parse().ok()),
        op_timeout: Duration::from_secs(10),
    };
    let r = load::run(&ep, &spec).await;
    let p = Percentiles::of(&r.hist);
    println!(
        "{} c={} count={} rate={:.0}/s failures={} timeouts={} setup_failures={} p50={}µs p90={}µs p99={}µs p99.9={}µs max={}µs",
        scenario.name(), spec.concurrency, r.count, r.count as f64 / r.measured.as_secs_f64(), r.failures, r.timeouts, r.setup_failures,
        p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.max_us
    );
    for (e, n) in &r.errors {
        println!("  {n} × {e}");
    }
    if let Some(path) = args.flags.get("hgrm") {
        std::fs::write(path, hist::hgrm(&r.hist, 1000.0)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match argv.split_first() {
        Some((c, r)) => (c.as_str(), r.to_vec()),
        None => ("run", Vec::new()),
    };
    if matches!(cmd, "-h" | "--help" | "help") {
        println!(
            "{}",
            include_str!("main.rs")
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .map(|l| l.trim_start_matches("//!").strip_prefix(' ').unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n")
        );
        return;
    }
    let args = match Args::parse(&rest) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ringgate-bench: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cmd = cmd.to_string();
    let rc = rt.block_on(async move {
        let work = tokio::spawn(async move {
            match cmd.as_str() {
                "run" => run_bench(args, "quick").await,
                "smoke" => run_bench(args, "smoke").await,
                "load" => run_load(args).await,
                other => Err(format!("unknown command {other:?} (run, smoke, load, help)")),
            }
        });
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).expect("SIGHUP handler");
        tokio::select! {
            r = work => match r {
                Ok(Ok(())) => 0,
                Ok(Err(e)) => { eprintln!("ringgate-bench: {e}"); 1 }
                Err(e) => { eprintln!("ringgate-bench: {e}"); 1 }
            },
            _ = tokio::signal::ctrl_c() => { eprintln!("\nringgate-bench: interrupted; cleaning up"); 130 }
            _ = term.recv() => { eprintln!("ringgate-bench: SIGTERM; cleaning up"); 143 }
            _ = hup.recv() => { eprintln!("ringgate-bench: SIGHUP; cleaning up"); 129 }
        }
    });
    procs::cleanup_all(false);
    // Don't wait for the (possibly blocked) bench task.
    std::process::exit(rc);
}

//! Good clients under chaos: on loopback, good clients run a point-select loop beside slowloris
//! clients, malformed-packet clients, clients that reset in the middle of a result, and one
//! `kill -9` + restart of the backend (a private MariaDB). Asserts that
//!   * the backend really was killed and restarted (a new pid), the proxy lost its backend
//!     connections, and good queries failed inside the restart window and succeeded after it;
//!   * every good query returned the right row, or failed cleanly inside the restart window;
//!   * with `CHAOS_LATENCY_CHECK=1` (set by `make chaos`, never by `make test`): the good
//!     clients' p99 outside the restart window is within 3x of a calm run measured first, in
//!     the same test, with the same good clients. The short debug run inside `make test` on a
//!     shared 2-core machine reported 3.07x once with nothing wrong, so that run prints the
//!     ratio but does not gate on it: latency targets live in long runs and benchmarks, not in
//!     the test suite;
//!   * at the end free slots == total, backend busy == 0 and the fd count is at baseline.
//!
//! `CHAOS_SECONDS` sets the chaos phase (default 10, `make chaos` uses 60); the calm phase is a
//! third of it (at least 3 s). `CHAOS_MODE=heap` (or `ring`) runs it on heap buffers (or the provided-buffer ring).

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::own_mariadb::OwnMariaDb;
use testkit::procfs::is_alive;
use testkit::proxy::{quick_opts, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{
    closed_within, hello_payload, raw_connect, read_greeting, reset_close, try_raw_login,
    write_packet, RAW_CAPS,
};
use testkit::tail;

const GOOD_CLIENTS: usize = 4;
const ROWS: u64 = 1000;

/// One good query: when it started (since t0), how long it took, and whether it failed.
#[derive(Clone, Copy)]
struct Sample {
    start: Duration,
    latency: Duration,
    ok: bool,
}

fn good_client(
    opts: mysql::OptsBuilder,
    t0: Instant,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> (Vec<Sample>, Vec<String>) {
    let mut samples = Vec::with_capacity(100_000);
    let mut wrong = Vec::new();
    let mut conn: Option<Conn> = None;
    let mut x = seed | 1;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = x % ROWS + 1;
        let start = t0.elapsed();
        let t = Instant::now();
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Conn::new(opts.clone()) {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    samples.push(Sample {
                        start,
                        latency: t.elapsed(),
                        ok: false,
                    });
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            },
        };
        match c.query_first::<String, _>(format!("SELECT v FROM ringgate_test.kv WHERE id = {id}"))
        {
            Ok(Some(v)) => {
                if v != format!("v{id}") {
                    // Another client's bytes, or a stale response: never acceptable.
                    wrong.push(format!("id {id} returned {v:?}"));
                }
                samples.push(Sample {
                    start,
                    latency: t.elapsed(),
                    ok: true,
                });
            }
            other => {
                if let Ok(o) = &other {
                    wrong.push(format!("id {id} returned {o:?}"));
                }
                samples.push(Sample {
                    start,
                    latency: t.elapsed(),
                    ok: false,
                });
                conn = None;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    (samples, wrong)
}

fn run_good(
    p: &Proxy,
    t0: Instant,
    stop: &Arc<AtomicBool>,
    salt: u64,
) -> Vec<std::thread::JoinHandle<(Vec<Sample>, Vec<String>)>> {
    (0..GOOD_CLIENTS)
        .map(|i| {
            let (o, s) = (quick_opts(p), stop.clone());
            std::thread::spawn(move || good_client(o, t0, s, salt + i as u64 * 7919))
        })
        .collect()
}

fn p99(mut v: Vec<Duration>) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[((v.len() as f64) * 0.99) as usize % v.len()]
}

/// Slowloris: connect, then dribble a byte of a HandshakeResponse every 300 ms forever; the
/// proxy must drop it at --handshake-timeout.
fn slowloris(port: u16, stop: Arc<AtomicBool>, dropped: Arc<AtomicU64>) {
    let mut conns: Vec<(std::net::TcpStream, usize)> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        while conns.len() < 20 {
            let mut s = raw_connect(port);
            let _ = read_greeting(&mut s);
            s.set_nonblocking(true).unwrap();
            conns.push((s, 0));
        }
        conns.retain_mut(|(s, n)| {
            let b = [0x55u8];
            *n += 1;
            if s.write(&b).is_err() {
                dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            let mut r = [0u8; 64];
            match s.read(&mut r) {
                Ok(0) => {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    false
                }
                Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    false
                }
                _ => true,
            }
        });
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Malformed packets of every kind, in a loop.
fn malformed(port: u16, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    let mut x = 0xdead_beef_u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        let mut s = raw_connect(port);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        match k % 5 {
            0 => {
                // Random bytes where the HandshakeResponse belongs.
                let _ = read_greeting(&mut s);
                let n = (rnd() % 300) as usize + 1;
                let junk: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
                let _ = write_packet(&mut s, 1, &junk);
            }
            1 => {
                // An SSLRequest.
                let _ = read_greeting(&mut s);
                let ssl = wire::handshake::build_ssl_request(RAW_CAPS | (1 << 11), 1 << 24, 45);
                let _ = write_packet(&mut s, 1, &ssl);
            }
            2 => {
                // A real HandshakeResponse with random bytes flipped.
                let sc = read_greeting(&mut s);
                let mut h = hello_payload(&sc, "app", "app-secret");
                for _ in 0..3 {
                    let i = (rnd() as usize) % h.len();
                    h[i] = rnd() as u8;
                }
                let _ = write_packet(&mut s, 1, &h);
            }
            3 => {
                // Logged in, then a command with a wrong sequence id.
                drop(s);
                match try_raw_login(port) {
                    Some(l) => s = l,
                    None => {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                }
                let _ = write_packet(&mut s, 3, b"\x03SELECT 1");
            }
            _ => {
                // Logged in, then random bytes as a command stream.
                drop(s);
                match try_raw_login(port) {
                    Some(l) => s = l,
                    None => {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                }
                let n = (rnd() % 200) as usize + 1;
                let junk: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
                let _ = s.write_all(&junk);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = closed_within(&mut s, Duration::from_millis(300));
        done.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// Ask for 2 MiB, read 256 KiB, reset.
fn resetter(port: u16, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let mut s = match try_raw_login(port) {
            Some(s) => s,
            None => {
                // The backend may be down (restart window): ERR instead of OK.
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let _ = write_packet(&mut s, 0, b"\x03SELECT REPEAT('r', 2*1024*1024)");
        let mut got = 0;
        let mut b = vec![0u8; 65536];
        while got < 256 * 1024 {
            match s.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        reset_close(s);
        done.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(150));
    }
}

#[test]
fn good_clients_survive_bad_clients_and_a_backend_restart() {
    let chaos_secs: u64 = std::env::var("CHAOS_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let calm_secs = (chaos_secs / 3).max(3);
    let mode = match std::env::var("CHAOS_MODE").as_deref() {
        Ok("heap") => Mode::Heap,
        Ok("ring") => Mode::Ring,
        _ => Mode::Fixed,
    };
    let db = OwnMariaDb::started("chaos");
    db.root_sql(&format!(
        "CREATE TABLE IF NOT EXISTS ringgate_test.kv (id INT PRIMARY KEY, v VARCHAR(64)); \
         INSERT IGNORE INTO ringgate_test.kv SELECT seq, CONCAT('v', seq) FROM ringgate_test.seq_1_to_{ROWS};"
    ));
    let mut o = ProxyOpts::new(mode);
    o.backend_override = Some(db.env());
    o.extra_args = ["--handshake-timeout", "2s", "--client-write-timeout", "2s"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // The SO_REUSEPORT hash may put every good client on one worker; 2 workers on 2 cores.
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let t0 = Instant::now();

    // ---- calm run ----
    let stop = Arc::new(AtomicBool::new(false));
    let good = run_good(&proxy, t0, &stop, 1);
    std::thread::sleep(Duration::from_secs(calm_secs));
    stop.store(true, Ordering::Relaxed);
    let mut calm = Vec::new();
    for h in good {
        let (s, wrong) = h.join().unwrap();
        assert!(wrong.is_empty(), "calm run: wrong results {wrong:?}");
        assert!(s.iter().all(|s| s.ok), "calm run: a query failed");
        calm.extend(s.iter().map(|s| s.latency));
    }
    let calm_n = calm.len();
    let calm_p99 = p99(calm);

    // ---- chaos ----
    let stop = Arc::new(AtomicBool::new(false));
    let bad_stop = Arc::new(AtomicBool::new(false));
    let t_chaos = t0.elapsed();
    let good = run_good(&proxy, t0, &stop, 99);
    let slow_dropped = Arc::new(AtomicU64::new(0));
    let malformed_done = Arc::new(AtomicU64::new(0));
    let resets_done = Arc::new(AtomicU64::new(0));
    let mut bad = Vec::new();
    {
        let (p, s, d) = (proxy.port, bad_stop.clone(), slow_dropped.clone());
        bad.push(std::thread::spawn(move || slowloris(p, s, d)));
        for _ in 0..2 {
            let (p, s, d) = (proxy.port, bad_stop.clone(), malformed_done.clone());
            bad.push(std::thread::spawn(move || malformed(p, s, d)));
        }
        let (p, s, d) = (proxy.port, bad_stop.clone(), resets_done.clone());
        bad.push(std::thread::spawn(move || resetter(p, s, d)));
    }
    // One backend restart, 40% into the chaos phase.
    let chaos = Duration::from_secs(chaos_secs);
    std::thread::sleep(chaos * 2 / 5);
    let m0 = proxy.metrics();
    let restart_from = t0.elapsed();
    // kill9 panics unless there was a server to kill and it died.
    let killed = db.kill9();
    std::thread::sleep(Duration::from_millis(500));
    db.start();
    // The restart really happened: a new server process, answering.
    let restarted = db.pid().expect("MariaDB pid after the restart");
    assert_ne!(restarted, killed, "MariaDB was not restarted");
    assert!(
        !is_alive(killed),
        "the killed MariaDB (pid {killed}) is alive"
    );
    db.root_sql("SELECT 1");
    // The pool refills within a 1 s retry; clients reconnect with a 20 ms pause: give the
    // window 2 s of grace after the server is back.
    let restart_to = t0.elapsed() + Duration::from_secs(2);
    let remaining = (t_chaos + chaos).saturating_sub(t0.elapsed());
    std::thread::sleep(remaining.max(Duration::from_secs(3)));
    proxy.assert_running();
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    let mut wrong = Vec::new();
    for h in good {
        let (s, w) = h.join().unwrap();
        samples.extend(s);
        wrong.extend(w);
    }
    bad_stop.store(true, Ordering::Relaxed);
    for h in bad {
        h.join().unwrap();
    }
    let in_window = |s: &Sample| s.start + s.latency >= restart_from && s.start <= restart_to;
    let outside: Vec<Duration> = samples
        .iter()
        .filter(|s| !in_window(s))
        .map(|s| s.latency)
        .collect();
    let failed_outside: Vec<Duration> = samples
        .iter()
        .filter(|s| !s.ok && !in_window(s))
        .map(|s| s.start)
        .collect();
    let failed_inside = samples.iter().filter(|s| !s.ok && in_window(s)).count();
    // Served again after the window: the good clients recovered, not just survived.
    let ok_after = samples
        .iter()
        .filter(|s| s.ok && s.start > restart_to)
        .count();
    let chaos_n = outside.len();
    let chaos_p99 = p99(outside);
    let report = format!(
        "chaos ({mode:?}, {chaos_secs} s): calm {calm_n} queries p99 {calm_p99:?}; chaos {} queries \
         ({chaos_n} outside the restart window {restart_from:?}..{restart_to:?}) p99 {chaos_p99:?} \
         ({:.2}x); {failed_inside} failed inside the window, {} outside; slowloris dropped {}, \
         malformed clients {}, resets mid-result {}",
        samples.len(),
        chaos_p99.as_secs_f64() / calm_p99.as_secs_f64().max(1e-9),
        failed_outside.len(),
        slow_dropped.load(Ordering::Relaxed),
        malformed_done.load(Ordering::Relaxed),
        resets_done.load(Ordering::Relaxed),
    );
    eprintln!("{report}");
    assert!(wrong.is_empty(), "wrong results: {wrong:?}\n{report}");
    // The kill was felt where it should be: the proxy lost backend connections (discarded
    // or failed to reconnect), good queries failed inside the window, and none outside it.
    let m1 = proxy.metrics();
    let lost = |m: &testkit::prometheus::Metrics| {
        m.get("ringgate_backend_discarded_total") + m.get("ringgate_backend_connect_failures_total")
    };
    assert!(
        lost(&m1) > lost(&m0),
        "the proxy lost no backend connection across the kill -9: did it happen?\n{report}"
    );
    assert!(
        failed_inside > 0,
        "no good query failed during the backend restart: was the backend really down?\n{report}"
    );
    assert!(
        ok_after > 0,
        "no good query succeeded after the restart window\n{report}"
    );
    assert!(
        failed_outside.is_empty(),
        "good queries failed outside the restart window at {failed_outside:?}\n{report}\n{}",
        tail(&proxy.stderr(), 30)
    );
    if std::env::var("CHAOS_LATENCY_CHECK").as_deref() == Ok("1") {
        assert!(
            chaos_p99 <= calm_p99 * 3,
            "p99 outside the restart window {chaos_p99:?} > 3x calm {calm_p99:?}\n{report}"
        );
    }
    assert!(
        slow_dropped.load(Ordering::Relaxed) > 0,
        "no slowloris was dropped\n{report}"
    );
    assert!(malformed_done.load(Ordering::Relaxed) > 0 && resets_done.load(Ordering::Relaxed) > 0);
    assert_no_leaks(&mut proxy, &base, 10);
}

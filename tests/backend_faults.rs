//! A backend that is down at start-up, killed with `kill -9` mid-query under load, accepts and
//! then stalls, or holds a command past the drain timeout. Tests that stop or kill the backend
//! run their own MariaDB (`testkit::own_mariadb::OwnMariaDb`), never the shared sandbox. Every
//! scenario ends with the leak checks of `testkit::leaks::assert_no_leaks`.

use std::io::Write;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::both_modes;
use testkit::children::signal;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::mysql_client::{mysql_error_code, mysql_error_message};
use testkit::own_mariadb::OwnMariaDb;
use testkit::procfs::{proc_state, tcp_queues};
use testkit::proxy::{quick_opts, wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{frame, raw_login, raw_query};
use testkit::tail;

fn discarded(p: &Proxy) -> f64 {
    p.metrics().get("ringgate_backend_discarded_total")
}

// ---------------------------------------------------------------------------------------------
// Backend faults (own MariaDB)
// ---------------------------------------------------------------------------------------------

fn own_opts(mode: Mode, db: &OwnMariaDb, extra: &[&str]) -> ProxyOpts {
    let mut o = ProxyOpts::with_args(mode, extra);
    o.backend_override = Some(db.env());
    o
}

#[test]
fn backend_down_at_start_then_up() {
    let db = OwnMariaDb::new("down");
    let mut proxy = Proxy::start_with(own_opts(Mode::Fixed, &db, &[]));
    let base0 = proxy.connections_total();
    // Clients get a clear ERR 1105 "backend ... unavailable".
    for _ in 0..3 {
        match Conn::new(quick_opts(&proxy)) {
            Ok(_) => panic!("a session was admitted with the backend down"),
            Err(e) => {
                assert_eq!(mysql_error_code(&e), Some(1105), "{e}");
                let m = mysql_error_message(&e).unwrap_or_default();
                assert!(
                    m.contains("backend") && m.contains("unavailable"),
                    "message: {m}"
                );
            }
        }
    }
    proxy.assert_running();
    db.start();
    // Served once the backend is up (refill retried every 1 s), with no restart.
    let t0 = Instant::now();
    let mut conn = loop {
        match Conn::new(quick_opts(&proxy)) {
            Ok(c) => break c,
            Err(e) if t0.elapsed() < Duration::from_secs(10) => {
                assert_eq!(mysql_error_code(&e), Some(1105), "{e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("not served 10 s after the backend came up: {e}"),
        }
    };
    assert_eq!(conn.query_first::<u32, _>("SELECT 1").unwrap(), Some(1));
    drop(conn);
    eprintln!("served {:?} after the backend started", t0.elapsed());
    let base = baseline(&mut proxy);
    let mut c = Conn::new(quick_opts(&proxy)).unwrap();
    assert_eq!(c.query_first::<u32, _>("SELECT 2").unwrap(), Some(2));
    drop(c);
    assert_no_leaks(&mut proxy, &base, 1);
    assert!(proxy.connections_total() - base0 >= 5.0);
}

fn killed_backend(mode: Mode) {
    let db = OwnMariaDb::started(&format!("kill-{}", mode.as_str()));
    db.root_sql(
        "CREATE TABLE IF NOT EXISTS ringgate_test.kv (id INT PRIMARY KEY, v VARCHAR(64)); \
         INSERT IGNORE INTO ringgate_test.kv SELECT seq, CONCAT('v', seq) FROM ringgate_test.seq_1_to_100;",
    );
    let mut proxy = Proxy::start_with(own_opts(mode, &db, &[]));
    let base = baseline(&mut proxy);
    let disc0 = discarded(&proxy);

    const THREADS: usize = 6;
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let ok_after_restart = Arc::new(AtomicU64::new(0));
    let restarted = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (stop, killed, restarted, okr) = (
            stop.clone(),
            killed.clone(),
            restarted.clone(),
            ok_after_restart.clone(),
        );
        let o = quick_opts(&proxy);
        handles.push(std::thread::spawn(move || -> (u64, u64, Vec<String>) {
            let (mut ok, mut failed, mut unexpected) = (0u64, 0u64, Vec::new());
            let mut conn: Option<Conn> = None;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let c = match conn.as_mut() {
                    Some(c) => c,
                    None => match Conn::new(o.clone()) {
                        Ok(c) => conn.insert(c),
                        Err(e) => {
                            failed += 1;
                            if !killed.load(Ordering::Relaxed) {
                                unexpected.push(format!("connect before the kill: {e}"));
                            }
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    },
                };
                // Thread 0 runs long queries (mid-query when the kill lands).
                let r = if t == 0 {
                    c.query_first::<u64, _>("SELECT SLEEP(0.2) + 1")
                } else {
                    c.query_first::<u64, _>(format!(
                        "SELECT id FROM ringgate_test.kv WHERE id = {}",
                        i % 100 + 1
                    ))
                };
                match r {
                    Ok(Some(_)) => {
                        ok += 1;
                        if restarted.load(Ordering::Relaxed) {
                            okr.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    other => {
                        failed += 1;
                        if !killed.load(Ordering::Relaxed) {
                            unexpected.push(format!("query before the kill: {other:?}"));
                        }
                        conn = None; // reconnect
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            (ok, failed, unexpected)
        }));
    }
    std::thread::sleep(Duration::from_millis(1500));
    killed.store(true, Ordering::Relaxed);
    db.kill9();
    std::thread::sleep(Duration::from_millis(1500));
    proxy.assert_running();
    // While it is down, a new client gets a clear ERR.
    match Conn::new(quick_opts(&proxy)) {
        Ok(_) => panic!("admitted while the backend is dead"),
        Err(e) => assert!(
            mysql_error_code(&e) == Some(1105),
            "while the backend is down: {e:?}"
        ),
    }
    db.start();
    restarted.store(true, Ordering::Relaxed);
    let t_restart = Instant::now();
    wait_until(
        &proxy,
        Duration::from_secs(15),
        "queries succeed again after the restart",
        || ok_after_restart.load(Ordering::Relaxed) >= 50,
    );
    eprintln!(
        "clients served again {:?} after the restart",
        t_restart.elapsed()
    );
    stop.store(true, Ordering::Relaxed);
    let mut failed_total = 0;
    for h in handles {
        let (ok, failed, unexpected) = h.join().unwrap();
        assert!(unexpected.is_empty(), "{unexpected:?}");
        assert!(ok > 0);
        failed_total += failed;
    }
    assert!(failed_total > 0, "the kill affected no client?");
    // Dead pool connections were discarded; new ones opened, with no ringgate restart.
    assert!(discarded(&proxy) > disc0);
    // Fresh sessions all succeed at once (no dead connection is handed out).
    for i in 0..20u32 {
        let mut c = Conn::new(quick_opts(&proxy)).expect("fresh session after restart");
        assert_eq!(
            c.query_first::<u32, _>(format!("SELECT {i}")).unwrap(),
            Some(i)
        );
    }
    assert_no_leaks(&mut proxy, &base, THREADS as u64);
}
both_modes!(backend_kill9_mid_query_under_load, killed_backend);

#[test]
fn backend_that_accepts_then_stalls() {
    // A "backend" that accepts TCP and never writes a byte.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (h2, s2) = (held.clone(), stop.clone());
    listener.set_nonblocking(true).unwrap();
    let acceptor = std::thread::spawn(move || {
        while !s2.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => h2.lock().unwrap().push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    let mut o = ProxyOpts::with_args(Mode::Fixed, &["--backend-connect-timeout", "1s"]);
    let mut env = testkit::env::backend_env();
    env.port = port;
    o.backend_override = Some(env);
    let mut proxy = Proxy::start_with(o);
    let base0 = proxy.connections_total();
    let t0 = Instant::now();
    match Conn::new(quick_opts(&proxy)) {
        Ok(_) => panic!("admitted by a stalled backend"),
        Err(e) => {
            assert_eq!(mysql_error_code(&e), Some(1105), "{e}");
            let m = mysql_error_message(&e).unwrap_or_default();
            assert!(m.contains("backend-connect-timeout"), "message: {m}");
        }
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "ERR after {took:?}, want ~1 s"
    );
    assert!(
        !held.lock().unwrap().is_empty(),
        "the fake backend saw no connection"
    );
    proxy.assert_running();
    stop.store(true, Ordering::Relaxed);
    acceptor.join().unwrap();
    held.lock().unwrap().clear();
    // Nothing leaked: no backend busy, no client, buffers all back.
    proxy.assert_settled(base0, 1);
    let m = proxy.metrics();
    assert!(m.get("ringgate_backend_connect_failures_total") >= 1.0);
}

// ---------------------------------------------------------------------------------------------
// Drain timeout while a command is stuck on its way to the backend
// ---------------------------------------------------------------------------------------------

/// SIGTERM while a session's write to the backend cannot complete (the server is frozen with
/// SIGSTOP, so it reads nothing): the drain timeout cuts the session, the in-flight write
/// completes with an error, and its read buffer still goes back to the pool. The final log
/// line must account for every slot.
fn drain_cuts_a_stuck_command(mode: Mode) {
    let db = OwnMariaDb::started(&format!("stuck-{}", mode.as_str()));
    let mut proxy = Proxy::start_with(own_opts(mode, &db, &["--drain-timeout", "1s"]));
    let mut s = raw_login(proxy.port);
    // One statement first: a connection's first lease sets the proxy's session tracker on it,
    // and the command under test must be the write that sticks, not that SET.
    raw_query(&mut s, "SELECT 1").expect("SELECT 1 before the freeze");
    let pid = db.pid().expect("MariaDB pid");
    /// Resumes the frozen server however the test ends, so that it can be stopped.
    struct ContOnDrop(u32);
    impl Drop for ContOnDrop {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &self.0.to_string()])
                .status();
        }
    }
    let frozen = ContOnDrop(pid);
    signal(pid, "-STOP");
    wait_until(&proxy, Duration::from_secs(5), "MariaDB stopped", || {
        proc_state(pid) == Some('T')
    });
    // 20 MiB: far more than the loopback socket buffers hold, so ringgate's WRITE(_FIXED)
    // to the frozen server stays in flight.
    let mut query = vec![0x03];
    query.extend_from_slice(b"SELECT LENGTH('");
    query.extend(std::iter::repeat_n(b'x', 20 << 20));
    query.extend_from_slice(b"')");
    let total = query.len() as f64;
    let writer = std::thread::spawn(move || {
        let _ = s.write_all(&frame(0, &query[..0xFF_FFFF]));
        let _ = s.write_all(&frame(1, &query[0xFF_FFFF..]));
        s
    });
    // The write is stuck, not merely slow: the frozen server has bytes in its receive queue
    // that it will never read, ringgate's socket to it has unsent bytes (on loopback a send
    // queue only stays non-empty while the peer's window is closed), and less than the
    // command went through.
    wait_until(
        &proxy,
        Duration::from_secs(10),
        "ringgate's write to the frozen backend is stuck",
        || {
            let q = tcp_queues(db.port);
            let stuck = q.iter().any(|server| {
                server.local_port == db.port
                    && server.rx > 0
                    && q.iter().any(|ours| {
                        ours.local_port == server.remote_port
                            && ours.remote_port == db.port
                            && ours.tx > 0
                    })
            });
            stuck
                && proxy
                    .metrics()
                    .get(r#"ringgate_bytes_total{direction="client_to_backend"}"#)
                    < total
        },
    );
    assert_eq!(proc_state(pid), Some('T'), "MariaDB resumed early");
    signal(proxy.pid(), "-TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(pid, "-CONT");
    drop(frozen);
    assert!(
        !proxy.is_running(),
        "ringgate did not exit after the drain timeout"
    );
    drop(writer.join());
    let log = proxy.stderr();
    let last = log
        .lines()
        .rev()
        .find(|l| l.contains("stopped:"))
        .unwrap_or_else(|| panic!("no final log line:\n{}", tail(&log, 30)));
    assert!(last.contains("buffers_held_client=0"), "{last}");
    assert!(last.contains("buffers_held_backend=0"), "{last}");
    let slots = last
        .split_whitespace()
        .find_map(|w| w.strip_prefix("slots_free="))
        .expect("slots_free in the final line");
    let (free, total) = slots.split_once('/').expect("free/total");
    assert_eq!(free, total, "slots leaked: {last}");
    assert!(!log.contains("leaked"), "{}", tail(&log, 30));
}
both_modes!(
    drain_timeout_cuts_a_stuck_command,
    drain_cuts_a_stuck_command
);

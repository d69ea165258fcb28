//! Running out of file descriptors: the accept loop backs off, logs once per interval, and
//! recovers once fds are free again, with the leak checks of `testkit::leaks::assert_no_leaks`
//! at the end.

use std::io::Read;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::procfs::cpu_ticks;
use testkit::proxy::{log_count, quick_opts, wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::raw_connect;
use testkit::tail;

// ---------------------------------------------------------------------------------------------
// fd exhaustion
// ---------------------------------------------------------------------------------------------

#[test]
fn fd_exhaustion_backs_off_logs_once_per_interval_and_recovers() {
    // Plain client fds: direct descriptors hold clients without fds (a full table falls back
    // to plain accepts, which then meet this same EMFILE path).
    let mut o = ProxyOpts::with_args(Mode::Fixed, &["--direct-descriptors", "off"]);
    o.wrapper = vec!["prlimit".into(), "--nofile=64:64".into()];
    o.workers = 1;
    o.backend_pool_size = 2;
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let pid = proxy.pid();
    let limit = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    assert!(
        limit
            .lines()
            .any(|l| l.starts_with("Max open files") && l.contains(" 64 ")),
        "prlimit did not apply:\n{limit}"
    );
    let needle = "out of file descriptors";
    let logs0 = log_count(&proxy, needle);
    // Open connections until the proxy stops greeting them (its accepts fail with EMFILE).
    let mut clients = Vec::new();
    let mut greeted = 0;
    for _ in 0..100 {
        let mut s = raw_connect(proxy.port);
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut b = [0u8; 4];
        let got = s.read_exact(&mut b).is_ok();
        clients.push(s);
        if got {
            greeted += 1;
        } else {
            break;
        }
    }
    assert!(
        greeted < 64,
        "{greeted} connections greeted under a 64-fd limit?"
    );
    wait_until(
        &proxy,
        Duration::from_secs(3),
        "the EMFILE log line",
        || log_count(&proxy, needle) > logs0,
    );
    // Two seconds of exhaustion: CPU stays low (no busy accept loop), logs are rate-limited.
    let logs_a = log_count(&proxy, needle);
    let cpu0 = cpu_ticks(pid);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let cpu = cpu_ticks(pid) - cpu0;
    let secs = t0.elapsed().as_secs_f64();
    let lines = log_count(&proxy, needle) - logs_a;
    eprintln!(
        "fd exhaustion: {greeted} greeted, {cpu} CPU ticks (1/100 s) in {secs:.1} s, {lines} log lines"
    );
    assert!(
        cpu <= 20,
        "{cpu} CPU ticks in {secs:.1}s: the proxy spins on EMFILE"
    );
    // At most one line per second (one worker here), never a flood.
    let max_lines = secs.ceil() as usize + 1;
    assert!(
        lines <= max_lines,
        "{lines} EMFILE log lines in {secs:.1}s (max {max_lines})"
    );
    proxy.assert_running();
    // Recovery: once the clients close, a new client logs in and queries.
    drop(clients);
    let t0 = Instant::now();
    let mut conn = loop {
        match Conn::new(quick_opts(&proxy)) {
            Ok(c) => break c,
            Err(e) if t0.elapsed() < Duration::from_secs(15) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!(
                "no recovery after fd exhaustion: {e}\n{}",
                tail(&proxy.stderr(), 30)
            ),
        }
    };
    assert_eq!(conn.query_first::<u32, _>("SELECT 5").unwrap(), Some(5));
    drop(conn);
    assert_no_leaks(&mut proxy, &base, greeted as u64 + 1);
}

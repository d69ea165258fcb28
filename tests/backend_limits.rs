//! The backend connection limit: a client that finds it reached gets ERR 1040 once
//! `--backend-wait-timeout` has passed, an idle connection of another pool key is evicted to
//! make room, and `--backend-idle-timeout` closes idle connections beyond the pool size. Every
//! test runs the real `ringgate` binary in front of the sandbox MariaDB and ends with a leak
//! check.

use std::time::{Duration, Instant};

use mysql::consts::CapabilityFlags;
use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::mysql_client::direct_conn;
use testkit::prometheus::Metrics;
use testkit::proxy::{quick_opts, wait_until, Mode, Proxy, ProxyOpts};

const IDLE: &str = r#"ringgate_backend_connections{state="idle"}"#;

const BUSY: &str = r#"ringgate_backend_connections{state="busy"}"#;

fn discarded(m: &Metrics) -> f64 {
    m.get("ringgate_backend_discarded_total")
}

// ---------------------------------------------------------------------------------------------
// --backend-max-connections, --backend-wait-timeout, eviction, --backend-idle-timeout
// ---------------------------------------------------------------------------------------------

/// One worker, at most one backend connection.
fn one_backend_opts(wait: &'static str) -> ProxyOpts {
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.backend_pool_size = 1;
    o.backend_max_connections = 1;
    o.backend_wait_timeout = wait;
    o
}

/// With the only backend connection leased, the next client waits --backend-wait-timeout and
/// then gets ERR 1040 (SQL state 08004) naming both flags; once the first session leaves, the
/// next client gets in.
#[test]
fn backend_limit_reached_gets_err_1040_after_the_wait_timeout() {
    // Session pooling: a logged-in session holds the only connection (in transaction pooling
    // the second client would log in and wait at its statement instead).
    let mut o = one_backend_opts("1s");
    o.extra_args = vec!["--pooling".into(), "session".into()];
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let mut a = Conn::new(quick_opts(&proxy)).expect("first session");
    assert_eq!(a.query_first::<u32, _>("SELECT 1").unwrap(), Some(1));

    let t0 = Instant::now();
    let err = match Conn::new(quick_opts(&proxy)) {
        Ok(_) => panic!("a second session got a backend beyond --backend-max-connections 1"),
        Err(e) => e,
    };
    let waited = t0.elapsed();
    let mysql::Error::MySqlError(me) = &err else {
        panic!("want a server error 1040, got {err:?}");
    };
    assert_eq!((me.code, me.state.as_str()), (1040, "08004"), "{me:?}");
    assert_eq!(
        me.message,
        "ringgate: no backend connection became free within --backend-wait-timeout (1s); \
         --backend-max-connections is 1"
    );
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "ERR 1040 after {waited:?}, want --backend-wait-timeout (1 s) + up to a tick"
    );
    eprintln!("ERR 1040 after {waited:?}: {}", me.message);
    let rejected = proxy
        .metrics()
        .get(r#"ringgate_client_rejected_total{reason="backend_unavailable"}"#);
    assert!(rejected >= 1.0, "the refusal is counted");

    // The held session is unaffected; once it leaves, a new one is served.
    assert_eq!(a.query_first::<u32, _>("SELECT 2").unwrap(), Some(2));
    drop(a);
    let mut b = Conn::new(quick_opts(&proxy)).expect("a session once the first left");
    assert_eq!(b.query_first::<u32, _>("SELECT 3").unwrap(), Some(3));
    drop(b);
    assert_no_leaks(&mut proxy, &base, 3);
}

/// At --backend-max-connections with only an idle connection of another pool key, a client is
/// not made to wait: that idle connection is closed and one of the client's key is opened. The
/// key is real: CLIENT_FOUND_ROWS reaches the backend (an UPDATE that changes nothing reports
/// the matched row), while the first client's connection reports 0.
#[test]
fn backend_limit_evicts_an_idle_connection_of_another_key() {
    let table = format!("evict_{}", std::process::id());
    let mut direct = direct_conn();
    direct
        .query_drop(format!(
            "CREATE TABLE {table} (id INT PRIMARY KEY, v INT); INSERT INTO {table} VALUES (1, 1)"
        ))
        .unwrap();
    let update = format!(
        "UPDATE {}.{table} SET v = 1 WHERE id = 1",
        testkit::env::TEST_DB
    );

    let mut proxy = Proxy::start_with(one_backend_opts("10s"));
    let base = baseline(&mut proxy);
    let mut x = Conn::new(quick_opts(&proxy)).expect("first session");
    x.query_drop(&update).unwrap();
    assert_eq!(x.affected_rows(), 0, "without FOUND_ROWS: 0 rows changed");
    drop(x);
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "the first session's connection is idle",
        || {
            let m = proxy.metrics();
            m.get(IDLE) == 1.0 && m.get(BUSY) == 0.0
        },
    );
    let discarded0 = discarded(&proxy.metrics());

    let found_rows = quick_opts(&proxy).additional_capabilities(CapabilityFlags::CLIENT_FOUND_ROWS);
    let t0 = Instant::now();
    let mut y = Conn::new(found_rows).expect("a session of another key at the limit");
    let took = t0.elapsed();
    y.query_drop(&update).unwrap();
    assert_eq!(y.affected_rows(), 1, "with FOUND_ROWS: 1 row matched");
    let m = proxy.metrics();
    assert!(
        took < Duration::from_secs(3),
        "the other key's session waited {took:?}: the idle connection was not evicted"
    );
    assert_eq!(
        discarded(&m),
        discarded0 + 1.0,
        "the idle connection was closed"
    );
    assert!(
        m.get(IDLE) + m.get(BUSY) <= 1.0,
        "never more than --backend-max-connections:\n{}",
        m.dump()
    );
    drop(y);
    let _ = direct.query_drop(format!("DROP TABLE {table}"));
    assert_no_leaks(&mut proxy, &base, 2);
}

/// Idle backend connections beyond --backend-pool-size are closed after
/// --backend-idle-timeout, oldest first, and the pool never shrinks below its size.
#[test]
fn backend_idle_timeout_closes_connections_beyond_the_pool_size() {
    const SESSIONS: usize = 4;
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.backend_pool_size = 1;
    // Session pooling: each session held at once needs its own backend connection.
    o.extra_args = vec![
        "--backend-idle-timeout".into(),
        "2s".into(),
        "--pooling".into(),
        "session".into(),
    ];
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let discarded0 = discarded(&proxy.metrics());
    // Sessions held at once: each needs its own backend connection.
    let conns: Vec<Conn> = (0..SESSIONS)
        .map(|_| {
            let mut c = Conn::new(quick_opts(&proxy)).expect("session");
            assert_eq!(c.query_first::<u32, _>("SELECT 1").unwrap(), Some(1));
            c
        })
        .collect();
    drop(conns);
    let released = Instant::now();
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "all the sessions' connections are idle",
        || {
            let m = proxy.metrics();
            m.get(BUSY) == 0.0 && m.get(IDLE) >= SESSIONS as f64
        },
    );
    let idle_after_release = proxy.metrics().get(IDLE);
    wait_until(
        &proxy,
        Duration::from_secs(8),
        "idle connections beyond --backend-pool-size closed",
        || proxy.metrics().get(IDLE) == 1.0,
    );
    let trimmed_after = released.elapsed();
    // ... and not below the pool size.
    std::thread::sleep(Duration::from_millis(2500));
    let m = proxy.metrics();
    eprintln!(
        "{idle_after_release} idle after the sessions left, trimmed to 1 after {trimmed_after:?}"
    );
    assert!(
        trimmed_after >= Duration::from_millis(1800),
        "trimmed after {trimmed_after:?}, before --backend-idle-timeout (2 s)"
    );
    assert_eq!(m.get(IDLE), 1.0, "the pool keeps --backend-pool-size");
    assert!(
        discarded(&m) - discarded0 >= idle_after_release - 1.0,
        "the trimmed connections were closed:\n{}",
        m.dump()
    );
    assert_no_leaks(&mut proxy, &base, SESSIONS as u64);
}

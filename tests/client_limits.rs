//! The limits a client meets, each against the real `ringgate` binary with a good client beside
//! it where one can be hurt: `--max-connections`, `--max-packet-size`, `--idle-timeout` and the
//! client write timeout. Every scenario ends with the leak checks of
//! `testkit::leaks::assert_no_leaks` (no buffer slot, backend connection or fd left behind).

use std::io::Write;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::both_modes;
use testkit::good_client::GoodClient;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::mysql_client::mysql_error_code;
use testkit::proxy::{quick_opts, wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{
    closed_within, err_code, expect_err_then_close, frame, raw_connect, raw_login, raw_query,
    read_packet, write_packet,
};

fn discarded(p: &Proxy) -> f64 {
    p.metrics().get("ringgate_backend_discarded_total")
}

// ---------------------------------------------------------------------------------------------
// --max-connections
// ---------------------------------------------------------------------------------------------

fn max_connections(mode: Mode) {
    let mut o = ProxyOpts::with_args(mode, &[]);
    o.max_connections = 3;
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let mut held: Vec<_> = (0..3).map(|_| raw_login(proxy.port)).collect();
    // The 4th: a proper greeting-phase ERR 1040 (sequence id 0, where the greeting would be).
    let mut s = raw_connect(proxy.port);
    let (seq, p) = read_packet(&mut s).expect("read the 4th connection's first packet");
    assert_eq!(p.first(), Some(&0xFF), "want an ERR packet, got {p:?}");
    assert_eq!(err_code(&p), Some(1040));
    assert_eq!(seq, 0);
    assert_eq!(&p[3..9], b"#08004", "SQL state");
    closed_within(&mut s, Duration::from_secs(3)).expect("closed after ERR 1040");
    // The mysql crate reports it as a server error 1040.
    match Conn::new(quick_opts(&proxy)) {
        Err(e) => assert_eq!(mysql_error_code(&e), Some(1040), "{e}"),
        Ok(_) => panic!("a 4th session was admitted"),
    }
    // The held sessions are unaffected; once one leaves, a new one gets in.
    for s in held.iter_mut() {
        assert!(raw_query(s, "SELECT 1").is_ok());
    }
    drop(held.pop());
    wait_until(&proxy, Duration::from_secs(5), "a slot frees up", || {
        proxy.metrics().get("ringgate_client_connections") <= 2.0
    });
    let mut c = Conn::new(quick_opts(&proxy)).expect("connect after a slot freed up");
    assert_eq!(c.query_first::<u32, _>("SELECT 7").unwrap(), Some(7));
    drop(c);
    drop(held);
    assert!(
        proxy
            .metrics()
            .get(r#"ringgate_client_rejected_total{reason="max_connections"}"#)
            >= 2.0
    );
    assert_no_leaks(&mut proxy, &base, 6);
}
both_modes!(max_connections_3, max_connections);

// ---------------------------------------------------------------------------------------------
// --max-packet-size
// ---------------------------------------------------------------------------------------------

fn max_packet(mode: Mode) {
    let mut proxy = Proxy::start_with(ProxyOpts::with_args(
        mode,
        &["--max-packet-size", "1048576"],
    ));
    let base = baseline(&mut proxy);
    let good = GoodClient::spawn(&proxy);
    let disc0 = discarded(&proxy);

    // Just under the limit passes.
    let mut c = Conn::new(quick_opts(&proxy)).unwrap();
    let ok_sql = format!("SELECT LENGTH('{}')", "a".repeat(1_000_000));
    assert_eq!(c.query_first::<u64, _>(&ok_sql).unwrap(), Some(1_000_000));

    // Over it: ERR 1153, then the connection is closed. The proxy refuses the packet as soon
    // as its header arrives, half-closes after the ERR and discards what the client still
    // sends, so a client in the middle of writing 2 MiB still gets to read the ERR (closing
    // with unread input would reset the connection and lose it). Repeated, since a lost ERR
    // was a race.
    let big = format!("SELECT LENGTH('{}')", "b".repeat(2 << 20));
    for _ in 0..5 {
        let mut c = Conn::new(quick_opts(&proxy)).unwrap();
        let e = c
            .query_drop(&big)
            .expect_err("a 2 MiB packet must be refused");
        assert_eq!(mysql_error_code(&e), Some(1153), "want ERR 1153, got {e:?}");
    }
    let e = c
        .query_drop(&big)
        .expect_err("a 2 MiB packet must be refused");
    assert_eq!(mysql_error_code(&e), Some(1153), "want ERR 1153, got {e:?}");
    assert!(
        c.query_drop("SELECT 1").is_err(),
        "the connection is closed after ERR 1153"
    );

    // Raw: ERR 1153 (sequence id 1, a reply to the command), then EOF.
    let mut s = raw_login(proxy.port);
    let mut p = vec![0x03];
    p.extend_from_slice(big.as_bytes());
    let _ = s.write_all(&frame(0, &p)[..100_000]); // the header is enough to refuse it
    expect_err_then_close(&mut s, 1153, 1, "oversized packet");

    good.finish(&proxy);
    // The backend saw part of a packet: it is discarded, never reused.
    assert!(discarded(&proxy) >= disc0 + 2.0);
    assert_no_leaks(&mut proxy, &base, 3);
}
both_modes!(max_packet_size, max_packet);

// ---------------------------------------------------------------------------------------------
// --idle-timeout
// ---------------------------------------------------------------------------------------------

fn idle_timeout(mode: Mode) {
    // Session pooling: the busy session keeps its backend connection between commands, and the
    // idle one's goes back to the pool when it is closed.
    let mut proxy = Proxy::start_with(ProxyOpts::with_args(
        mode,
        &["--idle-timeout", "1s", "--pooling", "session"],
    ));
    let base = baseline(&mut proxy);
    let disc0 = discarded(&proxy);
    let mut idle = Conn::new(quick_opts(&proxy)).unwrap();
    let mut busy = Conn::new(quick_opts(&proxy)).unwrap();
    assert_eq!(idle.query_first::<u32, _>("SELECT 1").unwrap(), Some(1));
    // A session that keeps sending commands is not closed.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2500) {
        assert_eq!(busy.query_first::<u32, _>("SELECT 2").unwrap(), Some(2));
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_until(
        &proxy,
        Duration::from_secs(3),
        "the idle session is closed",
        || proxy.metrics().get("ringgate_client_connections") <= 1.0,
    );
    // The client sees the usual "server has gone away" (the connection was closed).
    let e = idle
        .query_drop("SELECT 1")
        .expect_err("the idle session was closed");
    assert!(
        matches!(e, mysql::Error::IoError(_) | mysql::Error::DriverError(_))
            || mysql_error_code(&e) == Some(2006)
            || mysql_error_code(&e) == Some(2013),
        "unexpected error: {e:?}"
    );
    // The backend connection went back to the pool (reset), not discarded.
    assert_eq!(
        discarded(&proxy),
        disc0,
        "the idle session's backend was discarded"
    );
    assert_eq!(
        proxy
            .metrics()
            .get(r#"ringgate_backend_connections{state="busy"}"#),
        1.0
    );
    drop(busy);
    drop(idle);
    assert_no_leaks(&mut proxy, &base, 2);
}
both_modes!(idle_timeout_1s, idle_timeout);

// ---------------------------------------------------------------------------------------------
// --client-write-timeout
// ---------------------------------------------------------------------------------------------

fn client_write_timeout(mode: Mode) {
    let mut proxy = Proxy::start_with(ProxyOpts::with_args(
        mode,
        &["--client-write-timeout", "1s"],
    ));
    let base = baseline(&mut proxy);
    let good = GoodClient::spawn(&proxy);
    let disc0 = discarded(&proxy);
    let mut s = raw_login(proxy.port);
    // A small receive buffer so that the kernel cannot absorb the whole result.
    let sock = socket2::SockRef::from(&s);
    let _ = sock.set_recv_buffer_size(64 * 1024);
    write_packet(&mut s, 0, b"\x03SELECT REPEAT('x', 20*1024*1024)").unwrap();
    let t0 = Instant::now();
    // Never read. The proxy must cut the client off and discard the backend.
    wait_until(
        &proxy,
        Duration::from_secs(15),
        "the non-reading client is cut off",
        || {
            let m = proxy.metrics();
            m.get("ringgate_client_connections") <= 1.0
                && m.get(r#"ringgate_backend_connections{state="busy"}"#) <= 1.0
                && m.get("ringgate_backend_discarded_total") > disc0
        },
    );
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "cut after {took:?}: too early"
    );
    // The socket was closed by the proxy: reading drains what was buffered, then EOF/RST.
    closed_within(&mut s, Duration::from_secs(10)).expect("the client sees the close");
    good.finish(&proxy);
    assert_no_leaks(&mut proxy, &base, 2);
}
both_modes!(client_write_timeout_1s, client_write_timeout);

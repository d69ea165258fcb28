//! Hardening (issue 5): timeouts, limits, malformed input, client faults, backend faults and fd
//! exhaustion. Every scenario runs against the real `ringgate` binary and ends with the leak
//! checks of `testkit::leaks::assert_no_leaks` (no buffer slot, backend connection or fd left
//! behind). Tests that stop or kill the backend run their own MariaDB
//! (`testkit::own_mariadb::OwnMariaDb`), never the shared sandbox. What each test proves is written in
//! docs/reliability.md.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::both_modes;
use testkit::children::signal;
use testkit::env::unique_marker;
use testkit::general_log::GeneralLog;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::mysql_client::{mysql_error_code, mysql_error_message};
use testkit::own_mariadb::OwnMariaDb;
use testkit::procfs::{cpu_ticks, proc_state, tcp_queues};
use testkit::proxy::{log_count, quick_opts, wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{
    closed_within, err_code, frame, half_close, hello_payload, raw_connect, raw_login, raw_query,
    read_greeting, read_packet, read_response, reset_close, write_packet, RAW_CAPS,
};
use testkit::tail;

fn opts(mode: Mode, extra: &[&str]) -> ProxyOpts {
    let mut o = ProxyOpts::new(mode);
    o.extra_args = extra.iter().map(|s| s.to_string()).collect();
    o
}

fn discarded(p: &Proxy) -> f64 {
    p.metrics().get("ringgate_backend_discarded_total")
}

/// A well-behaved client querying in a loop on one connection while a scenario runs.
struct GoodClient {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    errors: Arc<Mutex<Vec<String>>>,
    handle: Option<JoinHandle<()>>,
}

impl GoodClient {
    fn spawn(p: &Proxy) -> GoodClient {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (s, o, e) = (stop.clone(), ok.clone(), errors.clone());
        let opts = quick_opts(p);
        let handle = std::thread::spawn(move || {
            let mut conn = match Conn::new(opts) {
                Ok(c) => c,
                Err(err) => {
                    e.lock().unwrap().push(format!("connect: {err}"));
                    return;
                }
            };
            let mut i: u64 = 0;
            while !s.load(Ordering::Relaxed) {
                i += 1;
                match conn.query_first::<u64, _>(format!("SELECT {i}")) {
                    Ok(Some(v)) if v == i => {
                        o.fetch_add(1, Ordering::Relaxed);
                    }
                    other => e.lock().unwrap().push(format!("SELECT {i} -> {other:?}")),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        GoodClient {
            stop,
            ok,
            errors,
            handle: Some(handle),
        }
    }

    /// Stops it and asserts it never failed and made progress.
    fn finish(mut self, p: &Proxy) {
        // Let it make some progress even when the scenario was quick.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.ok.load(Ordering::Relaxed) < 20 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("good client thread");
        }
        let errors = self.errors.lock().unwrap();
        let ok = self.ok.load(Ordering::Relaxed);
        assert!(
            errors.is_empty() && ok >= 20,
            "the good client was affected: {ok} ok, errors: {:?}\n--- stderr ---\n{}",
            *errors,
            tail(&p.stderr(), 30)
        );
    }
}

/// Expects one ERR packet with `code` (and sequence id `seq`), then the connection closed.
fn expect_err_then_close(s: &mut std::net::TcpStream, code: u16, seq: u8, what: &str) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (got_seq, p) = read_packet(s).unwrap_or_else(|e| panic!("{what}: no ERR packet: {e}"));
    assert_eq!(
        err_code(&p),
        Some(code),
        "{what}: want ERR {code}, got {:?}",
        String::from_utf8_lossy(&p)
    );
    assert_eq!(got_seq, seq, "{what}: ERR sequence id");
    closed_within(s, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{what}: {e}"));
}

// ---------------------------------------------------------------------------------------------
// Malformed and stalled clients (handshake timeout 1 s) beside a good client
// ---------------------------------------------------------------------------------------------

fn malformed_clients(mode: Mode) {
    let mut proxy = Proxy::start_with(opts(mode, &["--handshake-timeout", "1s"]));
    let base = baseline(&mut proxy);
    let good = GoodClient::spawn(&proxy);
    let port = proxy.port;
    let hs_before = proxy
        .metrics()
        .get(r#"ringgate_client_rejected_total{reason="handshake"}"#);

    // 1. Connects, reads the greeting, never answers: dropped after --handshake-timeout.
    let mut stall = raw_connect(port);
    read_greeting(&mut stall);
    let t = closed_within(&mut stall, Duration::from_secs(5)).expect("stalled client dropped");
    assert!(
        t >= Duration::from_millis(700) && t <= Duration::from_millis(2500),
        "stalled client dropped after {t:?}, want ~1 s (+ one 100 ms tick)"
    );
    // ... also one that never even reads the greeting.
    let mut mute = raw_connect(port);
    std::thread::sleep(Duration::from_millis(1500));
    let mut g = [0u8; 256];
    let _ = mute.read(&mut g); // the greeting
    closed_within(&mut mute, Duration::from_secs(3)).expect("mute client dropped");

    // 2. Garbage before the handshake response: a complete packet of nonsense gets ERR 1043.
    let mut s = raw_connect(port);
    read_greeting(&mut s);
    write_packet(&mut s, 1, b"\x00\x00GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    expect_err_then_close(&mut s, 1043, 2, "garbage packet");
    // ... and raw text whose "header" declares a 2 MiB packet, more than a login packet can
    // be: refused at once with ERR 1043, not left to the handshake timeout.
    let mut s = raw_connect(port);
    read_greeting(&mut s);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let started = Instant::now();
    // The ERR answers the "packet" with sequence id b' ' (0x20).
    expect_err_then_close(&mut s, 1043, 0x21, "HTTP request");
    let t = started.elapsed();
    assert!(
        t < Duration::from_millis(500),
        "HTTP garbage refused only after {t:?}"
    );
    eprintln!("HTTP request instead of a HandshakeResponse: closed after {t:?}");
    // ... and 64 KiB of random bytes (more than a read buffer).
    let mut s = raw_connect(port);
    read_greeting(&mut s);
    let mut x = 0x1234_5678_9abc_def0u64;
    let junk: Vec<u8> = (0..65536)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let _ = s.write_all(&junk);
    let t = closed_within(&mut s, Duration::from_secs(3)).expect("random garbage dropped");
    eprintln!("64 KiB of random bytes: closed after {t:?}");

    // 3. A HandshakeResponse with absurd field lengths: an 8-byte length-encoded auth response
    // length of 2^62, a user name with no NUL, a connect-attrs block of 2^40 bytes.
    let mut hello = Vec::new();
    let caps = RAW_CAPS
        | wire::constants::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        | wire::constants::CLIENT_CONNECT_ATTRS;
    hello.extend_from_slice(&caps.to_le_bytes());
    hello.extend_from_slice(&(1u32 << 30).to_le_bytes());
    hello.push(45);
    hello.extend_from_slice(&[0u8; 23]);
    hello.extend_from_slice(b"app\0");
    hello.push(0xFE);
    hello.extend_from_slice(&(1u64 << 62).to_le_bytes());
    hello.extend_from_slice(b"short");
    let mut s = raw_connect(port);
    read_greeting(&mut s);
    write_packet(&mut s, 1, &hello).unwrap();
    expect_err_then_close(&mut s, 1043, 2, "absurd auth-response length");

    let mut hello = Vec::new();
    hello.extend_from_slice(&caps.to_le_bytes());
    hello.extend_from_slice(&(1u32 << 30).to_le_bytes());
    hello.push(45);
    hello.extend_from_slice(&[0u8; 23]);
    hello.extend_from_slice(&[b'u'; 300]); // user name without its NUL
    let mut s = raw_connect(port);
    read_greeting(&mut s);
    write_packet(&mut s, 1, &hello).unwrap();
    expect_err_then_close(&mut s, 1043, 2, "user name without NUL");

    let mut s = raw_connect(port);
    let scramble = read_greeting(&mut s);
    let mut hello = hello_payload(&scramble, "app", "app-secret");
    let c =
        u32::from_le_bytes(hello[..4].try_into().unwrap()) | wire::constants::CLIENT_CONNECT_ATTRS;
    hello[..4].copy_from_slice(&c.to_le_bytes());
    hello.push(0xFE);
    hello.extend_from_slice(&(1u64 << 40).to_le_bytes());
    write_packet(&mut s, 1, &hello).unwrap();
    expect_err_then_close(&mut s, 1043, 2, "absurd connect-attrs length");

    // 4. An SSLRequest while TLS is off: ERR 1043, then close.
    let mut s = raw_connect(port);
    read_greeting(&mut s);
    let ssl =
        wire::handshake::build_ssl_request(RAW_CAPS | wire::constants::CLIENT_SSL, 1 << 24, 45);
    write_packet(&mut s, 1, &ssl).unwrap();
    expect_err_then_close(&mut s, 1043, 2, "SSLRequest");

    // 5. Truncated packets. During login: a header announcing 100 bytes, 10 sent, then
    // silence: dropped by the handshake timeout.
    let mut s = raw_connect(port);
    read_greeting(&mut s);
    s.write_all(&[100, 0, 0, 1]).unwrap();
    s.write_all(&[0u8; 10]).unwrap();
    let t = closed_within(&mut s, Duration::from_secs(3)).expect("truncated hello dropped");
    eprintln!("truncated HandshakeResponse packet then silence: closed after {t:?}");
    // ... a truncated HandshakeResponse (a complete packet that ends inside a field): ERR 1043.
    let mut s = raw_connect(port);
    let scramble = read_greeting(&mut s);
    let hello = hello_payload(&scramble, "app", "app-secret");
    write_packet(&mut s, 1, &hello[..40]).unwrap();
    expect_err_then_close(&mut s, 1043, 2, "truncated HandshakeResponse");
    // ... after login: all of a COM_QUERY but its last bytes, then the client leaves. The
    // backend got part of a command, so the proxy must discard it (close it, never pool it),
    // and the statement must never run there: the server's general log shows nothing of it.
    let mut log = GeneralLog::on();
    let marker = unique_marker("half-query");
    let mut s = raw_login(port);
    let tid = log.backend_thread_of(&mut s);
    let disc0 = discarded(&proxy);
    let q = frame(
        0,
        format!("\x03SELECT '{marker}', 'never complete'").as_bytes(),
    );
    s.write_all(&q[..q.len() - 8]).unwrap();
    // TCP delivers these bytes before the FIN, so the proxy sees the half packet, then EOF.
    drop(s);
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "half a COM_QUERY then disconnect: backend discarded",
        || discarded(&proxy) > disc0,
    );
    log.assert_closed_and_never_ran(tid, &marker, "half a COM_QUERY then disconnect");

    // 6. A wrong sequence id after login: the session is closed, the statement reaches no
    // backend, and that session's backend connection is discarded.
    let marker = unique_marker("bad-seq");
    let mut s = raw_login(port);
    let tid = log.backend_thread_of(&mut s);
    let disc0 = discarded(&proxy);
    write_packet(&mut s, 5, format!("\x03SELECT '{marker}'").as_bytes()).unwrap();
    closed_within(&mut s, Duration::from_secs(3)).expect("wrong sequence id closes");
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "wrong sequence id: backend discarded",
        || discarded(&proxy) > disc0,
    );
    log.assert_closed_and_never_ran(tid, &marker, "wrong sequence id");
    // ... an empty command packet likewise.
    let mut s = raw_login(port);
    let tid = log.backend_thread_of(&mut s);
    let disc0 = discarded(&proxy);
    write_packet(&mut s, 0, b"").unwrap();
    closed_within(&mut s, Duration::from_secs(3)).expect("empty command closes");
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "empty command: backend discarded",
        || discarded(&proxy) > disc0,
    );
    log.assert_closed_and_never_ran(tid, "\u{0}no marker\u{0}", "empty command packet");
    drop(log);
    // ... while a correct one on a fresh session still works.
    let mut s = raw_login(port);
    assert!(raw_query(&mut s, "SELECT 1").is_ok());
    drop(s);

    // 7. Commands before auth: COM_QUERY / COM_PING where the HandshakeResponse belongs.
    for cmd in [&b"\x03SELECT 1"[..], b"\x0e", b"\x01"] {
        let mut s = raw_connect(port);
        read_greeting(&mut s);
        write_packet(&mut s, 0, cmd).unwrap();
        let (_, p) = read_packet(&mut s).expect("an answer to a command before auth");
        let code = err_code(&p);
        assert!(
            matches!(code, Some(1043) | Some(1045)),
            "command {cmd:?} before auth: want ERR 1043/1045, got {p:?}"
        );
        closed_within(&mut s, Duration::from_secs(3)).expect("closed after ERR");
    }
    // ... and a connection closed right after connecting (before reading the greeting).
    for _ in 0..20 {
        drop(raw_connect(port));
    }

    proxy.assert_running();
    good.finish(&proxy);
    let hs_after = proxy
        .metrics()
        .get(r#"ringgate_client_rejected_total{reason="handshake"}"#);
    assert!(hs_after > hs_before, "handshake rejections were counted");
    assert_no_leaks(&mut proxy, &base, 20);
}
both_modes!(malformed_and_stalled_clients, malformed_clients);

// ---------------------------------------------------------------------------------------------
// --max-connections
// ---------------------------------------------------------------------------------------------

fn max_connections(mode: Mode) {
    let mut o = opts(mode, &[]);
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
    let mut proxy = Proxy::start_with(opts(mode, &["--max-packet-size", "1048576"]));
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
    let mut proxy = Proxy::start_with(opts(
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
    let mut proxy = Proxy::start_with(opts(mode, &["--client-write-timeout", "1s"]));
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

// ---------------------------------------------------------------------------------------------
// Client faults: reset mid-result, half-close, disconnect during auth
// ---------------------------------------------------------------------------------------------

fn client_faults(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let base = baseline(&mut proxy);
    let good = GoodClient::spawn(&proxy);
    let port = proxy.port;

    // 1. RST in the middle of a 20 MiB result.
    for _ in 0..3 {
        let disc0 = discarded(&proxy);
        let mut s = raw_login(port);
        write_packet(&mut s, 0, b"\x03SELECT REPEAT('x', 20*1024*1024)").unwrap();
        let mut got = 0usize;
        let mut b = vec![0u8; 65536];
        while got < 1 << 20 {
            got += s.read(&mut b).expect("read part of the result");
        }
        reset_close(s);
        wait_until(
            &proxy,
            Duration::from_secs(5),
            "backend discarded after RST",
            || discarded(&proxy) > disc0,
        );
    }

    // 2. Half-close (shutdown(SHUT_WR)) right after sending a query: the relay is
    // half-duplex, so the proxy finishes the response first, sees EOF at the command boundary,
    // closes the session and resets the backend for reuse (not discarded).
    let disc0 = discarded(&proxy);
    let mut s = raw_login(port);
    write_packet(&mut s, 0, b"\x03SELECT SLEEP(0.3), REPEAT('y', 1000000)").unwrap();
    half_close(&s);
    let got = read_response(&mut s).expect("the half-closed client still gets its answer");
    assert!(got >= 1_000_000);
    closed_within(&mut s, Duration::from_secs(5)).expect("half-closed client sees EOF");
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "half-close: session ended",
        || proxy.metrics().get("ringgate_client_connections") <= 1.0,
    );
    assert_eq!(
        discarded(&proxy),
        disc0,
        "a clean half-close discarded the backend"
    );
    // ... half-close in the middle of sending a command (half a packet, then SHUT_WR): the
    // backend saw part of a command and is discarded.
    let mut s = raw_login(port);
    let q = frame(0, b"\x03SELECT 'cut in the middle of the packet'");
    s.write_all(&q[..15]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    half_close(&s);
    closed_within(&mut s, Duration::from_secs(5)).expect("EOF after a half-sent command");
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "half-sent command: backend discarded",
        || discarded(&proxy) > disc0,
    );
    // ... half-close at a command boundary: the backend is reset and reused, not discarded.
    let mut s = raw_login(port);
    assert!(raw_query(&mut s, "SELECT 1").is_ok());
    let disc1 = discarded(&proxy);
    half_close(&s);
    closed_within(&mut s, Duration::from_secs(5)).expect("EOF after half-close");
    wait_until(&proxy, Duration::from_secs(5), "no session left", || {
        proxy.metrics().get("ringgate_client_connections") <= 1.0
    });
    assert_eq!(
        discarded(&proxy),
        disc1,
        "a clean half-close discarded the backend"
    );

    // 3. Disconnect during auth: before the greeting is read, halfway through the
    // HandshakeResponse, after an AuthSwitchRequest, and by RST.
    for _ in 0..5 {
        drop(raw_connect(port));
        let mut s = raw_connect(port);
        let scramble = read_greeting(&mut s);
        let hello = hello_payload(&scramble, "app", "app-secret");
        let f = frame(1, &hello);
        s.write_all(&f[..f.len() / 2]).unwrap();
        drop(s);
        let mut s = raw_connect(port);
        let scramble = read_greeting(&mut s);
        let hello =
            wire::handshake::build_handshake_response(&wire::handshake::HandshakeResponse {
                capabilities: RAW_CAPS,
                max_packet_size: 1 << 24,
                charset: 45,
                // A native-hash user: switched to mysql_native_password.
                username: "hashed".into(),
                auth_response: scramble.clone(),
                database: None,
                auth_plugin: Some("caching_sha2_password".into()),
                connect_attrs: vec![],
            });
        write_packet(&mut s, 1, &hello).unwrap();
        let (_, sw) = read_packet(&mut s).expect("AuthSwitchRequest");
        assert_eq!(sw.first(), Some(&0xFE), "want an AuthSwitchRequest");
        reset_close(s);
    }
    // ... and after auth succeeded but before the first command, by RST.
    for _ in 0..5 {
        reset_close(raw_login(port));
    }

    proxy.assert_running();
    good.finish(&proxy);
    assert_no_leaks(&mut proxy, &base, 25);
}
both_modes!(client_faults_reset_halfclose_auth, client_faults);

// ---------------------------------------------------------------------------------------------
// Backend faults (own MariaDB)
// ---------------------------------------------------------------------------------------------

fn own_opts(mode: Mode, db: &OwnMariaDb, extra: &[&str]) -> ProxyOpts {
    let mut o = opts(mode, extra);
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
    let mut o = opts(Mode::Fixed, &["--backend-connect-timeout", "1s"]);
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
// fd exhaustion
// ---------------------------------------------------------------------------------------------

#[test]
fn fd_exhaustion_backs_off_logs_once_per_interval_and_recovers() {
    // Plain client fds: direct descriptors hold clients without fds (a full table falls back
    // to plain accepts, which then meet this same EMFILE path).
    let mut o = opts(Mode::Fixed, &["--direct-descriptors", "off"]);
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

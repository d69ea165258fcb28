//! Clients that misbehave: malformed and stalled handshakes (handshake timeout 1 s), resets,
//! half closes and failed logins, each beside a good client that must not notice. Every
//! scenario ends with the leak checks of `testkit::leaks::assert_no_leaks`.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use testkit::both_modes;
use testkit::env::unique_marker;
use testkit::general_log::GeneralLog;
use testkit::good_client::GoodClient;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::proxy::{wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{
    closed_within, err_code, expect_err_then_close, frame, half_close, hello_payload, raw_connect,
    raw_login, raw_query, read_greeting, read_packet, read_response, reset_close, write_packet,
    RAW_CAPS,
};

fn discarded(p: &Proxy) -> f64 {
    p.metrics().get("ringgate_backend_discarded_total")
}

// ---------------------------------------------------------------------------------------------
// Malformed and stalled clients (handshake timeout 1 s) beside a good client
// ---------------------------------------------------------------------------------------------

fn malformed_clients(mode: Mode) {
    let mut proxy = Proxy::start_with(ProxyOpts::with_args(mode, &["--handshake-timeout", "1s"]));
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

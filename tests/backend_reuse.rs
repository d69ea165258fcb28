//! What a pooled backend connection carries from one client to the next: nothing of the first
//! client's session (variables, temporary tables, prepared statements, COM_SET_OPTION), the
//! capabilities the next client negotiated (CLIENT_IGNORE_SPACE, also after a reset), and no
//! half-forwarded packet (a connection left in the middle of one is discarded, not reset).
//! Every socket read has a timeout, so a stalled reuse fails in bounded time.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use testkit::env::{backend_env, APP_PASSWORD, APP_USER};
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::proxy::{wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{
    closed_within, connect_to, err_code, hello_with, login_with_caps, query_reply, read_greeting,
    read_packet, read_reply, single_value, write_packet, Reply, NATIVE, RAW_CAPS,
};
use wire::auth::native_token;
use wire::constants::*;

/// How long any single read may block before the test calls the proxy hung.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

fn proxy_addr(p: &Proxy) -> String {
    format!("127.0.0.1:{}", p.port)
}

// ---------------------------------------------------------------------------------------------
// A COM_QUIT after half a header: the backend connection is discarded, not reset
// ---------------------------------------------------------------------------------------------

/// COM_QUIT whose 4-byte header arrives in two pieces: the proxy has already forwarded the first
/// two bytes to the server when it sees that the packet is a COM_QUIT. The backend is then in
/// the middle of a packet and must be discarded (or the half header never forwarded).
/// `relay_stop` judged "clean" by `pending_responses() == 0` instead of
/// `at_command_boundary()`, so it sent
/// COM_RESET_CONNECTION into the half packet: the server read `01 00` + the reset's first bytes
/// as a header announcing a 64 KiB packet and waited, the reset stalled until
/// --backend-connect-timeout, and the next client (the only backend connection allowed) waited
/// that long for its login.
#[test]
fn a_quit_after_a_forwarded_half_header_discards_the_backend() {
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.backend_pool_size = 1;
    o.backend_max_connections = 1;
    o.backend_wait_timeout = "20s";
    o.extra_args = vec!["--backend-connect-timeout".into(), "10s".into()];
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let discarded0 = proxy.metrics().get("ringgate_backend_discarded_total");
    let addr = proxy_addr(&proxy);
    // The warm pool's key, so the session leases the one warm connection.
    let caps = RAW_CAPS | CLIENT_PS_MULTI_RESULTS;

    let mut a = login_with_caps(&addr, APP_USER, APP_PASSWORD, caps);
    assert_eq!(single_value(query_reply(&mut a, "SELECT 1")), "1");
    // COM_QUIT = 01 00 00 00 | 01, its header split after two bytes.
    a.write_all(&[0x01, 0x00]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    a.write_all(&[0x00, 0x00, 0x01]).unwrap();
    closed_within(&mut a, Duration::from_secs(5)).expect("the proxy closes after COM_QUIT");
    let quit_at = Instant::now();

    // The next client gets a connection without waiting for a stalled reset (read timeout
    // above --backend-connect-timeout, so that a stalled reset shows as a slow login).
    let mut b = connect_to(&addr, READ_TIMEOUT);
    b.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let scramble = read_greeting(&mut b);
    let token = native_token(APP_PASSWORD.as_bytes(), &scramble);
    write_packet(&mut b, 1, &hello_with(caps, APP_USER, NATIVE, token)).unwrap();
    let login = read_packet(&mut b);
    let login_took = quit_at.elapsed();
    let (_, ok) = login.unwrap_or_else(|e| panic!("the next client's login: {e}"));
    assert_eq!(ok.first(), Some(&0x00), "the next client's login: {ok:?}");
    assert_eq!(single_value(query_reply(&mut b, "SELECT 2")), "2");
    drop(b);
    let discarded = proxy.metrics().get("ringgate_backend_discarded_total") - discarded0;
    eprintln!("next login after {login_took:?}; backend connections discarded: {discarded}");
    assert!(
        login_took < Duration::from_secs(3),
        "the next client waited {login_took:?} for its login: the only backend connection was \
         stuck in a COM_RESET_CONNECTION sent into a half packet (discarded: {discarded})"
    );
    assert_no_leaks(&mut proxy, &base, 2);
}

// ---------------------------------------------------------------------------------------------
// CLIENT_IGNORE_SPACE reaches the backend, also after a reset
// ---------------------------------------------------------------------------------------------

/// `sql_mode` contains IGNORE_SPACE, and `COUNT (*)` (a space before the parenthesis) parses.
fn ignore_space_behaviour(s: &mut TcpStream) -> (bool, bool) {
    let mode = single_value(query_reply(s, "SELECT @@session.sql_mode"));
    let parses = match query_reply(s, "SELECT COUNT (*) FROM (SELECT 1) t") {
        Reply::Rows(_) => true,
        Reply::Err(1064, _) => false,
        other => panic!("COUNT (*): unexpected reply {other:?}"),
    };
    (mode.split(',').any(|m| m == "IGNORE_SPACE"), parses)
}

/// A client that negotiates CLIENT_IGNORE_SPACE gets IGNORE_SPACE in its sql_mode on a direct
/// connection, so `COUNT (*)` parses. Through the proxy the flag was offered to the client but
/// left out of the pool key, so the backend connection never had it. The second session checks
/// a reused (reset) connection: MariaDB's COM_RESET_CONNECTION drops IGNORE_SPACE from the
/// sql_mode even though the connection negotiated it, so the fix must restore it there too. A
/// client without the flag must not inherit it.
#[test]
fn client_ignore_space_reaches_the_backend() {
    let b = backend_env();
    let caps = RAW_CAPS | CLIENT_IGNORE_SPACE;
    // The expectation, from a direct connection to the server.
    let mut d = login_with_caps(&b.addr(), &b.user, &b.password, caps);
    assert_eq!(
        ignore_space_behaviour(&mut d),
        (true, true),
        "direct connection with CLIENT_IGNORE_SPACE"
    );
    let mut d = login_with_caps(&b.addr(), &b.user, &b.password, RAW_CAPS);
    assert_eq!(
        ignore_space_behaviour(&mut d),
        (false, false),
        "direct connection without CLIENT_IGNORE_SPACE"
    );
    drop(d);

    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let addr = proxy_addr(&proxy);
    let mut ids = Vec::new();
    for round in 1..=2 {
        let mut s = login_with_caps(&addr, APP_USER, APP_PASSWORD, caps);
        ids.push(single_value(query_reply(&mut s, "SELECT CONNECTION_ID()")));
        assert_eq!(
            ignore_space_behaviour(&mut s),
            (true, true),
            "session {round} with CLIENT_IGNORE_SPACE through the proxy (sql_mode has \
             IGNORE_SPACE, COUNT (*) parses), as on a direct connection"
        );
        write_packet(&mut s, 0, &[0x01]).unwrap(); // COM_QUIT
        closed_within(&mut s, Duration::from_secs(5)).expect("closed after COM_QUIT");
        // Let the reset finish so that the next session can reuse the connection.
        wait_until(
            &proxy,
            Duration::from_secs(5),
            "the backend is idle again",
            || {
                proxy
                    .metrics()
                    .get(r#"ringgate_backend_connections{state="busy"}"#)
                    == 0.0
            },
        );
    }
    eprintln!("backend connection ids of the two sessions: {ids:?}");
    let mut s = login_with_caps(&addr, APP_USER, APP_PASSWORD, RAW_CAPS);
    assert_eq!(
        ignore_space_behaviour(&mut s),
        (false, false),
        "a client without CLIENT_IGNORE_SPACE must not inherit it"
    );
    drop(s);
    assert_no_leaks(&mut proxy, &base, 3);
}

// ---------------------------------------------------------------------------------------------
// State that COM_RESET_CONNECTION does not restore
// ---------------------------------------------------------------------------------------------

/// Client A turns multi-statements on with COM_SET_OPTION and leaves; client B, which never
/// negotiated CLIENT_MULTI_STATEMENTS, must still get MariaDB's 1064 for a stacked query on
/// the one pooled connection (`--workers 1`, one backend connection at most). COM_RESET_CONNECTION
/// keeps the option, so the proxy must not reuse that connection.
#[test]
fn com_set_option_does_not_reach_the_next_client() {
    const MULTI_STATEMENTS: u32 = 1 << 16;
    let caps = RAW_CAPS & !MULTI_STATEMENTS;
    let stacked = "SELECT 1; SELECT 2";
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.backend_pool_size = 1;
    o.backend_max_connections = 1;
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let addr = proxy_addr(&proxy);

    let mut a = login_with_caps(&addr, APP_USER, APP_PASSWORD, caps);
    assert!(
        matches!(query_reply(&mut a, stacked), Reply::Err(1064, _)),
        "without the flag MariaDB refuses a stacked query"
    );
    // COM_SET_OPTION MYSQL_OPTION_MULTI_STATEMENTS_ON; the server answers with an EOF.
    write_packet(&mut a, 0, &[0x1b, 0x00, 0x00]).unwrap();
    let (_, eof) = read_packet(&mut a).expect("answer to COM_SET_OPTION");
    assert_eq!(
        eof.first(),
        Some(&0xFE),
        "EOF after COM_SET_OPTION: {eof:?}"
    );
    assert!(
        matches!(query_reply(&mut a, stacked), Reply::Rows(_)),
        "after COM_SET_OPTION the stacked query runs for A"
    );
    let _second_result = read_reply(&mut a).expect("the second result of A's stacked query");
    write_packet(&mut a, 0, &[0x01]).unwrap(); // COM_QUIT
    closed_within(&mut a, Duration::from_secs(5)).expect("closed after COM_QUIT");
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "A's backend released",
        || {
            proxy
                .metrics()
                .get(r#"ringgate_backend_connections{state="busy"}"#)
                == 0.0
        },
    );

    let mut b = login_with_caps(&addr, APP_USER, APP_PASSWORD, caps);
    match query_reply(&mut b, stacked) {
        Reply::Err(1064, _) => {}
        other => panic!("client B inherited A's multi-statements option: {other:?}"),
    }
    drop(b);
    assert_no_leaks(&mut proxy, &base, 2);
}

/// Client A leaves every kind of session state on its backend connection: a user variable, a
/// session variable, a temporary table, a text PREPARE and a binary COM_STMT_PREPARE. Client B
/// gets the same server connection (same CONNECTION_ID(), `--workers 1`, one backend connection
/// at most) and must see none of it, as on a fresh connection.
#[test]
fn session_state_does_not_reach_the_next_client() {
    let caps = RAW_CAPS;
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.backend_pool_size = 1;
    o.backend_max_connections = 1;
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let addr = proxy_addr(&proxy);

    let mut a = login_with_caps(&addr, APP_USER, APP_PASSWORD, caps);
    let thread_a = single_value(query_reply(&mut a, "SELECT CONNECTION_ID()"));
    for sql in [
        "SET @leak = 42",
        "SET SESSION wait_timeout = 77",
        "CREATE TEMPORARY TABLE ringgate_test.leak_tmp (a INT)",
        "PREPARE leak_stmt FROM 'SELECT 1'",
    ] {
        assert!(
            matches!(query_reply(&mut a, sql), Reply::Ok(_)),
            "client A: {sql}"
        );
    }
    // COM_STMT_PREPARE "SELECT 1": OK with the statement id, then one column definition + EOF.
    write_packet(&mut a, 0, b"\x16SELECT 1").unwrap();
    let (_, prep) = read_packet(&mut a).expect("COM_STMT_PREPARE answer");
    assert_eq!(prep.first(), Some(&0x00), "prepare OK: {prep:?}");
    let stmt_id = [prep[1], prep[2], prep[3], prep[4]];
    for _ in 0..2 {
        read_packet(&mut a).expect("column definition / EOF");
    }
    write_packet(&mut a, 0, &[0x01]).unwrap(); // COM_QUIT
    closed_within(&mut a, Duration::from_secs(5)).expect("closed after COM_QUIT");
    wait_until(&proxy, Duration::from_secs(5), "A's backend reset", || {
        proxy
            .metrics()
            .get(r#"ringgate_backend_connections{state="idle"}"#)
            == 1.0
    });

    let mut b = login_with_caps(&addr, APP_USER, APP_PASSWORD, caps);
    assert_eq!(
        single_value(query_reply(&mut b, "SELECT CONNECTION_ID()")),
        thread_a,
        "B must reuse A's server connection, or this test proves nothing"
    );
    assert_eq!(single_value(query_reply(&mut b, "SELECT @leak")), "NULL");
    assert_ne!(
        single_value(query_reply(&mut b, "SELECT @@session.wait_timeout")),
        "77"
    );
    assert!(matches!(
        query_reply(&mut b, "SELECT * FROM ringgate_test.leak_tmp"),
        Reply::Err(1146, _)
    ));
    assert!(matches!(
        query_reply(&mut b, "EXECUTE leak_stmt"),
        Reply::Err(1243, _)
    ));
    let mut execute = vec![0x17];
    execute.extend_from_slice(&stmt_id);
    execute.extend_from_slice(&[0x00, 1, 0, 0, 0]);
    write_packet(&mut b, 0, &execute).unwrap();
    let (_, err) = read_packet(&mut b).expect("COM_STMT_EXECUTE answer");
    assert_eq!(
        err_code(&err),
        Some(1243),
        "A's prepared statement id is unknown to B"
    );
    drop(b);
    assert_no_leaks(&mut proxy, &base, 2);
}

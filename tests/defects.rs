//! Black-box reproductions of the defects listed in issue 10, one named test per defect
//! (`dNN_...`), against the real `ringgate` binary in front of the sandbox MariaDB.
//!
//! Each test failed on the proxy as it was when the issue was filed (0a6818a) and passes since
//! the src/proxy restructure fixed its defect. Every socket read has a
//! timeout and every scenario has a deadline, so a test that reproduces a hang fails in bounded
//! time instead of hanging. What each test proves is listed in docs/reliability.md.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use wire::auth::native_token;
use wire::constants::*;
use wire::handshake::{build_handshake_response, parse_greeting, HandshakeResponse};
use testkit::env::{backend_env, APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER};
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::mysql_client::direct_conn;
use testkit::proxy::{wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{closed_within, err_code, frame, read_packet, write_packet, RAW_CAPS};

/// How long any single read may block before the test calls the proxy hung.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// Raw protocol helpers
// ---------------------------------------------------------------------------------------------

/// A TCP connection with bounded reads and writes.
fn connect_raw(addr: &str) -> TcpStream {
    let addr: SocketAddr = addr.parse().expect("socket address");
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// A HandshakeResponse41 with the given capabilities, plugin and auth data (collation
/// utf8mb4_general_ci, no schema).
fn hello(caps: u32, user: &str, plugin: &str, auth_response: Vec<u8>) -> Vec<u8> {
    build_handshake_response(&HandshakeResponse {
        capabilities: caps,
        max_packet_size: 1 << 30,
        charset: UTF8MB4_GENERAL_CI,
        username: user.into(),
        auth_response,
        database: None,
        auth_plugin: Some(plugin.into()),
        connect_attrs: vec![],
    })
}

/// Reads the greeting; returns its scramble.
fn greeting_scramble(s: &mut TcpStream) -> Vec<u8> {
    let (seq, g) = read_packet(s).expect("read the greeting");
    assert_eq!(seq, 0, "greeting sequence id");
    parse_greeting(&g).expect("parse the greeting").scramble
}

/// Logs in with mysql_native_password and `caps`; panics unless the answer is OK.
fn login_with_caps(addr: &str, user: &str, password: &str, caps: u32) -> TcpStream {
    let mut s = connect_raw(addr);
    let scramble = greeting_scramble(&mut s);
    let token = native_token(password.as_bytes(), &scramble);
    write_packet(&mut s, 1, &hello(caps, user, NATIVE, token)).unwrap();
    let (_, ok) = read_packet(&mut s).expect("read the login reply");
    assert_eq!(
        ok.first(),
        Some(&0x00),
        "login of {user} at {addr} refused: {}",
        String::from_utf8_lossy(&ok)
    );
    s
}

const NATIVE: &str = "mysql_native_password";

fn com_query(sql: &str) -> Vec<u8> {
    let mut p = vec![0x03];
    p.extend_from_slice(sql.as_bytes());
    p
}

/// A length-encoded integer at the start of `p`: (value, bytes used).
fn lenenc(p: &[u8]) -> Option<(u64, usize)> {
    match *p.first()? {
        n @ 0..=0xFA => Some((n as u64, 1)),
        0xFC => Some((u16::from_le_bytes(p.get(1..3)?.try_into().ok()?) as u64, 3)),
        0xFD => {
            let b = p.get(1..4)?;
            Some((b[0] as u64 | (b[1] as u64) << 8 | (b[2] as u64) << 16, 4))
        }
        0xFE => Some((u64::from_le_bytes(p.get(1..9)?.try_into().ok()?), 9)),
        _ => None,
    }
}

/// Column values of one text-protocol row (None = NULL).
fn text_row(p: &[u8]) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < p.len() {
        if p[pos] == 0xFB {
            out.push(None);
            pos += 1;
            continue;
        }
        let (len, used) = lenenc(&p[pos..]).expect("a length-encoded column value");
        let start = pos + used;
        let end = start + len as usize;
        out.push(Some(p[start..end].to_vec()));
        pos = end;
    }
    out
}

/// What a command got back (the fields are read through `Debug` in failure messages).
#[derive(Debug)]
#[allow(dead_code)]
enum Reply {
    /// OK: affected rows.
    Ok(u64),
    /// ERR: code, message.
    Err(u16, String),
    /// A result set (classic EOFs): its rows.
    Rows(Vec<Vec<Option<Vec<u8>>>>),
}

/// Reads one whole response to a text command (classic EOF framing, single result).
fn read_reply(s: &mut TcpStream) -> io::Result<Reply> {
    let (_, first) = read_packet(s)?;
    match first.first() {
        Some(0x00) => return Ok(Reply::Ok(lenenc(&first[1..]).map_or(0, |(v, _)| v))),
        Some(0xFF) => {
            let code = err_code(&first).unwrap_or(0);
            let msg = String::from_utf8_lossy(first.get(9..).unwrap_or(&[])).into_owned();
            return Ok(Reply::Err(code, msg));
        }
        _ => {}
    }
    let (columns, _) = lenenc(&first).expect("a column count");
    for _ in 0..columns {
        read_packet(s)?;
    }
    let (_, eof) = read_packet(s)?;
    assert_eq!(eof.first(), Some(&0xFE), "EOF after the column definitions");
    let mut rows = Vec::new();
    loop {
        let (_, p) = read_packet(s)?;
        if p.first() == Some(&0xFE) && p.len() < 9 {
            return Ok(Reply::Rows(rows));
        }
        if p.first() == Some(&0xFF) {
            let code = err_code(&p).unwrap_or(0);
            return Ok(Reply::Err(code, String::from_utf8_lossy(&p[9..]).into()));
        }
        rows.push(text_row(&p));
    }
}

/// The single value of a one-row, one-column result, as text.
fn single_value(reply: Reply) -> String {
    match reply {
        Reply::Rows(rows) if rows.len() == 1 && rows[0].len() == 1 => {
            String::from_utf8_lossy(rows[0][0].as_deref().unwrap_or(b"NULL")).into_owned()
        }
        other => panic!("want one row with one column, got {other:?}"),
    }
}

/// Runs one COM_QUERY and returns its reply; panics (bounded by the read timeout) otherwise.
fn query(s: &mut TcpStream, sql: &str) -> Reply {
    write_packet(s, 0, &com_query(sql)).unwrap_or_else(|e| panic!("send {sql:?}: {e}"));
    read_reply(s).unwrap_or_else(|e| panic!("reply to {sql:?}: {e}"))
}

fn proxy_addr(p: &Proxy) -> String {
    format!("127.0.0.1:{}", p.port)
}

// ---------------------------------------------------------------------------------------------
// Defect 7: bytes pipelined after the login packet are dropped
// ---------------------------------------------------------------------------------------------

/// The salt of an AuthSwitchRequest payload (0xFE, plugin name, NUL, salt, NUL).
fn switch_salt(switch: &[u8]) -> Vec<u8> {
    assert_eq!(
        switch.first(),
        Some(&0xFE),
        "want an AuthSwitchRequest: {switch:?}"
    );
    let body = &switch[1..];
    let nul = body.iter().position(|&b| b == 0).expect("a plugin name");
    assert_eq!(&body[..nul], NATIVE.as_bytes(), "switched to {NATIVE}");
    let salt = &body[nul + 1..];
    salt.strip_suffix(&[0]).unwrap_or(salt).to_vec()
}

/// Both pipelined logins against `addr`: the first command in the same write() as the
/// HandshakeResponse41, then in the same write() as the AuthSwitch reply. `who` names the peer
/// in failure messages.
fn pipelined_logins(addr: &str, user: &str, password: &str, who: &str) {
    // HandshakeResponse41 + COM_QUERY in one segment.
    let mut s = connect_raw(addr);
    let scramble = greeting_scramble(&mut s);
    let token = native_token(password.as_bytes(), &scramble);
    let mut burst = frame(1, &hello(RAW_CAPS, user, NATIVE, token));
    burst.extend(frame(0, &com_query("SELECT 4207")));
    s.write_all(&burst).unwrap();
    let (seq, ok) = read_packet(&mut s).expect("the login reply");
    assert_eq!(
        (seq, ok.first()),
        (2, Some(&0x00)),
        "{who}: login OK: {ok:?}"
    );
    let reply = read_reply(&mut s).unwrap_or_else(|e| {
        panic!(
            "{who}: the COM_QUERY sent in the same write() as the HandshakeResponse got no \
             answer within {READ_TIMEOUT:?}: {e}"
        )
    });
    assert_eq!(single_value(reply), "4207", "{who}");
    // The session goes on working.
    assert_eq!(single_value(query(&mut s, "SELECT 2")), "2", "{who}");
    drop(s);

    // AuthSwitch reply + COM_QUERY in one segment: a MySQL 8 client proposes
    // caching_sha2_password and is switched to mysql_native_password.
    let mut s = connect_raw(addr);
    greeting_scramble(&mut s);
    let sha2_token = vec![0x5A; 32];
    let caps = RAW_CAPS | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
    write_packet(
        &mut s,
        1,
        &hello(caps, user, "caching_sha2_password", sha2_token),
    )
    .unwrap();
    let (seq, switch) = read_packet(&mut s).expect("the AuthSwitchRequest");
    let salt = switch_salt(&switch);
    let mut burst = frame(
        seq.wrapping_add(1),
        &native_token(password.as_bytes(), &salt),
    );
    burst.extend(frame(0, &com_query("SELECT 4208")));
    s.write_all(&burst).unwrap();
    let (_, ok) = read_packet(&mut s).expect("the reply to the AuthSwitch response");
    assert_eq!(
        ok.first(),
        Some(&0x00),
        "{who}: login OK after the switch: {ok:?}"
    );
    let reply = read_reply(&mut s).unwrap_or_else(|e| {
        panic!(
            "{who}: the COM_QUERY sent in the same write() as the AuthSwitch reply got no \
             answer within {READ_TIMEOUT:?}: {e}"
        )
    });
    assert_eq!(single_value(reply), "4208", "{who}");
}

/// A client that writes its first command in the same write() as its HandshakeResponse41,
/// or as its AuthSwitch reply, must get the login OK and then the command's answer, as MariaDB
/// itself answers (checked first). The proxy dropped whatever followed the login packet in its
/// read buffer, so the client waited forever.
#[test]
fn d07_pipelined_command_after_login_is_answered() {
    let b = backend_env();
    pipelined_logins(&b.addr(), &b.user, &b.password, "MariaDB directly");
    let proxy = Proxy::start(Mode::Fixed);
    let who = format!("ringgate on port {}", proxy.port);
    // A native-hash user: a caching_sha2 proposal is switched to mysql_native_password
    // (a `Password` user would get caching_sha2's fast auth instead).
    pipelined_logins(&proxy_addr(&proxy), HASHED_USER, HASHED_PASSWORD, &who);
}

// ---------------------------------------------------------------------------------------------
// Defect 8: pipelining deadlock
// ---------------------------------------------------------------------------------------------

/// Size of the pipelined result and of the pipelined INSERT: far more than a 16 KiB slot and
/// than what the loopback socket buffers absorb while nobody reads.
const PIPELINE_BYTES: usize = 4 << 20;

/// Logs in at `addr`, writes a PIPELINE_BYTES result query and a PIPELINE_BYTES INSERT of row
/// `id` into `table` in one burst (from a writer thread, since the write may block), and reads
/// both answers. Bounded: on a missing answer the socket is shut down so that the writer
/// returns. Ok(how long the answers took) or Err(what went wrong).
fn pipelined_burst(
    addr: &str,
    user: &str,
    password: &str,
    table: &str,
    id: u32,
) -> Result<Duration, String> {
    pipelined_burst_of(addr, user, password, table, id, PIPELINE_BYTES)
}

/// [`pipelined_burst`] with results and INSERTs of `bytes` (below 16 MiB: one packet each).
fn pipelined_burst_of(
    addr: &str,
    user: &str,
    password: &str,
    table: &str,
    id: u32,
    bytes: usize,
) -> Result<Duration, String> {
    let mut s = login_with_caps(addr, user, password, RAW_CAPS);
    // Bounds the whole exchange: a correct peer needs well under a second.
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut burst = frame(0, &com_query(&format!("SELECT REPEAT('r', {bytes})")));
    let insert = format!(
        "INSERT INTO {}.{table} VALUES ({id}, '{}')",
        testkit::env::TEST_DB,
        "i".repeat(bytes)
    );
    burst.extend(frame(0, &com_query(&insert)));
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let writer = std::thread::spawn(move || {
        let r = w.write_all(&burst);
        let _ = done_tx.send(r.map_err(|e| e.to_string()));
    });

    let started = Instant::now();
    let outcome = (|| -> Result<(), String> {
        let select = read_reply(&mut s).map_err(|e| format!("SELECT result: {e}"))?;
        match select {
            Reply::Rows(rows) if rows.len() == 1 => {
                let v = rows[0][0].as_deref().unwrap_or_default();
                if v.len() != bytes || v.iter().any(|&b| b != b'r') {
                    return Err(format!("SELECT returned {} wrong bytes", v.len()));
                }
            }
            other => return Err(format!("SELECT: unexpected reply {other:?}")),
        }
        match read_reply(&mut s).map_err(|e| format!("INSERT reply: {e}"))? {
            Reply::Ok(1) => Ok(()),
            other => Err(format!("INSERT: want OK (1 row), got {other:?}")),
        }
    })();
    let took = started.elapsed();
    if outcome.is_err() {
        let _ = s.shutdown(Shutdown::Both);
    }
    let wrote = done_rx.recv_timeout(Duration::from_secs(10));
    let _ = writer.join();
    outcome.map_err(|e| format!("{e} after {took:?} (the client's write: {wrote:?})"))?;
    match wrote {
        Ok(Ok(())) => Ok(took),
        other => Err(format!("the client's write: {other:?}")),
    }
}

/// A client pipelines a query with a large result and, behind it, a large INSERT, then reads.
/// MariaDB itself answers both (checked first). Through the proxy the server blocked writing
/// the result while the proxy blocked writing the INSERT to it (it kept reading the client
/// while a client packet was incomplete, and never read the server meanwhile): a deadlock.
/// Both answers must arrive, and the INSERT must be applied.
#[test]
fn d08_large_command_pipelined_behind_large_result_does_not_deadlock() {
    let table = format!("d08_pipelined_{}", std::process::id());
    let mut direct = direct_conn();
    direct
        .query_drop(format!(
            "CREATE TABLE {table} (id INT PRIMARY KEY, v LONGTEXT) ENGINE=InnoDB"
        ))
        .unwrap();
    let b = backend_env();
    let expected = pipelined_burst(&b.addr(), &b.user, &b.password, &table, 1);

    let proxy = Proxy::start(Mode::Fixed);
    let got = pipelined_burst(&proxy_addr(&proxy), APP_USER, APP_PASSWORD, &table, 2);
    let stored: Vec<(u32, u64)> = direct
        .query(format!("SELECT id, LENGTH(v) FROM {table} ORDER BY id"))
        .unwrap();
    let _ = direct.query_drop(format!("DROP TABLE {table}"));
    let direct_took = expected.unwrap_or_else(|e| panic!("MariaDB directly: {e}"));
    let took = got.unwrap_or_else(|e| {
        panic!(
            "through ringgate, a pipelined {} MiB INSERT behind a {} MiB result: {e}; the proxy \
             deadlocked\n--- metrics ---\n{}",
            PIPELINE_BYTES >> 20,
            PIPELINE_BYTES >> 20,
            proxy.metrics().dump()
        )
    });
    let n = PIPELINE_BYTES as u64;
    assert_eq!(
        stored,
        [(1, n), (2, n)],
        "both pipelined INSERTs are stored"
    );
    eprintln!("both pipelined responses read in {took:?} (directly: {direct_took:?})");
}

const RING_BYTES: usize = 12 << 20;

/// Defect 8 again with `--read-buffers ring` and a ring of 4 buffers: the result's bytes fill
/// every ring buffer while the client, still writing its INSERT, reads nothing, so the
/// client's receive finds the ring empty. Re-arming the receive alone would spin on ENOBUFS
/// forever (the buffers go back only when the client reads, and it reads only once its write
/// is done); the relay's read must be served from the connection's own buffer meanwhile.
#[test]
fn d08_on_a_tiny_ring_does_not_deadlock_either() {
    let table = format!("d08_ring_{}", std::process::id());
    let mut direct = direct_conn();
    direct
        .query_drop(format!(
            "CREATE TABLE {table} (id INT PRIMARY KEY, v LONGTEXT) ENGINE=InnoDB"
        ))
        .unwrap();
    let mut o = ProxyOpts::new(Mode::Ring);
    o.workers = 1;
    o.read_buffer_count = 4;
    let proxy = Proxy::start_with(o);
    // 12 MiB each way: more than the loopback socket buffers hold (a 4 MiB INSERT fits in
    // them, and the client's write would finish without the proxy reading at all).
    let got = pipelined_burst_of(
        &proxy_addr(&proxy),
        APP_USER,
        APP_PASSWORD,
        &table,
        1,
        RING_BYTES,
    );
    let stored: Vec<(u32, u64)> = direct
        .query(format!("SELECT id, LENGTH(v) FROM {table} ORDER BY id"))
        .unwrap();
    let _ = direct.query_drop(format!("DROP TABLE {table}"));
    let m = proxy.metrics();
    let took = got.unwrap_or_else(|e| {
        panic!(
            "on a 4-buffer ring, a pipelined INSERT behind a large result: {e}; the proxy \
             deadlocked\n--- metrics ---\n{}",
            m.dump()
        )
    });
    assert_eq!(stored, [(1, RING_BYTES as u64)], "the INSERT is stored");
    eprintln!(
        "ring: both pipelined responses read in {took:?}; {} ENOBUFS, {} reads from the \
         connection's own buffer",
        m.get("ringgate_read_buffer_ring_enobufs_total"),
        m.get("ringgate_read_buffer_heap_fallbacks_total")
    );
}

// ---------------------------------------------------------------------------------------------
// Defect 9: relay_stop judges a clean stop by pending_responses()
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
fn d09_quit_after_a_forwarded_half_header_discards_the_backend() {
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
    assert_eq!(single_value(query(&mut a, "SELECT 1")), "1");
    // COM_QUIT = 01 00 00 00 | 01, its header split after two bytes.
    a.write_all(&[0x01, 0x00]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    a.write_all(&[0x00, 0x00, 0x01]).unwrap();
    closed_within(&mut a, Duration::from_secs(5)).expect("the proxy closes after COM_QUIT");
    let quit_at = Instant::now();

    // The next client gets a connection without waiting for a stalled reset (read timeout
    // above --backend-connect-timeout, so that a stalled reset shows as a slow login).
    let mut b = connect_raw(&addr);
    b.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let scramble = greeting_scramble(&mut b);
    let token = native_token(APP_PASSWORD.as_bytes(), &scramble);
    write_packet(&mut b, 1, &hello(caps, APP_USER, NATIVE, token)).unwrap();
    let login = read_packet(&mut b);
    let login_took = quit_at.elapsed();
    let (_, ok) = login.unwrap_or_else(|e| panic!("the next client's login: {e}"));
    assert_eq!(ok.first(), Some(&0x00), "the next client's login: {ok:?}");
    assert_eq!(single_value(query(&mut b, "SELECT 2")), "2");
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
// Defect 10: CLIENT_IGNORE_SPACE never reaches the backend
// ---------------------------------------------------------------------------------------------

/// `sql_mode` contains IGNORE_SPACE, and `COUNT (*)` (a space before the parenthesis) parses.
fn ignore_space_behaviour(s: &mut TcpStream) -> (bool, bool) {
    let mode = single_value(query(s, "SELECT @@session.sql_mode"));
    let parses = match query(s, "SELECT COUNT (*) FROM (SELECT 1) t") {
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
fn d10_client_ignore_space_reaches_the_backend() {
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
        ids.push(single_value(query(&mut s, "SELECT CONNECTION_ID()")));
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
// Defect 6: no keepalive, no TCP_USER_TIMEOUT
// ---------------------------------------------------------------------------------------------

/// The keepalive settings the proxy is to use by default on both legs.
#[derive(Debug, PartialEq, Eq)]
struct Keepalive {
    keepalive: bool,
    idle: Duration,
    interval: Duration,
    count: u32,
    user_timeout: Option<Duration>,
}

const WANT_KEEPALIVE: Keepalive = Keepalive {
    keepalive: true,
    idle: Duration::from_secs(60),
    interval: Duration::from_secs(10),
    count: 6,
    user_timeout: Some(Duration::from_secs(120)),
};

/// Every TCP socket of `pid` that has a peer, duplicated into this process with
/// pidfd_getfd(2) (root, or the same user with ptrace rights): (local, peer, socket).
fn peer_sockets(pid: u32) -> Vec<(SocketAddr, SocketAddr, socket2::Socket)> {
    tcp_sockets(pid)
        .into_iter()
        .filter_map(|(l, p, s)| Some((l, p?, s)))
        .collect()
}

/// Every TCP socket of `pid`, as [`peer_sockets`], listeners (no peer) included.
fn tcp_sockets(pid: u32) -> Vec<(SocketAddr, Option<SocketAddr>, socket2::Socket)> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is passed.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    assert!(
        pidfd >= 0,
        "pidfd_open({pid}): {}",
        io::Error::last_os_error()
    );
    // SAFETY: pidfd is a fresh fd we own (checked above); OwnedFd closes it once.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("read /proc/PID/fd") {
        let Ok(e) = e else { continue };
        let link = std::fs::read_link(e.path()).unwrap_or_default();
        if !link.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(target) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_getfd takes two fds and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            // The fd was closed since we listed it.
            if err.raw_os_error() == Some(libc::EBADF) {
                continue;
            }
            panic!("pidfd_getfd({pid}, {target}): {err}");
        }
        // SAFETY: fd is a fresh duplicate that we own; the Socket closes it once.
        let sock = unsafe { socket2::Socket::from_raw_fd(fd as i32) };
        let Some(local) = sock.local_addr().ok().and_then(|a| a.as_socket()) else {
            continue;
        };
        let peer = sock.peer_addr().ok().and_then(|a| a.as_socket());
        out.push((local, peer, sock));
    }
    out
}

fn keepalive_of(sock: &socket2::Socket) -> Keepalive {
    Keepalive {
        keepalive: sock.keepalive().unwrap(),
        idle: sock.keepalive_time().unwrap(),
        interval: sock.keepalive_interval().unwrap(),
        count: sock.keepalive_retries().unwrap(),
        user_timeout: sock.tcp_user_timeout().unwrap(),
    }
}

/// The client and backend sockets of `proxy` (with a session open) whose settings differ from
/// `want`, one line each. With direct descriptors (the default) a client socket has no fd to
/// duplicate: the listeners are checked instead, whose options every accepted socket
/// inherits (src/sockopt.rs tests that kernel fact), and must also have TCP_NODELAY.
fn sockets_without(proxy: &Proxy, want: &Keepalive) -> Vec<String> {
    let mut conn = proxy.connect_app();
    assert_eq!(conn.query_first::<u32, _>("SELECT 1").unwrap(), Some(1));
    let backend_port = backend_env().port;
    let direct = proxy.metrics().get("ringgate_direct_descriptors_in_use") > 0.0;
    let all = tcp_sockets(proxy.pid());
    if direct {
        let listeners: Vec<_> = all
            .iter()
            .filter(|(l, p, _)| l.port() == proxy.port && p.is_none())
            .collect();
        assert!(!listeners.is_empty(), "no listener socket found");
        let mut wrong = Vec::new();
        for (local, _, sock) in listeners {
            let got = keepalive_of(sock);
            if got != *want || !sock.nodelay().unwrap() {
                wrong.push(format!(
                    "listener {local}: {got:?}, nodelay {:?}",
                    sock.nodelay()
                ));
            }
        }
        if !wrong.is_empty() {
            return wrong;
        }
    }
    let sockets = peer_sockets(proxy.pid());
    let clients: Vec<_> = sockets
        .iter()
        .filter(|(l, _, _)| l.port() == proxy.port)
        .collect();
    let backends: Vec<_> = sockets
        .iter()
        .filter(|(_, p, _)| p.port() == backend_port)
        .collect();
    assert!(
        (direct || !clients.is_empty()) && !backends.is_empty(),
        "want at least one client and one backend socket, found {} and {}",
        clients.len(),
        backends.len()
    );
    let mut wrong = Vec::new();
    for (what, list) in [("client", &clients), ("backend", &backends)] {
        for (local, peer, sock) in list.iter() {
            let got = keepalive_of(sock);
            if got != *want {
                wrong.push(format!("{what} socket {local} -> {peer}: {got:?}"));
            }
        }
    }
    drop(conn);
    wrong
}

/// A client or server host that vanishes without a FIN is only noticed with TCP keepalive and
/// TCP_USER_TIMEOUT. Both legs (the accepted client socket and every backend socket) must have
/// SO_KEEPALIVE on, idle 60 s, interval 10 s, 6 probes and TCP_USER_TIMEOUT 60 s by default,
/// and the `--tcp-keepalive-*` / `--tcp-user-timeout` flags must reach both legs. Read from the
/// proxy's own sockets, duplicated with pidfd_getfd(2).
#[test]
fn d06_client_and_backend_sockets_have_keepalive_and_user_timeout() {
    let proxy = Proxy::start(Mode::Fixed);
    let wrong = sockets_without(&proxy, &WANT_KEEPALIVE);
    assert!(
        wrong.is_empty(),
        "want {WANT_KEEPALIVE:?} on every client and backend socket by default, got:\n  {}",
        wrong.join("\n  ")
    );
    drop(proxy);

    // Plain client fds: set on each accepted socket.
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.extra_args = ["--direct-descriptors", "off"].map(String::from).to_vec();
    let proxy = Proxy::start_with(o);
    let wrong = sockets_without(&proxy, &WANT_KEEPALIVE);
    assert!(
        wrong.is_empty(),
        "want {WANT_KEEPALIVE:?} on every plain client socket and backend socket, got:\n  {}",
        wrong.join("\n  ")
    );
    drop(proxy);

    let mut o = ProxyOpts::new(Mode::Fixed);
    o.extra_args = [
        "--tcp-keepalive-idle=20s",
        "--tcp-keepalive-interval=5s",
        "--tcp-keepalive-count=3",
        "--tcp-user-timeout=15s",
    ]
    .map(String::from)
    .to_vec();
    let proxy = Proxy::start_with(o);
    let want = Keepalive {
        keepalive: true,
        idle: Duration::from_secs(20),
        interval: Duration::from_secs(5),
        count: 3,
        user_timeout: Some(Duration::from_secs(15)),
    };
    let wrong = sockets_without(&proxy, &want);
    assert!(
        wrong.is_empty(),
        "want {want:?} from the flags on every client and backend socket, got:\n  {}",
        wrong.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 11, item 4: state that COM_RESET_CONNECTION does not restore
// ---------------------------------------------------------------------------------------------

/// Client A turns multi-statements on with COM_SET_OPTION and leaves; client B, which never
/// negotiated CLIENT_MULTI_STATEMENTS, must still get MariaDB's 1064 for a stacked query on
/// the one pooled connection (`--workers 1`, one backend connection at most). COM_RESET_CONNECTION
/// keeps the option, so the proxy must not reuse that connection.
#[test]
fn s01_com_set_option_does_not_reach_the_next_client() {
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
        matches!(query(&mut a, stacked), Reply::Err(1064, _)),
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
        matches!(query(&mut a, stacked), Reply::Rows(_)),
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
    match query(&mut b, stacked) {
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
fn s02_session_state_does_not_reach_the_next_client() {
    let caps = RAW_CAPS;
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.backend_pool_size = 1;
    o.backend_max_connections = 1;
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let addr = proxy_addr(&proxy);

    let mut a = login_with_caps(&addr, APP_USER, APP_PASSWORD, caps);
    let thread_a = single_value(query(&mut a, "SELECT CONNECTION_ID()"));
    for sql in [
        "SET @leak = 42",
        "SET SESSION wait_timeout = 77",
        "CREATE TEMPORARY TABLE ringgate_test.leak_tmp (a INT)",
        "PREPARE leak_stmt FROM 'SELECT 1'",
    ] {
        assert!(
            matches!(query(&mut a, sql), Reply::Ok(_)),
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
        single_value(query(&mut b, "SELECT CONNECTION_ID()")),
        thread_a,
        "B must reuse A's server connection, or this test proves nothing"
    );
    assert_eq!(single_value(query(&mut b, "SELECT @leak")), "NULL");
    assert_ne!(
        single_value(query(&mut b, "SELECT @@session.wait_timeout")),
        "77"
    );
    assert!(matches!(
        query(&mut b, "SELECT * FROM ringgate_test.leak_tmp"),
        Reply::Err(1146, _)
    ));
    assert!(matches!(
        query(&mut b, "EXECUTE leak_stmt"),
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

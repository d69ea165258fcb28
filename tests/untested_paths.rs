//! Paths the docs promise that no other suite exercised (issue 10, "Untested paths"): the
//! fixed-buffer pool running dry and falling back to heap buffers, the backend connection
//! limit (`--backend-wait-timeout`, eviction of another key's idle connection,
//! `--backend-idle-timeout`), a client that negotiates CLIENT_DEPRECATE_EOF, and a wrong password
//! after an auth switch. LOCAL INFILE is in tests/python/test_paths.py (PyMySQL sends the file).
//! Every test runs the real `ringgate` binary in front of the sandbox MariaDB and ends with a
//! leak check; what each proves is listed in docs/reliability.md.

use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mysql::consts::CapabilityFlags;
use mysql::prelude::Queryable;
use mysql::Conn;
use wire::auth::native_token;
use wire::constants::*;
use wire::handshake::{build_handshake_response, parse_greeting, HandshakeResponse};
use testkit::both_modes;
use testkit::env::{backend_env, APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER};
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::mysql_client::direct_conn;
use testkit::prometheus::Metrics;
use testkit::proxy::{quick_opts, wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{closed_within, read_packet, write_packet, RAW_CAPS};
use testkit::tail;

const IDLE: &str = r#"ringgate_backend_connections{state="idle"}"#;
const BUSY: &str = r#"ringgate_backend_connections{state="busy"}"#;

fn discarded(m: &Metrics) -> f64 {
    m.get("ringgate_backend_discarded_total")
}

// ---------------------------------------------------------------------------------------------
// Fixed-buffer pool exhausted: heap fallback, and every slot comes back
// ---------------------------------------------------------------------------------------------

/// One worker with 4 fixed slots and no warm pool: 8 sessions held at once need 16 read
/// buffers (a client's and its backend's), so 12 connections get heap buffers. Every session
/// still works, large results and large commands included (they stream through whichever
/// buffer the connection got). Once the sessions leave and the idle backend connections are
/// closed (--backend-idle-timeout 1s, pool size 0), all 4 slots are free again and nothing is
/// in use: the accounting holds even after fallbacks, which the generic leak check skips.
#[test]
fn fixed_pool_exhaustion_falls_back_to_heap_and_every_slot_comes_back() {
    const SESSIONS: usize = 8;
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.read_buffer_count = 4;
    o.backend_pool_size = 0;
    // Idle clients would give their slots back between commands (the default): hold them,
    // so that 8 held sessions really need 16 buffers at once.
    o.extra_args = vec![
        "--backend-idle-timeout".into(),
        "1s".into(),
        "--hold-idle-slots".into(),
    ];
    let mut proxy = Proxy::start_with(o);
    let m = proxy.metrics();
    let total = m.get(r#"ringgate_read_buffers_total{mode="fixed"}"#);
    assert_eq!(total, 4.0, "4 registered slots");
    let fallbacks0 = m.get("ringgate_read_buffer_heap_fallbacks_total");
    let conns0 = m.get("ringgate_client_connections_total");

    // All sessions connect and query, then wait for each other while the metrics are read,
    // then query again (on heap buffers or slots alike) and leave.
    let held = Arc::new(Barrier::new(SESSIONS + 1));
    let checked = Arc::new(Barrier::new(SESSIONS + 1));
    let opts = quick_opts(&proxy);
    let handles: Vec<_> = (0..SESSIONS)
        .map(|n| {
            let (held, checked, opts) = (held.clone(), checked.clone(), opts.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let run = |c: &mut Conn| -> Result<(), String> {
                    let big: Option<u64> = c
                        .query_first("SELECT LENGTH(REPEAT('x', 300000))")
                        .map_err(|e| e.to_string())?;
                    let row: Option<String> = c
                        .query_first("SELECT REPEAT('y', 300000)")
                        .map_err(|e| e.to_string())?;
                    let sent = format!("SELECT LENGTH('{}')", "z".repeat(200_000));
                    let echoed: Option<u64> = c.query_first(sent).map_err(|e| e.to_string())?;
                    let rows: Vec<u64> = c
                        .query("SELECT seq FROM seq_1_to_2000")
                        .map_err(|e| e.to_string())?;
                    let ok = big == Some(300_000)
                        && row.is_some_and(|r| r.len() == 300_000)
                        && echoed == Some(200_000)
                        && rows.len() == 2000;
                    ok.then_some(())
                        .ok_or_else(|| format!("session {n}: wrong results"))
                };
                let conn = Conn::new(opts.db_name(Some(testkit::env::TEST_DB)));
                let mut conn = match conn {
                    Ok(c) => c,
                    Err(e) => {
                        held.wait();
                        checked.wait();
                        return Err(format!("session {n}: connect: {e}"));
                    }
                };
                let first = run(&mut conn);
                held.wait();
                checked.wait();
                first?;
                run(&mut conn)
            })
        })
        .collect();
    held.wait();
    let m = proxy.metrics();
    checked.wait();
    let errors: Vec<String> = handles
        .into_iter()
        .filter_map(|h| h.join().expect("session thread").err())
        .collect();
    assert!(
        errors.is_empty(),
        "sessions on heap-fallback buffers failed: {errors:?}\n--- stderr ---\n{}",
        tail(&proxy.stderr(), 30)
    );
    let in_use = m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#)
        + m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#);
    let fallbacks = m.get("ringgate_read_buffer_heap_fallbacks_total") - fallbacks0;
    eprintln!(
        "with {SESSIONS} sessions held: {in_use} buffers in use, {} slots free, {fallbacks} heap fallbacks",
        m.get("ringgate_read_buffers_free")
    );
    assert_eq!(m.get("ringgate_client_connections"), SESSIONS as f64);
    assert_eq!(
        m.get("ringgate_read_buffers_free"),
        0.0,
        "every slot is taken while {SESSIONS} sessions are held"
    );
    assert!(
        in_use >= (2 * SESSIONS) as f64,
        "a client and a backend buffer per session: {in_use} in use\n{}",
        m.dump()
    );
    assert!(
        fallbacks >= in_use - total,
        "{fallbacks} heap fallbacks, want at least {} (buffers in use beyond the 4 slots)",
        in_use - total
    );

    // At rest: no session, no backend connection, every slot back.
    wait_until(
        &proxy,
        Duration::from_secs(10),
        "sessions gone, idle backends closed, all 4 slots free",
        || {
            let m = proxy.metrics();
            m.get("ringgate_client_connections") == 0.0
                && m.get(IDLE) + m.get(BUSY) == 0.0
                && m.get("ringgate_read_buffers_free") == total
                && m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#) == 0.0
                && m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#) == 0.0
        },
    );
    proxy.assert_settled(conns0, SESSIONS as u64);
    assert!(
        !proxy.stderr().contains("leaked"),
        "{}",
        tail(&proxy.stderr(), 30)
    );
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

// ---------------------------------------------------------------------------------------------
// CLIENT_DEPRECATE_EOF
// ---------------------------------------------------------------------------------------------

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

fn connect_to(addr: &str) -> TcpStream {
    let addr: SocketAddr = addr.parse().expect("socket address");
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// The packets of one response to a text query, read raw.
fn response_packets(s: &mut TcpStream, sql: &str) -> Vec<Vec<u8>> {
    let mut q = vec![0x03];
    q.extend_from_slice(sql.as_bytes());
    write_packet(s, 0, &q).unwrap();
    let mut out = Vec::new();
    loop {
        let (_, p) = read_packet(s).expect("a response packet");
        let end = match p.first() {
            Some(0x00) | Some(0xFF) if out.is_empty() => true,
            // With DEPRECATE_EOF the only 0xFE packet of a small result set is its final OK.
            Some(0xFE) if p.len() < 0xFF_FFFF => true,
            _ => false,
        };
        out.push(p);
        if end {
            return out;
        }
    }
}

/// A raw client that negotiates CLIENT_DEPRECATE_EOF gets result sets in that framing: no EOF
/// after the column definitions, and an OK packet with a 0xFE header (7+ bytes, not a 5-byte
/// EOF) at the end. Proves the flag reaches the backend connection.
fn deprecate_eof_raw(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let base = baseline(&mut proxy);
    let mut s = connect_to(&format!("127.0.0.1:{}", proxy.port));
    let (_, g) = read_packet(&mut s).expect("greeting");
    let greeting = parse_greeting(&g).unwrap();
    assert!(
        greeting.capabilities & CLIENT_DEPRECATE_EOF != 0,
        "ringgate offers CLIENT_DEPRECATE_EOF"
    );
    let token = native_token(APP_PASSWORD.as_bytes(), &greeting.scramble);
    let caps = RAW_CAPS | CLIENT_DEPRECATE_EOF;
    write_packet(
        &mut s,
        1,
        &hello(caps, APP_USER, "mysql_native_password", token),
    )
    .unwrap();
    let (_, ok) = read_packet(&mut s).expect("login reply");
    assert_eq!(ok.first(), Some(&0x00), "login: {ok:?}");
    let packets = response_packets(&mut s, "SELECT 1 AS a UNION ALL SELECT 2");
    // column count, one column definition, two rows, the final OK.
    assert_eq!(packets.len(), 5, "{packets:?}");
    assert_eq!(packets[0], [1], "one column");
    assert_eq!(
        packets[2], b"\x011",
        "the first row right after the definition"
    );
    assert_eq!(packets[3], b"\x012");
    let last = &packets[4];
    assert!(
        last[0] == 0xFE && last.len() >= 7,
        "the result ends with an OK packet (0xFE header), not a 5-byte EOF: {last:?}"
    );
    // An empty result set: column count, definition, final OK.
    assert_eq!(
        response_packets(&mut s, "SELECT 1 FROM DUAL WHERE 1 = 0").len(),
        3
    );
    write_packet(&mut s, 0, &[0x01]).unwrap();
    drop(s);
    assert_no_leaks(&mut proxy, &base, 1);
}
both_modes!(deprecate_eof_framing_reaches_the_backend, deprecate_eof_raw);

/// A length-encoded integer at the start of `p`: (value, bytes used).
fn lenenc(p: &[u8]) -> (u64, usize) {
    match p[0] {
        n @ 0..=0xFA => (n as u64, 1),
        0xFC => (u16::from_le_bytes([p[1], p[2]]) as u64, 3),
        0xFD => (p[1] as u64 | (p[2] as u64) << 8 | (p[3] as u64) << 16, 4),
        _ => (u64::from_le_bytes(p[1..9].try_into().unwrap()), 9),
    }
}

/// A value as the tests compare it: NULL, or its text (binary integers are printed).
type Value = Option<String>;

/// One result of a command: an OK (affected rows), an ERR (code) or a result set's rows.
#[derive(Debug, PartialEq)]
enum Outcome {
    Ok(u64),
    Err(u16),
    Rows(Vec<Vec<Value>>),
}

const SERVER_MORE_RESULTS: u16 = 0x0008;

/// A raw client that negotiated CLIENT_DEPRECATE_EOF: it expects no EOF after column (or
/// parameter) definitions and an OK packet with a 0xFE header at the end of every result set.
/// Any framing mistake by the proxy shows as a wrong value, a wrong row count or a timeout.
struct DeprecateEofClient {
    s: TcpStream,
}

impl DeprecateEofClient {
    fn login(port: u16) -> DeprecateEofClient {
        let mut s = connect_to(&format!("127.0.0.1:{port}"));
        let (_, g) = read_packet(&mut s).expect("greeting");
        let greeting = parse_greeting(&g).unwrap();
        assert!(
            greeting.capabilities & CLIENT_DEPRECATE_EOF != 0,
            "ringgate offers CLIENT_DEPRECATE_EOF"
        );
        let caps = RAW_CAPS | CLIENT_PS_MULTI_RESULTS | CLIENT_DEPRECATE_EOF;
        let hello = build_handshake_response(&HandshakeResponse {
            capabilities: caps,
            max_packet_size: 1 << 30,
            charset: UTF8MB4_GENERAL_CI,
            username: APP_USER.into(),
            auth_response: native_token(APP_PASSWORD.as_bytes(), &greeting.scramble),
            database: Some(testkit::env::TEST_DB.into()),
            auth_plugin: Some("mysql_native_password".into()),
            connect_attrs: vec![],
        });
        write_packet(&mut s, 1, &hello).unwrap();
        let (_, ok) = read_packet(&mut s).expect("login reply");
        assert_eq!(ok.first(), Some(&0x00), "login: {ok:?}");
        DeprecateEofClient { s }
    }

    fn command(&mut self, cmd: u8, body: &[u8]) {
        let mut p = vec![cmd];
        p.extend_from_slice(body);
        write_packet(&mut self.s, 0, &p).expect("send a command");
    }

    fn packet(&mut self) -> Vec<u8> {
        read_packet(&mut self.s).expect("a response packet").1
    }

    /// Status flags of an OK payload (0x00 or 0xFE header).
    fn ok_status(p: &[u8]) -> (u64, u16) {
        let (affected, a) = lenenc(&p[1..]);
        let (_, b) = lenenc(&p[1 + a..]);
        let at = 1 + a + b;
        (affected, u16::from_le_bytes([p[at], p[at + 1]]))
    }

    /// The column types of `n` column definitions.
    fn column_types(&mut self, n: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                let d = self.packet();
                // catalog, schema, table, org_table, name, org_name (lenenc strings), then
                // 0x0c, charset (2), length (4), type (1).
                let mut pos = 0;
                for _ in 0..6 {
                    let (len, used) = lenenc(&d[pos..]);
                    pos += used + len as usize;
                }
                d[pos + 1 + 2 + 4]
            })
            .collect()
    }

    /// Every result of one response (following SERVER_MORE_RESULTS_EXISTS).
    fn results(&mut self, binary: bool) -> Vec<Outcome> {
        let mut out = Vec::new();
        loop {
            let first = self.packet();
            let more = match first[0] {
                0x00 => {
                    let (affected, status) = Self::ok_status(&first);
                    out.push(Outcome::Ok(affected));
                    status & SERVER_MORE_RESULTS != 0
                }
                0xFF => {
                    out.push(Outcome::Err(u16::from_le_bytes([first[1], first[2]])));
                    false
                }
                _ => {
                    let (n, _) = lenenc(&first);
                    let types = self.column_types(n);
                    let mut rows = Vec::new();
                    let status = loop {
                        let p = self.packet();
                        if p[0] == 0xFE && p.len() < 0xFF_FFFF {
                            assert!(
                                p.len() >= 7,
                                "a 5-byte EOF where CLIENT_DEPRECATE_EOF wants an OK: {p:?}"
                            );
                            break Self::ok_status(&p).1;
                        }
                        assert_ne!(p[0], 0xFF, "ERR inside a result set: {p:?}");
                        rows.push(if binary {
                            binary_row(&p, &types)
                        } else {
                            text_row(&p)
                        });
                    };
                    out.push(Outcome::Rows(rows));
                    status & SERVER_MORE_RESULTS != 0
                }
            };
            if !more {
                return out;
            }
        }
    }

    fn query(&mut self, sql: &str) -> Vec<Outcome> {
        self.command(0x03, sql.as_bytes());
        self.results(false)
    }

    /// COM_STMT_PREPARE: (statement id, parameter count).
    fn prepare(&mut self, sql: &str) -> (u32, u16) {
        self.command(0x16, sql.as_bytes());
        let p = self.packet();
        assert_eq!(p[0], 0x00, "prepare {sql:?}: {p:?}");
        let id = u32::from_le_bytes(p[1..5].try_into().unwrap());
        let columns = u16::from_le_bytes([p[5], p[6]]);
        let params = u16::from_le_bytes([p[7], p[8]]);
        // The definitions, with no EOF after either group.
        self.column_types(params as u64 + columns as u64);
        (id, params)
    }

    /// COM_STMT_EXECUTE with BIGINT parameters.
    fn execute(&mut self, (id, params): (u32, u16), args: &[i64]) -> Vec<Outcome> {
        assert_eq!(args.len(), params as usize);
        let mut b = id.to_le_bytes().to_vec();
        b.push(0); // no cursor
        b.extend_from_slice(&1u32.to_le_bytes());
        if !args.is_empty() {
            b.extend(std::iter::repeat_n(0u8, args.len().div_ceil(8))); // no NULLs
            b.push(1); // types follow
            for _ in args {
                b.extend_from_slice(&[0x08, 0x00]); // MYSQL_TYPE_LONGLONG, signed
            }
            for a in args {
                b.extend_from_slice(&a.to_le_bytes());
            }
        }
        self.command(0x17, &b);
        self.results(true)
    }

    /// COM_STMT_EXECUTE with a read-only cursor (no parameters): the column types. The
    /// metadata ends with an OK (0xFE) whose status has SERVER_STATUS_CURSOR_EXISTS.
    fn execute_cursor(&mut self, id: u32) -> Vec<u8> {
        let mut b = id.to_le_bytes().to_vec();
        b.push(1); // CURSOR_TYPE_READ_ONLY
        b.extend_from_slice(&1u32.to_le_bytes());
        self.command(0x17, &b);
        let (n, _) = lenenc(&self.packet());
        let types = self.column_types(n);
        let end = self.packet();
        assert!(
            end[0] == 0xFE && end.len() >= 7,
            "cursor metadata end: {end:?}"
        );
        assert_ne!(
            Self::ok_status(&end).1 & 0x0040,
            0,
            "SERVER_STATUS_CURSOR_EXISTS"
        );
        types
    }

    /// COM_STMT_FETCH of up to `n` rows: (rows, SERVER_STATUS_LAST_ROW_SENT).
    fn fetch(&mut self, id: u32, n: u32, types: &[u8]) -> (Vec<Vec<Value>>, bool) {
        let mut b = id.to_le_bytes().to_vec();
        b.extend_from_slice(&n.to_le_bytes());
        self.command(0x1C, &b);
        let mut rows = Vec::new();
        loop {
            let p = self.packet();
            if p[0] == 0xFE && p.len() < 0xFF_FFFF {
                assert!(p.len() >= 7, "a 5-byte EOF after fetched rows: {p:?}");
                return (rows, Self::ok_status(&p).1 & 0x0080 != 0);
            }
            rows.push(binary_row(&p, types));
        }
    }

    fn close_statement(&mut self, id: u32) {
        self.command(0x19, &id.to_le_bytes()); // no response
    }
}

/// Values of one text-protocol row.
fn text_row(p: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < p.len() {
        if p[pos] == 0xFB {
            out.push(None);
            pos += 1;
            continue;
        }
        let (len, used) = lenenc(&p[pos..]);
        let start = pos + used;
        out.push(Some(
            String::from_utf8_lossy(&p[start..start + len as usize]).into_owned(),
        ));
        pos = start + len as usize;
    }
    out
}

/// Values of one binary-protocol row (integers and length-encoded types only).
fn binary_row(p: &[u8], types: &[u8]) -> Vec<Value> {
    assert_eq!(p[0], 0x00, "binary row header");
    let bitmap = (types.len() + 7 + 2) / 8;
    let nulls = &p[1..1 + bitmap];
    let mut pos = 1 + bitmap;
    let mut out = Vec::new();
    for (i, &t) in types.iter().enumerate() {
        let bit = i + 2;
        if nulls[bit / 8] & (1 << (bit % 8)) != 0 {
            out.push(None);
            continue;
        }
        let width = match t {
            0x01 => 1,
            0x02 | 0x0D => 2,
            0x03 | 0x09 => 4,
            0x08 => 8,
            _ => 0,
        };
        if width > 0 {
            let mut v = [0u8; 8];
            v[..width].copy_from_slice(&p[pos..pos + width]);
            out.push(Some(i64::from_le_bytes(v).to_string()));
            pos += width;
        } else {
            let (len, used) = lenenc(&p[pos..]);
            let start = pos + used;
            out.push(Some(
                String::from_utf8_lossy(&p[start..start + len as usize]).into_owned(),
            ));
            pos = start + len as usize;
        }
    }
    out
}

fn v(s: &str) -> Value {
    Some(s.to_string())
}

/// Text result sets (many rows, NULLs, empty, a 300 KB row), prepared statements (parameter and
/// column definitions without EOFs, binary rows, an INSERT, an empty result, a cursor fetched
/// with COM_STMT_FETCH) and multi-results
/// (multi-statements and a stored procedure) through the proxy for a client that negotiated
/// CLIENT_DEPRECATE_EOF. No integration client does: the mariadb CLI and PyMySQL never ask for
/// it, mysql-connector-python's pure-Python protocol does not implement it, and the `mysql`
/// crate (25.0) asks for it when told to but then skips the first row of every text result
/// set (it drops one packet after the column definitions unconditionally).
fn deprecate_eof_client(mode: Mode) {
    let name = format!("deof_{}_{}", mode.as_str(), std::process::id());
    let mut direct = direct_conn();
    direct
        .query_drop(format!(
            "CREATE TABLE {name} (id BIGINT PRIMARY KEY, v VARCHAR(64));
             CREATE PROCEDURE {name}_p() BEGIN SELECT 1 AS a; SELECT 'x' AS b, NULL AS c; END"
        ))
        .unwrap();
    let mut proxy = Proxy::start(mode);
    let base = baseline(&mut proxy);
    let mut c = DeprecateEofClient::login(proxy.port);

    // Text protocol.
    let r = c.query("SELECT seq, IF(seq % 2, NULL, REPEAT('a', seq)) FROM seq_1_to_1000");
    let [Outcome::Rows(rows)] = &r[..] else {
        panic!("one result set: {r:?}")
    };
    assert_eq!(rows.len(), 1000);
    assert_eq!(rows[0], [v("1"), None]);
    assert_eq!(rows[999], [v("1000"), Some("a".repeat(1000))]);
    assert_eq!(
        c.query("SELECT 1 FROM DUAL WHERE 1 = 0"),
        [Outcome::Rows(vec![])]
    );
    let r = c.query("SELECT REPEAT('z', 300000), 7");
    assert_eq!(
        r,
        [Outcome::Rows(vec![vec![Some("z".repeat(300_000)), v("7")]])]
    );
    assert_eq!(
        c.query(&format!("INSERT INTO {name} VALUES (1, 'one'), (2, 'two')")),
        [Outcome::Ok(2)]
    );
    assert_eq!(c.query("SELECT * FROM no_such_table"), [Outcome::Err(1146)]);

    // Prepared statements.
    let stmt = c.prepare(&format!(
        "SELECT id, v FROM {name} WHERE id >= ? ORDER BY id"
    ));
    assert_eq!(stmt.1, 1);
    assert_eq!(
        c.execute(stmt, &[1]),
        [Outcome::Rows(vec![
            vec![v("1"), v("one")],
            vec![v("2"), v("two")]
        ])]
    );
    assert_eq!(c.execute(stmt, &[3]), [Outcome::Rows(vec![])]);
    c.close_statement(stmt.0);
    let ins = c.prepare(&format!(
        "INSERT INTO {name} (id, v) VALUES (?, CONCAT('n', ?))"
    ));
    assert_eq!(c.execute(ins, &[3, 3]), [Outcome::Ok(1)]);
    c.close_statement(ins.0);
    let count = c.prepare(&format!("SELECT COUNT(*), MAX(id) FROM {name}"));
    assert_eq!(
        c.execute(count, &[]),
        [Outcome::Rows(vec![vec![v("3"), v("3")]])]
    );
    c.close_statement(count.0);

    // A read-only cursor, fetched in two steps.
    let seq = c.prepare("SELECT seq FROM seq_1_to_5");
    let types = c.execute_cursor(seq.0);
    let one = |n: &str| vec![v(n)];
    assert_eq!(
        c.fetch(seq.0, 3, &types),
        (vec![one("1"), one("2"), one("3")], false)
    );
    assert_eq!(c.fetch(seq.0, 3, &types), (vec![one("4"), one("5")], true));
    c.close_statement(seq.0);

    // Multi-statements and a procedure's multi-results.
    assert_eq!(
        c.query("SELECT 1; SELECT 2, 3; DO 0; SELECT 'end'"),
        [
            Outcome::Rows(vec![vec![v("1")]]),
            Outcome::Rows(vec![vec![v("2"), v("3")]]),
            Outcome::Ok(0),
            Outcome::Rows(vec![vec![v("end")]]),
        ]
    );
    assert_eq!(
        c.query(&format!("CALL {name}_p()")),
        [
            Outcome::Rows(vec![vec![v("1")]]),
            Outcome::Rows(vec![vec![v("x"), None]]),
            Outcome::Ok(0),
        ]
    );
    let call = c.prepare(&format!("CALL {name}_p()"));
    assert_eq!(
        c.execute(call, &[]),
        [
            Outcome::Rows(vec![vec![v("1")]]),
            Outcome::Rows(vec![vec![v("x"), None]]),
            Outcome::Ok(0),
        ]
    );
    assert_eq!(
        c.query("SELECT 42"),
        [Outcome::Rows(vec![vec![v("42")]])],
        "the session is still in step"
    );
    c.command(0x01, &[]); // COM_QUIT
    drop(c);

    let _ = direct.query_drop(format!("DROP PROCEDURE {name}_p; DROP TABLE {name}"));
    assert_no_leaks(&mut proxy, &base, 1);
}
both_modes!(deprecate_eof_client_through_the_proxy, deprecate_eof_client);

// ---------------------------------------------------------------------------------------------
// Wrong password after an auth switch
// ---------------------------------------------------------------------------------------------

/// Proposes caching_sha2_password, follows the AuthSwitchRequest to mysql_native_password and
/// answers it with `password`'s token. Returns the final packet's (sequence id, payload).
fn login_through_switch(addr: &str, user: &str, password: &str) -> (u8, Vec<u8>) {
    let mut s = connect_to(addr);
    let (_, g) = read_packet(&mut s).expect("greeting");
    parse_greeting(&g).expect("parse greeting");
    let caps = RAW_CAPS | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
    write_packet(
        &mut s,
        1,
        &hello(caps, user, "caching_sha2_password", vec![0x5A; 32]),
    )
    .unwrap();
    let (seq, switch) = read_packet(&mut s).expect("AuthSwitchRequest");
    if switch.first() == Some(&0xFF) {
        // Refused before any switch: an unknown name answers as the user
        // its decoy copies, which may be one that no switch can serve.
        closed_within(&mut s, Duration::from_secs(5)).expect("closed after the ERR");
        return (seq, switch);
    }
    assert_eq!(
        switch.first(),
        Some(&0xFE),
        "{addr}: want an AuthSwitchRequest"
    );
    let body = &switch[1..];
    let nul = body.iter().position(|&b| b == 0).expect("plugin name");
    assert_eq!(&body[..nul], b"mysql_native_password");
    let data = &body[nul + 1..];
    let salt = data.strip_suffix(&[0]).unwrap_or(data);
    write_packet(
        &mut s,
        seq.wrapping_add(1),
        &native_token(password.as_bytes(), salt),
    )
    .unwrap();
    let reply = read_packet(&mut s).expect("reply to the switch response");
    if reply.1.first() == Some(&0xFF) {
        closed_within(&mut s, Duration::from_secs(5)).expect("closed after the ERR");
    }
    reply
}

/// (code, SQL state, message) of an ERR payload.
fn parse_err(p: &[u8]) -> (u16, String, String) {
    assert_eq!(p.first(), Some(&0xFF), "want an ERR packet: {p:?}");
    assert_eq!(p.get(3), Some(&b'#'), "an SQL state marker: {p:?}");
    (
        u16::from_le_bytes([p[1], p[2]]),
        String::from_utf8_lossy(&p[4..9]).into_owned(),
        String::from_utf8_lossy(&p[9..]).into_owned(),
    )
}

/// A MySQL 8 client switched to mysql_native_password (a user with only a native hash, which
/// caching_sha2 cannot check) that then sends a wrong password gets
/// ERR 1045 / 28000 with MySQL's wording, and the same sequence id, as from the server itself
/// (checked against the sandbox with its own account); the right password after a switch
/// logs in.
#[test]
fn wrong_password_after_auth_switch_gets_err_1045() {
    let b = backend_env();
    let (server_seq, server_err) = login_through_switch(&b.addr(), &b.user, "wrong-password");
    let (code, state, msg) = parse_err(&server_err);
    assert_eq!((code, state.as_str()), (1045, "28000"), "the server: {msg}");
    let expected = msg.replace(&format!("'{}'@", b.user), &format!("'{HASHED_USER}'@"));
    assert_eq!(
        expected,
        format!("Access denied for user '{HASHED_USER}'@'127.0.0.1' (using password: YES)")
    );

    let mut proxy = Proxy::start(Mode::Fixed);
    let base = baseline(&mut proxy);
    let rejected0 = proxy
        .metrics()
        .get(r#"ringgate_client_rejected_total{reason="auth"}"#);
    let addr = format!("127.0.0.1:{}", proxy.port);
    let (seq, err) = login_through_switch(&addr, HASHED_USER, "wrong-password");
    assert_eq!(
        parse_err(&err),
        (1045, "28000".to_string(), expected),
        "ringgate's answer to a wrong password after an auth switch"
    );
    assert_eq!(seq, server_seq, "the ERR's sequence id, as the server's");
    let (_, ok) = login_through_switch(&addr, HASHED_USER, HASHED_PASSWORD);
    assert_eq!(ok.first(), Some(&0x00), "the right password after a switch");
    assert_eq!(
        proxy
            .metrics()
            .get(r#"ringgate_client_rejected_total{reason="auth"}"#),
        rejected0 + 1.0
    );
    // An unknown user gets the same message shape, after a switch or before it (as the
    // user its decoy copies would).
    let (_, err) = login_through_switch(&addr, "nobody", "x");
    assert_eq!(
        parse_err(&err).2,
        "Access denied for user 'nobody'@'127.0.0.1' (using password: YES)"
    );
    assert_no_leaks(&mut proxy, &base, 3);
}

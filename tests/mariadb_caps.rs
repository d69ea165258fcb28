//! In front of MariaDB, ringgate presents as MariaDB: its greeting clears
//! CLIENT_MYSQL and offers the backend's extended capabilities, each client gets the ones it
//! chose negotiated on its backend connection (they are in the pool key), and the response
//! tracker follows what they change. Every test runs the real `ringgate` binary in front of the
//! sandbox MariaDB 10.11 and compares what a client sees through it with what the same client
//! sees direct.

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use testkit::env::{backend_env, find_in_path, APP_PASSWORD, APP_USER};
use testkit::mysql_client::direct_conn;
use testkit::proxy::{Mode, Proxy, ProxyOpts};
use testkit::rawclient::{raw_connect, read_packet, write_packet, QUERY_CAPS};
use wire::auth::native_token;
use wire::constants::*;
use wire::handshake::{
    build_handshake_response, parse_greeting, set_response_ext_capabilities, Greeting,
    HandshakeResponse,
};

/// A 4.1 client with classic EOFs (DEPRECATE_EOF is added per test).
const CAPS: u32 = QUERY_CAPS;

/// One proxy worker and one pooled connection: consecutive clients share it unless their
/// pool keys differ.
fn one_connection_proxy() -> Proxy {
    Proxy::start_with(ProxyOpts {
        workers: 1,
        backend_pool_size: 1,
        ..ProxyOpts::new(Mode::Fixed)
    })
}

/// The backend thread id a client's session runs on.
fn backend_thread(s: &mut TcpStream, deprecate_eof: bool, cache_metadata: bool) -> Vec<u8> {
    let r = query(s, "SELECT CONNECTION_ID()", deprecate_eof, cache_metadata);
    r[r.len() - 2].clone()
}

/// The greeting at `port`.
fn greeting(port: u16) -> Greeting {
    let mut s = raw_connect(port);
    let (_, g) = read_packet(&mut s).expect("read the greeting");
    parse_greeting(&g).expect("parse the greeting")
}

/// The proxy's greeting once it has seen its backend's (the pool logs in at start-up).
fn proxy_greeting(proxy: &Proxy) -> Greeting {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let g = greeting(proxy.port);
        if g.capabilities & CLIENT_MYSQL == 0 || Instant::now() > deadline {
            return g;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Logs in at `port` with `caps` and MariaDB extended capabilities `ext` (CLIENT_MYSQL is
/// cleared when `ext` is not 0, as MariaDB's Connector/C does).
fn login(port: u16, user: &str, password: &str, caps: u32, ext: u32) -> TcpStream {
    let mut s = raw_connect(port);
    let (_, g) = read_packet(&mut s).expect("read the greeting");
    let g = parse_greeting(&g).expect("parse the greeting");
    let mut hello = build_handshake_response(&HandshakeResponse {
        capabilities: caps,
        max_packet_size: 1 << 30,
        charset: UTF8MB4_GENERAL_CI,
        username: user.into(),
        auth_response: native_token(password.as_bytes(), &g.scramble),
        database: None,
        auth_plugin: Some("mysql_native_password".into()),
        connect_attrs: vec![],
    });
    set_response_ext_capabilities(&mut hello, ext);
    write_packet(&mut s, 1, &hello).unwrap();
    let (_, ok) = read_packet(&mut s).expect("read the login reply");
    assert_eq!(
        ok.first(),
        Some(&0x00),
        "login at port {port} refused: {}",
        String::from_utf8_lossy(&ok)
    );
    s
}

fn direct(caps: u32, ext: u32) -> TcpStream {
    let b = backend_env();
    login(b.port, &b.user, &b.password, caps, ext)
}

fn proxied(proxy: &Proxy, caps: u32, ext: u32) -> TcpStream {
    login(proxy.port, APP_USER, APP_PASSWORD, caps, ext)
}

fn command(s: &mut TcpStream, cmd: u8, body: &[u8]) {
    let mut p = vec![cmd];
    p.extend_from_slice(body);
    write_packet(s, 0, &p).unwrap();
}

fn is_eof(p: &[u8]) -> bool {
    p.first() == Some(&0xFE) && p.len() < 9
}

/// Reads one result (OK, ERR or a result set of `cols` definitions, or none when the
/// column count says the metadata is skipped) as its payloads. With DEPRECATE_EOF
/// (`deprecate_eof`) the definitions' EOF is absent and the terminator is a 0xFE OK.
fn read_result(s: &mut TcpStream, deprecate_eof: bool, cache_metadata: bool) -> Vec<Vec<u8>> {
    let (_, first) = read_packet(s).expect("read a response");
    let mut out = vec![first.clone()];
    if matches!(first.first(), Some(0x00) | Some(0xFF)) {
        return out;
    }
    let cols = first[0] as usize;
    assert!(cols < 0xFB, "the tests use few columns");
    let skipped = cache_metadata && first.get(1) == Some(&0);
    let defs = if skipped { 0 } else { cols };
    for _ in 0..defs {
        out.push(read_packet(s).expect("a column definition").1);
    }
    if !deprecate_eof {
        let (_, eof) = read_packet(s).expect("the definitions' EOF");
        assert!(is_eof(&eof), "expected an EOF, got {eof:?}");
        out.push(eof);
    }
    loop {
        let (_, p) = read_packet(s).expect("a row or the terminator");
        let end = is_eof(&p) || p.first() == Some(&0xFF);
        out.push(p);
        if end {
            return out;
        }
    }
}

fn query(s: &mut TcpStream, sql: &str, deprecate_eof: bool, cache_metadata: bool) -> Vec<Vec<u8>> {
    command(s, COM_QUERY, sql.as_bytes());
    read_result(s, deprecate_eof, cache_metadata)
}

/// Creates the table the metadata tests read: a JSON and a UUID column, one row. Once per
/// test binary: two tests run it, and one's DELETE could land between the other's INSERT and
/// its direct read (which then saw no row while the proxied read saw one).
fn typed_table() -> &'static str {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut c = direct_conn();
        c.query_drop("CREATE TABLE IF NOT EXISTS ext_meta (j JSON, u UUID) ENGINE=InnoDB")
            .unwrap();
        c.query_drop("DELETE FROM ext_meta").unwrap();
        c.query_drop(
            r#"INSERT INTO ext_meta VALUES ('{"a": 1}', '123e4567-e89b-12d3-a456-426655440000')"#,
        )
        .unwrap();
    });
    "SELECT j, u FROM ringgate_test.ext_meta"
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_greeting_presents_as_the_mariadb_backend() {
    let proxy = one_connection_proxy();
    let direct = greeting(backend_env().port);
    assert_eq!(
        direct.capabilities & CLIENT_MYSQL,
        0,
        "the sandbox is MariaDB"
    );
    assert_ne!(
        direct.ext_capabilities & MARIADB_CLIENT_EXTENDED_METADATA,
        0
    );
    let g = proxy_greeting(&proxy);
    assert_eq!(
        g.capabilities & CLIENT_MYSQL,
        0,
        "CLIENT_MYSQL must be clear in front of MariaDB: {:#010x}",
        g.capabilities
    );
    assert_eq!(
        g.ext_capabilities,
        direct.ext_capabilities & MIRRORED_EXT_CAPS
    );
    assert_eq!(
        g.ext_capabilities,
        MARIADB_CLIENT_PROGRESS
            | MARIADB_CLIENT_STMT_BULK_OPERATIONS
            | MARIADB_CLIENT_EXTENDED_METADATA
            | MARIADB_CLIENT_CACHE_METADATA,
        "what MariaDB 10.11 offers"
    );

    // The Rust mysql crate (a MySQL-protocol client that does not know MariaDB's
    // extensions) still connects and reads JSON.
    let mut conn = proxy.connect_app();
    let v: Option<String> = conn.query_first(r#"SELECT JSON_OBJECT('a', 1)"#).unwrap();
    assert_eq!(v.as_deref(), Some(r#"{"a": 1}"#));
}

#[test]
fn extended_metadata_reaches_the_client_as_direct_and_only_when_asked() {
    let sql = typed_table();
    let proxy = one_connection_proxy();
    proxy_greeting(&proxy);
    for deprecate_eof in [false, true] {
        let caps = if deprecate_eof {
            CAPS | CLIENT_DEPRECATE_EOF
        } else {
            CAPS
        };
        let meta = MARIADB_CLIENT_EXTENDED_METADATA;
        let want_ext = query(&mut direct(caps, meta), sql, deprecate_eof, false);
        let want_plain = query(&mut direct(caps, 0), sql, deprecate_eof, false);
        // The JSON column's format and the UUID column's type name are there direct.
        assert!(contains(&want_ext[1], b"\x01\x04json"), "{:?}", want_ext[1]);
        assert!(contains(&want_ext[2], b"\x00\x04uuid"), "{:?}", want_ext[2]);
        assert!(!contains(&want_plain[1], b"json"));

        // Client A asks for extended metadata, B does not, C does again: with one pooled
        // connection they take turns, and each gets exactly what it gets direct.
        for (who, ext, want) in [
            ("A", meta, &want_ext),
            ("B", 0, &want_plain),
            ("C", meta, &want_ext),
        ] {
            let mut s = proxied(&proxy, caps, ext);
            let got = query(&mut s, sql, deprecate_eof, false);
            assert_eq!(&got, want, "client {who} (deprecate_eof {deprecate_eof})");
            command(&mut s, COM_QUIT, &[]);
        }
    }
}

/// `SELECT 1 AS a, ? AS b` prepared once and executed twice with CACHE_METADATA: the second
/// execute omits the column definitions (`02 00`), and the proxy must still find the end of the
/// response.
#[test]
fn cache_metadata_lets_an_execute_skip_its_definitions() {
    let proxy = Proxy::start_with(ProxyOpts {
        workers: 1,
        backend_pool_size: 1,
        backend_max_connections: 1,
        ..ProxyOpts::new(Mode::Fixed)
    });
    proxy_greeting(&proxy);
    for deprecate_eof in [false, true] {
        let caps = if deprecate_eof {
            CAPS | CLIENT_DEPRECATE_EOF
        } else {
            CAPS
        };
        let ext = MARIADB_CLIENT_CACHE_METADATA;
        let run = |s: &mut TcpStream| -> Vec<Vec<Vec<u8>>> {
            command(s, COM_STMT_PREPARE, b"SELECT 1 AS a, ? AS b");
            let (_, prep) = read_packet(s).expect("PREPARE_OK");
            assert_eq!(prep[0], 0, "PREPARE_OK: {prep:?}");
            // 1 parameter + its EOF, 2 columns + their EOF (no EOFs with DEPRECATE_EOF).
            let n = if deprecate_eof { 3 } else { 5 };
            for _ in 0..n {
                read_packet(s).expect("a definition");
            }
            let mut exec = vec![];
            exec.extend_from_slice(&prep[1..5]); // statement id
            exec.push(0); // no cursor
            exec.extend_from_slice(&1u32.to_le_bytes()); // iteration count
            exec.push(0); // null bitmap
            exec.push(1); // new parameters bound
            exec.extend_from_slice(&[8, 0]); // LONGLONG
            exec.extend_from_slice(&7i64.to_le_bytes());
            let mut results = vec![];
            for _ in 0..2 {
                command(s, COM_STMT_EXECUTE, &exec);
                results.push(read_result(s, deprecate_eof, true));
            }
            results.push(query(s, "SELECT 'after'", deprecate_eof, true));
            results
        };
        let want = run(&mut direct(caps, ext));
        assert_eq!(want[0][0], vec![2, 1], "first execute: metadata follows");
        assert_eq!(want[1][0], vec![2, 0], "second execute: metadata skipped");
        assert_eq!(want[2][0], vec![1, 1], "text results carry the byte too");
        let mut s = proxied(&proxy, caps, ext);
        let got = run(&mut s);
        assert_eq!(got, want, "deprecate_eof {deprecate_eof}");
        // The proxy followed every response to its end: the session ends at a command
        // boundary, so its backend connection is reset and reused (the one connection the
        // proxy may open), not closed as mid-response.
        let thread = backend_thread(&mut s, deprecate_eof, true);
        command(&mut s, COM_QUIT, &[]);
        let mut next = proxied(&proxy, caps, ext);
        assert_eq!(
            backend_thread(&mut next, deprecate_eof, true),
            thread,
            "the backend connection was not reused (deprecate_eof {deprecate_eof})"
        );
        command(&mut next, COM_QUIT, &[]);
    }
}

/// COM_STMT_BULK_EXECUTE (STMT_BULK_OPERATIONS): three rows in one command, answered with one
/// OK; with RETURNING, with a result set.
#[test]
fn bulk_execute_is_relayed() {
    let mut c = direct_conn();
    c.query_drop("CREATE TABLE IF NOT EXISTS ext_bulk (id BIGINT)")
        .unwrap();
    c.query_drop("DELETE FROM ext_bulk").unwrap();
    let proxy = one_connection_proxy();
    proxy_greeting(&proxy);
    let mut s = proxied(&proxy, CAPS, MARIADB_CLIENT_STMT_BULK_OPERATIONS);
    for (sql, returning) in [
        ("INSERT INTO ringgate_test.ext_bulk VALUES (?)", false),
        (
            "INSERT INTO ringgate_test.ext_bulk VALUES (?) RETURNING id",
            true,
        ),
    ] {
        command(&mut s, COM_STMT_PREPARE, sql.as_bytes());
        let (_, prep) = read_packet(&mut s).expect("PREPARE_OK");
        assert_eq!(prep[0], 0, "PREPARE_OK: {prep:?}");
        let cols = u16::from_le_bytes([prep[5], prep[6]]) as usize;
        // The parameter and its EOF, the columns and their EOF.
        let n = 2 + if cols > 0 { cols + 1 } else { 0 };
        for _ in 0..n {
            read_packet(&mut s).expect("a definition");
        }
        let mut bulk = vec![];
        bulk.extend_from_slice(&prep[1..5]);
        bulk.extend_from_slice(&128u16.to_le_bytes()); // SEND_TYPES_TO_SERVER
        bulk.extend_from_slice(&[8, 0]); // LONGLONG
        for v in [10i64, 20, 30] {
            bulk.push(0); // no indicator
            bulk.extend_from_slice(&v.to_le_bytes());
        }
        command(&mut s, COM_STMT_BULK_EXECUTE, &bulk);
        let res = read_result(&mut s, false, false);
        if returning {
            assert_eq!(res[0], vec![1], "one column: {res:?}");
            // Definition, EOF, three rows, EOF.
            assert_eq!(res.len(), 1 + 1 + 1 + 3 + 1, "{res:?}");
        } else {
            assert_eq!(res[0][0], 0x00, "OK: {res:?}");
            assert_eq!(res[0][1], 3, "three rows inserted: {res:?}");
        }
    }
    // The session is still in step.
    let after = query(
        &mut s,
        "SELECT COUNT(*) FROM ringgate_test.ext_bulk",
        false,
        false,
    );
    assert_eq!(after[3], b"\x016".to_vec());
}

/// The mariadb CLI reads MariaDB's extended metadata: `--column-type-info` prints the JSON
/// column's format and the UUID column's type name, through the proxy as direct.
#[test]
fn mariadb_cli_shows_json_and_uuid_types() {
    let cli = find_in_path("mariadb").unwrap_or_else(|| {
        panic!("the `mariadb` client is not installed: run scripts/ensure-deps.sh (make test does)")
    });
    let sql = typed_table();
    let proxy = one_connection_proxy();
    proxy_greeting(&proxy);
    let b = backend_env();
    let run = |port: u16, user: &str, password: &str| -> String {
        let out = Command::new(&cli)
            .args([
                "--no-defaults",
                "--protocol=TCP",
                "-h127.0.0.1",
                &format!("-P{port}"),
                &format!("-u{user}"),
                &format!("-p{password}"),
                "--table",
                "--column-type-info",
                "-e",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run mariadb");
        assert!(
            out.status.success(),
            "mariadb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let want = run(b.port, &b.user, &b.password);
    assert!(want.contains("(format=json)"), "{want}");
    assert!(want.contains("(type=uuid)"), "{want}");
    let got = run(proxy.port, APP_USER, APP_PASSWORD);
    assert_eq!(got, want);
}

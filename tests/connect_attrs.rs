//! Connection attributes reach the backend: a backend connection opened for
//! a client logs in with that client's attributes (program name, pid, connector) behind
//! ringgate's marker and the client's address, bounded to what the server keeps by default, so
//! `performance_schema.session_connect_attrs` names the program. Attributes are fixed at the
//! backend login: a pooled connection keeps those of the client it was opened for, and one the
//! pool opened on its own carries ringgate's. The sandbox runs with performance_schema ON
//! (scripts/mariadb-sandbox.sh).

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use mysql::prelude::Queryable;
use testkit::env::{find_in_path, APP_PASSWORD, APP_USER};
use testkit::mysql_client::direct_conn;
use testkit::proxy::{wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{raw_connect, read_packet, write_packet};
use wire::auth::native_token;
use wire::constants::*;
use wire::handshake::{build_handshake_response, parse_greeting, HandshakeResponse};

/// The attributes of the backend connection serving the session that runs it.
const OWN_ATTRS: &str =
    "SELECT ATTR_NAME, ATTR_VALUE FROM performance_schema.session_connect_attrs \
                         WHERE PROCESSLIST_ID = CONNECTION_ID() ORDER BY ORDINAL_POSITION";

const IDLE: &str = r#"ringgate_backend_connections{state="idle"}"#;

/// utf8mb4_unicode_ci: a collation no other client of the test uses, so the client's pool key
/// matches no warm connection and one is opened for it.
const UNICODE_CI: u8 = 224;

fn performance_schema_on() {
    let on: Option<u8> = direct_conn()
        .query_first("SELECT @@performance_schema")
        .unwrap();
    assert_eq!(
        on,
        Some(1),
        "the sandbox must run with --performance-schema=ON (scripts/mariadb-sandbox.sh)"
    );
}

fn attrs_lost() -> u64 {
    let row: Option<(String, u64)> = direct_conn()
        .query_first("SHOW GLOBAL STATUS LIKE 'Performance_schema_session_connect_attrs_lost'")
        .unwrap();
    row.expect("the status variable").1
}

/// A raw client: logs in with `attrs`, collation `collation` and the key capabilities `caps`.
fn login(port: u16, caps: u32, collation: u8, attrs: &[(&str, &str)]) -> TcpStream {
    let mut s = raw_connect(port);
    let (_, g) = read_packet(&mut s).expect("read the greeting");
    let g = parse_greeting(&g).expect("parse the greeting");
    let hello = build_handshake_response(&HandshakeResponse {
        capabilities: CLIENT_LONG_PASSWORD
            | CLIENT_LONG_FLAG
            | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_ATTRS
            | caps,
        max_packet_size: 1 << 30,
        charset: collation,
        username: APP_USER.into(),
        auth_response: native_token(APP_PASSWORD.as_bytes(), &g.scramble),
        database: None,
        auth_plugin: Some("mysql_native_password".into()),
        connect_attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    });
    write_packet(&mut s, 1, &hello).unwrap();
    let (_, ok) = read_packet(&mut s).expect("read the login reply");
    assert_eq!(ok.first(), Some(&0x00), "{}", String::from_utf8_lossy(&ok));
    s
}

/// Runs [`OWN_ATTRS`] on a raw session (classic EOFs, two text columns).
fn backend_attrs(s: &mut TcpStream) -> BTreeMap<String, String> {
    let mut p = vec![COM_QUERY];
    p.extend_from_slice(OWN_ATTRS.as_bytes());
    write_packet(s, 0, &p).unwrap();
    let (_, count) = read_packet(s).unwrap();
    assert_eq!(count[0], 2, "{}", String::from_utf8_lossy(&count));
    for _ in 0..3 {
        read_packet(s).unwrap(); // two definitions, EOF
    }
    let mut out = BTreeMap::new();
    loop {
        let (_, row) = read_packet(s).unwrap();
        if row[0] == 0xFE && row.len() < 9 {
            return out;
        }
        let (klen, rest) = (row[0] as usize, &row[1..]);
        let k = String::from_utf8_lossy(&rest[..klen]).into_owned();
        let rest = &rest[klen..];
        let (vlen, rest) = (rest[0] as usize, &rest[1..]);
        out.insert(k, String::from_utf8_lossy(&rest[..vlen]).into_owned());
    }
}

fn quit(mut s: TcpStream) {
    write_packet(&mut s, 0, &[COM_QUIT]).unwrap();
    // The proxy releases the connection when it sees the client leave.
    let _ = read_packet(&mut s);
}

#[test]
fn the_mariadb_cli_shows_up_by_its_program_name() {
    performance_schema_on();
    let cli = find_in_path("mariadb").unwrap_or_else(|| {
        panic!("the `mariadb` client is not installed: run scripts/ensure-deps.sh (make test does)")
    });
    // No warm-up: a connection the pool opened on its own carries ringgate's attributes, and
    // one may be idle by the time the CLI's first statement leases (under transaction
    // pooling that comes a round trip after the login). With none, the connection is opened
    // for the CLI in either pooling mode.
    let proxy = Proxy::start_with(ProxyOpts {
        backend_pool_size: 0,
        ..ProxyOpts::new(Mode::Fixed)
    });
    let out = Command::new(cli)
        .args([
            "--no-defaults",
            "--protocol=TCP",
            "-h127.0.0.1",
            &format!("-P{}", proxy.port),
            &format!("-u{APP_USER}"),
            &format!("-p{APP_PASSWORD}"),
            "--batch",
            "--skip-column-names",
            "-e",
            OWN_ATTRS,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run mariadb");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let attrs: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('\t')).collect();
    // The CLI's own attributes (Connector/C names the program "mysql")...
    assert_eq!(attrs.get("program_name"), Some(&"mysql"), "{text}");
    assert_eq!(attrs.get("_client_name"), Some(&"libmariadb"), "{text}");
    assert!(attrs.contains_key("_pid"), "{text}");
    // ... behind ringgate's marker and the client's address.
    assert!(attrs["_proxy"].starts_with("ringgate "), "{text}");
    assert!(attrs["_proxy_client"].starts_with("127.0.0.1:"), "{text}");
}

#[test]
fn attributes_are_fixed_when_the_backend_connection_is_opened() {
    performance_schema_on();
    let lost_before = attrs_lost();
    // One worker and at most one backend connection: every client uses the same one.
    let proxy = Proxy::start_with(ProxyOpts {
        workers: 1,
        backend_pool_size: 1,
        backend_max_connections: 1,
        ..ProxyOpts::new(Mode::Fixed)
    });
    wait_until(
        &proxy,
        Duration::from_secs(10),
        "the warm connection",
        || proxy.metrics().try_get(IDLE) == Some(1.0),
    );

    // A client with the warm-up key gets the connection the pool opened on its own, with
    // ringgate's attributes.
    let warm = CLIENT_MULTI_STATEMENTS | CLIENT_MULTI_RESULTS | CLIENT_PS_MULTI_RESULTS;
    let mut s = login(
        proxy.port,
        warm,
        UTF8MB4_GENERAL_CI,
        &[("program_name", "early")],
    );
    let a = backend_attrs(&mut s);
    assert_eq!(
        a.get("program_name").map(String::as_str),
        Some("ringgate"),
        "{a:?}"
    );
    assert!(!a.contains_key("_proxy_client"), "{a:?}");
    quit(s);

    // A client of another key: the connection is replaced by one opened for it, carrying
    // its attributes, as many as fit in 512 bytes; the server loses none.
    let big = "v".repeat(250);
    let mut s = login(
        proxy.port,
        0,
        UNICODE_CI,
        &[
            ("program_name", "client-a"),
            ("_pid", "1111"),
            ("pad1", &big),
            ("pad2", &big),
        ],
    );
    let a = backend_attrs(&mut s);
    assert_eq!(
        a.get("program_name").map(String::as_str),
        Some("client-a"),
        "{a:?}"
    );
    assert_eq!(a.get("_pid").map(String::as_str), Some("1111"));
    assert!(a.contains_key("pad1"), "{a:?}");
    assert!(
        !a.contains_key("pad2"),
        "over 512 bytes: left out whole: {a:?}"
    );
    let first_client = a["_proxy_client"].clone();
    quit(s);
    assert_eq!(attrs_lost(), lost_before, "the server truncated attributes");

    // The next client of that key reuses the connection, and with it client A's attributes:
    // they are set at the backend login and cannot change afterwards.
    let mut s = login(proxy.port, 0, UNICODE_CI, &[("program_name", "client-b")]);
    let b = backend_attrs(&mut s);
    assert_eq!(
        b.get("program_name").map(String::as_str),
        Some("client-a"),
        "{b:?}"
    );
    assert_eq!(b["_proxy_client"], first_client);
    quit(s);
}

//! Logging in with mysql_native_password: the greeting's scramble, the HandshakeResponse41,
//! and a whole login, as the suites' app user or as anyone from a chosen source address.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use wire::auth::{native_token, NATIVE_PASSWORD};
use wire::constants::{
    CLIENT_LONG_FLAG, CLIENT_LONG_PASSWORD, CLIENT_MULTI_RESULTS, CLIENT_MULTI_STATEMENTS,
    CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION, CLIENT_TRANSACTIONS,
    UTF8MB4_GENERAL_CI,
};
use wire::handshake::{build_handshake_response, parse_greeting, HandshakeResponse};

use super::packet::{err_text, read_packet, write_packet};
use crate::env::{APP_PASSWORD, APP_USER};

/// The capabilities of a raw client that only queries: 4.1, native password, multi-results;
/// no CLIENT_DEPRECATE_EOF, so replies have classic EOFs.
pub const QUERY_CAPS: u32 = CLIENT_LONG_PASSWORD
    | CLIENT_LONG_FLAG
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH;

/// The suites' raw clients: [`QUERY_CAPS`] and multi-statements.
pub const RAW_CAPS: u32 = QUERY_CAPS | CLIENT_MULTI_STATEMENTS;

/// The scramble of a greeting, parsed in full (an ERR in place of a greeting is an error).
pub fn scramble_of(g: &[u8]) -> Result<Vec<u8>, String> {
    parse_greeting(g)
        .map(|g| g.scramble)
        .map_err(|e| format!("malformed greeting ({} bytes): {e}", g.len()))
}

/// The auth plugin the raw clients log in with.
pub const NATIVE: &str = NATIVE_PASSWORD;

/// HandshakeResponse41 for mysql_native_password with `caps` (CLIENT_CONNECT_WITH_DB added
/// when `db` is given).
pub fn hello(caps: u32, scramble: &[u8], user: &str, password: &str, db: Option<&str>) -> Vec<u8> {
    let token = native_token(password.as_bytes(), scramble);
    handshake_response(caps, user, NATIVE, token, db)
}

/// HandshakeResponse41 with the given capabilities, plugin and auth data (collation
/// utf8mb4_general_ci, no schema).
pub fn hello_with(caps: u32, user: &str, plugin: &str, auth_response: Vec<u8>) -> Vec<u8> {
    handshake_response(caps, user, plugin, auth_response, None)
}

/// HandshakeResponse41: 4.1, secure connection and plugin auth always, CLIENT_CONNECT_WITH_DB
/// with a schema; 1 GiB max packet, utf8mb4_general_ci.
fn handshake_response(
    caps: u32,
    user: &str,
    plugin: &str,
    auth_response: Vec<u8>,
    db: Option<&str>,
) -> Vec<u8> {
    build_handshake_response(&HandshakeResponse {
        capabilities: caps,
        max_packet_size: 1 << 30,
        charset: UTF8MB4_GENERAL_CI,
        username: user.into(),
        auth_response,
        database: db.map(String::from),
        auth_plugin: Some(plugin.into()),
        connect_attrs: vec![],
    })
}

/// The suites' login payload: [`RAW_CAPS`], no schema.
pub fn hello_payload(scramble: &[u8], user: &str, password: &str) -> Vec<u8> {
    hello(RAW_CAPS, scramble, user, password, None)
}

/// Reads the greeting; returns its scramble. Panics unless it is a greeting with sequence 0.
pub fn read_greeting(s: &mut TcpStream) -> Vec<u8> {
    let (seq, g) = read_packet(s).expect("read greeting");
    assert_eq!(seq, 0, "greeting sequence id");
    scramble_of(&g).expect("parse greeting")
}

/// A TCP connection to 127.0.0.1:`port` with 10 s read and write timeouts and no Nagle delay;
/// panics when the connect fails.
pub fn raw_connect(port: u16) -> TcpStream {
    connect_to(&format!("127.0.0.1:{port}"), Duration::from_secs(10))
}

/// A TCP connection to `addr` (5 s to connect) with `io_timeout` on every read and write and no
/// Nagle delay: a read that blocks longer fails the test instead of hanging it.
pub fn connect_to(addr: &str, io_timeout: Duration) -> TcpStream {
    let addr: SocketAddr = addr.parse().expect("socket address");
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(io_timeout))
        .and_then(|_| s.set_write_timeout(Some(io_timeout)))
        .and_then(|_| s.set_nodelay(true))
        .unwrap_or_else(|e| panic!("socket options on the connection to {addr}: {e}"));
    s
}

/// Logs in to `addr` with mysql_native_password and `caps` (5 s I/O timeouts); panics unless
/// the answer is OK.
pub fn login_with_caps(addr: &str, user: &str, password: &str, caps: u32) -> TcpStream {
    let mut s = connect_to(addr, Duration::from_secs(5));
    let scramble = read_greeting(&mut s);
    let token = native_token(password.as_bytes(), &scramble);
    write_packet(&mut s, 1, &hello_with(caps, user, NATIVE, token)).expect("send the login");
    let (_, ok) = read_packet(&mut s).expect("read the login reply");
    assert_eq!(
        ok.first(),
        Some(&0x00),
        "login of {user} at {addr} refused: {}",
        String::from_utf8_lossy(&ok)
    );
    s
}

/// The salt of an AuthSwitchRequest payload (0xFE, plugin name, NUL, salt, NUL); panics unless
/// it switches to mysql_native_password.
pub fn switch_salt(switch: &[u8]) -> Vec<u8> {
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

/// A logged-in raw session as `app`, or None when the proxy answers anything but OK (e.g. ERR
/// 1105 while the backend is down).
pub fn try_raw_login(port: u16) -> Option<TcpStream> {
    let mut s = raw_connect(port);
    let (_, g) = read_packet(&mut s).ok()?;
    let scramble = scramble_of(&g).ok()?;
    write_packet(&mut s, 1, &hello_payload(&scramble, APP_USER, APP_PASSWORD)).ok()?;
    let (_, ok) = read_packet(&mut s).ok()?;
    (ok.first() == Some(&0x00)).then_some(s)
}

/// A logged-in raw session as `app`; panics unless the proxy answers OK with sequence 2.
pub fn raw_login(port: u16) -> TcpStream {
    let mut s = raw_connect(port);
    let scramble = read_greeting(&mut s);
    write_packet(&mut s, 1, &hello_payload(&scramble, APP_USER, APP_PASSWORD))
        .expect("send the login");
    let (seq, ok) = read_packet(&mut s).expect("read login reply");
    assert_eq!(ok.first(), Some(&0x00), "login reply is not OK: {ok:?}");
    assert_eq!(seq, 2);
    s
}

/// Who to log in as, where.
#[derive(Clone, Debug)]
pub struct Login {
    pub addr: SocketAddr,
    pub user: String,
    pub password: String,
    pub db: Option<String>,
    /// Read/write timeout of the socket (an idle client's reads block until it queries).
    pub timeout: Duration,
}

/// Connects (from `src` when given: a 127.0.0.x source address has its own ephemeral ports)
/// and logs in with [`QUERY_CAPS`]; an ERR or an auth switch is an error.
pub fn login(l: &Login, src: Option<Ipv4Addr>) -> Result<TcpStream, String> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).map_err(|e| format!("socket: {e}"))?;
    if let Some(src) = src {
        sock.bind(&SocketAddr::from((src, 0)).into())
            .map_err(|e| format!("bind {src}: {e}"))?;
    }
    sock.connect_timeout(&l.addr.into(), l.timeout)
        .map_err(|e| format!("connect: {e}"))?;
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(l.timeout))
        .and_then(|_| s.set_write_timeout(Some(l.timeout)))
        .and_then(|_| s.set_nodelay(true))
        .map_err(|e| e.to_string())?;
    let (_, g) = read_packet(&mut s).map_err(|e| format!("greeting: {e}"))?;
    if g.first() == Some(&0xFF) {
        return Err(err_text(&g));
    }
    let scramble = scramble_of(&g)?;
    let payload = hello(QUERY_CAPS, &scramble, &l.user, &l.password, l.db.as_deref());
    write_packet(&mut s, 1, &payload).map_err(|e| format!("login: {e}"))?;
    let (_, ok) = read_packet(&mut s).map_err(|e| format!("login reply: {e}"))?;
    match ok.first() {
        Some(0x00) => Ok(s),
        Some(0xFF) => Err(err_text(&ok)),
        other => Err(format!(
            "login reply is not OK (0x{:02x}): an auth switch this client does not speak",
            other.copied().unwrap_or(0)
        )),
    }
}

/// COM_QUIT, so the server does not count an aborted connection.
pub fn quit(mut s: TcpStream) {
    let _ = write_packet(&mut s, 0, &[0x01]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scramble_from_a_mariadb_greeting() {
        let mut g = vec![10];
        g.extend_from_slice(b"5.5.5-10.11.19-MariaDB\0");
        g.extend_from_slice(&7u32.to_le_bytes());
        g.extend_from_slice(b"abcdefgh");
        g.push(0);
        g.extend_from_slice(&[0xff, 0xf7, 45, 2, 0, 0xff, 0x81, 21]);
        g.extend_from_slice(&[0; 10]);
        g.extend_from_slice(b"ijklmnopqrst\0mysql_native_password\0");
        assert_eq!(scramble_of(&g).unwrap(), b"abcdefghijklmnopqrst");
        assert!(scramble_of(&[9, 1, 2]).is_err());
        assert!(scramble_of(&[10, b'x']).is_err());
    }

    #[test]
    fn hello_carries_user_token_db_and_plugin() {
        use wire::constants::CLIENT_CONNECT_WITH_DB;
        let p = hello(QUERY_CAPS, &[7; 20], "bench", "pw", Some("db1"));
        let caps = u32::from_le_bytes(p[0..4].try_into().unwrap());
        assert_ne!(caps & CLIENT_CONNECT_WITH_DB, 0);
        assert_eq!(&p[32..38], b"bench\0");
        assert_eq!(p[38], 20);
        assert!(p.ends_with(b"db1\0mysql_native_password\0"));
        let p = hello(QUERY_CAPS, &[7; 20], "u", "", None);
        assert_eq!(
            u32::from_le_bytes(p[0..4].try_into().unwrap()) & CLIENT_CONNECT_WITH_DB,
            0
        );
        assert_eq!(&p[32..35], b"u\0\0");
        let p = hello_payload(&[7; 20], "u", "");
        assert_eq!(u32::from_le_bytes(p[0..4].try_into().unwrap()), RAW_CAPS);
    }
}

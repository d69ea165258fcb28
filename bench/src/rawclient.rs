//! A minimal blocking MySQL client for the idle scenarios (`idle-10k`, `idle-max`) and the
//! server-status polls of `many-clients`.
//!
//! Why not mysql_async: an idle client here must cost the bench no more than a socket, so that
//! 19,000 of them fit in the bench process next to ringgate (a mysql_async `Conn` is a tokio
//! task with its own buffers), and a client from a chosen source address (127.0.0.x, each with
//! its own ephemeral-port range) needs a bind before connect. This speaks just enough of the
//! protocol: mysql_native_password login, COM_QUERY with a text result (classic EOF, no
//! CLIENT_DEPRECATE_EOF), COM_QUIT.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use sha1::{Digest, Sha1};

const CLIENT_LONG_PASSWORD: u32 = 1;
const CLIENT_LONG_FLAG: u32 = 4;
const CLIENT_CONNECT_WITH_DB: u32 = 8;
const CLIENT_PROTOCOL_41: u32 = 0x200;
const CLIENT_TRANSACTIONS: u32 = 0x2000;
const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
const CLIENT_MULTI_RESULTS: u32 = 0x20000;
const CLIENT_PLUGIN_AUTH: u32 = 0x80000;
const UTF8MB4_GENERAL_CI: u8 = 45;

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

/// mysql_native_password: SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw))); empty for no password.
pub fn native_token(password: &[u8], scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = Sha1::digest(password);
    let stage2 = Sha1::digest(stage1);
    let mut h = Sha1::new();
    h.update(scramble);
    h.update(stage2);
    let mix = h.finalize();
    stage1.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

/// The 20-byte scramble of a HandshakeV10 payload.
pub fn scramble_of(g: &[u8]) -> Result<Vec<u8>, String> {
    let bad = || format!("malformed greeting ({} bytes)", g.len());
    if g.first() != Some(&10) {
        return Err(format!("not a HandshakeV10 greeting: {:?}", g.first()));
    }
    let nul = g[1..].iter().position(|&b| b == 0).ok_or_else(bad)?;
    let mut i = 1 + nul + 1 + 4; // server version, connection id
    let part1 = g.get(i..i + 8).ok_or_else(bad)?;
    let mut s = part1.to_vec();
    i += 8 + 1 + 2; // scramble part 1, filler, capabilities (low)
    if g.len() > i {
        i += 1 + 2 + 2 + 1 + 10; // charset, status, capabilities (high), auth data length, reserved
        let rest = g.get(i..).ok_or_else(bad)?;
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(rest.len())
            .min(12);
        s.extend_from_slice(&rest[..end]);
    }
    Ok(s)
}

/// HandshakeResponse41 for mysql_native_password.
pub fn hello(scramble: &[u8], user: &str, password: &str, db: Option<&str>) -> Vec<u8> {
    let mut caps = CLIENT_LONG_PASSWORD
        | CLIENT_LONG_FLAG
        | CLIENT_PROTOCOL_41
        | CLIENT_TRANSACTIONS
        | CLIENT_SECURE_CONNECTION
        | CLIENT_MULTI_RESULTS
        | CLIENT_PLUGIN_AUTH;
    if db.is_some() {
        caps |= CLIENT_CONNECT_WITH_DB;
    }
    let token = native_token(password.as_bytes(), scramble);
    let mut p = Vec::with_capacity(96);
    p.extend_from_slice(&caps.to_le_bytes());
    p.extend_from_slice(&(1u32 << 30).to_le_bytes());
    p.push(UTF8MB4_GENERAL_CI);
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(user.as_bytes());
    p.push(0);
    p.push(token.len() as u8);
    p.extend_from_slice(&token);
    if let Some(db) = db {
        p.extend_from_slice(db.as_bytes());
        p.push(0);
    }
    p.extend_from_slice(b"mysql_native_password\0");
    p
}

pub fn write_packet(s: &mut TcpStream, seq: u8, payload: &[u8]) -> std::io::Result<()> {
    let n = payload.len();
    let mut v = Vec::with_capacity(n + 4);
    v.extend_from_slice(&[n as u8, (n >> 8) as u8, (n >> 16) as u8, seq]);
    v.extend_from_slice(payload);
    s.write_all(&v)
}

/// One physical packet: (sequence id, payload).
pub fn read_packet(s: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h)?;
    let len = h[0] as usize | (h[1] as usize) << 8 | (h[2] as usize) << 16;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p)?;
    Ok((h[3], p))
}

fn err_text(p: &[u8]) -> String {
    let code = (p.len() >= 3).then(|| u16::from_le_bytes([p[1], p[2]]));
    // ERR: 0xFF, code, '#', 5-byte SQLSTATE, message.
    let msg = p.get(9..).map(String::from_utf8_lossy).unwrap_or_default();
    format!("ERR {} {msg}", code.unwrap_or(0))
}

/// Connects (from `src` when given: a 127.0.0.x source address has its own ephemeral ports)
/// and logs in.
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
    write_packet(
        &mut s,
        1,
        &hello(&scramble, &l.user, &l.password, l.db.as_deref()),
    )
    .map_err(|e| format!("login: {e}"))?;
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

/// A length-encoded integer at `p[*i..]`.
fn lenenc(p: &[u8], i: &mut usize) -> Option<u64> {
    let b = *p.get(*i)?;
    *i += 1;
    let n = match b {
        0..=0xFA => return Some(u64::from(b)),
        0xFC => 2,
        0xFD => 3,
        0xFE => 8,
        _ => return None,
    };
    let bytes = p.get(*i..*i + n)?;
    *i += n;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0, |acc, &x| acc << 8 | u64::from(x)),
    )
}

/// One text-protocol row: each column as text, NULL as None.
pub fn parse_row(p: &[u8]) -> Vec<Option<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        if p[i] == 0xFB {
            out.push(None);
            i += 1;
            continue;
        }
        let Some(n) = lenenc(p, &mut i) else { break };
        let end = (i + n as usize).min(p.len());
        out.push(Some(String::from_utf8_lossy(&p[i..end]).into_owned()));
        i = end;
    }
    out
}

/// COM_QUERY; the rows of its (first) result, empty for an OK.
pub fn query(s: &mut TcpStream, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let mut p = Vec::with_capacity(sql.len() + 1);
    p.push(0x03);
    p.extend_from_slice(sql.as_bytes());
    write_packet(s, 0, &p).map_err(|e| e.to_string())?;
    let (_, first) = read_packet(s).map_err(|e| e.to_string())?;
    match first.first() {
        Some(0x00) => return Ok(Vec::new()),
        Some(0xFF) => return Err(err_text(&first)),
        _ => {}
    }
    let mut rows = Vec::new();
    let mut eofs = 0;
    loop {
        let (_, p) = read_packet(s).map_err(|e| e.to_string())?;
        if p.first() == Some(&0xFE) && p.len() < 9 {
            eofs += 1;
            if eofs == 2 {
                return Ok(rows);
            }
        } else if p.first() == Some(&0xFF) {
            return Err(err_text(&p));
        } else if eofs == 1 {
            rows.push(parse_row(&p));
        }
    }
}

/// `SHOW GLOBAL STATUS LIKE 'name'` as a number.
pub fn global_status(s: &mut TcpStream, name: &str) -> Result<f64, String> {
    let rows = query(s, &format!("SHOW GLOBAL STATUS LIKE '{name}'"))?;
    rows.first()
        .and_then(|r| r.get(1).cloned().flatten())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no status {name}"))
}

/// COM_QUIT, so the server does not count an aborted connection.
pub fn quit(mut s: TcpStream) {
    let _ = write_packet(&mut s, 0, &[0x01]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's check: SHA1(token XOR SHA1(scramble + stage2)) == stage2.
    #[test]
    fn native_token_passes_the_servers_check() {
        let scramble: Vec<u8> = (1..=20).collect();
        let pw = b"bench-secret";
        let t = native_token(pw, &scramble);
        assert_eq!(t.len(), 20);
        let stage2 = Sha1::digest(Sha1::digest(pw));
        let mut h = Sha1::new();
        h.update(&scramble);
        h.update(stage2);
        let mix = h.finalize();
        let stage1: Vec<u8> = t.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect();
        assert_eq!(Sha1::digest(&stage1).as_slice(), stage2.as_slice());
        assert!(native_token(b"", &scramble).is_empty());
    }

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
        let p = hello(&[7; 20], "bench", "pw", Some("db1"));
        let caps = u32::from_le_bytes(p[0..4].try_into().unwrap());
        assert_ne!(caps & CLIENT_CONNECT_WITH_DB, 0);
        assert_eq!(&p[32..38], b"bench\0");
        assert_eq!(p[38], 20);
        assert!(p.ends_with(b"db1\0mysql_native_password\0"));
        let p = hello(&[7; 20], "u", "", None);
        assert_eq!(
            u32::from_le_bytes(p[0..4].try_into().unwrap()) & CLIENT_CONNECT_WITH_DB,
            0
        );
        assert_eq!(&p[32..35], b"u\0\0");
    }

    #[test]
    fn text_rows_with_null_and_long_lengths() {
        let mut p = vec![3];
        p.extend_from_slice(b"abc");
        p.push(0xFB);
        p.extend_from_slice(&[0xFC, 0x2C, 0x01]);
        p.extend_from_slice(&[b'x'; 300]);
        let r = parse_row(&p);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].as_deref(), Some("abc"));
        assert_eq!(r[1], None);
        assert_eq!(r[2].as_ref().map(String::len), Some(300));
    }
}

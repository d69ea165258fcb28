//! Connection-phase packets: HandshakeV10 (server greeting),
//! SSLRequest / HandshakeResponse41 (client hello) and AuthSwitchRequest.

use crate::auth::NATIVE_PASSWORD;
use crate::constants::*;
use crate::packet::{write_lenenc_int, write_lenenc_str, write_nul_str, Reader};
use crate::reply::parse_err;
use crate::ProtocolError;

/// The only handshake protocol version in use since MySQL 3.21.
const PROTOCOL_VERSION: u8 = 10;

/// Upper bound on the connect-attributes block; MySQL itself caps the
/// client side at 64 KiB, so anything larger is hostile or broken.
const MAX_CONNECT_ATTRS_LEN: usize = 64 * 1024;

/// Length of the fixed prefix of HandshakeResponse41, which is also the whole
/// SSLRequest: capabilities(4) + max packet(4) + charset(1) + filler(23).
pub const SSL_REQUEST_LEN: usize = 32;

/// A HandshakeV10 greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    pub protocol_version: u8,
    pub server_version: String,
    pub connection_id: u32,
    /// The full scramble (20 bytes for native/caching_sha2), without the NUL
    /// that terminates its second half on the wire.
    pub scramble: Vec<u8>,
    pub capabilities: u32,
    /// MariaDB extended capabilities (`MARIADB_CLIENT_*` >> 32). Only on the
    /// wire when `capabilities` lacks CLIENT_MYSQL (a MariaDB server);
    /// parsed as 0 otherwise.
    pub ext_capabilities: u32,
    /// Server default collation id.
    pub charset: u8,
    pub status: u16,
    pub auth_plugin: String,
}

/// Builds a HandshakeV10 payload.
///
/// The scramble is split 8 + rest; the second part is padded with zeros to
/// at least 12 bytes and NUL-terminated, and the auth-data length byte is
/// `scramble.len() + 1` (21 for the usual 20-byte scramble), as MySQL does.
/// The plugin name is only written when `capabilities` has
/// CLIENT_PLUGIN_AUTH, because clients only read it then.
pub fn build_greeting(g: &Greeting) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + g.server_version.len() + g.auth_plugin.len());
    out.push(g.protocol_version);
    write_nul_str(&mut out, g.server_version.as_bytes());
    out.extend_from_slice(&g.connection_id.to_le_bytes());

    let split = g.scramble.len().min(8);
    let (part1, part2) = g.scramble.split_at(split);
    out.extend_from_slice(part1);
    out.resize(out.len() + (8 - part1.len()), 0);
    out.push(0); // filler

    out.extend_from_slice(&(g.capabilities as u16).to_le_bytes());
    out.push(g.charset);
    out.extend_from_slice(&g.status.to_le_bytes());
    out.extend_from_slice(&((g.capabilities >> 16) as u16).to_le_bytes());
    let part2_len = part2.len().max(12);
    let auth_len = if g.capabilities & CLIENT_PLUGIN_AUTH != 0 {
        u8::try_from(8 + part2_len + 1).unwrap_or(u8::MAX)
    } else {
        0
    };
    out.push(auth_len);
    out.extend_from_slice(&[0u8; 6]);
    // MariaDB puts its extended capabilities in the last 4 reserved bytes,
    // and only a greeting without CLIENT_MYSQL says they are there.
    let ext = if g.capabilities & CLIENT_MYSQL == 0 {
        g.ext_capabilities
    } else {
        0
    };
    out.extend_from_slice(&ext.to_le_bytes());
    if g.capabilities & CLIENT_SECURE_CONNECTION != 0 {
        out.extend_from_slice(part2);
        out.resize(out.len() + (part2_len - part2.len()), 0);
        out.push(0);
    }
    if g.capabilities & CLIENT_PLUGIN_AUTH != 0 {
        write_nul_str(&mut out, g.auth_plugin.as_bytes());
    }
    out
}

/// Parses a server's first packet.
///
/// A server that refuses the connection (too many connections, host blocked)
/// sends an ERR packet instead of a greeting; that is returned as
/// [`ProtocolError::ServerError`]. Such an ERR usually lacks the `#sqlstate`
/// marker because the client's capabilities are not known yet.
pub fn parse_greeting(payload: &[u8]) -> Result<Greeting, ProtocolError> {
    if payload.first() == Some(&ERR_HEADER) {
        let (code, sqlstate, message) = parse_err(payload)?;
        return Err(ProtocolError::ServerError {
            code,
            sqlstate,
            message,
        });
    }
    let mut r = Reader::new(payload);
    let protocol_version = r.u8("protocol version")?;
    if protocol_version != PROTOCOL_VERSION {
        return Err(ProtocolError::UnsupportedProtocolVersion(protocol_version));
    }
    let server_version = String::from_utf8_lossy(r.nul_bytes("server version")?).into_owned();
    let connection_id = r.u32("connection id")?;
    let mut scramble = r.bytes(8, "scramble part 1")?.to_vec();
    r.skip(1, "filler")?;
    let mut capabilities = u32::from(r.u16("capability flags")?);

    let mut greeting = Greeting {
        protocol_version,
        server_version,
        connection_id,
        scramble: Vec::new(),
        capabilities,
        ext_capabilities: 0,
        charset: 0,
        status: 0,
        auth_plugin: NATIVE_PASSWORD.to_owned(),
    };
    if r.is_empty() {
        // Pre-4.1 servers may end the greeting here.
        greeting.scramble = scramble;
        return Ok(greeting);
    }
    greeting.charset = r.u8("charset")?;
    greeting.status = r.u16("status flags")?;
    capabilities |= u32::from(r.u16("upper capability flags")?) << 16;
    greeting.capabilities = capabilities;
    let auth_len = usize::from(r.u8("auth data length")?);
    // 6 filler bytes + 4 bytes that MariaDB uses for extended capabilities
    // when CLIENT_MYSQL is clear (MySQL leaves them zero).
    r.skip(6, "reserved")?;
    let ext = r.u32("reserved")?;
    if capabilities & CLIENT_MYSQL == 0 {
        greeting.ext_capabilities = ext;
    }
    if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        // MySQL: max(13, auth_len - 8) bytes, the last one a NUL. Tolerate
        // servers that send fewer bytes when no plugin name follows.
        let want = auth_len.saturating_sub(8).max(13);
        let part2 = if r.remaining() >= want {
            r.bytes(want, "scramble part 2")?
        } else if capabilities & CLIENT_PLUGIN_AUTH == 0 {
            r.rest()
        } else {
            return Err(ProtocolError::Truncated {
                what: "scramble part 2",
            });
        };
        let part2 = match part2.split_last() {
            Some((0, head)) => head,
            _ => part2,
        };
        scramble.extend_from_slice(part2);
    }
    greeting.scramble = scramble;
    if capabilities & CLIENT_PLUGIN_AUTH != 0 {
        // MySQL 5.5.7–5.5.9 omitted the terminating NUL.
        let name = r.nul_bytes_or_rest();
        if !name.is_empty() {
            greeting.auth_plugin = utf8(name, "auth plugin name")?.to_owned();
        }
    }
    Ok(greeting)
}

/// The first packet a client sends after the greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientHello {
    /// The client wants TLS before sending its credentials.
    SslRequest {
        capabilities: u32,
    },
    Response(HandshakeResponse),
}

/// HandshakeResponse41.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HandshakeResponse {
    pub capabilities: u32,
    pub max_packet_size: u32,
    /// Client collation id.
    pub charset: u8,
    pub username: String,
    pub auth_response: Vec<u8>,
    /// Initial schema; `None` when absent or empty.
    pub database: Option<String>,
    pub auth_plugin: Option<String>,
    pub connect_attrs: Vec<(String, String)>,
}

/// Parses the client's answer to the greeting.
///
/// A 32-byte payload with CLIENT_SSL is an SSLRequest (the fixed prefix of
/// HandshakeResponse41 alone). Only the 4.1 protocol is accepted. Optional
/// trailing fields (schema, plugin name, attributes) that a client announces
/// in its capabilities but leaves out at the end of the packet are treated
/// as absent, as the MySQL server does.
pub fn parse_handshake_response(payload: &[u8]) -> Result<ClientHello, ProtocolError> {
    let mut r = Reader::new(payload);
    // The capability word comes first in both the 4.1 and the 3.20 format,
    // and in 3.20 it is only 2 bytes; check PROTOCOL_41 on those first.
    let low = payload
        .get(..2)
        .ok_or(ProtocolError::Truncated {
            what: "capability flags",
        })
        .map(|b| u16::from_le_bytes([b[0], b[1]]))?;
    if u32::from(low) & CLIENT_PROTOCOL_41 == 0 {
        return Err(ProtocolError::OldClientProtocol);
    }
    let capabilities = r.u32("capability flags")?;
    let max_packet_size = r.u32("max packet size")?;
    let charset = r.u8("charset")?;
    r.skip(23, "filler")?;
    if r.is_empty() && capabilities & CLIENT_SSL != 0 {
        return Ok(ClientHello::SslRequest { capabilities });
    }
    let username = utf8(r.nul_bytes("user name")?, "user name")?.to_owned();

    let auth_response = if capabilities & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
        r.lenenc_bytes("auth response")?
    } else if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        let n = usize::from(r.u8("auth response length")?);
        r.bytes(n, "auth response")?
    } else {
        r.nul_bytes("auth response")?
    }
    .to_vec();

    let mut database = None;
    if capabilities & CLIENT_CONNECT_WITH_DB != 0 && !r.is_empty() {
        let db = r.nul_bytes("database")?;
        if !db.is_empty() {
            database = Some(utf8(db, "database")?.to_owned());
        }
    }

    let mut auth_plugin = None;
    if capabilities & CLIENT_PLUGIN_AUTH != 0 && !r.is_empty() {
        let name = r.nul_bytes_or_rest();
        if !name.is_empty() {
            auth_plugin = Some(utf8(name, "auth plugin name")?.to_owned());
        }
    }

    let connect_attrs = if capabilities & CLIENT_CONNECT_ATTRS != 0 && !r.is_empty() {
        read_connect_attrs(&mut r)?
    } else {
        Vec::new()
    };
    // Anything after this (zstd level with CLIENT_ZSTD_COMPRESSION_ALGORITHM)
    // is ignored: we never offer compression.

    Ok(ClientHello::Response(HandshakeResponse {
        capabilities,
        max_packet_size,
        charset,
        username,
        auth_response,
        database,
        auth_plugin,
        connect_attrs,
    }))
}

/// Builds a HandshakeResponse41 payload for logging into a backend.
///
/// Always sets CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION and
/// CLIENT_PLUGIN_AUTH. CLIENT_CONNECT_WITH_DB is set when `database` is
/// `Some`, CLIENT_CONNECT_ATTRS when attributes are given; if the caller set
/// either flag itself, the (possibly empty) field is still written so the
/// packet matches its flags. An auth response over 255 bytes forces
/// CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA since the 1-byte form cannot carry
/// it. CLIENT_SSL is the caller's responsibility (we never do TLS here).
pub fn build_handshake_response(r: &HandshakeResponse) -> Vec<u8> {
    let mut caps =
        r.capabilities | CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
    if r.database.is_some() {
        caps |= CLIENT_CONNECT_WITH_DB;
    }
    if !r.connect_attrs.is_empty() {
        caps |= CLIENT_CONNECT_ATTRS;
    }
    if r.auth_response.len() > 255 {
        caps |= CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
    }
    let mut out = Vec::with_capacity(128 + r.username.len() + r.auth_response.len());
    out.extend_from_slice(&caps.to_le_bytes());
    out.extend_from_slice(&r.max_packet_size.to_le_bytes());
    out.push(r.charset);
    out.extend_from_slice(&[0u8; 23]);
    write_nul_str(&mut out, r.username.as_bytes());
    if caps & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
        write_lenenc_str(&mut out, &r.auth_response);
    } else {
        // len <= 255 here, checked above.
        out.push(r.auth_response.len() as u8);
        out.extend_from_slice(&r.auth_response);
    }
    if caps & CLIENT_CONNECT_WITH_DB != 0 {
        write_nul_str(&mut out, r.database.as_deref().unwrap_or("").as_bytes());
    }
    write_nul_str(
        &mut out,
        r.auth_plugin
            .as_deref()
            .unwrap_or(NATIVE_PASSWORD)
            .as_bytes(),
    );
    if caps & CLIENT_CONNECT_ATTRS != 0 {
        let mut attrs = Vec::new();
        for (k, v) in &r.connect_attrs {
            write_lenenc_str(&mut attrs, k.as_bytes());
            write_lenenc_str(&mut attrs, v.as_bytes());
        }
        write_lenenc_int(&mut out, attrs.len() as u64);
        out.extend_from_slice(&attrs);
    }
    out
}

/// Offset of the MariaDB extended capabilities in a HandshakeResponse41:
/// the last 4 of the 23 filler bytes after capabilities, max packet size
/// and charset.
const RESPONSE_EXT_CAPS_AT: usize = 4 + 4 + 1 + 19;

/// The MariaDB extended capabilities a HandshakeResponse41 (or SSLRequest)
/// asks for. As the MariaDB server reads them: only a client that cleared
/// CLIENT_MYSQL (bit 0) has them in its filler; any other client has none,
/// whatever the filler holds.
pub fn response_ext_capabilities(payload: &[u8]) -> u32 {
    let word = |at: usize| {
        payload
            .get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if payload.len() < SSL_REQUEST_LEN || word(0) & CLIENT_MYSQL != 0 {
        return 0;
    }
    word(RESPONSE_EXT_CAPS_AT)
}

/// Asks for MariaDB extended capabilities in a HandshakeResponse41 built by
/// [`build_handshake_response`]: writes `ext` into the filler and clears
/// CLIENT_MYSQL, without which a MariaDB server ignores them. Does nothing
/// when `ext` is 0, so a response without them stays as libmysqlclient
/// sends it.
pub fn set_response_ext_capabilities(payload: &mut [u8], ext: u32) {
    if ext == 0 || payload.len() < SSL_REQUEST_LEN {
        return;
    }
    payload[0] &= !(CLIENT_MYSQL as u8);
    payload[RESPONSE_EXT_CAPS_AT..RESPONSE_EXT_CAPS_AT + 4].copy_from_slice(&ext.to_le_bytes());
}

/// Builds an SSLRequest payload (the 32-byte prefix of HandshakeResponse41).
pub fn build_ssl_request(capabilities: u32, max_packet_size: u32, charset: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(SSL_REQUEST_LEN);
    out.extend_from_slice(&(capabilities | CLIENT_SSL | CLIENT_PROTOCOL_41).to_le_bytes());
    out.extend_from_slice(&max_packet_size.to_le_bytes());
    out.push(charset);
    out.extend_from_slice(&[0u8; 23]);
    out
}

/// Builds an AuthSwitchRequest payload: 0xFE, plugin name NUL, auth data,
/// and a trailing NUL, which MySQL appends after the 20-byte scramble for
/// both native and caching_sha2 so clients can treat it as a C string.
pub fn build_auth_switch_request(plugin: &str, scramble: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + plugin.len() + scramble.len() + 1);
    out.push(EOF_HEADER);
    write_nul_str(&mut out, plugin.as_bytes());
    out.extend_from_slice(scramble);
    out.push(0);
    out
}

/// The length-prefixed block of connection attributes (key, value pairs)
/// that ends a handshake response or a COM_CHANGE_USER packet, bounded by
/// [`MAX_CONNECT_ATTRS_LEN`].
pub fn read_connect_attrs(r: &mut Reader) -> Result<Vec<(String, String)>, ProtocolError> {
    let total = r.lenenc_int("connect attrs length")?;
    let total = usize::try_from(total)
        .ok()
        .filter(|&t| t <= MAX_CONNECT_ATTRS_LEN)
        .ok_or(ProtocolError::PacketTooLarge {
            len: usize::try_from(total).unwrap_or(usize::MAX),
            max: MAX_CONNECT_ATTRS_LEN,
        })?;
    let mut a = Reader::new(r.bytes(total, "connect attrs")?);
    let mut attrs = Vec::new();
    while !a.is_empty() {
        let k = a.lenenc_bytes("connect attr key")?;
        let v = a.lenenc_bytes("connect attr value")?;
        attrs.push((
            String::from_utf8_lossy(k).into_owned(),
            String::from_utf8_lossy(v).into_owned(),
        ));
    }
    Ok(attrs)
}

fn utf8<'a>(b: &'a [u8], what: &'static str) -> Result<&'a str, ProtocolError> {
    std::str::from_utf8(b).map_err(|_| ProtocolError::InvalidUtf8 { what })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::native_token;

    const SCRAMBLE: [u8; 20] = *b"abcdefgh0123456789AB";

    fn sample_greeting() -> Greeting {
        Greeting {
            protocol_version: 10,
            server_version: "8.0.36-ringgate".into(),
            connection_id: 0x0102_0304,
            scramble: SCRAMBLE.to_vec(),
            capabilities: 0xDFFF_F7FF & !CLIENT_SSL,
            ext_capabilities: 0,
            charset: UTF8MB4_GENERAL_CI,
            status: SERVER_STATUS_AUTOCOMMIT,
            auth_plugin: NATIVE_PASSWORD.into(),
        }
    }

    #[test]
    fn greeting_roundtrip() {
        let g = sample_greeting();
        let p = build_greeting(&g);
        assert_eq!(parse_greeting(&p).unwrap(), g);
    }

    #[test]
    fn greeting_layout() {
        let g = sample_greeting();
        let p = build_greeting(&g);
        let v = g.server_version.len();
        assert_eq!(p[0], 10);
        assert_eq!(p[1 + v], 0);
        let o = 2 + v;
        assert_eq!(&p[o..o + 4], &[4, 3, 2, 1]);
        assert_eq!(&p[o + 4..o + 12], b"abcdefgh");
        assert_eq!(p[o + 12], 0);
        assert_eq!(p[o + 18], (g.capabilities >> 16) as u8);
        assert_eq!(p[o + 20], 21); // auth-data length
        assert_eq!(&p[o + 21..o + 31], &[0u8; 10]);
        assert_eq!(&p[o + 31..o + 43], b"0123456789AB");
        assert_eq!(p[o + 43], 0);
        assert_eq!(&p[o + 44..], b"mysql_native_password\0");
    }

    /// A MariaDB 10.11 greeting, hand-assembled from the documented layout
    /// with the values a stock 10.11.6 server sends: "5.5.5-" replication
    /// prefix, CLIENT_MYSQL clear (so the last 4 reserved bytes carry
    /// MariaDB extended capabilities), utf8mb4_general_ci.
    const MARIADB_10_11_GREETING: &[u8] = &[
        0x0a, // protocol 10
        b'5', b'.', b'5', b'.', b'5', b'-', b'1', b'0', b'.', b'1', b'1', b'.', b'6', b'-', b'M',
        b'a', b'r', b'i', b'a', b'D', b'B', b'-', b'0', b'+', b'd', b'e', b'b', b'1', b'2', b'u',
        b'1', 0x00, // server version
        0x1f, 0x00, 0x00, 0x00, // connection id 31
        0x3e, 0x57, 0x5c, 0x6b, 0x2b, 0x6e, 0x2f, 0x3d, // scramble part 1
        0x00, // filler
        0xfe, 0xf7, // caps lower (CLIENT_MYSQL clear)
        0x2d, // utf8mb4_general_ci
        0x02, 0x00, // status: autocommit
        0xff, 0x81, // caps upper
        0x15, // auth data length 21
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // filler
        0x1d, 0x00, 0x00, 0x00, // MariaDB extended caps
        0x44, 0x57, 0x3c, 0x2c, 0x69, 0x37, 0x4a, 0x73, 0x60, 0x21, 0x3b, 0x40, // part 2
        0x00, b'm', b'y', b's', b'q', b'l', b'_', b'n', b'a', b't', b'i', b'v', b'e', b'_', b'p',
        b'a', b's', b's', b'w', b'o', b'r', b'd', 0x00,
    ];

    #[test]
    fn parse_mariadb_1011_greeting() {
        let g = parse_greeting(MARIADB_10_11_GREETING).unwrap();
        assert_eq!(g.protocol_version, 10);
        assert_eq!(g.server_version, "5.5.5-10.11.6-MariaDB-0+deb12u1");
        assert_eq!(g.connection_id, 31);
        assert_eq!(g.scramble.len(), 20);
        assert_eq!(
            &g.scramble[..8],
            &[0x3e, 0x57, 0x5c, 0x6b, 0x2b, 0x6e, 0x2f, 0x3d]
        );
        assert_eq!(g.scramble[19], 0x40);
        assert_eq!(g.capabilities, 0x81FF_F7FE);
        assert_eq!(g.capabilities & CLIENT_MYSQL, 0);
        assert_ne!(g.capabilities & CLIENT_PLUGIN_AUTH, 0);
        assert_ne!(g.capabilities & CLIENT_DEPRECATE_EOF, 0);
        assert_eq!(g.charset, UTF8MB4_GENERAL_CI);
        assert_eq!(g.status, SERVER_STATUS_AUTOCOMMIT);
        assert_eq!(g.auth_plugin, NATIVE_PASSWORD);
        // PROGRESS | STMT_BULK_OPERATIONS | EXTENDED_METADATA | CACHE_METADATA
        assert_eq!(
            g.ext_capabilities,
            MARIADB_CLIENT_PROGRESS
                | MARIADB_CLIENT_STMT_BULK_OPERATIONS
                | MARIADB_CLIENT_EXTENDED_METADATA
                | MARIADB_CLIENT_CACHE_METADATA
        );
        // What ringgate builds from it is the same bytes.
        assert_eq!(build_greeting(&g), MARIADB_10_11_GREETING);
    }

    #[test]
    fn ext_capabilities_only_count_without_client_mysql() {
        // A MySQL greeting (CLIENT_MYSQL set) never carries them, even if
        // the reserved bytes were not zero.
        let mut g = sample_greeting();
        g.capabilities |= CLIENT_MYSQL;
        g.ext_capabilities = 0x1d;
        let p = build_greeting(&g);
        let parsed = parse_greeting(&p).unwrap();
        assert_eq!(parsed.ext_capabilities, 0);
        let mut forged = p.clone();
        let at = p.len() - 13 - NATIVE_PASSWORD.len() - 1 - 4;
        forged[at..at + 4].copy_from_slice(&0x1du32.to_le_bytes());
        assert_eq!(parse_greeting(&forged).unwrap().ext_capabilities, 0);
        // Without CLIENT_MYSQL they round-trip.
        g.capabilities &= !CLIENT_MYSQL;
        assert_eq!(parse_greeting(&build_greeting(&g)).unwrap(), g);
    }

    #[test]
    fn response_ext_capabilities_follow_mariadb_rules() {
        let r = HandshakeResponse {
            capabilities: CLIENT_LONG_PASSWORD | CLIENT_DEPRECATE_EOF,
            username: "u".into(),
            auth_response: vec![1; 20],
            ..Default::default()
        };
        let mut p = build_handshake_response(&r);
        assert_eq!(response_ext_capabilities(&p), 0);
        // 0 asks for nothing and leaves the packet as it was.
        let before = p.clone();
        set_response_ext_capabilities(&mut p, 0);
        assert_eq!(p, before);
        set_response_ext_capabilities(&mut p, MARIADB_CLIENT_EXTENDED_METADATA);
        assert_eq!(
            response_ext_capabilities(&p),
            MARIADB_CLIENT_EXTENDED_METADATA
        );
        assert_eq!(p[0] & CLIENT_MYSQL as u8, 0);
        assert_eq!(&p[28..32], &[8, 0, 0, 0]);
        // The rest parses as before.
        let ClientHello::Response(back) = parse_handshake_response(&p).unwrap() else {
            panic!("expected a response");
        };
        assert_eq!(back.username, "u");
        assert_eq!(back.capabilities & CLIENT_MYSQL, 0);
        // A client that keeps CLIENT_MYSQL set has none, whatever its filler.
        p[0] |= CLIENT_MYSQL as u8;
        assert_eq!(response_ext_capabilities(&p), 0);
        // Too short to hold them: none, no panic.
        assert_eq!(response_ext_capabilities(&p[..20]), 0);
        let mut short = vec![0u8; 10];
        set_response_ext_capabilities(&mut short, 8);
        assert_eq!(short, vec![0u8; 10]);
    }

    #[test]
    fn greeting_err_packet_is_server_error() {
        // What a server at max_connections sends before any handshake:
        // no '#sqlstate' because the client's capabilities are unknown.
        let mut p = vec![0xFF, 0x10, 0x04];
        p.extend_from_slice(b"Too many connections");
        assert_eq!(
            parse_greeting(&p),
            Err(ProtocolError::ServerError {
                code: 1040,
                sqlstate: "HY000".into(),
                message: "Too many connections".into()
            })
        );
        let mut p = vec![0xFF, 0x10, 0x04, b'#'];
        p.extend_from_slice(b"08004Too many connections");
        assert!(matches!(
            parse_greeting(&p),
            Err(ProtocolError::ServerError { code: 1040, ref sqlstate, .. }) if sqlstate == "08004"
        ));
    }

    #[test]
    fn greeting_truncations_error() {
        let p = build_greeting(&sample_greeting());
        // Every strict prefix either errors or (for the pre-4.1 cut point)
        // parses; it never panics.
        for n in 0..p.len() {
            let _ = parse_greeting(&p[..n]);
        }
        assert!(parse_greeting(&[]).is_err());
        assert_eq!(
            parse_greeting(&[9, 0]),
            Err(ProtocolError::UnsupportedProtocolVersion(9))
        );
        assert!(parse_greeting(&p[..30]).is_err());
    }

    fn realistic_response_bytes() -> Vec<u8> {
        // Shaped like libmysqlclient 8.0 connecting with a schema.
        let caps: u32 = CLIENT_LONG_PASSWORD
            | CLIENT_LONG_FLAG
            | CLIENT_CONNECT_WITH_DB
            | CLIENT_LOCAL_FILES
            | CLIENT_PROTOCOL_41
            | CLIENT_INTERACTIVE
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_MULTI_STATEMENTS
            | CLIENT_MULTI_RESULTS
            | CLIENT_PS_MULTI_RESULTS
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_ATTRS
            | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
            | CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS
            | CLIENT_SESSION_TRACK
            | CLIENT_DEPRECATE_EOF;
        let mut p = Vec::new();
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&0x0100_0000u32.to_le_bytes());
        p.push(UTF8MB4_GENERAL_CI);
        p.extend_from_slice(&[0; 23]);
        p.extend_from_slice(b"alice\0");
        p.push(20);
        p.extend_from_slice(&native_token(b"secret", &SCRAMBLE));
        p.extend_from_slice(b"shop\0");
        p.extend_from_slice(b"caching_sha2_password\0");
        let mut attrs = Vec::new();
        for (k, v) in [
            ("_os", "Linux"),
            ("_client_name", "libmysql"),
            ("_pid", "4242"),
        ] {
            write_lenenc_str(&mut attrs, k.as_bytes());
            write_lenenc_str(&mut attrs, v.as_bytes());
        }
        write_lenenc_int(&mut p, attrs.len() as u64);
        p.extend_from_slice(&attrs);
        p
    }

    #[test]
    fn parse_realistic_response() {
        let p = realistic_response_bytes();
        let ClientHello::Response(r) = parse_handshake_response(&p).unwrap() else {
            panic!("expected a response");
        };
        assert_eq!(r.username, "alice");
        assert_eq!(r.max_packet_size, 0x0100_0000);
        assert_eq!(r.charset, UTF8MB4_GENERAL_CI);
        assert_eq!(r.auth_response, native_token(b"secret", &SCRAMBLE));
        assert_eq!(r.database.as_deref(), Some("shop"));
        assert_eq!(r.auth_plugin.as_deref(), Some("caching_sha2_password"));
        assert_eq!(r.connect_attrs.len(), 3);
        assert_eq!(
            r.connect_attrs[1],
            ("_client_name".into(), "libmysql".into())
        );
        assert_ne!(r.capabilities & CLIENT_DEPRECATE_EOF, 0);
    }

    #[test]
    fn response_build_parse_roundtrip() {
        let r = HandshakeResponse {
            capabilities: CLIENT_DEPRECATE_EOF | CLIENT_MULTI_RESULTS | CLIENT_LONG_PASSWORD,
            max_packet_size: 16 << 20,
            charset: UTF8MB4_GENERAL_CI,
            username: "proxy".into(),
            auth_response: native_token(b"pw", &SCRAMBLE),
            database: Some("app".into()),
            auth_plugin: Some(NATIVE_PASSWORD.into()),
            connect_attrs: vec![("program_name".into(), "ringgate".into())],
        };
        let p = build_handshake_response(&r);
        let ClientHello::Response(back) = parse_handshake_response(&p).unwrap() else {
            panic!("expected a response");
        };
        let required = CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_WITH_DB
            | CLIENT_CONNECT_ATTRS;
        assert_eq!(back.capabilities, r.capabilities | required);
        assert_eq!(
            HandshakeResponse {
                capabilities: r.capabilities,
                ..back
            },
            r
        );

        // Lenenc auth data and no database.
        let r2 = HandshakeResponse {
            capabilities: CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
            username: "u".into(),
            auth_response: vec![7; 300],
            ..Default::default()
        };
        let ClientHello::Response(back) =
            parse_handshake_response(&build_handshake_response(&r2)).unwrap()
        else {
            panic!("expected a response");
        };
        assert_eq!(back.auth_response, vec![7; 300]);
        assert_eq!(back.database, None);
        assert_eq!(back.auth_plugin.as_deref(), Some(NATIVE_PASSWORD));
    }

    #[test]
    fn ssl_request_detection() {
        let p = build_ssl_request(CLIENT_PLUGIN_AUTH, 1 << 24, UTF8MB4_GENERAL_CI);
        assert_eq!(p.len(), SSL_REQUEST_LEN);
        match parse_handshake_response(&p).unwrap() {
            ClientHello::SslRequest { capabilities } => {
                assert_ne!(capabilities & CLIENT_SSL, 0)
            }
            other => panic!("unexpected {other:?}"),
        }
        // Same 32 bytes without CLIENT_SSL: a response missing its user name.
        let mut p2 = p.clone();
        p2[1] &= !((CLIENT_SSL >> 8) as u8);
        assert_eq!(
            parse_handshake_response(&p2),
            Err(ProtocolError::Truncated { what: "user name" })
        );
    }

    #[test]
    fn old_protocol_rejected() {
        // HandshakeResponse320: 2-byte caps without PROTOCOL_41.
        let p = [0x85, 0x00, 0, 0, 0, b'u', 0];
        assert_eq!(
            parse_handshake_response(&p),
            Err(ProtocolError::OldClientProtocol)
        );
        assert!(parse_handshake_response(&[0x00]).is_err());
    }

    #[test]
    fn truncated_and_absurd_responses() {
        let p = realistic_response_bytes();
        for n in 0..p.len() {
            // No panics; cuts inside required fields are errors.
            let _ = parse_handshake_response(&p[..n]);
        }
        // Cut inside the user name.
        assert!(parse_handshake_response(&p[..34]).is_err());
        // Cut inside the auth response.
        assert!(parse_handshake_response(&p[..45]).is_err());

        let prefix = |caps: u32| {
            let mut v = Vec::new();
            v.extend_from_slice(&(caps | CLIENT_PROTOCOL_41).to_le_bytes());
            v.extend_from_slice(&[0; 4 + 1 + 23]);
            v.extend_from_slice(b"bob\0");
            v
        };
        // Absurd lenenc auth length (2^63).
        let mut p = prefix(CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA);
        p.push(0xFE);
        p.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0x80]);
        assert!(matches!(
            parse_handshake_response(&p),
            Err(ProtocolError::Truncated {
                what: "auth response"
            })
        ));
        // 1-byte auth length longer than the packet.
        let mut p = prefix(CLIENT_SECURE_CONNECTION);
        p.extend_from_slice(&[200, 1, 2, 3]);
        assert!(parse_handshake_response(&p).is_err());
        // Absurd connect-attrs length.
        let mut p = prefix(CLIENT_SECURE_CONNECTION | CLIENT_CONNECT_ATTRS);
        p.push(0);
        p.push(0xFE);
        p.extend_from_slice(&[0xFF; 8]);
        assert!(matches!(
            parse_handshake_response(&p),
            Err(ProtocolError::PacketTooLarge { .. })
        ));
        // Attr key length beyond the attrs block.
        let mut p = prefix(CLIENT_SECURE_CONNECTION | CLIENT_CONNECT_ATTRS);
        p.extend_from_slice(&[0, 3, 10, b'a', b'b']);
        assert!(parse_handshake_response(&p).is_err());
        // Non-UTF-8 user name.
        let mut p = prefix(CLIENT_SECURE_CONNECTION);
        let at = p.len() - 4;
        p[at] = 0xFF;
        p.push(0);
        assert_eq!(
            parse_handshake_response(&p),
            Err(ProtocolError::InvalidUtf8 { what: "user name" })
        );
    }

    #[test]
    fn empty_database_is_none_and_missing_trailing_fields_ok() {
        let mut p = Vec::new();
        let caps = CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_CONNECT_WITH_DB
            | CLIENT_PLUGIN_AUTH
            | CLIENT_CONNECT_ATTRS;
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&[0; 4 + 1 + 23]);
        p.extend_from_slice(b"root\0");
        p.push(0); // empty auth response
        p.extend_from_slice(b"\0"); // empty db
        let ClientHello::Response(r) = parse_handshake_response(&p).unwrap() else {
            panic!()
        };
        assert_eq!(r.database, None);
        assert_eq!(r.auth_plugin, None);
        assert!(r.connect_attrs.is_empty());
        assert!(r.auth_response.is_empty());
        // Plugin name without its NUL at the very end is accepted.
        p.extend_from_slice(b"mysql_native_password");
        let ClientHello::Response(r) = parse_handshake_response(&p).unwrap() else {
            panic!()
        };
        assert_eq!(r.auth_plugin.as_deref(), Some(NATIVE_PASSWORD));
    }

    #[test]
    fn nul_terminated_auth_without_secure_connection() {
        let mut p = Vec::new();
        p.extend_from_slice(&CLIENT_PROTOCOL_41.to_le_bytes());
        p.extend_from_slice(&[0; 4 + 1 + 23]);
        p.extend_from_slice(b"u\0tok\0");
        let ClientHello::Response(r) = parse_handshake_response(&p).unwrap() else {
            panic!()
        };
        assert_eq!(r.auth_response, b"tok");
    }

    #[test]
    fn auth_switch_request_bytes() {
        let p = build_auth_switch_request(NATIVE_PASSWORD, &SCRAMBLE);
        let mut want = vec![0xFE];
        want.extend_from_slice(b"mysql_native_password\0");
        want.extend_from_slice(&SCRAMBLE);
        want.push(0);
        assert_eq!(p, want);
    }
}

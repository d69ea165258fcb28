//! COM_CHANGE_USER (0x11): the command that logs a session in again as
//! another (or the same) user without a new connection.
//!
//! Layout (MySQL and MariaDB docs, checked against MariaDB 10.11's
//! `parse_com_change_user_packet`), with the capabilities negotiated at the
//! connection's login:
//!
//! ```text
//! 0x11
//! user                NUL-terminated
//! auth response       1-byte length + bytes with CLIENT_SECURE_CONNECTION,
//!                     else NUL-terminated
//! database            NUL-terminated (empty: none)
//! --- optional from here on (older clients stop after the database) ---
//! charset             u16 LE
//! auth plugin name    NUL-terminated (or up to the end), CLIENT_PLUGIN_AUTH
//! connect attrs       lenenc length + key/value lenenc pairs, CLIENT_CONNECT_ATTRS
//! ```
//!
//! The optional tail is read leniently: a missing charset keeps the
//! session's, a missing plugin name means the client's default
//! (mysql_native_password), missing attributes are none, and bytes after the
//! attributes are ignored (as MariaDB ignores them). A field that begins but
//! is cut short (a user without its NUL, an auth response shorter than its
//! length) is a [`ProtocolError`]; the session answers it as MariaDB does,
//! with ERR 1047 "Unknown command".

use super::constants::*;
use super::packet::Reader;
use super::ProtocolError;

/// A parsed COM_CHANGE_USER.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeUser {
    pub user: String,
    /// The mysql_native_password response computed with the connection's
    /// scramble (empty: no password given).
    pub auth_response: Vec<u8>,
    /// None: no schema (the empty string on the wire).
    pub database: Option<String>,
    /// The new character set/collation id; None: the packet has none.
    pub charset: Option<u16>,
    /// The plugin the response was computed for; None: not given.
    pub auth_plugin: Option<String>,
    pub connect_attrs: Vec<(String, String)>,
}

fn utf8(b: &[u8], what: &'static str) -> Result<String, ProtocolError> {
    std::str::from_utf8(b)
        .map(str::to_owned)
        .map_err(|_| ProtocolError::InvalidUtf8 { what })
}

/// Parse a COM_CHANGE_USER payload (command byte included) as a session
/// that negotiated `capabilities` reads it.
pub fn parse_change_user(payload: &[u8], capabilities: u32) -> Result<ChangeUser, ProtocolError> {
    let mut r = Reader::new(payload);
    if r.u8("command")? != COM_CHANGE_USER {
        return Err(ProtocolError::Malformed {
            what: "COM_CHANGE_USER",
            reason: "not a COM_CHANGE_USER packet",
        });
    }
    let user = utf8(r.nul_bytes("user name")?, "user name")?;
    let auth_response = if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        let n = usize::from(r.u8("auth response length")?);
        r.bytes(n, "auth response")?
    } else {
        r.nul_bytes("auth response")?
    }
    .to_vec();
    let db = r.nul_bytes("database")?;
    let database = if db.is_empty() {
        None
    } else {
        Some(utf8(db, "database")?)
    };
    let mut out = ChangeUser {
        user,
        auth_response,
        database,
        ..ChangeUser::default()
    };
    if r.remaining() >= 2 {
        out.charset = Some(r.u16("charset")?);
    } else {
        // One stray byte where the charset would be: MariaDB reads the
        // charset only when both bytes are there; so do we.
        return Ok(out);
    }
    if capabilities & CLIENT_PLUGIN_AUTH != 0 && !r.is_empty() {
        let name = r.nul_bytes_or_rest();
        if !name.is_empty() {
            out.auth_plugin = Some(utf8(name, "auth plugin name")?);
        }
    }
    if capabilities & CLIENT_CONNECT_ATTRS != 0 && !r.is_empty() {
        out.connect_attrs = super::handshake::read_connect_attrs(&mut r)?;
    }
    Ok(out)
}

/// Build a COM_CHANGE_USER payload (for tests and the fuzz seeds).
pub fn build_change_user(c: &ChangeUser, capabilities: u32) -> Vec<u8> {
    use super::packet::{write_lenenc_str, write_nul_str};
    let mut out = vec![COM_CHANGE_USER];
    write_nul_str(&mut out, c.user.as_bytes());
    if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        out.push(c.auth_response.len().min(255) as u8);
        out.extend_from_slice(&c.auth_response[..c.auth_response.len().min(255)]);
    } else {
        write_nul_str(&mut out, &c.auth_response);
    }
    write_nul_str(&mut out, c.database.as_deref().unwrap_or("").as_bytes());
    let Some(charset) = c.charset else {
        return out;
    };
    out.extend_from_slice(&charset.to_le_bytes());
    if capabilities & CLIENT_PLUGIN_AUTH != 0 {
        write_nul_str(&mut out, c.auth_plugin.as_deref().unwrap_or("").as_bytes());
    }
    if capabilities & CLIENT_CONNECT_ATTRS != 0 {
        let mut block = Vec::new();
        for (k, v) in &c.connect_attrs {
            write_lenenc_str(&mut block, k.as_bytes());
            write_lenenc_str(&mut block, v.as_bytes());
        }
        write_lenenc_str(&mut out, &block);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: u32 = CLIENT_PROTOCOL_41
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH
        | CLIENT_CONNECT_ATTRS
        | CLIENT_CONNECT_WITH_DB;

    fn full() -> ChangeUser {
        ChangeUser {
            user: "bob".into(),
            auth_response: vec![7; 20],
            database: Some("shop".into()),
            charset: Some(8),
            auth_plugin: Some("mysql_native_password".into()),
            connect_attrs: vec![("_client_name".into(), "libmariadb".into())],
        }
    }

    #[test]
    fn roundtrip_with_every_field() {
        let c = full();
        assert_eq!(parse_change_user(&build_change_user(&c, CAPS), CAPS), Ok(c));
    }

    /// What mysql-connector-python 9.x sends to MariaDB 10.11 (captured
    /// layout: user, 20-byte response, db, charset 45, plugin, attrs).
    #[test]
    fn parses_connector_python_bytes() {
        let mut p = vec![0x11];
        p.extend_from_slice(b"cub\0");
        p.push(20);
        p.extend_from_slice(&[0xAB; 20]);
        p.extend_from_slice(b"ringgate_test\0");
        p.extend_from_slice(&[45, 0]);
        p.extend_from_slice(b"mysql_native_password\0");
        p.extend_from_slice(&[0x0A, 3, b'_', b'o', b's', 5, b'L', b'i', b'n', b'u', b'x']);
        let c = parse_change_user(&p, CAPS).expect("parses");
        assert_eq!(c.user, "cub");
        assert_eq!(c.auth_response, vec![0xAB; 20]);
        assert_eq!(c.database.as_deref(), Some("ringgate_test"));
        assert_eq!(c.charset, Some(45));
        assert_eq!(c.auth_plugin.as_deref(), Some("mysql_native_password"));
        assert_eq!(c.connect_attrs, vec![("_os".into(), "Linux".into())]);
    }

    #[test]
    fn optional_tail_may_be_missing() {
        // An old client: user, response, database, nothing else.
        let c = ChangeUser {
            user: "u".into(),
            auth_response: vec![],
            database: None,
            ..Default::default()
        };
        let bytes = build_change_user(&c, CAPS);
        assert_eq!(bytes, b"\x11u\0\0\0");
        assert_eq!(parse_change_user(&bytes, CAPS), Ok(c.clone()));
        // One byte where the two charset bytes belong is ignored.
        let mut one = bytes.clone();
        one.push(8);
        assert_eq!(parse_change_user(&one, CAPS), Ok(c.clone()));
        // Charset only.
        let mut cs = bytes.clone();
        cs.extend_from_slice(&[33, 0]);
        let got = parse_change_user(&cs, CAPS).expect("parses");
        assert_eq!(got.charset, Some(33));
        assert_eq!(got.auth_plugin, None);
        // Plugin name without its NUL runs to the end.
        let mut plugin = cs.clone();
        plugin.extend_from_slice(b"caching_sha2_password");
        let got = parse_change_user(&plugin, CAPS).expect("parses");
        assert_eq!(got.auth_plugin.as_deref(), Some("caching_sha2_password"));
        // Bytes after the attributes are ignored, as MariaDB ignores them.
        let mut trailing = build_change_user(&full(), CAPS);
        trailing.extend_from_slice(b"junk");
        assert_eq!(parse_change_user(&trailing, CAPS), Ok(full()));
    }

    #[test]
    fn capabilities_decide_the_layout() {
        // Without CLIENT_SECURE_CONNECTION the response is NUL-terminated;
        // without PLUGIN_AUTH / CONNECT_ATTRS those fields are not read.
        let caps = CLIENT_PROTOCOL_41;
        let c = ChangeUser {
            user: "u".into(),
            auth_response: b"scrambled".to_vec(),
            database: Some("d".into()),
            charset: Some(8),
            ..Default::default()
        };
        let bytes = build_change_user(&c, caps);
        assert_eq!(bytes, b"\x11u\0scrambled\0d\0\x08\0");
        assert_eq!(parse_change_user(&bytes, caps), Ok(c));
    }

    #[test]
    fn truncated_fields_are_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "command"),
            (b"\x11", "user name"),
            (b"\x11bob", "user name"),
            (b"\x11bob\0", "auth response length"),
            (b"\x11bob\0\x14abc", "auth response"),
            (b"\x11bob\0\0", "database"),
            (b"\x11bob\0\0shop", "database"),
        ];
        for (bytes, what) in cases {
            assert_eq!(
                parse_change_user(bytes, CAPS),
                Err(ProtocolError::Truncated { what }),
                "{bytes:?}"
            );
        }
        // Attributes whose length runs past the packet.
        let mut attrs = b"\x11bob\0\0\0\x08\0mysql_native_password\0".to_vec();
        attrs.extend_from_slice(&[0x20, 1, b'k']);
        assert!(parse_change_user(&attrs, CAPS).is_err());
        // Not COM_CHANGE_USER at all.
        assert!(matches!(
            parse_change_user(b"\x03select 1", CAPS),
            Err(ProtocolError::Malformed { .. })
        ));
        // A user name that is not UTF-8.
        assert_eq!(
            parse_change_user(b"\x11\xff\0\0\0", CAPS),
            Err(ProtocolError::InvalidUtf8 { what: "user name" })
        );
    }

    #[test]
    fn garbage_never_panics() {
        let base = build_change_user(&full(), CAPS);
        for cut in 0..=base.len() {
            let _ = parse_change_user(&base[..cut], CAPS);
            let _ = parse_change_user(&base[..cut], 0);
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut b = base.clone();
            let i = (state as usize) % b.len();
            b[i] = (state >> 32) as u8;
            b.truncate(((state >> 40) as usize) % (b.len() + 1));
            let _ = parse_change_user(&b, CAPS);
        }
    }
}

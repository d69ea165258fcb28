//! Server reply packets the proxy builds (OK, ERR, commands for backends)
//! or inspects (backend login replies, OK after COM_RESET_CONNECTION /
//! COM_INIT_DB).

use crate::constants::*;
use crate::packet::{write_lenenc_int, Reader};
use crate::ProtocolError;

/// SQLSTATE reported when an ERR packet carries none (pre-4.1 framing, or an
/// ERR sent before the handshake negotiated CLIENT_PROTOCOL_41).
const DEFAULT_SQLSTATE: &str = "HY000";

/// ERR payload with the SQLSTATE MySQL uses for `code`.
pub fn err_payload(code: u16, message: &str) -> Vec<u8> {
    err_payload_with_state(code, sqlstate_for(code), message)
}

/// ERR payload: 0xFF, code (LE), '#', 5-byte SQLSTATE, message.
///
/// The SQLSTATE field is fixed-width on the wire, so a state of another
/// length is padded with '0' or truncated rather than corrupting the framing.
pub fn err_payload_with_state(code: u16, sqlstate: &str, message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + message.len());
    out.push(ERR_HEADER);
    out.extend_from_slice(&code.to_le_bytes());
    out.push(b'#');
    let mut state = [b'0'; 5];
    for (d, s) in state.iter_mut().zip(sqlstate.bytes()) {
        *d = s;
    }
    out.extend_from_slice(&state);
    out.extend_from_slice(message.as_bytes());
    out
}

/// OK payload in the 4.1 format (status and warning count included).
pub fn ok_payload(affected_rows: u64, last_insert_id: u64, status: u16, warnings: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.push(OK_HEADER);
    write_lenenc_int(&mut out, affected_rows);
    write_lenenc_int(&mut out, last_insert_id);
    out.extend_from_slice(&status.to_le_bytes());
    out.extend_from_slice(&warnings.to_le_bytes());
    out
}

/// A command payload: command byte followed by its argument (schema name
/// for COM_INIT_DB, SQL text for COM_QUERY, nothing for COM_QUIT /
/// COM_PING / COM_RESET_CONNECTION).
pub fn com_payload(cmd: u8, arg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + arg.len());
    out.push(cmd);
    out.extend_from_slice(arg);
    out
}

/// A decoded server reply to a command or to a login step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerReply {
    Ok {
        status: u16,
        affected_rows: u64,
    },
    Err {
        code: u16,
        sqlstate: String,
        message: String,
    },
    /// Legacy EOF, or the 0xFE-headed OK that ends a result set under
    /// CLIENT_DEPRECATE_EOF.
    Eof {
        status: u16,
    },
    /// The server wants another authentication plugin. `data` is the new
    /// scramble with MySQL's trailing NUL removed.
    AuthSwitch {
        plugin: String,
        data: Vec<u8>,
    },
    /// Extra authentication data (caching_sha2: 0x03 fast-auth success,
    /// 0x04 full authentication required, or an RSA public key).
    AuthMoreData(Vec<u8>),
    /// Anything else; the first payload byte (e.g. a column count).
    Other(u8),
}

/// Parses an ERR payload into (code, sqlstate, message). The `#sqlstate`
/// marker is optional because servers omit it before CLIENT_PROTOCOL_41 has
/// been negotiated.
pub fn parse_err(payload: &[u8]) -> Result<(u16, String, String), ProtocolError> {
    let mut r = Reader::new(payload);
    if r.u8("ERR header")? != ERR_HEADER {
        return Err(ProtocolError::Malformed {
            what: "ERR packet",
            reason: "does not start with 0xFF",
        });
    }
    let code = r.u16("error code")?;
    let sqlstate = if r.peek_u8() == Some(b'#') && r.remaining() >= 6 {
        r.skip(1, "sqlstate marker")?;
        String::from_utf8_lossy(r.bytes(5, "sqlstate")?).into_owned()
    } else {
        DEFAULT_SQLSTATE.to_owned()
    };
    let message = String::from_utf8_lossy(r.rest()).into_owned();
    Ok((code, sqlstate, message))
}

/// Parses an OK payload (0x00 or, under DEPRECATE_EOF, 0xFE header) into
/// (affected rows, status). Status is 0 if a pre-4.1 server omitted it.
fn parse_ok_body(payload: &[u8]) -> Result<(u64, u16), ProtocolError> {
    let mut r = Reader::new(payload);
    r.skip(1, "OK header")?;
    let affected = r.lenenc_int("affected rows")?;
    let _last_insert_id = r.lenenc_int("last insert id")?;
    let status = if r.remaining() >= 2 {
        r.u16("status flags")?
    } else {
        0
    };
    Ok((affected, status))
}

fn parse_legacy_eof(payload: &[u8]) -> Result<u16, ProtocolError> {
    let mut r = Reader::new(payload);
    r.skip(1, "EOF header")?;
    if r.is_empty() {
        // Pre-4.1 EOF is the lone 0xFE byte.
        return Ok(0);
    }
    let _warnings = r.u16("EOF warnings")?;
    r.u16("EOF status flags")
}

fn parse_auth_switch(payload: &[u8]) -> Result<ServerReply, ProtocolError> {
    let mut r = Reader::new(payload);
    r.skip(1, "auth switch header")?;
    if r.is_empty() {
        // A lone 0xFE during login is the old "use the pre-4.1 password"
        // request (AuthSwitchRequest without plugin name).
        return Ok(ServerReply::AuthSwitch {
            plugin: "mysql_old_password".to_owned(),
            data: Vec::new(),
        });
    }
    let plugin = std::str::from_utf8(r.nul_bytes_or_rest())
        .map_err(|_| ProtocolError::InvalidUtf8 {
            what: "auth plugin name",
        })?
        .to_owned();
    let data = r.rest();
    let data = match data.split_last() {
        Some((0, head)) => head,
        _ => data,
    };
    Ok(ServerReply::AuthSwitch {
        plugin,
        data: data.to_vec(),
    })
}

fn parse_err_reply(payload: &[u8]) -> Result<ServerReply, ProtocolError> {
    let (code, sqlstate, message) = parse_err(payload)?;
    Ok(ServerReply::Err {
        code,
        sqlstate,
        message,
    })
}

fn parse_ok_reply(payload: &[u8]) -> Result<ServerReply, ProtocolError> {
    let (affected_rows, status) = parse_ok_body(payload)?;
    Ok(ServerReply::Ok {
        status,
        affected_rows,
    })
}

/// Classifies a reply in the command phase.
///
/// 0xFE is an EOF/terminator when shorter than 9 bytes (legacy EOF is 5
/// bytes); with `deprecate_eof` it is the OK-formatted terminator of any
/// length below [`MAX_PAYLOAD`] (a longer 0xFE packet is a data row). A
/// legacy-mode 0xFE packet of 9+ bytes can only be an AuthSwitchRequest
/// (e.g. after COM_CHANGE_USER).
pub fn parse_reply(payload: &[u8], deprecate_eof: bool) -> Result<ServerReply, ProtocolError> {
    let Some(&first) = payload.first() else {
        return Err(ProtocolError::Truncated {
            what: "reply header",
        });
    };
    match first {
        OK_HEADER => parse_ok_reply(payload),
        ERR_HEADER => parse_err_reply(payload),
        EOF_HEADER if payload.len() >= MAX_PAYLOAD => Ok(ServerReply::Other(first)),
        EOF_HEADER if deprecate_eof && payload.len() != 5 => {
            let (_, status) = parse_ok_body(payload)?;
            Ok(ServerReply::Eof { status })
        }
        EOF_HEADER if payload.len() < 9 => Ok(ServerReply::Eof {
            status: parse_legacy_eof(payload)?,
        }),
        EOF_HEADER => parse_auth_switch(payload),
        other => Ok(ServerReply::Other(other)),
    }
}

/// Classifies a reply during the connection phase, where 0xFE always means
/// AuthSwitchRequest and 0x01 means AuthMoreData.
pub fn parse_auth_reply(payload: &[u8]) -> Result<ServerReply, ProtocolError> {
    let Some((&first, rest)) = payload.split_first() else {
        return Err(ProtocolError::Truncated {
            what: "auth reply header",
        });
    };
    match first {
        OK_HEADER => parse_ok_reply(payload),
        ERR_HEADER => parse_err_reply(payload),
        EOF_HEADER => parse_auth_switch(payload),
        AUTH_MORE_DATA_HEADER => Ok(ServerReply::AuthMoreData(rest.to_vec())),
        other => Ok(ServerReply::Other(other)),
    }
}

/// What the server answered to a pipelined `COM_RESET_CONNECTION` +
/// `COM_QUERY "SELECT DATABASE()"` pair, which the proxy sends when it puts a
/// backend connection back in the pool. COM_RESET_CONNECTION does not change
/// the current schema, so the pool has to learn it to never hand a client
/// that asked for no schema a connection still in someone else's. In front
/// of MariaDB the query is `SELECT DATABASE(), CURRENT_ROLE()`: MariaDB's
/// reset keeps the role of a `SET ROLE` too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetOutcome {
    /// The reset succeeded; the connection's current schema (None = none)
    /// and, when the query asked for it, its current role (None = none).
    Reset {
        schema: Option<String>,
        role: Option<String>,
    },
    /// The server refused the reset or the query.
    Failed { code: u16, message: String },
}

/// Parse the replies to the reset pair from the start of `buf`. `Ok(None)`
/// means more bytes are needed. Replies are small (one OK, a one-row,
/// one-column result), so they are parsed whole.
///
/// `restore_statements`: statements pipelined between the reset and the
/// query to restore what the reset undid (each answers with one OK).
pub fn parse_reset_replies(
    buf: &[u8],
    deprecate_eof: bool,
    restore_statements: usize,
) -> Result<Option<ResetOutcome>, ProtocolError> {
    use crate::packet::split_packet;
    let mut rest = buf;
    let mut next = || -> Option<Vec<u8>> {
        let (p, used) = split_packet(rest)?;
        let payload = p.payload.to_vec();
        rest = &rest[used..];
        Some(payload)
    };
    for _ in 0..=restore_statements {
        let Some(ok) = next() else { return Ok(None) };
        match parse_reply(&ok, deprecate_eof)? {
            ServerReply::Ok { .. } => {}
            ServerReply::Err { code, message, .. } => {
                return Ok(Some(ResetOutcome::Failed { code, message }))
            }
            _ => {
                return Err(ProtocolError::Malformed {
                    what: "COM_RESET_CONNECTION reply",
                    reason: "neither OK nor ERR",
                })
            }
        }
    }
    let Some(first) = next() else { return Ok(None) };
    if first.first() == Some(&ERR_HEADER) {
        let (code, _, message) = parse_err(&first)?;
        return Ok(Some(ResetOutcome::Failed { code, message }));
    }
    // One column (schema) or two (schema, role); with
    // MARIADB_CLIENT_CACHE_METADATA the count is followed by a "metadata
    // follows" byte, always 1 for a text result.
    let columns = match first.as_slice() {
        [n @ (1 | 2)] | [n @ (1 | 2), 1] => usize::from(*n),
        _ => {
            return Err(ProtocolError::Malformed {
                what: "SELECT DATABASE() result",
                reason: "expected one or two columns",
            })
        }
    };
    // The column definitions, then an EOF unless DEPRECATE_EOF.
    for _ in 0..columns {
        if next().is_none() {
            return Ok(None);
        }
    }
    if !deprecate_eof && next().is_none() {
        return Ok(None);
    }
    let Some(row) = next() else { return Ok(None) };
    let mut r = Reader::new(&row);
    let mut text = |what: &'static str| -> Result<Option<String>, ProtocolError> {
        if r.peek_u8() == Some(0xFB) {
            r.skip(1, what)?;
            return Ok(None);
        }
        let bytes = r.lenenc_bytes(what)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| ProtocolError::InvalidUtf8 { what })
    };
    let schema = text("schema name")?;
    let role = if columns == 2 {
        text("role name")?
    } else {
        None
    };
    // The terminator (EOF, or OK with a 0xFE header).
    if next().is_none() {
        return Ok(None);
    }
    Ok(Some(ResetOutcome::Reset { schema, role }))
}

/// Parse the reply to a proxy-internal query of one column and one row
/// (`SELECT LAST_INSERT_ID()`) from the start of `buf`. `Ok(None)`: more
/// bytes are needed. The value is the row's text (None for NULL); an ERR
/// is `Err((code, message))` inside.
#[allow(clippy::type_complexity)]
pub fn parse_one_value(
    buf: &[u8],
    deprecate_eof: bool,
) -> Result<Option<Result<Option<String>, (u16, String)>>, ProtocolError> {
    use crate::packet::split_packet;
    let mut rest = buf;
    let mut next = || -> Option<Vec<u8>> {
        let (p, used) = split_packet(rest)?;
        let payload = p.payload.to_vec();
        rest = &rest[used..];
        Some(payload)
    };
    let Some(first) = next() else { return Ok(None) };
    if first.first() == Some(&ERR_HEADER) {
        let (code, _, message) = parse_err(&first)?;
        return Ok(Some(Err((code, message))));
    }
    // One column; with MARIADB_CLIENT_CACHE_METADATA the count is followed
    // by a "metadata follows" byte, always 1 for a text result.
    if !matches!(first.as_slice(), [1] | [1, 1]) {
        return Err(ProtocolError::Malformed {
            what: "one-value result",
            reason: "expected one column",
        });
    }
    // The column definition, then an EOF unless DEPRECATE_EOF.
    if next().is_none() || (!deprecate_eof && next().is_none()) {
        return Ok(None);
    }
    let Some(row) = next() else { return Ok(None) };
    let mut r = Reader::new(&row);
    let value = if r.peek_u8() == Some(0xFB) {
        None
    } else {
        let bytes = r.lenenc_bytes("value")?;
        Some(
            String::from_utf8(bytes.to_vec())
                .map_err(|_| ProtocolError::InvalidUtf8 { what: "value" })?,
        )
    };
    // The terminator (EOF, or OK with a 0xFE header).
    if next().is_none() {
        return Ok(None);
    }
    Ok(Some(Ok(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Legacy 5-byte EOF payload: the proxy never builds one (it relays the
    /// server's), but the tests need servers' replies.
    fn eof_payload(status: u16, warnings: u16) -> Vec<u8> {
        let mut out = vec![EOF_HEADER];
        out.extend_from_slice(&warnings.to_le_bytes());
        out.extend_from_slice(&status.to_le_bytes());
        out
    }

    #[test]
    fn err_1045_bytes() {
        let p = err_payload(
            ER_ACCESS_DENIED_ERROR,
            "Access denied for user 'bob'@'10.0.0.1' (using password: YES)",
        );
        let mut want = vec![0xFF, 0x15, 0x04, b'#', b'2', b'8', b'0', b'0', b'0'];
        want.extend_from_slice(b"Access denied for user 'bob'@'10.0.0.1' (using password: YES)");
        assert_eq!(p, want);
        assert_eq!(
            parse_reply(&p, false).unwrap(),
            ServerReply::Err {
                code: 1045,
                sqlstate: "28000".into(),
                message: "Access denied for user 'bob'@'10.0.0.1' (using password: YES)".into(),
            }
        );
    }

    #[test]
    fn err_with_state_is_fixed_width() {
        assert_eq!(&err_payload_with_state(1, "42", "")[3..], b"#42000");
        assert_eq!(&err_payload_with_state(1, "4200012", "m")[3..], b"#42000m");
        assert_eq!(&err_payload(1064, "x")[3..], b"#HY000x");
    }

    #[test]
    fn ok_roundtrip() {
        let p = ok_payload(300, 7, SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_IN_TRANS, 2);
        assert_eq!(p, [0x00, 0xFC, 0x2C, 0x01, 7, 3, 0, 2, 0]);
        assert_eq!(
            parse_reply(&p, false).unwrap(),
            ServerReply::Ok {
                status: 3,
                affected_rows: 300
            }
        );
        assert_eq!(
            parse_auth_reply(&ok_payload(0, 0, 2, 0)).unwrap(),
            ServerReply::Ok {
                status: 2,
                affected_rows: 0
            }
        );
    }

    #[test]
    fn eof_forms() {
        let legacy = eof_payload(SERVER_MORE_RESULTS_EXISTS | SERVER_STATUS_AUTOCOMMIT, 0);
        assert_eq!(legacy, [0xFE, 0, 0, 0x0A, 0]);
        assert_eq!(
            parse_reply(&legacy, false).unwrap(),
            ServerReply::Eof { status: 0x0A }
        );
        // A 5-byte EOF is still read as legacy even if DEPRECATE_EOF was asked.
        assert_eq!(
            parse_reply(&legacy, true).unwrap(),
            ServerReply::Eof { status: 0x0A }
        );
        // DEPRECATE_EOF terminator: OK format with 0xFE header.
        let mut ok_eof = ok_payload(0, 0, SERVER_STATUS_IN_TRANS, 1);
        ok_eof[0] = 0xFE;
        assert_eq!(
            parse_reply(&ok_eof, true).unwrap(),
            ServerReply::Eof { status: 1 }
        );
        assert_eq!(
            parse_reply(&[0xFE], false).unwrap(),
            ServerReply::Eof { status: 0 }
        );
    }

    #[test]
    fn auth_switch_and_more_data() {
        let scramble = *b"abcdefgh0123456789AB";
        let p = crate::handshake::build_auth_switch_request("mysql_native_password", &scramble);
        let want = ServerReply::AuthSwitch {
            plugin: "mysql_native_password".into(),
            data: scramble.to_vec(),
        };
        assert_eq!(parse_auth_reply(&p).unwrap(), want);
        // In the command phase (legacy EOF mode) a long 0xFE is an auth switch.
        assert_eq!(parse_reply(&p, false).unwrap(), want);
        assert_eq!(
            parse_auth_reply(&[0xFE]).unwrap(),
            ServerReply::AuthSwitch {
                plugin: "mysql_old_password".into(),
                data: vec![]
            }
        );
        assert_eq!(
            parse_auth_reply(&[0x01, 0x03]).unwrap(),
            ServerReply::AuthMoreData(vec![3])
        );
        // In the command phase 0x01 is a column count.
        assert_eq!(parse_reply(&[0x01], false).unwrap(), ServerReply::Other(1));
    }

    #[test]
    fn malformed_replies() {
        assert!(parse_reply(&[], false).is_err());
        assert!(parse_auth_reply(&[]).is_err());
        assert!(parse_reply(&[0xFF, 0x15], false).is_err());
        assert!(parse_reply(&[0x00, 0xFC, 0x01], false).is_err());
        assert!(parse_reply(&[0x00, 0xFB], false).is_err());
        assert!(parse_reply(&[0xFE, 0, 0], false).is_err());
        // ERR without '#sqlstate'.
        let (code, state, msg) = parse_err(&[0xFF, 0x10, 0x04, b'h', b'i']).unwrap();
        assert_eq!((code, state.as_str(), msg.as_str()), (1040, "HY000", "hi"));
        assert!(parse_err(&[0x00, 0, 0]).is_err());
    }

    #[test]
    fn command_payloads() {
        assert_eq!(com_payload(COM_INIT_DB, b"shop"), b"\x02shop");
        assert_eq!(com_payload(COM_RESET_CONNECTION, b""), [0x1F]);
        assert_eq!(com_payload(COM_QUIT, b""), [0x01]);
    }

    fn packets(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            crate::packet::write_packet(&mut out, i as u8, p);
        }
        out
    }

    #[test]
    fn reset_replies_report_the_schema() {
        let ok = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0);
        let coldef = b"\x03def\x00\x00\x00\x0aDATABASE()\x00\x0c\x21\x00\x00\x01\x00\x00\xfd\x00\x00\x1f\x00\x00";
        let eof = eof_payload(SERVER_STATUS_AUTOCOMMIT, 0);
        let null_row: &[u8] = &[0xFB];
        let shop_row: &[u8] = b"\x04shop";
        let mut buf = packets(&[&ok]);
        buf.extend(packets(&[&[1], coldef, &eof, null_row, &eof]));
        assert_eq!(
            parse_reset_replies(&buf, false, 0),
            Ok(Some(ResetOutcome::Reset {
                schema: None,
                role: None
            }))
        );
        // Every prefix is "need more".
        for cut in 0..buf.len() {
            assert_eq!(
                parse_reset_replies(&buf[..cut], false, 0),
                Ok(None),
                "cut {cut}"
            );
        }
        let mut buf = packets(&[&ok]);
        let term = [0xFE, 0, 0, 2, 0, 0, 0];
        buf.extend(packets(&[&[1], coldef, shop_row, &term]));
        assert_eq!(
            parse_reset_replies(&buf, true, 0),
            Ok(Some(ResetOutcome::Reset {
                schema: Some("shop".into()),
                role: None
            }))
        );
        // A connection with MARIADB_CLIENT_CACHE_METADATA: the column count
        // carries the "metadata follows" byte (`01 01`), and with
        // MARIADB_CLIENT_EXTENDED_METADATA the definition is longer; both
        // as MariaDB 10.11 sends them.
        let ext_coldef = b"\x03def\x00\x00\x00\x0aDATABASE()\x00\x00\x0c\x2d\x00\x00\x01\x00\x00\xfd\x00\x00\x27\x00\x00";
        let mut buf = packets(&[&ok]);
        buf.extend(packets(&[&[1, 1], ext_coldef, shop_row, &term]));
        assert_eq!(
            parse_reset_replies(&buf, true, 0),
            Ok(Some(ResetOutcome::Reset {
                schema: Some("shop".into()),
                role: None
            }))
        );
        // `SELECT DATABASE(), CURRENT_ROLE()` (in front of MariaDB): two
        // columns, a role still active after the reset, and none.
        let role_coldef = b"\x03def\x00\x00\x00\x0eCURRENT_ROLE()\x00\x0c\x21\x00\x00\x01\x00\x00\xfd\x00\x00\x1f\x00\x00";
        let mut buf = packets(&[&ok]);
        buf.extend(packets(&[
            &[2],
            coldef,
            role_coldef,
            &eof,
            b"\x04shop\x05admin",
            &eof,
        ]));
        assert_eq!(
            parse_reset_replies(&buf, false, 0),
            Ok(Some(ResetOutcome::Reset {
                schema: Some("shop".into()),
                role: Some("admin".into())
            }))
        );
        for cut in 0..buf.len() {
            assert_eq!(
                parse_reset_replies(&buf[..cut], false, 0),
                Ok(None),
                "cut {cut}"
            );
        }
        let mut buf = packets(&[&ok]);
        buf.extend(packets(&[
            &[2, 1],
            coldef,
            role_coldef,
            &[0xFB, 0xFB],
            &term,
        ]));
        assert_eq!(
            parse_reset_replies(&buf, true, 0),
            Ok(Some(ResetOutcome::Reset {
                schema: None,
                role: None
            }))
        );
        let mut three = packets(&[&ok]);
        three.extend(packets(&[&[3]]));
        assert!(parse_reset_replies(&three, true, 0).is_err());
        let err = packets(&[&err_payload(1047, "Unknown command")]);
        assert!(matches!(
            parse_reset_replies(&err, false, 0),
            Ok(Some(ResetOutcome::Failed { code: 1047, .. }))
        ));
    }
}

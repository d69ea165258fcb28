//! A client that negotiates CLIENT_DEPRECATE_EOF gets every reply in that framing through the
//! proxy: text and binary result sets, prepared statements, a cursor and multi-results. Every
//! test runs the real `ringgate` binary in front of the sandbox MariaDB and ends with a leak
//! check.

use std::net::TcpStream;
use std::time::Duration;

use mysql::prelude::Queryable;
use testkit::both_modes;
use testkit::env::{APP_PASSWORD, APP_USER};
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::mysql_client::direct_conn;
use testkit::proxy::{Mode, Proxy};
use testkit::rawclient::{
    connect_to, hello_with, lenenc, parse_row, read_packet, write_packet, RAW_CAPS,
};
use wire::auth::native_token;
use wire::constants::*;
use wire::handshake::{build_handshake_response, parse_greeting, HandshakeResponse};

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
    let mut s = connect_to(
        &format!("127.0.0.1:{}", proxy.port),
        Duration::from_secs(10),
    );
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
        &hello_with(caps, APP_USER, "mysql_native_password", token),
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
        let mut s = connect_to(&format!("127.0.0.1:{port}"), Duration::from_secs(10));
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
        let (affected, a) = lenenc(&p[1..]).expect("a length-encoded integer");
        let (_, b) = lenenc(&p[1 + a..]).expect("a length-encoded integer");
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
                    let (len, used) = lenenc(&d[pos..]).expect("a length-encoded integer");
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
                    let (n, _) = lenenc(&first).expect("a length-encoded integer");
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
                            parse_row(&p).expect("a text row")
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
        let (n, _) = lenenc(&self.packet()).expect("a length-encoded integer");
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
            let (len, used) = lenenc(&p[pos..]).expect("a length-encoded integer");
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

//! The whole reply to one text command, as a test compares it: OK, ERR or rows.

use std::io;
use std::net::TcpStream;

use super::packet::{err_code, read_packet, write_packet};
use super::result::{com_query, is_eof};
use super::row::{lenenc, text_row};

/// What a command got back (the fields are read through `Debug` in failure messages).
#[derive(Debug)]
pub enum Reply {
    /// OK: affected rows.
    Ok(u64),
    /// ERR: code, message.
    Err(u16, String),
    /// A result set (classic EOFs): its rows.
    Rows(Vec<Vec<Option<Vec<u8>>>>),
}

/// Reads one whole response to a text command (classic EOF framing, single result).
pub fn read_reply(s: &mut TcpStream) -> io::Result<Reply> {
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
        if is_eof(&p) {
            return Ok(Reply::Rows(rows));
        }
        if p.first() == Some(&0xFF) {
            let code = err_code(&p).unwrap_or(0);
            let msg = p.get(9..).expect("an ERR packet with a message");
            let msg = String::from_utf8_lossy(msg).into_owned();
            return Ok(Reply::Err(code, msg));
        }
        rows.push(text_row(&p));
    }
}

/// The single value of a one-row, one-column result, as text.
pub fn single_value(reply: Reply) -> String {
    match reply {
        Reply::Rows(rows) if rows.len() == 1 && rows[0].len() == 1 => {
            String::from_utf8_lossy(rows[0][0].as_deref().unwrap_or(b"NULL")).into_owned()
        }
        other => panic!("want one row with one column, got {other:?}"),
    }
}

/// Runs one COM_QUERY and returns its reply; panics (bounded by the read timeout) otherwise.
pub fn query_reply(s: &mut TcpStream, sql: &str) -> Reply {
    write_packet(s, 0, &com_query(sql)).unwrap_or_else(|e| panic!("send {sql:?}: {e}"));
    read_reply(s).unwrap_or_else(|e| panic!("reply to {sql:?}: {e}"))
}

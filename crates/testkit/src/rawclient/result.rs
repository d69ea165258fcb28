//! COM_QUERY and its text-protocol answer with classic EOFs (the raw clients do not negotiate
//! CLIENT_DEPRECATE_EOF): the rows, their byte count, or one value.

use std::net::TcpStream;

use super::packet::{err_code, err_text, read_packet, write_packet};
use super::row::parse_row;

/// An EOF packet: 0xFE and shorter than 9 bytes (a longer one is a row starting with a
/// length-encoded integer of 8 bytes).
pub fn is_eof(p: &[u8]) -> bool {
    p.first() == Some(&0xFE) && p.len() < 9
}

/// A COM_QUERY payload.
pub fn com_query(sql: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(sql.len() + 1);
    p.push(0x03);
    p.extend_from_slice(sql.as_bytes());
    p
}

fn send_query(s: &mut TcpStream, sql: &str) -> Result<(), String> {
    write_packet(s, 0, &com_query(sql)).map_err(|e| e.to_string())
}

/// COM_QUERY; the rows of its (first) result, empty for an OK.
pub fn query(s: &mut TcpStream, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    send_query(s, sql)?;
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
        if is_eof(&p) {
            eofs += 1;
            if eofs == 2 {
                return Ok(rows);
            }
        } else if p.first() == Some(&0xFF) {
            return Err(err_text(&p));
        } else if eofs == 1 {
            rows.push(parse_row(&p)?);
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

/// Sends COM_QUERY and reads the whole response, counting payload bytes.
/// Returns Ok(bytes) or Err(error code / io error text).
pub fn raw_query(s: &mut TcpStream, sql: &str) -> Result<u64, String> {
    send_query(s, sql)?;
    read_response(s)
}

/// Reads one whole text-protocol response; Ok(bytes of the packets after the column count)
/// or Err.
pub fn read_response(s: &mut TcpStream) -> Result<u64, String> {
    let (_, first) = read_packet(s).map_err(|e| e.to_string())?;
    match first.first() {
        Some(0x00) => return Ok(0),
        Some(0xFF) => return Err(format!("ERR {:?}", err_code(&first))),
        _ => {}
    }
    let mut total = 0u64;
    let mut eofs = 0;
    loop {
        let (_, p) = read_packet(s).map_err(|e| e.to_string())?;
        total += p.len() as u64;
        if is_eof(&p) {
            eofs += 1;
            if eofs == 2 {
                return Ok(total);
            }
        } else if p.first() == Some(&0xFF) {
            return Err(format!("ERR {:?}", err_code(&p)));
        }
    }
}

/// Sends COM_QUERY and returns the first column of the first row as text (NULL as None), for
/// one-value queries such as `SELECT CONNECTION_ID()`.
pub fn raw_query_value(s: &mut TcpStream, sql: &str) -> Result<Option<String>, String> {
    send_query(s, sql)?;
    let mut next = || read_packet(s).map(|(_, p)| p).map_err(|e| e.to_string());
    let first = next()?;
    if let Some(code) = err_code(&first) {
        return Err(format!("ERR {code}"));
    }
    // Column definitions up to their EOF, then the first row.
    while !is_eof(&next()?) {}
    let row = next()?;
    let value = match row.first() {
        Some(0xFB) => None,
        Some(&n) if n < 0xFB && row.len() > n as usize => {
            Some(String::from_utf8_lossy(&row[1..=n as usize]).into_owned())
        }
        _ => return Err(format!("unexpected row packet {row:?}")),
    };
    // The remaining rows, up to the closing EOF.
    while !is_eof(&next()?) {}
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eof_is_short() {
        assert!(is_eof(&[0xFE, 0, 0, 2, 0]));
        assert!(!is_eof(&[0xFE, 1, 2, 3, 4, 5, 6, 7, 8]));
        assert!(!is_eof(&[0x00]));
    }
}

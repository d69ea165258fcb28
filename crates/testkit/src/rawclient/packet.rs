//! MySQL packets on a blocking socket: framing, ERR payloads, and the ways a test ends a
//! connection (half close, reset) or waits for the peer to end it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Reads one physical packet: (sequence id, payload).
pub fn read_packet(s: &mut TcpStream) -> io::Result<(u8, Vec<u8>)> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h)?;
    let len = h[0] as usize | (h[1] as usize) << 8 | (h[2] as usize) << 16;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p)?;
    Ok((h[3], p))
}

/// `payload` behind its 4-byte header (3-byte length, sequence id).
pub fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 4);
    let n = payload.len();
    v.extend_from_slice(&[n as u8, (n >> 8) as u8, (n >> 16) as u8, seq]);
    v.extend_from_slice(payload);
    v
}

pub fn write_packet(s: &mut TcpStream, seq: u8, payload: &[u8]) -> io::Result<()> {
    s.write_all(&frame(seq, payload))
}

/// The error code of an ERR payload.
pub fn err_code(p: &[u8]) -> Option<u16> {
    (p.first() == Some(&0xFF) && p.len() >= 3).then(|| u16::from_le_bytes([p[1], p[2]]))
}

/// An ERR payload as `ERR <code> <message>`. After 0xFF and the code come '#' and a 5-byte
/// SQLSTATE, then the message.
pub fn err_text(p: &[u8]) -> String {
    let code = (p.len() >= 3).then(|| u16::from_le_bytes([p[1], p[2]]));
    let msg = p.get(9..).map(String::from_utf8_lossy).unwrap_or_default();
    format!("ERR {} {msg}", code.unwrap_or(0))
}

/// Reads until the peer closes; Ok(how long it took) if it did (EOF or reset) within `within`.
/// Any bytes received before the close are named in the error case.
pub fn closed_within(s: &mut TcpStream, within: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    s.set_read_timeout(Some(within))
        .map_err(|e| format!("set the read timeout: {e}"))?;
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return Ok(start.elapsed()),
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                return Ok(start.elapsed())
            }
            Err(e) => {
                if start.elapsed() >= within {
                    return Err(format!(
                        "still open after {within:?} ({e}); received {} bytes: {:?}",
                        got.len(),
                        &got[..got.len().min(64)]
                    ));
                }
            }
        }
        if start.elapsed() >= within {
            return Err(format!(
                "still open after {within:?}; received {} bytes",
                got.len()
            ));
        }
    }
}

/// Expects one ERR packet with `code` (and sequence id `seq`), then the connection closed.
pub fn expect_err_then_close(s: &mut TcpStream, code: u16, seq: u8, what: &str) {
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("set the read timeout");
    let (got_seq, p) = read_packet(s).unwrap_or_else(|e| panic!("{what}: no ERR packet: {e}"));
    assert_eq!(
        err_code(&p),
        Some(code),
        "{what}: want ERR {code}, got {:?}",
        String::from_utf8_lossy(&p)
    );
    assert_eq!(got_seq, seq, "{what}: ERR sequence id");
    closed_within(s, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// SO_LINGER 0 then close: the peer gets an RST.
pub fn reset_close(s: TcpStream) {
    let sock = socket2::Socket::from(s);
    let _ = sock.set_linger(Some(Duration::ZERO));
    drop(sock);
}

pub fn half_close(s: &TcpStream) {
    let _ = s.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_err_payloads() {
        assert_eq!(frame(3, b"ab"), [2, 0, 0, 3, b'a', b'b']);
        let err = [&[0xFF, 0x15, 0x04][..], b"#28000Access denied"].concat();
        assert_eq!(err_code(&err), Some(1045));
        assert_eq!(err_text(&err), "ERR 1045 Access denied");
        assert_eq!(err_code(&[0x00, 0, 0]), None);
    }
}

//! A minimal HTTP/1.0 GET: enough for ringgate's metrics endpoint, with no HTTP crate.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// GET `path` from `addr`; (status code, body). A response that is not HTTP/1.x with a status
/// line and a blank line before the body is an error.
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .and_then(|_| s.set_write_timeout(Some(Duration::from_secs(5))))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    parse_response(&String::from_utf8_lossy(&raw))
}

/// GET `path` from `addr`; the body of a 200 response, an error for any other status.
pub fn get_ok(addr: SocketAddr, path: &str) -> Result<String, String> {
    match get(addr, path)? {
        (200, body) => Ok(body),
        (code, body) => Err(format!("GET {path} -> {code}: {body}")),
    }
}

fn parse_response(text: &str) -> Result<(u16, String), String> {
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(format!("malformed HTTP response: {text:?}"));
    };
    let status_line = head.lines().next().unwrap_or("");
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or("");
    let code = parts.next().and_then(|c| c.parse().ok());
    match code {
        Some(code) if version.starts_with("HTTP/1.") => Ok((code, body.to_string())),
        _ => Err(format!("malformed status line {status_line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_needs_a_status_line_and_a_blank_line() {
        assert_eq!(
            parse_response("HTTP/1.0 200 OK\r\nX: y\r\n\r\nbody"),
            Ok((200, "body".to_string()))
        );
        assert_eq!(
            parse_response("HTTP/1.1 404 Not Found\r\n\r\n"),
            Ok((404, String::new()))
        );
        assert!(parse_response("HTTP/1.0 200 OK\r\n").is_err());
        assert!(parse_response("SPDY 200\r\n\r\n").is_err());
        assert!(parse_response("HTTP/1.0 abc\r\n\r\n").is_err());
    }
}

//! A blocking connection to a backend: plain TCP, or TLS after the
//! SSLRequest (rustls's buffered client over the blocking socket; one
//! connection for `ringgate check` or a monitor check, no ring).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::{ClientConnection, StreamOwned};

use crate::tls::backend_client::BackendTlsConfig;

/// A blocking connection to a backend.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// "TLSv1.3, TLS13_AES_256_GCM_SHA384" once TLS is up.
    pub fn tls_summary(&self) -> Option<String> {
        let Stream::Tls(s) = self else { return None };
        let version = s.conn.protocol_version()?;
        let suite = s.conn.negotiated_cipher_suite()?;
        Some(format!(
            "{}, {}",
            version.as_str().unwrap_or("TLS"),
            suite.suite().as_str().unwrap_or("?")
        ))
    }

    /// Runs the TLS handshake (the SSLRequest is already written).
    pub fn start_tls(self, tls: &BackendTlsConfig) -> Result<Stream, String> {
        let Stream::Plain(sock) = self else {
            return Err("TLS is already on".into());
        };
        let conn = ClientConnection::new(Arc::clone(&tls.config), tls.server_name.clone())
            .map_err(|e| e.to_string())?;
        let mut s = StreamOwned::new(conn, sock);
        while s.conn.is_handshaking() {
            s.conn
                .complete_io(&mut s.sock)
                .map_err(|e| format!("TLS handshake failed: {e}"))?;
        }
        Ok(Stream::Tls(Box::new(s)))
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

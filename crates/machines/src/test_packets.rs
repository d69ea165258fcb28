//! Server packets shared by the machines' unit tests.

use wire::constants::*;
use wire::handshake::{build_greeting, Greeting};
use wire::packet::write_packet;

/// `payload` framed with sequence id `seq`.
pub fn framed(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    write_packet(&mut v, seq, payload);
    v
}

/// A MariaDB 10.11-like HandshakeV10 (no TLS), framed.
pub fn greeting() -> Vec<u8> {
    framed(
        0,
        &build_greeting(&Greeting {
            protocol_version: 10,
            server_version: "10.11.0-MariaDB".into(),
            connection_id: 7,
            scramble: b"abcdefghijklmnopqrst".to_vec(),
            capabilities: 0xf7fe_ffff & !CLIENT_SSL,
            ext_capabilities: 0,
            charset: UTF8MB4_GENERAL_CI,
            status: SERVER_STATUS_AUTOCOMMIT,
            auth_plugin: "mysql_native_password".into(),
        }),
    )
}

/// The Linux errno values and poll bits the tests feed the machines as the
/// driver would (the machines themselves never name them).
pub mod errno {
    pub const EPIPE: i32 = 32;
    pub const ECONNRESET: i32 = 104;
    pub const ECONNREFUSED: i32 = 111;
    pub const POLLRDHUP: usize = 0x2000;
}

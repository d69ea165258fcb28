//! The MySQL client/server wire protocol, as pure functions over byte slices.
//!
//! Nothing in this module performs I/O: the proxy feeds it bytes it has read
//! and sends the bytes it returns. Every parser returns a `Result`/`Option`
//! instead of panicking, because every byte here comes from the network.
//!
//! No unsafe code: one test in `auth` is the exception (see there).
#![deny(unsafe_code)]

pub mod auth;
pub mod caching_sha2;
pub mod change_user;
pub mod client_login;
pub mod client_sha2;
pub mod compress;
pub mod constants;
pub mod gtid;
pub mod handshake;
pub mod kill;
pub mod lexer;
pub mod login_error;
pub mod ok_packet;
pub mod packet;
pub mod reply;
pub mod result_set;
pub mod session_vars;
pub mod sha2_rsa;
pub mod state_strip;
pub mod text_result;
pub mod tracker;
pub mod users;

pub use users::Users;

/// Errors produced while decoding protocol packets.
///
/// These describe a peer that sent something we cannot interpret; the proxy
/// normally answers them with `ER_HANDSHAKE_ERROR` (client side) or by
/// dropping the backend connection (server side).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The payload ended before a field the protocol requires.
    #[error("truncated packet: missing {what}")]
    Truncated { what: &'static str },

    /// A logical packet (or a length field inside one) exceeds the limit the
    /// caller allows; we refuse before allocating.
    #[error("packet too large: {len} bytes exceeds the limit of {max}")]
    PacketTooLarge { len: usize, max: usize },

    /// A field is present but its value is not allowed by the protocol.
    #[error("malformed {what}: {reason}")]
    Malformed {
        what: &'static str,
        reason: &'static str,
    },

    /// A text field that must be UTF-8 for us to use it (user name, schema,
    /// plugin name) is not.
    #[error("{what} is not valid UTF-8")]
    InvalidUtf8 { what: &'static str },

    /// The server greeting is not HandshakeV10 (protocol version 10).
    #[error("unsupported handshake protocol version {0}")]
    UnsupportedProtocolVersion(u8),

    /// The client did not set CLIENT_PROTOCOL_41; the pre-4.1 protocol
    /// (HandshakeResponse320) is not supported.
    #[error("client does not support the 4.1 protocol (CLIENT_PROTOCOL_41 not set)")]
    OldClientProtocol,

    /// The continuation packets of a logical packet did not carry
    /// consecutive sequence ids.
    #[error("packet out of order: expected sequence id {expected}, got {got}")]
    OutOfOrder { expected: u8, got: u8 },

    /// The peer answered with an ERR packet where we expected something else
    /// (e.g. a backend refusing the connection with 1040 instead of a greeting).
    #[error("server error {code} ({sqlstate}): {message}")]
    ServerError {
        code: u16,
        sqlstate: String,
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds pseudo-random and mutated inputs to every parser: none may
    /// panic, whatever the bytes.
    #[test]
    fn parsers_never_panic_on_garbage() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds: Vec<Vec<u8>> = vec![
            handshake::build_greeting(&handshake::Greeting {
                protocol_version: 10,
                server_version: "8.0.36".into(),
                connection_id: 1,
                scramble: vec![b'x'; 20],
                capabilities: u32::MAX,
                ext_capabilities: 0,
                charset: constants::UTF8MB4_GENERAL_CI,
                status: 2,
                auth_plugin: auth::NATIVE_PASSWORD.into(),
            }),
            handshake::build_handshake_response(&handshake::HandshakeResponse {
                capabilities: constants::CLIENT_CONNECT_ATTRS,
                username: "u".into(),
                auth_response: vec![1; 20],
                database: Some("d".into()),
                connect_attrs: vec![("k".into(), "v".into())],
                ..Default::default()
            }),
            reply::ok_payload(1, 2, 3, 4),
            reply::err_payload(1045, "denied"),
        ];
        for round in 0..20_000 {
            let mut input = seeds[round % seeds.len()].clone();
            match next() % 3 {
                0 => {
                    let len = (next() % 64) as usize;
                    input = (0..len).map(|_| next() as u8).collect();
                }
                1 => {
                    for _ in 0..(next() % 4 + 1) {
                        if input.is_empty() {
                            break;
                        }
                        let i = (next() as usize) % input.len();
                        input[i] = next() as u8;
                    }
                }
                _ => {
                    let cut = (next() as usize) % (input.len() + 1);
                    input.truncate(cut);
                }
            }
            let _ = handshake::parse_greeting(&input);
            let _ = handshake::parse_handshake_response(&input);
            let _ = change_user::parse_change_user(&input, u32::MAX);
            let _ = reply::parse_reply(&input, round % 2 == 0);
            let _ = reply::parse_auth_reply(&input);
            let _ = packet::split_packet(&input);
            let _ = client_login::ClientLogin::new(client_login::LoginParams {
                user: "u".into(),
                credential: auth::Credential::Plaintext(b"p".to_vec()),
                database: None,
                capabilities: constants::NATIVE_LOGIN_CAPS,
                collation: constants::UTF8MB4_GENERAL_CI,
                max_packet_size: 1 << 24,
            })
            .on_packet(0, &input);
            let _ = packet::read_lenenc_int(&input);
            let _ = ok_packet::parse_ok(&input, u32::MAX);
            let _ = ok_packet::parse_ok(&input, constants::CLIENT_PROTOCOL_41);
        }
    }
}

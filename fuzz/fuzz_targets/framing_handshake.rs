//! Packet framing and login-phase parsers on arbitrary bytes: none may panic,
//! whatever the input (every byte they see comes from the network).
//!
//! The first input byte selects nothing: every parser runs on every input, so
//! one corpus entry exercises them all. Its bits set the parsers' options:
//! bit 0 = `deprecate_eof`; bit 1 = the backend login asks for a schema
//! (CLIENT_CONNECT_WITH_DB); bit 2 = it logs in with an empty password;
//! bits 3-4 = how many restore statements follow a pooled connection's reset;
//! bit 5 = COM_CHANGE_USER is read with no capabilities (else with all).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::auth::Credential;
use wire::change_user::parse_change_user;
use wire::client_login::{ClientLogin, LoginParams, LoginStep};
use wire::constants::{NATIVE_LOGIN_CAPS, UTF8MB4_GENERAL_CI};
use wire::{handshake, packet, reply};

fuzz_target!(|data: &[u8]| {
    let (flags, input) = match data.split_first() {
        Some((f, rest)) => (*f, rest),
        None => (0, data),
    };
    let deprecate_eof = flags & 1 != 0;
    let restore_statements = usize::from((flags >> 3) & 3);
    let change_user_caps = if flags & 32 != 0 { 0 } else { u32::MAX };
    let mut login = Some(ClientLogin::new(LoginParams {
        user: "ringgate".into(),
        credential: Credential::Plaintext(if flags & 4 != 0 {
            Vec::new()
        } else {
            b"pw".to_vec()
        }),
        database: (flags & 2 != 0).then(|| "app".to_owned()),
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    }));

    // Framing: walk the input as a stream of physical packets, checking the
    // invariants the proxy relies on.
    let mut rest = input;
    while let Some((p, used)) = packet::split_packet(rest) {
        assert!(used >= 4 && used <= rest.len());
        assert_eq!(used, 4 + p.payload.len());
        // Every physical payload is a candidate login/reply packet.
        let _ = handshake::parse_greeting(p.payload);
        let _ = handshake::parse_handshake_response(p.payload);
        let _ = reply::parse_reply(p.payload, deprecate_eof);
        let _ = reply::parse_auth_reply(p.payload);
        let _ = reply::parse_err(p.payload);
        let _ = parse_change_user(p.payload, change_user_caps);
        // The stream as a server's side of a backend login, as the pool and
        // `ringgate check` drive it.
        if let Some(l) = login.as_mut() {
            match l.on_packet(p.seq, p.payload) {
                Ok(LoginStep::Send(out)) => {
                    // Exactly one framed packet, answering the one just read.
                    let (sent, n) = packet::split_packet(&out).expect("a whole packet");
                    assert_eq!(n, out.len());
                    assert_eq!(sent.seq, p.seq.wrapping_add(1));
                }
                // Nothing to send yet: the next packet goes on.
                Ok(LoginStep::Wait) => {}
                // A TLS handshake would follow, which bytes alone cannot
                // drive: this login ends here.
                Ok(LoginStep::StartTls(_)) => login = None,
                Ok(LoginStep::Done { .. }) | Err(_) => {
                    // Finished: whatever follows is refused, never a panic.
                    assert!(l.on_packet(p.seq.wrapping_add(1), p.payload).is_err());
                    login = None;
                }
            }
        }
        rest = &rest[used..];
    }
    let _ = packet::read_lenenc_int(input);

    // The whole input as one payload, too.
    let _ = handshake::parse_greeting(input);
    let _ = handshake::parse_handshake_response(input);
    let _ = reply::parse_reply(input, deprecate_eof);
    let _ = reply::parse_auth_reply(input);
    let _ = parse_change_user(input, change_user_caps);
    // The reset replies are a stream of framed packets.
    let _ = reply::parse_reset_replies(input, deprecate_eof, restore_statements);
});

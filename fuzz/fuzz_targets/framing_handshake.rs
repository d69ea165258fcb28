//! Packet framing and login-phase parsers on arbitrary bytes: none may panic,
//! whatever the input (every byte they see comes from the network).
//!
//! The first input byte selects nothing: every parser runs on every input, so
//! one corpus entry exercises them all. The rest of the byte is used as the
//! `deprecate_eof` flag and the `max` limit of the logical-packet splitter.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringgate::mysql::{handshake, packet, reply};

fuzz_target!(|data: &[u8]| {
    let (flags, input) = match data.split_first() {
        Some((f, rest)) => (*f, rest),
        None => (0, data),
    };
    let deprecate_eof = flags & 1 != 0;
    // Small limits exercise the "too large" paths, large ones the assembler.
    let max = match (flags >> 1) & 3 {
        0 => 16,
        1 => 1024,
        2 => 1 << 20,
        _ => 64 << 20,
    };

    // Framing: walk the input as a stream of physical packets, then as
    // logical packets, checking the invariants the proxy relies on.
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
        rest = &rest[used..];
    }
    let mut rest = input;
    while let Ok(Some((_lp, used))) = packet::split_logical_packet(rest, max) {
        assert!(used >= 4 && used <= rest.len());
        rest = &rest[used..];
    }
    let _ = packet::read_lenenc_int(input);

    // The whole input as one payload, too.
    let _ = handshake::parse_greeting(input);
    let _ = handshake::parse_handshake_response(input);
    let _ = reply::parse_reply(input, deprecate_eof);
    let _ = reply::parse_auth_reply(input);
    // The reset replies are a stream of framed packets.
    let _ = reply::parse_reset_replies(input, deprecate_eof);
});

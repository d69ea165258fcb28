//! Decodes arbitrary OK payloads with `wire::ok_packet`: it must never
//! panic, and what it returns must lie inside the payload.
//!
//! Input format: byte 0 selects the capabilities (bit 0 CLIENT_PROTOCOL_41,
//! bit 1 CLIENT_TRANSACTIONS, bit 2 CLIENT_SESSION_TRACK, bit 3
//! DEPRECATE_EOF for `is_ok_packet`); the rest is the payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::constants::{CLIENT_PROTOCOL_41, CLIENT_SESSION_TRACK, CLIENT_TRANSACTIONS};
use wire::ok_packet::{is_ok_packet, parse_ok, parse_state_blocks};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, payload)) = data.split_first() else {
        return;
    };
    let mut caps = 0;
    if flags & 1 != 0 {
        caps |= CLIENT_PROTOCOL_41;
    }
    if flags & 2 != 0 {
        caps |= CLIENT_TRANSACTIONS;
    }
    if flags & 4 != 0 {
        caps |= CLIENT_SESSION_TRACK;
    }
    let _ = is_ok_packet(payload, flags & 8 != 0);
    if let Ok(ok) = parse_ok(payload, caps) {
        assert!(ok.info.len() <= payload.len());
        let _ = ok.schema();
        let _ = ok.transaction_state();
        let _ = ok.transaction_characteristics();
        assert!(ok.system_variables().count() <= ok.session_state.len());
    }
    let _ = parse_state_blocks(payload);
});

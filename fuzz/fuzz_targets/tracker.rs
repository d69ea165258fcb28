//! Drives the response-boundary tracker with arbitrary client and server byte
//! streams, cut into chunks at arbitrary places: it must never panic, and
//! its answers must stay consistent with what it was fed.
//!
//! Input format (chosen so that real captured traffic maps onto it directly,
//! see scripts/fuzz-seeds.py):
//!   byte 0: bit 0 = CLIENT_DEPRECATE_EOF, bit 1 = set a small --max-packet-size
//!   then records: a control byte, then data up to the next control byte.
//!   Control bytes: 0xF0 = following bytes go to the client side,
//!                  0xF1 = following bytes go to the server side,
//!                  0xF2 = tracker.reset(),
//!                  0xF3 = deliver what is buffered now (a chunk boundary).
//!   A literal 0xF0..0xF3 data byte is escaped as 0xF4 followed by b - 0xF0.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::tracker::Tracker;

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Client,
    Server,
}

fn deliver(t: &mut Tracker, side: Side, chunk: &[u8]) {
    if chunk.is_empty() {
        return;
    }
    match side {
        Side::Client => {
            if let Ok(c) = t.on_client_bytes(chunk) {
                assert!(c.forward <= chunk.len(), "forward beyond the chunk");
                if c.stop.is_some() {
                    assert!(t.stopped().is_some());
                }
            }
        }
        Side::Server => {
            let _ = t.on_server_bytes(chunk);
        }
    }
    // The queries the relay asks after every chunk.
    let _ = t.next_read();
    let _ = t.at_command_boundary();
    let _ = t.in_transaction();
    let _ = t.pending_responses();
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let mut t = Tracker::new(flags & 1 != 0);
    if flags & 2 != 0 {
        t.set_max_client_packet(1 << 12);
    }
    let mut side = Side::Client;
    let mut chunk: Vec<u8> = Vec::with_capacity(256);
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        i += 1;
        match b {
            0xF0 | 0xF1 => {
                deliver(&mut t, side, &chunk);
                chunk.clear();
                side = if b == 0xF0 {
                    Side::Client
                } else {
                    Side::Server
                };
            }
            0xF2 => {
                deliver(&mut t, side, &chunk);
                chunk.clear();
                t.reset();
                assert!(t.at_command_boundary());
                assert_eq!(t.pending_responses(), 0);
            }
            0xF3 => {
                deliver(&mut t, side, &chunk);
                chunk.clear();
            }
            0xF4 => {
                let lit = body.get(i).copied().unwrap_or(0);
                i += 1;
                chunk.push(0xF0 + (lit & 3));
            }
            _ => chunk.push(b),
        }
    }
    deliver(&mut t, side, &chunk);
});

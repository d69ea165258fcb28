//! The compressed-protocol codec (crates/wire/src/compress.rs) on arbitrary input:
//! decoding never panics and never passes its output limit, whatever the
//! chunking; and any plain packet stream survives encode → decode, with
//! the encoder holding at most its bound.
//!
//! Input: byte 0 picks the chunk size, byte 1 the decoder's output limit,
//! the rest is used twice: as compressed wire bytes, and (its lengths
//! rewritten to fit) as a plain MySQL packet stream for the round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::compress::{Decoder, Encoder};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let chunk = 1 + data[0] as usize;
    let limit = 1 + data[1] as usize * 64;
    let body = &data[2..];

    // 1. Arbitrary wire bytes.
    let mut dec = Decoder::new();
    let mut seq = 0u8;
    let mut plain = Vec::new();
    'wire: for piece in body.chunks(chunk) {
        let mut rest = piece;
        while !rest.is_empty() {
            plain.clear();
            match dec.decode(rest, &mut seq, &mut plain, limit) {
                Ok(used) => {
                    assert!(plain.len() <= limit);
                    // With room to write, a call that neither consumes nor
                    // produces would hang the session.
                    assert!(used > 0 || !plain.is_empty(), "no progress");
                    rest = &rest[used..];
                }
                Err(_) => break 'wire,
            }
        }
    }

    // 2. A plain packet stream made from the bytes: each packet's length is
    // the next byte, so every stream is well formed.
    let mut stream = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let len = (body[pos] as usize * 37) % 700;
        let payload: Vec<u8> = body[pos..].iter().cycle().take(len).copied().collect();
        stream.extend_from_slice(&[len as u8, (len >> 8) as u8, 0, pos as u8]);
        stream.extend_from_slice(&payload);
        pos += 1 + len.min(body.len() - pos - 1).min(8);
    }
    let max_packet = 64 + data[1] as usize * 4;
    let mut enc = Encoder::new(flate2::Compression::fast(), max_packet);
    let mut wire = Vec::new();
    let mut eseq = 0u8;
    for piece in stream.chunks(chunk) {
        enc.encode(piece, &mut eseq, &mut wire);
        assert!(enc.held() <= max_packet.max(4));
    }
    assert!(enc.at_packet_boundary());
    let mut dec = Decoder::new();
    let mut back = Vec::new();
    let mut dseq = 0u8;
    let mut rest = &wire[..];
    while !rest.is_empty() {
        let used = dec.decode(rest, &mut dseq, &mut back, usize::MAX).expect("own output decodes");
        rest = &rest[used..];
    }
    loop {
        let before = back.len();
        let _ = dec.decode(&[], &mut dseq, &mut back, usize::MAX);
        if back.len() == before {
            break;
        }
    }
    assert_eq!(back, stream);
    assert_eq!(dseq, eseq);
});

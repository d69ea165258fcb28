use super::*;

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mysql_packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 4];
    put_u24(&mut p[0..3], payload.len());
    p[3] = seq;
    p.extend_from_slice(payload);
    p
}

/// A stream of MySQL packets of mixed sizes and compressibility.
fn packet_stream(rng: &mut Rng, count: usize, max_len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..count {
        let len = match rng.below(4) {
            0 => rng.below(50),
            1 => rng.below(max_len + 1),
            _ => rng.below(600),
        };
        let payload: Vec<u8> = if rng.below(2) == 0 {
            (0..len).map(|j| b"abcdefgh"[j % 8]).collect()
        } else {
            (0..len).map(|_| rng.next() as u8).collect()
        };
        out.extend(mysql_packet(i as u8, &payload));
    }
    out
}

fn encode_in_chunks(rng: &mut Rng, enc: &mut Encoder, plain: &[u8], seq: &mut u8) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < plain.len() {
        let n = (1 + rng.below(20_000)).min(plain.len() - pos);
        enc.encode(&plain[pos..pos + n], seq, &mut out);
        pos += n;
    }
    out
}

/// Decode `wire` fed in random chunks with a random output limit, the way
/// the proxy does: unconsumed input is passed again after draining `plain`.
fn decode_in_chunks(rng: &mut Rng, wire: &[u8], limit: usize) -> Result<Vec<u8>, CompressError> {
    let mut dec = Decoder::new();
    let mut seq = 0u8;
    let mut got = Vec::new();
    let mut plain = Vec::new();
    let mut pos = 0;
    while pos < wire.len() {
        let n = (1 + rng.below(9000)).min(wire.len() - pos);
        let mut chunk = &wire[pos..pos + n];
        loop {
            let used = dec.decode(chunk, &mut seq, &mut plain, limit)?;
            assert!(plain.len() <= limit, "the limit bounds the plain buffer");
            got.append(&mut plain);
            chunk = &chunk[used..];
            // Output held back by the limit comes before the next read.
            while chunk.is_empty() && dec.has_output() {
                dec.decode(&[], &mut seq, &mut plain, limit)?;
                got.append(&mut plain);
            }
            if chunk.is_empty() {
                break;
            }
        }
        pos += n;
    }
    assert!(dec.at_packet_boundary());
    Ok(got)
}

/// Split a compressed stream into its compressed packets: (header, plain).
fn compressed_packets(wire: &[u8]) -> Vec<(CompressedHeader, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < wire.len() {
        let h: [u8; 7] = wire[pos..pos + 7].try_into().unwrap();
        let h = parse_compressed_header(&h);
        let body = &wire[pos + 7..pos + 7 + h.compressed_len];
        let plain = if h.uncompressed_len == 0 {
            body.to_vec()
        } else {
            let mut z = Decompress::new(true);
            let mut v = vec![0u8; h.uncompressed_len];
            z.decompress(body, &mut v, FlushDecompress::Finish).unwrap();
            assert_eq!(z.total_out() as usize, h.uncompressed_len);
            v
        };
        out.push((h, plain));
        pos += 7 + h.compressed_len;
    }
    out
}

/// mysql-connector-python's pure-Python reader (network.py,
/// NetworkBrokerCompressed.recv): it reads one compressed packet, and for a
/// MySQL packet that does not end in it reads exactly one more. Returns the
/// MySQL packets it would deliver, or None where it would break.
fn connector_reader(wire: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut packets = compressed_packets(wire).into_iter().map(|(_, p)| p);
    let mut delivered = Vec::new();
    while let Some(mut pkt) = packets.next() {
        let mut offset = 0;
        while offset < pkt.len() {
            if pkt.len() - offset < 3 {
                return None; // its struct.unpack fails on a split header
            }
            let pll = u24(&pkt[offset..]);
            if 4 + pll > pkt.len() - offset {
                pkt.extend(packets.next()?);
            }
            if 4 + pll > pkt.len() - offset {
                return None; // it would deliver a truncated packet
            }
            delivered.push(pkt[offset..offset + 4 + pll].to_vec());
            offset += 4 + pll;
        }
    }
    Some(delivered)
}

fn split_mysql(plain: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < plain.len() {
        let n = 4 + u24(&plain[pos..]);
        out.push(plain[pos..pos + n].to_vec());
        pos += n;
    }
    out
}

#[test]
fn round_trip_at_any_chunking_with_bounded_memory() {
    for round in 0..40u64 {
        let mut rng = Rng(0x9E37_79B9 ^ round.wrapping_mul(7919) | 1);
        let max_packet = [64, 1000, 16 * 1024, DEFAULT_MAX_DEFLATED_PACKET][rng.below(4)];
        let count = 1 + rng.below(60);
        let plain = packet_stream(&mut rng, count, 40_000);
        let mut enc = Encoder::new(Compression::default(), max_packet);
        let mut seq = 3u8;
        let wire = encode_in_chunks(&mut rng, &mut enc, &plain, &mut seq);
        assert!(enc.at_packet_boundary());
        assert!(enc.held() == 0);
        let limit = 1 + rng.below(70_000);
        let back = decode_in_chunks(&mut rng, &wire, limit).unwrap();
        assert_eq!(back, plain, "round {round}");
        assert_eq!(
            connector_reader(&wire),
            Some(split_mysql(&plain)),
            "round {round}"
        );
        let n = compressed_packets(&wire).len();
        assert_eq!(
            seq,
            3u8.wrapping_add(n as u8),
            "one id per compressed packet"
        );
    }
}

#[test]
fn small_payloads_are_stored_and_large_compressible_ones_deflated() {
    let mut enc = Encoder::new(Compression::default(), 1 << 16);
    let mut seq = 0;
    let mut out = Vec::new();
    let ok = mysql_packet(1, &[0, 0, 0, 2, 0, 0, 0]);
    enc.encode(&ok, &mut seq, &mut out);
    let pkts = compressed_packets(&out);
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0.uncompressed_len, 0, "under 50 bytes: stored");
    assert_eq!(pkts[0].0.compressed_len, ok.len());
    assert_eq!(pkts[0].0.seq, 0);

    out.clear();
    let row = mysql_packet(2, &[b'x'; 5000]);
    enc.encode(&row, &mut seq, &mut out);
    let pkts = compressed_packets(&out);
    assert_eq!(pkts[0].0.seq, 1);
    assert_eq!(pkts[0].0.uncompressed_len, row.len());
    assert!(pkts[0].0.compressed_len < 200);

    // Random bytes do not shrink: stored.
    out.clear();
    let mut rng = Rng(42);
    let noise: Vec<u8> = (0..3000).map(|_| rng.next() as u8).collect();
    enc.encode(&mysql_packet(3, &noise), &mut seq, &mut out);
    assert_eq!(compressed_packets(&out)[0].0.uncompressed_len, 0);
}

#[test]
fn a_partial_small_packet_is_held_until_whole() {
    let mut enc = Encoder::new(Compression::default(), 1 << 16);
    let mut seq = 0;
    let mut out = Vec::new();
    let a = mysql_packet(1, &[b'a'; 100]);
    let b = mysql_packet(2, &[b'b'; 300]);
    let stream = [a.clone(), b.clone()].concat();
    enc.encode(&stream[..a.len() + 2], &mut seq, &mut out);
    assert_eq!(split_mysql(&compressed_packets(&out)[0].1), vec![a.clone()]);
    assert_eq!(enc.held(), 2, "b's first header bytes");
    out.clear();
    enc.encode(&stream[a.len() + 2..a.len() + 50], &mut seq, &mut out);
    assert!(out.is_empty(), "nothing whole yet");
    enc.encode(&stream[a.len() + 50..], &mut seq, &mut out);
    assert_eq!(split_mysql(&compressed_packets(&out)[0].1), vec![b]);
    assert!(enc.at_packet_boundary());
}

#[test]
fn a_large_packet_streams_through_stored_without_being_held() {
    let max_packet = 4096;
    let mut enc = Encoder::new(Compression::default(), max_packet);
    let mut seq = 0;
    let small = mysql_packet(1, &[b's'; 60]);
    let big = mysql_packet(2, &vec![b'B'; 100_000]);
    let stream = [small.clone(), big.clone(), small.clone()].concat();
    let mut out = Vec::new();
    for chunk in stream.chunks(1000) {
        enc.encode(chunk, &mut seq, &mut out);
        assert!(enc.held() <= max_packet, "held {}", enc.held());
    }
    let pkts = compressed_packets(&out);
    assert_eq!(pkts.len(), 3);
    assert_eq!(pkts[1].0.uncompressed_len, 0);
    assert_eq!(pkts[1].0.compressed_len, big.len());
    assert_eq!(pkts[1].1, big);
    assert_eq!(
        connector_reader(&out),
        Some(vec![small.clone(), big, small])
    );
}

#[test]
fn a_maximal_packet_spans_exactly_two_compressed_packets() {
    // A 16 MiB - 1 payload and the packet that ends the sequence, as a
    // client sends a 20 MiB row.
    let mut enc = Encoder::new(Compression::default(), DEFAULT_MAX_DEFLATED_PACKET);
    let mut seq = 0;
    let first = mysql_packet(1, &vec![7u8; MAX_COMPRESSED_CHUNK]);
    let rest = mysql_packet(2, &vec![8u8; 4 << 20]);
    let stream = [first.clone(), rest.clone()].concat();
    let mut out = Vec::new();
    for chunk in stream.chunks(16 * 1024) {
        enc.encode(chunk, &mut seq, &mut out);
    }
    let lens: Vec<_> = compressed_packets(&out)
        .iter()
        .map(|(h, _)| h.compressed_len)
        .collect();
    assert_eq!(lens, vec![MAX_COMPRESSED_CHUNK, 4, rest.len()]);
    assert_eq!(connector_reader(&out), Some(vec![first, rest]));
    let mut rng = Rng(5);
    assert_eq!(decode_in_chunks(&mut rng, &out, 16 * 1024).unwrap(), stream);
}

#[test]
fn decodes_what_zlib_clients_send_and_follows_their_ids() {
    // mysql-connector-python: zlib.compress of the MySQL packets, or a
    // stored packet under 50 bytes; a client may split one MySQL packet
    // over several compressed packets anywhere.
    let query = mysql_packet(0, &[&[3u8][..], &[b'q'; 200][..]].concat());
    let mut z = Compress::new(Compression::default(), true);
    let mut deflated = vec![0u8; 1000];
    z.compress(&query, &mut deflated, FlushCompress::Finish)
        .unwrap();
    deflated.truncate(z.total_out() as usize);
    let mut wire = Vec::new();
    write_compressed_header(
        &mut wire,
        CompressedHeader {
            compressed_len: 10,
            seq: 0,
            uncompressed_len: 0,
        },
    );
    wire.extend_from_slice(&query[..10]);
    write_compressed_header(
        &mut wire,
        CompressedHeader {
            compressed_len: deflated.len(),
            seq: 1,
            uncompressed_len: query.len(),
        },
    );
    wire.extend_from_slice(&deflated);
    let mut dec = Decoder::new();
    let mut seq = 0;
    let mut plain = Vec::new();
    assert_eq!(
        dec.decode(&wire, &mut seq, &mut plain, 1 << 20),
        Ok(wire.len())
    );
    assert_eq!(&plain[..10], &query[..10]);
    assert_eq!(&plain[10..], &query[..]);
    assert_eq!(seq, 2, "the answer continues after the client's last id");
}

#[test]
fn the_limit_stops_decoding_and_the_rest_resumes() {
    let big = mysql_packet(0, &vec![b'z'; 300_000]);
    let mut enc = Encoder::new(Compression::default(), 1 << 20);
    let mut seq = 0;
    let mut wire = Vec::new();
    enc.encode(&big, &mut seq, &mut wire);
    assert!(wire.len() < 2000, "one small deflated packet");
    let mut dec = Decoder::new();
    let mut plain = Vec::new();
    let used = dec.decode(&wire, &mut seq, &mut plain, 16 * 1024).unwrap();
    assert_eq!(plain.len(), 16 * 1024);
    let mut got = std::mem::take(&mut plain);
    let mut rest = &wire[used..];
    for _ in 0..100 {
        let used = dec.decode(rest, &mut seq, &mut plain, 16 * 1024).unwrap();
        assert!(plain.len() <= 16 * 1024);
        got.append(&mut plain);
        rest = &rest[used..];
        if got.len() == big.len() {
            break;
        }
    }
    assert_eq!(got, big);
}

#[test]
fn broken_compressed_packets_are_errors() {
    let mut seq = 0;
    let mut plain = Vec::new();
    // A payload that is not zlib.
    let mut wire = Vec::new();
    write_compressed_header(
        &mut wire,
        CompressedHeader {
            compressed_len: 8,
            seq: 0,
            uncompressed_len: 100,
        },
    );
    wire.extend_from_slice(b"notzlib!");
    assert!(matches!(
        Decoder::new().decode(&wire, &mut seq, &mut plain, 1 << 20),
        Err(CompressError::Corrupt(_))
    ));
    // Declares more than the stream holds.
    let mut z = Compress::new(Compression::default(), true);
    let mut deflated = vec![0u8; 100];
    z.compress(b"hello hello hello", &mut deflated, FlushCompress::Finish)
        .unwrap();
    deflated.truncate(z.total_out() as usize);
    let mut wire = Vec::new();
    write_compressed_header(
        &mut wire,
        CompressedHeader {
            compressed_len: deflated.len(),
            seq: 0,
            uncompressed_len: 50,
        },
    );
    wire.extend_from_slice(&deflated);
    assert_eq!(
        Decoder::new().decode(&wire, &mut seq, &mut plain, 1 << 20),
        Err(CompressError::ShorterThanDeclared)
    );
    // Declares fewer.
    plain.clear();
    wire[4] = 5;
    assert_eq!(
        Decoder::new().decode(&wire, &mut seq, &mut plain, 1 << 20),
        Err(CompressError::LongerThanDeclared)
    );
    // No payload but an uncompressed length.
    let wire = [0, 0, 0, 0, 9, 0, 0];
    assert_eq!(
        Decoder::new().decode(&wire, &mut seq, &mut plain, 1 << 20),
        Err(CompressError::EmptyDeflated { ulen: 9 })
    );
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(77);
    for _ in 0..2000 {
        let len = rng.below(200);
        let mut wire: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if wire.len() >= 7 && rng.below(2) == 0 {
            // Plausible lengths reach the payload states.
            wire[0] = (len - 7) as u8;
            wire[1] = 0;
            wire[2] = 0;
        }
        let mut seq = 0;
        let mut plain = Vec::new();
        let _ = Decoder::new().decode(&wire, &mut seq, &mut plain, 64);
        assert!(plain.len() <= 64);
    }
}

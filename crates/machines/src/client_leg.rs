//! The client leg's transform: what lies between the client's socket and
//! the plain MySQL packet stream the session, the relay and the tracker
//! work on: the compressed protocol (CLIENT_COMPRESS, zlib). TLS is not
//! one: it sits below this transform, in the binary (`tls::record_layer`), so a
//! compressed leg of a TLS session is handed plaintext.
//!
//! A session has one only once it is negotiated; without it the client's
//! bytes are the plain stream and the relay stays zero-copy. Pure: the
//! driver hands it the bytes it read and the plain bytes to send, and owns
//! every buffer the kernel touches (worker/leg.rs).
//!
//! Bounds: the plain input is decoded up to a limit (`plain_limit`); wire
//! bytes past it wait in `pending` (at most one read's worth) and are
//! decoded when the relay asks for more, before the socket is read again.

use flate2::Compression;

use wire::compress::{CompressError, Decoder, Encoder, DEFAULT_MAX_DEFLATED_PACKET};

/// Which transform a session negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegKind {
    /// CLIENT_COMPRESS with zlib.
    Compress,
}

/// Bytes through the leg since the last [`ClientLeg::take_stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LegStats {
    pub wire_in: u64,
    pub plain_in: u64,
    pub plain_out: u64,
    pub wire_out: u64,
}

pub struct ClientLeg {
    decoder: Decoder,
    encoder: Encoder,
    /// The compressed sequence id, shared by both directions.
    seq: u8,
    /// Wire bytes read but not decoded yet (the plain buffer was full).
    pending: Vec<u8>,
    plain_limit: usize,
    stats: LegStats,
    seqs: SeqFix,
}

/// Inner sequence ids of the client's plain packets, made what the
/// uncompressed backend leg expects. Under compression the server ignores
/// them (it checks the compressed ids), and MariaDB Connector/C (the
/// mariadb CLI) sends 0 on every packet it writes: the continuation of a
/// command over 16 MiB, and LOCAL INFILE data. A backend without
/// compression refuses those as out of order, so they are renumbered:
/// - a packet after a 2^24 - 1 byte packet continues its numbering;
/// - after the server's LOCAL INFILE request (0xFB, the first packet of a
///   response), the client's packets count on from it up to the empty one.
///
/// Any other packet keeps the client's id: a command starts at 0.
#[derive(Default)]
struct SeqFix {
    // Client → server.
    header: usize,
    len: [u8; 3],
    left: usize,
    prev_seq: u8,
    prev_full: bool,
    infile_next: Option<u8>,
    // Server → client: just enough to see a LOCAL INFILE request.
    s_header: usize,
    s_hdr: [u8; 4],
    s_left: usize,
    s_first: bool,
}

impl SeqFix {
    /// Renumber the client's packets in `plain` (the stream's next bytes).
    fn client(&mut self, plain: &mut [u8]) {
        let mut i = 0;
        while i < plain.len() {
            if self.left > 0 {
                let n = self.left.min(plain.len() - i);
                i += n;
                self.left -= n;
                continue;
            }
            if self.header < 3 {
                self.len[self.header] = plain[i];
                self.header += 1;
                i += 1;
                continue;
            }
            let len =
                self.len[0] as usize | (self.len[1] as usize) << 8 | (self.len[2] as usize) << 16;
            let seq = if self.prev_full {
                self.prev_seq.wrapping_add(1)
            } else {
                self.infile_next.unwrap_or(plain[i])
            };
            plain[i] = seq;
            if self.infile_next.is_some() {
                self.infile_next = (len > 0 || self.prev_full).then_some(seq.wrapping_add(1));
            }
            self.prev_seq = seq;
            self.prev_full = len == 0xFF_FFFF;
            self.left = len;
            self.header = 0;
            i += 1;
        }
    }

    /// Watch the server's packets for a LOCAL INFILE request.
    fn server(&mut self, plain: &[u8]) {
        let mut i = 0;
        while i < plain.len() {
            if self.s_left > 0 {
                if self.s_first {
                    self.s_first = false;
                    if plain[i] == 0xFB && self.s_hdr[3] == 1 && self.s_left > 0 {
                        self.infile_next = Some(2);
                    }
                }
                let n = self.s_left.min(plain.len() - i);
                i += n;
                self.s_left -= n;
                continue;
            }
            self.s_hdr[self.s_header] = plain[i];
            self.s_header += 1;
            i += 1;
            if self.s_header == 4 {
                self.s_header = 0;
                self.s_left = self.s_hdr[0] as usize
                    | (self.s_hdr[1] as usize) << 8
                    | (self.s_hdr[2] as usize) << 16;
                self.s_first = true;
            }
        }
    }
}

impl ClientLeg {
    pub fn new(kind: LegKind, plain_limit: usize) -> ClientLeg {
        match kind {
            LegKind::Compress => ClientLeg {
                decoder: Decoder::new(),
                // zlib's default level, as the server's compress() uses.
                encoder: Encoder::new(Compression::default(), DEFAULT_MAX_DEFLATED_PACKET),
                seq: 0,
                pending: Vec::new(),
                plain_limit: plain_limit.max(1),
                stats: LegStats::default(),
                seqs: SeqFix::default(),
            },
        }
    }

    /// Wire bytes that arrived before the leg existed (pipelined behind the
    /// login); they are decoded by the next [`ClientLeg::resume`].
    pub fn queue_input(&mut self, wire: &[u8]) {
        self.pending.extend_from_slice(wire);
        self.stats.wire_in += wire.len() as u64;
    }

    /// Wire bytes were read: decode them onto `plain` (up to the limit);
    /// what does not fit is kept for [`ClientLeg::resume`].
    pub fn input(&mut self, wire: &[u8], plain: &mut Vec<u8>) -> Result<(), CompressError> {
        debug_assert!(!self.has_pending(), "read while input was pending");
        self.stats.wire_in += wire.len() as u64;
        let before = plain.len();
        let used = self
            .decoder
            .decode(wire, &mut self.seq, plain, self.plain_limit)?;
        self.pending.extend_from_slice(&wire[used..]);
        self.seqs.client(&mut plain[before..]);
        self.stats.plain_in += (plain.len() - before) as u64;
        Ok(())
    }

    /// Input is waiting (wire bytes, or output the decoder holds back): the
    /// relay's next read is served from it, not from the socket.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || self.decoder.has_output()
    }

    /// Decode more of the pending input onto `plain`.
    pub fn resume(&mut self, plain: &mut Vec<u8>) -> Result<(), CompressError> {
        let before = plain.len();
        let used = self
            .decoder
            .decode(&self.pending, &mut self.seq, plain, self.plain_limit)?;
        self.pending.drain(..used);
        if self.pending.is_empty() && self.pending.capacity() > 64 * 1024 {
            self.pending = Vec::new();
        }
        self.seqs.client(&mut plain[before..]);
        self.stats.plain_in += (plain.len() - before) as u64;
        Ok(())
    }

    /// Frame plain bytes for the client, appending to `wire`. Whole packets
    /// always come out; a partly received one is held until it is whole
    /// (so `wire` may stay empty).
    pub fn output(&mut self, plain: &[u8], wire: &mut Vec<u8>) {
        let before = wire.len();
        self.seqs.server(plain);
        self.encoder.encode(plain, &mut self.seq, wire);
        self.stats.plain_out += plain.len() as u64;
        self.stats.wire_out += (wire.len() - before) as u64;
    }

    pub fn take_stats(&mut self) -> LegStats {
        std::mem::take(&mut self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::compress::{parse_compressed_header, write_compressed_header, CompressedHeader};

    fn stored(seq: u8, plain: &[u8]) -> Vec<u8> {
        let mut w = Vec::new();
        write_compressed_header(
            &mut w,
            CompressedHeader {
                compressed_len: plain.len(),
                seq,
                uncompressed_len: 0,
            },
        );
        w.extend_from_slice(plain);
        w
    }

    #[test]
    fn answers_continue_the_clients_compressed_ids() {
        let mut leg = ClientLeg::new(LegKind::Compress, 1024);
        let mut plain = Vec::new();
        let ping = [1, 0, 0, 0, 0x0e];
        leg.input(&stored(0, &ping), &mut plain).unwrap();
        assert_eq!(plain, ping);
        let mut wire = Vec::new();
        leg.output(&[7, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0], &mut wire);
        let h = parse_compressed_header(wire[..7].try_into().unwrap());
        assert_eq!(h.seq, 1, "after the client's 0");
        // The next command resets the client's count.
        plain.clear();
        leg.input(&stored(0, &ping), &mut plain).unwrap();
        wire.clear();
        leg.output(&[7, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0], &mut wire);
        assert_eq!(wire[3], 1);
        let s = leg.take_stats();
        assert_eq!(s.plain_in, 10);
        assert_eq!(s.wire_in, 24);
        assert_eq!(s.plain_out, 22);
        assert_eq!(s.wire_out, 36);
    }

    #[test]
    fn connector_c_zero_ids_are_renumbered_for_the_backend() {
        let mut leg = ClientLeg::new(LegKind::Compress, 1 << 25);
        let mut big = vec![0xFF, 0xFF, 0xFF, 0];
        big.resize(4 + 0xFF_FFFF, b'q');
        let tail = [3, 0, 0, 0, b'a', b'b', b'c'];
        let mut plain = Vec::new();
        // Stored compressed packets split anywhere, as Connector/C does.
        let stream = [big.clone(), tail.to_vec()].concat();
        for piece in stream.chunks(0xFF_FFFF) {
            leg.input(&stored(0, piece), &mut plain).unwrap();
        }
        assert_eq!(plain[3], 0);
        assert_eq!(plain[4 + 0xFF_FFFF + 3], 1, "the continuation counts on");
        // A new command keeps 0.
        plain.clear();
        leg.input(&stored(0, &[1, 0, 0, 0, 0x0e]), &mut plain)
            .unwrap();
        assert_eq!(plain[3], 0);
        // LOCAL INFILE: the server asks (seq 1), the data and the empty
        // packet count on from 2; the next command is 0 again.
        let mut wire = Vec::new();
        leg.output(&[5, 0, 0, 1, 0xFB, b'f', b'.', b'c', b's'], &mut wire);
        plain.clear();
        let data = [2, 0, 0, 0, b'x', b'y', 0, 0, 0, 0];
        leg.input(&stored(2, &data), &mut plain).unwrap();
        assert_eq!((plain[3], plain[9]), (2, 3));
        leg.output(&[7, 0, 0, 4, 0, 1, 0, 2, 0, 0, 0], &mut wire);
        plain.clear();
        leg.input(&stored(0, &[1, 0, 0, 0, 0x0e]), &mut plain)
            .unwrap();
        assert_eq!(plain[3], 0);
        // A row whose first column is NULL (0xFB) is not a request.
        leg.output(&[1, 0, 0, 1, 1, 2, 0, 0, 3, 0xFB, 0xFB], &mut wire);
        plain.clear();
        leg.input(&stored(0, &[1, 0, 0, 0, 0x0e]), &mut plain)
            .unwrap();
        assert_eq!(plain[3], 0);
    }

    #[test]
    fn input_past_the_limit_waits_for_resume() {
        let mut leg = ClientLeg::new(LegKind::Compress, 100);
        let mut packet = vec![246, 0, 0, 0, 3];
        packet.extend(std::iter::repeat_n(b'a', 245));
        let mut plain = Vec::new();
        leg.queue_input(&stored(0, &packet));
        assert!(leg.has_pending());
        let mut got = Vec::new();
        while leg.has_pending() {
            leg.resume(&mut plain).unwrap();
            assert!(plain.len() <= 100);
            got.append(&mut plain);
        }
        assert_eq!(got, packet);
    }
}

#[cfg(test)]
mod connector_framing {
    use super::*;
    use flate2::{Compress, FlushCompress};
    use wire::compress::{write_compressed_header, CompressedHeader, MAX_COMPRESSED_CHUNK};

    /// mysql-connector-python's send() of a payload over 16 MiB: the MySQL
    /// packets are concatenated and cut every 2^24 - 1 bytes, each piece
    /// zlib-compressed with its own compressed id.
    fn connector_send(payload: &[u8]) -> Vec<u8> {
        let mut prep = Vec::new();
        let mut seq = 0u8;
        let mut rest = payload;
        loop {
            let n = rest.len().min(MAX_COMPRESSED_CHUNK);
            prep.extend_from_slice(&[n as u8, (n >> 8) as u8, (n >> 16) as u8, seq]);
            prep.extend_from_slice(&rest[..n]);
            seq = seq.wrapping_add(1);
            rest = &rest[n..];
            if n < MAX_COMPRESSED_CHUNK {
                break;
            }
        }
        let mut wire = Vec::new();
        for (i, piece) in prep.chunks(MAX_COMPRESSED_CHUNK).enumerate() {
            let mut z = Compress::new(Compression::default(), true);
            let mut out = vec![0u8; piece.len() + 1024];
            z.compress(piece, &mut out, FlushCompress::Finish).unwrap();
            out.truncate(z.total_out() as usize);
            write_compressed_header(
                &mut wire,
                CompressedHeader {
                    compressed_len: out.len(),
                    seq: i as u8,
                    uncompressed_len: piece.len(),
                },
            );
            wire.extend_from_slice(&out);
        }
        wire
    }

    #[test]
    fn a_17_mib_insert_decodes_whole_through_16_kib_reads() {
        let mut payload = vec![3u8];
        payload.extend(std::iter::repeat_n(b'z', 17 << 20));
        let wire = connector_send(&payload);
        let mut leg = ClientLeg::new(LegKind::Compress, 16384);
        let mut plain = Vec::new();
        let mut got = Vec::new();
        let mut pos = 0;
        while pos < wire.len() || leg.has_pending() {
            if leg.has_pending() {
                leg.resume(&mut plain).unwrap();
            } else {
                let n = (wire.len() - pos).min(16384);
                leg.input(&wire[pos..pos + n], &mut plain).unwrap();
                pos += n;
            }
            assert!(plain.len() <= 16384);
            got.append(&mut plain);
        }
        let mut expect = Vec::new();
        let mut rest = &payload[..];
        let mut seq = 0u8;
        loop {
            let n = rest.len().min(MAX_COMPRESSED_CHUNK);
            expect.extend_from_slice(&[n as u8, (n >> 8) as u8, (n >> 16) as u8, seq]);
            expect.extend_from_slice(&rest[..n]);
            seq += 1;
            rest = &rest[n..];
            if n < MAX_COMPRESSED_CHUNK {
                break;
            }
        }
        assert_eq!(got.len(), expect.len());
        assert!(got == expect);
    }
}

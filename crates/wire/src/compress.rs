//! The compressed protocol (CLIENT_COMPRESS, zlib), as a pure streaming
//! codec: a [`Decoder`] turns the client's compressed stream into the plain
//! MySQL packet stream, an [`Encoder`] frames the server's plain packet
//! stream for the client.
//!
//! Framing: every compressed packet has a 7-byte header, a 3-byte length of
//! what follows, a 1-byte *compressed* sequence id and the 3-byte length of
//! the payload once inflated; 0 there means the payload is stored as is (the
//! server does that for payloads under 50 bytes, `MIN_COMPRESS_LENGTH`, and
//! when deflate does not make them smaller). The payload is a zlib stream of
//! plain MySQL packets, with their own 4-byte headers and sequence ids. A
//! compressed packet may carry several MySQL packets or part of one.
//!
//! The compressed sequence id is a counter of its own, shared by both
//! directions and reset by the client at each command: the server answers
//! with the id after the last one it read, then counts up. Both halves here
//! take the counter as `&mut u8`: the decoder sets it to the id after each
//! header it reads, the encoder numbers what it writes from it.
//!
//! Memory is bounded on both sides, so a large result or a large insert
//! streams through in pieces:
//! - the decoder inflates into the caller's buffer up to a limit and returns
//!   how much input it consumed; the caller keeps the rest for later;
//! - the encoder keeps at most one partly received small packet
//!   (`max_packet` bytes). A MySQL packet larger than that is not held: it
//!   goes out stored (uncompressed length 0) as its bytes arrive, in one
//!   compressed packet (two when it is 2^24 - 1 bytes long, the most one
//!   compressed packet holds). Compressed packets always start at a MySQL
//!   packet boundary and a MySQL packet spans at most two of them, because
//!   mysql-connector-python's pure-Python reader handles nothing else
//!   (MariaDB itself splits anywhere its 16 KiB net buffer fills).

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use thiserror::Error;

/// Bytes in a compressed packet's header.
pub const COMPRESSED_HEADER_LEN: usize = 7;
/// The most a compressed packet carries (either length is 3 bytes).
pub const MAX_COMPRESSED_CHUNK: usize = 0xFF_FFFF;
/// Payloads shorter than this are stored, not deflated (as the server does).
pub const MIN_COMPRESS_LENGTH: usize = 50;
/// The default `max_packet` of an [`Encoder`]: MySQL packets up to this size
/// are deflated, larger ones are stored as they stream through.
pub const DEFAULT_MAX_DEFLATED_PACKET: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompressError {
    #[error("compressed packet with no payload declares {ulen} uncompressed bytes")]
    EmptyDeflated { ulen: usize },
    #[error("corrupt zlib stream in a compressed packet: {0}")]
    Corrupt(String),
    #[error("compressed packet inflates to fewer bytes than its header declares")]
    ShorterThanDeclared,
    #[error("compressed packet inflates to more bytes than its header declares")]
    LongerThanDeclared,
}

/// The three fields of a compressed packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressedHeader {
    /// Bytes of payload that follow the header on the wire.
    pub compressed_len: usize,
    pub seq: u8,
    /// The payload's length once inflated; 0: stored as is.
    pub uncompressed_len: usize,
}

fn u24(b: &[u8]) -> usize {
    b[0] as usize | (b[1] as usize) << 8 | (b[2] as usize) << 16
}

fn put_u24(out: &mut [u8], v: usize) {
    debug_assert!(v <= MAX_COMPRESSED_CHUNK);
    out[0] = v as u8;
    out[1] = (v >> 8) as u8;
    out[2] = (v >> 16) as u8;
}

pub fn parse_compressed_header(h: &[u8; COMPRESSED_HEADER_LEN]) -> CompressedHeader {
    CompressedHeader {
        compressed_len: u24(&h[0..3]),
        seq: h[3],
        uncompressed_len: u24(&h[4..7]),
    }
}

pub fn write_compressed_header(out: &mut Vec<u8>, h: CompressedHeader) {
    let mut b = [0u8; COMPRESSED_HEADER_LEN];
    put_u24(&mut b[0..3], h.compressed_len);
    b[3] = h.seq;
    put_u24(&mut b[4..7], h.uncompressed_len);
    out.extend_from_slice(&b);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DecState {
    /// Between compressed packets: `have` header bytes collected.
    Header { have: usize },
    /// Inside a stored payload: `left` bytes to copy.
    Stored { left: usize },
    /// Inside a deflated payload: `left_in` wire bytes to read, `left_out`
    /// plain bytes still to come out of them.
    Deflated { left_in: usize, left_out: usize },
}

/// Compressed stream → plain MySQL packet stream, incrementally.
pub struct Decoder {
    state: DecState,
    header: [u8; COMPRESSED_HEADER_LEN],
    /// Created at the first deflated packet; reset for each one.
    inflate: Option<Box<Decompress>>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            state: DecState::Header { have: 0 },
            header: [0; COMPRESSED_HEADER_LEN],
            inflate: None,
        }
    }

    /// True between compressed packets (nothing partly read).
    pub fn at_packet_boundary(&self) -> bool {
        self.state == DecState::Header { have: 0 }
    }

    /// Output is waiting that needs no more input: the whole of a deflated
    /// payload was read, but the limit stopped it from all coming out. The
    /// caller must decode again (with no input) before it reads the peer,
    /// who may be waiting for an answer to those very bytes.
    pub fn has_output(&self) -> bool {
        matches!(self.state, DecState::Deflated { left_in: 0, .. })
    }

    /// Decode `input`, appending plain bytes to `plain` until it holds
    /// `limit` bytes. Returns how many input bytes were consumed: all of
    /// them unless `plain` filled up, in which case the caller passes the
    /// rest again once it has made room. `seq` becomes the id after the
    /// last compressed header read.
    pub fn decode(
        &mut self,
        input: &[u8],
        seq: &mut u8,
        plain: &mut Vec<u8>,
        limit: usize,
    ) -> Result<usize, CompressError> {
        let mut pos = 0;
        loop {
            match self.state {
                DecState::Header { have } => {
                    let n = (COMPRESSED_HEADER_LEN - have).min(input.len() - pos);
                    if n == 0 {
                        return Ok(pos);
                    }
                    self.header[have..have + n].copy_from_slice(&input[pos..pos + n]);
                    pos += n;
                    if have + n < COMPRESSED_HEADER_LEN {
                        self.state = DecState::Header { have: have + n };
                        return Ok(pos);
                    }
                    let h = parse_compressed_header(&self.header);
                    *seq = h.seq.wrapping_add(1);
                    self.state = match (h.compressed_len, h.uncompressed_len) {
                        (0, 0) => DecState::Header { have: 0 },
                        (0, ulen) => return Err(CompressError::EmptyDeflated { ulen }),
                        (clen, 0) => DecState::Stored { left: clen },
                        (clen, ulen) => {
                            match self.inflate.as_mut() {
                                Some(z) => z.reset(true),
                                None => self.inflate = Some(Box::new(Decompress::new(true))),
                            }
                            DecState::Deflated {
                                left_in: clen,
                                left_out: ulen,
                            }
                        }
                    };
                }
                DecState::Stored { left } => {
                    let n = left
                        .min(input.len() - pos)
                        .min(limit.saturating_sub(plain.len()));
                    if n == 0 {
                        return Ok(pos);
                    }
                    plain.extend_from_slice(&input[pos..pos + n]);
                    pos += n;
                    self.state = if n == left {
                        DecState::Header { have: 0 }
                    } else {
                        DecState::Stored { left: left - n }
                    };
                }
                DecState::Deflated { left_in, left_out } => {
                    let Some(z) = self.inflate.as_mut() else {
                        return Err(CompressError::Corrupt("no inflate state".into()));
                    };
                    let avail = left_in.min(input.len() - pos);
                    let src = &input[pos..pos + avail];
                    let (consumed, produced) = if left_out == 0 {
                        // Every declared byte is out; what is left of the
                        // packet is the zlib trailer, which must add nothing.
                        if avail == 0 && left_in > 0 {
                            return Ok(pos);
                        }
                        // Inflate may hold output back after it consumed
                        // the whole packet: ask once more, with no input.
                        let mut scratch = [0u8; 16];
                        let (c, p) = inflate(z, src, &mut scratch)?;
                        if p > 0 {
                            return Err(CompressError::LongerThanDeclared);
                        }
                        if left_in == 0 {
                            self.state = DecState::Header { have: 0 };
                            continue;
                        }
                        // A stream that ended before the packet did: skip
                        // the rest rather than spin on it.
                        (if c == 0 { avail } else { c }, 0)
                    } else {
                        let room = left_out.min(limit.saturating_sub(plain.len()));
                        if room == 0 || (avail == 0 && left_in > 0) {
                            return Ok(pos);
                        }
                        let start = plain.len();
                        plain.resize(start + room, 0);
                        let r = inflate(z, src, &mut plain[start..]);
                        let (c, p) = match r {
                            Ok(v) => v,
                            Err(e) => {
                                plain.truncate(start);
                                return Err(e);
                            }
                        };
                        plain.truncate(start + p);
                        if c == 0 && p == 0 {
                            // Input left and room to write, yet nothing
                            // moved: the stream ended early.
                            return Err(CompressError::ShorterThanDeclared);
                        }
                        (c, p)
                    };
                    pos += consumed;
                    self.state = DecState::Deflated {
                        left_in: left_in - consumed,
                        left_out: left_out - produced,
                    };
                }
            }
        }
    }
}

/// One inflate step: (input consumed, output produced).
fn inflate(
    z: &mut Decompress,
    src: &[u8],
    dst: &mut [u8],
) -> Result<(usize, usize), CompressError> {
    let (in0, out0) = (z.total_in(), z.total_out());
    match z.decompress(src, dst, FlushDecompress::None) {
        Ok(_) => Ok((
            (z.total_in() - in0) as usize,
            (z.total_out() - out0) as usize,
        )),
        Err(e) => Err(CompressError::Corrupt(e.to_string())),
    }
}

/// Plain MySQL packet stream → compressed packets, aligned on MySQL packet
/// boundaries (see the module comment for why, and for the memory bound).
pub struct Encoder {
    level: Compression,
    /// Created at the first payload worth deflating; reset for each one.
    deflate: Option<Box<Compress>>,
    /// Whole small packets (`..whole`), then the one being received.
    carry: Vec<u8>,
    whole: usize,
    /// The total length (header included) of the packet being received,
    /// once its header is in `carry`.
    current: Option<usize>,
    /// Bytes of a large packet still to pass through stored.
    big_left: usize,
    /// Bytes still to come in the current stored compressed packet.
    stored_left: usize,
    max_packet: usize,
}

impl Encoder {
    /// `max_packet`: MySQL packets up to this many bytes (header included)
    /// are collected and deflated; larger ones stream through stored.
    pub fn new(level: Compression, max_packet: usize) -> Encoder {
        Encoder {
            level,
            deflate: None,
            carry: Vec::new(),
            whole: 0,
            current: None,
            big_left: 0,
            stored_left: 0,
            // Whole packets are flushed once they pass max_packet, so one
            // flush stays under the most a compressed packet can carry.
            max_packet: max_packet.clamp(4, MAX_COMPRESSED_CHUNK / 2),
        }
    }

    /// True when no MySQL packet is partly encoded.
    pub fn at_packet_boundary(&self) -> bool {
        self.carry.is_empty() && self.big_left == 0
    }

    /// Bytes held for a packet not yet complete (for tests and bounds).
    pub fn held(&self) -> usize {
        self.carry.len()
    }

    /// Encode the next piece of the plain stream, appending compressed
    /// packets to `out`. Every whole packet `input` completes is in `out`
    /// when this returns; a partly received small packet is kept.
    pub fn encode(&mut self, input: &[u8], seq: &mut u8, out: &mut Vec<u8>) {
        let mut pos = 0;
        while pos < input.len() {
            if self.big_left > 0 {
                if self.stored_left == 0 {
                    let n = self.big_left.min(MAX_COMPRESSED_CHUNK);
                    stored_header(out, n, seq);
                    self.stored_left = n;
                }
                let n = self.stored_left.min(input.len() - pos);
                out.extend_from_slice(&input[pos..pos + n]);
                pos += n;
                self.stored_left -= n;
                self.big_left -= n;
                continue;
            }
            let partial = self.carry.len() - self.whole;
            match self.current {
                None => {
                    let n = (4 - partial).min(input.len() - pos);
                    self.carry.extend_from_slice(&input[pos..pos + n]);
                    pos += n;
                    if partial + n < 4 {
                        continue;
                    }
                    let total = 4 + u24(&self.carry[self.whole..]);
                    if total > self.max_packet {
                        // Too big to hold: whole packets go first, then
                        // this one passes through stored, its header first.
                        let mut header = [0u8; 4];
                        header.copy_from_slice(&self.carry[self.whole..self.whole + 4]);
                        self.carry.truncate(self.whole);
                        self.flush(seq, out);
                        let n = total.min(MAX_COMPRESSED_CHUNK);
                        stored_header(out, n, seq);
                        out.extend_from_slice(&header);
                        self.stored_left = n - 4;
                        self.big_left = total - 4;
                    } else {
                        self.current = Some(total);
                        self.packet_progress(seq, out);
                    }
                }
                Some(total) => {
                    let n = (total - partial).min(input.len() - pos);
                    self.carry.extend_from_slice(&input[pos..pos + n]);
                    pos += n;
                    self.packet_progress(seq, out);
                }
            }
        }
        self.flush(seq, out);
    }

    /// Encode whole packets the proxy made itself (an ERR, an OK). Only
    /// valid at a packet boundary, which is where the proxy speaks.
    pub fn encode_whole(&mut self, packets: &[u8], seq: &mut u8, out: &mut Vec<u8>) {
        debug_assert!(self.at_packet_boundary());
        self.encode(packets, seq, out);
    }

    /// The packet being received may be complete now.
    fn packet_progress(&mut self, seq: &mut u8, out: &mut Vec<u8>) {
        if let Some(total) = self.current {
            if self.carry.len() - self.whole == total {
                self.whole = self.carry.len();
                self.current = None;
                if self.whole >= self.max_packet {
                    self.flush(seq, out);
                }
            }
        }
    }

    /// Send the whole packets held as one compressed packet.
    fn flush(&mut self, seq: &mut u8, out: &mut Vec<u8>) {
        if self.whole == 0 {
            return;
        }
        let level = self.level;
        let z = self
            .deflate
            .get_or_insert_with(|| Box::new(Compress::new(level, true)));
        compress_one(z, &self.carry[..self.whole], seq, out);
        self.carry.drain(..self.whole);
        self.whole = 0;
        // A burst of large packets grew the carry: give the memory back.
        if self.carry.capacity() > 2 * self.max_packet.max(64 * 1024) {
            self.carry.shrink_to(64 * 1024);
        }
    }
}

fn stored_header(out: &mut Vec<u8>, len: usize, seq: &mut u8) {
    write_compressed_header(
        out,
        CompressedHeader {
            compressed_len: len,
            seq: *seq,
            uncompressed_len: 0,
        },
    );
    *seq = seq.wrapping_add(1);
}

/// One compressed packet holding `plain` (at most [`MAX_COMPRESSED_CHUNK`]):
/// deflated when that makes it smaller, stored otherwise.
fn compress_one(z: &mut Compress, plain: &[u8], seq: &mut u8, out: &mut Vec<u8>) {
    debug_assert!(plain.len() <= MAX_COMPRESSED_CHUNK);
    let start = out.len();
    if plain.len() >= MIN_COMPRESS_LENGTH {
        z.reset();
        // Room for exactly as many bytes as the plain payload: output that
        // does not fit is no smaller, and is stored instead.
        out.resize(start + COMPRESSED_HEADER_LEN + plain.len(), 0);
        let before = z.total_out();
        let status = z.compress(
            plain,
            &mut out[start + COMPRESSED_HEADER_LEN..],
            FlushCompress::Finish,
        );
        let produced = (z.total_out() - before) as usize;
        if matches!(status, Ok(Status::StreamEnd)) && produced < plain.len() {
            out.truncate(start + COMPRESSED_HEADER_LEN + produced);
            let h = CompressedHeader {
                compressed_len: produced,
                seq: *seq,
                uncompressed_len: plain.len(),
            };
            let mut hb = Vec::with_capacity(COMPRESSED_HEADER_LEN);
            write_compressed_header(&mut hb, h);
            out[start..start + COMPRESSED_HEADER_LEN].copy_from_slice(&hb);
            *seq = seq.wrapping_add(1);
            return;
        }
        out.truncate(start);
    }
    stored_header(out, plain.len(), seq);
    out.extend_from_slice(plain);
}

#[cfg(test)]
mod tests;

//! Packet framing, length-encoded integers/strings and a bounds-checked
//! reader.
//!
//! Every MySQL packet is a 4-byte header (3-byte little-endian payload length,
//! 1-byte sequence id) followed by the payload. A payload of exactly
//! [`MAX_PAYLOAD`] bytes means the logical packet continues in the next
//! physical packet; a logical packet whose length is a multiple of
//! `MAX_PAYLOAD` therefore ends with an empty physical packet.

use crate::constants::{HEADER_LEN, MAX_PAYLOAD};
use crate::ProtocolError;

/// Decodes a packet header. `None` if fewer than [`HEADER_LEN`] bytes are
/// available.
#[inline]
pub fn parse_header(b: &[u8]) -> Option<(usize, u8)> {
    match b {
        [l0, l1, l2, seq, ..] => Some((
            usize::from(*l0) | usize::from(*l1) << 8 | usize::from(*l2) << 16,
            *seq,
        )),
        _ => None,
    }
}

/// Encodes a packet header. The length is masked to 24 bits: callers must
/// split payloads longer than [`MAX_PAYLOAD`] (see [`write_packet`]).
#[inline]
fn encode_header(len: usize, seq: u8) -> [u8; HEADER_LEN] {
    let len = len & MAX_PAYLOAD;
    [len as u8, (len >> 8) as u8, (len >> 16) as u8, seq]
}

/// One physical packet borrowed from a receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    pub seq: u8,
    pub payload: &'a [u8],
}

impl Packet<'_> {
    /// A physical packet of exactly [`MAX_PAYLOAD`] bytes is continued by the
    /// next one.
    #[inline]
    pub fn has_continuation(&self) -> bool {
        self.payload.len() == MAX_PAYLOAD
    }
}

/// Returns the first physical packet of `buf` and the number of bytes it
/// occupies (header included), or `None` if it is not complete yet.
#[inline]
pub fn split_packet(buf: &[u8]) -> Option<(Packet<'_>, usize)> {
    let (len, seq) = parse_header(buf)?;
    let end = HEADER_LEN.checked_add(len)?;
    let payload = buf.get(HEADER_LEN..end)?;
    Some((Packet { seq, payload }, end))
}

/// Appends `payload` framed as one logical packet starting at sequence id
/// `seq`, splitting it into [`MAX_PAYLOAD`]-sized physical packets and adding
/// the empty terminator packet the protocol requires when the length is a
/// multiple of `MAX_PAYLOAD` (so an empty payload yields one empty packet).
/// Returns the sequence id the next packet must use.
pub fn write_packet(out: &mut Vec<u8>, seq: u8, payload: &[u8]) -> u8 {
    let chunks = payload.len() / MAX_PAYLOAD + 1;
    out.reserve(payload.len() + chunks * HEADER_LEN);
    let mut seq = seq;
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_PAYLOAD);
        let (chunk, tail) = rest.split_at(n);
        out.extend_from_slice(&encode_header(n, seq));
        out.extend_from_slice(chunk);
        seq = seq.wrapping_add(1);
        rest = tail;
        if n < MAX_PAYLOAD {
            return seq;
        }
    }
}

// ---------------------------------------------------------------------------
// Length-encoded integers and strings.
// ---------------------------------------------------------------------------

/// Decodes a length-encoded integer, returning the value and the bytes used.
///
/// `None` when truncated, and for the first bytes 0xFB (NULL in a text row)
/// and 0xFF (ERR marker), which are not integers.
pub fn read_lenenc_int(b: &[u8]) -> Option<(u64, usize)> {
    let (&first, rest) = b.split_first()?;
    let n = match first {
        0..=0xFA => return Some((u64::from(first), 1)),
        0xFC => 2,
        0xFD => 3,
        0xFE => 8,
        0xFB | 0xFF => return None,
    };
    let bytes = rest.get(..n)?;
    let v = bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
    Some((v, 1 + n))
}

/// Encodes `v` as a length-encoded integer using the shortest form.
pub fn write_lenenc_int(out: &mut Vec<u8>, v: u64) {
    if v < 0xFB {
        out.push(v as u8);
    } else if v <= 0xFFFF {
        out.push(0xFC);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= 0xFF_FFFF {
        out.push(0xFD);
        out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
    } else {
        out.push(0xFE);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Encodes a length-encoded string (lenenc length + bytes).
pub fn write_lenenc_str(out: &mut Vec<u8>, s: &[u8]) {
    write_lenenc_int(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Appends `s` followed by a NUL terminator.
pub fn write_nul_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s);
    out.push(0);
}

// ---------------------------------------------------------------------------
// Bounds-checked reader.
// ---------------------------------------------------------------------------

/// A forward-only cursor over a payload. Every read checks bounds and
/// reports which field was missing, so parsers never index out of range.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not consumed yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The unconsumed bytes, without consuming them.
    fn peek_rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// The next byte, without consuming it.
    pub fn peek_u8(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// Consumes and returns everything left (a `string<EOF>` field).
    pub fn rest(&mut self) -> &'a [u8] {
        let r = self.peek_rest();
        self.pos = self.buf.len();
        r
    }

    /// Consumes exactly `n` bytes.
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtocolError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(ProtocolError::Truncated { what })?;
        let b = self
            .buf
            .get(self.pos..end)
            .ok_or(ProtocolError::Truncated { what })?;
        self.pos = end;
        Ok(b)
    }

    pub fn skip(&mut self, n: usize, what: &'static str) -> Result<(), ProtocolError> {
        self.bytes(n, what).map(|_| ())
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ProtocolError> {
        let b = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, ProtocolError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, ProtocolError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Consumes a length-encoded integer.
    pub fn lenenc_int(&mut self, what: &'static str) -> Result<u64, ProtocolError> {
        match self.peek_u8() {
            None => Err(ProtocolError::Truncated { what }),
            Some(0xFB | 0xFF) => Err(ProtocolError::Malformed {
                what,
                reason: "invalid length-encoded integer prefix",
            }),
            Some(_) => {
                let (v, n) =
                    read_lenenc_int(self.peek_rest()).ok_or(ProtocolError::Truncated { what })?;
                self.pos += n;
                Ok(v)
            }
        }
    }

    /// Consumes a length-encoded string. A declared length larger than the
    /// rest of the payload is an error (never an allocation).
    pub fn lenenc_bytes(&mut self, what: &'static str) -> Result<&'a [u8], ProtocolError> {
        let len = self.lenenc_int(what)?;
        let len = usize::try_from(len).map_err(|_| ProtocolError::Truncated { what })?;
        self.bytes(len, what)
    }

    /// Consumes a NUL-terminated string and its terminator; the NUL is not
    /// returned. Errors if there is no NUL.
    pub fn nul_bytes(&mut self, what: &'static str) -> Result<&'a [u8], ProtocolError> {
        let rest = self.peek_rest();
        let i = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or(ProtocolError::Truncated { what })?;
        self.pos += i + 1;
        Ok(rest.get(..i).unwrap_or_default())
    }

    /// Like [`Reader::nul_bytes`] but accepts a string that runs to the end of
    /// the payload without a NUL, which some clients and old servers send for
    /// the trailing plugin-name field.
    pub fn nul_bytes_or_rest(&mut self) -> &'a [u8] {
        let rest = self.peek_rest();
        match rest.iter().position(|&c| c == 0) {
            Some(i) => {
                self.pos += i + 1;
                rest.get(..i).unwrap_or_default()
            }
            None => self.rest(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_roundtrip(n: usize) {
        let payload: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        let next = write_packet(&mut out, 7, &payload);
        let expected_packets = n / MAX_PAYLOAD + 1;
        assert_eq!(next, 7u8.wrapping_add(expected_packets as u8));
        assert_eq!(out.len(), n + expected_packets * HEADER_LEN);

        // Physical split.
        let mut rest = &out[..];
        let mut seqs = Vec::new();
        let mut joined = Vec::new();
        while let Some((p, used)) = split_packet(rest) {
            seqs.push(p.seq);
            joined.extend_from_slice(p.payload);
            rest = &rest[used..];
        }
        assert!(rest.is_empty());
        assert_eq!(seqs.len(), expected_packets);
        assert_eq!(joined, payload);
    }

    #[test]
    fn framing_small_sizes() {
        for n in [0, 1, 250, 251, 65536] {
            frame_roundtrip(n);
        }
    }

    #[test]
    fn framing_exact_max_payload() {
        frame_roundtrip(MAX_PAYLOAD);
    }

    #[test]
    fn framing_max_payload_plus_one() {
        frame_roundtrip(MAX_PAYLOAD + 1);
    }

    #[test]
    fn framing_twice_max_payload() {
        frame_roundtrip(2 * MAX_PAYLOAD);
    }

    #[test]
    fn empty_payload_is_one_empty_packet() {
        let mut out = Vec::new();
        assert_eq!(write_packet(&mut out, 255, &[]), 0);
        assert_eq!(out, [0, 0, 0, 255]);
    }

    #[test]
    fn exact_max_has_empty_trailer() {
        let mut out = Vec::new();
        let next = write_packet(&mut out, 0, &vec![0u8; MAX_PAYLOAD]);
        assert_eq!(next, 2);
        assert_eq!(&out[..4], &[0xFF, 0xFF, 0xFF, 0]);
        assert_eq!(&out[out.len() - 4..], &[0, 0, 0, 1]);
    }

    #[test]
    fn header_parsing() {
        assert_eq!(parse_header(&[1, 2, 3]), None);
        assert_eq!(parse_header(&[0x01, 0x02, 0x03, 9]), Some((0x030201, 9)));
        assert_eq!(split_packet(&[5, 0, 0, 0, 1, 2]), None);
        let (p, n) = split_packet(&[2, 0, 0, 3, 0xAA, 0xBB, 0xCC]).unwrap();
        assert_eq!((p.seq, p.payload, n), (3, &[0xAA, 0xBB][..], 6));
    }

    #[test]
    fn lenenc_roundtrip() {
        for v in [
            0u64,
            1,
            250,
            251,
            0xFFFF,
            0x1_0000,
            0xFF_FFFF,
            0x100_0000,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            write_lenenc_int(&mut out, v);
            let (got, n) = read_lenenc_int(&out).unwrap();
            assert_eq!((got, n), (v, out.len()), "value {v}");
        }
        let mut out = Vec::new();
        write_lenenc_int(&mut out, 251);
        assert_eq!(out, [0xFC, 251, 0]);
    }

    #[test]
    fn lenenc_invalid_and_truncated() {
        assert_eq!(read_lenenc_int(&[]), None);
        assert_eq!(read_lenenc_int(&[0xFB]), None);
        assert_eq!(read_lenenc_int(&[0xFF]), None);
        assert_eq!(read_lenenc_int(&[0xFC, 1]), None);
        assert_eq!(read_lenenc_int(&[0xFE, 1, 2, 3, 4, 5, 6, 7]), None);
    }

    #[test]
    fn reader_bounds() {
        let mut r = Reader::new(&[
            1, 2, 0, 3, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F,
        ]);
        assert_eq!(r.u8("a").unwrap(), 1);
        assert_eq!(r.nul_bytes("s").unwrap(), &[2]);
        assert_eq!(r.u8("b").unwrap(), 3);
        // Absurd lenenc string length: error, no allocation, no panic.
        assert!(matches!(
            r.clone().lenenc_bytes("big"),
            Err(ProtocolError::Truncated { what: "big" })
        ));
        assert_eq!(r.lenenc_int("n").unwrap(), 0x7FFF_FFFF_FFFF_FFFF);
        assert!(r.is_empty());
        assert!(r.u32("x").is_err());
        assert!(r.bytes(usize::MAX, "y").is_err());
        assert!(Reader::new(b"abc").nul_bytes("z").is_err());
        let mut r = Reader::new(b"abc");
        assert_eq!(r.nul_bytes_or_rest(), b"abc");
        assert!(r.is_empty());
    }

    #[test]
    fn lenenc_str() {
        let mut out = Vec::new();
        write_lenenc_str(&mut out, b"hello");
        let mut r = Reader::new(&out);
        assert_eq!(r.lenenc_bytes("s").unwrap(), b"hello");
    }
}

//! Packet framing for the tracker: follows the 4-byte headers of one direction across chunks
//! that cut packets anywhere, keeping only the first bytes of each packet, which is all the
//! response rules look at. No protocol meaning here; that is the client and server sides' job.

use super::*;

/// Incremental packet framer for one direction.
#[derive(Debug, Clone)]
pub(super) struct Framer {
    pub(super) hdr: [u8; 4],
    /// Header bytes seen of the current physical packet; 4 while in its payload.
    pub(super) hdr_len: u8,
    /// Payload bytes left in the current physical packet.
    pub(super) remaining: u32,
    /// Length of the current physical packet.
    pub(super) phys_len: u32,
    /// The next/current physical packet continues a logical packet (previous one was 0xFFFFFF).
    pub(super) continuation: bool,
    /// First physical length of the current logical packet.
    pub(super) first_len: u32,
    /// Sum of the physical lengths of the current logical packet so far.
    pub(super) logical_len: u64,
    /// Sequence id of the first physical packet.
    pub(super) seq: u8,
    pub(super) prefix: [u8; PREFIX_LEN],
    pub(super) prefix_len: u8,
    /// Keep the whole logical packet in `full` when it is an OK packet
    /// (first byte 0x00) of at most MAX_STATE_OK bytes: set by the tracker
    /// at the start of a packet that may end a response with session state.
    pub(super) keep_full: bool,
    pub(super) full: Vec<u8>,
}

impl Framer {
    pub(super) fn new() -> Self {
        Framer {
            hdr: [0; 4],
            hdr_len: 0,
            remaining: 0,
            phys_len: 0,
            continuation: false,
            first_len: 0,
            logical_len: 0,
            seq: 0,
            prefix: [0; PREFIX_LEN],
            prefix_len: 0,
            keep_full: false,
            full: Vec::new(),
        }
    }

    /// A packet is partially seen (header, payload, or a logical packet awaiting continuation).
    pub(super) fn mid_packet(&self) -> bool {
        self.hdr_len > 0 || self.continuation
    }

    /// The next byte fed starts a new logical packet.
    pub(super) fn at_logical_start(&self) -> bool {
        self.hdr_len == 0 && !self.continuation
    }

    pub(super) fn prefix(&self) -> &[u8] {
        &self.prefix[..self.prefix_len as usize]
    }

    /// Packet as the response state machine needs it.
    pub(super) fn packet(&self) -> Packet<'_> {
        Packet {
            first_len: self.first_len,
            prefix: self.prefix(),
        }
    }
}

/// Step of the framer over a chunk.
pub(super) enum Step {
    /// Header of a new logical packet complete (first physical packet).
    LogicalHeader,
    /// Logical packet complete.
    LogicalEnd,
    /// Nothing notable (header bytes, payload bytes, a continuation header, ...).
    None,
}

impl Framer {
    /// Consumes bytes from `chunk[*pos..]` up to the next notable event.
    pub(super) fn step(&mut self, chunk: &[u8], pos: &mut usize) -> Step {
        if self.hdr_len < 4 {
            let take = (4 - self.hdr_len as usize).min(chunk.len() - *pos);
            let h = self.hdr_len as usize;
            self.hdr[h..h + take].copy_from_slice(&chunk[*pos..*pos + take]);
            self.hdr_len += take as u8;
            *pos += take;
            if self.hdr_len < 4 {
                return Step::None;
            }
            self.phys_len = u32::from_le_bytes([self.hdr[0], self.hdr[1], self.hdr[2], 0]);
            self.remaining = self.phys_len;
            let new_logical = !self.continuation;
            if new_logical {
                self.logical_len = 0;
            }
            self.logical_len += u64::from(self.phys_len);
            if new_logical {
                self.first_len = self.phys_len;
                self.seq = self.hdr[3];
                self.prefix_len = 0;
                self.full.clear();
            }
            if self.phys_len == 0 {
                // An empty physical packet ends its logical packet at once.
                if new_logical {
                    // Report the header first; the caller calls step again (0 bytes) for the end.
                    return Step::LogicalHeader;
                }
                return self.end_physical();
            }
            return if new_logical {
                Step::LogicalHeader
            } else {
                Step::None
            };
        }
        if self.remaining == 0 {
            // Only reached for an empty first physical packet right after LogicalHeader.
            return self.end_physical();
        }
        let n = (self.remaining as usize).min(chunk.len() - *pos);
        if self.keep_full
            && self.logical_len <= MAX_STATE_OK as u64
            && (self.full.first().copied().or(chunk.get(*pos).copied()) == Some(0x00))
        {
            self.full.extend_from_slice(&chunk[*pos..*pos + n]);
        }
        let have = self.prefix_len as usize;
        if have < PREFIX_LEN {
            let k = n.min(PREFIX_LEN - have);
            self.prefix[have..have + k].copy_from_slice(&chunk[*pos..*pos + k]);
            self.prefix_len += k as u8;
        }
        *pos += n;
        self.remaining -= n as u32;
        if self.remaining == 0 {
            return self.end_physical();
        }
        Step::None
    }

    pub(super) fn end_physical(&mut self) -> Step {
        self.hdr_len = 0;
        if self.phys_len == MAX_PACKET {
            self.continuation = true;
            Step::None
        } else {
            self.continuation = false;
            Step::LogicalEnd
        }
    }
}

/// A complete logical packet from the server, as far as the tracker keeps it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Packet<'a> {
    pub(super) first_len: u32,
    pub(super) prefix: &'a [u8],
}

impl Packet<'_> {
    pub(super) fn first_byte(&self) -> Option<u8> {
        self.prefix.first().copied()
    }
    /// Legacy EOF or OK-with-0xFE-header: first byte 0xFE and shorter than 0xFFFFFF.
    pub(super) fn is_terminator(&self) -> bool {
        self.first_byte() == Some(0xFE) && self.first_len < MAX_PACKET
    }
    pub(super) fn is_err(&self) -> bool {
        self.first_byte() == Some(0xFF)
    }
    pub(super) fn is_ok(&self) -> bool {
        self.first_byte() == Some(0x00)
    }
    /// MariaDB progress report: an ERR packet with error code 0xFFFF.
    pub(super) fn is_progress(&self) -> bool {
        self.prefix.len() >= 3 && self.prefix[..3] == [0xFF, 0xFF, 0xFF]
    }
    /// Affected rows and last insert id of an OK packet (0x00 header).
    pub(super) fn ok_counts(&self) -> Option<OkCounts> {
        let p = self.prefix;
        if *p.first()? != 0x00 {
            return None;
        }
        let (affected_rows, a) = lenenc(p.get(1..)?)?;
        let (last_insert_id, _) = lenenc(p.get(1 + a..)?)?;
        Some(OkCounts {
            affected_rows,
            last_insert_id,
        })
    }

    /// Warning count of an OK packet or a legacy EOF.
    pub(super) fn warnings(&self) -> Option<u16> {
        let p = self.prefix;
        match *p.first()? {
            0xFE if self.first_len < 7 => Some(u16::from_le_bytes([*p.get(1)?, *p.get(2)?])),
            0x00 | 0xFE => {
                let (_, a) = lenenc(p.get(1..)?)?;
                let (_, b) = lenenc(p.get(1 + a..)?)?;
                let i = 1 + a + b + 2;
                Some(u16::from_le_bytes([*p.get(i)?, *p.get(i + 1)?]))
            }
            _ => None,
        }
    }

    /// Status flags of an OK packet (0x00 or 0xFE header) or of a 5-byte legacy EOF.
    pub(super) fn status(&self) -> Option<u16> {
        let p = self.prefix;
        match *p.first()? {
            0xFE if self.first_len < 7 => {
                // Legacy EOF: 0xFE, warnings u16, status u16.
                Some(u16::from_le_bytes([*p.get(3)?, *p.get(4)?]))
            }
            0x00 | 0xFE => {
                let (_, a) = lenenc(p.get(1..)?)?;
                let (_, b) = lenenc(p.get(1 + a..)?)?;
                let i = 1 + a + b;
                Some(u16::from_le_bytes([*p.get(i)?, *p.get(i + 1)?]))
            }
            _ => None,
        }
    }
}

/// Decodes a length-encoded integer; `None` for NULL (0xFB), 0xFF or truncated input.
pub(super) fn lenenc(p: &[u8]) -> Option<(u64, usize)> {
    let b = *p.first()?;
    let width = match b {
        0..=0xFA => return Some((u64::from(b), 1)),
        0xFC => 2,
        0xFD => 3,
        0xFE => 8,
        _ => return None,
    };
    let bytes = p.get(1..1 + width)?;
    let mut v = [0u8; 8];
    v[..width].copy_from_slice(bytes);
    Some((u64::from_le_bytes(v), 1 + width))
}

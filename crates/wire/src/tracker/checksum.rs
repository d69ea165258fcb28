//! The checksum of one answer, as transaction replay compares it: what a
//! client was answered inside a transaction against what a replay of the
//! same statement reads on another connection.
//!
//! The rule: FNV-1a (64-bit) over the answer's logical packets in order,
//! each packet folded in as the hash of its payload, so headers (sequence
//! ids, and where a long packet was split) never count. A packet that ends
//! a result (an OK, or an EOF / `0xFE` terminator) counts only for its
//! affected rows, last insert id and warning count: its status flags, info
//! string and session-state block are left out, because the session-state
//! strip rewrites them for a client that did not ask for tracking, and a
//! fresh connection on a new writer may raise `SERVER_SESSION_STATE_CHANGED`
//! where the old one did not. Column counts, column definitions, rows and
//! ERR packets count whole. Both sides hash what the server sent, before any
//! strip, over connections of the same pool key (the same capabilities), so
//! the same answer gives the same checksum.

use super::framing::Packet;

/// FNV-1a's offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// `h` with `bytes` folded in (FNV-1a: streaming, so a packet cut across
/// reads hashes as one).
pub fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The answer's checksum `sum` with one more logical packet folded in:
/// `ends_result`: the packet is an OK or terminator (it carried status
/// flags); `payload_hash`: [`fnv`] of its whole payload.
pub(super) fn fold_packet(sum: u64, pkt: &Packet<'_>, ends_result: bool, payload_hash: u64) -> u64 {
    if !ends_result {
        return fnv(sum, &payload_hash.to_le_bytes());
    }
    let counts = pkt.ok_counts();
    let mut h = fnv(FNV_OFFSET, &[0xFE]);
    h = fnv(h, &counts.map_or(0, |c| c.affected_rows).to_le_bytes());
    h = fnv(h, &counts.map_or(0, |c| c.last_insert_id).to_le_bytes());
    h = fnv(h, &pkt.warnings().unwrap_or(0).to_le_bytes());
    fnv(sum, &h.to_le_bytes())
}

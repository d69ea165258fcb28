//! What a client that did not negotiate CLIENT_SESSION_TRACK must not see.
//!
//! Every backend connection negotiates CLIENT_SESSION_TRACK (the server's
//! SESSION_STATE_CHANGED flag is transaction pooling's net for state no
//! lexer sees), so the server's replies carry session state that a client
//! without the capability would never get from it directly. Checked on
//! MariaDB 10.11, the two layouts differ only where state changed:
//!
//! ```text
//! without tracking: 00 affected insert_id status warnings [info lenenc, only when non-empty]
//! with tracking:    00 affected insert_id status|0x4000 warnings info lenenc (0x00 if empty)
//!                   state lenenc (the blocks)
//! ```
//!
//! (the server writes the info length-encoded either way), and a legacy EOF
//! (`FE warnings status`) differs in the flag alone. [`strip_packet`] turns
//! the one into the other in place: the flag cleared, the blocks and an
//! empty info dropped, the packet's length rewritten.

use crate::mysql::constants::SERVER_SESSION_STATE_CHANGED;

/// Reads a length-encoded integer: (value, width). `None` for NULL, 0xFF or
/// a truncated one.
fn lenenc(p: &[u8]) -> Option<(u64, usize)> {
    let width = match *p.first()? {
        b @ 0..=0xFA => return Some((u64::from(b), 1)),
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

/// The packet at `data[start..]` (header included, wholly inside `data`) is
/// an OK, a 0xFE-headed OK or a legacy EOF whose status has
/// SESSION_STATE_CHANGED: rewrite it as the server would have sent it to a
/// client without CLIENT_SESSION_TRACK, moving the bytes behind it forward.
/// Returns how many bytes `data`'s valid part shrank by (the caller sends
/// that many fewer). Anything else is left as it is (0).
pub fn strip_packet(data: &mut [u8], start: usize) -> usize {
    let Some(header) = data.get(start..start + 4) else {
        return 0;
    };
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let body = start + 4;
    let Some(payload) = data.get_mut(body..body + len) else {
        return 0;
    };
    let Some(keep) = stripped_len(payload) else {
        return 0;
    };
    if keep == len {
        return 0;
    }
    let keep_bytes = (keep as u32).to_le_bytes();
    data[start..start + 3].copy_from_slice(&keep_bytes[..3]);
    data.copy_within(body + len.., body + keep);
    len - keep
}

/// Clears the flag in `payload` and says how many of its bytes a client
/// without session tracking gets; `None` when it is no flagged OK or EOF.
fn stripped_len(payload: &mut [u8]) -> Option<usize> {
    let status_at = match *payload.first()? {
        // Legacy EOF: 0xFE, warnings u16, status u16.
        0xFE if payload.len() < 7 => 3,
        0x00 | 0xFE => {
            let (_, a) = lenenc(payload.get(1..)?)?;
            let (_, b) = lenenc(payload.get(1 + a..)?)?;
            1 + a + b
        }
        _ => return None,
    };
    let status = u16::from_le_bytes([*payload.get(status_at)?, *payload.get(status_at + 1)?]);
    if status & SERVER_SESSION_STATE_CHANGED == 0 {
        return None;
    }
    let cleared = (status & !SERVER_SESSION_STATE_CHANGED).to_le_bytes();
    payload[status_at..status_at + 2].copy_from_slice(&cleared);
    if payload[0] == 0xFE && payload.len() < 7 {
        return Some(payload.len());
    }
    // The info follows the warning count; it stays when it says something.
    let info_at = status_at + 4;
    let Some(rest) = payload.get(info_at..).filter(|r| !r.is_empty()) else {
        return Some(payload.len().min(info_at));
    };
    match lenenc(rest) {
        Some((0, _)) => Some(info_at),
        Some((n, w)) => usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_add(w + info_at))
            .filter(|end| *end <= payload.len())
            .or(Some(payload.len())),
        None => Some(payload.len()),
    }
}

#[cfg(test)]
#[path = "state_strip_tests.rs"]
mod tests;

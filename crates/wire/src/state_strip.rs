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
//! (`FE warnings status`) differs in the flag alone. A client that did
//! negotiate it gets the blocks of the trackers it has on: the server's
//! defaults ([`ClientView::Defaults`]: the schema, and the system variables
//! of [`DEFAULT_TRACKED_VARIABLES`]), not the ones the proxy adds. A result
//! set's EOF carries the status the last OK left, so its flag is cleared
//! for such a client too. [`strip_packet`] rewrites one packet in place:
//! the flag cleared when no block is left, the other blocks dropped, an
//! empty info dropped with the last block, the packet's length rewritten.

use crate::constants::SERVER_SESSION_STATE_CHANGED;
use crate::packet::read_lenenc_int as lenenc;

/// What session tracking a client gets from the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientView {
    /// The client did not negotiate CLIENT_SESSION_TRACK.
    Untracked,
    /// It did, and keeps the server's default trackers (MariaDB 10.11:
    /// `session_track_schema=ON`, `session_track_state_change=OFF`,
    /// `session_track_transaction_info=OFF` and the variables below).
    Defaults,
}

/// MariaDB 10.11's default `session_track_system_variables`.
pub const DEFAULT_TRACKED_VARIABLES: [&str; 5] = [
    "autocommit",
    "character_set_client",
    "character_set_connection",
    "character_set_results",
    "time_zone",
];

/// SESSION_TRACK_SYSTEM_VARIABLES and SESSION_TRACK_SCHEMA block types.
const BLOCK_SYSTEM_VARIABLE: u8 = 0;
const BLOCK_SCHEMA: u8 = 1;

/// The packet at `data[start..]` (header included, wholly inside `data`) is
/// an OK, a 0xFE-headed OK or a legacy EOF whose status has
/// SESSION_STATE_CHANGED: rewrite it as the server would have sent it to a
/// client without CLIENT_SESSION_TRACK, moving the bytes behind it forward.
/// Returns how many bytes `data`'s valid part shrank by (the caller sends
/// that many fewer). Anything else is left as it is (0).
pub fn strip_packet(data: &mut [u8], start: usize, view: ClientView) -> usize {
    let Some(header) = data.get(start..start + 4) else {
        return 0;
    };
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let body = start + 4;
    let Some(payload) = data.get_mut(body..body + len) else {
        return 0;
    };
    let Some(keep) = stripped_len(payload, view) else {
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

/// Rewrites `payload` for `view` and says how many of its bytes the client
/// gets; `None` when it is no flagged OK or EOF.
fn stripped_len(payload: &mut [u8], view: ClientView) -> Option<usize> {
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
    let clear_flag = |payload: &mut [u8]| {
        let cleared = (status & !SERVER_SESSION_STATE_CHANGED).to_le_bytes();
        payload[status_at..status_at + 2].copy_from_slice(&cleared);
    };
    if payload[0] == 0xFE && payload.len() < 7 {
        clear_flag(payload);
        return Some(payload.len());
    }
    // The info follows the warning count, then the state.
    let info_at = status_at + 4;
    let Some((info_len, w)) = payload.get(info_at..).and_then(lenenc) else {
        clear_flag(payload);
        return Some(payload.len().min(info_at));
    };
    let state_at = usize::try_from(info_len)
        .ok()
        .and_then(|n| n.checked_add(info_at + w))
        .filter(|end| *end <= payload.len())?;
    if view == ClientView::Defaults {
        if let Some(end) = keep_default_blocks(payload, state_at) {
            return Some(end);
        }
    }
    clear_flag(payload);
    Some(if info_len == 0 { info_at } else { state_at })
}

/// Keeps, at `state_at`, the blocks a client with the default trackers
/// gets; returns the payload's new end, or `None` when none is left (or the
/// state does not parse: the caller then drops it whole).
fn keep_default_blocks(payload: &mut [u8], state_at: usize) -> Option<usize> {
    let (total, w) = lenenc(payload.get(state_at..)?)?;
    let first = state_at + w;
    let end = usize::try_from(total).ok()?.checked_add(first)?;
    let blocks = payload.get(first..end)?;
    let mut kept = 0usize;
    let mut at = 0;
    while at < blocks.len() {
        let (len, bw) = lenenc(blocks.get(at + 1..)?)?;
        let block_end = at + 1 + bw + usize::try_from(len).ok()?;
        let block = blocks.get(at..block_end)?;
        if default_tracker_reports(block, bw) {
            kept += block.len();
        }
        at = block_end;
    }
    if kept == 0 {
        return None;
    }
    // Shrinking only: the new length is no wider than the old, so every
    // kept block moves towards the front, never over one not moved yet.
    let mut write = state_at + write_lenenc(payload, state_at, kept as u64);
    let mut at = first;
    while at < end {
        let (len, bw) = lenenc(payload.get(at + 1..)?)?;
        let block_end = at + 1 + bw + usize::try_from(len).ok()?;
        if default_tracker_reports(&payload[at..block_end], bw) {
            payload.copy_within(at..block_end, write);
            write += block_end - at;
        }
        at = block_end;
    }
    Some(write)
}

/// A block (type, lenenc data) is one a default tracker sends: the schema,
/// or one of [`DEFAULT_TRACKED_VARIABLES`].
fn default_tracker_reports(block: &[u8], width: usize) -> bool {
    match block.first() {
        Some(&BLOCK_SCHEMA) => true,
        Some(&BLOCK_SYSTEM_VARIABLE) => {
            let data = block.get(1 + width..).unwrap_or_default();
            let name = lenenc(data).and_then(|(n, nw)| {
                let n = usize::try_from(n).ok()?;
                data.get(nw..nw + n)
            });
            name.is_some_and(|n| {
                DEFAULT_TRACKED_VARIABLES
                    .iter()
                    .any(|v| n.eq_ignore_ascii_case(v.as_bytes()))
            })
        }
        _ => false,
    }
}

/// Writes `v` length-encoded at `at` (room known to be there); its width.
fn write_lenenc(buf: &mut [u8], at: usize, v: u64) -> usize {
    let bytes = v.to_le_bytes();
    let (tag, width) = match v {
        0..=0xFA => {
            buf[at] = v as u8;
            return 1;
        }
        0xFB..=0xFFFF => (0xFC, 2),
        0x1_0000..=0xFF_FFFF => (0xFD, 3),
        _ => (0xFE, 8),
    };
    buf[at] = tag;
    buf[at + 1..at + 1 + width].copy_from_slice(&bytes[..width]);
    1 + width
}

#[cfg(test)]
mod tests;

//! A result set the proxy answers itself: one BIGINT column, one row
//! (transaction pooling answers `SELECT ROW_COUNT()` and `SELECT
//! FOUND_ROWS()` from the session's own records).

use crate::packet::write_packet;

/// MYSQL_TYPE_LONGLONG.
const TYPE_LONGLONG: u8 = 0x08;
/// The binary collation, which numeric columns carry.
const BINARY_COLLATION: u16 = 63;
/// NOT_NULL_FLAG | BINARY_FLAG.
const FLAGS: u16 = 0x0001 | 0x0080;

fn lenenc_str(out: &mut Vec<u8>, s: &[u8]) {
    // Names and values here are far below 251 bytes (checked by the caller).
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

/// The packets (sequence ids from 1) of a result set with one BIGINT column
/// named `name` and one row holding `value`, as a MariaDB server sends it to
/// a client with (`deprecate_eof`) or without CLIENT_DEPRECATE_EOF; `status`
/// goes in the EOF packets. None when `name` is too long for this simple
/// form (250 bytes).
pub fn one_bigint(name: &str, value: i64, deprecate_eof: bool, status: u16) -> Option<Vec<u8>> {
    if name.len() > 250 {
        return None;
    }
    let mut out = Vec::with_capacity(128);
    let mut seq = write_packet(&mut out, 1, &[1]);
    let mut def = Vec::with_capacity(64);
    lenenc_str(&mut def, b"def");
    lenenc_str(&mut def, b"");
    lenenc_str(&mut def, b"");
    lenenc_str(&mut def, b"");
    lenenc_str(&mut def, name.as_bytes());
    lenenc_str(&mut def, b"");
    def.push(0x0c);
    def.extend_from_slice(&BINARY_COLLATION.to_le_bytes());
    def.extend_from_slice(&21u32.to_le_bytes());
    def.push(TYPE_LONGLONG);
    def.extend_from_slice(&FLAGS.to_le_bytes());
    def.push(0);
    def.extend_from_slice(&[0, 0]);
    seq = write_packet(&mut out, seq, &def);
    let eof = [0xFE, 0, 0, status as u8, (status >> 8) as u8];
    if !deprecate_eof {
        seq = write_packet(&mut out, seq, &eof);
    }
    let mut row = Vec::with_capacity(24);
    lenenc_str(&mut row, value.to_string().as_bytes());
    seq = write_packet(&mut out, seq, &row);
    if deprecate_eof {
        // OK packet with the 0xFE header: affected rows, insert id, status,
        // warnings.
        let ok = [0xFE, 0, 0, status as u8, (status >> 8) as u8, 0, 0];
        write_packet(&mut out, seq, &ok);
    } else {
        write_packet(&mut out, seq, &eof);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::Tracker;

    #[test]
    fn the_tracker_reads_it_as_one_whole_result_set() {
        for deprecate_eof in [false, true] {
            let bytes = one_bigint("ROW_COUNT()", -1, deprecate_eof, 2).unwrap();
            let mut t = Tracker::new(deprecate_eof);
            t.capture_commands(1024);
            let mut q = Vec::new();
            write_packet(&mut q, 0, b"\x03SELECT ROW_COUNT()");
            t.on_client_bytes(&q).unwrap();
            t.on_server_bytes(&bytes).unwrap();
            assert!(t.at_command_boundary(), "deprecate_eof={deprecate_eof}");
            let done = t.take_completed().unwrap();
            assert_eq!(done.rows, Some(1));
            assert_eq!(done.status, 2);
        }
        assert!(one_bigint(&"x".repeat(251), 0, true, 2).is_none());
    }
}

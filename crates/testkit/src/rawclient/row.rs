//! Length-encoded integers and the values of a text-protocol row.

/// A length-encoded integer at the start of `p`: (value, bytes used). 0xFB (NULL) and 0xFF are
/// not integers.
pub fn lenenc(p: &[u8]) -> Option<(u64, usize)> {
    match *p.first()? {
        n @ 0..=0xFA => Some((n as u64, 1)),
        0xFC => Some((u16::from_le_bytes(p.get(1..3)?.try_into().ok()?) as u64, 3)),
        0xFD => {
            let b = p.get(1..4)?;
            Some((b[0] as u64 | (b[1] as u64) << 8 | (b[2] as u64) << 16, 4))
        }
        0xFE => Some((u64::from_le_bytes(p.get(1..9)?.try_into().ok()?), 9)),
        _ => None,
    }
}

/// The column values of one text-protocol row (None = NULL); an error when a length or a value
/// runs past the packet.
pub fn row_values(p: &[u8]) -> Result<Vec<Option<&[u8]>>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < p.len() {
        if p[pos] == 0xFB {
            out.push(None);
            pos += 1;
            continue;
        }
        let (len, used) = lenenc(&p[pos..])
            .ok_or_else(|| format!("no length-encoded column value at byte {pos} of {p:?}"))?;
        let start = pos + used;
        let value = usize::try_from(len)
            .ok()
            .and_then(|len| p.get(start..start.checked_add(len)?))
            .ok_or_else(|| {
                format!("a column value of {len} bytes at byte {start} runs past the row")
            })?;
        out.push(Some(value));
        pos = start + value.len();
    }
    Ok(out)
}

/// One text-protocol row, each column as text (lossy UTF-8), NULL as None.
pub fn parse_row(p: &[u8]) -> Result<Vec<Option<String>>, String> {
    Ok(row_values(p)?
        .into_iter()
        .map(|v| v.map(|b| String::from_utf8_lossy(b).into_owned()))
        .collect())
}

/// One text-protocol row, each column as bytes, NULL as None; panics on a malformed row.
pub fn text_row(p: &[u8]) -> Vec<Option<Vec<u8>>> {
    row_values(p)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|v| v.map(<[u8]>::to_vec))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_rows_with_null_and_long_lengths() {
        let mut p = vec![3];
        p.extend_from_slice(b"abc");
        p.push(0xFB);
        p.extend_from_slice(&[0xFC, 0x2C, 0x01]);
        p.extend_from_slice(&[b'x'; 300]);
        let r = parse_row(&p).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].as_deref(), Some("abc"));
        assert_eq!(r[1], None);
        assert_eq!(r[2].as_ref().map(String::len), Some(300));
        assert_eq!(text_row(&p)[0].as_deref(), Some(&b"abc"[..]));
    }

    #[test]
    fn a_truncated_row_is_an_error() {
        assert!(parse_row(&[4, b'a', b'b']).is_err());
        assert!(parse_row(&[0xFC, 1]).is_err());
        assert!(parse_row(&[0xFF]).is_err());
    }

    #[test]
    fn lenenc_widths() {
        assert_eq!(lenenc(&[0xFA]), Some((250, 1)));
        assert_eq!(lenenc(&[0xFC, 0x2C, 0x01]), Some((300, 3)));
        assert_eq!(lenenc(&[0xFD, 1, 0, 1]), Some((65537, 4)));
        assert_eq!(lenenc(&[0xFE, 1, 0, 0, 0, 0, 0, 0, 0]), Some((1, 9)));
        assert_eq!(lenenc(&[0xFE, 1]), None);
        assert_eq!(lenenc(&[]), None);
    }
}

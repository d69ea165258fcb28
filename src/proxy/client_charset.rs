//! Does the session's client character set keep ASCII bytes out of its
//! multi-byte characters? In big5, cp932, gbk, sjis and gb18030 the second
//! byte of a character may be 0x5c, so the server reads `\` (or a quote
//! after it) differently from a byte-wise lexer; the statement lexer pins
//! any non-ASCII text in them (`LexOptions::ascii_safe_charset`). The set
//! follows the handshake collation, then `SET NAMES`, `SET CHARACTER SET`
//! and `SET character_set_client`.

use crate::mysql::lexer::{Scope, SetItem};

/// The character sets whose multi-byte characters may hold an ASCII byte.
const UNSAFE_CHARSETS: [&str; 5] = ["big5", "cp932", "gbk", "gb18030", "sjis"];

/// Their collation ids (MariaDB's, and MySQL's gb18030 ones); a handshake
/// carries the low byte only, the nopad ids (above 1024) come from `SET`.
const UNSAFE_IDS: [u16; 19] = [
    1, 13, 28, 84, 87, 88, 95, 96, 248, 249, 250, 1025, 1037, 1052, 1108, 1111, 1112, 1119, 1120,
];

/// The handshake collation `id` gives a safe client character set.
pub fn collation_is_safe(id: u16) -> bool {
    !UNSAFE_IDS.contains(&id)
}

/// The character set called `name` is safe (unquoted, any case).
fn charset_is_safe(name: &str) -> bool {
    !UNSAFE_CHARSETS
        .iter()
        .any(|cs| name.eq_ignore_ascii_case(cs))
}

/// Safe after a `SET` of `items` that ran on a session where it was
/// `safe`; `tracked` is the system-variables tracker's report (name,
/// value), the evaluated value where the statement had an expression. A
/// value this cannot read (`DEFAULT`, an expression) counts as unsafe:
/// only non-ASCII texts pin then.
pub fn after_set(safe: bool, items: &[SetItem], tracked: &[(String, String)]) -> bool {
    let mut safe = safe;
    for item in items {
        safe = match item {
            SetItem::Names { charset, .. } => charset.as_deref().is_some_and(charset_is_safe),
            SetItem::CharacterSet(cs) => cs.as_deref().is_some_and(charset_is_safe),
            SetItem::Variable {
                scope: Scope::Session,
                name,
                value,
            } if name == "character_set_client" => {
                match tracked.iter().find(|(n, _)| n == "character_set_client") {
                    Some((_, v)) => charset_is_safe(v),
                    None => value_is_safe(value),
                }
            }
            _ => safe,
        };
    }
    safe
}

/// A `character_set_client` value as written: a name, quoted or not, or a
/// collation id.
fn value_is_safe(value: &str) -> bool {
    let v = value.trim();
    let unquoted = match v.as_bytes() {
        [q @ (b'\'' | b'"' | b'`'), .., last] if q == last => &v[1..v.len() - 1],
        _ => v,
    };
    if let Ok(id) = unquoted.parse::<u16>() {
        return collation_is_safe(id);
    }
    let plain = !unquoted.is_empty()
        && unquoted
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    plain && !unquoted.eq_ignore_ascii_case("default") && charset_is_safe(unquoted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(value: &str) -> SetItem {
        SetItem::Variable {
            scope: Scope::Session,
            name: "character_set_client".into(),
            value: value.into(),
        }
    }

    #[test]
    fn handshake_collations() {
        for id in [8, 33, 45, 46, 63, 224, 255] {
            assert!(collation_is_safe(id), "{id}");
        }
        for id in [1, 13, 28, 84, 87, 88, 95, 96, 248] {
            assert!(!collation_is_safe(id), "{id}");
        }
    }

    #[test]
    fn set_statements_move_it() {
        let names = |cs: Option<&str>| SetItem::Names {
            charset: cs.map(str::to_owned),
            collation: None,
        };
        assert!(!after_set(true, &[names(Some("gbk"))], &[]));
        assert!(after_set(false, &[names(Some("utf8mb4"))], &[]));
        assert!(!after_set(true, &[names(None)], &[]));
        assert!(!after_set(
            true,
            &[SetItem::CharacterSet(Some("SJIS".into()))],
            &[]
        ));
        assert!(!after_set(true, &[var("'big5'")], &[]));
        assert!(!after_set(true, &[var("28")], &[]));
        assert!(!after_set(true, &[var("@@character_set_server")], &[]));
        assert!(after_set(false, &[var("latin1")], &[]));
        let tracked = [("character_set_client".to_owned(), "cp932".to_owned())];
        assert!(!after_set(true, &[var("@@character_set_server")], &tracked));
        // Another variable, or the global value, leaves it.
        let other = SetItem::Variable {
            scope: Scope::Global,
            name: "character_set_client".into(),
            value: "gbk".into(),
        };
        assert!(after_set(true, &[other], &[]));
    }
}

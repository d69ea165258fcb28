//! How the session's client character set bears on lexing a statement, by
//! byte, as the server reads it:
//! - UTF-8 (utf8mb3, utf8mb4) and ASCII: a byte ≥ 0x80 is part of a word,
//!   as the statement lexer takes it.
//! - Other single-byte sets (latin1, latin2, greek, …): a byte ≥ 0x80 may be
//!   whitespace (0xA0 in latin1, checked on MariaDB 10.11: `SELECT\xA01`
//!   runs, and `--\xA0` starts a comment), so outside quotes the lexer
//!   cannot be sure of it (`LexOptions::high_bytes_in_words` false).
//! - big5, cp932, gbk, gb18030, sjis: the second byte of a character may be
//!   0x5c, which the server reads as part of the character and a byte-wise
//!   lexer as `\`: any non-ASCII text pins (`ascii_safe_charset` false).
//!
//! The class follows the handshake collation, then `SET NAMES`, `SET
//! CHARACTER SET` and `SET character_set_client`.

use wire::lexer::{Scope, SetItem};

/// What a client character set means to the lexer (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Class {
    #[default]
    Utf8,
    SingleByte,
    UnsafeMultiByte,
}

impl Class {
    /// `LexOptions::ascii_safe_charset`.
    pub fn ascii_safe(self) -> bool {
        self != Class::UnsafeMultiByte
    }

    /// `LexOptions::high_bytes_in_words`.
    pub fn high_bytes_in_words(self) -> bool {
        self == Class::Utf8
    }
}

/// The character sets whose multi-byte characters may hold an ASCII byte.
const UNSAFE_CHARSETS: [&str; 5] = ["big5", "cp932", "gbk", "gb18030", "sjis"];

/// Their collation ids (MariaDB's, and MySQL's gb18030 ones); a handshake
/// carries the low byte only, the nopad ids (above 1024) come from `SET`.
const UNSAFE_IDS: [u16; 19] = [
    1, 13, 28, 84, 87, 88, 95, 96, 248, 249, 250, 1025, 1037, 1052, 1108, 1111, 1112, 1119, 1120,
];

/// The class of collation `id` (a handshake's, or a number `SET` gave).
/// Ids this does not know as UTF-8 or ASCII count as single-byte: only
/// non-ASCII bytes outside quotes pin then.
pub fn of_collation(id: u16) -> Class {
    let utf8 = matches!(id, 11 | 65 | 33 | 83 | 192..=215 | 223 | 45 | 46 | 224..=247 | 255);
    if UNSAFE_IDS.contains(&id) {
        Class::UnsafeMultiByte
    } else if utf8 {
        Class::Utf8
    } else {
        Class::SingleByte
    }
}

/// The class of the character set called `name` (unquoted, any case).
fn of_charset(name: &str) -> Class {
    let is = |names: &[&str]| names.iter().any(|n| name.eq_ignore_ascii_case(n));
    if is(&UNSAFE_CHARSETS) {
        Class::UnsafeMultiByte
    } else if is(&["utf8", "utf8mb3", "utf8mb4", "ascii"]) {
        Class::Utf8
    } else {
        Class::SingleByte
    }
}

/// The class after a `SET` of `items` that ran on a session of class
/// `class`; `tracked` is the system-variables tracker's report (name,
/// value), the evaluated value where the statement had an expression. A
/// value this cannot read (`DEFAULT`, an expression) counts as unsafe.
pub fn after_set(class: Class, items: &[SetItem], tracked: &[(String, String)]) -> Class {
    let mut class = class;
    for item in items {
        class = match item {
            SetItem::Names { charset, .. } => charset.as_deref().map_or(UNREADABLE, of_charset),
            SetItem::CharacterSet(cs) => cs.as_deref().map_or(UNREADABLE, of_charset),
            SetItem::Variable {
                scope: Scope::Session,
                name,
                value,
            } if name == "character_set_client" => {
                match tracked.iter().find(|(n, _)| n == "character_set_client") {
                    Some((_, v)) => of_charset(v),
                    None => of_value(value),
                }
            }
            _ => class,
        };
    }
    class
}

/// What a value this cannot read counts as.
const UNREADABLE: Class = Class::UnsafeMultiByte;

/// A `character_set_client` value as written: a name, quoted or not, or a
/// collation id.
fn of_value(value: &str) -> Class {
    let v = value.trim();
    let unquoted = match v.as_bytes() {
        [q @ (b'\'' | b'"' | b'`'), .., last] if q == last => &v[1..v.len() - 1],
        _ => v,
    };
    if let Ok(id) = unquoted.parse::<u16>() {
        return of_collation(id);
    }
    let plain = !unquoted.is_empty()
        && unquoted
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !plain || unquoted.eq_ignore_ascii_case("default") {
        return UNREADABLE;
    }
    of_charset(unquoted)
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
        for id in [33, 45, 46, 224, 255, 11] {
            assert_eq!(of_collation(id), Class::Utf8, "{id}");
        }
        for id in [8, 47, 9, 63] {
            assert_eq!(of_collation(id), Class::SingleByte, "{id}");
        }
        for id in [1, 13, 28, 84, 87, 88, 95, 96, 248] {
            assert_eq!(of_collation(id), Class::UnsafeMultiByte, "{id}");
        }
    }

    #[test]
    fn set_statements_move_it() {
        let names = |cs: Option<&str>| SetItem::Names {
            charset: cs.map(str::to_owned),
            collation: None,
        };
        let utf8 = Class::Utf8;
        assert_eq!(
            after_set(utf8, &[names(Some("gbk"))], &[]),
            Class::UnsafeMultiByte
        );
        assert_eq!(
            after_set(Class::UnsafeMultiByte, &[names(Some("utf8mb4"))], &[]),
            utf8
        );
        assert_eq!(
            after_set(utf8, &[names(Some("latin1"))], &[]),
            Class::SingleByte
        );
        assert_eq!(after_set(utf8, &[names(None)], &[]), UNREADABLE);
        let sjis = SetItem::CharacterSet(Some("SJIS".into()));
        assert_eq!(after_set(utf8, &[sjis], &[]), Class::UnsafeMultiByte);
        assert_eq!(
            after_set(utf8, &[var("'big5'")], &[]),
            Class::UnsafeMultiByte
        );
        assert_eq!(after_set(utf8, &[var("28")], &[]), Class::UnsafeMultiByte);
        assert_eq!(
            after_set(utf8, &[var("@@character_set_server")], &[]),
            UNREADABLE
        );
        assert_eq!(after_set(Class::SingleByte, &[var("utf8mb4")], &[]), utf8);
        let tracked = [("character_set_client".to_owned(), "cp932".to_owned())];
        assert_eq!(
            after_set(utf8, &[var("@@character_set_server")], &tracked),
            Class::UnsafeMultiByte
        );
        // The global value leaves the session's.
        let global = SetItem::Variable {
            scope: Scope::Global,
            name: "character_set_client".into(),
            value: "gbk".into(),
        };
        assert_eq!(after_set(utf8, &[global], &[]), utf8);
    }
}

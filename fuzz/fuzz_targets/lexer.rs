//! Splits and classifies arbitrary COM_QUERY texts with `wire::lexer`: it
//! must never panic, and the split must round-trip (the statements' ranges
//! cover the text in order, one `;` byte between neighbours).
//!
//! Input format: byte 0 selects the options (bit 0 NO_BACKSLASH_ESCAPES,
//! bit 1 ANSI_QUOTES, bit 2 an ASCII-unsafe multi-byte charset, bits 3-4
//! the server: MariaDB 10.11, MySQL 8.0 or not known, bit 5 ANSI_QUOTES not
//! known, bit 6 a single-byte charset); the rest is the SQL text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::lexer::{classify, first_pin, tokenize, LexOptions, Server};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, sql)) = data.split_first() else {
        return;
    };
    let opts = LexOptions {
        no_backslash_escapes: flags & 1 != 0,
        ansi_quotes: flags & 2 != 0,
        ansi_quotes_known: flags & 32 == 0,
        ascii_safe_charset: flags & 4 == 0,
        high_bytes_in_words: flags & 64 == 0,
        server: match (flags >> 3) & 3 {
            0 => Server::MariaDb(101119),
            1 => Server::MySql(80036),
            _ => Server::Unknown,
        },
        read_only_functions: &[],
    };
    if let Ok(toks) = tokenize(sql, &opts) {
        let mut end = 0;
        for t in &toks {
            assert!(t.start >= end && t.start < t.end && t.end <= sql.len());
            end = t.end;
        }
    }
    let st = classify(sql, &opts);
    assert!(!st.is_empty());
    let mut pos = 0;
    for (k, s) in st.iter().enumerate() {
        assert_eq!(s.range.start, pos);
        assert!(s.range.start <= s.range.end && s.range.end <= sql.len());
        pos = s.range.end;
        if k + 1 < st.len() {
            assert_eq!(sql[pos], b';');
            pos += 1;
        }
    }
    assert_eq!(pos, sql.len());
    let _ = first_pin(&st);
    // Classifying one statement's text alone never panics either.
    for s in &st {
        let _ = classify(&sql[s.range.clone()], &opts);
    }
});

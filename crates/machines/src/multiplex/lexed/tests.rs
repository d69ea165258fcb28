//! The memo gives what a fresh lexing gives: same text and option, or a
//! lexing again.

use super::*;

fn opts(no_backslash_escapes: bool) -> LexOptions {
    LexOptions {
        no_backslash_escapes,
        ..LexOptions::default()
    }
}

fn fresh(sql: &[u8], no_backslash_escapes: bool) -> Vec<Statement> {
    lexer::classify(sql, &opts(no_backslash_escapes))
}

#[test]
fn the_memo_answers_as_a_fresh_lexing() {
    let mut lexed = Lexed::default();
    let texts: [&[u8]; 6] = [
        b"SELECT 1",
        b"select 1",
        b"SET @x = 1",
        b"SELECT 1",
        // With backslash escapes one unterminated string; without, a
        // string and a user-variable write.
        b"SELECT '\\'; SET @x = 1",
        b"SET sql_mode = 'NO_BACKSLASH_ESCAPES'; SELECT 2",
    ];
    for _ in 0..2 {
        for sql in texts {
            for nbe in [false, true, false] {
                assert_eq!(lexed.get(sql, &opts(nbe)), fresh(sql, nbe), "{sql:?} {nbe}");
            }
        }
    }
    let odd = b"SELECT '\\'; SET @x = 1";
    assert_eq!(lexed.get(odd, &opts(false)).len(), 1);
    assert_eq!(lexed.get(odd, &opts(true)).len(), 2);
}

#[test]
fn an_idle_session_keeps_no_long_text() {
    let mut lexed = Lexed::default();
    let long = format!("SELECT '{}'", "x".repeat(4000));
    lexed.get(long.as_bytes(), &opts(false));
    lexed.trim();
    assert_eq!(lexed.sql.capacity(), 0);
    assert!(!lexed.valid);
    lexed.get(b"SELECT 1", &opts(false));
    lexed.trim();
    assert!(lexed.valid);
    assert_eq!(
        lexed.get(b"SELECT 1", &opts(false)),
        fresh(b"SELECT 1", false)
    );
}

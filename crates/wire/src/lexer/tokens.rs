//! The tokenizer under [`classify`](super::classify): MySQL's quoting, comment and
//! executable-comment rules, which decide where a statement's code is. Kept apart from the
//! classifier because it is the part that must match the server byte for byte (the fuzz target
//! drives it directly), while the classifier only looks at the tokens.

use super::version_gate::{gate, skip_comment, Gate};
use super::{LexError, LexOptions};

/// Token kinds. Keywords, identifiers and numbers are all `Word`: the
/// classifier only compares words with keywords.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `[A-Za-z0-9_$]` and bytes ≥ 0x80.
    Word,
    /// `` `…` `` (or `"…"` under ANSI_QUOTES).
    QuotedIdent,
    /// `'…'` (or `"…"` without ANSI_QUOTES).
    String,
    /// `@name`, `@'name'`, `` @`name` ``, `@"name"`.
    UserVar,
    /// `@@name`, `@@session.name`, `@@global.name`, `@@local.name`.
    SysVar,
    /// Any other single byte, or `:=`.
    Punct,
    /// A top-level `;`.
    Semicolon,
}

/// One token: its kind and its bytes in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub start: usize,
    pub end: usize,
}

/// `[A-Za-z0-9_$]`, and bytes ≥ 0x80 where they are parts of words (else
/// such a byte ends the word and makes the text unsure where it starts the
/// next token).
fn is_word_byte(b: u8, high: bool) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || (b >= 0x80 && high)
}

/// Tokenizes `sql`, skipping whitespace and comments; the contents of the
/// executable comments the server runs (`opts.server`, see `version_gate`)
/// are tokens like any other code.
pub fn tokenize(sql: &[u8], opts: &LexOptions) -> Result<Vec<Token>, LexError> {
    let mut toks = Vec::new();
    tokenize_into(sql, opts, &mut toks)?;
    Ok(toks)
}

/// [`tokenize`] into `toks` (cleared first), so that a caller lexing every
/// statement reuses one allocation. On an error `toks` holds the tokens
/// before it.
pub fn tokenize_into(sql: &[u8], opts: &LexOptions, toks: &mut Vec<Token>) -> Result<(), LexError> {
    toks.clear();
    if !opts.ascii_safe_charset && sql.iter().any(|&b| b >= 0x80) {
        return Err(LexError::UnsafeMultibyte);
    }
    let mut i = 0;
    let mut in_exec_comment = false;
    let at = |j: usize| sql.get(j).copied();
    let high = opts.high_bytes_in_words;
    let word = |b: u8| is_word_byte(b, high);
    while let Some(b) = at(i) {
        let start = i;
        let kind = match b {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C => {
                i += 1;
                continue;
            }
            b'#' => {
                i = skip_line(sql, i);
                continue;
            }
            // `--` starts a comment before whitespace or a control byte;
            // whether 0x7F (and 0xA0, …) is one depends on the character
            // set (checked on MariaDB 10.11: a comment in utf8mb4 and
            // latin1, not in latin2 or cp1251).
            b'-' if at(i + 1) == Some(b'-') && at(i + 2) == Some(0x7F) => {
                return Err(LexError::UnsureByte)
            }
            b'-' if at(i + 1) == Some(b'-') && at(i + 2).is_none_or(|c| c <= b' ') => {
                i = skip_line(sql, i);
                continue;
            }
            c if c >= 0x80 && !opts.high_bytes_in_words => return Err(LexError::UnsureByte),
            b'*' if in_exec_comment && at(i + 1) == Some(b'/') => {
                in_exec_comment = false;
                i += 2;
                continue;
            }
            b'/' if at(i + 1) == Some(b'*') => {
                let marker = match (at(i + 2), at(i + 3)) {
                    (Some(b'!'), _) => Some((i + 3, false)),
                    (Some(b'M'), Some(b'!')) if opts.server.knows_m_marker() => Some((i + 4, true)),
                    _ => None,
                };
                i = match marker {
                    // The server would read a nested executable comment
                    // as the end of this one at its first `*/`.
                    Some(_) if in_exec_comment => return Err(LexError::OddExecutableComment),
                    Some((j, m)) => match gate(sql, j, m, opts.server) {
                        Gate::Code(k) => {
                            in_exec_comment = true;
                            k
                        }
                        Gate::Comment(k) => {
                            skip_comment(sql, k).ok_or(LexError::UnterminatedComment)?
                        }
                        Gate::Unsure => return Err(LexError::UnsureVersionComment),
                    },
                    None => find(sql, i + 2, b"*/").ok_or(LexError::UnterminatedComment)? + 2,
                };
                continue;
            }
            b'\'' => {
                i = skip_quoted(sql, i, b'\'', !opts.no_backslash_escapes)
                    .ok_or(LexError::UnterminatedString)?;
                TokenKind::String
            }
            b'"' => {
                let (end, kind) = double_quoted(sql, i, opts)?;
                i = end;
                kind
            }
            b'`' => {
                i = skip_quoted(sql, i, b'`', false).ok_or(LexError::UnterminatedIdentifier)?;
                TokenKind::QuotedIdent
            }
            b'@' if at(i + 1) == Some(b'@') => {
                i += 2;
                // scope.name, name, or a quoted name; each part a word or `…`.
                for part in 0..2 {
                    match at(i) {
                        Some(b'`') => {
                            i = skip_quoted(sql, i, b'`', false)
                                .ok_or(LexError::UnterminatedIdentifier)?;
                        }
                        _ => {
                            while at(i).is_some_and(word) {
                                i += 1;
                            }
                        }
                    }
                    if part == 0 && at(i) == Some(b'.') {
                        i += 1;
                    } else {
                        break;
                    }
                }
                TokenKind::SysVar
            }
            b'@' => {
                // `'user'@'host'` and `user@host`: an `@` glued to the end of
                // a name is the user/host separator, not a variable.
                let glued = toks.last().is_some_and(|t: &Token| {
                    t.end == i
                        && matches!(
                            t.kind,
                            TokenKind::Word | TokenKind::String | TokenKind::QuotedIdent
                        )
                });
                match at(i + 1) {
                    _ if glued => {
                        i += 1;
                        TokenKind::Punct
                    }
                    Some(b'"') => {
                        i = double_quoted(sql, i + 1, opts)?.0;
                        TokenKind::UserVar
                    }
                    Some(q @ (b'\'' | b'`')) => {
                        let esc = q == b'\'' && !opts.no_backslash_escapes;
                        i = skip_quoted(sql, i + 1, q, esc)
                            .ok_or(LexError::UnterminatedIdentifier)?;
                        TokenKind::UserVar
                    }
                    Some(c) if word(c) || c == b'.' => {
                        i += 1;
                        while at(i).is_some_and(|c| word(c) || c == b'.') {
                            i += 1;
                        }
                        TokenKind::UserVar
                    }
                    _ => {
                        i += 1;
                        TokenKind::Punct
                    }
                }
            }
            b':' if at(i + 1) == Some(b'=') => {
                i += 2;
                TokenKind::Punct
            }
            b';' => {
                if in_exec_comment {
                    return Err(LexError::OddExecutableComment);
                }
                i += 1;
                TokenKind::Semicolon
            }
            c if word(c) => {
                while at(i).is_some_and(word) {
                    i += 1;
                }
                TokenKind::Word
            }
            _ => {
                i += 1;
                TokenKind::Punct
            }
        };
        toks.push(Token {
            kind,
            start,
            end: i,
        });
    }
    if in_exec_comment {
        return Err(LexError::UnterminatedComment);
    }
    Ok(())
}

/// Just past the `"…"` that opens at `i`, and its kind: under ANSI_QUOTES
/// an identifier (no escapes), else a string. Where the mode is not known
/// (MySQL reports no ANSI_QUOTES flag) both readings must end at the same
/// byte, or the text is unsure; it is then taken as an identifier, so that
/// `USE "db"` counts as a USE.
fn double_quoted(sql: &[u8], i: usize, opts: &LexOptions) -> Result<(usize, TokenKind), LexError> {
    if opts.ansi_quotes {
        let end = skip_quoted(sql, i, b'"', false).ok_or(LexError::UnterminatedIdentifier)?;
        return Ok((end, TokenKind::QuotedIdent));
    }
    let as_string = skip_quoted(sql, i, b'"', !opts.no_backslash_escapes);
    if opts.ansi_quotes_known {
        let end = as_string.ok_or(LexError::UnterminatedString)?;
        return Ok((end, TokenKind::String));
    }
    match (skip_quoted(sql, i, b'"', false), as_string) {
        (Some(a), Some(b)) if a == b => Ok((a, TokenKind::QuotedIdent)),
        _ => Err(LexError::UnsureQuotes),
    }
}

/// The index just past the end of the line that starts at `i` (or the end).
fn skip_line(sql: &[u8], i: usize) -> usize {
    match sql
        .get(i..)
        .and_then(|r| r.iter().position(|&c| c == b'\n'))
    {
        Some(p) => i + p + 1,
        None => sql.len(),
    }
}

fn find(sql: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    sql.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

/// The index just past the closing quote of the quoted text opening at `i`
/// (a doubled quote is part of the text; with `backslash`, `\` escapes the
/// next byte). None when unterminated.
fn skip_quoted(sql: &[u8], i: usize, q: u8, backslash: bool) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let c = *sql.get(j)?;
        if backslash && c == b'\\' {
            j += 2;
        } else if c == q {
            if sql.get(j + 1) == Some(&q) {
                j += 2;
            } else {
                return Some(j + 1);
            }
        } else {
            j += 1;
        }
    }
}

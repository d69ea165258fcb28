//! Transaction pooling: what a COM_QUERY text does to the session, read
//! from the statement lexer (`wire::lexer`) plus the proxy's own rules
//! ([`classify_query`] → [`Effect`]), and the text tests the session state
//! (`multiplex.rs`) asks of a command: does it end table locks, read the
//! previous statement's counts, set constants, insert, mention
//! LAST_INSERT_ID.

use super::*;

/// What one COM_QUERY leaves on its connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing that outlives the statement (or its transaction, which the
    /// status flags show).
    Plain,
    /// Session state that cannot move between connections.
    Pin(PinReason),
    /// Session system variables (`SET x = ...`, `SET NAMES ...`): replayed.
    SetVariables,
    /// `USE db`: the session's schema.
    Use(String),
    /// SHOW WARNINGS / SHOW ERRORS / SHOW COUNT(*) WARNINGS|ERRORS: reads
    /// the diagnostics area of the statement before, without clearing it.
    Diagnostics,
}

/// The offsets of `sql`'s code bytes: those outside string literals and
/// quoted identifiers (`'…'`, `"…"`, `` `…` ``; a backslash escapes in the
/// first two, a doubled quote in all three). Comments count as code: the
/// text tests below may over-match in them, never under-match. The tests
/// compare case-insensitively on the original bytes, with no upper-cased
/// copy (they run on every statement of transaction pooling).
struct CodeOffsets<'a> {
    sql: &'a [u8],
    i: usize,
}

fn code_offsets(sql: &[u8]) -> CodeOffsets<'_> {
    CodeOffsets { sql, i: 0 }
}

impl Iterator for CodeOffsets<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while let Some(&c) = self.sql.get(self.i) {
            if is_quote(c) {
                self.i = skip_literal(self.sql, self.i);
            } else {
                self.i += 1;
                return Some(self.i - 1);
            }
        }
        None
    }
}

fn is_quote(c: u8) -> bool {
    matches!(c, b'\'' | b'"' | b'`')
}

/// Just past the literal that opens at `i` (past the end of `sql` when it
/// is unterminated: it runs to the end).
fn skip_literal(sql: &[u8], i: usize) -> usize {
    let q = sql[i];
    let mut i = i + 1;
    while i < sql.len() {
        if sql[i] == b'\\' && q != b'`' {
            i += 2;
            continue;
        }
        if sql[i] == q {
            if sql.get(i + 1) == Some(&q) {
                i += 2;
                continue;
            }
            break;
        }
        i += 1;
    }
    i + 1
}

/// `needle` (upper case, no quote bytes) at offset `i` of `sql`, in any case.
fn at(sql: &[u8], i: usize, needle: &[u8]) -> bool {
    sql.get(i..i + needle.len())
        .is_some_and(|w| w.eq_ignore_ascii_case(needle))
}

/// `needle` (upper case, no quote bytes) in the code of `sql`. A match
/// that starts on a code byte lies wholly in code: a quote ends it.
fn code_contains(sql: &[u8], needle: &[u8]) -> bool {
    code_offsets(sql).any(|i| at(sql, i, needle))
}

fn ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
}

/// One of `needles` (upper case letters and `_`) as a whole word in the
/// code of `sql` (not part of a longer identifier; a quote next to it is no
/// part of one). One pass for all the needles, comparing only at the start
/// of each word: this runs on every statement of transaction pooling.
fn code_contains_word(sql: &[u8], needles: &[&[u8]]) -> bool {
    let mut i = 0;
    while let Some(&c) = sql.get(i) {
        if is_quote(c) {
            i = skip_literal(sql, i);
        } else if ident(c) {
            // A word starts here: the byte before is no identifier byte (a
            // word is taken whole) or a closing quote. It holds no quote:
            // all of it is code.
            let end = sql[i..]
                .iter()
                .position(|&c| !ident(c))
                .map_or(sql.len(), |n| i + n);
            let word = &sql[i..end];
            if needles.iter().any(|n| word.eq_ignore_ascii_case(n)) {
                return true;
            }
            i = end;
        } else {
            i += 1;
        }
    }
    false
}

/// Classify one COM_QUERY text with the statement lexer (`wire::lexer`),
/// plus the proxy's own rule for CALL (a procedure can set user variables,
/// create temporary tables or take locks inside, where the lexer does not
/// look). `opts`: how the server reads the text (sql_mode's quoting, the
/// client character set, the server's version). It never pins on reads of
/// `@@var` or `@x`.
pub fn classify_query(sql: &[u8], opts: &LexOptions) -> Effect {
    effect_of(&lexer::classify(sql, opts))
}

/// [`classify_query`] of `sql` already lexed into `statements` (a caller
/// that needs the statements for other tests too lexes once: the lexer is
/// most of transaction pooling's user time per query).
pub(super) fn effect_of(statements: &[lexer::Statement]) -> Effect {
    let mut effects = statements
        .iter()
        .filter(|st| st.class != Class::Empty)
        .map(statement_effect);
    let Some(first) = effects.next() else {
        return Effect::Plain;
    };
    let mut rest: Vec<Effect> = effects.collect();
    if rest.is_empty() {
        return first;
    }
    rest.insert(0, first);
    // The first pin that lasts (LOCK TABLES ends with UNLOCK TABLES, so a
    // session pin beside it must win).
    let pins = || {
        rest.iter().filter_map(|e| match e {
            Effect::Pin(r) => Some(*r),
            _ => None,
        })
    };
    if let Some(pin) = pins()
        .find(|r| *r != PinReason::LockTables)
        .or_else(|| pins().next())
    {
        return Effect::Pin(pin);
    }
    // Several statements: fine while none of them changes what the
    // session carries (a SET or USE among them would have to be replayed
    // on its own).
    if rest
        .iter()
        .all(|e| matches!(e, Effect::Plain | Effect::Diagnostics))
    {
        Effect::Plain
    } else {
        Effect::Pin(PinReason::MultiStatement)
    }
}

fn statement_effect(st: &lexer::Statement) -> Effect {
    match &st.class {
        // LAST_INSERT_ID() read in an expression: the connection got the
        // session's value before the command (`lease_setup`), so it needs
        // no pin, unlike the other reads of the previous statement.
        Class::Pin(Pin::PreviousStatementState) if st.only_last_insert_id_reads => Effect::Plain,
        Class::Pin(pin) => Effect::Pin(pin_reason(*pin)),
        Class::Set(items) => {
            let global = |i: &SetItem| {
                matches!(
                    i,
                    SetItem::Variable {
                        scope: Scope::Global,
                        ..
                    }
                )
            };
            if items.iter().all(global) {
                Effect::Plain
            } else if items.iter().any(global) {
                // Replaying it would set the global value on every lease.
                Effect::Pin(PinReason::SessionCommand)
            } else {
                Effect::SetVariables
            }
        }
        // The next transaction only, wherever it runs.
        Class::SetTransaction { scope: None, .. } => Effect::Pin(PinReason::SessionCommand),
        Class::SetTransaction {
            scope: Some(Scope::Session),
            ..
        } => Effect::SetVariables,
        Class::Use(schema) => Effect::Use(schema.clone()),
        Class::ShowWarnings
        | Class::ShowErrors
        | Class::ShowCountWarnings
        | Class::ShowCountErrors => Effect::Diagnostics,
        // A procedure can set user variables, create temporary tables or
        // take locks inside, where the lexer does not look.
        _ if st.call => Effect::Pin(PinReason::SessionCommand),
        _ => Effect::Plain,
    }
}

/// The lexer's reason as the metric's.
fn pin_reason(pin: Pin) -> PinReason {
    match pin {
        Pin::UserVariableWrite => PinReason::UserVariable,
        Pin::TemporaryTable => PinReason::TemporaryTable,
        Pin::LockFunction => PinReason::LockFunction,
        Pin::LockTables => PinReason::LockTables,
        Pin::FlushTablesWithReadLock | Pin::BackupLock => PinReason::FlushReadLock,
        Pin::SqlCalcFoundRows => PinReason::FoundRows,
        Pin::TextPrepare => PinReason::TextPrepare,
        Pin::Handler | Pin::Xa | Pin::SetRole => PinReason::SessionCommand,
        Pin::PreviousStatementState => PinReason::PreviousStatement,
        Pin::UnrecognizedSet => PinReason::Unclassified,
        Pin::Unsplittable => PinReason::MultiStatement,
        Pin::StoredFunction => PinReason::StoredFunction,
    }
}

/// UNLOCK TABLES, or a statement that begins a transaction (which releases
/// the table locks as well). `statements`: the text lexed with the default
/// options.
pub(super) fn ends_table_locks(statements: &[lexer::Statement]) -> bool {
    statements
        .iter()
        .any(|st| matches!(st.class, Class::UnlockTables | Class::Begin))
}

/// A `SET` whose values are constants (no `@@` reads, no function calls):
/// running it twice leaves what running it once does. `statements`: `sql`
/// lexed with the default options.
pub(super) fn constant_set(sql: &[u8], statements: &[lexer::Statement]) -> bool {
    if effect_of(statements) != Effect::SetVariables {
        return false;
    }
    !code_contains(sql, b"@@") && !code_contains(sql, b"(")
}

/// A statement that reads a count the previous statement left on its
/// connection: ROW_COUNT() or FOUND_ROWS() (SQL_CALC_FOUND_ROWS itself
/// pins, so a FOUND_ROWS() after it runs on the same connection).
pub fn reads_previous_statement(sql: &[u8]) -> bool {
    code_contains_word(sql, &[b"ROW_COUNT", b"FOUND_ROWS"])
}

/// The client bytes start a COM_QUERY that may be an INSERT, REPLACE or
/// LOAD DATA (the words appear near its start; a false match only costs a
/// `DO LAST_INSERT_ID(n)`).
pub(super) fn may_insert(bytes: &[u8]) -> bool {
    let Some(text) = bytes.get(4..).and_then(|p| p.strip_prefix(&[COM_QUERY])) else {
        return false;
    };
    let text = &text[..text.len().min(512)];
    code_contains_word(text, &[b"INSERT", b"REPLACE", b"LOAD"])
}

/// The client bytes (one or more packets, possibly cut) mention
/// LAST_INSERT_ID in a COM_QUERY, case-insensitively.
pub(super) fn mentions_last_insert_id(bytes: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"LAST_INSERT_ID";
    bytes
        .windows(NEEDLE.len())
        .any(|w| w.eq_ignore_ascii_case(NEEDLE))
}

#[cfg(test)]
mod tests;

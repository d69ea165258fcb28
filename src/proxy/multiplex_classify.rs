//! Transaction pooling: what a COM_QUERY text does to the session, read
//! from the statement lexer (`mysql::lexer`) plus the proxy's own rules
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

/// What the scanner found outside string literals and quoted identifiers.
#[derive(Default)]
struct Scan {
    /// Upper-cased text with literals and quoted identifiers blanked.
    code: Vec<u8>,
}

fn scan(sql: &[u8]) -> Scan {
    let mut s = Scan {
        code: Vec::with_capacity(sql.len()),
    };
    let mut i = 0;
    while i < sql.len() {
        let c = sql[i];
        match c {
            b'\'' | b'"' | b'`' => {
                // Blank the literal; a backslash escapes in '' and "".
                s.code.push(b' ');
                i += 1;
                while i < sql.len() {
                    if sql[i] == b'\\' && c != b'`' {
                        i += 2;
                        continue;
                    }
                    if sql[i] == c {
                        if sql.get(i + 1) == Some(&c) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            _ => {
                s.code.push(c.to_ascii_uppercase());
                i += 1;
            }
        }
    }
    s
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// `needle` as a whole word (not part of a longer identifier).
fn contains_word(hay: &[u8], needle: &[u8]) -> bool {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
    hay.windows(needle.len()).enumerate().any(|(i, w)| {
        w == needle
            && (i == 0 || !ident(hay[i - 1]))
            && hay.get(i + needle.len()).is_none_or(|&c| !ident(c))
    })
}

/// The first word (upper-cased) and the rest after it.
fn first_word(code: &[u8]) -> (&[u8], &[u8]) {
    let start = code
        .iter()
        .position(|c| !c.is_ascii_whitespace() && *c != b'(')
        .unwrap_or(code.len());
    let end = code[start..]
        .iter()
        .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
        .map_or(code.len(), |n| start + n);
    (&code[start..end], &code[end..])
}

/// Classify one COM_QUERY text with the statement lexer (`mysql::lexer`),
/// plus the proxy's own rule for CALL (a procedure can set user variables,
/// create temporary tables or take locks inside, where the lexer does not
/// look). `no_backslash_escapes`: the session's sql_mode has it (the status
/// flags say so). It never pins on reads of `@@var` or `@x`.
pub fn classify_query(sql: &[u8], no_backslash_escapes: bool) -> Effect {
    let opts = LexOptions {
        no_backslash_escapes,
        ..LexOptions::default()
    };
    effect_of(sql, &lexer::classify(sql, &opts))
}

/// [`classify_query`] of `sql` already lexed into `statements` (a caller
/// that needs the statements for other tests too lexes once: the lexer is
/// most of transaction pooling's user time per query).
pub(super) fn effect_of(sql: &[u8], statements: &[lexer::Statement]) -> Effect {
    let mut effects = statements
        .iter()
        .filter(|st| st.class != Class::Empty)
        .map(|st| statement_effect(&sql[st.range.clone()], &st.class));
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

fn statement_effect(text: &[u8], class: &Class) -> Effect {
    match class {
        // LAST_INSERT_ID() read in an expression: the connection got the
        // session's value before the command (`lease_setup`), so it needs
        // no pin, unlike the other reads of the previous statement.
        Class::Pin(Pin::PreviousStatementState) if only_last_insert_id_reads(text) => Effect::Plain,
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
        _ if first_word(&scan(text).code).0 == b"CALL" => Effect::Pin(PinReason::SessionCommand),
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
    }
}

/// UNLOCK TABLES, or a statement that begins a transaction (which releases
/// the table locks as well).
pub(super) fn ends_table_locks(sql: &[u8]) -> bool {
    lexer::classify(sql, &LexOptions::default())
        .iter()
        .any(|st| matches!(st.class, Class::UnlockTables | Class::Begin))
}

/// The statement's previous-statement reads are all `LAST_INSERT_ID()`
/// without an argument (with one it sets the value, which a SELECT's
/// result does not report).
fn only_last_insert_id_reads(text: &[u8]) -> bool {
    let code = scan(text).code;
    for other in [
        &b"ROW_COUNT"[..],
        b"FOUND_ROWS",
        b"@@",
        b"DIAGNOSTICS",
        b"LASTVAL",
        b"PREVIOUS",
    ] {
        if contains(&code, other) {
            return false;
        }
    }
    const F: &[u8] = b"LAST_INSERT_ID";
    let mut found = false;
    for (i, w) in code.windows(F.len()).enumerate() {
        if w != F {
            continue;
        }
        let rest: Vec<u8> = code[i + F.len()..]
            .iter()
            .copied()
            .filter(|c| !c.is_ascii_whitespace())
            .take(2)
            .collect();
        if rest != b"()" {
            return false;
        }
        found = true;
    }
    found
}

/// A `SET` whose values are constants (no `@@` reads, no function calls):
/// running it twice leaves what running it once does. `statements`: `sql`
/// lexed with the default options.
pub(super) fn constant_set(sql: &[u8], statements: &[lexer::Statement]) -> bool {
    if effect_of(sql, statements) != Effect::SetVariables {
        return false;
    }
    let code = scan(sql).code;
    !contains(&code, b"@@") && !code.contains(&b'(')
}

/// A statement that reads a count the previous statement left on its
/// connection: ROW_COUNT() or FOUND_ROWS() (SQL_CALC_FOUND_ROWS itself
/// pins, so a FOUND_ROWS() after it runs on the same connection).
pub fn reads_previous_statement(sql: &[u8]) -> bool {
    let s = scan(sql);
    contains_word(&s.code, b"ROW_COUNT") || contains_word(&s.code, b"FOUND_ROWS")
}

/// The client bytes start a COM_QUERY that may be an INSERT, REPLACE or
/// LOAD DATA (the words appear near its start; a false match only costs a
/// `DO LAST_INSERT_ID(n)`).
pub(super) fn may_insert(bytes: &[u8]) -> bool {
    let Some(text) = bytes.get(4..).and_then(|p| p.strip_prefix(&[COM_QUERY])) else {
        return false;
    };
    let code = scan(&text[..text.len().min(512)]).code;
    contains_word(&code, b"INSERT")
        || contains_word(&code, b"REPLACE")
        || contains_word(&code, b"LOAD")
}

/// The client bytes (one or more packets, possibly cut) mention
/// LAST_INSERT_ID in a COM_QUERY, case-insensitively.
pub(super) fn mentions_last_insert_id(bytes: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"LAST_INSERT_ID";
    bytes
        .windows(NEEDLE.len())
        .any(|w| w.eq_ignore_ascii_case(NEEDLE))
}

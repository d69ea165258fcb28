//! The read/write split (`--read-write-split`): may a parked session's
//! COM_QUERY run on a replica? Only a statement shown safe may; anything
//! in doubt goes to the writer. The rules (docs/operations.md, "Read/write
//! split", lists the same):
//!
//! - the text is one statement (a trailing `;` and comments aside);
//! - the lexer classes it as plain: nothing that pins the session (user
//!   variable writes, named locks, LAST_INSERT_ID() and the other reads of
//!   the previous statement, calls of stored functions not declared with
//!   `--read-only-functions`, …), no `SET`, `USE` or transaction control;
//! - it is a `SELECT` (or `(SELECT …)`, `WITH … SELECT`, or `EXPLAIN` /
//!   `DESCRIBE` of one), with no locking clause (`FOR UPDATE`, `FOR
//!   SHARE`, `LOCK IN SHARE MODE`), no `INTO` (OUTFILE, DUMPFILE, a
//!   variable), no `:=`, no reference to a user variable `@x`, no
//!   `NEXT VALUE FOR` / `PREVIOUS VALUE FOR`, and no call of a function
//!   whose answer depends on the connection or the server it runs on, or
//!   that changes something ([`WRITER_FUNCTIONS`]);
//! - `START TRANSACTION READ ONLY` (without `READ WRITE`) takes the whole
//!   transaction to one replica.
//!
//! A hint comment forces either way: `ringgate:writer` anywhere in the
//! statement's comments sends it to the writer; `ringgate:replica` sends
//! a plain statement (one the lexer finds no session state in) to a
//! replica whatever its functions and clauses. The caller adds what the
//! text cannot say: the session holds no connection and autocommit is on.

use std::cell::RefCell;

use wire::lexer::{self, Class, LexOptions, Statement, Token, TokenKind};

/// Where a parked session's command may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The writer: every statement not shown safe.
    Writer,
    /// One safe read: any replica within its lag bound (the writer when
    /// none qualifies); the connection goes back right after it.
    Read,
    /// `START TRANSACTION READ ONLY`: the transaction's statements all run
    /// on the replica its first lease got.
    ReadOnlyTransaction,
}

impl Route {
    /// The lease may use a replica.
    pub fn is_read(self) -> bool {
        self != Route::Writer
    }
}

/// Functions that keep a `SELECT` on the writer: they take or read named
/// locks, read what an earlier statement of the connection left, use or
/// move a sequence, wait, or answer for the server or connection they run
/// on (a replica's CONNECTION_ID() names a thread of the replica, which a
/// later KILL would look for on the writer; BINLOG_GTID_POS reads that
/// server's binlog; LOAD_FILE its files).
pub const WRITER_FUNCTIONS: [&str; 21] = [
    "BENCHMARK",
    "BINLOG_GTID_POS",
    "CONNECTION_ID",
    "FOUND_ROWS",
    "GET_LOCK",
    "IS_FREE_LOCK",
    "IS_USED_LOCK",
    "LASTVAL",
    "LAST_INSERT_ID",
    "LOAD_FILE",
    "MASTER_GTID_WAIT",
    "MASTER_POS_WAIT",
    "NEXTVAL",
    "RELEASE_ALL_LOCKS",
    "RELEASE_LOCK",
    "ROW_COUNT",
    "SETVAL",
    "SLEEP",
    "SOURCE_POS_WAIT",
    "WAIT_FOR_EXECUTED_GTID_SET",
    "WAIT_UNTIL_SQL_THREAD_AFTER_GTIDS",
];

/// The hint comments.
const HINT_WRITER: &[u8] = b"ringgate:writer";
const HINT_REPLICA: &[u8] = b"ringgate:replica";

thread_local! {
    /// Tokens of the statement being routed: one scratch vector per worker.
    static TOKENS: RefCell<Vec<Token>> = const { RefCell::new(Vec::new()) };
}

/// The route of the COM_QUERY text `sql`, lexed into `statements` with
/// `opts` (the rules in the module docs; the session's state is the
/// caller's to check).
pub fn route_of(sql: &[u8], statements: &[Statement], opts: &LexOptions) -> Route {
    let mut code = statements.iter().filter(|st| st.class != Class::Empty);
    let (Some(st), None) = (code.next(), code.next()) else {
        return Route::Writer;
    };
    let Some(text) = sql.get(st.range.clone()) else {
        return Route::Writer;
    };
    TOKENS.with_borrow_mut(|toks| {
        if lexer::tokenize_into(text, opts, toks).is_err() {
            return Route::Writer;
        }
        let route = match hint(text, toks) {
            Some(Hint::Writer) => Route::Writer,
            Some(Hint::Replica) if st.class == Class::Plain => Route::Read,
            _ => route_by_rules(&st.class, &Words { text, toks }),
        };
        if toks.capacity() > 4096 {
            *toks = Vec::new();
        }
        route
    })
}

/// A hint comment's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hint {
    Writer,
    Replica,
}

/// The hint in the comments of `text`: the bytes between its tokens are
/// whitespace and comments (the tokenizer skips nothing else), so a hint
/// is looked for only there and never in a string. Writer wins over
/// replica.
fn hint(text: &[u8], toks: &[Token]) -> Option<Hint> {
    let mut found = None;
    let mut from = 0;
    let gaps = toks
        .iter()
        .map(|t| (t.start, t.end))
        .chain(std::iter::once((text.len(), text.len())));
    for (start, end) in gaps {
        let gap = text.get(from..start).unwrap_or_default();
        if contains(gap, HINT_WRITER) {
            return Some(Hint::Writer);
        }
        if contains(gap, HINT_REPLICA) {
            found = Some(Hint::Replica);
        }
        from = end;
    }
    found
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// One statement's tokens, read as words.
struct Words<'a> {
    text: &'a [u8],
    toks: &'a [Token],
}

impl Words<'_> {
    fn kind(&self, i: usize) -> Option<TokenKind> {
        self.toks.get(i).map(|t| t.kind)
    }

    fn bytes(&self, i: usize) -> &[u8] {
        self.toks
            .get(i)
            .and_then(|t| self.text.get(t.start..t.end))
            .unwrap_or_default()
    }

    fn kw(&self, i: usize, kw: &str) -> bool {
        self.kind(i) == Some(TokenKind::Word) && self.bytes(i).eq_ignore_ascii_case(kw.as_bytes())
    }

    fn kw_any(&self, i: usize, kws: &[&str]) -> bool {
        kws.iter().any(|k| self.kw(i, k))
    }

    fn punct(&self, i: usize, p: &[u8]) -> bool {
        self.kind(i) == Some(TokenKind::Punct) && self.bytes(i) == p
    }
}

fn route_by_rules(class: &Class, w: &Words<'_>) -> Route {
    match class {
        Class::Begin if read_only_transaction(w) => Route::ReadOnlyTransaction,
        Class::Plain if safe_read(w) => Route::Read,
        _ => Route::Writer,
    }
}

/// `START TRANSACTION` with `READ ONLY` among its characteristics and no
/// `READ WRITE` (BEGIN has none: MariaDB takes no characteristics there).
fn read_only_transaction(w: &Words<'_>) -> bool {
    if !(w.kw(0, "START") && w.kw(1, "TRANSACTION")) {
        return false;
    }
    let after_read = |kw: &str| (2..w.toks.len()).any(|i| w.kw(i, "READ") && w.kw(i + 1, kw));
    after_read("ONLY") && !after_read("WRITE")
}

/// A `SELECT` with nothing in it that must run on the writer.
fn safe_read(w: &Words<'_>) -> bool {
    let mut f = 0;
    while w.punct(f, b"(") {
        f += 1;
    }
    if w.kw_any(f, &["EXPLAIN", "DESCRIBE", "DESC"]) {
        // Only EXPLAIN of a SELECT: `DESCRIBE t` and EXPLAIN of a write
        // go to the writer.
        f += 1;
        while w.kw_any(f, &["EXTENDED", "PARTITIONS"]) {
            f += 1;
        }
        if w.kw(f, "FORMAT") && w.punct(f + 1, b"=") {
            f += 3;
        }
    }
    let select = w.kw(f, "SELECT");
    let with = w.kw(f, "WITH");
    if !select && !with {
        return false;
    }
    (f..w.toks.len()).all(|i| token_is_safe(w, i, with))
}

/// Token `i` of a `SELECT` keeps it a safe read. `with`: the statement
/// begins with WITH (whose body MariaDB could one day let be a write).
fn token_is_safe(w: &Words<'_>, i: usize, with: bool) -> bool {
    match w.kind(i) {
        Some(TokenKind::UserVar) => false,
        Some(TokenKind::Punct) => !w.punct(i, b":="),
        Some(TokenKind::Word) => {
            let locking = (w.kw(i, "FOR") && w.kw_any(i + 1, &["UPDATE", "SHARE"]))
                || (w.kw(i, "LOCK") && w.kw(i + 1, "IN"));
            let sequence = w.kw_any(i, &["NEXT", "PREVIOUS"]) && w.kw(i + 1, "VALUE");
            let write = with && w.kw_any(i, &["INSERT", "UPDATE", "DELETE", "REPLACE"]);
            let writer_call = w.punct(i + 1, b"(") && w.kw_any(i, &WRITER_FUNCTIONS);
            !(locking || sequence || write || writer_call || w.kw(i, "INTO"))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests;

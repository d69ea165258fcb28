//! The classifier: splits a token stream on top-level `;` (refusing texts it cannot delimit,
//! such as compound statements) and puts each statement in a [`Class`], with the pin rules the
//! parent module's docs tabulate. It works on tokens only; quoting and comments are the
//! tokenizer's job.

use std::ops::Range;

use super::stored_calls::{is_native, names_a_list_owner};
use super::tokens::{tokenize_into, Token, TokenKind};
use super::{Class, LexOptions, Pin, Scope, SetItem, Statement};

/// Splits and classifies a COM_QUERY text (see the module docs).
pub fn classify(sql: &[u8], opts: &LexOptions) -> Vec<Statement> {
    let mut out = Vec::new();
    classify_into(sql, opts, &mut Vec::new(), &mut out);
    out
}

/// [`classify`] into `out` (cleared first), with `toks` as the tokenizer's
/// scratch space: a caller that lexes every statement (transaction pooling
/// does, per query) keeps both and allocates nothing for a statement whose
/// class carries no text (a `SELECT`, an `INSERT`, `BEGIN`, ...).
pub fn classify_into(
    sql: &[u8],
    opts: &LexOptions,
    toks: &mut Vec<Token>,
    out: &mut Vec<Statement>,
) {
    out.clear();
    if tokenize_into(sql, opts, toks).is_err() {
        out.push(Statement {
            range: 0..sql.len(),
            class: Class::Pin(Pin::Unsplittable),
            reads_last_insert_id: false,
            only_last_insert_id_reads: false,
            call: false,
        });
        return;
    }
    let toks: &[Token] = toks;
    let semicolon = |t: &Token| t.kind == TokenKind::Semicolon;
    // Statements: the token runs between top-level semicolons, and their
    // byte ranges, taken one at a time (no list of them is built).
    let mut start_byte = 0;
    let mut start_tok = 0;
    loop {
        let end_tok = toks[start_tok..]
            .iter()
            .position(semicolon)
            .map(|p| start_tok + p);
        let (range, ts, rest): (Range<usize>, &[Token], &[Token]) = match end_tok {
            Some(e) => (
                start_byte..toks[e].start,
                &toks[start_tok..e],
                &toks[e + 1..],
            ),
            None => (start_byte..sql.len(), &toks[start_tok..], &[]),
        };
        let c = Cx {
            sql,
            toks: ts,
            declared: opts.read_only_functions,
        };
        let rest_has_code = rest.iter().any(|t| !semicolon(t));
        // This statement and the ones after it (a trailing empty one is
        // harmless to the searches below).
        let parts = || std::iter::once(ts).chain(rest.split(semicolon));
        match compound_kind(&c) {
            Compound::None => {
                let class = c.classify();
                let only_last_insert_id_reads = class == Class::Pin(Pin::PreviousStatementState)
                    && c.only_last_insert_id_reads();
                out.push(Statement {
                    range,
                    class,
                    reads_last_insert_id: c.reads_last_insert_id(),
                    only_last_insert_id_reads,
                    call: c.is_call(),
                })
            }
            // A single statement: the server reads all of it as one.
            Compound::Routine if !rest_has_code => out.push(Statement {
                range,
                class: Class::Plain,
                reads_last_insert_id: false,
                only_last_insert_id_reads: false,
                call: false,
            }),
            Compound::Routine => {
                // A routine body with `;` inside: the server's parser knows
                // where it ends, this lexer does not. Accept it when the text
                // ends with the body's END, and pin on anything inside that
                // would pin if it ran (conservative, since it does not run).
                let last = parts().rev().find(|t| !t.is_empty());
                let ends_with_end = last.is_some_and(|t| {
                    let c = Cx {
                        sql,
                        toks: t,
                        declared: opts.read_only_functions,
                    };
                    let n = t.len();
                    c.kw(n - 1, "END") || (n >= 2 && c.kw(n - 2, "END"))
                });
                let pin = parts().find_map(|t| {
                    let c = Cx {
                        sql,
                        toks: t,
                        declared: opts.read_only_functions,
                    };
                    c.classify().pin()
                });
                let class = match (ends_with_end, pin) {
                    (false, _) => Class::Pin(Pin::Unsplittable),
                    (true, Some(p)) => Class::Pin(p),
                    (true, None) => Class::Plain,
                };
                let reads_last_insert_id = parts().any(|t| {
                    Cx {
                        sql,
                        toks: t,
                        declared: opts.read_only_functions,
                    }
                    .reads_last_insert_id()
                });
                out.push(Statement {
                    range: range.start..sql.len(),
                    class,
                    reads_last_insert_id,
                    only_last_insert_id_reads: false,
                    call: false,
                });
                return;
            }
            Compound::Anonymous => {
                out.push(Statement {
                    range: range.start..sql.len(),
                    class: Class::Pin(Pin::Unsplittable),
                    reads_last_insert_id: false,
                    only_last_insert_id_reads: false,
                    call: false,
                });
                return;
            }
        }
        match end_tok {
            Some(e) => {
                start_byte = toks[e].end;
                start_tok = e + 1;
            }
            None => return,
        }
    }
}

enum Compound {
    None,
    /// CREATE … PROCEDURE / FUNCTION / TRIGGER / EVENT / PACKAGE, ALTER EVENT.
    Routine,
    /// A compound statement run directly: BEGIN NOT ATOMIC, IF, loops, …
    Anonymous,
}

fn compound_kind(c: &Cx<'_>) -> Compound {
    if c.toks.is_empty() {
        return Compound::None;
    }
    if c.kw(0, "BEGIN") && c.kw(1, "NOT") {
        return Compound::Anonymous;
    }
    for k in ["IF", "WHILE", "LOOP", "REPEAT", "CASE", "FOR", "DECLARE"] {
        if c.kw(0, k) {
            return Compound::Anonymous;
        }
    }
    if c.kind(0) == Some(TokenKind::Word) && c.punct(1, b':') {
        return Compound::Anonymous;
    }
    // ALTER EVENT … DO <body> carries a body like CREATE EVENT.
    if c.kw(0, "ALTER") && (1..c.toks.len().min(8)).any(|i| c.kw(i, "EVENT")) {
        return Compound::Routine;
    }
    if c.kw(0, "CREATE") {
        for i in 1..c.toks.len().min(16) {
            // DEFINER = CURRENT_USER() is the only parenthesis before the
            // object kind; any other means a column list or parameters.
            if c.punct(i, b'(') && !c.kw(i.wrapping_sub(1), "CURRENT_USER") {
                break;
            }
            for stop in [
                "TABLE",
                "VIEW",
                "INDEX",
                "DATABASE",
                "SCHEMA",
                "USER",
                "ROLE",
                "SEQUENCE",
                "SERVER",
                "TABLESPACE",
            ] {
                if c.kw(i, stop) {
                    return Compound::None;
                }
            }
            for k in ["PROCEDURE", "FUNCTION", "TRIGGER", "EVENT", "PACKAGE"] {
                if c.kw(i, k) {
                    return Compound::Routine;
                }
            }
        }
    }
    Compound::None
}

/// The tokens of one statement, with the text they index.
struct Cx<'a> {
    sql: &'a [u8],
    toks: &'a [Token],
    /// `LexOptions::read_only_functions`.
    declared: &'a [Box<str>],
}

impl<'a> Cx<'a> {
    fn kind(&self, i: usize) -> Option<TokenKind> {
        self.toks.get(i).map(|t| t.kind)
    }

    fn bytes(&self, i: usize) -> &'a [u8] {
        match self.toks.get(i) {
            Some(t) => self.sql.get(t.start..t.end).unwrap_or_default(),
            None => &[],
        }
    }

    /// Token `i` is the (unquoted) keyword `kw`, in any case.
    fn kw(&self, i: usize, kw: &str) -> bool {
        self.kind(i) == Some(TokenKind::Word) && self.bytes(i).eq_ignore_ascii_case(kw.as_bytes())
    }

    fn kw_any(&self, i: usize, kws: &[&str]) -> bool {
        kws.iter().any(|k| self.kw(i, k))
    }

    fn punct(&self, i: usize, p: u8) -> bool {
        self.kind(i) == Some(TokenKind::Punct) && self.bytes(i) == [p]
    }

    fn assign_op(&self, i: usize) -> bool {
        self.kind(i) == Some(TokenKind::Punct) && matches!(self.bytes(i), b"=" | b":=")
    }

    /// Source text from token `a` through token `b` (inclusive), as UTF-8.
    fn text(&self, a: usize, b: usize) -> Option<String> {
        let (s, e) = (self.toks.get(a)?.start, self.toks.get(b)?.end);
        let t = std::str::from_utf8(self.sql.get(s..e)?).ok()?;
        Some(t.to_owned())
    }

    /// A name: a word, a `…` identifier or a string, unquoted, lower-cased.
    fn name(&self, i: usize) -> Option<String> {
        let raw = self.bytes(i);
        let s = match self.kind(i)? {
            TokenKind::Word => std::str::from_utf8(raw).ok()?.to_owned(),
            TokenKind::QuotedIdent | TokenKind::String => unquote(raw)?,
            _ => return None,
        };
        Some(s.to_lowercase())
    }

    /// A `CALL` statement: its leading keyword (after any `(`) is CALL.
    fn is_call(&self) -> bool {
        let first = (0..self.toks.len())
            .find(|&i| !self.punct(i, b'('))
            .unwrap_or(0);
        self.kw(first, "CALL")
    }

    /// `LAST_INSERT_ID()` (no argument), `@@last_insert_id` or `@@identity`
    /// anywhere in the statement.
    fn reads_last_insert_id(&self) -> bool {
        (0..self.toks.len()).any(|i| match self.kind(i) {
            Some(TokenKind::Word) => {
                self.kw(i, "LAST_INSERT_ID") && self.punct(i + 1, b'(') && self.punct(i + 2, b')')
            }
            Some(TokenKind::SysVar) => sysvar_parts(self.bytes(i))
                .is_some_and(|(_, n)| n == "last_insert_id" || n == "identity"),
            _ => false,
        })
    }

    fn classify(&self) -> Class {
        let n = self.toks.len();
        if n == 0 {
            return Class::Empty;
        }
        // The leading keyword; `(SELECT …)` leads with parentheses.
        let first = (0..n).find(|&i| !self.punct(i, b'(')).unwrap_or(0);
        if let Some(c) = self.leading_pin(first) {
            return c;
        }
        if let Some(c) = self.plain_function_select(first) {
            return c;
        }
        if let Some(p) = self.scan_pins(first) {
            return Class::Pin(p);
        }
        let f = first;
        if self.kw(f, "SET") {
            return self.classify_set(f + 1);
        }
        if self.kw(f, "USE") && n == f + 2 {
            // Schema names keep their case: they are case-sensitive on most
            // file systems.
            let raw = self.bytes(f + 1);
            let schema = match self.kind(f + 1) {
                Some(TokenKind::Word) => std::str::from_utf8(raw).ok().map(str::to_owned),
                Some(TokenKind::QuotedIdent) => unquote(raw),
                _ => None,
            };
            if let Some(s) = schema {
                return Class::Use(s);
            }
        }
        if (self.kw(f, "BEGIN") && (n == f + 1 || (self.kw(f + 1, "WORK") && n == f + 2)))
            || (self.kw(f, "START") && self.kw(f + 1, "TRANSACTION"))
        {
            return Class::Begin;
        }
        if self.kw(f, "COMMIT") || self.kw(f, "ROLLBACK") {
            return self.classify_end(f);
        }
        if self.kw(f, "UNLOCK") && self.kw_any(f + 1, &["TABLE", "TABLES"]) {
            return Class::UnlockTables;
        }
        if self.kw(f, "SHOW") {
            let limit_ok = |i: usize| n == i || self.kw(i, "LIMIT");
            if self.kw(f + 1, "WARNINGS") && limit_ok(f + 2) {
                return Class::ShowWarnings;
            }
            if self.kw(f + 1, "ERRORS") && limit_ok(f + 2) {
                return Class::ShowErrors;
            }
            if self.kw(f + 1, "COUNT")
                && self.punct(f + 2, b'(')
                && self.punct(f + 3, b'*')
                && self.punct(f + 4, b')')
                && n == f + 6
            {
                if self.kw(f + 5, "WARNINGS") {
                    return Class::ShowCountWarnings;
                }
                if self.kw(f + 5, "ERRORS") {
                    return Class::ShowCountErrors;
                }
            }
        }
        Class::Plain
    }

    /// Statements that pin by their leading keywords.
    fn leading_pin(&self, f: usize) -> Option<Class> {
        let pin = |p| Some(Class::Pin(p));
        if self.kw(f, "LOCK") {
            if self.kw_any(f + 1, &["TABLE", "TABLES"]) {
                return pin(Pin::LockTables);
            }
            if self.kw(f + 1, "INSTANCE") {
                return pin(Pin::BackupLock);
            }
        }
        if self.kw(f, "FLUSH") {
            let n = self.toks.len();
            let with_read_lock = (f..n)
                .any(|i| self.kw(i, "WITH") && self.kw(i + 1, "READ") && self.kw(i + 2, "LOCK"));
            let for_export = (f..n).any(|i| self.kw(i, "FOR") && self.kw(i + 1, "EXPORT"));
            if with_read_lock || for_export {
                return pin(Pin::FlushTablesWithReadLock);
            }
        }
        if self.kw(f, "BACKUP") && self.kw_any(f + 1, &["STAGE", "LOCK"]) {
            return pin(Pin::BackupLock);
        }
        if self.kw(f, "HANDLER") {
            return pin(Pin::Handler);
        }
        if self.kw(f, "XA") {
            return pin(Pin::Xa);
        }
        if self.kw_any(f, &["PREPARE", "EXECUTE", "DEALLOCATE"])
            || (self.kw(f, "DROP") && self.kw(f + 1, "PREPARE"))
        {
            return pin(Pin::TextPrepare);
        }
        if self.kw_any(f, &["CREATE", "DROP"]) {
            // TEMPORARY among the words before the object kind.
            let temporary = (f + 1..self.toks.len())
                .take_while(|&i| {
                    self.kind(i) == Some(TokenKind::Word) && !self.kw_any(i, &["TABLE", "SEQUENCE"])
                })
                .any(|i| self.kw(i, "TEMPORARY"));
            if temporary {
                return pin(Pin::TemporaryTable);
            }
        }
        if self.kw(f, "SET") && self.kw(f + 1, "ROLE") {
            return pin(Pin::SetRole);
        }
        if self.kw(f, "GET")
            && (self.kw(f + 1, "DIAGNOSTICS")
                || (self.kw_any(f + 1, &["CURRENT", "STACKED"]) && self.kw(f + 2, "DIAGNOSTICS")))
        {
            return pin(Pin::PreviousStatementState);
        }
        None
    }

    /// `SELECT LAST_INSERT_ID() [[AS] alias]` and the same for ROW_COUNT()
    /// and FOUND_ROWS(): nothing else in the statement.
    fn plain_function_select(&self, f: usize) -> Option<Class> {
        if f != 0 || !self.kw(0, "SELECT") {
            return None;
        }
        let func = ["LAST_INSERT_ID", "ROW_COUNT", "FOUND_ROWS"]
            .into_iter()
            .find(|k| self.kw(1, k))?;
        if !self.punct(2, b'(') || !self.punct(3, b')') {
            return None;
        }
        let n = self.toks.len();
        let alias_at = match n {
            4 => None,
            5 => Some(4),
            6 if self.kw(4, "AS") => Some(5),
            _ => return None,
        };
        let column = match alias_at {
            None => self.text(1, 3)?,
            Some(i) => {
                const NOT_ALIASES: [&str; 11] = [
                    "FROM", "INTO", "LIMIT", "WHERE", "UNION", "FOR", "LOCK", "ORDER", "GROUP",
                    "HAVING", "AS",
                ];
                if self.kw_any(i, &NOT_ALIASES) {
                    return None;
                }
                match self.kind(i)? {
                    TokenKind::Word => self.text(i, i)?,
                    TokenKind::QuotedIdent | TokenKind::String => unquote(self.bytes(i))?,
                    _ => return None,
                }
            }
        };
        Some(match func {
            "LAST_INSERT_ID" => Class::LastInsertId { column },
            "ROW_COUNT" => Class::RowCount { column },
            _ => Class::FoundRows { column },
        })
    }

    /// Pin triggers anywhere in the statement (first one in text order).
    fn scan_pins(&self, f: usize) -> Option<Pin> {
        let is_select = self.kw(f, "SELECT") || self.kw(f, "WITH");
        // CALL's OUT parameters and LOAD DATA's `(@col)` write variables.
        let is_call = self.kw_any(f, &["CALL", "LOAD"]);
        let mut read_last_insert_id = false;
        for i in 0..self.toks.len() {
            match self.kind(i)? {
                TokenKind::Word => {
                    if self.kw(i, "SQL_CALC_FOUND_ROWS") {
                        return Some(Pin::SqlCalcFoundRows);
                    }
                    // `SET @x` also inside a routine body or a trigger.
                    if self.kw_any(i, &["INTO", "SET"])
                        && self.kind(i + 1) == Some(TokenKind::UserVar)
                    {
                        return Some(Pin::UserVariableWrite);
                    }
                    let call = self.punct(i + 1, b'(');
                    if call && self.stored_call(i) {
                        return Some(Pin::StoredFunction);
                    }
                    if call && self.kw_any(i, &["GET_LOCK", "RELEASE_LOCK", "RELEASE_ALL_LOCKS"]) {
                        return Some(Pin::LockFunction);
                    }
                    if call && self.kw_any(i, &["ROW_COUNT", "FOUND_ROWS", "LASTVAL"]) {
                        return Some(Pin::PreviousStatementState);
                    }
                    if self.kw(i, "PREVIOUS") && self.kw(i + 1, "VALUE") && self.kw(i + 2, "FOR") {
                        return Some(Pin::PreviousStatementState);
                    }
                    if call && self.kw(i, "LAST_INSERT_ID") {
                        // LAST_INSERT_ID(expr) sets the value; outside a
                        // SELECT the statement's OK packet carries it. A
                        // read counts only if nothing else pins: the proxy
                        // answers those reads itself, and must not miss a
                        // lock or a variable write after one.
                        if self.punct(i + 2, b')') {
                            read_last_insert_id = true;
                        } else if is_select {
                            return Some(Pin::PreviousStatementState);
                        }
                    }
                }
                TokenKind::QuotedIdent if self.punct(i + 1, b'(') && self.stored_call(i) => {
                    return Some(Pin::StoredFunction);
                }
                TokenKind::UserVar => {
                    let assigned =
                        self.kind(i + 1) == Some(TokenKind::Punct) && self.bytes(i + 1) == b":=";
                    if is_call || assigned {
                        return Some(Pin::UserVariableWrite);
                    }
                }
                TokenKind::SysVar => {
                    if let Some((_, name)) = sysvar_parts(self.bytes(i)) {
                        if matches!(
                            name.as_str(),
                            "warning_count" | "error_count" | "last_insert_id" | "identity"
                        ) {
                            return Some(Pin::PreviousStatementState);
                        }
                    }
                }
                _ => {}
            }
        }
        read_last_insert_id.then_some(Pin::PreviousStatementState)
    }

    /// The statement's reads of what an earlier one left are all
    /// `LAST_INSERT_ID()` without an argument (any `@@` variable, ROW_COUNT,
    /// FOUND_ROWS, LASTVAL, PREVIOUS VALUE, DIAGNOSTICS or
    /// `LAST_INSERT_ID(expr)` says no), and there is one.
    fn only_last_insert_id_reads(&self) -> bool {
        const OTHERS: [&str; 5] = [
            "ROW_COUNT",
            "FOUND_ROWS",
            "LASTVAL",
            "PREVIOUS",
            "DIAGNOSTICS",
        ];
        let mut found = false;
        for i in 0..self.toks.len() {
            match self.kind(i) {
                Some(TokenKind::SysVar) => return false,
                Some(TokenKind::Word) if self.kw_any(i, &OTHERS) => return false,
                Some(TokenKind::Word)
                    if self.kw(i, "LAST_INSERT_ID") && self.punct(i + 1, b'(') =>
                {
                    if !self.punct(i + 2, b')') {
                        return false;
                    }
                    found = true;
                }
                _ => {}
            }
        }
        found
    }

    /// The name at `i`, followed by `(`, calls a stored function (see
    /// `stored_calls`): qualified or quoted, or a name the server does not
    /// resolve as its own, and not one that owns a column list.
    fn stored_call(&self, i: usize) -> bool {
        let qualified = i >= 2 && self.punct(i - 1, b'.');
        let owner = if qualified { i - 2 } else { i };
        let before_owner = owner.checked_sub(1).is_some_and(|b| {
            self.kind(b) == Some(TokenKind::Word) && names_a_list_owner(self.bytes(b))
        });
        if before_owner {
            return false;
        }
        let stored =
            qualified || self.kind(i) == Some(TokenKind::QuotedIdent) || !is_native(self.bytes(i));
        stored && !self.declared_read_only(i, qualified.then(|| i - 2))
    }

    /// The stored function named at `i` (its schema at `schema`) is one the
    /// operator declared read-only: `NAME` matches it in any schema,
    /// `SCHEMA.NAME` only there.
    fn declared_read_only(&self, i: usize, schema: Option<usize>) -> bool {
        if self.declared.is_empty() {
            return false;
        }
        let Some(name) = self.name(i) else {
            return false;
        };
        let qualified = schema
            .and_then(|s| self.name(s))
            .map(|s| format!("{s}.{name}"));
        self.declared.iter().any(|d| {
            d.eq_ignore_ascii_case(&name)
                || qualified
                    .as_deref()
                    .is_some_and(|q| d.eq_ignore_ascii_case(q))
        })
    }

    /// COMMIT / ROLLBACK and their options.
    fn classify_end(&self, f: usize) -> Class {
        let n = self.toks.len();
        let mut i = f + 1;
        if self.kw(i, "WORK") {
            i += 1;
        }
        if self.kw(f, "ROLLBACK") && self.kw(i, "TO") {
            return Class::Plain;
        }
        let mut chain = false;
        let mut release = false;
        while i < n {
            if self.kw(i, "AND") && self.kw(i + 1, "CHAIN") {
                chain = true;
                i += 2;
            } else if self.kw(i, "AND") && self.kw(i + 1, "NO") && self.kw(i + 2, "CHAIN") {
                i += 3;
            } else if self.kw(i, "RELEASE") {
                release = true;
                i += 1;
            } else if self.kw(i, "NO") && self.kw(i + 1, "RELEASE") {
                i += 2;
            } else {
                return Class::Plain;
            }
        }
        if self.kw(f, "COMMIT") {
            Class::Commit { chain, release }
        } else {
            Class::Rollback { chain, release }
        }
    }

    /// The SET statement after its SET keyword (token `i`).
    fn classify_set(&self, i: usize) -> Class {
        let n = self.toks.len();
        // SET STATEMENT var=value[, …] FOR statement: the settings last for
        // that statement only, so the class is the inner statement's.
        if self.kw(i, "STATEMENT") {
            let mut depth = 0i32;
            for k in i + 1..n {
                if self.punct(k, b'(') {
                    depth += 1;
                } else if self.punct(k, b')') {
                    depth -= 1;
                } else if depth == 0 && self.kw(k, "FOR") {
                    let inner = Cx {
                        sql: self.sql,
                        toks: &self.toks[k + 1..],
                        declared: self.declared,
                    };
                    return match inner.classify() {
                        Class::Empty => Class::Pin(Pin::UnrecognizedSet),
                        c => c,
                    };
                }
            }
            return Class::Pin(Pin::UnrecognizedSet);
        }
        if self.kw(i, "PASSWORD") || (self.kw(i, "DEFAULT") && self.kw(i + 1, "ROLE")) {
            return Class::Plain;
        }
        // SET [GLOBAL|SESSION|LOCAL] TRANSACTION …
        let (tscope, t) = match self.scope_kw(i) {
            Some(s) => (Some(s), i + 1),
            None => (None, i),
        };
        if self.kw(t, "TRANSACTION") {
            return match self.text(t + 1, n.saturating_sub(1)) {
                Some(characteristics) if n > t + 1 => Class::SetTransaction {
                    scope: tscope,
                    characteristics,
                },
                _ => Class::Pin(Pin::UnrecognizedSet),
            };
        }
        match self.set_items(i) {
            Ok(items) if !items.is_empty() => Class::Set(items),
            Ok(_) => Class::Pin(Pin::UnrecognizedSet),
            Err(p) => Class::Pin(p),
        }
    }

    fn scope_kw(&self, i: usize) -> Option<Scope> {
        if self.kw_any(i, &["SESSION", "LOCAL"]) {
            Some(Scope::Session)
        } else if self.kw_any(i, &["GLOBAL", "PERSIST", "PERSIST_ONLY"]) {
            Some(Scope::Global)
        } else {
            None
        }
    }

    /// The items of a SET list starting at token `i`. The error is the pin:
    /// a user variable target, or anything this lexer does not recognise. A
    /// scope keyword applies to the following items that have none, as in
    /// MySQL.
    fn set_items(&self, mut i: usize) -> Result<Vec<SetItem>, Pin> {
        const BAD: Pin = Pin::UnrecognizedSet;
        let n = self.toks.len();
        let mut items = Vec::new();
        let mut default_scope = Scope::Session;
        loop {
            if let Some(s) = self.scope_kw(i) {
                default_scope = s;
                i += 1;
            }
            let item_end = self.item_end(i);
            if self.kw(i, "NAMES") {
                let charset = self.charset_name(i + 1).ok_or(BAD)?;
                let collation = match item_end.checked_sub(i + 2) {
                    Some(0) => None,
                    Some(2) if self.kw(i + 2, "COLLATE") => Some(self.name(i + 3).ok_or(BAD)?),
                    _ => return Err(BAD),
                };
                items.push(SetItem::Names { charset, collation });
            } else if self.kw(i, "CHARSET") || (self.kw(i, "CHARACTER") && self.kw(i + 1, "SET")) {
                let at = if self.kw(i, "CHARSET") { i + 1 } else { i + 2 };
                if item_end != at + 1 {
                    return Err(BAD);
                }
                items.push(SetItem::CharacterSet(self.charset_name(at).ok_or(BAD)?));
            } else {
                let (scope, name, mut v) = match self.kind(i).ok_or(BAD)? {
                    TokenKind::UserVar => return Err(Pin::UserVariableWrite),
                    TokenKind::SysVar => {
                        let (scope, name) = sysvar_parts(self.bytes(i)).ok_or(BAD)?;
                        (scope.unwrap_or(Scope::Session), name, i + 1)
                    }
                    TokenKind::Word | TokenKind::QuotedIdent => {
                        let mut name = self.name(i).ok_or(BAD)?;
                        let mut v = i + 1;
                        // Structured variables: `default.key_buffer_size`.
                        if self.punct(v, b'.') {
                            name = format!("{name}.{}", self.name(v + 1).ok_or(BAD)?);
                            v += 2;
                        }
                        (default_scope, name, v)
                    }
                    _ => return Err(BAD),
                };
                if !self.assign_op(v) {
                    return Err(BAD);
                }
                v += 1;
                if v >= item_end {
                    return Err(BAD);
                }
                let value = self.text(v, item_end - 1).ok_or(BAD)?;
                items.push(SetItem::Variable { scope, name, value });
            }
            if item_end >= n {
                return Ok(items);
            }
            // item_end is a top-level comma.
            i = item_end + 1;
        }
    }

    /// The index of the top-level comma that ends the SET item starting at
    /// `i`, or the statement's length.
    fn item_end(&self, i: usize) -> usize {
        let mut depth = 0i32;
        for k in i..self.toks.len() {
            if self.punct(k, b'(') {
                depth += 1;
            } else if self.punct(k, b')') {
                depth -= 1;
            } else if depth == 0 && self.punct(k, b',') {
                return k;
            }
        }
        self.toks.len()
    }

    /// A character set name, or None (outer Some) for DEFAULT.
    fn charset_name(&self, i: usize) -> Option<Option<String>> {
        if self.kw(i, "DEFAULT") {
            return Some(None);
        }
        Some(Some(self.name(i)?))
    }
}

/// (scope, lower-cased name) of a `@@[scope.]name` token.
fn sysvar_parts(raw: &[u8]) -> Option<(Option<Scope>, String)> {
    let body = raw.strip_prefix(b"@@")?;
    let part = |b: &[u8]| -> Option<String> {
        let s = match b.first() {
            Some(b'`') => unquote(b)?,
            _ => std::str::from_utf8(b).ok()?.to_owned(),
        };
        Some(s.to_lowercase())
    };
    // The scope prefix is a plain word followed by '.'.
    if let Some(dot) = body.iter().position(|&c| c == b'.') {
        let (head, tail) = (&body[..dot], &body[dot + 1..]);
        let scope = if head.eq_ignore_ascii_case(b"global") {
            Scope::Global
        } else if head.eq_ignore_ascii_case(b"session") || head.eq_ignore_ascii_case(b"local") {
            Scope::Session
        } else {
            return None;
        };
        let name = part(tail)?;
        return (!name.is_empty()).then_some((Some(scope), name));
    }
    let name = part(body)?;
    (!name.is_empty()).then_some((None, name))
}

/// The text of a quoted token without its quotes, doubled quotes undone and
/// (for strings) backslash escapes of quotes and backslashes undone.
fn unquote(raw: &[u8]) -> Option<String> {
    let (&q, rest) = raw.split_first()?;
    let inner = rest.strip_suffix(&[q])?;
    let mut out = Vec::with_capacity(inner.len());
    let mut k = 0;
    while let Some(&c) = inner.get(k) {
        if c == q && inner.get(k + 1) == Some(&q) {
            out.push(q);
            k += 2;
        } else if c == b'\\' && q != b'`' && inner.get(k + 1).is_some() {
            out.push(inner[k + 1]);
            k += 2;
        } else {
            out.push(c);
            k += 1;
        }
    }
    String::from_utf8(out).ok()
}

//! Recognising the ways a client asks to kill a connection or its running
//! query: the `KILL` statement (COM_QUERY) and COM_PROCESS_KILL.
//!
//! The proxy maps the form that names a thread by a literal number,
//! because that number may be a proxy connection id that the server has
//! never heard of. MariaDB's grammar is
//! `KILL [HARD|SOFT] [CONNECTION|QUERY [ID]] expr` and `KILL [...] USER name`.
//! [`parse_statement`] recognises exactly
//! `KILL [HARD|SOFT] [CONNECTION|QUERY] <decimal>` with any case,
//! whitespace and comments, and an optional trailing `;`, also as the first
//! statement of a multi-statement (`KILL 5; SELECT SLEEP(0.05)`, as mysql2's
//! pool test sends it; the rest is kept verbatim).
//!
//! Every other KILL is one the proxy cannot scope to the killer's proxy
//! user, and [`classify_command`] says so ([`KillCommand::Unmappable`]):
//! `KILL QUERY ID` (a query id), `KILL USER`, expressions, hex or quoted
//! ids, a KILL after another statement or inside a compound statement, a
//! KILL in an executable comment (`/*! ... */`, `/*M! ... */`, whose
//! contents the server runs), and the literal text given to `PREPARE`,
//! `EXECUTE IMMEDIATE` or COM_STMT_PREPARE. KILL is a reserved word, so
//! the word anywhere in a statement's code is the KILL statement. Where the
//! server's reading of quotes depends on `sql_mode` (NO_BACKSLASH_ESCAPES,
//! ANSI_QUOTES), every reading is tried, and the word in any of them counts.
//!
//! Pure and allocation-free except for the rewrites and the token list of
//! a text that contains the letters `kill`.

use super::constants::{COM_PROCESS_KILL, COM_QUERY, COM_STMT_PREPARE};
use super::lexer::{tokenize_into, LexError, LexOptions, Server, Token as LexToken, TokenKind};

/// "Unknown thread id: %lu" (HY000).
pub const ER_NO_SUCH_THREAD: u16 = 1094;
/// "You are not owner of thread %lu" (HY000).
pub const ER_KILL_DENIED_ERROR: u16 = 1095;

/// MariaDB's text for [`ER_NO_SUCH_THREAD`].
pub fn unknown_thread_message(id: u64) -> String {
    format!("Unknown thread id: {id}")
}

/// MariaDB's text for [`ER_KILL_DENIED_ERROR`].
pub fn not_owner_message(id: u64) -> String {
    format!("You are not owner of thread {id}")
}

/// An SQL condition, true when the connection's own account holds one of
/// the global `privileges` (a quoted list: `'SUPER', 'CONNECTION ADMIN'`),
/// as the server reports them: `USER_PRIVILEGES.GRANTEE` is
/// `'user'@'host'`, `CURRENT_USER()` is `user@host`, and only the host part
/// cannot contain `@`. Privileges of a role set with `SET ROLE` are not in
/// that table.
pub fn account_has(privileges: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM information_schema.USER_PRIVILEGES \
         WHERE GRANTEE = CONCAT('''', LEFT(CURRENT_USER(), CHAR_LENGTH(CURRENT_USER()) \
         - CHAR_LENGTH(SUBSTRING_INDEX(CURRENT_USER(), '@', -1)) - 1), '''@''', \
         SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') \
         AND PRIVILEGE_TYPE IN ({privileges}))"
    )
}

/// MariaDB's KILL of another account's thread needs CONNECTION ADMIN or
/// SUPER (10.11: `PRIV_KILL_OTHER_USER_PROCESS`).
pub const KILL_PRIVILEGES: &str = "'SUPER', 'CONNECTION ADMIN'";

/// `body` in a MariaDB anonymous block whose handlers turn the server's
/// 1094 and 1095 into the same errors naming `shown_id`.
fn guarded_block(body: &str, shown_id: u64) -> String {
    format!(
        "BEGIN NOT ATOMIC \
         DECLARE EXIT HANDLER FOR {ER_NO_SUCH_THREAD} SIGNAL SQLSTATE 'HY000' \
         SET MYSQL_ERRNO = {ER_NO_SUCH_THREAD}, MESSAGE_TEXT = '{}'; \
         DECLARE EXIT HANDLER FOR {ER_KILL_DENIED_ERROR} SIGNAL SQLSTATE 'HY000' \
         SET MYSQL_ERRNO = {ER_KILL_DENIED_ERROR}, MESSAGE_TEXT = '{}'; \
         {body}; END",
        unknown_thread_message(shown_id),
        not_owner_message(shown_id),
    )
}

/// The refusal of a KILL the proxy cannot map (ER_NOT_SUPPORTED_YET,
/// 42000): what works instead.
pub const UNMAPPABLE_MESSAGE: &str = "ringgate: KILL is supported only as KILL [HARD|SOFT] \
     [CONNECTION|QUERY] <thread id>, alone or first in a multi-statement; \
     not KILL USER, KILL QUERY ID, an expression, an executable comment, \
     a compound statement or a prepared KILL";

/// What a KILL stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillTarget {
    /// `KILL [CONNECTION]` and COM_PROCESS_KILL: the whole connection.
    Connection,
    /// `KILL QUERY`: only the statement running now.
    Query,
}

/// MariaDB's `HARD` (the default) / `SOFT` modifier, kept on a rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hardness {
    Hard,
    Soft,
}

/// A recognised `KILL ... <id>` or COM_PROCESS_KILL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KillStatement<'a> {
    pub target: KillTarget,
    /// As written; `None` when the statement named neither.
    pub hardness: Option<Hardness>,
    /// The thread id as written (MariaDB reads it as an unsigned 64-bit
    /// number).
    pub id: u64,
    /// COM_PROCESS_KILL rather than a `KILL` statement.
    pub process_kill: bool,
    /// The statements after the KILL's `;` (a multi-statement), verbatim;
    /// empty when the KILL is alone.
    pub rest: &'a [u8],
}

impl KillStatement<'_> {
    /// The command payload (command byte included) that asks the same of
    /// another thread id: the statement's own form, with `id` in place.
    pub fn to_payload(&self, id: u32) -> Vec<u8> {
        if self.process_kill {
            let mut p = Vec::with_capacity(5);
            p.push(COM_PROCESS_KILL);
            p.extend_from_slice(&id.to_le_bytes());
            return p;
        }
        let mut p = vec![COM_QUERY];
        p.extend_from_slice(self.to_query(u64::from(id)).as_bytes());
        p
    }

    /// The same KILL of backend thread `thread` as a MariaDB anonymous
    /// block whose refusals name `shown_id` (the id the client used) rather
    /// than the backend thread: for a server that checks the privileges
    /// itself. (`BEGIN NOT ATOMIC` is MariaDB's, and not valid under
    /// `sql_mode=ORACLE`.)
    pub fn to_guarded_query(&self, thread: u32, shown_id: u64) -> String {
        guarded_block(&self.to_query(u64::from(thread)), shown_id)
    }

    /// A KILL of another proxy user's session, for a MariaDB server: the
    /// server answers 1095 naming `shown_id` unless the killer's own
    /// account has a privilege to kill other accounts' threads
    /// ([`KILL_PRIVILEGES`]), and otherwise runs the same KILL of
    /// `thread` (nothing when the session holds no backend thread). The
    /// server alone would let any session of the same account kill it, and
    /// two proxy users may be one backend account.
    pub fn to_privileged_query(&self, thread: Option<u32>, shown_id: u64) -> String {
        let kill = thread.map_or_else(|| "DO 0".to_string(), |t| self.to_query(u64::from(t)));
        let body = format!(
            "IF NOT {} THEN SIGNAL SQLSTATE 'HY000' \
             SET MYSQL_ERRNO = {ER_KILL_DENIED_ERROR}, MESSAGE_TEXT = '{}'; END IF; {kill}",
            account_has(KILL_PRIVILEGES),
            not_owner_message(shown_id),
        );
        guarded_block(&body, shown_id)
    }

    /// The statement text with `id`.
    pub fn to_query(&self, id: u64) -> String {
        let hardness = match self.hardness {
            None => "",
            Some(Hardness::Hard) => "HARD ",
            Some(Hardness::Soft) => "SOFT ",
        };
        let target = match self.target {
            KillTarget::Connection => "CONNECTION ",
            KillTarget::Query => "QUERY ",
        };
        format!("KILL {hardness}{target}{id}")
    }
}

/// What a client command is, as far as KILL goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillCommand<'a> {
    /// A KILL of a literal thread id that the proxy maps.
    Mapped(KillStatement<'a>),
    /// `KILL [CONNECTION|QUERY] CONNECTION_ID()`: the killer's own
    /// connection, whatever session that is; the server's to run.
    OwnConnection,
    /// A KILL in any other form, or anywhere else in the text: the proxy
    /// cannot tell whose session it would reach, so it is refused.
    Unmappable,
}

/// A command payload (command byte first) that is or contains a KILL, or
/// `None`.
pub fn classify_command(payload: &[u8]) -> Option<KillCommand<'_>> {
    match payload.split_first()? {
        (&COM_PROCESS_KILL, _) => Some(
            // MariaDB reads the first four bytes of any length as the id:
            // only exactly four is the id the proxy reads.
            parse_command(payload).map_or(KillCommand::Unmappable, KillCommand::Mapped),
        ),
        // Nearly every statement stops here, before any tokenizing: this
        // runs on every command a session sends.
        (&COM_QUERY, sql) if !has_kill_word(sql) => None,
        (&COM_QUERY, sql) => match parse_statement(sql) {
            Some(k) if !mentions_kill(k.rest) => Some(KillCommand::Mapped(k)),
            Some(_) => Some(KillCommand::Unmappable),
            None if kills_itself(sql) => Some(KillCommand::OwnConnection),
            None => mentions_kill(sql).then_some(KillCommand::Unmappable),
        },
        // A prepared KILL takes its id as a parameter the proxy never maps.
        (&COM_STMT_PREPARE, sql) => mentions_kill(sql).then_some(KillCommand::Unmappable),
        _ => None,
    }
}

/// `KILL [HARD|SOFT] [CONNECTION|QUERY] CONNECTION_ID()` alone (an optional
/// `;`): the server evaluates `CONNECTION_ID()` on the killer's own
/// connection, so it can only reach the killer's own session, and goes to
/// the server as sent (its answer to KILL CONNECTION is 1927, then the
/// close).
fn kills_itself(sql: &[u8]) -> bool {
    let mut toks = Vec::new();
    READINGS.iter().all(|opts| {
        if tokenize_into(sql, opts, &mut toks).is_err() {
            return false;
        }
        let text = |t: &LexToken| &sql[t.start..t.end];
        let mut rest = &toks[..];
        if let [t, ..] = rest {
            if t.kind == TokenKind::Semicolon {
                return false;
            }
        }
        if let [.., last] = rest {
            if last.kind == TokenKind::Semicolon {
                rest = &rest[..rest.len() - 1];
            }
        }
        let [kill, modifiers @ .., id, open, close] = rest else {
            return false;
        };
        let word = |t: &LexToken, kw: &str| {
            t.kind == TokenKind::Word && text(t).eq_ignore_ascii_case(kw.as_bytes())
        };
        let modifiers_ok = match modifiers {
            [] => true,
            [m] => ["HARD", "SOFT", "CONNECTION", "QUERY"]
                .iter()
                .any(|k| word(m, k)),
            [h, t] => {
                (word(h, "HARD") || word(h, "SOFT")) && (word(t, "CONNECTION") || word(t, "QUERY"))
            }
            _ => false,
        };
        word(kill, "KILL")
            && modifiers_ok
            && word(id, "CONNECTION_ID")
            && text(open) == b"("
            && text(close) == b")"
    })
}

/// The server's possible readings of quotes: `sql_mode`'s
/// NO_BACKSLASH_ESCAPES and ANSI_QUOTES change where strings end, and the
/// proxy does not always know the session's `sql_mode`.
const READINGS: [LexOptions; 4] = [
    reading(false, false),
    reading(true, false),
    reading(false, true),
    reading(true, true),
];

const fn reading(no_backslash_escapes: bool, ansi_quotes: bool) -> LexOptions {
    LexOptions {
        no_backslash_escapes,
        ansi_quotes,
        // Both readings are tried.
        ansi_quotes_known: true,
        ascii_safe_charset: true,
        high_bytes_in_words: true,
        // Not known: a version-gated comment that some server would run
        // makes the tokenizing unsure, which counts as a KILL below.
        server: Server::Unknown,
        read_only_functions: &[],
    }
}

/// Whether the SQL text holds a KILL statement anywhere in code, under any
/// reading of its quotes (executable comments count as code), or in the
/// literal text of a `PREPARE` or `EXECUTE IMMEDIATE`.
pub fn mentions_kill(sql: &[u8]) -> bool {
    mentions_kill_nested(sql, 1)
}

/// The letters `kill` in any case anywhere in the text: every form of the
/// statement has them.
fn has_kill_word(sql: &[u8]) -> bool {
    sql.windows(4).any(|w| w.eq_ignore_ascii_case(b"kill"))
}

fn mentions_kill_nested(sql: &[u8], depth: u8) -> bool {
    // Nearly every statement stops here, without tokenizing.
    if !has_kill_word(sql) {
        return false;
    }
    let mut toks = Vec::new();
    READINGS.iter().any(|opts| {
        match tokenize_into(sql, opts, &mut toks) {
            Ok(()) => kill_in_tokens(sql, &toks, depth),
            // A `;` or a nested marker inside an executable comment, a
            // version-gated comment some server runs, or `--` before 0x7F:
            // the server may read it in ways this lexer does not follow.
            Err(
                LexError::OddExecutableComment
                | LexError::UnsureVersionComment
                | LexError::UnsureByte,
            ) => true,
            // An unterminated quote or comment: under this reading the
            // server fails the statement it is in, but runs the statements
            // before it (a multi-statement).
            Err(_) => {
                let whole = toks
                    .iter()
                    .rposition(|t| t.kind == TokenKind::Semicolon)
                    .unwrap_or(0);
                kill_in_tokens(sql, &toks[..whole], depth)
            }
        }
    })
}

fn kill_in_tokens(sql: &[u8], toks: &[LexToken], depth: u8) -> bool {
    let word = |t: &LexToken, kw: &[u8]| {
        t.kind == TokenKind::Word && sql[t.start..t.end].eq_ignore_ascii_case(kw)
    };
    let dynamic = toks
        .iter()
        .any(|t| word(t, b"PREPARE") || word(t, b"EXECUTE"));
    toks.iter().enumerate().any(|(i, t)| match t.kind {
        // `t.kill` names a column: a keyword right after `.` is an identifier.
        TokenKind::Word => {
            word(t, b"KILL")
                && !(i > 0 && toks[i - 1].end == t.start && sql[toks[i - 1].start] == b'.')
        }
        TokenKind::String if dynamic && depth > 0 && t.end >= t.start + 2 => {
            mentions_kill_nested(&sql[t.start + 1..t.end - 1], depth - 1)
        }
        _ => false,
    })
}

/// A command payload (command byte first) that is a KILL of a literal
/// thread id, or `None`.
pub fn parse_command(payload: &[u8]) -> Option<KillStatement<'_>> {
    match payload.split_first()? {
        (&COM_PROCESS_KILL, rest) => {
            // MariaDB reads exactly four bytes and treats it as
            // KILL CONNECTION; anything longer is not ours to reinterpret.
            let id: [u8; 4] = rest.try_into().ok()?;
            Some(KillStatement {
                target: KillTarget::Connection,
                hardness: None,
                id: u64::from(u32::from_le_bytes(id)),
                process_kill: true,
                rest: &[],
            })
        }
        (&COM_QUERY, sql) => parse_statement(sql),
        _ => None,
    }
}

/// The text of a COM_QUERY, if it is (or starts with, before a `;`)
/// `KILL [HARD|SOFT] [CONNECTION|QUERY] <decimal>`.
pub fn parse_statement(sql: &[u8]) -> Option<KillStatement<'_>> {
    let mut lx = Lexer { s: sql, pos: 0 };
    if !lx.next()?.is_word("KILL") {
        return None;
    }
    let mut tok = lx.next()?;
    let mut hardness = None;
    if tok.is_word("HARD") {
        hardness = Some(Hardness::Hard);
        tok = lx.next()?;
    } else if tok.is_word("SOFT") {
        hardness = Some(Hardness::Soft);
        tok = lx.next()?;
    }
    let mut target = KillTarget::Connection;
    if tok.is_word("CONNECTION") {
        tok = lx.next()?;
    } else if tok.is_word("QUERY") {
        target = KillTarget::Query;
        tok = lx.next()?;
    }
    // `QUERY ID n` names a query id, `USER x` a user: neither is a thread.
    let Token::Number(id) = tok else {
        return None;
    };
    let mut rest: &[u8] = &[];
    match lx.next()? {
        Token::End => {}
        Token::Semicolon => {
            let after = lx.pos;
            // Only blanks after the `;`: a lone KILL. Otherwise the rest
            // is the server's to parse, as it is.
            if lx.next() != Some(Token::End) {
                rest = &sql[after..];
            }
        }
        _ => return None,
    }
    Some(KillStatement {
        target,
        hardness,
        id,
        process_kill: false,
        rest,
    })
}

/// The text of a COM_QUERY, if it is exactly `SHOW [FULL] PROCESSLIST`
/// (same lexical freedom as KILL); `Some(full)`. The ids it lists are the
/// ones KILL takes, so the proxy maps them too.
pub fn parse_show_processlist(sql: &[u8]) -> Option<bool> {
    let mut lx = Lexer { s: sql, pos: 0 };
    if !lx.next()?.is_word("SHOW") {
        return None;
    }
    let mut tok = lx.next()?;
    let full = tok.is_word("FULL");
    if full {
        tok = lx.next()?;
    }
    if !tok.is_word("PROCESSLIST") {
        return None;
    }
    let mut tok = lx.next()?;
    if tok == Token::Semicolon {
        tok = lx.next()?;
    }
    (tok == Token::End).then_some(full)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    Word(&'a [u8]),
    Number(u64),
    Semicolon,
    End,
}

impl Token<'_> {
    fn is_word(&self, kw: &str) -> bool {
        matches!(self, Token::Word(w) if w.eq_ignore_ascii_case(kw.as_bytes()))
    }
}

/// Just enough of MariaDB's lexer: whitespace, the three comment forms,
/// words, decimal numbers and `;`. Anything else ends recognition (`None`).
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

impl<'a> Lexer<'a> {
    fn peek(&self, ahead: usize) -> Option<u8> {
        self.s.get(self.pos + ahead).copied()
    }

    /// Skip whitespace and comments; `None` for an executable or
    /// unterminated comment (the server would read it differently).
    fn skip_blank(&mut self) -> Option<()> {
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c'), _) => self.pos += 1,
                (Some(b'#'), _) => self.skip_line(),
                // `--` starts a comment only when followed by a space or a
                // control character (or the end).
                (Some(b'-'), Some(b'-')) if self.peek(2).is_none_or(|c| c <= b' ' || c == 0x7f) => {
                    self.skip_line()
                }
                (Some(b'/'), Some(b'*')) => {
                    // `/*!` and `/*M!` are executable comments.
                    if self.peek(2) == Some(b'!')
                        || (self.peek(2) == Some(b'M') && self.peek(3) == Some(b'!'))
                    {
                        return None;
                    }
                    let body = self.s.get(self.pos + 2..)?;
                    let end = body.windows(2).position(|w| w == b"*/")?;
                    self.pos += 2 + end + 2;
                }
                _ => return Some(()),
            }
        }
    }

    fn skip_line(&mut self) {
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            if c == b'\n' {
                break;
            }
        }
    }

    fn next(&mut self) -> Option<Token<'a>> {
        self.skip_blank()?;
        let start = self.pos;
        let Some(c) = self.peek(0) else {
            return Some(Token::End);
        };
        if c == b';' {
            self.pos += 1;
            return Some(Token::Semicolon);
        }
        if !is_ident(c) {
            return None;
        }
        while self.peek(0).is_some_and(is_ident) {
            self.pos += 1;
        }
        let word = &self.s[start..self.pos];
        if word.iter().all(u8::is_ascii_digit) {
            // A digit run that overflows u64 is not a thread id we know.
            let text = std::str::from_utf8(word).ok()?;
            return text.parse().ok().map(Token::Number);
        }
        // `1e3`, `0x10`, `5abc`: an expression or identifier, not ours.
        if word[0].is_ascii_digit() {
            return None;
        }
        Some(Token::Word(word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(target: KillTarget, hardness: Option<Hardness>, id: u64) -> KillStatement<'static> {
        KillStatement {
            target,
            hardness,
            id,
            process_kill: false,
            rest: b"",
        }
    }

    #[test]
    fn recognises_the_id_forms() {
        use Hardness::*;
        use KillTarget::*;
        let cases: &[(&str, KillStatement<'static>)] = &[
            ("KILL 5", stmt(Connection, None, 5)),
            ("kill 2147483649", stmt(Connection, None, 2147483649)),
            ("Kill Connection 7", stmt(Connection, None, 7)),
            ("KILL QUERY 7", stmt(Query, None, 7)),
            ("kill hard query 7", stmt(Query, Some(Hard), 7)),
            ("KILL SOFT CONNECTION 7", stmt(Connection, Some(Soft), 7)),
            ("KILL SOFT 7", stmt(Connection, Some(Soft), 7)),
            ("  \n\tKILL\n QUERY\t 9 ;  ", stmt(Query, None, 9)),
            ("KILL/*x*/9", stmt(Connection, None, 9)),
            (
                "/* lead */ KILL /* a */ QUERY /* b */ 9 /* c */",
                stmt(Query, None, 9),
            ),
            ("KILL QUERY 9 -- trailing", stmt(Query, None, 9)),
            ("KILL QUERY 9 --", stmt(Query, None, 9)),
            ("# hash\nKILL 9 # more", stmt(Connection, None, 9)),
            ("KILL 9;", stmt(Connection, None, 9)),
            (
                "KILL 18446744073709551615",
                stmt(Connection, None, u64::MAX),
            ),
        ];
        for (sql, want) in cases {
            assert_eq!(parse_statement(sql.as_bytes()), Some(*want), "{sql}");
        }
    }

    #[test]
    fn parse_statement_takes_only_the_literal_forms() {
        for sql in [
            "",
            "KILL",
            "KILL QUERY",
            "KILL QUERY ID 5",
            "KILL HARD QUERY ID 5",
            "KILL USER 'app'",
            "KILL USER app",
            "KILL CONNECTION_ID()",
            "KILL QUERY CONNECTION_ID()",
            "KILL 0x10",
            "KILL 1e3",
            "KILL 5abc",
            "KILL '5'",
            "KILL (5)",
            "KILL +5",
            "KILL -1",
            "SELECT 1; KILL 5",
            "KILL 5 6",
            "KILL QUERY QUERY 5",
            "KILL HARD SOFT 5",
            "KILLQUERY 5",
            "KILL QUERY5",
            "/*! KILL */ 5",
            "KILL /*!50000 QUERY */ 5",
            "KILL /*M! QUERY */ 5",
            "KILL 5 /* unterminated",
            "KILL 18446744073709551616",
            "KILL 5 --x",
            "SELECT 'KILL 5'",
            "KILLS 5",
        ] {
            assert_eq!(parse_statement(sql.as_bytes()), None, "{sql:?}");
        }
    }

    #[test]
    fn a_kill_first_in_a_multi_statement_keeps_the_rest() {
        let k = parse_statement(b"kill 2147483650; select sleep(0.05)").unwrap();
        assert_eq!(k.id, 2147483650);
        assert_eq!(k.rest, b" select sleep(0.05)");
        let k = parse_statement(b"KILL QUERY 7 /* c */ ;;").unwrap();
        assert_eq!((k.target, k.rest), (KillTarget::Query, &b";"[..]));
        // A lone KILL with trailing blanks has no rest.
        assert_eq!(parse_statement(b"KILL 7; -- done\n ").unwrap().rest, b"");
    }

    #[test]
    fn show_processlist() {
        assert_eq!(parse_show_processlist(b"show processlist"), Some(false));
        assert_eq!(
            parse_show_processlist(b"SHOW FULL PROCESSLIST;"),
            Some(true)
        );
        assert_eq!(
            parse_show_processlist(b"/* x */ Show\n Full -- y\n ProcessList"),
            Some(true)
        );
        for sql in [
            "SHOW PROCESSLIST LIKE 'x'",
            "SHOW FULL",
            "SHOW FULL FULL PROCESSLIST",
            "SELECT * FROM information_schema.PROCESSLIST",
            "SHOW /*! FULL */ PROCESSLIST",
            "SHOW PROCESSLIST; SELECT 1",
        ] {
            assert_eq!(parse_show_processlist(sql.as_bytes()), None, "{sql}");
        }
    }

    #[test]
    fn com_process_kill_is_kill_connection() {
        let mut p = vec![COM_PROCESS_KILL];
        p.extend_from_slice(&0x8000_0001u32.to_le_bytes());
        let k = parse_command(&p).unwrap();
        assert_eq!(k.id, 0x8000_0001);
        assert_eq!(k.target, KillTarget::Connection);
        assert!(k.process_kill);
        assert_eq!(k.to_payload(42), [COM_PROCESS_KILL, 42, 0, 0, 0]);
        // Wrong length or another command: not ours.
        assert_eq!(parse_command(&[COM_PROCESS_KILL, 1, 0, 0]), None);
        assert_eq!(parse_command(&[COM_PROCESS_KILL, 1, 0, 0, 0, 0]), None);
        assert_eq!(parse_command(&[0x03]), None);
        assert_eq!(parse_command(&[]), None);
        assert_eq!(parse_command(b"\x16KILL 5"), None);
    }

    #[test]
    fn rewrite_keeps_the_form() {
        let k = parse_command(b"\x03kill soft query 2147483650").unwrap();
        assert_eq!(k.to_payload(17), b"\x03KILL SOFT QUERY 17");
        let k = parse_command(b"\x03KILL 2147483650").unwrap();
        assert_eq!(k.to_payload(17), b"\x03KILL CONNECTION 17");
        assert_eq!(parse_statement(k.to_query(17).as_bytes()).unwrap().id, 17);
    }

    fn class(payload: &[u8]) -> Option<KillCommand<'_>> {
        classify_command(payload)
    }

    fn query(sql: &str) -> Vec<u8> {
        let mut p = vec![COM_QUERY];
        p.extend_from_slice(sql.as_bytes());
        p
    }

    #[test]
    fn every_other_kill_is_unmappable() {
        for sql in [
            "KILL QUERY 147099+0",
            "KILL QUERY (5)",
            "KILL QUERY USER bench",
            "kill user 'bench'@'%'",
            "KILL HARD QUERY ID 12",
            "KILL CONNECTION_ID() + 0",
            "KILL CONNECTION_ID(); KILL 5",
            "KILL db.CONNECTION_ID()",
            "KILL 0x10",
            "KILL '5'",
            "/*!KILL QUERY 5*/",
            "/*!100000 KILL QUERY 5 */",
            "/*M!100000 KILL QUERY 5 */",
            "/*!99999 KILL 5 */",
            "KILL /*!QUERY*/ 5",
            "KILL /*M! QUERY */ 5",
            "SELECT 1; KILL 5",
            "KILL 5; KILL USER x",
            "DO 1; /*!KILL QUERY */ 5",
            "BEGIN NOT ATOMIC KILL QUERY 5; END",
            "CREATE PROCEDURE p() KILL 5",
            "PREPARE s FROM 'KILL QUERY 5'",
            "PREPARE s FROM \"kill 5\"",
            "EXECUTE IMMEDIATE 'KILL QUERY 5'",
            "execute immediate concat('x', 'y'), 'kill 5'",
            // Where strings end depends on sql_mode: a KILL in code under
            // any reading counts.
            "SELECT '\\' ; KILL 5 -- '",
            "SELECT \"a\\\" ; KILL 5 -- \"",
            "/*! SELECT 1; KILL 5 */",
        ] {
            assert_eq!(class(&query(sql)), Some(KillCommand::Unmappable), "{sql:?}");
        }
        // COM_PROCESS_KILL of another length: the server reads four bytes.
        assert_eq!(
            class(&[COM_PROCESS_KILL, 1, 0, 0, 0, 9]),
            Some(KillCommand::Unmappable)
        );
        assert_eq!(class(&[COM_PROCESS_KILL, 1]), Some(KillCommand::Unmappable));
        // A prepared KILL takes the id as a parameter.
        assert_eq!(class(b"\x16KILL QUERY ?"), Some(KillCommand::Unmappable));
    }

    #[test]
    fn text_that_only_spells_kill_is_not_a_kill() {
        for sql in [
            "SELECT 'KILL 5'",
            "SELECT * FROM skills WHERE killed = 1",
            "SELECT `kill` FROM t",
            "SELECT t.kill FROM t",
            "SELECT 1 -- KILL 5",
            "SELECT 1 /* KILL 5 */",
            "SELECT @kill",
            "PREPARE s FROM 'SELECT * FROM skills'",
            "INSERT INTO log VALUES ('it''s a kill')",
            "SELECT 'it\\'s a kill'",
        ] {
            assert_eq!(class(&query(sql)), None, "{sql:?}");
        }
        assert_eq!(class(b"\x16SELECT * FROM skills"), None);
        assert_eq!(class(b"\x0eKILL 5"), None);
    }

    #[test]
    fn a_kill_of_the_own_connection_goes_to_the_server() {
        for sql in [
            "KILL CONNECTION CONNECTION_ID()",
            "kill query connection_id ( ) ;",
            "KILL HARD QUERY /* c */ CONNECTION_ID()",
            "KILL CONNECTION_ID()",
        ] {
            assert_eq!(
                class(&query(sql)),
                Some(KillCommand::OwnConnection),
                "{sql:?}"
            );
        }
    }

    #[test]
    fn the_literal_forms_are_mapped() {
        let Some(KillCommand::Mapped(k)) = class(b"\x03KILL QUERY 7; SELECT 1") else {
            panic!("not mapped")
        };
        assert_eq!(
            (k.target, k.id, k.rest),
            (KillTarget::Query, 7, &b" SELECT 1"[..])
        );
        let mut p = vec![COM_PROCESS_KILL];
        p.extend_from_slice(&9u32.to_le_bytes());
        assert!(matches!(class(&p), Some(KillCommand::Mapped(k)) if k.id == 9));
    }

    #[test]
    fn the_privileged_block_asks_the_server_for_the_killers_grants() {
        let k = parse_statement(b"KILL QUERY 2147483650").unwrap();
        let sql = k.to_privileged_query(Some(17), k.id);
        assert!(
            sql.starts_with("BEGIN NOT ATOMIC DECLARE EXIT HANDLER FOR 1094"),
            "{sql}"
        );
        assert!(
            sql.contains("PRIVILEGE_TYPE IN ('SUPER', 'CONNECTION ADMIN'))"),
            "{sql}"
        );
        assert!(
            sql.contains("'You are not owner of thread 2147483650'"),
            "{sql}"
        );
        assert!(sql.ends_with("END IF; KILL QUERY 17; END"), "{sql}");
        let idle = k.to_privileged_query(None, k.id);
        assert!(idle.ends_with("END IF; DO 0; END"), "{idle}");
    }
}

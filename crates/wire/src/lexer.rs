//! A statement lexer and classifier for COM_QUERY texts, in the manner of
//! MySQL Router: a lexer, not a parser. It tokenizes the text, splits it on
//! top-level `;`, and puts each statement in a [`Class`] that transaction
//! pooling can act on.
//!
//! # API for the proxy
//!
//! - [`classify`]`(sql: &[u8], opts: &LexOptions) -> Vec<Statement>`: one
//!   [`Statement`] (`range` into `sql`, `class`) per `;`-separated statement.
//!   The ranges cover `sql` exactly, with one `;` byte between neighbours, so
//!   the split round-trips. A text the lexer cannot split safely comes back
//!   as a single statement of class `Pin(Pin::Unsplittable)`.
//! - [`classify_into`]: the same into a caller's vectors, reused from one
//!   text to the next (no allocation for most statements).
//! - [`first_pin`]`(&[Statement]) -> Option<Pin>`: the pin of the first
//!   pinning statement, if any.
//! - [`Statement::reads_last_insert_id`]: the statement reads the
//!   connection's LAST_INSERT_ID (`LAST_INSERT_ID()`, `@@last_insert_id`,
//!   `@@identity`), in code only.
//! - [`Statement::call`]: the statement is a `CALL` (leading keyword, after
//!   comments and executable-comment markers): the proxy pins on it, since
//!   the procedure's body is out of the lexer's sight.
//! - [`LexOptions`]: `no_backslash_escapes` (from the backend's status flag
//!   SERVER_STATUS_NO_BACKSLASH_ESCAPES), `ansi_quotes` (from `sql_mode`),
//!   `ascii_safe_charset` (false for big5, cp932, gbk, sjis, gb18030, whose
//!   multi-byte characters may contain `\` bytes), `server` (the backend's
//!   flavour and version, for version-gated comments). `Default` is the
//!   server default (backslash escapes, no ANSI_QUOTES, a safe charset) on
//!   a server not known yet.
//! - [`Class::explains_state_change`]: a statement of this class accounts
//!   for MariaDB's SESSION_TRACK_STATE_CHANGE block (`state 1`) by itself
//!   (plain SET, USE, SET NAMES, transaction control); the proxy pins on a
//!   `state 1` block that no statement of the text explains.
//! - [`Pin::as_str`]: a stable label for the `blocked_by` metric.
//!
//! The same classifier applies to the SQL of a binary COM_STMT_PREPARE: what
//! a prepared statement does when executed is what its text says.
//!
//! # What pins, and why
//!
//! A session is pinned to its backend connection for state that the
//! session-state trackers do not report, or that cannot be moved:
//!
//! | [`Pin`] | statements | why |
//! |---|---|---|
//! | `UserVariableWrite` | `SET @x = …`, `@x := …` anywhere, `… INTO @x`, `CALL p(@x)`, `LOAD DATA … (@x)` | MariaDB 10.11 has no user-variable tracker (and `SELECT @x := 1` does not even raise the state-change flag); OUT parameters and LOAD DATA's column list write the variable |
//! | `TemporaryTable` | `CREATE [OR REPLACE] TEMPORARY TABLE/SEQUENCE`, `DROP TEMPORARY TABLE` | the table lives in the connection |
//! | `LockFunction` | `GET_LOCK(`, `RELEASE_LOCK(`, `RELEASE_ALL_LOCKS(` | named locks belong to the connection. `IS_FREE_LOCK` and `IS_USED_LOCK` only read the server-wide lock table, and an unpinned session holds no lock, so they give the same answer on any connection: not pinned |
//! | `LockTables` | `LOCK TABLE[S] …` | until [`Class::UnlockTables`] |
//! | `FlushTablesWithReadLock` | `FLUSH TABLES … WITH READ LOCK`, `FLUSH TABLES … FOR EXPORT` | until [`Class::UnlockTables`] |
//! | `BackupLock` | `BACKUP STAGE …`, `BACKUP LOCK …`, `LOCK INSTANCE FOR BACKUP` | held by the connection |
//! | `SqlCalcFoundRows` | `SQL_CALC_FOUND_ROWS` anywhere | the following `FOUND_ROWS()` must run on the same connection |
//! | `TextPrepare` | `PREPARE`, `EXECUTE`, `EXECUTE IMMEDIATE`, `DEALLOCATE PREPARE`, `DROP PREPARE` | SQL-level prepared statements live in the connection; `EXECUTE IMMEDIATE` runs SQL this lexer never sees |
//! | `Handler` | `HANDLER …` | an open handler lives in the connection |
//! | `Xa` | `XA …` | XA transactions outlive the status flags' notion of a transaction |
//! | `SetRole` | `SET ROLE …` | not tracked, and MariaDB's COM_RESET_CONNECTION keeps it |
//! | `PreviousStatementState` | `LAST_INSERT_ID()`, `ROW_COUNT()`, `FOUND_ROWS()` other than the plain `SELECT f()` forms; `LAST_INSERT_ID(expr)` in a `SELECT`; `@@warning_count`, `@@error_count`, `@@last_insert_id`, `@@identity`; `GET DIAGNOSTICS`; a sequence's `LASTVAL(s)` / `PREVIOUS VALUE FOR s` | the answer depends on earlier statements of the connection. The proxy need not pin when it still holds the backend that ran the previous statement (in a transaction, or kept until the next statement) |
//! | `UnrecognizedSet` | a `SET` this lexer cannot take apart | it cannot be replayed |
//! | `Unsplittable` | unterminated quotes or comments, `;` inside an executable comment, a version-gated comment the server may read either way, anonymous compound statements (`BEGIN NOT ATOMIC`, `IF`, `WHILE`, `LOOP`, `REPEAT`, `CASE`, `FOR`, `DECLARE`, `label:`), a routine definition followed by text the lexer cannot delimit, bytes ≥ 0x80 in an unsafe multi-byte charset | the lexer cannot tell where statements end |
//!
//! Not pinned: reads of `@@var` and of `@x` (an unpinned session has no user
//! variables, and pooled connections carry none), a plain `SET` of system
//! variables ([`Class::Set`], replayed), `SET NAMES` / `SET CHARACTER SET`,
//! `USE`, `SET SESSION TRANSACTION …` (session variables), `SET PASSWORD`,
//! `SET DEFAULT ROLE`, `SET GLOBAL …`, `IS_FREE_LOCK`, `IS_USED_LOCK`,
//! `LAST_INSERT_ID(expr)` outside a `SELECT` (the OK packet carries its value).
//!
//! `SET TRANSACTION …` without a scope sets the characteristics of the next
//! transaction only ([`Class::SetTransaction`] with `scope: None`): the proxy
//! keeps the backend until that transaction has ended (the transaction
//! characteristics tracker reads empty again), rather than replaying it.
//!
//! Executable comments are read as the connected server reads them
//! ([`LexOptions::server`], rules in `version_gate.rs`): `/*! … */` and a
//! version the server runs (`/*!40000 …`, MariaDB's `/*M!100100 …`) are
//! code, so a gated `SQL_CALC_FOUND_ROWS` pins; a version it skips
//! (`/*!999999 …`, and on MariaDB the MySQL-only `/*!50700`–`/*!99999`)
//! is a comment, so `/*!999999 ' */ SET @x = 1 /* ' */` is a `SET`. A gate
//! the lexer cannot decide for this server (a server not known yet, a
//! six-digit version on MySQL) makes the text `Unsplittable`. Optimizer
//! hints (`/*+ … */`) and ordinary comments are skipped.

use std::ops::Range;

/// How the server lexes the text: these follow the connection's `sql_mode`
/// and character set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LexOptions {
    /// `sql_mode` has NO_BACKSLASH_ESCAPES (the server reports it in every
    /// status word): `\` is an ordinary character in strings.
    pub no_backslash_escapes: bool,
    /// `sql_mode` has ANSI_QUOTES: `"…"` is an identifier, in which `\` is
    /// an ordinary character.
    pub ansi_quotes: bool,
    /// `ansi_quotes` is known (MariaDB reports it in every status word,
    /// MySQL does not): when false, a `"…"` that reads differently either
    /// way makes the text unsplittable.
    pub ansi_quotes_known: bool,
    /// The client character set never puts an ASCII byte inside a
    /// multi-byte character (utf8mb4, latin1, … but not big5, cp932, gbk,
    /// sjis, gb18030). When false, any byte ≥ 0x80 makes the text
    /// unsplittable.
    pub ascii_safe_charset: bool,
    /// A byte ≥ 0x80 is part of a word, as in UTF-8 and ASCII. False for
    /// single-byte sets such as latin1, where 0xA0 is whitespace: such a
    /// byte outside quotes (or after `--`) makes the text unsplittable.
    pub high_bytes_in_words: bool,
    /// The connected server: which version-gated comments it runs.
    pub server: Server,
    /// Stored functions the operator declared read-only
    /// (`--read-only-functions`): upper-cased, `NAME` (any schema) or
    /// `SCHEMA.NAME`. A call of one is no [`Pin::StoredFunction`]: the
    /// operator vouches that it sets no user variable and takes no lock.
    /// `'static` because the list is the process's configuration, read once.
    pub read_only_functions: &'static [Box<str>],
}

impl Default for LexOptions {
    fn default() -> Self {
        LexOptions {
            no_backslash_escapes: false,
            ansi_quotes: false,
            ansi_quotes_known: true,
            ascii_safe_charset: true,
            high_bytes_in_words: true,
            server: Server::Unknown,
            read_only_functions: &[],
        }
    }
}

/// Why a statement pins the session to its backend connection (see the
/// module docs for the statements behind each reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pin {
    UserVariableWrite,
    TemporaryTable,
    LockFunction,
    LockTables,
    FlushTablesWithReadLock,
    BackupLock,
    SqlCalcFoundRows,
    TextPrepare,
    Handler,
    Xa,
    SetRole,
    PreviousStatementState,
    UnrecognizedSet,
    Unsplittable,
    /// A call of a stored function (qualified, or a name the server does
    /// not resolve as its own): the routine may set user variables or
    /// take named locks, which the server does not report for a result
    /// set or a lock.
    StoredFunction,
}

impl Pin {
    /// A stable snake_case label (metrics `blocked_by`, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Pin::UserVariableWrite => "user_variable",
            Pin::TemporaryTable => "temporary_table",
            Pin::LockFunction => "lock_function",
            Pin::LockTables => "lock_tables",
            Pin::FlushTablesWithReadLock => "flush_tables_with_read_lock",
            Pin::BackupLock => "backup_lock",
            Pin::SqlCalcFoundRows => "sql_calc_found_rows",
            Pin::TextPrepare => "text_prepare",
            Pin::Handler => "handler",
            Pin::Xa => "xa",
            Pin::SetRole => "set_role",
            Pin::PreviousStatementState => "previous_statement_state",
            Pin::UnrecognizedSet => "unrecognized_set",
            Pin::Unsplittable => "unsplittable",
            Pin::StoredFunction => "stored_function",
        }
    }

    /// Every reason, for metrics that list all labels.
    pub const ALL: [Pin; 15] = [
        Pin::UserVariableWrite,
        Pin::TemporaryTable,
        Pin::LockFunction,
        Pin::LockTables,
        Pin::FlushTablesWithReadLock,
        Pin::BackupLock,
        Pin::SqlCalcFoundRows,
        Pin::TextPrepare,
        Pin::Handler,
        Pin::Xa,
        Pin::SetRole,
        Pin::PreviousStatementState,
        Pin::UnrecognizedSet,
        Pin::Unsplittable,
        Pin::StoredFunction,
    ];
}

/// Scope of a system variable assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `SESSION`, `LOCAL`, `@@session.`, `@@local.`, `@@x` or no keyword.
    Session,
    /// `GLOBAL`, `@@global.` (and MySQL's `PERSIST`, `PERSIST_ONLY`).
    Global,
}

/// One item of a replayable `SET` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetItem {
    /// A system variable. `name` is lower-cased and unquoted; `value` is the
    /// expression's source text (e.g. `'STRICT_ALL_TABLES'`, `0`, `DEFAULT`,
    /// `CONCAT(@@sql_mode, ',X')`). Prefer the value the system-variables
    /// tracker reports after the statement: it is the evaluated one (and in
    /// the SQL of a binary COM_STMT_PREPARE the value may be a `?`).
    Variable {
        scope: Scope,
        name: String,
        value: String,
    },
    /// `SET NAMES cs [COLLATE coll]`; `charset` None for `SET NAMES DEFAULT`.
    /// Both lower-cased and unquoted.
    Names {
        charset: Option<String>,
        collation: Option<String>,
    },
    /// `SET CHARACTER SET cs` / `SET CHARSET cs`; None for DEFAULT.
    CharacterSet(Option<String>),
}

/// What one statement means for transaction pooling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// Only whitespace and comments (e.g. after a trailing `;`).
    Empty,
    /// Nothing the proxy needs to know.
    Plain,
    /// The session must keep its backend connection (see [`Pin`]).
    Pin(Pin),
    /// A `SET` of system variables, `NAMES` and `CHARACTER SET` only; to be
    /// recorded in the session and replayed on another backend. Items with
    /// [`Scope::Global`] change no session state.
    Set(Vec<SetItem>),
    /// `SET [GLOBAL|SESSION] TRANSACTION …`. `scope: None` means the next
    /// transaction only; `characteristics` is the text after TRANSACTION,
    /// e.g. `ISOLATION LEVEL SERIALIZABLE`, `READ ONLY`.
    SetTransaction {
        scope: Option<Scope>,
        characteristics: String,
    },
    /// `USE schema` (unquoted).
    Use(String),
    /// `BEGIN [WORK]`, `START TRANSACTION [READ ONLY|READ WRITE|WITH
    /// CONSISTENT SNAPSHOT, …]`.
    Begin,
    /// `COMMIT [WORK] [AND [NO] CHAIN] [[NO] RELEASE]`. With `release` the
    /// server closes the connection after its OK.
    Commit { chain: bool, release: bool },
    /// `ROLLBACK [WORK] [AND [NO] CHAIN] [[NO] RELEASE]` (not `ROLLBACK TO
    /// SAVEPOINT`, which is Plain).
    Rollback { chain: bool, release: bool },
    /// `UNLOCK TABLE[S]`: ends `LockTables` and `FlushTablesWithReadLock`.
    UnlockTables,
    /// Exactly `SELECT LAST_INSERT_ID() [[AS] alias]`: the proxy can answer
    /// from the session's own OK packets. `column` is the result's column
    /// name: the alias, or the expression as written (as the server names it).
    LastInsertId { column: String },
    /// Exactly `SELECT ROW_COUNT() [[AS] alias]`.
    RowCount { column: String },
    /// Exactly `SELECT FOUND_ROWS() [[AS] alias]`.
    FoundRows { column: String },
    /// `SHOW WARNINGS [LIMIT …]`.
    ShowWarnings,
    /// `SHOW ERRORS [LIMIT …]`.
    ShowErrors,
    /// `SHOW COUNT(*) WARNINGS`.
    ShowCountWarnings,
    /// `SHOW COUNT(*) ERRORS`.
    ShowCountErrors,
}

impl Class {
    /// Does this statement account for a SESSION_TRACK_STATE_CHANGE block
    /// (`state 1`) by itself? MariaDB 10.11 sends that block on every SET
    /// of a session variable (user variables included), on USE, on
    /// temporary tables and on SQL PREPARE/DEALLOCATE; plain SETs and USE
    /// are tracked or replayed, so they must not pin.
    ///
    /// Look at the block, not at SERVER_SESSION_STATE_CHANGED: the flag also
    /// comes with only transaction-state or characteristics blocks (BEGIN,
    /// any statement in a transaction, COMMIT, LOCK/UNLOCK TABLES, SET
    /// TRANSACTION), which explain themselves. The proxy pins (as
    /// "unexplained state change") when an OK has the block and no statement
    /// of the text explains it.
    pub fn explains_state_change(&self) -> bool {
        matches!(
            self,
            Class::Set(_)
                | Class::SetTransaction { .. }
                | Class::Use(_)
                | Class::Begin
                | Class::Commit { .. }
                | Class::Rollback { .. }
                | Class::UnlockTables
                | Class::Empty
        )
    }

    /// The pin reason, for `Class::Pin`.
    pub fn pin(&self) -> Option<Pin> {
        match self {
            Class::Pin(p) => Some(*p),
            _ => None,
        }
    }
}

/// One statement of a COM_QUERY text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// Its bytes in the text, without the terminating `;`.
    pub range: Range<usize>,
    pub class: Class,
    /// It reads the connection's LAST_INSERT_ID: `LAST_INSERT_ID()`,
    /// `@@last_insert_id` or `@@identity` anywhere (e.g. `INSERT INTO child
    /// VALUES (LAST_INSERT_ID(), …)`), the plain `SELECT LAST_INSERT_ID()`
    /// included. A proxy that sets the session's own value on the connection
    /// first (`DO LAST_INSERT_ID(n)`) should key that on this flag: a plain
    /// text search for LAST_INSERT_ID misses `@@identity` and matches
    /// strings and comments. (Outside the plain form these reads are still
    /// classified `Pin(PreviousStatementState)`.)
    pub reads_last_insert_id: bool,
    /// Its class is `Pin(PreviousStatementState)` for `LAST_INSERT_ID()`
    /// reads alone (nothing else in it pins, and it reads nothing else an
    /// earlier statement left): a proxy that sets the session's own value
    /// first need not pin.
    pub only_last_insert_id_reads: bool,
    /// It is a `CALL` (its leading keyword, after any `(`, comments and
    /// executable-comment markers): the procedure's body, which this lexer
    /// never sees, may do anything that would pin. The class says only
    /// what the call's own text does (`CALL p(@x)` writes `@x`).
    pub call: bool,
}

/// The first pin among `statements`, in text order.
pub fn first_pin(statements: &[Statement]) -> Option<Pin> {
    statements.iter().find_map(|s| s.class.pin())
}

/// Why a text cannot be tokenized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LexError {
    #[error("unterminated string")]
    UnterminatedString,
    #[error("unterminated quoted identifier")]
    UnterminatedIdentifier,
    #[error("unterminated comment")]
    UnterminatedComment,
    #[error("';' or a nested executable comment inside an executable comment")]
    OddExecutableComment,
    #[error("non-ASCII byte in a character set whose multi-byte characters may contain quotes")]
    UnsafeMultibyte,
    #[error("a version-gated comment this server may read either way")]
    UnsureVersionComment,
    #[error("a \"…\" that reads differently with and without ANSI_QUOTES, which this server does not report")]
    UnsureQuotes,
    #[error("a byte whose meaning depends on the client character set outside quotes")]
    UnsureByte,
}

mod classifier;
mod native_functions;
mod stored_calls;
mod tokens;
mod version_gate;

pub use classifier::{classify, classify_into};
pub use tokens::{tokenize, tokenize_into, Token, TokenKind};
pub use version_gate::Server;

#[cfg(test)]
mod tests;

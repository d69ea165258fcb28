//! Transaction pooling (`--pooling transaction`): what a session carries
//! between backend connections, and when it may let its connection go.
//!
//! A session in transaction mode holds a backend connection only while a
//! statement or a transaction runs. After each answer the session asks
//! [`TxState::releasable`]: the connection goes back to the pool, without a
//! reset, when no transaction is open (SERVER_STATUS_IN_TRANS clear in the
//! last OK/EOF), nothing pins the session, and the last statement left no
//! warnings (SHOW WARNINGS must reach the connection that made them).
//!
//! State the proxy can carry to the next connection is *replayed* on lease:
//! - the schema (COM_INIT_DB, `USE`), applied by the pool when it differs;
//! - session system variables set with a plain `SET` of constants (and
//!   `SET NAMES`, `SET SESSION TRANSACTION`): kept per variable
//!   (`tx_settings::Settings`); a connection goes back carrying the
//!   session's settings, the pool prefers one whose settings match (all
//!   PyMySQL clients after their `SET AUTOCOMMIT = 0`), else any idle one
//!   of the key gets one `SET` of the differences, never a reset;
//! - LAST_INSERT_ID(): the server's answer to a proxy-internal
//!   `SELECT LAST_INSERT_ID()` run on the connection before it goes back,
//!   after a statement whose OK packet carried an insert id or that called
//!   LAST_INSERT_ID(expr) (the OK packet reports an explicit AUTO_INCREMENT
//!   value too, which does not set it); set on the next connection
//!   (`DO LAST_INSERT_ID(n)`) before a statement that reads it.
//!
//! State it cannot carry *pins* the session to its connection until the
//! session ends (then the connection is reset, as in session pooling): see
//! [`PinReason`]. Statements are classified by [`classify_query`], a
//! conservative first pass that pins whatever it does not recognise; the
//! statement lexer (`wire::lexer`) can replace it behind the same [`Effect`].
//!
//! This file holds the session's state ([`TxState`]) and the pin reasons;
//! the classification of a statement's text is in `multiplex/classify.rs`.

use crate::causal::{last_gtid_of, CausalConfig, CausalWait, SessionGtids};
use crate::client_charset;
pub use crate::ids::LeaseSetup;
use crate::tx_settings::Settings;
use wire::constants::*;
use wire::lexer::{self, Class, LexOptions, Pin, Scope, Server, SetItem};
use wire::ok_packet::{parse_ok, OkInfo};
use wire::state_strip::ClientView;
use wire::tracker::Completed;

/// Longest statement the session reads to classify; a longer one pins
/// (the tracker keeps this many bytes of each command).
pub const CAPTURE_LIMIT: usize = 64 * 1024;

/// ER_NOT_SUPPORTED_YET (SQLSTATE 42000).
pub const ER_NOT_SUPPORTED_YET: u16 = 1235;

/// Most variables a session keeps for replay; more pin it.
const MAX_SETTINGS: usize = 64;

/// Why a session keeps its backend connection until it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PinReason {
    /// `SET @x`, `@x :=`, `SELECT ... INTO @x`.
    UserVariable,
    /// CREATE/DROP TEMPORARY TABLE.
    TemporaryTable,
    /// GET_LOCK and the other named-lock functions.
    LockFunction,
    /// LOCK TABLES, until UNLOCK TABLES (or a BEGIN, which releases the
    /// table locks too).
    LockTables,
    /// FLUSH TABLES WITH READ LOCK.
    FlushReadLock,
    /// SQL_CALC_FOUND_ROWS.
    FoundRows,
    /// A statement that reads what an earlier one left on the connection
    /// (LAST_INSERT_ID(expr) in a SELECT, `@@identity`, GET DIAGNOSTICS,
    /// LASTVAL(), FOUND_ROWS()/ROW_COUNT() in an expression): it ran on the
    /// right connection, and the next one must too.
    PreviousStatement,
    /// Text PREPARE / EXECUTE / DEALLOCATE.
    TextPrepare,
    /// COM_STMT_PREPARE (binary prepared statements, cursors and long data).
    PreparedStatement,
    /// Several statements in one COM_QUERY.
    MultiStatement,
    /// The server raised SESSION_STATE_CHANGED for a statement the
    /// classifier took as stateless.
    StateChange,
    /// COM_SET_OPTION (multi-statements switched on the connection).
    SetOption,
    /// `SET TRANSACTION` (next transaction only), `SET ROLE`, XA, HANDLER,
    /// CALL, `SET GLOBAL` mixed with session settings: state the proxy
    /// does not follow.
    SessionCommand,
    /// A statement the classifier does not know, or one too long to read.
    Unclassified,
    /// More `SET` statements than the proxy keeps for replay.
    TooManySettings,
    /// The client leg is compressed (CLIENT_COMPRESS): such a session
    /// keeps its connection in this version.
    CompressedClient,
    /// A statement called a stored function, which may set user
    /// variables or take named locks the server does not report.
    StoredFunction,
}

impl PinReason {
    pub const ALL: [PinReason; 17] = [
        PinReason::UserVariable,
        PinReason::TemporaryTable,
        PinReason::LockFunction,
        PinReason::LockTables,
        PinReason::FlushReadLock,
        PinReason::FoundRows,
        PinReason::TextPrepare,
        PinReason::PreparedStatement,
        PinReason::MultiStatement,
        PinReason::StateChange,
        PinReason::SetOption,
        PinReason::SessionCommand,
        PinReason::Unclassified,
        PinReason::TooManySettings,
        PinReason::CompressedClient,
        PinReason::PreviousStatement,
        PinReason::StoredFunction,
    ];

    /// The `reason` label of `ringgate_sessions_pinned_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            PinReason::UserVariable => "user_variable",
            PinReason::TemporaryTable => "temporary_table",
            PinReason::LockFunction => "lock_function",
            PinReason::LockTables => "lock_tables",
            PinReason::FlushReadLock => "flush_read_lock",
            PinReason::FoundRows => "found_rows",
            PinReason::TextPrepare => "text_prepare",
            PinReason::PreparedStatement => "prepared_statement",
            PinReason::MultiStatement => "multi_statement",
            PinReason::StateChange => "state_change",
            PinReason::SetOption => "set_option",
            PinReason::SessionCommand => "session_command",
            PinReason::Unclassified => "unclassified",
            PinReason::TooManySettings => "too_many_settings",
            PinReason::CompressedClient => "compressed_client",
            PinReason::PreviousStatement => "previous_statement_state",
            PinReason::StoredFunction => "stored_function",
        }
    }

    pub fn index(self) -> usize {
        PinReason::ALL
            .iter()
            .position(|r| *r == self)
            .unwrap_or(PinReason::ALL.len() - 1)
    }
}

/// A transaction-pooled session's own state.
#[derive(Debug, Default)]
pub struct TxState {
    pinned: Option<PinReason>,
    /// The settings to replay on another connection.
    settings: Settings,
    /// The handshake collation of the session's pool key: a `SET NAMES` of
    /// it is no setting.
    collation: u8,
    /// The client negotiated CLIENT_SESSION_TRACK: its connections have the
    /// server's trackers on (`tx_settings::TRACKERS`) and its OK packets
    /// carry session-state blocks.
    session_track: bool,
    /// The schema as the session last selected it.
    schema: Option<String>,
    /// What LAST_INSERT_ID() returns in this session.
    last_insert_id: u64,
    /// A statement since the last answer may have changed LAST_INSERT_ID()
    /// to something its OK packet does not show (see `on_completed`): the
    /// connection is asked before it goes back.
    last_insert_id_unsure: bool,
    /// What ROW_COUNT() returns now: the last statement's affected rows
    /// (its OK packet), -1 after a result set or an error.
    row_count: i64,
    /// What FOUND_ROWS() returns now: the rows of the last result set.
    found_rows: u64,
    /// LOCK TABLES holds table locks on the connection until UNLOCK TABLES
    /// (or BEGIN): the session keeps it meanwhile.
    table_locks: bool,
    /// Warnings of the last statement: SHOW WARNINGS needs its connection.
    warnings: u16,
    /// Status flags after the last answer.
    status: u16,
    /// The last answer was an ERR: with autocommit off the server may have
    /// opened a transaction that no status flag reported.
    after_err: bool,
    /// A statement left warnings or an error on the connection since it
    /// was leased: its diagnostics area may still hold them (a statement
    /// that uses no table does not clear it, and its own count says 0), so
    /// it is reset before another session gets it. Also set by the
    /// client's own COM_RESET_CONNECTION, which turned the connection's
    /// trackers off.
    diagnostics_dirty: bool,
    /// `--tx-prepared-statements pin`: a binary statement command
    /// pins the session (its statement ids live on one connection).
    pub pin_prepared_statements: bool,
    /// The last statement text lexed: `lease_setup` lexes the command,
    /// `on_completed` reads the same statements back.
    lexed: Lexed,
    /// The client set a `session_track_*` variable itself: it gets every
    /// block the server sends from then on.
    own_trackers: bool,
    /// The backend server, whose version decides which version-gated
    /// comments are code.
    server: Server,
    /// What the client character set means to the lexer (`client_charset`).
    charset: client_charset::Class,
    /// `--read-only-functions`: stored functions that neither pin nor keep
    /// a read on the writer.
    read_only_functions: &'static [Box<str>],
    /// The connection was leased for a read (`--read-write-split`): it goes
    /// back after the command even with warnings, since a replica's
    /// connection must never run the session's next statement (a write
    /// there would fail with read_only's ERR 1290).
    read_lease: bool,
    /// `--transaction-replay`: the open transaction's statements
    /// (`crate::tx_replay`).
    replay: Option<Box<crate::tx_replay::TxRecord>>,
    /// Causal reads (`--causal-reads`; off: the connections do not track
    /// `last_gtid`): the GTIDs the session's reads on a replica wait for.
    gtids: SessionGtids,
    /// The client set the system-variables tracker itself, to a list
    /// without `last_gtid`: the session no longer learns its writes'
    /// GTIDs, so its reads go to the writer (see `causal_wait`).
    gtid_blind: bool,
}

impl TxState {
    pub fn new(
        schema: Option<String>,
        collation: u8,
        session_track: bool,
        server: Server,
        quoting: u16,
    ) -> TxState {
        TxState {
            schema,
            collation,
            session_track,
            server,
            charset: client_charset::of_collation(collation.into()),
            settings: Settings::initial(session_track, false),
            row_count: -1,
            // Until its first answer, the session reads statements in the
            // global sql_mode's quoting, as a backend login reported it.
            status: SERVER_STATUS_AUTOCOMMIT | quoting,
            ..TxState::default()
        }
    }

    /// Causal reads (`--causal-reads`): the session's connections track
    /// `last_gtid`, and its reads on a replica wait for what it (or the
    /// process) wrote.
    pub fn with_causal(mut self, cfg: &CausalConfig) -> TxState {
        self.gtids = SessionGtids::new(cfg);
        self.settings = Settings::initial(self.session_track, self.gtids.on());
        self
    }

    /// What a read leased to a replica waits for (None: nothing): the
    /// session's own GTIDs or the process's; a session that cannot learn
    /// its GTIDs any more is sent to the writer ([`CausalWait::Writer`]).
    fn causal_wait(&self) -> Option<CausalWait> {
        if self.gtid_blind {
            return Some(CausalWait::Writer);
        }
        self.gtids.wait()
    }

    /// Causal reads: the `last_gtid` the command's final OK reported (the
    /// statement's in autocommit, COMMIT's inside a transaction; none when
    /// nothing was binlogged).
    fn note_last_gtid(&mut self, c: &Completed) {
        if !self.gtids.on() || c.err || c.ok.is_none() {
            return;
        }
        if let Some(g) = state_blocks(c).and_then(|ok| last_gtid_of(ok.system_variables())) {
            self.gtids.note(g);
        }
    }

    #[cfg(test)]
    pub fn pinned(&self) -> Option<PinReason> {
        self.pinned
    }

    /// `--transaction-replay`: record the session's transactions, at most
    /// `max_bytes` of statement text each.
    pub fn record_transactions(&mut self, max_bytes: usize) {
        self.replay = Some(Box::new(crate::tx_replay::TxRecord::new(max_bytes)));
    }

    /// The open transaction's record (with `--transaction-replay`).
    pub fn replay_record(&self) -> Option<&crate::tx_replay::TxRecord> {
        self.replay.as_deref()
    }

    pub fn replay_record_mut(&mut self) -> Option<&mut crate::tx_replay::TxRecord> {
        self.replay.as_deref_mut()
    }

    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The session's own `wait_timeout` (see [`Settings::wait_timeout`]).
    pub fn wait_timeout(&self) -> Option<std::time::Duration> {
        self.settings.wait_timeout()
    }

    /// The settings a connection the session gives back carries.
    pub fn settings(&self) -> Settings {
        self.settings.clone()
    }

    /// How the server reads the session's next statement: its sql_mode's
    /// quoting as the last answer's status word reports it (MariaDB sets
    /// 0x8000 for ANSI_QUOTES; MySQL has no such flag), the client
    /// character set, the server's version.
    fn lex_options(&self) -> LexOptions {
        LexOptions {
            no_backslash_escapes: self.status & SERVER_STATUS_NO_BACKSLASH_ESCAPES != 0,
            ansi_quotes: self.status & SERVER_STATUS_ANSI_QUOTES != 0,
            ansi_quotes_known: matches!(self.server, Server::MariaDb(_)),
            ascii_safe_charset: self.charset.ascii_safe(),
            high_bytes_in_words: self.charset.high_bytes_in_words(),
            server: self.server,
            read_only_functions: self.read_only_functions,
        }
    }

    /// `--read-only-functions`, for the lexing of every statement.
    pub fn set_read_only_functions(&mut self, names: &'static [Box<str>]) {
        self.read_only_functions = names;
    }

    /// `--read-write-split`: where the command starting with `first` (the
    /// session's buffer, the lease's command) may run. A read only with
    /// autocommit on (with it off, any statement opens a transaction that
    /// later writes must share); the session holds no connection (it is
    /// parked: the caller's to know). Lexed once with [`Self::lease_setup`].
    /// Marks the lease as a read's until the connection goes back.
    pub fn route(&mut self, first: &[u8]) -> Route {
        let route = self.route_of(first);
        self.read_lease = route.is_read();
        route
    }

    fn route_of(&mut self, first: &[u8]) -> Route {
        if self.status & SERVER_STATUS_AUTOCOMMIT == 0 || self.pinned.is_some() {
            return Route::Writer;
        }
        let whole = wire::packet::split_packet(first)
            .filter(|(p, used)| *used == first.len() && p.seq == 0 && !p.has_continuation())
            .and_then(|(p, _)| p.payload.strip_prefix(&[COM_QUERY]));
        let Some(sql) = whole else {
            return Route::Writer;
        };
        let opts = self.lex_options();
        route_of(sql, self.lexed.get(sql, &opts), &opts)
    }

    /// The connection went back: the next lease is a read's only if
    /// [`Self::route`] says so again.
    pub fn end_read_lease(&mut self) {
        self.read_lease = false;
    }

    /// Pin the session for `reason` (the proxy's own decision, not a
    /// statement's); returns it if the session was not pinned yet.
    pub fn pin(&mut self, reason: PinReason) -> Option<PinReason> {
        if self.pinned.is_some() {
            return None;
        }
        self.pinned = Some(reason);
        Some(reason)
    }

    /// Learn from one finished command. Returns the reason when this
    /// command pinned the session (once: a pinned session stays pinned).
    pub fn on_completed(&mut self, c: &Completed) -> Option<PinReason> {
        // The statements `lease_setup` lexed: the server read the text in
        // the modes before it ran (a statement that changes sql_mode
        // changes how the next one reads, not itself).
        let opts = self.lex_options();
        self.status = c.status;
        let effect = (c.command == COM_QUERY).then(|| {
            c.text
                .as_deref()
                .map(|t| effect_of(self.lexed.get(t, &opts)))
        });
        self.note_diagnostics(c, &effect);
        self.note_row_count(c);
        self.note_last_insert_id(c);
        self.note_last_gtid(c);
        let pin = self.pin_of_command(c, effect, &opts);
        self.note_unlock_tables(c, &opts);
        self.lexed.trim();
        if c.command == COM_RESET_CONNECTION && !c.err {
            self.table_locks = false;
        }
        if pin == Some(PinReason::LockTables) {
            // Held until UNLOCK TABLES, not for the session; counted at
            // each LOCK TABLES that took locks.
            if c.err {
                return None;
            }
            self.table_locks = true;
            return self.pinned.is_none().then_some(PinReason::LockTables);
        }
        match (self.pinned, pin) {
            (None, Some(reason)) => {
                self.pinned = Some(reason);
                Some(reason)
            }
            _ => None,
        }
    }

    /// Whether the connection holds warnings (or an error) the client may
    /// still read: `effect` is the COM_QUERY's, if it was one.
    fn note_diagnostics(&mut self, c: &Completed, effect: &Option<Option<Effect>>) {
        // SHOW WARNINGS and friends read the diagnostics area without
        // clearing it: the hold for the statement before goes on. So do
        // the commands that run no statement (COM_PING, COM_STATISTICS,
        // COM_INIT_DB, a prepare...): MariaDB leaves the warnings of the
        // statement before readable after them, and mysql-connector's
        // `cursor()` pings between a statement and its SHOW WARNINGS.
        let runs_statement = matches!(
            c.command,
            COM_QUERY | COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE
        ) && *effect != Some(Some(Effect::Diagnostics));
        if runs_statement || c.err || c.warnings > 0 {
            // An error is a condition too (SHOW ERRORS): hold the
            // connection for the next statement as for warnings.
            self.warnings = if c.err { c.warnings.max(1) } else { c.warnings };
        }
        self.after_err = c.err;
        self.diagnostics_dirty |= self.warnings > 0;
    }

    /// ROW_COUNT() and FOUND_ROWS() as the server now answers them.
    fn note_row_count(&mut self, c: &Completed) {
        if c.command == COM_QUERY {
            if c.err {
                self.row_count = -1;
            } else if let Some(ok) = c.ok {
                self.row_count = i64::try_from(ok.affected_rows).unwrap_or(i64::MAX);
            } else if let Some(rows) = c.rows {
                self.row_count = -1;
                self.found_rows = rows;
            }
        }
    }

    /// What LAST_INSERT_ID() now returns, or that the server must be asked.
    fn note_last_insert_id(&mut self, c: &Completed) {
        if let Some(ok) = c.ok {
            if ok.last_insert_id != 0 {
                // A generated id, or the argument of LAST_INSERT_ID(expr):
                // both are what LAST_INSERT_ID() now returns. But an
                // explicit AUTO_INCREMENT value is reported here too and
                // leaves LAST_INSERT_ID() as it was: only the server knows
                // which it was, so it is asked (`take_last_insert_id_ask`).
                self.last_insert_id = ok.last_insert_id;
                self.last_insert_id_unsure = true;
            }
        }
        // LAST_INSERT_ID(expr) with an expression of 0 (or in a statement
        // that answers with a result set) sets it without an OK to show it.
        if c.command == COM_QUERY
            && !c.err
            && c.text.as_deref().is_some_and(mentions_last_insert_id)
        {
            self.last_insert_id_unsure = true;
        }
    }

    /// What the command does to the session: the reason it pins, if it
    /// does; what it changes that the proxy can replay is taken in here.
    fn pin_of_command(
        &mut self,
        c: &Completed,
        effect: Option<Option<Effect>>,
        opts: &LexOptions,
    ) -> Option<PinReason> {
        match c.command {
            COM_QUERY => self.pin_of_query(c, effect.flatten(), opts),
            COM_INIT_DB if !c.err => {
                self.schema = c
                    .text
                    .as_deref()
                    .and_then(|t| String::from_utf8(t.to_vec()).ok());
                self.schema.is_none().then_some(PinReason::Unclassified)
            }
            COM_INIT_DB | COM_PING | COM_STATISTICS | COM_FIELD_LIST | COM_PROCESS_INFO
            | COM_PROCESS_KILL | COM_REFRESH | COM_DEBUG | COM_CREATE_DB | COM_DROP_DB => None,
            COM_RESET_CONNECTION if !c.err => {
                self.forget_reset_session();
                None
            }
            COM_SET_OPTION => Some(PinReason::SetOption),
            // Statement ids are mapped to each connection's
            // (`session/prepared_commands.rs`); long data and open cursors hold
            // the connection there, not as a pin.
            COM_STMT_PREPARE
            | COM_STMT_EXECUTE
            | COM_STMT_FETCH
            | COM_STMT_SEND_LONG_DATA
            | COM_STMT_CLOSE
            | COM_STMT_RESET
            | COM_STMT_BULK_EXECUTE => self
                .pin_prepared_statements
                .then_some(PinReason::PreparedStatement),
            _ => Some(PinReason::Unclassified),
        }
    }

    /// What a COM_QUERY of `effect` does to the session (see
    /// [`Self::pin_of_command`]).
    fn pin_of_query(
        &mut self,
        c: &Completed,
        effect: Option<Effect>,
        opts: &LexOptions,
    ) -> Option<PinReason> {
        match effect {
            None => Some(PinReason::Unclassified),
            Some(Effect::Pin(reason)) => Some(reason),
            Some(Effect::SetVariables) if !c.err => {
                let tracked = tracked_variables(c);
                self.follow_charset(c.text.as_deref(), opts, &tracked);
                self.add_setting(c.text.as_deref(), opts, &tracked)
            }
            Some(Effect::Use(schema)) if !c.err => {
                self.schema = Some(schema);
                None
            }
            // Unexplained state: a user variable, a temporary table, a
            // prepared statement (the state_change tracker says so; a
            // transaction-state block alone is no such state). Without
            // the blocks, the flag alone pins. Only an OK answer counts:
            // a result set's EOF cannot carry blocks, and MariaDB leaves
            // the flag of the transaction state raised in it (a SELECT
            // inside a transaction) until the next OK.
            Some(Effect::Plain)
                if !c.err
                    && c.ok.is_some()
                    && c.status & SERVER_SESSION_STATE_CHANGED != 0
                    && state_blocks(c).is_none_or(|info| info.has_state_change_block()) =>
            {
                Some(PinReason::StateChange)
            }
            Some(_) => None,
        }
    }

    /// COM_RESET_CONNECTION succeeded: the session's state is the server's
    /// initial state again.
    fn forget_reset_session(&mut self) {
        // The server dropped the session's variables; the schema
        // stays (MariaDB keeps it across the reset). LAST_INSERT_ID()
        // is read back: the connection's known value changed.
        self.settings = Settings::initial(self.session_track, self.gtids.on());
        self.charset = client_charset::of_collation(self.collation.into());
        self.last_insert_id = 0;
        self.last_insert_id_unsure = true;
        // The reset turned the connection's trackers off too, the
        // proxy's net among them, while the session's settings say
        // they are on: the pool resets it before it is leased
        // again, and the next lease sets them.
        self.diagnostics_dirty = true;
    }

    /// Only a session holding table locks can end them (UNLOCK TABLES, or a
    /// statement that ends them implicitly).
    fn note_unlock_tables(&mut self, c: &Completed, opts: &LexOptions) {
        if self.table_locks && c.command == COM_QUERY && !c.err {
            if let Some(t) = c.text.as_deref() {
                if ends_table_locks(self.lexed.get(t, opts)) {
                    self.table_locks = false;
                }
            }
        }
    }

    /// A prepared statement (`--tx-prepared-statements move`) ran: what it
    /// did to the session is judged from its SQL as a COM_QUERY's would be,
    /// since the execute itself names only an id. What a COM_QUERY would
    /// pin for pins (CREATE TEMPORARY TABLE, a user variable, GET_LOCK...);
    /// a `SET` or `USE` pins too, as its values are parameters the proxy
    /// does not keep; so does an unexplained state change. Returns the
    /// reason when this pinned the session.
    pub fn on_statement_executed(&mut self, sql: &[u8], c: &Completed) -> Option<PinReason> {
        if c.err || self.pinned.is_some() {
            return None;
        }
        let reason = match classify_query(sql, &self.lex_options()) {
            Effect::Pin(reason) => reason,
            Effect::SetVariables | Effect::Use(_) => PinReason::SessionCommand,
            Effect::Plain
                if c.ok.is_some()
                    && c.status & SERVER_SESSION_STATE_CHANGED != 0
                    && state_blocks(c).is_none_or(|info| info.has_state_change_block()) =>
            {
                PinReason::StateChange
            }
            Effect::Plain | Effect::Diagnostics => return None,
        };
        self.pinned = Some(reason);
        Some(reason)
    }

    /// A `SET` ran: the client character set it leaves.
    fn follow_charset(
        &mut self,
        text: Option<&[u8]>,
        opts: &LexOptions,
        tracked: &[(String, String)],
    ) {
        let Some(text) = text else {
            return;
        };
        for st in self.lexed.get(text, opts) {
            if let Class::Set(items) = &st.class {
                self.charset = client_charset::after_set(self.charset, items, tracked);
            }
        }
    }

    fn add_setting(
        &mut self,
        text: Option<&[u8]>,
        opts: &LexOptions,
        tracked: &[(String, String)],
    ) -> Option<PinReason> {
        let text = text?;
        let statements = self.lexed.get(text, opts);
        match trackers_set(statements) {
            // The proxy's net: a session that turns it off keeps its
            // connection.
            Some(true) => return Some(PinReason::SessionCommand),
            // The client now gets what its own trackers report.
            Some(false) => self.own_trackers = true,
            None => {}
        }
        match settings_after(&self.settings, self.collation, statements, tracked) {
            Ok(next) if next.len_hint() > MAX_SETTINGS => Some(PinReason::TooManySettings),
            Ok(next) => {
                // Its own list replaces the proxy's: without `last_gtid`
                // the server reports no GTID to wait for.
                self.gtid_blind |= self.gtids.on() && !next.tracks_last_gtid();
                self.settings = next;
                None
            }
            // An expression (`CONCAT(@@sql_mode, ...)`) means something
            // else on a connection in another state.
            Err(_) => Some(PinReason::SessionCommand),
        }
    }

    /// `sql` is the plain `SELECT ROW_COUNT()` or `SELECT FOUND_ROWS()`
    /// (a session that holds no connection answers it from its own
    /// records): the column name as the client wrote it, and the value.
    pub fn answer_previous(&self, sql: &[u8]) -> Option<(String, i64)> {
        let text = std::str::from_utf8(sql).ok()?.trim();
        let text = text.strip_suffix(';').unwrap_or(text).trim_end();
        let (select, item) = text.split_at_checked(6)?;
        if !select.eq_ignore_ascii_case("SELECT") || !item.starts_with(char::is_whitespace) {
            return None;
        }
        let item = item.trim();
        // The item without its whitespace, in any case (compared in place:
        // this runs before every statement a parked session sends).
        let is = |want: &str| {
            let mut compact = item
                .chars()
                .filter(|c| !c.is_whitespace())
                .map(|c| c.to_ascii_uppercase());
            want.chars().all(|w| compact.next() == Some(w)) && compact.next().is_none()
        };
        let value = if is("ROW_COUNT()") {
            self.row_count
        } else if is("FOUND_ROWS()") {
            i64::try_from(self.found_rows).unwrap_or(i64::MAX)
        } else {
            return None;
        };
        Some((item.to_owned(), value))
    }

    /// What session tracking the client gets: none without the
    /// capability; with it, the default trackers' blocks, or everything
    /// the server sends (`None`) once it set a tracker itself.
    pub fn client_view(&self) -> Option<ClientView> {
        match (self.session_track, self.own_trackers) {
            (false, _) => Some(ClientView::Untracked),
            (true, false) => Some(ClientView::Defaults),
            (true, true) => None,
        }
    }

    /// The session's status flags after the last answer.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The session answered a statement itself (a one-row result set).
    pub fn answered_one_row(&mut self) {
        self.row_count = -1;
        self.found_rows = 1;
        self.warnings = 0;
    }

    /// The connection is given back now: must LAST_INSERT_ID() be read on
    /// it first (and given to [`TxState::set_last_insert_id`])? Clears the
    /// mark.
    pub fn take_last_insert_id_ask(&mut self) -> bool {
        std::mem::take(&mut self.last_insert_id_unsure)
    }

    /// The server's LAST_INSERT_ID() on the connection the session gave
    /// back (None: it could not be read; the OK packet's value stays).
    pub fn set_last_insert_id(&mut self, value: Option<u64>) {
        if let Some(v) = value {
            self.last_insert_id = v;
        }
    }

    /// The connection is given back now: must it be reset first (see
    /// `diagnostics_dirty`)? Clears the mark for the next connection.
    pub fn take_reset_needed(&mut self) -> bool {
        std::mem::take(&mut self.diagnostics_dirty)
    }

    /// May the connection go back to the pool now (the session is between
    /// commands with nothing owed)?
    /// Between commands, outside a transaction: why the session keeps its
    /// connection (the `reason` of a pin, or what else lives there); None
    /// when it would give it back. A transaction is the caller's to see
    /// (the server's status flag, or [`TxState::maybe_in_transaction`]).
    pub fn holds(&self) -> Option<&'static str> {
        if let Some(reason) = self.pinned {
            return Some(reason.as_str());
        }
        if self.table_locks {
            return Some(PinReason::LockTables.as_str());
        }
        (self.warnings > 0 && !self.read_lease).then_some("warnings")
    }

    /// The connection died inside a transaction (the writer was lost): the
    /// server rolled the transaction back, and what lived only on that
    /// connection (its diagnostics, a LAST_INSERT_ID() its OK packets did
    /// not show) is gone. The settings and schema stay: the next lease
    /// replays them.
    pub fn connection_lost(&mut self) {
        self.status &= !SERVER_STATUS_IN_TRANS;
        self.after_err = false;
        self.warnings = 0;
        self.diagnostics_dirty = false;
        self.last_insert_id_unsure = false;
        self.row_count = -1;
        self.found_rows = 0;
    }

    /// A COM_QUERY whose connection died before any answer, inside a
    /// transaction: did the server certainly not commit while it ran?
    /// See [`LostStatement`].
    pub fn lost_statement(&self, sql: &[u8]) -> LostStatement {
        lost_statement(sql, &self.lex_options())
    }

    /// With autocommit off, an ERR may have left a transaction open that no
    /// status flag reported (see `after_err`).
    pub fn maybe_in_transaction(&self) -> bool {
        self.after_err && self.status & SERVER_STATUS_AUTOCOMMIT == 0
    }

    pub fn releasable(&self) -> bool {
        let autocommit_off = self.status & SERVER_STATUS_AUTOCOMMIT == 0;
        self.pinned.is_none()
            && !self.table_locks
            && self.status & SERVER_STATUS_IN_TRANS == 0
            && (self.warnings == 0 || self.read_lease)
            && !(self.after_err && autocommit_off)
    }

    /// What a connection needs before it runs `first` (the start of the
    /// command that made the session lease one).
    pub fn lease_setup(&mut self, first: &[u8]) -> LeaseSetup {
        // The command is one whole `SET` of constants: a connection that
        // carries the settings it leads to will do as well.
        let whole = wire::packet::split_packet(first)
            .filter(|(p, used)| *used == first.len() && p.seq == 0 && !p.has_continuation())
            .and_then(|(p, _)| p.payload.strip_prefix(&[COM_QUERY]));
        // Lexed once for the tests below and for `on_completed`: this runs
        // before every statement, and a lexing costs more than the lease.
        let opts = self.lex_options();
        let statements = whole.map(|sql| (sql, self.lexed.get(sql, &opts)));
        let alt = statements
            .filter(|(sql, sts)| constant_set(sql, sts))
            .and_then(|(_, sts)| settings_after(&self.settings, self.collation, sts, &[]).ok())
            .map_or(0, |s| s.fingerprint());
        // The connection will be held past this command (a transaction
        // begins, or autocommit is off): a later statement of the
        // transaction may read LAST_INSERT_ID() on it.
        let holds = self.status & SERVER_STATUS_AUTOCOMMIT == 0
            || statements.is_some_and(|(_, sts)| sts.iter().any(|st| st.class == Class::Begin));
        // Reads of LAST_INSERT_ID() in code (not in strings or comments),
        // `@@identity` and `@@last_insert_id` included; a command not
        // whole in the buffer is searched as text.
        let reads = match statements {
            Some((_, sts)) => sts.iter().any(|st| st.reads_last_insert_id),
            None => mentions_last_insert_id(first),
        };
        // The value lives in the connection that ran the INSERT; this one
        // gets the session's own, also when that is 0 (the connection may
        // hold another session's). Before an INSERT too: one with an
        // explicit AUTO_INCREMENT value leaves it as it was, and the
        // session then reads it from this connection.
        let last_insert_id = (holds || reads || may_insert(first)).then_some(self.last_insert_id);
        LeaseSetup {
            settings: self.settings.fingerprint(),
            wanted: self.settings.clone(),
            always: Vec::new(),
            alt,
            last_insert_id,
            causal: self.causal_wait(),
        }
    }
}

/// The settings after the `SET` statement(s) lexed into `statements` ran
/// on a connection carrying `settings`, with the values the server's
/// tracker reported (`tracked`) for variables set to an expression.
fn settings_after(
    settings: &Settings,
    collation: u8,
    statements: &[lexer::Statement],
    tracked: &[(String, String)],
) -> Result<Settings, crate::tx_settings::NotReplayable> {
    let mut next = settings.clone();
    for st in statements {
        next = match &st.class {
            Class::Set(items) => next.with_items_tracked(items, collation, tracked)?,
            Class::SetTransaction {
                scope: Some(Scope::Session),
                characteristics,
            } => next.with_session_transaction(characteristics)?,
            Class::Empty => next,
            _ => return Err(super::tx_settings::NotReplayable("not a SET".into())),
        };
    }
    Ok(next)
}

/// Whether the `SET` statements set a `session_track_*` variable of the
/// session: `Some(true)` for `session_track_state_change` (the proxy's
/// net), `Some(false)` for another, `None` for none.
fn trackers_set(statements: &[lexer::Statement]) -> Option<bool> {
    let mut found = None;
    for st in statements {
        let Class::Set(items) = &st.class else {
            continue;
        };
        for item in items {
            if let SetItem::Variable { scope, name, .. } = item {
                if *scope != Scope::Global && name.starts_with("session_track_") {
                    if name == "session_track_state_change" {
                        return Some(true);
                    }
                    found = Some(false);
                }
            }
        }
    }
    found
}

/// The session-state blocks of the command's final OK, if it kept them.
fn state_blocks(c: &Completed) -> Option<OkInfo<'_>> {
    parse_ok(
        c.state_ok.as_deref()?,
        CLIENT_PROTOCOL_41 | CLIENT_SESSION_TRACK,
    )
    .ok()
}

/// The system variables the command's OK reported, lower-cased names.
fn tracked_variables(c: &Completed) -> Vec<(String, String)> {
    state_blocks(c).map_or_else(Vec::new, |info| {
        info.system_variables()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).to_ascii_lowercase(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    })
}

mod classify;
pub use classify::{classify_query, reads_previous_statement, Effect};
use classify::{constant_set, effect_of, ends_table_locks, may_insert, mentions_last_insert_id};

mod lexed;
use lexed::Lexed;

mod read_route;
pub use read_route::{route_of, Route, WRITER_FUNCTIONS};

#[cfg(test)]
mod tests;

/// What the statement in flight on a connection that died inside a
/// transaction means for that transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostStatement {
    /// A plain `ROLLBACK`: what the client asked for happened anyway.
    Rollback,
    /// One statement that never commits (a read, a row change, a savepoint):
    /// the transaction died uncommitted with the server.
    NoCommit,
    /// COMMIT, or a statement that may commit implicitly (DDL, `BEGIN`,
    /// `SET autocommit = 1`, `LOCK TABLES`, a CALL whose body is unseen,
    /// several statements, a text the lexer cannot read): whether it
    /// committed is unknown.
    MayCommit,
}

/// Leading keywords of statements that never commit a transaction, not
/// even implicitly (MariaDB's "statements that cause an implicit commit"
/// lists none of them). `SET` is absent: `SET autocommit = 1` commits.
const NEVER_COMMITS: &[&str] = &[
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "REPLACE",
    "WITH",
    "VALUES",
    "TABLE",
    "DO",
    "SHOW",
    "DESCRIBE",
    "DESC",
    "EXPLAIN",
    "SAVEPOINT",
    "HANDLER",
];

fn lost_statement(sql: &[u8], opts: &LexOptions) -> LostStatement {
    let Ok(tokens) = wire::lexer::tokenize(sql, opts) else {
        return LostStatement::MayCommit;
    };
    let code = |t: &&wire::lexer::Token| t.kind != wire::lexer::TokenKind::Semicolon;
    let statement: Vec<_> = tokens.iter().take_while(code).collect();
    let more = tokens.iter().skip(statement.len()).any(|t| code(&t));
    let Some(first) = statement.first().filter(|_| !more) else {
        return LostStatement::MayCommit;
    };
    let word = std::str::from_utf8(&sql[first.start..first.end]).unwrap_or("");
    let word = word.to_ascii_uppercase();
    if NEVER_COMMITS.contains(&word.as_str()) {
        return LostStatement::NoCommit;
    }
    let classes = lexer::classify(sql, opts);
    match classes.first().map(|st| &st.class) {
        Some(Class::Rollback {
            chain: false,
            release: false,
        }) => LostStatement::Rollback,
        // ROLLBACK TO SAVEPOINT is Plain, and commits nothing.
        _ if word == "ROLLBACK" => LostStatement::NoCommit,
        _ => LostStatement::MayCommit,
    }
}

//! One backend connection as a machine: connect → login → idle ⇄ leased →
//! resetting → idle, or closed. Pure: it takes completions (with the bytes
//! the driver's backend buffer holds) and time, and returns
//! [`BackendOut`]s: operations for the driver and events for the pool.
//!
//! While leased, the relay drives the connection's socket and buffer; the
//! machine only waits to be given back.
//!
//! This file holds the machine's types, its reads and the timeouts; the
//! phases are child modules that share its private fields:
//! `backend/open.rs` (connect, TLS, login), `backend/lease.rs` (lease,
//! setup, reset, give-back) and `backend/server_prepared.rs` (transaction
//! pooling's prepared statements).

use std::time::{Duration, Instant};

use crate::completion::Completion;
use crate::ids::{LeaseSetup, PoolKey, Settings, TlsWish, ANY_SETTINGS};
use wire::auth::Credential;
use wire::client_login::{ClientLogin, LoginError, LoginParams, LoginStep};
use wire::client_sha2::FullAuthTransport;
use wire::constants::*;
use wire::packet::{split_packet, write_packet};
use wire::reply::{
    com_payload, err_payload_with_state, parse_one_value, parse_reply, parse_reset_replies,
    ResetOutcome, ServerReply,
};

/// Largest packet we ask the backend to send us; the server's own
/// max_allowed_packet is what really limits it.
const BACKEND_MAX_PACKET: u32 = 1 << 30;

/// What the reset pipeline asks last: the schema the reset keeps. In front
/// of MariaDB also the role, which the reset keeps as well (`SET ROLE`
/// outlives COM_RESET_CONNECTION on 10.11): a connection that still has one
/// is closed rather than pooled, since no statement restores "the role a
/// fresh login of this account would have" (MariaDB has no `SET ROLE
/// DEFAULT`). MySQL 5.7 has no CURRENT_ROLE(), hence only for MariaDB.
const RESET_QUERY: &[u8] = b"SELECT DATABASE()";
const RESET_QUERY_MARIADB: &[u8] = b"SELECT DATABASE(), CURRENT_ROLE()";

/// Sent after COM_RESET_CONNECTION on a connection that negotiated
/// CLIENT_IGNORE_SPACE (the reset takes the mode away again).
const RESTORE_IGNORE_SPACE: &[u8] =
    b"SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@session.sql_mode, ''), 'IGNORE_SPACE')";

/// An operation on the connection's own socket and buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendOp {
    /// TCP connect; the driver links a `--backend-connect-timeout` to it.
    Connect,
    /// Read, appending to the backend buffer.
    Read,
    /// Forget the backend buffer's bytes.
    Clear,
    /// Write these bytes (whole packets; through TLS once it runs).
    Send(Vec<u8>),
    /// The SSLRequest is out: run the TLS handshake as a client on the
    /// socket, then call [`BackendConn::on_tls`]. From here on every
    /// `Read` delivers plaintext and every `Send` is sealed.
    StartTls,
    /// Shut the socket down and free the connection once every operation
    /// naming it has completed.
    Close,
}

/// What the connection tells the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendEvent {
    /// Logged in; `server_version` and the capabilities are the greeting's,
    /// `status` the login OK's status flags (the global sql_mode's quoting).
    Ready {
        server_version: String,
        capabilities: u32,
        ext_capabilities: u32,
        status: u16,
    },
    /// Could not be opened (connect, greeting or login failed).
    /// `login_refused`: the server's ERR payload when it refused the
    /// credentials (after its greeting), for the client to see as is.
    OpenFailed {
        cause: String,
        login_refused: Option<Vec<u8>>,
    },
    /// A probe read the server's greeting (and closed): what clients are
    /// offered, learned without logging in.
    Probed {
        server_version: String,
        capabilities: u32,
        ext_capabilities: u32,
    },
    /// COM_INIT_DB for a lease succeeded.
    SchemaSelected,
    /// COM_INIT_DB was refused: the server's ERR payload, for the client.
    SchemaRefused { err_payload: Vec<u8> },
    /// Reset after a lease: ready for the next one.
    ResetDone,
    /// The answer to [`BackendConn::ask_last_insert_id`]; the connection is
    /// leased again, for the pool to give back.
    LastInsertId(u64),
    /// The answer to [`BackendConn::statement`]: the connection is leased
    /// again.
    Statement(server_prepared::StatementReply),
    /// The answer to [`BackendConn::replay`].
    Replayed(tx_replay::ReplayOutcome),
    /// A causal read's `MASTER_GTID_WAIT` answered after `waited`: the
    /// replica has the writes (`SchemaSelected` follows), or not (`Err`:
    /// why; the connection is clean, set up and leased still, for the
    /// pool to take back).
    CausalWait {
        waited: Duration,
        outcome: Result<(), String>,
    },
    /// Broken: closed, and to be forgotten. `lost`: the connection itself
    /// went (reset, closed, no answer in time), as when its server dies;
    /// false for an answer the proxy could not take (an ERR to a setup
    /// statement, a reply it cannot parse), which another connection to
    /// the same server would get too.
    Failed { cause: String, lost: bool },
    /// Something about backend TLS the pool counts or logs.
    Tls(TlsNote),
}

/// See [`BackendEvent::Tls`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsNote {
    /// `--backend-tls preferred` and the greeting offers no TLS: this
    /// connection logs in plain.
    PlainFallback,
    /// `required` or stricter and the greeting offers no TLS (the open
    /// fails; `OpenFailed` follows).
    Unavailable,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendOut {
    Op(BackendOp),
    Event(BackendEvent),
}

enum State {
    /// TCP connect in flight.
    Connecting,
    /// A probe: waiting for the greeting, then closing without a login.
    Probing,
    /// Greeting and login exchange; `writing` while a packet goes out;
    /// `answered` once the greeting was answered with credentials;
    /// `consumed`: bytes at the start of the backend buffer already fed to
    /// the login (caching_sha2's 0x01 0x03 is answered by nothing, and the
    /// OK after it may arrive in the same read or the next).
    LoggingIn {
        login: Box<ClientLogin>,
        writing: bool,
        answered: bool,
        consumed: usize,
    },
    /// The SSLRequest is going out (`writing`), then the driver runs the
    /// TLS handshake; the login continues inside TLS ([`BackendConn::on_tls`]).
    TlsHandshake {
        login: Box<ClientLogin>,
        writing: bool,
    },
    /// COM_INIT_DB for the schema a lease asked for; `then`: the setup
    /// statements to run next (transaction pooling).
    SelectingSchema {
        schema: String,
        writing: bool,
        then: Vec<Vec<u8>>,
        settings: Settings,
    },
    /// Transaction pooling: the session's setup statements, pipelined;
    /// `left` answers (OK each) are still owed; `settings` are what the
    /// connection carries once they are in.
    Replaying {
        left: usize,
        writing: bool,
        settings: Settings,
    },
    /// In the pool's idle list, nothing in flight.
    Idle,
    /// Leased: the relay drives the socket.
    Leased,
    /// COM_RESET_CONNECTION + `SELECT DATABASE()` after a lease.
    Resetting { writing: bool },
    /// Transaction pooling: `SELECT LAST_INSERT_ID()` for the session that
    /// is giving the connection back.
    AskingLastInsertId { writing: bool },
    /// Transaction pooling: closing evicted statements and preparing one
    /// for the session it is leased to (`backend/server_prepared.rs`).
    Preparing {
        writing: bool,
        key: std::sync::Arc<server_prepared::StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
        /// The reply's bytes from earlier reads that filled the read
        /// buffer: a PREPARE_OK of many columns is larger than one.
        partial: Vec<u8>,
    },
    /// Transaction replay on the new writer (`backend/tx_replay.rs`).
    ReplayingTx(Box<tx_replay::Replay>),
    /// Closed; the driver frees the slot once its operations complete.
    Closed,
}

pub struct BackendConn {
    state: State,
    key: PoolKey,
    /// The current schema as last learned (None = none): the reset keeps
    /// it, so the reset exchange asks for it.
    schema: Option<String>,
    /// When the current connect or exchange began, or when it went idle.
    since: Instant,
    /// The server's thread id for this connection (its greeting's
    /// connection id; 0 until logged in): a KILL of the proxy id of the
    /// session it serves is mapped to it.
    thread_id: u32,
    /// Connection attributes for the login (`connect_attrs`): set by the
    /// driver between open and connect, taken by the login.
    connect_attrs: Vec<(String, String)>,
    /// The server is MariaDB (its greeting cleared CLIENT_MYSQL): the reset
    /// also asks for CURRENT_ROLE().
    mariadb: bool,
    /// Transaction pooling: the session settings the connection carries
    /// (none after login or a reset).
    settings: Settings,
    /// Transaction pooling: what LAST_INSERT_ID() returns on it, when known
    /// (after `DO LAST_INSERT_ID(n)` or `SELECT LAST_INSERT_ID()`; a session
    /// that may have changed it asks before it gives the connection back).
    known_last_insert_id: Option<u64>,
    /// Transaction pooling: the prepared statements it holds on the server.
    statements: server_prepared::BackendStatements,
    /// A causal read's wait is the last setup statement in flight, with
    /// this timeout (`--causal-read-timeout`).
    causal_wait: Option<Duration>,
    /// Statements closed by the prepare in flight (for the gauge).
    pending_evicted: usize,
    /// The login went through TLS: the socket carries TLS records.
    tls: bool,
}

/// The proxy-internal statements a lease sent before the command (for
/// `ringgate_internal_queries_total{kind}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseWork {
    /// COM_INIT_DB for the session's schema.
    pub init_db: bool,
    /// One `SET` of the settings that differ.
    pub settings: bool,
    /// `DO LAST_INSERT_ID(n)`.
    pub last_insert_id: bool,
    /// A causal read's `SELECT MASTER_GTID_WAIT(...)`.
    pub causal_wait: bool,
}

/// Who the proxy logs in as.
pub struct BackendCredentials<'a> {
    pub user: &'a str,
    pub credential: &'a Credential,
    /// How caching_sha2 full authentication may send the password.
    pub transport: &'a FullAuthTransport,
}

impl BackendConn {
    /// A new connection: asks for the TCP connect.
    pub fn open(key: PoolKey, now: Instant, out: &mut Vec<BackendOut>) -> BackendConn {
        out.push(BackendOut::Op(BackendOp::Connect));
        BackendConn {
            state: State::Connecting,
            key,
            schema: None,
            since: now,
            thread_id: 0,
            connect_attrs: Vec::new(),
            mariadb: false,
            settings: Settings::default(),
            known_last_insert_id: None,
            statements: server_prepared::BackendStatements::new(
                server_prepared::DEFAULT_MAX_PREPARED,
            ),
            pending_evicted: 0,
            causal_wait: None,
            tls: false,
        }
    }

    /// The connection runs TLS (its handshake completed); the driver keeps
    /// the record layer itself (`worker/backend_tls_io.rs`).
    #[cfg(test)]
    pub fn tls_active(&self) -> bool {
        self.tls
    }

    /// The fingerprint of the session settings it carries (0: none).
    pub fn settings(&self) -> u64 {
        self.settings.fingerprint()
    }

    /// The session settings it carries.
    pub fn carried(&self) -> &Settings {
        &self.settings
    }

    /// The connection attributes to log in with (see
    /// `crate::connect_attrs`); only effective before the TCP connect
    /// completes.
    pub fn set_connect_attrs(&mut self, attrs: Vec<(String, String)>) {
        self.connect_attrs = attrs;
    }

    pub fn thread_id(&self) -> u32 {
        self.thread_id
    }

    pub fn key(&self) -> PoolKey {
        self.key
    }

    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle)
    }

    pub fn is_leased(&self) -> bool {
        matches!(self.state, State::Leased)
    }

    pub fn is_resetting(&self) -> bool {
        matches!(self.state, State::Resetting { .. })
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Connecting or logging in.
    pub fn is_opening(&self) -> bool {
        matches!(
            self.state,
            State::Connecting
                | State::LoggingIn { .. }
                | State::TlsHandshake { .. }
                | State::Probing
        )
    }

    /// When it went idle (valid while idle).
    pub fn idle_since(&self) -> Instant {
        self.since
    }

    fn fail(&mut self, cause: String, out: &mut Vec<BackendOut>) {
        self.fail_with(cause, None, false, out)
    }

    /// The connection itself went: see [`BackendEvent::Failed`]'s `lost`.
    fn lose(&mut self, cause: String, out: &mut Vec<BackendOut>) {
        self.fail_with(cause, None, true, out)
    }

    fn fail_with(
        &mut self,
        cause: String,
        login_refused: Option<Vec<u8>>,
        lost: bool,
        out: &mut Vec<BackendOut>,
    ) {
        if self.is_closed() {
            return;
        }
        let opening = self.is_opening();
        self.state = State::Closed;
        out.push(BackendOut::Op(BackendOp::Close));
        out.push(BackendOut::Event(if opening {
            BackendEvent::OpenFailed {
                cause,
                login_refused,
            }
        } else {
            BackendEvent::Failed { cause, lost }
        }));
    }

    /// Close for good (the pool discards it).
    pub fn close(&mut self, out: &mut Vec<BackendOut>) {
        if !self.is_closed() {
            self.state = State::Closed;
            out.push(BackendOut::Op(BackendOp::Close));
        }
    }

    /// A write of a proxy-made packet completed (all of it, or failed).
    pub fn on_write(&mut self, res: Completion, out: &mut Vec<BackendOut>) {
        if res.is_error() {
            let cause = format!("write to the server failed: {}", res.error());
            return self.lose(cause, out);
        }
        if let State::LoggingIn { consumed, .. } = &mut self.state {
            // The Clear below empties the buffer.
            *consumed = 0;
        }
        if let State::TlsHandshake { writing, .. } = &mut self.state {
            // The SSLRequest is out: the handshake runs on the socket.
            *writing = false;
            out.push(BackendOut::Op(BackendOp::Clear));
            out.push(BackendOut::Op(BackendOp::StartTls));
            return;
        }
        let writing = match &mut self.state {
            State::LoggingIn { writing, .. }
            | State::SelectingSchema { writing, .. }
            | State::Replaying { writing, .. }
            | State::Resetting { writing }
            | State::AskingLastInsertId { writing }
            | State::Preparing { writing, .. } => writing,
            State::ReplayingTx(_) => return self.on_replay_written(out),
            _ => return,
        };
        *writing = false;
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Op(BackendOp::Read));
    }

    /// A read of the connection's own exchange completed; `data` is what
    /// the backend buffer holds; `capacity` its size.
    pub fn on_read(
        &mut self,
        res: Completion,
        data: &[u8],
        capacity: usize,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        if self.is_closed() {
            return;
        }
        if !res.brought_bytes() {
            let cause = if res.is_eof() {
                "the server closed the connection".to_string()
            } else {
                res.error().to_string()
            };
            return self.lose(cause, out);
        }
        if let State::Resetting { .. } = self.state {
            return self.on_reset_replies(data, capacity, now, out);
        }
        if let State::Replaying { .. } = self.state {
            return self.on_setup_replies(data, capacity, now, out);
        }
        if let State::AskingLastInsertId { .. } = self.state {
            return self.on_last_insert_id_reply(data, capacity, out);
        }
        if let State::LoggingIn { consumed, .. } = self.state {
            return self.on_login_packets(data, consumed, capacity, now, out);
        }
        if let State::Preparing { .. } = self.state {
            return self.on_prepare_reply(data, capacity, out);
        }
        if let State::ReplayingTx(_) = self.state {
            return self.on_replay_answers(data, out);
        }
        let Some((pkt, _)) = split_packet(data) else {
            if data.len() >= capacity {
                return self.fail("reply larger than the read buffer".into(), out);
            }
            out.push(BackendOut::Op(BackendOp::Read));
            return;
        };
        match self.state {
            State::Probing => self.on_probe_greeting(pkt.payload, out),
            State::SelectingSchema { .. } => self.on_init_db_reply(pkt.payload, now, out),
            _ => self.fail("unexpected bytes from the server".into(), out),
        }
    }

    /// The probe read the server's greeting: report it and close.
    fn on_probe_greeting(&mut self, payload: &[u8], out: &mut Vec<BackendOut>) {
        match wire::handshake::parse_greeting(payload) {
            Ok(g) => {
                self.state = State::Closed;
                out.push(BackendOut::Op(BackendOp::Close));
                out.push(BackendOut::Event(BackendEvent::Probed {
                    server_version: g.server_version,
                    capabilities: g.capabilities,
                    ext_capabilities: g.ext_capabilities,
                }));
            }
            Err(e) => self.fail(format!("greeting: {e}"), out),
        }
    }

    /// The answer to a lease's COM_INIT_DB: on OK the lease's setup runs
    /// next; an ERR refuses the lease and leaves the connection idle.
    fn on_init_db_reply(&mut self, payload: &[u8], now: Instant, out: &mut Vec<BackendOut>) {
        let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
        let State::SelectingSchema {
            schema,
            then,
            settings,
            ..
        } = &mut self.state
        else {
            return;
        };
        match parse_reply(payload, deprecate_eof) {
            Ok(ServerReply::Ok { .. }) => {
                self.schema = Some(std::mem::take(schema));
                let (then, settings) = (std::mem::take(then), std::mem::take(settings));
                out.push(BackendOut::Op(BackendOp::Clear));
                self.run_setup(then, settings, now, out);
            }
            Ok(ServerReply::Err {
                code,
                sqlstate,
                message,
            }) => {
                // The schema is unchanged; the connection is fine.
                self.state = State::Idle;
                self.since = now;
                out.push(BackendOut::Op(BackendOp::Clear));
                out.push(BackendOut::Event(BackendEvent::SchemaRefused {
                    err_payload: err_payload_with_state(code, &sqlstate, &message),
                }));
            }
            _ => self.fail("unexpected reply to COM_INIT_DB".into(), out),
        }
    }

    /// A connect, login, schema or reset exchange that has taken longer
    /// than `timeout` is cut: a server that accepts TCP and then stalls
    /// must not hold a connection (and its client) forever.
    pub fn on_tick(&mut self, now: Instant, timeout: Duration, out: &mut Vec<BackendOut>) {
        let exchanging = matches!(
            self.state,
            State::Connecting
                | State::Probing
                | State::LoggingIn { .. }
                | State::TlsHandshake { .. }
                | State::SelectingSchema { .. }
                | State::Replaying { .. }
                | State::Resetting { .. }
                | State::AskingLastInsertId { .. }
                | State::Preparing { .. }
                | State::ReplayingTx(_)
        );
        // A causal wait may take its own timeout on top of the round trip.
        let timeout = timeout + self.causal_wait.unwrap_or_default();
        if exchanging && now.duration_since(self.since) >= timeout {
            let cause =
                format!("no answer from the server within {timeout:?} (--backend-connect-timeout)");
            self.lose(cause, out);
        }
    }
}

mod lease;

mod open;

pub mod server_prepared;

pub mod tx_replay;

#[cfg(test)]
mod tests;

//! One backend connection as a machine: connect → login → idle ⇄ leased →
//! resetting → idle, or closed. Pure: it takes completions (with the bytes
//! the driver's backend buffer holds) and time, and returns
//! [`BackendOut`]s: operations for the driver and events for the pool.
//!
//! While leased, the relay drives the connection's socket and buffer; the
//! machine only waits to be given back.

use std::time::{Duration, Instant};

use super::ids::{LeaseSetup, PoolKey, Settings, TlsWish, ANY_SETTINGS};
use crate::mysql::auth::Credential;
use crate::mysql::client_login::{ClientLogin, LoginError, LoginParams, LoginStep};
use crate::mysql::client_sha2::FullAuthTransport;
use crate::mysql::constants::*;
use crate::mysql::packet::{split_packet, write_packet};
use crate::mysql::reply::{
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
    /// Logged in; `server_version` and the capabilities are the greeting's.
    Ready {
        server_version: String,
        capabilities: u32,
        ext_capabilities: u32,
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
    Statement(statements::StatementReply),
    /// Broken: closed, and to be forgotten.
    Failed { cause: String },
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
    /// for the session it is leased to (`backend_statements.rs`).
    Preparing {
        writing: bool,
        key: std::sync::Arc<statements::StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
    },
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
    statements: statements::BackendStatements,
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
            statements: statements::BackendStatements::new(statements::DEFAULT_MAX_PREPARED),
            pending_evicted: 0,
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
    /// `proxy::connect_attrs`); only effective before the TCP connect
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
        self.fail_with(cause, None, out)
    }

    fn fail_with(
        &mut self,
        cause: String,
        login_refused: Option<Vec<u8>>,
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
            BackendEvent::Failed { cause }
        }));
    }

    /// Close for good (the pool discards it).
    pub fn close(&mut self, out: &mut Vec<BackendOut>) {
        if !self.is_closed() {
            self.state = State::Closed;
            out.push(BackendOut::Op(BackendOp::Close));
        }
    }

    /// The TCP connect completed. Without credentials the connection is a
    /// probe: it reads the greeting, reports it and closes (passthrough
    /// identity has no account to log in as before a client has come).
    pub fn on_connect(
        &mut self,
        res: i32,
        creds: Option<&BackendCredentials>,
        connect_timeout: Duration,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        if !matches!(self.state, State::Connecting) {
            return;
        }
        if res < 0 {
            let cause = if -res == libc::ECANCELED {
                format!("connect timed out after {connect_timeout:?} (--backend-connect-timeout)")
            } else {
                format!("connect: {}", std::io::Error::from_raw_os_error(-res))
            };
            return self.fail(cause, out);
        }
        self.since = now;
        let Some(creds) = creds else {
            self.state = State::Probing;
            out.push(BackendOut::Op(BackendOp::Read));
            return;
        };
        let login = ClientLogin::new(LoginParams {
            user: creds.user.to_string(),
            credential: creds.credential.clone(),
            database: None,
            capabilities: NATIVE_LOGIN_CAPS | self.key.caps,
            collation: self.key.collation,
            max_packet_size: BACKEND_MAX_PACKET,
        })
        // Negotiated as the client chose them: they are in the pool key.
        .with_ext_capabilities(self.key.ext_caps)
        .with_connect_attrs(std::mem::take(&mut self.connect_attrs))
        .with_full_auth_transport(creds.transport.clone())
        // As the pool stamped its --backend-tls on the key.
        .with_tls(self.key.tls);
        self.state = State::LoggingIn {
            login: Box::new(login),
            writing: false,
            answered: false,
            consumed: 0,
        };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Read));
    }

    /// A write of a proxy-made packet completed (all of it, or failed).
    pub fn on_write(&mut self, res: i32, out: &mut Vec<BackendOut>) {
        if res < 0 {
            let cause = format!(
                "write to the server failed: {}",
                std::io::Error::from_raw_os_error(-res)
            );
            return self.fail(cause, out);
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
        res: i32,
        data: &[u8],
        capacity: usize,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        if self.is_closed() {
            return;
        }
        if res <= 0 {
            let cause = if res == 0 {
                "the server closed the connection".to_string()
            } else {
                std::io::Error::from_raw_os_error(-res).to_string()
            };
            return self.fail(cause, out);
        }
        if let State::Resetting { .. } = self.state {
            return self.on_reset_replies(data, capacity, now, out);
        }
        if let State::Replaying { .. } = self.state {
            return self.on_setup_replies(data, capacity, out);
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
        let Some((pkt, _)) = split_packet(data) else {
            if data.len() >= capacity {
                return self.fail("reply larger than the read buffer".into(), out);
            }
            out.push(BackendOut::Op(BackendOp::Read));
            return;
        };
        let payload = pkt.payload;
        match &mut self.state {
            State::Probing => match crate::mysql::handshake::parse_greeting(payload) {
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
            },
            State::SelectingSchema {
                schema,
                then,
                settings,
                ..
            } => {
                let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
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
            _ => self.fail("unexpected bytes from the server".into(), out),
        }
    }

    /// Login packets from `consumed` on: each is fed to the login until it
    /// sends something, finishes or fails; a partial packet waits for the
    /// next read.
    fn on_login_packets(
        &mut self,
        data: &[u8],
        mut consumed: usize,
        capacity: usize,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        loop {
            let State::LoggingIn {
                login,
                writing,
                answered,
                consumed: seen,
            } = &mut self.state
            else {
                return;
            };
            let Some((pkt, used)) = split_packet(data.get(consumed..).unwrap_or_default()) else {
                *seen = consumed;
                if data.len() >= capacity {
                    return self.fail("reply larger than the read buffer".into(), out);
                }
                out.push(BackendOut::Op(BackendOp::Read));
                return;
            };
            consumed += used;
            match login.on_packet(pkt.seq, pkt.payload) {
                Ok(LoginStep::Wait) => continue,
                Ok(LoginStep::StartTls(bytes)) => {
                    let State::LoggingIn { login, .. } =
                        std::mem::replace(&mut self.state, State::Closed)
                    else {
                        return;
                    };
                    self.state = State::TlsHandshake {
                        login,
                        writing: true,
                    };
                    self.since = now;
                    out.push(BackendOut::Op(BackendOp::Send(bytes)));
                }
                Ok(LoginStep::Send(bytes)) => {
                    if !*answered && self.key.tls == TlsWish::Preferred {
                        // The answer to the greeting, in plain.
                        out.push(BackendOut::Event(BackendEvent::Tls(TlsNote::PlainFallback)));
                    }
                    *writing = true;
                    *answered = true;
                    self.since = now;
                    out.push(BackendOut::Op(BackendOp::Send(bytes)));
                }
                Ok(LoginStep::Done { greeting, .. }) => {
                    self.state = State::Leased;
                    self.thread_id = greeting.connection_id;
                    self.mariadb = greeting.capabilities & CLIENT_MYSQL == 0;
                    out.push(BackendOut::Op(BackendOp::Clear));
                    out.push(BackendOut::Event(BackendEvent::Ready {
                        server_version: greeting.server_version,
                        capabilities: greeting.capabilities,
                        ext_capabilities: greeting.ext_capabilities,
                    }));
                }
                Err(LoginError::Server {
                    code,
                    sqlstate,
                    message,
                }) => {
                    // After the greeting it is the credentials it refused
                    // (1045, 1044, 1698, an expired or locked account).
                    let refused =
                        (*answered).then(|| err_payload_with_state(code, &sqlstate, &message));
                    let cause =
                        format!("the server refused the login: {code} ({sqlstate}) {message}");
                    self.fail_with(cause, refused, out)
                }
                Err(e @ LoginError::TlsUnavailable(_)) => {
                    out.push(BackendOut::Event(BackendEvent::Tls(TlsNote::Unavailable)));
                    let cause = format!(
                        "{e}; turn TLS on in the server (ssl-cert/ssl-key) or run ringgate \
                         with --backend-tls preferred or disabled"
                    );
                    self.fail(cause, out)
                }
                Err(e) => self.fail(format!("login: {e}"), out),
            }
            return;
        }
    }

    fn on_reset_replies(
        &mut self,
        data: &[u8],
        capacity: usize,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
        let restore = usize::from(self.key.caps & CLIENT_IGNORE_SPACE != 0);
        match parse_reset_replies(data, deprecate_eof, restore) {
            Ok(None) if data.len() < capacity => out.push(BackendOut::Op(BackendOp::Read)),
            Ok(Some(ResetOutcome::Reset {
                role: Some(role), ..
            })) => self.fail(
                format!(
                    "role `{role}` still active after COM_RESET_CONNECTION (SET ROLE outlives it): closed, not pooled"
                ),
                out,
            ),
            Ok(Some(ResetOutcome::Reset { schema, role: None })) => {
                self.schema = schema;
                self.settings = Settings::default();
                self.known_last_insert_id = None;
                // COM_RESET_CONNECTION closed every prepared statement.
                self.statements.clear();
                self.state = State::Idle;
                self.since = now;
                out.push(BackendOut::Op(BackendOp::Clear));
                out.push(BackendOut::Event(BackendEvent::ResetDone));
            }
            outcome => self.fail(format!("COM_RESET_CONNECTION failed ({outcome:?})"), out),
        }
    }

    /// The answer to `SELECT LAST_INSERT_ID()`: leased again, with the value.
    fn on_last_insert_id_reply(&mut self, data: &[u8], capacity: usize, out: &mut Vec<BackendOut>) {
        let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
        match parse_one_value(data, deprecate_eof) {
            Ok(None) if data.len() < capacity => out.push(BackendOut::Op(BackendOp::Read)),
            Ok(Some(Ok(Some(text)))) => match text.parse::<u64>() {
                Ok(value) => {
                    self.known_last_insert_id = Some(value);
                    self.state = State::Leased;
                    out.push(BackendOut::Op(BackendOp::Clear));
                    out.push(BackendOut::Event(BackendEvent::LastInsertId(value)));
                }
                Err(_) => self.fail(format!("LAST_INSERT_ID() answered {text:?}"), out),
            },
            outcome => self.fail(format!("SELECT LAST_INSERT_ID() failed ({outcome:?})"), out),
        }
    }

    /// Transaction pooling: the session giving the connection back may have
    /// changed LAST_INSERT_ID() in a way its OK packets do not show (an
    /// explicit AUTO_INCREMENT value is reported there but does not set
    /// it): read it on the connection, whose answer is
    /// [`BackendEvent::LastInsertId`] (then leased again, to be given back)
    /// or `Failed`.
    pub fn ask_last_insert_id(&mut self, now: Instant, out: &mut Vec<BackendOut>) {
        if !matches!(self.state, State::Leased) {
            return self.fail("asked for LAST_INSERT_ID() while not leased".into(), out);
        }
        let mut bytes = Vec::with_capacity(32);
        write_packet(
            &mut bytes,
            0,
            &com_payload(COM_QUERY, b"SELECT LAST_INSERT_ID()"),
        );
        self.state = State::AskingLastInsertId { writing: true };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
    }

    /// The TLS handshake that [`BackendOp::StartTls`] asked for ended:
    /// with `Ok`, the login's HandshakeResponse goes out through TLS;
    /// `Err` names the cause (and its fix) and fails the open.
    pub fn on_tls(&mut self, result: Result<(), String>, now: Instant, out: &mut Vec<BackendOut>) {
        let State::TlsHandshake { writing: false, .. } = self.state else {
            return self.fail("TLS handshake outside the login".into(), out);
        };
        if let Err(cause) = result {
            return self.fail(cause, out);
        }
        let State::TlsHandshake { mut login, .. } =
            std::mem::replace(&mut self.state, State::Closed)
        else {
            return;
        };
        match login.on_tls_established() {
            Ok(LoginStep::Send(bytes)) => {
                self.tls = true;
                self.state = State::LoggingIn {
                    login,
                    writing: true,
                    answered: true,
                    consumed: 0,
                };
                self.since = now;
                out.push(BackendOut::Op(BackendOp::Send(bytes)));
            }
            Ok(step) => self.fail(format!("login after TLS: unexpected {step:?}"), out),
            Err(e) => self.fail(format!("login: {e}"), out),
        }
    }

    /// Answers to the setup statements (`Replaying`): every one must be OK.
    fn on_setup_replies(&mut self, data: &[u8], capacity: usize, out: &mut Vec<BackendOut>) {
        let State::Replaying { left, .. } = self.state else {
            return;
        };
        let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
        let mut rest = data;
        let mut answered = 0;
        while let Some((pkt, used)) = split_packet(rest) {
            match parse_reply(pkt.payload, deprecate_eof) {
                Ok(ServerReply::Ok { .. }) => answered += 1,
                Ok(ServerReply::Err {
                    code,
                    sqlstate,
                    message,
                }) => {
                    let cause = format!(
                        "replaying the session's settings failed: {code} ({sqlstate}) {message}"
                    );
                    return self.fail(cause, out);
                }
                _ => return self.fail("unexpected reply to a setup statement".into(), out),
            }
            rest = &rest[used..];
        }
        if answered >= left {
            if let State::Replaying { settings, .. } =
                std::mem::replace(&mut self.state, State::Leased)
            {
                self.settings = settings;
            }
            out.push(BackendOut::Op(BackendOp::Clear));
            out.push(BackendOut::Event(BackendEvent::SchemaSelected));
        } else if data.len() >= capacity {
            self.fail("setup replies larger than the read buffer".into(), out);
        } else {
            out.push(BackendOut::Op(BackendOp::Read));
        }
    }

    /// Hand the connection to a session; with `schema`, select it first
    /// unless it is already current. With `setup` (transaction pooling),
    /// then run the session's settings (unless the connection carries
    /// them already) and its per-command statements.
    pub fn lease(
        &mut self,
        schema: Option<&str>,
        setup: Option<&LeaseSetup>,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) -> LeaseWork {
        debug_assert!(matches!(self.state, State::Idle | State::Leased));
        let mut work = LeaseWork::default();
        let mut then = Vec::new();
        let mut settings = self.settings.clone();
        if let Some(setup) = setup {
            let as_is = setup.settings == self.settings.fingerprint()
                || setup.settings == ANY_SETTINGS
                || (setup.alt != 0 && setup.alt == self.settings.fingerprint());
            if !as_is {
                // Only what differs is set; a connection whose settings
                // cannot be set back was reset by the pool first.
                match setup
                    .wanted
                    .diff_from(&self.settings, self.key.collation, self.key.caps)
                {
                    Ok(stmt) => {
                        work.settings = stmt.is_some();
                        then.extend(stmt);
                    }
                    Err(()) => {
                        self.fail(
                            "leased with settings that cannot be set back (not reset)".into(),
                            out,
                        );
                        return work;
                    }
                }
                settings = setup.wanted.clone();
            }
            then.extend(setup.always.iter().cloned());
            if let Some(n) = setup.last_insert_id {
                // Skipped when the connection holds the value already (the
                // last session's answer, or an earlier DO); setup failures
                // close the connection, so the value is known from here.
                if self.known_last_insert_id != Some(n) {
                    then.push(format!("DO LAST_INSERT_ID({n})").into_bytes());
                    work.last_insert_id = true;
                    self.known_last_insert_id = Some(n);
                }
            }
        }
        match schema {
            Some(db) if self.schema.as_deref() != Some(db) => {
                let mut bytes = Vec::with_capacity(db.len() + 5);
                write_packet(&mut bytes, 0, &com_payload(COM_INIT_DB, db.as_bytes()));
                self.state = State::SelectingSchema {
                    schema: db.to_string(),
                    writing: true,
                    then,
                    settings,
                };
                self.since = now;
                out.push(BackendOut::Op(BackendOp::Send(bytes)));
                work.init_db = true;
            }
            _ => self.run_setup(then, settings, now, out),
        }
        work
    }

    /// Send the setup statements (pipelined), or finish the lease now.
    fn run_setup(
        &mut self,
        then: Vec<Vec<u8>>,
        settings: Settings,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        if then.is_empty() {
            self.settings = settings;
            self.state = State::Leased;
            out.push(BackendOut::Event(BackendEvent::SchemaSelected));
            return;
        }
        let mut bytes = Vec::new();
        for sql in &then {
            write_packet(&mut bytes, 0, &com_payload(COM_QUERY, sql));
        }
        self.state = State::Replaying {
            left: then.len(),
            writing: true,
            settings,
        };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
    }

    /// Transaction pooling: reset an idle connection that carries another
    /// session's settings, so that a session with other settings can have
    /// it (it is idle again, settings 0, after `ResetDone`).
    pub fn reset_idle(&mut self, now: Instant, out: &mut Vec<BackendOut>) {
        if matches!(self.state, State::Idle) {
            self.state = State::Leased;
        }
        self.release(true, now, out)
    }

    /// Transaction pooling: the session let the connection go between
    /// transactions, without a reset. It keeps the session's schema and
    /// settings, which the next lease
    /// compares with its own (`kept`; None: as they are). False if it was
    /// not leased.
    pub fn keep(&mut self, kept: Option<(Option<String>, Settings)>, now: Instant) -> bool {
        if !matches!(self.state, State::Leased) {
            return false;
        }
        if let Some((schema, settings)) = kept {
            self.schema = schema;
            self.settings = settings;
        }
        self.state = State::Idle;
        self.since = now;
        true
    }

    /// Newly logged in and not wanted by anyone: idle.
    pub fn make_idle(&mut self, now: Instant) {
        if matches!(self.state, State::Leased) {
            self.state = State::Idle;
            self.since = now;
        }
    }

    /// The session is done with it. A clean connection is reset (pipelined
    /// with the query that learns the schema the reset keeps); anything
    /// else is closed.
    pub fn release(&mut self, clean: bool, now: Instant, out: &mut Vec<BackendOut>) {
        if !clean || !matches!(self.state, State::Leased) {
            return self.close(out);
        }
        let mut bytes = Vec::with_capacity(32);
        write_packet(&mut bytes, 0, &com_payload(COM_RESET_CONNECTION, &[]));
        if self.key.caps & CLIENT_IGNORE_SPACE != 0 {
            // MariaDB's reset puts sql_mode back to the global value and so
            // drops the IGNORE_SPACE that the handshake flag had added.
            write_packet(&mut bytes, 0, &com_payload(COM_QUERY, RESTORE_IGNORE_SPACE));
        }
        let query = if self.mariadb {
            RESET_QUERY_MARIADB
        } else {
            RESET_QUERY
        };
        write_packet(&mut bytes, 0, &com_payload(COM_QUERY, query));
        self.state = State::Resetting { writing: true };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
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
        );
        if exchanging && now.duration_since(self.since) >= timeout {
            let cause =
                format!("no answer from the server within {timeout:?} (--backend-connect-timeout)");
            self.fail(cause, out);
        }
    }
}

#[path = "backend_statements.rs"]
pub mod statements;

#[cfg(test)]
#[path = "backend_tests.rs"]
mod tests;

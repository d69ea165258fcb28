//! The client session machine: greeting → login → waiting for a backend →
//! relay → closing. Pure: it takes completions (with the bytes the driver's
//! session buffer holds) and time, and returns [`SessionAction`]s. Every
//! state says who has the next move, and each handler checks the state it
//! expects.
//!
//! This file holds the machine's types and the entry points that dispatch
//! on its state; each phase lives in a child module (they share the
//! private fields): `session/login.rs` (greeting to first lease, with the
//! plugins in `session/sha2.rs` and `session/clear.rs`), `session/command_phase.rs`
//! (the command phase), `session/parked.rs` (transaction pooling between
//! transactions), `session/prepared_commands.rs` and `session/change_user_flow.rs`.

use std::time::{Duration, Instant};

use crate::client_leg::LegKind;
use crate::completion::Completion;
use crate::idle_cut::{self, Held, IdleCutLimits};
use crate::ids::{IdentityId, LeaseSetup, PoolKey, Settings};
use crate::multiplex::{self, PinReason, TxState};
use crate::registry::{intercept, ConnEntry, KillFence, Killed, Registry};
use crate::relay::{Relay, RelayEnd, RelayEvent, RelayOp, RelayTimeouts};
use metrics::{AuthPath, RejectReason};
use wire::auth::NATIVE_PASSWORD;
use wire::constants::*;
use wire::handshake::{self, ClientHello, Greeting, HandshakeResponse};
use wire::packet::{parse_header, split_packet, write_packet};
use wire::reply::{err_payload, ok_payload};
use wire::sha2_rsa::RsaPrivate;
use wire::state_strip::ClientView;
use wire::tracker::Tracker;
use wire::users::Authenticated;
use wire::Users;

/// Capabilities the proxy itself implements for every client, whatever the
/// backend: the login (auth plugins, attributes, initial schema) ends here.
pub const PROXY_CAPS: u32 = CLIENT_LONG_PASSWORD
    | CLIENT_LONG_FLAG
    | CLIENT_CONNECT_WITH_DB
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_PLUGIN_AUTH
    | CLIENT_CONNECT_ATTRS
    | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;

/// Capabilities that change what the server sends; offered to a client only
/// when the backend offers them too, and then negotiated on the backend
/// connection as the client chose them (they are all in the pool key).
pub const PASSTHROUGH_CAPS: u32 = CLIENT_FOUND_ROWS
    | CLIENT_IGNORE_SPACE
    | CLIENT_INTERACTIVE
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_PS_MULTI_RESULTS
    | CLIENT_SESSION_TRACK
    | CLIENT_DEPRECATE_EOF
    | CLIENT_LOCAL_FILES;

/// The peer host the worker gives a unix-socket client (a TCP peer is
/// always an IP address).
pub const UNIX_PEER_HOST: &str = "localhost";

/// How long a refused client may go on sending before it is cut.
pub const LINGER: Duration = Duration::from_secs(2);

/// What a session wants done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionAction {
    /// Write these bytes (whole packets) to the client; its completion goes
    /// to [`Session::on_client_write`].
    SendClient(Vec<u8>),
    /// Read from the client, appending to the session buffer; the
    /// completion goes to [`Session::on_client_read`].
    ReadClient,
    /// Drop the first `n` bytes of the session buffer (a login packet).
    Consume(usize),
    /// Forget the session buffer's bytes.
    ClearBuffer,
    /// Replace the first `len` bytes of the session buffer with `with` (a
    /// KILL mapped to a backend thread); the relay's next write covers it.
    ReplaceBuffered { len: usize, with: Vec<u8> },
    /// Hand the session buffer's bytes to [`Session::on_buffered`] (the
    /// COM_CHANGE_USER packet the relay stopped at is already there).
    ExamineBuffer,
    /// Reset the leased backend in place (COM_RESET_CONNECTION) and give
    /// it back to this session: [`Session::on_relet`], or
    /// [`Session::on_lease_failed`] when the reset fails.
    ResetBackend,
    /// Ask the pool for a backend connection.
    Lease {
        key: PoolKey,
        schema: Option<String>,
        /// Transaction pooling: any connection of the key, whatever
        /// settings it carries (the login gives it back unchanged).
        any_settings: bool,
    },
    /// Transaction pooling: ask the pool for a backend connection for the
    /// command the session buffer holds, set up as `setup` says.
    LeaseForCommand {
        key: PoolKey,
        schema: Option<String>,
        setup: Box<LeaseSetup>,
        /// `--read-write-split`: the command may run on a replica
        /// (`multiplex/read_route.rs`); the driver picks which, or the
        /// writer when none qualifies.
        route: multiplex::Route,
    },
    /// The session stopped waiting for a lease.
    CancelLease,
    /// A relay operation (see [`RelayOp`]).
    Relay(RelayOp),
    /// The login OK was written and the client negotiated a transform
    /// (CLIENT_COMPRESS): from now on every client byte passes through it,
    /// in both directions, and the session sees only the plain stream.
    /// Bytes already in the session buffer are the transform's input.
    StartClientLeg(LegKind),
    /// The client sent an SSLRequest: the TLS handshake starts on its
    /// socket. Bytes already in the session buffer are its first records;
    /// from now on the session sees only the decrypted stream (a
    /// compression leg, if negotiated later, runs inside it).
    StartTls,
    /// Shut the backend's socket down: it will not be reused.
    AbortBackend,
    /// Shut the client's socket down so its operations complete.
    AbortClient,
    /// Hand the backend connection back to the pool; `clean`: reusable.
    Release { clean: bool },
    /// Transaction pooling: hand the backend connection back between
    /// transactions. `clean`: as it is, without a reset, carrying the
    /// session's schema and settings fingerprint (`kept`; None: what it
    /// carried when leased, after a login); otherwise it is closed.
    Park {
        clean: bool,
        kept: Option<(Option<String>, Settings)>,
        /// Reset it first (COM_RESET_CONNECTION): the session's statements
        /// left warnings or errors on it.
        reset: bool,
        /// Read LAST_INSERT_ID() on it first (before any reset), for
        /// [`Session::on_last_insert_id`]; only with `clean` (otherwise
        /// the driver answers None at once).
        ask_last_insert_id: bool,
    },
    /// Transaction pooling: the server's id of this statement on the
    /// session's backend connection, prepared there first if missing
    /// (`session/prepared_commands.rs`); answered by [`Session::on_statement`],
    /// or [`Session::on_lease_failed`] when the connection fails.
    Statement {
        key: std::sync::Arc<crate::prepared::StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
    },
    /// Transaction pooling: a client's COM_RESET_CONNECTION closed every
    /// prepared statement on the leased backend connection; the pool
    /// forgets the server ids it kept for them.
    BackendStatementsClosed,
    /// Transaction pooling: the session's prepared statements grew or
    /// shrank by `count` (`ringgate_client_prepared_statements`), and what
    /// they keep by `bytes` (`ringgate_client_prepared_statement_bytes`).
    Statements { count: i64, bytes: i64 },
    /// Transaction pooling: a prepare was refused by the session's limits
    /// (`ringgate_client_prepares_refused_total`).
    PrepareRefused,
    /// Transaction pooling: the session is pinned to its backend
    /// connection from now on (counted and logged once).
    Pinned(PinReason),
    /// Transaction pooling: the session could give its connection back but
    /// keeps it, because a KILL mapped to its thread is still on its way
    /// to the server (registry.rs); counted once per wait.
    ParkWaitsForKill,
    /// Shut the client socket down for writing (after an ERR, to linger).
    HalfClose,
    /// This session's KILL CONNECTION marked a client that is held as a
    /// direct descriptor: wake its worker so it shuts the socket down.
    WakeKilled(crate::registry::RingWake),
    /// Shut the client socket down and free the session once every
    /// operation that names it has completed.
    Close,
    /// Credentials accepted: the driver finds the backend identity this
    /// login runs as and answers with [`Session::on_identity`].
    Authenticated(Box<Authenticated>),
    /// The identity is known: the pool warms this key.
    LoggedIn { key: PoolKey },
    /// The login OK was written: the connect is complete.
    Connected { elapsed: Duration },
    /// A command began (`commands_total`).
    CommandStarted,
    /// Transaction pooling: a client read completed while the relay was
    /// giving the backend back; hand its result (`res`) and the session
    /// buffer to [`Session::on_client_read`] again.
    Redeliver(Completion),
    /// A login was authenticated, by plugin and path.
    Auth(AuthPath),
    /// A refused connection, by reason.
    Reject(RejectReason),
    /// The session was cut for holding its backend idle while others
    /// waited (`idle_cut.rs`): counted and logged.
    IdleCut { held: Held, limit: Duration },
    /// One line for the log; the driver rate-limits it and adds the peer.
    Log(String),
    /// Several servers: the session's connection was lost before any of
    /// the answer reached the client (`ringgate_writer_lost_total`).
    WriterLost(LostOutcome),
    /// Transaction replay on the session's new connection
    /// (`session/tx_replay.rs`): answered by [`Session::on_replayed`], or
    /// [`Session::on_lease_failed`] when the connection fails.
    ReplayTransaction {
        statements: Vec<crate::tx_replay::Recorded>,
        then: Option<Vec<u8>>,
    },
    /// How a transaction replay ended
    /// (`ringgate_transaction_replays_total{outcome}`).
    TransactionReplay(ReplayResult),
    /// Replay was turned off for the open transaction (a debug line).
    ReplayOff(crate::tx_replay::Off),
}

/// What a session needs from its worker at each step.
pub struct SessionCtx<'a> {
    pub users: &'a Users,
    pub now: Instant,
    pub max_packet_size: u64,
    pub handshake_timeout: Duration,
    pub timeouts: RelayTimeouts,
    /// `--idle-transaction-timeout`, `--idle-pinned-timeout`.
    pub idle_cut: IdleCutLimits,
    pub draining: bool,
    /// The session buffer's size: no login packet can be longer.
    pub read_buffer_size: usize,
    /// Every client connection of the process, for KILL.
    pub registry: &'a Registry,
    /// `--rsa-key`: caching_sha2 full authentication over plain TCP.
    pub rsa_key: Option<&'a RsaPrivate>,
    /// `--tx-prepared-statements move` (the default): transaction pooling
    /// maps statement ids across connections instead of pinning at the
    /// first prepare.
    pub move_prepared_statements: bool,
    /// Several `--backend` servers: a relay keeps its client when its
    /// connection is lost (`session/writer_lost.rs`).
    pub several_servers: bool,
    /// `--transaction-replay` on: its `--transaction-replay-max-size`
    /// (`session/tx_replay.rs`).
    pub transaction_replay: Option<usize>,
    /// `--max-prepared-statements` and `--max-prepared-bytes`: what one
    /// session's moving statements may keep.
    pub statement_limits: crate::statement_limits::StatementLimits,
    /// Transaction pooling: a park right after an answer withdraws the
    /// relay's idle backend read, armed in the same batch and not yet
    /// submitted, instead of submitting it and cancelling it at once (two
    /// SQEs and a completion per query; the pool's close watch is what
    /// watches a parked connection). Every mode: in ring mode that read is
    /// the backend's armed multishot receive, which the park hands to the
    /// pool still armed (worker/ring_io/give_back.rs), where a server EOF that beat
    /// the park discards the connection and reaches the session as
    /// `PoolEvent::ClosedIdle`. False only in tests of the old path.
    pub park_withdraws_idle_read: bool,
    /// `--read-write-split`: a parked session's safe reads may run on a
    /// replica (`multiplex/read_route.rs`).
    pub read_write_split: bool,
    /// `--read-only-functions`: stored functions declared to only read
    /// (upper-cased; see `wire::lexer::LexOptions::read_only_functions`).
    pub read_only_functions: &'static [Box<str>],
    /// Every `--backend` address, in configured order (a pool server
    /// number indexes it).
    pub servers: &'a [std::net::SocketAddr],
    /// `--causal-reads`: what transaction-pooled sessions track and wait
    /// for (`causal.rs`).
    pub causal: &'a crate::causal::CausalConfig,
}

/// What the client told us at login (or in its last COM_CHANGE_USER).
struct Login {
    user: String,
    database: Option<String>,
    used_password: bool,
    /// The client's connection attributes (CLIENT_CONNECT_ATTRS), passed
    /// on to a backend connection opened for this session.
    connect_attrs: Vec<(String, String)>,
}

enum State {
    /// Writing a greeting-phase ERR (1040), then closing.
    Rejecting,
    /// Writing the HandshakeV10 greeting.
    Greeting,
    /// Reading HandshakeResponse41 (or an SSLRequest).
    ReadHello,
    /// Writing an AuthSwitchRequest to mysql_native_password.
    AuthSwitch,
    /// Reading the client's answer to the AuthSwitchRequest.
    ReadSwitchResponse,
    /// Authenticated; the pool owes a lease (or an error).
    WaitBackend,
    /// Writing the login OK; the relay starts once it is written.
    SendAuthOk,
    /// Relaying; the relay says whose turn it is.
    Relay(Box<Relay>),
    /// Writing an ERR the proxy made, then closing.
    SendErrThenClose,
    /// Writing an ERR to a client that may still be sending a packet, then
    /// half-closing and discarding its input until EOF or a deadline:
    /// closing with unread input would reset the connection and lose the ERR.
    SendErrThenLinger,
    /// Half-closed after the ERR; reading and discarding until EOF.
    Lingering { until: Instant },
    /// COM_CHANGE_USER: logging in again (`session/change_user_flow.rs`).
    ChangeUser(Box<change_user_flow::Flow>),
    /// Transaction pooling: a prepared-statement command, its id being
    /// mapped to the connection's (`session/prepared_commands.rs`).
    Statement(Box<prepared_commands::Flow>),
    /// Transaction pooling: between transactions, holding no backend
    /// connection; `reading` while a client read is in flight.
    Parked {
        tracker: Box<Tracker>,
        reading: bool,
        since: Instant,
    },
    /// Transaction pooling: the client sent a command; the pool owes a
    /// connection for it.
    Resuming { tracker: Box<Tracker> },
    /// Transaction pooling: writing an answer the proxy made to a command
    /// (an ERR), then parked again.
    ParkedReply { tracker: Box<Tracker> },
    /// The writer died under a recorded transaction: waiting for a
    /// connection to the new writer and the replay on it
    /// (`session/tx_replay.rs`).
    ReplayingTx(Box<tx_replay::ReplayWait>),
    /// Closed; the driver frees the slot once its operations complete.
    Closed,
}

/// What a new session starts from.
pub struct NewSession {
    pub scramble: [u8; 20],
    pub connection_id: u32,
    /// Capabilities offered in the greeting.
    pub capabilities: u32,
    /// MariaDB extended capabilities offered in the greeting (only sent
    /// when `capabilities` lacks CLIENT_MYSQL).
    pub ext_capabilities: u32,
    pub server_version: String,
    /// The client's address, for the text of ERR 1045.
    pub peer_host: String,
    pub now: Instant,
    /// `--max-connections` was reached: greet with ERR 1040 and close.
    pub over_limit: bool,
    /// `--pooling transaction`.
    pub transaction_pooling: bool,
    /// `--require-secure-transport`: refuse a TCP login without TLS.
    pub require_secure_transport: bool,
}

pub struct Session {
    state: State,
    scramble: [u8; 20],
    capabilities: u32,
    ext_capabilities: u32,
    peer_host: String,
    accepted_at: Instant,
    /// Sequence id for the next packet the proxy sends during login.
    seq: u8,
    login: Option<Login>,
    key: PoolKey,
    tracker: Option<Tracker>,
    /// A backend connection is leased to this session.
    has_backend: bool,
    /// Transaction pooling: parked, waiting for the LAST_INSERT_ID() the
    /// connection it gave back is asked for; `command_waiting`: the
    /// client's next command arrived meanwhile (it stays in the buffer).
    last_insert_id_pending: bool,
    command_waiting: bool,
    /// Waiting in the pool's queue.
    leasing: bool,
    /// Reused for the relay's events (no allocation per completion).
    relay_scratch: Vec<RelayEvent>,
    /// The id in the greeting (a KILL of it is the client's own).
    connection_id: u32,
    /// The session this one's mapped KILL CONNECTION ends: closed when the
    /// server's answer is OK, before the OK is relayed (registry.rs).
    kill_victim: Option<u32>,
    /// This session's mapped KILL is on its way to the target's backend
    /// thread: the target keeps that connection until the answer arrives.
    kill_fence: Option<KillFence>,
    /// The command in flight is the proxy's own in place of a KILL
    /// (`Rewrite::stateless`): transaction pooling learns nothing from it.
    own_kill_command: bool,
    /// This session's own registry entry (the worker's; None in unit
    /// tests): a connection goes back only when no KILL of its thread is
    /// in flight.
    own: Option<std::sync::Arc<ConnEntry>>,
    /// Transaction pooling: a park is put off for a KILL in flight
    /// ([`SessionAction::ParkWaitsForKill`] was sent for this wait).
    park_waits_for_kill: bool,
    /// Transaction pooling: the server closed the connection this session
    /// used last while the session wrote an answer of its own
    /// (`ParkedReply`); it ends once that is written.
    last_backend_closed: bool,
    /// The client negotiated CLIENT_COMPRESS: the transform starts once
    /// the login OK is written (the OK itself goes out plain).
    client_leg: Option<LegKind>,
    /// The capabilities negotiated with the client (fixed at login; a
    /// COM_CHANGE_USER is read with them).
    client_caps: u32,
    /// `--pooling transaction`.
    transaction_pooling: bool,
    /// The client's transport keeps a password private: TLS, or the unix
    /// socket (as MySQL counts it). Full caching_sha2 authentication and
    /// mysql_clear_password need it.
    secure: bool,
    /// `--require-secure-transport`.
    require_secure_transport: bool,
    /// The client sent its SSLRequest and TLS runs.
    tls_started: bool,
    /// A caching_sha2_password login's step (session/sha2.rs).
    sha2: Sha2Phase,
    /// Transaction pooling: what the session carries between backend
    /// connections (from login on).
    tx: Option<Box<TxState>>,
    /// Transaction pooling: the session's prepared statements.
    stmts: Option<Box<crate::prepared::Registry>>,
    /// The server the session's connection reaches (for what a client is
    /// told when it is lost; `session/writer_lost.rs`).
    /// An index into [`SessionCtx::servers`]: an address would cost every
    /// session 32 bytes.
    /// Whether it is a replica (a read's lease).
    backend_server: Option<(u16, bool)>,
    /// The connection died inside a transaction while the session sat idle
    /// in it: the reply its next command gets instead.
    lost_transaction: Option<Vec<u8>>,
    /// The reply being written answers a command whose relay left a client
    /// read in flight: no other is started once it is written.
    reply_leaves_read: bool,
    /// That read completed while the reply was written: handed back after.
    reply_late_read: Option<Completion>,
}

fn packet(seq: u8, payload: &[u8]) -> (Vec<u8>, u8) {
    let mut out = Vec::with_capacity(payload.len() + 4);
    let next = write_packet(&mut out, seq, payload);
    (out, next)
}

impl Session {
    pub fn new(n: NewSession, out: &mut Vec<SessionAction>) -> Session {
        let secure = n.peer_host == UNIX_PEER_HOST;
        let mut s = Session {
            state: State::Greeting,
            scramble: n.scramble,
            capabilities: n.capabilities,
            ext_capabilities: n.ext_capabilities,
            peer_host: n.peer_host,
            accepted_at: n.now,
            seq: 0,
            login: None,
            key: PoolKey::default_warm(),
            tracker: None,
            has_backend: false,
            last_insert_id_pending: false,
            command_waiting: false,
            leasing: false,
            relay_scratch: Vec::new(),
            connection_id: n.connection_id,
            kill_victim: None,
            kill_fence: None,
            own_kill_command: false,
            own: None,
            park_waits_for_kill: false,
            last_backend_closed: false,
            client_leg: None,
            client_caps: 0,
            transaction_pooling: n.transaction_pooling,
            secure,
            require_secure_transport: n.require_secure_transport,
            tls_started: false,
            sha2: Sha2Phase::Off,
            tx: None,
            stmts: None,
            backend_server: None,
            lost_transaction: None,
            reply_leaves_read: false,
            reply_late_read: None,
        };
        if n.over_limit {
            out.push(SessionAction::Reject(RejectReason::MaxConnections));
            // A greeting-phase ERR has sequence id 0: the client reads it
            // where it expects the greeting.
            s.send_err(
                ER_CON_COUNT_ERROR,
                "Too many connections",
                State::Rejecting,
                out,
            );
            return s;
        }
        let greeting = Greeting {
            protocol_version: 10,
            server_version: n.server_version,
            connection_id: n.connection_id,
            scramble: n.scramble.to_vec(),
            capabilities: n.capabilities,
            ext_capabilities: n.ext_capabilities,
            charset: UTF8MB4_GENERAL_CI,
            status: SERVER_STATUS_AUTOCOMMIT,
            auth_plugin: NATIVE_PASSWORD.into(),
        };
        let (bytes, next) = packet(0, &handshake::build_greeting(&greeting));
        s.seq = next;
        out.push(SessionAction::SendClient(bytes));
        s
    }

    /// The registry entry of this session's connection id (its KILL state).
    pub fn set_registry_entry(&mut self, entry: std::sync::Arc<ConnEntry>) {
        self.own = Some(entry);
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Between a relay's stop at a statement command and the relay that
    /// follows (`--tx-prepared-statements move`).
    pub fn in_statement_flow(&self) -> bool {
        matches!(self.state, State::Statement(_))
    }

    /// The relay waits for the client's next command with nothing owed:
    /// a backend read it asks for now watches the connection between
    /// commands rather than reading a response.
    /// The relay's backend read is owed an answer ([`Relay::awaits_answer`]).
    pub fn relay_awaits_answer(&self) -> bool {
        matches!(&self.state, State::Relay(relay) if relay.awaits_answer())
    }

    pub fn relay_between_commands(&self) -> bool {
        matches!(&self.state, State::Relay(relay) if relay.idle_at_boundary())
    }

    pub fn is_relaying(&self) -> bool {
        matches!(
            self.state,
            State::Relay(_)
                | State::Parked { .. }
                | State::Resuming { .. }
                | State::ParkedReply { .. }
        )
    }

    /// Transaction pooling: why the session is pinned, if it is.
    #[cfg(test)]
    pub fn pinned(&self) -> Option<PinReason> {
        self.tx.as_ref().and_then(|t| t.pinned())
    }

    /// The proxy user, once the client has logged in.
    pub fn user(&self) -> Option<&str> {
        self.login.as_ref().map(|l| l.user.as_str())
    }

    /// The connection attributes the client sent at login (empty before).
    pub fn connect_attrs(&self) -> &[(String, String)] {
        self.login
            .as_ref()
            .map_or(&[], |l| l.connect_attrs.as_slice())
    }

    /// The pool key, with the backend identity once logged in.
    #[cfg(test)]
    pub fn key(&self) -> PoolKey {
        self.key
    }

    /// The client negotiated compression: its relay reads through the
    /// transform once the login OK is written (true from the handshake
    /// response on, before the leg itself exists).
    pub fn has_client_leg(&self) -> bool {
        self.client_leg.is_some()
    }

    fn send_err(&mut self, code: u16, message: &str, then: State, out: &mut Vec<SessionAction>) {
        self.send_payload(&err_payload(code, message), then, out)
    }

    /// Write one proxy-made packet (the next sequence id), then `then`.
    fn send_payload(&mut self, payload: &[u8], then: State, out: &mut Vec<SessionAction>) {
        let (bytes, next) = packet(self.seq, payload);
        self.seq = next;
        self.state = then;
        out.push(SessionAction::SendClient(bytes));
    }

    /// A response-boundary tracker for this session's negotiated protocol.
    fn new_tracker(&self, ctx: &SessionCtx) -> Tracker {
        let mut tracker = Tracker::new(self.client_caps & CLIENT_DEPRECATE_EOF != 0);
        tracker.set_cache_metadata(self.key.ext_caps & MARIADB_CLIENT_CACHE_METADATA != 0);
        tracker.set_max_client_packet(ctx.max_packet_size);
        if self.client_caps & CLIENT_SESSION_TRACK == 0 {
            // Its backend connection tracks session state all the same.
            tracker.strip_state(Some(ClientView::Untracked));
        }
        tracker
    }

    fn close(&mut self, out: &mut Vec<SessionAction>) {
        if self.is_closed() {
            return;
        }
        if self.leasing {
            self.leasing = false;
            out.push(SessionAction::CancelLease);
        }
        if self.has_backend {
            // Only reachable outside the relay (the lease arrived, the
            // relay has not started): the connection is at a boundary
            // (one in a statement exchange is closed by the pool).
            self.has_backend = false;
            out.push(SessionAction::Release { clean: true });
        }
        if let Some((count, bytes)) = self.stmts.take().map(|r| r.kept()) {
            if count > 0 || bytes > 0 {
                out.push(SessionAction::Statements {
                    count: -(count as i64),
                    bytes: -(bytes as i64),
                });
            }
        }
        self.kill_fence = None;
        self.state = State::Closed;
        out.push(SessionAction::Close);
    }

    /// A proxy-made packet was written (all of it), or the write failed.
    /// `buffered`: the bytes the session buffer holds now.
    pub fn on_client_write(
        &mut self,
        res: Completion,
        buffered: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if self.is_closed() {
            return;
        }
        if res.is_error() {
            return self.close(out);
        }
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Rejecting | State::SendErrThenClose => {
                self.state = State::SendErrThenClose;
                self.close(out)
            }
            State::SendErrThenLinger => {
                self.state = State::Lingering {
                    until: ctx.now + LINGER,
                };
                out.push(SessionAction::HalfClose);
                out.push(SessionAction::ClearBuffer);
                out.push(SessionAction::ReadClient);
            }
            State::Greeting => {
                self.state = State::ReadHello;
                out.push(SessionAction::ReadClient);
            }
            State::AuthSwitch => {
                self.state = State::ReadSwitchResponse;
                if buffered.is_empty() {
                    out.push(SessionAction::ReadClient);
                } else {
                    // The answer may already be here (it cannot be, by the
                    // protocol, but bytes that are here are never dropped).
                    self.on_login_bytes(buffered, ctx, out);
                }
            }
            State::SendAuthOk => self.login_ok_written(buffered, ctx, out),
            State::ChangeUser(flow) => self.change_user_written(flow, buffered, ctx, out),
            State::Statement(flow) => {
                self.state = State::Statement(flow);
                self.statement_written(res, out)
            }
            State::ParkedReply { tracker } => self.parked_reply_written(tracker, ctx, out),
            other => {
                self.state = other;
                out.push(SessionAction::Log(
                    "session write completed in an unexpected state".into(),
                ));
                self.close(out)
            }
        }
    }

    /// The login's OK is written: the session is connected, and relays
    /// (on a held connection, or parked between transactions).
    fn login_ok_written(
        &mut self,
        buffered: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        out.push(SessionAction::Connected {
            elapsed: ctx.now.duration_since(self.accepted_at),
        });
        if self.transaction_pooling {
            return self.start_transaction_pooling(buffered, ctx, out);
        }
        self.start_relay(buffered, ctx, out);
    }

    /// A reply the parked session made itself is written: parked again,
    /// reading the client's next command.
    fn parked_reply_written(
        &mut self,
        tracker: Box<Tracker>,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let late = self.reply_late_read.take();
        let leaves_read = std::mem::take(&mut self.reply_leaves_read);
        self.state = State::Parked {
            tracker,
            reading: late.is_none(),
            since: ctx.now,
        };
        if std::mem::take(&mut self.last_backend_closed) {
            return self.last_backend_gone(out);
        }
        match late {
            Some(res) => out.push(SessionAction::Redeliver(res)),
            // The relay's read is still in flight.
            None if leaves_read => {}
            None => {
                out.push(SessionAction::ClearBuffer);
                out.push(SessionAction::ReadClient);
            }
        }
    }

    /// A client read completed; `data` is everything the session buffer
    /// holds.
    pub fn on_client_read(
        &mut self,
        res: Completion,
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if matches!(self.state, State::Relay(_)) {
            return self.relay_client_read(res, data, ctx, out);
        }
        if self.is_closed() {
            return;
        }
        if matches!(self.state, State::ReplayingTx(_)) {
            return self.replay_client_read(res);
        }
        if matches!(self.state, State::ParkedReply { .. }) && self.reply_leaves_read {
            // The relay's read, behind the reply to a lost transaction:
            // handled once the reply is written.
            self.reply_leaves_read = false;
            self.reply_late_read = Some(res);
            return;
        }
        if let State::Parked { reading, .. } = &mut self.state {
            *reading = false;
            if !res.brought_bytes() {
                return self.close(out);
            }
            return self.resume(data, ctx, out);
        }
        if !res.brought_bytes() {
            return self.close(out);
        }
        match self.state {
            State::Lingering { .. } => {
                out.push(SessionAction::ClearBuffer);
                out.push(SessionAction::ReadClient);
            }
            State::ReadHello | State::ReadSwitchResponse => self.on_login_bytes(data, ctx, out),
            State::ChangeUser(_) => self.change_user_bytes(data, ctx, out),
            State::Statement(_) => self.statement_bytes(data, ctx, out),
            _ => self.close(out),
        }
    }

    /// A client read while relaying: a KILL or SHOW PROCESSLIST between
    /// commands is rewritten first, then the relay reads the bytes.
    fn relay_client_read(
        &mut self,
        res: Completion,
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let State::Relay(relay) = &mut self.state else {
            return;
        };
        let mut events = std::mem::take(&mut self.relay_scratch);
        // A KILL of a proxy connection id, between commands: sent on as
        // the same KILL of the backend thread that serves that session
        // (or the server's refusal); SHOW PROCESSLIST: with those ids.
        // See registry.rs.
        let user = self.login.as_ref().map_or("", |l| l.user.as_str());
        // Not while the relay gives the backend back (transaction
        // pooling): the bytes then wait for the session's next lease,
        // and the KILL is mapped when that lease is known.
        let rewrite = (res.brought_bytes() && relay.idle_at_boundary() && !relay.finishing())
            .then(|| {
                intercept(
                    data,
                    user,
                    self.connection_id,
                    ctx.registry,
                    ctx.read_buffer_size,
                )
            })
            .flatten();
        match rewrite {
            Some(mut r) => {
                self.kill_victim = r.close_after_ok;
                self.kill_fence = r.fence.take();
                self.own_kill_command = r.stateless;
                let mut bytes = r.packet.clone();
                bytes.extend_from_slice(&data[r.replaces..]);
                out.push(SessionAction::ReplaceBuffered {
                    len: r.replaces,
                    with: r.packet,
                });
                relay.on_client_read(Completion::Done(bytes.len()), &bytes, ctx.now, &mut events);
            }
            None => relay.on_client_read(res, data, ctx.now, &mut events),
        }
        self.apply_relay(&mut events, ctx, out)
    }

    /// The session buffer's bytes, on [`SessionAction::ExamineBuffer`].
    pub fn on_buffered(&mut self, data: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        match self.state {
            State::ChangeUser(_) => self.change_user_bytes(data, ctx, out),
            State::Statement(_) => self.statement_bytes(data, ctx, out),
            // The command that waited for LAST_INSERT_ID().
            State::Parked { .. } if !data.is_empty() => self.resume(data, ctx, out),
            _ => {}
        }
    }

    /// Deadlines: the handshake, lingering, and the relay's own.
    pub fn on_tick(&mut self, ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let in_login = matches!(
            self.state,
            State::Greeting | State::ReadHello | State::AuthSwitch | State::ReadSwitchResponse
        );
        if in_login && ctx.now.duration_since(self.accepted_at) >= ctx.handshake_timeout {
            out.push(SessionAction::Reject(RejectReason::Handshake));
            out.push(SessionAction::Log(
                "login not completed within --handshake-timeout; dropped".into(),
            ));
            return self.close(out);
        }
        if ctx.draining && matches!(self.state, State::Greeting | State::ReadHello) {
            return self.close(out);
        }
        if let State::ChangeUser(flow) = &self.state {
            if let Some(why) = flow.expired(ctx) {
                out.push(SessionAction::Log(why.into()));
                return self.close(out);
            }
        }
        match &mut self.state {
            State::Lingering { until } if ctx.now >= *until => self.close(out),
            State::Parked { since, .. } => {
                let idle = ctx.timeouts.idle;
                if ctx.draining {
                    self.close(out)
                } else if idle > Duration::ZERO && ctx.now.duration_since(*since) >= idle {
                    out.push(SessionAction::Log(
                        "session idle for --idle-timeout; closed".into(),
                    ));
                    self.close(out)
                } else if let Some(wait) = self
                    .tx
                    .as_ref()
                    .and_then(|t| t.wait_timeout())
                    .filter(|w| ctx.now.duration_since(*since) >= *w)
                {
                    // No server counts a parked session's idle time: end it
                    // as the server ends a direct connection after its
                    // wait_timeout (a bare close, no ERR, as MariaDB does).
                    out.push(SessionAction::Log(format!(
                        "session idle for its wait_timeout ({} s) holding no backend connection; closed",
                        wait.as_secs()
                    )));
                    self.close(out)
                }
            }
            State::Relay(relay) => {
                let mut events = std::mem::take(&mut self.relay_scratch);
                relay.on_tick(ctx.now, &ctx.timeouts, ctx.draining, &mut events);
                self.apply_relay(&mut events, ctx, out);
            }
            _ => {}
        }
    }
}

mod change_user_flow;

mod clear;

mod login;

mod parked;

mod command_phase;

mod sha2;
mod tx_replay;
mod writer_lost;
pub use tx_replay::ReplayResult;
pub use writer_lost::LostOutcome;

mod prepared_commands;
use sha2::Sha2Phase;

#[cfg(test)]
mod tests;

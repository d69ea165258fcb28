//! The client session state machine: greeting → login → backend lease →
//! relay → close. Each handler asserts the state it expects; the client fd
//! has at most one operation in flight (`op_in_flight`), which is what makes
//! tear-down simple: shut the socket down, wait for that one CQE, release.

use std::net::Shutdown;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use socket2::Socket;

use super::backend::PoolKey;
use super::worker::Worker;
use super::{try_reserve, unreserve};
use crate::buffers::{Owner, ReadBuffer, WriteBuf};
use crate::metrics::RejectReason;
use crate::mysql::auth::{self, NATIVE_PASSWORD};
use crate::mysql::constants::*;
use crate::mysql::handshake::{self, ClientHello, Greeting, HandshakeResponse};
use crate::mysql::packet::{parse_header, split_packet, write_packet};
use crate::mysql::reply::{err_payload, err_payload_with_state, ok_payload};
use crate::mysql::tracker::{Direction, StopReason, TrackError, Tracker};
use crate::ring::{OpTag, Token};

/// Capabilities the proxy itself implements for every client, whatever the
/// backend: the login (auth plugins, attributes, initial schema) ends here.
const PROXY_CAPS: u32 = CLIENT_LONG_PASSWORD
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
/// connection as the client chose them.
const PASSTHROUGH_CAPS: u32 = CLIENT_FOUND_ROWS
    | CLIENT_IGNORE_SPACE
    | CLIENT_INTERACTIVE
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_PS_MULTI_RESULTS
    | CLIENT_SESSION_TRACK
    | CLIENT_DEPRECATE_EOF
    | CLIENT_LOCAL_FILES;

/// How long a refused client may go on sending before it is cut.
const LINGER: Duration = Duration::from_secs(2);

/// ER_UNKNOWN_ERROR: what MySQL itself uses for errors without a better code.
const ER_UNKNOWN_ERROR: u16 = 1105;

/// Where a session is. Every variant names who has the next move.
pub(super) enum SessionState {
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
    /// Authenticated; waiting for a backend connection (queued, being
    /// opened, or selecting the initial schema).
    WaitBackend,
    /// Writing the login OK; the relay starts once it is written.
    SendAuthOk,
    /// Relaying commands and responses; the tracker says whose turn it is.
    Relay(RelayStep),
    /// Writing an ERR the proxy made, then closing.
    SendErrThenClose,
    /// Writing an ERR to a client that may still be sending a packet, then
    /// half-closing and discarding its input until EOF or a deadline: closing
    /// with unread input would reset the connection and lose the ERR.
    SendErrThenLinger,
    /// Half-closed after the ERR; reading and discarding until EOF.
    Lingering { until: Instant },
    /// Shut down; waiting for the last in-flight operation's CQE.
    Closing,
}

/// The relay's half-duplex steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RelayStep {
    /// READ(_FIXED) from the client into the session's buffer.
    ReadClient,
    /// WRITE(_FIXED) of the session's buffer `[pos, end)` to the backend.
    WriteBackend {
        pos: usize,
        end: usize,
        stop: Option<StopReason>,
    },
    /// READ(_FIXED) from the backend into the backend connection's buffer.
    ReadBackend,
    /// WRITE(_FIXED) of the backend buffer `[pos, end)` to the client.
    WriteClient { pos: usize, end: usize },
}

/// What the client told us at login, kept for the backend lease.
pub(super) struct Login {
    pub user: String,
    pub database: Option<String>,
    pub used_password: bool,
}

pub(super) struct Session {
    pub sock: Socket,
    pub state: SessionState,
    pub buf: Option<ReadBuffer>,
    pub out: WriteBuf,
    pub out_pos: usize,
    /// True exactly while an SQE using `buf` or `out` is in the kernel.
    pub op_in_flight: bool,
    pub scramble: [u8; 20],
    pub accepted_at: Instant,
    /// Sequence id for the next packet the proxy sends during login.
    pub seq: u8,
    pub login: Option<Login>,
    pub key: PoolKey,
    /// The leased backend connection (index, generation).
    pub backend: Option<(u32, u32)>,
    pub tracker: Tracker,
    /// Holds one unit of `Shared::clients`.
    pub counted: bool,
    /// When the last command began (for `--idle-timeout`).
    pub last_activity: Instant,
    /// When the current write to the client began (for
    /// `--client-write-timeout`); `None` while not writing to the client.
    pub client_write_since: Option<Instant>,
    /// The backend connection saw bytes that leave it mid-protocol (e.g. an
    /// oversized packet was refused): never reuse it.
    pub backend_dirty: bool,
}

/// At most one log line per interval for per-connection failures, so a
/// storm of bad clients cannot flood the disk.
#[derive(Default)]
pub(super) struct LogLimiter {
    window_start: Option<Instant>,
    count: u32,
}

impl LogLimiter {
    const WINDOW: Duration = Duration::from_secs(1);
    const PER_WINDOW: u32 = 20;

    pub fn allow(&mut self) -> bool {
        let now = Instant::now();
        match self.window_start {
            Some(t) if now.duration_since(t) < Self::WINDOW => {
                self.count += 1;
                self.count <= Self::PER_WINDOW
            }
            _ => {
                self.window_start = Some(now);
                self.count = 1;
                true
            }
        }
    }
}

fn peer(sock: &Socket) -> String {
    sock.peer_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or_else(|| "?".into(), |a| a.to_string())
}

impl Worker {
    fn token(tag: OpTag, (i, g): (u32, u32)) -> u64 {
        Token::new(tag, i, g).into()
    }

    pub(super) fn session_gen(&self, i: u32) -> u32 {
        self.sessions.generation(i)
    }

    pub(super) fn on_new_client(&mut self, sock: Socket) {
        // Fails harmlessly on a unix socket.
        let _ = sock.set_nodelay(true);
        let m = self.metrics();
        m.client_connections_total.fetch_add(1, Relaxed);
        m.client_connections.fetch_add(1, Relaxed);
        let counted = try_reserve(&self.shared.clients, self.shared.config.max_connections);
        let scramble = match auth::new_scramble() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("no randomness for the scramble: {e}");
                [b'x'; 20]
            }
        };
        let session = Session {
            sock,
            state: SessionState::Greeting,
            buf: None,
            out: WriteBuf::default(),
            out_pos: 0,
            op_in_flight: false,
            scramble,
            accepted_at: Instant::now(),
            seq: 0,
            login: None,
            key: PoolKey::default_warm(),
            backend: None,
            tracker: Tracker::new(false),
            counted,
            last_activity: Instant::now(),
            client_write_since: None,
            backend_dirty: false,
        };
        let (i, g) = self.sessions.insert(session);
        if !counted {
            self.metrics().reject(RejectReason::MaxConnections);
            if self.log_limiter.allow() {
                let who = self
                    .sessions
                    .get_checked(i, g)
                    .map(|s| peer(&s.sock))
                    .unwrap_or_default();
                tracing::warn!(
                    worker = self.id,
                    peer = %who,
                    "rejected a client: --max-connections {} reached (ERR 1040)",
                    self.shared.config.max_connections
                );
            }
            // A greeting-phase ERR has sequence id 0: the client reads it
            // where it expects the greeting.
            self.send_err(
                i,
                g,
                ER_CON_COUNT_ERROR,
                "Too many connections",
                SessionState::Rejecting,
            );
            return;
        }
        // The read buffer is taken now, before the greeting is written, so a
        // connection storm meets the pool at accept time (never blocking).
        let buf = self.pool.acquire(Owner::Client);
        let id = self.next_connection_id;
        self.next_connection_id = self.next_connection_id.wrapping_add(1);
        let caps = self.advertised_caps();
        let greeting = Greeting {
            protocol_version: 10,
            server_version: self.template.server_version.clone(),
            connection_id: id,
            scramble: scramble.to_vec(),
            capabilities: caps,
            charset: UTF8MB4_GENERAL_CI,
            status: SERVER_STATUS_AUTOCOMMIT,
            auth_plugin: NATIVE_PASSWORD.into(),
        };
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        s.buf = Some(buf);
        let out = s.out.bytes_mut();
        out.clear();
        s.seq = write_packet(out, 0, &handshake::build_greeting(&greeting));
        self.write_out(i, g);
    }

    /// What the greeting offers: the proxy's own capabilities plus the
    /// pass-through ones the backend supports (all of them until the first
    /// backend greeting tells us otherwise).
    fn advertised_caps(&self) -> u32 {
        let mut pass = PASSTHROUGH_CAPS & self.template.capabilities.unwrap_or(u32::MAX);
        if !self.shared.config.allow_local_infile {
            pass &= !CLIENT_LOCAL_FILES;
        }
        PROXY_CAPS | pass
    }

    /// Write the session's `out` bytes from the start.
    fn write_out(&mut self, i: u32, g: u32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        s.out_pos = 0;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&s.sock);
        let entry = s
            .out
            .write_sqe(fd, 0, Self::token(OpTag::ClientWrite, (i, g)));
        s.op_in_flight = true;
        self.push(entry);
    }

    /// Queue an ERR packet to the client and move to `then` (Rejecting or
    /// SendErrThenClose), which closes after the write.
    pub(super) fn send_err(
        &mut self,
        i: u32,
        g: u32,
        code: u16,
        message: &str,
        then: SessionState,
    ) {
        self.send_err_payload(i, g, &err_payload(code, message), then);
    }

    pub(super) fn send_err_payload(&mut self, i: u32, g: u32, payload: &[u8], then: SessionState) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        debug_assert!(!s.op_in_flight);
        let out = s.out.bytes_mut();
        out.clear();
        s.seq = write_packet(out, s.seq, payload);
        s.state = then;
        self.write_out(i, g);
    }

    fn start_client_read(&mut self, i: u32, g: u32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&s.sock);
        let Some(buf) = s.buf.as_mut() else { return };
        let entry = buf.read_sqe(fd, Self::token(OpTag::ClientRead, (i, g)));
        s.op_in_flight = true;
        self.push(entry);
    }

    pub(super) fn session_write_done(&mut self, i: u32, g: u32, res: i32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        s.op_in_flight = false;
        // Exactly one of the session's buffers was in flight: the read
        // buffer (relaying a command to the backend) or `out` (a packet the
        // proxy made). Ask the buffers, not the state: the state may have
        // moved to Closing while the write was in the kernel.
        match s.buf.as_mut().filter(|b| b.in_flight()) {
            Some(buf) => buf.complete_write(),
            None => s.out.complete(),
        }
        if matches!(s.state, SessionState::Closing) {
            return self.finish_close(i, g);
        }
        if let SessionState::Relay(RelayStep::WriteBackend { pos, end, stop }) = s.state {
            return self.relay_backend_write_done(i, g, res, pos, end, stop);
        }
        if res <= 0 {
            return self.close_session(i, g, false);
        }
        s.out_pos += res as usize;
        if s.out_pos < s.out.len() {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&s.sock);
            let entry = s
                .out
                .write_sqe(fd, s.out_pos, Self::token(OpTag::ClientWrite, (i, g)));
            s.op_in_flight = true;
            return self.push(entry);
        }
        match s.state {
            SessionState::Rejecting | SessionState::SendErrThenClose => {
                let clean = s.tracker.pending_responses() == 0;
                self.close_session(i, g, clean)
            }
            SessionState::SendErrThenLinger => {
                let _ = s.sock.shutdown(Shutdown::Write);
                s.state = SessionState::Lingering {
                    until: Instant::now() + LINGER,
                };
                // The backend is not needed while the client finishes.
                if let Some(b) = s.backend.take() {
                    let clean = !s.backend_dirty;
                    self.release_backend(b, clean);
                }
                self.linger_read(i, g)
            }
            SessionState::Greeting => {
                s.state = SessionState::ReadHello;
                self.start_client_read(i, g)
            }
            SessionState::AuthSwitch => {
                s.state = SessionState::ReadSwitchResponse;
                if let Some(b) = s.buf.as_mut() {
                    b.clear();
                }
                self.start_client_read(i, g)
            }
            SessionState::SendAuthOk => {
                self.shared
                    .metrics
                    .worker(self.id)
                    .record_connect(s.accepted_at.elapsed());
                s.state = SessionState::Relay(RelayStep::ReadClient);
                self.relay_next(i, g)
            }
            _ => {
                tracing::error!("session write completed in an unexpected state");
                self.close_session(i, g, false)
            }
        }
    }

    pub(super) fn session_read_done(&mut self, i: u32, g: u32, res: i32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        s.op_in_flight = false;
        let n = res.max(0) as usize;
        if let Some(buf) = s.buf.as_mut() {
            buf.complete(n);
        }
        if matches!(s.state, SessionState::Closing) {
            return self.finish_close(i, g);
        }
        if res <= 0 {
            // EOF or error from the client: it left. The backend stays
            // usable only if no response was in progress.
            let clean = s.tracker.at_command_boundary();
            return self.close_session(i, g, clean);
        }
        match s.state {
            SessionState::Lingering { .. } => self.linger_read(i, g),
            SessionState::ReadHello | SessionState::ReadSwitchResponse => {
                self.on_login_packet(i, g)
            }
            SessionState::Relay(RelayStep::ReadClient) => self.on_client_chunk(i, g, n),
            _ => self.close_session(i, g, false),
        }
    }

    /// A login-phase packet may arrive in pieces; wait until it is whole.
    fn on_login_packet(&mut self, i: u32, g: u32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let Some(buf) = s.buf.as_ref() else { return };
        let filled = buf.filled();
        // A login packet declared longer than the buffer can never complete
        // (e.g. an HTTP request sent to the MySQL port): refuse it now
        // rather than at --handshake-timeout.
        let header = parse_header(filled);
        let too_long = header.is_some_and(|(len, _)| len + HEADER_LEN > buf.capacity());
        if let Some((_, seq)) = header {
            // Errors answer the client's packet: its sequence id + 1.
            s.seq = seq.wrapping_add(1);
        }
        let Some((pkt, _)) = split_packet(filled).filter(|_| !too_long) else {
            if too_long || buf.filled_len() >= buf.capacity() {
                return self.login_failed(
                    i,
                    g,
                    RejectReason::Handshake,
                    ER_HANDSHAKE_ERROR,
                    "Bad handshake: packet too large",
                );
            }
            return self.start_client_read(i, g);
        };
        if pkt.has_continuation() {
            return self.login_failed(
                i,
                g,
                RejectReason::Handshake,
                ER_HANDSHAKE_ERROR,
                "Bad handshake: packet too large",
            );
        }
        s.seq = pkt.seq.wrapping_add(1);
        let payload = pkt.payload.to_vec();
        if matches!(s.state, SessionState::ReadSwitchResponse) {
            return self.verify_login(i, g, &payload);
        }
        match handshake::parse_handshake_response(&payload) {
            Err(e) => {
                // The client gets the generic text; the log gets the reason.
                self.log_failure(i, g, &format!("login refused (ERR 1043): bad handshake response: {e}"));
                self.metrics().reject(RejectReason::Handshake);
                self.send_err(i, g, ER_HANDSHAKE_ERROR, "Bad handshake", SessionState::SendErrThenClose)
            }
            Ok(ClientHello::SslRequest { .. }) => self.login_failed(
                i,
                g,
                RejectReason::Handshake,
                ER_HANDSHAKE_ERROR,
                "Bad handshake: ringgate does not offer TLS; connect with TLS disabled (e.g. --ssl=0 / ssl-mode=DISABLED)",
            ),
            Ok(ClientHello::Response(hello)) => self.on_hello(i, g, hello),
        }
    }

    /// Discard what the client still sends; EOF (or the deadline, checked
    /// by the tick) ends the session.
    fn linger_read(&mut self, i: u32, g: u32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        if let Some(b) = s.buf.as_mut() {
            b.clear();
        }
        self.start_client_read(i, g)
    }

    fn on_hello(&mut self, i: u32, g: u32, hello: HandshakeResponse) {
        let caps = hello.capabilities & self.advertised_caps();
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        s.key = PoolKey {
            caps: caps & SESSION_KEY_CAPS,
            collation: hello.charset,
        };
        s.tracker = Tracker::new(caps & CLIENT_DEPRECATE_EOF != 0);
        s.tracker
            .set_max_client_packet(self.shared.config.max_packet_size);
        s.login = Some(Login {
            user: hello.username,
            database: hello.database,
            used_password: !hello.auth_response.is_empty(),
        });
        let plugin_ok = caps & CLIENT_PLUGIN_AUTH == 0
            || hello
                .auth_plugin
                .as_deref()
                .is_none_or(|p| p == NATIVE_PASSWORD || p.is_empty());
        if plugin_ok {
            return self.verify_login(i, g, &hello.auth_response);
        }
        // A MySQL 8 client proposes caching_sha2_password; ask it to use
        // mysql_native_password with the scramble it already has.
        let switch = handshake::build_auth_switch_request(NATIVE_PASSWORD, &s.scramble);
        let out = s.out.bytes_mut();
        out.clear();
        s.seq = write_packet(out, s.seq, &switch);
        s.state = SessionState::AuthSwitch;
        self.write_out(i, g);
    }

    fn verify_login(&mut self, i: u32, g: u32, token: &[u8]) {
        let users = self.shared.users();
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let Some(login) = s.login.as_mut() else {
            return;
        };
        if !token.is_empty() {
            login.used_password = true;
        }
        if users.verify_native(&login.user, &s.scramble, token) {
            self.warm_key = s.key;
            s.state = SessionState::WaitBackend;
            return self.acquire_backend(i, g);
        }
        // Same message for an unknown user and a wrong password, so the
        // answer does not reveal which users exist.
        let msg = format!(
            "Access denied for user '{}'@'{}' (using password: {})",
            login.user,
            s.sock
                .peer_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .map_or_else(|| "localhost".into(), |a| a.ip().to_string()),
            if login.used_password { "YES" } else { "NO" }
        );
        self.login_failed(i, g, RejectReason::Auth, ER_ACCESS_DENIED_ERROR, &msg);
    }

    fn login_failed(&mut self, i: u32, g: u32, reason: RejectReason, code: u16, msg: &str) {
        self.metrics().reject(reason);
        self.log_failure(i, g, &format!("login refused (ERR {code}): {msg}"));
        self.send_err(i, g, code, msg, SessionState::SendErrThenClose);
    }

    /// One line per failed connection, with the peer and the cause;
    /// rate-limited so that a storm of bad clients cannot flood the disk.
    /// Never given passwords or scrambles.
    pub(super) fn log_failure(&mut self, i: u32, g: u32, cause: &str) {
        if !self.log_limiter.allow() {
            return;
        }
        let who = self
            .sessions
            .get_checked(i, g)
            .map(|s| peer(&s.sock))
            .unwrap_or_default();
        tracing::info!(worker = self.id, peer = %who, "connection failed: {cause}");
    }

    /// The lease succeeded: select the schema if one was asked for, then
    /// send the login OK.
    pub(super) fn session_backend_ready(&mut self, i: u32, g: u32, backend: (u32, u32)) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        s.backend = Some(backend);
        let wanted = s.login.as_ref().and_then(|l| l.database.clone());
        let current = self
            .backends
            .get_checked(backend.0, backend.1)
            .and_then(|b| b.schema.clone());
        match wanted {
            // Already selected on this connection: skip the round trip.
            Some(db) if current.as_deref() != Some(db.as_str()) => {
                self.backend_init_db(backend, &db)
            }
            _ => self.send_auth_ok(i, g),
        }
    }

    pub(super) fn send_auth_ok(&mut self, i: u32, g: u32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let out = s.out.bytes_mut();
        out.clear();
        s.seq = write_packet(out, s.seq, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
        s.state = SessionState::SendAuthOk;
        self.write_out(i, g);
    }

    /// The backend refused the initial schema: pass its ERR on, then close.
    pub(super) fn session_init_db_failed(
        &mut self,
        i: u32,
        g: u32,
        code: u16,
        sqlstate: &str,
        message: &str,
    ) {
        self.send_err_payload(
            i,
            g,
            &err_payload_with_state(code, sqlstate, message),
            SessionState::SendErrThenClose,
        );
    }

    /// No backend connection could be had.
    pub(super) fn session_backend_failed(&mut self, i: u32, g: u32, code: u16, message: &str) {
        self.metrics().reject(RejectReason::BackendUnavailable);
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        if !matches!(s.state, SessionState::WaitBackend) {
            return;
        }
        self.send_err(i, g, code, message, SessionState::SendErrThenClose);
    }

    pub(super) fn backend_unavailable_message(&self, cause: &str) -> (u16, String) {
        (
            ER_UNKNOWN_ERROR,
            format!(
                "ringgate: backend {} unavailable: {cause}",
                self.shared.config.backend
            ),
        )
    }

    // ---- relay ----

    /// Decide the next relay step from the tracker.
    pub(super) fn relay_next(&mut self, i: u32, g: u32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        match s.tracker.next_read() {
            Direction::Client => {
                if self.draining.is_some()
                    && s.tracker.at_command_boundary()
                    && !s.tracker.in_transaction()
                {
                    // Drain: an idle session is closed between commands.
                    return self.close_session(i, g, true);
                }
                s.state = SessionState::Relay(RelayStep::ReadClient);
                if let Some(b) = s.buf.as_mut() {
                    b.clear();
                }
                self.start_client_read(i, g)
            }
            Direction::Server => {
                s.state = SessionState::Relay(RelayStep::ReadBackend);
                match s.backend {
                    Some(b) => self.backend_start_read(b),
                    None => self.close_session(i, g, false),
                }
            }
        }
    }

    fn on_client_chunk(&mut self, i: u32, g: u32, n: usize) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let Some(buf) = s.buf.as_mut() else { return };
        let at_boundary = s.tracker.at_command_boundary();
        s.last_activity = Instant::now();
        let chunk = match s.tracker.on_client_bytes(buf.filled()) {
            Ok(c) => c,
            Err(TrackError::PacketTooLarge { len, max }) => {
                s.backend_dirty = true;
                s.seq = 1;
                if self.log_limiter.allow() {
                    tracing::info!(worker = self.id, peer = %peer(&s.sock), "client packet of {len}+ bytes refused (--max-packet-size {max}); ERR 1153");
                }
                return self.send_err(
                    i,
                    g,
                    ER_NET_PACKET_TOO_LARGE,
                    "Got a packet bigger than 'max_allowed_packet' bytes",
                    SessionState::SendErrThenLinger,
                );
            }
            Err(e) => {
                self.log_failure(i, g, &format!("client protocol error: {e}"));
                return self.close_session(i, g, false);
            }
        };
        if at_boundary {
            self.metrics().commands_total.fetch_add(1, Relaxed);
        }
        debug_assert!(chunk.forward <= n);
        if chunk.forward == 0 {
            return match chunk.stop {
                Some(stop) => self.relay_stop(i, g, stop),
                None => self.relay_next(i, g),
            };
        }
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let Some((bi, bg)) = s.backend else {
            return self.close_session(i, g, false);
        };
        let Some(bfd) = self.backend_fd(bi, bg) else {
            return self.close_session(i, g, false);
        };
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let Some(buf) = s.buf.as_mut() else { return };
        s.state = SessionState::Relay(RelayStep::WriteBackend {
            pos: 0,
            end: chunk.forward,
            stop: chunk.stop,
        });
        let entry = buf.write_sqe(
            bfd,
            0,
            chunk.forward,
            Self::token(OpTag::ClientWrite, (i, g)),
        );
        s.op_in_flight = true;
        self.push(entry);
    }

    fn relay_backend_write_done(
        &mut self,
        i: u32,
        g: u32,
        res: i32,
        pos: usize,
        end: usize,
        stop: Option<StopReason>,
    ) {
        if res <= 0 {
            // The backend went away mid-command.
            let cause = if res < 0 {
                std::io::Error::from_raw_os_error(-res).to_string()
            } else {
                "connection closed".to_string()
            };
            self.log_failure(
                i,
                g,
                &format!("backend connection lost while sending a command: {cause}"),
            );
            return self.close_session(i, g, false);
        }
        self.metrics()
            .bytes_client_to_backend_total
            .fetch_add(res as u64, Relaxed);
        let pos = pos + res as usize;
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        if pos < end {
            let Some((bi, bg)) = s.backend else { return };
            let Some(bfd) = self.backend_fd(bi, bg) else {
                return self.close_session(i, g, false);
            };
            let Some(s) = self.sessions.get_mut(i, g) else {
                return;
            };
            let Some(buf) = s.buf.as_mut() else { return };
            s.state = SessionState::Relay(RelayStep::WriteBackend { pos, end, stop });
            let entry = buf.write_sqe(bfd, pos, end, Self::token(OpTag::ClientWrite, (i, g)));
            s.op_in_flight = true;
            return self.push(entry);
        }
        match stop {
            Some(stop) => self.relay_stop(i, g, stop),
            None => self.relay_next(i, g),
        }
    }

    /// COM_QUIT is answered by the proxy (by closing); unsupported commands
    /// get ERR 1047. Either way the session ends, and the backend goes back
    /// to the pool if no response to an earlier command is outstanding.
    fn relay_stop(&mut self, i: u32, g: u32, stop: StopReason) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let clean = s.tracker.pending_responses() == 0;
        match stop {
            StopReason::Quit => self.close_session(i, g, clean),
            StopReason::Unsupported { command } => {
                s.seq = 1;
                let msg = format!(
                    "ringgate does not support {} on a pooled connection",
                    command_name(command)
                );
                self.send_err(
                    i,
                    g,
                    ER_UNKNOWN_COM_ERROR,
                    &msg,
                    SessionState::SendErrThenClose,
                )
            }
        }
    }

    /// The backend delivered `n` bytes into its buffer: track and forward.
    pub(super) fn relay_backend_read(&mut self, i: u32, g: u32, data_len: usize, ok: bool) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        if !ok {
            self.log_failure(i, g, "backend connection lost while waiting for a response");
            return self.close_session(i, g, false);
        }
        let Some((bi, bg)) = s.backend else { return };
        let cfd = std::os::fd::AsRawFd::as_raw_fd(&s.sock);
        let Some(b) = self.backends.get_checked(bi, bg) else {
            return self.close_session(i, g, false);
        };
        if let Err(e) = s.tracker.on_server_bytes(b.buf.filled()) {
            self.log_failure(i, g, &format!("unexpected bytes from the backend: {e}"));
            return self.close_session(i, g, false);
        }
        s.client_write_since = Some(Instant::now());
        s.state = SessionState::Relay(RelayStep::WriteClient {
            pos: 0,
            end: data_len,
        });
        self.backend_write_to(bi, bg, cfd, 0, data_len);
    }

    pub(super) fn relay_client_write_done(&mut self, i: u32, g: u32, res: i32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        let SessionState::Relay(RelayStep::WriteClient { pos, end }) = s.state else {
            return self.close_session(i, g, false);
        };
        if res <= 0 {
            // The client went away mid-response: the backend connection is
            // in the middle of the protocol and cannot be reused.
            let clean = s.tracker.at_command_boundary();
            return self.close_session(i, g, clean);
        }
        self.metrics()
            .bytes_backend_to_client_total
            .fetch_add(res as u64, Relaxed);
        let pos = pos + res as usize;
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        s.client_write_since = (pos < end).then(Instant::now);
        if pos < end {
            s.state = SessionState::Relay(RelayStep::WriteClient { pos, end });
            let cfd = std::os::fd::AsRawFd::as_raw_fd(&s.sock);
            let Some((bi, bg)) = s.backend else { return };
            return self.backend_write_to(bi, bg, cfd, pos, end);
        }
        self.relay_next(i, g)
    }

    // ---- tear-down ----

    /// End a session. `backend_clean` says whether its backend connection is
    /// at a command boundary and may be reset and reused.
    pub(super) fn close_session(&mut self, i: u32, g: u32, backend_clean: bool) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        if matches!(s.state, SessionState::Closing) {
            return;
        }
        s.state = SessionState::Closing;
        let backend_clean = backend_clean && !s.backend_dirty;
        let backend = s.backend.take();
        // Shut the socket down so an in-flight read or write completes now
        // (close() alone would not cancel it; io_uring-facts.md).
        let _ = s.sock.shutdown(Shutdown::Both);
        let in_flight = s.op_in_flight;
        if let Some(b) = backend {
            self.release_backend(b, backend_clean);
        }
        if !in_flight {
            self.finish_close(i, g);
        }
    }

    /// Every CQE for the session has been reaped: release and forget it.
    pub(super) fn finish_close(&mut self, i: u32, g: u32) {
        let Some(s) = self.sessions.get_mut(i, g) else {
            return;
        };
        if s.op_in_flight {
            return;
        }
        let Some(s) = self.sessions.remove(i) else {
            return;
        };
        if let Some(buf) = s.buf {
            if self.pool.release(buf).is_err() {
                tracing::error!("session buffer still in flight at close; leaked");
            }
        }
        if s.counted {
            unreserve(&self.shared.clients);
        }
        self.metrics().client_connections.fetch_sub(1, Relaxed);
        // `s.sock` drops here: the fd is closed after its last CQE.
    }

    /// Handshake timeout, pool-wait and drain deadlines.
    pub(super) fn expire_sessions(&mut self, now: Instant) {
        let handshake_timeout = self.shared.config.handshake_timeout;
        let idle_timeout = self.shared.config.idle_timeout;
        let write_timeout = self.shared.config.client_write_timeout;
        let drain_over = self.drain_expired(now);
        for i in self.sessions.indexes() {
            let g = self.session_gen(i);
            let Some(s) = self.sessions.get_mut(i, g) else {
                continue;
            };
            let in_login = matches!(
                s.state,
                SessionState::Greeting
                    | SessionState::ReadHello
                    | SessionState::AuthSwitch
                    | SessionState::ReadSwitchResponse
            );
            if in_login && now.duration_since(s.accepted_at) >= handshake_timeout {
                self.shared
                    .metrics
                    .worker(self.id)
                    .reject(RejectReason::Handshake);
                if self.log_limiter.allow() {
                    let who = peer(&s.sock);
                    tracing::info!(worker = self.id, peer = %who, "login not completed within --handshake-timeout; dropped");
                }
                self.close_session(i, g, false);
            } else if matches!(s.state, SessionState::Lingering { until } if now >= until) {
                self.close_session(i, g, false);
            } else if drain_over && !matches!(s.state, SessionState::Closing) {
                let clean = s.tracker.at_command_boundary();
                self.close_session(i, g, clean);
            } else if idle_timeout > Duration::ZERO
                && matches!(s.state, SessionState::Relay(RelayStep::ReadClient))
                && s.tracker.at_command_boundary()
                && now.duration_since(s.last_activity) >= idle_timeout
            {
                tracing::debug!(worker = self.id, "session idle for --idle-timeout; closed");
                self.close_session(i, g, true);
            } else if s
                .client_write_since
                .is_some_and(|t| now.duration_since(t) >= write_timeout)
            {
                // The client stopped reading a result: cut it off rather
                // than pin the backend; the backend is mid-response, so it
                // is discarded.
                if self.log_limiter.allow() {
                    tracing::info!(worker = self.id, peer = %peer(&s.sock), "client stopped reading for --client-write-timeout; disconnected");
                }
                self.close_session(i, g, false);
            }
        }
    }

    /// Drain start: sessions waiting for their next command are closed now.
    pub(super) fn close_idle_sessions(&mut self) {
        for i in self.sessions.indexes() {
            let g = self.session_gen(i);
            let Some(s) = self.sessions.get_mut(i, g) else {
                continue;
            };
            let idle = matches!(s.state, SessionState::Relay(RelayStep::ReadClient))
                && s.tracker.at_command_boundary()
                && !s.tracker.in_transaction();
            let in_login = matches!(s.state, SessionState::Greeting | SessionState::ReadHello);
            if idle || in_login {
                self.close_session(i, g, true);
            }
        }
    }

    pub(super) fn expire_waiters(&mut self, now: Instant) {
        while let Some(w) = self.waiters.front() {
            if w.deadline > now {
                break;
            }
            let (i, g) = w.session;
            self.waiters.pop_front();
            let msg = format!(
                "ringgate: no backend connection became free within --backend-wait-timeout ({:?}); --backend-max-connections is {}",
                self.shared.config.backend_wait_timeout, self.shared.config.backend_max_connections
            );
            self.session_backend_failed(i, g, ER_CON_COUNT_ERROR, &msg);
        }
    }
}

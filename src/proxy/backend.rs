//! Backend connections and the per-worker pool.
//!
//! A backend connection logs in as `--backend-user` once, then serves one
//! client session at a time (session pooling). It is keyed by [`PoolKey`]:
//! only a client whose key matches may lease it, because those settings
//! change what the server sends. On release it is reset with
//! COM_RESET_CONNECTION and goes back to the idle list only after the OK.
//! A connection that errored or was left mid-protocol is never reused.

use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use super::session::SessionState;
use super::worker::{Waiter, Worker};
use super::{try_reserve, unreserve};
use crate::buffers::{Owner, ReadBuffer, WriteBuf};
use crate::mysql::auth::{native_token, NATIVE_PASSWORD};
use crate::mysql::constants::*;
use crate::mysql::handshake::{self, HandshakeResponse};
use crate::mysql::packet::{split_packet, write_packet};
use crate::mysql::reply::{
    com_payload, parse_auth_reply, parse_reply, parse_reset_replies, ResetOutcome, ServerReply,
};
use crate::mysql::ProtocolError;
use crate::ring::{ops, OpTag, Token};

/// What a pooled connection must match to be leased: the capability bits
/// that change what the server sends or how it behaves
/// (`SESSION_KEY_CAPS`: DEPRECATE_EOF, FOUND_ROWS, MULTI_STATEMENTS,
/// MULTI_RESULTS, PS_MULTI_RESULTS, LOCAL_FILES, INTERACTIVE,
/// SESSION_TRACK) and the client's collation from the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct PoolKey {
    pub caps: u32,
    pub collation: u8,
}

impl PoolKey {
    /// What the pool warms up before any client has logged in: the
    /// multi-result settings that the common connectors all ask for.
    pub fn default_warm() -> PoolKey {
        PoolKey {
            caps: CLIENT_MULTI_STATEMENTS | CLIENT_MULTI_RESULTS | CLIENT_PS_MULTI_RESULTS,
            collation: UTF8MB4_GENERAL_CI,
        }
    }
}

/// Largest packet we ask the backend to send us; the server's own
/// max_allowed_packet is what really limits it.
const BACKEND_MAX_PACKET: u32 = 1 << 30;

/// The half of an exchange of proxy-made packets that is in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Writing,
    Reading,
}

/// Why the proxy is talking to the backend itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purpose {
    /// Reading the server's greeting.
    Greeting,
    /// HandshakeResponse41, then OK / ERR / AuthSwitch.
    Login,
    /// Answer to an AuthSwitchRequest, then OK / ERR.
    AuthSwitch,
    /// COM_INIT_DB for the schema the client gave at connect.
    InitDb,
    /// COM_RESET_CONNECTION on release.
    Reset,
}

pub(super) enum BackendState {
    /// TCP connect in flight (linked to a timeout).
    Connecting,
    /// Proxy-made packets being exchanged.
    Exchange(Purpose, Phase),
    /// In the idle list, no operation in flight.
    Idle,
    /// Leased to a session that drives its I/O in the relay.
    Leased,
    /// Being discarded; waiting for the in-flight operation's CQE.
    Closing,
}

pub(super) struct Backend {
    pub sock: Socket,
    pub state: BackendState,
    pub buf: ReadBuffer,
    pub out: WriteBuf,
    pub out_pos: usize,
    /// True exactly while an SQE using `buf` or `out` is in the kernel.
    pub op_in_flight: bool,
    pub key: PoolKey,
    /// The session this connection is leased to (index, generation).
    pub leased_to: Option<(u32, u32)>,
    /// The session that asked for this connection while it was opened.
    pub opened_for: Option<(u32, u32)>,
    /// Counted in the busy gauge (true while leased).
    pub busy: bool,
    /// When the current connect or proxy-made exchange began: a server that
    /// accepts TCP and then stalls is cut after --backend-connect-timeout.
    pub exchange_since: Instant,
    /// The connection's current schema as last learned (None = none):
    /// COM_RESET_CONNECTION keeps it, so the reset exchange asks for it.
    pub schema: Option<String>,
    /// The schema a COM_INIT_DB in flight asked for.
    pub requested_schema: Option<String>,
    /// When it last went idle (for --backend-idle-timeout).
    pub idle_since: Instant,
}

/// Take a connection out of the busy gauge (it is no longer leased).
fn clear_busy(b: &mut Backend, metrics: &crate::metrics::WorkerMetrics) {
    if b.busy {
        b.busy = false;
        metrics.backend_busy.fetch_sub(1, Relaxed);
    }
}

fn backend_token(tag: OpTag, (i, g): (u32, u32)) -> u64 {
    Token::new(tag, i, g).into()
}

impl Worker {
    pub(super) fn backend_fd(&self, i: u32, g: u32) -> Option<RawFd> {
        self.backends.get_checked(i, g).map(|b| b.sock.as_raw_fd())
    }

    // ---- leasing ----

    /// Find or open a backend connection for an authenticated session.
    pub(super) fn acquire_backend(&mut self, si: u32, sg: u32) {
        if !self.try_acquire(si, sg) {
            let deadline = Instant::now() + self.shared.config.backend_wait_timeout;
            self.waiters.push_back(Waiter {
                session: (si, sg),
                deadline,
            });
        }
    }

    /// Lease an idle connection of the session's key, or open one if the
    /// global limit allows (evicting an idle connection of another key when
    /// that is the only way). False when the session must wait.
    fn try_acquire(&mut self, si: u32, sg: u32) -> bool {
        let Some(s) = self.sessions.get_mut(si, sg) else {
            return true;
        };
        let key = s.key;
        let wanted = s.login.as_ref().and_then(|l| l.database.clone());
        // A client that gave a schema gets it selected on any connection
        // (COM_INIT_DB, skipped when it is already current); one that gave
        // none needs a connection with no schema selected, since there is no
        // command that unselects one.
        let usable = |b: &Backend| b.key == key && (wanted.is_some() || b.schema.is_none());
        let pick = |idle: &[u32], backends: &super::slab::Slab<Backend>| {
            let exact = idle.iter().rposition(|&b| {
                backends
                    .get(b)
                    .is_some_and(|b| usable(b) && b.schema == wanted)
            });
            exact.or_else(|| {
                idle.iter()
                    .rposition(|&b| backends.get(b).is_some_and(&usable))
            })
        };
        while let Some(pos) = pick(&self.idle, &self.backends) {
            let bi = self.idle.remove(pos);
            let bg = self.backends.generation(bi);
            self.metrics().backend_idle.fetch_sub(1, Relaxed);
            if self.backend_is_alive(bi) {
                self.lease((bi, bg), (si, sg));
                return true;
            }
            tracing::debug!(
                worker = self.id,
                "idle backend connection was closed by the server; discarded"
            );
            self.discard_backend(bi, bg);
        }
        // A connection of this key that is being reset will be free within
        // one round trip to the server; waiting for it is far cheaper than a
        // new connection (TCP + login + a server thread), and it keeps a
        // connect storm from growing the pool past the real concurrency.
        let resetting = self
            .backends
            .values()
            .filter(|b| {
                matches!(b.state, BackendState::Exchange(Purpose::Reset, _)) && b.key == key
            })
            .count();
        if resetting > self.waiters_ahead(key, (si, sg)) {
            return false;
        }
        let max = self.shared.config.backend_max_connections;
        if try_reserve(&self.shared.backends, max) {
            self.open_backend(key, Some((si, sg)));
            return true;
        }
        // At the limit: make room by closing an idle connection of another key.
        if let Some(bi) = self.idle.first().copied() {
            self.idle.remove(0);
            self.metrics().backend_idle.fetch_sub(1, Relaxed);
            let bg = self.backends.generation(bi);
            self.discard_backend(bi, bg);
            if try_reserve(&self.shared.backends, max) {
                self.open_backend(key, Some((si, sg)));
                return true;
            }
        }
        false
    }

    /// A cheap check on checkout (as Pingora does): an idle connection
    /// must have nothing to read. EOF or stray bytes mean the server closed
    /// it (e.g. wait_timeout, or a restart).
    fn backend_is_alive(&self, bi: u32) -> bool {
        let Some(b) = self.backends.get(bi) else {
            return false;
        };
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        match b
            .sock
            .recv_with_flags(&mut probe, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        {
            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }

    fn lease(&mut self, (bi, bg): (u32, u32), (si, sg): (u32, u32)) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.state = BackendState::Leased;
        b.leased_to = Some((si, sg));
        b.busy = true;
        self.metrics().backend_busy.fetch_add(1, Relaxed);
        self.session_backend_ready(si, sg, (bi, bg));
    }

    /// Sessions of `key` queued for a connection ahead of `session` (all of
    /// them when it is not queued yet).
    fn waiters_ahead(&self, key: PoolKey, session: (u32, u32)) -> usize {
        self.waiters
            .iter()
            .take_while(|w| w.session != session)
            .filter(|w| {
                let (si, _) = w.session;
                self.sessions.get(si).is_some_and(|s| s.key == key)
            })
            .count()
    }

    /// Close idle connections beyond `--backend-pool-size` that have not
    /// been used for `--backend-idle-timeout`, oldest first.
    pub(super) fn trim_idle(&mut self, now: Instant) {
        let keep = self.shared.config.backend_pool_size;
        let timeout = self.shared.config.backend_idle_timeout;
        // `idle` is ordered by when each connection went idle (pushed on
        // make_idle), so the front holds the longest-idle ones.
        while self.idle.len() > keep {
            let bi = self.idle[0];
            let expired = self
                .backends
                .get(bi)
                .is_some_and(|b| now.duration_since(b.idle_since) >= timeout);
            if !expired {
                break;
            }
            self.idle.remove(0);
            self.metrics().backend_idle.fetch_sub(1, Relaxed);
            let bg = self.backends.generation(bi);
            tracing::debug!(
                worker = self.id,
                "idle backend connection closed after --backend-idle-timeout"
            );
            self.discard_backend(bi, bg);
        }
    }

    /// Serve queued sessions in order while connections can be had.
    pub(super) fn serve_waiters(&mut self) {
        while let Some(w) = self.waiters.front() {
            let (si, sg) = w.session;
            let waiting = self.sessions.get_mut(si, sg).is_some_and(|s| {
                matches!(s.state, SessionState::WaitBackend) && s.backend.is_none()
            });
            if !waiting {
                self.waiters.pop_front();
                continue;
            }
            if !self.try_acquire(si, sg) {
                break;
            }
            self.waiters.pop_front();
        }
    }

    /// The session is done with its connection. A clean one is reset and
    /// reused; anything else is discarded.
    pub(super) fn release_backend(&mut self, (bi, bg): (u32, u32), clean: bool) {
        let draining = self.draining.is_some();
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.leased_to = None;
        clear_busy(b, self.shared.metrics.worker(self.id));
        let resettable =
            clean && !b.op_in_flight && matches!(b.state, BackendState::Leased) && !draining;
        if !resettable {
            return self.discard_backend(bi, bg);
        }
        // Pipelined: the reset, then the schema it left selected.
        let out = b.out.bytes_mut();
        out.clear();
        write_packet(out, 0, &com_payload(COM_RESET_CONNECTION, &[]));
        write_packet(out, 0, &com_payload(COM_QUERY, b"SELECT DATABASE()"));
        b.state = BackendState::Exchange(Purpose::Reset, Phase::Writing);
        self.backend_write_out((bi, bg));
    }

    /// COM_INIT_DB for the schema given at connect.
    pub(super) fn backend_init_db(&mut self, (bi, bg): (u32, u32), db: &str) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        let out = b.out.bytes_mut();
        out.clear();
        write_packet(out, 0, &com_payload(COM_INIT_DB, db.as_bytes()));
        b.requested_schema = Some(db.to_string());
        b.state = BackendState::Exchange(Purpose::InitDb, Phase::Writing);
        self.backend_write_out((bi, bg));
    }

    /// Keep `--backend-pool-size` connections of the warm key ready.
    pub(super) fn refill_pool(&mut self) {
        if self.backend_retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let want = self.shared.config.backend_pool_size;
        let key = self.warm_key;
        let have = self
            .backends
            .values()
            .filter(|b| {
                b.key == key
                    && matches!(
                        b.state,
                        BackendState::Idle | BackendState::Connecting | BackendState::Exchange(..)
                    )
                    && b.leased_to.is_none()
            })
            .count();
        for _ in have..want {
            if !try_reserve(
                &self.shared.backends,
                self.shared.config.backend_max_connections,
            ) {
                break;
            }
            self.open_backend(key, None);
        }
    }

    /// At the end of a drain: close idle connections. True when none remain.
    pub(super) fn close_idle_backends(&mut self) -> bool {
        for bi in std::mem::take(&mut self.idle) {
            self.metrics().backend_idle.fetch_sub(1, Relaxed);
            let bg = self.backends.generation(bi);
            self.discard_backend(bi, bg);
        }
        self.backends.len() == 0
    }

    // ---- opening and login ----

    fn open_backend(&mut self, key: PoolKey, opened_for: Option<(u32, u32)>) {
        self.metrics().backend_connects_total.fetch_add(1, Relaxed);
        let addr = self.shared.config.backend;
        let sock = match Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)) {
            Ok(s) => s,
            Err(e) => {
                unreserve(&self.shared.backends);
                return self.backend_open_failed(opened_for, &format!("socket(): {e}"));
            }
        };
        let _ = sock.set_nodelay(true);
        let buf = self.pool.acquire(Owner::Backend);
        let backend = Backend {
            sock,
            state: BackendState::Connecting,
            buf,
            out: WriteBuf::default(),
            out_pos: 0,
            op_in_flight: true,
            key,
            leased_to: None,
            opened_for,
            busy: false,
            exchange_since: Instant::now(),
            schema: None,
            requested_schema: None,
            idle_since: Instant::now(),
        };
        let (bi, bg) = self.backends.insert(backend);
        let fd = self.backends.get(bi).map_or(-1, |b| b.sock.as_raw_fd());
        let connect = ops::connect(
            fd,
            self.backend_addr,
            Token::new(OpTag::BackendConnect, bi, bg),
        );
        let timeout = ops::link_timeout(self.connect_timeout, Token::new(OpTag::Ignore, 0, 0));
        self.ring.push_linked(connect, timeout);
    }

    fn backend_open_failed(&mut self, opened_for: Option<(u32, u32)>, cause: &str) {
        self.metrics()
            .backend_connect_failures_total
            .fetch_add(1, Relaxed);
        if self.backend_retry_at.is_none_or(|t| Instant::now() >= t) && self.log_limiter.allow() {
            tracing::warn!(
                worker = self.id,
                backend = %self.shared.config.backend,
                "backend connection failed: {cause}; clients get an error until it is reachable, retrying every {:?}",
                super::worker::BACKEND_RETRY
            );
        }
        self.backend_retry_at = Some(Instant::now() + super::worker::BACKEND_RETRY);
        if let Some((si, sg)) = opened_for {
            let (code, msg) = self.backend_unavailable_message(cause);
            self.session_backend_failed(si, sg, code, &msg);
        }
    }

    pub(super) fn backend_connect_done(&mut self, bi: u32, bg: u32, res: i32) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.op_in_flight = false;
        if matches!(b.state, BackendState::Closing) {
            return self.finish_backend_close(bi, bg);
        }
        if res < 0 {
            let cause = if -res == libc::ECANCELED {
                format!(
                    "connect timed out after {:?} (--backend-connect-timeout)",
                    self.shared.config.backend_connect_timeout
                )
            } else {
                format!("connect: {}", std::io::Error::from_raw_os_error(-res))
            };
            return self.backend_failed(bi, bg, &cause);
        }
        b.state = BackendState::Exchange(Purpose::Greeting, Phase::Reading);
        self.backend_start_read((bi, bg));
    }

    /// Something went wrong while opening or talking to this connection.
    fn backend_failed(&mut self, bi: u32, bg: u32, cause: &str) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        let opened_for = b.opened_for.take();
        let leased_to = b.leased_to;
        let opening = matches!(
            b.state,
            BackendState::Connecting
                | BackendState::Exchange(
                    Purpose::Greeting | Purpose::Login | Purpose::AuthSwitch,
                    _
                )
        );
        let init_db = matches!(b.state, BackendState::Exchange(Purpose::InitDb, _));
        if opening {
            self.backend_open_failed(opened_for, cause);
        } else {
            tracing::debug!(worker = self.id, "backend connection lost: {cause}");
        }
        if let Some((si, sg)) = leased_to {
            if init_db {
                let (code, msg) = self.backend_unavailable_message(cause);
                self.session_backend_failed(si, sg, code, &msg);
            } else {
                // The session closes and releases (discards) this connection.
                return self.close_session(si, sg, false);
            }
        }
        self.discard_backend(bi, bg);
    }

    pub(super) fn backend_start_read(&mut self, (bi, bg): (u32, u32)) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        let fd = b.sock.as_raw_fd();
        if matches!(b.state, BackendState::Leased) {
            b.buf.clear();
        }
        let entry = b
            .buf
            .read_sqe(fd, backend_token(OpTag::BackendRead, (bi, bg)));
        b.op_in_flight = true;
        self.push(entry);
    }

    /// Relay: write `buf[pos..end]` of this backend's buffer to the client.
    pub(super) fn backend_write_to(
        &mut self,
        bi: u32,
        bg: u32,
        client_fd: RawFd,
        pos: usize,
        end: usize,
    ) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        let entry = b.buf.write_sqe(
            client_fd,
            pos,
            end,
            backend_token(OpTag::BackendWrite, (bi, bg)),
        );
        b.op_in_flight = true;
        self.push(entry);
    }

    fn backend_write_out(&mut self, (bi, bg): (u32, u32)) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.out_pos = 0;
        b.exchange_since = Instant::now();
        let entry = b.out.write_sqe(
            b.sock.as_raw_fd(),
            0,
            backend_token(OpTag::BackendWrite, (bi, bg)),
        );
        b.op_in_flight = true;
        self.push(entry);
    }

    pub(super) fn backend_read_done(&mut self, bi: u32, bg: u32, res: i32) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.op_in_flight = false;
        b.buf.complete(res.max(0) as usize);
        match b.state {
            BackendState::Closing => return self.finish_backend_close(bi, bg),
            BackendState::Leased => {
                let Some((si, sg)) = b.leased_to else {
                    return self.discard_backend(bi, bg);
                };
                return self.relay_backend_read(si, sg, res.max(0) as usize, res > 0);
            }
            _ => {}
        }
        if res <= 0 {
            let cause = if res == 0 {
                "the server closed the connection".to_string()
            } else {
                std::io::Error::from_raw_os_error(-res).to_string()
            };
            return self.backend_failed(bi, bg, &cause);
        }
        if let BackendState::Exchange(Purpose::Reset, _) = b.state {
            return self.on_backend_reset_replies(bi, bg);
        }
        let Some((pkt, consumed)) = split_packet(b.buf.filled()) else {
            if b.buf.filled_len() >= b.buf.capacity() {
                return self.backend_failed(bi, bg, "reply larger than the read buffer");
            }
            return self.backend_start_read((bi, bg));
        };
        let seq = pkt.seq;
        let payload = pkt.payload.to_vec();
        b.buf.consume(consumed);
        let BackendState::Exchange(purpose, _) = b.state else {
            return self.backend_failed(bi, bg, "unexpected bytes from the server");
        };
        match purpose {
            Purpose::Greeting => self.on_backend_greeting(bi, bg, &payload),
            Purpose::Login | Purpose::AuthSwitch => {
                self.on_backend_auth_reply(bi, bg, seq, &payload)
            }
            Purpose::InitDb => self.on_backend_init_db_reply(bi, bg, &payload),
            Purpose::Reset => unreachable!("handled before packet splitting"),
        }
    }

    pub(super) fn backend_write_done(&mut self, bi: u32, bg: u32, res: i32) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.op_in_flight = false;
        match b.state {
            BackendState::Leased => {
                b.buf.complete_write();
                let Some((si, sg)) = b.leased_to else {
                    return self.discard_backend(bi, bg);
                };
                return self.relay_client_write_done(si, sg, res);
            }
            BackendState::Closing => {
                // Either buffer may have been the one in flight.
                if b.buf.in_flight() {
                    b.buf.complete_write();
                }
                b.out.complete();
                return self.finish_backend_close(bi, bg);
            }
            _ => b.out.complete(),
        }
        if res <= 0 {
            return self.backend_failed(bi, bg, "write to the server failed");
        }
        b.out_pos += res as usize;
        if b.out_pos < b.out.len() {
            let entry = b.out.write_sqe(
                b.sock.as_raw_fd(),
                b.out_pos,
                backend_token(OpTag::BackendWrite, (bi, bg)),
            );
            b.op_in_flight = true;
            return self.push(entry);
        }
        if let BackendState::Exchange(purpose, Phase::Writing) = b.state {
            b.state = BackendState::Exchange(purpose, Phase::Reading);
            b.buf.clear();
            self.backend_start_read((bi, bg));
        }
    }

    fn on_backend_greeting(&mut self, bi: u32, bg: u32, payload: &[u8]) {
        let greeting = match handshake::parse_greeting(payload) {
            Ok(g) => g,
            Err(ProtocolError::ServerError { code, message, .. }) => {
                return self.backend_failed(
                    bi,
                    bg,
                    &format!("server refused the connection: {code} {message}"),
                );
            }
            Err(e) => return self.backend_failed(bi, bg, &format!("bad greeting: {e}")),
        };
        if self.template.capabilities.is_none() {
            tracing::info!(worker = self.id, version = %greeting.server_version, "backend reachable");
        }
        self.template.capabilities = Some(greeting.capabilities);
        self.template.server_version = greeting.server_version.clone();
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        let caps =
            (NATIVE_LOGIN_CAPS | b.key.caps) & (greeting.capabilities | CLIENT_LONG_PASSWORD);
        let password = self.shared.config.backend_password.as_bytes();
        let response = HandshakeResponse {
            capabilities: caps,
            max_packet_size: BACKEND_MAX_PACKET,
            charset: b.key.collation,
            username: self.shared.config.backend_user.clone(),
            auth_response: native_token(password, &greeting.scramble),
            database: None,
            auth_plugin: Some(NATIVE_PASSWORD.into()),
            connect_attrs: Vec::new(),
        };
        let out = b.out.bytes_mut();
        out.clear();
        write_packet(out, 1, &handshake::build_handshake_response(&response));
        b.state = BackendState::Exchange(Purpose::Login, Phase::Writing);
        self.backend_write_out((bi, bg));
    }

    fn on_backend_auth_reply(&mut self, bi: u32, bg: u32, seq: u8, payload: &[u8]) {
        match parse_auth_reply(payload) {
            Ok(ServerReply::Ok { .. }) => self.backend_logged_in(bi, bg),
            Ok(ServerReply::Err { code, message, .. }) => self.backend_failed(
                bi,
                bg,
                &format!("login as --backend-user '{}' refused: {code} {message}", self.shared.config.backend_user),
            ),
            Ok(ServerReply::AuthSwitch { plugin, data }) if plugin == NATIVE_PASSWORD => {
                let token = native_token(self.shared.config.backend_password.as_bytes(), &data);
                let Some(b) = self.backends.get_mut(bi, bg) else { return };
                let out = b.out.bytes_mut();
                out.clear();
                write_packet(out, seq.wrapping_add(1), &token);
                b.state = BackendState::Exchange(Purpose::AuthSwitch, Phase::Writing);
                self.backend_write_out((bi, bg));
            }
            Ok(ServerReply::AuthSwitch { plugin, .. }) => self.backend_failed(
                bi,
                bg,
                &format!("the server wants auth plugin '{plugin}' for --backend-user; use mysql_native_password"),
            ),
            Ok(_) => self.backend_failed(bi, bg, "unsupported authentication exchange; use mysql_native_password for --backend-user"),
            Err(e) => self.backend_failed(bi, bg, &format!("bad login reply: {e}")),
        }
    }

    fn backend_logged_in(&mut self, bi: u32, bg: u32) {
        self.backend_retry_at = None;
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.buf.clear();
        let opened_for = b.opened_for.take();
        if let Some((si, sg)) = opened_for {
            let waiting = self.sessions.get_mut(si, sg).is_some_and(|s| {
                matches!(s.state, SessionState::WaitBackend) && s.backend.is_none()
            });
            if waiting {
                return self.lease((bi, bg), (si, sg));
            }
        }
        self.make_idle(bi, bg);
    }

    fn make_idle(&mut self, bi: u32, bg: u32) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.state = BackendState::Idle;
        b.idle_since = Instant::now();
        b.buf.clear();
        self.idle.push(bi);
        self.metrics().backend_idle.fetch_add(1, Relaxed);
        self.waiters_dirty = true;
        if self.draining.is_some() {
            self.close_idle_backends();
        }
    }

    fn on_backend_init_db_reply(&mut self, bi: u32, bg: u32, payload: &[u8]) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        let deprecate_eof = b.key.caps & CLIENT_DEPRECATE_EOF != 0;
        b.state = BackendState::Leased;
        b.buf.clear();
        let Some((si, sg)) = b.leased_to else {
            return self.release_backend((bi, bg), true);
        };
        match parse_reply(payload, deprecate_eof) {
            Ok(ServerReply::Ok { .. }) => {
                if let Some(b) = self.backends.get_mut(bi, bg) {
                    b.schema = b.requested_schema.take();
                }
                self.send_auth_ok(si, sg)
            }
            Ok(ServerReply::Err {
                code,
                sqlstate,
                message,
            }) => self.session_init_db_failed(si, sg, code, &sqlstate, &message),
            _ => self.backend_failed(bi, bg, "unexpected reply to COM_INIT_DB"),
        }
    }

    fn on_backend_reset_replies(&mut self, bi: u32, bg: u32) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        let deprecate_eof = b.key.caps & CLIENT_DEPRECATE_EOF != 0;
        match parse_reset_replies(b.buf.filled(), deprecate_eof) {
            Ok(None) if b.buf.filled_len() < b.buf.capacity() => self.backend_start_read((bi, bg)),
            Ok(Some(ResetOutcome::Reset { schema })) => {
                b.schema = schema;
                self.make_idle(bi, bg)
            }
            outcome => {
                tracing::debug!(
                    worker = self.id,
                    "COM_RESET_CONNECTION failed ({outcome:?}); connection discarded"
                );
                self.discard_backend(bi, bg);
            }
        }
    }

    /// Connections stuck in a login, reset or schema exchange.
    pub(super) fn expire_backends(&mut self, now: Instant) {
        let timeout = self.shared.config.backend_connect_timeout;
        for bi in self.backends.indexes() {
            let bg = self.backends.generation(bi);
            let stuck = self.backends.get(bi).is_some_and(|b| {
                matches!(b.state, BackendState::Exchange(..))
                    && now.duration_since(b.exchange_since) >= timeout
            });
            if stuck {
                let cause = format!(
                    "no answer from the server within {timeout:?} (--backend-connect-timeout)"
                );
                self.backend_failed(bi, bg, &cause);
            }
        }
    }

    // ---- tear-down ----

    /// Close a connection for good. With an operation in flight, shut the
    /// socket down and finish when its CQE arrives.
    pub(super) fn discard_backend(&mut self, bi: u32, bg: u32) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        if matches!(b.state, BackendState::Closing) {
            return;
        }
        if matches!(b.state, BackendState::Idle) {
            if let Some(pos) = self.idle.iter().position(|&x| x == bi) {
                self.idle.remove(pos);
                self.metrics().backend_idle.fetch_sub(1, Relaxed);
            }
        }
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        b.state = BackendState::Closing;
        clear_busy(b, self.shared.metrics.worker(self.id));
        let _ = b.sock.shutdown(Shutdown::Both);
        if !b.op_in_flight {
            self.finish_backend_close(bi, bg);
        }
    }

    fn finish_backend_close(&mut self, bi: u32, bg: u32) {
        let Some(b) = self.backends.get_mut(bi, bg) else {
            return;
        };
        if b.op_in_flight {
            return;
        }
        let Some(b) = self.backends.remove(bi) else {
            return;
        };
        self.metrics().backend_discarded_total.fetch_add(1, Relaxed);
        if self.pool.release(b.buf).is_err() {
            tracing::error!("backend buffer still in flight at close; leaked");
        }
        unreserve(&self.shared.backends);
        self.waiters_dirty = true;
        // `b.sock` is dropped (closed) here, after its last CQE.
    }
}

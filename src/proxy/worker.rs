//! One worker: a thread with its own ring, SO_REUSEPORT listener, buffer
//! pool and backend pool, and the thin driver around the machines.
//!
//! The driver is the only code that touches the ring and the sockets. The
//! loop has a fixed shape (TigerBeetle's): submit and wait, reap every ready
//! completion into a reused batch, hand each to the machine it names, carry
//! out what the machines return from two FIFO queues (never by recursion),
//! repeat.
//!
//! Every SQE names the connection whose socket it uses in its fd count
//! (`ConnIo`), and relay operations are also counted on their session, so
//! neither a socket nor a slot is freed while the kernel may still name it.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::types::Timespec;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use thiserror::Error;

use super::backend::BackendOp;
use super::conn_io::ConnIo;
use super::ids::{BackendId, LeaseRequest, PoolKey, SessionId};
use super::listen::{self, ListenError};
use super::pool::{Pool, PoolConfig, PoolEvent};
use super::relay::{RelayOp, RelayTimeouts};
use super::session::{
    NewSession, Session, SessionAction, SessionCtx, PASSTHROUGH_CAPS, PROXY_CAPS,
};
use super::slab::Slab;
use super::{try_reserve, unreserve, LogLimiter, Shared};
use crate::buffers::{BufferPool, Owner};
use crate::config::ReadBufferMode;
use crate::metrics::{BufferMode, WorkerMetrics};
use crate::mysql::auth;
use crate::mysql::constants::CLIENT_LOCAL_FILES;
use crate::mysql::Users;
use crate::ring::{ops, OpTag, Ring, RingError, Sqe, Token};

/// How often the worker wakes up on its own: timeouts (handshake, pool
/// wait), pool refills and the shutdown flag are checked at this cadence.
const TICK: Duration = Duration::from_millis(100);

/// Submission queue entries per ring.
pub const RING_ENTRIES: u32 = 1024;

/// How long to wait after EMFILE/ENFILE before accepting again, so that fd
/// exhaustion backs off instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// At most one fd-exhaustion log line per worker in this interval.
const FD_EXHAUSTION_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Operations in flight at once, at most: per session a client read, a
/// write to the client and a write to the backend plus a backend read;
/// per backend connection a read and a write (or a connect); the two
/// accepts, the tick and cancels. The completion ring is sized from this so
/// that it cannot overflow in normal operation (overflow is still handled).
fn max_in_flight(max_sessions: usize, max_backends: usize) -> usize {
    max_sessions * 4 + max_backends * 2 + 16
}

#[derive(Debug, Error)]
pub enum WorkerError {
    #[error(transparent)]
    Ring(#[from] RingError),
    #[error(transparent)]
    Listen(#[from] ListenError),
}

/// What a worker set up, reported once at start-up.
#[derive(Debug, Clone)]
pub struct WorkerStartup {
    pub features: crate::ring::Features,
    pub mode: BufferMode,
    /// Why fixed buffers were not used, when they were asked for.
    pub fallback: Option<String>,
    pub ring_fd: i32,
}

/// What the last backend greeting told us; the greeting we send clients
/// mirrors the backend's version and capabilities.
struct BackendTemplate {
    capabilities: Option<u32>,
    server_version: String,
}

const LISTENER_TCP: usize = 0;
const LISTENER_UNIX: usize = 1;

/// A listening socket and whether an accept SQE is armed on it.
struct Listener {
    sock: Socket,
    armed: bool,
}

/// A session and its I/O.
struct SessionSlot {
    io: ConnIo,
    session: Session,
    /// The leased backend connection.
    backend: Option<BackendId>,
    /// Relay operations in flight that this session's token names; the
    /// slot (and its link to the backend) stays until they complete.
    relay_ops: u32,
    /// Bytes of the current relay write to the backend: (written, end).
    up_write: (usize, usize),
    /// Bytes of the current relay write to the client: (written, end).
    down_write: (usize, usize),
    /// Holds one unit of `Shared::clients`.
    counted: bool,
    /// The client's address, for log lines.
    peer: String,
    closing: bool,
}

pub struct Worker {
    // Drop order matters: the ring goes first, releasing the kernel's
    // registration before the buffer pool unmaps the region it points at.
    ring: Ring,
    buffers: BufferPool,
    id: usize,
    shared: Arc<Shared>,
    /// The users, refreshed before each login read (SIGHUP swaps them).
    users: Arc<Users>,
    /// [LISTENER_TCP] and, with --socket, [LISTENER_UNIX].
    listeners: [Option<Listener>; 2],
    accept_multishot: bool,
    accept_resume_at: Option<Instant>,
    sessions: Slab<SessionSlot>,
    pool: Pool,
    template: BackendTemplate,
    backend_addr: &'static SockAddr,
    connect_timeout: &'static Timespec,
    tick_ts: &'static Timespec,
    next_connection_id: u32,
    draining: Option<Instant>,
    log_limiter: LogLimiter,
    fd_exhaustion_logged_at: Option<Instant>,
    /// Accept pauses since the last fd-exhaustion log line.
    fd_exhaustion_paused: u32,
    /// Work queues: what machines returned and the driver has yet to do.
    session_q: VecDeque<(SessionId, SessionAction)>,
    pool_q: VecDeque<PoolEvent>,
    /// The time of the batch being handled.
    now: Instant,
}

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

fn timespec(d: Duration) -> Timespec {
    Timespec::new().sec(d.as_secs()).nsec(d.subsec_nanos())
}

/// What a session handler sees of its worker (built from fields, so the
/// session slab can be borrowed mutably beside it).
fn session_ctx<'a>(
    shared: &Shared,
    users: &'a Users,
    now: Instant,
    draining: bool,
) -> SessionCtx<'a> {
    let cfg = &shared.config;
    SessionCtx {
        users,
        now,
        max_packet_size: cfg.max_packet_size,
        handshake_timeout: cfg.handshake_timeout,
        timeouts: RelayTimeouts {
            idle: cfg.idle_timeout,
            client_write: cfg.client_write_timeout,
            backend_read: cfg.backend_read_timeout,
        },
        draining,
        read_buffer_size: cfg.read_buffer_size as usize,
    }
}

fn peer_of(sock: &Socket) -> (String, String) {
    match sock.peer_addr().ok().and_then(|a| a.as_socket()) {
        Some(a) => (a.to_string(), a.ip().to_string()),
        None => ("local".into(), "localhost".into()),
    }
}

impl Worker {
    /// Build a worker on the current thread (SINGLE_ISSUER ties the ring
    /// to the thread that creates it).
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        unix: Option<Socket>,
    ) -> Result<(Worker, WorkerStartup), WorkerError> {
        let cfg = &shared.config;
        let workers = shared.metrics.worker_count().max(1);
        let cq = crate::ring::cq_entries_for(max_in_flight(
            cfg.max_connections.div_ceil(workers),
            cfg.backend_max_connections,
        ));
        let ring = Ring::new(RING_ENTRIES, cq)?;
        let metrics = Arc::clone(&shared.metrics);
        let size = cfg.read_buffer_size as usize;
        let (buffers, fallback) = match cfg.read_buffers {
            ReadBufferMode::Heap => (BufferPool::heap(size, metrics, id), None),
            ReadBufferMode::Fixed => {
                match BufferPool::fixed(
                    &ring,
                    size,
                    cfg.read_buffer_count as usize,
                    Arc::clone(&metrics),
                    id,
                ) {
                    Ok(pool) => (pool, None),
                    Err(e) => (BufferPool::heap(size, metrics, id), Some(e.to_string())),
                }
            }
        };
        let listener = listen::tcp(cfg.listen)?;
        let startup = WorkerStartup {
            features: ring.features(),
            mode: buffers.mode(),
            fallback,
            ring_fd: ring.fd(),
        };
        let pool = Pool::new(
            PoolConfig {
                backend: cfg.backend,
                user: cfg.backend_user.clone(),
                password: cfg.backend_password.clone(),
                pool_size: cfg.backend_pool_size,
                max_connections: cfg.backend_max_connections,
                wait_timeout: cfg.backend_wait_timeout,
                idle_timeout: cfg.backend_idle_timeout,
                connect_timeout: cfg.backend_connect_timeout,
            },
            Arc::clone(&shared.backends),
            Arc::clone(&shared.metrics),
            id,
        );
        let worker = Worker {
            ring,
            buffers,
            id,
            users: shared.users(),
            listeners: [
                Some(Listener {
                    sock: listener,
                    armed: false,
                }),
                unix.map(|sock| Listener { sock, armed: false }),
            ],
            accept_multishot: true,
            accept_resume_at: None,
            sessions: Slab::new(),
            pool,
            template: BackendTemplate {
                capabilities: None,
                server_version: "5.5.5-10.11.0-MariaDB-ringgate".into(),
            },
            backend_addr: leak(SockAddr::from(cfg.backend)),
            connect_timeout: leak(timespec(cfg.backend_connect_timeout)),
            tick_ts: leak(timespec(TICK)),
            next_connection_id: (id as u32) << 24,
            draining: None,
            log_limiter: LogLimiter::default(),
            fd_exhaustion_logged_at: None,
            fd_exhaustion_paused: 0,
            session_q: VecDeque::new(),
            pool_q: VecDeque::new(),
            now: Instant::now(),
            shared,
        };
        Ok((worker, startup))
    }

    fn metrics(&self) -> &WorkerMetrics {
        self.shared.metrics.worker(self.id)
    }

    /// Hand an SQE to the ring. The ring never drops one: an SQE it cannot
    /// queue comes back as a failed completion, which the owner's normal
    /// error path rolls back.
    fn submit(&mut self, sqe: Sqe) {
        self.ring.push(sqe);
    }

    /// Run until a drain completes.
    pub fn run(mut self) -> Result<(), WorkerError> {
        self.arm_accepts();
        self.submit(ops::timeout(self.tick_ts, Token::new(OpTag::Tick, 0, 0)));
        self.now = Instant::now();
        let mut refill = Vec::new();
        self.pool.refill(self.now, &mut refill);
        self.pool_q.extend(refill);
        self.drive();
        let mut batch = Vec::with_capacity(1024);
        loop {
            self.ring.submit_and_wait()?;
            batch.clear();
            self.ring.reap(&mut batch);
            self.now = Instant::now();
            for cqe in batch.iter() {
                self.dispatch(cqe.user_data, cqe.result, cqe.flags);
                self.drive();
            }
            let mut events = Vec::new();
            self.pool.serve_waiters(self.now, &mut events);
            self.pool_q.extend(events);
            self.drive();
            if self.draining.is_some() && self.sessions.len() == 0 && self.pool.len() == 0 {
                break;
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, user_data: u64, res: i32, flags: u32) {
        let Some(token) = Token::decode(user_data) else {
            return;
        };
        let sid = SessionId {
            index: token.index,
            generation: token.generation,
        };
        let bid = BackendId {
            index: token.index,
            generation: token.generation,
        };
        match token.tag {
            OpTag::Accept => self.on_accept(token.index as usize, res, flags),
            OpTag::Tick => self.on_tick(),
            OpTag::ClientRead => self.on_client_read(sid, res),
            OpTag::ClientWrite => self.on_client_write(sid, res),
            OpTag::UpWrite => self.on_up_write(sid, res),
            OpTag::DownRead => self.on_down_read(sid, res),
            OpTag::DownWrite => self.on_down_write(sid, res),
            OpTag::BackendConnect => self.on_backend_connect(bid, res),
            OpTag::BackendRead => self.on_backend_read(bid, res),
            OpTag::BackendWrite => self.on_backend_write(bid, res),
            OpTag::Ignore => {}
        }
    }

    /// Carry out everything the machines asked for, in order.
    fn drive(&mut self) {
        loop {
            if let Some((sid, action)) = self.session_q.pop_front() {
                self.do_session_action(sid, action);
            } else if let Some(event) = self.pool_q.pop_front() {
                self.do_pool_event(event);
            } else {
                return;
            }
        }
    }

    /// Run one session handler and queue what it returns.
    fn with_session(
        &mut self,
        sid: SessionId,
        f: impl FnOnce(&mut Session, &ConnIo, &SessionCtx, &mut Vec<SessionAction>),
    ) {
        let mut out = Vec::new();
        let ctx = session_ctx(&self.shared, &self.users, self.now, self.draining.is_some());
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        f(&mut slot.session, &slot.io, &ctx, &mut out);
        self.session_q.extend(out.into_iter().map(|a| (sid, a)));
    }

    // ---- accepting ----

    fn arm_accepts(&mut self) {
        for which in [LISTENER_TCP, LISTENER_UNIX] {
            self.arm_accept(which);
        }
    }

    fn arm_accept(&mut self, which: usize) {
        let multishot = self.accept_multishot;
        let Some(listener) = self.listeners[which].as_mut() else {
            return;
        };
        if listener.armed || self.draining.is_some() || self.accept_resume_at.is_some() {
            return;
        }
        let fd = listener.sock.as_raw_fd();
        let token = Token::new(OpTag::Accept, which as u32, 0);
        listener.armed = true;
        let sqe = if multishot {
            ops::accept_multi(fd, token)
        } else {
            ops::accept(fd, token)
        };
        self.submit(sqe);
    }

    fn on_accept(&mut self, which: usize, res: i32, flags: u32) {
        if !io_uring::cqueue::more(flags) {
            if let Some(l) = self.listeners.get_mut(which).and_then(Option::as_mut) {
                l.armed = false;
            }
        }
        if res < 0 {
            let errno = -res;
            match errno {
                // Multishot accept is 5.19+: older kernels reject it.
                libc::EINVAL if self.accept_multishot && self.draining.is_none() => {
                    tracing::info!(
                        worker = self.id,
                        "multishot accept unsupported; using one-shot accept"
                    );
                    self.accept_multishot = false;
                }
                libc::EMFILE | libc::ENFILE => {
                    let now = self.now;
                    self.fd_exhaustion_paused += 1;
                    if self
                        .fd_exhaustion_logged_at
                        .is_none_or(|t| now.duration_since(t) >= FD_EXHAUSTION_LOG_INTERVAL)
                    {
                        tracing::warn!(
                            worker = self.id,
                            "out of file descriptors ({}); accepts paused {} time(s) for {:?} each: raise LimitNOFILE / ulimit -n",
                            io::Error::from_raw_os_error(errno),
                            self.fd_exhaustion_paused,
                            ACCEPT_BACKOFF
                        );
                        self.fd_exhaustion_logged_at = Some(now);
                        self.fd_exhaustion_paused = 0;
                    }
                    self.accept_resume_at = Some(now + ACCEPT_BACKOFF);
                    return;
                }
                _ if self.draining.is_some() => return,
                _ => tracing::debug!(
                    worker = self.id,
                    "accept failed: {}",
                    io::Error::from_raw_os_error(errno)
                ),
            }
        } else {
            let sock = crate::ring::accepted_socket(res);
            if self.draining.is_some() {
                // Raced with the drain: refuse by closing at once.
                drop(sock);
            } else {
                self.on_new_client(sock);
            }
        }
        self.arm_accept(which);
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

    fn on_new_client(&mut self, sock: Socket) {
        // Both fail harmlessly on a unix socket.
        let _ = sock.set_nodelay(true);
        if let Err(e) = crate::sockopt::apply_tcp_options(&sock, &self.shared.config) {
            tracing::debug!(worker = self.id, "client socket options: {e}");
        }
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
        let (peer, peer_host) = peer_of(&sock);
        if !counted && self.log_limiter.allow(self.now) {
            tracing::warn!(
                worker = self.id,
                peer = %peer,
                "rejected a client: --max-connections {} reached (ERR 1040)",
                self.shared.config.max_connections
            );
        }
        // The read buffer is taken now, before the greeting is written, so a
        // connection storm meets the pool at accept time (never blocking).
        let buf = counted.then(|| self.buffers.acquire(Owner::Client));
        let connection_id = self.next_connection_id;
        self.next_connection_id = self.next_connection_id.wrapping_add(1);
        let mut out = Vec::new();
        let session = Session::new(
            NewSession {
                scramble,
                connection_id,
                capabilities: self.advertised_caps(),
                server_version: self.template.server_version.clone(),
                peer_host,
                now: self.now,
                over_limit: !counted,
            },
            &mut out,
        );
        let (index, generation) = self.sessions.insert(SessionSlot {
            io: ConnIo::new(sock, buf),
            session,
            backend: None,
            relay_ops: 0,
            up_write: (0, 0),
            down_write: (0, 0),
            counted,
            peer,
            closing: false,
        });
        let sid = SessionId { index, generation };
        self.session_q.extend(out.into_iter().map(|a| (sid, a)));
    }

    // ---- session completions ----

    fn on_client_read(&mut self, sid: SessionId, res: i32) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        slot.io.op_done();
        if let Some(buf) = slot.io.buf.as_mut() {
            buf.complete(res.max(0) as usize);
        }
        if slot.closing {
            return self.try_finish_session(sid);
        }
        if !slot.session.is_relaying() {
            // A login may be verified now: see a SIGHUP reload at once.
            self.users = self.shared.users();
        }
        self.with_session(sid, |s, io, ctx, out| {
            let data = io.buf.as_ref().map_or(&[][..], |b| b.filled());
            s.on_client_read(res, data, ctx, out)
        });
    }

    fn on_client_write(&mut self, sid: SessionId, res: i32) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        slot.io.op_done();
        slot.io.out.complete();
        if slot.closing {
            return self.try_finish_session(sid);
        }
        let res = if res == 0 { -libc::EPIPE } else { res };
        if res > 0 {
            slot.io.out_pos += res as usize;
            if slot.io.out_pos < slot.io.out.len() {
                let token = Token::new(OpTag::ClientWrite, sid.index, sid.generation);
                let fd = slot.io.fd();
                let sqe = slot.io.out.write_sqe(fd, slot.io.out_pos, token.into());
                slot.io.op_started();
                return self.submit(sqe);
            }
        }
        self.with_session(sid, |s, io, ctx, out| {
            let buffered = io
                .buf
                .as_ref()
                .filter(|b| !b.in_flight())
                .map_or(&[][..], |b| b.filled());
            s.on_client_write(res, buffered, ctx, out)
        });
    }

    fn on_up_write(&mut self, sid: SessionId, res: i32) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        slot.relay_ops -= 1;
        if let Some(buf) = slot.io.buf.as_mut() {
            buf.complete_write();
        }
        let backend = slot.backend;
        if let Some(b) = backend.and_then(|b| self.pool.get_mut(b)) {
            b.io.op_done();
        }
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        if slot.closing {
            self.try_finish_session(sid);
            return self.try_finish_backend(backend);
        }
        let res = if res == 0 { -libc::EPIPE } else { res };
        if res > 0 {
            self.shared
                .metrics
                .worker(self.id)
                .bytes_client_to_backend_total
                .fetch_add(res as u64, Relaxed);
            slot.up_write.0 += res as usize;
            let (pos, end) = slot.up_write;
            if pos < end {
                return self.relay_write_backend(sid, pos, end);
            }
            if let Some(buf) = slot.io.buf.as_mut() {
                buf.clear();
            }
        }
        self.with_session(sid, |s, _, ctx, out| s.on_backend_write(res, ctx, out));
        self.try_finish_backend(backend);
    }

    fn on_down_read(&mut self, sid: SessionId, res: i32) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        slot.relay_ops -= 1;
        let closing = slot.closing;
        let backend = slot.backend;
        let Some(b) = backend.and_then(|b| self.pool.get_mut(b)) else {
            return;
        };
        b.io.op_done();
        let Some(buf) = b.io.buf.as_mut() else {
            return;
        };
        buf.complete(res.max(0) as usize);
        if closing {
            self.try_finish_session(sid);
            return self.try_finish_backend(backend);
        }
        let mut out = Vec::new();
        let ctx = session_ctx(&self.shared, &self.users, self.now, self.draining.is_some());
        let data = b.io.buf.as_ref().map_or(&[][..], |b| b.filled());
        if let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) {
            slot.session.on_backend_read(res, data, &ctx, &mut out);
        }
        self.session_q.extend(out.into_iter().map(|a| (sid, a)));
        self.try_finish_backend(backend);
    }

    fn on_down_write(&mut self, sid: SessionId, res: i32) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        slot.relay_ops -= 1;
        slot.io.op_done();
        let backend = slot.backend;
        if let Some(buf) = backend
            .and_then(|b| self.pool.get_mut(b))
            .and_then(|b| b.io.buf.as_mut())
        {
            buf.complete_write();
        }
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        if slot.closing {
            self.try_finish_session(sid);
            return self.try_finish_backend(backend);
        }
        let res = if res == 0 { -libc::EPIPE } else { res };
        if res > 0 {
            self.shared
                .metrics
                .worker(self.id)
                .bytes_backend_to_client_total
                .fetch_add(res as u64, Relaxed);
            slot.down_write.0 += res as usize;
            let (pos, end) = slot.down_write;
            if pos < end {
                return self.relay_write_client(sid, pos, end);
            }
            if let Some(buf) = backend
                .and_then(|b| self.pool.get_mut(b))
                .and_then(|b| b.io.buf.as_mut())
            {
                buf.clear();
            }
        }
        self.with_session(sid, |s, _, ctx, out| s.on_relay_client_write(res, ctx, out));
        self.try_finish_backend(backend);
    }

    // ---- session actions ----

    fn do_session_action(&mut self, sid: SessionId, action: SessionAction) {
        let now = self.now;
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            // The session is gone; a lease it asked for goes back.
            return;
        };
        match action {
            SessionAction::SendClient(bytes) => {
                *slot.io.out.bytes_mut() = bytes;
                slot.io.out_pos = 0;
                let token = Token::new(OpTag::ClientWrite, sid.index, sid.generation);
                let fd = slot.io.fd();
                let sqe = slot.io.out.write_sqe(fd, 0, token.into());
                slot.io.op_started();
                self.submit(sqe);
            }
            SessionAction::ReadClient => self.client_read(sid, false),
            SessionAction::Consume(n) => {
                if let Some(buf) = slot.io.buf.as_mut() {
                    buf.consume(n);
                }
            }
            SessionAction::ClearBuffer => {
                if let Some(buf) = slot.io.buf.as_mut() {
                    buf.clear();
                }
            }
            SessionAction::Lease { key, schema } => {
                let mut events = Vec::new();
                self.pool.lease(
                    LeaseRequest {
                        session: sid,
                        key,
                        schema,
                    },
                    now,
                    &mut events,
                );
                self.pool_q.extend(events);
            }
            SessionAction::CancelLease => self.pool.cancel(sid),
            SessionAction::Relay(RelayOp::ReadClient) => self.client_read(sid, true),
            SessionAction::Relay(RelayOp::WriteBackend { end }) => {
                slot.up_write = (0, end);
                self.relay_write_backend(sid, 0, end)
            }
            SessionAction::Relay(RelayOp::ReadBackend) => self.relay_read_backend(sid),
            SessionAction::Relay(RelayOp::WriteClient { end }) => {
                slot.down_write = (0, end);
                self.relay_write_client(sid, 0, end)
            }
            SessionAction::AbortBackend => {
                if let Some(b) = slot.backend.and_then(|b| self.pool.get_mut(b)) {
                    b.io.shutdown();
                }
            }
            SessionAction::AbortClient => slot.io.shutdown(),
            SessionAction::Release { clean } => {
                if let Some(b) = slot.backend.take() {
                    debug_assert_eq!(slot.relay_ops, 0, "released with relay ops in flight");
                    let clean = clean && slot.relay_ops == 0;
                    let mut events = Vec::new();
                    self.pool.release(b, clean, now, &mut events);
                    self.pool_q.extend(events);
                }
            }
            SessionAction::HalfClose => slot.io.shutdown_write(),
            SessionAction::Close => {
                slot.closing = true;
                slot.io.shutdown();
                if slot.relay_ops > 0 {
                    // Normally unreachable (the relay releases first); make
                    // the relay's operations on the backend complete now.
                    if let Some(b) = slot.backend.and_then(|b| self.pool.get_mut(b)) {
                        b.io.shutdown();
                    }
                }
                self.try_finish_session(sid);
            }
            SessionAction::LoggedIn { key } => self.pool.set_warm_key(key),
            SessionAction::Connected { elapsed } => self.metrics().record_connect(elapsed),
            SessionAction::CommandStarted => {
                self.metrics().commands_total.fetch_add(1, Relaxed);
            }
            SessionAction::Reject(reason) => self.metrics().reject(reason),
            SessionAction::Log(msg) => {
                if self.log_limiter.allow(now) {
                    tracing::info!(worker = self.id, peer = %slot.peer, "connection failed: {msg}");
                }
            }
        }
    }

    fn client_read(&mut self, sid: SessionId, clear: bool) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        let fd = slot.io.fd();
        let Some(buf) = slot.io.buf.as_mut() else {
            return;
        };
        if clear {
            buf.clear();
        }
        let token = Token::new(OpTag::ClientRead, sid.index, sid.generation);
        let sqe = buf.read_sqe(fd, token.into());
        slot.io.op_started();
        self.submit(sqe);
    }

    fn relay_write_backend(&mut self, sid: SessionId, pos: usize, end: usize) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        let Some(b) = slot.backend.and_then(|b| self.pool.get_mut(b)) else {
            return;
        };
        let Some(buf) = slot.io.buf.as_mut() else {
            return;
        };
        let token = Token::new(OpTag::UpWrite, sid.index, sid.generation);
        let sqe = buf.write_sqe(b.io.fd(), pos, end, token.into());
        b.io.op_started();
        slot.relay_ops += 1;
        self.submit(sqe);
    }

    fn relay_read_backend(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        let Some(b) = slot.backend.and_then(|b| self.pool.get_mut(b)) else {
            return;
        };
        let fd = b.io.fd();
        let Some(buf) = b.io.buf.as_mut() else {
            return;
        };
        let token = Token::new(OpTag::DownRead, sid.index, sid.generation);
        let sqe = buf.read_sqe(fd, token.into());
        b.io.op_started();
        slot.relay_ops += 1;
        self.submit(sqe);
    }

    fn relay_write_client(&mut self, sid: SessionId, pos: usize, end: usize) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        let Some(b) = slot.backend.and_then(|b| self.pool.get_mut(b)) else {
            return;
        };
        let Some(buf) = b.io.buf.as_mut() else {
            return;
        };
        let token = Token::new(OpTag::DownWrite, sid.index, sid.generation);
        let sqe = buf.write_sqe(slot.io.fd(), pos, end, token.into());
        slot.io.op_started();
        slot.relay_ops += 1;
        self.submit(sqe);
    }

    /// Free a closing session once nothing in the kernel names it.
    fn try_finish_session(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            return;
        };
        if !slot.closing || slot.relay_ops > 0 || !slot.io.quiescent() {
            return;
        }
        let Some(mut slot) = self.sessions.remove_checked(sid.index, sid.generation) else {
            return;
        };
        if let Some(b) = slot.backend.take() {
            let mut events = Vec::new();
            self.pool.release(b, false, self.now, &mut events);
            self.pool_q.extend(events);
        }
        if let Some(buf) = slot.io.buf.take() {
            if self.buffers.release(buf).is_err() {
                tracing::error!("session buffer still in flight at close; leaked");
            }
        }
        if slot.counted {
            unreserve(&self.shared.clients);
        }
        self.metrics().client_connections.fetch_sub(1, Relaxed);
        // The socket closes here, after its last CQE.
    }

    // ---- backend connections ----

    fn on_backend_connect(&mut self, bid: BackendId, res: i32) {
        let Some(b) = self.pool.get_mut(bid) else {
            return;
        };
        b.io.op_done();
        let mut events = Vec::new();
        self.pool.on_connect(bid, res, self.now, &mut events);
        self.pool_q.extend(events);
        self.try_finish_backend(Some(bid));
    }

    fn on_backend_read(&mut self, bid: BackendId, res: i32) {
        let Some(b) = self.pool.get_mut(bid) else {
            return;
        };
        b.io.op_done();
        if let Some(buf) = b.io.buf.as_mut() {
            buf.complete(res.max(0) as usize);
        }
        let mut events = Vec::new();
        self.pool.on_read(bid, res, self.now, &mut events);
        self.pool_q.extend(events);
        self.try_finish_backend(Some(bid));
    }

    fn on_backend_write(&mut self, bid: BackendId, res: i32) {
        let Some(b) = self.pool.get_mut(bid) else {
            return;
        };
        b.io.op_done();
        b.io.out.complete();
        let res = if res == 0 { -libc::EPIPE } else { res };
        if res > 0 && !b.conn.is_closed() {
            b.io.out_pos += res as usize;
            if b.io.out_pos < b.io.out.len() {
                let token = Token::new(OpTag::BackendWrite, bid.index, bid.generation);
                let fd = b.io.fd();
                let sqe = b.io.out.write_sqe(fd, b.io.out_pos, token.into());
                b.io.op_started();
                return self.submit(sqe);
            }
        }
        let written = if res > 0 { b.io.out.len() as i32 } else { res };
        let mut events = Vec::new();
        self.pool.on_write(bid, written, self.now, &mut events);
        self.pool_q.extend(events);
        self.try_finish_backend(Some(bid));
    }

    /// Free a closed backend connection once nothing names it.
    fn try_finish_backend(&mut self, bid: Option<BackendId>) {
        let Some(bid) = bid else { return };
        let Some(b) = self.pool.get_mut(bid) else {
            return;
        };
        if !b.conn.is_closed() || !b.io.quiescent() {
            return;
        }
        if let Some(mut p) = self.pool.remove(bid) {
            if let Some(buf) = p.io.buf.take() {
                if self.buffers.release(buf).is_err() {
                    tracing::error!("backend buffer still in flight at close; leaked");
                }
            }
        }
    }

    fn do_pool_event(&mut self, event: PoolEvent) {
        let now = self.now;
        match event {
            PoolEvent::Open { key, request } => self.open_backend(key, request),
            PoolEvent::Io(bid, op) => self.backend_op(bid, op),
            PoolEvent::Leased { session, backend } => {
                let Some(slot) = self.sessions.get_mut(session.index, session.generation) else {
                    let mut events = Vec::new();
                    self.pool.release(backend, true, now, &mut events);
                    self.pool_q.extend(events);
                    return;
                };
                slot.backend = Some(backend);
                self.with_session(session, |s, _, _, out| s.on_leased(out));
            }
            PoolEvent::LeaseFailed {
                session,
                err_payload,
                unavailable,
            } => {
                self.with_session(session, |s, _, _, out| {
                    s.on_lease_failed(&err_payload, unavailable, out)
                });
            }
            PoolEvent::ServerInfo {
                server_version,
                capabilities,
            } => {
                if self.template.capabilities.is_none() {
                    tracing::info!(worker = self.id, version = %server_version, "backend reachable");
                }
                self.template.capabilities = Some(capabilities);
                self.template.server_version = server_version;
            }
        }
    }

    fn open_backend(&mut self, key: PoolKey, request: Option<LeaseRequest>) {
        let addr = self.shared.config.backend;
        let sock = match Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)) {
            Ok(s) => s,
            Err(e) => {
                let mut events = Vec::new();
                self.pool
                    .open_failed(request, &format!("socket(): {e}"), self.now, &mut events);
                self.pool_q.extend(events);
                return;
            }
        };
        let _ = sock.set_nodelay(true);
        if let Err(e) = crate::sockopt::apply_tcp_options(&sock, &self.shared.config) {
            tracing::debug!(worker = self.id, "backend socket options: {e}");
        }
        let buf = self.buffers.acquire(Owner::Backend);
        let mut events = Vec::new();
        self.pool.insert_opening(
            ConnIo::new(sock, Some(buf)),
            key,
            request,
            self.now,
            &mut events,
        );
        self.pool_q.extend(events);
    }

    fn backend_op(&mut self, bid: BackendId, op: BackendOp) {
        let connect_timeout = self.connect_timeout;
        let addr = self.backend_addr;
        let Some(b) = self.pool.get_mut(bid) else {
            return;
        };
        let fd = b.io.fd();
        match op {
            BackendOp::Connect => {
                let connect = ops::connect(
                    fd,
                    addr,
                    Token::new(OpTag::BackendConnect, bid.index, bid.generation),
                );
                let timeout = ops::link_timeout(connect_timeout, Token::new(OpTag::Ignore, 0, 0));
                b.io.op_started();
                self.ring.push_linked(connect, timeout);
            }
            BackendOp::Read => {
                let Some(buf) = b.io.buf.as_mut() else { return };
                let token = Token::new(OpTag::BackendRead, bid.index, bid.generation);
                let sqe = buf.read_sqe(fd, token.into());
                b.io.op_started();
                self.submit(sqe);
            }
            BackendOp::Clear => {
                if let Some(buf) = b.io.buf.as_mut().filter(|b| !b.in_flight()) {
                    buf.clear();
                }
            }
            BackendOp::Send(bytes) => {
                *b.io.out.bytes_mut() = bytes;
                b.io.out_pos = 0;
                let token = Token::new(OpTag::BackendWrite, bid.index, bid.generation);
                let sqe = b.io.out.write_sqe(fd, 0, token.into());
                b.io.op_started();
                self.submit(sqe);
            }
            BackendOp::Close => {
                b.io.shutdown();
                self.try_finish_backend(Some(bid));
            }
        }
    }

    // ---- time ----

    fn on_tick(&mut self) {
        let now = self.now;
        self.users = self.shared.users();
        if self.draining.is_none() && self.shared.shutdown.load(Relaxed) {
            self.begin_drain(now);
        }
        if self.accept_resume_at.is_some_and(|at| now >= at) {
            self.accept_resume_at = None;
            self.arm_accepts();
        }
        let cut = self
            .draining
            .is_some_and(|t| now.duration_since(t) >= self.shared.config.drain_timeout);
        for index in self.sessions.indexes() {
            let generation = self.sessions.generation(index);
            let sid = SessionId { index, generation };
            if cut {
                self.with_session(sid, |s, _, ctx, out| s.cut(ctx, out));
            } else {
                self.with_session(sid, |s, _, ctx, out| s.on_tick(ctx, out));
            }
        }
        let mut events = Vec::new();
        self.pool.on_tick(now, &mut events);
        self.pool_q.extend(events);
        self.export_ring_stats();
        self.submit(ops::timeout(self.tick_ts, Token::new(OpTag::Tick, 0, 0)));
    }

    fn export_ring_stats(&self) {
        let stats = self.ring.stats();
        let m = self.metrics();
        m.ring_ebusy_reaps.store(stats.ebusy_reaps, Relaxed);
        m.ring_overflow_flushes
            .store(stats.overflow_flushes, Relaxed);
        m.ring_synthetic_failures
            .store(stats.synthetic_failures, Relaxed);
    }

    /// SIGTERM/SIGINT: stop accepting at once; idle sessions are closed,
    /// sessions inside a command finish it first (checked at each tick and
    /// command boundary), and everything left after the drain timeout is cut.
    fn begin_drain(&mut self, now: Instant) {
        tracing::info!(worker = self.id, sessions = self.sessions.len(), "draining");
        self.draining = Some(now);
        // shutdown(SHUT_RD) on a listening socket stops it listening (new
        // connects are refused) and completes the armed accept with an
        // error; the fd itself is closed when the worker ends, after that
        // CQE, as the buffer lifetime rules require for every fd.
        for l in self.listeners.iter().flatten() {
            let _ = l.sock.shutdown(std::net::Shutdown::Read);
        }
        if self.id == 0 {
            if let Some(path) = &self.shared.config.socket {
                let _ = std::fs::remove_file(path);
            }
        }
        let mut events = Vec::new();
        self.pool.begin_drain(&mut events);
        self.pool_q.extend(events);
    }
}

/// A started worker: its thread and what it set up.
pub type StartedWorker = (
    std::thread::JoinHandle<Result<(), WorkerError>>,
    WorkerStartup,
);

/// Start `count` worker threads; returns their handles once every worker
/// has finished setting up (so start-up errors are reported before serving).
pub fn spawn_workers(shared: Arc<Shared>, count: usize) -> Result<Vec<StartedWorker>, WorkerError> {
    let unix = match &shared.config.socket {
        Some(path) => Some(listen::unix(path)?),
        None => None,
    };
    let mut out = Vec::with_capacity(count);
    for id in 0..count {
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = Arc::clone(&shared);
        // Each worker accepts on its own dup of the one unix listener.
        let unix = match &unix {
            Some(l) => Some(l.try_clone().map_err(|source| ListenError::Unix {
                path: shared.config.socket.clone().unwrap_or_default(),
                source,
            })?),
            None => None,
        };
        let handle = std::thread::Builder::new()
            .name(format!("ringgate-w{id}"))
            .spawn(move || {
                let (worker, startup) = match Worker::new(id, shared, unix) {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return Ok(());
                    }
                };
                let _ = tx.send(Ok(startup));
                worker.run()
            })
            .map_err(|e| WorkerError::Ring(RingError::Setup(e)))?;
        match rx.recv() {
            Ok(Ok(startup)) => out.push((handle, startup)),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(WorkerError::Ring(RingError::Setup(io::Error::other(
                    "worker thread died during start-up",
                ))))
            }
        }
    }
    Ok(out)
}

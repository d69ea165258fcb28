//! One worker: a thread with its own ring, SO_REUSEPORT listener, buffer
//! pool and backend pool. The loop has a fixed shape (TigerBeetle's): submit
//! and wait, reap every ready completion into a reused batch, run handlers
//! from the batch (never inline from the kernel), repeat.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, types::Timespec};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use thiserror::Error;

use super::backend::{Backend, PoolKey};
use super::session::Session;
use super::slab::Slab;
use super::Shared;
use crate::buffers::BufferPool;
use crate::config::ReadBufferMode;
use crate::metrics::{BufferMode, WorkerMetrics};
use crate::ring::{ops, Completion, OpTag, Ring, RingError, Token};

/// How often the worker wakes up on its own: timeouts (handshake, pool
/// wait), pool refills and the shutdown flag are checked at this cadence.
const TICK: Duration = Duration::from_millis(100);

/// Submission queue entries per ring; completions get 4× that.
pub const RING_ENTRIES: u32 = 1024;

/// How long to wait after EMFILE/ENFILE before accepting again, so that fd
/// exhaustion backs off instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// At most one fd-exhaustion log line per worker in this interval.
const FD_EXHAUSTION_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// After a failed backend connect, pool refills wait this long.
pub(super) const BACKEND_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, Error)]
pub enum WorkerError {
    #[error(transparent)]
    Ring(#[from] RingError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("cannot listen on unix socket {}: {source}", path.display())]
    Unix {
        path: std::path::PathBuf,
        source: io::Error,
    },
    #[error(
        "unix socket {} is in use by a running server; stop it or choose another --socket",
        path.display()
    )]
    UnixInUse { path: std::path::PathBuf },
    #[error("{} exists and is not a socket; refusing to replace it", path.display())]
    UnixNotSocket { path: std::path::PathBuf },
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

/// A client waiting for a backend connection of its key.
pub(super) struct Waiter {
    pub session: (u32, u32),
    pub deadline: Instant,
}

/// What the last backend greeting told us; the greeting we send clients
/// mirrors the backend's version and capabilities.
#[derive(Clone, Debug)]
pub(super) struct BackendTemplate {
    pub capabilities: Option<u32>,
    pub server_version: String,
}

const LISTENER_TCP: usize = 0;
const LISTENER_UNIX: usize = 1;

/// A listening socket and whether an accept SQE is armed on it.
struct Listener {
    sock: Socket,
    armed: bool,
}

pub struct Worker {
    // Drop order matters: the ring goes first, releasing the kernel's
    // registration before the pool unmaps the region it points at.
    pub(super) ring: Ring,
    pub(super) pool: BufferPool,
    pub(super) id: usize,
    pub(super) shared: Arc<Shared>,
    /// [LISTENER_TCP] and, with --socket, [LISTENER_UNIX].
    listeners: [Option<Listener>; 2],
    accept_multishot: bool,
    accept_resume_at: Option<Instant>,
    pub(super) sessions: Slab<Session>,
    pub(super) backends: Slab<Backend>,
    /// Idle backend connection indexes, most recently used last.
    pub(super) idle: Vec<u32>,
    pub(super) waiters: VecDeque<Waiter>,
    pub(super) waiters_dirty: bool,
    pub(super) template: BackendTemplate,
    pub(super) backend_addr: &'static SockAddr,
    pub(super) connect_timeout: &'static Timespec,
    tick_ts: &'static Timespec,
    pub(super) next_connection_id: u32,
    /// The key of the most recent client: pool refills open this kind.
    pub(super) warm_key: PoolKey,
    pub(super) backend_retry_at: Option<Instant>,
    pub(super) draining: Option<Instant>,
    pub(super) log_limiter: super::session::LogLimiter,
    fd_exhaustion_logged_at: Option<Instant>,
    /// Accept pauses since the last fd-exhaustion log line.
    fd_exhaustion_paused: u32,
}

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

fn timespec(d: Duration) -> Timespec {
    Timespec::new().sec(d.as_secs()).nsec(d.subsec_nanos())
}

fn listen_socket(addr: SocketAddr) -> io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    // Every worker binds the same address; the kernel spreads connections.
    sock.set_reuse_port(true)?;
    sock.bind(&addr.into())?;
    sock.listen(4096)?;
    Ok(sock)
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
        let ring = Ring::new(RING_ENTRIES, RING_ENTRIES * 4)?;
        let metrics = Arc::clone(&shared.metrics);
        let size = cfg.read_buffer_size as usize;
        let (pool, fallback) = match cfg.read_buffers {
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
        let listener = listen_socket(cfg.listen).map_err(|source| WorkerError::Listen {
            addr: cfg.listen,
            source,
        })?;
        let startup = WorkerStartup {
            features: ring.features(),
            mode: pool.mode(),
            fallback,
            ring_fd: ring.fd(),
        };
        let worker = Worker {
            ring,
            pool,
            id,
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
            backends: Slab::new(),
            idle: Vec::new(),
            waiters: VecDeque::new(),
            waiters_dirty: false,
            template: BackendTemplate {
                capabilities: None,
                server_version: "5.5.5-10.11.0-MariaDB-ringgate".into(),
            },
            backend_addr: leak(SockAddr::from(cfg.backend)),
            connect_timeout: leak(timespec(cfg.backend_connect_timeout)),
            tick_ts: leak(timespec(TICK)),
            next_connection_id: (id as u32) << 24,
            warm_key: PoolKey::default_warm(),
            backend_retry_at: None,
            draining: None,
            log_limiter: Default::default(),
            fd_exhaustion_logged_at: None,
            fd_exhaustion_paused: 0,
            shared,
        };
        Ok((worker, startup))
    }

    pub(super) fn metrics(&self) -> &WorkerMetrics {
        self.shared.metrics.worker(self.id)
    }

    /// Queue an SQE. It cannot fail: an SQE the ring cannot queue comes
    /// back as a failed completion through the normal handlers.
    pub(super) fn push(&mut self, sqe: crate::ring::Sqe) {
        self.ring.push(sqe);
    }

    /// Run until a drain completes.
    pub fn run(mut self) -> Result<(), WorkerError> {
        self.arm_accepts();
        self.push(ops::timeout(self.tick_ts, Token::new(OpTag::Tick, 0, 0)));
        self.refill_pool();
        let mut batch: Vec<Completion> = Vec::with_capacity(RING_ENTRIES as usize * 4);
        loop {
            self.ring.submit_and_wait()?;
            batch.clear();
            self.ring.reap(&mut batch);
            for cqe in batch.iter() {
                self.dispatch(cqe.user_data, cqe.result, cqe.flags);
            }
            if self.waiters_dirty {
                self.waiters_dirty = false;
                self.serve_waiters();
            }
            if self.draining.is_some() && self.sessions.len() == 0 && self.close_idle_backends() {
                break;
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, user_data: u64, res: i32, flags: u32) {
        let Some(token) = Token::decode(user_data) else {
            return;
        };
        let (i, g) = (token.index, token.generation);
        match token.tag {
            OpTag::Accept => self.on_accept(i as usize, res, flags),
            OpTag::Tick => self.on_tick(),
            OpTag::ClientRead => self.session_read_done(i, g, res),
            OpTag::ClientWrite => self.session_write_done(i, g, res),
            OpTag::BackendConnect => self.backend_connect_done(i, g, res),
            OpTag::BackendRead => self.backend_read_done(i, g, res),
            OpTag::BackendWrite => self.backend_write_done(i, g, res),
            OpTag::Ignore => {}
        }
    }

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
        let entry = if multishot {
            ops::accept_multi(fd, token)
        } else {
            ops::accept(fd, token)
        };
        self.push(entry);
    }

    fn on_accept(&mut self, which: usize, res: i32, flags: u32) {
        if !cqueue::more(flags) {
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
                    let now = Instant::now();
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
                    self.accept_resume_at = Some(Instant::now() + ACCEPT_BACKOFF);
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

    fn on_tick(&mut self) {
        let now = Instant::now();
        if self.draining.is_none() && self.shared.shutdown.load(Relaxed) {
            self.begin_drain(now);
        }
        if self.accept_resume_at.is_some_and(|at| now >= at) {
            self.accept_resume_at = None;
            self.arm_accepts();
        }
        self.expire_sessions(now);
        self.expire_waiters(now);
        self.expire_backends(now);
        if self.draining.is_none() {
            self.trim_idle(now);
            self.refill_pool();
        }
        self.push(ops::timeout(self.tick_ts, Token::new(OpTag::Tick, 0, 0)));
    }

    /// SIGTERM/SIGINT: stop accepting at once; idle sessions are closed,
    /// sessions inside a command finish it first (checked at each command
    /// boundary), and everything left after the drain timeout is cut.
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
        self.close_idle_sessions();
    }

    pub(super) fn drain_expired(&self, now: Instant) -> bool {
        self.draining
            .is_some_and(|t| now.duration_since(t) >= self.shared.config.drain_timeout)
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
        Some(path) => Some(bind_unix(path)?),
        None => None,
    };
    let mut out = Vec::with_capacity(count);
    for id in 0..count {
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = Arc::clone(&shared);
        // Each worker accepts on its own dup of the one unix listener.
        let unix = match &unix {
            Some(l) => Some(l.try_clone().map_err(|source| WorkerError::Unix {
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

/// Bind `--socket`. A socket file left by a crashed run (nothing accepts on
/// it) is replaced; one that a live server answers on is refused, and a path
/// that is not a socket is never deleted.
fn bind_unix(path: &std::path::Path) -> Result<Socket, WorkerError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let err = |source| WorkerError::Unix {
        path: path.to_path_buf(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(WorkerError::UnixNotSocket {
                path: path.to_path_buf(),
            });
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(WorkerError::UnixInUse {
                    path: path.to_path_buf(),
                })
            }
            Err(_) => {
                tracing::info!("replacing stale unix socket {}", path.display());
                std::fs::remove_file(path).map_err(err)?;
            }
        }
    }
    let sock = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(err)?;
    sock.bind(&SockAddr::unix(path).map_err(err)?)
        .map_err(err)?;
    sock.listen(4096).map_err(err)?;
    // Like mysqld's socket: anyone may connect; ringgate's login decides.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).map_err(err)?;
    Ok(sock)
}

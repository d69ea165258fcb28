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

/// The [`SessionCtx`] of worker `$w` (a `&mut Worker`): a macro, not a
/// method, because the context borrows `shared` and `users` while the caller
/// holds `sessions` mutably, and only field paths let the borrow checker see
/// those borrows as disjoint (it reads no `buffers`, so it may be built
/// while a ring chunk borrows them).
macro_rules! worker_session_ctx {
    ($w:expr) => {
        session_ctx(&$w.shared, &$w.users, $w.now, $w.draining.is_some())
    };
}

mod accept;
mod backend_io;
mod backend_table;
mod backend_tls_io;
mod debug_park;
mod direct;
mod dispatch;
mod execute;
mod feed;
mod hot_read;
mod idle_backend_io;
mod idle_io;
mod leg;
mod link_write;
mod pool_events;
mod read_path;
mod read_split;
mod relay_execute;
mod ring_io;
mod session_actions;
mod session_io;
mod setup;
mod submit;
mod table;
mod tick;
mod tls_io;
mod tls_outbox;
mod users_reload;

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::types::Timespec;
use socket2::{SockAddr, Socket};
use thiserror::Error;

use super::conn_io::{ConnIo, RecvEnd};
use super::listen::{self, ListenError};
use super::{completion, written, Shared};
use crate::config::{BackendIdentity, DirectDescriptors, Pooling, ReadBufferMode};
use machines::backend::BackendOp;
use machines::completion::{Completion, Fault};
use machines::connect_attrs;
use machines::identity::{BackendLogin, IdentityMode};
use machines::idle_cut::{self, IdleCutLimits, IdleHolder};
use machines::ids::{
    BackendId, LeaseRequest, LeaseSetup, PoolKey, SessionId, Settings, TlsWish, ANY_SETTINGS,
};
use machines::pool::{Pool, PoolConfig, PoolEvent};
use machines::registry::{ConnectionIds, Registration};
use machines::relay::{RelayOp, RelayTimeouts};
use machines::session::{
    NewSession, Session, SessionAction, SessionCtx, PASSTHROUGH_CAPS, PROXY_CAPS,
};
use machines::slab::Slab;
use machines::{try_reserve, unreserve, LogLimiter};
use metrics::{BufferMode, WorkerMetrics};
use table::SessionTable;
use uring::buffers::provided::{BufRing, RingSetupError};
use uring::buffers::{BufferPool, Owner};
use uring::ring::{ops, OpTag, Ring, RingError, SockRef, Sqe, Token};
use wire::auth;
use wire::client_sha2::FullAuthTransport;
use wire::constants::{CLIENT_COMPRESS, CLIENT_LOCAL_FILES, CLIENT_SSL};
use wire::Users;

/// How often the worker wakes up on its own: timeouts (handshake, pool
/// wait), pool refills and the shutdown flag are checked at this cadence.
const TICK: Duration = Duration::from_millis(100);

/// Serving passes per batch of completions at most (see the loop in `run`).
const SERVE_ROUNDS: usize = 4;

/// Submission queue entries per ring.
pub const RING_ENTRIES: u32 = 1024;

/// How long to wait after EMFILE/ENFILE before accepting again, so that fd
/// exhaustion backs off instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// At most one fd-exhaustion log line per worker in this interval.
const FD_EXHAUSTION_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Operations in flight at once, at most: per session a client read, a
/// write to the client and a write to the backend plus a backend read and
/// its cancel;
/// per backend connection a read and a write (or a connect), its close
/// watch and (fixed mode) its readability poll; the two accepts, the tick
/// and cancels. The completion ring is sized from this so that it cannot
/// overflow in normal operation (overflow is still handled).
fn max_in_flight(max_sessions: usize, max_backends: usize) -> usize {
    // Ring mode's multishot receives may post several CQEs each before we
    // reap; the client's and the backend's count one more each here, and
    // overflow beyond that is still handled.
    max_sessions * 7 + max_backends * 4 + 16
}

/// The submission and completion queue sizes a worker asks for under this
/// configuration (`ringgate check` sizes its memlock estimate from it).
pub fn ring_sizes(cfg: &crate::config::Config, workers: usize) -> (u32, u32) {
    let cq = uring::ring::cq_entries_for(max_in_flight(
        cfg.max_connections.div_ceil(workers.max(1)),
        cfg.backend_max_connections,
    ));
    (RING_ENTRIES, cq)
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
    pub features: uring::ring::Features,
    pub mode: BufferMode,
    /// Why fixed buffers were not used, when they were asked for.
    pub fallback: Option<String>,
    /// Why the provided-buffer ring was not used, when it was asked for.
    pub ring_fallback: Option<String>,
    /// Why the ring fd could not be registered (enters then pass the fd).
    pub ring_fd_fallback: Option<String>,
    pub ring_fd: i32,
    /// Slots of the ring's file table clients are accepted into (0: plain
    /// fds, `--direct-descriptors off` or `direct_fallback`).
    pub direct_slots: u32,
    /// Why direct descriptors are not used although asked for.
    pub direct_fallback: Option<String>,
}

/// A relay write with the byte range it covers (a write that completes
/// partly is resubmitted from where it stopped). Here, not in
/// `relay_execute.rs`, because the ring-buffer and TLS legs name them too.
/// The relay's reads go their own way (`read_path.rs`).
#[derive(Clone, Copy)]
enum RelayIo {
    UpWrite { pos: usize, end: usize },
    DownWrite { pos: usize, end: usize },
}

/// What the last backend greeting told us; the greeting we send clients
/// mirrors the backend's version and capabilities.
struct BackendTemplate {
    capabilities: Option<u32>,
    /// The backend greeting's MariaDB extended capabilities.
    ext_capabilities: u32,
    server_version: String,
}

impl BackendTemplate {
    /// What clients are greeted with until a backend has greeted us.
    fn before_any_greeting() -> Self {
        BackendTemplate {
            capabilities: None,
            ext_capabilities: 0,
            server_version: "5.5.5-10.11.0-MariaDB-ringgate".into(),
        }
    }
}

const LISTENER_TCP: usize = 0;
const LISTENER_UNIX: usize = 1;

/// A listening socket and whether an accept SQE is armed on it.
struct Listener {
    sock: Socket,
    armed: bool,
}

impl Listener {
    fn disarmed(sock: Socket) -> Self {
        Listener { sock, armed: false }
    }
}

/// A session and its I/O.
struct SessionSlot {
    /// Its proxy connection id, registered for KILL until the slot is freed.
    /// First, so it is dropped before `io` closes the socket: another
    /// worker's KILL may shut that socket down while it is registered.
    conn: Registration,
    io: ConnIo,
    session: Session,
    /// The leased backend connection.
    backend: Option<BackendId>,
    /// Relay operations in flight that this session's token names; the
    /// slot (and its link to the backend) stays until they complete.
    relay_ops: u32,
    /// Bytes of the current relay write to the backend: (written, end).
    up_write: (usize, usize),
    /// The relay write to the backend went out linked to the backend read
    /// behind it, posting no CQE when it writes everything (`link_write.rs`):
    /// its length, completed on that read's CQE (buffers rule 5).
    linked_write: Option<usize>,
    /// Bytes of the current relay write to the client: (written, end).
    down_write: (usize, usize),
    /// Holds one unit of `Shared::clients`.
    counted: bool,
    /// The client's address, for log lines.
    peer: String,
    closing: bool,
    /// The client leg's transform and its buffers, once negotiated
    /// (compression); `None` costs nothing on the zero-copy path.
    leg: Option<Box<leg::LegIo>>,
    /// Front-end TLS, from the client's SSLRequest on; beneath the leg.
    tls: Option<Box<tls_io::TlsIo>>,
    /// Fixed mode: waiting for the client's next bytes without a slot.
    idle_wait: idle_io::IdleWait,
    /// Fixed mode: the relay's read of the backend waits for its bytes on
    /// the backend's poll without a slot (`idle_backend_io.rs`; `Polling`
    /// or `None`); counted in `relay_ops`.
    down_wait: idle_io::IdleWait,
    /// Fixed mode: the reads a busy session keeps pending with their slot
    /// until they have been idle for `hot_read::HOT_IDLE` (`hot_read.rs`).
    hot: hot_read::HotReads,
    /// The relay cancelled its backend read (`CancelReadBackend`): a TLS
    /// backend's read that completed a partial record is not read again.
    down_cancelled: bool,
    /// This session's KILL CONNECTION woke a victim held as a direct
    /// descriptor: the server's OK waits for its shutdown (`direct.rs`).
    kill_answer: direct::KillAnswer,
    /// This client was shut down by another session's KILL: that
    /// session's connection id, told once the shutdown has run.
    kill_waiter: Option<u32>,
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
    /// The users whose removals the pool and the sessions have seen
    /// (`users_reload.rs`), applied at the tick after a swap.
    users_applied: Arc<Users>,
    /// [LISTENER_TCP] and, with --socket, [LISTENER_UNIX].
    listeners: [Option<Listener>; 2],
    accept_multishot: bool,
    accept_resume_at: Option<Instant>,
    /// Direct descriptors (`direct.rs`): clients accepted into the ring's
    /// file table; `None` when they are plain fds.
    direct: Option<direct::Direct>,
    sessions: Slab<SessionSlot>,
    /// Each backend connection's I/O, by the id the pool gave it
    /// (`backend_table.rs`); the pool keeps its machine.
    backends: backend_table::BackendTable,
    pool: Pool,
    template: BackendTemplate,
    /// Every `--backend`, in configured order; the pool names a
    /// connection's server by its index here.
    backend_addrs: Vec<&'static SockAddr>,
    /// The monitor's view (several servers), read at each tick for a
    /// change of writer (`tick.rs`).
    cluster: Option<crate::monitor::ViewReader>,
    /// `--read-write-split`: the worker's weighted round robin over the
    /// replicas that may take reads, and its scratch list of them
    /// (`read_split.rs`).
    replica_chooser: machines::replica_choice::ReplicaChooser,
    replica_candidates: Vec<machines::replica_choice::Candidate>,
    connect_timeout: &'static Timespec,
    tick_ts: &'static Timespec,
    conn_ids: ConnectionIds,
    draining: Option<Instant>,
    log_limiter: LogLimiter,
    fd_exhaustion_logged_at: Option<Instant>,
    /// Accept pauses since the last fd-exhaustion log line.
    fd_exhaustion_paused: u32,
    /// Work queues: what machines returned and the driver has yet to do.
    session_q: VecDeque<(SessionId, SessionAction)>,
    /// KILL answers held for their victim's shutdown, with when: a safety
    /// net releases one that no word about the victim reached.
    held_kill_answers: Vec<(SessionId, Instant)>,
    pool_q: VecDeque<PoolEvent>,
    /// The time of the batch being handled.
    now: Instant,
    /// Reused for what a session handler returns (no allocation per
    /// completion on the relay path).
    action_scratch: Vec<SessionAction>,
    /// Reused for what the pool returns to a lease (transaction pooling
    /// leases once per statement).
    lease_scratch: Vec<PoolEvent>,
    /// A relay write to the backend waiting for the read the relay asked
    /// for right behind it, to go out linked to it (`link_write.rs`).
    held_write: Option<(SessionId, Sqe, usize)>,
    /// The next relay write to the backend is a command's first
    /// (`WriteBackend`), which may be linked.
    link_up_write: bool,
    /// Ring mode: the pool's own operations on backends whose receive a
    /// park left armed, by (index, generation), held until the cancelled
    /// receive has ended (what a give-back asked for waits in the pool).
    ring_pending_ops: std::collections::HashMap<(u32, u32), Vec<BackendOp>>,
    /// Ring mode: receives that -ENOBUFS ended and whose relay waits, in
    /// the order they starved; re-armed at the end of the batch.
    ring_starved: std::collections::VecDeque<(SessionId, ring_io::Side)>,
    /// Fixed mode without --hold-idle-slots: idle clients and backend
    /// connections give their slot back and wait for readability with a
    /// poll (`idle_io.rs`, `idle_backend_io.rs`).
    idle_poll: bool,
    /// Fixed mode: the hot reads submitted, oldest first, checked for
    /// idleness after every batch (`hot_read.rs`).
    hot_queue: VecDeque<hot_read::HotEntry>,
    /// Backend TLS (`backend_tls_io.rs`) of the connections that run it,
    /// by (index, generation).
    backend_tls: std::collections::HashMap<(u32, u32), Box<backend_tls_io::BackendTlsIo>>,
}

/// What a session handler sees of its worker (built from fields, so the
/// session slab can be borrowed mutably beside it).
fn session_ctx<'a>(
    shared: &'a Shared,
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
        idle_cut: IdleCutLimits {
            transaction: cfg.idle_transaction_timeout,
            pinned: cfg.idle_pinned_timeout,
        },
        draining,
        read_buffer_size: cfg.read_buffer_size as usize,
        registry: &shared.registry,
        rsa_key: shared.rsa_key.as_deref(),
        move_prepared_statements: cfg.tx_prepared_statements.moves(),
        statement_limits: machines::statement_limits::StatementLimits {
            statements: usize::try_from(cfg.max_prepared_statements).unwrap_or(usize::MAX),
            bytes: usize::try_from(cfg.max_prepared_bytes).unwrap_or(usize::MAX),
        },
        // Every mode: ring mode keeps the backend's receive armed across
        // the park instead (`ring_io/give_back.rs`, `Worker::ring_give_back`).
        park_withdraws_idle_read: true,
        several_servers: cfg.backends.len() > 1,
        read_write_split: cfg.read_write_split,
        read_only_functions: shared.read_only_functions,
        servers: &shared.server_addrs,
        transaction_replay: (cfg.transaction_replay && cfg.backends.len() > 1)
            .then(|| usize::try_from(cfg.transaction_replay_max_size).unwrap_or(usize::MAX)),
        causal: &shared.causal,
    }
}

fn peer_of(sock: &Socket) -> (String, String) {
    peer_strings(sock.peer_addr().ok().and_then(|a| a.as_socket()))
}

/// (address for log lines, host for the login's `'user'@'host'`) of a
/// client; no IP address: the unix socket, "localhost".
fn peer_strings(addr: Option<std::net::SocketAddr>) -> (String, String) {
    match addr {
        Some(a) => (a.to_string(), a.ip().to_string()),
        None => ("local".into(), "localhost".into()),
    }
}

impl Worker {
    fn metrics(&self) -> &WorkerMetrics {
        self.shared.metrics.worker(self.id)
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

/// What an idle connection costs in the worker's own structures (the
/// budget is ≤ 2 KiB of RSS per idle client in transaction pooling). Printed
/// with `cargo test sizes -- --nocapture`; the asserts catch a regression
/// that puts a buffer-sized field on every session.
#[cfg(test)]
mod size_tests {
    use super::*;
    use backend_table::BackendEntry;
    use machines::multiplex::TxState;
    use machines::pool::Pooled;
    use machines::relay::Relay;
    use std::mem::size_of;
    use uring::buffers::provided::RingRecv;
    use uring::buffers::{ReadBuffer, WriteBuf};
    use wire::tracker::Tracker;

    #[test]
    fn sizes_of_the_per_connection_structures() {
        let sizes = [
            (
                "SessionSlot (slab entry of a client)",
                size_of::<SessionSlot>(),
            ),
            ("  Session", size_of::<Session>()),
            ("  ConnIo", size_of::<ConnIo>()),
            ("    RingRecv", size_of::<RingRecv<RecvEnd>>()),
            ("    ReadBuffer", size_of::<ReadBuffer>()),
            ("    WriteBuf", size_of::<WriteBuf>()),
            ("Relay (boxed, while relaying)", size_of::<Relay>()),
            ("Tracker (boxed while parked)", size_of::<Tracker>()),
            ("TxState (boxed, transaction pooling)", size_of::<TxState>()),
            (
                "Pooled (pool's slab entry of a backend)",
                size_of::<Pooled>(),
            ),
            (
                "BackendEntry (driver's table entry)",
                size_of::<BackendEntry>(),
            ),
        ];
        for (what, n) in sizes {
            eprintln!("{what:<40} {n:>5} B");
        }
        assert!(size_of::<SessionSlot>() <= 1024, "{sizes:?}");
        // A backend connection is both halves.
        let backend = size_of::<Pooled>() + size_of::<Option<BackendEntry>>();
        assert!(backend <= 1024, "{sizes:?}");
    }
}

//! One worker's backend pool: it owns the backend connections, the idle
//! list and the queue of sessions waiting for a connection. It never calls
//! into sessions; it returns [`PoolEvent`]s (`Leased`, `LeaseFailed`, the
//! operations its connections want) that the driver carries out.
//!
//! Session pooling: a connection serves one session from login to close,
//! then is reset (COM_RESET_CONNECTION) and reused by a session with the
//! same [`PoolKey`]. A connection that errored or was left mid-protocol is
//! never reused.
//!
//! This file holds the pool's types and the leasing (idle pick, waiters,
//! opening); the rest are child modules that share its private fields:
//! `pool/idle_check.rs` (the check of an idle connection at its lease, an
//! operation the driver carries out), `pool/release.rs` (connections coming
//! back), `pool/give_back.rs` (ring mode's give-back decision),
//! `pool/backend_events.rs`
//! (completions on a connection's socket and its machine's events),
//! `pool/upkeep.rs` (serving waiters, timeouts, refill, drain, giving
//! connections to other workers), `pool/share.rs` (how the workers share
//! the cap), `pool/account_share.rs` (each backend account's share of it),
//! `pool/waiters.rs` (the queues: one per key) and `pool/causal.rs` (a
//! causal read's wait on a replica, or its way to the writer).
//!
//! Waiting (`--backend-wait-timeout`): a session that finds no connection
//! waits in its key's FIFO queue. What a key can be served with (its own
//! idle or resetting connections) goes to that key's oldest waiter, and a
//! key that cannot be served holds up only its own queue. Units of the cap
//! go first-come-first-served across keys; at the cap, an idle connection
//! is closed for a waiter when nobody of its key waits, or when its key
//! holds two more connections than the waiter's (or the waiter's holds
//! none), so a busy key cannot starve another ([`Pool::evict_for`]).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::completion::Completion;
use std::time::{Duration, Instant};

use crate::backend::{
    BackendConn, BackendCredentials, BackendEvent, BackendOp, BackendOut, TlsNote,
};
use crate::causal::ReplicaRead;
use crate::identity::{BackendLogin, Identities, IdentityMode};
use crate::ids::{
    BackendId, IdentityId, LeaseRequest, PoolKey, SessionId, Settings, TlsWish, ANY_SETTINGS,
};
use crate::slab::Slab;
pub use give_back::{
    clean_after_cancel, give_back, GiveBack, Park, PendingGiveBack, ReceiveEnd, ReceiveLeft,
};
use metrics::{BackendTlsError, InternalQuery, Metrics, RejectReason, WorkerMetrics};
pub use share::BackendShare;
use waiters::Waiters;
use wire::client_sha2::FullAuthTransport;
use wire::constants::ER_ACCESS_DENIED_ERROR;
use wire::constants::ER_CON_COUNT_ERROR;
use wire::reply::err_payload;
use wire::users::Authenticated;
pub use writer::Target;

/// ER_UNKNOWN_ERROR: what MySQL itself uses for errors without a better code.
const ER_UNKNOWN_ERROR: u16 = 1105;

/// After a failed backend connect, pool refills wait this long.
pub const BACKEND_RETRY: Duration = Duration::from_secs(1);

/// The limits and identity the pool works with (from the configuration).
pub struct PoolConfig {
    /// The server new connections go to first (the writer, or the only
    /// server), and its index in the driver's address table
    /// (`pool/writer.rs`).
    pub backend: std::net::SocketAddr,
    pub backend_index: u16,
    /// Several servers: a failed connect to the writer makes the lease
    /// wait for the monitor to name a writer again, instead of failing
    /// (`pool/writer.rs`).
    pub wait_for_writer: bool,
    /// `--backend-identity` (with `--backend-user` for `shared`).
    pub identity: IdentityMode,
    /// `--backend-pool-size`: idle connections kept warm.
    pub pool_size: usize,
    /// `--backend-max-connections`, across workers (see `pool/share.rs`).
    pub max_connections: usize,
    /// `--backend-max-connections-per-user` (0: no limit but the cap; see
    /// `pool/account_share.rs`).
    pub max_per_user: usize,
    pub wait_timeout: Duration,
    /// `--writer-wait-timeout` (at most `wait_timeout`): how long a lease
    /// waits while there is no writer (`pool/writer.rs`).
    pub writer_wait_timeout: Duration,
    pub idle_timeout: Duration,
    pub connect_timeout: Duration,
    /// `--causal-read-timeout`: how long a read on a replica waits for the
    /// session's writes before it goes to the writer.
    pub causal_read_timeout: Duration,
    /// How caching_sha2 full authentication sends the password to the
    /// backend (`--backend-rsa-public-key`).
    pub full_auth: FullAuthTransport,
    /// `--backend-tls`, as the login asks for it; stamped on every key.
    pub tls: TlsWish,
}

/// A backend connection as the pool keeps it: its machine and what the
/// pool knows of its use. The driver keeps the connection's I/O (socket,
/// read buffer) in its own table, by the same [`BackendId`], created when
/// it calls [`Pool::insert_opening`] and dropped when it calls
/// [`Pool::remove`]: the pool holds no socket and no buffer.
pub struct Pooled {
    conn: BackendConn,
    /// The session it serves (also while its schema is being selected).
    leased_to: Option<SessionId>,
    /// The request it was opened for, then set up for (schema, settings)
    /// until `SchemaSelected`, while that session still waits: a setup
    /// cut short by its server's death serves the request again
    /// ([`Pool::setup_lost`]). Moved in, not copied.
    opened_for: Option<LeaseRequest>,
    /// That request's place in the waiters' queue (its arrival number and
    /// since when it waits), for it to go back to; None for one a
    /// connection was opened for (it queues again as a failed connect's).
    place: Option<(u64, Instant)>,
    /// Counted in the busy gauge.
    busy: bool,
    /// Being reset for the session it stays leased to ([`Pool::relet`]).
    relet: bool,
    /// Reading LAST_INSERT_ID() for the session that gave it back
    /// ([`Pool::park_asking`]).
    asking: Option<Asking>,
    /// Its prepared statements as counted in the gauge.
    prepared: usize,
    /// The session it was leased to last (transaction pooling: that
    /// session's `SELECT CONNECTION_ID()` named this thread).
    last_session: Option<SessionId>,
    /// Its close watch ([`PoolEvent::Watch`]) was asked for.
    watched: bool,
    /// The watch saw the server close it while it was not idle (leased,
    /// being reset, asked for LAST_INSERT_ID()); the watch is spent, so
    /// when it comes back it is discarded and its last session told, as
    /// [`Pool::on_watch`] does for an idle one.
    server_closed: bool,
    /// Closed to give its unit of the cap to another worker
    /// ([`Pool::give_to_other_workers`]).
    given: bool,
    /// Closed at the cap to give its unit to a waiter of another key
    /// ([`Pool::evict_for`]).
    evicted: bool,
    /// Its account's counters, charged for it until its slot is freed
    /// (`pool/account_share.rs`); None for the shared account.
    user: Option<Arc<metrics::UserUsage>>,
    /// The server it was opened to (`pool/writer.rs`).
    server: u16,
    /// A causal read's wait runs on it (`pool/causal.rs`): the position
    /// waited for. The request, leased again for the writer if the wait
    /// does not reach, is the lease's own (`opened_for`, kept until
    /// `SchemaSelected`, which follows only a wait that reached).
    causal_retry: Option<Box<wire::gtid::GtidPos>>,
}

/// A give-back that waits for `SELECT LAST_INSERT_ID()`.
#[derive(Debug)]
struct Asking {
    session: SessionId,
    kept: Option<(Option<String>, Settings)>,
    reset: bool,
}

impl Pooled {
    /// Enter or leave the busy gauge (leased, including while its schema
    /// is being selected), counting each connection once.
    fn set_busy(&mut self, busy: bool, metrics: &WorkerMetrics) {
        if self.busy != busy {
            self.busy = busy;
            let delta = if busy { 1 } else { -1 };
            metrics.backend_busy.fetch_add(delta, Relaxed);
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolEvent {
    /// Open a connection: the driver makes a socket and calls
    /// [`Pool::insert_opening`] (or [`Pool::open_failed`]).
    Open {
        key: PoolKey,
        request: Option<LeaseRequest>,
    },
    /// An operation on a connection's own socket.
    Io(BackendId, BackendOp),
    /// Check, before it is leased, that an idle connection has nothing to
    /// read (as Pingora checks on checkout): EOF or stray bytes mean the
    /// server closed it (its wait_timeout, a restart) before its close
    /// watch was handled. The driver peeks at the socket without blocking
    /// and answers [`Pool::idle_checked`].
    CheckIdle(BackendId),
    /// The session has its connection, with its schema selected.
    Leased {
        session: SessionId,
        backend: BackendId,
    },
    /// The session's connection was reset in place ([`Pool::relet`]) and is
    /// its again; `schema` is the one the reset kept.
    Relet {
        session: SessionId,
        backend: BackendId,
        schema: Option<String>,
    },
    /// The session gets this ERR instead, counted as a refusal for
    /// `reject` (none for the server's answer to its schema).
    LeaseFailed {
        session: SessionId,
        err_payload: Vec<u8>,
        reject: Option<RejectReason>,
    },
    /// LAST_INSERT_ID() as the connection the session gave back answered
    /// it ([`Pool::park_asking`]); None when it could not be read.
    LastInsertId {
        session: SessionId,
        value: Option<u64>,
    },
    /// The answer to [`Pool::statement`], for the session the connection
    /// is leased to.
    Statement {
        session: SessionId,
        reply: crate::backend::server_prepared::StatementReply,
    },
    /// The answer to [`Pool::replay`], for the session the connection was
    /// leased to (after a mismatch it is closed and leased to no one).
    Replayed {
        session: SessionId,
        outcome: crate::backend::tx_replay::ReplayOutcome,
    },
    /// Watch the connection's socket for the server closing it
    /// (`ops::poll_closed`, armed once for its life; its completion goes
    /// to [`Pool::on_watch`]).
    Watch(BackendId),
    /// The server closed an idle connection (KILL CONNECTION of its thread,
    /// its wait_timeout, a shutdown); `session` was leased it last: if it
    /// has held no other since, the thread it knows as its own is gone.
    ClosedIdle { session: SessionId, thread: u32 },
    /// A backend greeting: the version and capabilities clients are offered.
    ServerInfo {
        server_version: String,
        capabilities: u32,
        /// MariaDB extended capabilities (0 from a MySQL server).
        ext_capabilities: u32,
        /// A login's OK status flags (None from a probe, which does not
        /// log in): a fresh session's sql_mode quoting.
        login_status: Option<u16>,
    },
}

/// How [`Pool::try_lease`] goes on with a request it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leasing {
    /// A connection is being opened for it.
    Opening,
    /// An idle connection is being checked for it
    /// ([`PoolEvent::CheckIdle`]).
    Checking,
}

/// What [`Pool::reserve`] found.
enum Reserve {
    Got,
    /// The cap is reached.
    Full,
    /// Units are free, but they are another worker's (`pool/share.rs`).
    Theirs,
    /// The key's account holds its share (`pool/account_share.rs`).
    UserFull,
}

pub struct Pool {
    cfg: PoolConfig,
    slots: Slab<Pooled>,
    /// Idle connection indexes, least recently used first.
    idle: Vec<u32>,
    /// Sessions waiting for a connection: a FIFO queue per key
    /// (`pool/waiters.rs`).
    waiters: Waiters,
    /// Idle connections taken for a lease whose check
    /// ([`PoolEvent::CheckIdle`]) the driver has not answered yet
    /// (`pool/idle_check.rs`).
    checks: Vec<idle_check::Check>,
    /// What give-backs asked for while the receive they cancelled ends
    /// (ring mode, `pool/give_back.rs`).
    give_backs: std::collections::HashMap<BackendId, PendingGiveBack>,
    /// Something freed up: serve the waiters.
    dirty: bool,
    /// A waiter left a free unit to another worker (`Reserve::Theirs`):
    /// serve the waiters again after every batch until it is not so, since
    /// the other worker taking the unit tells this one nothing.
    deferred: bool,
    /// The cap across workers, and every worker's demand
    /// (`pool/share.rs`).
    share: Arc<BackendShare>,
    /// Connections of this pool closed to give their unit to another
    /// worker and not yet freed: one at a time.
    giving: usize,
    /// Connections of this pool closed at the cap so that a waiter of
    /// another key can have their unit, and not yet freed: each is the
    /// unit of one waiter, oldest first ([`Pool::serve_waiters`]).
    evicting: usize,
    /// The key of the most recent client: refills open this kind. None
    /// before any client logged in with passthrough identity (there is no
    /// account to log in as yet) and after its identity was refused.
    warm_key: Option<PoolKey>,
    /// `--backend-tls preferred` fell back to plain once: logged.
    plain_fallback_logged: bool,
    /// Who connections log in as (see `identity`).
    identities: Identities,
    /// A backend greeting was seen (by a login or a probe).
    probed: bool,
    retry_at: Option<Instant>,
    /// Where new connections go (`pool/writer.rs`); None: no writer.
    target: Option<Target>,
    /// `wait_for_writer`: connects to the writer failing since then, and
    /// leases hold off opening until the second instant.
    writer_failing: Option<(Instant, Instant)>,
    /// A planned switchover's hold (`pool/writer.rs`).
    held: bool,
    /// Causal reads: the highest position each replica (by server index)
    /// answered a wait for with 0, so a read that needs no more runs
    /// without one (`pool/causal.rs`).
    replica_reached: std::collections::HashMap<u16, wire::gtid::GtidPos>,
    draining: bool,
    metrics: Arc<Metrics>,
    /// `--backend-max-prepared`.
    max_prepared: usize,
    worker: usize,
    log_limiter: crate::LogLimiter,
    /// Each identity's account counters (`pool/account_share.rs`).
    user_usage: std::collections::HashMap<IdentityId, Arc<metrics::UserUsage>>,
    /// Waiting sessions already counted as held back by their account's
    /// share.
    user_limited: std::collections::HashSet<SessionId>,
}

/// Can `p` serve `req` as it is or after one `SET` of the differences?
fn settable(req: &LeaseRequest, p: &Pooled) -> bool {
    let Some(setup) = req.setup.as_ref() else {
        return true;
    };
    let carries = p.conn.settings();
    setup.settings == ANY_SETTINGS
        || carries == setup.settings
        || (setup.alt != 0 && carries == setup.alt)
        || setup
            .wanted
            .diff_from(p.conn.carried(), req.key.collation, req.key.caps)
            .is_ok()
}

/// The answer to a session whose user a reload removed from the users
/// file (`--on-user-removed keep`), when it needs a backend connection:
/// the server's code for a login it refuses, since that is what this is.
fn revoked_err() -> Vec<u8> {
    err_payload(
        ER_ACCESS_DENIED_ERROR,
        "ringgate: this session's user was removed from the users file; log in again",
    )
}

fn unavailable(backend: std::net::SocketAddr, cause: &str) -> Vec<u8> {
    err_payload(
        ER_UNKNOWN_ERROR,
        &format!("ringgate: backend {backend} unavailable: {cause}"),
    )
}

impl Pool {
    pub fn new(
        cfg: PoolConfig,
        share: Arc<BackendShare>,
        metrics: Arc<Metrics>,
        worker: usize,
    ) -> Self {
        let warm_key = match cfg.identity {
            IdentityMode::Shared(_) => Some(PoolKey {
                tls: cfg.tls,
                ..PoolKey::default_warm()
            }),
            IdentityMode::Passthrough => None,
        };
        let identities = Identities::new(cfg.identity.clone());
        let target = Some(Target {
            server: cfg.backend_index,
            addr: cfg.backend,
        });
        Pool {
            cfg,
            slots: Slab::new(),
            idle: Vec::new(),
            waiters: Waiters::default(),
            checks: Vec::new(),
            give_backs: Default::default(),
            dirty: false,
            deferred: false,
            share,
            giving: 0,
            evicting: 0,
            warm_key,
            plain_fallback_logged: false,
            identities,
            probed: false,
            retry_at: None,
            target,
            writer_failing: None,
            held: false,
            replica_reached: Default::default(),
            draining: false,
            metrics,
            worker,
            log_limiter: Default::default(),
            user_usage: Default::default(),
            user_limited: Default::default(),
            max_prepared: crate::backend::server_prepared::DEFAULT_MAX_PREPARED,
        }
    }

    /// `--backend-max-prepared`: the bound of each connection's statements
    /// (connections opened from now on).
    pub fn set_max_prepared(&mut self, max: usize) {
        self.max_prepared = max;
    }

    /// Transaction pooling: the server's id of `key` on leased connection
    /// `id`, prepared there first if it lacks it; answered with
    /// [`PoolEvent::Statement`] (or, when the connection fails, a
    /// `LeaseFailed`).
    pub fn statement(
        &mut self,
        id: BackendId,
        key: std::sync::Arc<crate::prepared::StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        let mut bo = Vec::new();
        p.conn.statement(key, want_response, types, now, &mut bo);
        self.apply(id, bo, now, out);
    }

    /// Transaction replay on leased connection `id` (`backend/tx_replay.rs`):
    /// answered with [`PoolEvent::Replayed`] (or, when the connection
    /// fails, a `LeaseFailed`).
    pub fn replay(
        &mut self,
        id: BackendId,
        statements: &[crate::tx_replay::Recorded],
        then: Option<Vec<u8>>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        let mut bo = Vec::new();
        p.conn.replay(statements, then, now, &mut bo);
        self.apply(id, bo, now, out);
    }

    /// The server closed every prepared statement on leased connection
    /// `id` (its session's COM_RESET_CONNECTION): forget their ids.
    pub fn statements_closed(&mut self, id: BackendId) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.conn.statements_closed();
        self.sync_prepared(id);
    }

    /// Keep the prepared-statements gauge in step with connection `id`.
    fn sync_prepared(&mut self, id: BackendId) {
        let metrics = Arc::clone(&self.metrics);
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        let now = if p.conn.is_closed() {
            0
        } else {
            p.conn.prepared_count()
        };
        if now != p.prepared {
            let delta = now as i64 - p.prepared as i64;
            p.prepared = now;
            metrics
                .worker(self.worker)
                .backend_prepared_statements
                .fetch_add(delta, Relaxed);
        }
    }

    fn m(&self) -> &WorkerMetrics {
        self.metrics.worker(self.worker)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// The session first in line for a connection of `key`: a connection
    /// opened now without a request goes to it once logged in.
    pub fn first_waiter(&self, key: PoolKey) -> Option<SessionId> {
        self.waiters.front(key).map(|r| r.session)
    }

    /// Connection `id`'s machine, while the pool holds it.
    pub fn conn(&self, id: BackendId) -> Option<&BackendConn> {
        self.slot(id).map(|p| &p.conn)
    }

    /// The session connection `id` is leased to, if any.
    pub fn leased_to(&self, id: BackendId) -> Option<SessionId> {
        self.slot(id).and_then(|p| p.leased_to)
    }

    fn slot(&self, id: BackendId) -> Option<&Pooled> {
        self.slots
            .get(id.index)
            .filter(|_| self.slots.generation(id.index) == id.generation)
    }

    /// Connection attributes for a connection not logged in yet (see
    /// [`BackendConn::set_connect_attrs`]).
    pub fn set_connect_attrs(&mut self, id: BackendId, attrs: Vec<(String, String)>) {
        if let Some(p) = self.slots.get_mut(id.index, id.generation) {
            p.conn.set_connect_attrs(attrs);
        }
    }

    pub fn id_of(&self, index: u32) -> BackendId {
        BackendId {
            index,
            generation: self.slots.generation(index),
        }
    }

    pub fn set_warm_key(&mut self, key: PoolKey) {
        self.warm_key = Some(self.stamp(key));
    }

    /// The key with this pool's backend TLS: sessions do not know it, and
    /// a connection is leased only to a key that asks for the same.
    fn stamp(&self, key: PoolKey) -> PoolKey {
        PoolKey {
            tls: self.cfg.tls,
            ..key
        }
    }

    /// The identity a client that logged in runs as on the backend (one
    /// for everyone in shared mode). Its id goes into the session's key.
    pub fn intern(&mut self, proxy_user: &str, auth: &Authenticated) -> IdentityId {
        self.identities.intern(proxy_user, auth)
    }

    /// A reload: revoke the identities of proxy users no longer in the
    /// users file (`present` false), close their idle connections, and
    /// stop warming them; a lease or open for one fails from now on
    /// ([`revoked_err`]). Returns how many were revoked.
    pub fn prune_identities(
        &mut self,
        present: impl Fn(&str) -> bool,
        out: &mut Vec<PoolEvent>,
    ) -> usize {
        let revoked = self.identities.prune(present);
        if revoked.is_empty() {
            return 0;
        }
        if self.warm_key.is_some_and(|k| revoked.contains(&k.identity)) {
            self.warm_key = None;
        }
        let idle: Vec<u32> = self.idle.clone();
        for index in idle {
            let id = self.id_of(index);
            let gone = self
                .slots
                .get_mut(id.index, id.generation)
                .is_some_and(|p| revoked.contains(&p.conn.key().identity));
            if gone {
                self.close(id, out);
            }
        }
        revoked.len()
    }

    /// The backend account behind an identity (for KILL and logs).
    pub fn identity(&self, id: IdentityId) -> Option<&BackendLogin> {
        self.identities.get(id)
    }

    // ---- leasing ----

    /// Find or open a connection for `req`, or queue it.
    pub fn lease(&mut self, mut req: LeaseRequest, now: Instant, out: &mut Vec<PoolEvent>) {
        req.key = self.stamp(req.key);
        if self.identities.is_revoked(req.key.identity) {
            out.push(PoolEvent::LeaseFailed {
                session: req.session,
                err_payload: revoked_err(),
                reject: None,
            });
            return;
        }
        // While anyone waits, a new request queues too, even if a
        // connection is idle right now: the waiters are served at the end
        // of this batch of completions (`serve_waiters`), in order, and a
        // connection that came back earlier in the batch is theirs. Taking
        // it here let the sessions that happened to ask at the right
        // moment cycle while queued ones waited: 1,000 sysbench clients on
        // 64 connections had a 1.2 s average and an 11 s p99. It costs
        // nothing: the batch ends before the worker sleeps.
        if !self.waiters.is_empty() {
            self.dirty = true;
            return self.enqueue(req, now);
        }
        // Nobody waits: connections being evicted are nobody's.
        let mut covered = self.evicting;
        if let Err(req) = self.try_lease(req, None, &mut covered, now, out) {
            self.enqueue(req, now);
        }
    }

    fn enqueue(&mut self, req: LeaseRequest, now: Instant) {
        let deadline = now + self.cfg.wait_timeout;
        self.waiters.push(req, now, deadline);
        self.publish();
    }

    /// Tell the other workers what this pool holds and how many wait, and
    /// the per-worker gauges what it holds and how many wait (from `slots`
    /// and `waiters`, so they cannot drift from them).
    fn publish(&self) {
        self.share.publish(
            self.worker,
            self.slots.len(),
            self.waiters.len(),
            self.user_limited.len(),
        );
        let m = self.m();
        m.backend_held.store(self.slots.len() as i64, Relaxed);
        m.pool_waiters.store(self.waiters.len() as i64, Relaxed);
    }

    /// Reserve a unit of the cap for a new connection, unless another
    /// worker whose sessions wait holds fewer connections than this one
    /// and the free units are too few for them (the unit is theirs: see
    /// `pool/share.rs`).
    /// A unit reserved is charged to `identity`'s account too, which must
    /// be under its share (`pool/account_share.rs`).
    fn reserve(&mut self, identity: IdentityId) -> Reserve {
        let max = self.cfg.max_connections;
        if !self.charge_user(identity) {
            return Reserve::UserFull;
        }
        let got = if self.share.open() >= max {
            Reserve::Full
        } else if self
            .share
            .room_is_theirs(self.worker, Some(self.slots.len()), max)
        {
            Reserve::Theirs
        } else if self.share.try_reserve(max) {
            Reserve::Got
        } else {
            // Another worker took the last one meanwhile.
            Reserve::Full
        };
        if !matches!(got, Reserve::Got) {
            self.uncharge_user(identity);
        }
        got
    }

    /// The session no longer wants a connection (it closed while waiting).
    pub fn cancel(&mut self, session: SessionId) {
        self.waiters.remove(session);
        self.withdraw_check(session);
        self.user_limited.remove(&session);
        self.publish();
        for index in self.slots.indexes() {
            if let Some(p) = self.slots.get_index_mut(index) {
                if p.opened_for.as_ref().is_some_and(|r| r.session == session) {
                    p.opened_for = None;
                    p.causal_retry = None;
                }
            }
        }
    }

    /// Lease an idle connection of the key, or open one if the global limit
    /// allows. `Err` gives the request back when it must wait: for a
    /// connection of its key being reset, for a unit of the cap that
    /// another worker's sessions are owed, or, at the cap, for the unit of
    /// a connection closed for it. `covered` counts the closes in flight
    /// that older waiters have not claimed: one of them is this request's
    /// unit, if any is left; otherwise the longest-idle connection is
    /// closed for it ([`Pool::evict_for`]). `waited`: the request's place
    /// in the queue it was taken from, if any (its arrival number and
    /// since when it waits), kept while an idle connection is checked for
    /// it. The request is moved, not copied: a lease from the idle list
    /// (one per statement in transaction pooling) costs no copy of its
    /// boxed setup.
    fn try_lease(
        &mut self,
        req: LeaseRequest,
        waited: Option<(u64, Instant)>,
        covered: &mut usize,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) -> Result<Leasing, LeaseRequest> {
        if self.held {
            // A planned switchover: nothing new starts (`pool/writer.rs`).
            return Err(req);
        }
        let req = match self.lease_idle(req, waited, out) {
            Ok(()) => return Ok(Leasing::Checking),
            Err(req) => req,
        };
        if self.reset_for(&req, now, out) {
            return Err(req);
        }
        // A connection of this key that is being reset will be free within
        // one round trip to the server; waiting for it is far cheaper than a
        // new connection (TCP + login + a server thread), and it keeps a
        // connect storm from growing the pool past the real concurrency.
        // (The request is the oldest of its key: the others wait behind it.)
        let resetting = self
            .slots
            .values()
            .any(|p| p.conn.is_resetting() && !p.relet && p.conn.key() == req.key);
        if resetting {
            return Err(req);
        }
        if req.key.server.is_none() && (self.target.is_none() || self.holding_off(now)) {
            // No writer to open to, or it just refused: wait for the
            // monitor to name one (`pool/writer.rs`).
            return Err(req);
        }
        match self.reserve(req.key.identity) {
            Reserve::UserFull => {
                self.note_user_limited(req.session, req.key.identity);
                self.evict_own_other_key(req.key, out);
                Err(req)
            }
            Reserve::Got => {
                self.open(req.key, Some(req), out);
                Ok(Leasing::Opening)
            }
            // The free unit is another worker's: closing a connection here
            // would only give it one more, outside the sharing's rules.
            Reserve::Theirs => {
                self.deferred = true;
                Err(req)
            }
            Reserve::Full => {
                if *covered > 0 {
                    *covered -= 1;
                } else {
                    self.evict_for(req.key, out);
                }
                Err(req)
            }
        }
    }

    /// At the cap, with no connection of its key to have: close an idle
    /// connection so that the waiter gets its unit when the slot is freed.
    /// Which one (longest idle first among those allowed):
    /// - one of a key nobody waits for;
    /// - one of its own key that cannot serve it (a schema is selected);
    /// - one of a key that holds at least two more connections than the
    ///   waiter's key, or any when the waiter's key holds none: a busy key
    ///   keeps what comes back for its own waiters (no head-of-line
    ///   blocking across keys) but cannot starve another key, and "two
    ///   more" keeps units from moving back and forth (as between workers,
    ///   `pool/share.rs`).
    ///
    /// None when the freed unit would be another worker's: then the
    /// sharing's rules decide what moves.
    fn evict_for(&mut self, key: PoolKey, out: &mut Vec<PoolEvent>) {
        if self.idle.is_empty()
            || self.share.freed_unit_is_theirs(
                self.worker,
                self.slots.len(),
                self.cfg.max_connections,
            )
        {
            return;
        }
        let mut held: std::collections::HashMap<PoolKey, usize> = Default::default();
        for p in self.slots.values() {
            *held.entry(p.conn.key()).or_default() += 1;
        }
        let mine = held.get(&key).copied().unwrap_or(0);
        let key_of = |i: u32| self.slots.get(i).map(|p| p.conn.key());
        let unwanted = |k: PoolKey| !self.waiters.has_key(k);
        let surplus =
            |k: PoolKey| k == key || mine == 0 || held.get(&k).copied().unwrap_or(0) >= mine + 2;
        let pos = self
            .idle
            .iter()
            .position(|&i| key_of(i).is_some_and(unwanted))
            .or_else(|| {
                self.idle
                    .iter()
                    .position(|&i| key_of(i).is_some_and(surplus))
            });
        let Some(pos) = pos else {
            return;
        };
        let index = self.idle.remove(pos);
        self.m().backend_idle.fetch_sub(1, Relaxed);
        let id = self.id_of(index);
        if let Some(p) = self.slots.get_index_mut(index) {
            p.evicted = true;
            self.evicting += 1;
        }
        self.close(id, out);
    }

    /// The idle connection to lease: LIFO, preferring one whose schema is
    /// already the wanted one. A client that gave no schema needs a
    /// connection with none selected, since nothing unselects a schema.
    /// Transaction pooling: a connection that carries the session's
    /// settings is preferred (LIFO within the fingerprint), else any whose
    /// settings can be turned into the session's by one `SET` of the
    /// differences (`Settings::diff_from`).
    fn pick_idle(&self, req: &LeaseRequest) -> Option<usize> {
        let wanted = req.setup.as_ref().map_or(0, |s| s.settings);
        let alt = req.setup.as_ref().map_or(0, |s| s.alt);
        let usable = |p: &Pooled| {
            p.conn.key() == req.key
                && (req.schema.is_some() || p.conn.schema().is_none())
                && settable(req, p)
        };
        let find = |also: &dyn Fn(&Pooled) -> bool| {
            self.idle
                .iter()
                .rposition(|&i| self.slots.get(i).is_some_and(|p| usable(p) && also(p)))
        };
        let same_schema = |p: &Pooled| p.conn.schema() == req.schema.as_deref();
        let same_settings =
            |p: &Pooled| p.conn.settings() == wanted || (alt != 0 && p.conn.settings() == alt);
        find(&|p| same_schema(p) && same_settings(p))
            .or_else(|| find(&same_settings))
            .or_else(|| find(&same_schema))
            .or_else(|| find(&|_| true))
    }

    /// Transaction pooling: an idle connection of the key whose settings
    /// cannot be set back (see `tx_settings`) is reset
    /// (COM_RESET_CONNECTION) so that this request can have it; true if one
    /// was found.
    fn reset_for(&mut self, req: &LeaseRequest, now: Instant, out: &mut Vec<PoolEvent>) -> bool {
        if req
            .setup
            .as_ref()
            .is_none_or(|s| s.settings == ANY_SETTINGS)
        {
            return false;
        }
        let pos = self.idle.iter().rposition(|&i| {
            self.slots.get(i).is_some_and(|p| {
                p.conn.key() == req.key
                    && (req.schema.is_some() || p.conn.schema().is_none())
                    && !settable(req, p)
            })
        });
        let Some(pos) = pos else {
            return false;
        };
        let index = self.idle.remove(pos);
        self.m().backend_idle.fetch_sub(1, Relaxed);
        let id = self.id_of(index);
        let mut bo = Vec::new();
        if let Some(p) = self.slots.get_index_mut(index) {
            p.conn.reset_idle(now, &mut bo);
        }
        self.m().backend_resets_total.fetch_add(1, Relaxed);
        self.apply(id, bo, now, out);
        true
    }

    /// Lease connection `id` to `req`'s session (`place`: the request's in
    /// the queue, see [`Pooled::place`]). The request moves into the
    /// connection's slot until its setup is done, so that a lease from
    /// the idle list (one per statement in transaction pooling) costs no
    /// copy of its boxed setup, and one whose setup dies with the server
    /// can be served again.
    fn give(
        &mut self,
        id: BackendId,
        req: LeaseRequest,
        place: Option<(u64, Instant)>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let metrics = Arc::clone(&self.metrics);
        let wait = match self.causal_read(id, &req) {
            ReplicaRead::Run => None,
            ReplicaRead::Wait { sql, pos } => Some((sql, pos)),
            ReplicaRead::Writer => return self.causal_to_writer(id, req, now, out),
        };
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.leased_to = Some(req.session);
        p.last_session = Some(req.session);
        p.set_busy(true, metrics.worker(self.worker));
        let timeout = self.cfg.causal_read_timeout;
        let wait = wait.map(|(sql, pos)| {
            p.causal_retry = Some(Box::new(pos));
            (sql, timeout)
        });
        if wait.is_none() {
            p.causal_retry = None;
        }
        let mut bo = Vec::new();
        let work = p.conn.lease(
            req.schema.as_deref(),
            req.setup.as_deref(),
            wait,
            now,
            &mut bo,
        );
        // Dropped at `SchemaSelected`, which may be among `bo` already.
        p.opened_for = Some(req);
        p.place = place;
        let m = self.m();
        for (done, kind) in [
            (work.init_db, InternalQuery::InitDb),
            (work.settings, InternalQuery::Settings),
            (work.last_insert_id, InternalQuery::LastInsertIdSet),
        ] {
            if done {
                m.internal_queries_total[kind as usize].fetch_add(1, Relaxed);
            }
        }
        self.apply(id, bo, now, out);
    }

    fn open(&mut self, key: PoolKey, request: Option<LeaseRequest>, out: &mut Vec<PoolEvent>) {
        if self.identities.is_revoked(key.identity) {
            // A waiter queued before the reload: its units (of the cap and
            // of its account's share) go back, as for a failed open.
            self.share.unreserve();
            self.uncharge_user(key.identity);
            if let Some(req) = request {
                out.push(PoolEvent::LeaseFailed {
                    session: req.session,
                    err_payload: revoked_err(),
                    reject: None,
                });
            }
            return;
        }
        self.m().backend_connects_total.fetch_add(1, Relaxed);
        out.push(PoolEvent::Open { key, request });
    }

    /// The driver made the socket for an [`PoolEvent::Open`].
    pub fn insert_opening(
        &mut self,
        key: PoolKey,
        request: Option<LeaseRequest>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) -> BackendId {
        let mut bo = Vec::new();
        let mut conn = BackendConn::open(key, now, &mut bo);
        conn.set_max_prepared(self.max_prepared);
        // Charged when its unit was reserved (`reserve`, `refill`).
        let user = self.usage(key.identity);
        let server = key
            .server
            .map(u16::from)
            .unwrap_or_else(|| self.target.map_or(0, |t| t.server));
        self.metrics.servers().count_pooled(usize::from(server), 1);
        let (index, generation) = self.slots.insert(Pooled {
            conn,
            leased_to: None,
            opened_for: request,
            place: None,
            busy: false,
            relet: false,
            asking: None,
            prepared: 0,
            last_session: None,
            watched: false,
            server_closed: false,
            given: false,
            evicted: false,
            user,
            server,
            causal_retry: None,
        });
        self.publish();
        let id = BackendId { index, generation };
        self.apply(id, bo, now, out);
        id
    }

    /// The driver could not even make a socket.
    pub fn open_failed(
        &mut self,
        key: PoolKey,
        request: Option<LeaseRequest>,
        cause: &str,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        self.share.unreserve();
        self.uncharge_user(key.identity);
        self.connect_failed(request, cause, now, out);
    }

    fn connect_failed(
        &mut self,
        request: Option<LeaseRequest>,
        cause: &str,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        self.m()
            .backend_connect_failures_total
            .fetch_add(1, Relaxed);
        let request = match request {
            Some(req) if req.key.server.is_some() => {
                return self.replica_open_failed(req, cause, now)
            }
            other => other,
        };
        if self.retry_at.is_none_or(|t| now >= t) && self.log_limiter.allow(now) {
            let then = if self.cfg.wait_for_writer {
                "clients wait for the monitor to name a writer"
            } else {
                "clients get an error until it is reachable"
            };
            tracing::warn!(
                worker = self.worker,
                backend = %self.target_addr(),
                "backend connection failed: {cause}; {then}, retrying every {BACKEND_RETRY:?}"
            );
        }
        self.retry_at = Some(now + BACKEND_RETRY);
        let request = match request {
            Some(req) if self.wait_for_writer_after_failure(now) => {
                self.dirty = true;
                return self.enqueue(req, now);
            }
            other => other,
        };
        if let Some(req) = request {
            out.push(PoolEvent::LeaseFailed {
                session: req.session,
                err_payload: unavailable(self.target_addr(), cause),
                reject: Some(RejectReason::BackendUnavailable),
            });
        }
    }

    /// A passthrough login was refused by the server (wrong password, no
    /// such account, no access): the server's ERR goes to the session the
    /// connection was opened for, and nothing else changes; refills stop
    /// warming that identity.
    fn login_refused(
        &mut self,
        key: PoolKey,
        request: Option<LeaseRequest>,
        err_payload: Vec<u8>,
        cause: &str,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        self.m()
            .backend_connect_failures_total
            .fetch_add(1, Relaxed);
        if self.warm_key == Some(key) {
            self.warm_key = None;
        }
        if self.log_limiter.allow(now) {
            let user = self.identity(key.identity).map_or("?", |l| &l.user);
            tracing::info!(
                worker = self.worker,
                backend_user = %user,
                "backend login refused for this user: {cause}"
            );
        }
        if let Some(req) = request {
            out.push(PoolEvent::LeaseFailed {
                session: req.session,
                err_payload,
                reject: Some(RejectReason::BackendAuth),
            });
        }
    }
}

mod backend_events;

mod causal;

mod give_back;

mod idle_check;

mod release;

mod upkeep;

mod share;

mod waiters;

mod writer;

mod account_share;

#[cfg(test)]
mod tests;

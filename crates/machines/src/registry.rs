//! Proxy connection ids, and the one piece of cross-worker state that
//! `KILL` needs: which user owns a proxy connection id and which backend
//! thread serves it now.
//!
//! Workers share nothing else, and a session never leaves its worker, but a
//! `KILL <id>` arrives on whatever worker the killer's connection landed on.
//! The registry is sharded `Mutex<HashMap>`s touched once when a connection
//! is accepted and once when it is freed; a lease stores the backend thread
//! id in an atomic. The relay path takes no lock: only a KILL looks up.
//!
//! This file holds the ids, the entries and their fences; what a KILL or
//! SHOW PROCESSLIST is rewritten to is in `registry/interception.rs`.
//!
//! ## The id space
//!
//! The greeting's connection id is what clients use to kill (`mariadb`'s
//! Ctrl-C sends `KILL QUERY <id>`, PyMySQL's `thread_id()` returns it), so
//! it must never be a number the backend could use for one of its own
//! threads. MariaDB and MySQL number threads from 1 upwards; ringgate's ids
//! are `2^31 + seq × workers + worker`, in `[2^31, 2^32)`: disjoint from
//! backend thread ids until a backend has had two billion connections since
//! its start, and still 32-bit, as the greeting and COM_PROCESS_KILL
//! require. The worker index is the residue (the tests place clients by
//! it); `seq` is one sequence all workers share (an atomic add per accepted
//! connection), so ids grow in the order connections arrive, as a server's
//! thread ids do (mysql-connector's own test_reconnect expects a
//! reconnect's id to be higher; per-worker sequences gave a lower one
//! whenever the reconnect landed on the other worker). After
//! `2^31 / workers` connections the sequence wraps; an id still in use is
//! skipped.
//!
//! ## KILL CONNECTION closes the victim's client first
//!
//! MariaDB shuts the victim's socket down inside the KILL, before the
//! killer's OK is sent, and clients rely on that order (mysql2's
//! `test-pool-disconnect` checks that the pool has dropped the connection
//! when the KILL returns). Through ringgate the victim's end would travel
//! backend → victim's worker → client while the OK travels backend →
//! killer's worker → client: either may arrive first. So when the server
//! answers OK to a mapped KILL CONNECTION of a session of the killer's own
//! proxy user, the killer's worker shuts the victim's client socket down
//! itself before it relays that OK. (Not earlier: the victim's worker
//! would then close the backend connection, and a KILL that reached the
//! server after that would fail with 1094.) The one
//! cross-worker syscall is safe because it happens under the shard lock
//! with the entry present, and a session's socket is closed only after its
//! registration is dropped (which takes that lock). The entry is marked
//! killed, so the victim's backend connection is discarded, never pooled.
//!
//! ## A KILL never reaches the next session on a connection
//!
//! A mapped KILL names a backend thread the victim holds *now*; by the time
//! the server runs it, the victim may have given the connection back
//! (transaction pooling does that after every transaction) and another
//! session's statement may run on it. So the killer marks the entry "a KILL
//! of its thread is in flight" in the same atomic that holds the thread
//! ([`ConnEntry::fence`]), and holds a [`KillFence`] until the server has
//! answered the KILL. A session gives its connection back only through
//! [`ConnEntry::try_clear_backend`], which refuses while a KILL is in
//! flight: a parked session waits (it keeps the connection, at most until
//! the killer's answer), and a session that ends closes the connection
//! instead of pooling it. Either the killer sees the thread cleared (and
//! kills nothing on the server) or the victim sees the mark: one atomic
//! word, no lock on the relay path.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use wire::constants::{COM_QUERY, SERVER_STATUS_ANSI_QUOTES, SERVER_STATUS_NO_BACKSLASH_ESCAPES};
use wire::kill::{self, KillCommand, KillStatement, ER_KILL_DENIED_ERROR};
use wire::lexer::Server;
use wire::packet::{split_packet, write_packet};

/// The lowest proxy connection id.
pub const PROXY_ID_BASE: u32 = 1 << 31;

const SHARDS: usize = 16;

/// Whether `id` is in the proxy's connection id range.
pub fn is_proxy_id(id: u64) -> bool {
    (u64::from(PROXY_ID_BASE)..=u64::from(u32::MAX)).contains(&id)
}

/// One worker's connection ids, numbered by the sequence all workers share
/// (the registry's).
#[derive(Clone, Debug)]
pub struct ConnectionIds {
    worker: u32,
    workers: u32,
    /// Sequence numbers per wrap: every id stays below 2^32.
    span: u32,
}

impl ConnectionIds {
    pub fn new(worker: usize, workers: usize) -> ConnectionIds {
        let workers = u32::try_from(workers.max(1)).unwrap_or(u32::MAX);
        let worker = u32::try_from(worker).unwrap_or(0) % workers;
        ConnectionIds {
            worker,
            workers,
            span: ((1u64 << 31) / u64::from(workers)) as u32,
        }
    }

    /// This worker's id for sequence number `seq`.
    pub fn id_for(&self, seq: u32) -> u32 {
        PROXY_ID_BASE + (seq % self.span.max(1)) * self.workers + self.worker
    }
}

/// How a KILL reaches a client's socket from another thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientSock {
    /// A plain fd: shutdown(2) on it under the shard lock.
    Fd(RawFd),
    /// A direct descriptor, which only its worker's ring can name: the
    /// killer's worker posts `wake` to that ring with IORING_OP_MSG_RING,
    /// and the owner shuts the slot down (`worker/direct.rs`).
    Ring(RingWake),
}

impl From<RawFd> for ClientSock {
    fn from(fd: RawFd) -> ClientSock {
        ClientSock::Fd(fd)
    }
}

/// A message for the worker ring that owns a killed client: `user_data`
/// names the session by slab index and generation, so a session that ended
/// meanwhile (and whose slot was reused) is not touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingWake {
    pub ring_fd: RawFd,
    pub user_data: u64,
}

/// What [`Registry::kill_client`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Killed {
    /// No such session (any more).
    Gone,
    /// Marked killed and its socket shut down.
    Done,
    /// Marked killed; its worker must be sent this wake-up to shut it down.
    Wake(RingWake),
}

/// What the registry knows of one client connection.
#[derive(Debug)]
pub struct ConnEntry {
    id: u32,
    /// The proxy user, once logged in.
    user: Mutex<Option<Arc<str>>>,
    /// The backend thread serving the session now (low 32 bits; 0 = none)
    /// and the mapped KILLs of it still on their way to the server (high
    /// 32 bits; see the module docs).
    lease: AtomicU64,
    /// The backend thread the session was leased last (kept while it holds
    /// none: transaction pooling), and when ([`LEASE_SEQ`]): its
    /// `SELECT CONNECTION_ID()` named that thread, so a raw KILL of it means
    /// this session while no later session has used the thread.
    last_thread: AtomicU64,
    /// The client socket (open while the entry is registered).
    sock: ClientSock,
    /// A KILL CONNECTION shut the client down: its backend connection is
    /// being killed by the server and must not go back to the pool.
    killed: AtomicBool,
}

impl ConnEntry {
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The client logged in as proxy user `user` (it may still wait for a
    /// backend connection: a KILL of it by the same user then closes it).
    pub fn set_user(&self, user: &str) {
        let mut u = lock(&self.user);
        if u.as_deref() != Some(user) {
            *u = Some(Arc::from(user));
        }
    }

    /// The session was leased a backend connection: record who it is and
    /// which backend thread now runs its queries.
    pub fn set_leased(&self, user: &str, backend_thread: u32) {
        self.set_user(user);
        let seq = LEASE_SEQ.fetch_add(1, Ordering::Relaxed) + 1;
        self.last_thread
            .store(seq << 32 | u64::from(backend_thread), Ordering::Release);
        let _ = self
            .lease
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some((v & !THREAD_MASK) | u64::from(backend_thread))
            });
    }

    /// The backend connection went back to the pool (or died): a KILL must
    /// no longer reach that thread, which may soon serve someone else.
    /// True when a mapped KILL of it was still in flight: the connection
    /// must not serve another session (the caller closes it).
    pub fn clear_backend(&self) -> bool {
        self.lease.fetch_and(!THREAD_MASK, Ordering::AcqRel) >> 32 != 0
    }

    /// Give the backend connection back only if no mapped KILL of its
    /// thread is in flight: false (and nothing changes) while one is, and
    /// the session keeps the connection until the killer has its answer.
    pub fn try_clear_backend(&self) -> bool {
        self.lease
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v >> 32 == 0).then_some(0)
            })
            .is_ok()
    }

    /// A KILL is about to be sent to the thread serving this session: the
    /// thread, and the fence that keeps the session from giving that
    /// connection back until the fence is dropped. None without a thread.
    fn fence(self: &Arc<Self>) -> Option<(u32, KillFence)> {
        let prev = self
            .lease
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v & THREAD_MASK != 0).then_some(v + ONE_KILL)
            })
            .ok()?;
        Some(((prev & THREAD_MASK) as u32, KillFence(Arc::clone(self))))
    }

    /// [`ConnEntry::fence`] only while the session is served by `thread`
    /// (a KILL of that raw backend thread id).
    fn fence_thread(self: &Arc<Self>, thread: u32) -> Option<KillFence> {
        self.lease
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                ((v & THREAD_MASK) as u32 == thread).then_some(v + ONE_KILL)
            })
            .ok()?;
        Some(KillFence(Arc::clone(self)))
    }

    /// The backend thread the session was leased last (0: none yet).
    pub fn last_thread(&self) -> u32 {
        (self.last_thread.load(Ordering::Acquire) & THREAD_MASK) as u32
    }

    fn thread(&self) -> Option<u32> {
        match (self.lease.load(Ordering::Acquire) & THREAD_MASK) as u32 {
            0 => None,
            t => Some(t),
        }
    }

    /// A KILL CONNECTION closed this session.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    fn snapshot(&self) -> Target {
        Target {
            user: lock(&self.user).clone(),
            backend_thread: self.thread(),
        }
    }
}

const THREAD_MASK: u64 = 0xFFFF_FFFF;

/// Orders leases process-wide (the high half of `ConnEntry::last_thread`).
static LEASE_SEQ: AtomicU64 = AtomicU64::new(0);
const ONE_KILL: u64 = 1 << 32;

/// A mapped KILL of a session's backend thread is on its way to the server:
/// while this lives, that session does not give the connection to anyone
/// else (see the module docs). The killer drops it when the server answers.
pub struct KillFence(Arc<ConnEntry>);

impl Drop for KillFence {
    fn drop(&mut self) {
        self.0.lease.fetch_sub(ONE_KILL, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for KillFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KillFence({})", self.0.id)
    }
}

impl PartialEq for KillFence {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for KillFence {}

/// A registered connection as a KILL sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub user: Option<Arc<str>>,
    pub backend_thread: Option<u32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The maps hold plain data: a panic elsewhere cannot leave them torn.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every live client connection of the process, by proxy connection id.
#[derive(Debug)]
pub struct Registry {
    shards: [Mutex<HashMap<u32, Arc<ConnEntry>>>; SHARDS],
    /// The backend is MariaDB (its greeting says so): its
    /// `information_schema.PROCESSLIST` has the `PROGRESS` column that
    /// `SHOW PROCESSLIST` shows.
    mariadb: AtomicBool,
    /// The backend's flavour and version (`Server`, packed by
    /// `pack_server`): how transaction pooling's lexer reads the
    /// version-gated comments of a session's statements.
    server: AtomicU64,
    /// The quoting flags (NO_BACKSLASH_ESCAPES, MariaDB's ANSI_QUOTES) of
    /// the last backend login's OK: the global sql_mode a session starts
    /// with, before its own first answer shows its status.
    login_quoting: AtomicU32,
    /// Each proxy user is itself on the backend, so the server checks who
    /// may kill what (false: one shared backend user; the proxy checks).
    server_checks_owner: AtomicBool,
    /// The connection id sequence every worker takes from.
    seq: AtomicU32,
    /// shutdown(2) of a client socket held as a plain fd: the driver's,
    /// because a machine makes no system call.
    shutdown_fd: ShutdownFd,
}

/// Shuts a socket down both ways (the driver's `shutdown(fd, SHUT_RDWR)`).
pub type ShutdownFd = fn(i32);

#[cfg(test)]
impl Default for Registry {
    fn default() -> Self {
        Registry::new(|_| {})
    }
}

impl Registry {
    pub fn new(shutdown_fd: ShutdownFd) -> Self {
        Registry {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            mariadb: AtomicBool::new(true),
            server: AtomicU64::new(pack_server(Server::Unknown)),
            login_quoting: AtomicU32::new(0),
            server_checks_owner: AtomicBool::new(false),
            seq: AtomicU32::new(0),
            shutdown_fd,
        }
    }
}

/// A [`Server`] in one atomic word: the flavour above bit 32, the version
/// below.
fn pack_server(server: Server) -> u64 {
    match server {
        Server::MariaDb(v) => 1 << 32 | u64::from(v),
        Server::MySql(v) => 2 << 32 | u64::from(v),
        Server::Unknown => 0,
    }
}

impl Registry {
    /// What the backend's greeting said it is (the workers learn it).
    pub fn set_backend_version(&self, server_version: &str) {
        let mariadb = server_version.contains("MariaDB");
        self.mariadb.store(mariadb, Ordering::Relaxed);
        let server = pack_server(Server::from_greeting(server_version));
        self.server.store(server, Ordering::Relaxed);
    }

    /// A backend login's OK status: keep its quoting flags.
    pub fn set_backend_login_status(&self, status: u16) {
        let quoting = status & (SERVER_STATUS_NO_BACKSLASH_ESCAPES | SERVER_STATUS_ANSI_QUOTES);
        self.login_quoting
            .store(u32::from(quoting), Ordering::Relaxed);
    }

    /// The quoting status flags a fresh backend session starts with.
    pub fn backend_login_quoting(&self) -> u16 {
        u16::try_from(self.login_quoting.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// The backend server as its last greeting described it (`Unknown`
    /// until one arrived).
    pub fn backend_server(&self) -> Server {
        match self.server.load(Ordering::Relaxed) {
            v if v >> 32 == 1 => Server::MariaDb(v as u32),
            v if v >> 32 == 2 => Server::MySql(v as u32),
            _ => Server::Unknown,
        }
    }

    fn backend_is_mariadb(&self) -> bool {
        self.mariadb.load(Ordering::Relaxed)
    }

    /// Per-user backend identity: the server applies its own privilege
    /// checks to a KILL of another user's session (set once at start-up).
    pub fn set_server_checks_owner(&self, yes: bool) {
        self.server_checks_owner.store(yes, Ordering::Relaxed);
    }

    fn server_checks_owner(&self) -> bool {
        self.server_checks_owner.load(Ordering::Relaxed)
    }

    /// The sessions of proxy user `user` that hold a backend connection
    /// now: (proxy id, backend thread). A scan, for SHOW PROCESSLIST.
    pub fn sessions_of(&self, user: &str) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        for s in &self.shards {
            for e in lock(s).values() {
                let t = e.snapshot();
                if let (Some(thread), Some(u)) = (t.backend_thread, t.user.as_deref()) {
                    if u == user {
                        out.push((e.id, thread));
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }

    fn shard(&self, id: u32) -> &Mutex<HashMap<u32, Arc<ConnEntry>>> {
        &self.shards[id as usize % SHARDS]
    }

    /// Register `id` for the client socket `fd`; `None` if the id is still
    /// in use (the caller takes the next). The registration removes itself
    /// when dropped, which must happen before `fd` is closed.
    pub fn register(
        self: &Arc<Self>,
        id: u32,
        sock: impl Into<ClientSock>,
    ) -> Option<Registration> {
        let mut map = lock(self.shard(id));
        if map.contains_key(&id) {
            return None;
        }
        let entry = Arc::new(ConnEntry {
            id,
            user: Mutex::new(None),
            lease: AtomicU64::new(0),
            last_thread: AtomicU64::new(0),
            sock: sock.into(),
            killed: AtomicBool::new(false),
        });
        map.insert(id, Arc::clone(&entry));
        Some(Registration {
            registry: Arc::clone(self),
            entry,
        })
    }

    /// Take the next free id of `ids`' worker and register it.
    pub fn register_next(
        self: &Arc<Self>,
        ids: &ConnectionIds,
        sock: impl Into<ClientSock>,
    ) -> Registration {
        let sock = sock.into();
        loop {
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = self.register(ids.id_for(seq), sock) {
                return r;
            }
        }
    }

    /// KILL CONNECTION of session `id`: mark it killed and shut its client
    /// socket down now (see the module docs); false if it is gone.
    pub fn close_client(&self, id: u32) -> bool {
        self.kill_client(id) != Killed::Gone
    }

    /// [`Registry::close_client`], saying what is left to do for a client
    /// held as a direct descriptor.
    pub fn kill_client(&self, id: u32) -> Killed {
        let map = lock(self.shard(id));
        let Some(e) = map.get(&id) else {
            return Killed::Gone;
        };
        e.killed.store(true, Ordering::Release);
        match e.sock {
            ClientSock::Fd(fd) => {
                // `fd` is still open and still this session's socket: it is
                // closed only after the entry is removed, and removal takes
                // the shard lock held here.
                (self.shutdown_fd)(fd);
                Killed::Done
            }
            ClientSock::Ring(wake) => Killed::Wake(wake),
        }
    }

    /// How to wake the worker that holds session `id`'s client as a
    /// direct descriptor (None: gone, or a plain fd).
    pub fn ring_wake(&self, id: u32) -> Option<RingWake> {
        match lock(self.shard(id)).get(&id)?.sock {
            ClientSock::Ring(wake) => Some(wake),
            ClientSock::Fd(_) => None,
        }
    }

    pub fn lookup(&self, id: u32) -> Option<Target> {
        lock(self.shard(id)).get(&id).map(|e| e.snapshot())
    }

    /// [`Registry::lookup`] for a KILL about to be sent: the target's
    /// backend thread comes with a [`KillFence`] on it.
    fn lookup_fenced(&self, id: u32) -> Option<(Target, Option<KillFence>)> {
        let entry = lock(self.shard(id)).get(&id).cloned()?;
        let user = lock(&entry.user).clone();
        let (backend_thread, fence) = match entry.fence() {
            Some((t, f)) => (Some(t), Some(f)),
            None => (None, None),
        };
        Some((
            Target {
                user,
                backend_thread,
            },
            fence,
        ))
    }

    /// The proxy connection whose session the backend thread `thread`
    /// serves now. A scan: only a KILL of a raw backend thread id asks.
    pub fn by_backend_thread(&self, thread: u32) -> Option<(u32, Target)> {
        if thread == 0 {
            return None;
        }
        self.shards.iter().find_map(|s| {
            lock(s)
                .values()
                .find(|e| e.thread() == Some(thread))
                .map(|e| (e.id, e.snapshot()))
        })
    }

    /// For a KILL of the raw backend thread id `thread` from session
    /// `except`: the session that `thread` serves now, with a
    /// [`KillFence`] on it, so it cannot give the connection to another
    /// session before the server has run the KILL. A scan, like
    /// [`Registry::by_backend_thread`].
    fn fence_by_thread(&self, thread: u32, except: u32) -> Option<(u32, Target, KillFence)> {
        if thread == 0 {
            return None;
        }
        self.shards.iter().find_map(|s| {
            let entry = lock(s)
                .values()
                .find(|e| e.id != except && e.thread() == Some(thread))
                .cloned()?;
            let fence = entry.fence_thread(thread)?;
            Some((entry.id, entry.snapshot(), fence))
        })
    }

    /// Whose backend thread `thread` is, for a KILL of that raw id from
    /// session `except`: the session leased it last (serving it now, or
    /// holding no connection since: transaction pooling), other than the
    /// killer itself (which may have just been leased that very thread
    /// for its KILL). `.2`: it serves that session now. A scan, like
    /// [`Registry::by_backend_thread`].
    pub fn owner_of_thread(&self, thread: u32, except: u32) -> Option<(u32, Target, bool)> {
        if thread == 0 {
            return None;
        }
        let mut best: Option<(u64, u32, Target, bool)> = None;
        for s in &self.shards {
            for e in lock(s).values() {
                let last = e.last_thread.load(Ordering::Acquire);
                if e.id == except || (last & THREAD_MASK) as u32 != thread {
                    continue;
                }
                let seq = last >> 32;
                if best.as_ref().is_none_or(|b| seq > b.0) {
                    let t = e.snapshot();
                    let now = t.backend_thread == Some(thread);
                    best = Some((seq, e.id, t, now));
                }
            }
        }
        best.map(|(_, id, t, now)| (id, t, now))
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A registered connection; dropping it unregisters the id.
#[derive(Debug)]
pub struct Registration {
    registry: Arc<Registry>,
    entry: Arc<ConnEntry>,
}

impl Registration {
    pub fn entry(&self) -> &ConnEntry {
        &self.entry
    }

    /// The entry, shared (a session keeps it to check for KILLs in flight
    /// before it gives a connection back).
    pub fn shared_entry(&self) -> Arc<ConnEntry> {
        Arc::clone(&self.entry)
    }

    pub fn id(&self) -> u32 {
        self.entry.id
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut map = lock(self.registry.shard(self.entry.id));
        if map
            .get(&self.entry.id)
            .is_some_and(|e| Arc::ptr_eq(e, &self.entry))
        {
            map.remove(&self.entry.id);
        }
    }
}

mod interception;
pub use interception::{
    decide_kill, intercept, processlist_query, KillDecision, ProcessList, Rewrite,
};

#[cfg(test)]
mod tests;

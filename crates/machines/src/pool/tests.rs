//! The pool without a backend or a socket: the harness plays the driver,
//! keeping each connection's "server" (whether it is still there, for the
//! check at lease) and read buffer by its id, as the driver keeps its
//! backend I/O; bytes from the server are put into that buffer directly.

use super::*;
use crate::backend::tx_replay::ReplayOutcome;
use crate::test_packets::errno;
use crate::test_packets::{framed, greeting};
use metrics::BufferMode;
use std::collections::HashMap;
use wire::auth::Credential;
use wire::constants::*;
use wire::reply::ok_payload;
use wire::users::Authenticated;

/// What the driver keeps of one backend connection, played without a
/// socket: whether its server is still there, and its read buffer.
struct PlayedIo {
    alive: bool,
    buf: Vec<u8>,
}

const BUF_CAPACITY: usize = 4096;

struct Harness {
    pool: Pool,
    open: Arc<BackendShare>,
    /// Each connection's server and buffer, by its id.
    conns: HashMap<BackendId, PlayedIo>,
    now: Instant,
    /// The "server" refuses logins that name this user, with this ERR.
    refuse: Option<(&'static str, Vec<u8>)>,
    /// The "server" resets the connection of every COM_INIT_DB it is sent
    /// (a lease's setup) instead of answering it.
    reset_setups: bool,
    /// Connections whose next read is that reset.
    resetting: Vec<BackendId>,
}

fn sid(i: u32) -> SessionId {
    SessionId {
        index: i,
        generation: 0,
    }
}

fn req(i: u32, key: PoolKey) -> LeaseRequest {
    LeaseRequest {
        session: sid(i),
        key,
        schema: None,
        setup: None,
    }
}

impl Harness {
    fn new(max: usize, pool_size: usize) -> Harness {
        let shared = IdentityMode::Shared(BackendLogin {
            user: "bench".into(),
            credential: Credential::Plaintext(b"pw".to_vec()),
        });
        Harness::with_identity(shared, max, pool_size)
    }

    fn with_identity(identity: IdentityMode, max: usize, pool_size: usize) -> Harness {
        Harness::with_tls(identity, max, pool_size, TlsWish::Off)
    }

    fn with_tls(identity: IdentityMode, max: usize, pool_size: usize, tls: TlsWish) -> Harness {
        let metrics = Metrics::new(1, BufferMode::Heap);
        let open = Arc::new(BackendShare::new(1));
        Harness::worker(identity, max, pool_size, tls, open, metrics, 0)
    }

    /// Worker `worker`'s pool, sharing the cap (`open`) and the metrics
    /// with other harnesses as the workers of one process do.
    fn worker(
        identity: IdentityMode,
        max: usize,
        pool_size: usize,
        tls: TlsWish,
        open: Arc<BackendShare>,
        metrics: Arc<Metrics>,
        worker: usize,
    ) -> Harness {
        let pool = Pool::new(
            PoolConfig {
                backend: "127.0.0.1:1".parse().unwrap(),
                backend_index: 0,
                wait_for_writer: false,
                identity,
                pool_size,
                max_connections: max,
                max_per_user: 0,
                wait_timeout: Duration::from_secs(5),
                writer_wait_timeout: Duration::from_secs(5),
                idle_timeout: Duration::from_secs(60),
                connect_timeout: Duration::from_secs(2),
                causal_read_timeout: Duration::from_secs(1),
                full_auth: Default::default(),
                tls,
            },
            Arc::clone(&open),
            Arc::clone(&metrics),
            worker,
        );
        Harness {
            pool,
            open,
            conns: HashMap::new(),
            now: Instant::now(),
            refuse: None,
            reset_setups: false,
            resetting: Vec::new(),
        }
    }

    /// Play the driver for one batch of events: open sockets, perform
    /// reads/writes by feeding canned server replies, collect the rest.
    fn drive(&mut self, mut events: Vec<PoolEvent>) -> Vec<PoolEvent> {
        let mut seen = Vec::new();
        while !events.is_empty() {
            let mut next = Vec::new();
            for e in events {
                match e {
                    PoolEvent::Open { key, request } => {
                        let id = self.pool.insert_opening(key, request, self.now, &mut next);
                        let conn = PlayedIo {
                            alive: true,
                            buf: Vec::new(),
                        };
                        self.conns.insert(id, conn);
                    }
                    PoolEvent::Io(id, BackendOp::Connect) => {
                        self.pool
                            .on_connect(id, Completion::Done(0), self.now, &mut next)
                    }
                    PoolEvent::Io(id, BackendOp::Clear) => {
                        if let Some(c) = self.conns.get_mut(&id) {
                            c.buf.clear();
                        }
                    }
                    PoolEvent::Io(id, BackendOp::Send(bytes)) => {
                        // The server reads it and answers.
                        let refused = self.refuse.as_ref().filter(|(user, _)| {
                            bytes
                                .windows(user.len() + 1)
                                .any(|w| w[..user.len()] == *user.as_bytes() && w[user.len()] == 0)
                        });
                        SENT.with(|s| s.borrow_mut().push(bytes.clone()));
                        let answer = if let Some(answer) = causal::wait_answer(&bytes) {
                            answer
                        } else if let (true, Some((_, err))) = (bytes.len() > 40, refused) {
                            framed(2, err)
                        } else if bytes.len() > 40 {
                            // The HandshakeResponse.
                            framed(2, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0))
                        } else {
                            reset_replies()
                        };
                        if self.reset_setups && bytes.get(4) == Some(&COM_INIT_DB) {
                            self.resetting.push(id);
                        }
                        self.pool
                            .on_write(id, Completion::Done(bytes.len()), self.now, &mut next);
                        self.pending_reply(id, answer);
                    }
                    PoolEvent::Io(id, BackendOp::Read) if self.resetting.contains(&id) => {
                        self.resetting.retain(|r| *r != id);
                        self.take_reply(id);
                        let reset = Completion::Failed(errno::ECONNRESET);
                        self.pool
                            .on_read(id, reset, &[], BUF_CAPACITY, self.now, &mut next);
                    }
                    PoolEvent::Io(id, BackendOp::Read) => {
                        let reply = self.take_reply(id).unwrap_or_else(greeting);
                        let n = Completion::Done(reply.len());
                        if let Some(c) = self.conns.get_mut(&id) {
                            c.buf.extend_from_slice(&reply);
                            let (buf, now) = (&c.buf, self.now);
                            self.pool.on_read(id, n, buf, BUF_CAPACITY, now, &mut next);
                        }
                    }
                    PoolEvent::CheckIdle(id) => {
                        let alive = self.conns.get(&id).is_some_and(|c| c.alive);
                        self.pool.idle_checked(id, alive, self.now, &mut next);
                    }
                    PoolEvent::Io(id, BackendOp::Close) => {
                        self.pool.remove(id);
                        self.conns.remove(&id);
                    }
                    other => seen.push(other),
                }
            }
            events = next;
        }
        seen
    }

    /// Every server side of the connections so far goes away.
    fn servers_go_away(&mut self) {
        for c in self.conns.values_mut() {
            c.alive = false;
        }
    }

    fn pending_reply(&mut self, id: BackendId, reply: Vec<u8>) {
        REPLIES.with(|r| r.borrow_mut().push((id, reply)));
    }

    fn take_reply(&mut self, id: BackendId) -> Option<Vec<u8>> {
        REPLIES.with(|r| {
            let mut r = r.borrow_mut();
            let pos = r.iter().position(|(i, _)| *i == id)?;
            Some(r.remove(pos).1)
        })
    }

    fn lease(&mut self, r: LeaseRequest) -> Vec<PoolEvent> {
        let mut out = Vec::new();
        self.pool.lease(r, self.now, &mut out);
        self.drive(out)
    }

    fn release(&mut self, id: BackendId, clean: bool) -> Vec<PoolEvent> {
        let mut out = Vec::new();
        self.pool.release(id, clean, self.now, &mut out);
        self.drive(out)
    }

    fn serve(&mut self) -> Vec<PoolEvent> {
        let mut out = Vec::new();
        self.pool.serve_waiters(self.now, &mut out);
        self.drive(out)
    }

    /// Transaction pooling: the session gives its connection back between
    /// transactions (idle as it is, no reset).
    fn give_back(&mut self, id: BackendId) -> Vec<PoolEvent> {
        let mut out = Vec::new();
        self.pool.release_kept(id, None, self.now, &mut out);
        self.drive(out)
    }

    fn tick(&mut self) -> Vec<PoolEvent> {
        let mut out = Vec::new();
        self.pool.on_tick(self.now, &mut out);
        self.drive(out)
    }
}

thread_local! {
    /// Every write to a "server", in order.
    static SENT: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
    static REPLIES: std::cell::RefCell<Vec<(BackendId, Vec<u8>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// OK to COM_RESET_CONNECTION, then `SELECT DATABASE()` = NULL.
fn reset_replies() -> Vec<u8> {
    let mut v = framed(1, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    v.extend(framed(1, &[1]));
    v.extend(framed(
        2,
        b"\x03def\x00\x00\x00\x0aDATABASE()\x00\x0c\x21\x00\x00\x01\x00\x00\xfd\x00\x00\x1f\x00\x00",
    ));
    v.extend(framed(3, &[0xfe, 0, 0, 2, 0]));
    v.extend(framed(4, &[0xfb]));
    v.extend(framed(5, &[0xfe, 0, 0, 2, 0]));
    v
}

fn leased(events: &[PoolEvent]) -> Option<(SessionId, BackendId)> {
    events.iter().find_map(|e| match e {
        PoolEvent::Leased { session, backend } => Some((*session, *backend)),
        _ => None,
    })
}

fn failed(events: &[PoolEvent]) -> Option<(SessionId, u16)> {
    events.iter().find_map(|e| match e {
        PoolEvent::LeaseFailed {
            session,
            err_payload,
            ..
        } => Some((
            *session,
            u16::from_le_bytes([err_payload[1], err_payload[2]]),
        )),
        _ => None,
    })
}

#[test]
fn opens_for_a_request_then_reuses_after_reset() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let ev = h.lease(req(1, key));
    let (s, b) = leased(&ev).expect("leased after login");
    assert_eq!(s, sid(1));
    assert_eq!(h.open.open(), 1);
    h.release(b, true);
    assert_eq!(h.serve(), vec![]);
    // The reset connection is reused: no second open.
    let ev = h.lease(req(2, key));
    assert_eq!(leased(&ev), Some((sid(2), b)));
    assert_eq!(h.open.open(), 1);
}

#[test]
fn a_dirty_release_closes_and_returns_the_global_unit() {
    let mut h = Harness::new(10, 0);
    let ev = h.lease(req(1, PoolKey::default_warm()));
    let (_, b) = leased(&ev).unwrap();
    h.release(b, false);
    assert_eq!(h.pool.len(), 0);
    assert_eq!(h.open.open(), 0);
}

#[test]
fn at_the_limit_requests_wait_and_time_out_with_1040() {
    let mut h = Harness::new(1, 0);
    let key = PoolKey::default_warm();
    let ev = h.lease(req(1, key));
    let (_, b) = leased(&ev).unwrap();
    assert!(h.lease(req(2, key)).is_empty(), "queued");
    assert_eq!(h.pool.waiting(), 1);
    h.now += Duration::from_secs(6);
    let ev = h.tick();
    assert_eq!(failed(&ev), Some((sid(2), 1040)));
    assert_eq!(h.pool.waiting(), 0);
    // A waiter is served when a connection comes back.
    assert!(h.lease(req(3, key)).is_empty());
    h.release(b, true);
    let ev = h.serve();
    assert_eq!(leased(&ev), Some((sid(3), b)));
}

#[test]
fn a_cancelled_waiter_is_forgotten() {
    let mut h = Harness::new(1, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    h.lease(req(2, key));
    h.pool.cancel(sid(2));
    assert_eq!(h.pool.waiting(), 0);
    h.release(b, true);
    assert_eq!(h.serve(), vec![]);
}

#[test]
fn at_the_limit_an_idle_connection_of_another_key_is_evicted() {
    let mut h = Harness::new(1, 0);
    let other = PoolKey {
        caps: CLIENT_FOUND_ROWS,
        collation: 8,
        ..PoolKey::default_warm()
    };
    let (_, b) = leased(&h.lease(req(1, other))).unwrap();
    h.release(b, true);
    // Another key at the limit: the idle one is closed to make room.
    let ev = h.lease(req(2, PoolKey::default_warm()));
    assert!(leased(&ev).is_none());
    assert_eq!(h.open.open(), 0, "the idle connection was closed");
    let ev = h.serve();
    assert_eq!(leased(&ev).map(|l| l.0), Some(sid(2)));
}

#[test]
fn a_dead_idle_connection_is_discarded_at_checkout() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    h.release(b, true);
    // The server side goes away.
    h.servers_go_away();
    let ev = h.lease(req(2, key));
    let (_, b2) = leased(&ev).unwrap();
    assert_ne!(b, b2, "a fresh connection, not the dead one");
}

#[test]
fn idle_connections_beyond_the_pool_size_are_trimmed_after_the_idle_timeout() {
    let mut h = Harness::new(10, 1);
    let key = PoolKey::default_warm();
    let (_, b1) = leased(&h.lease(req(1, key))).unwrap();
    let (_, b2) = leased(&h.lease(req(2, key))).unwrap();
    h.release(b1, true);
    h.release(b2, true);
    h.tick();
    assert_eq!(h.pool.len(), 2, "not idle long enough yet");
    h.now += Duration::from_secs(61);
    h.tick();
    assert_eq!(h.pool.len(), 1, "trimmed to --backend-pool-size");
}

#[test]
fn a_connect_failure_fails_the_request_and_delays_refills() {
    let mut h = Harness::new(10, 2);
    let mut out = Vec::new();
    h.pool
        .lease(req(1, PoolKey::default_warm()), h.now, &mut out);
    let PoolEvent::Open { key, request } = out.remove(0) else {
        panic!("expected an open")
    };
    let mut ev = Vec::new();
    let id = h.pool.insert_opening(key, request, h.now, &mut ev);
    let mut ev = Vec::new();
    h.pool
        .on_connect(id, Completion::Failed(errno::ECONNREFUSED), h.now, &mut ev);
    let ev = h.drive(ev);
    assert_eq!(failed(&ev), Some((sid(1), 1105)));
    // No refill storm while the backend is down.
    let mut out = Vec::new();
    h.pool.refill(h.now, &mut out);
    assert!(out.is_empty());
}

#[test]
fn first_waiter_is_the_oldest_session_waiting_for_that_key() {
    let mut h = Harness::new(1, 0);
    let other = PoolKey {
        collation: 8,
        ..PoolKey::default_warm()
    };
    let (_, b) = leased(&h.lease(req(1, PoolKey::default_warm()))).unwrap();
    // At the limit: both wait, in order.
    assert!(leased(&h.lease(req(2, other))).is_none());
    assert!(leased(&h.lease(req(3, other))).is_none());
    assert_eq!(h.pool.first_waiter(other), Some(sid(2)));
    assert_eq!(h.pool.first_waiter(PoolKey::default_warm()), None);
    h.pool.cancel(sid(2));
    assert_eq!(h.pool.first_waiter(other), Some(sid(3)));
    h.release(b, true);
}

// ---- per-user backend identity ----

fn passthrough(max: usize, pool_size: usize) -> (Harness, PoolKey, PoolKey) {
    let mut h = Harness::with_identity(IdentityMode::Passthrough, max, pool_size);
    let mut key = |user: &str, pw: &[u8]| PoolKey {
        identity: h.pool.intern(
            user,
            &Authenticated {
                backend_user: user.into(),
                credential: Credential::Stage1(wire::auth::Stage1::of_password(pw)),
            },
        ),
        ..PoolKey::default_warm()
    };
    let (a, b) = (key("alice", b"a"), key("bob", b"b"));
    (h, a, b)
}

#[test]
fn one_account_holds_at_most_its_share_and_waits_for_its_own() {
    let (mut h, a, b) = passthrough(4, 0);
    h.pool.cfg.max_per_user = 2;
    let (_, a1) = leased(&h.lease(req(1, a))).unwrap();
    let (_, _a2) = leased(&h.lease(req(2, a))).unwrap();
    // Alice's third waits, though two units of the cap are free.
    assert_eq!(leased(&h.lease(req(3, a))), None);
    assert_eq!(h.pool.waiting(), 1);
    // No connection another user frees could serve her: that is no reason
    // to cut anyone's idle session (`idle_cut.rs`).
    assert_eq!(h.open.waiting_for_room(), 0);
    // Bob is served from the free units in the same batch (he queues
    // behind her waiter, whose key cannot be served now).
    assert_eq!(leased(&h.lease(req(4, b))), None);
    let (s, bb) = leased(&h.serve()).unwrap();
    assert_eq!((s, h.pool.conn(bb).unwrap().key()), (sid(4), b));
    let alice = h.pool.metrics.users().user("alice");
    assert_eq!(alice.backends.load(Relaxed), 2);
    assert_eq!(alice.limit_waits.load(Relaxed), 1);
    // Served again and again, the waiter is counted once.
    h.serve();
    assert_eq!(alice.limit_waits.load(Relaxed), 1);
    // Her own connection comes back and goes to her waiter.
    h.release(a1, true);
    assert_eq!(leased(&h.serve()), Some((sid(3), a1)));
    assert_eq!(alice.backends.load(Relaxed), 2);
}

#[test]
fn an_account_at_its_share_gives_up_an_idle_connection_of_another_key() {
    let (mut h, a, _) = passthrough(4, 0);
    h.pool.cfg.max_per_user = 1;
    let (_, a1) = leased(&h.lease(req(1, a))).unwrap();
    h.release(a1, true);
    let other = PoolKey { collation: 8, ..a };
    // Her only unit is an idle connection of her other key: it is closed
    // for her, and the unit comes back to her.
    assert_eq!(leased(&h.lease(req(2, other))), None);
    let (s, b) = leased(&h.serve()).unwrap();
    assert_eq!((s, h.pool.conn(b).unwrap().key()), (sid(2), other));
    assert_eq!(h.pool.len(), 1);
}

#[test]
fn passthrough_warms_nothing_before_a_login_but_probes_the_greeting() {
    let (mut h, a, _) = passthrough(8, 2);
    // One connection reads the greeting (for what clients are offered)
    // and hangs up: no login, nothing idle, nothing held.
    let ev = h.tick();
    assert!(
        matches!(&ev[..], [PoolEvent::ServerInfo { server_version, .. }] if server_version.contains("MariaDB")),
        "{ev:?}"
    );
    assert_eq!(h.pool.len(), 0, "no account to log in as yet");
    assert_eq!(h.open.open(), 0);
    assert_eq!(h.tick(), vec![], "probed once");
    h.pool.set_warm_key(a);
    h.tick();
    assert_eq!(h.pool.len(), 2, "warmed for the user who logged in");
    assert!(h.pool.slots.values().all(|p| p.conn.key() == a));
}

#[test]
fn passthrough_keeps_pool_size_warm_in_all_not_per_user() {
    // Users taking turns must not each add --backend-pool-size connections.
    let (mut h, a, b) = passthrough(8, 2);
    h.tick();
    h.pool.set_warm_key(a);
    h.tick();
    h.pool.set_warm_key(b);
    h.tick();
    assert_eq!(h.pool.len(), 2, "alice's two ready ones count for bob too");
    // Bob's own session still gets a connection of his own.
    let (_, bb) = leased(&h.lease(req(1, b))).unwrap();
    assert_eq!(h.pool.conn(bb).unwrap().key(), b);
}

#[test]
fn one_users_idle_connection_is_never_leased_to_another() {
    let (mut h, a, b) = passthrough(8, 1);
    assert_ne!(a.identity, b.identity);
    let (_, ba) = leased(&h.lease(req(1, a))).unwrap();
    h.release(ba, true);
    assert_eq!(h.pool.idle.len(), 1);
    let (s, bb) = leased(&h.lease(req(2, b))).unwrap();
    assert_eq!(s, sid(2));
    assert_ne!(bb, ba, "bob got a connection of his own");
    assert_eq!(h.pool.conn(bb).unwrap().key().identity, b.identity);
    // Alice's comes back to alice.
    let (_, again) = leased(&h.lease(req(3, a))).unwrap();
    assert_eq!(again, ba);
}

#[test]
fn a_reload_that_removes_a_user_closes_its_connections_and_refuses_its_leases() {
    let (mut h, a, b) = passthrough(8, 1);
    h.pool.set_warm_key(a);
    let (_, idle) = leased(&h.lease(req(1, a))).unwrap();
    let (_, held) = leased(&h.lease(req(2, a))).unwrap();
    h.release(idle, true);
    let (_, bobs) = leased(&h.lease(req(3, b))).unwrap();
    assert_eq!(h.open.open(), 3);
    let mut ev = Vec::new();
    assert_eq!(h.pool.prune_identities(|u| u == "bob", &mut ev), 1);
    h.drive(ev);
    assert_eq!(h.open.open(), 2, "alice's idle connection is closed");
    assert_eq!(h.pool.warm_key, None, "and no longer warmed");
    // A lease of alice's identity fails with 1045, opening nothing.
    let ev = h.lease(req(4, a));
    let failed = ev.iter().find_map(|e| match e {
        PoolEvent::LeaseFailed {
            session,
            err_payload,
            ..
        } => Some((*session, err_payload.clone())),
        _ => None,
    });
    let (s, err) = failed.expect("refused");
    assert_eq!((s, u16::from_le_bytes([err[1], err[2]])), (sid(4), 1045));
    assert_eq!(h.open.open(), 2);
    // The one alice held is closed when it comes back, not pooled.
    h.release(held, true);
    assert_eq!(h.open.open(), 1);
    // Bob is untouched.
    h.release(bobs, true);
    let (_, again) = leased(&h.lease(req(5, b))).unwrap();
    assert_eq!(again, bobs);
}

#[test]
fn at_the_limit_another_users_idle_connection_is_evicted() {
    let (mut h, a, b) = passthrough(1, 1);
    let (_, ba) = leased(&h.lease(req(1, a))).unwrap();
    h.release(ba, true);
    let ev = h.lease(req(2, b));
    assert!(leased(&ev).is_none(), "waits for the eviction");
    assert_eq!(h.open.open(), 0, "alice's idle connection was closed");
    let (s, bb) = leased(&h.serve()).unwrap();
    assert_eq!(s, sid(2));
    assert_eq!(h.pool.conn(bb).unwrap().key().identity, b.identity);
}

#[test]
fn a_refused_user_gets_the_servers_err_and_nobody_else_notices() {
    let (mut h, a, b) = passthrough(2, 0);
    let denied = wire::reply::err_payload_with_state(
        1045,
        "28000",
        "Access denied for user 'bob'@'localhost' (using password: YES)",
    );
    h.refuse = Some(("bob", denied.clone()));
    h.pool.set_warm_key(b);
    // Alice holds a connection; bob's login is refused by the server.
    let (_, ba) = leased(&h.lease(req(1, a))).unwrap();
    let ev = h.lease(req(2, b));
    let refusal = ev.iter().find_map(|e| match e {
        PoolEvent::LeaseFailed {
            session,
            err_payload,
            reject,
        } => Some((*session, err_payload.clone(), *reject)),
        _ => None,
    });
    assert_eq!(
        refusal,
        Some((sid(2), denied, Some(RejectReason::BackendAuth))),
        "the server's own ERR"
    );
    assert_eq!(h.open.open(), 1, "bob's connection is gone");
    // The backend is not marked unreachable: alice's next session gets
    // a connection at once, and nothing warms bob's account any more.
    assert_eq!(h.pool.retry_at, None);
    assert_eq!(h.pool.warm_key, None);
    let (s, _) = leased(&h.lease(req(3, a))).unwrap();
    assert_eq!(s, sid(3));
    h.release(ba, true);
    assert_eq!(h.tick(), vec![]);
    assert!(h.pool.slots.values().all(|p| p.conn.key() == a));
}

#[test]
fn relet_resets_the_connection_and_gives_it_back_to_the_same_session() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    let mut out = Vec::new();
    h.pool.relet(b, h.now, &mut out);
    let ev = h.drive(out);
    // Reset (the canned replies say no schema), then the same session's.
    assert_eq!(
        ev,
        vec![PoolEvent::Relet {
            session: sid(1),
            backend: b,
            schema: None
        }]
    );
    assert_eq!(h.serve(), vec![], "never idle in between");
    // A waiter of the same key does not wait for a connection being relet.
    let ev = h.lease(req(2, key));
    let (s2, b2) = leased(&ev).expect("a new connection");
    assert_eq!(s2, sid(2));
    assert_ne!(b2, b);
    // It is leased as before: a clean release makes it idle again.
    h.release(b, true);
    let ev = h.lease(req(3, key));
    assert_eq!(leased(&ev), Some((sid(3), b)));
}

#[test]
fn a_relet_while_draining_closes_and_fails_the_session() {
    let mut h = Harness::new(10, 0);
    let (_, b) = leased(&h.lease(req(1, PoolKey::default_warm()))).unwrap();
    let mut out = Vec::new();
    h.pool.begin_drain(&mut out);
    h.drive(out);
    let mut out = Vec::new();
    h.pool.relet(b, h.now, &mut out);
    let ev = h.drive(out);
    assert_eq!(failed(&ev), Some((sid(1), 1105)));
    assert_eq!(h.pool.len(), 0);
}

#[test]
fn the_pool_stamps_its_backend_tls_on_every_key() {
    let shared = IdentityMode::Shared(BackendLogin {
        user: "bench".into(),
        credential: Credential::Plaintext(b"pw".to_vec()),
    });
    // The canned server offers no TLS: `preferred` logs in in plain.
    let mut h = Harness::with_tls(shared, 2, 0, TlsWish::Preferred);
    let unstamped = PoolKey::default_warm();
    assert_eq!(unstamped.tls, TlsWish::Off, "sessions do not know it");
    let (_, b) = leased(&h.lease(req(1, unstamped))).expect("leased");
    let key = h.pool.conn(b).unwrap().key();
    assert_eq!(
        key.tls,
        TlsWish::Preferred,
        "opened with the pool's TLS wish"
    );
    assert_eq!(h.pool.first_waiter(key), None);
    h.release(b, true);
    // The next lease of the same session key finds it (the same stamp).
    let (_, again) = leased(&h.lease(req(2, unstamped))).expect("leased");
    assert_eq!(again, b);
    h.release(again, true);
}

#[test]
fn the_server_closing_an_idle_connection_discards_it_and_names_its_last_session() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let ev = h.lease(req(1, key));
    // Watched from its login on, once.
    let (_, b) = leased(&ev).unwrap();
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, PoolEvent::Watch(id) if *id == b))
            .count(),
        1,
        "{ev:?}"
    );
    h.release(b, true);
    h.serve();
    let thread = h.pool.conn(b).unwrap().thread_id();
    // The server closed it while idle: closed now, and session 1 hears.
    let mut out = Vec::new();
    h.pool
        .on_watch(b, Completion::Done(errno::POLLRDHUP), &mut out);
    assert!(out.contains(&PoolEvent::Io(b, BackendOp::Close)), "{out:?}");
    assert!(
        out.contains(&PoolEvent::ClosedIdle {
            session: sid(1),
            thread
        }),
        "{out:?}"
    );
    h.drive(out);
    assert_eq!(h.open.open(), 0);
    // A failed or cancelled poll says nothing.
    let (_, b2) = leased(&h.lease(req(2, key))).unwrap();
    h.release(b2, true);
    let mut out = Vec::new();
    h.pool.on_watch(b2, Completion::Cancelled, &mut out);
    assert!(out.is_empty(), "{out:?}");
}

fn closed_idle(events: &[PoolEvent]) -> Vec<SessionId> {
    events
        .iter()
        .filter_map(|e| match e {
            PoolEvent::ClosedIdle { session, .. } => Some(*session),
            _ => None,
        })
        .collect()
}

#[test]
fn a_close_the_watch_sees_while_leased_is_acted_on_when_the_connection_comes_back() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    // Leased: the holder's own reads see the close; the watch (armed once,
    // spent now) only marks it.
    let mut out = Vec::new();
    h.pool
        .on_watch(b, Completion::Done(errno::POLLRDHUP), &mut out);
    assert!(out.is_empty(), "{out:?}");
    // The relay's park won the race against that EOF (its cancel landed
    // first): given back as it is, it is discarded, and session 1 hears.
    let ev = h.give_back(b);
    assert_eq!(closed_idle(&ev), vec![sid(1)], "{ev:?}");
    assert!(h.pool.conn(b).is_none(), "closed and freed");
    assert_eq!(h.open.open(), 0);
    // The same through a reset (a release that resets).
    let (_, b2) = leased(&h.lease(req(2, key))).unwrap();
    let mut out = Vec::new();
    h.pool
        .on_watch(b2, Completion::Done(errno::POLLRDHUP), &mut out);
    let ev = h.release(b2, true);
    assert_eq!(closed_idle(&ev), vec![sid(2)], "{ev:?}");
    assert_eq!(h.open.open(), 0);
}

#[test]
fn the_pools_own_exchange_failing_on_a_given_back_connection_tells_its_last_session() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    // Given back with a reset, whose answer is the server's EOF (KILL
    // CONNECTION landed right after the session's last command).
    let mut out = Vec::new();
    h.pool.release(b, true, h.now, &mut out);
    assert!(h.pool.conn(b).unwrap().is_resetting());
    let mut out = Vec::new();
    let (eof, now) = (Completion::Done(0), h.now);
    h.pool.on_read(b, eof, &[], BUF_CAPACITY, now, &mut out);
    assert_eq!(closed_idle(&out), vec![sid(1)], "{out:?}");
    h.drive(out);
    assert_eq!(h.open.open(), 0);
}

#[test]
fn a_dead_idle_connection_found_at_checkout_tells_its_last_session_but_not_the_one_leasing() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    h.give_back(b);
    // The server side goes away before the watch's completion is handled.
    h.servers_go_away();
    let ev = h.lease(req(2, key));
    assert_eq!(closed_idle(&ev), vec![sid(1)], "{ev:?}");
    let (_, b2) = leased(&ev).unwrap();
    assert_ne!(b, b2);
    // Session 2's own last connection found dead by its own next command:
    // that command runs on another connection; nothing to tell.
    h.give_back(b2);
    h.servers_go_away();
    let ev = h.lease(req(2, key));
    assert!(closed_idle(&ev).is_empty(), "{ev:?}");
    assert!(leased(&ev).is_some());
}

// ---- the cap shared by two workers' pools (pool/share.rs) ----

/// Two workers' pools sharing a cap of `max`, with no warm connections.
fn two_workers(max: usize) -> (Harness, Harness) {
    let metrics = Metrics::new(2, BufferMode::Heap);
    let share = Arc::new(BackendShare::new(2));
    let identity = || {
        IdentityMode::Shared(BackendLogin {
            user: "bench".into(),
            credential: Credential::Plaintext(b"pw".to_vec()),
        })
    };
    let a = Harness::worker(
        identity(),
        max,
        0,
        TlsWish::Off,
        Arc::clone(&share),
        Arc::clone(&metrics),
        0,
    );
    let b = Harness::worker(identity(), max, 0, TlsWish::Off, share, metrics, 1);
    (a, b)
}

fn rebalanced(h: &Harness) -> u64 {
    h.pool.metrics.snapshot().backend_rebalanced_total
}

#[test]
fn a_new_request_queues_behind_waiters_even_when_a_connection_is_idle() {
    let mut h = Harness::new(1, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    assert_eq!(leased(&h.lease(req(2, key))), None, "at the cap: 2 waits");
    // The connection comes back; before the waiters are served (end of the
    // batch), session 3 asks: it must not take the connection from 2.
    h.give_back(b);
    assert_eq!(leased(&h.lease(req(3, key))), None, "3 barged past 2");
    assert_eq!(h.pool.waiting(), 2);
    assert_eq!(leased(&h.serve()), Some((sid(2), b)));
}

#[test]
fn a_worker_does_not_open_while_a_worker_holding_fewer_waits() {
    let (mut a, mut b) = two_workers(4);
    let key = PoolKey::default_warm();
    let mut held = Vec::new();
    for s in 1..=3 {
        held.push(leased(&a.lease(req(s, key))).unwrap().1);
    }
    leased(&b.lease(req(11, key))).unwrap();
    assert_eq!(leased(&b.lease(req(12, key))), None, "the cap is reached");
    // A connection of A's closes: a unit is free. B holds fewer than A and
    // its session waits, so A's next session does not take the unit.
    a.release(held.pop().unwrap(), false);
    assert_eq!(a.open.open(), 3);
    assert_eq!(leased(&a.lease(req(4, key))), None, "A took B's unit");
    assert!(a.serve().is_empty());
    // B was told nothing: it sees the room at its next batch.
    assert_eq!(leased(&b.serve()).map(|l| l.0), Some(sid(12)));
    assert_eq!(a.open.open(), 4);
    assert_eq!(rebalanced(&a), 0, "nothing had to close");
}

#[test]
fn a_worker_holding_two_more_gives_returning_connections_until_even() {
    let (mut a, mut b) = two_workers(4);
    let key = PoolKey::default_warm();
    let mut held: Vec<BackendId> = (1..=4)
        .map(|s| leased(&a.lease(req(s, key))).unwrap().1)
        .collect();
    assert_eq!(leased(&a.lease(req(5, key))), None);
    for s in 11..=13 {
        assert_eq!(leased(&b.lease(req(s, key))), None, "B has none");
    }
    // A's connection comes back while A holds 4 and B, with sessions
    // waiting, none: it closes instead of going to A's session 5.
    a.give_back(held.remove(0));
    let ev = a.serve();
    assert_eq!(leased(&ev), None, "{ev:?}");
    assert_eq!(rebalanced(&a), 1);
    assert_eq!(a.open.open(), 3, "its unit is free");
    assert_eq!(leased(&b.serve()).map(|l| l.0), Some(sid(11)));
    // 3 against 1: one more moves.
    a.give_back(held.remove(0));
    assert_eq!(leased(&a.serve()), None);
    assert_eq!(leased(&b.serve()).map(|l| l.0), Some(sid(12)));
    assert_eq!(rebalanced(&a), 2);
    // 2 against 2: A keeps what comes back; B's session 13 waits for B's own.
    let back = held.remove(0);
    a.give_back(back);
    assert_eq!(leased(&a.serve()), Some((sid(5), back)));
    assert_eq!(rebalanced(&a), 2, "even: nothing moves");
    assert_eq!(leased(&b.serve()), None);
    assert_eq!(a.open.open(), 4);
}

#[test]
fn an_idle_connection_goes_to_another_worker_once_it_has_been_idle_a_while() {
    let (mut a, mut b) = two_workers(3);
    let key = PoolKey::default_warm();
    let a1 = leased(&a.lease(req(1, key))).unwrap().1;
    let a2 = leased(&a.lease(req(2, key))).unwrap().1;
    leased(&b.lease(req(11, key))).unwrap();
    assert_eq!(leased(&b.lease(req(12, key))), None);
    // A's sessions are done: 2 idle against B's 1 and a waiter. Not at once
    // (A's clients may be between transactions)...
    a.give_back(a1);
    a.give_back(a2);
    a.serve();
    a.tick();
    assert_eq!(rebalanced(&a), 0);
    // ...but once idle for a while, one goes; only one while its unit is
    // on its way to B.
    a.now += super::upkeep::IDLE_BEFORE_GIVING;
    a.tick();
    assert_eq!(rebalanced(&a), 1);
    a.tick();
    assert_eq!(rebalanced(&a), 1);
    assert_eq!(leased(&b.serve()).map(|l| l.0), Some(sid(12)));
    // B has nobody waiting now: A keeps its last one.
    a.now += super::upkeep::IDLE_BEFORE_GIVING;
    a.tick();
    assert_eq!(rebalanced(&a), 1);
    assert_eq!(a.open.open(), 3);
}

#[test]
fn with_room_for_everyone_a_worker_opens_whatever_the_other_holds() {
    let (mut a, b) = two_workers(8);
    let key = PoolKey::default_warm();
    for s in 1..=3 {
        leased(&a.lease(req(s, key))).unwrap();
    }
    // B has a session waiting (published) and holds none, but 5 units are
    // free: plenty for it, so A does not defer.
    b.pool.share.publish(1, 0, 1, 0);
    assert!(leased(&a.lease(req(4, key))).is_some());
    assert_eq!(a.open.open(), 4);
    // With the free units down to B's waiters, A leaves them to B.
    b.pool.share.publish(1, 0, 4, 0);
    assert_eq!(leased(&a.lease(req(5, key))), None);
    b.pool.share.publish(1, 0, 0, 0);
}

// ---- waiting: FIFO per key, no head-of-line blocking across keys ----

fn key_b() -> PoolKey {
    PoolKey {
        collation: 8,
        ..PoolKey::default_warm()
    }
}

fn key_c() -> PoolKey {
    PoolKey {
        collation: 9,
        ..PoolKey::default_warm()
    }
}

fn closes(events: &[PoolEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, PoolEvent::Io(_, BackendOp::Close)))
        .count()
}

fn all_failed(events: &[PoolEvent]) -> Vec<SessionId> {
    events
        .iter()
        .filter_map(|e| match e {
            PoolEvent::LeaseFailed { session, .. } => Some(*session),
            _ => None,
        })
        .collect()
}

fn waiters_gauge(h: &Harness) -> i64 {
    h.pool.metrics.snapshot().pool_waiters
}

#[test]
fn a_key_waiting_for_its_own_reset_does_not_hold_up_another_key() {
    let mut h = Harness::new(2, 0);
    let (a, b) = (PoolKey::default_warm(), key_b());
    let (_, ca) = leased(&h.lease(req(1, a))).unwrap();
    let (_, cb) = leased(&h.lease(req(2, b))).unwrap();
    assert_eq!(leased(&h.lease(req(3, a))), None, "at the cap");
    assert_eq!(leased(&h.lease(req(4, b))), None, "at the cap");
    // A's connection comes back and is being reset (its replies held):
    // session 3, first in line, waits for it.
    let mut resetting = Vec::new();
    h.pool.release(ca, true, h.now, &mut resetting);
    // B's comes back idle: B's waiter must not wait behind A's.
    h.give_back(cb);
    assert_eq!(leased(&h.serve()), Some((sid(4), cb)));
    assert_eq!(h.pool.waiting(), 1);
    // The reset ends: A's waiter has it.
    assert_eq!(leased(&h.drive(resetting)), None);
    assert_eq!(leased(&h.serve()), Some((sid(3), ca)));
    assert_eq!(h.open.open(), 2, "nothing was closed or opened");
}

#[test]
fn a_busy_key_keeps_its_returning_connections_for_its_own_waiters() {
    // A and B hold one connection each and both have a session waiting, A's
    // first. B's connection comes back: it goes to B's waiter; closing it
    // for A's (a reconnect, while A holds as many as B) would hold B up
    // for nothing.
    let mut h = Harness::new(2, 0);
    let (a, b) = (PoolKey::default_warm(), key_b());
    leased(&h.lease(req(1, a))).unwrap();
    let (_, cb) = leased(&h.lease(req(2, b))).unwrap();
    assert_eq!(leased(&h.lease(req(3, a))), None);
    assert_eq!(leased(&h.lease(req(4, b))), None);
    h.give_back(cb);
    let ev = h.serve();
    assert_eq!(leased(&ev), Some((sid(4), cb)), "{ev:?}");
    assert_eq!(closes(&ev), 0);
    assert_eq!(h.pool.first_waiter(a), Some(sid(3)), "A's still waits");
}

#[test]
fn a_key_holding_none_gets_a_connection_from_a_busy_key() {
    // B holds the whole cap and keeps sessions waiting; A's older waiter is
    // not starved: B's next connection back is closed for it.
    let mut h = Harness::new(2, 0);
    let (a, b) = (PoolKey::default_warm(), key_b());
    let (_, b1) = leased(&h.lease(req(1, b))).unwrap();
    let (_, b2) = leased(&h.lease(req(2, b))).unwrap();
    assert_eq!(leased(&h.lease(req(3, a))), None);
    assert_eq!(leased(&h.lease(req(4, b))), None);
    h.give_back(b1);
    assert_eq!(leased(&h.serve()), None);
    assert_eq!(h.pool.len(), 1, "closed for A's waiter");
    let ev = h.serve();
    assert_eq!(leased(&ev), Some((sid(3), ev_backend(&ev))), "{ev:?}");
    assert_eq!(h.pool.conn(ev_backend(&ev)).unwrap().key(), a);
    // A holds one, B one: B's next one back is B's.
    h.give_back(b2);
    assert_eq!(leased(&h.serve()), Some((sid(4), b2)));
}

/// The backend of the first lease in `events`.
fn ev_backend(events: &[PoolEvent]) -> BackendId {
    leased(events).expect("a lease").1
}

#[test]
fn a_key_two_behind_another_gets_its_next_connection() {
    // "Two more", as between workers: A holds 1, B 3; B's connection back
    // goes to A's older waiter. At 2 against 2 it would stay with B.
    let mut h = Harness::new(4, 0);
    let (a, b) = (PoolKey::default_warm(), key_b());
    leased(&h.lease(req(1, a))).unwrap();
    let held: Vec<BackendId> = (2..=4)
        .map(|s| leased(&h.lease(req(s, b))).unwrap().1)
        .collect();
    assert_eq!(leased(&h.lease(req(5, a))), None);
    assert_eq!(leased(&h.lease(req(6, b))), None);
    assert_eq!(leased(&h.lease(req(7, a))), None);
    h.give_back(held[0]);
    assert_eq!(leased(&h.serve()), None);
    assert_eq!(h.pool.len(), 3, "closed for A's waiter");
    let ev = h.serve();
    assert_eq!(leased(&ev).map(|l| l.0), Some(sid(5)), "{ev:?}");
    // 2 against 2 now: B keeps what comes back.
    h.give_back(held[1]);
    assert_eq!(leased(&h.serve()), Some((sid(6), held[1])));
    assert_eq!(h.pool.first_waiter(a), Some(sid(7)));
}

#[test]
fn a_waiter_at_the_cap_gets_one_connection_closed_for_it_not_one_per_pass() {
    let mut h = Harness::new(2, 0);
    let (a, b, c) = (PoolKey::default_warm(), key_b(), key_c());
    let (_, ca) = leased(&h.lease(req(1, a))).unwrap();
    let (_, cb) = leased(&h.lease(req(2, b))).unwrap();
    assert_eq!(leased(&h.lease(req(3, c))), None);
    // B's connection comes back: closed for C's waiter (nobody of B waits).
    h.give_back(cb);
    let mut first = Vec::new();
    h.pool.serve_waiters(h.now, &mut first);
    assert_eq!(closes(&first), 1, "{first:?}");
    // Before that close completes, A's comes back: C's waiter already has
    // a unit coming, so A's stays.
    h.give_back(ca);
    let mut second = Vec::new();
    h.pool.serve_waiters(h.now, &mut second);
    assert_eq!(closes(&second), 0, "{second:?}");
    // The close completes: C's waiter opens, and A's connection is A's.
    h.drive(first);
    let ev = h.serve();
    assert_eq!(leased(&ev).map(|l| l.0), Some(sid(3)), "{ev:?}");
    assert_eq!(leased(&h.lease(req(4, a))), Some((sid(4), ca)));
}

#[test]
fn deference_to_another_worker_closes_nothing() {
    // A worker whose free unit is another worker's (pool/share.rs) must
    // not close an idle connection of another key to make room: the unit
    // it frees would be the other worker's too.
    let (mut a, b) = two_workers(4);
    let key = PoolKey::default_warm();
    let held: Vec<BackendId> = (1..=3)
        .map(|s| leased(&a.lease(req(s, key))).unwrap().1)
        .collect();
    a.give_back(held[2]);
    assert_eq!(a.serve(), vec![]);
    // B holds none and a session of it waits: the one free unit is B's.
    b.pool.share.publish(1, 0, 1, 0);
    let ev = a.lease(req(4, key_b()));
    assert_eq!(leased(&ev), None);
    assert_eq!(closes(&ev), 0, "{ev:?}");
    assert_eq!(a.pool.len(), 3);
    assert_eq!(a.open.open(), 3);
    assert_eq!(closes(&a.serve()), 0);
    assert_eq!(a.pool.len(), 3);
    // B took its unit: now at the cap, and A's waiter has A's idle one
    // closed for it (B holds 1, A 3: the unit is not B's).
    b.pool.share.publish(1, 1, 0, 0);
    assert!(a.open.try_reserve(4));
    let mut out = Vec::new();
    a.pool.serve_waiters(a.now, &mut out);
    assert_eq!(closes(&out), 1, "{out:?}");
    a.drive(out);
    a.open.unreserve();
    assert_eq!(leased(&a.serve()).map(|l| l.0), Some(sid(4)));
}

#[test]
fn each_key_is_served_in_its_own_order_and_the_gauge_follows() {
    let mut h = Harness::new(2, 0);
    let (a, b) = (PoolKey::default_warm(), key_b());
    let (_, ca) = leased(&h.lease(req(1, a))).unwrap();
    let (_, cb) = leased(&h.lease(req(2, b))).unwrap();
    for (s, k) in [(3, a), (4, b), (5, a), (6, b), (7, a)] {
        assert_eq!(leased(&h.lease(req(s, k))), None);
    }
    assert_eq!((h.pool.waiting(), waiters_gauge(&h)), (5, 5));
    h.pool.cancel(sid(5));
    assert_eq!((h.pool.waiting(), waiters_gauge(&h)), (4, 4));
    for (back, next) in [(ca, 3), (cb, 4), (ca, 7), (cb, 6)] {
        h.give_back(back);
        assert_eq!(leased(&h.serve()), Some((sid(next), back)));
    }
    assert_eq!((h.pool.waiting(), waiters_gauge(&h)), (0, 0));
    assert_eq!(
        h.pool.metrics.snapshot().pool_wait.count,
        4,
        "the served ones"
    );
}

#[test]
fn timeouts_fail_each_live_waiter_once_in_arrival_order() {
    let mut h = Harness::new(1, 0);
    let (a, b) = (PoolKey::default_warm(), key_b());
    leased(&h.lease(req(1, a))).unwrap();
    assert_eq!(leased(&h.lease(req(2, b))), None);
    h.now += Duration::from_secs(1);
    for (s, k) in [(3, a), (4, b), (5, a)] {
        assert_eq!(leased(&h.lease(req(s, k))), None);
    }
    h.pool.cancel(sid(4));
    h.now += Duration::from_millis(4500);
    assert_eq!(all_failed(&h.tick()), vec![sid(2)], "only 2 is 5 s old");
    h.now += Duration::from_secs(1);
    assert_eq!(all_failed(&h.tick()), vec![sid(3), sid(5)]);
    assert_eq!(all_failed(&h.tick()), vec![]);
    assert_eq!((h.pool.waiting(), waiters_gauge(&h)), (0, 0));
    assert_eq!(h.pool.first_waiter(a), None);
    // The wait histogram: the three timed out (5.5 s, 5.5 s, 5.5 s), the
    // cancelled one is not counted, nor session 1, which never waited.
    let w = h.pool.metrics.snapshot().pool_wait;
    assert_eq!(w.count, 3);
    assert_eq!(w.sum, Duration::from_millis(3 * 5500));
}

mod idle_check;

mod give_back;

mod writer;

mod causal;
mod replicas;

/// The harness's server answers every short write with `reset_replies`:
/// an OK and a one-row result set, the answers to these two statements.
fn replayed_statements(checksums: Option<[u64; 2]>) -> Vec<crate::tx_replay::Recorded> {
    let sqls: [&[u8]; 2] = [b"BEGIN", b"SELECT DATABASE()"];
    let sums = checksums.unwrap_or_else(|| {
        let mut t = wire::tracker::Tracker::new(false);
        t.capture_commands(0);
        t.checksum_answers();
        for sql in sqls {
            t.on_client_bytes(&framed(0, &[&[COM_QUERY], sql].concat()))
                .unwrap();
        }
        t.on_server_bytes(&reset_replies()).unwrap();
        [0, 1].map(|_| t.take_completed().unwrap().checksum.unwrap())
    });
    sqls.iter()
        .zip(sums)
        .map(|(sql, checksum)| crate::tx_replay::Recorded {
            sql: sql.to_vec(),
            checksum,
        })
        .collect()
}

fn replayed(events: &[PoolEvent]) -> Option<(SessionId, ReplayOutcome)> {
    events.iter().find_map(|e| match e {
        PoolEvent::Replayed { session, outcome } => Some((*session, outcome.clone())),
        _ => None,
    })
}

#[test]
fn a_replay_that_matches_leaves_the_connection_with_its_session() {
    let mut h = Harness::new(10, 0);
    let (_, b) = leased(&h.lease(req(1, PoolKey::default_warm()))).unwrap();
    let mut out = Vec::new();
    h.pool
        .replay(b, &replayed_statements(None), None, h.now, &mut out);
    let seen = h.drive(out);
    assert!(
        matches!(replayed(&seen), Some((s, ReplayOutcome::Replayed { .. })) if s == sid(1)),
        "{seen:?}"
    );
    assert_eq!((h.pool.len(), h.open.open()), (1, 1));
    h.release(b, false);
    assert_eq!((h.pool.len(), h.open.open()), (0, 0));
}

#[test]
fn a_replay_that_does_not_match_closes_the_connection_and_tells_its_session() {
    let mut h = Harness::new(10, 0);
    let (_, b) = leased(&h.lease(req(1, PoolKey::default_warm()))).unwrap();
    let mut out = Vec::new();
    let statements = replayed_statements(Some([1, 2]));
    h.pool.replay(b, &statements, None, h.now, &mut out);
    let seen = h.drive(out);
    assert_eq!(
        replayed(&seen),
        Some((sid(1), ReplayOutcome::Mismatch { statement: 0 }))
    );
    // Closed and gone: nothing leaks, and the cap's unit is back.
    assert_eq!((h.pool.len(), h.open.open()), (0, 0));
}

//! What a session asks of the pool and of its backend connection: leases,
//! give-backs (release, park, relet), prepared statements on the leased
//! connection, and the identity its connections log in with.

use std::sync::atomic::Ordering::Relaxed;

use crate::proxy::worker::*;
use machines::pool::{Park, PendingGiveBack};

impl Worker {
    pub(super) fn lease(
        &mut self,
        sid: SessionId,
        key: PoolKey,
        schema: Option<String>,
        any_settings: bool,
    ) {
        let mut events = Vec::new();
        let setup = any_settings.then(|| {
            Box::new(LeaseSetup {
                settings: ANY_SETTINGS,
                ..LeaseSetup::default()
            })
        });
        let request = LeaseRequest {
            session: sid,
            key,
            schema,
            setup,
        };
        self.pool.lease(request, self.now, &mut events);
        self.pool_q.extend(events);
    }

    pub(super) fn lease_for_command(
        &mut self,
        sid: SessionId,
        key: PoolKey,
        schema: Option<String>,
        mut setup: Box<LeaseSetup>,
        route: machines::multiplex::Route,
    ) {
        let mut key = key;
        self.route_lease(route, &mut key, &mut setup);
        // Ring mode: the command that asked for a connection is relayed
        // from the session's own buffer once leased (a copy per
        // transaction's first read; the rest stays zero-copy).
        self.ring_stage_client(sid);
        self.metrics().tx_leases_total.fetch_add(1, Relaxed);
        let mut events = std::mem::take(&mut self.lease_scratch);
        let request = LeaseRequest {
            session: sid,
            key,
            schema,
            setup: Some(setup),
        };
        self.pool.lease(request, self.now, &mut events);
        self.pool_q.extend(events.drain(..));
        self.lease_scratch = events;
    }

    pub(super) fn reset_backend(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        // The KILL registry names no backend thread until it is back (the
        // connection stays this session's: a KILL in flight reaches nobody
        // else).
        let _ = slot.conn.entry().clear_backend();
        if let Some(b) = slot.backend {
            // Ring mode: reset once the relay's receive has ended (the
            // pool's own reads follow).
            self.give_back(b, true, PendingGiveBack::Relet);
        }
    }

    pub(super) fn release_backend(&mut self, sid: SessionId, clean: bool) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        // A KILL mapped to this thread still in flight: the connection must
        // not serve anyone else (registry.rs).
        let kill_in_flight = slot.conn.entry().clear_backend();
        if kill_in_flight && slot.backend.is_some() {
            // Field paths, not `self.metrics()`: the slot stays borrowed.
            self.shared
                .metrics
                .worker(self.id)
                .kill_fenced_total
                .fetch_add(1, Relaxed);
        }
        // Killed: the server is closing this backend connection.
        let clean = clean && !slot.conn.entry().is_killed() && !kill_in_flight;
        let Some(b) = slot.backend.take() else {
            return;
        };
        debug_assert_eq!(slot.relay_ops, 0, "released with relay ops in flight");
        let clean = clean && slot.relay_ops == 0;
        if !self.give_back(b, clean, PendingGiveBack::Release) {
            // Released when the cancelled receive has ended.
            return;
        }
        // Fixed mode: idle in the pool it holds no slot (one being reset
        // gives it back when the reset is done).
        self.shed_idle_backend_slot(b);
    }

    pub(super) fn park(
        &mut self,
        sid: SessionId,
        clean: bool,
        kept: Option<(Option<String>, Settings)>,
        reset: bool,
        ask_last_insert_id: bool,
    ) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if !slot.down_cancelled && slot.backend.is_some() {
            // A park that cancelled no idle read (it withdrew it, or the
            // login's): the debug hold is here instead, where the
            // connection goes back to the pool.
            self.debug_park_delay();
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        // The session checked for KILLs in flight before it parked
        // (try_clear_backend); this clears what is left.
        let _ = slot.conn.entry().clear_backend();
        let clean = clean && !slot.conn.entry().is_killed() && slot.relay_ops == 0;
        debug_assert_eq!(slot.relay_ops, 0, "parked with relay ops in flight");
        let ask = ask_last_insert_id.then_some(sid);
        let Some(b) = slot.backend.take() else {
            if let Some(session) = ask {
                self.pool_q.push_back(PoolEvent::LastInsertId {
                    session,
                    value: None,
                });
            }
            return;
        };
        // A large result's buffer goes back: idle in the pool a connection
        // holds at most an ordinary one. (The relay's idle read did this
        // before it was submitted; a park right after an answer no longer
        // submits one.)
        if let Some(conn) = self.backends.get_mut(b) {
            self.buffers.shrink(&mut conn.buf);
        }
        let park = PendingGiveBack::Park(Park { kept, reset, ask });
        if !self.give_back(b, clean, park) {
            // Parked when the cancelled receive has ended.
            return;
        }
        // Fixed mode: idle in the pool (kept as it is) it holds no slot.
        self.shed_idle_backend_slot(b);
    }

    /// The session gives backend `b` back (`asked`: released, parked,
    /// reset in place, or used for the pool's own exchange), `clean` as it
    /// says. Ring mode decides first what is left of the relay's receive
    /// (`ring_give_back`): while a receive being cancelled ends, the pool
    /// holds `asked` (false: not carried out yet). Otherwise the pool
    /// carries it out now, and the socket is shut first when the pool says
    /// so.
    pub(super) fn give_back(&mut self, b: BackendId, clean: bool, asked: PendingGiveBack) -> bool {
        let Some(clean) = self.ring_give_back(b, clean, asked.keeps_as_is()) else {
            self.pool.defer_give_back(b, asked);
            return false;
        };
        let mut events = Vec::new();
        if self
            .pool
            .carry_out_give_back(b, clean, asked, self.now, &mut events)
        {
            // The server spoke between commands: what runs next fails on
            // a shut socket, and the pool's failure path answers the
            // session.
            if let Some(io) = self.backends.get_mut(b) {
                io.shutdown();
            }
        }
        self.pool_q.extend(events);
        true
    }

    pub(super) fn backend_statement(
        &mut self,
        sid: SessionId,
        key: std::sync::Arc<machines::prepared::StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
    ) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let Some(b) = slot.backend else {
            let payload = wire::reply::err_payload(
                1105, // ER_UNKNOWN_ERROR
                "ringgate: no backend connection for a prepared statement",
            );
            return self.with_session(sid, |s, _, _, out| s.on_lease_failed(&payload, None, out));
        };
        // Ring mode: the relay's receive must end before the pool reads;
        // then the exchange runs at its last CQE.
        let asked = PendingGiveBack::Statement {
            key,
            want_response,
            types,
        };
        self.give_back(b, true, asked);
    }

    /// Transaction replay on the session's new connection: run by the
    /// pool (ring mode: once the receive a park left armed has ended).
    pub(super) fn replay_transaction(
        &mut self,
        sid: SessionId,
        statements: Vec<machines::tx_replay::Recorded>,
        then: Option<Vec<u8>>,
    ) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let Some(b) = slot.backend else {
            let payload = wire::reply::err_payload(
                1105, // ER_UNKNOWN_ERROR
                "ringgate: no backend connection for a transaction replay",
            );
            return self.with_session(sid, |s, _, _, out| s.on_lease_failed(&payload, None, out));
        };
        self.give_back(b, true, PendingGiveBack::Replay { statements, then });
    }

    pub(super) fn backend_statements_closed(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if let Some(b) = slot.backend {
            self.pool.statements_closed(b);
        }
    }

    pub(super) fn authenticated(&mut self, sid: SessionId, auth: Box<wire::users::Authenticated>) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let user = slot.session.authenticated_user().unwrap_or("");
        let identity = self.pool.intern(user, &auth);
        self.with_session(sid, |s, _, _, out| s.on_identity(identity, out));
    }

    pub(super) fn logged_in(&mut self, sid: SessionId, key: PoolKey) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if let Some(user) = slot.session.user() {
            slot.conn.entry().set_user(user);
        }
        self.pool.set_warm_key(key)
    }
}

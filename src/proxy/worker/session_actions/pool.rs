//! What a session asks of the pool and of its backend connection: leases,
//! give-backs (release, park, relet), prepared statements on the leased
//! connection, and the identity its connections log in with.

use std::sync::atomic::Ordering::Relaxed;

use crate::proxy::worker::ring_io::{PendingRelease, StatementAsk};
use crate::proxy::worker::*;

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
        setup: Box<LeaseSetup>,
    ) {
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
            if !self.ring_relet_backend(b) {
                // Reset when the cancelled receive has ended.
                return;
            }
            let mut events = Vec::new();
            self.pool.relet(b, self.now, &mut events);
            self.pool_q.extend(events);
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
        let Some(clean) = self.ring_give_back(b, clean, PendingRelease::Release) else {
            // Released when the cancelled receive has ended.
            return;
        };
        let mut events = Vec::new();
        self.pool.release(b, clean, self.now, &mut events);
        self.pool_q.extend(events);
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
        let park = PendingRelease::Park {
            kept: kept.clone(),
            reset,
            ask,
        };
        let Some(clean) = self.ring_give_back(b, clean, park) else {
            // Parked when the cancelled receive has ended.
            return;
        };
        self.park_in_pool(b, clean, kept, reset, ask);
        // Fixed mode: idle in the pool (kept as it is) it holds no slot.
        self.shed_idle_backend_slot(b);
    }

    /// The pool's side of a park whose connection is free to go back.
    fn park_in_pool(
        &mut self,
        b: BackendId,
        clean: bool,
        kept: Option<(Option<String>, Settings)>,
        reset: bool,
        ask: Option<SessionId>,
    ) {
        let now = self.now;
        let mut events = Vec::new();
        match ask {
            Some(session) if clean => {
                self.pool
                    .park_asking(b, session, kept, reset, now, &mut events)
            }
            Some(session) => {
                events.push(PoolEvent::LastInsertId {
                    session,
                    value: None,
                });
                self.pool.release(b, false, now, &mut events);
            }
            // Reset, then idle with no settings (a session with its own
            // gets them replayed).
            None if clean && reset => self.pool.release(b, true, now, &mut events),
            None if clean => self.pool.release_kept(b, kept, now, &mut events),
            None => self.pool.release(b, false, now, &mut events),
        }
        self.pool_q.extend(events);
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
        let ask = StatementAsk {
            key,
            want_response,
            types,
        };
        // Ring mode: the relay's receive must end before the pool reads;
        // then the exchange runs at its last CQE.
        let pending = PendingRelease::Statement(Box::new(ask.clone()));
        if !self.ring_own_backend(b, pending) {
            return;
        }
        let mut events = Vec::new();
        self.pool.statement(
            b,
            ask.key,
            ask.want_response,
            ask.types,
            self.now,
            &mut events,
        );
        self.pool_q.extend(events);
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

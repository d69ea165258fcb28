//! What the pool returns, carried out: each `PoolEvent` becomes an
//! operation on a backend's socket (`backend_io.rs`) or a call into the
//! session it names. Called only from `execute.rs`'s drive.

use super::*;

impl Worker {
    /// One line per event: a flat dispatch over named methods.
    pub(super) fn do_pool_event(&mut self, event: PoolEvent) {
        match event {
            PoolEvent::Open { key, request } => self.open_backend(key, request),
            PoolEvent::Io(bid, op) => self.backend_op(bid, op),
            PoolEvent::CheckIdle(bid) => self.check_idle_backend(bid),
            PoolEvent::Watch(bid) => self.watch_backend(bid),
            PoolEvent::ClosedIdle { session, thread } => self.closed_idle(session, thread),
            PoolEvent::Leased { session, backend } => self.leased(session, backend),
            PoolEvent::Relet {
                session,
                backend,
                schema,
            } => self.relet(session, backend, schema),
            PoolEvent::Statement { session, reply } => {
                self.with_session(session, |s, _, _, out| s.on_statement(reply, out));
            }
            PoolEvent::Replayed { session, outcome } => {
                self.with_session(session, |s, _, ctx, out| s.on_replayed(outcome, ctx, out));
            }
            PoolEvent::LastInsertId { session, value } => {
                self.with_session(session, |s, _, _, out| s.on_last_insert_id(value, out));
            }
            PoolEvent::LeaseFailed {
                session,
                err_payload,
                reject,
            } => {
                self.with_session(session, |s, _, _, out| {
                    s.on_lease_failed(&err_payload, reject, out)
                });
            }
            PoolEvent::ServerInfo {
                server_version,
                capabilities,
                ext_capabilities,
                login_status,
            } => self.server_info(server_version, capabilities, ext_capabilities, login_status),
        }
    }

    /// The pool's check of an idle connection it is about to lease: a
    /// peek that does not block, answered at once.
    fn check_idle_backend(&mut self, bid: BackendId) {
        let alive = self.backends.get(bid).is_some_and(ConnIo::idle_peer_alive);
        // The lease's own events (transaction pooling leases once per
        // statement): no allocation per lease.
        let mut events = std::mem::take(&mut self.lease_scratch);
        self.pool.idle_checked(bid, alive, self.now, &mut events);
        self.pool_q.extend(events.drain(..));
        self.lease_scratch = events;
    }

    fn watch_backend(&mut self, bid: BackendId) {
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        let token = Token::new(OpTag::BackendWatch, bid.index, bid.generation);
        let sqe = ops::poll_closed(b.fd(), token);
        b.op_started();
        self.submit(sqe);
    }

    fn closed_idle(&mut self, session: SessionId, thread: u32) {
        // Only a session that holds no connection and has used no other
        // since: the thread it knows as its own is gone, as a direct
        // connection's would be. Not with several servers: there a server
        // closing its connections is most often a failover, which a
        // session between transactions must not notice.
        if self.backend_addrs.len() > 1 {
            return;
        }
        let orphaned = self
            .sessions
            .slot(session)
            .is_some_and(|s| s.backend.is_none() && s.conn.entry().last_thread() == thread);
        if orphaned {
            self.with_session(session, |s, _, _, out| s.on_last_backend_closed(out));
        }
    }

    fn leased(&mut self, session: SessionId, backend: BackendId) {
        if self.sessions.slot(session).is_none() {
            let mut events = Vec::new();
            self.pool.release(backend, true, self.now, &mut events);
            self.pool_q.extend(events);
            return;
        }
        if self.ring_lease_waits(session, backend) {
            // Handed over once the receive a park left armed has ended
            // (ring mode).
            return;
        }
        let Some(slot) = self.sessions.slot(session) else {
            return;
        };
        slot.backend = Some(backend);
        let replica = self
            .pool
            .conn(backend)
            .is_some_and(|b| b.key().server.is_some());
        slot.session
            .set_backend_server(self.pool.server_of(backend), replica);
        // KILL <this session's id> now reaches this backend thread: a
        // writer's only. A KILL goes out on the killer's connection, to
        // the writer, where a replica's thread id names another thread;
        // a session reading on a replica counts as holding none.
        if let (Some(user), Some(b)) = (slot.session.user(), self.pool.conn(backend)) {
            if b.key().server.is_none() {
                slot.conn.entry().set_leased(user, b.thread_id());
            } else {
                slot.conn.entry().set_user(user);
            }
        }
        self.with_session(session, |s, io, ctx, out| {
            let buffered = io
                .buf
                .as_ref()
                .filter(|b| !b.in_flight())
                .map_or(&[][..], |b| b.filled());
            s.on_leased(buffered, ctx, out)
        });
    }

    fn relet(&mut self, session: SessionId, backend: BackendId, schema: Option<String>) {
        let Some(slot) = self.sessions.slot(session) else {
            let mut events = Vec::new();
            self.pool.release(backend, true, self.now, &mut events);
            self.pool_q.extend(events);
            return;
        };
        slot.backend = Some(backend);
        if let (Some(user), Some(b)) = (slot.session.user(), self.pool.conn(backend)) {
            slot.conn.entry().set_leased(user, b.thread_id());
        }
        self.with_session(session, |s, _, _, out| s.on_relet(schema, out));
    }

    /// A backend's greeting: what the greeting clients get mirrors.
    fn server_info(
        &mut self,
        server_version: String,
        capabilities: u32,
        ext_capabilities: u32,
        login_status: Option<u16>,
    ) {
        if self.template.capabilities.is_none() {
            tracing::info!(worker = self.id, version = %server_version, "backend reachable");
        }
        self.template.capabilities = Some(capabilities);
        self.template.ext_capabilities = ext_capabilities;
        self.shared.registry.set_backend_version(&server_version);
        if let Some(status) = login_status {
            self.shared.registry.set_backend_login_status(status);
        }
        self.template.server_version = server_version;
    }
}

//! Completions on a backend connection's own socket (connect, read, write,
//! TLS, the close watch), fed to its [`BackendConn`] machine, and what the
//! pool does with the machine's events: hand a logged-in connection to the
//! session it was opened or reset for, make it idle, or close it.

use super::*;

impl Pool {
    pub fn on_connect(
        &mut self,
        id: BackendId,
        res: Completion,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let timeout = self.cfg.connect_timeout;
        let mut bo = Vec::new();
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        // No account behind the key: the passthrough probe (see `refill`).
        let creds = self
            .identities
            .get(p.conn.key().identity)
            .map(|login| BackendCredentials {
                user: &login.user,
                credential: &login.credential,
                transport: &self.cfg.full_auth,
            });
        p.conn
            .on_connect(res, creds.as_ref(), timeout, now, &mut bo);
        self.apply(id, bo, now, out);
    }

    /// A read of the connection's own exchange ended: `filled` is what the
    /// driver's read buffer holds now (the bytes before this read's
    /// included), `capacity` that buffer's size.
    pub fn on_read(
        &mut self,
        id: BackendId,
        res: Completion,
        filled: &[u8],
        capacity: usize,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let mut bo = Vec::new();
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.conn.on_read(res, filled, capacity, now, &mut bo);
        self.apply(id, bo, now, out);
    }

    /// A connection's close watch completed (`res`: the poll's events, or
    /// its error). On an idle connection that is the server closing it: it is
    /// discarded now rather than found dead at its next lease, and the
    /// session that used it last hears of it ([`PoolEvent::ClosedIdle`]).
    /// A connection that is not idle (leased, or the pool's own exchange
    /// on it) sees the close in its own reads, but the watch, armed once,
    /// is spent: a relay's park may still win the race against that EOF
    /// (its cancel lands first), so the connection is marked and handled
    /// when it comes back ([`Pool::push_idle`]). One closed here completes
    /// the watch with the shutdown.
    pub fn on_watch(&mut self, id: BackendId, res: Completion, out: &mut Vec<PoolEvent>) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        if res.is_error() || p.conn.is_closed() {
            return;
        }
        if !p.conn.is_idle() {
            p.server_closed = true;
            return;
        }
        self.discard_server_closed(id, None, out);
    }

    /// The server closed connection `id` while no session held it (KILL
    /// CONNECTION of its thread, its wait_timeout, a shutdown): close it,
    /// and tell the session that used it last, whose `SELECT
    /// CONNECTION_ID()` named that thread ([`PoolEvent::ClosedIdle`]; the
    /// driver checks it has held no other since), unless it is `except`.
    pub(super) fn discard_server_closed(
        &mut self,
        id: BackendId,
        except: Option<SessionId>,
        out: &mut Vec<PoolEvent>,
    ) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        let thread = p.conn.thread_id();
        let session = p.last_session.filter(|s| Some(*s) != except);
        tracing::info!(
            worker = self.worker,
            thread,
            "the server closed the backend connection between commands (no session held it); discarded"
        );
        self.close(id, out);
        if let Some(session) = session {
            out.push(PoolEvent::ClosedIdle { session, thread });
        }
    }

    pub fn on_write(
        &mut self,
        id: BackendId,
        res: Completion,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let mut bo = Vec::new();
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.conn.on_write(res, &mut bo);
        self.apply(id, bo, now, out);
    }

    /// The TLS handshake of a connection's login ended (see
    /// [`BackendConn::on_tls`]).
    pub fn on_tls(
        &mut self,
        id: BackendId,
        result: Result<(), String>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let mut bo = Vec::new();
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.conn.on_tls(result, now, &mut bo);
        self.apply(id, bo, now, out);
    }

    /// Carry out what a connection asked for and answer its events.
    pub(super) fn apply(
        &mut self,
        id: BackendId,
        outs: Vec<BackendOut>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        for o in outs {
            match o {
                BackendOut::Op(op) => out.push(PoolEvent::Io(id, op)),
                BackendOut::Event(e) => self.on_event(id, e, now, out),
            }
        }
        self.sync_prepared(id);
    }

    /// A backend greeting arrived (a login or the startup probe): the
    /// server is up, and the workers learn what it offers. A login does
    /// not end the writer's failing window (`pool/writer.rs`): a server
    /// that takes logins and then resets every lease's setup is failing
    /// still; the first lease set up on a new connection ends it
    /// ([`Pool::writer_works`]).
    pub(super) fn server_answered(
        &mut self,
        server_version: String,
        capabilities: u32,
        ext_capabilities: u32,
        login_status: Option<u16>,
        out: &mut Vec<PoolEvent>,
    ) {
        self.retry_at = None;
        self.probed = true;
        out.push(PoolEvent::ServerInfo {
            server_version,
            capabilities,
            ext_capabilities,
            login_status,
        });
    }

    /// One arm per event, each a call: the work is in the helpers below.
    pub(super) fn on_event(
        &mut self,
        id: BackendId,
        event: BackendEvent,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        match event {
            BackendEvent::Ready {
                server_version,
                capabilities,
                ext_capabilities,
                status,
            } => {
                let status = Some(status);
                self.server_answered(server_version, capabilities, ext_capabilities, status, out);
                self.on_ready(id, now, out);
            }
            BackendEvent::Probed {
                server_version,
                capabilities,
                ext_capabilities,
            } => {
                self.writer_failing = None;
                self.server_answered(server_version, capabilities, ext_capabilities, None, out)
            }
            BackendEvent::OpenFailed {
                cause,
                login_refused,
            } => self.on_open_failed(id, cause, login_refused, now, out),
            BackendEvent::SchemaSelected => self.on_schema_selected(id, out),
            BackendEvent::SchemaRefused { err_payload } => {
                self.on_schema_refused(id, err_payload, now, out)
            }
            BackendEvent::ResetDone => self.on_reset_done(id, now, out),
            BackendEvent::LastInsertId(value) => self.on_last_insert_id(id, value, now, out),
            BackendEvent::Statement(reply) => self.on_statement_reply(id, reply, out),
            BackendEvent::Replayed(outcome) => self.on_replayed(id, outcome, out),
            BackendEvent::CausalWait { waited, outcome } => {
                self.on_causal_wait(id, waited, outcome, now, out)
            }
            BackendEvent::Tls(TlsNote::Unavailable) => {
                self.m().backend_tls_errors_total[BackendTlsError::Unavailable as usize]
                    .fetch_add(1, Relaxed);
            }
            BackendEvent::Tls(TlsNote::PlainFallback) => self.log_plain_fallback_once(),
            BackendEvent::Failed { cause, lost } => self.on_failed(id, &cause, lost, now, out),
        }
    }

    /// A connection is logged in: arm its close watch once, then hand it
    /// to the request it was opened for, or make it idle.
    fn on_ready(&mut self, id: BackendId, now: Instant, out: &mut Vec<PoolEvent>) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        if !std::mem::replace(&mut p.watched, true) {
            out.push(PoolEvent::Watch(id));
        }
        match p.opened_for.take() {
            Some(req) => self.give(id, req, None, now, out),
            None => {
                self.writer_works(id);
                self.make_idle(id, now, out)
            }
        }
    }

    fn on_open_failed(
        &mut self,
        id: BackendId,
        cause: String,
        login_refused: Option<Vec<u8>>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        let request = p.opened_for.take();
        let key = p.conn.key();
        match login_refused {
            // One user's account refused its credentials: only
            // that user's session hears of it, with the server's
            // own ERR; the backend itself is fine for everyone else.
            Some(err_payload) if !self.identities.is_shared() => {
                self.login_refused(key, request, err_payload, &cause, now, out)
            }
            _ => self.connect_failed(request, &cause, now, out),
        }
    }

    /// The lease's setup is done: the session has its connection, and the
    /// request kept for a retry is dropped. The first lease of a new
    /// connection shows that its server works.
    fn on_schema_selected(&mut self, id: BackendId, out: &mut Vec<PoolEvent>) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.opened_for = None;
        let fresh = p.place.take().is_none();
        if let Some(session) = p.leased_to {
            out.push(PoolEvent::Leased {
                session,
                backend: id,
            });
        }
        if fresh {
            self.writer_works(id);
        }
    }

    fn on_schema_refused(
        &mut self,
        id: BackendId,
        err_payload: Vec<u8>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let metrics = Arc::clone(&self.metrics);
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.set_busy(false, metrics.worker(self.worker));
        p.opened_for = None;
        p.place = None;
        if let Some(session) = p.leased_to.take() {
            out.push(PoolEvent::LeaseFailed {
                session,
                err_payload,
                reject: None,
            });
        }
        // The connection itself is fine (its schema is unchanged).
        self.push_idle(id, now, out);
    }

    fn on_reset_done(&mut self, id: BackendId, now: Instant, out: &mut Vec<PoolEvent>) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        match (std::mem::take(&mut p.relet), p.leased_to) {
            (true, Some(session)) => {
                // Leased again as it is: no schema to select, so
                // the only output is SchemaSelected, which the
                // Relet event replaces.
                let mut bo = Vec::new();
                p.conn.lease(None, None, None, now, &mut bo);
                debug_assert!(bo
                    .iter()
                    .all(|o| matches!(o, BackendOut::Event(BackendEvent::SchemaSelected))));
                out.push(PoolEvent::Relet {
                    session,
                    backend: id,
                    schema: p.conn.schema().map(str::to_owned),
                });
            }
            _ => self.push_idle(id, now, out),
        }
    }

    fn on_last_insert_id(
        &mut self,
        id: BackendId,
        value: u64,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let Some(asking) = self
            .slots
            .get_mut(id.index, id.generation)
            .and_then(|p| p.asking.take())
        else {
            return;
        };
        out.push(PoolEvent::LastInsertId {
            session: asking.session,
            value: Some(value),
        });
        if asking.reset {
            self.release(id, true, now, out);
        } else {
            self.release_kept(id, asking.kept, now, out);
        }
    }

    /// Count the re-prepares and evictions of a statement reply, and pass
    /// the reply to the session that holds the connection.
    fn on_statement_reply(
        &mut self,
        id: BackendId,
        reply: crate::backend::server_prepared::StatementReply,
        out: &mut Vec<PoolEvent>,
    ) {
        use crate::backend::server_prepared::StatementReply;
        let m = self.m();
        match &reply {
            StatementReply::Ready {
                prepared, evicted, ..
            } => {
                m.statement_reprepares_total
                    .fetch_add(u64::from(*prepared), Relaxed);
                m.statement_evictions_total
                    .fetch_add(*evicted as u64, Relaxed);
            }
            StatementReply::Refused { evicted, .. } => {
                m.statement_evictions_total
                    .fetch_add(*evicted as u64, Relaxed);
            }
        }
        let Some(session) = self
            .slots
            .get_mut(id.index, id.generation)
            .and_then(|p| p.leased_to)
        else {
            return;
        };
        out.push(PoolEvent::Statement { session, reply });
    }

    fn log_plain_fallback_once(&mut self) {
        if !self.plain_fallback_logged {
            self.plain_fallback_logged = true;
            tracing::info!(
                worker = self.worker,
                backend = %self.target_addr(),
                "the server offers no TLS (no CLIENT_SSL in its greeting): \
                 --backend-tls preferred logs in in plain; turn TLS on in the server, \
                 or use --backend-tls required to refuse plain connections"
            );
        }
    }

    /// A transaction replay ended: the session hears how; a connection
    /// whose replay did not match is closed (its machine closed it).
    fn on_replayed(
        &mut self,
        id: BackendId,
        outcome: crate::backend::tx_replay::ReplayOutcome,
        out: &mut Vec<PoolEvent>,
    ) {
        use crate::backend::tx_replay::ReplayOutcome;
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        let matched = matches!(outcome, ReplayOutcome::Replayed { .. });
        let session = if matched {
            p.leased_to
        } else {
            p.leased_to.take()
        };
        if let Some(session) = session {
            out.push(PoolEvent::Replayed { session, outcome });
        }
        if !matched {
            self.close(id, out);
        }
    }

    /// Connection `id` broke (`lost`: it went, see
    /// [`BackendEvent::Failed`]).
    fn on_failed(
        &mut self,
        id: BackendId,
        cause: &str,
        lost: bool,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        tracing::debug!(worker = self.worker, "backend connection lost: {cause}");
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        if let Some(asking) = p.asking.take() {
            out.push(PoolEvent::LastInsertId {
                session: asking.session,
                value: None,
            });
        }
        // A replica lost during a causal read's wait: the writer answers
        // the read (`pool/causal.rs`).
        if let Some(req) = p.causal_retry.take().and_then(|_| p.opened_for.take()) {
            p.leased_to = None;
            p.place = None;
            self.close(id, out);
            return self.lease_on_writer(req, now, out);
        }
        // Failed while it was leased: during the lease's setup (the
        // request is still here; nothing of the command was sent), or
        // with the session holding it (a prepare for its command, a
        // transaction replay): that session hears of it.
        if let Some(session) = p.leased_to.take() {
            let (request, place) = (p.opened_for.take(), p.place.take());
            self.close(id, out);
            return match request {
                Some(req) if lost => self.setup_lost(req, place, cause, now, out),
                _ => out.push(PoolEvent::LeaseFailed {
                    session,
                    err_payload: unavailable(self.target_addr(), cause),
                    reject: Some(RejectReason::BackendUnavailable),
                }),
            };
        }
        // The pool's own exchange on a connection no session holds
        // (a reset or a LAST_INSERT_ID() read after a park, a reset
        // for a waiter): the server closed it between the last
        // session's commands, which hears of it as from the watch.
        // (In session pooling that session has gone.)
        self.discard_server_closed(id, None, out);
    }

    pub(super) fn make_idle(&mut self, id: BackendId, now: Instant, out: &mut Vec<PoolEvent>) {
        if let Some(p) = self.slots.get_mut(id.index, id.generation) {
            p.conn.make_idle(now);
        }
        self.push_idle(id, now, out);
    }

    /// Connection `id` is idle now; one whose watch saw the server close
    /// it meanwhile is discarded instead, as the watch would have.
    pub(super) fn push_idle(&mut self, id: BackendId, _now: Instant, out: &mut Vec<PoolEvent>) {
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        if p.server_closed {
            return self.discard_server_closed(id, None, out);
        }
        if self.identities.is_revoked(p.conn.key().identity) {
            // Its user was removed by a reload while it was leased.
            return self.close(id, out);
        }
        if !self.slot(id).is_some_and(|p| self.belongs_to_target(p)) {
            // The writer changed while it was leased (`pool/writer.rs`).
            return self.close(id, out);
        }
        self.idle.push(id.index);
        self.m().backend_idle.fetch_add(1, Relaxed);
        self.dirty = true;
    }
}

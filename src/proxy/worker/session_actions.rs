//! The session actions the driver carries out: what a [`SessionAction`]
//! turns into (writes and reads on the client's socket, leases and
//! give-backs through the pool, legs started, metrics and log lines).
//! The completions that produce them are in `session_io.rs`.

use std::sync::atomic::Ordering::Relaxed;

use super::ring_io::{PendingRelease, Side};
use super::session_io::plain_buffered;
use super::*;

impl Worker {
    pub(super) fn do_session_action(&mut self, sid: SessionId, action: SessionAction) {
        let now = self.now;
        let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
            // The session is gone; a lease it asked for goes back.
            return;
        };
        match action {
            SessionAction::SendClient(bytes) => {
                match slot.leg.as_mut() {
                    Some(leg) => {
                        let out = slot.io.out.bytes_mut();
                        out.clear();
                        leg.leg.output(&bytes, out);
                    }
                    None => *slot.io.out.bytes_mut() = bytes,
                }
                slot.io.out_pos = 0;
                if slot.tls.is_some() {
                    slot.io.op_started();
                    return self.tls_send(sid, tls_io::Upper::Client, (0, 0));
                }
                let token = Token::new(OpTag::ClientWrite, sid.index, sid.generation);
                let fd = slot.io.fd();
                let sqe = slot.io.out.write_sqe(fd, 0, token.into());
                slot.io.op_started();
                self.submit(sqe);
            }
            SessionAction::ReadClient => {
                // Once the relay has read the client through the ring, every
                // later read does too (the multishot may still be armed);
                // so does a session parked between transactions from its
                // login on (transaction pooling), so that it waits holding
                // no buffer.
                let ring = slot.io.recv.is_some()
                    || (self.buffers.is_ring() && slot.session.is_relaying() && slot.leg.is_none());
                if !ring || !self.ring_read(sid, Side::Client) {
                    self.client_read(sid, false)
                }
            }
            SessionAction::Consume(n) => match slot.leg.as_mut() {
                Some(leg) => {
                    let plain = leg.up.bytes_mut();
                    plain.drain(..n.min(plain.len()));
                }
                None => {
                    if let Some(buf) = slot.io.buf.as_mut() {
                        buf.consume(n);
                    }
                }
            },
            SessionAction::ClearBuffer => {
                if let Some(leg) = slot.leg.as_mut() {
                    leg.up.bytes_mut().clear();
                }
                if let Some(buf) = slot.io.buf.as_mut() {
                    buf.clear();
                }
                self.ring_drop_client_chunk(sid);
            }
            SessionAction::ReplaceBuffered { len, with } => {
                // Ring mode: the command is rewritten in the client's own
                // buffer, not in the ring buffer (whose tail the kernel may
                // be filling).
                self.ring_stage_client(sid);
                let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
                    return;
                };
                let done = match slot.leg.as_mut() {
                    Some(leg) => {
                        let plain = leg.up.bytes_mut();
                        let fits = len <= plain.len();
                        if fits {
                            plain.splice(..len, with);
                        }
                        fits
                    }
                    None => slot
                        .io
                        .buf
                        .as_mut()
                        .is_some_and(|b| b.replace_prefix(len, &with)),
                };
                // The session checked that the rewrite fits.
                debug_assert!(done, "rewritten command does not fit the buffer");
            }
            SessionAction::Lease {
                key,
                schema,
                any_settings,
            } => {
                let mut events = Vec::new();
                let setup = any_settings.then(|| {
                    Box::new(LeaseSetup {
                        settings: ANY_SETTINGS,
                        ..LeaseSetup::default()
                    })
                });
                self.pool.lease(
                    LeaseRequest {
                        session: sid,
                        key,
                        schema,
                        setup,
                    },
                    now,
                    &mut events,
                );
                self.pool_q.extend(events);
            }
            SessionAction::LeaseForCommand { key, schema, setup } => {
                // Ring mode: the command that asked for a connection is
                // relayed from the session's own buffer once leased (a copy
                // per transaction's first read; the rest stays zero-copy).
                self.ring_stage_client(sid);
                self.metrics().tx_leases_total.fetch_add(1, Relaxed);
                let mut events = std::mem::take(&mut self.lease_scratch);
                self.pool.lease(
                    LeaseRequest {
                        session: sid,
                        key,
                        schema,
                        setup: Some(setup),
                    },
                    now,
                    &mut events,
                );
                self.pool_q.extend(events.drain(..));
                self.lease_scratch = events;
            }
            SessionAction::CancelLease => self.pool.cancel(sid),
            SessionAction::ExamineBuffer => {
                // Ring mode: the packet the relay stopped at is still in its
                // ring chunk; the session reads it from its own buffer.
                self.ring_stage_client(sid);
                let mut out = std::mem::take(&mut self.action_scratch);
                let ctx = worker_session_ctx!(self);
                if let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) {
                    let data = plain_buffered(&slot.leg, &slot.io);
                    slot.session.on_buffered(data, &ctx, &mut out);
                }
                self.session_q.extend(out.drain(..).map(|a| (sid, a)));
                self.action_scratch = out;
            }
            SessionAction::ResetBackend => {
                // The KILL registry names no backend thread until it is back
                // (the connection stays this session's: a KILL in flight
                // reaches nobody else).
                let _ = slot.conn.entry().clear_backend();
                if let Some(b) = slot.backend {
                    if !self.ring_relet_backend(b) {
                        // Reset when the cancelled receive has ended.
                        return;
                    }
                    let mut events = Vec::new();
                    self.pool.relet(b, now, &mut events);
                    self.pool_q.extend(events);
                }
            }
            SessionAction::Relay(RelayOp::ReadClient) => {
                if slot.leg.is_none() && slot.tls.is_none() && self.buffers.is_ring() {
                    if let Some(buf) = slot.io.buf.as_mut().filter(|b| !b.in_flight()) {
                        buf.clear();
                    }
                    self.buffers.shed(&mut slot.io.buf);
                    self.ring_read(sid, Side::Client);
                } else {
                    self.client_read(sid, true)
                }
            }
            SessionAction::Relay(RelayOp::WriteBackend { end }) => {
                if let Some(leg) = slot.leg.as_mut() {
                    // The write sends all of `up`: bytes behind `end` (a
                    // command the relay stopped at) wait beside it.
                    leg.hold_rest(end);
                }
                slot.up_write = (0, end);
                // Fixed mode: the answer is imminent; a backend read that
                // waits on the poll becomes a READ_FIXED, submitted first.
                self.hot_command_written(sid);
                self.link_up_write = true;
                self.relay_submit(sid, RelayIo::UpWrite { pos: 0, end });
                self.link_up_write = false;
            }
            SessionAction::Relay(RelayOp::ReadBackend) => {
                slot.down_cancelled = false;
                if !self.ring_read(sid, Side::Backend) {
                    self.relay_submit(sid, RelayIo::DownRead)
                }
            }
            SessionAction::Relay(RelayOp::WriteClient { end }) => {
                if slot.kill_answer.hold(end) {
                    return self.held_kill_answers.push((sid, now));
                }
                if slot.leg.is_none() {
                    slot.down_write = (0, end);
                    return self.relay_submit(sid, RelayIo::DownWrite { pos: 0, end });
                }
                // Behind a leg the write sends the framing of those bytes.
                match self.leg_frame_down(sid, end) {
                    Some(0) => self.leg_down_write_skipped(sid),
                    Some(framed) => {
                        if let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) {
                            slot.down_write = (0, framed);
                        }
                        self.relay_submit(
                            sid,
                            RelayIo::DownWrite {
                                pos: 0,
                                end: framed,
                            },
                        )
                    }
                    None => {}
                }
            }
            SessionAction::Relay(RelayOp::CancelReadBackend) => {
                slot.down_cancelled = true;
                // Debug builds: a test may hold the worker here (the window
                // a server close can land in; debug_park.rs).
                self.debug_park_delay();
                // Fixed mode: a read waiting on the backend's poll is not in
                // the kernel; it ends now, as a cancelled read would.
                if self.end_down_wait(sid, -libc::ECANCELED) {
                    return;
                }
                // The cancel names the read's user_data, not a socket or a
                // buffer: the read's own completion (-ECANCELED) is what
                // lets the backend go.
                let read = Token::new(OpTag::DownRead, sid.index, sid.generation);
                let target = self.ring_cancel_backend(sid).unwrap_or(read.into());
                let token = Token::new(OpTag::DownCancel, sid.index, sid.generation);
                self.submit(ops::cancel_user_data(target, token));
            }
            SessionAction::AbortBackend => {
                if let Some(b) = slot.backend.and_then(|b| self.pool.get_mut(b)) {
                    b.io.shutdown();
                }
                // Fixed mode: a read waiting on the backend's poll ends as
                // the shut-down socket would end it (EOF), without counting
                // on the wake-up.
                self.end_down_wait(sid, 0);
            }
            SessionAction::AbortClient => {
                let how = slot.io.shutdown();
                self.shutdown_client(sid, how);
            }
            SessionAction::Release { clean } => {
                // A KILL mapped to this thread still in flight: the
                // connection must not serve anyone else (registry.rs).
                let kill_in_flight = slot.conn.entry().clear_backend();
                if kill_in_flight && slot.backend.is_some() {
                    self.shared
                        .metrics
                        .worker(self.id)
                        .kill_fenced_total
                        .fetch_add(1, Relaxed);
                }
                // Killed: the server is closing this backend connection.
                let clean = clean && !slot.conn.entry().is_killed() && !kill_in_flight;
                if let Some(b) = slot.backend.take() {
                    debug_assert_eq!(slot.relay_ops, 0, "released with relay ops in flight");
                    let clean = clean && slot.relay_ops == 0;
                    let Some(clean) = self.ring_give_back(b, clean, PendingRelease::Release) else {
                        // Released when the cancelled receive has ended.
                        return;
                    };
                    let mut events = Vec::new();
                    self.pool.release(b, clean, now, &mut events);
                    self.pool_q.extend(events);
                    // Fixed mode: idle in the pool it holds no slot (one
                    // being reset gives it back when the reset is done).
                    self.shed_idle_backend_slot(b);
                }
            }
            SessionAction::Park {
                clean,
                kept,
                reset,
                ask_last_insert_id,
            } => {
                if !slot.down_cancelled && slot.backend.is_some() {
                    // A park that cancelled no idle read (it withdrew it, or
                    // the login's): the debug hold is here instead, where
                    // the connection goes back to the pool.
                    self.debug_park_delay();
                }
                let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
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
                // A large result's buffer goes back: idle in the pool a
                // connection holds at most an ordinary one. (The relay's
                // idle read did this before it was submitted; a park right
                // after an answer no longer submits one.)
                if let Some(conn) = self.pool.get_mut(b) {
                    self.buffers.shrink(&mut conn.io.buf);
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
                    // Reset, then idle with no settings (a session with
                    // its own gets them replayed).
                    None if clean && reset => self.pool.release(b, true, now, &mut events),
                    None if clean => self.pool.release_kept(b, kept, now, &mut events),
                    None => self.pool.release(b, false, now, &mut events),
                }
                self.pool_q.extend(events);
                // Fixed mode: idle in the pool (kept as it is) it holds no
                // slot.
                self.shed_idle_backend_slot(b);
            }
            SessionAction::Statement {
                key,
                want_response,
                types,
            } => {
                let Some(b) = slot.backend else {
                    let payload = wire::reply::err_payload(
                        1105, // ER_UNKNOWN_ERROR
                        "ringgate: no backend connection for a prepared statement",
                    );
                    return self
                        .with_session(sid, |s, _, _, out| s.on_lease_failed(&payload, None, out));
                };
                let ask = super::ring_io::StatementAsk {
                    key,
                    want_response,
                    types,
                };
                // Ring mode: the relay's receive must end before the pool
                // reads; then the exchange runs at its last CQE.
                let pending = PendingRelease::Statement(Box::new(ask.clone()));
                if !self.ring_own_backend(b, pending) {
                    return;
                }
                let mut events = Vec::new();
                self.pool
                    .statement(b, ask.key, ask.want_response, ask.types, now, &mut events);
                self.pool_q.extend(events);
            }
            SessionAction::BackendStatementsClosed => {
                if let Some(b) = slot.backend {
                    self.pool.statements_closed(b);
                }
            }
            SessionAction::Statements { count, bytes } => {
                let m = self.metrics();
                m.client_prepared_statements.fetch_add(count, Relaxed);
                m.client_prepared_statement_bytes.fetch_add(bytes, Relaxed);
            }
            SessionAction::PrepareRefused => {
                self.metrics()
                    .client_prepares_refused_total
                    .fetch_add(1, Relaxed);
            }
            SessionAction::ParkWaitsForKill => {
                self.shared
                    .metrics
                    .worker(self.id)
                    .kill_fenced_total
                    .fetch_add(1, Relaxed);
            }
            SessionAction::Pinned(reason) => {
                self.shared.metrics.worker(self.id).sessions_pinned_total[reason.index()]
                    .fetch_add(1, Relaxed);
                let user = slot.session.user().unwrap_or("");
                tracing::debug!(
                    worker = self.id,
                    peer = %slot.peer,
                    user,
                    blocked_by = reason.as_str(),
                    "session pinned to its backend connection (transaction pooling)"
                );
            }
            SessionAction::Redeliver(res) => {
                if slot.leg.is_some() {
                    // Behind a leg the session buffer is the leg's plain one.
                    return self.deliver_plain_read(sid, res);
                }
                // Ring mode: the bytes are still the client's current chunk.
                if self.ring_redeliver(sid, res) {
                    return;
                }
                self.with_session(sid, |s, io, ctx, out| {
                    let data = io.buf.as_ref().map_or(&[][..], |b| b.filled());
                    s.on_client_read(res, data, ctx, out)
                });
            }
            SessionAction::HalfClose => {
                let how = slot.io.shutdown_write();
                self.shutdown_client(sid, how);
            }
            SessionAction::WakeKilled(wake) => {
                slot.kill_answer = direct::KillAnswer::Awaited;
                let killer = slot.conn.entry().id();
                self.wake_killed(wake, killer)
            }
            SessionAction::StartClientLeg(kind) => self.start_client_leg(sid, kind),
            SessionAction::StartTls => self.start_tls(sid),
            SessionAction::Close => {
                slot.closing = true;
                // Also ends a poll the client waits on (POLLHUP).
                let how = slot.io.shutdown_for_close();
                self.shutdown_client(sid, how);
                // A backend read waiting on its poll ends now (no wake-up
                // is sure to come for it).
                self.end_down_wait(sid, 0);
                let Some(slot) = self.sessions.get_mut(sid.index, sid.generation) else {
                    return;
                };
                if slot.relay_ops > 0 {
                    // Normally unreachable (the relay releases first); make
                    // the relay's operations on the backend complete now.
                    if let Some(b) = slot.backend.and_then(|b| self.pool.get_mut(b)) {
                        b.io.shutdown();
                    }
                }
                self.try_finish_session(sid);
            }
            SessionAction::Authenticated(auth) => {
                let user = slot.session.authenticated_user().unwrap_or("");
                let identity = self.pool.intern(user, &auth);
                self.with_session(sid, |s, _, _, out| s.on_identity(identity, out));
            }
            SessionAction::LoggedIn { key } => {
                if let Some(user) = slot.session.user() {
                    slot.conn.entry().set_user(user);
                }
                self.pool.set_warm_key(key)
            }
            SessionAction::Connected { elapsed } => self.metrics().record_connect(elapsed),
            SessionAction::CommandStarted => {
                self.metrics().commands_total.fetch_add(1, Relaxed);
            }
            SessionAction::Reject(reason) => self.metrics().reject(reason),
            SessionAction::Auth(path) => {
                self.metrics().client_auth_total[path.index()].fetch_add(1, Relaxed);
            }
            SessionAction::IdleCut { held, limit } => {
                self.shared.metrics.worker(self.id).sessions_idle_cut_total[held.index()]
                    .fetch_add(1, Relaxed);
                if self.log_limiter.allow(now) {
                    let user = slot.session.user().unwrap_or("");
                    tracing::warn!(
                        worker = self.id,
                        peer = %slot.peer,
                        connection_id = slot.conn.entry().id(),
                        user,
                        "session cut: idle for {} ({limit:?}) holding {} while other clients waited for a backend connection; it got ERR 4031",
                        held.flag(),
                        held.describe(),
                    );
                }
            }
            SessionAction::Log(msg) => {
                if self.log_limiter.allow(now) {
                    let user = slot.session.user().unwrap_or("");
                    tracing::info!(worker = self.id, peer = %slot.peer, user, "connection failed: {msg}");
                }
            }
        }
    }
}

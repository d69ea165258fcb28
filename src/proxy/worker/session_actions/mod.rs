//! The session actions the driver carries out: what a [`SessionAction`]
//! turns into, grouped by whom the session asks: its client's socket
//! (`client.rs`), the relay's operations on both sockets (`relay.rs`), the
//! pool and its backend connection (`pool.rs`), and the counters and log
//! lines (`report.rs`). The completions that produce them are in
//! `session_io.rs`.

mod client;
mod pool;
mod relay;
mod report;

use super::*;

impl Worker {
    /// One line per action: a flat dispatch (each arm is a named method of
    /// the role it belongs to), kept whole so that the list of actions reads
    /// as one table.
    pub(super) fn do_session_action(&mut self, sid: SessionId, action: SessionAction) {
        if self.sessions.slot(sid).is_none() {
            // The session is gone; a lease it asked for goes back.
            return;
        }
        match action {
            SessionAction::SendClient(bytes) => self.send_client(sid, bytes),
            SessionAction::ReadClient => self.read_client(sid),
            SessionAction::Consume(n) => self.consume_client(sid, n),
            SessionAction::ClearBuffer => self.clear_client_buffer(sid),
            SessionAction::ReplaceBuffered { len, with } => self.replace_buffered(sid, len, with),
            SessionAction::Lease {
                key,
                schema,
                any_settings,
            } => self.lease(sid, key, schema, any_settings),
            SessionAction::LeaseForCommand {
                key,
                schema,
                setup,
                route,
            } => self.lease_for_command(sid, key, schema, setup, route),
            SessionAction::CancelLease => self.pool.cancel(sid),
            SessionAction::ExamineBuffer => self.examine_buffer(sid),
            SessionAction::ResetBackend => self.reset_backend(sid),
            SessionAction::Relay(op) => self.relay_op(sid, op),
            SessionAction::AbortBackend => self.abort_backend(sid),
            SessionAction::AbortClient => self.abort_client(sid),
            SessionAction::Release { clean } => self.release_backend(sid, clean),
            SessionAction::Park {
                clean,
                kept,
                reset,
                ask_last_insert_id,
            } => self.park(sid, clean, kept, reset, ask_last_insert_id),
            SessionAction::Statement {
                key,
                want_response,
                types,
            } => self.backend_statement(sid, key, want_response, types),
            SessionAction::BackendStatementsClosed => self.backend_statements_closed(sid),
            SessionAction::Statements { count, bytes } => self.count_statements(count, bytes),
            SessionAction::PrepareRefused => self.count_prepare_refused(),
            SessionAction::ParkWaitsForKill => self.count_kill_fenced(),
            SessionAction::Pinned(reason) => self.report_pinned(sid, reason),
            SessionAction::Redeliver(res) => self.redeliver(sid, res),
            SessionAction::HalfClose => self.half_close(sid),
            SessionAction::WakeKilled(wake) => self.wake_killed_by(sid, wake),
            SessionAction::StartClientLeg(kind) => self.start_client_leg(sid, kind),
            SessionAction::StartTls => self.start_tls(sid),
            SessionAction::Close => self.close_session(sid),
            SessionAction::Authenticated(auth) => self.authenticated(sid, auth),
            SessionAction::LoggedIn { key } => self.logged_in(sid, key),
            SessionAction::Connected { elapsed } => self.metrics().record_connect(elapsed),
            SessionAction::CommandStarted => self.count_command(),
            SessionAction::Reject(reason) => self.metrics().reject(reason),
            SessionAction::Auth(path) => self.count_auth(path),
            SessionAction::IdleCut { held, limit } => self.report_idle_cut(sid, held, limit),
            SessionAction::WriterLost(outcome) => {
                self.metrics().writer_lost_total[outcome.index()]
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            SessionAction::ReplayTransaction { statements, then } => {
                self.replay_transaction(sid, statements, then)
            }
            SessionAction::TransactionReplay(result) => {
                self.metrics().transaction_replays_total[result.index()]
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            SessionAction::ReplayOff(off) => {
                tracing::debug!(session = ?sid, "transaction replay is off for this transaction: {off:?}");
            }
            SessionAction::Log(msg) => self.report_failure(sid, &msg),
        }
    }
}

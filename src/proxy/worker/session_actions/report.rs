//! What a session reports: counters and log lines.

use std::sync::atomic::Ordering::Relaxed;

use crate::proxy::worker::*;
use machines::idle_cut::Held;
use machines::multiplex::PinReason;
use metrics::AuthPath;

impl Worker {
    pub(super) fn count_statements(&mut self, count: i64, bytes: i64) {
        let m = self.metrics();
        m.client_prepared_statements.fetch_add(count, Relaxed);
        m.client_prepared_statement_bytes.fetch_add(bytes, Relaxed);
    }

    pub(super) fn count_prepare_refused(&mut self) {
        self.metrics()
            .client_prepares_refused_total
            .fetch_add(1, Relaxed);
    }

    pub(super) fn count_kill_fenced(&mut self) {
        self.metrics().kill_fenced_total.fetch_add(1, Relaxed);
    }

    pub(super) fn count_command(&mut self) {
        self.metrics().commands_total.fetch_add(1, Relaxed);
    }

    pub(super) fn count_auth(&mut self, path: AuthPath) {
        self.metrics().client_auth_total[path.index()].fetch_add(1, Relaxed);
    }

    pub(super) fn report_pinned(&mut self, sid: SessionId, reason: PinReason) {
        self.metrics().sessions_pinned_total[reason.index()].fetch_add(1, Relaxed);
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let user = slot.session.user().unwrap_or("");
        tracing::debug!(
            worker = self.id,
            peer = %slot.peer,
            user,
            blocked_by = reason.as_str(),
            "session pinned to its backend connection (transaction pooling)"
        );
    }

    pub(super) fn report_idle_cut(&mut self, sid: SessionId, held: Held, limit: Duration) {
        self.metrics().sessions_idle_cut_total[held.index()].fetch_add(1, Relaxed);
        if !self.log_limiter.allow(self.now) {
            return;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
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

    pub(super) fn report_failure(&mut self, sid: SessionId, msg: &str) {
        if !self.log_limiter.allow(self.now) {
            return;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let user = slot.session.user().unwrap_or("");
        tracing::info!(worker = self.id, peer = %slot.peer, user, "connection failed: {msg}");
    }
}

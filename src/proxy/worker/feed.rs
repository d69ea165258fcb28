//! A session machine fed one event: what it returns is queued for
//! `execute.rs`'s drive.

use super::*;

impl Worker {
    /// Run one session handler and queue what it returns.
    pub(super) fn with_session(
        &mut self,
        sid: SessionId,
        f: impl FnOnce(&mut Session, &ConnIo, &SessionCtx, &mut Vec<SessionAction>),
    ) {
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        if let Some(slot) = self.sessions.slot(sid) {
            f(&mut slot.session, &slot.io, &ctx, &mut out);
        }
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
    }
}

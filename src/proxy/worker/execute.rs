//! Execute: a session machine fed one event, what the machines asked for
//! carried out in order, and every SQE handed to the ring in one place.
//! The handlers call down into this file; only `drive` calls back up, into
//! the operations (`session_actions/`, `backend_io::do_pool_event`).

use super::*;

impl Worker {
    /// Hand an SQE to the ring. The ring never drops one: an SQE it cannot
    /// queue comes back as a failed completion, which the owner's normal
    /// error path rolls back.
    pub(super) fn submit(&mut self, sqe: Sqe) {
        self.flush_held_write();
        self.ring.push(sqe);
    }

    /// Carry out everything the machines asked for, in order.
    pub(super) fn drive(&mut self) {
        loop {
            if let Some((sid, action)) = self.session_q.pop_front() {
                self.do_session_action(sid, action);
            } else if let Some(event) = self.pool_q.pop_front() {
                self.do_pool_event(event);
            } else {
                return self.flush_held_write();
            }
        }
    }

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

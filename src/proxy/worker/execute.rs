//! Execute: what the machines asked for, carried out in order, and every
//! SQE handed to the ring in one place.

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
}

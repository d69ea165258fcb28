//! Execute: what the machines asked for, carried out in order. `drive`
//! is the one way up from the handlers into the operations
//! (`session_actions/`, `pool_events.rs`), which call down into `feed.rs`
//! and `submit.rs`.

use super::*;

impl Worker {
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

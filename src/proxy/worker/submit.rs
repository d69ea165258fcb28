//! Every SQE handed to the ring, in one place: the bottom of the driver,
//! which calls nothing above it.

use super::*;

impl Worker {
    /// Hand an SQE to the ring. The ring never drops one: an SQE it cannot
    /// queue comes back as a failed completion, which the owner's normal
    /// error path rolls back.
    pub(super) fn submit(&mut self, sqe: Sqe) {
        self.flush_held_write();
        self.ring.push(sqe);
    }

    /// A held write whose read did not come (it waits on a poll, or
    /// something else is submitted first) goes out alone, as it would have
    /// without linking: its CQE completes it.
    pub(super) fn flush_held_write(&mut self) {
        if let Some((_, write, _)) = self.held_write.take() {
            self.ring.push(write);
        }
    }
}

//! The connection table: the worker's sessions, found by the id their
//! operations' tokens carry.

use super::SessionSlot;
use machines::ids::SessionId;
use machines::slab::Slab;

/// A method on the slab, not on the worker, so that a caller may hold the
/// slot while it uses the worker's other fields (the pool, the buffers).
pub(super) trait SessionTable {
    /// The session's slot, if this id's session is still there.
    fn slot(&mut self, sid: SessionId) -> Option<&mut SessionSlot>;
}

impl SessionTable for Slab<SessionSlot> {
    fn slot(&mut self, sid: SessionId) -> Option<&mut SessionSlot> {
        self.get_mut(sid.index, sid.generation)
    }
}

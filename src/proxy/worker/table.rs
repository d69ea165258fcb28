//! The connection table: the worker's sessions, found by the id their
//! operations' tokens carry.

use super::SessionSlot;
use crate::proxy::conn_io::ConnIo;
use machines::ids::SessionId;
use machines::registry::Registration;
use machines::session::Session;
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

impl SessionSlot {
    /// A client's slot as accepted: no backend, no layer, nothing in flight.
    pub(super) fn new(
        conn: Registration,
        io: ConnIo,
        session: Session,
        counted: bool,
        peer: String,
    ) -> Self {
        SessionSlot {
            conn,
            io,
            session,
            backend: None,
            relay_ops: 0,
            up_write: (0, 0),
            linked_write: None,
            down_write: (0, 0),
            counted,
            peer,
            closing: false,
            leg: None,
            tls: None,
            idle_wait: Default::default(),
            down_wait: Default::default(),
            hot: Default::default(),
            down_cancelled: false,
            kill_answer: Default::default(),
            kill_waiter: None,
        }
    }
}

//! The driver's half of each backend connection: its I/O (`ConnIo`:
//! socket, read buffer, the count of operations that name the socket),
//! found by the [`BackendId`] the pool gave the connection. The pool keeps
//! the connection's machine under the same id and holds no socket; an
//! entry is made where the driver calls `Pool::insert_opening` and dropped
//! where it calls `Pool::remove` (`backend_io.rs`), so the two halves live
//! and die together, and the socket closes (dropping its `ConnIo`) only
//! once no operation names it.

use crate::proxy::conn_io::ConnIo;
use machines::ids::BackendId;

/// One entry: the generation of the id it was made for, and the I/O.
pub(super) type BackendEntry = (u32, ConnIo);

/// Indexed by the pool's slab index, which the pool reuses only after the
/// driver removed both halves: a `Vec` of the pool's size, no hashing on
/// the relay path.
#[derive(Default)]
pub(super) struct BackendTable {
    entries: Vec<Option<BackendEntry>>,
    len: usize,
}

impl BackendTable {
    /// The I/O of connection `id`, which the pool has just made.
    pub(super) fn insert(&mut self, id: BackendId, io: ConnIo) {
        let index = id.index as usize;
        if self.entries.len() <= index {
            self.entries.resize_with(index + 1, || None);
        }
        let old = self.entries[index].replace((id.generation, io));
        debug_assert!(old.is_none(), "backend slot {index} made twice");
        self.len += 1;
    }

    pub(super) fn get(&self, id: BackendId) -> Option<&ConnIo> {
        match self.entries.get(id.index as usize)? {
            Some((generation, io)) if *generation == id.generation => Some(io),
            _ => None,
        }
    }

    pub(super) fn get_mut(&mut self, id: BackendId) -> Option<&mut ConnIo> {
        match self.entries.get_mut(id.index as usize)? {
            Some((generation, io)) if *generation == id.generation => Some(io),
            _ => None,
        }
    }

    /// Take connection `id`'s I/O out (the pool forgets its machine at
    /// the same place).
    pub(super) fn remove(&mut self, id: BackendId) -> Option<ConnIo> {
        let entry = self.entries.get_mut(id.index as usize)?;
        if entry.as_ref().is_none_or(|(g, _)| *g != id.generation) {
            return None;
        }
        self.len -= 1;
        entry.take().map(|(_, io)| io)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Socket, Type};

    fn id(index: u32, generation: u32) -> BackendId {
        BackendId { index, generation }
    }

    #[test]
    fn an_entry_is_found_only_by_the_id_it_was_made_for() {
        let (a, _b) = Socket::pair(Domain::UNIX, Type::STREAM, None).unwrap();
        let mut t = BackendTable::default();
        t.insert(id(2, 5), ConnIo::new(a, None));
        assert!(t.get(id(2, 5)).is_some());
        assert!(t.get(id(2, 4)).is_none(), "an older occupant's id");
        assert!(t.get_mut(id(1, 0)).is_none());
        assert!(t.remove(id(2, 6)).is_none(), "a newer occupant's id");
        assert_eq!(t.len(), 1);
        assert!(t.remove(id(2, 5)).is_some());
        assert_eq!(t.len(), 0);
        assert!(t.get(id(2, 5)).is_none());
    }
}

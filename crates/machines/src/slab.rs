//! Slot storage with generations: an index is reused after removal, but the
//! generation changes, so a completion carrying the old (index, generation)
//! is recognised as stale and dropped.

/// The generation bits a completion token carries (the driver's token
/// packs index, generation and operation into io_uring's 64-bit user data;
/// the driver asserts at compile time that this matches its encoding).
pub const GENERATION_MASK: u32 = 0x00FF_FFFF;

/// Bumps a generation so it stays inside the bits the token carries.
pub fn next_generation(g: u32) -> u32 {
    g.wrapping_add(1) & GENERATION_MASK
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab::new()
    }
}

pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    len: usize,
}

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// The (index, generation) the next `insert` returns.
    pub fn next_key(&self) -> (u32, u32) {
        match self.free.last() {
            Some(&index) => (
                index,
                next_generation(self.entries[index as usize].generation),
            ),
            None => (self.entries.len() as u32, 0),
        }
    }

    /// Insert and return (index, generation).
    pub fn insert(&mut self, value: T) -> (u32, u32) {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let e = &mut self.entries[index as usize];
            e.generation = next_generation(e.generation);
            e.value = Some(value);
            (index, e.generation)
        } else {
            let index = self.entries.len() as u32;
            self.entries.push(Entry {
                generation: 0,
                value: Some(value),
            });
            (index, 0)
        }
    }

    pub fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut T> {
        let e = self.entries.get_mut(index as usize)?;
        if e.generation != generation {
            return None;
        }
        e.value.as_mut()
    }

    pub fn get(&self, index: u32) -> Option<&T> {
        self.entries.get(index as usize)?.value.as_ref()
    }

    pub fn generation(&self, index: u32) -> u32 {
        self.entries.get(index as usize).map_or(0, |e| e.generation)
    }

    /// The entry at `index`, whatever its generation (for sweeps over
    /// `indexes()`).
    pub fn get_index_mut(&mut self, index: u32) -> Option<&mut T> {
        self.entries.get_mut(index as usize)?.value.as_mut()
    }

    /// Remove the entry only if it is still the same occupant.
    pub fn remove_checked(&mut self, index: u32, generation: u32) -> Option<T> {
        if self.generation(index) != generation {
            return None;
        }
        self.remove(index)
    }

    pub fn remove(&mut self, index: u32) -> Option<T> {
        let v = self.entries.get_mut(index as usize)?.value.take()?;
        self.free.push(index);
        self.len -= 1;
        Some(v)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The occupied entries, borrowed (no allocation).
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| e.value.as_ref())
    }

    /// Indexes of occupied entries (a snapshot, so the caller may mutate).
    pub fn indexes(&self) -> Vec<u32> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.value.is_some())
            .map(|(i, _)| i as u32)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_generation_is_rejected() {
        let mut s = Slab::new();
        let (i, g) = s.insert("a");
        s.remove(i);
        let (j, h) = s.insert("b");
        assert_eq!(i, j);
        assert_ne!(g, h);
        assert!(s.get_mut(i, g).is_none());
        assert_eq!(s.get_mut(j, h), Some(&mut "b"));
    }
}

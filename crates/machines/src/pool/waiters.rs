//! The sessions waiting for a backend connection: one FIFO queue per
//! [`PoolKey`], so that what a key can be served with (its own idle or
//! resetting connections) goes to that key's oldest waiter without looking
//! at anyone else's, and a queue in arrival order across all keys for the
//! timeouts (one `--backend-wait-timeout` for everyone: arrival order is
//! deadline order).
//!
//! Every operation is O(1) or O(keys), never O(waiters): with 10,000
//! clients queued, a lease used to scan the whole queue for its key.
//! Removing a session from the middle (it closed, or timed out while
//! younger ones of its key were served) only forgets it in `live`; its
//! entries stay in the two queues, dead, until they reach a front, where
//! they are dropped. An entry reaches the arrival queue's front by its
//! deadline at the latest, so the dead ones are bounded by the arrivals of
//! one wait timeout.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Instant;

use crate::ids::{LeaseRequest, PoolKey, SessionId};

struct Queued {
    seq: u64,
    request: LeaseRequest,
    since: Instant,
}

struct Arrival {
    seq: u64,
    session: SessionId,
    since: Instant,
    deadline: Instant,
}

#[derive(Default)]
pub struct Waiters {
    /// Each key's waiters, oldest first; the front entry is always live,
    /// and a key with no live waiter has no entry.
    by_key: HashMap<PoolKey, VecDeque<Queued>>,
    /// All waiters in arrival (= deadline) order, dead ones included.
    arrivals: VecDeque<Arrival>,
    /// The waiting sessions: the sequence number of their live entries and
    /// their key. An entry whose seq is not here is dead.
    live: HashMap<SessionId, (u64, PoolKey)>,
    next_seq: u64,
}

impl Waiters {
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Queue `request` (waiting since `now`, failed at `deadline`). A
    /// session waits for one connection at a time: queued again, its older
    /// entry is forgotten.
    pub fn push(&mut self, request: LeaseRequest, now: Instant, deadline: Instant) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let session = request.session;
        let key = request.key;
        if let Some((_, old_key)) = self.live.insert(session, (seq, key)) {
            self.prune(old_key);
        }
        self.arrivals.push_back(Arrival {
            seq,
            session,
            since: now,
            deadline,
        });
        self.by_key.entry(key).or_default().push_back(Queued {
            seq,
            request,
            since: now,
        });
        // The replaced entry may have been the front of this very key.
        self.prune(key);
    }

    /// Do sessions of `key` wait?
    pub fn has_key(&self, key: PoolKey) -> bool {
        self.by_key.contains_key(&key)
    }

    /// The oldest waiter of `key`.
    pub fn front(&self, key: PoolKey) -> Option<&LeaseRequest> {
        self.by_key
            .get(&key)
            .and_then(|q| q.front())
            .map(|q| &q.request)
    }

    /// The oldest waiter of `key`, copied, with its arrival number and
    /// since when it waits.
    pub fn front_entry(&self, key: PoolKey) -> Option<(LeaseRequest, u64, Instant)> {
        let q = self.by_key.get(&key)?.front()?;
        Some((q.request.clone(), q.seq, q.since))
    }

    /// An arrival number for a request that did not queue (it was leased
    /// at once), so that it can be put back in arrival order
    /// ([`Waiters::requeue`]) if its lease falls through later.
    pub fn reserve_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }

    /// Put back a waiter that [`Waiters::pop_front`] took off (arrival
    /// number `seq`, waiting since `since`, failed at `deadline`) where it
    /// was: a lease taken for it fell through. Nothing if the session
    /// queued again meanwhile (its newer entry stands). O(log waiters) to
    /// find the place; the insert moves the entries in front of it, few,
    /// since it was the front of its key.
    pub fn requeue(&mut self, request: LeaseRequest, seq: u64, since: Instant, deadline: Instant) {
        let session = request.session;
        let key = request.key;
        if self.live.contains_key(&session) {
            return;
        }
        self.live.insert(session, (seq, key));
        // Its arrival entry stays (dead) until it reaches the front, so it
        // is usually still there.
        let at = self.arrivals.partition_point(|a| a.seq < seq);
        if self.arrivals.get(at).is_none_or(|a| a.seq != seq) {
            self.arrivals.insert(
                at,
                Arrival {
                    seq,
                    session,
                    since,
                    deadline,
                },
            );
        }
        let queue = self.by_key.entry(key).or_default();
        let at = queue.partition_point(|q| q.seq < seq);
        queue.insert(
            at,
            Queued {
                seq,
                request,
                since,
            },
        );
        self.prune(key);
    }

    /// Take the oldest waiter of `key` off the queue (it is served):
    /// since when it waited.
    pub fn pop_front(&mut self, key: PoolKey) -> Option<(LeaseRequest, Instant)> {
        let queue = self.by_key.get_mut(&key)?;
        let q = queue.pop_front()?;
        self.live.remove(&q.request.session);
        self.prune(key);
        Some((q.request, q.since))
    }

    /// Forget `session` wherever it waits; true if it did.
    pub fn remove(&mut self, session: SessionId) -> bool {
        match self.live.remove(&session) {
            Some((_, key)) => {
                self.prune(key);
                true
            }
            None => false,
        }
    }

    /// The keys with waiters, each with the arrival number of its oldest:
    /// a min-heap, so that whatever is handed out across keys (units of the
    /// cap) goes first-come-first-served. O(keys).
    pub fn fronts(&self) -> BinaryHeap<std::cmp::Reverse<(u64, KeyOrd)>> {
        self.by_key
            .iter()
            .filter_map(|(key, q)| Some(std::cmp::Reverse((q.front()?.seq, KeyOrd(*key)))))
            .collect()
    }

    /// The arrival number of `key`'s oldest waiter.
    pub fn front_seq(&self, key: PoolKey) -> Option<u64> {
        self.by_key.get(&key)?.front().map(|q| q.seq)
    }

    /// Take every waiter whose deadline is not after `now` off the queues:
    /// the session and since when it waited, oldest first.
    pub fn expire(&mut self, now: Instant) -> Vec<(SessionId, Instant)> {
        let mut gone = Vec::new();
        while let Some(a) = self.arrivals.front() {
            let alive = self.is_live(a.session, a.seq);
            if alive && a.deadline > now {
                break;
            }
            let (session, since) = (a.session, a.since);
            self.arrivals.pop_front();
            if alive {
                self.remove(session);
                gone.push((session, since));
            }
        }
        gone
    }

    /// Whether the entry numbered `seq` is `session`'s live one.
    fn is_live(&self, session: SessionId, seq: u64) -> bool {
        self.live.get(&session).is_some_and(|(s, _)| *s == seq)
    }

    /// Drop dead entries from the front of `key`'s queue (and the queue
    /// when nothing live is left in it).
    fn prune(&mut self, key: PoolKey) {
        let Some(queue) = self.by_key.get_mut(&key) else {
            return;
        };
        while let Some(q) = queue.front() {
            if self
                .live
                .get(&q.request.session)
                .is_some_and(|(s, _)| *s == q.seq)
            {
                return;
            }
            queue.pop_front();
        }
        self.by_key.remove(&key);
    }
}

/// A [`PoolKey`] in a heap: ties on the arrival number never happen (it is
/// unique), so any order will do.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyOrd(pub PoolKey);

impl PartialOrd for KeyOrd {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyOrd {
    fn cmp(&self, _other: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(collation: u8) -> PoolKey {
        PoolKey {
            collation,
            ..PoolKey::default_warm()
        }
    }

    fn req(i: u32, k: PoolKey) -> LeaseRequest {
        LeaseRequest {
            session: SessionId {
                index: i,
                generation: 0,
            },
            key: k,
            schema: None,
            setup: None,
        }
    }

    fn session(r: Option<&LeaseRequest>) -> Option<u32> {
        r.map(|r| r.session.index)
    }

    fn fronts(w: &Waiters) -> Vec<u8> {
        let mut heap = w.fronts();
        std::iter::from_fn(|| heap.pop().map(|std::cmp::Reverse((_, k))| k.0.collation)).collect()
    }

    #[test]
    fn each_key_is_its_own_fifo_and_keys_take_turns_by_their_oldest() {
        let t = Instant::now();
        let d = t + Duration::from_secs(5);
        let mut w = Waiters::default();
        for (i, c) in [(1, 1), (2, 2), (3, 1), (4, 2)] {
            w.push(req(i, key(c)), t, d);
        }
        assert_eq!(w.len(), 4);
        assert_eq!(fronts(&w), vec![1, 2]);
        assert_eq!(w.pop_front(key(1)).map(|(r, _)| r.session.index), Some(1));
        // Key 2's oldest (2) is now older than key 1's (3).
        assert_eq!(fronts(&w), vec![2, 1]);
        assert_eq!(session(w.front(key(1))), Some(3));
        assert!(w.remove(SessionId {
            index: 3,
            generation: 0
        }));
        assert!(!w.has_key(key(1)), "nobody of key 1 is left");
        assert_eq!(w.front(key(1)), None);
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn a_removed_waiter_in_the_middle_is_skipped_and_expires_nobody() {
        let t = Instant::now();
        let mut w = Waiters::default();
        for i in 1..=3 {
            w.push(req(i, key(1)), t, t + Duration::from_secs(i.into()));
        }
        w.remove(SessionId {
            index: 2,
            generation: 0,
        });
        assert_eq!(w.pop_front(key(1)).map(|(r, _)| r.session.index), Some(1));
        assert_eq!(session(w.front(key(1))), Some(3), "2 was skipped");
        let later = t + Duration::from_secs(10);
        let gone: Vec<u32> = w.expire(later).iter().map(|(s, _)| s.index).collect();
        assert_eq!(gone, vec![3], "1 was served and 2 removed: only 3 expires");
        assert!(w.is_empty());
        assert!(
            w.arrivals.is_empty() && w.by_key.is_empty(),
            "nothing dead kept"
        );
    }

    #[test]
    fn a_session_queued_again_waits_once_at_the_back() {
        let t = Instant::now();
        let d = t + Duration::from_secs(5);
        let mut w = Waiters::default();
        w.push(req(1, key(1)), t, d);
        w.push(req(2, key(1)), t, d);
        w.push(req(1, key(2)), t, d);
        assert_eq!(w.len(), 2);
        assert_eq!(session(w.front(key(1))), Some(2));
        assert_eq!(session(w.front(key(2))), Some(1));
        let gone = w.expire(d);
        assert_eq!(gone.len(), 2, "each live waiter once");
    }
}

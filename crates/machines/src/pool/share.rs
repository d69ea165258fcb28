//! How the workers' pools share `--backend-max-connections`.
//!
//! Each worker has its own pool, and a connection never moves between
//! workers (its socket is in one worker's ring). The cap is one global
//! counter ([`BackendShare::try_reserve`]): whichever worker reserves a unit
//! first keeps it for as long as the connection lives, and under load none
//! goes idle, so the split made by the start-up race stays. Measured: 16
//! connections split 5/11 while SO_REUSEPORT had put 137 and 163 clients on
//! the two workers, so one worker's clients waited about twice as long.
//!
//! So each worker also publishes what it holds and how many of its clients
//! wait, and the pools follow two rules (`pool/upkeep.rs`):
//! - a worker does not open a connection while another worker's clients
//!   wait, the free units are too few for them, and that worker holds
//!   fewer connections than it does (the free unit is the other's to take);
//!   nor does it open warm ones (`--backend-pool-size`) then;
//! - with the cap reached, a worker holding at least two more connections
//!   than a worker whose clients wait closes one it gets back instead of
//!   handing it to its own next waiter; a worker with none of its own
//!   waiting gives back an idle one. The other worker sees the free unit at
//!   its next batch of completions or tick and opens one.
//!
//! "Two more" is what keeps it from oscillating: after a move the donor
//! still holds at least as many as the receiver, so the receiver never
//! owes one back. Under an even load the split settles within one
//! connection of equal, and nothing moves after that; each move costs a TCP
//! connect and a login, once.

use std::sync::atomic::{AtomicUsize, Ordering};

/// One worker's published demand.
#[derive(Debug, Default)]
struct Demand {
    /// Units of the cap it holds (opening, open or closing connections).
    held: AtomicUsize,
    /// Its sessions waiting for a connection now.
    waiting: AtomicUsize,
    /// Of those, the ones held back by their account's share
    /// (`pool/account_share.rs`): no unit of the cap would serve them.
    held_back: AtomicUsize,
}

/// The global cap and each worker's demand; shared by all workers.
#[derive(Debug)]
pub struct BackendShare {
    /// Open (or opening) backend connections across workers.
    open: AtomicUsize,
    workers: Box<[Demand]>,
}

impl BackendShare {
    pub fn new(workers: usize) -> BackendShare {
        BackendShare {
            open: AtomicUsize::new(0),
            workers: (0..workers.max(1)).map(|_| Demand::default()).collect(),
        }
    }

    /// Reserve one unit of the cap; false when it is reached.
    pub fn try_reserve(&self, max: usize) -> bool {
        crate::try_reserve(&self.open, max)
    }

    pub fn unreserve(&self) {
        crate::unreserve(&self.open);
    }

    /// Units reserved across workers.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Worker `me` now holds `held` units and has `waiting` sessions
    /// queued, `held_back` of them by their account's share.
    pub fn publish(&self, me: usize, held: usize, waiting: usize, held_back: usize) {
        if let Some(d) = self.workers.get(me) {
            d.held.store(held, Ordering::Relaxed);
            d.waiting.store(waiting, Ordering::Relaxed);
            d.held_back.store(held_back, Ordering::Relaxed);
        }
    }

    /// Sessions waiting for a backend connection on all workers that a
    /// connection freed by anyone could serve: not those held back by
    /// their own account's share, for whom cutting another user's idle
    /// session would free nothing they may use.
    pub fn waiting_for_room(&self) -> usize {
        self.workers
            .iter()
            .map(|d| {
                let waiting = d.waiting.load(Ordering::Relaxed);
                waiting.saturating_sub(d.held_back.load(Ordering::Relaxed))
            })
            .sum()
    }

    /// The fewest units held by another worker whose sessions wait (None:
    /// no other worker has a session waiting).
    pub fn neediest_other(&self, me: usize) -> Option<usize> {
        self.others_waiting(me).map(|(held, _)| held)
    }

    /// The other workers with sessions waiting: the fewest units one of
    /// them holds, and how many of their sessions wait in all.
    fn others_waiting(&self, me: usize) -> Option<(usize, usize)> {
        let mut fewest: Option<usize> = None;
        let mut waiting = 0;
        for (i, d) in self.workers.iter().enumerate() {
            let w = d.waiting.load(Ordering::Relaxed);
            if i == me || w == 0 {
                continue;
            }
            waiting += w;
            let held = d.held.load(Ordering::Relaxed);
            fewest = Some(fewest.map_or(held, |f| f.min(held)));
        }
        fewest.map(|f| (f, waiting))
    }

    /// Are the free units of the cap (`max` minus those reserved) too few
    /// for the other workers' waiting sessions, and does one of those
    /// workers hold fewer than `held` (None: whatever it holds)? Then a
    /// unit this worker would take is theirs. With room for everyone
    /// nobody defers: a worker's sessions also wait for a connection being
    /// reset, which needs no unit.
    pub fn room_is_theirs(&self, me: usize, held: Option<usize>, max: usize) -> bool {
        let Some((fewest, waiting)) = self.others_waiting(me) else {
            return false;
        };
        let free = max.saturating_sub(self.open());
        free <= waiting && held.is_none_or(|mine| fewest < mine)
    }

    /// Would a unit this worker frees (it holds `held`, the cap is
    /// reached) be another worker's, by [`BackendShare::room_is_theirs`]?
    /// Then closing a connection to make room for its own waiter would
    /// only hand the unit over, outside the rules above.
    pub fn freed_unit_is_theirs(&self, me: usize, held: usize, max: usize) -> bool {
        let Some((fewest, waiting)) = self.others_waiting(me) else {
            return false;
        };
        let free = max.saturating_sub(self.open()) + 1;
        free <= waiting && fewest + 1 < held
    }
}

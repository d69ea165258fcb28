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
//! wait, and the pools follow two rules (`pool_upkeep.rs`):
//! - a worker does not open a connection while another worker's clients
//!   wait and that worker holds fewer connections than it does (the free
//!   unit is the other's to take);
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
        super::super::try_reserve(&self.open, max)
    }

    pub fn unreserve(&self) {
        super::super::unreserve(&self.open);
    }

    /// Units reserved across workers.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Worker `me` now holds `held` units and has `waiting` sessions queued.
    pub fn publish(&self, me: usize, held: usize, waiting: usize) {
        if let Some(d) = self.workers.get(me) {
            d.held.store(held, Ordering::Relaxed);
            d.waiting.store(waiting, Ordering::Relaxed);
        }
    }

    /// The fewest units held by another worker whose sessions wait (None:
    /// no other worker has a session waiting).
    pub fn neediest_other(&self, me: usize) -> Option<usize> {
        self.workers
            .iter()
            .enumerate()
            .filter(|&(i, d)| i != me && d.waiting.load(Ordering::Relaxed) > 0)
            .map(|(_, d)| d.held.load(Ordering::Relaxed))
            .min()
    }
}

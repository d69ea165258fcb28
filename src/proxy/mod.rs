//! The proxy: per-worker event loops that accept clients, log them in,
//! lease them a pooled backend connection and relay bytes between the two
//! through the read buffers.
//!
//! - [`worker`]: the io_uring event loop of one worker thread.
//! - `session`: the client session state machine (login, relay, close).
//! - `backend`: backend connections (login, reset) and the keyed pool.
//! - `slab`: generation-checked storage for sessions and backends.

mod backend;
mod session;
mod slab;
pub mod worker;

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, RwLock};

use crate::config::Config;
use crate::metrics::Metrics;
use crate::mysql::Users;

/// The little state every worker sees. Everything else is per worker.
///
/// Cross-thread state is the exception, and each field says why it must be
/// global: limits that the operator sets for the whole process, the users
/// (reloaded in one place), and the shutdown flag.
pub struct Shared {
    pub config: Config,
    pub metrics: Arc<Metrics>,
    /// `--users-file`; swapped whole on reload, read once per login.
    pub users: RwLock<Arc<Users>>,
    /// Open client sessions across workers, against `--max-connections`.
    pub clients: AtomicUsize,
    /// Open (or opening) backend connections across workers, against
    /// `--backend-max-connections`.
    pub backends: AtomicUsize,
    /// Set by SIGTERM/SIGINT: stop accepting and drain.
    pub shutdown: AtomicBool,
}

impl Shared {
    pub fn users(&self) -> Arc<Users> {
        match self.users.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }
}

/// Reserve one unit of a global limit; false when it is reached.
fn try_reserve(counter: &AtomicUsize, max: usize) -> bool {
    use std::sync::atomic::Ordering::AcqRel;
    counter
        .fetch_update(AcqRel, std::sync::atomic::Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

fn unreserve(counter: &AtomicUsize) {
    counter.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
}

//! ringgate's sans-IO machines: typed events in, operations out.
//!
//! - [`session`]: one client (greeting, login, waiting, relay, closing);
//! - [`relay`]: one session paired with its backend, full duplex;
//! - [`client_leg`]: the transform between the client's socket and the
//!   plain packet stream (the compressed protocol), when negotiated;
//! - [`backend`]: one backend connection (connect, login, idle, leased,
//!   resetting, closing);
//! - [`pool`]: the backend connections' machines (no socket: the driver
//!   keeps their I/O), the idle list, the waiters, the check of an idle
//!   connection at its lease (an operation) and ring mode's give-back;
//! - [`multiplex`] and [`tx_settings`]: transaction pooling's decisions;
//! - [`causal`]: causal reads (the GTIDs a session waits for on a replica);
//! - [`prepared`]: prepared statements across pooled connections;
//! - [`registry`]: proxy connection ids and KILL across workers.
//!
//! Leaf types shared by the machines live in [`ids`]; [`presentation`]
//! decides how the greeting presents the proxy (MySQL or MariaDB);
//! [`identity`] maps a pool key's backend identity to its account and
//! credential; [`slab`] stores sessions and backends with generations. No
//! machine imports another except the session, which owns its relay, and
//! the pool, which owns its backend connections.
//!
//! No I/O happens here: this crate depends on no libc, socket2 or io-uring
//! (`cargo tree -p machines` shows it), and the driver in the `ringgate`
//! binary carries out every operation the machines return.
#![forbid(unsafe_code)]

pub mod backend;
pub mod causal;
pub mod client_charset;
pub mod client_leg;
pub mod completion;
pub mod connect_attrs;
pub mod identity;
pub mod idle_cut;
pub mod ids;
pub mod monitor;
pub mod multiplex;
pub mod pool;
pub mod prepared;
pub mod presentation;
pub mod registry;
pub mod relay;
pub mod replica_choice;
pub mod session;
pub mod slab;
pub mod statement_limits;
pub mod tx_replay;
pub mod tx_settings;

#[cfg(test)]
mod test_packets;

use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

/// Reserve one unit of a global limit; false when it is reached.
pub fn try_reserve(counter: &AtomicUsize, max: usize) -> bool {
    use std::sync::atomic::Ordering::{AcqRel, Acquire};
    counter
        .fetch_update(AcqRel, Acquire, |n| (n < max).then_some(n + 1))
        .is_ok()
}

pub fn unreserve(counter: &AtomicUsize) {
    counter.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
}

/// At most a few log lines per second for per-connection failures, so a
/// storm of bad clients cannot flood the disk.
#[derive(Default)]
pub struct LogLimiter {
    window_start: Option<Instant>,
    count: u32,
}

impl LogLimiter {
    const WINDOW: Duration = Duration::from_secs(1);
    const PER_WINDOW: u32 = 20;

    pub fn allow(&mut self, now: Instant) -> bool {
        match self.window_start {
            Some(t) if now.duration_since(t) < Self::WINDOW => {
                self.count += 1;
                self.count <= Self::PER_WINDOW
            }
            _ => {
                self.window_start = Some(now);
                self.count = 1;
                true
            }
        }
    }
}

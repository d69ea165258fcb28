//! How far behind its primary a replica is, and whether it is stale.
//!
//! Seconds_Behind_Master is NULL when the SQL thread is stopped (the
//! replica falls behind with every write) and when the IO thread is stopped
//! or reconnecting (it has applied all it received and looks caught up, but
//! receives nothing): NULL is never 0. So the lag is the larger of SBM and
//! an estimate from GTIDs: the time since the replica's applied position
//! (`@@gtid_slave_pos`) last covered the writer's `@@gtid_binlog_pos`,
//! compared per domain by seq_no. And a replica whose IO or SQL thread is
//! not running is stale whatever the numbers say: it may be behind writes
//! it has not even heard of.

use std::time::{Duration, Instant};

use wire::gtid::GtidPos;

use super::{Channel, IoThread, Role, ServerStatus, State};

/// Why a replica's data may be older than any lag figure says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// The IO thread is not running (stopped, or reconnecting to a primary
    /// that is gone): nothing new arrives.
    IoThread { io: IoThread, last_io_errno: u32 },
    /// The SQL thread is stopped: nothing received is applied.
    SqlStopped,
    /// read_only, but replicating from nobody (no SHOW ALL SLAVES STATUS row).
    NotReplicating,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::IoThread { io, last_io_errno } => write!(
                f,
                "IO thread {} (Last_IO_Errno {last_io_errno})",
                io.as_str()
            ),
            Stale::SqlStopped => f.write_str("SQL thread stopped"),
            Stale::NotReplicating => f.write_str("read_only but not replicating"),
        }
    }
}

/// A replica's lag; all None for a primary or a server that is down.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lag {
    /// Behind its primary by this much; None is unknown, never 0.
    pub seconds: Option<Duration>,
    pub stale: Option<Stale>,
    /// Transactions of the writer's binlog not applied here (summed over
    /// domains; None without a writer to compare with).
    pub behind_transactions: Option<u64>,
}

impl Lag {
    /// Whether reads may go here under `max_lag`: not stale, and a lag
    /// that is known and small enough.
    pub fn within(&self, max_lag: Duration) -> bool {
        self.stale.is_none() && self.seconds.is_some_and(|s| s <= max_lag)
    }
}

/// The replica's lag after this round; updates when it was last caught up.
pub(super) fn assess(s: &mut ServerStatus, writer_pos: Option<&GtidPos>, now: Instant) -> Lag {
    let usable = matches!(s.health.state, State::Up | State::Shunned);
    let (true, Role::Replica, Some(probe)) = (usable, s.role, s.probe.as_ref()) else {
        return Lag::default();
    };
    let behind = writer_pos.map(|w| probe.gtid_slave_pos.behind(w));
    let estimate = match behind {
        Some(0) => {
            s.caught_up_at = Some(now);
            Some(Duration::ZERO)
        }
        Some(_) => s.caught_up_at.map(|t| now.saturating_duration_since(t)),
        None => None,
    };
    let sbm = seconds_behind(&probe.channels);
    let seconds = match (sbm, estimate) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    Lag {
        seconds,
        stale: stale(&probe.channels),
        behind_transactions: behind,
    }
}

/// The largest SBM over the channels; NULL on any of them is unknown.
fn seconds_behind(channels: &[Channel]) -> Option<Duration> {
    let mut worst = None;
    for c in channels {
        let secs = c.seconds_behind?;
        worst = worst.max(Some(Duration::from_secs(secs)));
    }
    worst
}

fn stale(channels: &[Channel]) -> Option<Stale> {
    if channels.is_empty() {
        return Some(Stale::NotReplicating);
    }
    if let Some(c) = channels.iter().find(|c| c.io != IoThread::Yes) {
        return Some(Stale::IoThread {
            io: c.io,
            last_io_errno: c.last_io_errno,
        });
    }
    channels
        .iter()
        .any(|c| !c.sql_running)
        .then_some(Stale::SqlStopped)
}

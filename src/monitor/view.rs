//! What the monitor publishes for the workers: a `ClusterView` (each
//! server's state, role, lag, and which one takes writes) with a generation
//! number. The monitor swaps in a whole new `Arc<ClusterView>` behind an
//! `RwLock`, then bumps an `AtomicU64`; a `ViewReader` keeps its `Arc` and
//! takes the lock only when the generation moved, so a worker's look costs
//! one atomic load while nothing changes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use machines::monitor::{Lag, Role, State};

/// One server as the monitor last saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerView {
    pub address: SocketAddr,
    pub state: State,
    pub role: Role,
    pub writer: bool,
    pub lag: Lag,
    /// From the config: its share of reads and its lag bound.
    pub weight: u32,
    pub max_lag: Option<Duration>,
}

impl ServerView {
    /// Up, a replica, with a share of reads, and not too far behind (no
    /// `max-lag`: not stale and the lag known).
    pub fn may_read(&self) -> bool {
        let fresh = match self.max_lag {
            Some(max) => self.lag.within(max),
            None => self.lag.stale.is_none() && self.lag.seconds.is_some(),
        };
        self.state == State::Up && self.role == Role::Replica && self.weight > 0 && fresh
    }
}

/// Every server, in configured order.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterView {
    /// Grows by one with every published change; 0 before the first round.
    pub generation: u64,
    pub servers: Vec<ServerView>,
}

impl ClusterView {
    /// The server that takes writes, if one qualifies.
    pub fn writer(&self) -> Option<&ServerView> {
        self.servers.iter().find(|s| s.writer)
    }
}

/// The published view, shared by the monitor and the workers.
#[derive(Debug)]
pub struct ClusterViewCell {
    current: RwLock<Arc<ClusterView>>,
    generation: AtomicU64,
}

impl ClusterViewCell {
    pub fn new(servers: Vec<ServerView>) -> Arc<ClusterViewCell> {
        Arc::new(ClusterViewCell {
            current: RwLock::new(Arc::new(ClusterView {
                generation: 0,
                servers,
            })),
            generation: AtomicU64::new(0),
        })
    }

    /// Publishes `servers` if they differ from the current view; returns
    /// whether it did.
    pub fn publish(&self, servers: Vec<ServerView>) -> bool {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if current.servers == servers {
            return false;
        }
        let generation = current.generation + 1;
        *current = Arc::new(ClusterView {
            generation,
            servers,
        });
        // After the swap: a reader that sees the new number finds the view.
        self.generation.store(generation, Ordering::Release);
        true
    }

    /// The current view (takes the read lock).
    pub fn load(&self) -> Arc<ClusterView> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A reader for one worker.
    pub fn reader(self: &Arc<Self>) -> ViewReader {
        ViewReader {
            cell: Arc::clone(self),
            cached: self.load(),
        }
    }
}

/// One worker's cached view.
#[derive(Debug)]
pub struct ViewReader {
    cell: Arc<ClusterViewCell>,
    cached: Arc<ClusterView>,
}

impl ViewReader {
    /// The latest view: the cached one unless the generation moved.
    pub fn get(&mut self) -> &ClusterView {
        if self.cell.generation() != self.cached.generation {
            self.cached = self.cell.load();
        }
        &self.cached
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use machines::monitor::Stale;

    fn server(port: u16, role: Role, writer: bool) -> ServerView {
        ServerView {
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            state: State::Up,
            role,
            writer,
            lag: Lag {
                seconds: Some(Duration::ZERO),
                stale: None,
                behind_transactions: Some(0),
            },
            weight: 1,
            max_lag: Some(Duration::from_secs(5)),
        }
    }

    #[test]
    fn a_reader_sees_each_change_and_only_changes_bump_the_generation() {
        let cell = ClusterViewCell::new(vec![]);
        let mut reader = cell.reader();
        assert_eq!(reader.get().generation, 0);
        assert!(reader.get().writer().is_none());
        let round = vec![
            server(3441, Role::Primary, true),
            server(3442, Role::Replica, false),
        ];
        assert!(cell.publish(round.clone()));
        assert!(!cell.publish(round.clone()));
        assert_eq!(cell.generation(), 1);
        let view = reader.get();
        assert_eq!(view.generation, 1);
        assert_eq!(view.writer().map(|s| s.address.port()), Some(3441));
        assert!(view.servers[1].may_read());
        // Failover: the replica becomes the writer.
        let mut next = round;
        next[0].state = State::Down;
        next[0].writer = false;
        next[1].role = Role::Primary;
        next[1].writer = true;
        assert!(cell.publish(next));
        assert_eq!(reader.get().writer().map(|s| s.address.port()), Some(3442));
        assert_eq!(reader.get().generation, 2);
    }

    #[test]
    fn a_stale_or_unknown_replica_takes_no_reads() {
        let mut s = server(3442, Role::Replica, false);
        assert!(s.may_read());
        s.lag.stale = Some(Stale::SqlStopped);
        assert!(!s.may_read());
        s.lag.stale = None;
        s.lag.seconds = None;
        assert!(!s.may_read());
        s.lag.seconds = Some(Duration::from_secs(6));
        assert!(!s.may_read());
        s.max_lag = None;
        assert!(s.may_read());
        s.weight = 0;
        assert!(!s.may_read());
    }
}

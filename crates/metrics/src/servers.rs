//! Per-server series of a replicated cluster: what the monitor thread last
//! published for each `--backend` (state, role, writer, lag, checks). The
//! monitor replaces the whole list after each round; a scrape copies it.
//! Empty, and no series, without a monitor.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// One server as the monitor last saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSample {
    /// Its address, the `server` label.
    pub server: String,
    /// "up", "down" or "shunned".
    pub state: &'static str,
    /// "primary", "replica" or "unknown".
    pub role: &'static str,
    pub writer: bool,
    /// A replica's lag: `Some(NaN)` when unknown; None for a server that
    /// is not a replica (no lag series).
    pub lag_seconds: Option<f64>,
    /// A replica whose IO or SQL thread is not running.
    pub stale: bool,
    /// The last check's duration; NaN before the first.
    pub check_seconds: f64,
    pub checks_failed_total: u64,
}

/// The label values a state or role series takes, so that every server
/// has one series per value (1 for its own, 0 for the others).
pub const SERVER_STATES: [&str; 3] = ["up", "down", "shunned"];
pub const SERVER_ROLES: [&str; 3] = ["primary", "replica", "unknown"];

/// The list the monitor publishes, and the statements routed to each
/// server (`--read-write-split`).
#[derive(Debug, Default)]
pub struct ServerTable {
    servers: Mutex<Vec<ServerSample>>,
    routed: OnceLock<Vec<Routed>>,
    /// Backend connections per server, all workers (several servers).
    pooled: OnceLock<Vec<(String, AtomicI64)>>,
}

/// One server's routed-statement counters.
#[derive(Debug)]
struct Routed {
    server: String,
    /// Leases for a statement the split classed as a read, and for any
    /// other.
    reads: AtomicU64,
    writes: AtomicU64,
}

/// One server's routed statements in a scrape: (server, reads, writes).
pub type RoutedSample = (String, u64, u64);

impl ServerTable {
    /// Replaces the list: once per monitor round, never from a worker.
    pub fn publish(&self, servers: Vec<ServerSample>) {
        *self.lock() = servers;
    }

    pub fn snapshot(&self) -> Vec<ServerSample> {
        self.lock().clone()
    }

    /// `--read-write-split`: count statements per server from now on
    /// (`servers` in `--backend` order); once, at start.
    pub fn init_routed(&self, servers: Vec<String>) {
        let table = servers
            .into_iter()
            .map(|server| Routed {
                server,
                reads: AtomicU64::new(0),
                writes: AtomicU64::new(0),
            })
            .collect();
        let _ = self.routed.set(table);
    }

    /// A statement's lease went to server `index` (`--backend` order):
    /// `read` if the split classed it as a read (a replica's, or the
    /// writer's when no replica qualified).
    pub fn count_routed(&self, index: usize, read: bool) {
        if let Some(r) = self.routed.get().and_then(|t| t.get(index)) {
            let c = if read { &r.reads } else { &r.writes };
            c.fetch_add(1, Relaxed);
        }
    }

    /// Several servers: count each server's backend connections from now
    /// on (`servers` in `--backend` order); once, at start.
    pub fn init_pooled(&self, servers: Vec<String>) {
        let table = servers
            .into_iter()
            .map(|s| (s, AtomicI64::new(0)))
            .collect();
        let _ = self.pooled.set(table);
    }

    /// A pool opened (`delta` 1) or freed (-1) a connection to server
    /// `index`.
    pub fn count_pooled(&self, index: usize, delta: i64) {
        if let Some((_, n)) = self.pooled.get().and_then(|t| t.get(index)) {
            n.fetch_add(delta, Relaxed);
        }
    }

    /// (server, backend connections) for each server.
    pub fn pooled_snapshot(&self) -> Vec<(String, i64)> {
        self.pooled.get().map_or_else(Vec::new, |t| {
            t.iter()
                .map(|(s, n)| (s.clone(), n.load(Relaxed)))
                .collect()
        })
    }

    pub fn routed_snapshot(&self) -> Vec<RoutedSample> {
        self.routed.get().map_or_else(Vec::new, |t| {
            t.iter()
                .map(|r| {
                    (
                        r.server.clone(),
                        r.reads.load(Relaxed),
                        r.writes.load(Relaxed),
                    )
                })
                .collect()
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ServerSample>> {
        self.servers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BufferMode, Metrics};

    fn sample(server: &str, state: &'static str, role: &'static str) -> ServerSample {
        ServerSample {
            server: server.into(),
            state,
            role,
            writer: false,
            lag_seconds: None,
            stale: false,
            check_seconds: 0.002,
            checks_failed_total: 0,
        }
    }

    #[test]
    fn no_monitor_no_series() {
        let m = Metrics::new(1, BufferMode::Fixed);
        assert!(!m.render().contains("ringgate_server_"));
    }

    #[test]
    fn each_server_has_its_state_role_lag_and_checks() {
        let m = Metrics::new(1, BufferMode::Fixed);
        let mut primary = sample("127.0.0.1:3441", "up", "primary");
        primary.writer = true;
        let mut lagging = sample("127.0.0.1:3442", "up", "replica");
        lagging.lag_seconds = Some(7.0);
        let mut stale = sample("127.0.0.1:3443", "down", "replica");
        stale.lag_seconds = Some(f64::NAN);
        stale.stale = true;
        stale.checks_failed_total = 4;
        m.servers().publish(vec![primary, lagging, stale]);
        let text = m.render();
        for line in [
            "ringgate_server_state{server=\"127.0.0.1:3441\",state=\"up\"} 1",
            "ringgate_server_state{server=\"127.0.0.1:3441\",state=\"down\"} 0",
            "ringgate_server_state{server=\"127.0.0.1:3443\",state=\"down\"} 1",
            "ringgate_server_role{server=\"127.0.0.1:3442\",role=\"replica\"} 1",
            "ringgate_server_writer{server=\"127.0.0.1:3441\"} 1",
            "ringgate_server_writer{server=\"127.0.0.1:3442\"} 0",
            "ringgate_server_lag_seconds{server=\"127.0.0.1:3442\"} 7.0",
            "ringgate_server_lag_seconds{server=\"127.0.0.1:3443\"} NaN",
            "ringgate_server_stale{server=\"127.0.0.1:3443\"} 1",
            "ringgate_server_stale{server=\"127.0.0.1:3442\"} 0",
            "ringgate_server_check_seconds{server=\"127.0.0.1:3441\"} 0.002",
            "ringgate_server_checks_failed_total{server=\"127.0.0.1:3443\"} 4",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // A primary has no lag and no staleness.
        assert!(!text.contains("ringgate_server_lag_seconds{server=\"127.0.0.1:3441\"}"));
        assert!(!text.contains("ringgate_server_stale{server=\"127.0.0.1:3441\"}"));
    }

    #[test]
    fn routed_statements_are_counted_per_server_and_route() {
        let m = Metrics::new(1, BufferMode::Fixed);
        assert!(!m.render().contains("ringgate_routed_total"));
        m.servers()
            .init_routed(vec!["127.0.0.1:3441".into(), "127.0.0.1:3442".into()]);
        m.servers().count_routed(0, false);
        m.servers().count_routed(1, true);
        m.servers().count_routed(1, true);
        m.servers().count_routed(7, true);
        m.servers()
            .init_pooled(vec!["127.0.0.1:3441".into(), "127.0.0.1:3442".into()]);
        m.servers().count_pooled(1, 1);
        m.servers().count_pooled(1, 1);
        m.servers().count_pooled(1, -1);
        let text = m.render();
        for line in [
            "ringgate_routed_total{server=\"127.0.0.1:3441\",route=\"write\"} 1",
            "ringgate_routed_total{server=\"127.0.0.1:3441\",route=\"read\"} 0",
            "ringgate_routed_total{server=\"127.0.0.1:3442\",route=\"read\"} 2",
            "ringgate_server_backend_connections{server=\"127.0.0.1:3441\"} 0",
            "ringgate_server_backend_connections{server=\"127.0.0.1:3442\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}

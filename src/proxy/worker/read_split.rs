//! `--read-write-split`: where a statement's lease goes. The session says
//! whether its command may run on a replica (`machines::multiplex::Route`,
//! from `machines/multiplex/read_route.rs`); here the worker turns that
//! into a lease request: it reads the monitor's view (one atomic load
//! while nothing changed), keeps the replicas that may take reads now (up,
//! a replica, within their max-lag, a weight above 0), and lets its
//! chooser (`machines::replica_choice`) pick one by weight. No replica
//! qualifies, or the split is off: the writer. The request's key names
//! the replica (`PoolKey::server`), so the pool keeps each server's
//! connections, waiters and share of the cap apart.
//!
//! What a read lease runs first on a replica (`--causal-reads`: a wait for
//! the writes it must see) is in its `LeaseSetup` already, from the
//! session; the pool runs it only on a replica's connection
//! (`crates/machines/src/pool/causal.rs`).

use super::*;
use machines::multiplex::Route;
use machines::replica_choice::Candidate;

impl Worker {
    /// The key (and setup) a command's lease request carries for `route`,
    /// counted per server when the split is on.
    pub(super) fn route_lease(&mut self, route: Route, key: &mut PoolKey, _setup: &mut LeaseSetup) {
        if !self.shared.config.read_write_split {
            return;
        }
        key.server = if route.is_read() {
            self.pick_replica()
        } else {
            None
        };
        let server = key
            .server
            .map(u16::from)
            .or_else(|| self.pool.target().map(|t| t.server));
        if let Some(server) = server {
            self.shared
                .metrics
                .servers()
                .count_routed(usize::from(server), route.is_read());
        }
    }

    /// The replica for the next read, if one qualifies now.
    fn pick_replica(&mut self) -> Option<u8> {
        let view = self.cluster.as_mut()?.get();
        if view.generation == 0 {
            // The monitor's first round has not ended: nothing is known
            // of any replica's lag yet.
            return None;
        }
        self.replica_candidates.clear();
        for (index, s) in view.servers.iter().enumerate() {
            if s.may_read() && !s.writer {
                // A pool key names a replica in a byte (`PoolKey::server`).
                if let Ok(server) = u8::try_from(index) {
                    self.replica_candidates.push(Candidate {
                        server: u16::from(server),
                        weight: s.weight,
                    });
                }
            }
        }
        let pick = self.replica_chooser.pick(&self.replica_candidates)?;
        u8::try_from(pick).ok()
    }
}

//! The result rows of the cluster scenario: where reads landed on each server, the proxy's
//! CPU per routed query against one server, and what writing clients saw through a failover
//! and a planned switchover.

use std::collections::BTreeMap;

use serde::Serialize;

use super::records::Record;

/// Everything the cluster scenario measured (summary.json's `cluster`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterReport {
    /// The three nodes' addresses, node 1 first.
    pub nodes: Vec<String>,
    /// Whether the ringgate binary offers `--read-write-split` (its `--help` names it).
    pub split_supported: bool,
    /// The monitor interval the fronts ran with ("default" when the bench left it).
    pub monitor_interval: String,
    pub reads: Vec<ReadLanding>,
    /// The CPU-per-query rounds, one record per (front, concurrency), in the rounds' format.
    pub cost: Vec<Record>,
    /// Each front's CPU while no client was connected, ms per second: what the monitor costs
    /// with nothing to route.
    pub idle_cpu_ms_per_s: Vec<(String, f64)>,
    pub changes: Vec<WriterChange>,
    /// Leaks ringgate showed after a phase, and phases that could not run.
    pub problems: Vec<String>,
    pub notes: Vec<String>,
    pub elapsed_s: f64,
}

/// The commands one server ran for the app account during the read-heavy load.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NodeCommands {
    pub node: String,
    /// primary or replica, when the load ran.
    pub role: String,
    pub selects: u64,
    /// INSERT, UPDATE, DELETE... (USER_STATISTICS' Update_commands).
    pub writes: u64,
}

/// Where the reads of one front landed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReadLanding {
    /// The front: "3 servers" or "3 servers + split".
    pub front: String,
    pub clients: usize,
    pub seconds: f64,
    /// Point selects and INSERTs the bench ran and saw succeed.
    pub selects_sent: u64,
    pub writes_sent: u64,
    pub failures: u64,
    pub per_node: Vec<NodeCommands>,
}

impl ClusterReport {
    /// What the figures themselves say went wrong: an acknowledged write lost, a switchover
    /// that cost a client error, a failed read or CPU step, reads that landed where the
    /// routing says they cannot (on a replica without the split, nowhere but the primary with it).
    pub fn findings(&self) -> Vec<String> {
        let mut v = Vec::new();
        for c in &self.changes {
            if c.lost > 0 {
                v.push(format!("{}: {} acknowledged writes lost", c.kind, c.lost));
            }
            if c.kind == "switchover" && c.errors > 0 {
                v.push(format!(
                    "switchover: {} client errors (the goal is 0)",
                    c.errors
                ));
            }
        }
        for r in &self.reads {
            let on_replicas: u64 = r
                .per_node
                .iter()
                .filter(|n| n.role == "replica")
                .map(|n| n.selects + n.writes)
                .sum();
            let split = r.front.contains("split");
            if r.failures > 0 || r.selects_sent == 0 {
                v.push(format!(
                    "reads through {}: {} failures, {} selects",
                    r.front, r.failures, r.selects_sent
                ));
            }
            if !split && on_replicas > 0 {
                v.push(format!(
                    "reads through {}: {on_replicas} statements reached a replica",
                    r.front
                ));
            }
            if split && on_replicas == 0 {
                v.push(format!(
                    "reads through {}: no read reached a replica",
                    r.front
                ));
            }
        }
        for r in &self.cost {
            if !r.verified.ok || r.failures + r.timeouts + r.setup_failures > 0 || r.count == 0 {
                v.push(format!(
                    "{} through {}: count {}, failures {}, verified {}",
                    r.cell_label(),
                    r.target,
                    r.count,
                    r.failures + r.timeouts + r.setup_failures,
                    r.verified.ok
                ));
            }
        }
        v
    }
}

impl ReadLanding {
    /// The share of the selects each node ran, in node order (0 when none ran).
    pub fn select_shares(&self) -> Vec<f64> {
        let total: u64 = self.per_node.iter().map(|n| n.selects).sum();
        self.per_node
            .iter()
            .map(|n| {
                if total == 0 {
                    0.0
                } else {
                    n.selects as f64 / total as f64
                }
            })
            .collect()
    }
}

/// What writing clients saw through one change of writer.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WriterChange {
    /// "failover" (kill -9 of the primary, then a promotion) or "switchover" (planned).
    pub kind: String,
    pub from_node: u8,
    pub to_node: u8,
    pub writers: usize,
    pub acked: u64,
    pub errors: u64,
    /// The most errors one client saw.
    pub most_errors_one_client: u64,
    /// Error text (code first) → occurrences.
    pub error_kinds: BTreeMap<String, u64>,
    /// The longest time between two consecutive acknowledged writes (all clients together)
    /// that ends after the change began: the client-visible gap.
    pub gap_ms: f64,
    /// Where the gap lies, from the change's start (the kill, or SIGUSR1).
    pub gap_from_ms: f64,
    pub gap_to_ms: f64,
    /// The orchestrator's own time: kill → promoted, or the switchover script's run.
    pub orchestrator_ms: f64,
    /// The hold as ringgate logged it (switchover).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_ms: Option<f64>,
    /// Acknowledged-write latency before the change, and of writes started around it.
    pub steady_p99_ms: f64,
    pub around_p99_ms: f64,
    pub around_max_ms: f64,
    /// Rows on the new primary, and acknowledged writes missing from it.
    pub rows: u64,
    pub lost: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn landing(front: &str, replica_selects: u64) -> ReadLanding {
        let node = |role: &str, selects| NodeCommands {
            node: "x".into(),
            role: role.into(),
            selects,
            writes: 0,
        };
        ReadLanding {
            front: front.into(),
            selects_sent: 100,
            per_node: vec![node("primary", 100), node("replica", replica_selects)],
            ..Default::default()
        }
    }

    #[test]
    fn reads_must_land_where_the_routing_sends_them() {
        let ok = ClusterReport {
            reads: vec![landing("3 servers", 0), landing("3 servers + split", 50)],
            ..Default::default()
        };
        assert!(ok.findings().is_empty(), "{:?}", ok.findings());
        let bad = ClusterReport {
            reads: vec![landing("3 servers", 3), landing("3 servers + split", 0)],
            ..Default::default()
        };
        let f = bad.findings();
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("reached a replica") && f[1].contains("no read reached"));
    }

    #[test]
    fn a_lost_write_and_a_switchover_error_are_findings_a_failover_error_is_not() {
        let change = |kind: &str, errors, lost| WriterChange {
            kind: kind.into(),
            errors,
            lost,
            ..Default::default()
        };
        let rep = ClusterReport {
            changes: vec![change("failover", 3, 0), change("switchover", 0, 0)],
            ..Default::default()
        };
        assert!(rep.findings().is_empty());
        let rep = ClusterReport {
            changes: vec![change("failover", 3, 2), change("switchover", 1, 0)],
            ..Default::default()
        };
        let f = rep.findings();
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("2 acknowledged writes lost"));
        assert!(f[1].contains("1 client errors"));
    }
}

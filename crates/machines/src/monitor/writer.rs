//! Which server takes writes: the configured primary while it is up;
//! without one, the one up server with read_only=0.
//!
//! Two writable servers happen during a switchover that sets the new
//! primary writable before the old one read-only, or after a failover when
//! the old primary comes back without `--read-only`. Writes sent to both
//! diverge the set (under gtid_strict_mode the replicas then stop with
//! error 1950), so the rule is: keep the current writer while it stays up
//! and writable, and if there was none, pick none; an error names the
//! servers until only one is writable.
//!
//! One exception shortens a failover: the writer's last check could not
//! even connect (refused or reset: its process is gone, it is not just
//! busy) and exactly one other server is writable. That one is what an
//! orchestrator promoted, and waiting the `fall` checks that take the old
//! writer down (3 intervals) would only hold every write back; the old one
//! cannot take writes while it refuses connections.

use super::{Change, ConfiguredRole, Monitor, Role, State};

impl Monitor {
    pub(super) fn choose_writer(&mut self) -> Vec<Change> {
        let up = |i: &usize| self.servers[*i].health.state == State::Up;
        let configured = (0..self.servers.len())
            .find(|&i| self.servers[i].configured == ConfiguredRole::Primary);
        let writable: Vec<usize> = (0..self.servers.len())
            .filter(up)
            .filter(|&i| {
                let s = &self.servers[i];
                s.configured != ConfiguredRole::Replica
                    && (s.role == Role::Primary || s.probe.as_ref().is_some_and(|p| !p.read_only))
            })
            .collect();
        let (chosen, why) = match configured {
            Some(p) if up(&p) => (Some(p), "the configured primary is up"),
            Some(_) => (None, "the configured primary is not up"),
            None => match writable.as_slice() {
                [] => (None, "no up server has read_only=0"),
                [one] => (Some(*one), "the one up server with read_only=0"),
                _ if self.writer_unreachable() && writable.len() == 2 => (
                    writable.iter().copied().find(|&i| Some(i) != self.writer),
                    "the writer is unreachable and one other server has read_only=0",
                ),
                _ if self.writer.is_some_and(|w| writable.contains(&w)) => {
                    (self.writer, "kept: several servers are writable")
                }
                _ => (None, "several servers are writable and none was the writer"),
            },
        };
        let mut changes = Vec::new();
        let ambiguous = if writable.len() > 1 {
            writable
        } else {
            Vec::new()
        };
        if ambiguous != self.ambiguous {
            changes.push(Change::Ambiguous {
                writable: ambiguous.clone(),
                kept: chosen,
            });
            self.ambiguous = ambiguous;
        }
        if chosen != self.writer {
            changes.push(Change::Writer {
                from: self.writer,
                to: chosen,
                why: why.into(),
            });
            self.writer = chosen;
        }
        changes
    }

    /// The writer's last check could not connect to it.
    fn writer_unreachable(&self) -> bool {
        self.writer
            .and_then(|w| self.servers.get(w))
            .is_some_and(|s| s.unreachable)
    }
}

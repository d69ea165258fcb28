//! The cluster monitor's decisions, without sockets: each server's check
//! results go in (typed: it could not be reached, refused the login, timed
//! out, or answered the probe), and each server's state (up, down,
//! shunned), role (primary, replica) and lag come out, with the one server
//! that takes writes. The binary's monitor thread runs the checks and
//! carries out nothing but logging and publishing: every rule is here.
//!
//! The server facts behind the rules (docs/design/monitor.md): a
//! replica's Seconds_Behind_Master is NULL both when its SQL thread stops
//! (it is falling behind) and when its IO thread stops (it looks caught up
//! and is stale), so NULL is never 0; GTID positions are compared by
//! (domain, seq_no).

use std::time::{Duration, Instant};

use wire::gtid::GtidPos;

mod health;
mod lag;
mod writer;

pub use health::{Health, State};
pub use lag::{Lag, Stale};

#[cfg(test)]
mod tests;

/// How a server's role is decided (`role` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfiguredRole {
    /// From `@@read_only`: 0 is a primary, 1 a replica.
    Auto,
    Primary,
    Replica,
}

/// A server's role as the monitor knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica,
    /// Never answered a probe, and no role configured.
    Unknown,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
            Role::Unknown => "unknown",
        }
    }
}

/// The counts and intervals of the health rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Time between checks of a server that is up or shunned.
    pub interval: Duration,
    /// Failed checks in a row that take an up server down.
    pub fall: u32,
    /// Good checks in a row that bring a down server back up (it is
    /// shunned until then).
    pub rise: u32,
    /// The interval doubles while a server is down, up to this many times
    /// the interval.
    pub max_backoff_factor: u32,
}

impl Thresholds {
    pub fn new(interval: Duration) -> Thresholds {
        Thresholds {
            interval,
            fall: 3,
            rise: 3,
            max_backoff_factor: 8,
        }
    }
}

/// The replication IO thread (`Slave_IO_Running`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoThread {
    Yes,
    No,
    /// Trying to reach its primary (a dead primary: Last_IO_Errno 2003).
    Connecting,
    /// The first moments after START SLAVE.
    Preparing,
}

impl IoThread {
    /// The column's text; None for a value this server version does not send.
    pub fn parse(text: &str) -> Option<IoThread> {
        match text {
            "Yes" => Some(IoThread::Yes),
            "No" => Some(IoThread::No),
            "Connecting" => Some(IoThread::Connecting),
            "Preparing" => Some(IoThread::Preparing),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IoThread::Yes => "Yes",
            IoThread::No => "No",
            IoThread::Connecting => "Connecting",
            IoThread::Preparing => "Preparing",
        }
    }
}

/// One row of `SHOW ALL SLAVES STATUS` (one replication connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    pub io: IoThread,
    pub sql_running: bool,
    /// Seconds_Behind_Master; None is the server's NULL, which means
    /// "unknown", never 0.
    pub seconds_behind: Option<u64>,
    /// What the IO thread has received (Gtid_IO_Pos).
    pub gtid_io_pos: GtidPos,
    pub last_io_errno: u32,
}

/// What the probe queries answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub read_only: bool,
    pub gtid_binlog_pos: GtidPos,
    /// What replication applied (`@@gtid_slave_pos`; not the status
    /// column of the same name, which can differ).
    pub gtid_slave_pos: GtidPos,
    pub gtid_current_pos: GtidPos,
    /// `SHOW ALL SLAVES STATUS`: empty on a server that replicates from
    /// nobody (a primary).
    pub channels: Vec<Channel>,
}

/// How one check of one server ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckResult {
    /// TCP connect failed (refused, unreachable) or the connection broke.
    ConnectFailed(String),
    /// The server refused the monitor's login (ERR during the handshake).
    LoginRefused(String),
    /// No answer within the check's timeout.
    TimedOut,
    /// Logged in, but a probe query was refused (1227: the monitor
    /// account lacks SLAVE MONITOR) or its answer did not parse.
    ProbeFailed(String),
    Answered(Probe),
}

impl CheckResult {
    fn failure(&self) -> Option<String> {
        match self {
            CheckResult::ConnectFailed(e) => Some(format!("connect failed: {e}")),
            CheckResult::LoginRefused(e) => Some(format!("login refused: {e}")),
            CheckResult::TimedOut => Some("check timed out".into()),
            CheckResult::ProbeFailed(e) => Some(format!("probe failed: {e}")),
            CheckResult::Answered(_) => None,
        }
    }
}

/// Everything the monitor knows of one server.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    pub configured: ConfiguredRole,
    pub health: Health,
    pub role: Role,
    pub lag: Lag,
    /// The last probe's answer (kept while the server is down).
    pub probe: Option<Probe>,
    /// The duration of the last check, failed or not.
    pub check_latency: Option<Duration>,
    pub checks_failed_total: u64,
    /// Its last check could not even connect (refused, reset, broken):
    /// the process is gone, not busy (`monitor/writer.rs`).
    pub unreachable: bool,
    /// The last time its applied position covered the writer's.
    caught_up_at: Option<Instant>,
}

/// One change worth a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    State {
        server: usize,
        from: State,
        to: State,
        why: String,
    },
    /// A server that is down failed for a reason other than the last one
    /// (its first check after start-up among them): without this, a monitor
    /// that cannot log in anywhere would never say so.
    StillDown { server: usize, why: String },
    Role {
        server: usize,
        from: Role,
        to: Role,
        why: String,
    },
    Writer {
        from: Option<usize>,
        to: Option<usize>,
        why: String,
    },
    /// Several up servers accept writes (read_only=0), logged as an error;
    /// `writable` empty: the ambiguity is over.
    Ambiguous {
        writable: Vec<usize>,
        kept: Option<usize>,
    },
    /// A configured role that read_only contradicts.
    RoleMismatch {
        server: usize,
        configured: ConfiguredRole,
        read_only: bool,
    },
}

/// The monitor of a fixed list of servers, indexed as configured.
#[derive(Debug)]
pub struct Monitor {
    thresholds: Thresholds,
    servers: Vec<ServerStatus>,
    writer: Option<usize>,
    /// The writable servers last reported as ambiguous, so that an
    /// unchanged ambiguity is logged once.
    ambiguous: Vec<usize>,
}

impl Monitor {
    pub fn new(roles: &[ConfiguredRole], thresholds: Thresholds, now: Instant) -> Monitor {
        let servers = roles
            .iter()
            .map(|&configured| ServerStatus {
                configured,
                health: Health::new(now),
                role: match configured {
                    ConfiguredRole::Primary => Role::Primary,
                    ConfiguredRole::Replica => Role::Replica,
                    ConfiguredRole::Auto => Role::Unknown,
                },
                lag: Lag::default(),
                probe: None,
                check_latency: None,
                checks_failed_total: 0,
                unreachable: false,
                caught_up_at: None,
            })
            .collect();
        Monitor {
            thresholds,
            servers,
            writer: None,
            ambiguous: Vec::new(),
        }
    }

    pub fn servers(&self) -> &[ServerStatus] {
        &self.servers
    }

    /// The server that takes writes, if one qualifies.
    pub fn writer(&self) -> Option<usize> {
        self.writer
    }

    /// The servers whose check is due at `now`, the writer first: a
    /// replica checked after the writer in the same round compares its
    /// applied position with a writer position that is not newer than its
    /// own observation, so a caught-up replica does not look behind.
    pub fn due(&self, now: Instant) -> Vec<usize> {
        let mut due: Vec<usize> = (0..self.servers.len())
            .filter(|&i| self.servers[i].health.next_check <= now)
            .collect();
        due.sort_by_key(|&i| Some(i) != self.writer);
        due
    }

    /// When the next check of any server is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.servers.iter().map(|s| s.health.next_check).min()
    }

    /// One check of `server` ended after `latency`.
    pub fn on_check(
        &mut self,
        server: usize,
        result: CheckResult,
        latency: Duration,
        now: Instant,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        let t = self.thresholds;
        let Some(s) = self.servers.get_mut(server) else {
            return changes;
        };
        s.check_latency = Some(latency);
        let failure = result.failure();
        if failure.is_some() {
            s.checks_failed_total += 1;
        }
        s.unreachable = matches!(result, CheckResult::ConnectFailed(_));
        let was_down = s.health.state == State::Down;
        let new_reason = failure
            .as_ref()
            .filter(|f| s.health.last_error.as_ref() != Some(*f))
            .cloned();
        let changed = s.health.on_check(failure, &t, now);
        if let (true, None, Some(why)) = (was_down, &changed, new_reason) {
            changes.push(Change::StillDown { server, why });
        }
        if let Some((from, to, why)) = changed {
            changes.push(Change::State {
                server,
                from,
                to,
                why,
            });
        }
        if let CheckResult::Answered(probe) = result {
            changes.extend(role_from_probe(server, s, &probe));
            s.probe = Some(probe);
        }
        changes
    }

    /// After the round's checks: the writer and every replica's lag.
    pub fn settle(&mut self, now: Instant) -> Vec<Change> {
        let changes = self.choose_writer();
        let writer_pos = self
            .writer
            .and_then(|w| self.servers[w].probe.as_ref())
            .map(|p| p.gtid_binlog_pos.clone());
        for s in &mut self.servers {
            s.lag = lag::assess(s, writer_pos.as_ref(), now);
        }
        changes
    }
}

/// The role a probe shows, and the log lines it is worth.
fn role_from_probe(server: usize, s: &mut ServerStatus, probe: &Probe) -> Vec<Change> {
    let mut changes = Vec::new();
    let seen = if probe.read_only {
        Role::Replica
    } else {
        Role::Primary
    };
    let mismatch = match s.configured {
        ConfiguredRole::Auto => false,
        ConfiguredRole::Primary => probe.read_only,
        ConfiguredRole::Replica => !probe.read_only,
    };
    let was_mismatch = s.probe.as_ref().is_some_and(|p| match s.configured {
        ConfiguredRole::Auto => false,
        ConfiguredRole::Primary => p.read_only,
        ConfiguredRole::Replica => !p.read_only,
    });
    if mismatch && !was_mismatch {
        changes.push(Change::RoleMismatch {
            server,
            configured: s.configured,
            read_only: probe.read_only,
        });
    }
    if s.configured == ConfiguredRole::Auto && s.role != seen {
        changes.push(Change::Role {
            server,
            from: s.role,
            to: seen,
            why: format!("read_only={}", u8::from(probe.read_only)),
        });
        s.role = seen;
    }
    changes
}

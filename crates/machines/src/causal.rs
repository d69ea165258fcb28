//! Causal reads (`--causal-reads`): after a session's write, its next read
//! sees it, even on a replica.
//!
//! The server says where each write landed: MariaDB's `last_gtid` is a
//! session variable the system-variables tracker reports, in the OK of the
//! statement that binlogged (autocommit), or of COMMIT inside a
//! transaction; a statement that binlogs nothing reports none. A session
//! keeps the highest GTID it saw per domain ([`CausalMode::Session`]), or
//! every session of the process feeds one position ([`CausalMode::Global`],
//! [`GlobalGtids`]). Before a read runs on a replica, the lease makes the
//! connection run `SELECT MASTER_GTID_WAIT('<position>', <timeout>)`
//! ([`CausalWait::statement`]); only on a replica, since on a primary the
//! wait reads an empty `gtid_slave_pos` and times out even for its own
//! GTID.
//!
//! GTIDs are compared per domain by sequence number, never as text: after
//! a failover the new primary writes its own server_id, and
//! MASTER_GTID_WAIT ignores the server_id too.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use wire::gtid::{Gtid, GtidPos};

/// `--causal-reads`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CausalMode {
    /// Reads go where the split sends them, with no wait.
    #[default]
    Off,
    /// A session's read waits for that session's own last write.
    Session,
    /// A read waits for the last write any session of the process saw.
    Global,
}

/// The last GTID any session saw, per domain: what global mode waits for.
///
/// One `Mutex` for the process: it is taken once per write's OK (to raise
/// a domain's sequence number) and once per read leased to a replica (to
/// write the wait's text), each time next to a packet the worker sends or
/// receives anyway, so an uncontended lock (tens of nanoseconds) costs
/// nothing that shows. Per-domain atomics would need a fixed table of
/// domains, and the wait's text allocates a string either way.
#[derive(Debug, Default)]
pub struct GlobalGtids {
    pos: Mutex<GtidPos>,
}

impl GlobalGtids {
    /// Raise each domain of `seen` to at least its sequence number.
    pub fn note(&self, seen: &GtidPos) {
        if let Ok(mut pos) = self.pos.lock() {
            pos.raise(seen);
        }
    }

    /// The position now (a copy).
    pub fn position(&self) -> GtidPos {
        self.pos.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// What a session of the process is told about causal reads.
#[derive(Clone, Debug, Default)]
pub struct CausalConfig {
    pub mode: CausalMode,
    /// The process's position (global mode only).
    pub global: Option<Arc<GlobalGtids>>,
}

impl CausalConfig {
    pub fn new(mode: CausalMode) -> CausalConfig {
        let global = (mode == CausalMode::Global).then(|| Arc::new(GlobalGtids::default()));
        CausalConfig { mode, global }
    }

    pub fn on(&self) -> bool {
        self.mode != CausalMode::Off
    }
}

/// What a read leased to a replica must wait for before it runs: the
/// session's own position, or the process's. Cheap to clone into every
/// lease (a reference count): the text is written only for a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CausalWait {
    Session(Arc<GtidPos>),
    Global(GlobalGtidsRef),
    /// The session cannot learn its GTIDs (its client replaced the
    /// proxy's tracker list with one without `last_gtid`): no replica is
    /// known to have its writes, so its reads go to the writer.
    Writer,
}

/// What a read leased to a replica does first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaRead {
    /// Nothing to wait for: it runs there.
    Run,
    /// This statement first (`SELECT MASTER_GTID_WAIT(...)` of `pos`): 0
    /// and the read runs there, anything else and it goes to the writer.
    Wait { sql: Vec<u8>, pos: GtidPos },
    /// It goes to the writer.
    Writer,
}

/// A handle on the process's position that compares by identity (a lease
/// setup is compared in tests).
#[derive(Clone, Debug)]
pub struct GlobalGtidsRef(pub Arc<GlobalGtids>);

impl PartialEq for GlobalGtidsRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for GlobalGtidsRef {}

impl CausalWait {
    /// What a read leased to a replica does first. `timeout` is
    /// `--causal-read-timeout`, written in the seconds (with decimals)
    /// MASTER_GTID_WAIT takes; `reached`: a position the replica is known
    /// to have applied (an earlier wait there answered 0), which spares
    /// the wait when it covers this one (a replica's position only grows).
    pub fn on_replica(&self, timeout: Duration, reached: Option<&GtidPos>) -> ReplicaRead {
        let pos = match self {
            CausalWait::Session(p) if reached.is_some_and(|r| r.covers(p)) => {
                return ReplicaRead::Run
            }
            CausalWait::Session(p) => (**p).clone(),
            CausalWait::Global(g) => g.0.position(),
            CausalWait::Writer => return ReplicaRead::Writer,
        };
        if pos.is_empty() || reached.is_some_and(|r| r.covers(&pos)) {
            return ReplicaRead::Run;
        }
        // The position is digits, dashes and commas only (it was parsed
        // from numbers): nothing to quote.
        let sql = format!(
            "SELECT MASTER_GTID_WAIT('{pos}', {}.{:03})",
            timeout.as_secs(),
            timeout.subsec_millis()
        )
        .into_bytes();
        ReplicaRead::Wait { sql, pos }
    }
}

/// The `last_gtid` an OK's system-variable blocks report, if any.
pub fn last_gtid_of<'a>(mut vars: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Option<Gtid> {
    let (_, value) = vars.find(|(name, _)| name.eq_ignore_ascii_case(b"last_gtid"))?;
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// What a causal session has seen: its own position, or the process's.
#[derive(Debug, Default)]
pub enum SessionGtids {
    /// `--causal-reads off`: nothing is tracked.
    #[default]
    Off,
    /// The session's own writes, None before its first (copy-on-write: a
    /// lease takes a reference, a write that raises it makes a new one).
    Session(Option<Arc<GtidPos>>),
    /// The process's position.
    Global(Arc<GlobalGtids>),
}

impl SessionGtids {
    pub fn new(cfg: &CausalConfig) -> SessionGtids {
        match (cfg.mode, &cfg.global) {
            (CausalMode::Session, _) => SessionGtids::Session(None),
            (CausalMode::Global, Some(g)) => SessionGtids::Global(Arc::clone(g)),
            _ => SessionGtids::Off,
        }
    }

    /// Causal reads are on: the session's connections track `last_gtid`.
    pub fn on(&self) -> bool {
        !matches!(self, SessionGtids::Off)
    }

    /// A statement's OK reported `gtid` (its `last_gtid`).
    pub fn note(&mut self, gtid: Gtid) {
        let seen = GtidPos::of(gtid);
        match self {
            SessionGtids::Off => {}
            SessionGtids::Session(Some(own)) if own.covers(&seen) => {}
            SessionGtids::Session(Some(own)) => Arc::make_mut(own).raise(&seen),
            SessionGtids::Session(own) => *own = Some(Arc::new(seen)),
            SessionGtids::Global(g) => g.note(&seen),
        }
    }

    /// What a read on a replica must wait for (None: nothing yet).
    pub fn wait(&self) -> Option<CausalWait> {
        match self {
            SessionGtids::Off => None,
            SessionGtids::Session(own) => own.clone().map(CausalWait::Session),
            SessionGtids::Global(g) => Some(CausalWait::Global(GlobalGtidsRef(Arc::clone(g)))),
        }
    }
}

#[cfg(test)]
mod tests;

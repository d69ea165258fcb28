//! Transaction replay (`--transaction-replay`): what a session records of
//! its open transaction, so that when the writer dies under it the proxy
//! can run the transaction again on the new writer and carry on unseen.
//!
//! MaxScale's rules: only `COM_QUERY` statements are recorded, each with
//! the checksum of its answer as the client got it
//! (`wire::tracker::checksum`); any other command, a pin, or more statement
//! text than the bound turns replay off until the transaction ends. A
//! replay runs the statements again and must read the same checksum for
//! every one; the statement in flight when the writer died goes only after
//! that, and an interrupted COMMIT is never replayed (the session decides
//! that: `session/writer_lost.rs`).

use wire::constants::*;
use wire::tracker::Completed;

/// One recorded statement: its SQL and its answer's checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub sql: Vec<u8>,
    pub checksum: u64,
}

/// Why the open transaction cannot be replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Off {
    /// More statement text than `--transaction-replay-max-size` (or one
    /// statement longer than the tracker keeps).
    TooLarge,
    /// A command other than `COM_QUERY` ran in it.
    NotAQuery,
    /// The session pinned its connection.
    Pinned,
}

/// What [`TxRecord::on_completed`] tells the session, once per transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordNote {
    /// Replay was turned off for the open transaction (why).
    TurnedOff(Off),
}

/// The open transaction's statements, as the session records them.
#[derive(Debug, Default)]
pub struct TxRecord {
    max_bytes: usize,
    statements: Vec<Recorded>,
    bytes: usize,
    /// A transaction is open (the last answer's status said so).
    open: bool,
    off: Option<Off>,
}

impl TxRecord {
    /// `max_bytes`: `--transaction-replay-max-size`.
    pub fn new(max_bytes: usize) -> Self {
        TxRecord {
            max_bytes,
            ..TxRecord::default()
        }
    }

    /// A command's answer completed. A statement that leaves a transaction
    /// open after none was open starts the record; one that leaves none
    /// open (autocommit, COMMIT, ROLLBACK, an implicit commit) ends it.
    pub fn on_completed(&mut self, done: &Completed) -> Option<RecordNote> {
        let open_after = done.status & SERVER_STATUS_IN_TRANS != 0;
        if !self.open {
            self.forget();
        }
        self.open = open_after;
        if !open_after {
            self.forget();
            return None;
        }
        if self.off.is_some() {
            return None;
        }
        let entry = match (done.command, &done.text, done.checksum) {
            (COM_QUERY, Some(sql), Some(checksum)) => Recorded {
                sql: sql.clone(),
                checksum,
            },
            (COM_QUERY, None, _) => return self.turn_off(Off::TooLarge),
            _ => return self.turn_off(Off::NotAQuery),
        };
        self.bytes += entry.sql.len();
        if self.bytes > self.max_bytes {
            return self.turn_off(Off::TooLarge);
        }
        self.statements.push(entry);
        None
    }

    /// The session pinned its connection: replay is off until the
    /// transaction ends.
    pub fn pinned(&mut self) -> Option<RecordNote> {
        if self.off.is_some() {
            return None;
        }
        self.turn_off(Off::Pinned)
    }

    /// What a replay must run, or why it cannot: `Err(None)` when no
    /// transaction is recorded.
    pub fn replayable(&self) -> Result<&[Recorded], Option<Off>> {
        match self.off {
            Some(off) => Err(Some(off)),
            None if self.statements.is_empty() => Err(None),
            None => Ok(&self.statements),
        }
    }

    /// The connection was lost and the transaction with it (rolled back, or
    /// replayed and recorded again by its answers).
    pub fn clear(&mut self) {
        self.open = false;
        self.forget();
    }

    /// Statement text held, for the bound.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn forget(&mut self) {
        self.statements = Vec::new();
        self.bytes = 0;
        self.off = None;
    }

    fn turn_off(&mut self, why: Off) -> Option<RecordNote> {
        self.statements = Vec::new();
        self.bytes = 0;
        self.off = Some(why);
        Some(RecordNote::TurnedOff(why))
    }
}

#[cfg(test)]
mod tests;

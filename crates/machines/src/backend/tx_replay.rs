//! Transaction replay on a freshly leased connection to the new writer:
//! the statements the session recorded of its transaction, pipelined, each
//! answer's checksum compared with the one the client got
//! (`wire::tracker::checksum`), then, when every one matched, the statement
//! that was in flight when the writer died. The machine reads the answers
//! itself (the session's buffer may have a client read in flight), through
//! a tracker of its own built as the session's is, so the two checksums
//! come from the same code over the same capabilities.

use std::collections::VecDeque;

use super::*;
use crate::tx_replay::Recorded;
use wire::tracker::{Direction, Tracker};

/// How a replay ended ([`BackendEvent::Replayed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// Every answer matched, and the statement in flight (if any) is
    /// written: the connection is leased again with the transaction open;
    /// `status`: the last answer's status flags.
    Replayed { status: u16 },
    /// The answer to recorded statement `statement` (0-based) differed:
    /// the connection is closed, which rolls the replay back.
    Mismatch { statement: usize },
}

/// The replay in flight (`State::ReplayingTx`).
pub(super) struct Replay {
    pub(super) writing: bool,
    tracker: Tracker,
    expected: VecDeque<u64>,
    answered: usize,
    /// The statement in flight when the writer died, sent once every
    /// answer matched (its answer is the relay's to read).
    then: Option<Vec<u8>>,
    sending_then: bool,
}

impl BackendConn {
    /// While leased: replay `statements` (see the module docs), then write
    /// `then` (whole packets). The answer is [`BackendEvent::Replayed`], or
    /// `Failed` when the connection breaks or answers out of protocol.
    pub fn replay(
        &mut self,
        statements: &[Recorded],
        then: Option<Vec<u8>>,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        if !matches!(self.state, State::Leased) || statements.is_empty() {
            return self.fail("asked for a replay while not leased".into(), out);
        }
        let mut tracker = Tracker::new(self.key.caps & CLIENT_DEPRECATE_EOF != 0);
        tracker.set_cache_metadata(self.key.ext_caps & MARIADB_CLIENT_CACHE_METADATA != 0);
        tracker.capture_commands(0);
        tracker.checksum_answers();
        let mut bytes = Vec::new();
        for st in statements {
            let start = bytes.len();
            write_packet(&mut bytes, 0, &com_payload(COM_QUERY, &st.sql));
            if let Err(e) = tracker.on_client_bytes(&bytes[start..]) {
                return self.fail(format!("replay: {e}"), out);
            }
        }
        self.state = State::ReplayingTx(Box::new(Replay {
            writing: true,
            tracker,
            expected: statements.iter().map(|s| s.checksum).collect(),
            answered: 0,
            then,
            sending_then: false,
        }));
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
    }

    /// A replay's write completed: read the answers, or, once the
    /// statement in flight is out, hand the connection back to the session.
    pub(super) fn on_replay_written(&mut self, out: &mut Vec<BackendOut>) {
        let State::ReplayingTx(replay) = &mut self.state else {
            return;
        };
        replay.writing = false;
        if replay.sending_then {
            let status = replay.tracker.last_status();
            self.state = State::Leased;
            out.push(BackendOut::Event(BackendEvent::Replayed(
                ReplayOutcome::Replayed { status },
            )));
            return;
        }
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Op(BackendOp::Read));
    }

    /// Answers to the replayed statements: every byte goes through the
    /// replay's tracker, so the buffer is cleared after each read.
    pub(super) fn on_replay_answers(&mut self, data: &[u8], out: &mut Vec<BackendOut>) {
        let State::ReplayingTx(replay) = &mut self.state else {
            return;
        };
        if let Err(e) = replay.tracker.on_server_bytes(data) {
            return self.fail(
                format!("replay: unexpected bytes from the server: {e}"),
                out,
            );
        }
        while let Some(done) = replay.tracker.take_completed() {
            let statement = replay.answered;
            replay.answered += 1;
            if replay.expected.pop_front() != done.checksum {
                self.close(out);
                out.push(BackendOut::Event(BackendEvent::Replayed(
                    ReplayOutcome::Mismatch { statement },
                )));
                return;
            }
        }
        if replay.tracker.pending_responses() > 0 && replay.tracker.next_read() == Direction::Client
        {
            // The server asks for a LOAD DATA LOCAL file: only the client
            // had it.
            return self.fail("replay: a LOAD DATA LOCAL cannot be replayed".into(), out);
        }
        out.push(BackendOut::Op(BackendOp::Clear));
        if !replay.expected.is_empty() {
            out.push(BackendOut::Op(BackendOp::Read));
            return;
        }
        match replay.then.take() {
            Some(bytes) => {
                replay.sending_then = true;
                replay.writing = true;
                out.push(BackendOut::Op(BackendOp::Send(bytes)));
            }
            None => {
                let status = replay.tracker.last_status();
                self.state = State::Leased;
                out.push(BackendOut::Event(BackendEvent::Replayed(
                    ReplayOutcome::Replayed { status },
                )));
            }
        }
    }
}

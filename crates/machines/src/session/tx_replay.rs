//! Transaction replay (`--transaction-replay`), the session's side. When
//! the writer dies under a transaction that was certainly rolled back (the
//! cases that would get ERR 1213, `session/writer_lost.rs`), a session that
//! recorded the transaction (`crate::tx_replay`) waits for a connection to
//! the new writer (a lease, bounded by `--writer-wait-timeout`), has the
//! pool replay the statements on it (`backend/tx_replay.rs`), and, when
//! every answer matched, relays on as if nothing happened: the statement in
//! flight was sent behind the replay and its answer is relayed, or the
//! client's next command is read. A mismatch, an error or a timeout ends in
//! the ERR 1213 the client would have had without replay.

use super::*;
use crate::backend::tx_replay::ReplayOutcome;
use crate::relay::Lost;
use crate::tx_replay::Off;

/// How a replay ended (`ringgate_transaction_replays_total{outcome}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayResult {
    /// Every answer matched: the session went on unseen.
    Replayed,
    /// An answer differed.
    Mismatch,
    /// No new writer in time, or the replay's connection failed.
    Failed,
    /// The transaction was over `--transaction-replay-max-size`: no
    /// replay was tried.
    TooLarge,
}

impl ReplayResult {
    /// Index into `metrics::TRANSACTION_REPLAY_OUTCOMES`.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A session whose transaction is being replayed (`State::ReplayingTx`).
pub(super) struct ReplayWait {
    tracker: Box<Tracker>,
    /// What is left of the relay: the command owed, the client read.
    lost: Lost,
    /// The statement in flight when the writer died (a whole COM_QUERY
    /// packet), sent once the replay matched.
    command: Option<Vec<u8>>,
    /// ERR 1213: what the client gets when the replay does not succeed.
    answer: Vec<u8>,
    /// When the writer was lost (the parked session's idle clock).
    since: Instant,
}

impl Session {
    /// The writer was lost under a transaction certainly rolled back:
    /// start a replay when one may run, or hand `lost` and the ERR back.
    pub(super) fn try_replay(
        &mut self,
        lost: Lost,
        answer: Vec<u8>,
        now: Instant,
        out: &mut Vec<SessionAction>,
    ) -> Result<(), (Lost, Vec<u8>)> {
        let Some(record) = self.tx.as_deref().and_then(TxState::replay_record) else {
            return Err((lost, answer));
        };
        match record.replayable() {
            Ok(_) => {}
            Err(Some(Off::TooLarge)) => {
                out.push(SessionAction::TransactionReplay(ReplayResult::TooLarge));
                return Err((lost, answer));
            }
            Err(_) => return Err((lost, answer)),
        }
        let (State::Relay(relay), Some(tx)) = (&self.state, self.tx.as_deref_mut()) else {
            return Err((lost, answer));
        };
        // Only a query's text can be sent again (an execute names a
        // statement the new connection lacks).
        let command = match (lost.owed, relay.tracker().owed_command()) {
            (false, _) => None,
            (true, Some((COM_QUERY, Some(sql)))) => {
                let mut bytes = Vec::with_capacity(sql.len() + 5);
                wire::packet::write_packet(&mut bytes, 0, &[&[COM_QUERY], sql].concat());
                Some(bytes)
            }
            (true, _) => return Err((lost, answer)),
        };
        let setup = Box::new(tx.lease_setup(command.as_deref().unwrap_or(&[])));
        let schema = tx.schema().map(String::from);
        let status = tx.status();
        let State::Relay(relay) = std::mem::replace(&mut self.state, State::Closed) else {
            return Err((lost, answer));
        };
        let mut tracker = Box::new(relay.into_tracker());
        tracker.reset();
        tracker.set_last_status(status);
        if let Some(stmts) = self.stmts.as_mut() {
            stmts.connection_lost();
        }
        // The dead connection goes.
        out.push(SessionAction::Park {
            clean: false,
            kept: None,
            reset: false,
            ask_last_insert_id: false,
        });
        self.leasing = true;
        self.state = State::ReplayingTx(Box::new(ReplayWait {
            tracker,
            lost,
            command,
            answer,
            since: now,
        }));
        // The new writer, whatever server the transaction ran on.
        out.push(SessionAction::LeaseForCommand {
            key: self.key,
            schema,
            setup,
            route: crate::multiplex::Route::Writer,
        });
        Ok(())
    }

    /// The new writer's connection is here: have the pool replay on it.
    pub(super) fn replay_leased(&mut self, out: &mut Vec<SessionAction>) {
        self.leasing = false;
        self.has_backend = true;
        let statements = self
            .tx
            .as_deref()
            .and_then(TxState::replay_record)
            .and_then(|r| r.replayable().ok())
            .map(<[_]>::to_vec);
        match (statements, &self.state) {
            (Some(statements), State::ReplayingTx(wait)) => {
                out.push(SessionAction::ReplayTransaction {
                    statements,
                    then: wait.command.clone(),
                })
            }
            _ => self.replay_gave_up(ReplayResult::Failed, "nothing to replay", out),
        }
    }

    /// The pool's answer to [`SessionAction::ReplayTransaction`].
    pub fn on_replayed(
        &mut self,
        outcome: ReplayOutcome,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if !matches!(self.state, State::ReplayingTx(_)) {
            return;
        }
        match outcome {
            ReplayOutcome::Replayed { status } => self.replay_done(status, ctx, out),
            ReplayOutcome::Mismatch { statement } => {
                // The pool closed the connection, which rolled it back.
                self.has_backend = false;
                let why = format!("the answer to statement {} differed", statement + 1);
                self.replay_gave_up(ReplayResult::Mismatch, &why, out)
            }
        }
    }

    /// No connection to the new writer (none in time, or it failed under
    /// the replay): the client gets the ERR 1213.
    pub(super) fn replay_lease_failed(&mut self, out: &mut Vec<SessionAction>) {
        self.leasing = false;
        self.has_backend = false;
        self.replay_gave_up(ReplayResult::Failed, "no new writer answered it", out)
    }

    /// A client read completed while the replay runs: kept for the relay.
    pub(super) fn replay_client_read(&mut self, res: Completion) {
        if let State::ReplayingTx(wait) = &mut self.state {
            wait.lost.reading = false;
            wait.lost.client_read = Some(res);
        }
    }

    /// Every answer matched: relay on over the new connection.
    fn replay_done(&mut self, status: u16, ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let State::ReplayingTx(wait) = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        let ReplayWait {
            mut tracker,
            lost,
            command,
            ..
        } = *wait;
        out.push(SessionAction::TransactionReplay(ReplayResult::Replayed));
        out.push(SessionAction::WriterLost(LostOutcome::Replayed));
        out.push(SessionAction::Log(
            "the transaction was replayed on the new writer, every answer the same; the session goes on unseen".into(),
        ));
        tracker.set_last_status(status);
        // The statement in flight went out behind the replay: the tracker
        // owes its answer, which the relay reads.
        if let Some(cmd) = &command {
            if tracker.on_client_bytes(cmd).is_err() {
                return self.close(out);
            }
        }
        let mut relay = Box::new(Relay::new(*tracker, ctx.now));
        if ctx.several_servers {
            relay.keep_client_on_loss();
        }
        let reading = lost.reading || lost.client_read.is_some();
        if !reading {
            out.push(SessionAction::ClearBuffer);
        }
        let mut events = std::mem::take(&mut self.relay_scratch);
        relay.resume_after_replay(reading, ctx.now, &mut events);
        self.state = State::Relay(relay);
        self.apply_relay(&mut events, ctx, out);
        if let Some(res) = lost.client_read {
            out.push(SessionAction::Redeliver(res));
        }
    }

    /// The replay did not succeed: the client gets the ERR 1213 it would
    /// have had without it, and the session parks with no connection.
    fn replay_gave_up(&mut self, result: ReplayResult, why: &str, out: &mut Vec<SessionAction>) {
        let State::ReplayingTx(wait) = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        let ReplayWait {
            tracker,
            lost,
            answer,
            since,
            ..
        } = *wait;
        out.push(SessionAction::TransactionReplay(result));
        out.push(SessionAction::WriterLost(LostOutcome::RolledBack));
        out.push(SessionAction::Log(format!(
            "the transaction could not be replayed on the new writer ({why}); the client is told it was rolled back"
        )));
        self.park_lost(tracker, lost, Some(answer), since, out);
    }
}

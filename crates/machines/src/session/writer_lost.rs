//! Several servers: the session's backend connection was lost with
//! nothing of an answer forwarded ([`RelayEnd::WriterLost`]), most often
//! because the writer died. What the client is told depends on what died
//! with the connection:
//! - **a transaction**, with nothing in flight or a statement that cannot
//!   have committed: an uncommitted transaction dies with its server, so it
//!   was certainly rolled back. The client gets ERR 1213 (SQLSTATE 40001,
//!   which connectors and ORMs answer by running the whole transaction
//!   again) for the command in flight, or for its next command if it sat
//!   idle inside the transaction (a ROLLBACK then gets an OK: what it asked
//!   for happened), and the session parks with no connection: its next
//!   transaction goes to the new writer.
//! - **session state** (a pin, a statement cursor, session pooling): it
//!   cannot move to another connection. ERR 1927 names the failover and
//!   the session closes.
//! - **anything else** (an autocommit statement or a COMMIT in flight): the
//!   proxy cannot know whether it committed, and closes the session as a
//!   direct connection would end (the client sees 2013), with a log line.

use super::*;
use crate::multiplex::LostStatement;
use crate::relay::Lost;

/// ER_LOCK_DEADLOCK: SQLSTATE 40001, "try restarting transaction".
const ER_LOCK_DEADLOCK: u16 = 1213;
/// ER_CONNECTION_KILLED: SQLSTATE 70100.
const ER_CONNECTION_KILLED: u16 = 1927;

/// What the client of a session whose connection was lost was told, for
/// `ringgate_writer_lost_total{outcome}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostOutcome {
    /// A transaction was rolled back (ERR 1213, or an OK to a ROLLBACK);
    /// the session goes on.
    RolledBack,
    /// Session state lived on the connection: ERR 1927, closed.
    Pinned,
    /// Outcome unknown: closed as a direct connection would end.
    Unknown,
    /// Nothing lived on the connection (it was kept for its warnings, or
    /// until a KILL landed): the session goes on, told nothing.
    Nothing,
    /// A transaction was replayed on the new writer (`--transaction-replay`):
    /// the session goes on, told nothing.
    Replayed,
}

impl LostOutcome {
    /// Index into `metrics::WRITER_LOST_OUTCOMES`.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What the lost connection took with it.
enum Fate {
    /// Session state lived on it (why).
    Pinned(&'static str),
    /// A transaction, certainly rolled back; `rollback`: the command in
    /// flight was a plain ROLLBACK.
    RolledBack { rollback: bool },
    /// A statement whose outcome is unknown.
    Unknown(&'static str),
    /// No transaction and nothing in flight.
    Nothing,
}

impl Session {
    /// The server this session's connection reaches (set at each lease),
    /// named in what the client is told when it is lost.
    /// `replica`: the lease was a read's, on a replica.
    pub fn set_backend_server(&mut self, server: Option<u16>, replica: bool) {
        self.backend_server = server.map(|i| (i, replica));
    }

    /// The relay ended with [`RelayEnd::WriterLost`]: see the module docs.
    pub(super) fn on_writer_lost(
        &mut self,
        lost: Lost,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        self.has_backend = false;
        let fate = match &self.state {
            State::Relay(relay) => self.fate_of(relay.tracker(), lost.owed),
            _ => return self.close(out),
        };
        let (writer, failover) = self.lost_server(ctx);
        let lost = match fate {
            // A replica's loss is no failover: not replayed.
            Fate::RolledBack { rollback: false } if !failover.is_empty() => {
                match self.replay_instead(lost, &writer, failover, ctx, out) {
                    Some(lost) => lost,
                    None => return,
                }
            }
            _ => lost,
        };
        out.push(SessionAction::WriterLost(match fate {
            Fate::RolledBack { .. } => LostOutcome::RolledBack,
            Fate::Pinned(_) => LostOutcome::Pinned,
            Fate::Unknown(_) => LostOutcome::Unknown,
            Fate::Nothing => LostOutcome::Nothing,
        }));
        match fate {
            Fate::RolledBack { rollback } => {
                out.push(SessionAction::Log(format!(
                    "{writer} was lost mid-transaction ({}); the transaction was rolled back; the client is told and the session goes on",
                    lost.cause
                )));
                let answer = rolled_back_answer(&writer, failover, rollback, self.tx.as_deref());
                self.park_after_loss(lost, Some(answer), ctx, out);
            }
            Fate::Nothing => {
                out.push(SessionAction::Log(format!(
                    "{writer} was lost ({}) with no transaction on it; the session goes on",
                    lost.cause
                )));
                self.park_after_loss(lost, None, ctx, out);
            }
            Fate::Pinned(why) => {
                out.push(SessionAction::Log(format!(
                    "{writer} was lost ({}) while the session held state on its connection ({why}); ERR 1927, client disconnected",
                    lost.cause
                )));
                out.push(SessionAction::Release { clean: false });
                // An answer to the command in flight (sequence id 1), or
                // unasked for (0), read at the client's next command.
                self.seq = u8::from(lost.owed);
                let msg = format!(
                    "ringgate: {writer} was lost{failover} while this session was pinned to its connection ({why}); that state cannot move to another server, and any open transaction was rolled back; reconnect"
                );
                self.send_err(ER_CONNECTION_KILLED, &msg, State::SendErrThenClose, out);
            }
            Fate::Unknown(what) => {
                out.push(SessionAction::Log(format!(
                    "backend connection lost {} with {what}; its outcome is unknown, so the client is disconnected as a direct connection would be",
                    lost.cause
                )));
                out.push(SessionAction::Release { clean: false });
                self.close(out);
            }
        }
    }

    /// The server whose connection was lost, as the client is told (`the
    /// writer ADDR`), and `" (failover)"` when it was the writer. A
    /// replica's loss is no failover: only the read (or read-only
    /// transaction) on it is lost.
    fn lost_server(&self, ctx: &SessionCtx) -> (String, &'static str) {
        match self.backend_server {
            Some((i, replica)) => {
                let role = if replica { "replica" } else { "writer" };
                let name = ctx
                    .servers
                    .get(usize::from(i))
                    .map_or_else(|| format!("the {role}"), |a| format!("the {role} {a}"));
                (name, if replica { "" } else { " (failover)" })
            }
            None => ("the writer".to_string(), " (failover)"),
        }
    }

    /// `--transaction-replay`: replay the transaction rolled back with
    /// `writer` instead of telling the client (`session/tx_replay.rs`);
    /// `lost` back when no replay runs.
    fn replay_instead(
        &mut self,
        lost: Lost,
        writer: &str,
        failover: &str,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) -> Option<Lost> {
        let answer = rolled_back_answer(writer, failover, false, self.tx.as_deref());
        let cause = lost.cause.clone();
        match self.try_replay(lost, answer, ctx.now, out) {
            Ok(()) => {
                out.push(SessionAction::Log(format!(
                    "{writer} was lost mid-transaction ({cause}); replaying the transaction on the new writer"
                )));
                None
            }
            Err((lost, _)) => Some(lost),
        }
    }

    /// What died with the connection (see [`Fate`]).
    fn fate_of(&self, tracker: &Tracker, owed: bool) -> Fate {
        let Some(tx) = self.tx.as_deref() else {
            return Fate::Pinned("session pooling");
        };
        if let Some(why) = tx.holds().filter(|w| *w != "warnings") {
            return Fate::Pinned(why);
        }
        if self.stmts.as_ref().is_some_and(|r| r.holds_backend()) {
            return Fate::Pinned("statement");
        }
        if !(tracker.in_transaction() || tx.maybe_in_transaction()) {
            return if owed {
                Fate::Unknown("an autocommit statement in flight")
            } else {
                Fate::Nothing
            };
        }
        if !owed {
            return Fate::RolledBack { rollback: false };
        }
        // A prepared statement's execute runs the text it was prepared
        // from (the registry's, since the command names only an id).
        let prepared = self.stmts.as_ref().and_then(|r| r.in_flight_execute());
        let sql = match tracker.owed_command() {
            Some((COM_QUERY, Some(sql))) => Some(sql),
            Some((COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE, _)) => prepared,
            _ => None,
        };
        match (sql, tracker.owed_command()) {
            (Some(sql), _) => match tx.lost_statement(sql) {
                LostStatement::Rollback => Fate::RolledBack { rollback: true },
                LostStatement::NoCommit => Fate::RolledBack { rollback: false },
                LostStatement::MayCommit => {
                    Fate::Unknown("a COMMIT (or a statement that may commit) in flight")
                }
            },
            (None, Some((COM_PING | COM_INIT_DB | COM_FIELD_LIST | COM_STATISTICS, _))) => {
                Fate::RolledBack { rollback: false }
            }
            _ => Fate::Unknown("a command in flight that may have committed"),
        }
    }

    /// Parked again with no connection, after the loss of a transaction
    /// (or of nothing). `answer`: the reply to the command in flight if
    /// one was (`lost.owed`); otherwise the reply the client's next command
    /// gets ([`Session::answer_lost_transaction`]), if any.
    fn park_after_loss(
        &mut self,
        lost: Lost,
        answer: Option<Vec<u8>>,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let State::Relay(relay) = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        self.park_lost(Box::new(relay.into_tracker()), lost, answer, ctx.now, out);
    }

    /// [`Session::park_after_loss`] with the relay's tracker taken out:
    /// also where a transaction replay that did not succeed ends.
    pub(super) fn park_lost(
        &mut self,
        mut tracker: Box<Tracker>,
        lost: Lost,
        answer: Option<Vec<u8>>,
        now: Instant,
        out: &mut Vec<SessionAction>,
    ) {
        if let Some(record) = self.tx.as_mut().and_then(|t| t.replay_record_mut()) {
            record.clear();
        }
        if let Some(stmts) = self.stmts.as_mut() {
            stmts.connection_lost();
        }
        if let Some(tx) = self.tx.as_mut() {
            tx.connection_lost();
            tracker.reset();
            tracker.set_last_status(tx.status());
        }
        out.push(SessionAction::Park {
            clean: false,
            kept: None,
            reset: false,
            ask_last_insert_id: false,
        });
        if let (true, Some(answer)) = (lost.owed, answer.as_ref()) {
            // The relay's client read (in flight or done) outlives the
            // reply: parked_reply_written must not start another.
            self.reply_leaves_read = lost.reading;
            self.reply_late_read = lost.client_read;
            self.seq = 1;
            return self.send_payload(answer, State::ParkedReply { tracker }, out);
        }
        self.lost_transaction = answer;
        self.state = State::Parked {
            tracker,
            reading: lost.reading,
            since: now,
        };
        match lost.client_read {
            Some(res) => out.push(SessionAction::Redeliver(res)),
            None if !lost.reading => {
                out.push(SessionAction::ClearBuffer);
                out.push(SessionAction::ReadClient);
            }
            None => {}
        }
    }

    /// The first command after a transaction was lost while the session
    /// sat idle in it: the ERR (or, to a ROLLBACK, an OK) answers it
    /// instead of the server. True when it was answered.
    pub(super) fn answer_lost_transaction(
        &mut self,
        payload: &[u8],
        out: &mut Vec<SessionAction>,
    ) -> bool {
        let Some(err) = self.lost_transaction.take() else {
            return false;
        };
        let rollback = payload.strip_prefix(&[COM_QUERY]).is_some_and(|sql| {
            self.tx
                .as_deref()
                .is_some_and(|tx| tx.lost_statement(sql) == LostStatement::Rollback)
        });
        let answer = match (rollback, self.tx.as_deref()) {
            (true, Some(tx)) => ok_payload(0, 0, tx.status(), 0),
            _ => err,
        };
        let State::Parked { tracker, .. } = std::mem::replace(&mut self.state, State::Closed)
        else {
            return false;
        };
        self.seq = 1;
        self.send_payload(&answer, State::ParkedReply { tracker }, out);
        true
    }
}

/// The reply to a command whose transaction died with the writer: an OK to
/// a plain ROLLBACK, else ERR 1213.
fn rolled_back_answer(
    writer: &str,
    failover: &str,
    rollback: bool,
    tx: Option<&TxState>,
) -> Vec<u8> {
    if rollback {
        let status = tx.map_or(SERVER_STATUS_AUTOCOMMIT, |t| t.status());
        return ok_payload(0, 0, status, 0);
    }
    err_payload(
        ER_LOCK_DEADLOCK,
        &format!(
            "ringgate: {writer} was lost mid-transaction{failover}; the transaction was rolled back; restart it"
        ),
    )
}

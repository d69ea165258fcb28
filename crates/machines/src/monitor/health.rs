//! Up, down or shunned, from the checks in a row: one failed check does not
//! take a server down (a busy server can miss one), `fall` in a row do; a
//! server that comes back is shunned until `rise` good checks in a row, so
//! that a server that restarts, or flaps, does not draw every worker's
//! reconnects at its first answer. While a server is down its checks back
//! off, doubling up to `max_backoff_factor` intervals.

use std::time::{Duration, Instant};

use super::Thresholds;

/// A server's state for routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Answers its checks: it may be given work.
    Up,
    /// Failed `fall` checks in a row, or never answered yet.
    Down,
    /// Answers again after being down, but not yet `rise` times in a row.
    Shunned,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Up => "up",
            State::Down => "down",
            State::Shunned => "shunned",
        }
    }
}

/// The counters behind a server's state.
#[derive(Debug, Clone)]
pub struct Health {
    pub state: State,
    /// Failed checks in a row.
    pub failures: u32,
    /// Good checks in a row.
    pub successes: u32,
    /// It has been up at least once: the first answer after start-up is
    /// not a return (no reconnect storm to spare it) and brings it up at once.
    pub ever_up: bool,
    /// Why the last check failed.
    pub last_error: Option<String>,
    pub next_check: Instant,
}

impl Health {
    pub(super) fn new(now: Instant) -> Health {
        Health {
            state: State::Down,
            failures: 0,
            successes: 0,
            ever_up: false,
            last_error: Some("not checked yet".into()),
            next_check: now,
        }
    }

    /// One check ended (`failure` is its reason, None when it answered);
    /// returns (from, to, why) when the state changed.
    pub(super) fn on_check(
        &mut self,
        failure: Option<String>,
        t: &Thresholds,
        now: Instant,
    ) -> Option<(State, State, String)> {
        let from = self.state;
        let why = match failure {
            Some(reason) => self.failed(reason, t),
            None => self.answered(t),
        };
        self.next_check = now + self.interval(t);
        (self.state != from).then_some((from, self.state, why))
    }

    fn failed(&mut self, reason: String, t: &Thresholds) -> String {
        self.successes = 0;
        self.failures = self.failures.saturating_add(1);
        let why = match self.state {
            State::Up => format!(
                "{} failed checks in a row, the last: {reason}",
                self.failures
            ),
            // On probation: one failure sends it back.
            _ => format!("failed a check while coming back: {reason}"),
        };
        if self.state == State::Shunned || self.failures >= t.fall {
            self.state = State::Down;
        }
        self.last_error = Some(reason);
        why
    }

    fn answered(&mut self, t: &Thresholds) -> String {
        self.failures = 0;
        self.successes = self.successes.saturating_add(1);
        self.last_error = None;
        if !self.ever_up {
            self.ever_up = true;
            self.state = State::Up;
            return "first answer since start-up".into();
        }
        match self.state {
            State::Up => String::new(),
            State::Down | State::Shunned if self.successes >= t.rise => {
                self.state = State::Up;
                format!("{} good checks in a row", self.successes)
            }
            State::Down | State::Shunned => {
                self.state = State::Shunned;
                format!("answers again; up after {} good checks in a row", t.rise)
            }
        }
    }

    /// Time to the next check: the interval, doubled per failed check
    /// beyond `fall` while down.
    fn interval(&self, t: &Thresholds) -> Duration {
        if self.state != State::Down {
            return t.interval;
        }
        let extra = self.failures.saturating_sub(t.fall).min(16);
        let factor = (1u32 << extra).min(t.max_backoff_factor.max(1));
        t.interval.saturating_mul(factor)
    }
}

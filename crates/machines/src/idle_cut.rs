//! Sessions that sit idle holding a backend connection (inside a
//! transaction, or pinned to it) while other clients wait for one: which
//! are cut, and what they are told.
//!
//! A transaction-pooled session holds a connection only while it must, but
//! that "while" is the client's to end: a forgotten COMMIT, or a user
//! variable that pins the session, keeps the connection for as long as the
//! client stays connected. `--backend-max-connections` such sessions leave
//! every other client waiting, then refused with ERR 1040. So when clients
//! wait, the sessions idle past their bound (`--idle-transaction-timeout`,
//! `--idle-pinned-timeout`) are cut, the longest idle first and no more
//! than there are waiters: the connection is reset (COM_RESET_CONNECTION
//! rolls the transaction back and drops the session's state) and given to
//! a waiter, and the client gets the ERR a MySQL 8 server sends when it
//! disconnects an idle client. Nothing is cut while nobody waits.

use std::time::Duration;

use crate::ids::SessionId;
use wire::constants::ER_CLIENT_INTERACTION_TIMEOUT;
use wire::reply::err_payload;

/// What an idle session holds its backend connection for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// An open transaction (the server's SERVER_STATUS_IN_TRANS).
    Transaction,
    /// Transaction pooling: state that lives on the connection (a pin
    /// reason, table locks, warnings kept for SHOW WARNINGS, a cursor),
    /// named as in `ringgate_sessions_pinned_total`'s `reason`.
    Pinned(&'static str),
}

impl Held {
    /// Index into `metrics::IDLE_CUT_HELD`.
    pub fn index(self) -> usize {
        match self {
            Held::Transaction => 0,
            Held::Pinned(_) => 1,
        }
    }

    /// The flag that bounds it.
    pub fn flag(self) -> &'static str {
        match self {
            Held::Transaction => "--idle-transaction-timeout",
            Held::Pinned(_) => "--idle-pinned-timeout",
        }
    }

    /// What it held, for the log line.
    pub fn describe(self) -> String {
        match self {
            Held::Transaction => "an open transaction (rolled back)".into(),
            Held::Pinned(why) => format!("a pinned connection ({why}; its session state is lost)"),
        }
    }
}

/// `--idle-transaction-timeout` and `--idle-pinned-timeout` (zero: never).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleCutLimits {
    pub transaction: Duration,
    pub pinned: Duration,
}

impl IdleCutLimits {
    /// The bound for `held`, None when that kind is never cut.
    pub fn limit(&self, held: Held) -> Option<Duration> {
        let limit = match held {
            Held::Transaction => self.transaction,
            Held::Pinned(_) => self.pinned,
        };
        (limit > Duration::ZERO).then_some(limit)
    }

    pub fn any(&self) -> bool {
        self.transaction > Duration::ZERO || self.pinned > Duration::ZERO
    }
}

/// A session idle past its bound: a candidate for a cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleHolder {
    pub session: SessionId,
    pub held: Held,
    pub idle: Duration,
}

/// Keep the `waiting` candidates idle longest (those are cut): one cut
/// frees one connection, which serves one waiter.
pub fn pick(candidates: &mut Vec<IdleHolder>, waiting: usize) {
    candidates.sort_by_key(|h| std::cmp::Reverse(h.idle));
    candidates.truncate(waiting);
}

/// The ERR the cut client reads at its next command: MySQL 8's
/// ER_CLIENT_INTERACTION_TIMEOUT with its first sentence, then the real
/// cause (MySQL's second sentence names wait_timeout, which is not it).
/// Sent with sequence id 0, as MySQL sends it: PyMySQL then reports 2013
/// (lost connection), as it does for MariaDB's own idle cut (a reset);
/// mysql2 and libmysqlclient 8.0.24+ show this text.
pub fn cut_err(held: Held, limit: Duration) -> Vec<u8> {
    let (what, lost) = match held {
        Held::Transaction => ("in a transaction", "the transaction was rolled back"),
        Held::Pinned(_) => (
            "holding a pinned backend connection",
            "its session state was reset",
        ),
    };
    err_payload(
        ER_CLIENT_INTERACTION_TIMEOUT,
        &format!(
            "The client was disconnected by the server because of inactivity. ringgate: idle {what} for {} ({limit:?}) while other clients waited for a backend connection; {lost}",
            held.flag(),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(index: u32, idle_ms: u64) -> IdleHolder {
        IdleHolder {
            session: SessionId {
                index,
                generation: 0,
            },
            held: Held::Transaction,
            idle: Duration::from_millis(idle_ms),
        }
    }

    #[test]
    fn the_longest_idle_are_cut_one_per_waiter() {
        let mut c = vec![holder(1, 1500), holder(2, 4000), holder(3, 2000)];
        pick(&mut c, 2);
        let cut: Vec<u32> = c.iter().map(|h| h.session.index).collect();
        assert_eq!(cut, [2, 3]);
        pick(&mut c, 0);
        assert!(c.is_empty());
    }

    #[test]
    fn a_zero_bound_never_cuts() {
        let limits = IdleCutLimits {
            transaction: Duration::from_secs(10),
            pinned: Duration::ZERO,
        };
        assert_eq!(
            limits.limit(Held::Transaction),
            Some(Duration::from_secs(10))
        );
        assert_eq!(limits.limit(Held::Pinned("user_variable")), None);
        assert!(limits.any());
        assert!(!IdleCutLimits::default().any());
    }

    #[test]
    fn the_err_is_mysqls_inactivity_error_naming_the_flag() {
        let e = cut_err(Held::Transaction, Duration::from_secs(10));
        let (code, state, msg) = wire::reply::parse_err(&e).unwrap();
        assert_eq!(code, 4031);
        assert_eq!(state, "HY000");
        assert!(msg.starts_with("The client was disconnected by the server because of inactivity."));
        assert!(msg.contains("--idle-transaction-timeout (10s)"), "{msg}");
    }
}

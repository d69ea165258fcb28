//! Transaction pooling: how much of its binary prepared statements one
//! session may keep (`--max-prepared-statements`, `--max-prepared-bytes`).
//!
//! The session keeps what it needs to prepare each statement again on any
//! connection (`prepared.rs`), and a prepare of a text the connection
//! already holds is answered without the server, so the server's
//! `max_prepared_stmt_count` never sees a client that prepares one text
//! over and over without closing it. These limits stand in for it:
//! - a count, refused as the server refuses one prepare too many: ERR 1461
//!   (SQLSTATE 42000) "Can't create more than max_prepared_stmt_count
//!   statements (current value: N)". The default, 16,382, is MariaDB's and
//!   MySQL's default `max_prepared_stmt_count`, so a client that fits
//!   under the default server direct fits here;
//! - bytes: each distinct text (and its schema) once, however many ids use
//!   it, plus two bytes per parameter of each statement (the types an
//!   execute binds, which the session replays). Refused with the same code
//!   (the class drivers handle: too many statements kept), with wording
//!   that names the limit.

use wire::reply::err_payload_with_state;

/// ER_MAX_PREPARED_STMT_COUNT_REACHED.
const ER_MAX_PREPARED_STMT_COUNT_REACHED: u16 = 1461;
/// Its SQLSTATE (MariaDB 10.11 and MySQL answer 42000).
const SQLSTATE: &str = "42000";

/// `--max-prepared-statements` default: MariaDB's `max_prepared_stmt_count`.
pub const DEFAULT_MAX_STATEMENTS: usize = 16_382;

/// `--max-prepared-bytes` default (docs/operations.md, "Prepared statements
/// (binary protocol)", says why 8 MiB).
pub const DEFAULT_MAX_BYTES: usize = 8 << 20;

/// The limits of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatementLimits {
    pub statements: usize,
    pub bytes: usize,
}

impl Default for StatementLimits {
    fn default() -> StatementLimits {
        StatementLimits {
            statements: DEFAULT_MAX_STATEMENTS,
            bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Why one more statement does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Statements { max: usize },
    Bytes { max: usize },
}

impl StatementLimits {
    /// Whether a session may keep `statements` statements of `bytes`.
    pub fn check(&self, statements: usize, bytes: usize) -> Result<(), Refusal> {
        if statements > self.statements {
            return Err(Refusal::Statements {
                max: self.statements,
            });
        }
        if bytes > self.bytes {
            return Err(Refusal::Bytes { max: self.bytes });
        }
        Ok(())
    }
}

impl Refusal {
    /// The ERR payload the client gets for its prepare.
    pub fn err_payload(&self) -> Vec<u8> {
        let message = match self {
            Refusal::Statements { max } => format!(
                "Can't create more than max_prepared_stmt_count statements (current value: {max})"
            ),
            Refusal::Bytes { max } => format!(
                "Can't create more than max_prepared_stmt_count statements (this session's prepared statements would keep more than {max} bytes)"
            ),
        };
        err_payload_with_state(ER_MAX_PREPARED_STMT_COUNT_REACHED, SQLSTATE, &message)
    }

    /// The log line: the cause and what to do about it.
    pub fn log_line(&self) -> String {
        match self {
            Refusal::Statements { max } => format!(
                "prepare refused with ERR 1461: the session keeps {max} prepared statements (--max-prepared-statements); the client does not close the ones it no longer uses, or needs a higher limit"
            ),
            Refusal::Bytes { max } => format!(
                "prepare refused with ERR 1461: the session's prepared statements would keep more than {max} bytes of SQL text and parameter types (--max-prepared-bytes); the client does not close the ones it no longer uses, or needs a higher limit"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_refusal_is_the_servers_own_err() {
        let limits = StatementLimits::default();
        assert_eq!(limits.check(16_382, 0), Ok(()));
        let refusal = limits.check(16_383, 0).unwrap_err();
        let mut want = vec![0xFF, 0xB5, 0x05, b'#'];
        want.extend_from_slice(b"42000");
        want.extend_from_slice(
            b"Can't create more than max_prepared_stmt_count statements (current value: 16382)",
        );
        assert_eq!(refusal.err_payload(), want);
    }

    #[test]
    fn bytes_are_checked_after_the_count() {
        let limits = StatementLimits {
            statements: 2,
            bytes: 100,
        };
        assert_eq!(limits.check(2, 100), Ok(()));
        assert_eq!(limits.check(2, 101), Err(Refusal::Bytes { max: 100 }));
        assert_eq!(limits.check(3, 101), Err(Refusal::Statements { max: 2 }));
        let p = Refusal::Bytes { max: 100 }.err_payload();
        assert_eq!(u16::from_le_bytes([p[1], p[2]]), 1461);
        assert!(Refusal::Bytes { max: 100 }
            .log_line()
            .contains("--max-prepared-bytes"));
    }
}

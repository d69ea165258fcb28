//! One check of one server: log in as the monitor account (the connection
//! is kept between checks and opened again after any failure), then ask
//! `@@read_only`, the three GTID positions, and `SHOW ALL SLAVES STATUS`,
//! and type the answers into a [`CheckResult`].

use std::io::Write;
use std::time::{Duration, Instant};

use crate::blocking_login::{self, read_packet, BackendError, LoggedIn, LoginTarget};
use machines::monitor::{Channel, CheckResult, IoThread, Probe};
use wire::client_login::LoginError;
use wire::constants::COM_QUERY;
use wire::gtid::GtidPos;
use wire::packet::write_packet;
use wire::reply::com_payload;
use wire::text_result::{TextResult, TextResultReader, TextStep};

/// `@@read_only` and the positions need no privilege.
const VARIABLES: &str =
    "SELECT @@read_only, @@gtid_binlog_pos, @@gtid_slave_pos, @@gtid_current_pos";
/// Needs SLAVE MONITOR; has the Gtid_IO_Pos column SHOW SLAVE STATUS lacks,
/// and a row per replication connection.
const REPLICATION: &str = "SHOW ALL SLAVES STATUS";

/// How a probe failed after the login.
enum ProbeError {
    Io(std::io::Error),
    /// The server refused a statement (1227: a missing privilege).
    Refused(u16, String),
    /// An answer that does not parse, or a value out of its range.
    Answer(String),
}

impl From<std::io::Error> for ProbeError {
    fn from(e: std::io::Error) -> Self {
        ProbeError::Io(e)
    }
}

/// One server's kept connection.
pub struct ServerProbe {
    conn: Option<LoggedIn>,
}

impl ServerProbe {
    pub fn new() -> ServerProbe {
        ServerProbe { conn: None }
    }

    /// Runs one check within `target.timeout`.
    pub fn check(&mut self, target: &LoginTarget<'_>) -> CheckResult {
        let deadline = Instant::now() + target.timeout;
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => match blocking_login::login(target) {
                Ok(c) => c,
                Err(e) => return login_failure(e),
            },
        };
        match probe(&mut conn, deadline) {
            Ok(p) => {
                self.conn = Some(conn);
                CheckResult::Answered(p)
            }
            Err(ProbeError::Io(e)) if is_timeout(&e) => CheckResult::TimedOut,
            Err(ProbeError::Io(e)) => CheckResult::ConnectFailed(e.to_string()),
            Err(ProbeError::Refused(code, m)) => {
                CheckResult::ProbeFailed(format!("ERR {code}: {m}{}", grant_hint(code)))
            }
            Err(ProbeError::Answer(m)) => CheckResult::ProbeFailed(m),
        }
    }

    /// COM_QUIT on the kept connection, at shutdown.
    pub fn quit(&mut self) {
        if let Some(c) = self.conn.take() {
            c.quit();
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )
}

fn login_failure(e: BackendError) -> CheckResult {
    match e {
        BackendError::Io(e) if is_timeout(&e) => CheckResult::TimedOut,
        BackendError::Io(e) => CheckResult::ConnectFailed(e.to_string()),
        BackendError::Tls(e) => CheckResult::ConnectFailed(format!("TLS: {e}")),
        BackendError::Refused(e) => CheckResult::LoginRefused(e.to_string()),
        BackendError::Login(e @ LoginError::Server { .. }) => {
            CheckResult::LoginRefused(format!("{e} (check --monitor-user and its password)"))
        }
        BackendError::Login(e) => CheckResult::LoginRefused(e.to_string()),
    }
}

/// SHOW ALL SLAVES STATUS without SLAVE MONITOR is ERR 1227.
fn grant_hint(code: u16) -> &'static str {
    if code == 1227 {
        " (GRANT SLAVE MONITOR, BINLOG MONITOR ON *.* TO the --monitor-user)"
    } else {
        ""
    }
}

fn probe(conn: &mut LoggedIn, deadline: Instant) -> Result<Probe, ProbeError> {
    let vars = query(conn, VARIABLES, deadline)?;
    let value = |col: &str| vars.get(0, col).unwrap_or_default();
    let read_only = match value("@@read_only") {
        "0" => false,
        "1" => true,
        other => return Err(ProbeError::Answer(format!("@@read_only is {other:?}"))),
    };
    let status = query(conn, REPLICATION, deadline)?;
    let channels = (0..status.rows.len())
        .map(|row| channel(&status, row))
        .collect::<Result<_, _>>()?;
    Ok(Probe {
        read_only,
        gtid_binlog_pos: gtid(value("@@gtid_binlog_pos"))?,
        gtid_slave_pos: gtid(value("@@gtid_slave_pos"))?,
        gtid_current_pos: gtid(value("@@gtid_current_pos"))?,
        channels,
    })
}

fn gtid(text: &str) -> Result<GtidPos, ProbeError> {
    GtidPos::parse(text).map_err(|e| ProbeError::Answer(e.to_string()))
}

/// One row of SHOW ALL SLAVES STATUS.
fn channel(rs: &TextResult, row: usize) -> Result<Channel, ProbeError> {
    let col = |name: &str| rs.get(row, name);
    let io_text = col("Slave_IO_Running").unwrap_or_default();
    let io = IoThread::parse(io_text)
        .ok_or_else(|| ProbeError::Answer(format!("Slave_IO_Running is {io_text:?}")))?;
    let number = |name: &str| -> Result<Option<u64>, ProbeError> {
        col(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| ProbeError::Answer(format!("{name} is {v:?}")))
            })
            .transpose()
    };
    Ok(Channel {
        io,
        sql_running: col("Slave_SQL_Running") == Some("Yes"),
        seconds_behind: number("Seconds_Behind_Master")?,
        gtid_io_pos: gtid(col("Gtid_IO_Pos").unwrap_or_default())?,
        last_io_errno: number("Last_IO_Errno")?.unwrap_or(0) as u32,
    })
}

/// Sends `sql` as COM_QUERY and reads its whole answer by `deadline`.
fn query(conn: &mut LoggedIn, sql: &str, deadline: Instant) -> Result<TextResult, ProbeError> {
    let mut packet = Vec::with_capacity(sql.len() + 5);
    write_packet(&mut packet, 0, &com_payload(COM_QUERY, sql.as_bytes()));
    let left = deadline.saturating_duration_since(Instant::now());
    conn.stream
        .tcp()
        .set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
    conn.stream.write_all(&packet)?;
    let mut reader = TextResultReader::new();
    loop {
        let (_, payload) = read_packet(&mut conn.stream, &mut conn.buf, deadline)?;
        let step = reader
            .on_packet(&payload)
            .map_err(|e| ProbeError::Answer(format!("{sql}: {e}")))?;
        match step {
            TextStep::More => {}
            TextStep::Rows(rs) => return Ok(rs),
            TextStep::Ok => return Ok(TextResult::default()),
            TextStep::Err { code, message } => return Err(ProbeError::Refused(code, message)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(cells: &[(&str, Option<&str>)]) -> TextResult {
        TextResult {
            columns: cells.iter().map(|(c, _)| c.to_string()).collect(),
            rows: vec![cells.iter().map(|(_, v)| v.map(str::to_owned)).collect()],
        }
    }

    #[test]
    fn a_status_row_becomes_a_channel_and_null_stays_unknown() {
        let rs = status(&[
            ("Slave_IO_Running", Some("Connecting")),
            ("Slave_SQL_Running", Some("Yes")),
            ("Seconds_Behind_Master", None),
            ("Gtid_IO_Pos", Some("0-1-2028")),
            ("Last_IO_Errno", Some("2003")),
        ]);
        let Ok(c) = channel(&rs, 0) else {
            panic!("the row did not parse")
        };
        assert_eq!(c.io, IoThread::Connecting);
        assert!(c.sql_running);
        assert_eq!(c.seconds_behind, None);
        assert_eq!(c.gtid_io_pos.to_string(), "0-1-2028");
        assert_eq!(c.last_io_errno, 2003);
    }

    #[test]
    fn a_value_out_of_its_range_is_an_answer_error_not_a_panic() {
        for (col, bad) in [
            ("Slave_IO_Running", "Maybe"),
            ("Seconds_Behind_Master", "-1"),
            ("Gtid_IO_Pos", "garbage"),
        ] {
            let mut cells = vec![
                ("Slave_IO_Running", Some("Yes")),
                ("Slave_SQL_Running", Some("Yes")),
                ("Seconds_Behind_Master", Some("0")),
                ("Gtid_IO_Pos", Some("0-1-1")),
            ];
            for c in &mut cells {
                if c.0 == col {
                    c.1 = Some(bad);
                }
            }
            assert!(
                matches!(channel(&status(&cells), 0), Err(ProbeError::Answer(_))),
                "{col}={bad}"
            );
        }
    }
}

//! The sandbox server's own view: what reached it (its general log) and which of its
//! connections are open, read over a direct connection that bypasses the proxy.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::mysql_client::backend_admin;
use crate::rawclient::{raw_query, raw_query_value};

/// The sandbox server's general log, on (into the `mysql.general_log` table) while this value
/// lives; the previous settings come back on drop. One at a time per test binary: tests that
/// run in parallel would otherwise turn it off under each other.
pub struct GeneralLog {
    admin: mysql::Conn,
    restore: (u8, String),
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl GeneralLog {
    pub fn on() -> GeneralLog {
        use mysql::prelude::Queryable;
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let mut admin = backend_admin();
        let restore: (u8, String) = admin
            .query_first("SELECT @@global.general_log + 0, @@global.log_output")
            .expect("read the general log settings")
            .expect("one row");
        admin
            .query_drop("SET GLOBAL log_output = 'TABLE'")
            .expect("SET GLOBAL log_output");
        admin
            .query_drop("SET GLOBAL general_log = ON")
            .expect("SET GLOBAL general_log");
        GeneralLog {
            admin,
            restore,
            _one_at_a_time: one,
        }
    }

    /// (command_type, argument) of every general-log entry of server thread `thread_id`, in
    /// order.
    pub fn entries(&mut self, thread_id: u64) -> Vec<(String, String)> {
        use mysql::prelude::Queryable;
        self.admin
            .exec(
                "SELECT command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log \
                 WHERE thread_id = ? ORDER BY event_time",
                (thread_id,),
            )
            .expect("read mysql.general_log")
    }

    /// Whether server thread `thread_id` is still connected.
    pub fn thread_open(&mut self, thread_id: u64) -> bool {
        use mysql::prelude::Queryable;
        let n: Option<u64> = self
            .admin
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                (thread_id,),
            )
            .expect("read the processlist");
        n.unwrap_or(0) > 0
    }

    /// The server thread of the backend connection that serves raw session `s`, read with
    /// `SELECT CONNECTION_ID()` through the proxy. Also the positive control for
    /// [`GeneralLog::assert_closed_and_never_ran`]: that query must be in the log under this
    /// thread, or the log is not capturing this connection and proves nothing.
    ///
    /// The session first opens a transaction, so that it keeps that backend connection for
    /// its next command in either pooling mode: under transaction pooling an idle session
    /// holds none, and its next command could reach any connection of the pool.
    pub fn backend_thread_of(&mut self, s: &mut TcpStream) -> u64 {
        raw_query(s, "BEGIN").expect("BEGIN through the proxy");
        let tid: u64 = raw_query_value(s, "SELECT CONNECTION_ID()")
            .expect("SELECT CONNECTION_ID() through the proxy")
            .and_then(|v| v.parse().ok())
            .expect("a connection id");
        let entries = self.entries(tid);
        assert!(
            entries
                .iter()
                .any(|(c, a)| c == "Query" && a.contains("CONNECTION_ID()")),
            "the general log does not show SELECT CONNECTION_ID() for thread {tid}: {entries:?}"
        );
        tid
    }

    /// Waits until server thread `tid` has disconnected (the proxy closed that backend
    /// connection rather than keeping it for another client), then asserts that the thread
    /// ran no command after the positive control, and that no entry of it contains `marker`.
    pub fn assert_closed_and_never_ran(&mut self, tid: u64, marker: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.thread_open(tid) {
            assert!(
                Instant::now() < deadline,
                "{what}: backend thread {tid} still connected 10 s later (kept, not discarded)"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let entries = self.entries(tid);
        let control = entries
            .iter()
            .rposition(|(c, a)| c == "Query" && a.contains("CONNECTION_ID()"))
            .expect("the positive control is in the log");
        // Only the disconnect may follow (a COM_QUIT is logged as "Quit").
        let after: Vec<&(String, String)> = entries[control + 1..]
            .iter()
            .filter(|(c, _)| c != "Quit")
            .collect();
        assert!(
            after.is_empty() && !entries.iter().any(|(_, a)| a.contains(marker)),
            "{what}: commands reached backend thread {tid} after the control query: {after:?} \
             (all entries: {entries:?})"
        );
    }
}

impl Drop for GeneralLog {
    fn drop(&mut self) {
        use mysql::prelude::Queryable;
        let (on, output) = &self.restore;
        let _ = self
            .admin
            .query_drop(format!("SET GLOBAL general_log = {on}"));
        let _ = self
            .admin
            .exec_drop("SET GLOBAL log_output = ?", (output.as_str(),));
    }
}

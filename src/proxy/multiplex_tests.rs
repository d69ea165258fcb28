use super::*;
use crate::mysql::tracker::OkCounts;

fn class(sql: &str) -> Effect {
    classify_query(sql.as_bytes(), false)
}

fn pin(reason: PinReason) -> Effect {
    Effect::Pin(reason)
}

#[test]
fn plain_statements_do_not_pin() {
    for sql in [
        "SELECT 1",
        "select * from t where a = '@x' and b = \"GET_LOCK\"",
        "  /* hint */ SELECT @@session.sql_mode, @@autocommit",
        "INSERT INTO t VALUES (1)",
        "update t set a = 1",
        "BEGIN",
        "START TRANSACTION READ ONLY",
        "COMMIT",
        "rollback",
        "SELECT 1;",
        "SELECT 1 ;  \n",
        "-- comment\nSELECT 1",
        "SELECT @x",
        "CREATE TABLE t (a INT)",
        "SET STATEMENT max_statement_time=1 FOR SELECT 1",
        "SET GLOBAL max_connections = 100",
        "UNLOCK TABLES",
        "SELECT LAST_INSERT_ID()",
        "INSERT INTO t VALUES (1) ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)",
        // Inside a transaction these run on the connection that holds the
        // count; outside one the session refuses them before leasing.
        "SELECT FOUND_ROWS()",
        "SELECT ROW_COUNT()",
        // Several statements that leave nothing.
        "SELECT 1; SELECT 2",
        "SELECT IS_FREE_LOCK('a')",
    ] {
        assert_eq!(class(sql), Effect::Plain, "{sql}");
    }
}

#[test]
fn session_state_pins_with_its_reason() {
    for (sql, reason) in [
        ("SET @x = 1", PinReason::UserVariable),
        (
            "set @x := 1, @@session.sql_mode = ''",
            PinReason::UserVariable,
        ),
        ("SELECT @x := 5", PinReason::UserVariable),
        ("SELECT a INTO @v FROM t", PinReason::UserVariable),
        (
            "CREATE TEMPORARY TABLE tt (a INT)",
            PinReason::TemporaryTable,
        ),
        ("SELECT GET_LOCK('a', 1)", PinReason::LockFunction),
        ("do release_lock('a')", PinReason::LockFunction),
        ("LOCK TABLES t WRITE", PinReason::LockTables),
        ("FLUSH TABLES WITH READ LOCK", PinReason::FlushReadLock),
        (
            "SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1",
            PinReason::FoundRows,
        ),
        ("SELECT LAST_INSERT_ID(5)", PinReason::PreviousStatement),
        ("SELECT @@identity", PinReason::PreviousStatement),
        ("PREPARE s FROM 'SELECT 1'", PinReason::TextPrepare),
        ("SELECT 1; SET autocommit = 0", PinReason::MultiStatement),
        (
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
            PinReason::SessionCommand,
        ),
        ("SET ROLE r", PinReason::SessionCommand),
        ("CALL p()", PinReason::SessionCommand),
        ("XA START 'x'", PinReason::SessionCommand),
        ("HANDLER t OPEN", PinReason::SessionCommand),
        ("SET GLOBAL a = 1, SESSION b = 2", PinReason::SessionCommand),
        ("SELECT 1; SET @x = 1", PinReason::UserVariable),
        ("SELECT 'unterminated", PinReason::MultiStatement),
    ] {
        assert_eq!(class(sql), pin(reason), "{sql}");
    }
}

#[test]
fn sets_and_use_are_followed() {
    assert_eq!(class("SET autocommit = 0"), Effect::SetVariables);
    assert_eq!(class("SET AUTOCOMMIT = 0"), Effect::SetVariables);
    assert_eq!(class("SET NAMES latin1"), Effect::SetVariables);
    assert_eq!(
        class("SET SESSION sql_mode = 'ANSI', time_zone = '+01:00'"),
        Effect::SetVariables
    );
    assert_eq!(
        class("set @@session.wait_timeout = 10"),
        Effect::SetVariables
    );
    assert_eq!(
        class("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
        Effect::SetVariables
    );
    assert_eq!(class("USE test"), Effect::Use("test".into()));
    assert_eq!(class("/*!40101 SET NAMES utf8 */"), Effect::SetVariables);
    assert_eq!(class("SHOW WARNINGS"), Effect::Diagnostics);
    assert_eq!(class("show count(*) errors"), Effect::Diagnostics);
}

fn done(command: u8, text: &str, status: u16) -> Completed {
    Completed {
        command,
        text: Some(text.as_bytes().to_vec()),
        err: false,
        ok: Some(OkCounts {
            affected_rows: 0,
            last_insert_id: 0,
        }),
        warnings: 0,
        status,
    }
}

const AC: u16 = SERVER_STATUS_AUTOCOMMIT;

#[test]
fn a_stateless_session_is_releasable_between_transactions() {
    let mut tx = TxState::new(None, 45);
    assert!(tx.releasable());
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "BEGIN", AC | SERVER_STATUS_IN_TRANS)),
        None
    );
    assert!(!tx.releasable());
    tx.on_completed(&done(
        COM_QUERY,
        "INSERT INTO t VALUES (1)",
        AC | SERVER_STATUS_IN_TRANS,
    ));
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "COMMIT", AC));
    assert!(tx.releasable());
    assert_eq!(tx.settings().fingerprint(), 0);
}

#[test]
fn a_pin_is_reported_once_and_stays() {
    let mut tx = TxState::new(None, 45);
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "SET @x = 1", AC)),
        Some(PinReason::UserVariable)
    );
    assert!(!tx.releasable());
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "SELECT GET_LOCK('a', 1)", AC)),
        None
    );
    assert_eq!(tx.pinned(), Some(PinReason::UserVariable));
    assert!(!tx.releasable());
}

#[test]
fn binary_prepare_and_set_option_pin() {
    let mut tx = TxState::new(None, 45);
    assert_eq!(
        tx.on_completed(&done(COM_STMT_PREPARE, "SELECT ?", AC)),
        Some(PinReason::PreparedStatement)
    );
    let mut tx = TxState::new(None, 45);
    assert_eq!(
        tx.on_completed(&done(COM_SET_OPTION, "", AC)),
        Some(PinReason::SetOption)
    );
}

#[test]
fn an_unexplained_state_change_pins_an_explained_one_does_not() {
    let mut tx = TxState::new(None, 45);
    let changed = AC | SERVER_SESSION_STATE_CHANGED;
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "SET autocommit = 1", changed)),
        None
    );
    assert_eq!(tx.on_completed(&done(COM_QUERY, "USE db", changed)), None);
    assert_eq!(tx.schema(), Some("db"));
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "SELECT 1", changed)),
        Some(PinReason::StateChange)
    );
}

#[test]
fn settings_are_kept_per_variable_and_fingerprinted() {
    let mut a = TxState::new(None, 45);
    a.on_completed(&done(COM_QUERY, "SET AUTOCOMMIT = 0", AC));
    a.on_completed(&done(COM_QUERY, "SET NAMES latin1", 0));
    a.on_completed(&done(COM_QUERY, "SET AUTOCOMMIT = 0", 0));
    let setup = a.lease_setup(b"");
    assert_eq!(
        setup
            .wanted
            .diff_from(&Settings::default(), 45, 0)
            .unwrap()
            .as_deref(),
        Some(&b"SET NAMES latin1, @@session.autocommit = 0"[..])
    );
    assert_ne!(setup.settings, 0);
    let mut b = TxState::new(None, 45);
    b.on_completed(&done(COM_QUERY, "SET NAMES latin1", AC));
    b.on_completed(&done(COM_QUERY, "SET AUTOCOMMIT = 0", 0));
    assert_eq!(b.settings().fingerprint(), a.settings().fingerprint());
    // A failed SET is not replayed.
    let mut failed = done(COM_QUERY, "SET sql_mode = 'nonsense'", AC);
    failed.err = true;
    failed.ok = None;
    b.on_completed(&failed);
    assert_eq!(b.settings().fingerprint(), a.settings().fingerprint());
    // PyMySQL's SET NAMES of the handshake's own character set is none.
    let mut c = TxState::new(None, 45);
    c.on_completed(&done(COM_QUERY, "SET NAMES utf8mb4", AC));
    assert_eq!(c.settings().fingerprint(), 0);
    // An expression is not replayed: it pins.
    assert_eq!(
        c.on_completed(&done(
            COM_QUERY,
            "SET sql_mode = CONCAT(@@sql_mode, ',ANSI')",
            AC
        )),
        Some(PinReason::SessionCommand)
    );
    // The client's own COM_RESET_CONNECTION drops them.
    b.on_completed(&done(COM_RESET_CONNECTION, "", AC));
    assert_eq!(b.settings().fingerprint(), 0);
    assert!(b.lease_setup(b"").wanted.is_empty());
}

#[test]
fn warnings_hold_the_connection_for_the_next_statement() {
    let mut tx = TxState::new(None, 45);
    let mut warned = done(COM_QUERY, "INSERT INTO t VALUES ('x')", AC);
    warned.warnings = 1;
    tx.on_completed(&warned);
    assert!(!tx.releasable());
    // SHOW WARNINGS does not clear them: still held.
    tx.on_completed(&done(COM_QUERY, "SHOW WARNINGS", AC));
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "SHOW COUNT(*) WARNINGS", AC));
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "SELECT 1", AC));
    assert!(tx.releasable());
    // The warnings may still be in the connection's diagnostics area: it
    // is reset before another session gets it, once.
    assert!(tx.take_reset_needed());
    assert!(!tx.take_reset_needed());
    tx.on_completed(&done(COM_QUERY, "SELECT 1", AC));
    assert!(!tx.take_reset_needed());
}

#[test]
fn an_error_with_autocommit_off_holds_until_an_ok() {
    let mut tx = TxState::new(None, 45);
    let mut err = done(COM_QUERY, "SELECT * FROM missing", 0);
    err.err = true;
    err.ok = None;
    tx.on_completed(&err);
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "ROLLBACK", 0));
    assert!(tx.releasable());
    // With autocommit on an error leaves no transaction, but SHOW ERRORS
    // must reach its connection: held for the next statement, then reset.
    let mut err_ac = err.clone();
    err_ac.status = AC;
    tx.on_completed(&err_ac);
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "SHOW ERRORS", AC));
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "SELECT 1", AC));
    assert!(tx.releasable());
    assert!(tx.take_reset_needed());
}

#[test]
fn an_ok_with_an_insert_id_or_a_last_insert_id_call_asks_the_server() {
    let mut tx = TxState::new(None, 45);
    tx.on_completed(&done(COM_QUERY, "SELECT 1", AC));
    assert!(!tx.take_last_insert_id_ask());
    // An explicit AUTO_INCREMENT value is reported like a generated one.
    let mut insert = done(COM_QUERY, "INSERT INTO t (id) VALUES (900001)", AC);
    insert.ok = Some(OkCounts {
        affected_rows: 1,
        last_insert_id: 900001,
    });
    tx.on_completed(&insert);
    assert!(tx.take_last_insert_id_ask());
    assert!(!tx.take_last_insert_id_ask(), "asked once");
    // The server's answer wins over the OK packet's.
    tx.set_last_insert_id(Some(1));
    assert_eq!(
        tx.lease_setup(&query_packet("SELECT LAST_INSERT_ID()"))
            .always,
        vec![b"DO LAST_INSERT_ID(1)".to_vec()]
    );
    // An INSERT runs on a connection given the session's value first: one
    // with an explicit id leaves it, and the answer is read there.
    assert_eq!(
        tx.lease_setup(&query_packet("/* x */ insert INTO t (id) VALUES (5)"))
            .always,
        vec![b"DO LAST_INSERT_ID(1)".to_vec()]
    );
    assert_eq!(
        tx.lease_setup(&query_packet("REPLACE INTO t VALUES (5)"))
            .always,
        vec![b"DO LAST_INSERT_ID(1)".to_vec()]
    );
    assert!(tx
        .lease_setup(&query_packet("SELECT 'insert'"))
        .always
        .is_empty());
    // No answer: the OK packet's value stays.
    tx.set_last_insert_id(None);
    assert_eq!(
        tx.lease_setup(&query_packet("SELECT LAST_INSERT_ID()"))
            .always,
        vec![b"DO LAST_INSERT_ID(1)".to_vec()]
    );
    // LAST_INSERT_ID(0) sets it, with 0 in the OK packet.
    tx.on_completed(&done(
        COM_QUERY,
        "UPDATE t SET a = 1 WHERE id = LAST_INSERT_ID(0)",
        AC,
    ));
    assert!(tx.take_last_insert_id_ask());
}

#[test]
fn last_insert_id_comes_from_the_sessions_own_ok_packets() {
    let mut tx = TxState::new(None, 45);
    let mut insert = done(COM_QUERY, "INSERT INTO t VALUES (NULL)", AC);
    insert.ok = Some(OkCounts {
        affected_rows: 1,
        last_insert_id: 42,
    });
    tx.on_completed(&insert);
    // A later statement that generates no id keeps it.
    tx.on_completed(&done(COM_QUERY, "UPDATE t SET a = 1", AC));
    assert_eq!(
        tx.lease_setup(b"\x03select last_insert_id()").always,
        vec![b"DO LAST_INSERT_ID(42)".to_vec()]
    );
    assert!(tx.lease_setup(&query_packet("SELECT 1")).always.is_empty());
    // A transaction begins: a statement inside it may read the id.
    assert_eq!(
        tx.lease_setup(&query_packet("BEGIN")).always,
        vec![b"DO LAST_INSERT_ID(42)".to_vec()]
    );
    // LAST_INSERT_ID() in an expression does not pin; with an argument in a
    // SELECT, or next to other previous-statement reads, it does.
    assert_eq!(class("SELECT last_insert_id() + 0"), Effect::Plain);
    assert_eq!(
        class("SELECT * FROM t WHERE id = LAST_INSERT_ID( )"),
        Effect::Plain
    );
    assert_eq!(
        class("SELECT LAST_INSERT_ID(7)"),
        pin(PinReason::PreviousStatement)
    );
    assert_eq!(
        class("SELECT LAST_INSERT_ID() + @@identity"),
        pin(PinReason::PreviousStatement)
    );
}

#[test]
fn com_init_db_sets_the_schema_and_a_long_statement_pins() {
    let mut tx = TxState::new(Some("a".into()), 45);
    tx.on_completed(&done(COM_INIT_DB, "b", AC));
    assert_eq!(tx.schema(), Some("b"));
    let mut long = done(COM_QUERY, "", AC);
    long.text = None;
    assert_eq!(tx.on_completed(&long), Some(PinReason::Unclassified));
}

#[test]
fn pin_reason_labels_match_the_metrics_table() {
    let labels: Vec<&str> = PinReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels, crate::metrics::PIN_REASONS);
    for (i, r) in PinReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
    }
}

fn query_packet(sql: &str) -> Vec<u8> {
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(sql.as_bytes());
    let mut out = Vec::new();
    crate::mysql::packet::write_packet(&mut out, 0, &payload);
    out
}

#[test]
fn a_constant_set_may_run_on_a_connection_that_already_carries_its_result() {
    let mut a = TxState::new(None, 45);
    // Before its first SET the session wants a connection with no settings,
    // or one that carries exactly what this SET leads to.
    let setup = a.lease_setup(&query_packet("SET AUTOCOMMIT = 0"));
    assert_eq!(setup.settings, 0);
    a.on_completed(&done(COM_QUERY, "SET AUTOCOMMIT = 0", 0));
    assert_eq!(setup.alt, a.settings().fingerprint());
    assert_ne!(setup.alt, 0);
    // Not for a SET that reads the current value, nor for other statements.
    assert_eq!(
        a.lease_setup(&query_packet("SET sql_mode = CONCAT(@@sql_mode, ',ANSI')"))
            .alt,
        0
    );
    assert_eq!(a.lease_setup(&query_packet("SELECT 1")).alt, 0);
    // Pipelined behind something else: no.
    let mut two = query_packet("SET AUTOCOMMIT = 0");
    two.extend(query_packet("SELECT 1"));
    assert_eq!(a.lease_setup(&two).alt, 0);
}

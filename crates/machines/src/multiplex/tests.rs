use super::*;
use wire::tracker::OkCounts;

/// The sandbox's server (MariaDB 10.11.19).
pub const MARIADB: Server = Server::MariaDb(101119);

fn opts() -> LexOptions {
    LexOptions {
        server: MARIADB,
        ..LexOptions::default()
    }
}

fn class(sql: &str) -> Effect {
    classify_query(sql.as_bytes(), &opts())
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
        checksum: None,
        state_ok: None,
        rows: None,
    }
}

const AC: u16 = SERVER_STATUS_AUTOCOMMIT;

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

/// An OK with SERVER_SESSION_STATE_CHANGED and these session-state blocks.
fn ok_with_state(blocks: &[u8]) -> Vec<u8> {
    let mut p = vec![0x00, 0, 0, 0x02, 0x40, 0, 0, 0x00];
    p.push(blocks.len() as u8);
    p.extend_from_slice(blocks);
    p
}

fn sysvar_block(name: &str, value: &str) -> Vec<u8> {
    let mut data = vec![name.len() as u8];
    data.extend_from_slice(name.as_bytes());
    data.push(value.len() as u8);
    data.extend_from_slice(value.as_bytes());
    let mut b = vec![0x00, data.len() as u8];
    b.extend(data);
    b
}

#[test]
fn with_session_tracking_the_blocks_decide() {
    let changed = AC | SERVER_SESSION_STATE_CHANGED;
    let mut tx = TxState::new(None, 45, true, MARIADB, 0);
    // The trackers are the session's first settings.
    let setup = tx.lease_setup(b"");
    let turn_on = setup
        .wanted
        .diff_from(&Settings::default(), 45, 0)
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8(turn_on).unwrap(),
        "SET @@session.session_track_schema = ON, @@session.session_track_state_change = ON, \
         @@session.session_track_system_variables = '*', \
         @@session.session_track_transaction_info = 'CHARACTERISTICS'"
    );
    // BEGIN and COMMIT report the transaction state only: no pin (MariaDB
    // 10.11's OK payloads, crates/wire/src/testdata/session-track-oks.txt).
    let mut begin = done(COM_QUERY, "BEGIN", changed | SERVER_STATUS_IN_TRANS);
    begin.state_ok = Some(unhex(
        "000000034000000020050908545f5f5f5f5f5f5f0413125354415254205452414e53414354494f4e3b",
    ));
    assert_eq!(tx.on_completed(&begin), None);
    let mut insert = done(COM_QUERY, "INSERT INTO t (a) VALUES (1)", changed | 1);
    insert.state_ok = Some(unhex("00010103400000000b050908545f5f5f575f5f5f"));
    assert_eq!(tx.on_completed(&insert), None);
    // A result set inside the transaction: its EOF keeps the flag raised,
    // with no block to read.
    let mut read = done(COM_QUERY, "SELECT 1", changed | SERVER_STATUS_IN_TRANS);
    read.ok = None;
    assert_eq!(tx.on_completed(&read), None);
    let mut commit = done(COM_QUERY, "COMMIT", changed);
    commit.state_ok = Some(unhex("00000002400000000e0509085f5f5f5f5f5f5f5f040100"));
    assert_eq!(tx.on_completed(&commit), None);
    assert!(tx.releasable());
    // A SET of an expression takes the value the tracker reported.
    let mut set = done(
        COM_QUERY,
        "SET sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')",
        changed,
    );
    set.state_ok = Some(ok_with_state(
        &[
            sysvar_block("sql_mode", "STRICT_TRANS_TABLES,ANSI_QUOTES"),
            vec![0x02, 0x02, 0x01, b'1'],
        ]
        .concat(),
    ));
    assert_eq!(tx.on_completed(&set), None);
    let wanted = tx.lease_setup(b"").wanted;
    let before = Settings::initial(true, false);
    assert_eq!(
        wanted.diff_from(&before, 45, 0).unwrap().as_deref(),
        Some(&b"SET @@session.sql_mode = 'STRICT_TRANS_TABLES,ANSI_QUOTES'"[..])
    );
    // Without a reported value it pins.
    let mut bare = done(
        COM_QUERY,
        "SET wait_timeout = @@global.wait_timeout",
        changed,
    );
    bare.state_ok = Some(ok_with_state(&[0x02, 0x02, 0x01, b'1']));
    assert_eq!(tx.on_completed(&bare), Some(PinReason::SessionCommand));
    // Another state (a user variable inside a function, say) pins.
    let mut tx = TxState::new(None, 45, true, MARIADB, 0);
    let mut other = done(COM_QUERY, "DO 1", changed);
    other.state_ok = Some(unhex("000000024000000003020131"));
    assert_eq!(tx.on_completed(&other), Some(PinReason::StateChange));
    // The flag without blocks to read still pins.
    let mut tx = TxState::new(None, 45, true, MARIADB, 0);
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "DO 1", changed)),
        Some(PinReason::StateChange)
    );
}

#[test]
fn a_stateless_session_is_releasable_between_transactions() {
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
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
    // Only the proxy's own tracker, which every session carries.
    assert_eq!(tx.settings(), Settings::initial(false, false));
}

#[test]
fn a_pin_is_reported_once_and_stays() {
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
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
fn set_option_pins_binary_statements_do_not() {
    // Statement ids are mapped to each connection's (session/prepared_commands.rs).
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    for cmd in [COM_STMT_EXECUTE, COM_STMT_FETCH, COM_STMT_RESET] {
        assert_eq!(tx.on_completed(&done(cmd, "", AC)), None);
    }
    assert!(tx.releasable());
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    assert_eq!(
        tx.on_completed(&done(COM_SET_OPTION, "", AC)),
        Some(PinReason::SetOption)
    );
}

#[test]
fn an_unexplained_state_change_pins_an_explained_one_does_not() {
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
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
    let mut a = TxState::new(None, 45, false, MARIADB, 0);
    a.on_completed(&done(COM_QUERY, "SET AUTOCOMMIT = 0", AC));
    a.on_completed(&done(COM_QUERY, "SET NAMES latin1", 0));
    a.on_completed(&done(COM_QUERY, "SET AUTOCOMMIT = 0", 0));
    let setup = a.lease_setup(b"");
    assert_eq!(
        setup
            .wanted
            .diff_from(&Settings::initial(false, false), 45, 0)
            .unwrap()
            .as_deref(),
        Some(&b"SET NAMES latin1, @@session.autocommit = 0"[..])
    );
    assert_ne!(setup.settings, 0);
    let mut b = TxState::new(None, 45, false, MARIADB, 0);
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
    let mut c = TxState::new(None, 45, false, MARIADB, 0);
    c.on_completed(&done(COM_QUERY, "SET NAMES utf8mb4", AC));
    assert_eq!(c.settings(), Settings::initial(false, false));
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
    assert_eq!(b.settings(), Settings::initial(false, false));
    assert_eq!(b.lease_setup(b"").wanted, Settings::initial(false, false));
    // ...and the trackers on its connection: it is reset before reuse.
    assert!(b.take_reset_needed());
}

#[test]
fn warnings_hold_the_connection_for_the_next_statement() {
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
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
fn commands_that_run_no_statement_keep_the_warnings_hold() {
    // MariaDB keeps the warnings readable after COM_PING, COM_STATISTICS
    // and COM_INIT_DB (mysql-connector's cursor() pings before its SHOW
    // WARNINGS); a statement that leaves none lets the connection go.
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    let mut warned = done(COM_QUERY, "SELECT 'a' + 'b'", AC);
    warned.warnings = 2;
    tx.on_completed(&warned);
    for (command, text) in [(COM_PING, ""), (COM_STATISTICS, ""), (COM_INIT_DB, "db")] {
        tx.on_completed(&done(command, text, AC));
        assert!(!tx.releasable(), "command 0x{command:02x} ended the hold");
    }
    tx.on_completed(&done(COM_QUERY, "SHOW WARNINGS", AC));
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "SELECT 1", AC));
    assert!(tx.releasable());
}

#[test]
fn an_executed_prepared_statement_pins_as_its_query_would() {
    let exec = |tx: &mut TxState, sql: &str| {
        let c = done(COM_STMT_EXECUTE, "", AC);
        tx.on_statement_executed(sql.as_bytes(), &c)
    };
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    assert_eq!(exec(&mut tx, "SELECT * FROM t WHERE id = ?"), None);
    assert_eq!(exec(&mut tx, "INSERT INTO t VALUES (?)"), None);
    assert!(tx.releasable());
    assert_eq!(
        exec(&mut tx, "CREATE TEMPORARY TABLE tmp (b TIME)"),
        Some(PinReason::TemporaryTable)
    );
    assert!(!tx.releasable());
    // Once pinned, nothing more to report.
    assert_eq!(exec(&mut tx, "SET @x = ?"), None);
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    assert_eq!(exec(&mut tx, "SET @x = ?"), Some(PinReason::UserVariable));
    // A SET of a system variable: its value is a parameter, not replayable.
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    assert_eq!(
        exec(&mut tx, "SET time_zone = ?"),
        Some(PinReason::SessionCommand)
    );
    // A failed execute changed nothing.
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    let mut failed = done(COM_STMT_EXECUTE, "", AC);
    failed.err = true;
    assert_eq!(
        tx.on_statement_executed(b"CREATE TEMPORARY TABLE tmp (b TIME)", &failed),
        None
    );
}

#[test]
fn an_error_with_autocommit_off_holds_until_an_ok() {
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
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
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
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
            .last_insert_id,
        Some(1)
    );
    // An INSERT runs on a connection given the session's value first: one
    // with an explicit id leaves it, and the answer is read there.
    assert_eq!(
        tx.lease_setup(&query_packet("/* x */ insert INTO t (id) VALUES (5)"))
            .last_insert_id,
        Some(1)
    );
    assert_eq!(
        tx.lease_setup(&query_packet("REPLACE INTO t VALUES (5)"))
            .last_insert_id,
        Some(1)
    );
    assert!(tx
        .lease_setup(&query_packet("SELECT 'insert'"))
        .last_insert_id
        .is_none());
    // The lexer's reads, not a text search: not in a string or a comment,
    // but @@identity and @@last_insert_id.
    for sql in [
        "SELECT 'LAST_INSERT_ID()'",
        "SELECT 1 /* last_insert_id() */",
    ] {
        assert_eq!(
            tx.lease_setup(&query_packet(sql)).last_insert_id,
            None,
            "{sql}"
        );
    }
    for sql in [
        "SELECT @@identity",
        "SELECT @@session.last_insert_id",
        "DO LAST_INSERT_ID()",
    ] {
        assert_eq!(
            tx.lease_setup(&query_packet(sql)).last_insert_id,
            Some(1),
            "{sql}"
        );
    }
    // No answer: the OK packet's value stays.
    tx.set_last_insert_id(None);
    assert_eq!(
        tx.lease_setup(&query_packet("SELECT LAST_INSERT_ID()"))
            .last_insert_id,
        Some(1)
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
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    let mut insert = done(COM_QUERY, "INSERT INTO t VALUES (NULL)", AC);
    insert.ok = Some(OkCounts {
        affected_rows: 1,
        last_insert_id: 42,
    });
    tx.on_completed(&insert);
    // A later statement that generates no id keeps it.
    tx.on_completed(&done(COM_QUERY, "UPDATE t SET a = 1", AC));
    assert_eq!(
        tx.lease_setup(b"\x03select last_insert_id()")
            .last_insert_id,
        Some(42)
    );
    assert!(tx
        .lease_setup(&query_packet("SELECT 1"))
        .last_insert_id
        .is_none());
    // A transaction begins: a statement inside it may read the id.
    assert_eq!(
        tx.lease_setup(&query_packet("BEGIN")).last_insert_id,
        Some(42)
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
    let mut tx = TxState::new(Some("a".into()), 45, false, MARIADB, 0);
    tx.on_completed(&done(COM_INIT_DB, "b", AC));
    assert_eq!(tx.schema(), Some("b"));
    let mut long = done(COM_QUERY, "", AC);
    long.text = None;
    assert_eq!(tx.on_completed(&long), Some(PinReason::Unclassified));
}

#[test]
fn pin_reason_labels_match_the_metrics_table() {
    let labels: Vec<&str> = PinReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels, metrics::PIN_REASONS);
    for (i, r) in PinReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
    }
}

/// A framed COM_QUERY of `sql` (sequence 0), as a client sends it; the
/// classifier's tests use it too.
pub(super) fn query_packet(sql: &str) -> Vec<u8> {
    query_packet_bytes(sql.as_bytes())
}

fn query_packet_bytes(sql: &[u8]) -> Vec<u8> {
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(sql);
    let mut out = Vec::new();
    wire::packet::write_packet(&mut out, 0, &payload);
    out
}

#[test]
fn a_constant_set_may_run_on_a_connection_that_already_carries_its_result() {
    let mut a = TxState::new(None, 45, false, MARIADB, 0);
    // Before its first SET the session wants a connection with no settings,
    // or one that carries exactly what this SET leads to.
    let setup = a.lease_setup(&query_packet("SET AUTOCOMMIT = 0"));
    assert_eq!(
        setup.settings,
        Settings::initial(false, false).fingerprint()
    );
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

#[test]
fn lock_tables_holds_the_connection_until_unlock_tables() {
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "LOCK TABLES t READ", AC)),
        Some(PinReason::LockTables)
    );
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "SELECT * FROM t", AC));
    assert!(!tx.releasable());
    assert_eq!(tx.on_completed(&done(COM_QUERY, "UNLOCK TABLES", AC)), None);
    assert!(tx.releasable());
    assert_eq!(tx.pinned(), None);
    // BEGIN releases them too.
    tx.on_completed(&done(COM_QUERY, "LOCK TABLE t WRITE", AC));
    assert!(!tx.releasable());
    tx.on_completed(&done(COM_QUERY, "BEGIN", AC | SERVER_STATUS_IN_TRANS));
    tx.on_completed(&done(COM_QUERY, "COMMIT", AC));
    assert!(tx.releasable());
    // A failed LOCK TABLES holds nothing.
    let mut failed = done(COM_QUERY, "LOCK TABLES missing READ", AC);
    failed.err = true;
    assert_eq!(tx.on_completed(&failed), None);
    tx.on_completed(&done(COM_QUERY, "SELECT 1", AC));
    assert!(tx.releasable());
    // A session pin beside it in one text stays.
    assert_eq!(
        classify_query(b"LOCK TABLES t READ; SET @x = 1", &opts()),
        Effect::Pin(PinReason::UserVariable)
    );
}

#[test]
fn the_answer_is_judged_from_its_own_text_not_the_leased_one() {
    // lease_setup lexes the command and on_completed reads the statements
    // back: only for the same text (a pipelined second command, or a
    // command the client changed, is lexed on its own).
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    tx.lease_setup(&query_packet("SELECT 1"));
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "SET @x = 1", AC)),
        Some(PinReason::UserVariable)
    );
    // The server reads a text in the modes its session had before it
    // ran: the last answer's status. With NO_BACKSLASH_ESCAPES there,
    // `'\'` is a whole string and a user-variable write follows.
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    let nbe = AC | SERVER_STATUS_NO_BACKSLASH_ESCAPES;
    tx.on_completed(&done(
        COM_QUERY,
        "SET sql_mode = 'NO_BACKSLASH_ESCAPES'",
        nbe,
    ));
    tx.lease_setup(&query_packet("SELECT '\\'; SET @x = 1"));
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "SELECT '\\'; SET @x = 1", nbe)),
        Some(PinReason::UserVariable)
    );
}

#[test]
fn plain_row_count_and_found_rows_are_answered_in_any_case() {
    let tx = TxState::new(None, 45, false, MARIADB, 0);
    assert_eq!(
        tx.answer_previous(b"select  Row_Count ( ) ;"),
        Some(("Row_Count ( )".to_owned(), -1))
    );
    assert_eq!(
        tx.answer_previous(b"  SELECT\tFOUND_ROWS()"),
        Some(("FOUND_ROWS()".to_owned(), 0))
    );
    for sql in [
        "SELECT 1",
        "SELECT ROW_COUNT()x",
        "SELECT ROW_COUNT",
        "SELECTROW_COUNT()",
        "SELECT ROW_COUNT() + 1",
        "SELECT FOUND_ROWS()()",
    ] {
        assert_eq!(tx.answer_previous(sql.as_bytes()), None, "{sql}");
    }
}

#[test]
fn setting_the_state_change_tracker_pins() {
    for sql in [
        "SET session_track_state_change = OFF",
        "SET @@session.session_track_state_change = 0",
        "SET autocommit = 1, session_track_state_change = OFF",
    ] {
        let mut tx = TxState::new(None, 45, true, MARIADB, 0);
        assert_eq!(
            tx.on_completed(&done(COM_QUERY, sql, AC)),
            Some(PinReason::SessionCommand),
            "{sql}"
        );
    }
    // Another tracker: the client now gets every block the server sends.
    let mut tx = TxState::new(None, 45, true, MARIADB, 0);
    assert_eq!(tx.client_view(), Some(ClientView::Defaults));
    assert_eq!(
        tx.on_completed(&done(COM_QUERY, "SET session_track_schema = OFF", AC)),
        None
    );
    assert_eq!(tx.client_view(), None);
    // A client without the capability never gets any.
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    tx.on_completed(&done(COM_QUERY, "SET session_track_schema = OFF", AC));
    assert_eq!(tx.client_view(), Some(ClientView::Untracked));
}

#[test]
fn a_multibyte_client_charset_pins_non_ascii_texts() {
    // gbk 0xBF 0x5C is one character: the server reads a string, then a
    // user-variable write; a byte-wise lexer reads one long string.
    let text = b"SELECT '\xbf\x5c', @w := 'A' -- '";
    let answer = |tx: &mut TxState| {
        let mut c = done(COM_QUERY, "", AC);
        c.text = Some(text.to_vec());
        tx.lease_setup(&query_packet_bytes(text));
        tx.on_completed(&c)
    };
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    assert_eq!(
        answer(&mut tx),
        None,
        "utf8mb4: no multi-byte pair ends in `\\`"
    );
    let mut tx = TxState::new(None, 45, false, MARIADB, 0);
    assert_eq!(tx.on_completed(&done(COM_QUERY, "SET NAMES gbk", AC)), None);
    assert_eq!(answer(&mut tx), Some(PinReason::MultiStatement));
    let mut tx = TxState::new(None, 28, false, MARIADB, 0);
    assert_eq!(answer(&mut tx), Some(PinReason::MultiStatement));
    // Back to a safe set: lexed byte-wise again.
    tx.on_completed(&done(COM_QUERY, "SET NAMES utf8mb4", AC));
    assert_eq!(answer(&mut tx), None);
}

#[test]
fn a_mode_change_inside_a_multi_statement_text_pins() {
    // The lexer reads the whole text in the modes before it; the server
    // reads what follows the SET in the new ones. A SET among several
    // statements pins, so the difference never reaches the pool.
    for text in [
        "SET sql_mode = 'ANSI_QUOTES'; SELECT 1 AS \"x\\\", @z := 'A' -- \"",
        "SET sql_mode = 'NO_BACKSLASH_ESCAPES'; SELECT 'x\\', @z := 'A' -- '",
        "SET NAMES gbk; DO '\u{5c}', 1",
    ] {
        let mut tx = TxState::new(None, 45, false, MARIADB, 0);
        tx.lease_setup(&query_packet(text));
        assert!(
            tx.on_completed(&done(COM_QUERY, text, AC)).is_some(),
            "{text}"
        );
        assert!(!tx.releasable(), "{text}");
    }
}

#[test]
fn a_statement_lost_with_its_connection_may_have_committed_unless_it_never_commits() {
    use crate::multiplex::LostStatement::*;
    let tx = TxState::default();
    let fate = |sql: &str| tx.lost_statement(sql.as_bytes());
    assert_eq!(fate("INSERT INTO t VALUES (1)"), NoCommit);
    assert_eq!(fate("  /* c */ select sleep(5)"), NoCommit);
    assert_eq!(fate("UPDATE t SET v = 2;"), NoCommit);
    assert_eq!(fate("ROLLBACK TO SAVEPOINT a"), NoCommit);
    assert_eq!(fate("ROLLBACK"), Rollback);
    assert_eq!(fate("rollback work"), Rollback);
    assert_eq!(fate("COMMIT"), MayCommit);
    assert_eq!(fate("CREATE TABLE x (i INT)"), MayCommit);
    assert_eq!(fate("BEGIN"), MayCommit);
    assert_eq!(fate("SET autocommit = 1"), MayCommit);
    assert_eq!(fate("CALL p()"), MayCommit);
    assert_eq!(fate("INSERT INTO t VALUES (1); COMMIT"), MayCommit);
    assert_eq!(fate("/*!COMMIT*/"), MayCommit);
    assert_eq!(fate(""), MayCommit);
}

/// MariaDB 10.11's OK for an autocommit INSERT that binlogged 0-1-33, with
/// `last_gtid` tracked (replication-facts: affected 1, insert id 13).
const INSERT_OK_GTID: &str = "00010d0240000000130011096c6173745f6774696406302d312d3333";

fn causal_tx(session_track: bool, mode: crate::causal::CausalMode) -> TxState {
    TxState::new(None, 45, session_track, MARIADB, 0)
        .with_causal(&crate::causal::CausalConfig::new(mode))
}

fn wait_text(tx: &mut TxState) -> Option<String> {
    use crate::causal::ReplicaRead;
    let w = tx
        .lease_setup(b"")
        .causal?
        .on_replica(std::time::Duration::from_secs(1), None);
    match w {
        ReplicaRead::Wait { sql, .. } => Some(String::from_utf8(sql).unwrap()),
        ReplicaRead::Run => None,
        ReplicaRead::Writer => Some("writer".into()),
    }
}

#[test]
fn causal_sessions_track_last_gtid_and_it_never_pins() {
    use crate::causal::CausalMode;
    let changed = AC | SERVER_SESSION_STATE_CHANGED;
    for session_track in [false, true] {
        let mut tx = causal_tx(session_track, CausalMode::Session);
        // Tracked clients have '*', which reports last_gtid; the others
        // get the default list plus last_gtid.
        assert!(tx.settings().tracks_last_gtid(), "{session_track}");
        assert!(!Settings::initial(false, false).tracks_last_gtid());
        assert_eq!(wait_text(&mut tx), None, "nothing written yet");
        // The statement's OK in autocommit: a last_gtid block alone (no
        // state-change block), flag raised.
        let mut insert = done(COM_QUERY, "INSERT INTO t (a) VALUES (1)", changed);
        insert.state_ok = Some(unhex(INSERT_OK_GTID));
        assert_eq!(tx.on_completed(&insert), None, "last_gtid must not pin");
        assert!(tx.releasable());
        assert_eq!(
            wait_text(&mut tx).as_deref(),
            Some("SELECT MASTER_GTID_WAIT('0-1-33', 1.000)")
        );
        // Inside a transaction the INSERT's OK carries nothing; COMMIT's
        // carries the GTID.
        tx.on_completed(&done(COM_QUERY, "BEGIN", AC | SERVER_STATUS_IN_TRANS));
        tx.on_completed(&done(
            COM_QUERY,
            "INSERT INTO t VALUES (2)",
            AC | SERVER_STATUS_IN_TRANS,
        ));
        let mut commit = done(COM_QUERY, "COMMIT", changed);
        commit.state_ok = Some(ok_with_state(&sysvar_block("last_gtid", "0-1-34")));
        assert_eq!(tx.on_completed(&commit), None);
        assert!(tx.releasable());
        assert_eq!(
            wait_text(&mut tx).as_deref(),
            Some("SELECT MASTER_GTID_WAIT('0-1-34', 1.000)")
        );
        // An ERR, or a result set, teaches nothing.
        let mut err = done(COM_QUERY, "COMMIT", changed);
        err.err = true;
        err.state_ok = Some(ok_with_state(&sysvar_block("last_gtid", "0-1-99")));
        tx.on_completed(&err);
        assert_eq!(
            wait_text(&mut tx).as_deref(),
            Some("SELECT MASTER_GTID_WAIT('0-1-34', 1.000)")
        );
    }
}

#[test]
fn causal_off_learns_nothing_and_keeps_the_old_trackers() {
    let mut tx = causal_tx(false, crate::causal::CausalMode::Off);
    assert_eq!(tx.settings(), Settings::initial(false, false));
    let mut commit = done(COM_QUERY, "COMMIT", AC | SERVER_SESSION_STATE_CHANGED);
    commit.state_ok = Some(ok_with_state(&sysvar_block("last_gtid", "0-1-34")));
    tx.on_completed(&commit);
    assert_eq!(tx.lease_setup(b"").causal, None);
}

#[test]
fn a_client_that_drops_last_gtid_from_its_trackers_reads_on_the_writer() {
    use crate::causal::CausalMode;
    let mut tx = causal_tx(true, CausalMode::Session);
    let set = done(
        COM_QUERY,
        "SET session_track_system_variables = 'autocommit'",
        AC,
    );
    assert_eq!(tx.on_completed(&set), None);
    assert_eq!(wait_text(&mut tx).as_deref(), Some("writer"));
    // One that keeps it, or asks for everything, still waits.
    for list in ["'autocommit,last_gtid'", "'*'"] {
        let mut tx = causal_tx(true, CausalMode::Session);
        let sql = format!("SET session_track_system_variables = {list}");
        assert_eq!(tx.on_completed(&done(COM_QUERY, &sql, AC)), None);
        assert_eq!(wait_text(&mut tx), None, "{list}");
    }
}

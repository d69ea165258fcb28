//! A table of statements and where the split sends them.

use super::*;

/// The sandbox's server (MariaDB 10.11.19).
fn opts() -> LexOptions {
    LexOptions {
        server: wire::lexer::Server::MariaDb(101119),
        ..LexOptions::default()
    }
}

fn route(sql: &str) -> Route {
    let opts = opts();
    route_of(
        sql.as_bytes(),
        &lexer::classify(sql.as_bytes(), &opts),
        &opts,
    )
}

#[test]
fn safe_reads_go_to_a_replica() {
    for sql in [
        "SELECT @@server_id",
        "select * from t where id = 1",
        "SELECT a, COUNT(*) FROM t GROUP BY a ORDER BY 2 DESC LIMIT 10;",
        "  /* a comment */ SELECT NOW(), UUID(), RAND(), CONCAT('a', 'b')",
        "(SELECT 1) UNION (SELECT 2)",
        "WITH c AS (SELECT 1 AS x) SELECT x FROM c",
        "EXPLAIN SELECT * FROM t",
        "EXPLAIN FORMAT=JSON SELECT * FROM t",
        "DESCRIBE SELECT 1",
        "SELECT * FROM t WHERE a IN (SELECT b FROM u) AND EXISTS (SELECT 1)",
        "SELECT 'FOR UPDATE', 'GET_LOCK(x)', 'INTO @x', '@y' FROM t",
        "SELECT @@session.sql_mode, @@global.read_only",
        "SELECT `for`, `into` FROM t",
        "SELECT * FROM t FOR SYSTEM_TIME AS OF TIMESTAMP '2024-01-01'",
    ] {
        assert_eq!(route(sql), Route::Read, "{sql}");
    }
}

#[test]
fn everything_else_goes_to_the_writer() {
    for sql in [
        // Writes and session state.
        "INSERT INTO t VALUES (1)",
        "UPDATE t SET a = 1",
        "DELETE FROM t",
        "REPLACE INTO t VALUES (1)",
        "SET @@session.sql_mode = ''",
        "SET NAMES utf8mb4",
        "USE shop",
        "BEGIN",
        "START TRANSACTION",
        "START TRANSACTION READ WRITE",
        "COMMIT",
        "CALL p()",
        "DO 1",
        "SHOW TABLES",
        "DESCRIBE t",
        "EXPLAIN UPDATE t SET a = 1",
        "CREATE TABLE t (a INT)",
        // Locking clauses.
        "SELECT * FROM t WHERE id = 1 FOR UPDATE",
        "SELECT * FROM t FOR SHARE",
        "SELECT * FROM t LOCK IN SHARE MODE",
        // INTO, user variables.
        "SELECT a INTO @x FROM t",
        "SELECT a FROM t INTO OUTFILE '/tmp/x'",
        "SELECT a INTO DUMPFILE '/tmp/x' FROM t",
        "SELECT @x := 1",
        "SELECT @x",
        "SELECT * FROM t WHERE a = @x",
        // Functions with side effects or per-connection answers.
        "SELECT GET_LOCK('a', 1)",
        "SELECT RELEASE_LOCK('a')",
        "SELECT RELEASE_ALL_LOCKS()",
        "SELECT IS_FREE_LOCK('a')",
        "SELECT IS_USED_LOCK('a')",
        "SELECT LAST_INSERT_ID()",
        "SELECT LAST_INSERT_ID() + 1",
        "SELECT ROW_COUNT()",
        "SELECT FOUND_ROWS()",
        "SELECT SQL_CALC_FOUND_ROWS * FROM t",
        "SELECT NEXTVAL(s)",
        "SELECT LASTVAL(s)",
        "SELECT SETVAL(s, 10)",
        "SELECT NEXT VALUE FOR s",
        "SELECT PREVIOUS VALUE FOR s",
        "SELECT SLEEP(1)",
        "SELECT BENCHMARK(10, MD5('a'))",
        "SELECT MASTER_GTID_WAIT('0-1-1', 1)",
        "SELECT MASTER_POS_WAIT('bin.000001', 4)",
        "SELECT CONNECTION_ID()",
        "select connection_id ()",
        "SELECT @@last_insert_id",
        "SELECT @@warning_count",
        // Stored functions (not declared).
        "SELECT f(1)",
        "SELECT shop.price_of(id) FROM t",
        "SELECT `price_of`(1)",
        // Several statements, or a text the lexer cannot split.
        "SELECT 1; SELECT 2",
        "START TRANSACTION READ ONLY; SELECT 1",
        "SELECT 'unterminated",
        "",
        "/* nothing */",
    ] {
        assert_eq!(route(sql), Route::Writer, "{sql}");
    }
}

#[test]
fn a_read_only_transaction_goes_to_a_replica_whole() {
    for sql in [
        "START TRANSACTION READ ONLY",
        "start transaction read only;",
        "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    ] {
        assert_eq!(route(sql), Route::ReadOnlyTransaction, "{sql}");
    }
    for sql in [
        "START TRANSACTION READ ONLY, READ WRITE",
        "BEGIN",
        "BEGIN WORK",
        "SET TRANSACTION READ ONLY",
    ] {
        assert_eq!(route(sql), Route::Writer, "{sql}");
    }
}

#[test]
fn hints_force_either_way() {
    assert_eq!(route("SELECT /* ringgate:writer */ 1"), Route::Writer);
    assert_eq!(
        route("/* RingGate:Writer */ SELECT @@server_id"),
        Route::Writer
    );
    assert_eq!(route("SELECT 1 -- ringgate:writer\n"), Route::Writer);
    assert_eq!(route("SELECT 1 # ringgate:writer"), Route::Writer);
    assert_eq!(route("/* ringgate:replica */ SELECT SLEEP(0)"), Route::Read);
    assert_eq!(
        route("SELECT * FROM t FOR UPDATE /* ringgate:replica */"),
        Route::Read
    );
    // Writer wins over replica.
    assert_eq!(
        route("/* ringgate:replica */ SELECT 1 /* ringgate:writer */"),
        Route::Writer
    );
    // A hint in a string is no hint.
    assert_eq!(route("SELECT '/* ringgate:writer */'"), Route::Read);
    assert_eq!(
        route("SELECT FOR_UPDATE('/* ringgate:replica */')"),
        Route::Writer
    );
    // The replica hint cannot move a statement that changes the session.
    for sql in [
        "/* ringgate:replica */ INSERT INTO t VALUES (1)",
        "/* ringgate:replica */ SELECT @x := 1",
        "/* ringgate:replica */ SELECT GET_LOCK('a', 1)",
        "/* ringgate:replica */ SET @@sql_mode = ''",
        "/* ringgate:replica */ SELECT f(1)",
        "/* ringgate:replica */ BEGIN",
    ] {
        let expected = if sql.contains("INSERT") {
            // Plain to the lexer: forced, and the replica refuses it.
            Route::Read
        } else {
            Route::Writer
        };
        assert_eq!(route(sql), expected, "{sql}");
    }
}

#[test]
fn declared_read_only_functions_may_go_to_a_replica() {
    static DECLARED: std::sync::LazyLock<Vec<Box<str>>> =
        std::sync::LazyLock::new(|| vec!["PRICE_OF".into()]);
    let opts = LexOptions {
        read_only_functions: DECLARED.as_slice(),
        ..opts()
    };
    let route = |sql: &str| {
        route_of(
            sql.as_bytes(),
            &lexer::classify(sql.as_bytes(), &opts),
            &opts,
        )
    };
    assert_eq!(route("SELECT price_of(id) FROM t"), Route::Read);
    assert_eq!(route("SELECT shop.price_of(1)"), Route::Read);
    assert_eq!(route("SELECT other_f(1)"), Route::Writer);
    assert_eq!(route("SELECT price_of(1) FOR UPDATE"), Route::Writer);
}

#[test]
fn the_writer_functions_are_sorted_and_upper_case() {
    assert!(WRITER_FUNCTIONS.windows(2).all(|w| w[0] < w[1]));
    assert!(WRITER_FUNCTIONS
        .iter()
        .all(|f| f.bytes().all(|b| !b.is_ascii_lowercase())));
}

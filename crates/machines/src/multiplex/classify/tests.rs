//! The text tests that compare in place (case-insensitively, on the
//! original bytes, skipping literals) and the CALL rule read from the
//! lexer's tokens: mixed case, comments, leading whitespace, executable
//! comments, literals and longer identifiers.

use super::*;
use crate::multiplex::tests::query_packet;

fn effect(sql: &str) -> Effect {
    let opts = LexOptions {
        server: crate::multiplex::tests::MARIADB,
        ..LexOptions::default()
    };
    classify_query(sql.as_bytes(), &opts)
}

#[test]
fn call_pins_whatever_comes_before_its_keyword() {
    for sql in [
        "CALL p()",
        "call p(1)",
        "CaLl p",
        "  \n\t call p()",
        "(CALL p())",
        "/* why */ CALL p()",
        "-- why\nCALL p()",
        "# why\n call p()",
        "/*!CALL p() */",
        "/*!50000 call p() */",
        "/*M!100100 Call p() */",
        "/*+ hint */ CALL p()",
        "SELECT 1; call p()",
    ] {
        assert_eq!(effect(sql), Effect::Pin(PinReason::SessionCommand), "{sql}");
    }
    for sql in [
        "SELECT 'CALL p()'",
        "SELECT `call` FROM t",
        "SELECT call_count FROM t",
        "/* CALL p() */ SELECT 1",
        "-- CALL p()\nSELECT 1",
        "UPDATE t SET a = 'call'",
    ] {
        assert_eq!(effect(sql), Effect::Plain, "{sql}");
    }
    // A CALL whose own text pins says why (and still counts as a call).
    assert_eq!(effect("CALL p(@out)"), Effect::Pin(PinReason::UserVariable));
    let st = lexer::classify(b"/*!CALL p(@out) */", &LexOptions::default());
    assert!(st[0].call);
    assert_eq!(st[0].class, Class::Pin(Pin::UserVariableWrite));
    assert!(!lexer::classify(b"SELECT 1", &LexOptions::default())[0].call);
}

#[test]
fn code_is_matched_in_any_case_outside_literals() {
    assert!(code_contains(b"set x = @@y", b"@@"));
    assert!(!code_contains(b"set x = '@@y'", b"@@"));
    assert!(!code_contains(b"set x = 'a\\'@@'", b"@@"));
    assert!(!code_contains(b"set x = 'a''@@'", b"@@"));
    assert!(!code_contains(b"set x = \"@@\"", b"@@"));
    assert!(!code_contains(b"set `@@x` = 1", b"@@"));
    // In a backquoted name the backslash escapes nothing.
    assert!(code_contains(b"set `a\\` = @@y", b"@@"));
    assert!(code_contains(b"SeLeCt DiAgNoStIcS", b"DIAGNOSTICS"));
    // An unterminated literal runs to the end.
    assert!(!code_contains(b"select 'abc @@x", b"@@"));
    assert!(code_contains_word(b"select ROW_COUNT()", &[b"ROW_COUNT"]));
    assert!(code_contains_word(b"select row_count()", &[b"ROW_COUNT"]));
    assert!(code_contains_word(
        b"select 'a'Row_Count()",
        &[b"ROW_COUNT"]
    ));
    assert!(code_contains_word(b"row_count", &[b"ROW_COUNT"]));
    assert!(!code_contains_word(
        b"select my_row_count()",
        &[b"ROW_COUNT"]
    ));
    assert!(!code_contains_word(b"select row_counts()", &[b"ROW_COUNT"]));
    assert!(!code_contains_word(b"select $row_count", &[b"ROW_COUNT"]));
    assert!(!code_contains_word(b"select row_count$", &[b"ROW_COUNT"]));
    assert!(!code_contains_word(
        b"select 'row_count()'",
        &[b"ROW_COUNT"]
    ));
    assert!(!code_contains_word(b"select `row_count`", &[b"ROW_COUNT"]));
    assert!(!code_contains_word(b"select 1", &[b"ROW_COUNT"]));
    assert!(!code_contains_word(b"", &[b"ROW_COUNT"]));
}

#[test]
fn reads_of_the_previous_statement_in_any_case() {
    for sql in [
        "SELECT ROW_COUNT() + 1",
        "select row_count() + 1",
        "  SELECT Found_Rows() > 0",
        "/*!SELECT FOUND_ROWS() */ + 1",
        "SELECT 1 /* row_count */",
    ] {
        assert!(reads_previous_statement(sql.as_bytes()), "{sql}");
    }
    for sql in [
        "SELECT 1",
        "SELECT 'ROW_COUNT()'",
        "SELECT `found_rows` FROM t",
        "SELECT my_row_count FROM t",
        "SELECT found_rows2 FROM t",
    ] {
        assert!(!reads_previous_statement(sql.as_bytes()), "{sql}");
    }
}

#[test]
fn may_insert_in_any_case_outside_literals() {
    for sql in [
        "INSERT INTO t VALUES (1)",
        "insert into t values (1)",
        "  \n InSeRt INTO t VALUES (1)",
        "/* x */ replace INTO t VALUES (1)",
        "/*!INSERT INTO t VALUES (1) */",
        "Load Data Infile 'f' INTO TABLE t",
        "WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a",
    ] {
        assert!(may_insert(&query_packet(sql)), "{sql}");
    }
    for sql in [
        "SELECT 1",
        "SELECT 'insert'",
        "SELECT `replace` FROM t",
        "SELECT insert_id FROM t",
        "SELECT reinsert FROM t",
        "SELECT \"load\"",
    ] {
        assert!(!may_insert(&query_packet(sql)), "{sql}");
    }
    // Not a COM_QUERY.
    assert!(!may_insert(b"\x05\x00\x00\x00\x02INSERT"));
}

#[test]
fn only_last_insert_id_reads_in_any_case() {
    for sql in [
        "SELECT LAST_INSERT_ID() + 1",
        "select last_insert_id ( ) + 1",
        "SELECT Last_Insert_Id() * 2, 'row_count()'",
    ] {
        assert_eq!(effect(sql), Effect::Plain, "{sql}");
    }
    for sql in [
        "SELECT LAST_INSERT_ID() + row_count()",
        "SELECT last_insert_id() + @@identity",
        "SELECT LAST_INSERT_ID(5) + 1",
        "SELECT LASTVAL(s), LAST_INSERT_ID() + 1",
        // An argument, even a literal, sets the value.
        "SELECT last_insert_id('x') + 1",
    ] {
        assert_eq!(
            effect(sql),
            Effect::Pin(PinReason::PreviousStatement),
            "{sql}"
        );
    }
    assert_eq!(
        effect("SELECT LAST_INSERT_ID() + row_count()"),
        Effect::Pin(PinReason::PreviousStatement)
    );
}

#[test]
fn a_constant_set_in_any_case() {
    let constant = |sql: &str| {
        let sts = lexer::classify(sql.as_bytes(), &LexOptions::default());
        constant_set(sql.as_bytes(), &sts)
    };
    assert!(constant("SET autocommit = 0"));
    assert!(constant("set Session sql_mode = 'a(b)@@c'"));
    assert!(constant("/* x */ SET NAMES utf8mb4"));
    assert!(!constant("SET sql_mode = @@SQL_MODE"));
    assert!(!constant("set sql_mode = concat('a', 'b')"));
    assert!(!constant("SELECT 1"));
}

#[test]
fn a_last_insert_id_read_does_not_hide_a_later_pin() {
    // The scan stops at its first pin; a LAST_INSERT_ID() read before a
    // lock or a variable write must not make the statement plain.
    for sql in [
        "SELECT LAST_INSERT_ID(), GET_LOCK('x', 0)",
        "SELECT LAST_INSERT_ID(), @x := 1",
        "SELECT LAST_INSERT_ID() INTO @x",
        "SELECT LAST_INSERT_ID(), SQL_CALC_FOUND_ROWS 1",
        "SELECT LAST_INSERT_ID(), /*!999999 ' */ GET_LOCK('x', 0) /* ' */",
        "SELECT LAST_INSERT_ID(), /*!999999 ' */ ROW_COUNT() /* ' */",
    ] {
        assert_ne!(effect(sql), Effect::Plain, "{sql}");
    }
    assert_eq!(
        effect("SELECT LAST_INSERT_ID() + 1, 'GET_LOCK('"),
        Effect::Plain
    );
}

use super::*;
use wire::constants::UTF8MB4_GENERAL_CI;
use wire::lexer::{classify, Class, LexOptions};

fn items(sql: &str) -> Vec<SetItem> {
    match &classify(sql.as_bytes(), &LexOptions::default())[0].class {
        Class::Set(items) => items.clone(),
        other => panic!("{sql}: {other:?}"),
    }
}

fn after(s: &Settings, sql: &str) -> Settings {
    s.with_items(&items(sql), UTF8MB4_GENERAL_CI).unwrap()
}

fn diff(want: &Settings, from: &Settings) -> Option<String> {
    want.diff_from(from, UTF8MB4_GENERAL_CI, 0)
        .unwrap()
        .map(|b| String::from_utf8(b).unwrap())
}

#[test]
fn a_set_names_of_the_handshake_collation_is_no_setting() {
    let none = Settings::default();
    assert_eq!(none.fingerprint(), 0);
    assert!(after(&none, "SET NAMES utf8mb4").is_empty());
    assert!(after(&none, "SET NAMES utf8mb4 COLLATE utf8mb4_general_ci").is_empty());
    assert!(!after(&none, "SET NAMES utf8mb4 COLLATE utf8mb4_bin").is_empty());
    assert!(!after(&none, "SET NAMES latin1").is_empty());
    // NAMES DEFAULT is the server's character set, not the handshake's.
    assert!(!after(&none, "SET NAMES DEFAULT").is_empty());
}

#[test]
fn pymysql_sessions_share_a_fingerprint_and_diff_per_variable() {
    let none = Settings::default();
    let a = after(&after(&none, "SET NAMES utf8mb4"), "SET AUTOCOMMIT = 0");
    let b = after(&none, "SET AUTOCOMMIT = 0");
    assert_eq!(a, b);
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert_ne!(a.fingerprint(), 0);
    assert_eq!(diff(&a, &b), None);
    // A fresh session on a connection another session left with autocommit off.
    assert_eq!(
        diff(&none, &a).as_deref(),
        Some("SET @@session.autocommit = DEFAULT")
    );
    assert_eq!(
        diff(&a, &none).as_deref(),
        Some("SET @@session.autocommit = 0")
    );
    let c = after(&a, "SET sql_mode = 'ANSI', wait_timeout = 60");
    assert_eq!(
        diff(&c, &a).as_deref(),
        Some("SET @@session.sql_mode = 'ANSI', @@session.wait_timeout = 60")
    );
    // The later value of a variable wins.
    let d = after(&c, "SET autocommit = 1");
    assert_eq!(
        diff(&d, &c).as_deref(),
        Some("SET @@session.autocommit = 1")
    );
}

#[test]
fn character_sets_go_back_to_the_handshake_not_to_default() {
    let none = Settings::default();
    let latin = after(&none, "SET NAMES latin1");
    assert_eq!(diff(&latin, &none).as_deref(), Some("SET NAMES latin1"));
    assert_eq!(
        diff(&none, &latin).as_deref(),
        Some("SET NAMES utf8mb4 COLLATE utf8mb4_general_ci")
    );
    let dflt = after(&none, "SET NAMES DEFAULT");
    assert_eq!(diff(&dflt, &none).as_deref(), Some("SET NAMES DEFAULT"));
    // One character-set variable on top of NAMES: NAMES first, then it.
    let results = after(&latin, "SET character_set_results = NULL");
    assert_eq!(
        diff(&results, &latin).as_deref(),
        Some("SET NAMES latin1, @@session.character_set_results = NULL")
    );
    assert_eq!(diff(&latin, &results).as_deref(), Some("SET NAMES latin1"));
    let only_results = after(&none, "SET character_set_results = NULL");
    assert_eq!(
        diff(&none, &only_results).as_deref(),
        Some("SET NAMES utf8mb4 COLLATE utf8mb4_general_ci")
    );
    // A later SET NAMES replaces the single variable.
    assert_eq!(after(&results, "SET NAMES latin1"), latin);
    // CHARACTER SET replaces NAMES.
    let cs = after(&latin, "SET CHARACTER SET cp1251");
    assert_eq!(
        diff(&cs, &latin).as_deref(),
        Some("SET CHARACTER SET cp1251")
    );
    // An unknown handshake collation cannot be gone back to.
    assert_eq!(none.diff_from(&latin, 200, 0), Err(()));
}

#[test]
fn sql_mode_cannot_go_back_under_ignore_space() {
    let none = Settings::default();
    let ansi = after(&none, "SET sql_mode = 'ANSI'");
    assert_eq!(
        none.diff_from(&ansi, UTF8MB4_GENERAL_CI, CLIENT_IGNORE_SPACE),
        Err(())
    );
    assert!(ansi
        .diff_from(&none, UTF8MB4_GENERAL_CI, CLIENT_IGNORE_SPACE)
        .is_ok());
}

#[test]
fn only_constants_are_replayed() {
    let none = Settings::default();
    for sql in [
        "SET sql_mode = CONCAT(@@sql_mode, ',ANSI')",
        "SET wait_timeout = @@global.wait_timeout",
        "SET wait_timeout = @x",
        "SET wait_timeout = ?",
        "SET time_zone = (SELECT '+00:00')",
    ] {
        assert!(none.with_items(&items(sql), 45).is_err(), "{sql}");
    }
    for sql in [
        "SET sql_mode = 'a(b@c'",
        "SET time_zone = '+00:00'",
        "SET @@session.autocommit = OFF",
        "SET SESSION wait_timeout = DEFAULT",
        "SET GLOBAL wait_timeout = @@wait_timeout, autocommit = 0",
    ] {
        assert!(none.with_items(&items(sql), 45).is_ok(), "{sql}");
    }
    // GLOBAL items leave the session alone.
    assert!(after(&none, "SET GLOBAL wait_timeout = 100").is_empty());
}

#[test]
fn session_transaction_characteristics() {
    let none = Settings::default();
    let s = none
        .with_session_transaction("ISOLATION LEVEL READ COMMITTED, READ ONLY")
        .unwrap();
    assert_eq!(
        diff(&s, &none).as_deref(),
        Some("SET @@session.tx_isolation = 'READ-COMMITTED', @@session.tx_read_only = 1")
    );
    let t = s
        .with_session_transaction("isolation level serializable")
        .unwrap();
    assert_eq!(
        diff(&t, &s).as_deref(),
        Some("SET @@session.tx_isolation = 'SERIALIZABLE'")
    );
    assert!(none
        .with_session_transaction("WITH CONSISTENT SNAPSHOT")
        .is_err());
}

#[test]
fn wait_timeout_is_read_from_the_sessions_own_setting() {
    use std::time::Duration;
    let none = Settings::default();
    assert_eq!(none.wait_timeout(), None);
    for (sql, want) in [
        ("SET wait_timeout = 5", Some(5)),
        ("SET SESSION wait_timeout=1", Some(1)),
        ("SET @@session.wait_timeout = 7", Some(7)),
        ("SET @@wait_timeout = '3'", Some(3)),
        ("SET wait_timeout = 0", Some(1)),
        ("SET wait_timeout = DEFAULT", None),
        ("SET GLOBAL wait_timeout = 2", None),
        ("SET interactive_timeout = 2", None),
    ] {
        assert_eq!(
            after(&none, sql).wait_timeout(),
            want.map(Duration::from_secs),
            "{sql}"
        );
    }
    // The later value wins.
    let a = after(
        &after(&none, "SET wait_timeout = 5"),
        "SET wait_timeout = DEFAULT",
    );
    assert_eq!(a.wait_timeout(), None);
}

//! Version-gated comments as each server reads them (the MariaDB facts
//! checked against 10.11.19), and the statements MariaDB's state-change
//! flag misses, recognised in every comment form.

use super::*;
use crate::lexer::{classify, first_pin, Class, LexOptions, Pin};

const MARIADB: Server = Server::MariaDb(101119);
const MYSQL: Server = Server::MySql(80036);

fn opts(server: Server) -> LexOptions {
    LexOptions {
        server,
        ..LexOptions::default()
    }
}

fn classes(sql: &str, server: Server) -> Vec<Class> {
    let st = classify(sql.as_bytes(), &opts(server));
    st.into_iter().map(|s| s.class).collect()
}

/// `SELECT 1 <comment>`: does the comment's `+1` run?
fn runs(comment: &str, server: Server) -> Option<bool> {
    let sql = format!("SELECT 1 {comment}");
    let toks = crate::lexer::tokenize(sql.as_bytes(), &opts(server)).ok()?;
    Some(toks.len() > 2)
}

#[test]
fn greetings() {
    assert_eq!(
        Server::from_greeting("5.5.5-10.11.19-MariaDB-0+deb12u1"),
        MARIADB
    );
    assert_eq!(
        Server::from_greeting("11.4.2-MariaDB-log"),
        Server::MariaDb(110402)
    );
    assert_eq!(Server::from_greeting("8.0.36"), MYSQL);
    assert_eq!(
        Server::from_greeting("8.4.0-ringgate"),
        Server::MySql(80400)
    );
    assert_eq!(Server::from_greeting("10.11"), Server::Unknown);
    assert_eq!(Server::from_greeting("banana"), Server::Unknown);
    assert_eq!(Server::from_greeting("8.100.1"), Server::Unknown);
}

#[test]
fn mariadb_runs_and_skips_as_the_server_does() {
    let cases = [
        ("/*! +1 */", true),
        ("/*!+1*/", true),
        ("/*!101119 +1 */", true),
        ("/*!101120 +1 */", false),
        ("/*!999999 +1 */", false),
        ("/*!100000 +1 */", true),
        ("/*!50699 +1 */", true),
        ("/*!50000+1 */", true),
        ("/*!00000 +1 */", true),
        // MySQL 5.7+ only: MariaDB skips them, unless marked M.
        ("/*!50700 +1 */", false),
        ("/*!80000 +1 */", false),
        ("/*!99999 +1 */", false),
        ("/*M!50700 +1 */", true),
        ("/*M!99999 +1 */", true),
        ("/*M!100000 +1 */", true),
        ("/*M!999999 +1 */", false),
        ("/*M! +1 */", true),
        // A seventh digit is code after a six-digit version.
        ("/*!5000012 */", false),
        // Lower-case m is no marker: an ordinary comment.
        ("/*m!50000 +1 */", false),
        // A skipped comment ignores quotes and `#`, and ends at the first
        // `*/` after one nested comment.
        ("/*!999999 ' */ +1 /* ' */", true),
        ("/*!999999 # x */ +1", true),
        ("/*!999999 /* x */ +1 */", false),
        ("/*!999999 /* x */ +1 */ +2", true),
        ("/*!999999 */ /*!50000 +1 */", true),
    ];
    for (comment, want) in cases {
        assert_eq!(runs(comment, MARIADB), Some(want), "{comment}");
    }
    // Fewer than five digits: no version, the digits are code.
    let toks = crate::lexer::tokenize(b"SELECT 1 /*!1234 */", &opts(MARIADB)).unwrap();
    assert_eq!(toks.len(), 3);
}

#[test]
fn mysql_knows_no_m_marker_and_runs_every_version_up_to_its_own() {
    assert_eq!(runs("/*!50700 +1 */", MYSQL), Some(true));
    assert_eq!(runs("/*!80036 +1 */", MYSQL), Some(true));
    assert_eq!(runs("/*!80037 +1 */", MYSQL), Some(false));
    assert_eq!(runs("/*M!50000 +1 */", MYSQL), Some(false));
    // Five digits before 8.1, six after: not decided.
    assert_eq!(runs("/*!800360 +1 */", MYSQL), None);
}

#[test]
fn an_unknown_server_decides_only_what_every_server_reads_alike() {
    assert_eq!(runs("/*! +1 */", Server::Unknown), Some(true));
    assert_eq!(runs("/*!40101 +1 */", Server::Unknown), Some(true));
    for unsure in [
        "/*!50700 +1 */",
        "/*!100100 +1 */",
        "/*M! +1 */",
        "/*M!50000 +1 */",
    ] {
        assert_eq!(runs(unsure, Server::Unknown), None, "{unsure}");
    }
    assert_eq!(
        classes("/*!999999 ' */ SET @x = 1 /* ' */", Server::Unknown),
        vec![Class::Pin(Pin::Unsplittable)]
    );
}

/// What MariaDB 10.11 raises no SESSION_STATE_CHANGED for (only the lexer
/// sees them), with the class each must get.
const FLAG_MISSES: [&str; 12] = [
    "SELECT @a := 1",
    "SELECT 2 INTO @b",
    "SELECT GET_LOCK('l', 0)",
    "DO GET_LOCK('l', 0)",
    "SELECT RELEASE_LOCK('l')",
    "HANDLER t OPEN",
    "LOCK TABLES t WRITE",
    "SELECT LAST_INSERT_ID(5)",
    "SET TRANSACTION READ ONLY",
    "SELECT SQL_CALC_FOUND_ROWS * FROM t",
    "XA START 'x'",
    "SET autocommit = 0",
];

#[test]
fn the_statements_the_flag_misses_are_seen_in_every_comment_form() {
    for stmt in FLAG_MISSES {
        let plain = classes(stmt, MARIADB);
        assert_ne!(plain, vec![Class::Plain], "{stmt}");
        let forms = [
            format!("/*! {stmt} */"),
            format!("/*!50000 {stmt} */"),
            format!("/*!101119 {stmt} */"),
            format!("/*M!50700 {stmt} */"),
            format!("/*M!100000 {stmt} */"),
            // Hidden behind comments the server skips.
            format!("/*!999999 ' */ {stmt} /* ' */"),
            format!("/*!50700 ' */ {stmt} /* ' */"),
            format!("/*!80000 \" */ {stmt} /* \" */"),
            format!("/*M!999999 ` */ {stmt} /* ` */"),
            format!("/*!101120 /* ' */ ' */ {stmt} -- '"),
        ];
        for sql in &forms {
            assert_eq!(classes(sql, MARIADB), plain, "{sql}");
        }
        // Inside a comment the server skips, it does not run.
        for sql in [
            format!("/*!999999 {stmt} */"),
            format!("/*!50700 {stmt} */"),
        ] {
            assert_eq!(classes(&sql, MARIADB), vec![Class::Empty], "{sql}");
        }
    }
}

#[test]
fn a_mysql_server_runs_what_mariadb_skips() {
    // `/*!80000` runs on MySQL 8.0.36: the quote opens a string there.
    assert_eq!(
        classes("/*!80000 ' */ SET @x = 1 /* ' */", MYSQL),
        vec![Class::Plain]
    );
    assert_eq!(
        first_pin(&classify(b"SELECT /*!80000 @x := 1, */ 2", &opts(MYSQL))),
        Some(Pin::UserVariableWrite)
    );
    // `/*M!` is an ordinary comment to MySQL.
    assert_eq!(
        classes("/*M!100000 SET @x = 1 */", MYSQL),
        vec![Class::Empty]
    );
}

use super::*;

/// The sandbox's server: MariaDB 10.11.19.
const MARIADB: LexOptions = LexOptions {
    no_backslash_escapes: false,
    ansi_quotes: false,
    ansi_quotes_known: true,
    ascii_safe_charset: true,
    high_bytes_in_words: true,
    server: Server::MariaDb(101119),
    read_only_functions: &[],
};

fn classes_with(sql: &str, opts: &LexOptions) -> Vec<Class> {
    let st = classify(sql.as_bytes(), opts);
    assert_round_trip(sql.as_bytes(), &st);
    st.into_iter().map(|s| s.class).collect()
}

fn classes(sql: &str) -> Vec<Class> {
    classes_with(sql, &MARIADB)
}

/// The class of a one-statement text.
fn one(sql: &str) -> Class {
    let c = classes(sql);
    assert_eq!(c.len(), 1, "{sql}: {c:?}");
    c.into_iter().next().unwrap()
}

fn pin(sql: &str) -> Option<Pin> {
    first_pin(&classify(sql.as_bytes(), &MARIADB))
}

/// Ranges are in order, cover the text, and are separated by single `;`.
fn assert_round_trip(sql: &[u8], st: &[Statement]) {
    assert!(!st.is_empty());
    let mut pos = 0;
    for (k, s) in st.iter().enumerate() {
        assert_eq!(s.range.start, pos, "statement {k} starts where expected");
        assert!(s.range.end <= sql.len());
        pos = s.range.end;
        if k + 1 < st.len() {
            assert_eq!(sql[pos], b';');
            pos += 1;
        }
    }
    assert_eq!(pos, sql.len());
}

fn var(scope: Scope, name: &str, value: &str) -> SetItem {
    SetItem::Variable {
        scope,
        name: name.into(),
        value: value.into(),
    }
}

#[test]
fn plain_statements() {
    assert_eq!(one("SELECT 1"), Class::Plain);
    assert_eq!(one("  \n\t select * from t where a = 'x;y'"), Class::Plain);
    assert_eq!(one("INSERT INTO t VALUES (1)"), Class::Plain);
    assert_eq!(one("/* lead */ -- c\n# c\nUPDATE t SET a=1"), Class::Plain);
    assert_eq!(one(""), Class::Empty);
    assert_eq!(one(" /* only */ -- comment"), Class::Empty);
}

#[test]
fn never_pin_on_reads() {
    assert_eq!(one("SELECT '@x'"), Class::Plain);
    assert_eq!(one("SELECT \"@x := 1\""), Class::Plain);
    assert_eq!(one("SELECT @@sql_mode"), Class::Plain);
    assert_eq!(
        one("SELECT @@session.sql_mode, @@GLOBAL.max_connections"),
        Class::Plain
    );
    assert_eq!(one("SELECT @x"), Class::Plain);
    assert_eq!(one("SELECT @x = 1"), Class::Plain);
    assert_eq!(one("SELECT 1 /* @x := 2 */"), Class::Plain);
    assert_eq!(one("SELECT 1 -- @x := 2"), Class::Plain);
    assert_eq!(one("SELECT 1 # @x := 2"), Class::Plain);
    assert_eq!(one("SELECT `@x` FROM t"), Class::Plain);
    assert_eq!(
        one("SELECT IS_FREE_LOCK('a'), IS_USED_LOCK('a')"),
        Class::Plain
    );
    assert_eq!(one("SELECT get_lock FROM t"), Class::Plain);
    assert_eq!(one("SELECT 'GET_LOCK(1)'"), Class::Plain);
    assert_eq!(one("GRANT SELECT ON *.* TO 'u'@'h'"), Class::Plain);
    assert_eq!(one("CREATE USER u@localhost"), Class::Plain);
    assert_eq!(one("SELECT 1 INTO OUTFILE '/tmp/x'"), Class::Plain);
}

#[test]
fn user_variable_writes_pin() {
    for sql in [
        "SET @x = 1",
        "set @x=1",
        "SET @x := 1",
        "SET @`x y` = 1",
        "SET @'x' = 1",
        "SELECT @x := 1",
        "SELECT @x:=1",
        "SELECT a INTO @x FROM t",
        "SELECT a, b FROM t INTO @x, @y",
        "UPDATE t SET a = (@n := @n + 1)",
        "SET autocommit=0, @x=1",
        "SET @x = 1, autocommit = 0",
        "CALL p(@out)",
        "/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE */",
    ] {
        assert_eq!(pin(sql), Some(Pin::UserVariableWrite), "{sql}");
    }
    assert_eq!(one("CALL p(1)"), Class::Plain);
    assert_eq!(one("SELECT NEXTVAL(s), NEXT VALUE FOR s"), Class::Plain);
}

#[test]
fn system_variable_sets_are_replayable() {
    use Scope::*;
    assert_eq!(
        one("set @@session.autocommit=1"),
        Class::Set(vec![var(Session, "autocommit", "1")])
    );
    assert_eq!(
        one("SET autocommit=0"),
        Class::Set(vec![var(Session, "autocommit", "0")])
    );
    assert_eq!(
        one("SET SESSION sql_mode = 'A,B'"),
        Class::Set(vec![var(Session, "sql_mode", "'A,B'")])
    );
    assert_eq!(
        one("SET @@SQL_MODE := CONCAT(@@sql_mode, ',X'), LOCAL `wait_timeout` = 10"),
        Class::Set(vec![
            var(Session, "sql_mode", "CONCAT(@@sql_mode, ',X')"),
            var(Session, "wait_timeout", "10"),
        ])
    );
    // A scope keyword carries over to the following items without one.
    assert_eq!(
        one("SET GLOBAL a = 1, b = 2, SESSION c = 3, @@global.d = 4, e = DEFAULT"),
        Class::Set(vec![
            var(Global, "a", "1"),
            var(Global, "b", "2"),
            var(Session, "c", "3"),
            var(Global, "d", "4"),
            var(Session, "e", "DEFAULT"),
        ])
    );
    assert_eq!(
        one("SET @@local.`time_zone` = '+00:00'"),
        Class::Set(vec![var(Session, "time_zone", "'+00:00'")])
    );
    assert_eq!(
        one("SeT TX_ISOLATION = 'READ-COMMITTED'"),
        Class::Set(vec![var(Session, "tx_isolation", "'READ-COMMITTED'")])
    );
}

#[test]
fn set_names_and_charset() {
    assert_eq!(
        one("SET NAMES utf8mb4"),
        Class::Set(vec![SetItem::Names {
            charset: Some("utf8mb4".into()),
            collation: None
        }])
    );
    assert_eq!(
        one("set names 'UTF8MB4' collate 'utf8mb4_unicode_ci'"),
        Class::Set(vec![SetItem::Names {
            charset: Some("utf8mb4".into()),
            collation: Some("utf8mb4_unicode_ci".into())
        }])
    );
    assert_eq!(
        one("SET NAMES DEFAULT"),
        Class::Set(vec![SetItem::Names {
            charset: None,
            collation: None
        }])
    );
    assert_eq!(
        one("SET CHARACTER SET latin1"),
        Class::Set(vec![SetItem::CharacterSet(Some("latin1".into()))])
    );
    assert_eq!(
        one("SET CHARSET DEFAULT, autocommit = 1"),
        Class::Set(vec![
            SetItem::CharacterSet(None),
            var(Scope::Session, "autocommit", "1")
        ])
    );
    // mysqldump's header.
    assert_eq!(
        one("/*!40101 SET NAMES utf8mb4 */"),
        Class::Set(vec![SetItem::Names {
            charset: Some("utf8mb4".into()),
            collation: None
        }])
    );
}

#[test]
fn odd_sets_pin_as_unrecognized() {
    for sql in [
        "SET",
        "SET x",
        "SET x =",
        "SET NAMES",
        "SET NAMES a b",
        "SET CHARACTER SET",
        "SET @@foo.bar = 1",
        "SET x = 1,",
        "SET TRANSACTION",
        "SET STATEMENT max_statement_time=1",
    ] {
        assert_eq!(pin(sql), Some(Pin::UnrecognizedSet), "{sql}");
    }
}

#[test]
fn other_sets() {
    assert_eq!(one("SET PASSWORD = PASSWORD('x')"), Class::Plain);
    assert_eq!(one("SET PASSWORD FOR 'u'@'h' = 'x'"), Class::Plain);
    assert_eq!(one("SET DEFAULT ROLE r FOR u@h"), Class::Plain);
    assert_eq!(one("SET ROLE admin"), Class::Pin(Pin::SetRole));
    assert_eq!(
        one("SET STATEMENT max_statement_time=10 FOR SELECT 1"),
        Class::Plain
    );
    assert_eq!(
        one("SET STATEMENT sql_mode='' FOR SELECT @x := 1"),
        Class::Pin(Pin::UserVariableWrite)
    );
    assert_eq!(
        one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        Class::SetTransaction {
            scope: None,
            characteristics: "ISOLATION LEVEL SERIALIZABLE".into()
        }
    );
    assert_eq!(
        one("set session transaction read only"),
        Class::SetTransaction {
            scope: Some(Scope::Session),
            characteristics: "read only".into()
        }
    );
    assert_eq!(
        one("SET GLOBAL TRANSACTION ISOLATION LEVEL READ COMMITTED, READ WRITE"),
        Class::SetTransaction {
            scope: Some(Scope::Global),
            characteristics: "ISOLATION LEVEL READ COMMITTED, READ WRITE".into()
        }
    );
}

#[test]
fn other_pins() {
    let cases: &[(&str, Pin)] = &[
        ("CREATE TEMPORARY TABLE t (a int)", Pin::TemporaryTable),
        (
            "create or replace temporary table t as select 1",
            Pin::TemporaryTable,
        ),
        ("DROP TEMPORARY TABLE IF EXISTS t", Pin::TemporaryTable),
        ("CREATE TEMPORARY SEQUENCE s", Pin::TemporaryTable),
        ("SELECT GET_LOCK('a', 10)", Pin::LockFunction),
        ("do get_lock ('a', 1)", Pin::LockFunction),
        ("SELECT RELEASE_LOCK('a')", Pin::LockFunction),
        ("SELECT RELEASE_ALL_LOCKS()", Pin::LockFunction),
        ("LOCK TABLES t READ", Pin::LockTables),
        ("lock table t write, u read", Pin::LockTables),
        ("FLUSH TABLES WITH READ LOCK", Pin::FlushTablesWithReadLock),
        (
            "FLUSH TABLES t1, t2 WITH READ LOCK",
            Pin::FlushTablesWithReadLock,
        ),
        ("FLUSH TABLES t FOR EXPORT", Pin::FlushTablesWithReadLock),
        ("BACKUP STAGE START", Pin::BackupLock),
        ("BACKUP LOCK t", Pin::BackupLock),
        (
            "SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1",
            Pin::SqlCalcFoundRows,
        ),
        (
            "SELECT /*! SQL_CALC_FOUND_ROWS */ * FROM t",
            Pin::SqlCalcFoundRows,
        ),
        (
            "SELECT /*!40000 SQL_CALC_FOUND_ROWS */ * FROM t",
            Pin::SqlCalcFoundRows,
        ),
        (
            "SELECT /*M!100100 SQL_CALC_FOUND_ROWS */ * FROM t",
            Pin::SqlCalcFoundRows,
        ),
        ("PREPARE s FROM 'SELECT 1'", Pin::TextPrepare),
        ("EXECUTE s USING @a", Pin::TextPrepare),
        ("DEALLOCATE PREPARE s", Pin::TextPrepare),
        ("DROP PREPARE s", Pin::TextPrepare),
        ("EXECUTE IMMEDIATE 'SELECT 1'", Pin::TextPrepare),
        ("HANDLER t OPEN", Pin::Handler),
        ("XA START 'x'", Pin::Xa),
        ("SELECT ROW_COUNT() + 1", Pin::PreviousStatementState),
        (
            "INSERT INTO c VALUES (LAST_INSERT_ID(), 1)",
            Pin::PreviousStatementState,
        ),
        ("SELECT LAST_INSERT_ID(5)", Pin::PreviousStatementState),
        ("SELECT FOUND_ROWS() FROM dual", Pin::PreviousStatementState),
        ("SELECT @@warning_count", Pin::PreviousStatementState),
        ("SELECT @@session.error_count", Pin::PreviousStatementState),
        ("GET DIAGNOSTICS @n = NUMBER", Pin::PreviousStatementState),
        ("SELECT @@last_insert_id", Pin::PreviousStatementState),
        ("SELECT LASTVAL(s)", Pin::PreviousStatementState),
        ("SELECT PREVIOUS VALUE FOR s", Pin::PreviousStatementState),
        (
            "LOAD DATA INFILE 'f' INTO TABLE t (a, @skip) SET b = 1",
            Pin::UserVariableWrite,
        ),
    ];
    for (sql, want) in cases {
        assert_eq!(pin(sql), Some(*want), "{sql}");
    }
    // LAST_INSERT_ID(expr) outside a SELECT: the OK packet carries it.
    assert_eq!(
        one("UPDATE seq SET id = LAST_INSERT_ID(id + 1)"),
        Class::Plain
    );
    assert_eq!(one("CREATE TABLE t (temporary int)"), Class::Plain);
}

#[test]
fn transaction_control() {
    for sql in [
        "BEGIN",
        "begin work",
        "START TRANSACTION",
        "START TRANSACTION READ ONLY",
        "start transaction with consistent snapshot, read write",
    ] {
        assert_eq!(one(sql), Class::Begin, "{sql}");
    }
    let end = |chain, release| (chain, release);
    for (sql, (chain, release)) in [
        ("COMMIT", end(false, false)),
        ("commit work", end(false, false)),
        ("COMMIT AND CHAIN", end(true, false)),
        ("COMMIT AND NO CHAIN NO RELEASE", end(false, false)),
        ("COMMIT RELEASE", end(false, true)),
    ] {
        assert_eq!(one(sql), Class::Commit { chain, release }, "{sql}");
    }
    assert_eq!(
        one("ROLLBACK WORK AND CHAIN"),
        Class::Rollback {
            chain: true,
            release: false
        }
    );
    assert_eq!(one("ROLLBACK TO SAVEPOINT s"), Class::Plain);
    assert_eq!(one("ROLLBACK WORK TO s"), Class::Plain);
    assert_eq!(one("SAVEPOINT s"), Class::Plain);
    assert_eq!(one("START SLAVE"), Class::Plain);
    assert_eq!(one("UNLOCK TABLES"), Class::UnlockTables);
    assert_eq!(one("USE shop"), Class::Use("shop".into()));
    assert_eq!(one("use `My Db`"), Class::Use("My Db".into()));
    assert_eq!(one("USE a b"), Class::Plain);
}

#[test]
fn answerable_forms() {
    let lid = |c: &str| Class::LastInsertId { column: c.into() };
    assert_eq!(one("SELECT LAST_INSERT_ID()"), lid("LAST_INSERT_ID()"));
    assert_eq!(one("select last_insert_id( )"), lid("last_insert_id( )"));
    assert_eq!(one("  SELECT LAST_INSERT_ID() AS id"), lid("id"));
    assert_eq!(one("SELECT LAST_INSERT_ID() `the id`"), lid("the id"));
    assert_eq!(
        one("SELECT LAST_INSERT_ID() /* c */"),
        lid("LAST_INSERT_ID()")
    );
    assert_eq!(
        one("SELECT ROW_COUNT()"),
        Class::RowCount {
            column: "ROW_COUNT()".into()
        }
    );
    assert_eq!(
        one("SELECT FOUND_ROWS()"),
        Class::FoundRows {
            column: "FOUND_ROWS()".into()
        }
    );
    assert_eq!(one("SHOW WARNINGS"), Class::ShowWarnings);
    assert_eq!(one("show warnings limit 1, 2"), Class::ShowWarnings);
    assert_eq!(one("SHOW ERRORS"), Class::ShowErrors);
    assert_eq!(one("SHOW COUNT(*) WARNINGS"), Class::ShowCountWarnings);
    assert_eq!(one("show count ( * ) errors"), Class::ShowCountErrors);
    assert_eq!(one("SHOW TABLES"), Class::Plain);
}

#[test]
fn splitting() {
    use Scope::Session;
    assert_eq!(
        classes("SET autocommit=0; SELECT 1;USE d ; "),
        vec![
            Class::Set(vec![var(Session, "autocommit", "0")]),
            Class::Plain,
            Class::Use("d".into()),
            Class::Empty
        ]
    );
    assert_eq!(
        classes("SELECT ';' ; SELECT \";\"; SELECT `;`; /* ; */ SELECT 1 -- ;\n"),
        vec![Class::Plain; 4]
    );
    assert_eq!(
        classes("SELECT 1; SET @x = 1"),
        vec![Class::Plain, Class::Pin(Pin::UserVariableWrite)]
    );
    assert_eq!(pin("SELECT 1; SET @x = 1"), Some(Pin::UserVariableWrite));
    assert_eq!(pin("SELECT 1; SELECT 2"), None);
}

#[test]
fn quoting_and_escapes() {
    // A backslash-escaped quote does not end the string...
    assert_eq!(classes(r"SELECT 'a\';' ; SELECT 2").len(), 2);
    assert_eq!(classes(r#"SELECT "a\"; SET @x=1"; SELECT 2"#).len(), 2);
    // ...unless NO_BACKSLASH_ESCAPES.
    let nbe = LexOptions {
        no_backslash_escapes: true,
        ..LexOptions::default()
    };
    assert_eq!(classes_with(r"SELECT 'a\'; SELECT 2", &nbe).len(), 2);
    assert_eq!(
        classes_with(r"SELECT 'a\'; SET @x=1", &nbe)[1],
        Class::Pin(Pin::UserVariableWrite)
    );
    // Doubled quotes.
    assert_eq!(one("SELECT 'it''s; fine'"), Class::Plain);
    assert_eq!(one("SELECT `a``;b` FROM t"), Class::Plain);
    // ANSI_QUOTES: "…" is an identifier, in which \ is ordinary.
    let ansi = LexOptions {
        ansi_quotes: true,
        ..LexOptions::default()
    };
    assert_eq!(classes_with(r#"SELECT "a\"; SELECT 2"#, &ansi).len(), 2);
    // A quoted user-variable name too (checked on MariaDB 10.11: `@"a\"`
    // names the variable `a\`).
    assert_eq!(
        first_pin(&classify(br#"SELECT 1 AS "x\", @"a\" := 1 -- ""#, &ansi)),
        Some(Pin::UserVariableWrite)
    );
    // Not known (a MySQL server reports no ANSI_QUOTES flag): a "…" that
    // ends elsewhere either way is unsure; one that does not counts as an
    // identifier, so that `USE "db"` is a USE.
    let unknown = LexOptions {
        ansi_quotes_known: false,
        ..LexOptions::default()
    };
    assert_eq!(
        classes_with(r#"SELECT 1 AS "x\", @z := 'A' -- ""#, &unknown),
        vec![Class::Pin(Pin::Unsplittable)]
    );
    assert_eq!(
        classes_with(r#"SELECT "abc""#, &unknown),
        vec![Class::Plain]
    );
    assert_eq!(
        classes_with(r#"USE "db""#, &unknown),
        vec![Class::Use("db".into())]
    );
    // `--` needs a space after it to start a comment.
    assert_eq!(one("SELECT 1--1"), Class::Plain);
    assert_eq!(pin("SELECT 1--1, @x := 1"), Some(Pin::UserVariableWrite));
    assert_eq!(pin("SELECT 1 --\n, @x := 1"), Some(Pin::UserVariableWrite));
}

#[test]
fn bytes_whose_meaning_depends_on_the_charset() {
    // latin1's 0xA0 is whitespace to the server (checked on MariaDB 10.11):
    // outside quotes a single-byte charset's high byte is unsure.
    let single = LexOptions {
        high_bytes_in_words: false,
        ..MARIADB
    };
    assert_eq!(
        classes_with("SET\u{a0}@x = 1", &single),
        vec![Class::Pin(Pin::Unsplittable)]
    );
    let latin1 = b"SET\xa0@x = 1";
    assert_eq!(
        first_pin(&classify(latin1, &single)),
        Some(Pin::Unsplittable)
    );
    assert_eq!(
        first_pin(&classify(b"SELECT 'caf\xe9', `\xe9` /* \xa0 */", &single)),
        None
    );
    // `--` before 0x7F is a comment in some charsets and not in others.
    assert_eq!(
        first_pin(&classify(b"SELECT 1 --\x7f '\n, @x := 'A' -- '", &MARIADB)),
        Some(Pin::Unsplittable)
    );
}

#[test]
fn unsplittable() {
    for sql in [
        "SELECT 'open",
        "SELECT \"open",
        "SELECT `open",
        "SELECT 1 /* open",
        "SELECT /*! 1 ",
        "SELECT /*! 1; */ 2",
        "SELECT /*! /*! 1 */ */",
        "SET @'x = 1",
        "BEGIN NOT ATOMIC SELECT 1; END",
        "IF 1 THEN SELECT 1; END IF",
        "lbl: LOOP LEAVE lbl; END LOOP",
        "CREATE PROCEDURE p() SELECT 1; SET @y = 2",
    ] {
        assert_eq!(
            classify(sql.as_bytes(), &LexOptions::default()),
            vec![Statement {
                range: 0..sql.len(),
                class: Class::Pin(Pin::Unsplittable),
                reads_last_insert_id: false,
                only_last_insert_id_reads: false,
                call: false,
            }],
            "{sql}"
        );
    }
    let gbk = LexOptions {
        ascii_safe_charset: false,
        ..LexOptions::default()
    };
    assert_eq!(
        classify("SELECT 'é'".as_bytes(), &gbk)[0].class,
        Class::Pin(Pin::Unsplittable)
    );
    assert_eq!(classify(b"SELECT 1", &gbk)[0].class, Class::Plain);
    assert_eq!(one("SELECT 'é', `ü`"), Class::Plain);
}

#[test]
fn routine_definitions() {
    let body = "CREATE DEFINER=`root`@`localhost` PROCEDURE p() BEGIN SELECT 1; SELECT 2; END";
    assert_eq!(
        classify(body.as_bytes(), &LexOptions::default()),
        vec![Statement {
            range: 0..body.len(),
            class: Class::Plain,
            reads_last_insert_id: false,
            only_last_insert_id_reads: false,
            call: false,
        }]
    );
    assert_eq!(
        one("CREATE DEFINER = CURRENT_USER() FUNCTION f() RETURNS INT RETURN 1"),
        Class::Plain
    );
    assert_eq!(
        classes("CREATE PROCEDURE a() BEGIN SELECT 1; END; CREATE PROCEDURE b() BEGIN SELECT 2; END lbl"),
        vec![Class::Plain]
    );
    // Conservative: a body that would pin if it ran pins.
    assert_eq!(
        pin("CREATE PROCEDURE p() BEGIN SET @x = 1; END"),
        Some(Pin::UserVariableWrite)
    );
    assert_eq!(
        classes("ALTER DEFINER = u@h EVENT e DO BEGIN SELECT 1; SELECT 2; END"),
        vec![Class::Plain]
    );
    // A single-statement routine followed by a real statement splits.
    assert_eq!(
        classes("CREATE TRIGGER t BEFORE INSERT ON x FOR EACH ROW SET NEW.a = 1;"),
        vec![Class::Plain, Class::Empty]
    );
}

#[test]
fn explains_state_change() {
    assert!(one("SET autocommit=0").explains_state_change());
    assert!(one("USE d").explains_state_change());
    assert!(!one("SELECT 1").explains_state_change());
    assert!(!one("SET @x=1").explains_state_change());
    assert_eq!(Pin::ALL.len(), 15);
    let labels: std::collections::HashSet<_> = Pin::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(labels.len(), Pin::ALL.len());
}

#[test]
fn never_panics_and_round_trips_on_garbage() {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet: &[&[u8]] = &[
        b"'",
        b"\"",
        b"`",
        b"\\",
        b";",
        b"/*",
        b"*/",
        b"/*!",
        b"/*M!",
        b"--",
        b"-- ",
        b"#",
        b"\n",
        b" ",
        b"@",
        b"@@",
        b":=",
        b"=",
        b",",
        b"(",
        b")",
        b"SET",
        b"SELECT",
        b"x",
        b"NAMES",
        b"GLOBAL",
        b"INTO",
        b"BEGIN",
        b"END",
        b"CREATE",
        b"PROCEDURE",
        b"LAST_INSERT_ID",
        b"\xc3\xa9",
        b"\xff",
        b".",
        b"1",
    ];
    for _ in 0..20_000 {
        let mut sql = Vec::new();
        for _ in 0..(next() % 24) {
            sql.extend_from_slice(alphabet[(next() as usize) % alphabet.len()]);
        }
        for opts in [
            LexOptions::default(),
            LexOptions {
                no_backslash_escapes: true,
                ansi_quotes: true,
                ansi_quotes_known: true,
                ascii_safe_charset: false,
                high_bytes_in_words: false,
                server: Server::MariaDb(101119),
                read_only_functions: &[],
            },
        ] {
            let st = classify(&sql, &opts);
            assert_round_trip(&sql, &st);
        }
    }
}

/// What drivers and frameworks send at connect time must never pin (the
/// multiplexing users lose most often elsewhere): reads of @@ variables and
/// plain SETs.
#[test]
fn driver_init_queries_do_not_pin() {
    for sql in [
        // Connector/J 8
        "/* mysql-connector-j-8.0.33 (Revision: 7d6b0800528b6b25c68b52dc10d6c1c8429c100c) */\
         SELECT  @@session.auto_increment_increment AS auto_increment_increment, \
         @@character_set_client AS character_set_client, @@init_connect AS init_connect, \
         @@sql_mode AS sql_mode, @@time_zone AS time_zone, \
         @@transaction_isolation AS transaction_isolation, @@wait_timeout AS wait_timeout",
        "SET character_set_results = NULL",
        "SET SQL_SELECT_LIMIT=DEFAULT",
        "select @@session.transaction_read_only",
        // the mariadb CLI
        "select @@version_comment limit 1",
        // Django / mysqlclient
        "SET SQL_AUTO_IS_NULL = 0",
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        // Rails
        "SET  @@SESSION.sql_mode = CONCAT(CONCAT(@@sql_mode, ',STRICT_ALL_TABLES'), \
         ',NO_AUTO_VALUE_ON_ZERO'),  @@SESSION.sql_auto_is_null = 0, \
         @@SESSION.wait_timeout = 2147483",
        // SQLAlchemy
        "SELECT DATABASE()",
        "show variables like 'lower_case_table_names'",
        "SELECT @@tx_isolation",
        "SELECT CAST('test plain returns' AS CHAR(60)) AS anon_1",
        // PDO, PyMySQL
        "SET NAMES utf8mb4",
        "SET AUTOCOMMIT = 0",
    ] {
        let c = one(sql);
        assert!(c.pin().is_none(), "{sql}: {c:?}");
    }
}

#[test]
fn last_insert_id_reads_are_flagged() {
    let reads = |sql: &str| {
        classify(sql.as_bytes(), &LexOptions::default())
            .iter()
            .any(|s| s.reads_last_insert_id)
    };
    assert!(reads("INSERT INTO c VALUES (LAST_INSERT_ID(), 1)"));
    assert!(reads("SELECT @@last_insert_id, @@IDENTITY"));
    assert!(reads("SELECT LAST_INSERT_ID()"));
    assert!(reads("select id from t where id = last_insert_id ( )"));
    assert!(!reads("UPDATE seq SET id = LAST_INSERT_ID(id + 1)"));
    assert!(!reads("SELECT 'LAST_INSERT_ID()' /* LAST_INSERT_ID() */"));
    assert!(!reads("SELECT 1"));
    let st = classify(b"SELECT 1; SELECT @@identity", &LexOptions::default());
    assert!(!st[0].reads_last_insert_id && st[1].reads_last_insert_id);
    // The pins are unchanged.
    assert_eq!(pin("SELECT @@identity"), Some(Pin::PreviousStatementState));
}

//! End-to-end tests: the real `ringgate` binary in front of the private MariaDB sandbox.
//!
//! Run through `make test` (it starts the sandbox and exports `RINGGATE_TEST_*`). Every
//! scenario runs twice, as `<scenario>::fixed` and `<scenario>::heap`, and ends with the
//! leak checks of [`testkit::proxy::Proxy::assert_settled`].

use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mysql::prelude::*;
use mysql::{Conn, Row, Value};
use testkit::both_modes;
use testkit::env::{
    find_in_path, low_memlock_wrapper, ringgate_bin, scratch_dir, set_mode, users_file,
    APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER, TEST_DB,
};
use testkit::mysql_client::{mysql_error_code, mysql_error_message};
use testkit::procfs::{io_uring_user_bufs, rss_bytes};
use testkit::proxy::{Mode, Proxy, ProxyOpts};
use testkit::tail;

const MIB: usize = 1024 * 1024;

fn q_one<T: FromRow>(conn: &mut Conn, sql: &str) -> T {
    conn.query_first::<T, _>(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

fn table_name(base: &str, mode: Mode) -> String {
    format!("{TEST_DB}.rs_{base}_{}", mode.as_str())
}

// ---------------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------------

fn simple_queries(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let m0 = proxy.metrics();
    let base = m0.get("ringgate_client_connections_total");
    let commands0 = m0.get("ringgate_commands_total");
    let connects0 = m0.get("ringgate_connect_duration_seconds_count");
    {
        let mut conn = proxy.connect_app();
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 1"), 1);
        let version: String = q_one(&mut conn, "SELECT @@version");
        assert!(
            version.to_lowercase().contains("mariadb"),
            "backend @@version {version:?} should be MariaDB's"
        );
        let (a, b, c): (i64, String, Option<i64>) = q_one(&mut conn, "SELECT 42, 'hello', NULL");
        assert_eq!((a, b.as_str(), c), (42, "hello", None));
        // Through the proxy, the server sees the proxy's backend account.
        let user: String = q_one(&mut conn, "SELECT CURRENT_USER()");
        assert!(
            user.starts_with(&format!("{}@", proxy.backend.user)),
            "CURRENT_USER() = {user}"
        );
        conn.ping().expect("COM_PING through the proxy");
        let rows: Vec<(i64, String)> = conn
            .query("SELECT seq, CONCAT('row', seq) FROM ringgate_test.seq_1_to_1000")
            .expect("1000-row result");
        assert_eq!(rows.len(), 1000);
        assert_eq!(rows[999], (1000, "row1000".to_string()));
        // An error from the backend is passed through and the connection stays usable.
        let err = conn
            .query_drop("SELECT * FROM ringgate_test.no_such_table_at_all")
            .expect_err("query on a missing table must fail");
        assert_eq!(mysql_error_code(&err), Some(1146), "{err}");
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 2"), 2);
    }
    let m1 = proxy.metrics();
    assert!(
        m1.get("ringgate_commands_total") >= commands0 + 5.0,
        "ringgate_commands_total did not grow: {} -> {}",
        commands0,
        m1.get("ringgate_commands_total")
    );
    assert!(
        m1.get("ringgate_connect_duration_seconds_count") >= connects0 + 1.0,
        "ringgate_connect_duration_seconds_count did not grow"
    );
    proxy.assert_settled(base, 1);
}
both_modes!(simple_query, simple_queries);

fn large_rows(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    {
        let mut conn = proxy.connect_app();
        // Server -> client: 1 MiB and 20 MiB rows (the latter spans two protocol packets).
        for size in [MIB, 20 * MIB] {
            let s: Vec<u8> = q_one(&mut conn, &format!("SELECT REPEAT('x', {size})"));
            assert_eq!(s.len(), size, "row of {size} bytes");
            assert!(
                s.iter().all(|&b| b == b'x'),
                "row of {size} bytes is corrupted"
            );
        }
        // 64 MiB: the proxy forwards the row as it comes and never holds it,
        // so its RSS stays flat (large-result reads use at most 16 buffers
        // of --large-read-size per worker, whatever the row size).
        let rss_before = rss_bytes(proxy.pid()) / 1024;
        // (64 MiB less 64 KiB: the row packet must fit max_allowed_packet, 64M on both ends.)
        let big = 64 * MIB - 64 * 1024;
        let s: Vec<u8> = q_one(&mut conn, &format!("SELECT REPEAT('w', {big})"));
        assert_eq!(s.len(), big, "row of 64 MiB");
        assert!(s.iter().all(|&b| b == b'w'), "row of 64 MiB is corrupted");
        drop(s);
        let rss_after = rss_bytes(proxy.pid()) / 1024;
        assert!(
            rss_after < rss_before + 8 * 1024,
            "proxy RSS grew from {rss_before} KiB to {rss_after} KiB over a 64 MiB row"
        );
        // Fixed and heap mode read a large result in --large-read-size pieces
        // (ring mode reads from its ring).
        let large_reads = proxy
            .metrics()
            .get("ringgate_read_buffer_large_reads_total");
        match mode {
            Mode::Ring => assert_eq!(large_reads, 0.0, "ring mode took large-result buffers"),
            Mode::Fixed | Mode::Heap => {
                assert!(
                    large_reads > 0.0,
                    "no large-result read in {} mode",
                    mode.as_str()
                )
            }
        }
        // Between commands a session holds no large-result buffer (it goes
        // back once every answer is written, not when the session ends).
        let deadline = Instant::now() + Duration::from_secs(2);
        while proxy.metrics().get("ringgate_read_buffer_large_in_use") != 0.0 {
            assert!(
                Instant::now() < deadline,
                "an idle session still holds a large-result buffer in {} mode",
                mode.as_str()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // A row of exactly 0xFFFFFF - a few bytes, around the packet-split boundary.
        for size in [0xFF_FFFF - 8, 0xFF_FFFF - 4, 0xFF_FFFF] {
            let n: Vec<u8> = q_one(&mut conn, &format!("SELECT REPEAT('y', {size})"));
            assert_eq!(n.len(), size);
        }
        // Several big rows in one result.
        let rows: Vec<Vec<u8>> = conn
            .query("SELECT REPEAT(CHAR(64 + seq), 3 * 1024 * 1024) FROM ringgate_test.seq_1_to_8")
            .expect("8 rows of 3 MiB");
        assert_eq!(rows.len(), 8);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(r.len(), 3 * MIB);
            assert!(r.iter().all(|&b| b == 64 + i as u8 + 1));
        }
        // Client -> server: a 17 MiB statement (more than one 16 MiB packet).
        let big = "z".repeat(17 * MIB);
        let n: i64 = q_one(&mut conn, &format!("SELECT LENGTH('{big}')"));
        assert_eq!(n as usize, 17 * MIB);
        // A 1 MiB blob round trip through a prepared statement.
        let t = table_name("blob", mode);
        conn.query_drop(format!("DROP TABLE IF EXISTS {t}"))
            .unwrap();
        conn.query_drop(format!(
            "CREATE TABLE {t} (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB"
        ))
        .unwrap();
        let blob: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8).collect();
        conn.exec_drop(format!("INSERT INTO {t} VALUES (?, ?)"), (1, blob.clone()))
            .unwrap();
        let back: Vec<u8> = conn
            .exec_first(format!("SELECT b FROM {t} WHERE id = ?"), (1,))
            .unwrap()
            .expect("blob row");
        assert!(back == blob, "1 MiB blob came back different");
        conn.query_drop(format!("DROP TABLE {t}")).unwrap();
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 7"), 7);
    }
    proxy.assert_settled(base, 1);
}
both_modes!(large_row, large_rows);

fn multi_statements(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    {
        let mut conn = proxy.connect_app();
        let mut sets: Vec<Vec<Vec<Value>>> = Vec::new();
        {
            let mut result = conn
                .query_iter("SELECT 1; SELECT 2,3; SELECT 'a'")
                .expect("multi-statement");
            while let Some(set) = result.iter() {
                let rows: Vec<Vec<Value>> = set.map(|r| r.expect("row").unwrap()).collect();
                sets.push(rows);
            }
        }
        assert_eq!(sets.len(), 3, "three result sets: {sets:?}");
        assert_eq!(sets[0], vec![vec![Value::Bytes(b"1".to_vec())]]);
        assert_eq!(
            sets[1],
            vec![vec![
                Value::Bytes(b"2".to_vec()),
                Value::Bytes(b"3".to_vec())
            ]]
        );
        assert_eq!(sets[2], vec![vec![Value::Bytes(b"a".to_vec())]]);

        // Mixed OK packets and result sets, and the connection is in sync afterwards.
        let t = table_name("multi", mode);
        conn.query_drop(format!(
            "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id INT); INSERT INTO {t} VALUES (1),(2)"
        ))
        .expect("multi-statement DDL+DML");
        let mut counts = Vec::new();
        {
            let mut result = conn
                .query_iter(format!(
                    "SELECT COUNT(*) FROM {t}; UPDATE {t} SET id = id + 10; SELECT SUM(id) FROM {t}"
                ))
                .unwrap();
            while let Some(set) = result.iter() {
                let rows: Vec<Row> = set.map(|r| r.unwrap()).collect();
                counts.push(rows.len());
            }
        }
        assert_eq!(counts, vec![1, 0, 1]);
        assert_eq!(
            q_one::<i64>(&mut conn, &format!("SELECT SUM(id) FROM {t}")),
            23
        );
        // An error in the middle of a multi-statement ends it; the connection still works.
        // (query_drop would swallow it: the error shows while iterating the sets.)
        let mut first_err = None;
        let mut ok_sets = 0;
        {
            let mut result = conn
                .query_iter("SELECT 1; SELECT * FROM ringgate_test.no_such_table_either; SELECT 3")
                .expect("first statement succeeds");
            while let Some(set) = result.iter() {
                let mut set_ok = true;
                for row in set {
                    if let Err(e) = row {
                        first_err.get_or_insert(e);
                        set_ok = false;
                    }
                }
                if set_ok {
                    ok_sets += 1;
                }
            }
        }
        let err = first_err.expect("the second statement must fail");
        assert_eq!(mysql_error_code(&err), Some(1146), "{err}");
        assert_eq!(ok_sets, 1, "only the first statement succeeds");
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 4"), 4);
        conn.query_drop(format!("DROP TABLE {t}")).unwrap();
    }
    proxy.assert_settled(base, 1);
}
both_modes!(multi_statement, multi_statements);

fn prepared_statements(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    {
        let mut conn = proxy.connect_app();
        let t = table_name("prep", mode);
        conn.query_drop(format!("DROP TABLE IF EXISTS {t}"))
            .unwrap();
        conn.query_drop(format!(
            "CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(64), score DOUBLE, created DATETIME NULL)"
        ))
        .unwrap();

        let ins = conn
            .prep(format!(
                "INSERT INTO {t} (id, name, score) VALUES (?, ?, ?)"
            ))
            .expect("prepare insert");
        assert_eq!(ins.num_params(), 3);
        for i in 1..=50i64 {
            conn.exec_drop(&ins, (i, format!("name-{i}"), i as f64 * 1.5))
                .expect("exec insert");
        }
        conn.exec_batch(
            &ins,
            (51..=60i64).map(|i| (i, format!("batch-{i}"), 0.25f64)),
        )
        .expect("exec_batch");

        let sel = conn
            .prep(format!(
                "SELECT id, name, score FROM {t} WHERE id > ? AND id <= ? ORDER BY id"
            ))
            .expect("prepare select");
        assert_eq!(sel.num_params(), 2);
        assert_eq!(sel.num_columns(), 3);
        // Reuse the statement several times.
        let rows: Vec<(i64, String, f64)> = conn.exec(&sel, (0, 10)).unwrap();
        assert_eq!(rows.len(), 10);
        assert_eq!(rows[3], (4, "name-4".to_string(), 6.0));
        let rows: Vec<(i64, String, f64)> = conn.exec(&sel, (45, 55)).unwrap();
        assert_eq!(rows.len(), 10);
        assert_eq!(rows[9], (55, "batch-55".to_string(), 0.25));
        let rows: Vec<(i64, String, f64)> = conn.exec(&sel, (1000, 2000)).unwrap();
        assert!(rows.is_empty());

        // NULL and typed parameters over the binary protocol.
        let r: Option<(Option<i64>, String, Option<String>)> = conn
            .exec_first(
                "SELECT ? + 1, CONCAT(?, '!'), ?",
                (41, "hi", None::<String>),
            )
            .unwrap();
        assert_eq!(r, Some((Some(42), "hi!".to_string(), None)));

        // Big parameters: 2 MiB inline, and 17 MiB, which the client sends as
        // COM_STMT_SEND_LONG_DATA chunks (commands without any response) before the execute.
        for size in [2 * MIB, 17 * MIB] {
            let big = "p".repeat(size);
            let n: Option<i64> = conn.exec_first("SELECT LENGTH(?)", (big,)).unwrap();
            assert_eq!(n, Some(size as i64), "parameter of {size} bytes");
        }

        // Drop (COM_STMT_CLOSE) and prepare again.
        conn.close(sel).expect("COM_STMT_CLOSE");
        conn.close(ins).expect("COM_STMT_CLOSE");
        let cnt = conn
            .prep(format!("SELECT COUNT(*) FROM {t} WHERE score >= ?"))
            .unwrap();
        let n: Option<i64> = conn.exec_first(&cnt, (1.0f64,)).unwrap();
        assert_eq!(n, Some(50));
        conn.close(cnt).unwrap();

        // A prepare error is an ERR, and the connection continues.
        let err = conn
            .prep("SELECT * FROM ringgate_test.no_such_table_prep WHERE x = ?")
            .expect_err("prepare on a missing table");
        assert_eq!(mysql_error_code(&err), Some(1146), "{err}");
        conn.query_drop(format!("DROP TABLE {t}")).unwrap();
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 1"), 1);
    }
    proxy.assert_settled(base, 1);
}
both_modes!(prepared_statement, prepared_statements);

fn insert_update(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    {
        let mut conn = proxy.connect_app();
        let t = table_name("dml", mode);
        conn.query_drop(format!("DROP TABLE IF EXISTS {t}"))
            .unwrap();
        conn.query_drop(format!(
            "CREATE TABLE {t} (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"
        ))
        .unwrap();
        conn.query_drop(format!("INSERT INTO {t} (v) VALUES (1), (2), (3)"))
            .unwrap();
        assert_eq!(conn.affected_rows(), 3);
        assert_eq!(conn.last_insert_id(), 1);
        conn.query_drop(format!("UPDATE {t} SET v = v * 10 WHERE v >= 2"))
            .unwrap();
        assert_eq!(conn.affected_rows(), 2);
        assert_eq!(
            q_one::<i64>(&mut conn, &format!("SELECT SUM(v) FROM {t}")),
            51
        );

        // A transaction, rolled back, then committed.
        conn.query_drop("START TRANSACTION").unwrap();
        conn.query_drop(format!("DELETE FROM {t}")).unwrap();
        assert_eq!(
            q_one::<i64>(&mut conn, &format!("SELECT COUNT(*) FROM {t}")),
            0
        );
        conn.query_drop("ROLLBACK").unwrap();
        assert_eq!(
            q_one::<i64>(&mut conn, &format!("SELECT COUNT(*) FROM {t}")),
            3
        );
        conn.query_drop("BEGIN").unwrap();
        conn.query_drop(format!("INSERT INTO {t} (v) VALUES (100)"))
            .unwrap();
        conn.query_drop("COMMIT").unwrap();
        assert_eq!(
            q_one::<i64>(&mut conn, &format!("SELECT COUNT(*) FROM {t}")),
            4
        );
    }
    {
        // Another connection sees the committed data.
        let mut conn = proxy.connect_app();
        let t = table_name("dml", mode);
        assert_eq!(
            q_one::<i64>(&mut conn, &format!("SELECT SUM(v) FROM {t}")),
            151
        );
        conn.query_drop(format!("DROP TABLE {t}")).unwrap();
    }
    proxy.assert_settled(base, 2);
}
both_modes!(insert_and_update, insert_update);

// ---------------------------------------------------------------------------------------------
// Authentication and schema
// ---------------------------------------------------------------------------------------------

fn auth(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let m0 = proxy.metrics();
    let base = m0.get("ringgate_client_connections_total");
    let rejected0 = m0.get(r#"ringgate_client_rejected_total{reason="auth"}"#);

    let wrong = proxy
        .connect(proxy.opts(APP_USER, "not-the-password"))
        .expect_err("wrong password must be rejected");
    assert_eq!(
        mysql_error_code(&wrong),
        Some(1045),
        "wrong password: {wrong}"
    );

    let unknown = proxy
        .connect(proxy.opts("nosuchuser", "whatever"))
        .expect_err("unknown user must be rejected");
    assert_eq!(
        mysql_error_code(&unknown),
        Some(1045),
        "unknown user: {unknown}"
    );

    // The two answers must not tell an unknown user from a wrong password.
    let norm = |msg: String, user: &str| msg.replace(&format!("'{user}'"), "'<user>'");
    assert_eq!(
        norm(mysql_error_message(&wrong).unwrap(), APP_USER),
        norm(mysql_error_message(&unknown).unwrap(), "nosuchuser"),
        "wrong password and unknown user answer differently"
    );

    let empty = proxy
        .connect(proxy.opts(APP_USER, ""))
        .expect_err("empty password must be rejected");
    assert_eq!(
        mysql_error_code(&empty),
        Some(1045),
        "empty password: {empty}"
    );

    // The user whose password is stored only as SHA1(SHA1(pw)).
    {
        let mut conn = proxy
            .connect(proxy.opts(HASHED_USER, HASHED_PASSWORD))
            .expect("hashed user logs in");
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 1"), 1);
    }
    let bad_hashed = proxy
        .connect(proxy.opts(HASHED_USER, APP_PASSWORD))
        .expect_err("hashed user with a wrong password");
    assert_eq!(mysql_error_code(&bad_hashed), Some(1045), "{bad_hashed}");

    // The backend account is not a proxy user.
    let backend_creds = proxy
        .connect(proxy.opts(&proxy.backend.user, &proxy.backend.password))
        .expect_err("backend credentials are not proxy credentials");
    assert_eq!(
        mysql_error_code(&backend_creds),
        Some(1045),
        "{backend_creds}"
    );

    {
        let mut conn = proxy.connect_app();
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 1"), 1);
    }
    let rejected1 = proxy
        .metrics()
        .get(r#"ringgate_client_rejected_total{reason="auth"}"#);
    assert!(
        rejected1 >= rejected0 + 5.0,
        "client_rejected_total{{reason=\"auth\"}} grew by {}, want >= 5",
        rejected1 - rejected0
    );
    proxy.assert_settled(base, 7);
}
both_modes!(authentication, auth);

fn schema_selection(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    {
        let mut conn = proxy
            .connect(proxy.app_opts().db_name(Some(TEST_DB)))
            .expect("connect with a schema");
        let db: Option<String> = q_one(&mut conn, "SELECT DATABASE()");
        assert_eq!(db.as_deref(), Some(TEST_DB));
        // COM_INIT_DB
        conn.select_db("information_schema").expect("COM_INIT_DB");
        let db: Option<String> = q_one(&mut conn, "SELECT DATABASE()");
        assert_eq!(db.as_deref(), Some("information_schema"));
        conn.query_drop(format!("USE {TEST_DB}")).expect("USE");
        let db: Option<String> = q_one(&mut conn, "SELECT DATABASE()");
        assert_eq!(db.as_deref(), Some(TEST_DB));
    }
    {
        // Without a schema, none is selected (a pooled backend connection must not leak one).
        let mut conn = proxy.connect_app();
        let db: Option<String> = q_one(&mut conn, "SELECT DATABASE()");
        assert_eq!(db, None, "a fresh client must start without a schema");
    }
    let err = proxy
        .connect(proxy.app_opts().db_name(Some("ringgate_no_such_db")))
        .expect_err("a schema that does not exist must fail the connect");
    assert!(
        matches!(err, mysql::Error::MySqlError(_)),
        "want a server error for an unknown schema, got {err:?}"
    );
    proxy.assert_running();
    {
        let mut conn = proxy.connect_app();
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 1"), 1);
    }
    proxy.assert_settled(base, 4);
}
both_modes!(schema_at_connect, schema_selection);

// ---------------------------------------------------------------------------------------------
// Churn
// ---------------------------------------------------------------------------------------------

fn sequential_churn(mode: Mode) {
    const CYCLES: u64 = 500;
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    let start = Instant::now();
    for i in 0..CYCLES {
        let mut conn = proxy
            .connect(proxy.app_opts())
            .unwrap_or_else(|e| panic!("connect #{i}: {e}\n{}", tail(&proxy.stderr(), 40)));
        if i % 50 == 0 {
            assert_eq!(q_one::<u64>(&mut conn, &format!("SELECT {i}")), i);
        }
        drop(conn); // COM_QUIT + close
    }
    eprintln!(
        "{CYCLES} connect/quit cycles in {:?} ({} mode)",
        start.elapsed(),
        mode.as_str()
    );
    proxy.assert_settled(base, CYCLES);
}
both_modes!(churn_sequential, sequential_churn);

fn concurrent_clients(mode: Mode) {
    const CLIENTS: usize = 100;
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let opts = proxy.app_opts();
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let barrier = barrier.clone();
            let opts = opts.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let conn = Conn::new(opts);
                barrier.wait(); // everybody connected (or failed) before the queries start
                let mut conn = conn.map_err(|e| format!("client {i}: connect: {e}"))?;
                for j in 0..5u64 {
                    let v: Option<u64> = conn
                        .query_first(format!("SELECT {i} * 1000 + {j}"))
                        .map_err(|e| format!("client {i} query {j}: {e}"))?;
                    if v != Some(i as u64 * 1000 + j) {
                        return Err(format!("client {i} query {j}: got {v:?}"));
                    }
                }
                let rows: Vec<u64> = conn
                    .query("SELECT seq FROM ringgate_test.seq_1_to_200")
                    .map_err(|e| format!("client {i}: {e}"))?;
                if rows.len() != 200 {
                    return Err(format!("client {i}: {} rows", rows.len()));
                }
                let stmt = conn
                    .prep("SELECT ? * 2")
                    .map_err(|e| format!("client {i}: prepare: {e}"))?;
                let v: Option<i64> = conn
                    .exec_first(&stmt, (i as i64,))
                    .map_err(|e| format!("client {i}: exec: {e}"))?;
                if v != Some(i as i64 * 2) {
                    return Err(format!("client {i}: exec got {v:?}"));
                }
                Ok(())
            })
        })
        .collect();
    let errors: Vec<String> = handles
        .into_iter()
        .filter_map(|h| h.join().expect("client thread panicked").err())
        .collect();
    assert!(
        errors.is_empty(),
        "{} of {CLIENTS} clients failed:\n{}\n--- ringgate stderr ---\n{}",
        errors.len(),
        errors.join("\n"),
        tail(&proxy.stderr(), 40)
    );
    proxy.assert_settled(base, CLIENTS as u64);
}
both_modes!(churn_concurrent, concurrent_clients);

// ---------------------------------------------------------------------------------------------
// A client that dies in the middle of a large result
// ---------------------------------------------------------------------------------------------

fn killed_mid_result(mode: Mode) {
    let cli = find_in_path("mariadb").unwrap_or_else(|| {
        panic!("the `mariadb` client is not installed: run scripts/ensure-deps.sh (make test does)")
    });
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    const KILLS: u64 = 3;
    for round in 0..KILLS {
        // ~1 GiB of rows: far more than can be read in 200 ms.
        let mut child = Command::new(&cli)
            .args([
                "--no-defaults",
                "--protocol=TCP",
                "-h127.0.0.1",
                &format!("-P{}", proxy.port),
                &format!("-u{APP_USER}"),
                &format!("-p{APP_PASSWORD}"),
                "--quick",
                "--batch",
                "--skip-column-names",
                "-e",
                "SELECT seq, REPEAT('k', 1048576) FROM ringgate_test.seq_1_to_1000",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mariadb");
        std::thread::sleep(Duration::from_millis(200 + 100 * round));
        let finished_early = child.try_wait().expect("try_wait").is_some();
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait mariadb");
        assert!(
            !finished_early,
            "the mariadb client finished before it was killed (status {:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // The proxy keeps serving everybody else.
        let mut conn = proxy.connect_app();
        assert_eq!(q_one::<u64>(&mut conn, &format!("SELECT {round}")), round);
    }
    proxy.assert_running();
    // The streaming backend connection must be drained or closed, never returned busy.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let m = proxy.metrics();
        if m.get(r#"ringgate_backend_connections{state="busy"}"#) == 0.0
            && m.get("ringgate_client_connections") == 0.0
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    proxy.assert_settled(base, 2 * KILLS);
}
both_modes!(client_killed_mid_result, killed_mid_result);

// ---------------------------------------------------------------------------------------------
// The read buffers are what the mode says
// ---------------------------------------------------------------------------------------------

fn registered_buffers(mode: Mode) {
    let mut proxy = Proxy::start(mode);
    let base = proxy.connections_total();
    let workers = proxy.opts.workers;
    let count = proxy.opts.read_buffer_count as u64;
    {
        let mut conn = proxy.connect_app();
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 1"), 1);
    }
    // Rings may register their buffers while starting; poll briefly.
    let deadline = Instant::now() + Duration::from_secs(5);
    let rings = loop {
        let rings = io_uring_user_bufs(proxy.pid());
        let ok = match mode {
            Mode::Fixed => rings.iter().filter(|(_, n)| *n == count).count() >= workers,
            Mode::Heap | Mode::Ring => rings.len() >= workers,
        };
        if ok || Instant::now() > deadline {
            break rings;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let m = proxy.metrics();
    match mode {
        Mode::Fixed => {
            let with_bufs: Vec<_> = rings.iter().filter(|(_, n)| *n > 0).collect();
            assert_eq!(
                with_bufs.len(),
                workers,
                "want one io_uring with registered buffers per worker ({workers}); \
                 /proc/{}/fdinfo shows rings (fd, UserBufs): {rings:?}",
                proxy.pid()
            );
            for (fd, n) in &with_bufs {
                assert_eq!(
                    *n, count,
                    "io_uring fd {fd} has {n} registered buffers, want --read-buffer-count {count}"
                );
            }
            let total = m.get(r#"ringgate_read_buffers_total{mode="fixed"}"#);
            assert_eq!(
                total,
                (count as usize * workers) as f64,
                "ringgate_read_buffers_total{{mode=\"fixed\"}} should be read-buffer-count x workers"
            );
            assert_eq!(
                m.try_get(r#"ringgate_read_buffers_total{mode="heap"}"#)
                    .unwrap_or(0.0),
                0.0
            );
        }
        Mode::Heap => {
            assert!(
                rings.len() >= workers,
                "want at least one io_uring per worker ({workers}), found {rings:?}"
            );
            assert!(
                rings.iter().all(|(_, n)| *n == 0),
                "heap mode must not register buffers: {rings:?}"
            );
            assert_eq!(m.get(r#"ringgate_read_buffers_total{mode="heap"}"#), 0.0);
            assert!(
                m.try_get(r#"ringgate_read_buffers_total{mode="fixed"}"#)
                    .is_none(),
                "heap mode exports a fixed buffer total"
            );
        }
        Mode::Ring => {
            // A provided-buffer ring is not a fixed-buffer table: fdinfo lists no UserBufs.
            assert!(
                rings.iter().all(|(_, n)| *n == 0),
                "ring mode must not register fixed buffers: {rings:?}"
            );
            assert_eq!(m.get(r#"ringgate_read_buffers_total{mode="ring"}"#), 0.0);
            assert_eq!(
                m.get("ringgate_read_buffer_ring_buffers"),
                (count as usize * workers) as f64,
                "ringgate_read_buffer_ring_buffers should be read-buffer-count x workers"
            );
        }
    }
    proxy.assert_settled(base, 1);
}
both_modes!(read_buffers_are_registered, registered_buffers);

/// RLIMIT_MEMLOCK for the fallback test: 64 KiB, far below the 16 MiB per worker that
/// `--read-buffer-count 1024 --read-buffer-size 16384` registers. On 6.x kernels an unprivileged
/// process's io_uring rings are charged to RLIMIT_MEMLOCK too, so this also proves that ringgate
/// shrinks its rings to fit instead of failing to start.
const FALLBACK_MEMLOCK_BYTES: usize = 64 * 1024;

/// Unprivileged and with a small RLIMIT_MEMLOCK, `--read-buffers fixed` cannot register its
/// buffers: ringgate must say why, fall back to heap buffers, and work.
#[test]
fn fixed_buffers_fall_back_to_heap_without_memlock() {
    let wrapper = low_memlock_wrapper(FALLBACK_MEMLOCK_BYTES);
    // A copy of the binary and the users file that `nobody` can surely read, whatever the
    // permissions on the path to this checkout.
    let dir = scratch_dir("fallback");
    let bin = dir.join("ringgate");
    std::fs::copy(ringgate_bin(), &bin).expect("copy ringgate binary");
    set_mode(&bin, 0o755);
    let users = dir.join("users.json");
    std::fs::copy(users_file(), &users).expect("copy users file");
    set_mode(&users, 0o644);

    let mut opts = ProxyOpts::new(Mode::Fixed);
    opts.wrapper = wrapper;
    opts.binary = Some(bin);
    opts.users_file = users;
    let mut proxy = Proxy::start_with(opts);
    let base = proxy.connections_total();

    let log = proxy.stderr();
    assert!(
        log.contains("LimitMEMLOCK") || log.contains("CAP_IPC_LOCK"),
        "ringgate must warn about LimitMEMLOCK / CAP_IPC_LOCK when it cannot register buffers; stderr:\n{log}"
    );
    let m = proxy.metrics();
    assert_eq!(
        m.try_get(r#"ringgate_read_buffers_total{mode="heap"}"#),
        Some(0.0),
        "after the fallback the metrics must say mode=\"heap\":\n{}",
        m.dump()
    );
    assert!(
        m.try_get(r#"ringgate_read_buffers_total{mode="fixed"}"#)
            .unwrap_or(0.0)
            == 0.0,
        "no fixed buffers after the fallback:\n{}",
        m.dump()
    );
    for (fd, n) in io_uring_user_bufs(proxy.pid()) {
        assert_eq!(
            n, 0,
            "io_uring fd {fd} has {n} registered buffers after the fallback"
        );
    }
    {
        let mut conn = proxy.connect_app();
        assert_eq!(q_one::<i64>(&mut conn, "SELECT 1"), 1);
        let s: Vec<u8> = q_one(&mut conn, &format!("SELECT REPEAT('f', {})", MIB));
        assert_eq!(s.len(), MIB);
    }
    // Checked as heap mode from here on.
    proxy.opts.mode = Mode::Heap;
    proxy.assert_settled(base, 1);
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

//! The MariaDB a run measures against (the test sandbox or one of its own) and the tables the
//! scenarios read.

use std::path::Path;
use std::process::Command;

use mysql_async::prelude::Queryable;

use crate::args::Args;
use crate::model::profile::Profile;
use crate::model::target::Backend;
use crate::model::{Res, BENCH_DB};
use crate::procs;

pub async fn admin_conn(b: &Backend, db: &str) -> Res<mysql_async::Conn> {
    mysql_async::Conn::new(b.endpoint(db).opts())
        .await
        .map_err(|e| format!("admin connection to MariaDB {}:{}: {e}", b.host, b.port))
}

fn run_checked(what: &str, cmd: &mut Command) -> Res<String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn read_pidfile(p: &Path) -> Option<u32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The MariaDB to run against: the test sandbox from the environment
/// (smoke), or our own sandbox started here.
pub fn start_backend(root: &Path, prof: &Profile, args: &Args) -> Res<(Backend, bool)> {
    let reuse = prof.name == "smoke" || args.get("reuse-sandbox", "BENCH_REUSE_SANDBOX").is_some();
    if reuse {
        if let Ok(port) = std::env::var("RINGGATE_TEST_MYSQL_PORT") {
            let port: u16 = port.parse().map_err(|_| "bad RINGGATE_TEST_MYSQL_PORT")?;
            let pid = std::env::var("RINGGATE_TEST_MYSQL_SOCKET")
                .ok()
                .and_then(|s| read_pidfile(&Path::new(&s).parent()?.join("mysqld.pid")));
            eprintln!("bench: reusing the running MariaDB on port {port}");
            return Ok((
                Backend {
                    host: std::env::var("RINGGATE_TEST_MYSQL_HOST").unwrap_or("127.0.0.1".into()),
                    port,
                    user: std::env::var("RINGGATE_TEST_BACKEND_USER").unwrap_or("ringgate".into()),
                    password: std::env::var("RINGGATE_TEST_BACKEND_PASSWORD")
                        .unwrap_or("ringgate-backend".into()),
                    pid,
                },
                false,
            ));
        }
    }
    let port: u16 = args.num("mysql-port", "BENCH_MYSQL_PORT")?.unwrap_or(3408);
    let dir = root.join("target/bench-mariadb");
    let script = root.join("scripts/mariadb-sandbox.sh");
    let mut stop = Command::new(&script);
    stop.arg("stop").arg(&dir).arg(port.to_string());
    procs::register_sandbox_stop(stop);
    eprintln!(
        "bench: starting a MariaDB sandbox on 127.0.0.1:{port} ({})",
        dir.display()
    );
    run_checked(
        "mariadb-sandbox.sh start",
        Command::new(&script)
            .arg("start")
            .arg(&dir)
            .arg(port.to_string())
            // MariaDB's own TLS, for the TLS section (scenarios/tls/).
            .env("RINGGATE_SANDBOX_TLS", "1"),
    )?;
    Ok((
        Backend {
            host: "127.0.0.1".into(),
            port,
            user: "ringgate".into(),
            password: "ringgate-backend".into(),
            pid: read_pidfile(&dir.join("mysqld.pid")),
        },
        true,
    ))
}

pub async fn load_data(b: &Backend, prof: &Profile, own_server: bool) -> Res<()> {
    let mut c = admin_conn(b, "").await?;
    let e = |e: mysql_async::Error| e.to_string();
    if own_server {
        // Room for the storms (direct 512 + both ringgate pools + HAProxy), and no
        // host blocking after clients that give up mid-handshake.
        c.query_drop("SET GLOBAL max_connections = 5000")
            .await
            .map_err(e)?;
        c.query_drop("SET GLOBAL max_connect_errors = 1000000")
            .await
            .map_err(e)?;
    }
    c.query_drop(format!("CREATE DATABASE IF NOT EXISTS `{BENCH_DB}`"))
        .await
        .map_err(e)?;
    c.query_drop(format!("USE `{BENCH_DB}`")).await.map_err(e)?;
    let n = prof.table_size;
    let have: Option<u64> = c
        .query_first("SELECT COUNT(*) FROM sbtest1")
        .await
        .unwrap_or(None);
    if have != Some(n) {
        eprintln!("bench: loading sbtest1 ({n} rows)");
        c.query_drop("DROP TABLE IF EXISTS sbtest1")
            .await
            .map_err(e)?;
        // sysbench's own schema, so `sysbench oltp_*` runs against it as is.
        c.query_drop(
            "CREATE TABLE sbtest1 (id INTEGER NOT NULL AUTO_INCREMENT, k INTEGER DEFAULT '0' NOT NULL, \
             c CHAR(120) DEFAULT '' NOT NULL, pad CHAR(60) DEFAULT '' NOT NULL, PRIMARY KEY (id)) ENGINE=InnoDB",
        )
        .await
        .map_err(e)?;
        c.query_drop("SET SESSION max_recursive_iterations = 100000000")
            .await
            .ok();
        c.query_drop(format!(
            "INSERT INTO sbtest1 (id, k, c, pad) SELECT n, FLOOR(1 + RAND(n) * {n}), \
             RPAD(CONCAT(n, '-', MD5(n), '-', SHA1(n)), 120, '-'), RPAD(MD5(n + 1), 60, '-') \
             FROM (WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {n}) SELECT n FROM s) AS seq"
        ))
        .await
        .map_err(e)?;
        c.query_drop("CREATE INDEX k_1 ON sbtest1(k)")
            .await
            .map_err(e)?;
    }
    c.query_drop(
        "CREATE TABLE IF NOT EXISTS bench_blobs (id BIGINT PRIMARY KEY, b LONGBLOB NOT NULL) ENGINE=InnoDB",
    )
    .await
    .map_err(e)?;
    let mut sizes: Vec<u64> = prof.large.iter().map(|l| l.0).collect();
    sizes.sort();
    sizes.dedup();
    for s in sizes {
        c.query_drop(format!(
            "INSERT INTO bench_blobs VALUES ({s}, REPEAT('r', {s})) ON DUPLICATE KEY UPDATE b = VALUES(b)"
        ))
        .await
        .map_err(e)?;
    }
    c.disconnect().await.map_err(e)?;
    Ok(())
}

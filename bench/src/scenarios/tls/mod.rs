//! The TLS section of `make bench`: connect storms with TLS,
//! full and resumed handshakes measured apart, and query throughput with
//! and without TLS, for ringgate's front-end TLS against MariaDB's own.
//!
//! mysql_async is built without TLS here, and no MySQL client library lets
//! one choose per connection between a full and a resumed handshake and
//! then tell which one happened, so this module speaks the few packets it
//! needs itself (greeting, SSLRequest, HandshakeResponse41 with
//! mysql_native_password, COM_QUERY, COM_QUIT) over blocking sockets, one
//! thread per client, with rustls as the TLS client. The same client runs
//! with and without TLS, so the differences are TLS's.
//!
//! Modes, each a closed loop of `concurrency` clients:
//! - `connect-plain`: connect, log in, quit, without TLS (the baseline);
//! - `connect-full`: the same over TLS with resumption off in the client;
//! - `connect-resumed`: over TLS offering a session ticket from an earlier
//!   connection of the same client process (rustls's in-memory client
//!   store; the server decides whether it resumes, the client counts it);
//! - `select-plain` / `select-tls`: persistent connections running point
//!   selects on `sbtest1`.
//!
//! Around each step it reads the CPU time of the proxy and of mariadbd
//! (`/proc/PID/stat`), so "CPU µs per connect" is the server side's work
//! for one connect: ringgate's own (its pool spares MariaDB the logins)
//! and mariadbd's (for direct, the whole handshake and login).

mod client;
mod steps;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::checks;
use crate::model::profile::Profile;
use crate::model::target::{Backend, Kind, Target};
use crate::model::tls::TlsReport;
use crate::model::{Res, BENCH_DB};
use crate::procs;
use crate::report;
use crate::setup::launch::start_ringgate;
use crate::setup::Ctx;

/// One server the section measures.
#[derive(Clone, Debug)]
pub struct TlsTarget {
    pub name: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub db: String,
    /// The proxy's pid (none for direct).
    pub proxy_pid: Option<u32>,
}

/// Settings of the section.
pub struct TlsSpec {
    pub connect_concurrency: usize,
    pub select_concurrency: usize,
    pub rounds: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub table_size: u64,
    pub mariadb_pid: Option<u32>,
}

/// Where the certificate for ringgate's TLS comes from: the MariaDB
/// sandbox's (so both servers sign with the same RSA 2048 key type), else
/// the test certificate in src/tls/testdata.
pub fn cert_files(root: &Path, sandbox_tls_dir: Option<&Path>) -> (PathBuf, PathBuf) {
    match sandbox_tls_dir {
        Some(d) if d.join("server.pem").is_file() && d.join("server.key").is_file() => {
            (d.join("server.pem"), d.join("server.key"))
        }
        _ => (
            root.join("src/tls/testdata/server.pem"),
            root.join("src/tls/testdata/server.key"),
        ),
    }
}

/// The section within `make bench`: a ringgate with TLS on `base + 8`
/// (metrics `base + 18`) and MariaDB's own TLS when the sandbox has it.
pub async fn section(
    ctx: &Ctx<'_>,
    root: &Path,
    out_dir: &Path,
    own_server: bool,
) -> Res<TlsReport> {
    // The sandbox marks a server started with RINGGATE_SANDBOX_TLS=1.
    let sandbox_tls = if own_server {
        Some(root.join("target/bench-mariadb/tls"))
    } else {
        std::env::var_os("RINGGATE_TEST_MYSQL_TLS_DIR").map(PathBuf::from)
    }
    .filter(|d| d.join("enabled").exists());
    let (cert, key) = cert_files(root, sandbox_tls.as_deref());
    // Session pooling, as the recorded TLS figures were measured (transaction is the default).
    let extra = [
        "--pooling".to_string(),
        "session".to_string(),
        "--tls-cert".to_string(),
        cert.display().to_string(),
        "--tls-key".to_string(),
        key.display().to_string(),
    ];
    let rg = start_ringgate(ctx, "tls", ctx.base_port + 8, ctx.base_port + 18, &extra)?;
    let mut notes = vec![format!(
        "ringgate: fixed mode, --workers 2, TLS certificate {} (MariaDB's own when the sandbox \
         has TLS, else the test certificate); the client verifies no certificate",
        cert.display()
    )];
    let targets = tls_targets(&rg, ctx.backend, sandbox_tls.is_some(), &mut notes);
    let spec = section_spec(ctx.prof, ctx.backend);
    let dir = out_dir.to_path_buf();
    let mut report = tokio::task::spawn_blocking(move || steps::run(&targets, &spec, &dir))
        .await
        .map_err(|e| format!("tls section: {e}"))??;
    report.notes.extend(notes);
    if let Kind::Ringgate { metrics } = &rg.kind {
        server_side(*metrics, &mut report).await?;
    }
    std::fs::write(
        out_dir.join("tls.json"),
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(out_dir.join("tls.md"), report::tls::table(&report))
        .map_err(|e| e.to_string())?;
    Ok(report)
}

/// ringgate, and MariaDB directly when its sandbox speaks TLS (else a note says why not).
fn tls_targets(
    rg: &Target,
    backend: &Backend,
    direct_tls: bool,
    notes: &mut Vec<String>,
) -> Vec<TlsTarget> {
    let mut targets = vec![TlsTarget {
        name: "ringgate".into(),
        port: rg.ep.port,
        user: rg.ep.user.clone(),
        password: rg.ep.password.clone(),
        db: rg.ep.db.clone(),
        proxy_pid: rg.pid,
    }];
    if direct_tls {
        targets.push(TlsTarget {
            name: "direct".into(),
            port: backend.port,
            user: backend.user.clone(),
            password: backend.password.clone(),
            db: BENCH_DB.into(),
            proxy_pid: None,
        });
    } else {
        notes.push("direct: the MariaDB sandbox has no TLS here, so no direct TLS figures".into());
    }
    targets
}

/// The profile's rounds and timings at 16 clients; the smoke run's one short round at 2.
fn section_spec(prof: &Profile, backend: &Backend) -> TlsSpec {
    let smoke = prof.name == "smoke";
    TlsSpec {
        connect_concurrency: if smoke { 2 } else { 16 },
        select_concurrency: if smoke { 2 } else { 16 },
        rounds: if smoke { 1 } else { prof.rounds },
        warmup: if smoke {
            Duration::from_millis(200)
        } else {
            prof.warmup
        },
        duration: if smoke {
            Duration::from_millis(300)
        } else {
            prof.duration
        },
        table_size: prof.table_size,
        mariadb_pid: backend.pid,
    }
}

/// What ringgate itself counted: the resumed handshakes the client saw
/// must be the server's too; and nothing leaked (polled for up to 10 s).
async fn server_side(metrics: SocketAddr, report: &mut TlsReport) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (m, problems) = loop {
        let m = procs::parse_prometheus(&procs::http_get(metrics, "/metrics")?);
        // The TLS target runs without --hold-idle-slots.
        let problems = checks::leak_problems(&m, false);
        if problems.is_empty() || Instant::now() > deadline {
            break (m, problems);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let get = |k: &str| m.get(k).copied().unwrap_or(f64::NAN);
    report.notes.push(format!(
        "ringgate counted {} full and {} resumed TLS handshakes (warm-ups included), {} TLS errors",
        get("ringgate_client_tls_handshakes_total{kind=\"full\"}"),
        get("ringgate_client_tls_handshakes_total{kind=\"resumed\"}"),
        get("ringgate_client_tls_errors_total"),
    ));
    for p in problems {
        report
            .notes
            .push(format!("LEAK ringgate (tls) after the run: {p}"));
        report.leaks.push(p);
    }
    Ok(())
}

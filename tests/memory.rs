//! Memory per connection: 2,000 concurrent idle sessions through ringgate, with its
//! RSS (VmRSS) measured before and after. Ignored by default (it opens ~4,000 sockets and takes
//! a while); `make mem` runs it:
//!
//!     cargo test --release --test memory -- --ignored --nocapture
//!
//! In `fixed` mode the registered region is mmapped and pinned at start-up, so it is already
//! in the baseline RSS: the growth is the per-connection cost *excluding* the registered
//! region. `heap` mode is measured too; there each connection also mallocs its 16 KiB buffer.
//! Two figures per mode:
//!   * idle client (greeting sent, login not finished): client-side state only;
//!   * idle session (logged in): client state + its leased backend connection (session
//!     pooling gives every session its own backend connection).
//!
//! `MEM_SESSIONS` changes the count (default 2000).
//!
//! Both figures are asserted against a bound, see [`STATE_BOUND`].

use std::io::Read;
use std::time::{Duration, Instant};

use testkit::leaks::{assert_no_leaks, baseline};
use testkit::own_mariadb::OwnMariaDb;
use testkit::procfs::settled_rss_bytes;
use testkit::proxy::{wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{raw_connect, raw_login, raw_query};
use testkit::rlimit::{hard_nofile, raise_nofile};

/// The bound on RSS growth per idle client and per idle session for ringgate's own state,
/// i.e. excluding read buffers: 8 KiB. Recorded (docs/reliability.md): 969 B per idle client
/// and 1,354 B per session (client + backend) in fixed mode. 8 KiB is ~6x that: room for
/// allocator and measurement noise (page-granular RSS, per-thread malloc arenas, slab vectors
/// that double their capacity), yet a regression that puts a buffer-sized allocation (16 KiB)
/// or a few KiB of new state on every connection fails. In heap mode each connection's read
/// buffer is malloc'd as well, so the bound there adds one `--read-buffer-size` per connection
/// (two per session); only the pages actually touched count, so this is loose for heap mode.
const STATE_BOUND: f64 = 8.0 * 1024.0;

/// Growth that does not scale with the connection count (arenas, slab headers, the metrics
/// scrape), allowed once per measurement so that a small MEM_SESSIONS is not judged on it.
const FIXED_SLACK: f64 = 1024.0 * 1024.0;

struct Figures {
    mode: Mode,
    n: usize,
    rss_base: u64,
    rss_clients: u64,
    rss_sessions: u64,
    slots_clients: f64,
    slots_sessions: f64,
    registered: u64,
    read_buffer_size: usize,
}

fn measure(mode: Mode, db: &OwnMariaDb, n: usize) -> Figures {
    let mut o = ProxyOpts::new(mode);
    o.backend_override = Some(db.env());
    o.workers = 2;
    // Slots for n clients + n backends, with room for an uneven SO_REUSEPORT spread.
    o.read_buffer_count = 4096;
    o.max_connections = n + 100;
    o.backend_max_connections = n + 50;
    o.backend_pool_size = 4;
    o.backend_wait_timeout = "60s";
    // ringgate needs ~2n fds (n clients + n backends); inherits the raised limit, capped.
    let nofile = format!("--nofile={0}:{0}", (4 * n as u64 + 1000).min(hard_nofile()));
    o.wrapper = vec!["prlimit".into(), nofile];
    o.extra_args = vec!["--handshake-timeout".into(), "10m".into()];
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let pid = proxy.pid();
    let read_buffer_size = proxy.opts.read_buffer_size;
    let registered = match mode {
        Mode::Fixed => 2 * 4096 * proxy.opts.read_buffer_size as u64,
        Mode::Heap | Mode::Ring => 0,
    };
    let rss_base = settled_rss_bytes(pid);

    // n idle clients: greeted, never answering (client state + its read buffer slot).
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = raw_connect(proxy.port);
        let mut b = [0u8; 4];
        s.read_exact(&mut b).expect("greeting");
        clients.push(s);
    }
    wait_until(
        &proxy,
        Duration::from_secs(30),
        "all clients counted",
        || proxy.metrics().get("ringgate_client_connections") >= n as f64,
    );
    let rss_clients = settled_rss_bytes(pid);
    let slots_clients = proxy
        .metrics()
        .get(r#"ringgate_read_buffers_in_use{owner="client"}"#);
    drop(clients);
    wait_until(&proxy, Duration::from_secs(30), "clients gone", || {
        proxy.metrics().get("ringgate_client_connections") == 0.0
    });

    // n idle sessions: logged in, each leasing a backend connection.
    let t0 = Instant::now();
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        sessions.push(raw_login(proxy.port));
    }
    let login_time = t0.elapsed();
    let m = proxy.metrics();
    assert_eq!(
        m.get(r#"ringgate_backend_connections{state="busy"}"#),
        n as f64,
        "every session holds a backend connection"
    );
    let rss_sessions = settled_rss_bytes(pid);
    let slots_sessions = m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#)
        + m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#);
    eprintln!("{n} logins in {login_time:?}");
    // Every session still works.
    for s in sessions.iter_mut().step_by(97) {
        raw_query(s, "SELECT 1").expect("query on an idle session");
    }
    drop(sessions);
    assert_no_leaks(&mut proxy, &base, 2 * n as u64);
    Figures {
        mode,
        n,
        rss_base,
        rss_clients,
        rss_sessions,
        slots_clients,
        slots_sessions,
        registered,
        read_buffer_size,
    }
}

#[test]
#[ignore = "opens ~4,000 sockets; run with `make mem`"]
fn memory_per_connection() {
    let n: usize = std::env::var("MEM_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    raise_nofile(n as u64 + 500);
    let db = OwnMariaDb::started("mem");
    // n sessions + the warm-up pools + root: above the sandbox's 2000.
    db.root_sql(&format!("SET GLOBAL max_connections = {}", n + 300));
    let mut out = Vec::new();
    let mut over = Vec::new();
    for mode in [Mode::Fixed, Mode::Heap] {
        let f = measure(mode, &db, n);
        assert!(
            f.rss_base > 0 && f.rss_clients > 0 && f.rss_sessions > 0,
            "an RSS reading is 0: {:?} {} {} {}",
            f.mode,
            f.rss_base,
            f.rss_clients,
            f.rss_sessions
        );
        let buf = match mode {
            Mode::Fixed => 0.0,
            Mode::Heap | Mode::Ring => f.read_buffer_size as f64,
        };
        for (what, rss, per_conn_bound) in [
            ("idle client", f.rss_clients, STATE_BOUND + buf),
            ("idle session", f.rss_sessions, STATE_BOUND + 2.0 * buf),
        ] {
            let growth = rss.saturating_sub(f.rss_base) as f64;
            let allowed = per_conn_bound * f.n as f64 + FIXED_SLACK;
            if growth > allowed {
                over.push(format!(
                    "{:?}: {} {what}s grew RSS by {:.0} B ({:.0} B each), over the bound of \
                     {:.0} B each + {:.0} KiB",
                    f.mode,
                    f.n,
                    growth,
                    growth / f.n as f64,
                    per_conn_bound,
                    FIXED_SLACK / 1024.0
                ));
            }
        }
        let per_client = f.rss_clients.saturating_sub(f.rss_base) as f64 / f.n as f64;
        let per_session = f.rss_sessions.saturating_sub(f.rss_base) as f64 / f.n as f64;
        let line = format!(
            "{:?}: {} connections; RSS base {:.1} MiB (registered region {:.1} MiB, pinned at \
             start-up), with {} idle clients {:.1} MiB ({} client slots) = {:.0} B/client \
             ({:.1} KiB), with {} idle sessions {:.1} MiB ({} slots, client+backend) = {:.0} \
             B/session ({:.1} KiB)",
            f.mode,
            f.n,
            f.rss_base as f64 / 1048576.0,
            f.registered as f64 / 1048576.0,
            f.n,
            f.rss_clients as f64 / 1048576.0,
            f.slots_clients,
            per_client,
            per_client / 1024.0,
            f.n,
            f.rss_sessions as f64 / 1048576.0,
            f.slots_sessions,
            per_session,
            per_session / 1024.0,
        );
        eprintln!("MEMORY {line}");
        out.push(line);
    }
    eprintln!("\n{}", out.join("\n"));
    assert!(
        over.is_empty(),
        "memory per connection:\n{}",
        over.join("\n")
    );
}

//! Idle connections hold no read buffer.
//!
//! Many logged-in clients sit idle through ringgate; the metrics must show that they hold no
//! read buffer (ring buffers, fixed slots and heap buffers in use stay near zero, no heap
//! fallback), the proxy's RSS per idle client must stay within its bounds, every
//! connection must still answer a query afterwards, and once they all close (a churn of N
//! connections) slots, ring buffers, fds and backend connections are back at their baseline.
//!
//! `make test` runs it with 1,000 clients; `make mem` with 10,000 (`IDLE_CLIENTS` overrides
//! both). The process raises its own fd limit, and ringgate's through `prlimit`.

use std::net::TcpStream;
use std::time::Duration;

use testkit::leaks::{assert_no_leaks, baseline};
use testkit::procfs::{pinned_bytes, settled_rss_bytes};
use testkit::proxy::{wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{
    hello_payload, raw_login, raw_query, read_greeting, read_packet, write_packet,
};
use testkit::rlimit::{hard_nofile, raise_nofile};

/// RSS growth that does not scale with the client count (allocator arenas, slab and pool
/// vectors doubling, the metrics scrape), allowed once per measurement.
const FIXED_SLACK: f64 = 1024.0 * 1024.0;

/// RSS per idle client in transaction pooling (the ring not included).
const TX_BOUND: f64 = 2048.0;
/// RSS per idle client *and its backend connection* in session pooling.
const SESSION_BOUND: f64 = 4096.0;

fn clients_wanted(default: usize) -> usize {
    std::env::var("IDLE_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one run measured.
struct Figures {
    rss_per_client: f64,
    rss_per_client_after: f64,
    rss_base: u64,
    /// VmPin and VmLck of the proxy (registered buffers are pinned).
    pinned: (u64, u64),
    held: Held,
}

/// Buffers held, from the metrics endpoint.
#[derive(Debug, Default)]
struct Held {
    /// Read buffers (fixed slots or heap buffers) held by clients and by backends.
    client: f64,
    backend: f64,
    /// Provided-buffer ring buffers with bytes held.
    ring: f64,
    heap_fallbacks: f64,
    backends: f64,
    busy_backends: f64,
}

fn held(p: &Proxy) -> Held {
    let m = p.metrics();
    Held {
        client: m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#),
        backend: m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#),
        ring: m.get("ringgate_read_buffer_ring_in_use"),
        heap_fallbacks: m.get("ringgate_read_buffer_heap_fallbacks_total"),
        backends: m.get(r#"ringgate_backend_connections{state="idle"}"#)
            + m.get(r#"ringgate_backend_connections{state="busy"}"#),
        busy_backends: m.get(r#"ringgate_backend_connections{state="busy"}"#),
    }
}

/// `n` idle clients through a ringgate in `mode`, with transaction or session pooling.
fn idle_clients(mode: Mode, transaction: bool, n: usize) -> Figures {
    let backends = if transaction { 64 } else { n + 50 };
    let mut o = ProxyOpts::new(mode);
    o.workers = 2;
    o.max_connections = n + 100;
    o.backend_max_connections = backends;
    o.backend_wait_timeout = "60s";
    match mode {
        Mode::Ring => o.read_buffer_count = 256,
        // Far fewer slots than clients: only clients that hold none between commands fit
        // (a client beyond the slots would show as a heap fallback).
        Mode::Fixed => o.read_buffer_count = 128,
        Mode::Heap => {}
    }
    let nofile = (n as u64 + backends as u64 + 1000).max(hard_nofile());
    o.wrapper = vec!["prlimit".into(), format!("--nofile={nofile}:{nofile}")];
    o.extra_args = vec!["--handshake-timeout".into(), "10m".into()];
    // Said either way: the session-pooling runs count a backend per idle client.
    let pooling = if transaction {
        "transaction"
    } else {
        "session"
    };
    o.extra_args.extend(["--pooling".into(), pooling.into()]);
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let pid = proxy.pid();
    let rss_base = settled_rss_bytes(pid);
    let before = held(&proxy);

    let mut clients: Vec<TcpStream> = (0..n).map(|_| raw_login(proxy.port)).collect();
    wait_until(
        &proxy,
        Duration::from_secs(60),
        "all clients logged in",
        || proxy.metrics().get("ringgate_client_connections") >= n as f64,
    );
    let rss_idle = settled_rss_bytes(pid);
    let idle = held(&proxy);
    let pinned = pinned_bytes(pid);
    let growth = rss_idle.saturating_sub(rss_base) as f64;
    let per_client = growth / n as f64;
    eprintln!(
        "IDLE {} {} pooling: {n} idle clients, RSS {:.1} -> {:.1} MiB = {per_client:.0} B per \
         client; held {idle:?}",
        mode.as_str(),
        if transaction {
            "transaction"
        } else {
            "session"
        },
        rss_base as f64 / 1048576.0,
        rss_idle as f64 / 1048576.0,
    );

    if mode == Mode::Heap {
        // The baseline of the side-by-side run: every connection holds its heap buffer.
        drop(clients);
        assert_no_leaks(&mut proxy, &base, n as u64);
        return Figures {
            rss_per_client: per_client,
            rss_per_client_after: per_client,
            rss_base,
            pinned,
            held: idle,
        };
    }
    // Nothing is held for an idle client: no read buffer of any kind, and in transaction
    // pooling no backend connection either.
    assert_eq!(idle.client, 0.0, "idle clients hold read buffers: {idle:?}");
    assert_eq!(idle.ring, 0.0, "idle clients hold ring buffers: {idle:?}");
    assert_eq!(
        idle.heap_fallbacks, before.heap_fallbacks,
        "heap fallbacks while clients sat idle: {idle:?}"
    );
    // Nor for its backend connection: ring mode reads it through the ring, fixed mode waits
    // on a poll of its socket between commands (the relay's watching read holds no slot).
    assert_eq!(
        idle.backend, 0.0,
        "idle backend connections hold read buffers: {idle:?}"
    );
    if transaction {
        assert_eq!(
            idle.busy_backends, 0.0,
            "idle clients hold backends: {idle:?}"
        );
        assert!(idle.backends <= backends as f64, "{idle:?}");
    } else {
        assert_eq!(idle.busy_backends, n as f64, "{idle:?}");
    }
    let bound = if transaction { TX_BOUND } else { SESSION_BOUND };
    assert!(
        growth <= bound * n as f64 + FIXED_SLACK,
        "{} mode: {n} idle clients grew RSS by {growth:.0} B ({per_client:.0} B each), over \
         {bound} B each + {} KiB",
        mode.as_str(),
        FIXED_SLACK / 1024.0
    );

    // Every idle connection still answers.
    for (i, c) in clients.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        if let Err(e) = raw_query(c, "SELECT 1") {
            panic!("client {i} of {n} after idling: {e}");
        }
    }
    // A client that just ran a query keeps its slot and a read pending in fixed mode (as does
    // its backend connection) until that read has been pending for 10 ms (checked after each
    // batch, or at the 100 ms tick on a quiet worker; src/proxy/worker/hot_read.rs). And in any mode a backend connection may still be busy
    // when the last client has its answer: opening for a worker whose clients waited (the
    // workers share --backend-max-connections, and one closes a connection for the other), a
    // warm refill logging in, a give-back finishing; it holds its buffer until idle. A leak
    // would not settle.
    wait_until(
        &proxy,
        Duration::from_secs(10),
        "no buffer held after one query each",
        || {
            let h = held(&proxy);
            h.client == 0.0 && h.backend == 0.0 && h.ring == 0.0
        },
    );
    let after = held(&proxy);
    let rss_after = settled_rss_bytes(pid);
    eprintln!(
        "IDLE {}: after one query each, RSS {:.1} MiB = {:.0} B per client; held {after:?}",
        mode.as_str(),
        rss_after as f64 / 1048576.0,
        rss_after.saturating_sub(rss_base) as f64 / n as f64
    );
    let growth_after = rss_after.saturating_sub(rss_base) as f64;
    assert!(
        growth_after <= bound * n as f64 + FIXED_SLACK,
        "{} mode: after one query each, {n} idle clients grew RSS by {growth_after:.0} B, over \
         {bound} B each + {} KiB",
        mode.as_str(),
        FIXED_SLACK / 1024.0
    );
    assert_eq!(after.client, 0.0, "after one query each: {after:?}");
    assert_eq!(after.backend, 0.0, "after one query each: {after:?}");
    assert_eq!(after.ring, 0.0, "after one query each: {after:?}");
    // The churn: every connection closes; slots, ring buffers, fds and backend connections
    // must all come back to the baseline.
    drop(clients);
    assert_no_leaks(&mut proxy, &base, n as u64);
    Figures {
        rss_per_client: per_client,
        rss_per_client_after: growth_after / n as f64,
        rss_base,
        pinned,
        held: idle,
    }
}

#[test]
fn ring_mode_idle_clients_in_transaction_pooling_hold_nothing() {
    let n = clients_wanted(1000);
    raise_nofile(n as u64 + 1000);
    let f = idle_clients(Mode::Ring, true, n);
    eprintln!(
        "ring/transaction: {:.0} B per idle client, {:?}",
        f.rss_per_client, f.held
    );
}

#[test]
fn ring_mode_idle_sessions_hold_no_buffer() {
    // Session pooling gives every client its own backend connection: the sandbox allows
    // 2,000, so this stays at a few hundred whatever IDLE_CLIENTS says.
    let n = clients_wanted(300).min(300);
    raise_nofile(2 * n as u64 + 1000);
    let f = idle_clients(Mode::Ring, false, n);
    eprintln!(
        "ring/session: {:.0} B per idle client and its backend, {:?}",
        f.rss_per_client, f.held
    );
}

#[test]
fn fixed_mode_idle_clients_in_transaction_pooling_hold_no_slot() {
    let n = clients_wanted(1000);
    raise_nofile(n as u64 + 1000);
    let f = idle_clients(Mode::Fixed, true, n);
    eprintln!(
        "fixed/transaction: {:.0} B per idle client, {:?}",
        f.rss_per_client, f.held
    );
}

/// Idle sessions hold no slot, the backend half: in session pooling every idle client keeps its backend
/// connection, and in fixed mode neither of them holds a slot between commands: the relay's
/// watching read of the backend waits on a poll of its socket. 300 sessions on 2 x 128 slots:
/// a backend connection that held its slot would show as a slot in use, and those beyond the
/// slots as heap fallbacks.
#[test]
fn fixed_mode_idle_sessions_hold_no_slot() {
    let n = clients_wanted(300).min(300);
    raise_nofile(2 * n as u64 + 1000);
    let f = idle_clients(Mode::Fixed, false, n);
    eprintln!(
        "fixed/session: {:.0} B per idle client and its backend, {:?}",
        f.rss_per_client, f.held
    );
}

/// Slot exhaustion never fails and never queues. One worker with 8 slots and
/// 32 clients running queries at once, in transaction pooling on up to 4 backend connections:
/// a readable client or backend connection that finds no free slot reads into a heap buffer at
/// once (the wait counter rises; a queue would wait on the busy connections, which keep their
/// slots while busy, and in transaction pooling on the very connections the queued clients
/// need), every answer is right, nothing stalls, and every slot comes back.
#[test]
fn fixed_mode_slot_exhaustion_falls_back_without_stall_or_leak() {
    slot_exhaustion(true);
}

/// The same in session pooling: 32 sessions on their own 32 backend connections, whose idle
/// reads hold no slot and whose answers take one, or a heap buffer when none is free.
#[test]
fn fixed_mode_slot_exhaustion_in_session_pooling_neither_stalls_nor_leaks() {
    slot_exhaustion(false);
}

fn slot_exhaustion(transaction: bool) {
    use mysql::prelude::Queryable;
    const CLIENTS: usize = 32;
    const QUERIES: usize = 40;
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.read_buffer_count = 8;
    o.backend_pool_size = 2;
    o.backend_max_connections = if transaction { 4 } else { CLIENTS + 8 };
    o.backend_wait_timeout = "60s";
    if transaction {
        o.extra_args = vec!["--pooling".into(), "transaction".into()];
    }
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let waits0 = proxy.metrics().get("ringgate_read_buffer_slot_waits_total");
    let opts = proxy.app_opts().read_timeout(Some(Duration::from_secs(60)));
    let start = std::sync::Arc::new(std::sync::Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (opts, start) = (opts.clone(), start.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut conn = mysql::Conn::new(opts).map_err(|e| format!("{c}: {e}"))?;
                start.wait();
                for q in 0..QUERIES {
                    let want = (c * 1000 + q) as u64;
                    let got: Option<(u64, String)> = conn
                        .query_first(format!("SELECT {want}, REPEAT('x', {})", 100 + q * 50))
                        .map_err(|e| format!("client {c} query {q}: {e}"))?;
                    match got {
                        Some((v, s)) if v == want && s.len() == 100 + q * 50 => {}
                        other => return Err(format!("client {c} query {q}: {other:?}")),
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread").expect("client");
    }
    let m = proxy.metrics();
    let waits = m.get("ringgate_read_buffer_slot_waits_total") - waits0;
    eprintln!(
        "{CLIENTS} clients x {QUERIES} queries on 8 slots: {waits} slot waits, {} heap fallbacks",
        m.get("ringgate_read_buffer_heap_fallbacks_total")
    );
    assert!(
        waits > 0.0,
        "no readable client ever found every slot taken: the test proves nothing"
    );
    assert_no_leaks(&mut proxy, &base, CLIENTS as u64);
}

/// The bench's `idle-10k` and the RSS bounds side by side: the same N idle clients (10,000 by
/// default) in transaction pooling through fixed, ring and heap, one after the other in one
/// run, with RSS per idle client (the registered region excluded: it is in the baseline) and
/// pinned memory. `make mem` runs it; the table goes to stderr.
#[test]
#[ignore = "10,000 clients per mode; run with `make mem`"]
fn idle_clients_side_by_side() {
    let n = clients_wanted(10_000);
    raise_nofile(n as u64 + 1000);
    let mut rows = Vec::new();
    for mode in [Mode::Fixed, Mode::Ring, Mode::Heap] {
        let f = idle_clients(mode, true, n);
        rows.push(format!(
            "| {} | {:.0} B | {:.0} B | {:.1} MiB | {:.1} MiB / {:.1} MiB | {} / {} / {} | {} |",
            mode.as_str(),
            f.rss_per_client,
            f.rss_per_client_after,
            f.rss_base as f64 / 1048576.0,
            f.pinned.0 as f64 / 1048576.0,
            f.pinned.1 as f64 / 1048576.0,
            f.held.client,
            f.held.backend,
            f.held.ring,
            f.held.backends,
        ));
    }
    eprintln!(
        "\n{n} idle clients, --pooling transaction, --workers 2\n\
         | mode | RSS per idle client | after one query each | RSS at start | VmPin / VmLck | \
         buffers held client / backend / ring | backend connections |\n|---|---|---|---|---|---|---|"
    );
    for r in rows {
        eprintln!("{r}");
    }
}

/// Logs in from source address `src` (127.0.0.x): each source address has its own range of
/// ephemeral ports, so clients beyond ~28,000 (net.ipv4.ip_local_port_range) need several.
fn login_from(port: u16, src: std::net::Ipv4Addr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.bind(&std::net::SocketAddr::from((src, 0)).into())?;
    s.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let scramble = read_greeting(&mut s);
    write_packet(
        &mut s,
        1,
        &hello_payload(
            &scramble,
            testkit::env::APP_USER,
            testkit::env::APP_PASSWORD,
        ),
    )?;
    let (_, ok) = read_packet(&mut s)?;
    if ok.first() != Some(&0x00) {
        return Err(std::io::Error::other(format!("login refused: {ok:?}")));
    }
    Ok(s)
}

/// The bench's `idle-max`: how many idle clients one box holds (ring mode, transaction
/// pooling) while the rest keep being served: one client runs a query after every 5,000
/// logins. Aims at IDLE_MAX (default 100,000) clients from 127.0.0.2.. (20,000 per address),
/// stops at the first failure and reports the figure and the error. `make mem` does not run
/// it (it needs root for the fd limits); run it by name with --ignored.
#[test]
#[ignore = "up to 100,000 clients; run by name with --ignored"]
fn idle_max() {
    let want: usize = std::env::var("IDLE_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // Each client is an fd here and in ringgate: neither can go past the hard fd limit, which
    // only a process with CAP_SYS_RESOURCE may raise.
    let hard = hard_nofile();
    let cap = (hard as usize).saturating_sub(1100);
    if want > cap {
        eprintln!(
            "IDLE-MAX: the hard fd limit is {hard} (no CAP_SYS_RESOURCE to raise it): aiming at \
             {cap} instead of {want}"
        );
    }
    let want = want.min(cap);
    raise_nofile(want as u64 + 1000);
    let mut o = ProxyOpts::new(Mode::Ring);
    o.workers = 2;
    o.max_connections = want + 100;
    o.backend_max_connections = 64;
    o.read_buffer_count = 256;
    o.backend_wait_timeout = "60s";
    let nofile = (want as u64 + 2000).min(hard);
    o.wrapper = vec!["prlimit".into(), format!("--nofile={nofile}:{nofile}")];
    o.extra_args = vec![
        "--handshake-timeout".into(),
        "10m".into(),
        "--pooling".into(),
        "transaction".into(),
    ];
    if let Ok(extra) = std::env::var("IDLE_MAX_ARGS") {
        o.extra_args
            .extend(extra.split_whitespace().map(String::from));
    }
    let proxy = Proxy::start_with(o);
    let rss0 = settled_rss_bytes(proxy.pid());
    let mut served = raw_login(proxy.port);
    let mut clients = Vec::with_capacity(want);
    let started = std::time::Instant::now();
    let mut stop = None;
    for i in 0..want {
        let src = std::net::Ipv4Addr::new(127, 0, 0, 2 + (i / 20_000) as u8);
        match login_from(proxy.port, src) {
            Ok(s) => clients.push(s),
            Err(e) => {
                stop = Some(format!("client {i} from {src}: {e}"));
                break;
            }
        }
        if i % 5000 == 4999 {
            if let Err(e) = raw_query(&mut served, "SELECT 1") {
                stop = Some(format!("the served client failed after {i} idle: {e}"));
                break;
            }
        }
    }
    let n = clients.len();
    let rss = settled_rss_bytes(proxy.pid());
    let h = held(&proxy);
    eprintln!(
        "IDLE-MAX: {n} idle clients in {:.0?} (aim {want}); RSS {:.1} -> {:.1} MiB = {:.0} B \
         per client; held {h:?}; stopped by: {}",
        started.elapsed(),
        rss0 as f64 / 1048576.0,
        rss as f64 / 1048576.0,
        rss.saturating_sub(rss0) as f64 / n.max(1) as f64,
        stop.as_deref().unwrap_or("nothing (aim reached)")
    );
    let open = proxy.metrics().get("ringgate_client_connections");
    raw_query(&mut served, "SELECT 1").expect("the served client still answers");
    let mut failed = Vec::new();
    for (i, c) in clients.iter_mut().enumerate().step_by(997) {
        if let Err(e) = raw_query(c, "SELECT 1") {
            failed.push(format!("{i}: {e}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{open} client connections open in ringgate for {n} clients; idle clients that did not \
         answer: {failed:?}"
    );
}

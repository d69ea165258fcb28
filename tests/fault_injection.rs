//! Failure injection: the real `ringgate` binary with the ring's
//! debug knobs. `RINGGATE_FAULT_INJECT=ebusy=N` makes every Nth
//! io_uring_enter act as EBUSY (the reap-into-backlog path),
//! `RINGGATE_DEBUG_CQ_ENTRIES=2` makes the kernel's CQ overflow constantly,
//! and `push_fail=N` turns every Nth push into a synthetic failed
//! completion. The first two must be invisible to clients; the third fails
//! some sessions, and every slot, fd and backend connection must still come
//! back (`testkit::leaks::assert_no_leaks`).
//!
//! Release binaries never read these variables, so the suite only exists in
//! debug builds (which `make test` uses).
#![cfg(debug_assertions)]

use std::time::Duration;

use mysql::prelude::Queryable;
use testkit::both_modes;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::proxy::{Mode, Proxy, ProxyOpts};

const CLIENTS: usize = 40;
const QUERIES: usize = 6;
/// Larger than a read slot (16 KiB), so one result takes many reads and
/// writes, i.e. many pushes.
const BIG: usize = 200_000;

fn injected(mode: Mode, vars: &[&str]) -> Proxy {
    let mut o = ProxyOpts::new(mode);
    o.wrapper = std::iter::once("env")
        .chain(vars.iter().copied())
        .map(String::from)
        .collect();
    let p = Proxy::start_with(o);
    assert!(
        p.stderr().contains("fault injection is active"),
        "the injection warning is missing:\n{}",
        testkit::tail(&p.stderr(), 20)
    );
    p
}

/// `CLIENTS` connections over 4 threads, each running `QUERIES` queries
/// whose results are checked. Returns (queries that succeeded, clients that
/// saw an error).
fn traffic(p: &Proxy) -> (usize, usize) {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let opts = p
                .app_opts()
                .read_timeout(Some(Duration::from_secs(20)))
                .write_timeout(Some(Duration::from_secs(20)));
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0, 0);
                for c in 0..CLIENTS / 4 {
                    let run = || -> mysql::Result<usize> {
                        let mut conn = mysql::Conn::new(opts.clone())?;
                        let mut done = 0;
                        for q in 0..QUERIES {
                            if q % 2 == 0 {
                                let n = (t * 1000 + c * 10 + q) as u64;
                                let got: Option<u64> = conn.query_first(format!("SELECT {n}"))?;
                                assert_eq!(got, Some(n), "wrong result");
                            } else {
                                let got: Option<String> =
                                    conn.query_first(format!("SELECT REPEAT('x', {BIG})"))?;
                                assert_eq!(got.map(|s| s.len()), Some(BIG), "wrong result");
                            }
                            done += 1;
                        }
                        Ok(done)
                    };
                    match run() {
                        Ok(n) => ok += n,
                        Err(_) => failed += 1,
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|h| h.join().expect("client thread panicked"))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

/// EBUSY on every 5th enter and a 2-entry CQ: both rare paths run all the
/// time, yet no completion is lost, so every query succeeds.
fn ebusy_and_overflow_are_invisible(mode: Mode) {
    let mut p = injected(
        mode,
        &[
            "RINGGATE_FAULT_INJECT=ebusy=5",
            "RINGGATE_DEBUG_CQ_ENTRIES=2",
        ],
    );
    let base = baseline(&mut p);
    let (ok, failed) = traffic(&p);
    assert_eq!((ok, failed), (CLIENTS * QUERIES, 0));
    assert_no_leaks(&mut p, &base, CLIENTS as u64);
    let m = p.metrics();
    eprintln!(
        "ebusy reaps {}, overflow flushes {}",
        m.get("ringgate_ring_ebusy_reaps_total"),
        m.get("ringgate_ring_cq_overflow_flushes_total")
    );
    assert!(
        m.get("ringgate_ring_ebusy_reaps_total") > 0.0,
        "{}",
        m.dump()
    );
    assert!(
        m.get("ringgate_ring_cq_overflow_flushes_total") > 0.0,
        "{}",
        m.dump()
    );
    assert_eq!(m.get("ringgate_ring_synthetic_failures_total"), 0.0);
}
both_modes!(ebusy_and_cq_overflow, ebusy_and_overflow_are_invisible);

/// Every 97th push fails (plus EBUSY and overflow): sessions whose
/// operation failed end with an error, the others work, and afterwards
/// every buffer slot, fd and backend connection is back and the proxy
/// still serves.
fn failed_pushes_roll_back(mode: Mode) {
    let mut p = injected(
        mode,
        &[
            "RINGGATE_FAULT_INJECT=push_fail=97,ebusy=7",
            "RINGGATE_DEBUG_CQ_ENTRIES=2",
        ],
    );
    let base = baseline(&mut p);
    let (ok, failed) = traffic(&p);
    assert!(failed > 0, "no session failed: is push_fail injected?");
    eprintln!("{ok} queries succeeded, {failed} clients failed");
    assert!(ok > 0, "no query succeeded ({failed} clients failed)");
    assert_no_leaks(&mut p, &base, CLIENTS as u64);
    p.assert_running();
    let m = p.metrics();
    assert!(
        m.get("ringgate_ring_synthetic_failures_total") > 0.0,
        "{}",
        m.dump()
    );
}
both_modes!(push_failures, failed_pushes_roll_back);

/// Fixed mode's hot reads (src/proxy/worker/hot_read.rs): a busy connection keeps its read
/// pending with its slot, and one idle for 10 ms (HOT_IDLE) has the read cancelled so that it gives
/// the slot back. Here every second cancel never reaches the kernel (`cancel_fail=2`: a
/// synthetic -EIO, the read it named still pending): the read must stay valid and hot, the
/// next tick try again, and no client notice. Sessions idle past several ticks between
/// queries, in session and transaction pooling; every answer is right, the idle connections
/// end up holding no slot, and every slot, fd and backend connection comes back.
fn failed_idle_read_cancels(transaction: bool) {
    const IDLERS: usize = 6;
    const ROUNDS: usize = 4;
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.wrapper = vec!["env".into(), "RINGGATE_FAULT_INJECT=cancel_fail=2".into()];
    if transaction {
        o.extra_args = vec!["--pooling".into(), "transaction".into()];
    }
    let mut p = Proxy::start_with(o);
    assert!(p.stderr().contains("fault injection is active"));
    let base = baseline(&mut p);
    let cancels = |p: &Proxy| p.metrics().get("ringgate_read_buffer_idle_cancels_total");
    let cancels0 = cancels(&p);
    let opts = p.app_opts().read_timeout(Some(Duration::from_secs(20)));
    let threads: Vec<_> = (0..IDLERS)
        .map(|c| {
            let opts = opts.clone();
            std::thread::spawn(move || {
                let mut conn = mysql::Conn::new(opts).expect("connect");
                for r in 0..ROUNDS {
                    let n = (c * 100 + r) as u64;
                    let got: Option<u64> = conn.query_first(format!("SELECT {n}")).expect("query");
                    assert_eq!(got, Some(n), "wrong result");
                    // Longer than two ticks (100 ms): the reads go idle, and a failed cancel
                    // is sent again at the next tick.
                    std::thread::sleep(Duration::from_millis(450));
                }
                conn
            })
        })
        .collect();
    let conns: Vec<_> = threads
        .into_iter()
        .map(|h| h.join().expect("client thread"))
        .collect();
    let held = |p: &Proxy| {
        let m = p.metrics();
        m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#)
            + m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#)
    };
    testkit::proxy::wait_until(
        &p,
        Duration::from_secs(10),
        "idle sessions hold no slot",
        || held(&p) == 0.0,
    );
    let sent = cancels(&p) - cancels0;
    eprintln!("{sent} idle-read cancels sent (every second one failed)");
    // Each session's client read goes idle once per round (and in session pooling its
    // backend read too); the failed half is sent again.
    assert!(
        sent >= (IDLERS * ROUNDS) as f64,
        "{sent} idle-read cancels for {IDLERS} sessions x {ROUNDS} idle periods"
    );
    assert!(
        p.metrics().get("ringgate_ring_synthetic_failures_total") > 0.0,
        "no cancel failed: is cancel_fail injected?"
    );
    drop(conns);
    assert_no_leaks(&mut p, &base, IDLERS as u64);
}

#[test]
fn failed_idle_read_cancels_are_invisible_session_pooling() {
    failed_idle_read_cancels(false);
}

#[test]
fn failed_idle_read_cancels_are_invisible_transaction_pooling() {
    failed_idle_read_cancels(true);
}

/// Transaction pooling links each command's write to the read of its answer
/// (src/proxy/worker/link_write.rs), the write with RWF_NOWAIT. Here every second linked
/// write finds no room (`link_eagain=2`: -EAGAIN, the linked read dropped without a CQE, as
/// the kernel does): the read must be issued again on its own and the command written
/// unlinked, so every query is answered right, and every slot, fd and backend comes back.
fn linked_writes_without_room(mode: Mode) {
    let mut o = ProxyOpts::new(mode);
    o.workers = 1;
    o.extra_args = vec!["--pooling".into(), "transaction".into()];
    o.wrapper = vec!["env".into(), "RINGGATE_FAULT_INJECT=link_eagain=2".into()];
    let mut p = Proxy::start_with(o);
    assert!(p.stderr().contains("fault injection is active"));
    let base = baseline(&mut p);
    let (ok, failed) = traffic(&p);
    assert_eq!((ok, failed), (CLIENTS * QUERIES, 0));
    assert_no_leaks(&mut p, &base, CLIENTS as u64);
    let m = p.metrics();
    // One synthetic -EAGAIN per second linked write: one per second query at least.
    let eagain = m.get("ringgate_ring_synthetic_failures_total");
    eprintln!("{eagain} linked writes found no room");
    assert!(
        eagain >= (CLIENTS * QUERIES / 2 - 1) as f64,
        "{eagain} linked writes failed: are commands' writes linked?\n{}",
        m.dump()
    );
}

#[test]
fn linked_writes_without_room_are_finished_unlinked_fixed() {
    linked_writes_without_room(Mode::Fixed);
}

#[test]
fn linked_writes_without_room_are_finished_unlinked_heap() {
    linked_writes_without_room(Mode::Heap);
}

//! What each relayed query costs in system calls, through ringgate with a real client in every
//! buffer mode: the SQEs and `io_uring_enter` calls the ring counts (the figures the bench
//! divides by commands), the registered ring fd and its forced fallback, and `--busy-poll-us`,
//! which must serve every query exactly as without it while sleeping in the kernel less.

use mysql::prelude::Queryable;
use testkit::both_modes;
use testkit::proxy::{Mode, Proxy, ProxyOpts};

const QUERIES: usize = 400;

fn one_worker(mode: Mode, extra: &[&str]) -> Proxy {
    let mut o = ProxyOpts::with_args(mode, extra);
    o.workers = 1;
    Proxy::start_with(o)
}

struct Costs {
    sqes: f64,
    enters: f64,
    waits: f64,
    commands: f64,
    hits: f64,
    sleeps: f64,
}

fn costs(proxy: &Proxy) -> Costs {
    let m = proxy.metrics();
    Costs {
        sqes: m.get("ringgate_ring_sqes_total"),
        enters: m.get("ringgate_ring_enters_total"),
        waits: m.get("ringgate_ring_enter_waits_total"),
        commands: m.get("ringgate_commands_total"),
        hits: m.get(r#"ringgate_ring_busy_polls_total{outcome="hit"}"#),
        sleeps: m.get(r#"ringgate_ring_busy_polls_total{outcome="sleep"}"#),
    }
}

/// `QUERIES` point queries on one connection, each answer checked, and a 1 MiB row.
fn run_queries(proxy: &Proxy) {
    let mut c = proxy.connect_app();
    for i in 0..QUERIES {
        let v: Option<u64> = c.query_first(format!("SELECT {i} + 1")).unwrap();
        assert_eq!(v, Some(i as u64 + 1));
    }
    let row: Option<Vec<u8>> = c.query_first("SELECT REPEAT('z', 1048576)").unwrap();
    assert_eq!(row.map(|r| r.len()), Some(1 << 20));
}

/// Per relayed query the ring takes a handful of SQEs and enters (4 each in fixed and heap
/// mode, 2 SQEs in ring mode: docs/benchmarks.md), and the metrics count every one: a ring that
/// stopped counting (or a relay that started submitting per byte) fails here.
fn counts_per_query(mode: Mode) {
    // Session pooling's figures (docs/benchmarks.md): transaction pooling adds a lease and a
    // release per query.
    let mut proxy = one_worker(mode, &["--pooling", "session"]);
    let base = proxy.connections_total();
    let before = costs(&proxy);
    run_queries(&proxy);
    let after = costs(&proxy);
    let commands = after.commands - before.commands;
    assert!(commands >= QUERIES as f64, "{commands} commands");
    let sqes = (after.sqes - before.sqes) / commands;
    let enters = (after.enters - before.enters) / commands;
    let waits = (after.waits - before.waits) / commands;
    eprintln!("{mode:?}: {sqes:.2} SQEs, {enters:.2} enters, {waits:.2} waits per query");
    let min_sqes = if mode == Mode::Ring { 1.5 } else { 3.5 };
    assert!(
        (min_sqes..8.0).contains(&sqes),
        "{sqes} SQEs per query in {mode:?}"
    );
    if mode == Mode::Fixed {
        // A busy session keeps its client read and its backend read pending with their slots
        // between commands (src/proxy/worker/hot_read.rs): no poll SQE per query (a one-shot
        // poll per client read made it 5.4), and no readiness wake-up before each read on
        // either leg (6.0 enters per query when both legs waited on a poll): heap's figures.
        assert!(
            sqes < 4.8,
            "{sqes} SQEs per query in fixed mode: is a poll armed per query?"
        );
        assert!(
            enters < 4.8,
            "{enters} enters per query in fixed mode: does a busy connection wait on a poll?"
        );
    }
    assert!((1.0..8.0).contains(&enters), "{enters} enters per query");
    assert!(waits <= enters && waits >= 0.5, "{waits} waits per query");
    // Off by default: no poll happened.
    assert_eq!((after.hits, after.sleeps), (0.0, 0.0));
    proxy.opts.mode = mode;
    proxy.assert_settled(base, 1);
}
both_modes!(sqes_and_enters_are_counted_per_query, counts_per_query);

/// Transaction pooling (the default) at c=1 costs the SQEs session pooling does: 4 per query in
/// fixed and heap mode (client read, command write, answer read, answer write) in 3 enters (the
/// command's write is linked to the answer's read), 2 in ring mode
/// (two sends: the backend's multishot receive stays armed across the park, the pool's while the
/// connection is idle, and the next lease takes it over). Fixed and heap mode took 6.00 while
/// each park armed the backend's idle read and cancelled it in the same batch, ring mode 4.00
/// while each park cancelled the receive and each lease armed a new one (docs/benchmarks.md,
/// 2026-12-04). Counts, not times: the counters'
/// deltas over `QUERIES` queries on one connection; the slack covers the worker's 100 ms tick
/// (a TIMEOUT SQE each) and a read cooled after 10 ms idle on a loaded box (a cancel and a poll).
fn transaction_pooling_counts_per_query(mode: Mode) {
    let mut proxy = one_worker(mode, &["--pooling", "transaction"]);
    let base = proxy.connections_total();
    let mut c = proxy.connect_app();
    // The login's park and the first lease are behind us.
    let _: Option<u64> = c.query_first("SELECT 0").unwrap();
    let before = costs(&proxy);
    for i in 0..QUERIES {
        let v: Option<u64> = c.query_first(format!("SELECT {i} + 1")).unwrap();
        assert_eq!(v, Some(i as u64 + 1));
    }
    let after = costs(&proxy);
    drop(c);
    let commands = after.commands - before.commands;
    assert!(commands >= QUERIES as f64, "{commands} commands");
    let sqes = (after.sqes - before.sqes) / commands;
    let enters = (after.enters - before.enters) / commands;
    eprintln!("{mode:?}, transaction pooling: {sqes:.2} SQEs, {enters:.2} enters per query");
    let want = if mode == Mode::Ring {
        1.5..=2.5
    } else {
        3.5..=4.5
    };
    assert!(
        want.contains(&sqes),
        "{sqes} SQEs per query in {mode:?} with transaction pooling (session pooling: 4, ring 2; \
         does a park arm a backend read, or cancel a receive, only to arm it again?)"
    );
    if mode != Mode::Ring {
        // The command's write goes out linked to the read of its answer and posts no CQE
        // (src/proxy/worker/link_write.rs): one enter submits both and sleeps until the answer,
        // instead of one that returns with the write's CQE and one more to sleep (4.00 before).
        assert!(
            enters <= 3.5,
            "{enters} enters per query in {mode:?} with transaction pooling: is the command's \
             write linked to the answer's read?"
        );
    }
    proxy.opts.mode = mode;
    proxy.assert_settled(base, 1);
}
both_modes!(
    transaction_pooling_sqes_per_query,
    transaction_pooling_counts_per_query
);

/// With `--busy-poll-us`, every answer is still right and complete (a poll that skipped
/// deferred completion work would stall or reorder), the pool settles, and the polls find
/// completions: each hit is a sleep and wake-up saved.
fn busy_poll_serves_every_query(mode: Mode) {
    let mut proxy = one_worker(mode, &["--busy-poll-us", "500"]);
    let base = proxy.connections_total();
    let before = costs(&proxy);
    run_queries(&proxy);
    // Several clients at once: the poll must not starve a second connection.
    let handles: Vec<_> = (0..4)
        .map(|n| {
            let opts = proxy.app_opts();
            std::thread::spawn(move || {
                let mut c = mysql::Conn::new(opts).unwrap();
                for i in 0..100u64 {
                    let v: Option<u64> = c.query_first(format!("SELECT {i} * {n}")).unwrap();
                    assert_eq!(v, Some(i * n));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let after = costs(&proxy);
    assert!(
        after.hits - before.hits > 0.0,
        "no busy-poll found a completion ({} sleeps)",
        after.sleeps - before.sleeps
    );
    proxy.opts.mode = mode;
    proxy.assert_settled(base, 5);
}
both_modes!(busy_poll_serves_every_query, busy_poll_serves_every_query);

/// The start-up line says the ring fd is registered; forced to fail, one warning says enters
/// pass the plain fd, and the proxy works the same.
#[test]
fn the_ring_fd_is_registered_and_its_forced_failure_falls_back_with_one_line() {
    let proxy = one_worker(Mode::Fixed, &[]);
    let stderr = proxy.stderr();
    assert!(
        stderr.contains("registered_ring=on") && stderr.contains("taskrun_flag=on"),
        "{stderr}"
    );
    assert!(!stderr.contains("ring fd not registered"), "{stderr}");
    drop(proxy);

    let mut o = ProxyOpts::new(Mode::Fixed);
    o.wrapper = vec!["env".into(), "RINGGATE_DEBUG_PROBE_FAIL=ring_fd".into()];
    let mut proxy = Proxy::start_with(o);
    let stderr = proxy.stderr();
    let lines = stderr
        .lines()
        .filter(|l| l.contains("io_uring ring fd not registered"))
        .count();
    assert_eq!(lines, 1, "want one line for two workers:\n{stderr}");
    assert!(stderr.contains("registered_ring=off"), "{stderr}");
    let base = proxy.connections_total();
    run_queries(&proxy);
    proxy.assert_settled(base, 1);
}

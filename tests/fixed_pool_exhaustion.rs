//! The fixed-buffer pool running dry: connections beyond it get heap buffers and work, large
//! results and commands included, and once they leave every slot is free again.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::proxy::{quick_opts, wait_until, Mode, Proxy, ProxyOpts};
use testkit::tail;

const IDLE: &str = r#"ringgate_backend_connections{state="idle"}"#;

const BUSY: &str = r#"ringgate_backend_connections{state="busy"}"#;

// ---------------------------------------------------------------------------------------------
// Fixed-buffer pool exhausted: heap fallback, and every slot comes back
// ---------------------------------------------------------------------------------------------

/// One worker with 4 fixed slots and no warm pool: 8 sessions held at once need 16 read
/// buffers (a client's and its backend's), so 12 connections get heap buffers. Every session
/// still works, large results and large commands included (they stream through whichever
/// buffer the connection got). Once the sessions leave and the idle backend connections are
/// closed (--backend-idle-timeout 1s, pool size 0), all 4 slots are free again and nothing is
/// in use: the accounting holds even after fallbacks, which the generic leak check skips.
#[test]
fn fixed_pool_exhaustion_falls_back_to_heap_and_every_slot_comes_back() {
    const SESSIONS: usize = 8;
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.workers = 1;
    o.read_buffer_count = 4;
    o.backend_pool_size = 0;
    // Idle clients would give their slots back between commands (the default): hold them,
    // so that 8 held sessions really need 16 buffers at once.
    o.extra_args = vec![
        "--backend-idle-timeout".into(),
        "1s".into(),
        "--hold-idle-slots".into(),
    ];
    let mut proxy = Proxy::start_with(o);
    let m = proxy.metrics();
    let total = m.get(r#"ringgate_read_buffers_total{mode="fixed"}"#);
    assert_eq!(total, 4.0, "4 registered slots");
    let fallbacks0 = m.get("ringgate_read_buffer_heap_fallbacks_total");
    let conns0 = m.get("ringgate_client_connections_total");

    // All sessions connect and query, then wait for each other while the metrics are read,
    // then query again (on heap buffers or slots alike) and leave.
    let held = Arc::new(Barrier::new(SESSIONS + 1));
    let checked = Arc::new(Barrier::new(SESSIONS + 1));
    let opts = quick_opts(&proxy);
    let handles: Vec<_> = (0..SESSIONS)
        .map(|n| {
            let (held, checked, opts) = (held.clone(), checked.clone(), opts.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let run = |c: &mut Conn| -> Result<(), String> {
                    let big: Option<u64> = c
                        .query_first("SELECT LENGTH(REPEAT('x', 300000))")
                        .map_err(|e| e.to_string())?;
                    let row: Option<String> = c
                        .query_first("SELECT REPEAT('y', 300000)")
                        .map_err(|e| e.to_string())?;
                    let sent = format!("SELECT LENGTH('{}')", "z".repeat(200_000));
                    let echoed: Option<u64> = c.query_first(sent).map_err(|e| e.to_string())?;
                    let rows: Vec<u64> = c
                        .query("SELECT seq FROM seq_1_to_2000")
                        .map_err(|e| e.to_string())?;
                    let ok = big == Some(300_000)
                        && row.is_some_and(|r| r.len() == 300_000)
                        && echoed == Some(200_000)
                        && rows.len() == 2000;
                    ok.then_some(())
                        .ok_or_else(|| format!("session {n}: wrong results"))
                };
                let conn = Conn::new(opts.db_name(Some(testkit::env::TEST_DB)));
                let mut conn = match conn {
                    Ok(c) => c,
                    Err(e) => {
                        held.wait();
                        checked.wait();
                        return Err(format!("session {n}: connect: {e}"));
                    }
                };
                let first = run(&mut conn);
                held.wait();
                checked.wait();
                first?;
                run(&mut conn)
            })
        })
        .collect();
    held.wait();
    let m = proxy.metrics();
    checked.wait();
    let errors: Vec<String> = handles
        .into_iter()
        .filter_map(|h| h.join().expect("session thread").err())
        .collect();
    assert!(
        errors.is_empty(),
        "sessions on heap-fallback buffers failed: {errors:?}\n--- stderr ---\n{}",
        tail(&proxy.stderr(), 30)
    );
    let in_use = m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#)
        + m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#);
    let fallbacks = m.get("ringgate_read_buffer_heap_fallbacks_total") - fallbacks0;
    eprintln!(
        "with {SESSIONS} sessions held: {in_use} buffers in use, {} slots free, {fallbacks} heap fallbacks",
        m.get("ringgate_read_buffers_free")
    );
    assert_eq!(m.get("ringgate_client_connections"), SESSIONS as f64);
    assert_eq!(
        m.get("ringgate_read_buffers_free"),
        0.0,
        "every slot is taken while {SESSIONS} sessions are held"
    );
    assert!(
        in_use >= (2 * SESSIONS) as f64,
        "a client and a backend buffer per session: {in_use} in use\n{}",
        m.dump()
    );
    assert!(
        fallbacks >= in_use - total,
        "{fallbacks} heap fallbacks, want at least {} (buffers in use beyond the 4 slots)",
        in_use - total
    );

    // At rest: no session, no backend connection, every slot back.
    wait_until(
        &proxy,
        Duration::from_secs(10),
        "sessions gone, idle backends closed, all 4 slots free",
        || {
            let m = proxy.metrics();
            m.get("ringgate_client_connections") == 0.0
                && m.get(IDLE) + m.get(BUSY) == 0.0
                && m.get("ringgate_read_buffers_free") == total
                && m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#) == 0.0
                && m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#) == 0.0
        },
    );
    proxy.assert_settled(conns0, SESSIONS as u64);
    assert!(
        !proxy.stderr().contains("leaked"),
        "{}",
        tail(&proxy.stderr(), 30)
    );
}

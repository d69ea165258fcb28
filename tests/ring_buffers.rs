//! `--read-buffers ring` beyond the shared suites (which run every scenario in ring mode too):
//! an exhausted ring (-ENOBUFS) under load loses no byte and stalls no connection, and each
//! missing kernel feature falls back with one clear log line. The probes are forced to fail
//! with the debug knob `RINGGATE_DEBUG_PROBE_FAIL` (crates/uring/src/ring/fault.rs).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::proxy::{Mode, Proxy, ProxyOpts};
use testkit::tail;

const MIB: usize = 1024 * 1024;

/// One worker, a ring of 4 buffers of 16 KiB, and 8 clients at once, each pulling several MiB
/// of results and pushing 1 MiB statements: the ring runs dry all the time (every receive
/// that finds it empty ends with -ENOBUFS). Every byte of every result and statement must
/// still arrive, in order, within the clients' 60 s read timeout (no stall), the ENOBUFS
/// metric must show it happened, and afterwards every ring buffer is back. A starved receive
/// must not spin: at most one -ENOBUFS in eight may end a receive that got no byte since it was
/// armed (re-armed at once whenever a buffer came back, 43-65% did in 9 runs of 10, 15% in the
/// tenth; now 1-6% in 60 runs). In each pooling mode: transaction pooling parks a
/// session between statements, so a command also arrives on a session that holds no backend
/// connection.
fn tiny_ring_under_load(pooling: &str) {
    const CLIENTS: usize = 8;
    let mut o = ProxyOpts::new(Mode::Ring);
    o.workers = 1;
    o.read_buffer_count = 4;
    o.extra_args = vec!["--pooling".into(), pooling.into()];
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let m = proxy.metrics();
    assert_eq!(m.get("ringgate_read_buffer_ring_buffers"), 4.0);
    let enobufs0 = m.get("ringgate_read_buffer_ring_enobufs_total");
    let empty0 = m.get("ringgate_read_buffer_ring_enobufs_empty_total");
    let rearms0 = m.get("ringgate_read_buffer_ring_rearms_total");
    let plain0 = m.get("ringgate_read_buffer_heap_fallbacks_total");
    let opts = proxy
        .app_opts()
        .db_name(Some(testkit::env::TEST_DB))
        .read_timeout(Some(Duration::from_secs(60)))
        .write_timeout(Some(Duration::from_secs(60)));
    let start = Arc::new(Barrier::new(CLIENTS));
    let started = Instant::now();
    let handles: Vec<_> = (0..CLIENTS)
        .map(|n| {
            let (opts, start) = (opts.clone(), start.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut c = Conn::new(opts).map_err(|e| format!("client {n}: connect: {e}"))?;
                start.wait();
                let ch = b'A' + n as u8;
                for round in 0..3 {
                    // Server -> client: 3 MiB of one letter per client, checked byte by byte.
                    let row: Option<Vec<u8>> = c
                        .query_first(format!("SELECT REPEAT(CHAR({ch}), {})", 3 * MIB))
                        .map_err(|e| format!("client {n} round {round}: {e}"))?;
                    let row = row.ok_or_else(|| format!("client {n}: no row"))?;
                    if row.len() != 3 * MIB || row.iter().any(|&b| b != ch) {
                        return Err(format!(
                            "client {n} round {round}: {} bytes, corrupted or short",
                            row.len()
                        ));
                    }
                    // Client -> server: a 1 MiB statement; the server counts what arrived.
                    let s = format!(
                        "SELECT LENGTH('{}'), {round}",
                        (ch as char).to_string().repeat(MIB)
                    );
                    let got: Option<(u64, u32)> =
                        c.query_first(s).map_err(|e| format!("client {n}: {e}"))?;
                    if got != Some((MIB as u64, round)) {
                        return Err(format!(
                            "client {n} round {round}: statement came back {got:?}"
                        ));
                    }
                    // Many small packets: 2000 rows.
                    let rows: Vec<u64> = c
                        .query("SELECT seq FROM seq_1_to_2000")
                        .map_err(|e| format!("client {n}: {e}"))?;
                    if rows.len() != 2000
                        || rows.iter().enumerate().any(|(i, &v)| v != i as u64 + 1)
                    {
                        return Err(format!("client {n}: 2000-row result wrong"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    let errors: Vec<String> = handles
        .into_iter()
        .filter_map(|h| h.join().expect("client thread").err())
        .collect();
    let m = proxy.metrics();
    let enobufs = m.get("ringgate_read_buffer_ring_enobufs_total") - enobufs0;
    let empty = m.get("ringgate_read_buffer_ring_enobufs_empty_total") - empty0;
    let rearms = m.get("ringgate_read_buffer_ring_rearms_total") - rearms0;
    let plain = m.get("ringgate_read_buffer_heap_fallbacks_total") - plain0;
    eprintln!(
        "{CLIENTS} clients on a 4-buffer ring: {:?}, {enobufs} ENOBUFS ({empty} of receives \
         that got nothing), {rearms} re-arms, {plain} plain reads while the ring was empty",
        started.elapsed(),
    );
    assert!(
        errors.is_empty(),
        "clients failed on a tiny ring: {errors:?}\n--- stderr ---\n{}",
        tail(&proxy.stderr(), 30)
    );
    assert!(
        enobufs > 0.0,
        "a 4-buffer ring under 8 clients never ran dry: the test did not test ENOBUFS\n{}",
        m.dump()
    );
    assert!(
        empty * 8.0 <= enobufs,
        "starved receives spin: {empty} of {enobufs} -ENOBUFS ended a receive armed for nothing"
    );
    assert_no_leaks(&mut proxy, &base, CLIENTS as u64);
}

#[test]
fn a_tiny_ring_under_load_loses_no_byte_and_never_stalls_session_pooling() {
    tiny_ring_under_load("session");
}

/// Transaction pooling cancelled the relay's backend read at every park, so the race between that
/// cancel and a receive the dry ring ends (-ENOBUFS) came up here in one run of 12 to 40 (a
/// client then waited for its 60 s read timeout: see `RingRecv::cancelling`). Since 2026-12-04
/// a park keeps the receive armed for the pool, and here the pool's exchanges (a session's
/// settings) and a receive the dry ring ends on an idle connection meet it.
#[test]
fn a_tiny_ring_under_load_loses_no_byte_and_never_stalls_transaction_pooling() {
    tiny_ring_under_load("transaction");
}

fn probe_fail(fail: &str) -> Proxy {
    let mut o = ProxyOpts::new(Mode::Ring);
    o.wrapper = vec!["env".into(), format!("RINGGATE_DEBUG_PROBE_FAIL={fail}")];
    Proxy::start_with(o)
}

/// The proxy answers, and its leak check passes in the mode it fell back to.
fn works(proxy: &mut Proxy, fell_back_to: Mode) {
    let base = proxy.connections_total();
    {
        let mut c = proxy.connect_app();
        let row: Option<Vec<u8>> = c.query_first(format!("SELECT REPEAT('r', {MIB})")).unwrap();
        assert_eq!(row.map(|r| r.len()), Some(MIB));
    }
    proxy.opts.mode = fell_back_to;
    proxy.assert_settled(base, 1);
}

/// Without provided-buffer rings (5.19) or multishot receive (6.0), ring mode falls back to
/// `fixed` with one warning naming the missing feature.
#[test]
fn no_buffer_rings_or_no_multishot_receive_falls_back_to_fixed() {
    for (fail, names) in [
        ("buf_ring", "provided-buffer rings"),
        ("recv_multishot", "multishot receive"),
    ] {
        let mut proxy = probe_fail(fail);
        let stderr = proxy.stderr();
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                l.contains("read-buffer ring unavailable, running with --read-buffers fixed")
            })
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "want one fallback line for {fail}:\n{stderr}"
        );
        assert!(
            lines[0].contains(names),
            "the line names {names}: {}",
            lines[0]
        );
        let m = proxy.metrics();
        assert!(
            m.get(r#"ringgate_read_buffers_total{mode="fixed"}"#) > 0.0,
            "{}",
            m.dump()
        );
        assert_eq!(m.get("ringgate_read_buffer_ring_buffers"), 0.0);
        works(&mut proxy, Mode::Fixed);
    }
}

/// The ring probe `fail` is forced to fail: one line containing `line` says so (it names
/// `names`), and the proxy keeps the ring, which still serves.
fn ring_kept_with_one_line(fail: &str, line: &str, names: &str) {
    let mut proxy = probe_fail(fail);
    let stderr = proxy.stderr();
    let n = stderr.lines().filter(|l| l.contains(line)).count();
    assert_eq!(n, 1, "want one line about {names}:\n{stderr}");
    let m = proxy.metrics();
    assert!(
        m.get("ringgate_read_buffer_ring_buffers") > 0.0,
        "{}",
        m.dump()
    );
    works(&mut proxy, Mode::Ring);
}

/// Without incremental consumption (6.12) the ring still works, one whole buffer per receive,
/// and one line says so.
#[test]
fn no_incremental_consumption_keeps_the_ring_with_one_log_line() {
    ring_kept_with_one_line(
        "pbuf_inc",
        "without incremental consumption",
        "IOU_PBUF_RING_INC",
    );
}

/// Without bundled receives (6.10, or a kernel that refuses their length cap) the ring still
/// works, one buffer per receive, and one line says so.
#[test]
fn no_bundles_keeps_the_ring_with_one_log_line() {
    ring_kept_with_one_line(
        "bundle",
        "without bundled receives",
        "IORING_RECVSEND_BUNDLE",
    );
}

/// A large result in ring mode goes from the backend's ring buffers straight to the client:
/// no byte of it is copied in userspace (`ringgate_read_buffer_ring_copied_bytes_total`),
/// although with incremental consumption every 16 KiB chunk of it ends its ring buffer with
/// more bytes behind it (the case a client command is joined for). The rows are checked byte
/// by byte, with a pattern whose period (37) does not divide the buffer size, so a chunk
/// forwarded twice, out of order or short would show (also where chunks are joined into one
/// send); the SQEs per MiB show that they were; afterwards every buffer is back.
#[test]
fn large_results_are_sent_from_the_ring_without_a_copy() {
    const PATTERN: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789!";
    let mut proxy = Proxy::start_with(ProxyOpts::new(Mode::Ring));
    let base = baseline(&mut proxy);
    let copied0 = proxy
        .metrics()
        .get("ringgate_read_buffer_ring_copied_bytes_total");
    let sqes0 = proxy.metrics().get("ringgate_ring_sqes_total");
    let mut relayed = 0;
    {
        let mut c = proxy.connect_app();
        for (reps, round) in [(1, 0), (113_000, 1), (4 * MIB / PATTERN.len(), 2)] {
            let row: Option<Vec<u8>> = c
                .query_first(format!(
                    "SELECT REPEAT('{}', {reps})",
                    std::str::from_utf8(PATTERN).unwrap()
                ))
                .unwrap();
            let row = row.expect("a row");
            assert_eq!(row.len(), reps * PATTERN.len(), "round {round}: length");
            if let Some(i) = (0..row.len()).find(|&i| row[i] != PATTERN[i % PATTERN.len()]) {
                panic!("round {round}: byte {i} of {} is wrong", row.len());
            }
            relayed += row.len();
        }
    }
    let copied = proxy
        .metrics()
        .get("ringgate_read_buffer_ring_copied_bytes_total")
        - copied0;
    eprintln!("{relayed} result bytes relayed, {copied} bytes copied out of the ring");
    assert!(
        copied < 4096.0,
        "{copied} of {relayed} result bytes were copied in userspace on the relay path"
    );
    // Sent in large pieces: the chunks that lie back to back in the ring (a bundled
    // receive's buffers) go out in one SEND each, not one per 16 KiB ring buffer
    // (68 SQEs per MiB before bundles; 8-16 with them).
    let sqes = proxy.metrics().get("ringgate_ring_sqes_total") - sqes0;
    let per_mib = sqes / (relayed as f64 / MIB as f64);
    eprintln!("{sqes} SQEs, {per_mib:.1} per MiB relayed");
    assert!(
        per_mib < 40.0,
        "{per_mib:.1} SQEs per MiB: the ring's chunks were not sent in large pieces"
    );
    assert_no_leaks(&mut proxy, &base, 1);
}

/// Transaction pooling keeps a backend's multishot receive armed across the park (2 SQEs per
/// query, not 4: tests/syscalls.rs): idle in the pool, the connection is still named by that
/// receive, which would take the answer of anything else that reads it. So the pool's own
/// exchange on it (the settings of the next session set or set back) and a lease to a session
/// that reads its backend without the ring (a compressed client) must cancel the receive first
/// and go on at its last CQE. One backend connection serves every client here, so each lease
/// below takes the connection the previous park left: every answer must be right and in time,
/// the connection never lost (no discard, no new connect), and every ring buffer back.
#[test]
fn a_receive_kept_across_the_park_ends_before_the_pool_or_a_compressed_client_reads() {
    let mut o = ProxyOpts::new(Mode::Ring);
    o.workers = 1;
    o.backend_pool_size = 1;
    o.backend_max_connections = 1;
    o.extra_args = vec!["--pooling".into(), "transaction".into()];
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let default_tz: String = testkit::mysql_client::direct_conn()
        .query_first("SELECT @@global.time_zone")
        .unwrap()
        .unwrap();
    let tz_a = if default_tz == "+01:00" {
        "+02:00"
    } else {
        "+01:00"
    };
    let m0 = proxy.metrics();
    let counter = |m: &testkit::prometheus::Metrics, name: &str| m.get(name);
    let opts = proxy
        .app_opts()
        .read_timeout(Some(Duration::from_secs(10)))
        .write_timeout(Some(Duration::from_secs(10)));
    let stderr = |p: &Proxy| tail(&p.stderr(), 60);
    let tz = |c: &mut Conn| -> String {
        match c.query_first("SELECT @@time_zone") {
            Ok(Some(v)) => v,
            other => panic!("{other:?}\n{}", stderr(&proxy)),
        }
    };
    let mut a = Conn::new(opts.clone()).unwrap();
    a.query_drop(format!("SET SESSION time_zone = '{tz_a}'"))
        .unwrap();
    assert_eq!(tz(&mut a), tz_a);
    // A's settings on the connection, its receive kept: B's lease sets them back first.
    let mut b = Conn::new(opts.clone()).unwrap();
    assert_eq!(tz(&mut b), default_tz);
    // And A's lease sets them again.
    assert_eq!(tz(&mut a), tz_a);
    // Back to bare for B, whose park keeps the receive on a connection C can take as it is.
    let v: Option<u32> = b.query_first("SELECT 40 + 2").unwrap();
    assert_eq!(v, Some(42));
    let mut c = Conn::new(opts.clone().compress(Some(mysql::Compression::default()))).unwrap();
    assert_eq!(tz(&mut c), default_tz);
    let row: Option<Vec<u8>> = match c.query_first("SELECT REPEAT('c', 100000)") {
        Ok(r) => r,
        Err(e) => panic!("{e}\n{}", tail(&proxy.stderr(), 40)),
    };
    assert_eq!(row.map(|r| r.len()), Some(100_000));
    // A compressed client keeps its connection (pinned): its end gives it back.
    drop(c);
    // And the plain clients once more.
    assert_eq!(tz(&mut b), default_tz);
    assert_eq!(tz(&mut a), tz_a);
    let m = proxy.metrics();
    let delta = |name: &str| counter(&m, name) - counter(&m0, name);
    let cancels = delta("ringgate_read_buffer_ring_idle_recv_cancels_total");
    eprintln!("{cancels} kept receives cancelled before the pool's exchange or a lease");
    assert!(
        cancels >= 4.0,
        "{cancels} kept receives cancelled: the three setting changes and the compressed \
         client's lease each had to cancel one\n{}",
        m.dump()
    );
    assert_eq!(
        delta("ringgate_backend_discarded_total"),
        0.0,
        "{}",
        m.dump()
    );
    assert_eq!(
        delta("ringgate_backend_connects_total"),
        0.0,
        "{}",
        m.dump()
    );
    drop((a, b));
    assert_no_leaks(&mut proxy, &base, 3);
}

//! Commands a client writes without waiting for the answer to the one before: the first command
//! in the same write() as the login (or as the answer to an auth switch), and a large command
//! pipelined behind a large result, which must not deadlock (on fixed, heap or a tiny ring).
//! Every socket read has a timeout and every scenario a deadline, so a test that reproduces a
//! hang fails in bounded time instead of hanging.

use std::io::Write;
use std::net::Shutdown;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use testkit::env::{backend_env, APP_PASSWORD, APP_USER, HASHED_PASSWORD, HASHED_USER};
use testkit::mysql_client::direct_conn;
use testkit::proxy::{Mode, Proxy, ProxyOpts};
use testkit::rawclient::{
    com_query, connect_to, frame, hello_with, login_with_caps, query_reply, read_greeting,
    read_packet, read_reply, single_value, switch_salt, write_packet, Reply, NATIVE, RAW_CAPS,
};
use wire::auth::native_token;
use wire::constants::*;

/// How long any single read may block before the test calls the proxy hung.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

fn proxy_addr(p: &Proxy) -> String {
    format!("127.0.0.1:{}", p.port)
}

/// Both pipelined logins against `addr`: the first command in the same write() as the
/// HandshakeResponse41, then in the same write() as the AuthSwitch reply. `who` names the peer
/// in failure messages.
fn pipelined_logins(addr: &str, user: &str, password: &str, who: &str) {
    // HandshakeResponse41 + COM_QUERY in one segment.
    let mut s = connect_to(addr, READ_TIMEOUT);
    let scramble = read_greeting(&mut s);
    let token = native_token(password.as_bytes(), &scramble);
    let mut burst = frame(1, &hello_with(RAW_CAPS, user, NATIVE, token));
    burst.extend(frame(0, &com_query("SELECT 4207")));
    s.write_all(&burst).unwrap();
    let (seq, ok) = read_packet(&mut s).expect("the login reply");
    assert_eq!(
        (seq, ok.first()),
        (2, Some(&0x00)),
        "{who}: login OK: {ok:?}"
    );
    let reply = read_reply(&mut s).unwrap_or_else(|e| {
        panic!(
            "{who}: the COM_QUERY sent in the same write() as the HandshakeResponse got no \
             answer within {READ_TIMEOUT:?}: {e}"
        )
    });
    assert_eq!(single_value(reply), "4207", "{who}");
    // The session goes on working.
    assert_eq!(single_value(query_reply(&mut s, "SELECT 2")), "2", "{who}");
    drop(s);

    // AuthSwitch reply + COM_QUERY in one segment: a MySQL 8 client proposes
    // caching_sha2_password and is switched to mysql_native_password.
    let mut s = connect_to(addr, READ_TIMEOUT);
    read_greeting(&mut s);
    let sha2_token = vec![0x5A; 32];
    let caps = RAW_CAPS | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
    write_packet(
        &mut s,
        1,
        &hello_with(caps, user, "caching_sha2_password", sha2_token),
    )
    .unwrap();
    let (seq, switch) = read_packet(&mut s).expect("the AuthSwitchRequest");
    let salt = switch_salt(&switch);
    let mut burst = frame(
        seq.wrapping_add(1),
        &native_token(password.as_bytes(), &salt),
    );
    burst.extend(frame(0, &com_query("SELECT 4208")));
    s.write_all(&burst).unwrap();
    let (_, ok) = read_packet(&mut s).expect("the reply to the AuthSwitch response");
    assert_eq!(
        ok.first(),
        Some(&0x00),
        "{who}: login OK after the switch: {ok:?}"
    );
    let reply = read_reply(&mut s).unwrap_or_else(|e| {
        panic!(
            "{who}: the COM_QUERY sent in the same write() as the AuthSwitch reply got no \
             answer within {READ_TIMEOUT:?}: {e}"
        )
    });
    assert_eq!(single_value(reply), "4208", "{who}");
}

/// A client that writes its first command in the same write() as its HandshakeResponse41,
/// or as its AuthSwitch reply, must get the login OK and then the command's answer, as MariaDB
/// itself answers (checked first). The proxy dropped whatever followed the login packet in its
/// read buffer, so the client waited forever.
#[test]
fn a_command_pipelined_after_the_login_is_answered() {
    let b = backend_env();
    pipelined_logins(&b.addr(), &b.user, &b.password, "MariaDB directly");
    let proxy = Proxy::start(Mode::Fixed);
    let who = format!("ringgate on port {}", proxy.port);
    // A native-hash user: a caching_sha2 proposal is switched to mysql_native_password
    // (a `Password` user would get caching_sha2's fast auth instead).
    pipelined_logins(&proxy_addr(&proxy), HASHED_USER, HASHED_PASSWORD, &who);
}

// ---------------------------------------------------------------------------------------------
// A large command pipelined behind a large result
// ---------------------------------------------------------------------------------------------

/// Size of the pipelined result and of the pipelined INSERT: far more than a 16 KiB slot and
/// than what the loopback socket buffers absorb while nobody reads.
const PIPELINE_BYTES: usize = 4 << 20;

/// Logs in at `addr`, writes a PIPELINE_BYTES result query and a PIPELINE_BYTES INSERT of row
/// `id` into `table` in one burst (from a writer thread, since the write may block), and reads
/// both answers. Bounded: on a missing answer the socket is shut down so that the writer
/// returns. Ok(how long the answers took) or Err(what went wrong).
fn pipelined_burst(
    addr: &str,
    user: &str,
    password: &str,
    table: &str,
    id: u32,
) -> Result<Duration, String> {
    pipelined_burst_of(addr, user, password, table, id, PIPELINE_BYTES)
}

/// [`pipelined_burst`] with results and INSERTs of `bytes` (below 16 MiB: one packet each).
fn pipelined_burst_of(
    addr: &str,
    user: &str,
    password: &str,
    table: &str,
    id: u32,
    bytes: usize,
) -> Result<Duration, String> {
    let mut s = login_with_caps(addr, user, password, RAW_CAPS);
    // Bounds the whole exchange: a correct peer needs well under a second.
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut burst = frame(0, &com_query(&format!("SELECT REPEAT('r', {bytes})")));
    let insert = format!(
        "INSERT INTO {}.{table} VALUES ({id}, '{}')",
        testkit::env::TEST_DB,
        "i".repeat(bytes)
    );
    burst.extend(frame(0, &com_query(&insert)));
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let writer = std::thread::spawn(move || {
        let r = w.write_all(&burst);
        let _ = done_tx.send(r.map_err(|e| e.to_string()));
    });

    let started = Instant::now();
    let outcome = (|| -> Result<(), String> {
        let select = read_reply(&mut s).map_err(|e| format!("SELECT result: {e}"))?;
        match select {
            Reply::Rows(rows) if rows.len() == 1 => {
                let v = rows[0][0].as_deref().unwrap_or_default();
                if v.len() != bytes || v.iter().any(|&b| b != b'r') {
                    return Err(format!("SELECT returned {} wrong bytes", v.len()));
                }
            }
            other => return Err(format!("SELECT: unexpected reply {other:?}")),
        }
        match read_reply(&mut s).map_err(|e| format!("INSERT reply: {e}"))? {
            Reply::Ok(1) => Ok(()),
            other => Err(format!("INSERT: want OK (1 row), got {other:?}")),
        }
    })();
    let took = started.elapsed();
    if outcome.is_err() {
        let _ = s.shutdown(Shutdown::Both);
    }
    let wrote = done_rx.recv_timeout(Duration::from_secs(10));
    let _ = writer.join();
    outcome.map_err(|e| format!("{e} after {took:?} (the client's write: {wrote:?})"))?;
    match wrote {
        Ok(Ok(())) => Ok(took),
        other => Err(format!("the client's write: {other:?}")),
    }
}

/// A client pipelines a query with a large result and, behind it, a large INSERT, then reads.
/// MariaDB itself answers both (checked first). Through the proxy the server blocked writing
/// the result while the proxy blocked writing the INSERT to it (it kept reading the client
/// while a client packet was incomplete, and never read the server meanwhile): a deadlock.
/// Both answers must arrive, and the INSERT must be applied.
#[test]
fn a_large_command_pipelined_behind_a_large_result_does_not_deadlock() {
    let table = format!("pipelined_{}", std::process::id());
    let mut direct = direct_conn();
    direct
        .query_drop(format!(
            "CREATE TABLE {table} (id INT PRIMARY KEY, v LONGTEXT) ENGINE=InnoDB"
        ))
        .unwrap();
    let b = backend_env();
    let expected = pipelined_burst(&b.addr(), &b.user, &b.password, &table, 1);

    let proxy = Proxy::start(Mode::Fixed);
    let got = pipelined_burst(&proxy_addr(&proxy), APP_USER, APP_PASSWORD, &table, 2);
    let stored: Vec<(u32, u64)> = direct
        .query(format!("SELECT id, LENGTH(v) FROM {table} ORDER BY id"))
        .unwrap();
    let _ = direct.query_drop(format!("DROP TABLE {table}"));
    let direct_took = expected.unwrap_or_else(|e| panic!("MariaDB directly: {e}"));
    let took = got.unwrap_or_else(|e| {
        panic!(
            "through ringgate, a pipelined {} MiB INSERT behind a {} MiB result: {e}; the proxy \
             deadlocked\n--- metrics ---\n{}",
            PIPELINE_BYTES >> 20,
            PIPELINE_BYTES >> 20,
            proxy.metrics().dump()
        )
    });
    let n = PIPELINE_BYTES as u64;
    assert_eq!(
        stored,
        [(1, n), (2, n)],
        "both pipelined INSERTs are stored"
    );
    eprintln!("both pipelined responses read in {took:?} (directly: {direct_took:?})");
}

const RING_BYTES: usize = 12 << 20;

/// The same with `--read-buffers ring` and a ring of 4 buffers: the result's bytes fill
/// every ring buffer while the client, still writing its INSERT, reads nothing, so the
/// client's receive finds the ring empty. Re-arming the receive alone would spin on ENOBUFS
/// forever (the buffers go back only when the client reads, and it reads only once its write
/// is done); the relay's read must be served from the connection's own buffer meanwhile.
#[test]
fn a_large_command_pipelined_on_a_tiny_ring_does_not_deadlock() {
    let table = format!("pipelined_ring_{}", std::process::id());
    let mut direct = direct_conn();
    direct
        .query_drop(format!(
            "CREATE TABLE {table} (id INT PRIMARY KEY, v LONGTEXT) ENGINE=InnoDB"
        ))
        .unwrap();
    let mut o = ProxyOpts::new(Mode::Ring);
    o.workers = 1;
    o.read_buffer_count = 4;
    let proxy = Proxy::start_with(o);
    // 12 MiB each way: more than the loopback socket buffers hold (a 4 MiB INSERT fits in
    // them, and the client's write would finish without the proxy reading at all).
    let got = pipelined_burst_of(
        &proxy_addr(&proxy),
        APP_USER,
        APP_PASSWORD,
        &table,
        1,
        RING_BYTES,
    );
    let stored: Vec<(u32, u64)> = direct
        .query(format!("SELECT id, LENGTH(v) FROM {table} ORDER BY id"))
        .unwrap();
    let _ = direct.query_drop(format!("DROP TABLE {table}"));
    let m = proxy.metrics();
    let took = got.unwrap_or_else(|e| {
        panic!(
            "on a 4-buffer ring, a pipelined INSERT behind a large result: {e}; the proxy \
             deadlocked\n--- metrics ---\n{}",
            m.dump()
        )
    });
    assert_eq!(stored, [(1, RING_BYTES as u64)], "the INSERT is stored");
    eprintln!(
        "ring: both pipelined responses read in {took:?}; {} ENOBUFS, {} reads from the \
         connection's own buffer",
        m.get("ringgate_read_buffer_ring_enobufs_total"),
        m.get("ringgate_read_buffer_heap_fallbacks_total")
    );
}

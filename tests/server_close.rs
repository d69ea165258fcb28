//! When the server closes a leased backend connection between commands
//! (wait_timeout, KILL CONNECTION, shutdown), the client sees its connection end promptly,
//! with the server's ERR packet if one was sent, without sending anything itself.
//!
//! MariaDB 10.11 sends no ERR in these cases (wait_timeout: an RST; KILL: a plain FIN), so the
//! client must see a bare end. The relay's handling of an ERR that does arrive is covered by
//! its unit tests.
//!
//! Every scenario runs with `--workers 1 --backend-pool-size 1` so the killed connection is the
//! only one, and ends with the leak checks; and with `--pooling session`, where an idle client
//! holds its backend connection (in transaction pooling, the default, it holds none to lose).

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use testkit::both_modes;
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::mysql_client::backend_admin;
use testkit::own_mariadb::OwnMariaDb;
use testkit::proxy::{log_count, quick_opts, wait_until, Mode, Proxy, ProxyOpts};
use testkit::rawclient::{
    err_code, raw_login, raw_query, raw_query_value, read_packet, write_packet,
};

/// One worker, one pooled backend connection, session pooling.
fn one_backend_opts(mode: Mode) -> ProxyOpts {
    let mut o = ProxyOpts::new(mode);
    o.workers = 1;
    o.backend_pool_size = 1;
    o.extra_args.extend(["--pooling".into(), "session".into()]);
    o
}

fn one_backend(mode: Mode) -> Proxy {
    Proxy::start_with(one_backend_opts(mode))
}

fn discarded(p: &Proxy) -> f64 {
    p.metrics().get("ringgate_backend_discarded_total")
}

/// How a silent client's connection ended.
struct Ending {
    /// Bytes received before the end (must be empty or one whole ERR packet).
    bytes: Vec<u8>,
    after: Duration,
}

/// Reads without sending anything until the peer closes (EOF or reset), for at most `within`.
fn wait_for_end(s: &mut TcpStream, within: Duration) -> Result<Ending, String> {
    let start = Instant::now();
    let mut bytes = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        let left = within.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(format!(
                "the connection was still open after {within:?} (received {bytes:?})"
            ));
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&b[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                break
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    Ok(Ending {
        bytes,
        after: start.elapsed(),
    })
}

/// What arrived before the end is nothing, or exactly one ERR packet.
fn assert_nothing_or_one_err(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    assert!(bytes.len() >= 7, "a fragment before the end: {bytes:?}");
    let len = bytes[0] as usize | (bytes[1] as usize) << 8 | (bytes[2] as usize) << 16;
    assert_eq!(bytes.len(), 4 + len, "not one whole packet: {bytes:?}");
    assert_eq!(bytes[4], 0xFF, "not an ERR packet: {bytes:?}");
}

/// The proxy is healthy afterwards: a new client (on a fresh backend connection) works.
fn new_client_works(proxy: &Proxy) {
    let mut c = mysql::Conn::new(quick_opts(proxy)).expect("a new client after the close");
    assert_eq!(c.query_first::<u32, _>("SELECT 7").unwrap(), Some(7));
}

fn wait_timeout_expires(mode: Mode) {
    let mut proxy = one_backend(mode);
    let base = baseline(&mut proxy);
    let disc0 = discarded(&proxy);
    let mut s = raw_login(proxy.port);
    raw_query(&mut s, "SET SESSION wait_timeout=1").expect("SET wait_timeout");
    // Silent from here on: the server gives up after 1 s and closes.
    let end = wait_for_end(&mut s, Duration::from_secs(4)).unwrap_or_else(|e| {
        panic!(
            "{e}\n--- stderr ---\n{}",
            testkit::tail(&proxy.stderr(), 20)
        )
    });
    assert_nothing_or_one_err(&end.bytes);
    assert!(
        end.after >= Duration::from_millis(900),
        "closed after {:?}, before wait_timeout expired",
        end.after
    );
    eprintln!(
        "wait_timeout: the client saw the end {:?} after going idle ({} bytes first)",
        end.after,
        end.bytes.len()
    );
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "the dead backend connection is discarded",
        || discarded(&proxy) > disc0,
    );
    assert_eq!(
        log_count(
            &proxy,
            "the server closed the backend connection between commands"
        ),
        1,
        "one log line names the cause"
    );
    new_client_works(&proxy);
    assert_no_leaks(&mut proxy, &base, 2);
}
both_modes!(wait_timeout_reaches_an_idle_client, wait_timeout_expires);

fn kill_connection(mode: Mode) {
    let mut proxy = one_backend(mode);
    let base = baseline(&mut proxy);
    let disc0 = discarded(&proxy);
    let mut s = raw_login(proxy.port);
    let thread: u64 = raw_query_value(&mut s, "SELECT CONNECTION_ID()")
        .expect("CONNECTION_ID()")
        .and_then(|v| v.parse().ok())
        .expect("a thread id");
    // As an operator would: directly on the server, against the proxy's backend connection.
    backend_admin()
        .query_drop(format!("KILL CONNECTION {thread}"))
        .expect("KILL CONNECTION on the server");
    let end = wait_for_end(&mut s, Duration::from_secs(1)).unwrap_or_else(|e| {
        panic!(
            "{e}\n--- stderr ---\n{}",
            testkit::tail(&proxy.stderr(), 20)
        )
    });
    assert_nothing_or_one_err(&end.bytes);
    eprintln!(
        "KILL: the client saw the end {:?} after the kill",
        end.after
    );
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "the killed backend connection is discarded",
        || discarded(&proxy) > disc0,
    );
    new_client_works(&proxy);
    assert_no_leaks(&mut proxy, &base, 2);
}
both_modes!(kill_connection_reaches_an_idle_client, kill_connection);

/// The idle read must not cost the pool its connections: clients that come and go cleanly
/// hand the same backend connection on (the idle read is cancelled, not the connection shut).
#[test]
fn clean_sessions_still_reuse_the_backend_connection() {
    // No warm-up either: with --backend-pool-size 1 the pool opens a second connection to keep
    // one ready while the first is leased, and which of the two is the most recently idle at
    // the next login (LIFO) is a race. With none kept ready, the connection opened for the
    // first client is the only one, and a client that does not reuse it gets a new one.
    let mut o = one_backend_opts(Mode::Fixed);
    o.backend_pool_size = 0;
    let mut proxy = Proxy::start_with(o);
    let base = baseline(&mut proxy);
    let disc0 = discarded(&proxy);
    let mut threads = Vec::new();
    for _ in 0..5 {
        // Connect only once no connection is being reset (after the baseline's client too):
        // a client that arrives during a reset gets a second connection, and a fixed sleep lost
        // that race under load.
        wait_until(
            &proxy,
            Duration::from_secs(10),
            "every backend connection idle (none busy or being reset)",
            || {
                // A connection being reset is neither busy nor idle (and in fixed mode an idle
                // one holds no slot, so the slots cannot tell).
                let m = proxy.metrics();
                m.get(r#"ringgate_backend_connections{state="busy"}"#) == 0.0
                    && m.get(r#"ringgate_backend_connections{state="idle"}"#)
                        == m.get("ringgate_backend_connects_total")
                            - m.get("ringgate_backend_discarded_total")
            },
        );
        let mut c = mysql::Conn::new(quick_opts(&proxy)).expect("client");
        threads.push(
            c.query_first::<u64, _>("SELECT CONNECTION_ID()")
                .unwrap()
                .unwrap(),
        );
        // Idle a little with the read armed, then quit.
        std::thread::sleep(Duration::from_millis(50));
        drop(c);
    }
    threads.sort_unstable();
    threads.dedup();
    assert_eq!(
        threads.len(),
        1,
        "one server connection for all: {threads:?}"
    );
    assert_eq!(discarded(&proxy), disc0, "nothing discarded");
    assert_no_leaks(&mut proxy, &base, 5);
}

// ---------------------------------------------------------------------------------------------
// A server that sends an ERR before it closes (MySQL 8.0.24+ does on wait_timeout: 4031)
// ---------------------------------------------------------------------------------------------

const ARM: &str = "arm-4031";
const ERR_4031: &str = "The client was disconnected by the server because of inactivity. \
                        See wait_timeout and interactive_timeout for configuring this behavior.";

/// One connection of the fake server: a MySQL-8-like greeting, any login accepted, OK to every
/// command; after a query containing [`ARM`] it answers OK, waits a little, then sends ERR
/// 4031 with sequence id 0 and closes, as MySQL does when wait_timeout expires.
fn fake_mysql8_conn(mut s: TcpStream, id: u32) {
    use wire::constants::*;
    use wire::handshake::{build_greeting, Greeting};
    use wire::reply::{err_payload_with_state, ok_payload};
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let greeting = Greeting {
        protocol_version: 10,
        server_version: "8.0.36-fake".into(),
        connection_id: id,
        scramble: b"abcdefghijklmnopqrst".to_vec(),
        capabilities: CLIENT_LONG_PASSWORD
            | CLIENT_LONG_FLAG
            | CLIENT_CONNECT_WITH_DB
            | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_MULTI_STATEMENTS
            | CLIENT_MULTI_RESULTS
            | CLIENT_PLUGIN_AUTH,
        ext_capabilities: 0,
        charset: UTF8MB4_GENERAL_CI,
        status: SERVER_STATUS_AUTOCOMMIT,
        auth_plugin: "mysql_native_password".into(),
    };
    let ok = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0);
    if write_packet(&mut s, 0, &build_greeting(&greeting)).is_err()
        || read_packet(&mut s).is_err()
        || write_packet(&mut s, 2, &ok).is_err()
    {
        return;
    }
    while let Ok((_, cmd)) = read_packet(&mut s) {
        match cmd.first() {
            Some(0x01) | None => return, // COM_QUIT
            Some(0x03) if String::from_utf8_lossy(&cmd).contains(ARM) => {
                let _ = write_packet(&mut s, 1, &ok);
                std::thread::sleep(Duration::from_millis(300));
                let err = err_payload_with_state(4031, "HY000", ERR_4031);
                let _ = write_packet(&mut s, 0, &err);
                let _ = s.shutdown(std::net::Shutdown::Both);
                return;
            }
            Some(_) => {
                if write_packet(&mut s, 1, &ok).is_err() {
                    return;
                }
            }
        }
    }
}

#[test]
fn an_err_the_server_sends_before_closing_reaches_the_idle_client() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (id, s) in listener.incoming().enumerate() {
            let Ok(s) = s else { return };
            std::thread::spawn(move || fake_mysql8_conn(s, 100 + id as u32));
        }
    });
    let mut o = one_backend_opts(Mode::Fixed);
    let mut env = testkit::env::backend_env();
    env.port = port;
    env.socket = None;
    o.backend_override = Some(env);
    let mut proxy = Proxy::start_with(o);
    let base = proxy.connections_total();
    let disc0 = discarded(&proxy);
    let mut s = raw_login(proxy.port);
    raw_query(&mut s, &format!("SELECT '{ARM}'")).expect("the arming query");
    // Silent from here: the ERR arrives, whole, and then the end.
    let end = wait_for_end(&mut s, Duration::from_secs(3)).unwrap_or_else(|e| {
        panic!(
            "{e}\n--- stderr ---\n{}",
            testkit::tail(&proxy.stderr(), 20)
        )
    });
    assert_nothing_or_one_err(&end.bytes);
    assert!(!end.bytes.is_empty(), "the server's ERR was not forwarded");
    assert_eq!(end.bytes[3], 0, "sequence id as the server sent it");
    assert_eq!(err_code(&end.bytes[4..]), Some(4031));
    assert!(
        String::from_utf8_lossy(&end.bytes).contains("disconnected by the server"),
        "{:?}",
        String::from_utf8_lossy(&end.bytes)
    );
    wait_until(
        &proxy,
        Duration::from_secs(5),
        "the closed backend connection is discarded",
        || discarded(&proxy) > disc0,
    );
    assert_eq!(
        log_count(&proxy, "after ERR 4031 (forwarded to the client)"),
        1
    );
    proxy.assert_settled(base, 1);
}

/// A server shutdown reaches an idle client too (MariaDB shuts every connection's socket down
/// first: a plain EOF, no ERR). Own MariaDB, since the test stops it.
#[test]
fn server_shutdown_reaches_an_idle_client() {
    let db = OwnMariaDb::started("srvclose-shutdown");
    let mut o = one_backend_opts(Mode::Fixed);
    o.backend_override = Some(db.env());
    let mut proxy = Proxy::start_with(o);
    let base = proxy.connections_total();
    let mut s = raw_login(proxy.port);
    raw_query(&mut s, "DO 1").expect("a query before the shutdown");
    let cli = testkit::env::find_in_path("mariadb").expect("mariadb client");
    // The issuing session itself may be cut by the shutdown: its exit status says nothing.
    let _ = std::process::Command::new(cli)
        .args(["--no-defaults", "-uroot", "-S"])
        .arg(db.dir.join("mysqld.sock"))
        .args(["-e", "SHUTDOWN"])
        .output();
    let end = wait_for_end(&mut s, Duration::from_secs(2)).unwrap_or_else(|e| {
        panic!(
            "{e}\n--- stderr ---\n{}",
            testkit::tail(&proxy.stderr(), 20)
        )
    });
    assert_nothing_or_one_err(&end.bytes);
    eprintln!("SHUTDOWN: the client saw the end {:?} after it", end.after);
    proxy.assert_running();
    // Back up: a new client works again, and nothing leaked.
    db.start();
    wait_until(
        &proxy,
        Duration::from_secs(15),
        "a new client works after the restart",
        || {
            mysql::Conn::new(quick_opts(&proxy))
                .and_then(|mut c| c.query_first::<u32, _>("SELECT 7"))
                .is_ok_and(|v| v == Some(7))
        },
    );
    proxy.assert_settled(base, 2);
}

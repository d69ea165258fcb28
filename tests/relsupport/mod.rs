//! Helpers shared by the reliability, chaos and memory tests (`tests/reliability.rs`,
//! `tests/chaos.rs`, `tests/memory.rs`): a private MariaDB a test may kill, raw-socket MySQL
//! clients that misbehave on purpose, and the leak checks every scenario ends with.
//! Use next to `common`: `#[macro_use] mod common; mod relsupport;`.
#![allow(dead_code)]

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use wire::auth::native_token;
use wire::constants::*;
use wire::handshake::{build_handshake_response, parse_greeting, HandshakeResponse};

use crate::common::{self, tail, BackendEnv, Proxy, APP_PASSWORD, APP_USER};

// ---------------------------------------------------------------------------------------------
// A private MariaDB (never the shared sandbox): for tests that stop or kill the backend.
// ---------------------------------------------------------------------------------------------

/// Where the private MariaDBs live: `/tmp/rg-own-<test pid>-<tag>`.
const OWN_DIR_PARENT: &str = "/tmp";
const OWN_DIR_PREFIX: &str = "rg-own-";
/// A test that panics keeps its MariaDB's directory (datadir and error log) for debugging; each
/// is 100+ MB, so only the newest few left by finished test processes survive the next run.
const KEEP_FAILED_DIRS: usize = 3;

pub struct OwnMariaDb {
    pub dir: PathBuf,
    pub port: u16,
}

impl OwnMariaDb {
    fn script() -> PathBuf {
        common::repo_root()
            .join("scripts")
            .join("mariadb-sandbox.sh")
    }

    /// A datadir under /tmp (the socket path must stay short) and a free port; not started.
    pub fn new(tag: &str) -> OwnMariaDb {
        static PRUNE: std::sync::Once = std::sync::Once::new();
        PRUNE.call_once(|| prune_kept_dirs(Path::new(OWN_DIR_PARENT), KEEP_FAILED_DIRS));
        let dir = PathBuf::from(format!(
            "{OWN_DIR_PARENT}/{OWN_DIR_PREFIX}{}-{tag}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create own MariaDB dir");
        OwnMariaDb {
            dir,
            port: common::free_port(),
        }
    }

    /// Starts (initialising the datadir the first time); panics with the script's output.
    /// Starts are serialised within a test binary, and a failed first initialisation is
    /// retried from scratch (server stopped, datadir wiped): two `mariadb-install-db` running
    /// at once, also from other test processes, can collide on temporary tables in /tmp
    /// ("Unknown table 'mysql.tmp_user_sys'"), and a half-initialised datadir then starts a
    /// server whose root login fails. A restart of a datadir that was initialised before (after
    /// `kill9`) is retried as it is, keeping the test's data. Every attempt's output is kept
    /// for the failure message.
    pub fn start(&self) {
        static START: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = START.lock().unwrap_or_else(|e| e.into_inner());
        let data = self.dir.join("data");
        let fresh = !data.join("mysql").join("user.frm").exists();
        let mut out = self.run_start();
        let mut earlier = String::new();
        for _ in 0..2 {
            if out.status.success() {
                break;
            }
            earlier += &format!(
                "{}{}--- retrying ---\n",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if fresh {
                self.stop();
                if let Some(pid) = self.pid() {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
                let _ = fs::remove_file(self.dir.join("mysqld.pid"));
                let _ = fs::remove_dir_all(&data);
            }
            std::thread::sleep(Duration::from_millis(500));
            out = self.run_start();
        }
        if !out.status.success() {
            eprintln!("earlier attempts to start the own MariaDB:\n{earlier}");
        }
        assert!(
            out.status.success(),
            "own MariaDB on port {} did not start:\n{}{}",
            self.port,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn run_start(&self) -> std::process::Output {
        Command::new(Self::script())
            .arg("start")
            .env("RINGGATE_SANDBOX_DIR", &self.dir)
            .env("RINGGATE_SANDBOX_PORT", self.port.to_string())
            .output()
            .expect("run mariadb-sandbox.sh start")
    }

    pub fn started(tag: &str) -> OwnMariaDb {
        let db = OwnMariaDb::new(tag);
        db.start();
        db
    }

    pub fn pid(&self) -> Option<u32> {
        fs::read_to_string(self.dir.join("mysqld.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// `kill -9` by the pid file (never by name), and waits until it is gone. Panics when there
    /// is no pid file, when `kill` fails, or when the process is still alive 10 s later: a
    /// test that means to kill the server must not go on as if it had. Returns the pid killed.
    pub fn kill9(&self) -> u32 {
        let pid = self.pid().unwrap_or_else(|| {
            panic!(
                "kill -9: no pid in {}: the MariaDB on port {} is not running",
                self.dir.join("mysqld.pid").display(),
                self.port
            )
        });
        signal(pid, "-KILL");
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_alive(pid) {
            assert!(
                Instant::now() < deadline,
                "MariaDB pid {pid} still alive 10 s after kill -9"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = fs::remove_file(self.dir.join("mysqld.pid"));
        pid
    }

    pub fn stop(&self) {
        let _ = Command::new(Self::script())
            .arg("stop")
            .env("RINGGATE_SANDBOX_DIR", &self.dir)
            .env("RINGGATE_SANDBOX_PORT", self.port.to_string())
            .output();
    }

    pub fn env(&self) -> BackendEnv {
        let mut e = BackendEnv {
            host: "127.0.0.1".into(),
            port: self.port,
            socket: Some(self.dir.join("mysqld.sock").display().to_string()),
            user: "ringgate".into(),
            password: "ringgate-backend".into(),
        };
        // The sandbox script always creates this account; the shared env may name the same.
        if let Ok(u) = std::env::var("RINGGATE_TEST_BACKEND_USER") {
            e.user = u;
        }
        if let Ok(p) = std::env::var("RINGGATE_TEST_BACKEND_PASSWORD") {
            e.password = p;
        }
        e
    }

    /// SQL as root over the unix socket (setup that must not go through the proxy).
    pub fn root_sql(&self, sql: &str) {
        let cli = common::find_in_path("mariadb").expect("mariadb client");
        let out = Command::new(cli)
            .args(["--no-defaults", "-uroot", "-S"])
            .arg(self.dir.join("mysqld.sock"))
            .args(["-e", sql])
            .output()
            .expect("run mariadb");
        assert!(
            out.status.success(),
            "root SQL failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for OwnMariaDb {
    fn drop(&mut self) {
        self.stop();
        if let Some(pid) = self.pid() {
            // Best effort here (no panic inside drop): the stop above failed.
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!(
                "keeping {} (datadir, error log) for debugging; the next run deletes all but the \
                 newest {KEEP_FAILED_DIRS} of these",
                self.dir.display()
            );
        }
    }
}

/// Deletes the `rg-own-*` directories under `parent` left behind by test processes that have
/// exited (a panicking test keeps its own), except the newest `keep`. A directory whose test
/// process or MariaDB is still running belongs to a live run and is never touched. Best effort:
/// a directory that cannot be read or removed is left.
fn prune_kept_dirs(parent: &Path, keep: usize) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    let mut left: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let owner: u32 = name
                .strip_prefix(OWN_DIR_PREFIX)?
                .split('-')
                .next()?
                .parse()
                .ok()?;
            let path = e.path();
            let mysqld = fs::read_to_string(path.join("mysqld.pid"))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            if is_alive(owner) || mysqld.is_some_and(is_alive) {
                return None;
            }
            let modified = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((modified, path))
        })
        .collect();
    left.sort_unstable_by_key(|d| std::cmp::Reverse(d.0));
    for (_, dir) in left.into_iter().skip(keep) {
        let _ = fs::remove_dir_all(dir);
    }
}

/// `kill SIG PID`; panics unless `kill` succeeds (a signal that was not delivered must not let
/// a test go on as if it had been).
pub fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill {sig} {pid} failed: {st}");
}

/// The process state letter from /proc/PID/stat (R, S, T, Z, ...); None once it is reaped.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which may contain spaces: after the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Alive: exists and is not a zombie (a killed grandchild of ours via setsid stays a zombie
/// until its parent reaps it).
pub fn is_alive(pid: u32) -> bool {
    !matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

// ---------------------------------------------------------------------------------------------
// /proc: every reader panics when /proc cannot be read, rather than report 0 (a 0 would let the
// fd, CPU and RSS checks pass without measuring anything).
// ---------------------------------------------------------------------------------------------

pub fn fd_count(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/fd: {e}"))
        .count()
}

pub fn fd_list(pid: u32) -> String {
    let mut v: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .map(|e| {
                    let l = fs::read_link(e.path()).unwrap_or_default();
                    format!("{}->{}", e.file_name().to_string_lossy(), l.display())
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.join(" ")
}

/// utime + stime of the process, in clock ticks (USER_HZ, 100 on Linux).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/stat: {e}"));
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime 15.
    let field = |i: usize, name: &str| -> u64 {
        f.get(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/stat: {stat:?}"))
    };
    field(11, "utime") + field(12, "stime")
}

/// VmRSS in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status:\n{status}"));
    kb * 1024
}

/// One IPv4 TCP socket of this network namespace, from /proc/net/tcp.
#[derive(Clone, Copy, Debug)]
pub struct TcpQueue {
    pub local_port: u16,
    pub remote_port: u16,
    /// Bytes in the send queue not yet acknowledged (on loopback: not yet taken by the peer,
    /// whose receive window is full).
    pub tx: u64,
    /// Bytes received and not yet read by the socket's owner.
    pub rx: u64,
}

/// Every IPv4 TCP socket whose local or remote port is `port`, with its queue sizes.
pub fn tcp_queues(port: u16) -> Vec<TcpQueue> {
    let text =
        fs::read_to_string("/proc/net/tcp").unwrap_or_else(|e| panic!("read /proc/net/tcp: {e}"));
    let port_of = |addr: &str| {
        addr.rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            // sl local_address rem_address st tx_queue:rx_queue ...
            let f: Vec<&str> = l.split_whitespace().collect();
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some(TcpQueue {
                local_port: port_of(f.get(1)?)?,
                remote_port: port_of(f.get(2)?)?,
                tx: u64::from_str_radix(tx, 16).ok()?,
                rx: u64::from_str_radix(rx, 16).ok()?,
            })
        })
        .filter(|q| q.local_port == port || q.remote_port == port)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Leak checks
// ---------------------------------------------------------------------------------------------

/// What a proxy looked like at rest before a scenario.
#[derive(Clone, Copy, Debug)]
pub struct Baseline {
    pub connections_total: f64,
    /// fds that are neither a client nor a backend connection (rings, listeners, metrics,
    /// stdio, ...): `fd_count - idle - busy` at rest.
    pub fixed_fds: i64,
}

fn backend_conns(p: &Proxy) -> (f64, f64) {
    let m = p.metrics();
    (
        m.get(r#"ringgate_backend_connections{state="idle"}"#),
        m.get(r#"ringgate_backend_connections{state="busy"}"#),
    )
}

/// Every backend connection the pool has opened is idle or busy: none is still connecting or
/// logging in (its socket would count as a fixed fd), none closing.
fn backends_at_rest(p: &Proxy) -> bool {
    let m = p.metrics();
    let (idle, busy) = (
        m.get(r#"ringgate_backend_connections{state="idle"}"#),
        m.get(r#"ringgate_backend_connections{state="busy"}"#),
    );
    idle + busy
        == m.get("ringgate_backend_connects_total") - m.get("ringgate_backend_discarded_total")
}

fn fixed_fds(p: &Proxy) -> i64 {
    let (idle, busy) = backend_conns(p);
    fd_count(p.pid()) as i64 - idle as i64 - busy as i64
}

/// Waits until the warm-up pool is open and the fd count is stable, then records it.
pub fn baseline(p: &mut Proxy) -> Baseline {
    let deadline = Instant::now() + Duration::from_secs(10);
    let want_idle = (p.opts.backend_pool_size * p.opts.workers) as f64;
    let mut last = (-1i64, 0u32);
    loop {
        p.assert_running();
        let (idle, _) = backend_conns(p);
        let f = fixed_fds(p);
        // A connection still logging in (slow on a loaded machine) holds a socket that is
        // neither idle nor busy: a baseline taken then is too high by one per such connection.
        let at_rest = backends_at_rest(p);
        if f == last.0 && ((idle >= want_idle && at_rest) || Instant::now() > deadline) {
            last.1 += 1;
            if last.1 >= 3 {
                return Baseline {
                    connections_total: p.connections_total(),
                    fixed_fds: f,
                };
            }
        } else {
            last = (f, 0);
        }
        if Instant::now() > deadline + Duration::from_secs(5) {
            panic!("ringgate fd count never settled: {}", fd_list(p.pid()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The leak checks every scenario ends with: no client holds a buffer, no backend is busy,
/// backend-held buffers == idle + busy, fixed free == total - backend-held, no client
/// connection open (all in `assert_settled`), and the fd count back at baseline once the idle
/// backend connections are accounted for.
pub fn assert_no_leaks(p: &mut Proxy, base: &Baseline, min_new_connections: u64) {
    p.assert_settled(base.connections_total, min_new_connections);
    let deadline = Instant::now() + common::SETTLE_TIMEOUT;
    loop {
        let f = fixed_fds(p);
        if f == base.fixed_fds {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "fd leak: {} fds that are not backend connections, baseline {}\nfds: {}\n--- metrics ---\n{}\n--- stderr ---\n{}",
                f,
                base.fixed_fds,
                fd_list(p.pid()),
                p.metrics().dump(),
                tail(&p.stderr(), 40)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------------
// Raw MySQL protocol clients
// ---------------------------------------------------------------------------------------------

pub fn raw_connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to ringgate");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads one physical packet: (sequence id, payload).
pub fn read_packet(s: &mut TcpStream) -> io::Result<(u8, Vec<u8>)> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h)?;
    let len = h[0] as usize | (h[1] as usize) << 8 | (h[2] as usize) << 16;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p)?;
    Ok((h[3], p))
}

pub fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 4);
    let n = payload.len();
    v.extend_from_slice(&[n as u8, (n >> 8) as u8, (n >> 16) as u8, seq]);
    v.extend_from_slice(payload);
    v
}

pub fn write_packet(s: &mut TcpStream, seq: u8, payload: &[u8]) -> io::Result<()> {
    s.write_all(&frame(seq, payload))
}

/// The error code of an ERR payload.
pub fn err_code(p: &[u8]) -> Option<u16> {
    (p.first() == Some(&0xFF) && p.len() >= 3).then(|| u16::from_le_bytes([p[1], p[2]]))
}

/// Reads until the peer closes; true if it did (EOF or reset) within `within`. Any bytes
/// received before the close are returned in the error case for the message.
pub fn closed_within(s: &mut TcpStream, within: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    s.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return Ok(start.elapsed()),
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                return Ok(start.elapsed())
            }
            Err(e) => {
                if start.elapsed() >= within {
                    return Err(format!(
                        "still open after {within:?} ({e}); received {} bytes: {:?}",
                        got.len(),
                        &got[..got.len().min(64)]
                    ));
                }
            }
        }
        if start.elapsed() >= within {
            return Err(format!(
                "still open after {within:?}; received {} bytes",
                got.len()
            ));
        }
    }
}

/// The client capabilities of the raw clients: 4.1, native password, multi-results; no
/// DEPRECATE_EOF so replies have classic EOFs.
pub const RAW_CAPS: u32 = CLIENT_LONG_PASSWORD
    | CLIENT_LONG_FLAG
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH;

/// Reads the greeting; returns its scramble.
pub fn read_greeting(s: &mut TcpStream) -> Vec<u8> {
    let (seq, g) = read_packet(s).expect("read greeting");
    assert_eq!(seq, 0, "greeting sequence id");
    parse_greeting(&g).expect("parse greeting").scramble
}

pub fn hello_payload(scramble: &[u8], user: &str, password: &str) -> Vec<u8> {
    build_handshake_response(&HandshakeResponse {
        capabilities: RAW_CAPS,
        max_packet_size: 1 << 30,
        charset: UTF8MB4_GENERAL_CI,
        username: user.into(),
        auth_response: native_token(password.as_bytes(), scramble),
        database: None,
        auth_plugin: Some("mysql_native_password".into()),
        connect_attrs: vec![],
    })
}

/// A logged-in raw session as `app`, or None when the proxy answers anything but OK (e.g. ERR
/// 1105 while the backend is down).
pub fn try_raw_login(port: u16) -> Option<TcpStream> {
    let mut s = raw_connect(port);
    let (_, g) = read_packet(&mut s).ok()?;
    let scramble = parse_greeting(&g).ok()?.scramble;
    write_packet(&mut s, 1, &hello_payload(&scramble, APP_USER, APP_PASSWORD)).ok()?;
    let (_, ok) = read_packet(&mut s).ok()?;
    (ok.first() == Some(&0x00)).then_some(s)
}

/// A logged-in raw session as `app`; panics unless the proxy answers OK.
pub fn raw_login(port: u16) -> TcpStream {
    let mut s = raw_connect(port);
    let scramble = read_greeting(&mut s);
    write_packet(&mut s, 1, &hello_payload(&scramble, APP_USER, APP_PASSWORD)).unwrap();
    let (seq, ok) = read_packet(&mut s).expect("read login reply");
    assert_eq!(ok.first(), Some(&0x00), "login reply is not OK: {ok:?}");
    assert_eq!(seq, 2);
    s
}

/// Sends COM_QUERY and reads the whole (text, classic EOF) response, counting payload bytes.
/// Returns Ok(bytes) or Err(error code / io error text).
pub fn raw_query(s: &mut TcpStream, sql: &str) -> Result<u64, String> {
    let mut p = vec![0x03];
    p.extend_from_slice(sql.as_bytes());
    write_packet(s, 0, &p).map_err(|e| e.to_string())?;
    read_response(s)
}

/// Reads one whole text-protocol response (classic EOF); Ok(row bytes) or Err.
pub fn read_response(s: &mut TcpStream) -> Result<u64, String> {
    let (_, first) = read_packet(s).map_err(|e| e.to_string())?;
    match first.first() {
        Some(0x00) => return Ok(0),
        Some(0xFF) => return Err(format!("ERR {:?}", err_code(&first))),
        _ => {}
    }
    let mut total = 0u64;
    let mut eofs = 0;
    loop {
        let (_, p) = read_packet(s).map_err(|e| e.to_string())?;
        total += p.len() as u64;
        if p.first() == Some(&0xFE) && p.len() < 9 {
            eofs += 1;
            if eofs == 2 {
                return Ok(total);
            }
        } else if p.first() == Some(&0xFF) {
            return Err(format!("ERR {:?}", err_code(&p)));
        }
    }
}

/// SO_LINGER 0 then close: the peer gets an RST.
pub fn reset_close(s: TcpStream) {
    let sock = socket2::Socket::from(s);
    let _ = sock.set_linger(Some(Duration::ZERO));
    drop(sock);
}

pub fn half_close(s: &TcpStream) {
    let _ = s.shutdown(Shutdown::Write);
}

/// A `mysql` crate connection through the proxy with short timeouts.
pub fn quick_opts(p: &Proxy) -> mysql::OptsBuilder {
    p.app_opts()
        .tcp_connect_timeout(Some(Duration::from_secs(5)))
        .read_timeout(Some(Duration::from_secs(30)))
        .write_timeout(Some(Duration::from_secs(30)))
}

/// Waits until `f` holds, polling; panics with `what` and the proxy's stderr otherwise.
pub fn wait_until(p: &Proxy, within: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "timed out after {within:?} waiting for: {what}\n--- metrics ---\n{}\n--- stderr ---\n{}",
        p.metrics().dump(),
        tail(&p.stderr(), 40)
    );
}

/// `n` lines of ringgate's stderr that contain `needle`.
pub fn log_count(p: &Proxy, needle: &str) -> usize {
    p.stderr().lines().filter(|l| l.contains(needle)).count()
}

/// Sends COM_QUERY and returns the first column of the first row as text (NULL as None), for
/// one-value queries such as `SELECT CONNECTION_ID()`. Text protocol, classic EOF.
pub fn raw_query_value(s: &mut TcpStream, sql: &str) -> Result<Option<String>, String> {
    let mut p = vec![0x03];
    p.extend_from_slice(sql.as_bytes());
    write_packet(s, 0, &p).map_err(|e| e.to_string())?;
    let mut next = || read_packet(s).map(|(_, p)| p).map_err(|e| e.to_string());
    let first = next()?;
    if let Some(code) = err_code(&first) {
        return Err(format!("ERR {code}"));
    }
    let is_eof = |p: &[u8]| p.first() == Some(&0xFE) && p.len() < 9;
    // Column definitions up to their EOF, then the first row.
    while !is_eof(&next()?) {}
    let row = next()?;
    let value = match row.first() {
        Some(0xFB) => None,
        Some(&n) if n < 0xFB && row.len() > n as usize => {
            Some(String::from_utf8_lossy(&row[1..=n as usize]).into_owned())
        }
        _ => return Err(format!("unexpected row packet {row:?}")),
    };
    // The remaining rows, up to the closing EOF.
    while !is_eof(&next()?) {}
    Ok(value)
}

// ---------------------------------------------------------------------------------------------
// The backend's own view: what reached it, and which of its connections are open
// ---------------------------------------------------------------------------------------------

/// A direct connection to the shared sandbox MariaDB (not through ringgate), as the backend
/// account (ALL privileges): to look at the server's processlist and general log.
pub fn backend_admin() -> mysql::Conn {
    let e = common::backend_env();
    let o = mysql::OptsBuilder::new()
        .ip_or_hostname(Some(e.host.clone()))
        .tcp_port(e.port)
        .user(Some(e.user.clone()))
        .pass(Some(e.password.clone()))
        .prefer_socket(false);
    mysql::Conn::new(o).unwrap_or_else(|err| panic!("direct connection to {}: {err}", e.addr()))
}

/// A string no other test sends, to look for in the server's general log.
pub fn unique_marker(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "rg-{tag}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// The sandbox server's general log, on (into the `mysql.general_log` table) while this value
/// lives; the previous settings come back on drop. One at a time per test binary: tests that
/// run in parallel would otherwise turn it off under each other.
pub struct GeneralLog {
    admin: mysql::Conn,
    restore: (u8, String),
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl GeneralLog {
    pub fn on() -> GeneralLog {
        use mysql::prelude::Queryable;
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let mut admin = backend_admin();
        let restore: (u8, String) = admin
            .query_first("SELECT @@global.general_log + 0, @@global.log_output")
            .expect("read the general log settings")
            .expect("one row");
        admin
            .query_drop("SET GLOBAL log_output = 'TABLE'")
            .expect("SET GLOBAL log_output");
        admin
            .query_drop("SET GLOBAL general_log = ON")
            .expect("SET GLOBAL general_log");
        GeneralLog {
            admin,
            restore,
            _one_at_a_time: one,
        }
    }

    /// (command_type, argument) of every general-log entry of server thread `thread_id`, in
    /// order.
    pub fn entries(&mut self, thread_id: u64) -> Vec<(String, String)> {
        use mysql::prelude::Queryable;
        self.admin
            .exec(
                "SELECT command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log \
                 WHERE thread_id = ? ORDER BY event_time",
                (thread_id,),
            )
            .expect("read mysql.general_log")
    }

    /// Whether server thread `thread_id` is still connected.
    pub fn thread_open(&mut self, thread_id: u64) -> bool {
        use mysql::prelude::Queryable;
        let n: Option<u64> = self
            .admin
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                (thread_id,),
            )
            .expect("read the processlist");
        n.unwrap_or(0) > 0
    }

    /// The server thread of the backend connection that serves raw session `s`, read with
    /// `SELECT CONNECTION_ID()` through the proxy. Also the positive control for
    /// [`GeneralLog::assert_closed_and_never_ran`]: that query must be in the log under this
    /// thread, or the log is not capturing this connection and proves nothing.
    ///
    /// The session first opens a transaction, so that it keeps that backend connection for
    /// its next command in either pooling mode: under transaction pooling an idle session
    /// holds none, and its next command could reach any connection of the pool.
    pub fn backend_thread_of(&mut self, s: &mut TcpStream) -> u64 {
        raw_query(s, "BEGIN").expect("BEGIN through the proxy");
        let tid: u64 = raw_query_value(s, "SELECT CONNECTION_ID()")
            .expect("SELECT CONNECTION_ID() through the proxy")
            .and_then(|v| v.parse().ok())
            .expect("a connection id");
        let entries = self.entries(tid);
        assert!(
            entries
                .iter()
                .any(|(c, a)| c == "Query" && a.contains("CONNECTION_ID()")),
            "the general log does not show SELECT CONNECTION_ID() for thread {tid}: {entries:?}"
        );
        tid
    }

    /// Waits until server thread `tid` has disconnected (the proxy closed that backend
    /// connection rather than keeping it for another client), then asserts that the thread
    /// ran no command after the positive control, and that no entry of it contains `marker`.
    pub fn assert_closed_and_never_ran(&mut self, tid: u64, marker: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.thread_open(tid) {
            assert!(
                Instant::now() < deadline,
                "{what}: backend thread {tid} still connected 10 s later (kept, not discarded)"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let entries = self.entries(tid);
        let control = entries
            .iter()
            .rposition(|(c, a)| c == "Query" && a.contains("CONNECTION_ID()"))
            .expect("the positive control is in the log");
        // Only the disconnect may follow (a COM_QUIT is logged as "Quit").
        let after: Vec<&(String, String)> = entries[control + 1..]
            .iter()
            .filter(|(c, _)| c != "Quit")
            .collect();
        assert!(
            after.is_empty() && !entries.iter().any(|(_, a)| a.contains(marker)),
            "{what}: commands reached backend thread {tid} after the control query: {after:?} \
             (all entries: {entries:?})"
        );
    }
}

impl Drop for GeneralLog {
    fn drop(&mut self) {
        use mysql::prelude::Queryable;
        let (on, output) = &self.restore;
        let _ = self
            .admin
            .query_drop(format!("SET GLOBAL general_log = {on}"));
        let _ = self
            .admin
            .exec_drop("SET GLOBAL log_output = ?", (output.as_str(),));
    }
}

#[test]
fn prune_kept_dirs_keeps_the_newest_and_those_of_live_processes() {
    let parent = std::env::temp_dir().join(format!("rg-prune-test-{}", std::process::id()));
    let _ = fs::remove_dir_all(&parent);
    // Above Linux's largest pid_max (2^22): never a live process.
    let dead = |i: u32| parent.join(format!("{OWN_DIR_PREFIX}{}-t{i}", 4_194_400 + i));
    for i in 0..5 {
        fs::create_dir_all(dead(i)).expect("create dir");
        // Distinct modification times, oldest first.
        std::thread::sleep(Duration::from_millis(20));
    }
    let live = parent.join(format!("{OWN_DIR_PREFIX}{}-mine", std::process::id()));
    fs::create_dir_all(&live).expect("create dir");
    let other = parent.join("unrelated");
    fs::create_dir_all(&other).expect("create dir");

    prune_kept_dirs(&parent, 2);

    let gone: Vec<bool> = (0..5).map(|i| !dead(i).exists()).collect();
    assert_eq!(
        gone,
        [true, true, true, false, false],
        "only the 2 newest dead dirs stay"
    );
    assert!(live.exists(), "a live test process's dir is never pruned");
    assert!(other.exists(), "only rg-own-* dirs are pruned");
    let _ = fs::remove_dir_all(&parent);
}

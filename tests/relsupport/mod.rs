//! Helpers shared by the reliability, chaos and memory tests (`tests/reliability.rs`,
//! `tests/chaos.rs`, `tests/memory.rs`): a private MariaDB a test may kill, raw-socket MySQL
//! clients that misbehave on purpose, and the leak checks every scenario ends with.
//! Use next to `common`: `#[macro_use] mod common; mod relsupport;`.
#![allow(dead_code)]

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use ringgate::mysql::auth::native_token;
use ringgate::mysql::constants::*;
use ringgate::mysql::handshake::{build_handshake_response, parse_greeting, HandshakeResponse};

use crate::common::{self, tail, BackendEnv, Proxy, APP_PASSWORD, APP_USER};

// ---------------------------------------------------------------------------------------------
// A private MariaDB (never the shared sandbox): for tests that stop or kill the backend.
// ---------------------------------------------------------------------------------------------

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
        let dir = PathBuf::from(format!("/tmp/rg-own-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create own MariaDB dir");
        OwnMariaDb {
            dir,
            port: common::free_port(),
        }
    }

    /// Starts (initialising the datadir the first time); panics with the script's output.
    /// Starts are serialised within a test binary, and a failed first initialisation is
    /// retried: two `mariadb-install-db` running at once can collide on temporary tables in
    /// /tmp ("Unknown table 'mysql.tmp_user_sys'").
    pub fn start(&self) {
        static START: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = START.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = self.run_start();
        for _ in 0..2 {
            if out.status.success() {
                break;
            }
            if !self
                .dir
                .join("data")
                .join("mysql")
                .join("user.frm")
                .exists()
                && String::from_utf8_lossy(&out.stderr).contains("mariadb-install-db failed")
            {
                let _ = fs::remove_dir_all(self.dir.join("data"));
            }
            std::thread::sleep(Duration::from_millis(500));
            out = self.run_start();
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

    /// `kill -9` by the pid file (never by name), and waits until it is gone.
    pub fn kill9(&self) {
        let Some(pid) = self.pid() else { return };
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            // A zombie (our grandchild via setsid) still has /proc; check its state.
            if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
                if stat.contains(") Z ") {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = fs::remove_file(self.dir.join("mysqld.pid"));
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
        if self.pid().is_some() {
            self.kill9();
        }
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// /proc
// ---------------------------------------------------------------------------------------------

pub fn fd_count(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
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
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime 15.
    let utime: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
    let stime: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    utime + stime
}

/// VmRSS in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
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
        if f == last.0 && (idle >= want_idle || Instant::now() > deadline) {
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

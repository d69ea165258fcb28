//! Test harness for ringgate's integration tests.
//!
//! Starts the real `ringgate` binary on free ports in front of the private MariaDB that
//! `scripts/mariadb-sandbox.sh` runs (its address comes from the `RINGGATE_TEST_*` variables;
//! `make test` sets them), reads its Prometheus metrics, and kills it on drop.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mysql::{Conn, OptsBuilder};

pub const APP_USER: &str = "app";
pub const APP_PASSWORD: &str = "app-secret";
pub const HASHED_USER: &str = "hashed";
pub const HASHED_PASSWORD: &str = "hashed-secret";
pub const TEST_DB: &str = "ringgate_test";

/// How long the proxy gets to come up.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the metrics get to settle after a scenario.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(8);

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------

/// Where the private MariaDB (the proxy's backend) listens, from the sandbox's env exports.
#[derive(Clone, Debug)]
pub struct BackendEnv {
    pub host: String,
    pub port: u16,
    pub socket: Option<String>,
    pub user: String,
    pub password: String,
}

impl BackendEnv {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

fn required_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "environment variable {name} is not set: these integration tests need the private \
             MariaDB sandbox. Run `make test` (or `scripts/mariadb-sandbox.sh start && eval \
             \"$(scripts/mariadb-sandbox.sh env)\"` before `cargo test`)."
        ),
    }
}

/// Reads the `RINGGATE_TEST_*` variables; panics (fails the test) when they are missing.
pub fn backend_env() -> BackendEnv {
    let port = required_env("RINGGATE_TEST_MYSQL_PORT");
    let port: u16 = port
        .parse()
        .unwrap_or_else(|_| panic!("RINGGATE_TEST_MYSQL_PORT={port:?} is not a port number"));
    BackendEnv {
        host: std::env::var("RINGGATE_TEST_MYSQL_HOST").unwrap_or_else(|_| "127.0.0.1".into()),
        port,
        socket: std::env::var("RINGGATE_TEST_MYSQL_SOCKET").ok(),
        user: required_env("RINGGATE_TEST_BACKEND_USER"),
        password: required_env("RINGGATE_TEST_BACKEND_PASSWORD"),
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn users_file() -> PathBuf {
    repo_root().join("tests").join("users.json")
}

pub fn ringgate_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ringgate"))
}

/// Where `free_port` looks: below the kernel's ephemeral range (net.ipv4.ip_local_port_range,
/// 32768–60999 by default). A port the kernel hands out for `bind(0)` comes from that range,
/// and so does every outgoing connection's local port: a MariaDB a test restarts after
/// `kill -9` on such a port, or one started a moment after the port was picked, could find it
/// taken by some client's connection (the idle tests open 10,000 of them). Below the range only
/// another test's pick can collide, and the bind check catches a port in use.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

static PORT_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A port nobody listens on right now, outside the ephemeral range (released before we return).
pub fn free_port() -> u16 {
    let span = (TEST_PORTS.end - TEST_PORTS.start) as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    // Spread the picks of concurrent test processes (pid) and threads (sequence, time).
    let mut x = nanos ^ ((std::process::id() as u64) << 20);
    for _ in 0..200 {
        x = x
            .wrapping_add(PORT_SEQ.fetch_add(1, Ordering::Relaxed) as u64)
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let port = TEST_PORTS.start + ((x >> 33) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("bound address").port()
}

static SCRATCH_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under the system temp dir, mode 0755 (readable by `nobody`).
pub fn scratch_dir(tag: &str) -> PathBuf {
    let n = SCRATCH_SEQ.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "ringgate-test-{}-{}-{}",
        std::process::id(),
        tag,
        n
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create scratch dir");
    set_mode(&dir, 0o755);
    dir
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {:o} {}: {e}", mode, path.display()));
}

/// The effective uid of this process, from /proc (no libc needed).
pub fn current_euid() -> u32 {
    let status = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("Uid:") {
            let mut it = rest.split_whitespace();
            let _real = it.next();
            return it.next().and_then(|s| s.parse().ok()).expect("parse Uid");
        }
    }
    panic!("no Uid: line in /proc/self/status");
}

/// A command prefix that runs its command with RLIMIT_MEMLOCK = `memlock_bytes` and, when
/// we are root, as `nobody` without capabilities: root's CAP_IPC_LOCK would ignore the limit.
pub fn low_memlock_wrapper(memlock_bytes: usize) -> Vec<String> {
    let prlimit = find_in_path("prlimit").expect("prlimit (util-linux) is required");
    let mut wrapper = vec![
        prlimit.display().to_string(),
        format!("--memlock={memlock_bytes}:{memlock_bytes}"),
    ];
    if current_euid() == 0 {
        let setpriv = find_in_path("setpriv").expect("setpriv (util-linux) is required");
        wrapper.extend(
            [
                setpriv.display().to_string().as_str(),
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                "--inh-caps=-all",
                "--",
            ]
            .map(String::from),
        );
    }
    wrapper
}

pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    for extra in ["/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
        dirs.push(PathBuf::from(extra));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

// ---------------------------------------------------------------------------------------------
// Proxy process
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Fixed,
    Heap,
    /// `--read-buffers ring`: a provided-buffer ring per worker.
    Ring,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Fixed => "fixed",
            Mode::Heap => "heap",
            Mode::Ring => "ring",
        }
    }
}

/// Options for one ringgate process.
#[derive(Clone, Debug)]
pub struct ProxyOpts {
    pub mode: Mode,
    pub workers: usize,
    pub read_buffer_size: usize,
    pub read_buffer_count: usize,
    pub max_connections: usize,
    pub backend_pool_size: usize,
    pub backend_max_connections: usize,
    pub backend_wait_timeout: &'static str,
    pub allow_local_infile: bool,
    /// Command prefix, e.g. `["prlimit", "--memlock=65536:65536", "setpriv", ...]`.
    pub wrapper: Vec<String>,
    /// Run this binary instead of the one cargo built (e.g. a copy readable by `nobody`).
    pub binary: Option<PathBuf>,
    pub users_file: PathBuf,
    pub extra_args: Vec<String>,
    /// Use this backend instead of the sandbox from the `RINGGATE_TEST_*` variables (e.g. a
    /// private MariaDB a test kills, or a fake server).
    pub backend_override: Option<BackendEnv>,
    /// `--backend-identity passthrough`: each client logs in to the backend as itself. Off by
    /// default: the suites' users (tests/users.json) deliberately do not exist on the backend,
    /// so they run with `--backend-identity shared` as the sandbox's `ringgate` account.
    pub passthrough: bool,
}

impl ProxyOpts {
    pub fn new(mode: Mode) -> Self {
        ProxyOpts {
            mode,
            workers: 2,
            read_buffer_size: 16384,
            read_buffer_count: 1024,
            max_connections: 1000,
            backend_pool_size: 4,
            backend_max_connections: 500,
            backend_wait_timeout: "10s",
            allow_local_infile: false,
            wrapper: Vec::new(),
            binary: None,
            users_file: users_file(),
            extra_args: Vec::new(),
            backend_override: None,
            passthrough: false,
        }
    }
}

/// A running ringgate; killed (SIGKILL) and reaped on drop.
pub struct Proxy {
    pub opts: ProxyOpts,
    pub backend: BackendEnv,
    pub port: u16,
    pub metrics_port: u16,
    child: Child,
    stderr_path: PathBuf,
    dir: PathBuf,
}

impl Proxy {
    /// Starts ringgate with default options in `mode` and waits until it is ready.
    pub fn start(mode: Mode) -> Proxy {
        Proxy::start_with(ProxyOpts::new(mode))
    }

    pub fn start_with(opts: ProxyOpts) -> Proxy {
        let backend = opts.backend_override.clone().unwrap_or_else(backend_env);
        let mut last_err = String::new();
        // A free port can be taken by someone else between our probe and ringgate's bind;
        // retry a few times in that (rare) case.
        for _attempt in 0..3 {
            match Proxy::try_start(&opts, &backend) {
                Ok(p) => return p,
                Err(e) => {
                    let retry = e.contains("Address already in use")
                        || e.contains("AddrInUse")
                        || e.contains("already listens on");
                    last_err = e;
                    if !retry {
                        break;
                    }
                }
            }
        }
        panic!("ringgate did not start: {last_err}");
    }

    fn try_start(opts: &ProxyOpts, backend: &BackendEnv) -> Result<Proxy, String> {
        let port = free_port();
        let mut metrics_port = free_port();
        while metrics_port == port {
            metrics_port = free_port();
        }
        let dir = scratch_dir(&format!("proxy-{}", opts.mode.as_str()));
        let stderr_path = dir.join("ringgate.stderr");
        let stderr_file = fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
        let stdout_file = stderr_file.try_clone().map_err(|e| e.to_string())?;

        let bin = opts.binary.clone().unwrap_or_else(ringgate_bin);
        let mut args: Vec<String> = vec![
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--workers".into(),
            opts.workers.to_string(),
            "--backend".into(),
            backend.addr(),
            "--users-file".into(),
            opts.users_file.display().to_string(),
            "--read-buffers".into(),
            opts.mode.as_str().into(),
            "--read-buffer-size".into(),
            opts.read_buffer_size.to_string(),
            "--read-buffer-count".into(),
            opts.read_buffer_count.to_string(),
            "--max-connections".into(),
            opts.max_connections.to_string(),
            "--backend-pool-size".into(),
            opts.backend_pool_size.to_string(),
            "--backend-max-connections".into(),
            opts.backend_max_connections.to_string(),
            "--backend-wait-timeout".into(),
            opts.backend_wait_timeout.into(),
            "--metrics-listen".into(),
            format!("127.0.0.1:{metrics_port}"),
        ];
        if opts.allow_local_infile {
            args.push("--allow-local-infile".into());
        }
        if opts.passthrough {
            args.extend(["--backend-identity".into(), "passthrough".into()]);
        } else {
            args.extend([
                "--backend-identity".into(),
                "shared".into(),
                "--backend-user".into(),
                backend.user.clone(),
            ]);
        }
        args.extend(opts.extra_args.iter().cloned());

        let mut cmd = if opts.wrapper.is_empty() {
            Command::new(&bin)
        } else {
            let mut c = Command::new(&opts.wrapper[0]);
            c.args(&opts.wrapper[1..]);
            c.arg(&bin);
            c
        };
        if opts.passthrough {
            cmd.env_remove("RINGGATE_BACKEND_PASSWORD");
        } else {
            cmd.env("RINGGATE_BACKEND_PASSWORD", &backend.password);
        }
        cmd.args(&args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout_file))
            .stderr(Stdio::from(stderr_file));
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {} {:?}: {e}", bin.display(), args))?;

        let mut proxy = Proxy {
            opts: opts.clone(),
            backend: backend.clone(),
            port,
            metrics_port,
            child,
            stderr_path,
            dir,
        };
        match proxy.wait_ready() {
            Ok(()) => Ok(proxy),
            Err(e) => {
                let _ = proxy.child.kill();
                let _ = proxy.child.wait();
                Err(format!(
                    "{e}\n--- command: {} {}\n--- ringgate stderr ---\n{}",
                    bin.display(),
                    args.join(" "),
                    proxy.stderr()
                ))
            }
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let listen: SocketAddr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        let mut listening = false;
        let mut last = String::from("not tried yet");
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("ringgate exited during start-up with {status}"));
            }
            if !listening {
                match TcpStream::connect_timeout(&listen, Duration::from_millis(200)) {
                    Ok(_s) => listening = true,
                    Err(e) => last = format!("listen port {}: {e}", self.port),
                }
            }
            // Worker 0 listens before the others have set up, and the
            // buffer mode is published only once all have: ready means the
            // start-up line that follows it, not just an open port.
            if listening && !self.stderr().contains("ringgate started") {
                last = "no \"ringgate started\" line yet".into();
            } else if listening {
                match http_get(self.metrics_port, "/metrics") {
                    Ok((200, _)) => return Ok(()),
                    Ok((code, body)) => last = format!("GET /metrics -> {code}: {body}"),
                    Err(e) => last = format!("GET /metrics: {e}"),
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "ringgate not ready within {:?} (last: {last})",
                    READY_TIMEOUT
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything ringgate wrote to stderr/stdout so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "ringgate died ({status}); stderr:\n{}",
                tail(&self.stderr(), 80)
            );
        }
    }

    /// Client options for a connection through the proxy (TCP only: never the backend socket).
    pub fn opts(&self, user: &str, password: &str) -> OptsBuilder {
        OptsBuilder::new()
            .ip_or_hostname(Some("127.0.0.1"))
            .tcp_port(self.port)
            .user(Some(user))
            .pass(Some(password))
            .prefer_socket(false)
            .max_allowed_packet(Some(64 * 1024 * 1024))
            .tcp_connect_timeout(Some(Duration::from_secs(10)))
            .read_timeout(Some(Duration::from_secs(120)))
            .write_timeout(Some(Duration::from_secs(120)))
    }

    pub fn app_opts(&self) -> OptsBuilder {
        self.opts(APP_USER, APP_PASSWORD)
    }

    pub fn connect(&self, opts: OptsBuilder) -> mysql::Result<Conn> {
        Conn::new(opts)
    }

    /// A connection as `app`; panics with ringgate's stderr on failure.
    pub fn connect_app(&self) -> Conn {
        match Conn::new(self.app_opts()) {
            Ok(c) => c,
            Err(e) => panic!(
                "connect as app through ringgate on port {}: {e}\n--- ringgate stderr ---\n{}",
                self.port,
                tail(&self.stderr(), 60)
            ),
        }
    }

    pub fn metrics(&self) -> Metrics {
        match http_get(self.metrics_port, "/metrics") {
            Ok((200, body)) => Metrics::parse(&body),
            Ok((code, body)) => panic!("GET /metrics -> {code}: {body}"),
            Err(e) => panic!(
                "GET /metrics on port {}: {e}\n--- ringgate stderr ---\n{}",
                self.metrics_port,
                tail(&self.stderr(), 60)
            ),
        }
    }

    /// Current `ringgate_client_connections_total`: take it before a scenario, and pass it to
    /// [`Proxy::assert_settled`] afterwards.
    pub fn connections_total(&self) -> f64 {
        self.metrics().get("ringgate_client_connections_total")
    }

    /// Waits (bounded) until the proxy is idle and its buffer accounting adds up, then
    /// asserts that at least `min_new_connections` client connections went through it since
    /// `baseline_connections_total`. Panics with the metrics and stderr otherwise.
    pub fn assert_settled(&mut self, baseline_connections_total: f64, min_new_connections: u64) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            self.assert_running();
            let m = self.metrics();
            let problems =
                self.settle_problems(&m, baseline_connections_total, min_new_connections);
            if problems.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "ringgate ({} mode) did not settle within {:?}:\n  - {}\n--- metrics ---\n{}\n--- ringgate stderr (tail) ---\n{}",
                    self.opts.mode.as_str(),
                    SETTLE_TIMEOUT,
                    problems.join("\n  - "),
                    m.dump(),
                    tail(&self.stderr(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn settle_problems(&self, m: &Metrics, baseline: f64, min_new: u64) -> Vec<String> {
        let mut p = Vec::new();
        let client_in_use = m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#);
        let backend_in_use = m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#);
        let idle = m.get(r#"ringgate_backend_connections{state="idle"}"#);
        let busy = m.get(r#"ringgate_backend_connections{state="busy"}"#);
        let clients = m.get("ringgate_client_connections");
        let total_conns = m.get("ringgate_client_connections_total");
        let fallbacks = m.get("ringgate_read_buffer_heap_fallbacks_total");

        if client_in_use != 0.0 {
            p.push(format!(
                "read_buffers_in_use{{owner=\"client\"}} = {client_in_use}, want 0"
            ));
        }
        if busy != 0.0 {
            p.push(format!(
                "backend_connections{{state=\"busy\"}} = {busy}, want 0"
            ));
        }
        // Ring mode: a connection holds its own buffer only while it uses it, so an idle
        // backend connection holds none; nor does fixed mode's (it waits with a poll) unless
        // --hold-idle-slots keeps the slot for the connection's life.
        let holds = self.opts.mode == Mode::Heap
            || (self.opts.mode == Mode::Fixed
                && self
                    .opts
                    .extra_args
                    .iter()
                    .any(|a| a == "--hold-idle-slots"));
        let backend_want = if holds { idle + busy } else { 0.0 };
        if backend_in_use != backend_want {
            p.push(format!(
                "read_buffers_in_use{{owner=\"backend\"}} = {backend_in_use}, want {backend_want} \
                 (idle+busy = {})",
                idle + busy
            ));
        }
        if clients != 0.0 {
            p.push(format!("client_connections = {clients}, want 0"));
        }
        // Every client's direct descriptor was closed (IORING_OP_CLOSE): the metric and
        // the kernel's own view of the rings' file tables agree that none is left.
        let direct = m.get("ringgate_direct_descriptors_in_use");
        if direct != 0.0 {
            p.push(format!("direct_descriptors_in_use = {direct}, want 0"));
        }
        let files = io_uring_user_files(self.child.id());
        if files.iter().any(|(_, n)| *n != 0) {
            p.push(format!(
                "io_uring file tables still hold sockets (fd, slots in use): {files:?}, want none"
            ));
        }
        // Large-result buffers are held only while a large result is relayed.
        let large = m.get("ringgate_read_buffer_large_in_use");
        if large != 0.0 {
            p.push(format!("read_buffer_large_in_use = {large}, want 0"));
        }
        if total_conns - baseline < min_new as f64 {
            p.push(format!(
                "client_connections_total grew by {} (from {baseline} to {total_conns}), want >= {min_new}: \
                 did the traffic go through the proxy?",
                total_conns - baseline
            ));
        }
        match self.opts.mode {
            Mode::Fixed => {
                let total = m.get(r#"ringgate_read_buffers_total{mode="fixed"}"#);
                let free = m.get("ringgate_read_buffers_free");
                if total <= 0.0 {
                    p.push(format!(
                        "read_buffers_total{{mode=\"fixed\"}} = {total}, want > 0"
                    ));
                }
                if free > total {
                    p.push(format!("read_buffers_free = {free} > total = {total}"));
                }
                // in_use counts slots and fallback heap buffers alike, so the heap buffers held
                // now are in_use - (total - free): never negative (a slot neither free nor held
                // leaked) and never more than the fallbacks that ever happened (a slot freed
                // twice). With no fallback that is exactly free + in_use == total.
                let heap_held = client_in_use + backend_in_use - (total - free);
                if heap_held < 0.0 || heap_held > fallbacks {
                    p.push(format!(
                        "free ({free}) + in_use client ({client_in_use}) + in_use backend \
                         ({backend_in_use}) - total ({total}) = {heap_held} heap buffers held, \
                         want 0..={fallbacks} (heap fallbacks so far)"
                    ));
                }
            }
            Mode::Heap => {
                let total = m.get(r#"ringgate_read_buffers_total{mode="heap"}"#);
                if total != 0.0 {
                    p.push(format!(
                        "read_buffers_total{{mode=\"heap\"}} = {total}, want 0"
                    ));
                }
            }
            Mode::Ring => {
                // Every ring buffer is back: none holds bytes once the proxy is idle.
                let ring = m.get("ringgate_read_buffer_ring_buffers");
                let in_use = m.get("ringgate_read_buffer_ring_in_use");
                if ring <= 0.0 {
                    p.push(format!(
                        "read_buffer_ring_buffers = {ring}, want > 0 (did ring mode fall back?)"
                    ));
                }
                if in_use != 0.0 {
                    p.push(format!("read_buffer_ring_in_use = {in_use}, want 0"));
                }
            }
        }
        p
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- ringgate ({} mode, port {}, metrics {}) stderr tail ---\n{}",
                self.opts.mode.as_str(),
                self.port,
                self.metrics_port,
                tail(&self.stderr(), 60)
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// HTTP + Prometheus text format
// ---------------------------------------------------------------------------------------------

/// A minimal HTTP/1.0 GET against 127.0.0.1:port; returns (status, body).
pub fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = match text.find("\r\n\r\n") {
        Some(i) => (&text[..i], &text[i + 4..]),
        None => return Err(format!("malformed HTTP response: {text:?}")),
    };
    let status_line = head.lines().next().unwrap_or("");
    let code = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("malformed status line {status_line:?}"))?;
    Ok((code, body.to_string()))
}

/// Samples of a Prometheus text exposition, keyed by `name` or `name{k="v",...}` with the
/// labels sorted by name.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub samples: BTreeMap<String, f64>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some((key, value)) = parse_sample(line) {
                samples.insert(key, value);
            }
        }
        Metrics { samples }
    }

    pub fn try_get(&self, key: &str) -> Option<f64> {
        self.samples.get(&normalize_key(key)).copied()
    }

    /// The value of `key` (`name` or `name{label="v"}`); panics listing what exists if absent.
    pub fn get(&self, key: &str) -> f64 {
        match self.try_get(key) {
            Some(v) => v,
            None => panic!("metric {key} not found; ringgate exports:\n{}", self.dump()),
        }
    }

    pub fn dump(&self) -> String {
        self.samples
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

fn parse_sample(line: &str) -> Option<(String, f64)> {
    if let Some(open) = line.find('{') {
        // Find the closing brace outside quoted label values.
        let bytes = line.as_bytes();
        let mut i = open + 1;
        let mut in_quotes = false;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if in_quotes => i += 1,
                b'"' => in_quotes = !in_quotes,
                b'}' if !in_quotes => break,
                _ => {}
            }
            i += 1;
        }
        if i >= bytes.len() {
            return None;
        }
        let key = normalize_key(&line[..=i]);
        let value = line[i + 1..].split_whitespace().next()?;
        Some((key, parse_value(value)?))
    } else {
        let mut it = line.split_whitespace();
        let name = it.next()?;
        let value = it.next()?;
        Some((name.to_string(), parse_value(value)?))
    }
}

/// `name{b="2",a="1"}` -> `name{a="1",b="2"}`; `name{}` -> `name`.
fn normalize_key(key: &str) -> String {
    let key = key.trim();
    let Some(open) = key.find('{') else {
        return key.to_string();
    };
    let name = key[..open].trim();
    let inner = key[open + 1..].trim_end_matches('}');
    let mut labels: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    let mut escaped = false;
    for c in inner.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' if in_quotes => {
                cur.push(c);
                escaped = true;
            }
            '"' => {
                in_quotes = !in_quotes;
                cur.push(c);
            }
            ',' if !in_quotes => {
                if !cur.trim().is_empty() {
                    labels.push(cur.trim().to_string());
                }
                cur.clear();
            }
            _ => cur.push(c),
        }
    }
    if !cur.trim().is_empty() {
        labels.push(cur.trim().to_string());
    }
    // `k = "v"` -> `k="v"`
    let mut labels: Vec<String> = labels
        .into_iter()
        .map(|l| match l.split_once('=') {
            Some((k, v)) => format!("{}={}", k.trim(), v.trim()),
            None => l,
        })
        .collect();
    labels.sort();
    if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{}}}", labels.join(","))
    }
}

// ---------------------------------------------------------------------------------------------
// io_uring fdinfo
// ---------------------------------------------------------------------------------------------

/// For every io_uring fd of `pid`: (fd, number of registered buffers from its `UserBufs:` line).
pub fn io_uring_user_bufs(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    for e in entries.flatten() {
        let fd = e.file_name().to_string_lossy().into_owned();
        let link = fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let Ok(info) = fs::read_to_string(e.path()) else {
            continue;
        };
        let is_ring = link.contains("io_uring") || info.contains("UserBufs:");
        if !is_ring {
            continue;
        }
        let bufs = info
            .lines()
            .find_map(|l| l.trim().strip_prefix("UserBufs:"))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(n) = bufs {
            out.push((fd, n));
        }
    }
    out.sort();
    out
}

/// For every io_uring fd of `pid` with a registered file table: (fd, slots of it that hold a
/// file). fdinfo lists `UserFiles: N` (the table size) and then one `i: name` line per
/// occupied slot, before `UserBufs:`.
pub fn io_uring_user_files(pid: u32) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    for e in entries.flatten() {
        let fd = e.file_name().to_string_lossy().into_owned();
        let Ok(info) = fs::read_to_string(e.path()) else {
            continue;
        };
        let mut lines = info
            .lines()
            .skip_while(|l| !l.trim().starts_with("UserFiles:"));
        if lines.next().is_none() {
            continue;
        }
        let held = lines
            .take_while(|l| !l.trim().starts_with("UserBufs:"))
            .filter(|l| l.contains(": "))
            .count();
        out.push((fd, held));
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// Misc
// ---------------------------------------------------------------------------------------------

/// The server error code of a mysql crate error, if it is one.
pub fn mysql_error_code(e: &mysql::Error) -> Option<u16> {
    match e {
        mysql::Error::MySqlError(me) => Some(me.code),
        _ => None,
    }
}

pub fn mysql_error_message(e: &mysql::Error) -> Option<String> {
    match e {
        mysql::Error::MySqlError(me) => Some(me.message.clone()),
        _ => None,
    }
}

/// Generates `mod $name { #[test] fn fixed(); #[test] fn heap(); #[test] fn ring(); }`, each calling the
/// scenario function `$scenario(Mode)` defined next to the macro call.
/// Use with `#[macro_use] mod common;`.
macro_rules! both_modes {
    ($name:ident, $scenario:ident) => {
        mod $name {
            #[test]
            fn fixed() {
                super::$scenario($crate::common::Mode::Fixed)
            }
            #[test]
            fn heap() {
                super::$scenario($crate::common::Mode::Heap)
            }
            #[test]
            fn ring() {
                super::$scenario($crate::common::Mode::Ring)
            }
        }
    };
}

/// A `mysql` crate connection straight to the sandbox, as the backend user, in the test schema
/// (setup and comparisons that must not go through the proxy).
pub fn direct_conn() -> Conn {
    let b = backend_env();
    let opts = OptsBuilder::new()
        .ip_or_hostname(Some(b.host.clone()))
        .tcp_port(b.port)
        .user(Some(b.user.clone()))
        .pass(Some(b.password.clone()))
        .db_name(Some(TEST_DB))
        .prefer_socket(false)
        .read_timeout(Some(Duration::from_secs(30)));
    Conn::new(opts).expect("direct connection to the sandbox")
}

//! The real `ringgate` binary on free ports in front of a MariaDB: started with flags, ready
//! once it says so and serves metrics, its stderr kept (and its tail printed when a test
//! fails), killed and reaped on drop.

mod opts;
mod settle;

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mysql::{Conn, OptsBuilder};

pub use opts::{Mode, ProxyOpts};
pub use settle::SETTLE_TIMEOUT;

use crate::env::{backend_env, free_port, ringgate_bin, scratch_dir, BackendEnv};
use crate::env::{APP_PASSWORD, APP_USER};
use crate::prometheus::Metrics;
use crate::{http, tail};

/// How long the proxy gets to come up.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

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
        let args = opts.args(backend, port, metrics_port);
        let mut cmd = match opts.wrapper.split_first() {
            None => Command::new(&bin),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&bin);
                c
            }
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
                proxy.kill();
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
        let listen = SocketAddr::from(([127, 0, 0, 1], self.port));
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
                match http::get(self.metrics_addr(), "/metrics") {
                    Ok((200, _)) => return Ok(()),
                    Ok((code, body)) => last = format!("GET /metrics -> {code}: {body}"),
                    Err(e) => last = format!("GET /metrics: {e}"),
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "ringgate not ready within {READY_TIMEOUT:?} (last: {last})"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn metrics_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.metrics_port))
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

    /// The metrics endpoint now; panics with ringgate's stderr when it does not answer 200.
    pub fn metrics(&self) -> Metrics {
        match http::get(self.metrics_addr(), "/metrics") {
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

/// A `mysql` crate connection through the proxy with short timeouts: 5 s to connect, 30 s to
/// read or write.
pub fn quick_opts(p: &Proxy) -> OptsBuilder {
    p.app_opts()
        .tcp_connect_timeout(Some(Duration::from_secs(5)))
        .read_timeout(Some(Duration::from_secs(30)))
        .write_timeout(Some(Duration::from_secs(30)))
}

/// Waits until `f` holds, polling every 50 ms; panics with `what`, the metrics and the proxy's
/// stderr otherwise.
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

/// How many lines of ringgate's stderr contain `needle`.
pub fn log_count(p: &Proxy, needle: &str) -> usize {
    p.stderr().lines().filter(|l| l.contains(needle)).count()
}

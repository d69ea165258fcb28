//! What one ringgate process runs with, and the command line that says it.

use std::path::PathBuf;

use crate::env::{users_file, BackendEnv};

/// The read-buffer mode (`--read-buffers`).
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

    /// The defaults in `mode`, with `extra` appended to ringgate's arguments.
    pub fn with_args(mode: Mode, extra: &[&str]) -> Self {
        let mut o = ProxyOpts::new(mode);
        o.extra_args = extra.iter().map(|s| s.to_string()).collect();
        o
    }

    /// Whether an idle backend connection holds a read buffer: always in heap mode, in fixed
    /// mode only with --hold-idle-slots (it otherwise waits with a poll), never in ring mode
    /// (a connection holds a ring buffer only while it uses it).
    pub fn idle_backends_hold_buffers(&self) -> bool {
        self.mode == Mode::Heap
            || (self.mode == Mode::Fixed
                && self.extra_args.iter().any(|a| a == "--hold-idle-slots"))
    }

    /// ringgate's arguments: listening on `port` and serving metrics on `metrics_port`, in front
    /// of `backend`.
    pub fn args(&self, backend: &BackendEnv, port: u16, metrics_port: u16) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--workers".into(),
            self.workers.to_string(),
            "--backend".into(),
            backend.addr(),
            "--users-file".into(),
            self.users_file.display().to_string(),
            "--read-buffers".into(),
            self.mode.as_str().into(),
            "--read-buffer-size".into(),
            self.read_buffer_size.to_string(),
            "--read-buffer-count".into(),
            self.read_buffer_count.to_string(),
            "--max-connections".into(),
            self.max_connections.to_string(),
            "--backend-pool-size".into(),
            self.backend_pool_size.to_string(),
            "--backend-max-connections".into(),
            self.backend_max_connections.to_string(),
            "--backend-wait-timeout".into(),
            self.backend_wait_timeout.into(),
            "--metrics-listen".into(),
            format!("127.0.0.1:{metrics_port}"),
        ];
        if self.allow_local_infile {
            args.push("--allow-local-infile".into());
        }
        if self.passthrough {
            args.extend(["--backend-identity".into(), "passthrough".into()]);
        } else {
            args.extend([
                "--backend-identity".into(),
                "shared".into(),
                "--backend-user".into(),
                backend.user.clone(),
            ]);
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

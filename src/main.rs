//! The `ringgate` binary: parse flags and the `--config` file, then either
//! print the effective config (`--print-config`), run the preflight report
//! (`ringgate check`), or load users, start the metrics endpoint and the
//! workers, reload users on SIGHUP, drain on SIGTERM/SIGINT, report at exit.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use ringgate::config::{Config, ReadBufferMode};
use ringgate::config_file::{self, Action, CliError};
use ringgate::metrics::{self, BufferMode, Metrics};
use ringgate::mysql::Users;
use ringgate::proxy::{worker, Shared};
use ringgate::{check, logging};

fn main() -> ExitCode {
    let inv = match config_file::parse(std::env::args_os()) {
        Ok(inv) => inv,
        Err(CliError::Clap(e)) => e.exit(),
        Err(CliError::File(msg)) => {
            eprintln!("ringgate: error: {msg}");
            return ExitCode::from(2);
        }
    };
    match inv.action {
        Action::PrintConfig => {
            print!("{}", inv.render_config());
            return ExitCode::SUCCESS;
        }
        Action::Check => {
            let report = check::run(&inv.config);
            print!("{}", report.render());
            return if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Action::Run => {}
    }
    let config = inv.config;
    let warning = logging::init(&config.log_level, config.log_format);
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    if let Some(path) = &inv.config_path {
        tracing::info!(config = %path.display(), "configuration file loaded");
    }
    raise_nofile_limit();
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            tracing::error!("{msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: Config) -> Result<(), String> {
    let users = Users::load(&config.users_file).map_err(|e| format!("cannot start: {e}"))?;
    let workers = config.worker_count();
    let requested = match config.read_buffers {
        ReadBufferMode::Fixed => BufferMode::Fixed,
        ReadBufferMode::Heap => BufferMode::Heap,
    };
    let metrics = Metrics::new(workers, requested);
    if let Some(addr) = config.metrics_listen {
        let (bound, _handle) =
            metrics::serve(addr, Arc::clone(&metrics)).map_err(|e| format!("cannot start: {e}"))?;
        tracing::info!("metrics at http://{bound}/metrics");
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&shutdown))
            .map_err(|e| format!("cannot install signal handler: {e}"))?;
    }
    // Installed before the workers start, so an early SIGHUP cannot kill us
    // (its default action is to terminate).
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))
        .map_err(|e| format!("cannot install signal handler: {e}"))?;
    let shared = Arc::new(Shared {
        config: config.clone(),
        metrics: Arc::clone(&metrics),
        users: RwLock::new(Arc::new(users)),
        clients: AtomicUsize::new(0),
        backends: AtomicUsize::new(0),
        shutdown: AtomicBool::new(false),
    });
    let started = worker::spawn_workers(Arc::clone(&shared), workers).map_err(|e| e.to_string())?;

    let first = &started[0].1;
    if let Some(cause) = started.iter().find_map(|(_, s)| s.fallback.clone()) {
        tracing::warn!("fixed read buffers unavailable, running with --read-buffers heap: {cause}");
    }
    let mode = if started.iter().all(|(_, s)| s.mode == BufferMode::Fixed) {
        BufferMode::Fixed
    } else {
        BufferMode::Heap
    };
    metrics.set_mode(mode);
    tracing::info!(
        listen = %config.listen,
        backend = %config.backend,
        workers,
        read_buffers = %mode,
        slots_per_worker = if mode == BufferMode::Fixed { config.read_buffer_count } else { 0 },
        slot_bytes = config.read_buffer_size,
        "ringgate started; io_uring: {}",
        first.features
    );

    // The workers poll Shared::shutdown on their tick; forward the signal.
    let handles: Vec<_> = started.into_iter().map(|(h, _)| h).collect();
    while !handles.iter().all(|h| h.is_finished()) {
        if shutdown.load(Ordering::Relaxed) {
            shared.shutdown.store(true, Ordering::Relaxed);
        }
        if reload.swap(false, Ordering::Relaxed) {
            reload_users(&shared);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut failed = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e.to_string()),
            Err(_) => failed = Some("a worker thread panicked".into()),
        }
    }
    let snap = metrics.snapshot();
    tracing::info!("stopped: {snap}");
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// SIGHUP: load the users file again and swap it in whole. Workers read
/// `Shared::users` once per login, so new logins see the new set at once and
/// sessions already logged in are untouched. A file that does not load is
/// refused and the old users stay.
fn reload_users(shared: &Shared) {
    let path = &shared.config.users_file;
    let old = shared.users().len();
    match Users::load(path) {
        Ok(users) => {
            let n = users.len();
            let new = Arc::new(users);
            match shared.users.write() {
                Ok(mut g) => *g = new,
                Err(poisoned) => *poisoned.into_inner() = new,
            }
            tracing::info!(
                users_file = %path.display(),
                "SIGHUP: users file reloaded: {n} user(s) (was {old})"
            );
        }
        Err(e) => tracing::error!(
            "SIGHUP: users file reload refused, keeping the {old} user(s) loaded before: {e}"
        ),
    }
}

/// Raise the soft fd limit to the hard limit: every client and backend
/// connection is an fd, and the usual soft default (1024) is far below
/// `--max-connections`. `ringgate check` assumes this.
fn raise_nofile_limit() {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 || rl.rlim_cur >= rl.rlim_max {
        return;
    }
    let before = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    // SAFETY: setrlimit only reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } == 0 {
        tracing::debug!("raised the soft fd limit from {before} to {}", rl.rlim_max);
    }
}

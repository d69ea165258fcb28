//! The `ringgate` binary: parse flags, load users, start the metrics
//! endpoint and the workers, wait for SIGTERM/SIGINT, report at exit.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use clap::Parser;
use tracing_subscriber::EnvFilter;

use ringgate::config::{Config, ReadBufferMode};
use ringgate::metrics::{self, BufferMode, Metrics};
use ringgate::mysql::Users;
use ringgate::proxy::{worker, Shared};

fn main() -> ExitCode {
    let config = Config::parse();
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
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

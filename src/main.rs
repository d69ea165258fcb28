//! The `ringgate` binary: parse flags and the `--config` file, then either
//! print the effective config (`--print-config`), run the preflight report
//! (`ringgate check`), or load users, start the metrics endpoint and the
//! workers, reload users on SIGHUP, drain on SIGTERM/SIGINT, report at exit.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use metrics::{BufferMode, Metrics};
use ringgate::config::{BackendIdentity, BackendTls, Config, ReadBufferMode};
use ringgate::config_file::{self, Action, CliError};
use ringgate::proxy::{switchover, worker, Shared};
use ringgate::tls::TlsState;
use ringgate::{check, listen_guard, logging};
use wire::sha2_rsa::{RsaPrivate, RsaPublic};
use wire::Users;

fn main() -> ExitCode {
    let inv = match config_file::parse(std::env::args_os()) {
        Ok(inv) => inv,
        Err(CliError::Clap(e)) => e.exit(),
        Err(CliError::File(msg) | CliError::Conflict(msg)) => {
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
    if let Some(old) = inv.read_buffer_resized {
        tracing::info!(
            "TLS: --read-buffer-size {} instead of the default {old}, so a whole TLS record \
             fits in a read buffer (give --read-buffer-size to choose; 24576 is the least TLS takes)",
            config.read_buffer_size
        );
    }
    if inv.renamed_flag {
        tracing::warn!(
            "{} is now --tx-prepared-statements move, the default (--tx-prepared-statements pin \
             pins instead); the old flag will be removed",
            ringgate::config::RENAMED_TX_MOVE_FLAG
        );
    }
    raise_nofile_limit(&config);
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Start(msg)) => {
            tracing::error!("{msg}");
            ExitCode::FAILURE
        }
        // Already logged, one ERROR line per failed worker.
        Err(RunError::WorkerFailed) => ExitCode::FAILURE,
    }
}

/// Why `run` ended badly.
enum RunError {
    /// Start-up failed; the message is logged by `main`.
    Start(String),
    /// A worker failed while running; `watch_workers` logged it.
    WorkerFailed,
}

impl From<String> for RunError {
    fn from(msg: String) -> Self {
        RunError::Start(msg)
    }
}

fn run(config: Config) -> Result<(), RunError> {
    // Before anything binds: a second ringgate on the same port would
    // otherwise share it silently (SO_REUSEPORT).
    if let Some(warning) = listen_guard::check_listen(config.listen, config.reuse_port_handover)? {
        tracing::warn!("{warning}");
    }
    if let Some(warning) = ringgate::sockopt::user_timeout_warning(&config) {
        tracing::warn!("{warning}");
    }
    let users = Users::load(&config.users_file).map_err(|e| format!("cannot start: {e}"))?;
    if config.backend_identity == BackendIdentity::Shared && users.has_backend_mappings() {
        tracing::warn!(
            "{} maps users to backend accounts (BackendUser/BackendPassword), which \
             --backend-identity shared ignores: every client runs as --backend-user",
            config.users_file.display()
        );
    }
    let backend_tls = backend_tls_config(&config)?;
    let rsa_key = match &config.rsa_key {
        Some(path) => Some(Arc::new(
            RsaPrivate::load(path).map_err(|e| format!("cannot start: --rsa-key: {e}"))?,
        )),
        None => None,
    };
    let backend_rsa_public_key = match &config.backend_rsa_public_key {
        Some(path) => {
            Some(Arc::new(RsaPublic::load(path).map_err(|e| {
                format!("cannot start: --backend-rsa-public-key: {e}")
            })?))
        }
        None => None,
    };
    let tls = match config
        .tls_files()
        .map_err(|e| format!("cannot start: {e}"))?
    {
        Some(files) => {
            let state = TlsState::load(files).map_err(|e| format!("cannot start: {e}"))?;
            tracing::info!(
                tls_cert = %state.files.cert.display(),
                client_certificates = state.files.client_ca.is_some(),
                require_secure_transport = config.require_secure_transport,
                "front-end TLS on (TLS 1.3 and 1.2)"
            );
            Some(state)
        }
        None => None,
    };
    let workers = config.worker_count();
    let requested = match config.read_buffers {
        ReadBufferMode::Fixed => BufferMode::Fixed,
        ReadBufferMode::Heap => BufferMode::Heap,
        ReadBufferMode::Ring => BufferMode::Ring,
    };
    let metrics = Metrics::new(workers, requested);
    if let Some(addr) = config.metrics_listen {
        let (bound, _handle) = ringgate::metrics_endpoint::serve(addr, Arc::clone(&metrics))
            .map_err(|e| format!("cannot start: {e}"))?;
        tracing::info!("metrics at http://{bound}/metrics");
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&shutdown))
            .map_err(|e| format!("cannot install signal handler: {e}"))?;
    }
    // One monitor for the process; the workers follow its writer.
    let cluster = ringgate::monitor::spawn(
        &config,
        backend_rsa_public_key.clone(),
        Arc::clone(&metrics),
        Arc::clone(&shutdown),
    )?;
    // Installed before the workers start, so an early SIGHUP cannot kill us
    // (its default action is to terminate).
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))
        .map_err(|e| format!("cannot install signal handler: {e}"))?;
    // SIGUSR1 / SIGUSR2: begin / end a switchover hold (its default action
    // would terminate too).
    let hold = [
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    ];
    for (sig, flag) in [signal_hook::consts::SIGUSR1, signal_hook::consts::SIGUSR2]
        .into_iter()
        .zip(&hold)
    {
        signal_hook::flag::register(sig, Arc::clone(flag))
            .map_err(|e| format!("cannot install signal handler: {e}"))?;
    }
    if config.backends.len() > 1 {
        // Per-server pool sizes (ringgate_server_backend_connections).
        metrics.servers().init_pooled(
            config
                .backends
                .iter()
                .map(|b| b.address.to_string())
                .collect(),
        );
    }
    log_read_write_split(&config, &metrics);
    let shared = Arc::new(Shared {
        config: config.clone(),
        metrics: Arc::clone(&metrics),
        users: RwLock::new(Arc::new(users)),
        clients: AtomicUsize::new(0),
        backends: Arc::new(ringgate::proxy::BackendShare::new(workers)),
        cluster,
        switchover: Default::default(),
        shutdown: AtomicBool::new(false),
        registry: Arc::new(machines::registry::Registry::new(uring::sys::shutdown_fd)),
        rsa_key,
        backend_rsa_public_key,
        tls,
        backend_tls,
        // Leaked once: the process's configuration, read by every lexing.
        read_only_functions: Box::leak(
            ringgate::config::read_only_function_list(&config.read_only_functions)
                .into_boxed_slice(),
        ),
        server_addrs: config.backends.iter().map(|b| b.address).collect(),
        causal: machines::causal::CausalConfig::new(config.causal_reads.mode()),
    });
    // Each user is itself on the backend: a KILL of another user's session
    // goes to the server, whose own privilege checks decide (CONNECTION
    // ADMIN / SUPER). With one shared account the server cannot tell users
    // apart, so the proxy refuses it itself.
    shared
        .registry
        .set_server_checks_owner(config.backend_identity == BackendIdentity::Passthrough);
    let started = worker::spawn_workers(Arc::clone(&shared), workers).map_err(|e| e.to_string())?;

    let first = &started[0].1;
    if let Some(cause) = started.iter().find_map(|(_, s)| s.ring_fallback.clone()) {
        tracing::warn!("read-buffer ring unavailable, running with --read-buffers fixed: {cause}");
    }
    if let Some(cause) = started.iter().find_map(|(_, s)| s.ring_fd_fallback.clone()) {
        tracing::warn!(
            "io_uring ring fd not registered, every io_uring_enter looks the fd up: {cause} \
             (IORING_REGISTER_RING_FDS needs Linux 5.18)"
        );
    }
    if let Some(cause) = started.iter().find_map(|(_, s)| s.direct_fallback.clone()) {
        tracing::warn!(
            "direct descriptors unavailable, clients are accepted as plain fds: {cause} \
             (--direct-descriptors off silences this)"
        );
    }
    if let Some(cause) = started.iter().find_map(|(_, s)| s.fallback.clone()) {
        tracing::warn!("fixed read buffers unavailable, running with --read-buffers heap: {cause}");
    }
    // The effective mode: the least any worker got (each falls back alone).
    let mode = if started.iter().all(|(_, s)| s.mode == BufferMode::Ring) {
        BufferMode::Ring
    } else if started.iter().all(|(_, s)| s.mode == BufferMode::Fixed) {
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
        slots_per_worker = if mode == BufferMode::Heap { 0 } else { config.read_buffer_count },
        slot_bytes = config.read_buffer_size,
        direct_descriptor_slots = first.direct_slots,
        "ringgate started; io_uring: {}",
        first.features
    );

    #[allow(unused_mut)] // mutated only by the debug-build fault injection
    let mut handles: Vec<Option<WorkerHandle>> =
        started.into_iter().map(|(h, _)| Some(h)).collect();
    #[cfg(debug_assertions)]
    debug_fault::inject(&mut handles);
    let failed = watch_workers(handles, &shared, &shutdown, &reload, &hold);
    let snap = metrics.snapshot();
    tracing::info!("stopped: {snap}");
    if failed {
        Err(RunError::WorkerFailed)
    } else {
        Ok(())
    }
}

type WorkerHandle = std::thread::JoinHandle<Result<(), worker::WorkerError>>;

/// The main thread's loop until every worker has ended: forwards SIGTERM/
/// SIGINT to the workers (they poll `Shared::shutdown` on their tick),
/// reloads users on SIGHUP, and joins each worker as soon as it ends.
///
/// A worker that ends before shutdown was asked for (an error from its
/// ring, a panic) leaves a proxy that still accepts on the other workers'
/// listeners but has lost a share of its sessions and capacity. Rather than
/// run on half-dead, ringgate logs one ERROR line naming the worker and the
/// cause, drains the other workers as on SIGTERM (their listeners close at
/// once), and exits non-zero so that the service manager restarts it.
/// Returns whether a worker failed.
fn watch_workers(
    mut handles: Vec<Option<WorkerHandle>>,
    shared: &Shared,
    shutdown: &AtomicBool,
    reload: &AtomicBool,
    hold: &[Arc<AtomicBool>; 2],
) -> bool {
    let mut failed = false;
    loop {
        if shutdown.load(Ordering::Relaxed) {
            shared.shutdown.store(true, Ordering::Relaxed);
        }
        if reload.swap(false, Ordering::Relaxed) {
            reload_users(shared);
            reload_tls(shared);
        }
        if hold[0].swap(false, Ordering::Relaxed) {
            // No longer than a waiting client may wait.
            let cfg = &shared.config;
            let timeout = cfg.switchover_hold_timeout.min(cfg.backend_wait_timeout);
            switchover::begin(shared, timeout);
        }
        if hold[1].swap(false, Ordering::Relaxed) {
            switchover::end(shared);
        }
        switchover::watch(shared);
        for (id, slot) in handles.iter_mut().enumerate() {
            if !slot.as_ref().is_some_and(|h| h.is_finished()) {
                continue;
            }
            let Some(handle) = slot.take() else { continue };
            let asked_to_stop = shared.shutdown.load(Ordering::Relaxed);
            let cause = match handle.join() {
                Ok(Ok(())) if asked_to_stop => continue,
                Ok(Ok(())) => "its loop returned without being asked to stop".to_owned(),
                Ok(Err(e)) => e.to_string(),
                Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
            };
            failed = true;
            tracing::error!(
                worker = id,
                "worker {id} (ringgate-w{id}) failed: {cause}; draining the other workers and \
                 exiting non-zero so that the service manager restarts ringgate"
            );
            shared.shutdown.store(true, Ordering::Relaxed);
        }
        if handles.iter().all(Option::is_none) {
            return failed;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Test-only fault injection, compiled into debug builds only (release
/// builds, the ones deployed, do not contain it): with
/// `RINGGATE_DEBUG_WORKER_FAIL_AFTER_MS=N`, worker 0's handle is replaced by
/// a thread that fails after N ms with the error a worker's `run()` returns
/// when `io_uring_enter` fails. The real worker 0 keeps running and is drained
/// with the others. `tests/operations.rs` uses it to prove that a failed
/// worker stops the process with a non-zero exit.
#[cfg(debug_assertions)]
mod debug_fault {
    use super::WorkerHandle;
    use ringgate::proxy::worker::WorkerError;
    use uring::ring::RingError;

    pub const ENV: &str = "RINGGATE_DEBUG_WORKER_FAIL_AFTER_MS";

    pub fn inject(handles: &mut [Option<WorkerHandle>]) {
        let Some(ms) = std::env::var(ENV).ok().and_then(|v| v.parse::<u64>().ok()) else {
            return;
        };
        let Some(slot) = handles.first_mut() else {
            return;
        };
        tracing::warn!("{ENV}={ms}: worker 0 will be reported failed after {ms} ms (test only)");
        let fake = std::thread::Builder::new()
            .name("ringgate-w0-fault".into())
            .spawn(move || -> Result<(), WorkerError> {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Err(WorkerError::Ring(RingError::Enter(std::io::Error::other(
                    format!("injected by {ENV}"),
                ))))
            });
        match fake {
            // The real worker 0 is detached; shutdown still reaches it.
            Ok(h) => *slot = Some(h),
            Err(e) => tracing::warn!("{ENV}: cannot spawn the fault thread: {e}"),
        }
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

/// SIGHUP: load the TLS certificate and key again. New TLS sessions get the
/// new ones; sessions already running keep theirs. Files that do not load
/// are refused (one line, with the cause) and the old ones stay.
fn reload_tls(shared: &Shared) {
    let Some(tls) = shared.tls.as_ref() else {
        return;
    };
    match tls.reload() {
        Ok(()) => tracing::info!(
            tls_cert = %tls.files.cert.display(),
            "SIGHUP: TLS certificate and key reloaded"
        ),
        Err(e) => tracing::error!(
            "SIGHUP: TLS reload refused, keeping the certificate loaded before: {e}"
        ),
    }
}

/// Raise the soft fd limit to the hard limit: every client and backend
/// connection is an fd, and the usual soft default (1024) is far below
/// `--max-connections`. `ringgate check` assumes this. A limit still below
/// what the configured connection limits need is logged once, so that
/// EMFILE under load is not the first sign of it.
fn raise_nofile_limit(cfg: &Config) {
    use uring::sys::{self, Resource};
    let Ok(mut rl) = sys::rlimit(Resource::Nofile) else {
        return;
    };
    if rl.soft < rl.hard {
        let before = rl.soft;
        rl.soft = rl.hard;
        if sys::set_rlimit(Resource::Nofile, rl).is_ok() {
            tracing::debug!("raised the soft fd limit from {before} to {}", rl.hard);
        } else {
            rl.soft = before;
        }
    }
    let need = check::fds_needed(cfg);
    if rl.soft != sys::RLIM_INFINITY && rl.soft < need {
        tracing::warn!(
            "the fd limit is {} but --max-connections {} and --backend-max-connections {} need \
             about {need}: connections beyond it fail with EMFILE; raise LimitNOFILE (systemd) \
             or the hard `ulimit -n`",
            rl.soft,
            cfg.max_connections,
            cfg.backend_max_connections
        );
    }
}

/// `--backend-tls`'s client configuration (None: disabled); a CA file that
/// does not load, or a read buffer too small for a record, stops the start.
fn backend_tls_config(
    config: &Config,
) -> Result<Option<ringgate::tls::backend_client::BackendTlsConfig>, String> {
    if config.backend_tls == BackendTls::Disabled {
        return Ok(None);
    }
    let min = ringgate::config::TLS_MIN_READ_BUFFER;
    if config.read_buffer_size < min {
        return Err(format!(
            "cannot start: --backend-tls {} needs --read-buffer-size {min} or more (is {}): \
             a whole TLS record must fit in a backend connection's read buffer",
            config.backend_tls, config.read_buffer_size
        ));
    }
    let tls = ringgate::tls::backend_client::client_config(
        config.backend_tls,
        config.backend_tls_ca.as_deref(),
        config.backend.ip(),
    )
    .map_err(|e| format!("cannot start: {e}"))?;
    if let Some(t) = &tls {
        tracing::info!(
            backend_tls = %t.mode,
            ca = ?config.backend_tls_ca,
            "backend TLS on (TLS 1.3 and 1.2)"
        );
    }
    Ok(tls)
}

/// `--read-write-split`: say once whether it is on and where reads can go,
/// and count routed statements per server from the first one.
fn log_read_write_split(config: &ringgate::config::Config, metrics: &Metrics) {
    if !config.read_write_split {
        return;
    }
    if config.pooling == ringgate::config::Pooling::Session {
        tracing::warn!(
            "--read-write-split does nothing with --pooling session: every statement goes to the writer"
        );
        return;
    }
    let replicas = config.backends.len().saturating_sub(1);
    if replicas == 0 {
        tracing::warn!(
            "--read-write-split with one --backend: there is no replica, every statement goes to it"
        );
    }
    metrics.servers().init_routed(
        config
            .backends
            .iter()
            .map(|b| b.address.to_string())
            .collect(),
    );
    tracing::info!(
        servers = config.backends.len(),
        read_only_functions = %config.read_only_functions,
        "read/write split on: safe autocommit reads and READ ONLY transactions go to a replica \
         within its max-lag, by weight; everything else, and every read when none qualifies, to the writer"
    );
}

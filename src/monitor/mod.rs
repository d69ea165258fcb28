//! The cluster monitor thread: one for the process, not one per worker
//! (docs/design/monitor.md says why). Every `--monitor-interval` it checks
//! each server that is due (the writer first) through `probe.rs`, feeds
//! the results to the sans-IO [`Monitor`] machine, logs each change it
//! reports, and publishes the view (`view.rs`) and the per-server metrics.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::blocking_login::LoginTarget;
use crate::config::{BackendRole, BackendSpec, Config};
use crate::tls::backend_client::{self, BackendTlsConfig};
use machines::monitor::{ConfiguredRole, Lag, Monitor, Role, ServerStatus, Thresholds};
use metrics::{Metrics, ServerSample};
use wire::sha2_rsa::RsaPublic;

mod log;
mod probe;
mod view;

pub use view::{ClusterView, ClusterViewCell, ServerView, ViewReader};

/// The thread's name in `top -H` and panic messages.
pub const THREAD_NAME: &str = "ringgate-monitor";

/// How often the thread looks at the shutdown flag while it waits.
const WAKE: Duration = Duration::from_millis(100);

/// One server's fixed settings and kept connection.
struct Server {
    spec: BackendSpec,
    tls: Option<BackendTlsConfig>,
    probe: probe::ServerProbe,
}

/// What the thread needs from the configuration.
struct Settings {
    user: String,
    password: Vec<u8>,
    server_key: Option<Arc<RsaPublic>>,
    tls_flags: String,
    /// One check's deadline: connect, login and the probe.
    timeout: Duration,
    interval: Duration,
}

/// Starts the monitor when `--monitor-user` is set; returns the view the
/// workers will read. `shutdown` ends the thread.
pub fn spawn(
    config: &Config,
    server_key: Option<Arc<RsaPublic>>,
    metrics: Arc<Metrics>,
    shutdown: Arc<AtomicBool>,
) -> Result<Option<Arc<ClusterViewCell>>, String> {
    if config.monitor_user.is_empty() {
        return Ok(None);
    }
    let mut servers = Vec::with_capacity(config.backends.len());
    for spec in &config.backends {
        // Each server's TLS names its own address (verify-identity).
        let tls = backend_client::client_config(
            config.backend_tls,
            config.backend_tls_ca.as_deref(),
            spec.address.ip(),
        )
        .map_err(|e| format!("cannot start the monitor: {e}"))?;
        servers.push(Server {
            spec: spec.clone(),
            tls,
            probe: probe::ServerProbe::new(),
        });
    }
    let settings = Settings {
        user: config.monitor_user.clone(),
        password: config.monitor_password.as_bytes().to_vec(),
        server_key,
        tls_flags: format!("--backend-tls {}", config.backend_tls),
        timeout: config
            .backend_connect_timeout
            .min(config.monitor_interval.max(Duration::from_secs(2))),
        interval: config.monitor_interval,
    };
    let cell = ClusterViewCell::new(views(&servers, None));
    let published = Arc::clone(&cell);
    std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .spawn(move || run(servers, settings, &published, &metrics, &shutdown))
        .map_err(|e| format!("cannot start the monitor thread: {e}"))?;
    tracing::info!(
        servers = config.backends.len(),
        interval = %humantime::format_duration(config.monitor_interval),
        user = %config.monitor_user,
        "cluster monitor started"
    );
    Ok(Some(cell))
}

fn run(
    mut servers: Vec<Server>,
    settings: Settings,
    cell: &ClusterViewCell,
    metrics: &Metrics,
    shutdown: &AtomicBool,
) {
    let roles: Vec<ConfiguredRole> = servers.iter().map(|s| configured(s.spec.role)).collect();
    let mut machine = Monitor::new(&roles, Thresholds::new(settings.interval), Instant::now());
    let names: Vec<SocketAddr> = servers.iter().map(|s| s.spec.address).collect();
    while !shutdown.load(Ordering::Relaxed) {
        for i in machine.due(Instant::now()) {
            let s = &mut servers[i];
            let target = LoginTarget {
                addr: s.spec.address,
                user: &settings.user,
                password: &settings.password,
                tls: &s.tls,
                tls_flags: settings.tls_flags.clone(),
                server_key: settings.server_key.clone(),
                timeout: settings.timeout,
            };
            let started = Instant::now();
            let result = s.probe.check(&target);
            let changes = machine.on_check(i, result, started.elapsed(), Instant::now());
            log::changes(&names, &changes);
        }
        let changes = machine.settle(Instant::now());
        log::changes(&names, &changes);
        cell.publish(views(&servers, Some(&machine)));
        metrics.servers().publish(samples(&servers, &machine));
        sleep_until(machine.next_due(), shutdown);
    }
    for s in &mut servers {
        s.probe.quit();
    }
}

fn configured(role: BackendRole) -> ConfiguredRole {
    match role {
        BackendRole::Auto => ConfiguredRole::Auto,
        BackendRole::Primary => ConfiguredRole::Primary,
        BackendRole::Replica => ConfiguredRole::Replica,
    }
}

/// Sleeps to `until` in slices, so that shutdown is seen within `WAKE`.
fn sleep_until(until: Option<Instant>, shutdown: &AtomicBool) {
    let until = until.unwrap_or_else(|| Instant::now() + WAKE);
    while !shutdown.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(WAKE));
    }
}

/// The view of every server; all unknown before the first round.
fn views(servers: &[Server], machine: Option<&Monitor>) -> Vec<ServerView> {
    servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let status = machine.map(|m| (&m.servers()[i], m.writer() == Some(i)));
            ServerView {
                address: s.spec.address,
                state: status.map_or(machines::monitor::State::Down, |(st, _)| st.health.state),
                role: status.map_or(Role::Unknown, |(st, _)| st.role),
                writer: status.is_some_and(|(_, w)| w),
                lag: status.map_or(Lag::default(), |(st, _)| st.lag.clone()),
                weight: s.spec.weight,
                max_lag: s.spec.max_lag,
            }
        })
        .collect()
}

fn samples(servers: &[Server], machine: &Monitor) -> Vec<ServerSample> {
    servers
        .iter()
        .zip(machine.servers())
        .enumerate()
        .map(|(i, (s, st))| sample(s.spec.address, st, machine.writer() == Some(i)))
        .collect()
}

fn sample(address: SocketAddr, st: &ServerStatus, writer: bool) -> ServerSample {
    let replica = st.role == Role::Replica;
    ServerSample {
        server: address.to_string(),
        state: st.health.state.as_str(),
        role: st.role.as_str(),
        writer,
        lag_seconds: replica.then(|| st.lag.seconds.map_or(f64::NAN, |d| d.as_secs_f64())),
        stale: st.lag.stale.is_some(),
        check_seconds: st.check_latency.map_or(f64::NAN, |d| d.as_secs_f64()),
        checks_failed_total: st.checks_failed_total,
    }
}

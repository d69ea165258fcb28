//! The bench's children and what it reads about them, from the shared harness (crates/testkit).

pub use testkit::children::{
    child_alive, cleanup_all, port_busy, register_file, register_sandbox_stop, spawn, stop,
    wait_child, wait_for_port,
};
pub use testkit::haproxy::haproxy_frontend_stats;
pub use testkit::http::get_ok as http_get;
pub use testkit::procfs::{
    cpu_seconds, cpu_times, peak_rss_kib, reset_peak_rss, rss_kib, voluntary_ctx_switches, CpuTimes,
};
pub use testkit::prometheus::parse_prometheus;

use std::process::Command;
use std::sync::Mutex;

/// `scripts/mariadb-cluster.sh stop` for the cluster scenario's replication set while it runs
/// (the shared registry holds one sandbox only), so that Ctrl-C stops the set too.
static CLUSTER_STOP: Mutex<Option<Command>> = Mutex::new(None);

pub fn register_cluster_stop(cmd: Command) {
    *CLUSTER_STOP.lock().unwrap_or_else(|e| e.into_inner()) = Some(cmd);
}

/// The scenario stopped the set itself (or left a set it did not start running).
pub fn forget_cluster_stop() {
    CLUSTER_STOP
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
}

/// Stops the replication set if the scenario was interrupted while it ran.
pub fn stop_cluster() {
    let cmd = CLUSTER_STOP
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(mut c) = cmd {
        eprintln!("bench: stopping the cluster scenario's replication set");
        let _ = c.status();
    }
}

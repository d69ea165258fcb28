//! The result rows of the transaction-pooling scenarios: many-clients (sysbench through a
//! capped pool) and idle-10k / idle-max (idle clients beside a served one).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Everything the transaction-pooling scenarios measured (summary.json's `mux`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MuxReport {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub many_clients: Vec<McRecord>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<IdleRecord>,
    pub warnings: Vec<String>,
}

impl MuxReport {
    /// What fails a smoke run: a scenario that could not run, idle clients that did not all
    /// log in or did not all answer, a served client that failed.
    pub fn problems(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .many_clients
            .iter()
            .filter_map(|r| {
                r.failed
                    .as_ref()
                    .map(|f| format!("many-clients {} {}: {f}", r.test, r.target))
            })
            .collect();
        for r in &self.idle {
            let served = r.served_alone.failures + r.served_with_idle.failures;
            if r.failed.is_some()
                || r.clients < r.aim
                || r.answer_failures > 0
                || r.answered < r.clients
                || served > 0
            {
                v.push(format!(
                    "{} ({}): {} of {} clients, {} answered, {} failed {:?}, served-client \
                     failures {served}, {:?} {:?}",
                    r.scenario,
                    r.mode,
                    r.clients,
                    r.aim,
                    r.answered,
                    r.answer_failures,
                    r.answer_errors,
                    r.stopped_by,
                    r.failed
                ));
            }
        }
        v
    }
}

/// One sysbench run of the scenario.
#[derive(Clone, Debug, Default, Serialize)]
pub struct McRecord {
    pub test: String,
    /// direct, tx (ringgate --pooling transaction), tx-pin (… --tx-prepared-statements pin).
    pub target: String,
    /// sysbench --db-ps-mode: auto (prepared statements) or disable (text queries).
    pub ps_mode: String,
    pub threads: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_cap: Option<usize>,
    pub duration_s: f64,
    pub qps: f64,
    pub tps: f64,
    pub avg_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub reconnects: u64,
    pub threads_connected_before: f64,
    pub threads_connected_peak: f64,
    /// ringgate_backend_connections (idle + busy), peak of 100 ms samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ringgate_backends_peak: Option<f64>,
    /// ringgate: client connections accepted during the run (the load went through it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ringgate_accepted: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl McRecord {
    /// Server connections the target used: peak Threads_connected above the baseline.
    pub fn server_connections(&self) -> f64 {
        (self.threads_connected_peak - self.threads_connected_before).max(0.0)
    }

    /// CPU µs per query of the proxy / the server, over the run (connects included).
    pub fn cpu_us_per_query(&self, cpu_s: Option<f64>) -> Option<f64> {
        let q = self.qps * self.duration_s;
        cpu_s.filter(|_| q > 0.0).map(|c| c * 1e6 / q)
    }
}

/// Latency of the served client.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Probe {
    pub queries: u64,
    pub failures: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl Probe {
    pub fn of(h: &Histogram<u64>, failures: u64, first_error: Option<String>) -> Probe {
        Probe {
            queries: h.len(),
            failures,
            p50_us: if h.is_empty() {
                0
            } else {
                h.value_at_quantile(0.5)
            },
            p99_us: if h.is_empty() {
                0
            } else {
                h.value_at_quantile(0.99)
            },
            max_us: if h.is_empty() { 0 } else { h.max() },
            first_error,
        }
    }
}

/// What one idle scenario measured in one mode.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IdleRecord {
    pub scenario: String,
    pub mode: String,
    pub aim: usize,
    /// Clients that logged in and sat idle.
    pub clients: usize,
    /// What stopped the logins short of the aim (None: aim reached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// The aim before the fd cap, when the cap lowered it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aim_before_fd_cap: Option<usize>,
    pub nofile_soft: u64,
    pub nofile_hard: u64,
    pub login_s: f64,
    pub rss_base_kib: u64,
    pub rss_idle_kib: u64,
    /// (RSS idle − RSS base) / clients, bytes.
    pub rss_per_client_b: f64,
    /// Proxy RSS after every idle client answered one query, per client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_per_client_after_query_b: Option<f64>,
    pub vm_pin_kib: u64,
    pub vm_lck_kib: u64,
    /// ringgate's backend connections (idle + busy) while the clients idled, peak of samples.
    pub backends_peak: f64,
    /// MariaDB Threads_connected: before the clients, and peak while they logged in and idled.
    pub threads_connected_before: f64,
    pub threads_connected_peak: f64,
    /// Read buffers held for clients / backends, ring buffers with bytes, heap fallbacks
    /// during the scenario, while the clients idled.
    pub held_client: f64,
    pub held_backend: f64,
    pub held_ring: f64,
    pub heap_fallbacks: f64,
    /// The served client alone (before the idle clients) and with them (idle-10k), or over
    /// the logins and the hold (idle-max).
    pub served_alone: Probe,
    pub served_with_idle: Probe,
    pub hold_s: f64,
    /// ringgate_client_connections after the hold (the idle clients + the served one).
    pub open_after_hold: f64,
    /// Idle clients asked to answer one `SELECT 1` after the hold, and how many failed.
    pub answered: usize,
    pub answer_failures: usize,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub answer_errors: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// ringgate flags beyond the scenario's own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// Over the logins and the hold, machine-wide (other processes' traffic included): packets
    /// dropped at a full CPU input backlog, and TCP connections the kernel reset because a
    /// keepalive probe or data went unacknowledged too long (TcpExt TCPAbortOnTimeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub softnet_drops: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_abort_on_timeout: Option<u64>,
    /// net.core.netdev_max_backlog during the scenario, and what it was before the bench raised
    /// it (idle-max; sysctl.rs says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev_max_backlog: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev_max_backlog_raised_from: Option<u64>,
}

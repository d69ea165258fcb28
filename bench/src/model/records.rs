//! The result rows: what one cell, one sysbench run and the whole run measured (summary.json's
//! records), with the per-round spread they carry.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::hist::Percentiles;
use crate::model::cluster::ClusterReport;
use crate::model::pooling::MuxReport;

#[derive(Clone, Debug, Default, Serialize)]
pub struct RoundFig {
    pub round: usize,
    pub count: u64,
    pub rate: f64,
    pub failures: u64,
    pub timeouts: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_peak_rss_kib: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Spread {
    pub rate_min: f64,
    pub rate_max: f64,
    pub p50_min_us: u64,
    pub p50_max_us: u64,
    pub p99_min_us: u64,
    pub p99_max_us: u64,
    /// (max - min) / median of the per-round p99, in percent.
    pub p99_spread_pct: f64,
    /// (max - min) / median of the per-round rate, in percent.
    pub rate_spread_pct: f64,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn rel_spread(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let mut s = v.to_vec();
    let med = median(&mut s);
    if med <= 0.0 {
        return 0.0;
    }
    let (mn, mx) = (s[0], s[s.len() - 1]);
    ((mx - mn) / med * 1000.0).round() / 10.0
}

impl Spread {
    pub fn of(rounds: &[RoundFig]) -> Spread {
        if rounds.is_empty() {
            return Spread::default();
        }
        let rates: Vec<f64> = rounds.iter().map(|r| r.rate).collect();
        let p99: Vec<f64> = rounds.iter().map(|r| r.p99_us as f64).collect();
        Spread {
            rate_min: rates.iter().cloned().fold(f64::INFINITY, f64::min),
            rate_max: rates.iter().cloned().fold(0.0, f64::max),
            p50_min_us: rounds.iter().map(|r| r.p50_us).min().unwrap_or(0),
            p50_max_us: rounds.iter().map(|r| r.p50_us).max().unwrap_or(0),
            p99_min_us: rounds.iter().map(|r| r.p99_us).min().unwrap_or(0),
            p99_max_us: rounds.iter().map(|r| r.p99_us).max().unwrap_or(0),
            p99_spread_pct: rel_spread(&p99),
            rate_spread_pct: rel_spread(&rates),
        }
    }
}

/// CPU and memory of the proxy process while the cell ran (all rounds).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcFig {
    pub cpu_s: f64,
    /// Proxy CPU per successful operation, µs.
    pub cpu_us_per_op: f64,
    /// The part of `cpu_s` spent in the kernel (system time), 0..1: for a proxy mostly the
    /// network stack's work on its sockets, which any proxy pays; the rest is its own code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_cpu_share: Option<f64>,
    /// Highest VmHWM seen in any round (reset before each round when the kernel allows).
    pub peak_rss_kib: u64,
    pub peak_rss_reset_per_round: bool,
    /// Voluntary context switches of all the proxy's threads per operation
    /// (a thread that sleeps switches out voluntarily: its wake-ups).
    /// Operations here include the warm-up, as the counters do; per query
    /// in the query scenarios, per connection in connect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub voluntary_ctx_switches_per_op: Option<f64>,
    /// ringgate only: its ring's own counters per operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingFig>,
}

/// What ringgate's ring did per operation (from its /metrics): SQEs the
/// kernel consumed, io_uring_enter calls, and of those the ones that waited.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RingFig {
    pub sqes_per_op: f64,
    pub enters_per_op: f64,
    pub waits_per_op: f64,
}

/// ringgate's pool figures from /metrics, sampled every 100 ms during the cell.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PoolFig {
    pub mode: String,
    pub read_buffers_total: f64,
    pub peak_in_use_client: f64,
    pub peak_in_use_backend: f64,
    pub peak_backend_busy: f64,
    pub peak_backend_idle: f64,
    pub peak_client_connections: f64,
    pub heap_fallbacks: f64,
    pub backend_connects: f64,
    pub backend_connect_failures: f64,
    pub backend_discarded: f64,
    pub client_connections_accepted: f64,
    pub clients_rejected: f64,
    pub commands: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Verification {
    pub ok: bool,
    pub detail: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Record {
    pub target: String,
    pub scenario: String,
    pub concurrency: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_bytes: Option<u64>,
    /// "closed-loop" or "open-loop" (coordinated-omission corrected).
    pub mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_rate: Option<f64>,
    pub rounds: usize,
    pub count: u64,
    pub duration_s: f64,
    /// Successful operations per second.
    pub rate: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb_per_s: Option<f64>,
    pub failures: u64,
    pub timeouts: u64,
    pub setup_failures: u64,
    /// p50_us … max_us, mean_us: flattened, so summary.json keeps flat keys.
    #[serde(flatten)]
    pub latency: Percentiles,
    pub spread: Spread,
    pub per_round: Vec<RoundFig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProcFig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ringgate: Option<PoolFig>,
    pub verified: Verification,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    pub hgrm: String,
}

impl Record {
    /// "connect c=16", "large-result 64KiB c=8".
    pub fn cell_label(&self) -> String {
        cell_label(&self.scenario, self.concurrency, self.row_bytes)
    }
}

pub fn cell_label(scenario: &str, concurrency: usize, row_bytes: Option<u64>) -> String {
    match row_bytes {
        Some(b) => format!("{scenario} {} c={concurrency}", human_bytes(b)),
        None => format!("{scenario} c={concurrency}"),
    }
}

pub fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// One sysbench run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SysbenchRecord {
    pub target: String,
    pub test: String,
    pub threads: usize,
    pub duration_s: f64,
    pub tps: f64,
    pub qps: f64,
    pub avg_ms: f64,
    pub p95_ms: f64,
    /// From sysbench's latency histogram (--histogram=on).
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub reconnects: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_cpu_s: Option<f64>,
    pub verified: Verification,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub started: String,
    pub profile: String,
    pub machine: BTreeMap<String, String>,
    pub settings: BTreeMap<String, String>,
    pub targets: Vec<String>,
    pub records: Vec<Record>,
    pub sysbench: Vec<SysbenchRecord>,
    /// ringgate state after the run (leak check): target → metric → value.
    pub after_run: BTreeMap<String, BTreeMap<String, f64>>,
    /// many-clients, idle-10k, idle-max (the transaction-pooling scenarios).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mux: Option<MuxReport>,
    /// The cluster scenario.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterReport>,
    pub warnings: Vec<String>,
    pub elapsed_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_rounds() {
        let rounds = vec![
            RoundFig {
                rate: 100.0,
                p50_us: 10,
                p99_us: 100,
                ..Default::default()
            },
            RoundFig {
                rate: 110.0,
                p50_us: 12,
                p99_us: 120,
                ..Default::default()
            },
            RoundFig {
                rate: 90.0,
                p50_us: 11,
                p99_us: 80,
                ..Default::default()
            },
        ];
        let s = Spread::of(&rounds);
        assert_eq!(s.rate_min, 90.0);
        assert_eq!(s.rate_max, 110.0);
        assert_eq!((s.p99_min_us, s.p99_max_us), (80, 120));
        assert_eq!((s.p50_min_us, s.p50_max_us), (10, 12));
        assert_eq!(s.p99_spread_pct, 40.0); // (120-80)/100
        assert_eq!(s.rate_spread_pct, 20.0); // (110-90)/100
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(Spread::of(&rounds[..1]).p99_spread_pct, 0.0);
    }
}

//! The leak check after the rounds: with every bench client gone, each ringgate must have
//! freed its client slots and read buffers and hold no busy backend.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::checks;
use crate::model::target::{own_name, Kind, Target};
use crate::model::Res;
use crate::procs;

/// The figures recorded per ringgate after the run (summary.json's `after_run`), short name
/// and metric.
const AFTER_RUN: [(&str, &str); 8] = [
    ("client_connections", "ringgate_client_connections"),
    (
        "read_buffers_in_use_client",
        "ringgate_read_buffers_in_use{owner=\"client\"}",
    ),
    (
        "read_buffers_in_use_backend",
        "ringgate_read_buffers_in_use{owner=\"backend\"}",
    ),
    ("read_buffers_free", "ringgate_read_buffers_free"),
    (
        "backend_busy",
        "ringgate_backend_connections{state=\"busy\"}",
    ),
    (
        "backend_idle",
        "ringgate_backend_connections{state=\"idle\"}",
    ),
    (
        "heap_fallbacks_total",
        "ringgate_read_buffer_heap_fallbacks_total",
    ),
    (
        "client_connections_total",
        "ringgate_client_connections_total",
    ),
];

/// What the leak check found.
pub struct AfterRun {
    /// Target → figure → value.
    pub figures: BTreeMap<String, BTreeMap<String, f64>>,
    /// One line per ringgate that still held something (also added to the warnings).
    pub leaks: Vec<String>,
}

/// Polls each ringgate for up to 10 s (sessions close asynchronously); what is still wrong
/// then fails the smoke run and is a warning of a full run.
pub async fn check(targets: &[Target], warnings: &mut Vec<String>) -> Res<AfterRun> {
    let mut after = AfterRun {
        figures: BTreeMap::new(),
        leaks: Vec::new(),
    };
    for t in targets {
        let Kind::Ringgate { metrics } = &t.kind else {
            continue;
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let (m, problems) = loop {
            let m = procs::parse_prometheus(&procs::http_get(*metrics, "/metrics")?);
            let problems = checks::leak_problems(&m, own_name(&t.name) == "hold");
            if problems.is_empty() || Instant::now() > deadline {
                break (m, problems);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let mut fig = BTreeMap::new();
        for (short, k) in AFTER_RUN {
            fig.insert(short.to_string(), m.get(k).copied().unwrap_or(f64::NAN));
        }
        if let Some(rss) = t.pid.and_then(procs::rss_kib) {
            fig.insert("rss_kib".into(), rss as f64);
        }
        if !problems.is_empty() {
            let w = format!(
                "ringgate ({}) after the run (all bench clients gone): {}",
                t.name,
                problems.join("; ")
            );
            eprintln!("bench: WARNING: {w}");
            warnings.push(w.clone());
            after.leaks.push(w);
        }
        after.figures.insert(t.name.clone(), fig);
    }
    Ok(after)
}

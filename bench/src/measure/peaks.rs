//! ringgate's gauges sampled every 100 ms on a thread while a step runs: their peaks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::procs;

/// Peaks of ringgate's gauges while a step runs.
#[derive(Default, Clone, Debug)]
pub struct Peaks {
    pub in_use_client: f64,
    pub in_use_backend: f64,
    pub backend_busy: f64,
    pub backend_idle: f64,
    pub clients: f64,
}

/// Samples until `stop` is set; the thread returns the peaks.
pub fn sample_metrics(addr: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Peaks> {
    std::thread::spawn(move || {
        let mut p = Peaks::default();
        loop {
            if let Ok(t) = procs::http_get(addr, "/metrics") {
                let m = procs::parse_prometheus(&t);
                let g = |k: &str| m.get(k).copied().unwrap_or(0.0);
                p.in_use_client = p
                    .in_use_client
                    .max(g("ringgate_read_buffers_in_use{owner=\"client\"}"));
                p.in_use_backend = p
                    .in_use_backend
                    .max(g("ringgate_read_buffers_in_use{owner=\"backend\"}"));
                p.backend_busy = p
                    .backend_busy
                    .max(g("ringgate_backend_connections{state=\"busy\"}"));
                p.backend_idle = p
                    .backend_idle
                    .max(g("ringgate_backend_connections{state=\"idle\"}"));
                p.clients = p.clients.max(g("ringgate_client_connections"));
            }
            if stop.load(Ordering::Relaxed) {
                return p;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

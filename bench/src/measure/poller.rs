//! MariaDB's Threads_connected and ringgate's backend connections, polled on a thread while a
//! scenario runs: how many server connections the clients really used.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::procs;
use crate::rawclient::{self, Login};

/// ringgate's /metrics, empty when it does not answer.
pub fn scrape(addr: SocketAddr) -> HashMap<String, f64> {
    procs::http_get(addr, "/metrics")
        .map(|t| procs::parse_prometheus(&t))
        .unwrap_or_default()
}

/// MariaDB's Threads_connected now (0 when it cannot be read).
pub fn threads_connected(server: &Login) -> f64 {
    rawclient::login(server, None)
        .and_then(|mut c| {
            let v = rawclient::global_status(&mut c, "Threads_connected");
            rawclient::quit(c);
            v
        })
        .unwrap_or(0.0)
}

/// ringgate's backend connections, idle and busy.
fn backends(m: &HashMap<String, f64>) -> f64 {
    let g = |k: &str| m.get(k).copied().unwrap_or(0.0);
    g(r#"ringgate_backend_connections{state="idle"}"#)
        + g(r#"ringgate_backend_connections{state="busy"}"#)
}

/// Polls MariaDB's Threads_connected and ringgate's backend gauge on a thread until stopped:
/// (peak Threads_connected, peak ringgate backends).
pub struct Poller {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<(f64, f64)>,
}

impl Poller {
    pub fn start(server: Login, ringgate_metrics: Option<SocketAddr>, every: Duration) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut conn = rawclient::login(&server, None).ok();
            let (mut threads, mut backs) = (0.0f64, 0.0f64);
            loop {
                if let Some(c) = conn.as_mut() {
                    if let Ok(v) = rawclient::global_status(c, "Threads_connected") {
                        threads = threads.max(v);
                    }
                }
                if let Some(m) = ringgate_metrics {
                    backs = backs.max(backends(&scrape(m)));
                }
                if s2.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(every);
            }
            if let Some(c) = conn {
                rawclient::quit(c);
            }
            (threads, backs)
        });
        Poller { stop, handle }
    }

    pub fn finish(self) -> (f64, f64) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or((0.0, 0.0))
    }
}

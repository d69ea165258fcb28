//! The leak checks every scenario ends with, from the metrics: once the proxy is idle no client
//! holds a buffer or a direct descriptor, no backend connection is busy, and the buffer
//! accounting of the read-buffer mode adds up.

use std::time::{Duration, Instant};

use super::{Mode, Proxy};
use crate::procfs::io_uring_user_files;
use crate::prometheus::Metrics;
use crate::tail;

/// How long the metrics get to settle after a scenario.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(8);

impl Proxy {
    /// Waits (bounded) until the proxy is idle and its buffer accounting adds up, then
    /// asserts that at least `min_new_connections` client connections went through it since
    /// `baseline_connections_total`. Panics with the metrics and stderr otherwise.
    pub fn assert_settled(&mut self, baseline_connections_total: f64, min_new_connections: u64) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            self.assert_running();
            let m = self.metrics();
            let problems =
                self.settle_problems(&m, baseline_connections_total, min_new_connections);
            if problems.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "ringgate ({} mode) did not settle within {:?}:\n  - {}\n--- metrics ---\n{}\n--- ringgate stderr (tail) ---\n{}",
                    self.opts.mode.as_str(),
                    SETTLE_TIMEOUT,
                    problems.join("\n  - "),
                    m.dump(),
                    tail(&self.stderr(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn settle_problems(&self, m: &Metrics, baseline: f64, min_new: u64) -> Vec<String> {
        let mut p = self.idle_problems(m);
        let total_conns = m.get("ringgate_client_connections_total");
        if total_conns - baseline < min_new as f64 {
            p.push(format!(
                "client_connections_total grew by {} (from {baseline} to {total_conns}), want >= {min_new}: \
                 did the traffic go through the proxy?",
                total_conns - baseline
            ));
        }
        p.extend(self.mode_problems(m));
        p
    }

    /// No client, no busy backend, no buffer held but those of idle backend connections, no
    /// direct descriptor left.
    fn idle_problems(&self, m: &Metrics) -> Vec<String> {
        let mut p = Vec::new();
        let client_in_use = m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#);
        let backend_in_use = m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#);
        let idle = m.get(r#"ringgate_backend_connections{state="idle"}"#);
        let busy = m.get(r#"ringgate_backend_connections{state="busy"}"#);
        let clients = m.get("ringgate_client_connections");

        if client_in_use != 0.0 {
            p.push(format!(
                "read_buffers_in_use{{owner=\"client\"}} = {client_in_use}, want 0"
            ));
        }
        if busy != 0.0 {
            p.push(format!(
                "backend_connections{{state=\"busy\"}} = {busy}, want 0"
            ));
        }
        let backend_want = if self.opts.idle_backends_hold_buffers() {
            idle + busy
        } else {
            0.0
        };
        if backend_in_use != backend_want {
            p.push(format!(
                "read_buffers_in_use{{owner=\"backend\"}} = {backend_in_use}, want {backend_want} \
                 (idle+busy = {})",
                idle + busy
            ));
        }
        if clients != 0.0 {
            p.push(format!("client_connections = {clients}, want 0"));
        }
        // Every client's direct descriptor was closed (IORING_OP_CLOSE): the metric and
        // the kernel's own view of the rings' file tables agree that none is left.
        let direct = m.get("ringgate_direct_descriptors_in_use");
        if direct != 0.0 {
            p.push(format!("direct_descriptors_in_use = {direct}, want 0"));
        }
        let files = io_uring_user_files(self.pid());
        if files.iter().any(|(_, n)| *n != 0) {
            p.push(format!(
                "io_uring file tables still hold sockets (fd, slots in use): {files:?}, want none"
            ));
        }
        // Large-result buffers are held only while a large result is relayed.
        let large = m.get("ringgate_read_buffer_large_in_use");
        if large != 0.0 {
            p.push(format!("read_buffer_large_in_use = {large}, want 0"));
        }
        p
    }

    /// The accounting of the read-buffer mode: fixed slots all free or held, no heap pool, every
    /// ring buffer back.
    fn mode_problems(&self, m: &Metrics) -> Vec<String> {
        // Every mode exports the fallback count (0 outside fixed mode).
        let fallbacks = m.get("ringgate_read_buffer_heap_fallbacks_total");
        match self.opts.mode {
            Mode::Fixed => fixed_problems(m, fallbacks),
            Mode::Heap => {
                let total = m.get(r#"ringgate_read_buffers_total{mode="heap"}"#);
                if total != 0.0 {
                    vec![format!(
                        "read_buffers_total{{mode=\"heap\"}} = {total}, want 0"
                    )]
                } else {
                    Vec::new()
                }
            }
            Mode::Ring => ring_problems(m),
        }
    }
}

fn fixed_problems(m: &Metrics, fallbacks: f64) -> Vec<String> {
    let mut p = Vec::new();
    let client_in_use = m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#);
    let backend_in_use = m.get(r#"ringgate_read_buffers_in_use{owner="backend"}"#);
    let total = m.get(r#"ringgate_read_buffers_total{mode="fixed"}"#);
    let free = m.get("ringgate_read_buffers_free");
    if total <= 0.0 {
        p.push(format!(
            "read_buffers_total{{mode=\"fixed\"}} = {total}, want > 0"
        ));
    }
    if free > total {
        p.push(format!("read_buffers_free = {free} > total = {total}"));
    }
    // in_use counts slots and fallback heap buffers alike, so the heap buffers held
    // now are in_use - (total - free): never negative (a slot neither free nor held
    // leaked) and never more than the fallbacks that ever happened (a slot freed
    // twice). With no fallback that is exactly free + in_use == total.
    let heap_held = client_in_use + backend_in_use - (total - free);
    if heap_held < 0.0 || heap_held > fallbacks {
        p.push(format!(
            "free ({free}) + in_use client ({client_in_use}) + in_use backend \
             ({backend_in_use}) - total ({total}) = {heap_held} heap buffers held, \
             want 0..={fallbacks} (heap fallbacks so far)"
        ));
    }
    p
}

fn ring_problems(m: &Metrics) -> Vec<String> {
    let mut p = Vec::new();
    // Every ring buffer is back: none holds bytes once the proxy is idle.
    let ring = m.get("ringgate_read_buffer_ring_buffers");
    let in_use = m.get("ringgate_read_buffer_ring_in_use");
    if ring <= 0.0 {
        p.push(format!(
            "read_buffer_ring_buffers = {ring}, want > 0 (did ring mode fall back?)"
        ));
    }
    if in_use != 0.0 {
        p.push(format!("read_buffer_ring_in_use = {in_use}, want 0"));
    }
    p
}

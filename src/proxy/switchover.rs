//! A planned switchover's hold (SIGUSR1): new transactions wait while the
//! ones in flight finish on the old writer, so that an operator or an
//! orchestrator can move the writer under load with no client error.
//!
//! The main thread starts and ends the hold; each worker reads it at its
//! tick and its pool holds off leasing (`machines/pool/writer.rs`). The hold
//! ends when the monitor names another writer, on SIGUSR2, or after
//! `--switchover-hold-timeout` (cut to `--backend-wait-timeout`, which
//! bounds every waiting lease). While it lasts, one log line says when no
//! transaction is in flight any more: the moment to switch.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Shared;

/// The hold, if one is on.
#[derive(Debug, Default)]
pub struct SwitchoverHold {
    state: Mutex<Option<Hold>>,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    since: Instant,
    until: Instant,
    /// The writer when the hold began: another one ends it.
    writer: Option<SocketAddr>,
    ready_logged: bool,
}

impl SwitchoverHold {
    /// Whether new transactions wait now (read by every worker's tick).
    pub fn held(&self, now: Instant) -> bool {
        lock(&self.state).is_some_and(|h| now < h.until)
    }
}

fn lock(m: &Mutex<Option<Hold>>) -> std::sync::MutexGuard<'_, Option<Hold>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn writer(shared: &Shared) -> Option<SocketAddr> {
    let cell = shared.cluster.as_ref()?;
    let view = cell.load();
    view.writer().map(|w| w.address)
}

/// SIGUSR1: begin a hold (or extend one).
pub fn begin(shared: &Shared, timeout: Duration) {
    let now = Instant::now();
    let writer = writer(shared);
    *lock(&shared.switchover.state) = Some(Hold {
        since: now,
        until: now + timeout,
        writer,
        ready_logged: false,
    });
    let at = writer.map_or("no writer".to_string(), |w| w.to_string());
    tracing::info!(
        "SIGUSR1: switchover hold: new transactions wait up to {timeout:?} for a new writer; \
         transactions in flight finish on {at}"
    );
}

/// SIGUSR2: end the hold now.
pub fn end(shared: &Shared) {
    if let Some(h) = lock(&shared.switchover.state).take() {
        tracing::info!(
            "SIGUSR2: switchover hold released after {} ms",
            h.since.elapsed().as_millis()
        );
    }
}

/// The main thread's look, every 50 ms: end the hold on a new writer or
/// at its timeout; say once when nothing is in flight.
pub fn watch(shared: &Shared) {
    let mut state = lock(&shared.switchover.state);
    let Some(hold) = state.as_mut() else {
        return;
    };
    let now = Instant::now();
    let held_ms = now.duration_since(hold.since).as_millis();
    let current = writer(shared);
    if current.is_some() && current != hold.writer {
        let w = current.map_or(String::new(), |w| w.to_string());
        tracing::info!("switchover: {w} takes writes; hold released after {held_ms} ms");
        *state = None;
        return;
    }
    if now >= hold.until {
        tracing::warn!(
            "switchover hold timed out after {held_ms} ms with no new writer; new transactions go on"
        );
        *state = None;
        return;
    }
    let busy: i64 = (0..shared.metrics.worker_count())
        .map(|i| {
            let w = shared.metrics.worker(i);
            w.backend_busy.load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    if busy == 0 && !hold.ready_logged {
        hold.ready_logged = true;
        tracing::info!(
            "switchover hold: no transaction in flight after {held_ms} ms; switch the writer now"
        );
    }
}

//! The bench's own correctness checks on a ringgate target, read from its /metrics: is the
//! buffer mode the one the bench asked for, and is everything back after the load. `make
//! bench-smoke` fails on either; `make bench` records them as warnings next to its figures.
//!
//! A metric that is missing counts as a problem: comparing a NaN would pass every check.

use std::collections::HashMap;

/// Why the target's effective buffer mode is not `want` ("fixed" or "heap"), if it is not.
/// A fixed-mode ringgate whose registration failed runs on heap buffers and says so only in
/// `ringgate_read_buffers_total{mode="heap"}`: without this check "fixed" figures would be
/// heap figures.
pub fn mode_problem(m: &HashMap<String, f64>, want: &str) -> Option<String> {
    let key = format!("ringgate_read_buffers_total{{mode=\"{want}\"}}");
    match m.get(&key) {
        None => {
            let reported: Vec<&String> = m
                .keys()
                .filter(|k| k.starts_with("ringgate_read_buffers_total"))
                .collect();
            Some(format!(
                "buffer mode is not {want}: /metrics has no {key} (reports {reported:?})"
            ))
        }
        Some(&slots) if want == "fixed" && slots <= 0.0 => Some(format!(
            "buffer mode is fixed but {key} = {slots}: no registered slots"
        )),
        Some(_)
            if want == "ring"
                && m.get("ringgate_read_buffer_ring_buffers")
                    .is_none_or(|&n| n <= 0.0) =>
        {
            Some("buffer mode is ring but ringgate_read_buffer_ring_buffers is not > 0".into())
        }
        Some(_) => None,
    }
}

/// What is not back to rest once every bench client is gone: a client connection or its
/// buffer, a busy backend, backend buffers that do not match the backend connections, and
/// (fixed mode) slots that are neither free nor held, (ring mode) ring buffers still held.
/// `hold_idle_slots`: the target runs with `--hold-idle-slots` (fixed mode's idle backend
/// connections then keep their slot).
pub fn leak_problems(m: &HashMap<String, f64>, hold_idle_slots: bool) -> Vec<String> {
    let mut p = Vec::new();
    let mut get = |k: &str| match m.get(k) {
        Some(v) if v.is_finite() => *v,
        _ => {
            p.push(format!("{k} is missing from /metrics"));
            0.0
        }
    };
    let clients = get("ringgate_client_connections");
    let in_use_client = get("ringgate_read_buffers_in_use{owner=\"client\"}");
    let in_use_backend = get("ringgate_read_buffers_in_use{owner=\"backend\"}");
    let busy = get("ringgate_backend_connections{state=\"busy\"}");
    let idle = get("ringgate_backend_connections{state=\"idle\"}");
    let free = get("ringgate_read_buffers_free");
    let fallbacks = get("ringgate_read_buffer_heap_fallbacks_total");
    if clients != 0.0 {
        p.push(format!("{clients} client connections still open"));
    }
    if in_use_client != 0.0 {
        p.push(format!(
            "{in_use_client} read buffers still held by clients"
        ));
    }
    if busy != 0.0 {
        p.push(format!("{busy} backend connections still busy"));
    }
    // Ring mode: a connection holds its own buffer only while it uses it, so an idle
    // backend connection holds none; nor does fixed mode's (it waits with a poll) unless
    // --hold-idle-slots keeps the slot; heap mode gives every backend one.
    let ring_mode = m
        .get("ringgate_read_buffer_ring_buffers")
        .is_some_and(|&n| n > 0.0);
    let fixed_mode = m
        .get("ringgate_read_buffers_total{mode=\"fixed\"}")
        .is_some_and(|&n| n > 0.0);
    let backend_want = if ring_mode || (fixed_mode && !hold_idle_slots) {
        0.0
    } else {
        idle + busy
    };
    if in_use_backend != backend_want {
        p.push(format!(
            "{in_use_backend} read buffers held by backends, want {backend_want} (idle + busy = {})",
            idle + busy
        ));
    }
    if let Some(&total) = m.get("ringgate_read_buffers_total{mode=\"fixed\"}") {
        // in_use counts slots and fallback heap buffers alike: the heap buffers held are
        // in_use - (total - free), between 0 (else a slot leaked) and the fallbacks so far.
        let heap_held = in_use_client + in_use_backend - (total - free);
        if heap_held < 0.0 || heap_held > fallbacks {
            p.push(format!(
                "free {free} + in use {} - total {total} = {heap_held} heap buffers held, want \
                 0..={fallbacks} (heap fallbacks)",
                in_use_client + in_use_backend
            ));
        }
    }
    // Ring mode: every provided-ring buffer is back once nothing is relayed.
    if let Some(&held) = m.get("ringgate_read_buffer_ring_in_use") {
        if held != 0.0 {
            p.push(format!("{held} provided-ring buffers still hold bytes"));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_rest() -> HashMap<String, f64> {
        [
            ("ringgate_client_connections", 0.0),
            ("ringgate_read_buffers_in_use{owner=\"client\"}", 0.0),
            ("ringgate_read_buffers_in_use{owner=\"backend\"}", 0.0),
            ("ringgate_backend_connections{state=\"busy\"}", 0.0),
            ("ringgate_backend_connections{state=\"idle\"}", 4.0),
            ("ringgate_read_buffers_free", 2048.0),
            ("ringgate_read_buffers_total{mode=\"fixed\"}", 2048.0),
            ("ringgate_read_buffer_heap_fallbacks_total", 0.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    #[test]
    fn at_rest_is_clean() {
        assert_eq!(leak_problems(&at_rest(), false), Vec::<String>::new());
        assert_eq!(mode_problem(&at_rest(), "fixed"), None);
    }

    #[test]
    fn each_leak_is_reported() {
        for (k, v) in [
            ("ringgate_client_connections", 1.0),
            ("ringgate_read_buffers_in_use{owner=\"client\"}", 1.0),
            ("ringgate_backend_connections{state=\"busy\"}", 1.0),
            ("ringgate_read_buffers_in_use{owner=\"backend\"}", 1.0),
            // A slot neither free nor held.
            ("ringgate_read_buffers_free", 2047.0),
        ] {
            let mut m = at_rest();
            m.insert(k.into(), v);
            assert!(!leak_problems(&m, false).is_empty(), "{k} = {v} passed");
        }
    }

    /// `--hold-idle-slots`: every idle backend connection keeps its slot.
    fn at_rest_holding() -> HashMap<String, f64> {
        let mut m = at_rest();
        m.insert(
            "ringgate_read_buffers_in_use{owner=\"backend\"}".into(),
            4.0,
        );
        m.insert("ringgate_read_buffers_free".into(), 2044.0);
        m
    }

    #[test]
    fn idle_backends_hold_a_slot_only_with_hold_idle_slots() {
        assert_eq!(
            leak_problems(&at_rest_holding(), true),
            Vec::<String>::new()
        );
        assert_eq!(leak_problems(&at_rest_holding(), false).len(), 1);
        assert_eq!(leak_problems(&at_rest(), true).len(), 1);
    }

    #[test]
    fn fallback_buffers_are_accounted_not_ignored() {
        // Two idle backends hold fallback heap buffers: fine with 2 fallbacks, not with 1.
        let mut m = at_rest_holding();
        m.insert("ringgate_read_buffers_free".into(), 2046.0);
        m.insert("ringgate_read_buffer_heap_fallbacks_total".into(), 2.0);
        assert_eq!(leak_problems(&m, true), Vec::<String>::new());
        m.insert("ringgate_read_buffer_heap_fallbacks_total".into(), 1.0);
        assert_eq!(leak_problems(&m, true).len(), 1);
    }

    #[test]
    fn a_missing_metric_is_a_problem() {
        let mut m = at_rest();
        m.remove("ringgate_backend_connections{state=\"busy\"}");
        assert_eq!(leak_problems(&m, false).len(), 1);
    }

    #[test]
    fn heap_when_fixed_was_asked_is_a_problem() {
        let mut m = at_rest();
        m.remove("ringgate_read_buffers_total{mode=\"fixed\"}");
        m.insert("ringgate_read_buffers_total{mode=\"heap\"}".into(), 0.0);
        // Heap mode: every backend connection holds its buffer.
        m.insert(
            "ringgate_read_buffers_in_use{owner=\"backend\"}".into(),
            4.0,
        );
        assert!(mode_problem(&m, "fixed").is_some());
        assert_eq!(mode_problem(&m, "heap"), None);
        // Heap mode has no fixed total: the slot accounting does not apply.
        assert_eq!(leak_problems(&m, false), Vec::<String>::new());
    }
}

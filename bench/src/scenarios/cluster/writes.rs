//! The steady write load of the failover and switchover phases: a few clients through
//! ringgate, each an autocommit `INSERT` every few milliseconds, every write's start, end and
//! outcome kept; then what those say about a change of writer: the client-visible gap, the
//! latency around it, the errors, and whether an acknowledged write was lost.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use tokio::time::Instant;

/// The table the writers fill: who wrote which number.
pub const TABLE: &str = "bench_writes";
pub const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_writes \
    (id BIGINT AUTO_INCREMENT PRIMARY KEY, client INT NOT NULL, n INT NOT NULL) ENGINE=InnoDB";

/// How long one write may take before it counts as failed: longer than ringgate's wait for
/// a writer (the fronts' --backend-wait-timeout).
const WRITE_TIMEOUT: Duration = Duration::from_secs(40);

/// One write, its times in seconds from the change (negative: before it).
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    pub client: u32,
    pub n: u32,
    pub start_s: f64,
    pub end_s: f64,
    /// None: acknowledged; else the error as the client saw it.
    pub error: Option<String>,
}

/// What one writer saw of each of its writes: (client, n, start, end, error).
type Outcomes = Vec<(u32, u32, Instant, Instant, Option<String>)>;

/// The running writers.
pub struct Writers {
    stop: Arc<AtomicBool>,
    /// Writes acknowledged so far, all clients: the phases wait on it.
    acked: Arc<AtomicU64>,
    tasks: tokio::task::JoinSet<Outcomes>,
}

impl Writers {
    /// `clients` writers, each writing every `every` through `opts`.
    pub fn start(opts: Opts, clients: usize, every: Duration) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..clients as u32 {
            let (stop, acked) = (stop.clone(), acked.clone());
            tasks.spawn(writer(c, opts.clone(), every, stop, acked));
        }
        Writers { stop, acked, tasks }
    }

    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until `more` writes beyond `from` were acknowledged; false after `within`.
    pub async fn wait_acked(&self, from: u64, more: u64, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.acked() < from + more {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Stops the writers; their writes, times from `zero` (the change's start).
    pub async fn finish(mut self, zero: Instant) -> Vec<Write> {
        self.stop.store(true, Ordering::Relaxed);
        let secs = |t: Instant| {
            if t >= zero {
                t.duration_since(zero).as_secs_f64()
            } else {
                -zero.duration_since(t).as_secs_f64()
            }
        };
        let mut all = Vec::new();
        while let Some(r) = self.tasks.join_next().await {
            for (client, n, s, e, error) in r.unwrap_or_default() {
                all.push(Write {
                    client,
                    n,
                    start_s: secs(s),
                    end_s: secs(e),
                    error,
                });
            }
        }
        all.sort_by(|a, b| a.end_s.total_cmp(&b.end_s));
        all
    }
}

/// One client: paced `INSERT`s until told to stop; a lost connection is opened again for the
/// next write (as an application's pool would).
async fn writer(
    client: u32,
    opts: Opts,
    every: Duration,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
) -> Outcomes {
    let mut out = Vec::new();
    let mut conn: Option<Conn> = None;
    let mut next = Instant::now();
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let start = Instant::now();
        let r = tokio::time::timeout(WRITE_TIMEOUT, write_once(&mut conn, &opts, client, n)).await;
        let error = match r {
            Ok(Ok(())) => {
                acked.fetch_add(1, Ordering::Relaxed);
                None
            }
            Ok(Err(e)) => Some(e),
            Err(_) => {
                conn = None;
                Some(format!("timed out after {WRITE_TIMEOUT:?}"))
            }
        };
        out.push((client, n, start, Instant::now(), error));
        next += every;
        let now = Instant::now();
        if next > now {
            tokio::time::sleep_until(next).await;
        } else {
            next = now;
        }
    }
    if let Some(c) = conn {
        let _ = c.disconnect().await;
    }
    out
}

/// One INSERT on the client's connection, opened first when it has none; a connection whose
/// error was not the server's own is dropped.
async fn write_once(
    conn: &mut Option<Conn>,
    opts: &Opts,
    client: u32,
    n: u32,
) -> Result<(), String> {
    if conn.is_none() {
        *conn = Some(
            Conn::new(opts.clone())
                .await
                .map_err(|e| format!("connect: {}", error_label(&e)))?,
        );
    }
    let Some(c) = conn.as_mut() else {
        return Err("no connection".into());
    };
    let q = format!("INSERT INTO {TABLE} (client, n) VALUES ({client}, {n})");
    match c.query_drop(q).await {
        Ok(()) => Ok(()),
        Err(e) => {
            if !matches!(e, mysql_async::Error::Server(_)) {
                *conn = None;
            }
            Err(error_label(&e))
        }
    }
}

/// An error as a short label: the server's code and message, or what the client saw of a
/// lost connection.
pub fn error_label(e: &mysql_async::Error) -> String {
    let s = match e {
        mysql_async::Error::Server(s) => format!("{} ({}) {}", s.code, s.state, s.message),
        mysql_async::Error::Io(io) => format!("connection lost: {io}"),
        other => other.to_string(),
    };
    s.chars().take(110).collect()
}

/// What the writes say about one change of writer (times from its start).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Analysis {
    pub acked: u64,
    pub errors: u64,
    pub most_errors_one_client: u64,
    pub error_kinds: BTreeMap<String, u64>,
    pub gap_ms: f64,
    pub gap_from_ms: f64,
    pub gap_to_ms: f64,
    pub steady_p99_ms: f64,
    pub around_p99_ms: f64,
    pub around_max_ms: f64,
}

/// The gap is the longest time between two consecutive acknowledgements, all clients
/// together, that ends after the change began: what an application saw as "writes stopped".
/// "Around" is every acknowledged write that started from a second before the change to a
/// second after the gap closed; "steady" every one that ended before the change.
pub fn analyse(writes: &[Write]) -> Analysis {
    let mut acks: Vec<f64> = writes
        .iter()
        .filter(|w| w.error.is_none())
        .map(|w| w.end_s)
        .collect();
    acks.sort_by(f64::total_cmp);
    let mut a = Analysis {
        acked: acks.len() as u64,
        ..Default::default()
    };
    let mut per_client: BTreeMap<u32, u64> = BTreeMap::new();
    for w in writes {
        if let Some(e) = &w.error {
            a.errors += 1;
            *a.error_kinds.entry(e.clone()).or_insert(0) += 1;
            *per_client.entry(w.client).or_insert(0) += 1;
        }
    }
    a.most_errors_one_client = per_client.values().copied().max().unwrap_or(0);
    for pair in acks.windows(2) {
        let d = pair[1] - pair[0];
        // A silence that ends before the change is the steady load's, not the change's.
        if pair[1] > 0.0 && d * 1e3 > a.gap_ms {
            a.gap_ms = d * 1e3;
            a.gap_from_ms = pair[0] * 1e3;
            a.gap_to_ms = pair[1] * 1e3;
        }
    }
    let lat = |w: &&Write| (w.end_s - w.start_s) * 1e3;
    let ok = || writes.iter().filter(|w| w.error.is_none());
    let steady: Vec<f64> = ok().filter(|w| w.end_s < 0.0).map(|w| lat(&w)).collect();
    let until = a.gap_to_ms / 1e3 + 1.0;
    let around: Vec<f64> = ok()
        .filter(|w| w.start_s >= -1.0 && w.start_s <= until)
        .map(|w| lat(&w))
        .collect();
    a.steady_p99_ms = quantile(steady.clone(), 0.99);
    a.around_p99_ms = quantile(around.clone(), 0.99);
    a.around_max_ms = around.iter().copied().fold(0.0, f64::max);
    a
}

/// The q-quantile (nearest rank) of `v`; 0 for none.
fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Acknowledged writes whose (client, n) is not among `rows`.
pub fn lost(writes: &[Write], rows: &HashSet<(u32, u32)>) -> u64 {
    writes
        .iter()
        .filter(|w| w.error.is_none() && !rows.contains(&(w.client, w.n)))
        .count() as u64
}

/// Every (client, n) in the table on the connection's server.
pub async fn rows(conn: &mut Conn) -> Result<HashSet<(u32, u32)>, String> {
    let v: Vec<(u32, u32)> = conn
        .query(format!("SELECT client, n FROM {TABLE}"))
        .await
        .map_err(|e| format!("reading {TABLE}: {e}"))?;
    Ok(v.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(client: u32, n: u32, start_s: f64, end_s: f64, error: Option<&str>) -> Write {
        Write {
            client,
            n,
            start_s,
            end_s,
            error: error.map(String::from),
        }
    }

    #[test]
    fn the_gap_is_the_longest_silence_between_acks_around_the_change() {
        let writes = vec![
            // A longer silence long before the change does not count.
            w(0, 1, -5.0, -4.9, None),
            w(0, 2, -3.0, -2.9, None),
            w(0, 3, -0.02, -0.01, None),
            w(1, 1, -0.005, 0.004, Some("2013 (HY000) Lost connection")),
            w(0, 4, 0.0, 1.25, None),
            w(1, 2, 0.1, 1.3, None),
            w(0, 5, 1.3, 1.31, None),
        ];
        let a = analyse(&writes);
        assert_eq!(a.acked, 6);
        assert_eq!((a.errors, a.most_errors_one_client), (1, 1));
        assert!((a.gap_ms - 1260.0).abs() < 1e-6, "{a:?}");
        assert!((a.gap_from_ms + 10.0).abs() < 1e-6, "{a:?}");
        assert!((a.gap_to_ms - 1250.0).abs() < 1e-6, "{a:?}");
        assert!((a.around_max_ms - 1250.0).abs() < 1e-6, "{a:?}");
        assert!(a.steady_p99_ms > 99.0 && a.steady_p99_ms < 101.0, "{a:?}");
        assert_eq!(a.error_kinds.len(), 1);
    }

    #[test]
    fn without_two_acks_there_is_no_gap_to_measure() {
        let a = analyse(&[w(0, 1, -0.5, -0.4, None), w(0, 2, 0.0, 5.0, Some("x"))]);
        assert_eq!(a.gap_ms, 0.0);
        assert_eq!(a.acked, 1);
    }

    #[test]
    fn a_lost_write_is_an_acknowledged_one_missing_from_the_rows() {
        let writes = vec![
            w(0, 1, 0.0, 0.1, None),
            w(0, 2, 0.2, 0.3, Some("connection lost")),
            w(1, 1, 0.0, 0.1, None),
        ];
        let rows: HashSet<(u32, u32)> = [(0, 1), (0, 2)].into_iter().collect();
        // (0, 2) failed but committed: not lost; (1, 1) was acknowledged and is missing.
        assert_eq!(lost(&writes, &rows), 1);
    }

    #[test]
    fn quantile_by_nearest_rank() {
        assert_eq!(quantile(vec![], 0.99), 0.0);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(v.clone(), 0.99), 99.0);
        assert_eq!(quantile(v, 1.0), 100.0);
    }
}

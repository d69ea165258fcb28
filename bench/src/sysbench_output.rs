//! sysbench runs (`oltp_point_select`, `oltp_read_only`) and parsing of their output.

use crate::model::records::SysbenchRecord;

/// Figures parsed from one `sysbench ... run --histogram=on` output.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub tps: f64,
    pub qps: f64,
    pub avg_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub reconnects: u64,
    pub total_time_s: f64,
}

/// "    queries:  14 (12345.67 per sec.)" → (14, 12345.67)
fn count_and_rate(line: &str) -> Option<(u64, f64)> {
    let (_, rest) = line.split_once(':')?;
    let rest = rest.trim();
    let (n, rate) = rest.split_once('(')?;
    let n = n.trim().parse().ok()?;
    let rate = rate.split_whitespace().next()?.parse().ok()?;
    Some((n, rate))
}

fn value_after_colon(line: &str) -> Option<f64> {
    line.split_once(':')?
        .1
        .trim()
        .trim_end_matches('s')
        .parse()
        .ok()
}

/// Percentile from sysbench's latency histogram lines
/// (`       0.052 |****                  12`): value = bucket, last column = count.
pub fn histogram_percentile(buckets: &[(f64, u64)], p: f64) -> f64 {
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    if total == 0 {
        return 0.0;
    }
    let want = (total as f64 * p).ceil().max(1.0) as u64;
    let mut acc = 0;
    for &(v, n) in buckets {
        acc += n;
        if acc >= want {
            return v;
        }
    }
    buckets.last().map_or(0.0, |b| b.0)
}

pub fn parse(out: &str) -> Result<Parsed, String> {
    let mut p = Parsed::default();
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut in_hist = false;
    let mut saw_queries = false;
    for line in out.lines() {
        let t = line.trim();
        if t.starts_with("Latency histogram") {
            in_hist = true;
            continue;
        }
        if in_hist {
            if t.starts_with("value") {
                continue;
            }
            if let Some((v, rest)) = t.split_once('|') {
                if let (Ok(v), Some(Ok(n))) = (
                    v.trim().parse::<f64>(),
                    rest.split_whitespace().last().map(|x| x.parse::<u64>()),
                ) {
                    buckets.push((v, n));
                    continue;
                }
            }
            if t.is_empty() && buckets.is_empty() {
                continue;
            }
            in_hist = false;
        }
        if t.starts_with("transactions:") {
            p.tps = count_and_rate(t).ok_or("bad transactions line")?.1;
        } else if t.starts_with("queries:") {
            p.qps = count_and_rate(t).ok_or("bad queries line")?.1;
            saw_queries = true;
        } else if t.starts_with("ignored errors:") {
            p.errors = count_and_rate(t).map_or(0, |x| x.0);
        } else if t.starts_with("reconnects:") {
            p.reconnects = count_and_rate(t).map_or(0, |x| x.0);
        } else if t.starts_with("avg:") {
            p.avg_ms = value_after_colon(t).unwrap_or(0.0);
        } else if t.starts_with("max:") {
            p.max_ms = value_after_colon(t).unwrap_or(0.0);
        } else if t.starts_with("95th percentile:") {
            p.p95_ms = value_after_colon(t).unwrap_or(0.0);
        } else if t.starts_with("total time:") {
            p.total_time_s = value_after_colon(t).unwrap_or(0.0);
        }
    }
    if !saw_queries {
        return Err("no 'queries:' line in sysbench output".into());
    }
    if !buckets.is_empty() {
        p.p99_ms = histogram_percentile(&buckets, 0.99);
        if p.p95_ms == 0.0 {
            p.p95_ms = histogram_percentile(&buckets, 0.95);
        }
    }
    Ok(p)
}

impl Parsed {
    pub fn into_record(self, target: &str, test: &str, threads: usize) -> SysbenchRecord {
        SysbenchRecord {
            target: target.into(),
            test: test.into(),
            threads,
            duration_s: self.total_time_s,
            tps: self.tps,
            qps: self.qps,
            avg_ms: self.avg_ms,
            p95_ms: self.p95_ms,
            p99_ms: self.p99_ms,
            max_ms: self.max_ms,
            errors: self.errors,
            reconnects: self.reconnects,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 16
Initializing random number generator from current time

Initializing worker threads...

Threads started!

Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
       0.100 |*                                        10
       0.200 |****************************************  880
       0.500 |***                                      90
       2.000 |                                         15
       9.000 |                                         5
 
SQL statistics:
    queries performed:
        read:                            1000
        write:                           0
        other:                           0
        total:                           1000
    transactions:                        1000   (166.60 per sec.)
    queries:                             1000   (166.60 per sec.)
    ignored errors:                      3      (0.50 per sec.)
    reconnects:                          0      (0.00 per sec.)

General statistics:
    total time:                          6.0020s
    total number of events:              1000

Latency (ms):
         min:                                    0.08
         avg:                                    0.25
         max:                                    9.01
         95th percentile:                        0.50
         sum:                                  250.00

Threads fairness:
    events (avg/stddev):           62.5000/2.00
";

    #[test]
    fn parses_sysbench_output() {
        let p = parse(OUT).unwrap();
        assert_eq!(p.tps, 166.60);
        assert_eq!(p.qps, 166.60);
        assert_eq!(p.errors, 3);
        assert_eq!(p.reconnects, 0);
        assert_eq!(p.avg_ms, 0.25);
        assert_eq!(p.max_ms, 9.01);
        assert_eq!(p.p95_ms, 0.50);
        assert_eq!(p.total_time_s, 6.002);
        // 10+880+90 = 980 < 990; +15 = 995 >= 990 → 2.000
        assert_eq!(p.p99_ms, 2.0);
    }

    #[test]
    fn histogram_percentiles() {
        let b = [(1.0, 50), (2.0, 45), (3.0, 5)];
        assert_eq!(histogram_percentile(&b, 0.5), 1.0);
        assert_eq!(histogram_percentile(&b, 0.95), 2.0);
        assert_eq!(histogram_percentile(&b, 0.99), 3.0);
        assert_eq!(histogram_percentile(&[], 0.99), 0.0);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("FATAL: unable to connect").is_err());
    }
}

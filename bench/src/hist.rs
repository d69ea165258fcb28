//! Latency histograms: creation, percentile summaries and HdrHistogram's
//! standard percentile-distribution text format (`.hgrm`).
//!
//! All values are recorded in microseconds.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Significant value digits of every histogram (HdrHistogram's usual 3).
pub const SIGFIG: u8 = 3;
/// Highest trackable value: 10 minutes in µs. Larger values are clamped.
pub const MAX_US: u64 = 600_000_000;

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, SIGFIG).expect("valid histogram bounds")
}

/// Clamps a latency into the histogram's range.
pub fn clamp_us(us: u64) -> u64 {
    us.clamp(1, MAX_US)
}

/// The percentile figures every record carries, in µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: (h.mean() * 10.0).round() / 10.0,
        }
    }
}

/// Sub-buckets per bucket for a given precision, as HdrHistogram computes it.
fn sub_bucket_count(sigfig: u8) -> u64 {
    let largest_single_unit = 2 * 10u64.pow(sigfig as u32);
    let magnitude = (largest_single_unit as f64).log2().ceil() as u32;
    1u64 << magnitude
}

/// HdrHistogram's `outputPercentileDistribution(out, 5, scale)` text: the
/// format that HdrHistogram's plotter (plotFiles.html) and HistogramLogAnalyzer
/// read. `scale` divides the recorded values (1000.0 turns µs into ms).
pub fn hgrm(h: &Histogram<u64>, scale: f64) -> String {
    let digits = SIGFIG as usize;
    let mut out = String::new();
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    if !h.is_empty() {
        let mut total: u64 = 0;
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let value = h.highest_equivalent(v.value_iterated_to()) as f64 / scale;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(
                    out,
                    "{:>12.digits$} {:>2.12} {:>10} {:>14.2}",
                    value,
                    q,
                    total,
                    1.0 / (1.0 - q),
                );
            } else {
                let _ = writeln!(out, "{:>12.digits$} {:>2.12} {:>10}", value, q, total);
            }
        }
    }
    let (mean, stdev, max) = if h.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (
            h.mean() / scale,
            h.stdev() / scale,
            h.highest_equivalent(h.max()) as f64 / scale,
        )
    };
    let _ = writeln!(
        out,
        "#[Mean    = {mean:>12.digits$}, StdDeviation   = {stdev:>12.digits$}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {max:>12.digits$}, Total count    = {:>12}]",
        h.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        sub_bucket_count(SIGFIG)
    );
    out
}

/// Points (percentile in [0,1), value in µs) for plotting, one per
/// iteration step of the percentile iterator, last (100%) point excluded.
pub fn plot_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    if h.is_empty() {
        return pts;
    }
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let value = h.highest_equivalent(v.value_iterated_to()) as f64;
        if q < 1.0 {
            pts.push((q, value));
        } else {
            pts.push((q, value));
            break;
        }
    }
    pts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Histogram<u64> {
        let mut h = new_hist();
        for v in 1..=1000u64 {
            h.record(v * 10).unwrap();
        }
        h
    }

    #[test]
    fn percentiles_of_uniform() {
        let p = Percentiles::of(&sample());
        assert!((4990..=5010).contains(&p.p50_us), "{p:?}");
        assert!((8990..=9010).contains(&p.p90_us), "{p:?}");
        assert!((9890..=9910).contains(&p.p99_us), "{p:?}");
        assert!(p.p999_us >= 9980 && p.p999_us <= 10010, "{p:?}");
        assert!(p.max_us >= 10000 && p.max_us <= 10010, "{p:?}");
        assert_eq!(Percentiles::of(&new_hist()), Percentiles::default());
    }

    #[test]
    fn hgrm_has_standard_layout() {
        let text = hgrm(&sample(), 1000.0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        // First data line: the smallest value at percentile 0.
        let first: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(first.len(), 4);
        assert_eq!(first[0], "0.010");
        assert_eq!(first[1], "0.000000000000");
        assert_eq!(first[2], "1");
        assert_eq!(first[3], "1.00");
        // Percentiles never decrease; counts grow to the total; values grow.
        let data: Vec<Vec<&str>> = lines[2..]
            .iter()
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        let mut last_q = -1.0;
        let mut last_v = -1.0;
        for d in &data {
            let v: f64 = d[0].parse().unwrap();
            let q: f64 = d[1].parse().unwrap();
            assert!(q >= last_q && v >= last_v, "{d:?}");
            last_q = q;
            last_v = v;
        }
        let last = data.last().unwrap();
        assert_eq!(last.len(), 3, "the 100% line has no 1/(1-p) column");
        assert_eq!(last[1], "1.000000000000");
        assert_eq!(last[2], "1000");
        // Footer.
        let footer: Vec<&&str> = lines.iter().filter(|l| l.starts_with("#[")).collect();
        assert_eq!(footer.len(), 3);
        assert!(
            footer[0].starts_with("#[Mean    =        5.00"),
            "{}",
            footer[0]
        );
        assert!(
            footer[1].contains("Total count    =         1000]"),
            "{}",
            footer[1]
        );
        assert!(
            footer[2].contains("SubBuckets     =         2048]"),
            "{}",
            footer[2]
        );
        // The 1/(1-p) column matches the percentile column.
        for d in data.iter().filter(|d| d.len() == 4) {
            let q: f64 = d[1].parse().unwrap();
            let n: f64 = d[3].parse().unwrap();
            assert!((n - 1.0 / (1.0 - q)).abs() < 0.01, "{d:?}");
        }
    }

    #[test]
    fn hgrm_of_empty_histogram_is_well_formed() {
        let text = hgrm(&new_hist(), 1000.0);
        assert!(text.starts_with("       Value"));
        assert!(text.contains("Total count    =            0]"));
    }

    #[test]
    fn sub_buckets() {
        assert_eq!(sub_bucket_count(3), 2048);
        assert_eq!(sub_bucket_count(2), 256);
    }

    #[test]
    fn plot_points_end_at_100() {
        let pts = plot_points(&sample());
        assert!(pts.len() > 10);
        assert_eq!(pts.last().unwrap().0, 1.0);
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}

//! The report of a run, from its results only: the table printed at the end and embedded in
//! summary.md, summary.md itself, and the SVG plots. Nothing here measures or starts anything.

mod cluster;
mod grid;
mod markdown;
mod pooling;
mod results;
mod svg;
pub mod tls;

pub use markdown::markdown;
pub use results::table;
pub use svg::{svg, Panel};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::{new_hist, plot_points, Percentiles};
    use crate::model::records::{Record, Summary, Verification};

    fn rec(target: &str, p99: u64, rate: f64) -> Record {
        let mut r = Record {
            target: target.into(),
            scenario: "connect".into(),
            concurrency: 16,
            mode: "closed-loop".into(),
            rounds: 2,
            count: 1000,
            duration_s: 2.0,
            rate,
            verified: Verification {
                ok: true,
                detail: "x".into(),
            },
            hgrm: format!("connect-c16-{target}.hgrm"),
            ..Default::default()
        };
        r.latency = Percentiles {
            p50_us: p99 / 2,
            p90_us: p99 - 10,
            p99_us: p99,
            p999_us: p99 * 2,
            max_us: p99 * 3,
            mean_us: 1.5,
        };
        r
    }

    fn summary() -> Summary {
        Summary {
            started: "2025-01-01T00:00:00Z".into(),
            profile: "quick".into(),
            targets: vec!["fixed".into(), "heap".into(), "direct".into()],
            records: vec![
                rec("heap", 800, 900.0),
                rec("direct", 400, 1000.0),
                rec("fixed", 600, 950.0),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn json_has_one_record_per_cell_with_required_fields() {
        let s = summary();
        let v: serde_json::Value = serde_json::to_value(&s).unwrap();
        let recs = v["records"].as_array().unwrap();
        assert_eq!(recs.len(), 3);
        for r in recs {
            for k in [
                "target",
                "scenario",
                "concurrency",
                "count",
                "rate",
                "failures",
                "p50_us",
                "p90_us",
                "p99_us",
                "p999_us",
                "max_us",
            ] {
                assert!(r.get(k).is_some(), "missing {k} in {r}");
            }
            assert!(r.get("row_bytes").is_none(), "None fields are omitted");
        }
        assert_eq!(recs[0]["p99_us"], 800);
        assert_eq!(recs[0]["p999_us"], 1600);
    }

    #[test]
    fn table_orders_targets_and_computes_ratios() {
        let t = table(&summary(), false);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("── connect c=16"), "{t}");
        assert!(lines[2].trim_start().starts_with("fixed"), "{t}");
        assert!(lines[3].trim_start().starts_with("heap"), "{t}");
        assert!(lines[4].trim_start().starts_with("direct"), "{t}");
        // fixed p99 600 / direct 400 = 1.50; heap 800/400 = 2.00
        assert!(lines[2].contains("1.50"), "{t}");
        assert!(lines[3].contains("2.00"), "{t}");
        assert!(
            t.contains("fixed/heap: p50 0.75 p99 0.75 p99.9 0.75 ops/s 1.06"),
            "{t}"
        );
    }

    #[test]
    fn a_baseline_twin_has_its_row_and_a_ratio_line() {
        let mut s = summary();
        s.targets = vec![
            "fixed".into(),
            "fixed@base".into(),
            "heap".into(),
            "direct".into(),
        ];
        s.records.push(rec("fixed@base", 500, 1000.0));
        let t = table(&s, false);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[3].trim_start().starts_with("fixed@base"), "{t}");
        // The mode line stays first; the twin's line follows, new over base.
        assert!(lines[6].contains("fixed/heap:"), "{t}");
        assert!(
            lines[7].contains("fixed/fixed@base: p50 1.20 p99 1.20 p99.9 1.20 ops/s 0.95"),
            "{t}"
        );
        let md = markdown(&s);
        assert!(md.contains("\nfixed/fixed@base: p50 1.20"), "{md}");
    }

    #[test]
    fn markdown_table_is_well_formed() {
        let md = markdown(&summary());
        let rows: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.starts_with("#### connect c=16"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(rows.len(), 5, "{md}"); // header, separator, 3 targets
        let ncols = rows[0].matches('|').count();
        assert!(rows.iter().all(|r| r.matches('|').count() == ncols), "{md}");
        assert!(md.contains("## Verification"));
    }

    #[test]
    fn svg_is_well_formed() {
        let mut h = new_hist();
        for v in 1..=10_000u64 {
            h.record(100 + v % 977).unwrap();
        }
        let panel = Panel {
            title: "connect c=16".into(),
            lines: vec![
                ("fixed".into(), plot_points(&h)),
                ("direct".into(), plot_points(&h)),
            ],
        };
        let s = svg("connect <test>", &[panel]);
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("99.9%"));
        assert!(s.contains("connect &lt;test&gt;"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }
}

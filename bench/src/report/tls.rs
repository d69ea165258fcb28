//! The TLS section's table (printed after the run's and written to tls.md): each mode per
//! target, then what TLS costs: server CPU and rate of full and resumed handshakes against
//! plain connects, and of TLS queries against plain ones.

use std::fmt::Write as _;

use crate::model::tls::{Mode, TlsRecord, TlsReport};

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// The section's table, and the ratios it is about.
pub fn table(report: &TlsReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "── TLS (own client: connect → login → COM_QUIT; point selects on persistent connections) ──"
    );
    let _ = writeln!(
        s,
        "  load average at start {}, at end {}",
        report.loadavg_start, report.loadavg_end
    );
    let _ = writeln!(
        s,
        "  {:<16} {:<14} {:>3} {:>8} {:>7} {:>7} {:>7} {:>5} {:>9} {:>12} {:>14}",
        "mode",
        "target",
        "c",
        "ops/s",
        "p50",
        "p99",
        "p99.9",
        "fail",
        "resumed",
        "proxy cpu/op",
        "mariadb cpu/op"
    );
    for r in &report.records {
        let resumed = if r.handshakes > 0 {
            format!("{:.0}%", 100.0 * r.resumed as f64 / r.handshakes as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            s,
            "  {:<16} {:<14} {:>3} {:>8} {:>7} {:>7} {:>7} {:>5} {:>9} {:>12} {:>14}",
            r.mode.name(),
            r.target,
            r.concurrency,
            r.rate,
            r.latency.p50_us,
            r.latency.p99_us,
            r.latency.p999_us,
            r.failures,
            resumed,
            opt(r.proxy_cpu_us_per_op),
            opt(r.mariadb_cpu_us_per_op)
        );
    }
    cost_ratios(&mut s, report);
    for n in &report.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    s
}

/// Per target: what a full TLS handshake costs against a plain connect and a resumed one
/// against a full one (server CPU and rate), and TLS queries against plain ones.
fn cost_ratios(s: &mut String, report: &TlsReport) {
    let find = |t: &str, m: Mode| report.records.iter().find(|r| r.target == t && r.mode == m);
    let mut targets: Vec<&str> = Vec::new();
    for r in &report.records {
        if !targets.contains(&r.target.as_str()) {
            targets.push(&r.target);
        }
    }
    for t in targets {
        let ratio = |a: Mode, b: Mode, f: &dyn Fn(&TlsRecord) -> Option<f64>| match (
            find(t, a).and_then(f),
            find(t, b).and_then(f),
        ) {
            (Some(x), Some(y)) if y > 0.0 => format!("{:.2}", x / y),
            _ => "-".into(),
        };
        let cpu = |r: &TlsRecord| match (r.proxy_cpu_us_per_op, r.mariadb_cpu_us_per_op) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        let rate = |r: &TlsRecord| Some(r.rate);
        let _ = writeln!(
            s,
            "  {t}: server CPU per connect full/plain {} resumed/full {}; connects/s full/plain {} resumed/full {}; select ops/s tls/plain {}",
            ratio(Mode::ConnectFull, Mode::ConnectPlain, &cpu),
            ratio(Mode::ConnectResumed, Mode::ConnectFull, &cpu),
            ratio(Mode::ConnectFull, Mode::ConnectPlain, &rate),
            ratio(Mode::ConnectResumed, Mode::ConnectFull, &rate),
            ratio(Mode::SelectTls, Mode::SelectPlain, &rate),
        );
    }
}

//! `ringgate-bench load`: one scenario against one endpoint, no set-up; prints one line of
//! figures and the errors, and writes the histogram with --hgrm.

use std::time::Duration;

use crate::args::{secs, Args};
use crate::hist::{self, Percentiles};
use crate::load::{self, LoadSpec};
use crate::model::scenario::Scenario;
use crate::model::target::Endpoint;
use crate::model::{Res, BENCH_DB};

pub async fn run_load(args: Args) -> Res<()> {
    let req = |k: &str| {
        args.flags
            .get(k)
            .cloned()
            .ok_or(format!("load: --{k} is required"))
    };
    let ep = Endpoint {
        host: args
            .flags
            .get("host")
            .cloned()
            .unwrap_or("127.0.0.1".into()),
        port: req("port")?.parse().map_err(|_| "bad --port")?,
        user: req("user")?,
        password: args.flags.get("password").cloned().unwrap_or_default(),
        db: args.flags.get("db").cloned().unwrap_or(BENCH_DB.into()),
    };
    let scenario = Scenario::parse(&req("scenario")?).ok_or("unknown --scenario")?;
    let f = |k: &str, d: f64| {
        args.flags
            .get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(d)
    };
    let spec = LoadSpec {
        scenario,
        concurrency: f("concurrency", 16.0) as usize,
        row_bytes: f("row-bytes", 65536.0) as u64,
        table_size: f("table-size", 10000.0) as u64,
        warmup: secs(f("warmup", 1.0)),
        duration: secs(f("duration", 5.0)),
        rate: args.flags.get("rate").and_then(|v| v.parse().ok()),
        op_timeout: Duration::from_secs(10),
    };
    let r = load::run(&ep, &spec).await;
    let p = Percentiles::of(&r.hist);
    println!(
        "{} c={} count={} rate={:.0}/s failures={} timeouts={} setup_failures={} p50={}µs p90={}µs p99={}µs p99.9={}µs max={}µs",
        scenario.name(), spec.concurrency, r.count, r.count as f64 / r.measured.as_secs_f64(), r.failures, r.timeouts, r.setup_failures,
        p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.max_us
    );
    for (e, n) in &r.errors {
        println!("  {n} × {e}");
    }
    if let Some(path) = args.flags.get("hgrm") {
        std::fs::write(path, hist::hgrm(&r.hist, 1000.0)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

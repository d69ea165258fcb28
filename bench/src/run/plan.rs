//! The plan of a run, from the options: the profile with its overrides, the scenarios, the
//! targets' ports and flags, and where the results go. Only parsing: nothing starts here.

use std::path::PathBuf;

use crate::args::{secs, Args};
use crate::model::profile::{profile, Profile};
use crate::model::scenario::split_scenarios;
use crate::model::scenario::{PoolingScenario, Scenario};
use crate::model::Res;

/// Every target name BENCH_TARGETS accepts.
const TARGETS: [&str; 9] = [
    "fixed", "busy", "hold", "tx", "plainfd", "ring", "heap", "direct", "haproxy",
];

/// What a run will do.
pub struct Plan {
    pub root: PathBuf,
    pub prof: Profile,
    /// The scenarios of the interleaved rounds.
    pub scenarios: Vec<Scenario>,
    /// The scenarios that start their own ringgates and run once.
    pub pooling: Vec<PoolingScenario>,
    pub run_tls: bool,
    /// Open loop at this many operations/s per cell; closed loop when None.
    pub rate: Option<f64>,
    pub smoke: bool,
    pub bin: PathBuf,
    pub base_port: u16,
    pub busy_poll_us: u32,
    /// Flags for every ringgate target (an A/B of --read-buffer-size, say).
    pub ringgate_args: Vec<String>,
}

/// Reads the options into a plan; `default_profile` is the command's (run: quick, smoke:
/// smoke).
pub fn plan(args: &Args, default_profile: &str, root: PathBuf) -> Res<Plan> {
    let prof_name = args
        .get("profile", "BENCH_PROFILE")
        .unwrap_or(default_profile.into());
    let mut prof = profile(&prof_name)?;
    apply_overrides(&mut prof, args)?;
    let (run_tls, scenario_list) =
        split_scenarios(args.get("scenarios", "BENCH_SCENARIOS").as_deref());
    let (scenarios, pooling) = parse_scenarios(scenario_list, &prof)?;
    let rate: Option<f64> = args.num("rate", "BENCH_RATE")?;
    let smoke = prof.name == "smoke";
    let bin = args
        .get("ringgate-bin", "RINGGATE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/ringgate"));
    let base_port: u16 = args
        .num("base-port", "BENCH_BASE_PORT")?
        .unwrap_or(if smoke { 16440 } else { 16400 });
    let busy_poll_us: u32 = args
        .num("busy-poll-us", "BENCH_BUSY_POLL_US")?
        .unwrap_or(100);
    let ringgate_args = args
        .get("ringgate-args", "BENCH_RINGGATE_ARGS")
        .map(|a| a.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    Ok(Plan {
        root,
        prof,
        scenarios,
        pooling,
        run_tls,
        rate,
        smoke,
        bin,
        base_port,
        busy_poll_us,
        ringgate_args,
    })
}

/// The options that change the profile's rounds, timings, sysbench, targets and cells.
fn apply_overrides(prof: &mut Profile, args: &Args) -> Res<()> {
    if let Some(r) = args.num("rounds", "BENCH_ROUNDS")? {
        prof.rounds = r;
    }
    if let Some(d) = args.num::<f64>("duration", "BENCH_DURATION")? {
        prof.duration = secs(d);
    }
    if let Some(d) = args.num::<f64>("warmup", "BENCH_WARMUP")? {
        prof.warmup = secs(d);
    }
    if let Some(s) = args.get("sysbench", "BENCH_SYSBENCH") {
        prof.sysbench = matches!(s.as_str(), "1" | "on" | "yes" | "true");
    }
    if let Some(t) = args.get("targets", "BENCH_TARGETS") {
        prof.targets = parse_targets(&t)?;
    }
    if let Some(c) = args.get("select-concurrency", "BENCH_SELECT_CONC") {
        prof.select = c
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .map_err(|_| format!("bad concurrency {x:?}"))
            })
            .collect::<Res<_>>()?;
    }
    // Large-result cells as ROW_BYTES:CONCURRENCY pairs (1048576:1,1048576:8).
    if let Some(c) = args.get("large-cells", "BENCH_LARGE_CELLS") {
        prof.large = c.split(',').map(parse_large_cell).collect::<Res<_>>()?;
    }
    Ok(())
}

fn parse_targets(list: &str) -> Res<Vec<String>> {
    let targets: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for t in &targets {
        if !TARGETS.contains(&t.as_str()) {
            return Err(format!(
                "unknown target {t:?} (fixed, busy, hold, tx, plainfd, ring, heap, direct, \
                 haproxy)"
            ));
        }
    }
    Ok(targets)
}

/// `ROW_BYTES:CONCURRENCY`.
fn parse_large_cell(x: &str) -> Res<(u64, usize)> {
    let bad = || format!("bad large-result cell {x:?} (ROW_BYTES:CONCURRENCY)");
    let (rows, conc) = x.trim().split_once(':').ok_or_else(bad)?;
    Ok((
        rows.parse().map_err(|_| bad())?,
        conc.parse().map_err(|_| bad())?,
    ))
}

/// The scenario list (without `tls`) split into the rounds' scenarios and the pooling ones;
/// without a list, the three of the rounds and the profile's pooling scenarios.
fn parse_scenarios(
    list: Option<String>,
    prof: &Profile,
) -> Res<(Vec<Scenario>, Vec<PoolingScenario>)> {
    let Some(s) = list else {
        return Ok((
            vec![
                Scenario::Connect,
                Scenario::PointSelect,
                Scenario::LargeResult,
            ],
            PoolingScenario::defaults(&prof.name),
        ));
    };
    let (mut rounds, mut pooling) = (Vec::new(), Vec::new());
    for x in s.split(',').filter(|x| !x.trim().is_empty()) {
        match (Scenario::parse(x), PoolingScenario::parse(x)) {
            (Some(sc), _) => rounds.push(sc),
            (None, Some(e)) => pooling.push(e),
            _ => return Err(format!("unknown scenario {x:?}")),
        }
    }
    Ok((rounds, pooling))
}

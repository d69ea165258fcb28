//! The plan of a run, from the options: the profile with its overrides, the scenarios, the
//! targets' ports and flags, and where the results go. Only parsing: nothing starts here.

use std::path::PathBuf;

use crate::args::{secs, Args};
use crate::model::profile::{profile, Profile};
use crate::model::scenario::split_scenarios;
use crate::model::scenario::{PoolingScenario, Scenario};
use crate::model::target::BASELINE_SUFFIX;
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
    /// The cluster scenario (its own replication set and ringgates).
    pub run_cluster: bool,
    /// Open loop at this many operations/s per cell; closed loop when None.
    pub rate: Option<f64>,
    pub smoke: bool,
    pub bin: PathBuf,
    /// The binary of the baseline twins (`tx@base`...), when an A/B of two builds was asked.
    pub baseline: Option<PathBuf>,
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
    let asked = args.get("scenarios", "BENCH_SCENARIOS");
    let (run_tls, scenario_list) = split_scenarios(asked.as_deref());
    let (run_cluster, scenario_list) = take_cluster(scenario_list, &prof.name);
    let (scenarios, pooling) = parse_scenarios(scenario_list, &prof)?;
    if asked.is_some() && scenarios.is_empty() {
        only_own_processes(&mut prof, args);
    }
    let rate: Option<f64> = args.num("rate", "BENCH_RATE")?;
    let smoke = prof.name == "smoke";
    let bin = args
        .get("ringgate-bin", "RINGGATE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/ringgate"));
    let baseline = args
        .get("baseline-bin", "BENCH_BASELINE_BIN")
        .map(PathBuf::from);
    if baseline.is_some() {
        prof.targets = with_baselines(&prof.targets);
    }
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
        run_cluster,
        rate,
        smoke,
        bin,
        baseline,
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

/// Whether the cluster scenario runs, and the list without it. Without a list it runs in the
/// quick and full profiles: the smoke run (part of `make test`) stays short, and
/// `make test-cluster` already drives the same set through the same changes.
fn take_cluster(list: Option<String>, profile: &str) -> (bool, Option<String>) {
    match list {
        None => (profile != "smoke", None),
        Some(s) => {
            let rest: Vec<&str> = s.split(',').filter(|x| x.trim() != "cluster").collect();
            (rest.len() < s.split(',').count(), Some(rest.join(",")))
        }
    }
}

/// A list without a scenario of the rounds names only scenarios that start their own
/// processes (tls, cluster, many-clients, idle-*): then no target of the rounds starts, and
/// sysbench runs only when BENCH_SYSBENCH asks for it.
fn only_own_processes(prof: &mut Profile, args: &Args) {
    if args.get("sysbench", "BENCH_SYSBENCH").is_none() {
        prof.sysbench = false;
    }
    if !prof.sysbench {
        prof.targets.clear();
    }
}

/// The ringgate targets among `targets`.
pub const RINGGATE_TARGETS: [&str; 7] = ["fixed", "busy", "hold", "tx", "plainfd", "ring", "heap"];

/// The target list with each ringgate target followed by its baseline twin (`tx`,
/// `tx@base`): the twin runs in the same rounds, next to what it is compared with.
fn with_baselines(targets: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(targets.len() * 2);
    for t in targets {
        out.push(t.clone());
        if RINGGATE_TARGETS.contains(&t.as_str()) {
            out.push(format!("{t}{BASELINE_SUFFIX}"));
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_ringgate_target_is_followed_by_its_baseline_twin() {
        let got = with_baselines(&names(&["tx", "fixed", "ring", "direct", "haproxy"]));
        let want = names(&[
            "tx",
            "tx@base",
            "fixed",
            "fixed@base",
            "ring",
            "ring@base",
            "direct",
            "haproxy",
        ]);
        assert_eq!(got, want);
    }

    #[test]
    fn every_ringgate_target_has_a_twin_and_no_other_does() {
        let all = names(&TARGETS);
        let got = with_baselines(&all);
        assert_eq!(got.len(), TARGETS.len() + RINGGATE_TARGETS.len());
        for t in RINGGATE_TARGETS {
            assert!(got.contains(&format!("{t}@base")), "{t}");
        }
        assert!(!got
            .iter()
            .any(|t| t == "direct@base" || t == "haproxy@base"));
    }

    fn plan_with(flags: &[(&str, &str)]) -> Plan {
        let mut args = Args::parse(&[]).expect("no arguments");
        for (k, v) in flags {
            args.flags.insert(k.to_string(), v.to_string());
        }
        plan(&args, "quick", PathBuf::from("/nonexistent")).expect("plan")
    }

    #[test]
    fn without_a_baseline_the_target_list_is_as_asked() {
        // An empty flag hides BENCH_BASELINE_BIN from the environment.
        let p = plan_with(&[("targets", "tx,fixed,direct"), ("baseline-bin", "")]);
        assert_eq!(p.prof.targets, names(&["tx", "fixed", "direct"]));
        assert!(p.baseline.is_none());
    }

    #[test]
    fn a_baseline_binary_adds_the_twins() {
        let p = plan_with(&[("targets", "tx,direct"), ("baseline-bin", "/old/ringgate")]);
        assert_eq!(p.prof.targets, names(&["tx", "tx@base", "direct"]));
        assert_eq!(p.baseline, Some(PathBuf::from("/old/ringgate")));
    }

    #[test]
    fn the_cluster_runs_by_default_except_in_smoke_and_when_named() {
        assert_eq!(take_cluster(None, "quick"), (true, None));
        assert_eq!(take_cluster(None, "smoke"), (false, None));
        assert_eq!(
            take_cluster(Some("connect,cluster".into()), "smoke"),
            (true, Some("connect".into()))
        );
        assert_eq!(
            take_cluster(Some("connect".into()), "quick"),
            (false, Some("connect".into()))
        );
    }

    #[test]
    fn a_list_of_own_process_scenarios_starts_no_round_target() {
        let p = plan_with(&[
            ("scenarios", "cluster"),
            ("sysbench", ""),
            ("baseline-bin", ""),
        ]);
        assert!(p.run_cluster && !p.run_tls);
        assert!(p.scenarios.is_empty() && p.pooling.is_empty());
        assert!(p.prof.targets.is_empty() && !p.prof.sysbench);
        let p = plan_with(&[
            ("scenarios", "cluster,tls"),
            ("sysbench", "on"),
            ("baseline-bin", ""),
        ]);
        assert!(p.run_cluster && p.run_tls && p.prof.sysbench);
        assert!(!p.prof.targets.is_empty());
        let p = plan_with(&[
            ("scenarios", "connect"),
            ("sysbench", ""),
            ("baseline-bin", ""),
        ]);
        assert!(!p.run_cluster && !p.prof.targets.is_empty());
    }

    #[test]
    fn a_twin_cannot_be_asked_for_by_name() {
        assert!(parse_targets("tx@base").is_err());
    }
}

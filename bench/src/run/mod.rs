//! `ringgate-bench run` and `smoke`: the whole benchmark, in the order it happens. Plan the
//! run from the options; set up MariaDB and the targets; run the cells' interleaved rounds;
//! check for leaks; run the sections that follow (TLS, sysbench, transaction pooling, the
//! cluster);
//! collect the results; write and print the report; and, for smoke, the verdict.

mod collect;
mod leaks;
mod outputs;
mod plan;
mod rounds;
mod sections;
mod smoke;
mod summary;
mod targets;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::args::Args;
use crate::model::records::Summary;
use crate::model::{Res, BENCH_DB, BENCH_PASSWORD, BENCH_USER};
use crate::scenarios::{cluster, tls};
use crate::setup::backend::{admin_conn, load_data, start_backend};
use crate::setup::host::{machine, raise_nofile, repo_root, which};
use crate::setup::Ctx;
use outputs::Outputs;
use plan::{Plan, RINGGATE_TARGETS};

/// The whole run; `default_profile` is the command's.
pub async fn run_bench(args: Args, default_profile: &str) -> Res<()> {
    let t_start = Instant::now();
    let plan = plan::plan(&args, default_profile, repo_root())?;
    let machine_at_start = machine();
    raise_nofile();
    let out = Outputs::create(&plan.root, plan.smoke, &args)?;
    check_dependencies(&plan, &args)?;
    let (backend, own_server) = start_backend(&plan.root, &plan.prof, &args)?;
    load_data(&backend, &plan.prof, own_server).await?;
    let users = write_users_file(&out.run_dir)?;
    let ctx = Ctx {
        bin: &plan.bin,
        backend: &backend,
        users: &users,
        run_dir: &out.run_dir,
        prof: &plan.prof,
        base_port: plan.base_port,
    };
    let targets = targets::start_all(&ctx, &plan)?;
    let mut admin = admin_conn(&backend, BENCH_DB).await?;
    let mut warnings = Vec::new();
    targets::check_buffer_modes(&targets, plan.smoke, &mut warnings)?;

    let cells = rounds::plan_cells(&plan.prof, &plan.scenarios);
    if !cells.is_empty() {
        rounds::warm_up(&targets, &plan.prof).await?;
    }
    let accs = rounds::run_rounds(&cells, &targets, &mut admin, backend.pid, &plan).await?;
    let after_run = leaks::check(&targets, &mut warnings).await?;

    let tls_report = if plan.run_tls {
        Some(tls::section(&ctx, &plan.root, &out.dir, own_server).await?)
    } else {
        None
    };
    let sysbench = sections::sysbench(&targets, &plan.prof, &mut admin, &out.run_dir).await;
    let _ = admin.disconnect().await;
    let mux = sections::pooling(&ctx, &plan.pooling, &mut warnings).await;
    let cluster = if plan.run_cluster {
        let c = cluster::section(&ctx, &plan.root).await;
        warnings.extend(c.problems.iter().map(|p| format!("cluster: {p}")));
        Some(c)
    } else {
        None
    };

    let (records, panels) =
        collect::records(&cells, &targets, accs, plan.rate, &out.dir, &mut warnings)?;
    let svgs = collect::plots(&panels, plan.rate, &out.dir)?;
    let summary = Summary {
        started: out.started.clone(),
        profile: plan.prof.name.clone(),
        machine: summary::machine_at_end(machine_at_start),
        settings: summary::settings(&plan, &backend, &svgs),
        targets: targets.iter().map(|t| t.name.clone()).collect(),
        records,
        sysbench,
        after_run: after_run.figures,
        mux,
        cluster,
        warnings,
        elapsed_s: t_start.elapsed().as_secs_f64(),
    };
    summary::write(&summary, &out, plan.smoke)?;
    summary::print(&summary, tls_report.as_ref(), &out.dir);
    if plan.smoke {
        smoke::verdict(&summary, &after_run.leaks, tls_report.as_ref())?;
    }
    Ok(())
}

/// The tools and the binary the plan needs. A full run first installs the bench's tools
/// (scripts/ensure-deps.sh --bench) unless --skip-deps/BENCH_SKIP_DEPS.
fn check_dependencies(plan: &Plan, args: &Args) -> Res<()> {
    if !plan.smoke && args.get("skip-deps", "BENCH_SKIP_DEPS").is_none() {
        eprintln!("bench: scripts/ensure-deps.sh --bench");
        let st = Command::new(plan.root.join("scripts/ensure-deps.sh"))
            .arg("--bench")
            .status()
            .map_err(|e| format!("ensure-deps.sh: {e}"))?;
        if !st.success() {
            return Err("scripts/ensure-deps.sh --bench failed".into());
        }
    }
    let prof = &plan.prof;
    if prof.targets.iter().any(|t| t == "haproxy") && !which("haproxy") {
        return Err("haproxy is not installed (scripts/ensure-deps.sh --bench installs it)".into());
    }
    if prof.sysbench && !which("sysbench") {
        return Err(
            "sysbench is not installed (scripts/ensure-deps.sh --bench installs it)".into(),
        );
    }
    let needs_ringgate = prof
        .targets
        .iter()
        .any(|t| RINGGATE_TARGETS.contains(&t.as_str()))
        || !plan.pooling.is_empty()
        || plan.run_cluster;
    if needs_ringgate {
        check_binary(&plan.bin)?;
    }
    if let Some(b) = &plan.baseline {
        check_binary(b)?;
    }
    Ok(())
}

fn check_binary(bin: &Path) -> Res<()> {
    if bin.is_file() {
        Ok(())
    } else {
        Err(format!(
            "{} not found: build it first (cargo build --release)",
            bin.display()
        ))
    }
}

/// The proxies' users file: the bench's one user.
fn write_users_file(run_dir: &Path) -> Res<PathBuf> {
    let users = run_dir.join("users.json");
    std::fs::write(
        &users,
        format!("{{\"{BENCH_USER}\": [{{\"Password\": \"{BENCH_PASSWORD}\"}}]}}\n"),
    )
    .map_err(|e| e.to_string())?;
    Ok(users)
}

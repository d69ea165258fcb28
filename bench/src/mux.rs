//! The transaction-pooling scenarios of `make bench` (issues 12 and 13): `many-clients`
//! (many_clients.rs), `idle-10k` and `idle-max` (idle.rs). Unlike the cells of main.rs they
//! are not run per target in rounds: each starts its own ringgate(s) with the flags it needs,
//! runs once, stops them, and reports its own table (appended to the run's table and
//! summary.md) and records (summary.json's `mux`).
//!
//! Selected with BENCH_SCENARIOS like the others. Defaults: `many-clients` and `idle-10k` in
//! the quick and full profiles; `idle-max` (≥ 3 minutes of idling) only in the full profile
//! or when named; the smoke profile runs `idle-10k` with 200 clients in fixed mode. Knobs (environment): BENCH_MANY_CLIENTS (1000), BENCH_MANY_BACKENDS (64),
//! BENCH_MANY_TIME (seconds per sysbench run: 10 quick, 30 full), BENCH_IDLE_CLIENTS (10000),
//! BENCH_IDLE_MODES (fixed,ring,heap), BENCH_IDLE_MAX (100000), BENCH_IDLE_MAX_HOLD (seconds
//! idle before every client must answer: 200), BENCH_IDLE_MAX_ARGS (more ringgate flags for
//! idle-max, e.g. `--tcp-keepalive=false`).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::idle::{IdleRecord, IdleSpec};
use crate::many_clients::{self, McRecord};
use crate::rawclient::Login;
use crate::{procs, Backend, Profile};

/// A scenario of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extra {
    ManyClients,
    Idle10k,
    IdleMax,
}

impl Extra {
    pub fn parse(s: &str) -> Option<Extra> {
        match s.trim() {
            "many-clients" | "many_clients" => Some(Extra::ManyClients),
            "idle-10k" | "idle_10k" => Some(Extra::Idle10k),
            "idle-max" | "idle_max" => Some(Extra::IdleMax),
            _ => None,
        }
    }

    /// What runs when BENCH_SCENARIOS is not set.
    pub fn defaults(profile: &str) -> Vec<Extra> {
        match profile {
            "quick" => vec![Extra::ManyClients, Extra::Idle10k],
            "full" => vec![Extra::ManyClients, Extra::Idle10k, Extra::IdleMax],
            // A few seconds: 200 idle clients in fixed mode (the raw clients, the RSS and
            // backend figures, every client answering afterwards).
            "smoke" => vec![Extra::Idle10k],
            _ => Vec::new(),
        }
    }
}

/// What the scenarios need from the run.
pub struct Ctx<'a> {
    pub bin: &'a Path,
    pub backend: &'a Backend,
    pub users: &'a Path,
    pub run_dir: &'a Path,
    pub prof: &'a Profile,
    pub base_port: u16,
}

impl Ctx<'_> {
    /// A raw login to MariaDB itself, for its status counters.
    pub fn server_login(&self) -> Login {
        Login {
            addr: crate::addr(self.backend.port),
            user: self.backend.user.clone(),
            password: self.backend.password.clone(),
            db: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Everything this module measured (summary.json's `mux`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MuxReport {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub many_clients: Vec<McRecord>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<IdleRecord>,
    pub warnings: Vec<String>,
}

fn env_num<T: std::str::FromStr>(k: &str, default: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Runs the selected scenarios, one after the other.
pub async fn run(ctx: &Ctx<'_>, which: &[Extra]) -> MuxReport {
    let mut rep = MuxReport::default();
    for x in which {
        match x {
            Extra::ManyClients => tokio::task::block_in_place(|| many(ctx, &mut rep)),
            Extra::Idle10k | Extra::IdleMax => {
                tokio::task::block_in_place(|| idle(ctx, *x, &mut rep))
            }
        }
    }
    rep
}

fn many(ctx: &Ctx, rep: &mut MuxReport) {
    let threads: usize = env_num("BENCH_MANY_CLIENTS", 1000);
    let backends: usize = env_num("BENCH_MANY_BACKENDS", 64);
    let time_s: u64 = env_num(
        "BENCH_MANY_TIME",
        if ctx.prof.name == "full" { 30 } else { 10 },
    );
    crate::idle::raise_nofile(threads as u64 * 2 + 1100);
    for test in many_clients::TESTS {
        for (target, ps) in many_clients::RUNS {
            // A fresh ringgate per run: sessions pinned by an earlier run keep their backend
            // connections open until --backend-idle-timeout, and would count in this one.
            let proxy = if target == "direct" {
                None
            } else {
                let i = u16::from(target == "tx-pin");
                let (port, mport) = (ctx.base_port + 20 + i, ctx.base_port + 30 + i);
                match crate::start_ringgate(
                    &format!("fixed-mc-{target}-{test}-ps-{ps}"),
                    ctx.bin,
                    port,
                    mport,
                    ctx.backend,
                    ctx.users,
                    ctx.run_dir,
                    ctx.prof,
                    &many_clients::ringgate_args(threads, backends, target == "tx-pin"),
                ) {
                    Ok(t) => t.pid.map(|pid| many_clients::Proxy {
                        port,
                        metrics: crate::addr(mport),
                        pid,
                    }),
                    Err(e) => {
                        rep.warnings
                            .push(format!("many-clients {test} {target}: {e}"));
                        continue;
                    }
                }
            };
            let r = many_clients::run_one(
                ctx,
                test,
                target,
                ps,
                threads,
                time_s,
                proxy.as_ref(),
                proxy.as_ref().map(|_| backends),
            );
            if let Some(p) = proxy {
                procs::stop(p.pid, Duration::from_secs(15));
            }
            if let Some(f) = &r.failed {
                rep.warnings
                    .push(format!("many-clients {test} {target} ps={ps}: {f}"));
            }
            rep.many_clients.push(r);
        }
    }
}

fn idle(ctx: &Ctx, x: Extra, rep: &mut MuxReport) {
    let mut specs = Vec::new();
    let smoke = ctx.prof.name == "smoke";
    if x == Extra::Idle10k {
        let modes = std::env::var("BENCH_IDLE_MODES")
            .unwrap_or(if smoke { "fixed" } else { "fixed,ring,heap" }.into());
        for (i, mode) in modes.split(',').map(str::trim).enumerate() {
            if !["fixed", "ring", "heap"].contains(&mode) {
                rep.warnings
                    .push(format!("BENCH_IDLE_MODES: unknown mode {mode:?}"));
                continue;
            }
            specs.push(IdleSpec {
                scenario: "idle-10k",
                mode: mode.into(),
                aim: env_num("BENCH_IDLE_CLIENTS", if smoke { 200 } else { 10_000 }),
                many_sources: false,
                hold: Duration::ZERO,
                probe: Duration::from_secs(if smoke { 1 } else { 3 }),
                port: ctx.base_port + 22 + i as u16,
                metrics_port: ctx.base_port + 32 + i as u16,
                extra_args: Vec::new(),
            });
        }
    } else {
        specs.push(IdleSpec {
            scenario: "idle-max",
            mode: "ring".into(),
            aim: env_num("BENCH_IDLE_MAX", 100_000),
            many_sources: true,
            hold: Duration::from_secs(env_num("BENCH_IDLE_MAX_HOLD", 200)),
            probe: Duration::from_secs(3),
            port: ctx.base_port + 25,
            metrics_port: ctx.base_port + 35,
            extra_args: std::env::var("BENCH_IDLE_MAX_ARGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect(),
        });
    }
    for s in specs {
        let r = crate::idle::run(ctx, &s);
        if let Some(f) = &r.failed {
            rep.warnings
                .push(format!("{} ({}): {f}", r.scenario, r.mode));
        }
        if r.answer_failures > 0 {
            rep.warnings.push(format!(
                "{} ({}): {} of {} idle clients did not answer after {:.0} s idle: {:?}",
                r.scenario, r.mode, r.answer_failures, r.clients, r.hold_s, r.answer_errors
            ));
        }
        rep.idle.push(r);
    }
}

impl MuxReport {
    /// What fails a smoke run: a scenario that could not run, idle clients that did not all
    /// log in or did not all answer, a served client that failed.
    pub fn problems(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .many_clients
            .iter()
            .filter_map(|r| {
                r.failed
                    .as_ref()
                    .map(|f| format!("many-clients {} {}: {f}", r.test, r.target))
            })
            .collect();
        for r in &self.idle {
            let served = r.served_alone.failures + r.served_with_idle.failures;
            if r.failed.is_some()
                || r.clients < r.aim
                || r.answer_failures > 0
                || r.answered < r.clients
                || served > 0
            {
                v.push(format!(
                    "{} ({}): {} of {} clients, {} answered, {} failed {:?}, served-client \
                     failures {served}, {:?} {:?}",
                    r.scenario,
                    r.mode,
                    r.clients,
                    r.aim,
                    r.answered,
                    r.answer_failures,
                    r.answer_errors,
                    r.stopped_by,
                    r.failed
                ));
            }
        }
        v
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// Rows as an aligned text table or a markdown table.
fn grid(o: &mut String, title: &str, cols: &[&str], rows: &[Vec<String>], markdown: bool) {
    if markdown {
        let _ = writeln!(o, "#### {title}\n");
        let _ = writeln!(o, "| {} |", cols.join(" | "));
        let _ = writeln!(
            o,
            "|{}",
            cols.iter()
                .enumerate()
                .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
                .collect::<String>()
        );
        for r in rows {
            let _ = writeln!(o, "| {} |", r.join(" | "));
        }
        let _ = writeln!(o);
        return;
    }
    let widths: Vec<usize> = (0..cols.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain(std::iter::once(cols[i].chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let _ = writeln!(
        o,
        "── {title} {}",
        "─".repeat(60usize.saturating_sub(title.len()))
    );
    let line = |o: &mut String, cells: &[String]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = " ".repeat(widths[i] - c.chars().count());
            if i == 0 {
                let _ = write!(l, "  {c}{pad}");
            } else {
                let _ = write!(l, "  {pad}{c}");
            }
        }
        let _ = writeln!(o, "{l}");
    };
    line(o, &cols.iter().map(|c| c.to_string()).collect::<Vec<_>>());
    for r in rows {
        line(o, r);
    }
    let _ = writeln!(o);
}

/// This module's tables.
pub fn table(rep: &MuxReport, markdown: bool) -> String {
    let mut o = String::new();
    if let Some(first) = rep.many_clients.first() {
        let cols = [
            "test",
            "ps",
            "target",
            "QPS",
            "QPS/dir",
            "p95 ms",
            "p99 ms",
            "errors",
            "Threads_connected",
            "rg backends",
            "proxy µs/q",
            "srv µs/q",
            "failed",
        ];
        let rows: Vec<Vec<String>> = rep
            .many_clients
            .iter()
            .map(|r| {
                let direct = rep
                    .many_clients
                    .iter()
                    .find(|d| d.target == "direct" && d.test == r.test && d.ps_mode == r.ps_mode)
                    .map_or(0.0, |d| d.qps);
                vec![
                    r.test.clone(),
                    r.ps_mode.clone(),
                    r.target.clone(),
                    format!("{:.0}", r.qps),
                    ratio(r.qps, direct),
                    format!("{:.2}", r.p95_ms),
                    format!("{:.2}", r.p99_ms),
                    r.errors.to_string(),
                    format!(
                        "{:.0}→{:.0}",
                        r.threads_connected_before, r.threads_connected_peak
                    ),
                    opt(r.ringgate_backends_peak, 0),
                    opt(r.cpu_us_per_query(r.proxy_cpu_s), 1),
                    opt(r.cpu_us_per_query(r.server_cpu_s), 1),
                    r.failed
                        .as_deref()
                        .map_or(String::new(), |f| f.chars().take(70).collect()),
                ]
            })
            .collect();
        let title = format!(
            "many-clients: sysbench, {} client connections; tx = ringgate --pooling transaction \
             on ≤ {} backend connections",
            first.threads,
            first.backend_cap.unwrap_or(64)
        );
        grid(&mut o, &title, &cols, &rows, markdown);
    }
    if !rep.idle.is_empty() {
        let cols = [
            "scenario",
            "mode",
            "clients",
            "aim",
            "login s",
            "RSS B/client",
            "after query",
            "VmPin KiB",
            "rg backends",
            "Threads_connected",
            "held c/b/ring",
            "fallbacks",
            "served p50 alone/idle",
            "p99 alone/idle",
            "served fail",
            "idle s",
            "open after",
            "answered/failed",
            "backlog max",
            "backlog drops",
            "timeout resets",
            "stopped by",
        ];
        let rows: Vec<Vec<String>> = rep
            .idle
            .iter()
            .map(|r| {
                vec![
                    r.scenario.clone(),
                    r.mode.clone(),
                    r.clients.to_string(),
                    match r.aim_before_fd_cap {
                        Some(a) => format!("{} (of {a}: fd hard limit {})", r.aim, r.nofile_hard),
                        None => r.aim.to_string(),
                    },
                    format!("{:.1}", r.login_s),
                    format!("{:.0}", r.rss_per_client_b),
                    opt(r.rss_per_client_after_query_b, 0),
                    r.vm_pin_kib.to_string(),
                    format!("{:.0}", r.backends_peak),
                    format!(
                        "{:.0}→{:.0}",
                        r.threads_connected_before, r.threads_connected_peak
                    ),
                    format!(
                        "{:.0}/{:.0}/{:.0}",
                        r.held_client, r.held_backend, r.held_ring
                    ),
                    format!("{:.0}", r.heap_fallbacks),
                    format!("{}/{} µs", r.served_alone.p50_us, r.served_with_idle.p50_us),
                    format!("{}/{} µs", r.served_alone.p99_us, r.served_with_idle.p99_us),
                    (r.served_alone.failures + r.served_with_idle.failures).to_string(),
                    format!("{:.0}", r.hold_s),
                    format!("{:.0}", r.open_after_hold),
                    format!("{}/{}", r.answered, r.answer_failures),
                    match (r.netdev_max_backlog, r.netdev_max_backlog_raised_from) {
                        (Some(v), Some(was)) => format!("{v} (was {was})"),
                        (Some(v), None) => v.to_string(),
                        (None, _) => "-".into(),
                    },
                    r.softnet_drops.map_or("-".into(), |v| v.to_string()),
                    r.tcp_abort_on_timeout.map_or("-".into(), |v| v.to_string()),
                    r.failed
                        .clone()
                        .or_else(|| r.stopped_by.clone())
                        .map_or("-".into(), |s| s.chars().take(70).collect()),
                ]
            })
            .collect();
        grid(
            &mut o,
            "idle clients through ringgate --pooling transaction (64 backend connections)",
            &cols,
            &rows,
            markdown,
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_defaults() {
        assert_eq!(Extra::parse("many-clients"), Some(Extra::ManyClients));
        assert_eq!(Extra::parse(" idle-10k"), Some(Extra::Idle10k));
        assert_eq!(Extra::parse("idle_max"), Some(Extra::IdleMax));
        assert_eq!(Extra::parse("connect"), None);
        assert!(!Extra::defaults("quick").contains(&Extra::IdleMax));
        assert!(Extra::defaults("full").contains(&Extra::IdleMax));
        assert_eq!(Extra::defaults("smoke"), vec![Extra::Idle10k]);
    }

    #[test]
    fn tables_show_ratios_and_failures() {
        let rep = MuxReport {
            many_clients: vec![
                McRecord {
                    test: "oltp_point_select".into(),
                    target: "direct".into(),
                    ps_mode: "auto".into(),
                    threads: 1000,
                    qps: 1000.0,
                    ..Default::default()
                },
                McRecord {
                    test: "oltp_point_select".into(),
                    target: "tx".into(),
                    ps_mode: "auto".into(),
                    threads: 1000,
                    backend_cap: Some(64),
                    qps: 1500.0,
                    failed: Some("boom".into()),
                    ..Default::default()
                },
            ],
            idle: vec![IdleRecord {
                scenario: "idle-max".into(),
                mode: "ring".into(),
                clients: 18_900,
                aim: 18_900,
                aim_before_fd_cap: Some(100_000),
                nofile_hard: 20_000,
                ..Default::default()
            }],
            warnings: Vec::new(),
        };
        let t = table(&rep, false);
        assert!(t.contains("1.50"), "{t}");
        assert!(t.contains("boom"), "{t}");
        assert!(t.contains("18900 (of 100000: fd hard limit 20000)"), "{t}");
        let m = table(&rep, true);
        assert!(
            m.contains("| oltp_point_select | auto | tx | 1500 | 1.50 |"),
            "{m}"
        );
    }
}

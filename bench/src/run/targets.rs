//! The targets of the interleaved rounds: ringgate in each buffer mode and pooling variant,
//! HAProxy, and MariaDB directly; and the check that each ringgate runs in the mode it was
//! asked for.

use super::plan::Plan;
use crate::checks;
use crate::model::target::{is_baseline, own_name, Kind, Target};
use crate::model::{Res, BENCH_DB};
use crate::procs;
use crate::setup::launch::{ringgate_mode, start_haproxy, start_ringgate};
use crate::setup::Ctx;

/// Where a baseline twin's ports sit above its target's: clear of every other range of a
/// run.
const BASELINE_PORT_SHIFT: u16 = 40;

/// A ringgate target's port above the base port (HAProxy's is the base port itself); its
/// /metrics listens 10 above. A baseline twin's are its target's shifted.
fn port_offset(name: &str) -> Option<u16> {
    let shift = if is_baseline(name) {
        BASELINE_PORT_SHIFT
    } else {
        0
    };
    Some(shift + own_offset(own_name(name))?)
}

fn own_offset(name: &str) -> Option<u16> {
    Some(match name {
        "fixed" => 1,
        "heap" => 2,
        "ring" => 3,
        "busy" => 4,
        "hold" => 5,
        "tx" => 6,
        "plainfd" => 7,
        _ => return None,
    })
}

/// The flags of a ringgate target after the run's own. fixed, ring, heap, busy and hold
/// measure session pooling (their recorded figures, the COM_RESET_CONNECTION per connect):
/// they say so, now that transaction is the default.
fn target_flags(name: &str, plan: &Plan) -> Vec<String> {
    let busy_us = plan.busy_poll_us.to_string();
    let own: &[&str] = match own_name(name) {
        "busy" => &["--pooling", "session", "--busy-poll-us", &busy_us],
        "hold" => &["--pooling", "session", "--hold-idle-slots"],
        "tx" => &["--pooling", "transaction"],
        "plainfd" => &["--pooling", "session", "--direct-descriptors", "off"],
        _ => &["--pooling", "session"],
    };
    plan.ringgate_args
        .iter()
        .cloned()
        .chain(own.iter().map(|s| s.to_string()))
        .collect()
}

/// Starts the profile's targets in its order; the baseline twins with the baseline binary.
pub fn start_all(ctx: &Ctx, plan: &Plan) -> Res<Vec<Target>> {
    let base = plan.base_port;
    let mut targets = Vec::new();
    for name in &plan.prof.targets {
        let t = match (name.as_str(), port_offset(name)) {
            (_, Some(k)) => start_ringgate(
                &binary_ctx(ctx, plan, name)?,
                name,
                base + k,
                base + 10 + k,
                &target_flags(name, plan),
            )?,
            ("haproxy", None) => start_haproxy(base, ctx.backend, ctx.run_dir, ctx.prof)?,
            _ => Target {
                name: "direct".into(),
                ep: ctx.backend.endpoint(BENCH_DB),
                kind: Kind::Direct,
                pid: None,
            },
        };
        eprintln!("bench: target {:<8} 127.0.0.1:{}", t.name, t.ep.port);
        targets.push(t);
    }
    Ok(targets)
}

/// The context to start `name` in: the run's, with the baseline binary for a twin.
fn binary_ctx<'a>(ctx: &Ctx<'a>, plan: &'a Plan, name: &str) -> Res<Ctx<'a>> {
    if !is_baseline(name) {
        return Ok(*ctx);
    }
    let bin = plan.baseline.as_deref().ok_or(format!(
        "target {name}: no baseline binary (--baseline-bin)"
    ))?;
    Ok(Ctx { bin, ..*ctx })
}

/// Is "fixed" really fixed? A failed registration falls back to heap silently otherwise.
/// The smoke run (a test) stops here; a full run records a warning next to its figures.
pub fn check_buffer_modes(targets: &[Target], smoke: bool, warnings: &mut Vec<String>) -> Res<()> {
    for t in targets {
        if let Kind::Ringgate { metrics } = &t.kind {
            let m = procs::parse_prometheus(&procs::http_get(*metrics, "/metrics")?);
            if let Some(p) = checks::mode_problem(&m, ringgate_mode(&t.name)) {
                let w = format!("ringgate ({}): {p}", t.name);
                if smoke {
                    return Err(format!("smoke run failed: {w}"));
                }
                eprintln!("bench: WARNING: {w}");
                warnings.push(w);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_twin_listens_clear_of_every_other_port() {
        assert_eq!(port_offset("tx"), Some(6));
        assert_eq!(port_offset("tx@base"), Some(46));
        assert_eq!(port_offset("direct@base"), None);
        // The twins' ports and metrics (+10) stay above the highest other offset (+35).
        for t in ["fixed", "busy", "hold", "tx", "plainfd", "ring", "heap"] {
            let k = port_offset(&format!("{t}@base")).expect("a ringgate twin");
            assert!(k > 35 && k + 10 < 60, "{t}: {k}");
        }
    }
}

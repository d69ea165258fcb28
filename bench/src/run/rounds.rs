//! The interleaved rounds: the cells of the profile, one unrecorded warm-up pass, then every
//! cell on every target for each round in the schedule's rotated order.

use std::time::Duration;

use super::plan::Plan;
use crate::load::{self, LoadSpec};
use crate::model::profile::Profile;
use crate::model::scenario::{Cell, Scenario};
use crate::model::target::Target;
use crate::model::Res;
use crate::procs;
use crate::scenarios::cells::{run_step, Acc, StepSettings};
use crate::schedule;

/// The cells of the selected scenarios at the profile's concurrencies, in scenario order.
pub fn plan_cells(prof: &Profile, scenarios: &[Scenario]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for s in scenarios {
        match s {
            Scenario::Connect => cells.extend(prof.connect.iter().map(|&c| Cell {
                scenario: *s,
                concurrency: c,
                row_bytes: None,
            })),
            Scenario::PointSelect => cells.extend(prof.select.iter().map(|&c| Cell {
                scenario: *s,
                concurrency: c,
                row_bytes: None,
            })),
            Scenario::LargeResult => cells.extend(prof.large.iter().map(|&(b, c)| Cell {
                scenario: *s,
                concurrency: c,
                row_bytes: Some(b),
            })),
        }
    }
    cells
}

/// One unrecorded pass to warm caches, pools and page tables everywhere; a target that
/// answers no query fails the run.
pub async fn warm_up(targets: &[Target], prof: &Profile) -> Res<()> {
    eprintln!("bench: warm-up");
    for t in targets {
        let warm = LoadSpec {
            scenario: Scenario::PointSelect,
            concurrency: 8,
            row_bytes: 0,
            table_size: prof.table_size,
            warmup: Duration::ZERO,
            duration: prof.warmup.max(Duration::from_millis(300)),
            rate: None,
            op_timeout: Duration::from_secs(10),
        };
        let r = load::run(&t.ep, &warm).await;
        if r.count == 0 {
            return Err(format!(
                "target {} does not answer queries: {:?}",
                t.name, r.errors
            ));
        }
    }
    Ok(())
}

/// Runs the schedule: what every (cell, target) gathered over its rounds, indexed
/// `[cell][target]`. A proxy that dies fails the run.
pub async fn run_rounds(
    cells: &[Cell],
    targets: &[Target],
    admin: &mut mysql_async::Conn,
    backend_pid: Option<u32>,
    plan: &Plan,
) -> Res<Vec<Vec<Acc>>> {
    let prof = &plan.prof;
    let steps = schedule::schedule(
        cells.len(),
        targets.len(),
        prof.rounds,
        prof.warmup_round,
        true,
    );
    let mut accs: Vec<Vec<Acc>> = cells
        .iter()
        .map(|_| targets.iter().map(|_| Acc::default()).collect())
        .collect();
    let how = StepSettings {
        prof,
        rate: plan.rate,
        backend_pid,
    };
    for st in &steps {
        let cell = &cells[st.cell];
        let t = &targets[st.target];
        run_step(
            cell,
            t,
            st.round,
            admin,
            &how,
            &mut accs[st.cell][st.target],
        )
        .await?;
        if let Some(pid) = t.pid {
            if !procs::child_alive(pid) {
                return Err(format!(
                    "{} (pid {pid}) died during {}",
                    t.name,
                    cell.label()
                ));
            }
        }
    }
    Ok(accs)
}

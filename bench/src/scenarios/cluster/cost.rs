//! The proxy's CPU per routed query: the point-select cells of the rounds, run through each
//! front in the same interleaved, rotated rounds as every other cell of the bench, so the
//! several-server fronts are compared with the single-server one in the same run.

use crate::model::profile::Profile;
use crate::model::records::Record;
use crate::model::scenario::{Cell, Scenario};
use crate::model::target::Target;
use crate::model::Res;
use crate::scenarios::cells::{finish_record, run_step, Acc, StepSettings};
use crate::schedule;

/// Every front at each of the profile's point-select concurrencies; one record per (cell,
/// front), in cell then front order. `admin` is any connection (the cells read MariaDB's
/// counters only for a direct target); `primary_pid` gives the primary's CPU per query.
pub async fn rounds(
    fronts: &[Target],
    prof: &Profile,
    admin: &mut mysql_async::Conn,
    primary_pid: Option<u32>,
) -> Res<Vec<Record>> {
    let cells: Vec<Cell> = prof
        .select
        .iter()
        .map(|&c| Cell {
            scenario: Scenario::PointSelect,
            concurrency: c,
            row_bytes: None,
        })
        .collect();
    let steps = schedule::schedule(
        cells.len(),
        fronts.len(),
        prof.rounds,
        prof.warmup_round,
        true,
    );
    let mut accs: Vec<Vec<Acc>> = cells
        .iter()
        .map(|_| fronts.iter().map(|_| Acc::default()).collect())
        .collect();
    let how = StepSettings {
        prof,
        rate: None,
        backend_pid: primary_pid,
    };
    for st in &steps {
        run_step(
            &cells[st.cell],
            &fronts[st.target],
            st.round,
            admin,
            &how,
            &mut accs[st.cell][st.target],
        )
        .await?;
    }
    let mut out = Vec::new();
    for (ci, cell) in cells.iter().enumerate() {
        for (ti, t) in fronts.iter().enumerate() {
            let acc = std::mem::take(&mut accs[ci][ti]);
            let (rec, _) = finish_record(cell, t, acc, None, String::new());
            out.push(rec);
        }
    }
    Ok(out)
}

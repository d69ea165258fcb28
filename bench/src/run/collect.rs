//! The rounds' results collected: a record and an .hgrm file per (cell, target), and an SVG
//! plot per scenario with a panel per cell.

use std::collections::BTreeMap;
use std::path::Path;

use crate::hist;
use crate::model::records::Record;
use crate::model::scenario::{Cell, Scenario};
use crate::model::target::Target;
use crate::model::Res;
use crate::report::{self, Panel};
use crate::scenarios::cells::{finish_record, Acc};

/// The plot panels of each scenario: one per cell.
pub type PanelsByScenario = BTreeMap<Scenario, Vec<Panel>>;

/// The records of every (cell, target), in cell then target order, their histograms
/// written to `out_dir`; a record whose load was not confirmed to reach its target adds a
/// warning. Also returns each scenario's plot panels.
pub fn records(
    cells: &[Cell],
    targets: &[Target],
    mut accs: Vec<Vec<Acc>>,
    rate: Option<f64>,
    out_dir: &Path,
    warnings: &mut Vec<String>,
) -> Res<(Vec<Record>, PanelsByScenario)> {
    let mut records = Vec::new();
    let mut by_scenario = PanelsByScenario::new();
    for (ci, cell) in cells.iter().enumerate() {
        let mut panel = Panel {
            title: cell.label(),
            lines: Vec::new(),
        };
        for (ti, t) in targets.iter().enumerate() {
            let acc = std::mem::take(&mut accs[ci][ti]);
            let name = format!("{}-{}.hgrm", cell.file_stem(), t.name);
            let (rec, hist) = finish_record(cell, t, acc, rate, name.clone());
            std::fs::write(out_dir.join(&name), hist::hgrm(&hist, 1000.0))
                .map_err(|e| e.to_string())?;
            panel.lines.push((t.name.clone(), hist::plot_points(&hist)));
            if !rec.verified.ok {
                warnings.push(format!(
                    "{} / {}: not confirmed that the load reached the target: {}",
                    cell.label(),
                    t.name,
                    rec.verified.detail
                ));
            }
            records.push(rec);
        }
        by_scenario.entry(cell.scenario).or_default().push(panel);
    }
    Ok((records, by_scenario))
}

/// One SVG per scenario in `out_dir`; returns the file names.
pub fn plots(
    by_scenario: &PanelsByScenario,
    rate: Option<f64>,
    out_dir: &Path,
) -> Res<Vec<String>> {
    let mut svgs = Vec::new();
    for (s, panels) in by_scenario {
        let title = format!(
            "ringgate bench — {} latency by percentile ({}{})",
            s.name(),
            if rate.is_some() {
                "open loop, CO-corrected"
            } else {
                "closed loop"
            },
            if *s == Scenario::Connect {
                ", connect → usable"
            } else {
                ""
            }
        );
        let file = format!("{}.svg", s.name());
        std::fs::write(out_dir.join(&file), report::svg(&title, panels))
            .map_err(|e| e.to_string())?;
        svgs.push(file);
    }
    Ok(svgs)
}

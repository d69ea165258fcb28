//! Where a run's files go: the results directory and its logs.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::args::Args;
use crate::model::Res;
use crate::setup::host::utc_stamp;

/// Where a run's files go.
pub struct Outputs {
    /// bench/results/, where `latest` points to the newest full run.
    pub results_root: PathBuf,
    /// The results directory's name by default (its start time).
    pub stamp: String,
    /// The start time, ISO 8601.
    pub started: String,
    pub dir: PathBuf,
    /// Logs, the users file and HAProxy's configuration.
    pub run_dir: PathBuf,
    /// Whether --out/BENCH_OUT chose `dir`.
    pub chosen: bool,
}

impl Outputs {
    /// bench/results/<stamp> for a full run, target/bench-smoke/<stamp> for smoke, or --out.
    pub fn create(root: &Path, smoke: bool, args: &Args) -> Res<Outputs> {
        let (started, stamp) = utc_stamp(SystemTime::now());
        let results_root = root.join("bench/results");
        let chosen = args.get("out", "BENCH_OUT");
        let dir = match &chosen {
            Some(o) => PathBuf::from(o),
            None if smoke => root.join("target/bench-smoke").join(&stamp),
            None => results_root.join(&stamp),
        };
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let run_dir = dir.join("logs");
        std::fs::create_dir_all(&run_dir).map_err(|e| e.to_string())?;
        Ok(Outputs {
            results_root,
            stamp,
            started,
            dir,
            run_dir,
            chosen: chosen.is_some(),
        })
    }
}

//! The parts of a run after the rounds that are not cells: sysbench through every target,
//! and the transaction-pooling scenarios with their own ringgates.

use std::path::Path;

use crate::model::pooling::MuxReport;
use crate::model::profile::Profile;
use crate::model::records::SysbenchRecord;
use crate::model::scenario::PoolingScenario;
use crate::model::target::Target;
use crate::scenarios::sysbench::run_sysbench;
use crate::scenarios::{idle, many_clients};
use crate::setup::Ctx;

/// sysbench, each test and thread count interleaved over the targets.
pub async fn sysbench(
    targets: &[Target],
    prof: &Profile,
    admin: &mut mysql_async::Conn,
    run_dir: &Path,
) -> Vec<SysbenchRecord> {
    let mut sb = Vec::new();
    if prof.sysbench && !targets.is_empty() {
        for test in ["oltp_point_select", "oltp_read_only"] {
            for &threads in &prof.sysbench_threads {
                for t in targets {
                    sb.push(run_sysbench(t, test, threads, prof, admin, run_dir).await);
                }
            }
        }
    }
    sb
}

/// The transaction-pooling scenarios, one after the other (they block: their clients are
/// threads); None when none is selected. Their warnings join the run's.
pub async fn pooling(
    ctx: &Ctx<'_>,
    which: &[PoolingScenario],
    warnings: &mut Vec<String>,
) -> Option<MuxReport> {
    if which.is_empty() {
        return None;
    }
    let mut rep = MuxReport::default();
    for x in which {
        match x {
            PoolingScenario::ManyClients => {
                tokio::task::block_in_place(|| many_clients::run_all(ctx, &mut rep))
            }
            PoolingScenario::Idle10k | PoolingScenario::IdleMax => {
                tokio::task::block_in_place(|| idle::run_all(ctx, *x, &mut rep))
            }
        }
    }
    warnings.extend(rep.warnings.iter().cloned());
    Some(rep)
}

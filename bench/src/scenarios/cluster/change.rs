//! The two changes of writer under a steady write load through a fresh ringgate in front of
//! the three servers: a failover (kill -9 of the primary, then the script promotes the most
//! advanced replica, as an orchestrator would) and a planned switchover (SIGUSR1 holds new
//! transactions, the script switches once none is in flight, the monitor's sight of the new
//! writer ends the hold). Each reports what the writing clients saw and heals the set after.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::fronts::{self, Front};
use super::set::ReplicationSet;
use super::writes::{self, Writers};
use super::Settings;
use crate::model::cluster::WriterChange;
use crate::model::target::{Kind, Target};
use crate::model::{Res, BENCH_DB};
use crate::setup::Ctx;

/// Writes acknowledged before the change, and after it before the load stops.
const STEADY_ACKS: u64 = 100;
const AFTER_ACKS: u64 = 100;

/// Which change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Failover,
    Switchover,
}

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::Failover => "failover",
            Change::Switchover => "switchover",
        }
    }
}

/// One change under load; the set is healed afterwards whatever happened. Also says whether
/// the heal had to start a fresh set (its data then has to be loaded again).
pub async fn run(
    ctx: &Ctx<'_>,
    set: &ReplicationSet,
    how: &Settings,
    kind: Change,
) -> (WriterChange, Res<bool>) {
    let mut rec = WriterChange {
        kind: kind.name().into(),
        writers: how.writers,
        ..Default::default()
    };
    if let Err(e) = measure(ctx, set, how, kind, &mut rec).await {
        eprintln!("bench: cluster {}: {e}", kind.name());
        rec.failed = Some(e);
    }
    let healed = tokio::task::block_in_place(|| set.heal());
    (rec, healed)
}

/// Starts the front and the writers, makes the change, and fills `rec` in.
async fn measure(
    ctx: &Ctx<'_>,
    set: &ReplicationSet,
    how: &Settings,
    kind: Change,
    rec: &mut WriterChange,
) -> Res<()> {
    let old = set.primary()?;
    rec.from_node = old;
    empty_table(set, old).await?;
    let backend = fronts::primary_backend(set, old);
    // Clients wait for a writer up to 20 s (the tests' setting: a promotion on a loaded
    // two-core box can take seconds); the hold may last as long. Info logs: the hold's lines.
    let extra = [
        "--backend-wait-timeout",
        "20s",
        "--switchover-hold-timeout",
        "20s",
        "--log-level",
        "info",
    ];
    let flags = fronts::front_flags(
        Front::Three,
        set,
        old,
        how.monitor_interval.as_deref(),
        &extra,
    );
    // A log of its own per change: the hold's lines are read from it.
    let name = format!("fixed-{}", kind.name());
    let front = fronts::start(ctx, &backend, Front::Three, &name, &flags)?;
    let log = fronts::log_path(ctx, &name);
    let result = under_load(set, how, kind, &front, &log, rec).await;
    if let Kind::Ringgate { metrics } = &front.kind {
        for p in super::leak_check(*metrics).await {
            rec.failed
                .get_or_insert(format!("ringgate after the {}: {p}", kind.name()));
        }
    }
    fronts::stop(&front);
    result
}

/// The writers through `front`, the change, and the rows afterwards.
async fn under_load(
    set: &ReplicationSet,
    how: &Settings,
    kind: Change,
    front: &Target,
    log: &Path,
    rec: &mut WriterChange,
) -> Res<()> {
    let w = Writers::start(front.ep.opts(), how.writers, how.write_every);
    if !w.wait_acked(0, STEADY_ACKS, Duration::from_secs(30)).await {
        w.finish(Instant::now()).await;
        return Err(format!(
            "the writers had {STEADY_ACKS} writes acknowledged within 30 s"
        ));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let zero = Instant::now();
    let changed = match kind {
        Change::Failover => fail_over(set).await,
        Change::Switchover => switch_over(set, front, log, rec.from_node).await,
    };
    rec.orchestrator_ms = zero.elapsed().as_secs_f64() * 1e3;
    let after = w.acked();
    let flowing = changed.is_ok()
        && w.wait_acked(after, AFTER_ACKS, Duration::from_secs(60))
            .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let all = w.finish(zero).await;
    rec.to_node = changed?;
    if !flowing {
        return Err(format!(
            "fewer than {AFTER_ACKS} writes acknowledged within 60 s after the change"
        ));
    }
    fill(rec, &all);
    if kind == Change::Switchover {
        rec.held_ms = held_ms(&std::fs::read_to_string(log).unwrap_or_default());
    }
    let mut c = set.app(rec.to_node, BENCH_DB).await?;
    let rows = writes::rows(&mut c).await?;
    let _ = c.disconnect().await;
    rec.rows = rows.len() as u64;
    rec.lost = writes::lost(&all, &rows);
    Ok(())
}

fn fill(rec: &mut WriterChange, all: &[writes::Write]) {
    let a = writes::analyse(all);
    rec.acked = a.acked;
    rec.errors = a.errors;
    rec.most_errors_one_client = a.most_errors_one_client;
    rec.error_kinds = a.error_kinds;
    rec.gap_ms = a.gap_ms;
    rec.gap_from_ms = a.gap_from_ms;
    rec.gap_to_ms = a.gap_to_ms;
    rec.steady_p99_ms = a.steady_p99_ms;
    rec.around_p99_ms = a.around_p99_ms;
    rec.around_max_ms = a.around_max_ms;
}

/// kill -9 the primary, then promote the most advanced replica; the new primary.
async fn fail_over(set: &ReplicationSet) -> Res<u8> {
    blocking(set, &["kill-primary"]).await?;
    let out = blocking(set, &["promote"]).await?;
    out.parse()
        .map_err(|_| format!("mariadb-cluster.sh promote printed {out:?}"))
}

/// SIGUSR1, the wait for ringgate's "no transaction in flight", the switch to the next node;
/// the new primary.
async fn switch_over(set: &ReplicationSet, front: &Target, log: &Path, old: u8) -> Res<u8> {
    let pid = front.pid.ok_or("the front has no pid")?;
    send_signal(pid, "-USR1")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains("no transaction in flight")
    {
        if Instant::now() > deadline {
            return Err("ringgate did not log \"no transaction in flight\" within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let new = old % 3 + 1;
    blocking(set, &["switchover", &new.to_string()]).await?;
    Ok(new)
}

/// The hold's length as ringgate logged it when the monitor (or SIGUSR2) ended it.
fn held_ms(log: &str) -> Option<f64> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("hold released after"))?;
    let rest = line.split("hold released after").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

fn send_signal(pid: u32, sig: &str) -> Res<()> {
    let st = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .map_err(|e| format!("kill {sig} {pid}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("kill {sig} {pid}: {st}"))
    }
}

/// The script off the runtime's threads, so that the writers keep writing meanwhile.
async fn blocking(set: &ReplicationSet, args: &[&str]) -> Res<String> {
    let cmd = set.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        cmd.run(&a)
    })
    .await
    .map_err(|e| format!("mariadb-cluster.sh: {e}"))?
}

/// The writers' table, created and emptied on the primary.
async fn empty_table(set: &ReplicationSet, primary: u8) -> Res<()> {
    use mysql_async::prelude::Queryable;
    let mut c = set.app(primary, BENCH_DB).await?;
    let e = |e: mysql_async::Error| format!("{}: {e}", writes::TABLE);
    c.query_drop(writes::CREATE_TABLE).await.map_err(e)?;
    c.query_drop(format!("TRUNCATE {}", writes::TABLE))
        .await
        .map_err(e)?;
    let _ = c.disconnect().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_is_read_from_the_line_that_released_it() {
        let log = "x INFO SIGUSR1: switchover hold: ...\n\
                   x INFO switchover hold: no transaction in flight after 3 ms; switch the writer now\n\
                   x INFO switchover: 127.0.0.1:3462 takes writes; hold released after 612 ms\n";
        assert_eq!(held_ms(log), Some(612.0));
        assert_eq!(
            held_ms("SIGUSR2: switchover hold released after 40 ms"),
            Some(40.0)
        );
        assert_eq!(held_ms("switchover hold timed out after 20000 ms"), None);
    }
}

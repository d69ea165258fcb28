//! Where reads land: a read-heavy load through one front (nine point selects to one INSERT,
//! autocommit) and, per server, the app account's selects and writes over the load, from
//! each server's USER_STATISTICS (its own clients' commands only: what replication applies
//! is not counted, nor the monitor's probes, which run as another account).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use tokio::time::Instant;

use super::set::ReplicationSet;
use super::writes::TABLE;
use crate::model::cluster::{NodeCommands, ReadLanding};
use crate::model::target::Target;
use crate::model::Res;

/// What the clients of one load did.
#[derive(Default)]
struct Sent {
    selects: u64,
    writes: u64,
    failures: u64,
}

/// Runs the load through `front` for `seconds` with `clients` clients and reads where its
/// statements ran.
pub async fn measure(
    set: &ReplicationSet,
    front: &Target,
    label: &str,
    clients: usize,
    seconds: f64,
    table_size: u64,
) -> Res<ReadLanding> {
    let primary = set.primary()?;
    let mut before = Vec::new();
    for n in 1..=3 {
        before.push(set.app_commands(n).await?);
    }
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        tasks.spawn(client(front.ep.opts(), c as u64, deadline, table_size));
    }
    let mut sent = Sent::default();
    while let Some(r) = tasks.join_next().await {
        let s = r.unwrap_or(Sent {
            failures: 1,
            ..Default::default()
        });
        sent.selects += s.selects;
        sent.writes += s.writes;
        sent.failures += s.failures;
    }
    let mut per_node = Vec::new();
    for n in 1..=3u8 {
        let (s1, w1) = set.app_commands(n).await?;
        let (s0, w0) = before[usize::from(n - 1)];
        per_node.push(NodeCommands {
            node: set.addr(n),
            role: if n == primary { "primary" } else { "replica" }.into(),
            selects: s1.saturating_sub(s0),
            writes: w1.saturating_sub(w0),
        });
    }
    let r = ReadLanding {
        front: label.into(),
        clients,
        seconds,
        selects_sent: sent.selects,
        writes_sent: sent.writes,
        failures: sent.failures,
        per_node,
    };
    eprintln!(
        "bench: cluster reads through {label}: {} selects, {} writes, {} failures; selects per \
         server {:?}",
        r.selects_sent,
        r.writes_sent,
        r.failures,
        r.per_node.iter().map(|n| n.selects).collect::<Vec<_>>()
    );
    Ok(r)
}

/// One client until `deadline`: nine point selects, then one INSERT, over and over.
async fn client(opts: Opts, seed: u64, deadline: Instant, table_size: u64) -> Sent {
    let mut sent = Sent::default();
    let Ok(mut conn) = Conn::new(opts).await else {
        sent.failures += 1;
        return sent;
    };
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut i = 0u64;
    while Instant::now() < deadline {
        i += 1;
        let ok = if i.is_multiple_of(10) {
            let q = format!("INSERT INTO {TABLE} (client, n) VALUES ({seed}, {i})");
            let ok = conn.query_drop(q).await.is_ok();
            sent.writes += u64::from(ok);
            ok
        } else {
            // xorshift: ids spread over the table, no extra dependency.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let q = format!("SELECT c FROM sbtest1 WHERE id={}", x % table_size + 1);
            let ok = matches!(conn.query_first::<Vec<u8>, _>(q).await, Ok(Some(_)));
            sent.selects += u64::from(ok);
            ok
        };
        if !ok {
            sent.failures += 1;
        }
    }
    let _ = conn.disconnect().await;
    sent
}

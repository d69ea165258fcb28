//! A target's counters, read before and after a step, and the check that the load the bench
//! ran really went through the target.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;

use crate::model::records::Verification;
use crate::model::target::{Kind, Target};
use crate::model::Res;
use crate::procs;

/// A target's counters, read before and after each step.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Connections the target accepted since it started.
    pub accepted: f64,
    /// ringgate: commands forwarded; HAProxy: bytes sent to clients.
    pub work: f64,
    pub metrics: HashMap<String, f64>,
}

async fn mariadb_connections(admin: &mut mysql_async::Conn) -> Res<f64> {
    let row: Option<(String, String)> = admin
        .query_first("SHOW GLOBAL STATUS LIKE 'Connections'")
        .await
        .map_err(|e| e.to_string())?;
    row.and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| "no Connections status".into())
}

pub async fn read_counters(t: &Target, admin: &mut mysql_async::Conn) -> Res<Counters> {
    match &t.kind {
        Kind::Ringgate { metrics } => {
            let m = procs::parse_prometheus(&procs::http_get(*metrics, "/metrics")?);
            Ok(Counters {
                accepted: m
                    .get("ringgate_client_connections_total")
                    .copied()
                    .unwrap_or(0.0),
                work: m.get("ringgate_commands_total").copied().unwrap_or(0.0),
                metrics: m,
            })
        }
        Kind::Haproxy { stats_sock } => {
            let s = procs::haproxy_frontend_stats(stats_sock, "fe_mysql")?;
            let f = |k: &str| s.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            Ok(Counters {
                accepted: f("stot"),
                work: f("bout"),
                metrics: HashMap::new(),
            })
        }
        Kind::Direct => Ok(Counters {
            accepted: mariadb_connections(admin).await?,
            work: 0.0,
            metrics: HashMap::new(),
        }),
    }
}

/// Did the load really go through this target? `connects` = connections the
/// bench opened, `ops` = operations it ran, `min_bytes_per_op` for HAProxy.
pub fn verify(
    t: &Target,
    before: &Counters,
    after: &Counters,
    connects: u64,
    ops: u64,
    query_scenario: bool,
    min_bytes_per_op: f64,
) -> Verification {
    let d_acc = after.accepted - before.accepted;
    let d_work = after.work - before.work;
    let mut ok = d_acc >= connects as f64 && connects > 0;
    let detail = match &t.kind {
        Kind::Ringgate { .. } => {
            if query_scenario {
                ok &= d_work >= ops as f64;
            }
            format!(
                "ringgate_client_connections_total +{d_acc} (bench opened {connects}), ringgate_commands_total +{d_work} (bench ran {ops} operations)"
            )
        }
        Kind::Haproxy { .. } => {
            if query_scenario {
                ok &= d_work >= ops as f64 * min_bytes_per_op;
            }
            format!("HAProxy frontend stot +{d_acc} (bench opened {connects}), bout +{d_work} bytes ({ops} operations)")
        }
        Kind::Direct => format!("MariaDB Connections +{d_acc} (bench opened {connects})"),
    };
    Verification { ok, detail }
}

/// How much metric `k` grew from `a` to `b`.
pub fn metric_delta(a: &Counters, b: &Counters, k: &str) -> f64 {
    b.metrics.get(k).copied().unwrap_or(0.0) - a.metrics.get(k).copied().unwrap_or(0.0)
}

/// Clients ringgate refused, over all reasons.
pub fn rejected_total(c: &Counters) -> f64 {
    c.metrics
        .iter()
        .filter(|(k, _)| k.starts_with("ringgate_client_rejected_total"))
        .map(|(_, v)| *v)
        .sum()
}

//! The three-node replication set of `scripts/mariadb-cluster.sh`, as the scenario drives it:
//! started on its own base port, healed between phases, its orchestrator's actions (kill the
//! primary, promote, switch over), and each node read over root's socket.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};

use crate::model::Res;

/// The base port when BENCH_CLUSTER_PORT is not set: clear of CI's set (3451-3453, and the
/// harness's own lifecycle test on the three above), the test sandbox (3407) and the bench's
/// (3408).
pub const DEFAULT_PORT: u16 = 3461;

/// One replication set: the script, its directory and base port.
#[derive(Clone)]
pub struct ReplicationSet {
    script: PathBuf,
    dir: PathBuf,
    pub base_port: u16,
    /// Whether this run started it (then it stops it).
    pub started_here: bool,
}

/// The app account the script creates on every node (ALL on its test database; the bench
/// grants it the bench's database too) and the monitor's.
pub const APP_USER: &str = "ringgate";
pub const APP_PASSWORD: &str = "ringgate-backend";
pub const MONITOR_USER: &str = "monitor";
pub const MONITOR_PASSWORD: &str = "monitor-secret";

impl ReplicationSet {
    pub fn new(root: &Path, dir: PathBuf, base_port: u16) -> ReplicationSet {
        ReplicationSet {
            script: root.join("scripts/mariadb-cluster.sh"),
            dir,
            base_port,
            started_here: false,
        }
    }

    /// The script with this set's directory and port.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.script);
        c.args(args)
            .env("RINGGATE_CLUSTER_DIR", &self.dir)
            .env("RINGGATE_CLUSTER_PORT", self.base_port.to_string());
        c
    }

    /// Runs the script; its stdout, or an error with its output.
    pub fn run(&self, args: &[&str]) -> Res<String> {
        let out = self
            .command(args)
            .output()
            .map_err(|e| format!("mariadb-cluster.sh {}: {e}", args.join(" ")))?;
        if !out.status.success() {
            return Err(format!(
                "mariadb-cluster.sh {} failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A running set is reused (healed); otherwise a fresh one is started.
    pub fn start(&mut self) -> Res<()> {
        if self
            .command(&["status"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            eprintln!(
                "bench: cluster: reusing the running set on {}",
                self.base_port
            );
            return self.heal().map(|_| ());
        }
        let t = Instant::now();
        self.started_here = true;
        self.run(&["start"])?;
        eprintln!(
            "bench: cluster: three nodes on 127.0.0.1:{}-{} in {:.1} s",
            self.base_port,
            self.base_port + 2,
            t.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Every node up and caught up, node 1 the primary; a set that cannot be healed (a killed
    /// primary had written what no replica received) is replaced by a fresh one.
    /// True when a fresh set replaced it.
    pub fn heal(&self) -> Res<bool> {
        match self.run(&["heal"]) {
            Ok(_) => Ok(false),
            Err(e) => {
                eprintln!("bench: cluster: heal failed, starting a fresh set: {e}");
                self.run(&["stop"])?;
                self.run(&["start"])?;
                Ok(true)
            }
        }
    }

    pub fn primary(&self) -> Res<u8> {
        let out = self.run(&["primary"])?;
        out.parse()
            .map_err(|_| format!("mariadb-cluster.sh primary printed {out:?}"))
    }

    pub fn port(&self, node: u8) -> u16 {
        self.base_port + u16::from(node) - 1
    }

    pub fn addr(&self, node: u8) -> String {
        format!("127.0.0.1:{}", self.port(node))
    }

    fn socket(&self, node: u8) -> PathBuf {
        self.dir.join(format!("n{node}/mysqld.sock"))
    }

    /// Node N's server pid, from its pid file.
    pub fn pid(&self, node: u8) -> Option<u32> {
        std::fs::read_to_string(self.dir.join(format!("n{node}/mysqld.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// root over node N's socket: the bench's own reads and settings, which no proxy sees.
    pub async fn root(&self, node: u8) -> Res<Conn> {
        let opts = OptsBuilder::default()
            .socket(Some(self.socket(node).display().to_string()))
            .user(Some("root"));
        Conn::new(opts)
            .await
            .map_err(|e| format!("root on node {node}: {e}"))
    }

    /// The app account over TCP to node N, in database `db`.
    pub async fn app(&self, node: u8, db: &str) -> Res<Conn> {
        let opts = OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(self.port(node))
            .user(Some(APP_USER))
            .pass(Some(APP_PASSWORD))
            .db_name(Some(db))
            .prefer_socket(false);
        Conn::new(opts)
            .await
            .map_err(|e| format!("app account on node {node}: {e}"))
    }

    /// The app account's (select, write) commands on node N so far (USER_STATISTICS counts
    /// each account's own commands, not what replication applies; SHOW is no SELECT, so the
    /// read does not count itself).
    pub async fn app_commands(&self, node: u8) -> Res<(u64, u64)> {
        let mut c = self.root(node).await?;
        let rows: Vec<mysql_async::Row> = c
            .query("SHOW USER_STATISTICS")
            .await
            .map_err(|e| format!("SHOW USER_STATISTICS on node {node}: {e}"))?;
        let _ = c.disconnect().await;
        for r in rows {
            if r.get::<String, _>("User").as_deref() == Some(APP_USER) {
                let get = |k: &str| r.get::<u64, _>(k).unwrap_or(0);
                return Ok((get("Select_commands"), get("Update_commands")));
            }
        }
        Ok((0, 0))
    }
}

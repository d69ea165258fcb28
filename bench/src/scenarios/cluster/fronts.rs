//! The ringgates the scenario puts in front of the set: one with the primary alone (the
//! single-server case), one with all three servers and a monitor, and, when the binary has
//! it, the same with `--read-write-split`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::set::{ReplicationSet, APP_PASSWORD, APP_USER, MONITOR_PASSWORD, MONITOR_USER};
use crate::model::target::{Backend, Target};
use crate::model::Res;
use crate::procs;
use crate::setup::launch::start_ringgate;
use crate::setup::Ctx;

/// The read/write split's flag, looked for in `ringgate --help`.
pub const SPLIT_FLAG: &str = "--read-write-split";

/// A front of the set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    /// `--backend` = the primary only.
    One,
    /// The three servers and a monitor: every statement goes to the writer.
    Three,
    /// The three servers with the read/write split.
    Split,
}

impl Front {
    /// The target's name: its buffer mode (fixed) and what it fronts.
    pub fn target_name(self) -> &'static str {
        match self {
            Front::One => "fixed-1server",
            Front::Three => "fixed-3servers",
            Front::Split => "fixed-3servers-split",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Front::One => "1 server",
            Front::Three => "3 servers",
            Front::Split => "3 servers + split",
        }
    }

    /// Its port above the run's base port (clear of every other target's), metrics 10 above.
    fn port_offset(self) -> u16 {
        match self {
            Front::One => 60,
            Front::Three => 61,
            Front::Split => 62,
        }
    }
}

/// Whether this ringgate binary offers the read/write split.
pub fn split_supported(bin: &Path) -> bool {
    Command::new(bin)
        .arg("--help")
        .output()
        .is_ok_and(|o| help_names_split(&String::from_utf8_lossy(&o.stdout)))
}

fn help_names_split(help: &str) -> bool {
    help.split(|c: char| c.is_whitespace() || c == '[' || c == '=' || c == ',')
        .any(|w| w == SPLIT_FLAG)
}

/// The set's primary as the bench's `Backend`: ringgate's first `--backend`, and the server
/// whose CPU the rounds read.
pub fn primary_backend(set: &ReplicationSet, primary: u8) -> Backend {
    Backend {
        host: "127.0.0.1".into(),
        port: set.port(primary),
        user: APP_USER.into(),
        password: APP_PASSWORD.into(),
        pid: set.pid(primary),
    }
}

/// The flags beyond the bench's own (which name the primary as the first `--backend`).
pub fn front_flags(
    front: Front,
    set: &ReplicationSet,
    primary: u8,
    monitor_interval: Option<&str>,
    extra: &[&str],
) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    if front != Front::One {
        for n in (1..=3).filter(|&n| n != primary) {
            a.extend(["--backend".into(), set.addr(n)]);
        }
        a.extend([
            "--monitor-user".into(),
            MONITOR_USER.into(),
            // The set's private password: on the command line is fine here.
            "--monitor-password".into(),
            MONITOR_PASSWORD.into(),
        ]);
        if let Some(i) = monitor_interval {
            a.extend(["--monitor-interval".into(), i.into()]);
        }
    }
    if front == Front::Split {
        a.push(SPLIT_FLAG.into());
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Starts `front` as `name` (its log's name: `fixed-…`) on the front's port with `flags`
/// (from `front_flags`), in front of `backend`.
pub fn start(
    ctx: &Ctx,
    backend: &Backend,
    front: Front,
    name: &str,
    flags: &[String],
) -> Res<Target> {
    let cctx = Ctx { backend, ..*ctx };
    let k = front.port_offset();
    start_ringgate(
        &cctx,
        name,
        ctx.base_port + k,
        ctx.base_port + k + 10,
        flags,
    )
}

/// Stops a front (SIGTERM, then its drain).
pub fn stop(t: &Target) {
    if let Some(pid) = t.pid {
        procs::stop(pid, Duration::from_secs(15));
    }
}

/// The log of the front started as `name` (in the run's logs directory).
pub fn log_path(ctx: &Ctx, name: &str) -> std::path::PathBuf {
    ctx.run_dir.join(format!("ringgate-{name}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_is_found_only_as_a_flag_of_its_own() {
        assert!(help_names_split(
            "  --read-write-split\n          send safe reads to replicas"
        ));
        assert!(help_names_split(
            "  --read-write-split[=BOOL]  reads to replicas"
        ));
        assert!(help_names_split("  --read-write-split=<BOOL>"));
        assert!(!help_names_split("  --read-write-split-hints  other"));
        assert!(!help_names_split(
            "  --pooling <MODE>  read-write-split later"
        ));
    }

    #[test]
    fn several_servers_get_the_others_and_the_monitor_one_server_nothing() {
        let set = ReplicationSet::new(Path::new("/repo"), "/repo/set".into(), 4000);
        assert!(front_flags(Front::One, &set, 1, Some("200ms"), &[]).is_empty());
        let three = front_flags(Front::Three, &set, 2, None, &["--log-level", "info"]).join(" ");
        assert_eq!(
            three,
            "--backend 127.0.0.1:4000 --backend 127.0.0.1:4002 --monitor-user monitor \
             --monitor-password monitor-secret --log-level info"
        );
        let split = front_flags(Front::Split, &set, 1, Some("200ms"), &[]).join(" ");
        assert!(split.contains("--monitor-interval 200ms"), "{split}");
        assert!(split.ends_with(SPLIT_FLAG), "{split}");
    }

    #[test]
    fn fronts_listen_clear_of_each_other_and_of_the_other_targets() {
        let offs: Vec<u16> = [Front::One, Front::Three, Front::Split]
            .iter()
            .map(|f| f.port_offset())
            .collect();
        // The other targets use +0..+57 (twins' metrics the highest).
        assert!(offs.iter().all(|&k| k > 57 && k + 10 < 100));
        assert_eq!(offs, vec![60, 61, 62]);
    }
}

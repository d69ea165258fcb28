//! A private MariaDB (never the shared sandbox) for tests that stop or kill the backend,
//! started by `scripts/mariadb-sandbox.sh` in its own directory on its own port.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::children::signal;
use crate::env::{find_in_path, free_port, repo_root, BackendEnv};
use crate::procfs::is_alive;

/// Where the private MariaDBs live: `/tmp/rg-own-<test pid>-<tag>`.
const OWN_DIR_PARENT: &str = "/tmp";
const OWN_DIR_PREFIX: &str = "rg-own-";
/// A test that panics keeps its MariaDB's directory (datadir and error log) for debugging; each
/// is 100+ MB, so only the newest few left by finished test processes survive the next run.
const KEEP_FAILED_DIRS: usize = 3;

pub struct OwnMariaDb {
    pub dir: PathBuf,
    pub port: u16,
}

impl OwnMariaDb {
    fn script() -> PathBuf {
        repo_root().join("scripts").join("mariadb-sandbox.sh")
    }

    /// A datadir under /tmp (the socket path must stay short) and a free port; not started.
    pub fn new(tag: &str) -> OwnMariaDb {
        static PRUNE: std::sync::Once = std::sync::Once::new();
        PRUNE.call_once(|| prune_kept_dirs(Path::new(OWN_DIR_PARENT), KEEP_FAILED_DIRS));
        let dir = PathBuf::from(format!(
            "{OWN_DIR_PARENT}/{OWN_DIR_PREFIX}{}-{tag}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create own MariaDB dir");
        OwnMariaDb {
            dir,
            port: free_port(),
        }
    }

    /// Starts (initialising the datadir the first time); panics with the script's output.
    /// Starts are serialised within a test binary, and a failed first initialisation is
    /// retried from scratch (server stopped, datadir wiped): two `mariadb-install-db` running
    /// at once, also from other test processes, can collide on temporary tables in /tmp
    /// ("Unknown table 'mysql.tmp_user_sys'"), and a half-initialised datadir then starts a
    /// server whose root login fails. A restart of a datadir that was initialised before (after
    /// `kill9`) is retried as it is, keeping the test's data. Every attempt's output is kept
    /// for the failure message.
    pub fn start(&self) {
        static START: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = START.lock().unwrap_or_else(|e| e.into_inner());
        let data = self.dir.join("data");
        let fresh = !data.join("mysql").join("user.frm").exists();
        let mut out = self.run_start();
        let mut earlier = String::new();
        for _ in 0..2 {
            if out.status.success() {
                break;
            }
            earlier += &format!(
                "{}{}--- retrying ---\n",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if fresh {
                self.stop();
                if let Some(pid) = self.pid() {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
                let _ = fs::remove_file(self.dir.join("mysqld.pid"));
                let _ = fs::remove_dir_all(&data);
            }
            std::thread::sleep(Duration::from_millis(500));
            out = self.run_start();
        }
        if !out.status.success() {
            eprintln!("earlier attempts to start the own MariaDB:\n{earlier}");
        }
        assert!(
            out.status.success(),
            "own MariaDB on port {} did not start:\n{}{}",
            self.port,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn run_start(&self) -> std::process::Output {
        Command::new(Self::script())
            .arg("start")
            .env("RINGGATE_SANDBOX_DIR", &self.dir)
            .env("RINGGATE_SANDBOX_PORT", self.port.to_string())
            .output()
            .expect("run mariadb-sandbox.sh start")
    }

    pub fn started(tag: &str) -> OwnMariaDb {
        let db = OwnMariaDb::new(tag);
        db.start();
        db
    }

    pub fn pid(&self) -> Option<u32> {
        fs::read_to_string(self.dir.join("mysqld.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// `kill -9` by the pid file (never by name), and waits until it is gone. Panics when there
    /// is no pid file, when `kill` fails, or when the process is still alive 10 s later: a
    /// test that means to kill the server must not go on as if it had. Returns the pid killed.
    pub fn kill9(&self) -> u32 {
        let pid = self.pid().unwrap_or_else(|| {
            panic!(
                "kill -9: no pid in {}: the MariaDB on port {} is not running",
                self.dir.join("mysqld.pid").display(),
                self.port
            )
        });
        signal(pid, "-KILL");
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_alive(pid) {
            assert!(
                Instant::now() < deadline,
                "MariaDB pid {pid} still alive 10 s after kill -9"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = fs::remove_file(self.dir.join("mysqld.pid"));
        pid
    }

    pub fn stop(&self) {
        let _ = Command::new(Self::script())
            .arg("stop")
            .env("RINGGATE_SANDBOX_DIR", &self.dir)
            .env("RINGGATE_SANDBOX_PORT", self.port.to_string())
            .output();
    }

    pub fn env(&self) -> BackendEnv {
        let mut e = BackendEnv {
            host: "127.0.0.1".into(),
            port: self.port,
            socket: Some(self.dir.join("mysqld.sock").display().to_string()),
            user: "ringgate".into(),
            password: "ringgate-backend".into(),
        };
        // The sandbox script always creates this account; the shared env may name the same.
        if let Ok(u) = std::env::var("RINGGATE_TEST_BACKEND_USER") {
            e.user = u;
        }
        if let Ok(p) = std::env::var("RINGGATE_TEST_BACKEND_PASSWORD") {
            e.password = p;
        }
        e
    }

    /// SQL as root over the unix socket (setup that must not go through the proxy).
    pub fn root_sql(&self, sql: &str) {
        let cli = find_in_path("mariadb").expect("mariadb client");
        let out = Command::new(cli)
            .args(["--no-defaults", "-uroot", "-S"])
            .arg(self.dir.join("mysqld.sock"))
            .args(["-e", sql])
            .output()
            .expect("run mariadb");
        assert!(
            out.status.success(),
            "root SQL failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for OwnMariaDb {
    fn drop(&mut self) {
        self.stop();
        if let Some(pid) = self.pid() {
            // Best effort here (no panic inside drop): the stop above failed.
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!(
                "keeping {} (datadir, error log) for debugging; the next run deletes all but the \
                 newest {KEEP_FAILED_DIRS} of these",
                self.dir.display()
            );
        }
    }
}

/// Deletes the `rg-own-*` directories under `parent` left behind by test processes that have
/// exited (a panicking test keeps its own), except the newest `keep`. A directory whose test
/// process or MariaDB is still running belongs to a live run and is never touched. Best effort:
/// a directory that cannot be read or removed is left.
fn prune_kept_dirs(parent: &Path, keep: usize) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    let mut left: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let owner: u32 = name
                .strip_prefix(OWN_DIR_PREFIX)?
                .split('-')
                .next()?
                .parse()
                .ok()?;
            let path = e.path();
            let mysqld = fs::read_to_string(path.join("mysqld.pid"))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            if is_alive(owner) || mysqld.is_some_and(is_alive) {
                return None;
            }
            let modified = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((modified, path))
        })
        .collect();
    left.sort_unstable_by_key(|d| std::cmp::Reverse(d.0));
    for (_, dir) in left.into_iter().skip(keep) {
        let _ = fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_kept_dirs_keeps_the_newest_and_those_of_live_processes() {
        let parent = std::env::temp_dir().join(format!("rg-prune-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&parent);
        // Above Linux's largest pid_max (2^22): never a live process.
        let dead = |i: u32| parent.join(format!("{OWN_DIR_PREFIX}{}-t{i}", 4_194_400 + i));
        for i in 0..5 {
            fs::create_dir_all(dead(i)).expect("create dir");
            // Distinct modification times, oldest first.
            std::thread::sleep(Duration::from_millis(20));
        }
        let live = parent.join(format!("{OWN_DIR_PREFIX}{}-mine", std::process::id()));
        fs::create_dir_all(&live).expect("create dir");
        let other = parent.join("unrelated");
        fs::create_dir_all(&other).expect("create dir");

        prune_kept_dirs(&parent, 2);

        let gone: Vec<bool> = (0..5).map(|i| !dead(i).exists()).collect();
        assert_eq!(
            gone,
            [true, true, true, false, false],
            "only the 2 newest dead dirs stay"
        );
        assert!(live.exists(), "a live test process's dir is never pruned");
        assert!(other.exists(), "only rg-own-* dirs are pruned");
        let _ = fs::remove_dir_all(&parent);
    }
}

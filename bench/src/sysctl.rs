//! A kernel setting the bench raises for one scenario and puts back afterwards.
//!
//! idle-max holds ~19,000 idle TCP connections over loopback with keepalive on. Their 60 s
//! keepalive timers fall into the same ~4 s timer-wheel buckets, so the probes and their ACKs
//! arrive in bursts, and loopback traffic passes through each CPU's input backlog
//! (net.core.netdev_max_backlog, 1000 by default). With 1000 the bursts overflowed it, the
//! probes went unanswered and the kernel reset 5,878–8,665 connections for timeout; with 20,000
//! none (docs/benchmarks.md, idle-max). The bench sets what the host needs and reports it; it
//! does not leave the machine changed.

use std::path::{Path, PathBuf};

/// net.core.netdev_max_backlog.
pub const NETDEV_MAX_BACKLOG: &str = "/proc/sys/net/core/netdev_max_backlog";

/// A sysctl raised to at least a value while this lives; dropped, it returns to what it was.
#[derive(Debug)]
pub struct Raised {
    path: PathBuf,
    /// The value before (None: it was high enough, or could not be changed).
    was: Option<u64>,
    /// The value in force while this lives (None: unreadable).
    pub now: Option<u64>,
}

impl Raised {
    /// Raises the sysctl at `path` to `want` if it is lower and writable (root). When it cannot,
    /// says so in one line naming the fix; the run goes on with the value there is.
    pub fn at_least(path: &Path, want: u64, why: &str) -> Raised {
        let now = read(path);
        let mut r = Raised {
            path: path.into(),
            was: None,
            now,
        };
        match now {
            Some(v) if v < want => match std::fs::write(path, want.to_string()) {
                Ok(()) => {
                    r.was = Some(v);
                    r.now = read(path);
                }
                Err(e) => eprintln!(
                    "bench: {} is {v} and could not be raised to {want} ({e}); {why}. As root: \
                     sysctl -w {}={want}",
                    path.display(),
                    sysctl_name(path)
                ),
            },
            Some(_) => {}
            None => eprintln!("bench: cannot read {}; {why}", path.display()),
        }
        r
    }

    /// The value before the bench raised it, if it did.
    pub fn raised_from(&self) -> Option<u64> {
        self.was
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        if let Some(v) = self.was {
            if let Err(e) = std::fs::write(&self.path, v.to_string()) {
                eprintln!(
                    "bench: could not put {} back to {v}: {e}",
                    self.path.display()
                );
            }
        }
    }
}

fn read(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `/proc/sys/net/core/x` → `net.core.x`.
fn sysctl_name(path: &Path) -> String {
    let s = path.to_string_lossy();
    s.strip_prefix("/proc/sys/").unwrap_or(&s).replace('/', ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_proc_path() {
        assert_eq!(
            sysctl_name(Path::new(NETDEV_MAX_BACKLOG)),
            "net.core.netdev_max_backlog"
        );
    }

    #[test]
    fn a_file_is_raised_and_put_back() {
        let dir = std::env::temp_dir().join(format!("rg-sysctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("value");
        std::fs::write(&f, "1000\n").unwrap();
        {
            let r = Raised::at_least(&f, 20_000, "test");
            assert_eq!(r.now, Some(20_000));
            assert_eq!(r.raised_from(), Some(1000));
            assert_eq!(read(&f), Some(20_000));
        }
        assert_eq!(read(&f), Some(1000), "dropped, the old value is back");
        {
            let r = Raised::at_least(&f, 500, "test");
            assert_eq!(r.now, Some(1000), "never lowered");
            assert_eq!(r.raised_from(), None);
        }
        assert_eq!(read(&f), Some(1000));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The host a run happens on: the repository, this process's fd limit, the tools on the
//! PATH, the time stamp of the results and what the machine is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use uring::sys::{rlimit, set_rlimit, Resource, Rlimit};

/// The repository: RINGGATE_REPO, else the parent of the bench's manifest directory.
pub fn repo_root() -> PathBuf {
    if let Ok(r) = std::env::var("RINGGATE_REPO") {
        return PathBuf::from(r);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// Raises this process's soft fd limit to its hard one (at most 2^20): every client of a
/// storm is an fd.
pub fn raise_nofile() {
    if let Ok(mut r) = rlimit(Resource::Nofile) {
        if r.soft < r.hard {
            r.soft = r.hard.min(1 << 20);
            let _ = set_rlimit(Resource::Nofile, r);
        }
    }
}

/// The soft and hard RLIMIT_NOFILE after trying to raise both to `want` (the hard one only
/// moves for a process with CAP_SYS_RESOURCE; then the soft one goes to the hard one).
pub fn raise_nofile_to(want: u64) -> (u64, u64) {
    let Ok(r) = rlimit(Resource::Nofile) else {
        return (0, 0);
    };
    let both = Rlimit {
        soft: want,
        hard: want,
    };
    // Failure (EPERM) leaves the limits as they were.
    if r.hard < want && set_rlimit(Resource::Nofile, both).is_ok() {
        return (want, want);
    }
    if r.soft < r.hard {
        let raised = Rlimit {
            soft: r.hard,
            hard: r.hard,
        };
        // Raising the soft limit up to the hard one needs no privilege.
        let _ = set_rlimit(Resource::Nofile, raised);
        let now = rlimit(Resource::Nofile).unwrap_or(raised);
        return (now.soft, now.hard);
    }
    (r.soft, r.hard)
}

/// Whether `cmd` is on the PATH or in an sbin directory.
pub fn which(cmd: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .any(|d| Path::new(d).join(cmd).is_file())
}

/// The time as ISO 8601 UTC and as the results directory's name (20250101-120000).
pub fn utc_stamp(t: SystemTime) -> (String, String) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    (
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z"),
        format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}"),
    )
}

/// What the machine is: CPUs, memory, kernel, load, and the tools' versions.
pub fn machine() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    m.insert("nproc".into(), cpus.to_string());
    if let Ok(c) = std::fs::read_to_string("/proc/cpuinfo") {
        if let Some(l) = c.lines().find(|l| l.starts_with("model name")) {
            m.insert(
                "cpu".into(),
                l.split(':').nth(1).unwrap_or("").trim().to_string(),
            );
        }
    }
    if let Ok(c) = std::fs::read_to_string("/proc/meminfo") {
        if let Some(l) = c.lines().find(|l| l.starts_with("MemTotal")) {
            let kib: f64 = l
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            m.insert("memory".into(), format!("{:.1} GiB", kib / 1024.0 / 1024.0));
        }
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        m.insert("kernel".into(), k.trim().to_string());
    }
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        m.insert(
            "loadavg at start".into(),
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        );
    }
    for (name, cmd, arg) in [
        ("haproxy", "haproxy", "-v"),
        ("sysbench", "sysbench", "--version"),
        ("mariadbd", "mariadbd", "--version"),
    ] {
        if let Ok(o) = Command::new(cmd).arg(arg).output() {
            let s = String::from_utf8_lossy(&o.stdout);
            if let Some(l) = s.lines().next() {
                m.insert(name.into(), l.trim().to_string());
            }
        }
    }
    m
}

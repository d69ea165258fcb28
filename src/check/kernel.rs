//! The kernel checks: its version against io_uring's needs, whether io_uring is allowed at all
//! (sysctl, seccomp), and how much locked memory the rings themselves are charged.

use super::limits::{memlock_limit, show_bytes, show_limit};
use super::Item;
use crate::config::{Config, ReadBufferMode};
use uring::ring::{Ring, RingError};
use uring::sys::{self, Resource, Rlimit};

/// `uname -r`, and its major.minor.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub release: String,
    pub version: Option<(u32, u32)>,
}

pub(super) fn kernel_release() -> Kernel {
    let release = sys::kernel_release().unwrap_or_else(|| String::from("unknown"));
    let version = parse_version(&release);
    Kernel { release, version }
}

/// `6.8.0-45-generic` → (6, 8).
pub fn parse_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

pub(super) fn at_least(k: &Kernel, v: (u32, u32)) -> bool {
    k.version.is_some_and(|have| have >= v)
}

pub(super) fn check_kernel(k: &Kernel, cfg: &Config) -> Item {
    let what = "kernel";
    let Some(_) = k.version else {
        return Item::warn(
            what,
            format!("Linux {}: version not recognised", k.release),
            "ringgate needs Linux 5.1+ (5.19+ or 6.1+ recommended); see docs/operations.md",
        );
    };
    let fixed = cfg.read_buffers == ReadBufferMode::Fixed;
    if !at_least(k, (5, 1)) {
        return Item::fail(
            what,
            format!("Linux {}: older than 5.1, which has no io_uring", k.release),
            "run on Linux 5.1 or newer (5.19+ recommended, 6.1+ for DEFER_TASKRUN)",
        );
    }
    if fixed && cfg.read_buffer_count > 1024 && !at_least(k, (5, 13)) {
        return Item::fail(
            what,
            format!(
                "Linux {}: more than 1024 registered buffers per ring needs 5.13+, and \
                 --read-buffer-count is {}",
                k.release, cfg.read_buffer_count
            ),
            "set --read-buffer-count 1024 or lower, or upgrade the kernel to 5.13+",
        );
    }
    let mut missing = Vec::new();
    if !at_least(k, (5, 19)) {
        missing.push("multishot accept and COOP_TASKRUN (5.19)");
    }
    if !at_least(k, (6, 0)) {
        missing.push("SINGLE_ISSUER (6.0)");
    }
    if !at_least(k, (6, 1)) {
        missing.push("DEFER_TASKRUN (6.1)");
    }
    if missing.is_empty() {
        Item::ok(
            what,
            format!(
                "Linux {}: has every io_uring feature ringgate uses",
                k.release
            ),
        )
    } else {
        Item::warn(
            what,
            format!(
                "Linux {}: runs, with fallbacks; missing {}",
                k.release,
                missing.join(", ")
            ),
            "a 6.1+ kernel gives the full feature set (see docs/operations.md, Kernel requirements)",
        )
    }
}

pub(super) fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `Seccomp:` of /proc/self/status: 0 none, 1 strict, 2 filter.
pub(super) fn seccomp_mode() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The probe ring is the size a worker uses (sized from the limits, as the
/// worker does), so the memlock figure matches.
pub(super) fn worker_ring_sizes(cfg: &Config) -> (u32, u32) {
    crate::proxy::worker::ring_sizes(cfg, cfg.worker_count())
}

/// Locked memory one ring of `sq` SQEs and `cq` CQEs takes, when the kernel
/// charges it: the SQE array (64 bytes each) plus the ring header, CQEs (16
/// bytes each) and SQ index array (4 bytes each), each rounded up to pages.
/// 136 KiB for 1024 SQEs and 4096 CQEs, which is what Linux 6.18 charges.
pub fn ring_locked_bytes(sq: u32, cq: u32) -> u64 {
    const PAGE: u64 = 4096;
    let round = |b: u64| b.div_ceil(PAGE) * PAGE;
    round(64 * u64::from(sq)) + round(256 + 16 * u64::from(cq) + 4 * u64::from(sq))
}

/// Whether this kernel charges io_uring's ring memory to RLIMIT_MEMLOCK
/// (kernels before 5.12 do, and recent ones again): set up a tiny ring with
/// the soft limit lowered to 0 for the moment. `None` when that cannot be
/// tried. Only meaningful without CAP_IPC_LOCK, which exempts from charging.
pub(super) fn kernel_charges_rings() -> Option<bool> {
    let orig = sys::rlimit(Resource::Memlock).ok()?;
    let zero = Rlimit {
        soft: 0,
        hard: orig.hard,
    };
    sys::set_rlimit(Resource::Memlock, zero).ok()?;
    // A raw ring, without `Ring::new`'s fallbacks: only the errno matters.
    let probe = io_uring::IoUring::new(8);
    // Restoring the original soft limit (<= hard) is always allowed.
    let _ = sys::set_rlimit(Resource::Memlock, orig);
    match probe {
        Ok(_) => Some(false),
        Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => Some(true),
        Err(_) => None,
    }
}

/// Sets up a ring the size a worker's is.
pub(super) fn check_io_uring(cfg: &Config, k: &Kernel, ring_bytes: u64) -> Item {
    let what = "io_uring";
    let disabled = read_trimmed("/proc/sys/kernel/io_uring_disabled");
    let sysctl = match disabled.as_deref() {
        None => String::from("kernel.io_uring_disabled absent"),
        Some(v) => format!("kernel.io_uring_disabled={v}"),
    };
    let (sq, cq) = worker_ring_sizes(cfg);
    match Ring::new(sq, cq) {
        Ok(ring) => {
            let charged = if ring_bytes > 0 {
                format!(
                    "; this kernel charges each ring {} of locked memory",
                    show_bytes(ring_bytes)
                )
            } else {
                String::new()
            };
            let accept = if at_least(k, (5, 19)) {
                "multishot accept"
            } else {
                "one-shot accept (multishot needs 5.19)"
            };
            Item::ok(
                what,
                format!(
                    "ring set up ({sysctl}); ringgate will use: {}, {accept}{charged}",
                    ring.features()
                ),
            )
        }
        Err(RingError::Unavailable(e)) => {
            let mut causes = Vec::new();
            match disabled.as_deref() {
                Some("2") => causes.push(
                    "the sysctl kernel.io_uring_disabled=2 disables io_uring for everyone"
                        .to_owned(),
                ),
                Some("1") => {
                    let group = read_trimmed("/proc/sys/kernel/io_uring_group")
                        .unwrap_or_else(|| "-1".into());
                    causes.push(format!(
                        "the sysctl kernel.io_uring_disabled=1 allows io_uring only to \
                         CAP_SYS_ADMIN and to members of group {group} (kernel.io_uring_group)"
                    ));
                }
                _ => {}
            }
            if seccomp_mode() == Some(2) {
                causes.push(
                    "a seccomp filter is active on this process (a container runtime's \
                     default profile, e.g. Docker's, blocks io_uring)"
                        .to_owned(),
                );
            }
            let cause = if causes.is_empty() {
                String::new()
            } else {
                format!(": {}", causes.join("; "))
            };
            Item::fail(
                what,
                format!("io_uring is unavailable here ({e}, {sysctl}){cause}"),
                "set `sysctl -w kernel.io_uring_disabled=0` (or 1 and add ringgate's user to \
                 kernel.io_uring_group); in a container, run with a seccomp profile that allows \
                 io_uring_setup, io_uring_enter and io_uring_register \
                 (docker run --security-opt seccomp=PROFILE.json); see docs/operations.md",
            )
        }
        Err(RingError::Setup(e)) if e.raw_os_error() == Some(libc::ENOMEM) => {
            let limit = memlock_limit().and_then(|l| l.soft);
            Item::fail(
                what,
                format!(
                    "cannot set up a ring: {e} ({sysctl}); this kernel charges ring memory to \
                     the locked-memory limit (RLIMIT_MEMLOCK {}, counted per user across all \
                     of the user's processes), and it is exhausted",
                    show_limit(limit)
                ),
                "raise the locked-memory limit (see the memlock line) or grant CAP_IPC_LOCK; \
                 see docs/operations.md",
            )
        }
        Err(e) => Item::fail(
            what,
            format!("cannot set up a ring: {e} ({sysctl})"),
            "check the kernel (5.1+) and the locked-memory limit (see the memlock line: \
             some kernels charge ring memory to RLIMIT_MEMLOCK, per user)",
        ),
    }
}

//! The resource-limit checks: RLIMIT_MEMLOCK against the fixed buffers and rings every worker
//! registers, and RLIMIT_NOFILE against the sessions and backend connections configured.

use super::Item;
use crate::config::{Config, ReadBufferMode};
use uring::sys::{self, Resource};

/// A resource limit: soft and hard, `None` = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

pub(super) fn get_limit(resource: Resource) -> Option<Limit> {
    let rl = sys::rlimit(resource).ok()?;
    let f = |v: u64| (v != sys::RLIM_INFINITY).then_some(v);
    Some(Limit {
        soft: f(rl.soft),
        hard: f(rl.hard),
    })
}

pub(super) fn memlock_limit() -> Option<Limit> {
    get_limit(Resource::Memlock)
}

pub(super) fn nofile_limit() -> Option<Limit> {
    get_limit(Resource::Nofile)
}

/// The effective capability set (CapEff of /proc/self/status).
pub(super) fn cap_eff() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

pub(super) const CAP_IPC_LOCK: u32 = 14;

pub(super) fn show_bytes(b: u64) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{b} bytes ({} MiB)", b >> 20)
    } else if b >= 1 << 10 && b % (1 << 10) == 0 {
        format!("{b} bytes ({} KiB)", b >> 10)
    } else {
        format!("{b} bytes")
    }
}

pub(super) fn show_limit(v: Option<u64>) -> String {
    v.map_or_else(|| "unlimited".to_owned(), show_bytes)
}

/// The locked-memory check: the pool registers workers × slots × size, and
/// on kernels that charge ring memory, each worker's ring adds `ring_bytes`.
pub fn check_memlock(
    cfg: &Config,
    ring_bytes: u64,
    limit: Option<Limit>,
    cap_eff: Option<u64>,
) -> Item {
    let what = "memlock";
    let workers = cfg.worker_count();
    let rings = workers as u64 * ring_bytes;
    let need = cfg.locked_memory_bytes() + rings;
    let ring_note = if rings > 0 {
        format!(" + {workers} rings × {ring_bytes} bytes")
    } else {
        String::new()
    };
    let mode = match cfg.read_buffers {
        ReadBufferMode::Heap => "heap",
        ReadBufferMode::Ring => "ring",
        ReadBufferMode::Fixed => "fixed",
    };
    if cfg.read_buffers != ReadBufferMode::Fixed && rings == 0 {
        return Item::ok(
            what,
            format!("--read-buffers {mode}: no locked memory needed"),
        );
    }
    let pool = if cfg.read_buffers != ReadBufferMode::Fixed {
        format!(
            "--read-buffers {mode}; the rings need {} ({workers} rings × {ring_bytes} bytes)",
            show_bytes(need)
        )
    } else {
        format!(
            "the fixed pool needs {} ({workers} workers × {} slots × {} bytes{ring_note})",
            show_bytes(need),
            cfg.read_buffer_count,
            cfg.read_buffer_size
        )
    };
    if cap_eff.is_some_and(|c| c & (1 << CAP_IPC_LOCK) != 0) {
        return Item::ok(
            what,
            format!("{pool}; CAP_IPC_LOCK is effective, so no limit applies"),
        );
    }
    let Some(limit) = limit else {
        return Item::warn(
            what,
            format!("{pool}; cannot read RLIMIT_MEMLOCK"),
            "make sure the locked-memory limit is at least that",
        );
    };
    match limit.soft {
        None => Item::ok(what, format!("{pool}; RLIMIT_MEMLOCK is unlimited")),
        Some(soft) if soft >= need => Item::ok(
            what,
            format!("{pool}; RLIMIT_MEMLOCK is {} (enough)", show_bytes(soft)),
        ),
        Some(soft) => {
            let kib = need.div_ceil(1024);
            let hard_note = match limit.hard {
                Some(h) if h < need => format!(
                    " (the hard limit is {}, so `ulimit -l` alone cannot raise it: set \
                     `ringgate - memlock {kib}` in /etc/security/limits.conf, or use systemd)",
                    show_bytes(h)
                ),
                _ => String::new(),
            };
            Item::fail(
                what,
                format!(
                    "{pool}, but RLIMIT_MEMLOCK is {} and CAP_IPC_LOCK is not effective: {}",
                    show_limit(Some(soft)),
                    if soft < rings {
                        "not even enough for full-size rings"
                    } else {
                        "ringgate would fall back to heap read buffers"
                    }
                ),
                format!(
                    "systemd: LimitMEMLOCK={need} (or AmbientCapabilities=CAP_IPC_LOCK)\n\
                     shell: ulimit -l {kib}{hard_note}\n\
                     or lower --workers / --read-buffer-count / --read-buffer-size"
                ),
            )
        }
    }
}

/// File descriptors ringgate needs at its configured limits: every client,
/// every backend connection, and per worker a ring, listeners and spares.
pub fn fds_needed(cfg: &Config) -> u64 {
    const SLACK: u64 = 64;
    cfg.max_connections as u64
        + cfg.backend_max_connections as u64
        + 4 * cfg.worker_count() as u64
        + SLACK
}

/// The fd check. ringgate raises its soft RLIMIT_NOFILE to the hard limit
/// at start-up, so the hard limit is what counts.
pub fn check_nofile(cfg: &Config, limit: Option<Limit>) -> Item {
    let what = "fds";
    let need = fds_needed(cfg);
    let basis = format!(
        "need {need} (--max-connections {} + --backend-max-connections {} + slack)",
        cfg.max_connections, cfg.backend_max_connections
    );
    let Some(limit) = limit else {
        return Item::warn(
            what,
            format!("{basis}; cannot read RLIMIT_NOFILE"),
            format!("make sure the fd limit is at least {need}"),
        );
    };
    let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
    let have = format!(
        "RLIMIT_NOFILE soft {} / hard {}",
        show(limit.soft),
        show(limit.hard)
    );
    match limit.hard {
        Some(hard) if hard < need => Item::fail(
            what,
            format!("{basis}, but {have}: connections beyond it fail with EMFILE"),
            format!(
                "systemd: LimitNOFILE={need}\nshell: ulimit -n {need} (as root, or raise the \
                 hard limit in /etc/security/limits.conf)\nor lower --max-connections / \
                 --backend-max-connections"
            ),
        ),
        _ if limit.soft.is_some_and(|s| s < need) => Item::ok(
            what,
            format!("{basis}; {have} (ringgate raises the soft limit to the hard one at start)"),
        ),
        _ => Item::ok(what, format!("{basis}; {have}")),
    }
}

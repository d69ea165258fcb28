//! `ringgate check`: a preflight report on whether this host can run
//! ringgate well with the given settings.
//!
//! Each check prints one `OK`/`WARN`/`FAIL` line saying what it found, and a
//! `fix:` line for anything that is not OK. The report exits non-zero when
//! any check FAILs: something that stops ringgate from starting, or makes
//! it run worse than configured (e.g. heap buffers instead of fixed ones).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::backend_tls::{self, BackendTlsConfig};
use crate::config::{BackendIdentity, Config, ReadBufferMode};
use crate::listen_guard;
use crate::mysql::auth::Credential;
use crate::mysql::client_login::{ClientLogin, LoginError, LoginParams, LoginStep, TlsWish};
use crate::mysql::client_sha2::FullAuthTransport;
use crate::mysql::constants::{COM_QUIT, NATIVE_LOGIN_CAPS, UTF8MB4_GENERAL_CI};
use crate::mysql::packet::{split_packet, write_packet};
use crate::mysql::reply::com_payload;
use crate::mysql::sha2_rsa::RsaPublic;
use crate::mysql::Users;
use crate::ring::{Ring, RingError};
use tls::Stream;

#[path = "check_tls.rs"]
pub mod tls;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Item {
    pub status: Status,
    pub what: &'static str,
    pub detail: String,
    pub fix: Option<String>,
}

impl Item {
    fn ok(what: &'static str, detail: impl Into<String>) -> Item {
        Item {
            status: Status::Ok,
            what,
            detail: detail.into(),
            fix: None,
        }
    }
    fn warn(what: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Item {
        Item {
            status: Status::Warn,
            what,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    fn fail(what: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Item {
        Item {
            status: Status::Fail,
            what,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct Report {
    pub items: Vec<Item>,
}

impl Report {
    /// True when nothing FAILed (WARNs are allowed).
    pub fn passed(&self) -> bool {
        self.items.iter().all(|i| i.status != Status::Fail)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for i in &self.items {
            let _ = writeln!(out, "{:<4}  {:<9} {}", i.status.as_str(), i.what, i.detail);
            if let Some(fix) = &i.fix {
                for (n, line) in fix.lines().enumerate() {
                    let lead = if n == 0 { "fix:" } else { "    " };
                    let _ = writeln!(out, "{:<4}  {:<9} {lead} {line}", "", "");
                }
            }
        }
        let fails = self
            .items
            .iter()
            .filter(|i| i.status == Status::Fail)
            .count();
        let warns = self
            .items
            .iter()
            .filter(|i| i.status == Status::Warn)
            .count();
        if fails == 0 {
            let _ = writeln!(
                out,
                "\nready: {warns} warning(s), no problem blocks a good run"
            );
        } else {
            let _ = writeln!(
                out,
                "\nNOT ready: {fails} problem(s) block a good run, {warns} warning(s)"
            );
        }
        out
    }
}

/// Runs every check for `cfg`.
pub fn run(cfg: &Config) -> Report {
    let kernel = kernel_release();
    let caps = cap_eff();
    let mut items = vec![check_kernel(&kernel, cfg)];
    let exempt = caps.is_some_and(|c| c & (1 << CAP_IPC_LOCK) != 0);
    let ring_bytes = if !exempt && kernel_charges_rings() == Some(true) {
        let (sq, cq) = worker_ring_sizes(cfg);
        ring_locked_bytes(sq, cq)
    } else {
        0
    };
    items.push(check_io_uring(cfg, &kernel, ring_bytes));
    items.push(check_memlock(cfg, ring_bytes, memlock_limit(), caps));
    items.push(check_nofile(cfg, nofile_limit()));
    items.push(check_listen(cfg));
    items.push(check_users(&cfg.users_file));
    items.push(check_backend(cfg));
    if let Some(ca) = &cfg.backend_tls_ca {
        items.push(check_cert_expiry("backend-tls-ca", ca, SystemTime::now()));
    }
    // The front end's certificates: start-up refuses a broken set, but an
    // expiry weeks away or a key replaced on disk (read at the next SIGHUP)
    // is only seen here.
    if let Some(cert) = &cfg.tls_cert {
        items.push(check_cert_expiry("tls-cert", cert, SystemTime::now()));
        if let Some(key) = &cfg.tls_key {
            items.push(check_key_match(cert, key));
        }
    }
    if let Some(ca) = &cfg.tls_client_ca {
        items.push(check_cert_expiry("tls-client-ca", ca, SystemTime::now()));
    }
    Report { items }
}

// ---------------------------------------------------------------------------
// Kernel and io_uring
// ---------------------------------------------------------------------------

/// `uname -r`, and its major.minor.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub release: String,
    pub version: Option<(u32, u32)>,
}

fn kernel_release() -> Kernel {
    // SAFETY: uname fills the struct we pass; all-zero is a valid utsname.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    let release = if unsafe { libc::uname(&mut uts) } == 0 {
        // SAFETY: uname NUL-terminates `release` inside the array.
        unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    } else {
        String::from("unknown")
    };
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

fn at_least(k: &Kernel, v: (u32, u32)) -> bool {
    k.version.is_some_and(|have| have >= v)
}

fn check_kernel(k: &Kernel, cfg: &Config) -> Item {
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

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `Seccomp:` of /proc/self/status: 0 none, 1 strict, 2 filter.
fn seccomp_mode() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The probe ring is the size a worker uses (sized from the limits, as the
/// worker does), so the memlock figure matches.
fn worker_ring_sizes(cfg: &Config) -> (u32, u32) {
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
fn kernel_charges_rings() -> Option<bool> {
    let mut orig = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut orig) } != 0 {
        return None;
    }
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: orig.rlim_max,
    };
    // SAFETY: setrlimit only reads the struct we pass; lowering the soft
    // limit is always allowed.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &zero) } != 0 {
        return None;
    }
    // A raw ring, without `Ring::new`'s fallbacks: only the errno matters.
    let probe = io_uring::IoUring::new(8);
    // SAFETY: as above; restoring the original soft limit (<= hard) is allowed.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &orig) };
    match probe {
        Ok(_) => Some(false),
        Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => Some(true),
        Err(_) => None,
    }
}

/// Sets up a ring the size a worker's is.
fn check_io_uring(cfg: &Config, k: &Kernel, ring_bytes: u64) -> Item {
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

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

/// A resource limit: soft and hard, `None` = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

fn get_limit(resource: libc::__rlimit_resource_t) -> Option<Limit> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(resource, &mut rl) } != 0 {
        return None;
    }
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Some(Limit {
        soft: f(rl.rlim_cur),
        hard: f(rl.rlim_max),
    })
}

fn memlock_limit() -> Option<Limit> {
    get_limit(libc::RLIMIT_MEMLOCK)
}

fn nofile_limit() -> Option<Limit> {
    get_limit(libc::RLIMIT_NOFILE)
}

/// The effective capability set (CapEff of /proc/self/status).
fn cap_eff() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

const CAP_IPC_LOCK: u32 = 14;

fn show_bytes(b: u64) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{b} bytes ({} MiB)", b >> 20)
    } else if b >= 1 << 10 && b % (1 << 10) == 0 {
        format!("{b} bytes ({} KiB)", b >> 10)
    } else {
        format!("{b} bytes")
    }
}

fn show_limit(v: Option<u64>) -> String {
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

fn check_listen(cfg: &Config) -> Item {
    let what = "listen";
    // The same probe and wording as start-up (defect: a second ringgate on
    // the same port used to share it silently through SO_REUSEPORT).
    if listen_guard::probe(cfg.listen) == listen_guard::PortState::Held {
        return if cfg.reuse_port_handover {
            Item::warn(
                what,
                listen_guard::handover_detail(cfg.listen),
                "stop the old ringgate once the new one runs",
            )
        } else {
            Item::fail(
                what,
                listen_guard::held_detail(cfg.listen),
                listen_guard::HELD_FIX,
            )
        };
    }
    if let Err(e) = std::net::TcpListener::bind(cfg.listen) {
        return Item::warn(
            what,
            format!("cannot bind {}: {e}", cfg.listen),
            "ringgate will not be able to listen there: choose another --listen",
        );
    }
    if let Some(m) = cfg.metrics_listen {
        if let Err(e) = std::net::TcpListener::bind(m) {
            return Item::warn(
                what,
                format!("cannot bind --metrics-listen {m}: {e}"),
                "stop the process that holds it, or choose another --metrics-listen",
            );
        }
    }
    if let Some(path) = &cfg.socket {
        if let Some(item) = check_socket_path(path) {
            return item;
        }
    }
    Item::ok(
        what,
        format!(
            "{} is free{}{}",
            cfg.listen,
            cfg.metrics_listen
                .map(|m| format!(", metrics {m} is free"))
                .unwrap_or_default(),
            cfg.socket
                .as_ref()
                .map(|p| format!(", unix socket {} can be created", p.display()))
                .unwrap_or_default()
        ),
    )
}

/// `--socket`: the same rules as the worker's bind (a stale socket is
/// replaced, a live one or a non-socket refused), and a writable directory.
fn check_socket_path(path: &Path) -> Option<Item> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileTypeExt;
    let what = "listen";
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Some(Item::fail(
                what,
                format!("--socket {} exists and is not a socket", path.display()),
                "ringgate never deletes it: remove it or choose another --socket",
            ));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Some(Item::warn(
                what,
                format!("--socket {} is in use by a running server", path.display()),
                "stop it (is ringgate already running?), or choose another --socket",
            ));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let cdir = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: access(2) reads the NUL-terminated path we pass.
    if unsafe { libc::access(cdir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Some(Item::fail(
            what,
            format!(
                "cannot create --socket {}: directory {}: {}",
                path.display(),
                dir.display(),
                std::io::Error::last_os_error()
            ),
            "create the directory writable by ringgate's user (systemd: RuntimeDirectory=ringgate \
             gives /run/ringgate)",
        ));
    }
    None
}

// ---------------------------------------------------------------------------
// Users file
// ---------------------------------------------------------------------------

fn check_users(path: &Path) -> Item {
    let what = "users";
    match Users::load(path) {
        Ok(u) if u.is_empty() => Item::warn(
            what,
            format!(
                "{} parses but has no users: every login fails",
                path.display()
            ),
            "add users in Vitess static-auth JSON: {\"user\": [{\"Password\": \"...\"}]}",
        ),
        Ok(u) => Item::ok(what, format!("{}: {} user(s)", path.display(), u.len())),
        Err(e) => Item::fail(
            what,
            e.to_string(),
            "fix the file (Vitess static-auth JSON: {\"user\": [{\"Password\": \"...\"}]} or \
             {\"user\": [{\"MysqlNativePassword\": \"*HEX\"}]}) or --users-file",
        ),
    }
}

// ---------------------------------------------------------------------------
// Backend login
// ---------------------------------------------------------------------------

/// Why `ringgate check` could not log into the backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// TCP connect, read or write failed (refused, timed out, reset).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The server sent an ERR instead of its greeting (too many connections,
    /// host blocked): it refused before any login.
    #[error("server refused the connection: {0}")]
    Refused(LoginError),
    /// The login itself failed: the credentials were refused, the server
    /// wants another plugin, or it answered something unexpected.
    #[error("{0}")]
    Login(LoginError),
    /// `--backend-tls`: the configuration (CA file) or the handshake
    /// failed (a certificate that does not verify, no common protocol).
    #[error("{0}")]
    Tls(String),
}

/// What a successful check connection learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSummary {
    pub server_version: String,
    /// The greeting offers TLS (CLIENT_SSL).
    pub tls_offered: bool,
    /// TLS in use ("TLSv1.3, TLS13_…"), None for plain.
    pub tls: Option<String>,
}

impl BackendSummary {
    /// "; TLS offered, used (TLSv1.3, …)" for the report.
    fn tls_words(&self, cfg: &Config) -> String {
        let offer = if self.tls_offered {
            "offers TLS"
        } else {
            "does not offer TLS"
        };
        match &self.tls {
            Some(t) => format!(
                "; the server {offer}; TLS in use ({t}, --backend-tls {})",
                cfg.backend_tls
            ),
            None => format!(
                "; the server {offer}; no TLS (--backend-tls {})",
                cfg.backend_tls
            ),
        }
    }
}

/// `--backend-tls`, as the proxy will read it.
fn backend_tls_config(cfg: &Config) -> Result<Option<BackendTlsConfig>, BackendError> {
    backend_tls::client_config(
        cfg.backend_tls,
        cfg.backend_tls_ca.as_deref(),
        cfg.backend.ip(),
    )
    .map_err(|e| BackendError::Tls(e.to_string()))
}

fn tls_wish(tls: &Option<BackendTlsConfig>) -> TlsWish {
    match tls {
        None => TlsWish::Off,
        Some(t) if t.required() => TlsWish::Required,
        Some(_) => TlsWish::Preferred,
    }
}

/// Writes the SSLRequest and runs the TLS handshake.
fn start_tls(
    s: Stream,
    ssl_request: &[u8],
    tls: &Option<BackendTlsConfig>,
    cfg: &Config,
) -> Result<Stream, BackendError> {
    let mut s = s;
    s.write_all(ssl_request)?;
    let Some(tls) = tls else {
        return Err(BackendError::Tls(
            "TLS asked for without a configuration".into(),
        ));
    };
    s.start_tls(tls).map_err(|e| {
        BackendError::Tls(format!(
            "{} (--backend-tls {}{})",
            e,
            cfg.backend_tls,
            cfg.backend_tls_ca
                .as_ref()
                .map(|p| format!(", --backend-tls-ca {}", p.display()))
                .unwrap_or_default()
        ))
    })
}

/// Reads one whole packet: (sequence id, payload). Login packets are small,
/// so a physical packet is all that is ever needed.
fn read_packet(
    s: &mut Stream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<(u8, Vec<u8>), std::io::Error> {
    use std::io::{Error, ErrorKind};
    loop {
        if let Some((p, used)) = split_packet(buf) {
            let out = (p.seq, p.payload.to_vec());
            buf.drain(..used);
            return Ok(out);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::new(
                ErrorKind::TimedOut,
                "timed out waiting for the server",
            ));
        }
        s.tcp().set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) => {
                return Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // What a read timeout looks like on a socket (EAGAIN).
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    "timed out waiting for the server",
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Logs into the backend with the login code the pool's connections use
/// ([`ClientLogin`]), over a blocking socket (TLS after the SSLRequest
/// with `--backend-tls`), then quits.
pub fn backend_login(cfg: &Config, timeout: Duration) -> Result<BackendSummary, BackendError> {
    let deadline = Instant::now() + timeout;
    let tls = backend_tls_config(cfg)?;
    let sock = TcpStream::connect_timeout(&cfg.backend, timeout)?;
    sock.set_write_timeout(Some(timeout))?;
    let mut s = Stream::Plain(sock);
    let mut login = ClientLogin::new(LoginParams {
        user: cfg.backend_user.clone(),
        credential: Credential::Plaintext(cfg.backend_password.as_bytes().to_vec()),
        database: None,
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    })
    .with_full_auth_transport(FullAuthTransport {
        secure: false,
        server_key: backend_public_key(cfg)?,
    })
    .with_tls(tls_wish(&tls));
    let mut buf = Vec::new();
    let mut greeted = false;
    let mut tls_offered = false;
    loop {
        let (seq, payload) = read_packet(&mut s, &mut buf, deadline)?;
        if !greeted {
            tls_offered = greeting_offers_tls(&payload);
        }
        let mut step = login.on_packet(seq, &payload);
        if let Ok(LoginStep::StartTls(ssl_request)) = step {
            greeted = true;
            s = start_tls(s, &ssl_request, &tls, cfg)?;
            step = login.on_tls_established();
        }
        match step {
            Ok(LoginStep::Send(bytes)) => {
                greeted = true;
                s.write_all(&bytes)?;
            }
            Ok(LoginStep::Wait) => {}
            Ok(LoginStep::StartTls(_)) => {
                return Err(BackendError::Tls("a second TLS request".into()))
            }
            Ok(LoginStep::Done { greeting, .. }) => {
                // COM_QUIT, best effort: the check is over either way.
                let mut quit = Vec::with_capacity(5);
                write_packet(&mut quit, 0, &com_payload(COM_QUIT, &[]));
                let _ = s.write_all(&quit);
                return Ok(BackendSummary {
                    server_version: greeting.server_version,
                    tls_offered,
                    tls: s.tls_summary(),
                });
            }
            Err(e @ LoginError::Server { .. }) if !greeted => return Err(BackendError::Refused(e)),
            Err(e) => return Err(BackendError::Login(e)),
        }
    }
}

fn greeting_offers_tls(payload: &[u8]) -> bool {
    crate::mysql::handshake::parse_greeting(payload)
        .is_ok_and(|g| g.capabilities & crate::mysql::constants::CLIENT_SSL != 0)
}

/// `--backend-rsa-public-key`, read as the proxy reads it at start-up.
fn backend_public_key(cfg: &Config) -> Result<Option<Arc<RsaPublic>>, BackendError> {
    cfg.backend_rsa_public_key
        .as_deref()
        .map(|path| {
            RsaPublic::load(path)
                .map(Arc::new)
                .map_err(|e| BackendError::Login(LoginError::Rsa(e.to_string())))
        })
        .transpose()
}

/// With passthrough identity ringgate has no account of its own to log in
/// as: read the greeting, check that it is one ringgate can log in to (the
/// same checks the login machine makes), with `--backend-tls` run the TLS
/// handshake (which verifies the certificate), and hang up.
pub fn backend_greeting(cfg: &Config, timeout: Duration) -> Result<BackendSummary, BackendError> {
    let deadline = Instant::now() + timeout;
    let tls = backend_tls_config(cfg)?;
    let sock = TcpStream::connect_timeout(&cfg.backend, timeout)?;
    sock.set_write_timeout(Some(timeout))?;
    let mut s = Stream::Plain(sock);
    let mut login = ClientLogin::new(LoginParams {
        user: String::new(),
        credential: Credential::Plaintext(Vec::new()),
        database: None,
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    })
    .with_tls(tls_wish(&tls));
    let (seq, payload) = read_packet(&mut s, &mut Vec::new(), deadline)?;
    let step = match login.on_packet(seq, &payload) {
        Ok(step) => step,
        Err(e @ LoginError::Server { .. }) => return Err(BackendError::Refused(e)),
        Err(e) => return Err(BackendError::Login(e)),
    };
    if let LoginStep::StartTls(ssl_request) = step {
        s = start_tls(s, &ssl_request, &tls, cfg)?;
    }
    Ok(BackendSummary {
        server_version: crate::mysql::handshake::parse_greeting(&payload)
            .map(|g| g.server_version)
            .unwrap_or_default(),
        tls_offered: greeting_offers_tls(&payload),
        tls: s.tls_summary(),
    })
}

fn check_backend(cfg: &Config) -> Item {
    let what = "backend";
    let timeout = cfg
        .backend_connect_timeout
        .clamp(Duration::from_secs(1), Duration::from_secs(10));
    if cfg.backend_identity == BackendIdentity::Passthrough {
        return check_backend_greeting(cfg, timeout);
    }
    let user = &cfg.backend_user;
    match backend_login(cfg, timeout) {
        Ok(b) => Item::ok(
            what,
            format!(
                "{} reachable, logged in as '{user}' (server {}){}",
                cfg.backend,
                b.server_version,
                b.tls_words(cfg)
            ),
        ),
        Err(e @ BackendError::Tls(_)) => tls_failure(cfg, &e),
        Err(BackendError::Login(e @ LoginError::TlsUnavailable(_))) => tls_failure(cfg, &e),
        Err(e @ (BackendError::Io(_) | BackendError::Refused(_))) => before_login_failure(cfg, &e),
        Err(BackendError::Login(e @ LoginError::Server { .. })) => Item::fail(
            what,
            format!(
                "{} refused --backend-user '{user}': login refused: {e}",
                cfg.backend
            ),
            format!(
                "check --backend-user and RINGGATE_BACKEND_PASSWORD; on the server: \
                 CREATE USER '{user}'@'<ringgate host>' IDENTIFIED WITH mysql_native_password \
                 BY '...' and GRANT it what clients need"
            ),
        ),
        Err(BackendError::Login(e @ LoginError::UnsupportedPlugin(_))) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            format!(
                "ALTER USER '{user}'@'<ringgate host>' IDENTIFIED WITH caching_sha2_password \
                 BY '...' (or mysql_native_password)"
            ),
        ),
        Err(BackendError::Login(
            e @ (LoginError::Rsa(_)
            | LoginError::Sha2WithoutSha2Hash
            | LoginError::FullAuthWithoutPassword),
        )) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            "caching_sha2_password full authentication over plain TCP sends the password \
             RSA-encrypted: check --backend-rsa-public-key (the server's public_key.pem), or \
             leave it unset to ask the server for its key",
        ),
        Err(e @ BackendError::Login(LoginError::Protocol { .. })) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            "is --backend a MySQL/MariaDB server?",
        ),
    }
}

/// A certificate file's validity: expired (or not yet valid) fails, less
/// than 30 days left warns.
fn check_cert_expiry(what: &'static str, path: &Path, now: SystemTime) -> Item {
    match tls::check_cert_file(path, now) {
        Ok(info) => {
            let when = humantime::format_rfc3339_seconds(info.first_expiry);
            let detail = format!(
                "{}: {} certificate(s); the first to expire is {:?}, on {when}",
                path.display(),
                info.count,
                info.subject
            );
            let left = info.first_expiry.duration_since(now).unwrap_or_default();
            if left < tls::EXPIRY_WARNING {
                Item::warn(
                    what,
                    format!("{detail} (in {} days)", left.as_secs() / 86400),
                    "renew the certificate before it expires",
                )
            } else {
                Item::ok(what, detail)
            }
        }
        Err(e) => Item::fail(
            what,
            format!("{}: {e}", path.display()),
            "replace the certificate (PEM) with a valid one",
        ),
    }
}

/// `--tls-key` is the private key of `--tls-cert`'s first certificate.
fn check_key_match(cert: &Path, key: &Path) -> Item {
    match tls::check_key_pair(cert, key) {
        Ok(()) => Item::ok(
            "tls-key",
            format!("{} is the key of {}", key.display(), cert.display()),
        ),
        Err(e) => Item::fail(
            "tls-key",
            format!("{} and {}: {e}", key.display(), cert.display()),
            "give --tls-key the private key the --tls-cert certificate was issued for",
        ),
    }
}

/// `--backend-tls` could not be honoured.
fn tls_failure(cfg: &Config, e: &dyn std::fmt::Display) -> Item {
    Item::fail(
        "backend",
        format!("{}: {e}", cfg.backend),
        "check --backend-tls and --backend-tls-ca against the server's ssl-cert/ssl-ca (its \
         certificate must chain to --backend-tls-ca; verify-identity also needs the --backend \
         address in its subjectAltName), or use --backend-tls preferred",
    )
}

/// The backend failures that come before any login, the same whether
/// `check` logs in (shared identity) or only reads the greeting.
fn before_login_failure(cfg: &Config, e: &BackendError) -> Item {
    let what = "backend";
    match e {
        BackendError::Io(_) => Item::fail(
            what,
            format!("cannot reach {}: {e}", cfg.backend),
            "start the server, or fix --backend; check firewalls between this host and it",
        ),
        // Refused: the callers pass only these two variants.
        _ => Item::fail(
            what,
            format!("{} {e}", cfg.backend),
            "the server refused before login (too many connections? host blocked? \
             `FLUSH HOSTS` clears a host blocked by max_connect_errors)",
        ),
    }
}

fn check_backend_greeting(cfg: &Config, timeout: Duration) -> Item {
    let what = "backend";
    match backend_greeting(cfg, timeout) {
        Ok(b) => Item::ok(
            what,
            format!(
                "{} reachable (server {}){}; --backend-identity passthrough: each client \
                 logs in as itself, so no login was tried",
                cfg.backend,
                b.server_version,
                b.tls_words(cfg)
            ),
        ),
        Err(e @ BackendError::Tls(_)) => tls_failure(cfg, &e),
        Err(BackendError::Login(e @ LoginError::TlsUnavailable(_))) => tls_failure(cfg, &e),
        Err(e @ (BackendError::Io(_) | BackendError::Refused(_))) => before_login_failure(cfg, &e),
        Err(e @ BackendError::Login(_)) => Item::fail(
            what,
            format!("{}: {e}", cfg.backend),
            "is --backend a MySQL/MariaDB server?",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cfg(extra: &[&str]) -> Config {
        let mut args = vec!["ringgate", "--users-file", "u.json", "--workers", "2"];
        args.extend_from_slice(extra);
        Config::try_parse_from(args).unwrap()
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(
            parse_version("5.15.153.1-microsoft-standard-WSL2"),
            Some((5, 15))
        );
        assert_eq!(parse_version("unknown"), None);
    }

    #[test]
    fn memlock_shortfall_names_the_exact_fix() {
        let c = cfg(&[]);
        let need = 2 * 1024 * 16384u64;
        let lim = Limit {
            soft: Some(65536),
            hard: Some(65536),
        };
        let item = check_memlock(&c, 0, Some(lim), Some(0));
        assert_eq!(item.status, Status::Fail);
        let fix = item.fix.unwrap();
        assert!(fix.contains(&format!("LimitMEMLOCK={need}")), "{fix}");
        assert!(fix.contains(&format!("ulimit -l {}", need / 1024)), "{fix}");
        // Enough, unlimited, CAP_IPC_LOCK, heap: all fine.
        let big = Limit {
            soft: Some(need),
            hard: Some(need),
        };
        assert_eq!(check_memlock(&c, 0, Some(big), Some(0)).status, Status::Ok);
        let inf = Limit {
            soft: None,
            hard: None,
        };
        assert_eq!(check_memlock(&c, 0, Some(inf), Some(0)).status, Status::Ok);
        assert_eq!(
            check_memlock(&c, 0, Some(lim), Some(1 << CAP_IPC_LOCK)).status,
            Status::Ok
        );
        let heap = cfg(&["--read-buffers", "heap"]);
        assert_eq!(
            check_memlock(&heap, 0, Some(lim), Some(0)).status,
            Status::Ok
        );
        // Kernels that charge the rings: 2 × 136 KiB on top of the pool.
        let ring = 136 * 1024;
        let item = check_memlock(&c, ring, Some(big), Some(0));
        assert_eq!(item.status, Status::Fail);
        assert!(
            item.fix
                .unwrap()
                .contains(&format!("LimitMEMLOCK={}", need + 2 * ring)),
            "rings must be counted"
        );
        assert_eq!(
            check_memlock(&heap, ring, Some(lim), Some(0)).status,
            Status::Fail,
            "64 KiB cannot hold two rings"
        );
    }

    #[test]
    fn nofile_counts_clients_and_backends() {
        let c = cfg(&[
            "--max-connections",
            "1000",
            "--backend-max-connections",
            "100",
        ]);
        let need = fds_needed(&c);
        assert!(need >= 1100);
        let low = Limit {
            soft: Some(1024),
            hard: Some(1024),
        };
        let item = check_nofile(&c, Some(low));
        assert_eq!(item.status, Status::Fail);
        assert!(item.fix.unwrap().contains(&format!("LimitNOFILE={need}")));
        let raisable = Limit {
            soft: Some(1024),
            hard: Some(65536),
        };
        assert_eq!(check_nofile(&c, Some(raisable)).status, Status::Ok);
    }

    #[test]
    fn ring_cost_matches_what_linux_6_18_charges() {
        assert_eq!(ring_locked_bytes(1024, 4096), 136 * 1024);
    }

    #[test]
    fn report_fails_on_any_fail() {
        let r = Report {
            items: vec![Item::ok("a", "fine"), Item::warn("b", "meh", "do x")],
        };
        assert!(r.passed());
        assert!(r.render().contains("ready:"));
        let r = Report {
            items: vec![Item::fail("c", "broken", "fix it\nsecond line")],
        };
        assert!(!r.passed());
        let text = r.render();
        assert!(text.contains("FAIL  c         broken"), "{text}");
        assert!(text.contains("fix: fix it"), "{text}");
        assert!(text.contains("NOT ready"), "{text}");
    }

    /// A one-connection fake backend: sends `script[0]` on accept, then the
    /// next entry after each whole packet it reads from the client.
    fn fake_backend(script: Vec<Vec<u8>>) -> (String, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            for (i, packet) in script.iter().enumerate() {
                if i > 0 {
                    let mut header = [0u8; 4];
                    s.read_exact(&mut header).unwrap();
                    let len = usize::from(header[0])
                        | usize::from(header[1]) << 8
                        | usize::from(header[2]) << 16;
                    s.read_exact(&mut vec![0; len]).unwrap();
                }
                s.write_all(packet).unwrap();
            }
            // Hold the connection until the client is done with it.
            let _ = s.read(&mut [0u8; 64]);
        });
        (addr, server)
    }

    fn framed(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_packet(&mut out, seq, payload);
        out
    }

    fn greeting_packet() -> Vec<u8> {
        use crate::mysql::constants::*;
        framed(
            0,
            &crate::mysql::handshake::build_greeting(&crate::mysql::handshake::Greeting {
                protocol_version: 10,
                server_version: "5.5.5-10.11.19-MariaDB".into(),
                connection_id: 7,
                scramble: b"abcdefgh0123456789AB".to_vec(),
                capabilities: 0x81FF_F7FE,
                ext_capabilities: 0x1d,
                charset: UTF8MB4_GENERAL_CI,
                status: SERVER_STATUS_AUTOCOMMIT,
                auth_plugin: crate::mysql::auth::NATIVE_PASSWORD.into(),
            }),
        )
    }

    fn check_against(script: Vec<Vec<u8>>) -> Item {
        let (addr, server) = fake_backend(script);
        let item = check_backend(&cfg(&["--backend", &addr, "--backend-identity", "shared"]));
        server.join().unwrap();
        item
    }

    #[test]
    fn passthrough_identity_checks_the_greeting_without_a_login() {
        let (addr, server) = fake_backend(vec![greeting_packet()]);
        let item = check_backend(&cfg(&["--backend", &addr]));
        server.join().unwrap();
        assert_eq!(item.status, Status::Ok, "{item:?}");
        assert!(item.detail.contains("no login was tried"), "{item:?}");
        assert!(item.detail.contains("server 5.5.5-10.11.19"), "{item:?}");
        let (addr, server) = fake_backend(vec![framed(0, b"\xFF\x10\x04Too many connections")]);
        let item = check_backend(&cfg(&["--backend", &addr]));
        server.join().unwrap();
        assert_eq!(item.status, Status::Fail, "{item:?}");
        assert!(item.detail.contains("1040"), "{item:?}");
    }

    #[test]
    fn backend_login_follows_the_shared_login_machine() {
        use crate::mysql::reply::ok_payload;
        let switch = b"\xFEmysql_native_password\x00abcdefgh0123456789AB\x00";
        let item = check_against(vec![
            greeting_packet(),
            framed(2, switch),
            framed(4, &ok_payload(0, 0, 2, 0)),
        ]);
        assert_eq!(item.status, Status::Ok, "{item:?}");
        assert!(
            item.detail.contains("server 5.5.5-10.11.19-MariaDB"),
            "{item:?}"
        );
    }

    #[test]
    fn backend_refusing_before_the_greeting_is_reported_as_a_refusal() {
        use crate::mysql::reply::err_payload;
        let item = check_against(vec![framed(0, &err_payload(1040, "Too many connections"))]);
        assert_eq!(item.status, Status::Fail);
        assert!(
            item.detail
                .contains("server refused the connection: 1040 (08004): Too many connections"),
            "{item:?}"
        );
        assert!(item.fix.unwrap().contains("FLUSH HOSTS"));
    }

    #[test]
    fn backend_wanting_another_plugin_names_it_and_the_fix() {
        let switch = b"\xFEclient_ed25519\x00abcdefgh0123456789ABabcdefgh0123\x00";
        let item = check_against(vec![greeting_packet(), framed(2, switch)]);
        assert_eq!(item.status, Status::Fail);
        assert!(item.detail.contains("'client_ed25519'"), "{item:?}");
        assert!(item
            .fix
            .unwrap()
            .contains("IDENTIFIED WITH caching_sha2_password"));
    }

    #[test]
    fn backend_login_follows_a_switch_to_caching_sha2_and_its_fast_auth() {
        use crate::mysql::reply::ok_payload;
        let switch = b"\xFEcaching_sha2_password\x00abcdefgh0123456789AB\x00";
        let item = check_against(vec![
            greeting_packet(),
            framed(2, switch),
            // 0x01 0x03 is answered by nothing: the OK follows at once.
            [framed(4, &[0x01, 0x03]), framed(5, &ok_payload(0, 0, 2, 0))].concat(),
        ]);
        assert_eq!(item.status, Status::Ok, "{item:?}");
    }

    #[test]
    fn backend_that_is_not_mysql_is_a_protocol_failure() {
        // Framed, but protocol version 9: not a HandshakeV10.
        let item = check_against(vec![framed(0, b"\x09not a greeting\x00")]);
        assert_eq!(item.status, Status::Fail);
        assert!(item.detail.contains("malformed greeting"), "{item:?}");
        assert!(item.fix.unwrap().contains("MySQL/MariaDB server"));
    }

    #[test]
    fn silent_backend_times_out_with_a_clear_message() {
        // Listening, so the connect succeeds, but nothing ever answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = cfg(&["--backend", &listener.local_addr().unwrap().to_string()]);
        match backend_login(&c, Duration::from_millis(200)) {
            Err(BackendError::Io(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
                assert_eq!(e.to_string(), "timed out waiting for the server");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn backend_down_is_an_io_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = cfg(&["--backend", &format!("127.0.0.1:{port}")]);
        match backend_login(&c, Duration::from_secs(2)) {
            Err(BackendError::Io(_)) => {}
            other => panic!("{other:?}"),
        }
    }
}

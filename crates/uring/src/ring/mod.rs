//! The io_uring driver: ring set-up with feature probing, ring sizing,
//! submission that never loses an operation, completion reaping that never
//! strands one, and the `user_data` encoding.
//!
//! This layer never allocates per operation and never owns I/O memory: the
//! buffers an operation points at belong to `crate::buffers`, whose types
//! keep them alive until the operation's completion has been reaped. Only
//! [`Sqe`]s can be pushed, and only `unsafe` code (here and in `buffers`)
//! can make one.
//!
//! # The kernel facts this rests on
//! - The SQ can be full: pushing then means handing the queue to the kernel
//!   first. `io_uring_enter` can fail; a dropped SQE whose buffer is already
//!   marked in flight would strand that buffer and its connection forever,
//!   so a push that cannot be queued becomes a *synthetic completion*
//!   `(user_data, -errno, 0)` that the owner handles like any failed op.
//! - The CQ can be full. With IORING_FEAT_NODROP the kernel keeps further
//!   completions on an internal overflow list, sets IORING_SQ_CQ_OVERFLOW,
//!   and moves them back only on an `io_uring_enter(GETEVENTS)` after we
//!   made room; older kernels answer a submit with EBUSY meanwhile. So
//!   `reap` flushes the overflow list whenever the flag is set, and an
//!   EBUSY makes `push` reap into an internal backlog instead of spinning.
//!   If the kernel could not even buffer an overflowed CQE (EBADR), state is
//!   lost: that is a hard error.
//! - A linked pair (IOSQE_IO_LINK) is only linked if both SQEs are in the
//!   same submission: `push_linked` makes room for both before queueing
//!   either.
//! - The CQ may be at most IORING_MAX_CQ_ENTRIES = 65536 entries and must
//!   hold at least as many as the SQ; the SQ at most 32768.

mod direct;
mod enter;
mod fault;
mod queue;
mod sqe;
mod token;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod link_tests;

pub use direct::MAX_FIXED_FILES;
pub use fault::{
    parse_cq_entries, parse_fault_plan, parse_probe_fail, DebugKnobs, FaultPlan, ProbeFail,
    DEBUG_CQ_ENTRIES_VAR, DEBUG_PROBE_FAIL_VAR, FAULT_INJECT_VAR,
};
pub use queue::{Completion, RingStats};
pub use sqe::{SockRef, Sqe};
pub use token::{next_generation, OpTag, Token};

/// Builders for the SQEs that point at no caller memory. The ones that do
/// (reads, writes) are built by `crate::buffers`, which owns that memory.
pub mod ops {
    pub use super::direct::{accept_direct, close_fixed, msg_ring, msg_ring_with, shutdown};
    pub use super::sqe::{
        accept, accept_multi, cancel_fd, cancel_user_data, connect, link_timeout, nop, poll_closed,
        poll_readable, timeout,
    };
}

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;

use io_uring::IoUring;
use thiserror::Error;

/// Errors from setting up or driving the ring.
#[derive(Debug, Error)]
pub enum RingError {
    /// io_uring cannot be used at all here: a seccomp profile (Docker's
    /// default blocks io_uring), the `kernel.io_uring_disabled` sysctl, or a
    /// kernel without it.
    #[error(
        "io_uring is unavailable here ({0}): check `sysctl kernel.io_uring_disabled` (must be 0, \
         or 1 with CAP_SYS_ADMIN / the io_uring_group), and run outside a seccomp profile that \
         blocks io_uring (Docker's default does; use --security-opt seccomp=<profile allowing \
         io_uring_setup/io_uring_enter/io_uring_register>)"
    )]
    Unavailable(io::Error),
    #[error("io_uring setup failed: {0}")]
    Setup(io::Error),
    /// Even a small ring did not fit: for an unprivileged process the
    /// ring's own memory counts against RLIMIT_MEMLOCK.
    #[error(
        "io_uring setup failed: out of locked memory ({0}); the ring itself counts against \
         RLIMIT_MEMLOCK for unprivileged users: raise LimitMEMLOCK / `ulimit -l`, or grant CAP_IPC_LOCK"
    )]
    Memlock(io::Error),
    /// A hard `io_uring_enter` failure. Operations queued since have been
    /// failed with synthetic completions; the worker must stop.
    #[error("io_uring_enter failed: {0}")]
    Enter(io::Error),
    /// EBADR: the kernel could not buffer an overflowed completion, so an
    /// operation's completion is gone and its owner would wait forever.
    #[error(
        "io_uring dropped completions (the CQ overflowed and the kernel could not buffer them); \
         the worker's state is no longer consistent"
    )]
    CompletionsLost,
    /// A debug-only environment variable is malformed.
    #[error("invalid {var}: {reason}")]
    DebugEnv { var: &'static str, reason: String },
}

impl RingError {
    /// The error a latched `io_uring_enter` errno is reported as.
    fn from_errno(errno: i32) -> RingError {
        if errno == libc::EBADR {
            RingError::CompletionsLost
        } else {
            RingError::Enter(io::Error::from_raw_os_error(errno))
        }
    }
}

/// What the kernel offered and what this ring uses. Logged once at start-up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// IORING_SETUP_SINGLE_ISSUER (6.0): only the worker thread submits.
    pub single_issuer: bool,
    /// IORING_SETUP_DEFER_TASKRUN (6.1): completion work runs only when we
    /// enter the kernel to wait, on our thread, in batches.
    pub defer_taskrun: bool,
    /// IORING_SETUP_COOP_TASKRUN (5.19): no IPI to interrupt us for task work.
    pub coop_taskrun: bool,
    /// IORING_FEAT_FAST_POLL (5.7): reads on an empty socket are armed on
    /// the socket's wait queue instead of blocking an io-wq thread.
    pub fast_poll: bool,
    /// IORING_FEAT_NODROP (5.5): a full CQ ring is not lost on overflow.
    pub nodrop: bool,
    /// IORING_SETUP_TASKRUN_FLAG (5.19): the kernel flags pending task work
    /// in the SQ ring, so a busy-poll can see it without a syscall.
    pub taskrun_flag: bool,
    /// IORING_REGISTER_RING_FDS (5.18): enters pass an index, not the fd.
    pub registered_ring: bool,
}

impl std::fmt::Display for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yes = |b: bool| if b { "on" } else { "off" };
        write!(
            f,
            "single_issuer={} defer_taskrun={} coop_taskrun={} fast_poll={} nodrop={} \
             taskrun_flag={} registered_ring={}",
            yes(self.single_issuer),
            yes(self.defer_taskrun),
            yes(self.coop_taskrun),
            yes(self.fast_poll),
            yes(self.nodrop),
            yes(self.taskrun_flag),
            yes(self.registered_ring)
        )
    }
}

/// The smallest SQ worth running when locked memory is short.
const MIN_SQ_ENTRIES: u32 = 16;
/// IORING_MAX_ENTRIES: the kernel's cap on the SQ.
const MAX_SQ_ENTRIES: u32 = 32768;
/// IORING_MAX_CQ_ENTRIES: the kernel's cap on the CQ.
pub const MAX_CQ_ENTRIES: u32 = 2 * MAX_SQ_ENTRIES;

/// A CQ size for a worker that may have `max_in_flight_ops` operations
/// outstanding at once: 25% headroom, rounded up to a power of two (the
/// kernel rounds anyway), clamped to what the kernel allows. Overflow beyond
/// it is still handled, only slower.
pub fn cq_entries_for(max_in_flight_ops: usize) -> u32 {
    let want = max_in_flight_ops.saturating_add(max_in_flight_ops / 4);
    let want = u32::try_from(want).unwrap_or(MAX_CQ_ENTRIES);
    want.max(2 * MIN_SQ_ENTRIES)
        .checked_next_power_of_two()
        .unwrap_or(MAX_CQ_ENTRIES)
        .min(MAX_CQ_ENTRIES)
}

/// The (SQ, CQ) sizes to ask for: SQ in [2, 32768], CQ in [2×SQ, 65536],
/// both powers of two. A forced debug CQ size wins and shrinks the SQ to fit.
fn ring_sizes(sq: u32, cq: u32, forced_cq: Option<u32>) -> (u32, u32) {
    let sq = sq.clamp(2, MAX_SQ_ENTRIES).next_power_of_two();
    match forced_cq {
        Some(n) => {
            let cq = n.clamp(2, MAX_CQ_ENTRIES).next_power_of_two();
            (sq.min(cq), cq)
        }
        None => (sq, cq.clamp(2 * sq, MAX_CQ_ENTRIES).next_power_of_two()),
    }
}

/// One worker's ring. Not `Send`-shared: with SINGLE_ISSUER the thread that
/// created it is the only one allowed to submit.
pub struct Ring {
    uring: IoUring,
    features: Features,
    /// Completions taken off the CQ (to make room) or made up (for SQEs
    /// that could not be queued), delivered by the next `reap` first.
    backlog: VecDeque<Completion>,
    /// errno of a hard `io_uring_enter` failure: every later push fails
    /// at once and `submit_and_wait` reports it.
    latched: Option<i32>,
    stats: RingStats,
    faults: fault::Injector,
    /// Start-up probes forced to fail (debug builds; see `fault`).
    probe_fail: ProbeFail,
    /// The ring's index in this thread's registered ring fds, if any.
    registered_index: Option<u32>,
    /// Why the ring fd could not be registered, for one start-up line.
    ring_fd_fallback: Option<String>,
    /// Slots of the registered file table (`direct.rs`); 0 = none.
    direct_slots: u32,
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.unregister_ring_fd();
    }
}

fn is_unavailable(e: &io::Error) -> bool {
    // ENOSYS: no io_uring in this kernel or blocked by seccomp (Docker's
    // default profile returns EPERM/ENOSYS); EPERM: io_uring_disabled=2 or
    // =1 without the required privilege.
    matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM))
}

impl Ring {
    /// Set up a ring of `sq_entries` SQEs and `cq_entries` CQEs (clamped to
    /// [2×SQ, 65536]; see [`cq_entries_for`]), with the best task-run mode
    /// the kernel accepts. Debug builds honour the fault-injection variables
    /// in [`fault`](DebugKnobs::from_env).
    pub fn new(sq_entries: u32, cq_entries: u32) -> Result<Ring, RingError> {
        Self::with_knobs(sq_entries, cq_entries, DebugKnobs::from_env()?)
    }

    /// [`Ring::new`] with explicit debug knobs instead of the environment.
    pub fn with_knobs(
        sq_entries: u32,
        cq_entries: u32,
        knobs: DebugKnobs,
    ) -> Result<Ring, RingError> {
        let (mut sq, mut cq) = ring_sizes(sq_entries, cq_entries, knobs.cq_entries);
        // ENOMEM means the ring's own pages did not fit the locked-memory
        // limit (unprivileged, small RLIMIT_MEMLOCK): a smaller ring still
        // works, only with shallower batches (and overflow is handled).
        loop {
            match Self::with_sizes(sq, cq, knobs) {
                Err(RingError::Setup(e))
                    if e.raw_os_error() == Some(libc::ENOMEM) && sq > MIN_SQ_ENTRIES =>
                {
                    sq /= 4;
                    cq = (cq / 4).max(2 * sq);
                    tracing::warn!(
                        "io_uring setup hit the locked-memory limit; retrying with {sq} SQ / {cq} CQ \
                         entries (raise LimitMEMLOCK or grant CAP_IPC_LOCK for the full size)"
                    );
                }
                Err(RingError::Setup(e)) if e.raw_os_error() == Some(libc::ENOMEM) => {
                    return Err(RingError::Memlock(e))
                }
                Ok(mut ring) => {
                    // Enters work without it, only with an fd lookup each.
                    match ring.register_ring_fd() {
                        Ok(()) => ring.features.registered_ring = true,
                        Err(e) => ring.ring_fd_fallback = Some(e.to_string()),
                    }
                    return Ok(ring);
                }
                other => return other,
            }
        }
    }

    /// Try SINGLE_ISSUER + DEFER_TASKRUN + COOP_TASKRUN, then COOP_TASKRUN
    /// alone, then nothing: DEFER_TASKRUN needs SINGLE_ISSUER (6.1),
    /// COOP_TASKRUN needs 5.19; older kernels reject unknown setup flags
    /// with EINVAL, which is what each fallback step catches. TASKRUN_FLAG
    /// (5.19, with either task-run mode) comes with the first two.
    fn with_sizes(sq: u32, cq: u32, knobs: DebugKnobs) -> Result<Ring, RingError> {
        let attempts: [(bool, bool, bool); 3] = [
            (true, true, true),
            (false, false, true),
            (false, false, false),
        ];
        let mut last_err = None;
        for (single_issuer, defer_taskrun, coop_taskrun) in attempts {
            let mut builder = IoUring::builder();
            builder.setup_cqsize(cq).setup_clamp();
            if single_issuer {
                builder.setup_single_issuer();
            }
            if defer_taskrun {
                builder.setup_defer_taskrun();
            }
            if coop_taskrun {
                builder.setup_coop_taskrun().setup_taskrun_flag();
            }
            match builder.build(sq) {
                Ok(uring) => {
                    let params = uring.params();
                    let features = Features {
                        single_issuer,
                        defer_taskrun,
                        coop_taskrun,
                        fast_poll: params.is_feature_fast_poll(),
                        nodrop: params.is_feature_nodrop(),
                        taskrun_flag: coop_taskrun,
                        registered_ring: false,
                    };
                    return Ok(Ring {
                        uring,
                        features,
                        backlog: VecDeque::new(),
                        latched: None,
                        stats: RingStats::default(),
                        faults: fault::Injector::new(knobs.faults),
                        probe_fail: knobs.probe_fail,
                        registered_index: None,
                        ring_fd_fallback: None,
                        direct_slots: 0,
                    });
                }
                Err(e) if is_unavailable(&e) => return Err(RingError::Unavailable(e)),
                Err(e) => last_err = Some(e),
            }
        }
        Err(RingError::Setup(last_err.unwrap_or_else(|| {
            io::Error::other("no ring set-up attempted")
        })))
    }

    pub fn features(&self) -> Features {
        self.features
    }

    /// IORING_FEAT_RECVSEND_BUNDLE (6.10): receives may take bundles of
    /// provided buffers (false when forced by `ProbeFail::bundle`).
    pub fn recvsend_bundle(&self) -> bool {
        self.uring.params().is_feature_recvsend_bundle() && !self.probe_fail.bundle
    }

    /// SQ entries the kernel gave us (for the start-up log).
    pub fn sq_capacity(&self) -> u32 {
        self.uring.params().sq_entries()
    }

    /// CQ entries the kernel gave us (for the start-up log).
    pub fn cq_capacity(&self) -> u32 {
        self.uring.params().cq_entries()
    }

    /// Why enters pass the plain ring fd (the registration failed), if so.
    pub fn ring_fd_fallback(&self) -> Option<&str> {
        self.ring_fd_fallback.as_deref()
    }

    /// Counters of the rare paths and of every enter, for metrics.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// The ring's own fd, e.g. to find it in /proc/self/fdinfo.
    pub fn fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.uring.as_raw_fd()
    }

    /// Register `iovecs` as this ring's fixed-buffer table.
    ///
    /// # Safety
    /// Every iovec must point at memory that stays mapped and is not used
    /// for anything else for as long as this ring exists: the kernel pins
    /// those pages and READ_FIXED/WRITE_FIXED access them by index.
    pub unsafe fn register_buffers(&self, iovecs: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.uring.submitter().register_buffers(iovecs) }
    }
}

impl Ring {
    /// Unregister buffer group `bgid` (a ring set up, then not used).
    pub fn unregister_buf_ring(&self, bgid: u16) -> io::Result<()> {
        self.uring.submitter().unregister_buf_ring(bgid)
    }

    /// Kernel features the debug knobs say to report missing.
    pub fn probe_fail(&self) -> ProbeFail {
        self.probe_fail
    }

    /// Register a provided-buffer ring (IORING_REGISTER_PBUF_RING, 5.19)
    /// as buffer group `bgid`; `flags` may ask for IOU_PBUF_RING_INC.
    ///
    /// # Safety
    /// `ring_addr` must be a page-aligned mapping of `entries` 16-byte
    /// `io_uring_buf` entries, and every buffer address ever published in it
    /// must stay mapped, for as long as this ring exists: the kernel writes
    /// received bytes to those addresses whenever a buffer-select receive
    /// takes one.
    pub unsafe fn register_buf_ring(
        &self,
        ring_addr: u64,
        entries: u16,
        bgid: u16,
        flags: u16,
    ) -> io::Result<()> {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            self.uring
                .submitter()
                .register_buf_ring_with_flags(ring_addr, entries, bgid, flags)
        }
    }
}

/// Take ownership of an fd that an ACCEPT completion returned.
pub fn accepted_socket(fd: i32) -> socket2::Socket {
    use std::os::fd::FromRawFd;
    debug_assert!(fd >= 0);
    // SAFETY: a non-negative ACCEPT result is a new fd that the kernel just
    // created for us and that nothing else in the process refers to.
    unsafe { socket2::Socket::from_raw_fd(fd) }
}

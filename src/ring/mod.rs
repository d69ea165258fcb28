//! The io_uring driver: ring set-up with feature probing, submission with
//! back-pressure, batched completion reaping, and the `user_data` encoding.
//!
//! This layer never allocates per operation and never owns I/O memory: the
//! buffers an operation points at belong to `crate::buffers`, whose types
//! keep them alive until the operation's completion has been reaped.

mod token;

pub use token::{next_generation, OpTag, Token};

use std::io;
use std::os::fd::RawFd;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
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
    #[error("io_uring_enter failed: {0}")]
    Enter(io::Error),
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
}

impl std::fmt::Display for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yes = |b: bool| if b { "on" } else { "off" };
        write!(
            f,
            "single_issuer={} defer_taskrun={} coop_taskrun={} fast_poll={} nodrop={}",
            yes(self.single_issuer),
            yes(self.defer_taskrun),
            yes(self.coop_taskrun),
            yes(self.fast_poll),
            yes(self.nodrop)
        )
    }
}

/// The smallest ring worth running: 16 SQEs, 64 CQEs.
const MIN_ENTRIES: u32 = 16;

/// One worker's ring. Not `Send`-shared: with SINGLE_ISSUER the thread that
/// created it is the only one allowed to submit.
pub struct Ring {
    uring: IoUring,
    features: Features,
}

fn is_unavailable(e: &io::Error) -> bool {
    // ENOSYS: no io_uring in this kernel or blocked by seccomp (Docker's
    // default profile returns EPERM/ENOSYS); EPERM: io_uring_disabled=2 or
    // =1 without the required privilege.
    matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM))
}

impl Ring {
    /// Set up a ring with the best task-run mode the kernel accepts, falling
    /// back one feature at a time: DEFER_TASKRUN needs SINGLE_ISSUER (6.1),
    /// COOP_TASKRUN needs 5.19; older kernels reject unknown setup flags with
    /// EINVAL, which is what each fallback step catches.
    pub fn new(entries: u32) -> Result<Ring, RingError> {
        // ENOMEM means the ring's own pages did not fit the locked-memory
        // limit (unprivileged, small RLIMIT_MEMLOCK): a smaller ring still
        // works, only with shallower batches.
        let mut entries = entries.max(MIN_ENTRIES);
        loop {
            match Self::with_entries(entries) {
                Err(RingError::Setup(e))
                    if e.raw_os_error() == Some(libc::ENOMEM) && entries > MIN_ENTRIES =>
                {
                    entries /= 4;
                    tracing::warn!(
                        "io_uring setup hit the locked-memory limit; retrying with {entries} entries \
                         (raise LimitMEMLOCK or grant CAP_IPC_LOCK for the full size)"
                    );
                }
                Err(RingError::Setup(e)) if e.raw_os_error() == Some(libc::ENOMEM) => {
                    return Err(RingError::Memlock(e))
                }
                other => return other,
            }
        }
    }

    fn with_entries(entries: u32) -> Result<Ring, RingError> {
        let cq_entries = entries.saturating_mul(4);
        let attempts: [(bool, bool, bool); 3] = [
            (true, true, true),
            (false, false, true),
            (false, false, false),
        ];
        let mut last_err = None;
        for (single_issuer, defer_taskrun, coop_taskrun) in attempts {
            let mut builder = IoUring::builder();
            builder.setup_cqsize(cq_entries).setup_clamp();
            if single_issuer {
                builder.setup_single_issuer();
            }
            if defer_taskrun {
                builder.setup_defer_taskrun();
            }
            if coop_taskrun {
                builder.setup_coop_taskrun();
            }
            match builder.build(entries) {
                Ok(uring) => {
                    let params = uring.params();
                    let features = Features {
                        single_issuer,
                        defer_taskrun,
                        coop_taskrun,
                        fast_poll: params.is_feature_fast_poll(),
                        nodrop: params.is_feature_nodrop(),
                    };
                    return Ok(Ring { uring, features });
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

    /// Queue one SQE. When the submission queue is full, flush it to the
    /// kernel and retry, so a burst never drops an operation.
    ///
    /// # Safety
    /// Any memory `entry` points at must stay valid until its completion is
    /// reaped (the `buffers` types and `'static` data guarantee this for
    /// every call site).
    pub unsafe fn push(&mut self, entry: &squeue::Entry) -> Result<(), RingError> {
        loop {
            // SAFETY: forwarded from this function's contract.
            if unsafe { self.uring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            self.submit()?;
        }
    }

    /// Hand queued SQEs to the kernel without waiting.
    pub fn submit(&mut self) -> Result<usize, RingError> {
        loop {
            match self.uring.submit() {
                Ok(n) => return Ok(n),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // EBUSY: the CQ overflowed; reaping completions makes room.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(0),
                Err(e) => return Err(RingError::Enter(e)),
            }
        }
    }

    /// Submit and block until at least one completion is ready. With
    /// DEFER_TASKRUN this is also where the kernel runs completion work.
    pub fn submit_and_wait(&mut self) -> Result<(), RingError> {
        match self.uring.submit_and_wait(1) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => Ok(()),
            Err(e) => Err(RingError::Enter(e)),
        }
    }

    /// Move every ready completion into `out` (reused by the caller, so the
    /// loop does not allocate). Handlers run from `out`, never inline.
    pub fn reap(&mut self, out: &mut Vec<cqueue::Entry>) {
        out.extend(self.uring.completion());
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

/// Builders for the few SQEs that point at no caller memory. The ones that
/// do (reads, writes) are built by `crate::buffers`, which owns that memory.
pub mod ops {
    use super::*;

    /// Multishot accept (5.19): one SQE yields a CQE per connection.
    pub fn accept_multi(listener: RawFd, token: Token) -> squeue::Entry {
        opcode::AcceptMulti::new(types::Fd(listener))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(token.into())
    }

    /// One-shot accept, the fallback on kernels without multishot accept.
    pub fn accept(listener: RawFd, token: Token) -> squeue::Entry {
        opcode::Accept::new(
            types::Fd(listener),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
        .flags(libc::SOCK_CLOEXEC)
        .build()
        .user_data(token.into())
    }

    /// A relative timeout; `ts` is `'static` so it outlives the operation.
    pub fn timeout(ts: &'static types::Timespec, token: Token) -> squeue::Entry {
        opcode::Timeout::new(ts).build().user_data(token.into())
    }

    /// TCP connect to `addr` (`'static`: one per worker, leaked on purpose
    /// so the kernel's pointer is valid for the whole process).
    pub fn connect(fd: RawFd, addr: &'static socket2::SockAddr, token: Token) -> squeue::Entry {
        opcode::Connect::new(types::Fd(fd), addr.as_ptr(), addr.len())
            .build()
            .user_data(token.into())
    }

    /// A timeout linked to the previous SQE (which must carry IO_LINK):
    /// cancels that operation when `ts` elapses first.
    pub fn link_timeout(ts: &'static types::Timespec, token: Token) -> squeue::Entry {
        opcode::LinkTimeout::new(ts).build().user_data(token.into())
    }

    /// Cancel the in-flight operation(s) whose user_data is `target`.
    pub fn cancel_user_data(target: u64, token: Token) -> squeue::Entry {
        opcode::AsyncCancel::new(target)
            .build()
            .user_data(token.into())
    }

    /// Cancel every in-flight operation on `fd` (5.19:
    /// IORING_ASYNC_CANCEL_FD|ALL). Completions of the cancelled ops still
    /// arrive, with -ECANCELED, and must be reaped before their memory is reused.
    pub fn cancel_fd(fd: RawFd, token: Token) -> squeue::Entry {
        opcode::AsyncCancel2::new(types::CancelBuilder::fd(types::Fd(fd)).all())
            .build()
            .user_data(token.into())
    }
}

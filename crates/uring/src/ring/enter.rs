//! `io_uring_enter` itself: every entry into the kernel goes through
//! [`Ring::enter`], which uses the registered ring fd when there is one and
//! counts what it did (enters, waits, SQEs consumed) for the per-query
//! figures in the bench; and the bounded busy-poll that reaps without
//! sleeping for a while after the last completion.
//!
//! # Why not the crate's `submit_and_wait`
//! io-uring 0.7.16 remembers a registered ring fd inside one `Submitter`,
//! but `IoUring::submitter()` builds a fresh one (index -1) on every call,
//! so a registration made through it is forgotten at once and every enter
//! still passes the raw fd. The ring keeps the index itself and makes the
//! syscall here.
//!
//! # Registered ring fd (IORING_REGISTER_RING_FDS, 5.18)
//! With the index, `io_uring_enter` skips `fdget`/`fdput` on the ring fd:
//! in a multi-threaded process that is an atomic increment and decrement of
//! the file's refcount per enter. The index lives in the *calling thread's*
//! io_uring context, which is right for a worker: its ring is created,
//! registered and entered only by the worker's thread (SINGLE_ISSUER).
//!
//! # Busy-poll and DEFER_TASKRUN
//! With DEFER_TASKRUN a socket's readiness does not put a CQE in the CQ: it
//! queues task work that only runs inside `io_uring_enter(GETEVENTS)`. So
//! polling the CQ alone would never see a completion. The ring is set up
//! with IORING_SETUP_TASKRUN_FLAG, and the kernel raises IORING_SQ_TASKRUN
//! in the shared SQ flags when it queues that work: the poll loop reads that
//! word (no syscall) and enters, without waiting, only once there is work.

use std::time::{Duration, Instant};

use super::{Ring, RingError};

/// IORING_ENTER_GETEVENTS: run deferred task work, wait for `min_complete`.
pub(super) const ENTER_GETEVENTS: u32 = 1;
/// IORING_ENTER_REGISTERED_RING: the fd argument is a registered index.
const ENTER_REGISTERED_RING: u32 = 1 << 4;
/// IORING_REGISTER_RING_FDS / IORING_UNREGISTER_RING_FDS.
const REGISTER_RING_FDS: libc::c_uint = 20;
const UNREGISTER_RING_FDS: libc::c_uint = 21;

/// `struct io_uring_rsrc_update` (the argument of IORING_REGISTER_RING_FDS).
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// What an enter asked for, for the counters.
#[derive(Clone, Copy)]
pub(super) struct EnterArgs {
    pub to_submit: u32,
    pub min_complete: u32,
    pub flags: u32,
}

impl Ring {
    /// Register this ring's fd with the calling thread (IORING_REGISTER_RING_FDS)
    /// so that every later enter passes an index instead of the fd. Called
    /// once at set-up; a failure leaves the ring working on the plain fd.
    pub(super) fn register_ring_fd(&mut self) -> std::io::Result<()> {
        if self.probe_fail.ring_fd {
            return Err(std::io::Error::other(
                "probe forced to fail by RINGGATE_DEBUG_PROBE_FAIL",
            ));
        }
        let mut up = RsrcUpdate {
            // u32::MAX: let the kernel pick a free index and write it back.
            offset: u32::MAX,
            resv: 0,
            data: self.fd() as u64,
        };
        // SAFETY: `up` is a valid io_uring_rsrc_update that lives across the
        // call, and nr_args = 1 says the kernel reads (and writes back) exactly
        // one of them; the fd is this ring's own, open for the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                self.fd(),
                REGISTER_RING_FDS,
                &mut up as *mut RsrcUpdate,
                1 as libc::c_uint,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if r != 1 {
            return Err(std::io::Error::other(format!(
                "IORING_REGISTER_RING_FDS registered {r} rings, not 1"
            )));
        }
        self.registered_index = Some(up.offset);
        Ok(())
    }

    /// Give the registered index back (a thread has only 16 of them, and
    /// the registration holds a reference to the ring's file). Only works
    /// on the registering thread; elsewhere the kernel drops it at that
    /// thread's exit.
    pub(super) fn unregister_ring_fd(&mut self) {
        let Some(index) = self.registered_index.take() else {
            return;
        };
        let up = RsrcUpdate {
            offset: index,
            resv: 0,
            data: 0,
        };
        // SAFETY: as in `register_ring_fd`; the kernel only reads `up`.
        let _ = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                self.fd(),
                UNREGISTER_RING_FDS,
                &up as *const RsrcUpdate,
                1 as libc::c_uint,
            )
        };
    }

    /// Whether enters use the registered ring index.
    pub fn ring_fd_registered(&self) -> bool {
        self.registered_index.is_some()
    }

    /// One `io_uring_enter`, through the registered index when there is one.
    /// Counts the enter, whether it may sleep (`min_complete > 0`), and the
    /// SQEs the kernel consumed. Returns the kernel's answer or its errno.
    pub(super) fn enter(&mut self, args: EnterArgs) -> Result<u32, i32> {
        let (fd, flags) = match self.registered_index {
            Some(i) => (i as libc::c_int, args.flags | ENTER_REGISTERED_RING),
            None => (self.fd(), args.flags),
        };
        self.stats.enters += 1;
        if args.min_complete > 0 {
            self.stats.waits += 1;
        }
        // SAFETY: no signal mask or extended argument is passed (null, size
        // 0 is ignored without IORING_ENTER_EXT_ARG); the SQEs it submits
        // were queued through `push`, whose `Sqe` contract keeps their
        // memory valid until their completions are reaped.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                fd,
                args.to_submit,
                args.min_complete,
                flags,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        let consumed = u32::try_from(r).unwrap_or(0);
        self.stats.sqes += u64::from(consumed);
        Ok(consumed)
    }

    /// Queued SQEs not yet handed to the kernel.
    pub(super) fn sq_pending(&mut self) -> u32 {
        self.uring.submission().len() as u32
    }

    /// Whether the kernel has completion work for us that an enter with
    /// GETEVENTS would run (IORING_SQ_TASKRUN) or overflowed CQEs to move
    /// back (IORING_SQ_CQ_OVERFLOW).
    pub(super) fn kernel_has_work(&mut self) -> bool {
        let sq = self.uring.submission();
        sq.taskrun() || sq.cq_overflow()
    }

    /// The enter flags a submit needs: GETEVENTS when waiting, and also
    /// when deferred task work or overflowed completions are pending (only
    /// an enter with GETEVENTS runs or flushes them).
    pub(super) fn enter_flags(&mut self, min_complete: u32) -> u32 {
        if min_complete > 0 || self.kernel_has_work() {
            ENTER_GETEVENTS
        } else {
            0
        }
    }

    /// Completions ready to reap without entering: the backlog or the CQ.
    fn completions_ready(&mut self) -> bool {
        !self.backlog.is_empty() || !self.uring.completion().is_empty()
    }

    /// [`Ring::submit_and_wait`], but with `spin` set, first poll for up to
    /// that long without sleeping: submit what is queued, then watch the CQ
    /// and the task-run flag, entering (without waiting) only when the
    /// kernel has work. Only when the budget runs out does it sleep in the
    /// kernel as usual. A sleep and its wake-up cost two context switches
    /// and a scheduler pass each; a poll that finds the next completion
    /// costs the CPU it spun for instead.
    pub fn submit_and_wait_polling(&mut self, spin: Option<Duration>) -> Result<(), RingError> {
        let Some(spin) = spin else {
            return self.submit_and_wait();
        };
        if let Some(errno) = self.latched {
            return Err(RingError::from_errno(errno));
        }
        // Hand over what the last batch queued, without waiting.
        if self.sq_pending() > 0 || self.kernel_has_work() {
            self.submit_nowait()?;
        }
        if self.completions_ready() {
            self.stats.busy_poll_hits += 1;
            return Ok(());
        }
        let deadline = Instant::now() + spin;
        loop {
            if self.kernel_has_work() {
                self.submit_nowait()?;
            }
            if self.completions_ready() {
                self.stats.busy_poll_hits += 1;
                return Ok(());
            }
            if Instant::now() >= deadline {
                break;
            }
            // The machine may have fewer cores than busy threads (the
            // backend, the clients): give the core away if anyone else wants
            // it, without leaving the run queue as a sleep would.
            std::thread::yield_now();
        }
        self.stats.busy_poll_sleeps += 1;
        self.submit_and_wait()
    }

    /// Debug builds: hand what is queued to the kernel now, without waiting
    /// (a test hook holds the worker after it; see
    /// `proxy::worker::debug_park`).
    #[cfg(debug_assertions)]
    pub fn submit_queued_now(&mut self) -> Result<(), RingError> {
        self.submit_nowait()
    }

    /// Submit what is queued and run deferred completion work, without
    /// waiting. The errno rules are those of `submit_and_wait`.
    fn submit_nowait(&mut self) -> Result<(), RingError> {
        let to_submit = self.sq_pending();
        let args = EnterArgs {
            to_submit,
            min_complete: 0,
            flags: ENTER_GETEVENTS,
        };
        let result = if self.faults.ebusy() {
            Err(libc::EBUSY)
        } else {
            self.enter(args)
        };
        self.absorb_enter_result(result)
    }
}

//! Submission and completion: `push` never loses an operation, `reap`
//! never strands a completion (see the module docs of `ring` for the kernel
//! facts behind each rule).

use io_uring::{cqueue, squeue};

use super::enter::{EnterArgs, ENTER_GETEVENTS};
use super::{Ring, RingError, Sqe};

/// How many EBUSY answers in a row one flush absorbs (reaping between
/// them) before it gives up and fails the operation it was making room for.
const MAX_BUSY_RETRIES: u32 = 64;

/// One completion: a kernel CQE, or a synthetic one for an SQE that could
/// not be queued (`result` is then `-errno`, `flags` 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub user_data: u64,
    pub result: i32,
    pub flags: u32,
}

impl From<cqueue::Entry> for Completion {
    fn from(e: cqueue::Entry) -> Completion {
        Completion {
            user_data: e.user_data(),
            result: e.result(),
            flags: e.flags(),
        }
    }
}

/// Counters of the rare paths; exported as metrics by the worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// io_uring_enter answered EBUSY and the CQ was reaped into the backlog.
    pub ebusy_reaps: u64,
    /// IORING_SQ_CQ_OVERFLOW was set and the overflow list was flushed.
    pub overflow_flushes: u64,
    /// Operations failed without reaching the kernel.
    pub synthetic_failures: u64,
    /// io_uring_enter calls, of every kind.
    pub enters: u64,
    /// Of those, the ones that asked to wait for a completion (may sleep).
    pub waits: u64,
    /// SQEs the kernel consumed (the enters' return values).
    pub sqes: u64,
    /// Busy-polls that found a completion before their budget ran out.
    pub busy_poll_hits: u64,
    /// Busy-polls that ran out and slept in the kernel.
    pub busy_poll_sleeps: u64,
}

/// Why one attempt to make room failed: the errno the owner will see.
type Errno = i32;

impl Ring {
    /// Queue `sqe`. Never fails and never drops it: when the SQ is full it is
    /// flushed first (reaping into the backlog on EBUSY); if the SQE still
    /// cannot be queued, its owner gets a synthetic completion
    /// `(user_data, -errno, 0)` from the next [`Ring::reap`].
    pub fn push(&mut self, sqe: Sqe) {
        let user_data = sqe.user_data();
        if self.faults.fail_push() {
            return self.synthesize(user_data, -libc::EIO);
        }
        if self.faults.fail_cancel(sqe.0.get_opcode()) {
            return self.synthesize(user_data, -libc::EIO);
        }
        if let Some(errno) = self.latched {
            return self.synthesize(user_data, -errno);
        }
        // The common case first: there is room.
        // SAFETY: the `Sqe` contract keeps the memory it names valid until
        // its completion is reaped (or its synthetic one, below).
        if unsafe { self.uring.submission().push(&sqe.0) }.is_ok() {
            return;
        }
        if let Err(errno) = self.make_room(1) {
            return self.synthesize(user_data, -errno);
        }
        // SAFETY: as above.
        if unsafe { self.uring.submission().push(&sqe.0) }.is_err() {
            // make_room left a free slot; this cannot happen.
            self.synthesize(user_data, -libc::EAGAIN);
        }
    }

    /// Queue `first` and `second` as one IO_LINK chain (e.g. CONNECT +
    /// LINK_TIMEOUT): room for both is made before either is queued, so the
    /// pair is never split across submissions. If they cannot be queued,
    /// `first` completes with `-errno` and `second` with `-ECANCELED`, as
    /// the kernel reports a broken chain.
    pub fn push_linked(&mut self, first: Sqe, second: Sqe) {
        let (a, b) = (first.user_data(), second.user_data());
        let fail = |ring: &mut Ring, errno: Errno| {
            ring.synthesize(a, -errno);
            ring.synthesize(b, -libc::ECANCELED);
        };
        if self.faults.fail_push() {
            return fail(self, libc::EIO);
        }
        if let Some(errno) = self.latched {
            return fail(self, errno);
        }
        let pair = [first.0.flags(squeue::Flags::IO_LINK), second.0];
        // `push_multiple` queues both or neither.
        // SAFETY: as in `push`, for both entries.
        if unsafe { self.uring.submission().push_multiple(&pair) }.is_ok() {
            return;
        }
        if let Err(errno) = self.make_room(2) {
            return fail(self, errno);
        }
        // SAFETY: as in `push`, for both entries.
        if unsafe { self.uring.submission().push_multiple(&pair) }.is_err() {
            fail(self, libc::EAGAIN);
        }
    }

    /// Queue `write` linked to `read` (IOSQE_IO_LINK), the write with
    /// IOSQE_CQE_SKIP_SUCCESS, so that one enter submits both and sleeps
    /// until the read completes. The kernel's contract (pinned by
    /// `ring::link_tests`): a write that writes everything posts no CQE and
    /// the read runs after it, so the read's CQE is also the write's; a
    /// write that fails or is short posts its CQE and the read is dropped
    /// without one (REQ_F_SKIP_LINK_CQES), never run. Pairs that cannot be
    /// queued fail the same way: a synthetic completion for the write only.
    pub fn push_write_then_read(&mut self, write: Sqe, read: Sqe) {
        let w = write.user_data();
        if self.faults.fail_push() {
            return self.synthesize(w, -libc::EIO);
        }
        if self.faults.link_eagain() {
            return self.synthesize(w, -libc::EAGAIN);
        }
        if let Some(errno) = self.latched {
            return self.synthesize(w, -errno);
        }
        let flags = squeue::Flags::IO_LINK | squeue::Flags::SKIP_SUCCESS;
        let pair = [write.0.flags(flags), read.0];
        // SAFETY: as in `push`, for both entries.
        if unsafe { self.uring.submission().push_multiple(&pair) }.is_ok() {
            return;
        }
        if let Err(errno) = self.make_room(2) {
            return self.synthesize(w, -errno);
        }
        // SAFETY: as in `push`, for both entries.
        if unsafe { self.uring.submission().push_multiple(&pair) }.is_err() {
            self.synthesize(w, -libc::EAGAIN);
        }
    }

    /// Submit, and wait for at least one completion unless the backlog
    /// already holds some (then it only submits). Returns a latched hard
    /// error: the worker must then stop.
    pub fn submit_and_wait(&mut self) -> Result<(), RingError> {
        if let Some(errno) = self.latched {
            return Err(RingError::from_errno(errno));
        }
        let want = u32::from(self.backlog.is_empty());
        let result = if self.faults.ebusy() {
            Err(libc::EBUSY)
        } else {
            let args = EnterArgs {
                to_submit: self.sq_pending(),
                min_complete: want,
                flags: self.enter_flags(want),
            };
            self.enter(args)
        };
        self.absorb_enter_result(result)
    }

    /// What an enter's answer means for the loop: EINTR, ETIME, EAGAIN and
    /// ENOMEM are transient (the SQEs stay queued), EBUSY reaps into the
    /// backlog, anything else is latched as a hard error.
    pub(super) fn absorb_enter_result(
        &mut self,
        result: Result<u32, i32>,
    ) -> Result<(), RingError> {
        match result {
            // EINTR: a signal; ETIME: a wait timeout. Loop again.
            Ok(_) | Err(libc::EINTR) | Err(libc::ETIME) => Ok(()),
            // Transient kernel allocation failure: the SQEs stay queued.
            Err(libc::EAGAIN) | Err(libc::ENOMEM) => Ok(()),
            Err(libc::EBUSY) => {
                self.reap_into_backlog();
                self.stats.ebusy_reaps += 1;
                Ok(())
            }
            Err(errno) => {
                self.latched = Some(errno);
                Err(RingError::from_errno(errno))
            }
        }
    }

    /// Move every available completion into `out` (reused by the caller,
    /// so the loop does not allocate): the backlog first, then the CQ,
    /// flushing the kernel's overflow list until it is empty.
    pub fn reap(&mut self, out: &mut Vec<Completion>) {
        out.extend(self.backlog.drain(..));
        self.drain_kernel(out);
    }

    /// Drain the CQ; while IORING_SQ_CQ_OVERFLOW is set, have the kernel
    /// move overflowed CQEs back (io_uring_enter with GETEVENTS, which also
    /// runs deferred task work) and drain again.
    fn drain_kernel<E: Extend<Completion>>(&mut self, out: &mut E) {
        loop {
            out.extend(self.uring.completion().map(Completion::from));
            if !self.uring.submission().cq_overflow() {
                return;
            }
            self.stats.overflow_flushes += 1;
            // Nothing to submit: this only asks the kernel to post pending
            // completions.
            let r = self.enter(EnterArgs {
                to_submit: 0,
                min_complete: 0,
                flags: ENTER_GETEVENTS,
            });
            match r {
                Ok(_) | Err(libc::EINTR) | Err(libc::EAGAIN) | Err(libc::ETIME) => {}
                Err(errno) => {
                    self.latched.get_or_insert(errno);
                    return;
                }
            }
        }
    }

    fn reap_into_backlog(&mut self) {
        let mut backlog = std::mem::take(&mut self.backlog);
        self.drain_kernel(&mut backlog);
        self.backlog = backlog;
    }

    pub(super) fn synthesize(&mut self, user_data: u64, result: i32) {
        self.stats.synthetic_failures += 1;
        self.backlog.push_back(Completion {
            user_data,
            result,
            flags: 0,
        });
    }

    fn sq_free(&mut self) -> usize {
        let sq = self.uring.submission();
        sq.capacity() - sq.len()
    }

    /// Make `n` SQ slots free, submitting what is queued if needed.
    fn make_room(&mut self, n: usize) -> Result<(), Errno> {
        if let Some(errno) = self.latched {
            return Err(errno);
        }
        if n > self.sq_capacity() as usize {
            return Err(libc::EINVAL);
        }
        for _ in 0..MAX_BUSY_RETRIES {
            if self.sq_free() >= n {
                return Ok(());
            }
            self.flush_sq()?;
        }
        Err(libc::EBUSY)
    }

    /// Hand the queued SQEs to the kernel. EBUSY (CQ full, overflow
    /// pending) is answered by reaping into the backlog and retrying, never
    /// by spinning; a hard error is latched.
    pub(super) fn flush_sq(&mut self) -> Result<(), Errno> {
        for _ in 0..MAX_BUSY_RETRIES {
            let result = if self.faults.ebusy() {
                Err(libc::EBUSY)
            } else {
                let args = EnterArgs {
                    to_submit: self.sq_pending(),
                    min_complete: 0,
                    flags: self.enter_flags(0),
                };
                self.enter(args)
            };
            match result {
                Ok(_) => return Ok(()),
                Err(libc::EINTR) => {}
                Err(libc::EBUSY) => {
                    self.reap_into_backlog();
                    self.stats.ebusy_reaps += 1;
                }
                // Transient: fail this one operation, keep the ring.
                Err(errno @ (libc::EAGAIN | libc::ENOMEM)) => return Err(errno),
                Err(errno) => {
                    self.latched = Some(errno);
                    return Err(errno);
                }
            }
        }
        Err(libc::EBUSY)
    }
}

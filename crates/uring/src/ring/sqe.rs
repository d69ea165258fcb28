//! [`Sqe`]: a submission the ring may accept, and the builders for the few
//! SQEs that point at no caller memory.
//!
//! `Ring::push` takes only an `Sqe`, and an `Sqe` can only be made with
//! `unsafe` (here, for `'static` or absent memory, and in `crate::buffers`,
//! which marks the buffer in flight). So the code that can hand the kernel a
//! pointer is exactly the code that has to justify it: the types enforce the
//! buffer rules.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};

use super::Token;

/// The socket an SQE names: a plain fd, or a direct descriptor (a slot in
/// the ring's registered file table, which has no fd in the process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SockRef {
    Fd(RawFd),
    Fixed(u32),
}

impl From<RawFd> for SockRef {
    fn from(fd: RawFd) -> SockRef {
        SockRef::Fd(fd)
    }
}

/// Build an opcode on a [`SockRef`]: `sock_op!(target, |t| Op::new(t, ..).build())`
/// expands to the two builds, `t` being `types::Fd` or `types::Fixed` (the
/// crate's fd types are sealed, so one generic value cannot carry both).
#[macro_export]
macro_rules! sock_op {
    ($target:expr, |$t:ident| $build:expr) => {
        match $target {
            $crate::ring::SockRef::Fd(fd) => {
                let $t = io_uring::types::Fd(fd);
                $build
            }
            $crate::ring::SockRef::Fixed(slot) => {
                let $t = io_uring::types::Fixed(slot);
                $build
            }
        }
    };
}

/// One submission whose memory (if it names any) outlives its completion.
///
/// Not `Clone`: pushing the same entry twice would start two operations on
/// memory that is accounted for once.
#[derive(Debug)]
pub struct Sqe(pub(super) squeue::Entry);

impl Sqe {
    /// Wrap a raw entry.
    ///
    /// # Safety
    /// Every piece of memory the entry names (read/write buffers, addresses,
    /// timespecs, iovecs) must stay valid and must not be read, written,
    /// moved or freed by anyone else from now until the completion carrying
    /// this entry's `user_data` has been reaped from the ring — including a
    /// *synthetic* completion, which the ring delivers instead when it could
    /// not queue the entry at all.
    pub unsafe fn new(entry: squeue::Entry) -> Sqe {
        Sqe(entry)
    }

    /// The `user_data` its completion will carry.
    pub fn user_data(&self) -> u64 {
        self.0.get_user_data()
    }
}

/// No-op; completes at once with result 0. Used by tests and to wake the loop.
pub fn nop(token: Token) -> Sqe {
    let e = opcode::Nop::new().build().user_data(token.into());
    // SAFETY: a NOP names no memory.
    unsafe { Sqe::new(e) }
}

/// Multishot accept (5.19): one SQE yields a CQE per connection.
pub fn accept_multi(listener: RawFd, token: Token) -> Sqe {
    let e = opcode::AcceptMulti::new(types::Fd(listener))
        .flags(libc::SOCK_CLOEXEC)
        .build()
        .user_data(token.into());
    // SAFETY: no peer-address buffer is passed; only an fd.
    unsafe { Sqe::new(e) }
}

/// One-shot accept, the fallback on kernels without multishot accept.
pub fn accept(listener: RawFd, token: Token) -> Sqe {
    let e = opcode::Accept::new(
        types::Fd(listener),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )
    .flags(libc::SOCK_CLOEXEC)
    .build()
    .user_data(token.into());
    // SAFETY: both address pointers are null, so no memory is named.
    unsafe { Sqe::new(e) }
}

/// A relative timeout; `ts` is `'static` so it outlives the operation.
pub fn timeout(ts: &'static types::Timespec, token: Token) -> Sqe {
    let e = opcode::Timeout::new(ts).build().user_data(token.into());
    // SAFETY: the only memory named is `ts`, which lives forever.
    unsafe { Sqe::new(e) }
}

/// TCP connect to `addr` (`'static`: one per worker, leaked on purpose so
/// the kernel's pointer is valid for the whole process). Pair it with
/// [`link_timeout`] through `Ring::push_linked`.
pub fn connect(fd: SockRef, addr: &'static socket2::SockAddr, token: Token) -> Sqe {
    let e = sock_op!(fd, |t| opcode::Connect::new(t, addr.as_ptr(), addr.len())
        .build())
    .user_data(token.into());
    // SAFETY: the only memory named is `addr`, which lives forever.
    unsafe { Sqe::new(e) }
}

/// A timeout linked to the previous SQE: cancels that operation when `ts`
/// elapses first. Only meaningful as the second half of `Ring::push_linked`.
pub fn link_timeout(ts: &'static types::Timespec, token: Token) -> Sqe {
    let e = opcode::LinkTimeout::new(ts).build().user_data(token.into());
    // SAFETY: the only memory named is `ts`, which lives forever.
    unsafe { Sqe::new(e) }
}

/// One-shot POLL_ADD for readability (POLLIN; EOF, errors and hang-ups
/// complete it too): an idle connection waits for its next bytes without
/// naming a buffer.
pub fn poll_readable(fd: SockRef, token: Token) -> Sqe {
    let e = sock_op!(fd, |t| opcode::PollAdd::new(t, libc::POLLIN as u32).build())
        .user_data(token.into());
    // SAFETY: a poll names an fd, no memory.
    unsafe { Sqe::new(e) }
}

/// One-shot POLL_ADD that completes only when the peer closes (POLLRDHUP;
/// errors and hang-ups complete it too), not when bytes arrive: it can
/// stay armed for a connection's whole life, through every response.
pub fn poll_closed(fd: SockRef, token: Token) -> Sqe {
    let e = sock_op!(fd, |t| opcode::PollAdd::new(t, libc::POLLRDHUP as u32)
        .build())
    .user_data(token.into());
    // SAFETY: a poll names an fd, no memory.
    unsafe { Sqe::new(e) }
}

/// Cancel the in-flight operation(s) whose user_data is `target`.
pub fn cancel_user_data(target: u64, token: Token) -> Sqe {
    let e = opcode::AsyncCancel::new(target)
        .build()
        .user_data(token.into());
    // SAFETY: a cancel names a user_data value, not memory.
    unsafe { Sqe::new(e) }
}

/// Cancel every in-flight operation on `fd` (5.19:
/// IORING_ASYNC_CANCEL_FD|ALL). Completions of the cancelled ops still
/// arrive, with -ECANCELED, and must be reaped before their memory is reused.
pub fn cancel_fd(fd: SockRef, token: Token) -> Sqe {
    let e = sock_op!(fd, |t| opcode::AsyncCancel2::new(
        types::CancelBuilder::fd(t).all()
    )
    .build())
    .user_data(token.into());
    // SAFETY: a cancel by fd names no memory.
    unsafe { Sqe::new(e) }
}

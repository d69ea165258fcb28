//! The I/O half of a connection, which only the driver touches: the socket,
//! the buffers the kernel reads into and writes from, and the count of
//! operations that name the socket.
//!
//! Buffer rule 2 (`uring::buffers`): a socket is closed only after every CQE
//! that names it has been reaped. An SQE can name a socket without naming
//! one of its connection's buffers (the relay writes the session's buffer to
//! the backend's socket and the backend's buffer to the client's socket),
//! so the count is kept per socket, not per buffer.

use std::net::Shutdown;
use std::os::fd::AsRawFd;

use socket2::Socket;

use machines::completion::{Completion, Fault};
use uring::buffers::provided::RingRecv;
use uring::buffers::{ReadBuffer, WriteBuf};
use uring::ring::SockRef;

/// How a connection's socket is held.
pub enum SockHandle {
    /// An fd in the process's table, closed by close(2) when dropped.
    Plain(Socket),
    /// A direct descriptor: slot `n` of the worker ring's registered file
    /// table (a client accepted with IORING_FILE_INDEX_ALLOC). It has no
    /// fd: every operation on it, shutdown and close included, is an SQE
    /// on that ring (`worker/direct.rs`).
    Fixed(u32),
}

/// What a shutdown of the connection needs from the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownHow {
    /// Done already (a plain socket, shut down with shutdown(2)), or
    /// nothing to do (shut down before).
    Done,
    /// A direct descriptor: submit IORING_OP_SHUTDOWN with this `how` on
    /// this slot (and count it on the connection like any op).
    Submit { slot: u32, how: i32 },
}

/// How a ring receive ended, as its reader will hear it. Every connection
/// holds one inline, so it takes 8 bytes, where a `Completion` takes 16: a
/// receive's end never carries bytes, so its `Done` can only be EOF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvEnd {
    Eof,
    Cancelled,
    /// The kernel's errno (positive).
    Failed(i32),
    /// What the driver found itself.
    Fault(Fault),
}

impl RecvEnd {
    /// The end a receive's last completion says (one that brought bytes
    /// is no end: see `ring_io/receive.rs`).
    pub fn of(res: Completion) -> RecvEnd {
        match res {
            Completion::Done(n) => {
                debug_assert_eq!(n, 0, "a receive that brought bytes is no end");
                RecvEnd::Eof
            }
            Completion::Cancelled => RecvEnd::Cancelled,
            Completion::Failed(errno) => RecvEnd::Failed(errno),
            Completion::Fault(fault) => RecvEnd::Fault(fault),
        }
    }

    /// The end as the reader's read completes with it.
    pub fn completion(self) -> Completion {
        match self {
            RecvEnd::Eof => Completion::Done(0),
            RecvEnd::Cancelled => Completion::Cancelled,
            RecvEnd::Failed(errno) => Completion::Failed(errno),
            RecvEnd::Fault(fault) => Completion::Fault(fault),
        }
    }
}

pub struct ConnIo {
    sock: SockHandle,
    /// The read buffer; `None` once returned to the pool at close.
    pub buf: Option<ReadBuffer>,
    /// Packets the proxy makes itself (greetings, ERR, login, reset).
    pub out: WriteBuf,
    /// Bytes of `out` already written.
    pub out_pos: usize,
    /// Ring mode: what the multishot receive delivered; `None` until the
    /// relay first reads this socket (login phases use `buf`).
    pub recv: Option<RingRecv<RecvEnd>>,
    /// Operations in the kernel that name this socket's fd.
    fd_ops: u32,
    shut: bool,
    /// Direct descriptors: full shutdowns submitted again after failing.
    shut_retries: u32,
}

impl ConnIo {
    pub fn new(sock: Socket, buf: Option<ReadBuffer>) -> ConnIo {
        ConnIo::with_handle(SockHandle::Plain(sock), buf)
    }

    pub fn with_handle(sock: SockHandle, buf: Option<ReadBuffer>) -> ConnIo {
        ConnIo {
            sock,
            buf,
            out: WriteBuf::default(),
            out_pos: 0,
            recv: None,
            fd_ops: 0,
            shut: false,
            shut_retries: 0,
        }
    }

    /// What an SQE names for this socket: its fd or its fixed slot.
    pub fn fd(&self) -> SockRef {
        match &self.sock {
            SockHandle::Plain(s) => SockRef::Fd(s.as_raw_fd()),
            SockHandle::Fixed(slot) => SockRef::Fixed(*slot),
        }
    }

    /// The direct-descriptor slot, if the socket is one.
    pub fn fixed_slot(&self) -> Option<u32> {
        match self.sock {
            SockHandle::Fixed(slot) => Some(slot),
            SockHandle::Plain(_) => None,
        }
    }

    /// An SQE naming this fd was queued.
    pub fn op_started(&mut self) {
        self.fd_ops += 1;
    }

    /// A CQE for an SQE naming this fd was reaped.
    pub fn op_done(&mut self) {
        debug_assert!(self.fd_ops > 0, "more completions than operations");
        self.fd_ops = self.fd_ops.saturating_sub(1);
    }

    /// Nothing the kernel holds names this socket or its buffers: the
    /// socket may be closed and the buffers returned.
    pub fn quiescent(&self) -> bool {
        self.fd_ops == 0
            && !self.out.in_flight()
            && self.buf.as_ref().is_none_or(|b| !b.in_flight())
            && self.recv.as_ref().is_none_or(RingRecv::quiescent)
    }

    /// shutdown(2) both ways: an in-flight read or write on the socket
    /// completes now (close(2) alone would not cancel it: an operation in
    /// flight holds its own reference to the file).
    /// A direct descriptor asks the driver for an IORING_OP_SHUTDOWN
    /// (`Worker::shutdown_client`); a backend, always a plain fd, may
    /// ignore the result.
    pub fn shutdown(&mut self) -> ShutdownHow {
        if self.shut {
            return ShutdownHow::Done;
        }
        self.shut = true;
        self.shutdown_how(Shutdown::Both)
    }

    /// [`ConnIo::shutdown`] before the connection is closed: a direct
    /// descriptor that nothing in the kernel names needs none (the
    /// IORING_OP_CLOSE that follows ends the connection as close(2) would),
    /// and IORING_OP_SHUTDOWN always runs on an io-wq thread (the kernel
    /// forces it async): a thread hop and a wake-up per connection, measured
    /// in the connect storm.
    pub fn shutdown_for_close(&mut self) -> ShutdownHow {
        if matches!(self.sock, SockHandle::Fixed(_)) && self.quiescent() {
            self.shut = true;
            return ShutdownHow::Done;
        }
        self.shutdown()
    }

    /// Half-close after a final ERR, so the client sees EOF after it.
    #[must_use]
    pub fn shutdown_write(&mut self) -> ShutdownHow {
        if self.shut {
            return ShutdownHow::Done;
        }
        self.shutdown_how(Shutdown::Write)
    }

    /// A direct descriptor's IORING_OP_SHUTDOWN failed: the full shutdown
    /// to submit again, if one was asked for and fewer than `max` retries
    /// were made (a failed half-close is not retried: the session closes
    /// after its linger anyway).
    pub fn retry_shutdown(&mut self, max: u32) -> Option<ShutdownHow> {
        if !self.shut || self.shut_retries >= max {
            return None;
        }
        self.shut_retries += 1;
        Some(self.shutdown_how(Shutdown::Both))
    }

    fn shutdown_how(&self, how: Shutdown) -> ShutdownHow {
        match &self.sock {
            SockHandle::Plain(s) => {
                let _ = s.shutdown(how);
                ShutdownHow::Done
            }
            SockHandle::Fixed(slot) => ShutdownHow::Submit {
                slot: *slot,
                how: match how {
                    Shutdown::Read => libc::SHUT_RD,
                    Shutdown::Write => libc::SHUT_WR,
                    Shutdown::Both => libc::SHUT_RDWR,
                },
            },
        }
    }
}

impl ConnIo {
    /// The pool's check of an idle connection at its lease
    /// (`PoolEvent::CheckIdle`; as Pingora checks on checkout): it must have
    /// nothing to read. EOF or stray bytes mean the server closed it (e.g.
    /// wait_timeout, or a restart). A peek that does not block: it consumes
    /// nothing.
    pub fn idle_peer_alive(&self) -> bool {
        // Only backend connections are checked, and they are plain fds.
        let SockHandle::Plain(sock) = &self.sock else {
            return true;
        };
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        match sock.recv_with_flags(&mut probe, libc::MSG_PEEK | libc::MSG_DONTWAIT) {
            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }
}

impl Drop for ConnIo {
    /// The socket closes here. Closing while an SQE names the fd would let
    /// the kernel act on whatever the number is reused for next (buffer
    /// rule 2); debug builds, which every test runs, stop right there.
    fn drop(&mut self) {
        debug_assert_eq!(
            self.fd_ops, 0,
            "socket closed while {} operation(s) name its fd",
            self.fd_ops
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::{BufferMode, Metrics};
    use socket2::{Domain, Type};
    use uring::buffers::{BufferPool, Owner};

    #[test]
    fn a_socket_named_by_another_connections_op_is_not_quiescent() {
        // Defect 5: the relay's write of the session buffer to the backend
        // socket left the backend's own buffer idle, and the old per-buffer
        // flag let the backend close its fd under that write.
        let mut pool = BufferPool::heap(64, Metrics::new(1, BufferMode::Heap), 0);
        let (a, _b) = Socket::pair(Domain::UNIX, Type::STREAM, None).unwrap();
        let mut backend = ConnIo::new(a, Some(pool.acquire(Owner::Backend)));
        backend.op_started(); // a write from the session's buffer names this fd
        assert!(
            !backend.quiescent(),
            "its buffer is idle, but its fd is named"
        );
        backend.op_done();
        assert!(backend.quiescent());
        let _ = pool.release(backend.buf.take().unwrap());
    }

    /// The peek that decides whether an idle connection (or one whose
    /// receive -ENOBUFS ended at its give-back) is clean: nothing waiting
    /// is clean; a byte or an EOF is not; and it consumes nothing.
    #[test]
    fn idle_peer_alive_is_false_once_a_byte_or_an_eof_waits() {
        let (a, b) = Socket::pair(Domain::UNIX, Type::STREAM, None).unwrap();
        let io = ConnIo::new(a, None);
        assert!(io.idle_peer_alive());
        b.send(b"x").unwrap();
        assert!(!io.idle_peer_alive());
        assert!(!io.idle_peer_alive(), "a peek leaves the byte there");
        let (c, d) = Socket::pair(Domain::UNIX, Type::STREAM, None).unwrap();
        let io = ConnIo::new(c, None);
        drop(d);
        assert!(!io.idle_peer_alive(), "EOF");
    }

    /// A receive's end reaches its reader as the completion it was made
    /// of, and costs a connection no more than the errno it replaced.
    #[test]
    fn a_receive_end_is_the_completion_it_was_made_of() {
        for c in [
            Completion::Done(0),
            Completion::Cancelled,
            Completion::Failed(104),
            Completion::Fault(Fault::Unsolicited),
        ] {
            assert_eq!(RecvEnd::of(c).completion(), c);
        }
        assert_eq!(std::mem::size_of::<Option<RecvEnd>>(), 8);
    }
}

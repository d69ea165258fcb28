//! Direct descriptors: the ring's registered file table, into which the
//! worker accepts its clients (IORING_FILE_INDEX_ALLOC), and the SQEs that
//! act on a slot of it (close, shutdown) or wake another ring (MSG_RING).
//!
//! Kernel facts (checked on 6.18): a sparse table is registered once
//! (`register_files_sparse`, 5.19 for allocation into it); its size may not
//! exceed RLIMIT_NOFILE (EMFILE) nor 1<<20. An accept with file-index
//! allocation returns the slot, and the accepted socket gets no fd. A slot is
//! handed out again only after an IORING_OP_CLOSE of it has run, so a slot
//! closed after the connection's last CQE never aliases a new connection.
//! A full table fails the accept with -ENFILE *after* the kernel took the
//! connection off the listen queue (the connection is then closed): so the
//! worker never arms more direct accepts than it has free slots.

use io_uring::{opcode, types, Probe};

use super::{OpTag, Ring, Sqe, Token};

/// The largest table the kernel allows (IORING_MAX_FIXED_FILES).
pub const MAX_FIXED_FILES: u32 = 1 << 20;

impl Ring {
    /// Register a sparse file table of `slots` entries and check, with one
    /// real accept into it on a loopback listener, that this kernel
    /// allocates direct descriptors and closes them by slot. Runs on the
    /// worker's ring before anything else is submitted. On error the table
    /// is unregistered again and the reason is returned for one log line.
    pub fn setup_direct_files(&mut self, slots: u32) -> Result<(), String> {
        if self.probe_fail.direct_fd {
            return Err("probe forced to fail by RINGGATE_DEBUG_PROBE_FAIL=direct_fd".into());
        }
        let mut probe = Probe::new();
        self.uring
            .submitter()
            .register_probe(&mut probe)
            .map_err(|e| format!("IORING_REGISTER_PROBE: {e} (needs Linux 5.6)"))?;
        for (code, name, version) in [
            (opcode::Shutdown::CODE, "IORING_OP_SHUTDOWN", "5.11"),
            (opcode::Close::CODE, "IORING_OP_CLOSE", "5.6"),
            (opcode::MsgRingData::CODE, "IORING_OP_MSG_RING", "5.18"),
        ] {
            if !probe.is_supported(code) {
                return Err(format!("the kernel lacks {name} (Linux {version})"));
            }
        }
        let slots = slots.clamp(1, MAX_FIXED_FILES);
        self.uring
            .submitter()
            .register_files_sparse(slots)
            .map_err(|e| {
                format!("registering a sparse file table of {slots} slots: {e} (needs Linux 5.19, and at most RLIMIT_NOFILE slots)")
            })?;
        if let Err(e) = self.probe_direct_accept() {
            let _ = self.uring.submitter().unregister_files();
            return Err(e);
        }
        self.direct_slots = slots;
        Ok(())
    }

    /// Slots of the registered file table (0: direct descriptors unused).
    pub fn direct_slots(&self) -> u32 {
        self.direct_slots
    }

    fn probe_direct_accept(&mut self) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        let bad = |what: &str, e: std::io::Error| format!("direct-accept probe: {what}: {e}");
        let listener = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .map_err(|e| bad("socket", e))?;
        let any: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
        listener
            .bind(&any.into())
            .and_then(|()| listener.listen(1))
            .map_err(|e| bad("listen on 127.0.0.1", e))?;
        let addr = listener.local_addr().map_err(|e| bad("local_addr", e))?;
        let client = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .map_err(|e| bad("socket", e))?;
        client.connect(&addr).map_err(|e| bad("connect", e))?;
        let accept = Token::new(OpTag::Ignore, u32::MAX, 3);
        self.push(accept_direct(listener.as_raw_fd().into(), accept));
        let res = self.wait_for(accept.into())?;
        if res < 0 {
            return Err(format!(
                "an accept with IORING_FILE_INDEX_ALLOC failed: {} (needs Linux 5.19)",
                std::io::Error::from_raw_os_error(-res)
            ));
        }
        let close = Token::new(OpTag::Ignore, u32::MAX, 4);
        self.push(close_fixed(res as u32, close));
        let res = self.wait_for(close.into())?;
        if res < 0 {
            return Err(format!(
                "IORING_OP_CLOSE of a direct descriptor failed: {}",
                std::io::Error::from_raw_os_error(-res)
            ));
        }
        Ok(())
    }

    /// Submit and wait until the completion for `user_data` arrives (the
    /// ring is otherwise unused at set-up); its result.
    fn wait_for(&mut self, user_data: u64) -> Result<i32, String> {
        let mut batch = Vec::new();
        for _ in 0..100 {
            self.submit_and_wait()
                .map_err(|e| format!("direct-accept probe: io_uring_enter: {e}"))?;
            batch.clear();
            self.reap(&mut batch);
            if let Some(c) = batch.iter().find(|c| c.user_data == user_data) {
                return Ok(c.result);
            }
        }
        Err("direct-accept probe: no completion".into())
    }
}

/// One-shot accept into a slot the kernel allocates (5.19); the CQE's
/// result is the slot. No peer address: see `buffers::accept_addr` for the
/// accept that takes one.
pub fn accept_direct(listener: super::SockRef, token: Token) -> Sqe {
    let e = crate::sock_op!(listener, |t| opcode::Accept::new(
        t,
        std::ptr::null_mut(),
        std::ptr::null_mut()
    )
    // No SOCK_CLOEXEC: the kernel refuses it with a file slot (EINVAL).
    .file_index(Some(types::DestinationSlot::auto_target()))
    .build())
    .user_data(token.into());
    // SAFETY: both address pointers are null, so no memory is named.
    unsafe { Sqe::new(e) }
}

/// IORING_OP_CLOSE of direct descriptor `slot`: the socket closes and the
/// slot becomes free for the next allocation.
pub fn close_fixed(slot: u32, token: Token) -> Sqe {
    let e = opcode::Close::new(types::Fixed(slot))
        .build()
        .user_data(token.into());
    // SAFETY: a close names a table slot, no memory.
    unsafe { Sqe::new(e) }
}

/// IORING_OP_SHUTDOWN (5.11) of a socket, `how` as shutdown(2)'s.
pub fn shutdown(sock: super::SockRef, how: i32, token: Token) -> Sqe {
    let e =
        crate::sock_op!(sock, |t| opcode::Shutdown::new(t, how).build()).user_data(token.into());
    // SAFETY: a shutdown names a socket, no memory.
    unsafe { Sqe::new(e) }
}

/// IORING_OP_MSG_RING (5.18): post a CQE carrying `user_data` (result 0)
/// on the ring whose fd is `ring_fd`. `token` names this ring's own CQE of
/// the send.
pub fn msg_ring(ring_fd: std::os::fd::RawFd, user_data: u64, token: Token) -> Sqe {
    msg_ring_with(ring_fd, user_data, 0, token)
}

/// [`msg_ring`] whose CQE in the target ring carries `res` as its result
/// (a KILL's wake-up names its killer's connection id there).
pub fn msg_ring_with(ring_fd: std::os::fd::RawFd, user_data: u64, res: i32, token: Token) -> Sqe {
    let e = opcode::MsgRingData::new(types::Fd(ring_fd), res, user_data, None)
        .build()
        .user_data(token.into());
    // SAFETY: MSG_RING with IORING_MSG_DATA names a ring fd and two
    // integers, no memory.
    unsafe { Sqe::new(e) }
}

//! The read-buffer pool: a client or backend connection holds a read
//! buffer while it reads. In `fixed` mode the buffers are slots of one
//! page-aligned region registered with the worker's io_uring; in `heap` mode
//! (or when no slot is free) they are plain heap allocations. Both kinds are
//! used through the same [`ReadBuffer`] type.
//!
//! In `fixed` mode a busy connection keeps its slot and a read pending
//! between commands; a connection idle for a while (a read still pending on
//! an empty buffer 10 ms after it was submitted is cancelled) gives its slot
//! back ([`BufferPool::give_back_empty`]), waits on a poll of its socket,
//! which names no memory, and takes a slot again
//! ([`BufferPool::try_acquire_slot`]), or at once a heap buffer, when the
//! socket is readable. That holds for clients and backend connections alike,
//! also while a backend connection idles in the pool (a client with a TLS
//! or compression leg keeps its slot); with `--hold-idle-slots` every
//! connection keeps its slot for its whole life.
//!
//! A large result swaps a backend connection's buffer for a larger heap
//! one while it streams ([`BufferPool::grow`], [`BufferPool::shrink`]; at
//! most [`LARGE_BUFFERS_PER_WORKER`] per worker), so it moves in fewer,
//! larger reads and writes; the swap happens only between operations, on an
//! empty buffer.
//!
//! In `ring` mode ([`provided`]) the relay's reads come from one
//! provided-buffer ring per worker, taken by multishot receives only when
//! bytes arrive. A connection's own [`ReadBuffer`] is then a heap buffer
//! taken only while it is needed: the login phases, the rare bytes that
//! must be kept across reads (a rewritten KILL, a server ERR arriving in
//! pieces, a transaction's first command waiting for a connection), and a
//! plain read when the ring is empty. It goes back to the pool as soon as
//! it is empty and idle ([`BufferPool::lazy`], [`BufferPool::shed`]), so an
//! idle connection holds none; the pool keeps a few spare ones so that this
//! costs no allocation per transaction.
//!
//! # Buffer lifetime rules (the one place they are written down)
//!
//! Every buffer mode obeys them; docs/architecture.md links here.
//!
//! 1. The kernel may write into or read from a buffer from the moment an SQE
//!    naming it is pushed until that SQE's CQE is reaped. In between, the
//!    memory must stay valid and must not be handed to anyone else.
//! 2. Closing a socket does not cancel an operation in flight on it: the
//!    operation holds its own reference to the file, so `close()` (or the
//!    IORING_OP_CLOSE of a direct descriptor's slot) drops only the table's
//!    reference, and a pending read goes on until bytes arrive, still
//!    writing into its buffer. Tear-down is therefore: `shutdown()` (or
//!    ASYNC_CANCEL), which makes the operations complete now → wait for
//!    every CQE that names the connection's socket → return the buffer →
//!    close the socket. An SQE can name a socket without naming that
//!    connection's buffer (the relay writes the session's buffer to the
//!    backend's socket and the backend's buffer to the client's socket), so
//!    the driver counts operations per socket, and a connection is freed
//!    only when no operation names its socket and none of its buffers is in
//!    flight. Where no operation names the socket any more, the shutdown
//!    has nothing to end and may be left out (direct descriptors do).
//! 3. A reused slot still holds the previous connection's bytes: only the
//!    bytes the completions reported ([`ReadBuffer::filled`]) are valid, and
//!    only those are ever forwarded.
//! 4. Ring mode: a ring buffer (or, with incremental consumption, a piece
//!    of one) is owned by userspace from the CQE that names its id until it
//!    is given back ([`provided::BufRing::put`]): after the send that
//!    forwards it completes, or once its bytes are consumed. It goes back on
//!    the ring only when the kernel is done with it too (no
//!    IORING_CQE_F_BUF_MORE) and no piece of it is held. A piece named by a
//!    send in flight cannot be given back ([`provided::Chunk`] carries the
//!    same in-flight mark as a [`ReadBuffer`]).
//! 5. A write linked to the read behind it and posting no CQE on success
//!    (`Ring::push_write_then_read`, IOSQE_CQE_SKIP_SUCCESS) completes
//!    without a CQE of its own: the read's CQE, whatever its result, proves
//!    the write finished (the kernel runs the read only after the whole
//!    write), so the owner completes the write ([`ReadBuffer::
//!    complete_write`]) on that CQE, before it handles the read's. A write
//!    that fails or is short posts its CQE, and then the read never ran and
//!    posts none: that CQE also ends the read ([`ReadBuffer::read_dropped`]).
//!    Kernel facts in `ring::link_tests`.
//!
//! The types enforce rules 1 and 3:
//! - An SQE that points at a buffer can only be built by
//!   [`ReadBuffer::read_sqe`], [`ReadBuffer::write_sqe`] or
//!   [`WriteBuf::write_sqe`], which mark the buffer *in flight*;
//!   [`ReadBuffer::complete`] / [`WriteBuf::complete`] clear the mark when
//!   the CQE is reaped. Those builders return a [`Sqe`], the only thing
//!   the ring accepts, and an SQE the ring cannot queue comes back as a
//!   synthetic failed completion: the mark is always cleared through the
//!   owner's completion path.
//! - [`BufferPool::release`] refuses a buffer that is in flight (it returns
//!   it to the caller as an error), and dropping an in-flight buffer leaks its
//!   memory on purpose instead of freeing memory the kernel may still write.
//! - Bytes are only readable through [`ReadBuffer::filled`] up to the count
//!   the completion reported.
//!
//! Rule 2 is the driver's to keep: it counts the operations that name each
//! socket and frees a connection (buffer back to the pool, then the socket
//! closed) only when none does and none of its buffers is in flight; the
//! integration tests assert that every slot is free again after every
//! scenario.

pub mod accept_addr;
mod fixed;
mod mapping;
pub mod provided;

use std::sync::Arc;

use io_uring::opcode;

use crate::ring::{SockRef, Sqe};
use crate::sock_op;
use fixed::FixedRegion;
use metrics::{BufferMode, Metrics};
use provided::BufRing;

pub use fixed::RegisterError;

/// Who holds a buffer; only used for the `owner` metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Client,
    Backend,
}

enum Memory {
    /// A slot of the registered region: `index` is the kernel's buffer index.
    Fixed {
        index: u16,
        ptr: *mut u8,
    },
    Heap(Box<[u8]>),
}

/// One connection's read buffer. Not `Clone`: exactly one connection owns it.
pub struct ReadBuffer {
    memory: Memory,
    capacity: usize,
    /// Valid bytes at the start of the buffer (set from completions).
    filled: usize,
    /// Behind a TLS leg: bytes received after the valid ones that are not
    /// decoded yet (a partial record). Reads append after them; the valid
    /// bytes are the decoded plaintext (the binary's `tls::record_layer`).
    wire: usize,
    in_flight: bool,
    owner: Owner,
    /// A large-result buffer ([`BufferPool::grow`]): released to the
    /// pool's large spares, not to the slots or the heap.
    large: bool,
}

/// Bytes offsets into a socket: READ/WRITE on a socket need offset 0 or -1
/// (anything else is ESPIPE); -1 means "current position" and is accepted
/// everywhere.
const SOCKET_OFFSET: u64 = u64::MAX;

impl ReadBuffer {
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn is_fixed(&self) -> bool {
        matches!(self.memory, Memory::Fixed { .. })
    }

    /// A large-result buffer ([`BufferPool::grow`]).
    pub fn is_large(&self) -> bool {
        self.large
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The bytes a completion reported, never more (rule 3).
    pub fn filled(&self) -> &[u8] {
        assert!(!self.in_flight, "buffer read while the kernel owns it");
        &self.as_slice()[..self.filled]
    }

    pub fn filled_len(&self) -> usize {
        self.filled
    }

    /// The valid bytes, to edit in place before they are written on (the
    /// relay strips session-state blocks a client did not ask for).
    pub fn filled_mut(&mut self) -> &mut [u8] {
        assert!(!self.in_flight, "buffer written while the kernel owns it");
        let filled = self.filled;
        &mut self.as_mut_slice()[..filled]
    }

    /// Forget the valid bytes (the next read starts at offset 0, or after
    /// the undecoded wire bytes, which move to the front).
    pub fn clear(&mut self) {
        if self.wire > 0 {
            let (filled, end) = (self.filled, self.filled + self.wire);
            self.as_mut_slice().copy_within(filled..end, 0);
        }
        self.filled = 0;
    }

    /// Drop the first `n` valid bytes, moving the rest (and any undecoded
    /// wire bytes) to the front. Only used in the login phases, where
    /// packets are small.
    pub fn consume(&mut self, n: usize) {
        assert!(!self.in_flight);
        let n = n.min(self.filled);
        let end = self.filled + self.wire;
        self.as_mut_slice().copy_within(n..end, 0);
        self.filled -= n;
    }

    /// A TLS leg starts: the valid bytes (what the client sent behind its
    /// SSLRequest) are its first wire bytes.
    pub fn to_wire(&mut self) {
        self.wire += self.filled;
        self.filled = 0;
    }

    /// Undecoded wire bytes behind the valid ones.
    pub fn wire_len(&self) -> usize {
        self.wire
    }

    /// Room for another read.
    pub fn has_room(&self) -> bool {
        self.filled + self.wire < self.capacity
    }

    /// The whole buffer with the end of the valid bytes and of the wire
    /// bytes, for a TLS leg to decode in place; [`ReadBuffer::set_parts`]
    /// records what it left.
    pub fn parts_mut(&mut self) -> (&mut [u8], usize, usize) {
        assert!(!self.in_flight);
        let (filled, end) = (self.filled, self.filled + self.wire);
        (self.as_mut_slice(), filled, end)
    }

    pub fn set_parts(&mut self, plain_end: usize, wire_end: usize) {
        assert!(plain_end <= wire_end && wire_end <= self.capacity);
        self.filled = plain_end;
        self.wire = wire_end - plain_end;
    }

    /// Append `data` after the valid bytes (ring mode keeps bytes across
    /// reads this way: a rewritten KILL, a server ERR in pieces; small and
    /// rare). False, and nothing changed, when it does not fit: the caller
    /// must not go on as if the bytes were kept (a dropped byte corrupts
    /// the stream), hence `must_use`.
    #[must_use = "false means nothing was copied: those bytes would be lost"]
    pub fn append(&mut self, data: &[u8]) -> bool {
        assert!(!self.in_flight);
        debug_assert_eq!(self.wire, 0, "ring mode has no TLS leg");
        let start = self.filled;
        if data.len() > self.capacity - start {
            return false;
        }
        self.as_mut_slice()[start..start + data.len()].copy_from_slice(data);
        self.filled += data.len();
        true
    }

    /// Replace the first `old` valid bytes with `new`, moving the rest (a
    /// rewritten command; small). False, and nothing changed, when the
    /// result would not fit.
    pub fn replace_prefix(&mut self, old: usize, new: &[u8]) -> bool {
        assert!(!self.in_flight);
        let old = old.min(self.filled);
        let (end, rest) = (self.filled + self.wire, self.filled - old);
        if new.len() + rest + self.wire > self.capacity {
            return false;
        }
        let slice = self.as_mut_slice();
        slice.copy_within(old..end, new.len());
        slice[..new.len()].copy_from_slice(new);
        self.filled = new.len() + rest;
        true
    }

    fn as_slice(&self) -> &[u8] {
        match &self.memory {
            // SAFETY: `ptr` points at `capacity` bytes inside the region that
            // the pool keeps mapped for the worker's lifetime; no op is in
            // flight (callers check), so the kernel is not writing them.
            Memory::Fixed { ptr, .. } => unsafe { std::slice::from_raw_parts(*ptr, self.capacity) },
            Memory::Heap(b) => b,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.memory {
            // SAFETY: as in `as_slice`; `&mut self` makes this the only view.
            Memory::Fixed { ptr, .. } => unsafe {
                std::slice::from_raw_parts_mut(*ptr, self.capacity)
            },
            Memory::Heap(b) => b,
        }
    }

    fn base_ptr(&mut self) -> *mut u8 {
        match &mut self.memory {
            Memory::Fixed { ptr, .. } => *ptr,
            Memory::Heap(b) => b.as_mut_ptr(),
        }
    }

    /// SQE that reads from `fd` into the free space after the valid bytes:
    /// READ_FIXED for a registered slot, READ for a heap buffer. The buffer
    /// is in flight until [`ReadBuffer::complete`].
    pub fn read_sqe(&mut self, fd: SockRef, user_data: u64) -> Sqe {
        assert!(!self.in_flight, "second operation on a busy buffer");
        let start = self.filled + self.wire;
        assert!(start < self.capacity, "read into a full buffer");
        let len = (self.capacity - start) as u32;
        // SAFETY: `start < capacity`, so the pointer stays inside the buffer.
        let ptr = unsafe { self.base_ptr().add(start) };
        self.in_flight = true;
        let entry = match self.memory {
            Memory::Fixed { index, .. } => {
                sock_op!(fd, |t| opcode::ReadFixed::new(t, ptr, len, index)
                    .offset(SOCKET_OFFSET)
                    .build())
            }
            Memory::Heap(_) => sock_op!(fd, |t| opcode::Read::new(t, ptr, len)
                .offset(SOCKET_OFFSET)
                .build()),
        };
        // SAFETY: the buffer is now marked in flight: it cannot be released
        // to the pool, its bytes cannot be touched, and dropping it leaks the
        // memory instead of freeing it, until `complete` is called for this
        // operation's (real or synthetic) completion.
        unsafe { Sqe::new(entry.user_data(user_data)) }
    }

    /// SQE that writes `filled()[range]` to `fd`: WRITE_FIXED straight from
    /// the registered slot (no userspace copy), WRITE for a heap buffer.
    pub fn write_sqe(&mut self, fd: SockRef, start: usize, end: usize, user_data: u64) -> Sqe {
        self.write_sqe_with(fd, start, end, 0, user_data)
    }

    /// [`ReadBuffer::write_sqe`] with RWF_NOWAIT: a write the socket cannot
    /// take at once completes (-EAGAIN, or short) instead of waiting for
    /// room. For `Ring::push_write_then_read`, whose linked read must never
    /// wait behind a write the peer is not draining (the half-duplex
    /// deadlock `machines::relay` describes): the write either finishes in the
    /// enter that submits it, and the read runs, or comes back to its owner.
    pub fn write_nowait_sqe(
        &mut self,
        fd: SockRef,
        start: usize,
        end: usize,
        user_data: u64,
    ) -> Sqe {
        self.write_sqe_with(fd, start, end, libc::RWF_NOWAIT, user_data)
    }

    /// The write of `filled()[start..end]` with `rw_flags` (RWF_*).
    fn write_sqe_with(
        &mut self,
        fd: SockRef,
        start: usize,
        end: usize,
        rw_flags: i32,
        user_data: u64,
    ) -> Sqe {
        assert!(!self.in_flight, "second operation on a busy buffer");
        assert!(
            start < end && end <= self.filled,
            "write beyond the completed bytes"
        );
        // SAFETY: `start < end <= filled <= capacity`.
        let ptr = unsafe { self.base_ptr().add(start) };
        let len = (end - start) as u32;
        self.in_flight = true;
        let entry = match self.memory {
            Memory::Fixed { index, .. } => {
                sock_op!(fd, |t| opcode::WriteFixed::new(t, ptr, len, index)
                    .offset(SOCKET_OFFSET)
                    .rw_flags(rw_flags)
                    .build())
            }
            Memory::Heap(_) => sock_op!(fd, |t| opcode::Write::new(t, ptr, len)
                .offset(SOCKET_OFFSET)
                .rw_flags(rw_flags)
                .build()),
        };
        // SAFETY: as in `read_sqe`: in flight until `complete_write`.
        unsafe { Sqe::new(entry.user_data(user_data)) }
    }

    /// The CQE of this buffer's operation was reaped. For a read, `read`
    /// is the byte count it delivered (appended to the valid bytes).
    pub fn complete(&mut self, read: usize) {
        debug_assert!(self.in_flight);
        self.in_flight = false;
        self.filled = (self.filled + read).min(self.capacity - self.wire);
    }

    /// The CQE of a read behind a TLS leg was reaped: the bytes are wire
    /// bytes, for the leg to decode.
    pub fn complete_wire(&mut self, read: usize) {
        debug_assert!(self.in_flight);
        self.in_flight = false;
        self.wire = (self.wire + read).min(self.capacity - self.filled);
    }

    /// Put `data` after the valid bytes as if a read had delivered it
    /// (unit tests of the machines, which never touch a kernel).
    #[cfg(test)]
    pub fn fill_for_test(&mut self, data: &[u8]) {
        assert!(!self.in_flight);
        let start = self.filled;
        let end = (start + data.len()).min(self.capacity);
        self.as_mut_slice()[start..end].copy_from_slice(&data[..end - start]);
        self.filled = end;
    }

    /// A read linked behind a write that failed or was short (rule 5): the
    /// kernel dropped it without running it and without a CQE; the write's
    /// CQE is its end. Nothing was read.
    pub fn read_dropped(&mut self) {
        self.complete(0);
    }

    /// The CQE of a write was reaped: clear the in-flight mark only.
    pub fn complete_write(&mut self) {
        debug_assert!(self.in_flight);
        self.in_flight = false;
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        if self.in_flight {
            // Rule 1: the kernel may still write here. Leak rather than free.
            if let Memory::Heap(b) = std::mem::replace(&mut self.memory, Memory::Heap(Box::new([])))
            {
                std::mem::forget(b);
            }
            tracing::error!("read buffer dropped while an operation was in flight; leaked it");
        }
    }
}

/// A small heap buffer for packets the proxy writes itself (greetings, OK
/// and ERR packets, the backend login, COM_RESET_CONNECTION). Off the hot
/// path; the same in-flight discipline as [`ReadBuffer`].
#[derive(Default)]
pub struct WriteBuf {
    bytes: Vec<u8>,
    in_flight: bool,
}

impl WriteBuf {
    /// The bytes to send; only mutable while no write is in flight.
    pub fn bytes_mut(&mut self) -> &mut Vec<u8> {
        assert!(
            !self.in_flight,
            "proxy packet changed while the kernel reads it"
        );
        &mut self.bytes
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes, to read (always allowed: the kernel only reads them too).
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// SQE that sends `bytes[start..]`.
    pub fn write_sqe(&mut self, fd: SockRef, start: usize, user_data: u64) -> Sqe {
        assert!(!self.in_flight && start < self.bytes.len());
        self.in_flight = true;
        let len = (self.bytes.len() - start) as u32;
        // SAFETY: `start < len()`, inside the Vec, which is not touched until
        // `complete` (bytes_mut asserts that).
        let ptr = unsafe { self.bytes.as_ptr().add(start) };
        let entry = sock_op!(fd, |t| opcode::Write::new(t, ptr, len)
            .offset(SOCKET_OFFSET)
            .build())
        .user_data(user_data);
        // SAFETY: the Vec is marked in flight: `bytes_mut` refuses to hand it
        // out and dropping it leaks it, until `complete` is called for this
        // operation's (real or synthetic) completion.
        unsafe { Sqe::new(entry) }
    }

    pub fn complete(&mut self) {
        self.in_flight = false;
    }
}

impl Drop for WriteBuf {
    fn drop(&mut self) {
        if self.in_flight {
            std::mem::forget(std::mem::take(&mut self.bytes));
            tracing::error!("write buffer dropped while an operation was in flight; leaked it");
        }
    }
}

/// One worker's pool of read buffers.
pub struct BufferPool {
    /// Registered region; `None` in heap mode. Declared before nothing that
    /// outlives it: the worker drops its ring before its pool.
    region: Option<FixedRegion>,
    /// The provided-buffer ring in `ring` mode (connections' own buffers
    /// are then heap buffers).
    ring: Option<BufRing>,
    free: Vec<u16>,
    /// Ring mode: heap buffers given back, kept for the next taker (at most
    /// [`SPARE_HEAP_BUFFERS`]), so a connection's buffer can be taken and
    /// given back around each use without an allocation each time.
    spare: Vec<Box<[u8]>>,
    buffer_size: usize,
    /// Bytes per large-result buffer; 0 (or not above `buffer_size`): off.
    large_size: usize,
    /// Large-result buffers held by connections now (at most
    /// [`LARGE_BUFFERS_PER_WORKER`]).
    large_out: usize,
    /// Large-result buffers given back, kept for the next grow (at most
    /// [`SPARE_LARGE_BUFFERS`]).
    large_spare: Vec<Box<[u8]>>,
    metrics: Arc<Metrics>,
    worker: usize,
}

/// Large-result buffers a worker hands out at once: results beyond this
/// many read in the ordinary buffer size. Bounds the memory large results
/// take (16 × 256 KiB = 4 MiB per worker at the default size) whatever
/// their number or size.
pub const LARGE_BUFFERS_PER_WORKER: usize = 16;

/// Large-result buffers kept after use, so that back-to-back large results
/// allocate nothing; the rest are freed.
const SPARE_LARGE_BUFFERS: usize = 4;

/// Spare heap buffers a ring-mode pool keeps: enough for the connections
/// that need one at the same moment on a busy worker (a transaction's first
/// command, a tail join), few enough to be noise in RSS (256 KiB at the
/// default size).
const SPARE_HEAP_BUFFERS: usize = 16;

impl BufferPool {
    /// A heap-mode pool: every buffer is a fresh allocation.
    pub fn heap(buffer_size: usize, metrics: Arc<Metrics>, worker: usize) -> BufferPool {
        BufferPool {
            region: None,
            ring: None,
            free: Vec::new(),
            spare: Vec::new(),
            buffer_size,
            large_size: 0,
            large_out: 0,
            large_spare: Vec::new(),
            metrics,
            worker,
        }
    }

    /// Turn large-result reads on with buffers of `size` bytes (off when
    /// `size` is not larger than the ordinary buffers, and in ring mode,
    /// whose relay reads come from the ring).
    pub fn with_large_reads(mut self, size: usize) -> Self {
        if size > self.buffer_size && self.ring.is_none() {
            self.large_size = size;
        }
        self
    }

    /// A large result is being read: `buf` (empty and idle) was filled by
    /// its last read, so more bytes are waiting. Swap it for a large
    /// buffer, when large reads are on and one is free (true). The old
    /// buffer goes back to the pool (a slot to the free list), so a
    /// connection never holds two.
    pub fn grow(&mut self, buf: &mut Option<ReadBuffer>) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let idle_empty = |b: &ReadBuffer| !b.in_flight && b.filled == 0 && b.wire == 0 && !b.large;
        if self.large_size == 0
            || self.large_out >= LARGE_BUFFERS_PER_WORKER
            || !buf.as_ref().is_some_and(idle_empty)
        {
            return false;
        }
        let Some(old) = buf.take() else {
            return false;
        };
        let owner = old.owner;
        // Idle (checked above): release cannot refuse it.
        let _ = self.release(old);
        let memory = self
            .large_spare
            .pop()
            .unwrap_or_else(|| vec![0u8; self.large_size].into_boxed_slice());
        self.large_out += 1;
        let wm = self.metrics.worker(self.worker);
        wm.large_reads_total.fetch_add(1, Relaxed);
        wm.large_read_buffers_in_use.fetch_add(1, Relaxed);
        self.count_in_use(owner, 1);
        *buf = Some(ReadBuffer {
            memory: Memory::Heap(memory),
            capacity: self.large_size,
            filled: 0,
            wire: 0,
            in_flight: false,
            owner,
            large: true,
        });
        true
    }

    /// After the relay forwarded a backend read of `read` bytes (the buffer
    /// is empty again): a read that filled an ordinary buffer means more of
    /// a result is waiting, so grow (when `may_grow`); a large buffer goes
    /// back once a read brings less than an ordinary buffer holds (the
    /// result ended, or it trickles). Reads between the two keep the large
    /// buffer: giving it back at every read that merely did not fill it
    /// made a result that arrives a little slower than it is forwarded
    /// swap at every other read (19 SQEs per MiB instead of ~10).
    pub fn fit_to_result(&mut self, buf: &mut Option<ReadBuffer>, read: usize, may_grow: bool) {
        let Some(b) = buf.as_ref() else {
            return;
        };
        if b.large {
            if read < self.buffer_size {
                self.shrink(buf);
            }
        } else if may_grow && read >= b.capacity {
            self.grow(buf);
        }
    }

    /// The large result slowed or ended (see [`BufferPool::fit_to_result`]):
    /// give the large buffer back (empty and idle only) and take
    /// an ordinary one, a free slot in fixed mode (none when every slot is
    /// taken: the next read then waits on the poll as an idle one does).
    pub fn shrink(&mut self, buf: &mut Option<ReadBuffer>) {
        let idle_empty = |b: &ReadBuffer| !b.in_flight && b.filled == 0 && b.wire == 0 && b.large;
        if !buf.as_ref().is_some_and(idle_empty) {
            return;
        }
        let Some(old) = buf.take() else {
            return;
        };
        let owner = old.owner;
        let _ = self.release(old);
        *buf = match self.region {
            Some(_) => self.try_acquire_slot(owner),
            None => Some(self.acquire(owner)),
        };
    }

    fn count_in_use(&self, owner: Owner, delta: i64) {
        use std::sync::atomic::Ordering::Relaxed;
        let wm = self.metrics.worker(self.worker);
        match owner {
            Owner::Client => wm.read_buffers_in_use_client.fetch_add(delta, Relaxed),
            Owner::Backend => wm.read_buffers_in_use_backend.fetch_add(delta, Relaxed),
        };
    }

    /// A ring-mode pool: the worker's provided-buffer ring for the relay's
    /// reads, heap buffers for everything else.
    pub fn ring(ring: BufRing, buffer_size: usize, metrics: Arc<Metrics>, worker: usize) -> Self {
        BufferPool {
            ring: Some(ring),
            ..BufferPool::heap(buffer_size, metrics, worker)
        }
    }

    /// The provided-buffer ring, in `ring` mode.
    pub fn buf_ring(&mut self) -> Option<&mut BufRing> {
        self.ring.as_mut()
    }

    pub fn is_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// Connections hold their own buffer only while they use it: taken
    /// when a read or a kept byte needs it, given back once it is empty
    /// and no operation names it (ring mode, where the relay reads from the
    /// ring).
    pub fn lazy(&self) -> bool {
        self.ring.is_some()
    }

    /// Give `buf` back if it is held, idle and empty (a lazy pool only).
    pub fn shed(&mut self, buf: &mut Option<ReadBuffer>) {
        if self.lazy() {
            self.give_back_empty(buf);
        }
    }

    /// Give `buf` back if it is held, idle and empty, in any mode (fixed
    /// mode: an idle client waits for its next bytes without a slot).
    pub fn give_back_empty(&mut self, buf: &mut Option<ReadBuffer>) {
        // A partial TLS record (`wire`) is kept like valid bytes.
        let empty = |b: &ReadBuffer| !b.in_flight && b.filled == 0 && b.wire == 0;
        if !buf.as_ref().is_some_and(empty) {
            return;
        }
        if let Some(b) = buf.take() {
            // Not in flight (checked above): release cannot refuse it.
            let _ = self.release(b);
        }
    }

    /// A registered slot, or `None` when every slot is taken (the caller
    /// waits for one instead of falling back to the heap). Fixed mode only.
    pub fn try_acquire_slot(&mut self, owner: Owner) -> Option<ReadBuffer> {
        if self.region.is_none() || self.free.is_empty() {
            return None;
        }
        Some(self.acquire(owner))
    }

    /// The connection's buffer, taken now if it has none.
    pub fn ensure<'a>(
        &mut self,
        buf: &'a mut Option<ReadBuffer>,
        owner: Owner,
    ) -> &'a mut ReadBuffer {
        buf.get_or_insert_with(|| self.acquire(owner))
    }

    /// A fixed-mode pool: map `count` slots of `buffer_size` bytes and
    /// register them with `ring`. On failure the caller falls back to heap.
    pub fn fixed(
        ring: &crate::ring::Ring,
        buffer_size: usize,
        count: usize,
        metrics: Arc<Metrics>,
        worker: usize,
    ) -> Result<BufferPool, RegisterError> {
        let region = FixedRegion::map_and_register(ring, buffer_size, count)?;
        let wm = metrics.worker(worker);
        wm.read_buffers_total
            .store(count as u64, std::sync::atomic::Ordering::Relaxed);
        wm.read_buffers_free
            .store(count as i64, std::sync::atomic::Ordering::Relaxed);
        // Hand out low indexes first (pop from the end).
        let free = (0..count as u16).rev().collect();
        Ok(BufferPool {
            region: Some(region),
            ring: None,
            free,
            spare: Vec::new(),
            buffer_size,
            large_size: 0,
            large_out: 0,
            large_spare: Vec::new(),
            metrics,
            worker,
        })
    }

    pub fn mode(&self) -> BufferMode {
        if self.region.is_some() {
            BufferMode::Fixed
        } else if self.ring.is_some() {
            BufferMode::Ring
        } else {
            BufferMode::Heap
        }
    }

    pub fn total(&self) -> usize {
        self.region.as_ref().map_or(0, |r| r.count())
    }

    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// A buffer for a new connection. Never blocks and never fails: an
    /// exhausted fixed pool hands out a heap buffer and counts a fallback.
    pub fn acquire(&mut self, owner: Owner) -> ReadBuffer {
        use std::sync::atomic::Ordering::Relaxed;
        let wm = self.metrics.worker(self.worker);
        let memory = match (&self.region, self.free.pop()) {
            (Some(region), Some(index)) => {
                wm.read_buffers_free.fetch_sub(1, Relaxed);
                Memory::Fixed {
                    index,
                    ptr: region.slot_ptr(index),
                }
            }
            (region, _) => {
                if region.is_some() {
                    wm.heap_fallbacks_total.fetch_add(1, Relaxed);
                }
                // A spare's old bytes are never readable: `filled` is 0.
                Memory::Heap(
                    self.spare
                        .pop()
                        .unwrap_or_else(|| vec![0u8; self.buffer_size].into_boxed_slice()),
                )
            }
        };
        self.count_in_use(owner, 1);
        ReadBuffer {
            memory,
            capacity: self.buffer_size,
            filled: 0,
            wire: 0,
            in_flight: false,
            owner,
            large: false,
        }
    }

    /// Return a buffer. An in-flight buffer is refused and handed back
    /// (rule 1): the caller must wait for its completion first.
    pub fn release(&mut self, mut buf: ReadBuffer) -> Result<(), ReadBuffer> {
        use std::sync::atomic::Ordering::Relaxed;
        if buf.in_flight {
            return Err(buf);
        }
        self.count_in_use(buf.owner, -1);
        let wm = self.metrics.worker(self.worker);
        if buf.large {
            self.large_out -= 1;
            wm.large_read_buffers_in_use.fetch_sub(1, Relaxed);
            if let Memory::Heap(b) = std::mem::replace(&mut buf.memory, Memory::Heap(Box::new([])))
            {
                if self.large_spare.len() < SPARE_LARGE_BUFFERS {
                    self.large_spare.push(b);
                }
            }
            return Ok(());
        }
        match std::mem::replace(&mut buf.memory, Memory::Heap(Box::new([]))) {
            Memory::Fixed { index, .. } => {
                self.free.push(index);
                wm.read_buffers_free.fetch_add(1, Relaxed);
            }
            Memory::Heap(b) => {
                if self.lazy()
                    && self.spare.len() < SPARE_HEAP_BUFFERS
                    && b.len() == self.buffer_size
                {
                    self.spare.push(b);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::{BufferMode, Metrics};

    #[test]
    fn large_reads_grow_shrink_and_are_bounded() {
        let metrics = Metrics::new(1, BufferMode::Heap);
        let mut pool = BufferPool::heap(16, Arc::clone(&metrics), 0).with_large_reads(64);
        let gauge = || {
            let w = metrics.worker(0);
            (
                w.large_read_buffers_in_use
                    .load(std::sync::atomic::Ordering::Relaxed),
                w.read_buffers_in_use_backend
                    .load(std::sync::atomic::Ordering::Relaxed),
            )
        };
        let mut bufs: Vec<Option<ReadBuffer>> = (0..LARGE_BUFFERS_PER_WORKER + 2)
            .map(|_| Some(pool.acquire(Owner::Backend)))
            .collect();
        // Bytes in the buffer: no swap (they would be lost).
        bufs[0].as_mut().unwrap().fill_for_test(b"abc");
        assert!(!pool.grow(&mut bufs[0]));
        bufs[0].as_mut().unwrap().clear();
        let mut grown = 0;
        for b in bufs.iter_mut() {
            grown += usize::from(pool.grow(b));
        }
        assert_eq!(
            grown, LARGE_BUFFERS_PER_WORKER,
            "the cap bounds the large buffers"
        );
        assert_eq!(
            gauge(),
            (LARGE_BUFFERS_PER_WORKER as i64, bufs.len() as i64)
        );
        assert_eq!(bufs[0].as_ref().unwrap().capacity(), 64);
        assert!(bufs[0].as_ref().unwrap().is_large());
        assert_eq!(bufs.last().unwrap().as_ref().unwrap().capacity(), 16);
        // Growing twice does nothing.
        assert!(!pool.grow(&mut bufs[0]));
        for b in bufs.iter_mut() {
            pool.shrink(b);
            assert_eq!(b.as_ref().unwrap().capacity(), 16);
        }
        assert_eq!(gauge(), (0, bufs.len() as i64));
        // A large buffer released directly (a connection closing) counts too.
        assert!(pool.grow(&mut bufs[1]));
        assert!(pool.release(bufs[1].take().unwrap()).is_ok());
        assert_eq!(gauge(), (0, bufs.len() as i64 - 1));
        assert!(pool.large_spare.len() <= SPARE_LARGE_BUFFERS);
        // fit_to_result: a full ordinary read grows, a mid-size read keeps
        // the large buffer, a read smaller than an ordinary buffer shrinks.
        let mut b = Some(pool.acquire(Owner::Backend));
        pool.fit_to_result(&mut b, 16, false);
        assert!(!b.as_ref().unwrap().is_large(), "may_grow false: no grow");
        pool.fit_to_result(&mut b, 16, true);
        assert!(b.as_ref().unwrap().is_large());
        pool.fit_to_result(&mut b, 40, true);
        assert!(b.as_ref().unwrap().is_large(), "a mid-size read keeps it");
        pool.fit_to_result(&mut b, 15, true);
        assert!(!b.as_ref().unwrap().is_large());
        assert!(pool.release(b.take().unwrap()).is_ok());
        // Off when not larger than the ordinary buffers.
        let mut off = BufferPool::heap(16, Arc::clone(&metrics), 0).with_large_reads(16);
        let mut b = Some(off.acquire(Owner::Backend));
        assert!(!off.grow(&mut b));
    }

    #[test]
    fn replace_prefix_keeps_the_rest() {
        let mut pool = BufferPool::heap(16, Metrics::new(1, BufferMode::Heap), 0);
        let mut b = pool.acquire(Owner::Client);
        b.fill_for_test(b"KILL 99|rest");
        assert!(b.replace_prefix(7, b"KILL 123456"));
        assert_eq!(b.filled(), b"KILL 123456|rest");
        assert!(b.replace_prefix(11, b"K1"));
        assert_eq!(b.filled(), b"K1|rest");
        // 12 + 5 > 16: refused, unchanged.
        assert!(!b.replace_prefix(2, b"KILL CONNECT"));
        assert_eq!(b.filled(), b"K1|rest");
        assert!(pool.release(b).is_ok());
    }

    /// Ring mode's keep sites rely on this: an append that does not fit
    /// copies nothing and says so (it never keeps a prefix and drops the
    /// rest), and one that fits exactly keeps every byte.
    #[test]
    fn append_is_all_or_nothing() {
        let mut pool = BufferPool::heap(16, Metrics::new(1, BufferMode::Heap), 0);
        let mut b = pool.acquire(Owner::Backend);
        assert!(b.append(b"0123456789"));
        assert!(!b.append(b"abcdefg"), "10 + 7 > 16");
        assert_eq!(b.filled(), b"0123456789");
        assert!(b.append(b"abcdef"), "10 + 6 = 16");
        assert_eq!(b.filled(), b"0123456789abcdef");
        assert!(!b.append(b"x"));
        assert!(b.append(b""), "nothing always fits");
        assert_eq!(b.filled_len(), 16);
        assert!(pool.release(b).is_ok());
    }
}

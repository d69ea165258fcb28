//! The read-buffer pool: a client or backend connection holds a read
//! buffer while it reads. In `fixed` mode the buffers are slots of one
//! page-aligned region registered with the worker's io_uring; in `heap` mode
//! (or when the fixed pool is exhausted) they are plain heap allocations.
//! Both kinds are used through the same [`ReadBuffer`] type. Backend
//! connections hold theirs for life; in fixed mode an idle logged-in client
//! gives its slot back ([`BufferPool::give_back_empty`]) and takes one again
//! ([`BufferPool::try_acquire_slot`]) when its socket is readable.
//!
//! In `ring` mode ([`provided`]) the relay's reads come from one
//! provided-buffer ring per worker, taken by multishot receives only when
//! bytes arrive. A connection's own [`ReadBuffer`] is then a heap buffer
//! taken only while it is needed: the login phases, the rare bytes that
//! must be kept across reads (a rewritten KILL, a server ERR arriving in
//! pieces, a transaction's first command waiting for a connection), and a
//! plain read when the ring is empty. It goes back to the pool as soon as
//! it is empty and idle ([`BufferPool::lazy`]), so an idle connection holds
//! none; the pool keeps a few spare ones so that this costs no allocation
//! per transaction.
//!
//! # Buffer lifetime rules (the one place they are written down)
//!
//! 1. The kernel may write into or read from a buffer from the moment an SQE
//!    naming it is pushed until that SQE's CQE is reaped. In between, the
//!    memory must stay valid and must not be handed to anyone else.
//! 2. `close()` does not cancel an in-flight operation on a socket (see
//!    shared/notes/io_uring-facts.md). Tear-down is therefore: `shutdown()`
//!    (or ASYNC_CANCEL) → wait for every CQE that names the connection →
//!    return the buffer → `close()`.
//! 3. A reused slot still holds the previous connection's bytes: only the
//!    byte count of a completion says what is valid.
//! 4. Ring mode: a ring buffer (or, with incremental consumption, a piece
//!    of one) is owned by userspace from the CQE that names its id until it
//!    is given back ([`provided::BufRing::put`]): after the send that
//!    forwards it completes, or once its bytes are consumed. It goes back on
//!    the ring only when the kernel is done with it too (no
//!    IORING_CQE_F_BUF_MORE) and no piece of it is held. A piece named by a
//!    send in flight cannot be given back ([`provided::Chunk`] carries the
//!    same in-flight mark as a [`ReadBuffer`]).
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

mod fixed;
mod mapping;
pub mod provided;

use std::os::fd::RawFd;
use std::sync::Arc;

use io_uring::{opcode, types};

use crate::metrics::{BufferMode, Metrics};
use crate::ring::Sqe;
use fixed::FixedRegion;
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
    /// bytes are the decoded plaintext (`proxy::tls_leg`).
    wire: usize,
    in_flight: bool,
    owner: Owner,
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
    /// rare). False, and nothing changed, when it does not fit.
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
    pub fn read_sqe(&mut self, fd: RawFd, user_data: u64) -> Sqe {
        assert!(!self.in_flight, "second operation on a busy buffer");
        let start = self.filled + self.wire;
        assert!(start < self.capacity, "read into a full buffer");
        let len = (self.capacity - start) as u32;
        // SAFETY: `start < capacity`, so the pointer stays inside the buffer.
        let ptr = unsafe { self.base_ptr().add(start) };
        self.in_flight = true;
        let entry = match self.memory {
            Memory::Fixed { index, .. } => opcode::ReadFixed::new(types::Fd(fd), ptr, len, index)
                .offset(SOCKET_OFFSET)
                .build(),
            Memory::Heap(_) => opcode::Read::new(types::Fd(fd), ptr, len)
                .offset(SOCKET_OFFSET)
                .build(),
        };
        // SAFETY: the buffer is now marked in flight: it cannot be released
        // to the pool, its bytes cannot be touched, and dropping it leaks the
        // memory instead of freeing it, until `complete` is called for this
        // operation's (real or synthetic) completion.
        unsafe { Sqe::new(entry.user_data(user_data)) }
    }

    /// SQE that writes `filled()[range]` to `fd`: WRITE_FIXED straight from
    /// the registered slot (no userspace copy), WRITE for a heap buffer.
    pub fn write_sqe(&mut self, fd: RawFd, start: usize, end: usize, user_data: u64) -> Sqe {
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
            Memory::Fixed { index, .. } => opcode::WriteFixed::new(types::Fd(fd), ptr, len, index)
                .offset(SOCKET_OFFSET)
                .build(),
            Memory::Heap(_) => opcode::Write::new(types::Fd(fd), ptr, len)
                .offset(SOCKET_OFFSET)
                .build(),
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
    pub fn write_sqe(&mut self, fd: RawFd, start: usize, user_data: u64) -> Sqe {
        assert!(!self.in_flight && start < self.bytes.len());
        self.in_flight = true;
        let len = (self.bytes.len() - start) as u32;
        // SAFETY: `start < len()`, inside the Vec, which is not touched until
        // `complete` (bytes_mut asserts that).
        let ptr = unsafe { self.bytes.as_ptr().add(start) };
        let entry = opcode::Write::new(types::Fd(fd), ptr, len)
            .offset(SOCKET_OFFSET)
            .build()
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
    metrics: Arc<Metrics>,
    worker: usize,
}

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
            metrics,
            worker,
        }
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
        match owner {
            Owner::Client => wm.read_buffers_in_use_client.fetch_add(1, Relaxed),
            Owner::Backend => wm.read_buffers_in_use_backend.fetch_add(1, Relaxed),
        };
        ReadBuffer {
            memory,
            capacity: self.buffer_size,
            filled: 0,
            wire: 0,
            in_flight: false,
            owner,
        }
    }

    /// Return a buffer. An in-flight buffer is refused and handed back
    /// (rule 1): the caller must wait for its completion first.
    pub fn release(&mut self, mut buf: ReadBuffer) -> Result<(), ReadBuffer> {
        use std::sync::atomic::Ordering::Relaxed;
        if buf.in_flight {
            return Err(buf);
        }
        let wm = self.metrics.worker(self.worker);
        match buf.owner {
            Owner::Client => wm.read_buffers_in_use_client.fetch_sub(1, Relaxed),
            Owner::Backend => wm.read_buffers_in_use_backend.fetch_sub(1, Relaxed),
        };
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
    use crate::metrics::{BufferMode, Metrics};

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
}

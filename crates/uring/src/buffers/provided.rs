//! `--read-buffers ring`: one provided-buffer ring per worker
//! (IORING_REGISTER_PBUF_RING), filled by multishot receives.
//!
//! The kernel picks a buffer only when bytes arrive and names it in the
//! CQE, so an idle connection holds none, and one RecvMulti SQE serves
//! every read of a connection until it ends (IORING_CQE_F_MORE clear).
//! With IOU_PBUF_RING_INC (6.12) the kernel consumes a buffer in pieces: a
//! 40-byte packet takes 40 bytes of a 16 KiB buffer, not all of it, and the
//! next receive (of any connection of the worker) lands right behind it.
//! With IORING_RECVSEND_BUNDLE (6.10) one receive CQE covers several ring
//! buffers, the ones that follow the named buffer in ring order (the
//! kernel takes them from the ring's head): [`BufRing::take`] splits it
//! into one chunk per buffer, from a mirror of which buffer sits in which
//! ring entry, and [`BufRing::join`] merges chunks that lie back to back in
//! memory, so a large result is received and sent in large pieces without
//! a byte copied.
//!
//! Ownership (rule 4 of `buffers`): a piece of a buffer is a [`Chunk`],
//! owned by userspace from the CQE that names it until [`BufRing::put`].
//! A buffer goes back on the ring (a tail update with release ordering)
//! once the kernel is done with it (the CQE without IORING_CQE_F_BUF_MORE;
//! every CQE without IOU_PBUF_RING_INC) and no chunk of it is held.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types};

use super::mapping::Mapping;
use crate::ring::{Ring, SockRef, Sqe};
use crate::sock_op;
use metrics::Metrics;

/// IOU_PBUF_RING_INC (include/uapi/linux/io_uring.h): incremental consumption.
const IOU_PBUF_RING_INC: u16 = 2;

/// The buffer group id of the worker's ring (one ring per io_uring).
pub const BGID: u16 = 0;

/// Why the ring could not be used; the worker then runs in `fixed` mode.
#[derive(Debug, thiserror::Error)]
pub enum RingSetupError {
    #[error("cannot map {bytes} bytes for the buffer ring: {source}")]
    Map { bytes: usize, source: io::Error },
    #[error("this kernel has no provided-buffer rings ({0}); they need Linux 5.19+")]
    NoBufRing(io::Error),
    #[error("this kernel has no multishot receive ({0}); it needs Linux 6.0+")]
    NoRecvMultishot(String),
}

/// A piece of a ring buffer that a CQE filled. Not `Clone`: it is one
/// loan of the buffer, given back with [`BufRing::put`].
#[derive(Debug)]
pub struct Chunk {
    bid: u16,
    off: u32,
    len: u32,
    /// A send names these bytes: the chunk may not be put back yet.
    in_flight: bool,
    /// Incremental ring: the kernel filled its buffer to the end here while
    /// the socket still held bytes (IORING_CQE_F_SOCK_NONEMPTY), so what
    /// follows is in the next chunk: a packet header may be cut in two.
    tail: bool,
}

impl Chunk {
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Ends its buffer with more bytes right behind it in the next chunk.
    pub fn is_tail(&self) -> bool {
        self.tail
    }

    /// Drop the first `n` bytes (they were copied out); the loan is kept.
    /// Only chunks of one buffer are advanced (joined chunks are sent whole).
    pub fn advance(&mut self, n: usize) {
        assert!(!self.in_flight && n <= self.len());
        self.off += n as u32;
        self.len -= n as u32;
    }

    /// The send of this chunk completed (or failed): clear the mark.
    pub fn complete_write(&mut self) {
        debug_assert!(self.in_flight);
        self.in_flight = false;
    }
}

#[derive(Clone, Copy, Default)]
struct BufState {
    /// Bytes of the buffer the kernel has filled (incremental rings).
    consumed: u32,
    /// Chunks of this buffer held by userspace.
    loans: u32,
    /// The kernel finished with the buffer: it goes back on the ring when
    /// the last loan is put.
    kernel_done: bool,
}

/// One worker's provided-buffer ring.
pub struct BufRing {
    entries_map: Mapping,
    bufs: Mapping,
    /// Ring entries: a power of two ≥ `count`.
    mask: u16,
    count: u16,
    size: u32,
    /// Our copy of the tail the kernel reads.
    tail: u16,
    incremental: bool,
    /// Receives take bundles (IORING_RECVSEND_BUNDLE).
    bundle: bool,
    /// [`Self::join`] makes chunks of at most this many bytes.
    join_limit: u32,
    /// Buffers done with, not yet back on the ring: published together in
    /// id order (`hold` of them, or sooner when the ring runs low), so the
    /// ring keeps runs of consecutive ids, which is what lets a bundle's
    /// buffers join into one send. Published as they came back, the ring's
    /// order scrambled within seconds of load (each bundle that ended
    /// inside a run split it for good), and sends per MiB crept from ~15
    /// back towards one per buffer.
    freed: Vec<u16>,
    hold: usize,
    /// The buffer id written into each ring entry (index: tail & mask).
    entry_bid: Vec<u16>,
    /// Where each buffer was last published: the tail value then (a
    /// bundle's buffers are the entries that follow its first one).
    entry_of: Vec<u16>,
    state: Vec<BufState>,
    /// Buffers out of the kernel's hands (done, not yet back on the ring).
    out: usize,
    /// Buffers with a chunk held (the in-use gauge).
    in_use: usize,
    metrics: Arc<Metrics>,
    worker: usize,
}

impl BufRing {
    /// Map `count` buffers of `size` bytes and register them as buffer
    /// group [`BGID`] of `ring`, with incremental consumption where the
    /// kernel has it (one log line when it does not).
    pub fn register(
        ring: &Ring,
        count: u16,
        size: u32,
        metrics: Arc<Metrics>,
        worker: usize,
    ) -> Result<BufRing, RingSetupError> {
        let entries = count.max(1).next_power_of_two();
        let entries_bytes = usize::from(entries) * std::mem::size_of::<types::BufRingEntry>();
        let map = |bytes: usize| {
            Mapping::new(bytes).map_err(|source| RingSetupError::Map { bytes, source })
        };
        let entries_map = map(entries_bytes.max(4096))?;
        let bufs = map(usize::from(count) * size as usize)?;
        let fail = ring.probe_fail();
        let forced = || io::Error::other("probe forced to fail by RINGGATE_DEBUG_PROBE_FAIL");
        if fail.buf_ring {
            return Err(RingSetupError::NoBufRing(forced()));
        }
        let addr = entries_map.base as u64;
        // SAFETY: `entries_map` is page-aligned and holds `entries` entries;
        // it and `bufs` (every address we publish) stay mapped until this
        // BufRing is dropped, after the worker's io_uring (field order).
        let try_flags = |flags| unsafe { ring.register_buf_ring(addr, entries, BGID, flags) };
        let incremental = if fail.pbuf_inc {
            false
        } else {
            try_flags(IOU_PBUF_RING_INC).is_ok()
        };
        if !incremental {
            if worker == 0 {
                tracing::info!(
                    "read-buffer ring without incremental consumption (IOU_PBUF_RING_INC needs \
                     Linux 6.12+): each receive uses up a whole {size}-byte buffer"
                );
            }
            try_flags(0).map_err(RingSetupError::NoBufRing)?;
        }
        let mut r = BufRing {
            entries_map,
            bufs,
            mask: entries - 1,
            count,
            size,
            tail: 0,
            incremental,
            bundle: false,
            join_limit: size,
            freed: Vec::new(),
            // Small rings give every buffer back at once (the tiny-ring test).
            hold: usize::from(count) / 16,
            entry_bid: vec![0; usize::from(entries)],
            entry_of: vec![0; usize::from(count)],
            state: vec![BufState::default(); usize::from(count)],
            out: 0,
            in_use: 0,
            metrics,
            worker,
        };
        for bid in 0..count {
            r.publish(bid);
        }
        r.commit_tail();
        let wm = r.metrics.worker(worker);
        wm.ring_buffers_total
            .store(u64::from(count), Ordering::Relaxed);
        Ok(r)
    }

    pub fn incremental(&self) -> bool {
        self.incremental
    }

    /// Receives take bundles of buffers ([`Self::enable_bundles`]).
    pub fn bundles(&self) -> bool {
        self.bundle
    }

    /// Make receives take bundles where the kernel has them
    /// (IORING_FEAT_RECVSEND_BUNDLE, 6.10; one log line when it does not),
    /// and let a bundle, and a chunk [`Self::join`] builds, hold up to
    /// `join_limit` bytes (a large read's size: `--large-read-size`), but
    /// never more than an eighth of the ring: one receive or send must not
    /// hold the ring every other connection reads through (a bundle takes
    /// as many buffers as the socket has bytes waiting; on a 4-buffer ring
    /// it took all four each time). Before any receive is armed.
    pub fn enable_bundles(&mut self, ring: &Ring, join_limit: u32) {
        let ring_bytes = u64::from(self.count) * u64::from(self.size);
        let eighth = u32::try_from(ring_bytes / 8).unwrap_or(u32::MAX);
        self.join_limit = join_limit.min(eighth).max(self.size);
        self.bundle = ring.recvsend_bundle();
        if !self.bundle {
            self.log_no_bundles("IORING_RECVSEND_BUNDLE needs Linux 6.10+");
        }
    }

    /// Receive without bundles (the kernel refused a capped bundled
    /// receive: the cap needs 6.16+, where a multishot receive takes a
    /// length); one log line.
    pub fn disable_bundles(&mut self, why: &str) {
        self.bundle = false;
        self.log_no_bundles(why);
    }

    fn log_no_bundles(&self, why: &str) {
        if self.worker == 0 {
            tracing::info!(
                "read-buffer ring without bundled receives ({why}): a receive fills at most \
                 one {}-byte buffer",
                self.size
            );
        }
    }

    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// Buffers the kernel can still take from.
    pub fn available(&self) -> usize {
        usize::from(self.count) - self.out
    }

    /// Buffers with bytes userspace still holds.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    fn buf_ptr(&self, bid: u16) -> *mut u8 {
        assert!(bid < self.count);
        // SAFETY: bid < count, so the offset stays inside `bufs`.
        unsafe { self.bufs.base.add(usize::from(bid) * self.size as usize) }
    }

    /// Write buffer `bid` into the ring entry at our tail (not yet visible).
    fn publish(&mut self, bid: u16) {
        let idx = usize::from(self.tail & self.mask);
        let entry = self.entries_map.base.cast::<types::BufRingEntry>();
        // SAFETY: idx ≤ mask < entries, inside `entries_map`. The kernel
        // reads only entries between its head and the published tail, and
        // this one is past the tail until `commit_tail`.
        unsafe {
            let e = &mut *entry.add(idx);
            e.set_addr(self.buf_ptr(bid) as u64);
            e.set_len(self.size);
            e.set_bid(bid);
        }
        self.entry_bid[idx] = bid;
        self.entry_of[usize::from(bid)] = self.tail;
        self.tail = self.tail.wrapping_add(1);
    }

    /// Make published entries visible to the kernel: a release store of the
    /// tail, so the entries' contents are seen before the new tail.
    fn commit_tail(&self) {
        let base = self.entries_map.base.cast::<types::BufRingEntry>();
        // SAFETY: the tail field overlays entry 0's `resv` (the uapi's
        // layout), an aligned u16 inside `entries_map`, which the kernel only
        // reads; AtomicU16 has u16's layout.
        unsafe {
            let tail = types::BufRingEntry::tail(base) as *mut u16;
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }

    /// A receive CQE with `res > 0` bytes: queue the chunks it filled on
    /// `out`, one per ring buffer (several for a bundle). False when the CQE
    /// names no buffer (never for a successful buffer-select recv).
    ///
    /// A bundle's bytes fill the named buffer (from where the kernel left
    /// it, with incremental consumption) and then the buffers of the
    /// following ring entries, each to its end but the last: the kernel
    /// takes them from the ring's head in order (io_ring_buffers_peek), and
    /// `entry_bid` remembers which buffer each entry holds. Every buffer
    /// but the last is finished; the last is finished unless
    /// IORING_CQE_F_BUF_MORE says the kernel goes on filling it.
    pub fn take(&mut self, res: i32, flags: u32, out: &mut VecDeque<Chunk>) -> bool {
        let Some(first) = cqueue::buffer_select(flags) else {
            return false;
        };
        if first >= self.count || res <= 0 {
            return false;
        }
        let mut left = res as u32;
        let mut entry = self.entry_of[usize::from(first)];
        let mut bid = first;
        loop {
            let incremental = self.incremental;
            let size = self.size;
            let st = &mut self.state[usize::from(bid)];
            let off = if incremental { st.consumed } else { 0 };
            let len = left.min(size - off);
            left -= len;
            let last = left == 0;
            if incremental {
                st.consumed += len;
            }
            // Without IOU_PBUF_RING_INC every CQE ends the kernel's use of
            // its buffers; with it, all but a last one with F_BUF_MORE.
            let done = !last || !incremental || !cqueue::buffer_more(flags);
            if done && !st.kernel_done {
                st.kernel_done = true;
                self.out += 1;
            }
            if st.loans == 0 {
                self.in_use += 1;
            }
            st.loans += 1;
            // A cut with more bytes behind it: inside a bundle always; at
            // its end when the socket still had bytes.
            // (Without incremental consumption no chunk is marked, as before
            // bundles.)
            let tail = incremental && (!last || (done && cqueue::sock_nonempty(flags)));
            out.push_back(Chunk {
                bid,
                off,
                len,
                in_flight: false,
                tail,
            });
            if last {
                break;
            }
            entry = entry.wrapping_add(1);
            bid = self.entry_bid[usize::from(entry & self.mask)];
            if bid >= self.count || len == 0 {
                // Cannot happen with the kernel's accounting; stop rather
                // than hand out a buffer that was not filled.
                debug_assert!(false, "bundle ran past the ring");
                break;
            }
        }
        if !self.freed.is_empty() && self.available() < usize::from(self.count) / 4 {
            // The ring runs low: what is held back goes on it now.
            self.flush_freed();
        }
        self.export();
        true
    }

    /// The buffers a chunk spans (one, or several after [`Self::join`]).
    fn span(&self, chunk: &Chunk) -> std::ops::RangeInclusive<u16> {
        let last = (chunk.off + chunk.len.max(1) - 1) / self.size;
        chunk.bid..=chunk.bid + last as u16
    }

    /// `next` starts where `chunk` ends in memory (the next piece of the
    /// same buffer, or the start of the buffer with the next id).
    pub fn adjacent(&self, chunk: &Chunk, next: &Chunk) -> bool {
        let end = u64::from(chunk.bid) * u64::from(self.size) + u64::from(chunk.off + chunk.len);
        let start = u64::from(next.bid) * u64::from(self.size) + u64::from(next.off);
        end == start && !chunk.in_flight && !next.in_flight
    }

    /// Merge `next` into `chunk`, which it follows in memory
    /// ([`Self::adjacent`]): one send then carries both. The merged chunk
    /// holds one loan on every buffer it spans. `next` is handed back when
    /// it does not follow, or the merged chunk would pass the join limit.
    pub fn join(&mut self, chunk: &mut Chunk, next: Chunk) -> Result<(), Chunk> {
        if !self.adjacent(chunk, &next) || chunk.len + next.len > self.join_limit {
            return Err(next);
        }
        if self.span(chunk).end() == &next.bid {
            // Both held a loan on the buffer where they meet: keep one.
            let st = &mut self.state[usize::from(next.bid)];
            debug_assert!(st.loans >= 2);
            st.loans -= 1;
        }
        chunk.len += next.len;
        chunk.tail = next.tail;
        Ok(())
    }

    /// The bytes of a held chunk.
    pub fn bytes(&self, chunk: &Chunk) -> &[u8] {
        assert!(usize::from(*self.span(chunk).end()) < usize::from(self.count));
        // SAFETY: the chunk is a loan of bytes the kernel wrote and will not
        // write again until its buffers are back on the ring, which needs
        // this loan put first; `off + len` stays inside the buffers it spans
        // (the kernel's byte count; a joined chunk spans buffers with
        // consecutive ids, which lie back to back in `bufs`).
        unsafe {
            std::slice::from_raw_parts(self.buf_ptr(chunk.bid).add(chunk.off as usize), chunk.len())
        }
    }

    /// The bytes of a held chunk, to edit in place before they are sent
    /// (the relay strips session-state blocks a client did not ask for).
    pub fn bytes_mut(&mut self, chunk: &Chunk) -> &mut [u8] {
        assert!(usize::from(*self.span(chunk).end()) < usize::from(self.count));
        assert!(!chunk.in_flight, "chunk edited while a send reads it");
        // SAFETY: as in `bytes`: the kernel will not write these bytes until
        // the loan is put back, and no send reads them (not in flight).
        // `&mut self` keeps any other view of the ring's bytes from living
        // as long as this one; a buffer two chunks share is shared at
        // different offsets, and this slice covers only this chunk's.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.buf_ptr(chunk.bid).add(chunk.off as usize),
                chunk.len(),
            )
        }
    }

    /// Give a chunk back. An in-flight chunk is refused (rule 1) and
    /// handed back.
    pub fn put(&mut self, chunk: Chunk) -> Result<(), Chunk> {
        if chunk.in_flight {
            return Err(chunk);
        }
        for bid in self.span(&chunk) {
            let st = &mut self.state[usize::from(bid)];
            debug_assert!(st.loans > 0);
            st.loans = st.loans.saturating_sub(1);
            if st.loans == 0 {
                self.in_use -= 1;
                if st.kernel_done {
                    *st = BufState::default();
                    self.freed.push(bid);
                }
            }
        }
        if !self.freed.is_empty()
            && (self.freed.len() >= self.hold || self.available() < usize::from(self.count) / 4)
        {
            self.flush_freed();
        }
        self.export();
        Ok(())
    }

    /// Put the buffers done with back on the ring, in id order.
    fn flush_freed(&mut self) {
        let mut freed = std::mem::take(&mut self.freed);
        freed.sort_unstable();
        for &bid in &freed {
            self.out -= 1;
            self.publish(bid);
        }
        self.commit_tail();
        freed.clear();
        self.freed = freed;
    }

    fn export(&self) {
        let wm = self.metrics.worker(self.worker);
        wm.ring_buffers_in_use
            .store(self.in_use as i64, Ordering::Relaxed);
    }

    /// SQE that sends `chunk[start..end]` to `fd`, straight from the ring
    /// buffer. The chunk is in flight until [`Chunk::complete_write`].
    pub fn send_sqe(
        &self,
        chunk: &mut Chunk,
        fd: SockRef,
        start: usize,
        end: usize,
        user_data: u64,
    ) -> Sqe {
        assert!(!chunk.in_flight, "second send of a chunk");
        assert!(start < end && end <= chunk.len(), "send beyond the chunk");
        let ptr = self.bytes(chunk)[start..].as_ptr();
        chunk.in_flight = true;
        let entry = sock_op!(fd, |t| opcode::Send::new(t, ptr, (end - start) as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build())
        .user_data(user_data);
        // SAFETY: the chunk is marked in flight, so `put` refuses it and
        // the buffer cannot go back to the kernel (which would overwrite
        // these bytes) until the send's (real or synthetic) completion.
        unsafe { Sqe::new(entry) }
    }

    /// A multishot receive on `fd` that takes buffers from this ring.
    /// With bundles, each CQE covers as many buffers as the bytes waiting
    /// in the socket fill, up to the join limit.
    pub fn recv_multi_sqe(&self, fd: SockRef, user_data: u64) -> Sqe {
        let entry = if self.bundle {
            let mut e = sock_op!(fd, |t| opcode::RecvMultiBundle::new(t, BGID).build());
            // The io-uring crate has no length for it: the SQE's `len`
            // (offset 24 of the uapi's io_uring_sqe; `Entry` is that struct,
            // repr(C)) caps the bytes of each CQE (6.16+; older kernels
            // refuse it, and the probe then turns bundles off).
            // The offset holds only while `Entry` is the 64-byte SQE itself.
            const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);
            let len_at = (&mut e as *mut squeue::Entry).cast::<u8>();
            // SAFETY: offset 24..28 is `len` (u32) inside the 64-byte SQE.
            unsafe {
                len_at
                    .add(24)
                    .cast::<u32>()
                    .write_unaligned(self.join_limit)
            };
            e
        } else {
            sock_op!(fd, |t| opcode::RecvMulti::new(t, BGID).build())
        }
        .user_data(user_data);
        // SAFETY: the only memory the receive can name is the registered
        // ring's buffers, which stay mapped until after the io_uring is
        // dropped; each CQE hands its piece to userspace as a `Chunk`.
        unsafe { Sqe::new(entry) }
    }

    /// Check that multishot receive works (6.0+): arm one on a socketpair
    /// with a byte waiting, see its CQE keep the receive armed, then end it.
    /// Runs on the worker's ring before anything else is submitted.
    pub fn probe_recv_multishot(&mut self, ring: &mut Ring) -> Result<(), RingSetupError> {
        use crate::ring::{ops, OpTag, Token};
        let bad = |why: String| RingSetupError::NoRecvMultishot(why);
        if ring.probe_fail().recv_multishot {
            return Err(bad(
                "probe forced to fail by RINGGATE_DEBUG_PROBE_FAIL".into()
            ));
        }
        let (a, b) = socket2::Socket::pair(socket2::Domain::UNIX, socket2::Type::STREAM, None)
            .map_err(|e| bad(format!("socketpair: {e}")))?;
        b.send(b"x").map_err(|e| bad(format!("write: {e}")))?;
        use std::os::fd::AsRawFd;
        let recv = Token::new(OpTag::Ignore, u32::MAX, 1);
        ring.push(self.recv_multi_sqe(a.as_raw_fd().into(), recv.into()));
        static TIMEOUT: types::Timespec = types::Timespec::new().sec(2);
        let timer = Token::new(OpTag::Ignore, u32::MAX, 2);
        ring.push(ops::timeout(&TIMEOUT, timer));
        let mut first: Option<(i32, u32)> = None;
        let mut ended = false;
        let mut batch = Vec::new();
        while !ended {
            ring.submit_and_wait()
                .map_err(|e| bad(format!("io_uring_enter: {e}")))?;
            batch.clear();
            ring.reap(&mut batch);
            for c in &batch {
                if c.user_data == u64::from(timer) {
                    ended = true;
                } else if c.user_data == u64::from(recv) {
                    if c.result > 0 {
                        let mut chunks = VecDeque::new();
                        self.take(c.result, c.flags, &mut chunks);
                        for chunk in chunks {
                            let _ = self.put(chunk);
                        }
                    }
                    if first.is_none() {
                        first = Some((c.result, c.flags));
                        // End the receive: EOF completes it without F_MORE.
                        let _ = b.shutdown(std::net::Shutdown::Both);
                        let _ = a.shutdown(std::net::Shutdown::Both);
                    }
                    if !cqueue::more(c.flags) {
                        ended = true;
                    }
                }
            }
        }
        // Let the timer go: its completion (or -ENOENT) is ignored.
        ring.push(ops::cancel_user_data(
            timer.into(),
            Token::new(OpTag::Ignore, 0, 0),
        ));
        match first {
            Some((res, flags)) if res > 0 && cqueue::more(flags) => Ok(()),
            Some((res, _)) if res < 0 => Err(bad(io::Error::from_raw_os_error(-res).to_string())),
            Some(_) => Err(bad("the receive did not stay armed".into())),
            None => Err(bad("no completion within 2 s".into())),
        }
    }
}

/// What a connection's socket received through the ring and the relay has
/// not consumed yet, in order (the tracker must see bytes in order, and a
/// multishot may deliver several CQEs before a forward completes; the ring
/// itself bounds the queue). `End` is how the driver words the receive's
/// end (the ring only asks whether there is one).
pub struct RingRecv<End> {
    /// The multishot receive is armed (an operation names the fd).
    pub armed: bool,
    /// `user_data` of the armed receive, for a cancel.
    pub user_data: u64,
    /// Received, not yet handed to the machine.
    pub queue: VecDeque<Chunk>,
    /// How the receive ended (EOF, an error, a cancel), handed over once
    /// the queue is empty. ENOBUFS is not an end: the receive is re-armed
    /// (`starved`).
    pub end: Option<End>,
    /// The last receive ended with -ENOBUFS: the kernel found the ring
    /// empty when it went to take a buffer. Its re-arm waits for the end
    /// of the worker's batch of completions, one starved receive per batch
    /// (`Worker::ring_rearm_starved`): re-armed at once, it raced every
    /// other starved receive for the few buffers back, and one receive
    /// with a full socket takes them all (a multishot receive goes on
    /// while the socket stays non-empty), so the rest failed at once and
    /// were re-armed again, a busy loop.
    pub starved: bool,
    /// In the worker's queue of starved receives waiting for their re-arm.
    pub rearm_queued: bool,
    /// The armed receive has delivered bytes (one that -ENOBUFS ends
    /// without any was armed for nothing).
    pub took: bool,
    /// The chunk handed to the machine, until forwarded or consumed.
    pub current: Option<Chunk>,
    /// The machine asked for bytes and got none yet.
    pub waiting: bool,
    /// Who reads from this socket now: a backend's session, as (slab
    /// index, generation).
    pub owner: Option<(u32, u32)>,
    /// A backend's session gave it back cleanly while the receive was
    /// still armed: it is being cancelled, and the driver hands the
    /// connection on at its last CQE.
    pub release_pending: bool,
    /// The relay cancelled its read while this receive was armed. If the
    /// receive ends another way before the cancel reaches it (-ENOBUFS:
    /// the ring ran dry), that end is the cancel's: the cancel then finds
    /// nothing to cancel, and a re-armed receive would be one nobody
    /// cancels, on a connection idle between commands (the relay would
    /// wait for its -ECANCELED forever).
    pub cancelling: bool,
}

// By hand: a derive would ask `End: Default`, and an end starts as none.
impl<End> Default for RingRecv<End> {
    fn default() -> Self {
        RingRecv {
            armed: false,
            user_data: 0,
            queue: VecDeque::new(),
            end: None,
            starved: false,
            rearm_queued: false,
            took: false,
            current: None,
            waiting: false,
            owner: None,
            release_pending: false,
            cancelling: false,
        }
    }
}

impl<End> RingRecv<End> {
    /// Nothing the kernel holds names this socket's ring state.
    pub fn quiescent(&self) -> bool {
        !self.armed && !self.current.as_ref().is_some_and(Chunk::in_flight)
    }

    /// Has bytes or an end to hand over now.
    pub fn ready(&self) -> bool {
        !self.queue.is_empty() || self.end.is_some()
    }

    /// Nothing queued: give the queue's capacity back (an idle connection
    /// keeps none).
    pub fn shrink_idle(&mut self) {
        if self.queue.is_empty() {
            self.queue = VecDeque::new();
        }
    }

    /// Give every chunk not in flight back to `ring`.
    pub fn drain_into(&mut self, ring: &mut BufRing) {
        for c in self.queue.drain(..) {
            let _ = ring.put(c);
        }
        if let Some(c) = self.current.take() {
            if let Err(c) = ring.put(c) {
                self.current = Some(c);
            }
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        let wm = self.metrics.worker(self.worker);
        wm.ring_buffers_in_use.store(0, Ordering::Relaxed);
        wm.ring_buffers_total.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{DebugKnobs, OpTag, Token};
    use metrics::BufferMode;
    use std::os::fd::AsRawFd;

    /// The one chunk a CQE without a bundle filled.
    fn take1(br: &mut BufRing, res: i32, flags: u32) -> Chunk {
        let mut q = VecDeque::new();
        assert!(br.take(res, flags, &mut q), "a buffer");
        assert_eq!(q.len(), 1, "one buffer");
        q.pop_front().unwrap()
    }

    /// Receive `want` CQEs of the multishot `recv`.
    fn cqes(ring: &mut Ring, recv: u64, want: usize) -> Vec<(i32, u32)> {
        let mut got = Vec::new();
        let mut batch = Vec::new();
        while got.len() < want {
            ring.submit_and_wait().expect("io_uring_enter");
            batch.clear();
            ring.reap(&mut batch);
            got.extend(
                batch
                    .iter()
                    .filter(|c| c.user_data == recv)
                    .map(|c| (c.result, c.flags)),
            );
        }
        got
    }

    /// Real kernel: a multishot receive fills the ring; with incremental
    /// consumption two small receives share one buffer, back to back; each
    /// chunk reads exactly what was sent; the buffer is in use until every
    /// chunk is put, and a chunk whose send is in flight is refused.
    #[test]
    fn chunks_carry_the_bytes_and_every_buffer_comes_back() {
        let mut ring = Ring::with_knobs(8, 16, DebugKnobs::default()).expect("ring");
        let metrics = Metrics::new(1, BufferMode::Ring);
        let mut br = BufRing::register(&ring, 4, 4096, metrics.clone(), 0).expect("buffer ring");
        let (a, b) = socket2::Socket::pair(socket2::Domain::UNIX, socket2::Type::STREAM, None)
            .expect("socketpair");
        let recv = u64::from(Token::new(OpTag::Ignore, 7, 1));
        ring.push(br.recv_multi_sqe(a.as_raw_fd().into(), recv));
        b.send(b"hello").unwrap();
        let first = cqes(&mut ring, recv, 1);
        b.send(b"world!").unwrap();
        let second = cqes(&mut ring, recv, 1);
        let (r1, f1) = first[0];
        let (r2, f2) = second[0];
        assert!(
            cqueue::more(f1) && cqueue::more(f2),
            "the receive stays armed"
        );
        let mut c1 = take1(&mut br, r1, f1);
        let c2 = take1(&mut br, r2, f2);
        assert_eq!(br.bytes(&c1), b"hello");
        assert_eq!(br.bytes(&c2), b"world!");
        if br.incremental() {
            assert_eq!((c1.bid, c1.off), (c2.bid, 0), "first piece of its buffer");
            assert_eq!(c2.off, 5, "the second receive lands right behind the first");
            assert_eq!(br.in_use(), 1);
        } else {
            assert_ne!(c1.bid, c2.bid);
            assert_eq!(br.in_use(), 2);
        }
        assert_eq!(metrics.snapshot().ring_buffers_in_use, br.in_use() as i64);
        // A chunk named by a send in flight cannot go back.
        let _send = br.send_sqe(&mut c1, b.as_raw_fd().into(), 0, 5, 0);
        let mut c1 = br.put(c1).expect_err("in flight");
        c1.complete_write();
        br.put(c1).unwrap();
        br.put(c2).unwrap();
        assert_eq!(br.in_use(), 0);
        assert_eq!(metrics.snapshot().ring_buffers_in_use, 0);
        assert_eq!(br.available(), 4, "a partly used buffer stays the kernel's");
        // End the receive: EOF, without F_MORE.
        drop(b);
        let end = cqes(&mut ring, recv, 1);
        assert_eq!(end[0].0, 0);
        assert!(!cqueue::more(end[0].1));
    }

    /// A ring with one buffer of 4 KiB and incremental consumption turned
    /// off (its probe forced to fail), so a receive takes the whole buffer.
    fn one_buffer_ring_without_incremental() -> (Ring, BufRing) {
        let ring = Ring::with_knobs(
            8,
            16,
            DebugKnobs {
                probe_fail: crate::ring::ProbeFail {
                    pbuf_inc: true,
                    ..Default::default()
                },
                ..DebugKnobs::default()
            },
        )
        .expect("ring");
        let br =
            BufRing::register(&ring, 1, 4096, Metrics::new(1, BufferMode::Ring), 0).expect("ring");
        (ring, br)
    }

    /// A ring of 1 buffer without incremental consumption: the second
    /// receive finds it empty and ends with -ENOBUFS; once the buffer is
    /// back a new receive gets the bytes that waited in the socket.
    #[test]
    fn an_empty_ring_ends_the_receive_with_enobufs_and_loses_nothing() {
        let (mut ring, mut br) = one_buffer_ring_without_incremental();
        assert!(!br.incremental());
        let (a, b) = socket2::Socket::pair(socket2::Domain::UNIX, socket2::Type::STREAM, None)
            .expect("socketpair");
        let recv = u64::from(Token::new(OpTag::Ignore, 8, 1));
        ring.push(br.recv_multi_sqe(a.as_raw_fd().into(), recv));
        b.send(b"one").unwrap();
        let (r, f) = cqes(&mut ring, recv, 1)[0];
        let c = take1(&mut br, r, f);
        assert_eq!(br.available(), 0);
        b.send(b"two").unwrap();
        let (r2, f2) = cqes(&mut ring, recv, 1)[0];
        assert_eq!(r2, -libc::ENOBUFS);
        assert!(!cqueue::more(f2), "ENOBUFS ends the multishot");
        br.put(c).unwrap();
        assert_eq!(br.available(), 1);
        let recv2 = u64::from(Token::new(OpTag::Ignore, 9, 1));
        ring.push(br.recv_multi_sqe(a.as_raw_fd().into(), recv2));
        let (r3, f3) = cqes(&mut ring, recv2, 1)[0];
        let c3 = take1(&mut br, r3, f3);
        assert_eq!(br.bytes(&c3), b"two", "the bytes waited in the socket");
        br.put(c3).unwrap();
        drop(b);
        cqes(&mut ring, recv2, 1);
    }

    /// The kernel takes a buffer before it reads the socket: a receive
    /// issued while the ring is empty ends with -ENOBUFS at once, although
    /// no byte waits. So -ENOBUFS says nothing about the socket (a
    /// backend given back whose receive ends that way may be clean), and a
    /// starved receive re-armed before a buffer is back fails again.
    #[test]
    fn a_receive_issued_on_an_empty_ring_ends_with_enobufs_with_no_byte_waiting() {
        let (mut ring, mut br) = one_buffer_ring_without_incremental();
        let (a, b) = socket2::Socket::pair(socket2::Domain::UNIX, socket2::Type::STREAM, None)
            .expect("socketpair");
        let (c, d) = socket2::Socket::pair(socket2::Domain::UNIX, socket2::Type::STREAM, None)
            .expect("socketpair");
        // Another socket's receive takes the only buffer.
        let other = u64::from(Token::new(OpTag::Ignore, 10, 1));
        ring.push(br.recv_multi_sqe(c.as_raw_fd().into(), other));
        d.send(b"held").unwrap();
        let (r, f) = cqes(&mut ring, other, 1)[0];
        let held = take1(&mut br, r, f);
        assert_eq!(br.available(), 0);
        // An idle socket's receive, issued now: no byte waits on `a`.
        let idle = u64::from(Token::new(OpTag::Ignore, 11, 1));
        ring.push(br.recv_multi_sqe(a.as_raw_fd().into(), idle));
        let (r2, f2) = cqes(&mut ring, idle, 1)[0];
        assert_eq!(r2, -libc::ENOBUFS, "ended at once, with nothing to read");
        assert!(!cqueue::more(f2));
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        let peek = a.recv_with_flags(&mut probe, libc::MSG_PEEK | libc::MSG_DONTWAIT);
        assert_eq!(
            peek.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::WouldBlock),
            "the socket is as it was"
        );
        br.put(held).unwrap();
        drop((b, d));
        cqes(&mut ring, other, 1);
    }

    /// A connected TCP pair on loopback (bundles follow the bytes waiting
    /// in the socket, as on the proxy's sockets).
    fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).expect("connect");
        let (b, _) = l.accept().expect("accept");
        (a, b)
    }

    /// A ring of 16 buffers of 4 KiB with bundled receives (this kernel
    /// has them: 6.10+) and incremental consumption (6.12+); bundles and
    /// joins are capped at an eighth of the ring, 8 KiB.
    fn bundle_ring() -> (Ring, BufRing) {
        let ring = Ring::with_knobs(8, 64, DebugKnobs::default()).expect("ring");
        let mut br =
            BufRing::register(&ring, 16, 4096, Metrics::new(1, BufferMode::Ring), 0).expect("ring");
        br.enable_bundles(&ring, 1 << 20);
        assert!(br.bundles() && br.incremental(), "6.12+ kernel");
        assert_eq!(br.join_limit, 8192);
        (ring, br)
    }

    /// Receive CQEs of `recv` until `want` bytes have come, each split
    /// into its chunks; also how many CQEs covered more than one buffer.
    fn bundle_bytes(
        ring: &mut Ring,
        br: &mut BufRing,
        recv: u64,
        want: usize,
    ) -> (VecDeque<Chunk>, usize) {
        let mut q = VecDeque::new();
        let (mut got, mut bundles) = (0, 0);
        while got < want {
            // One wait may reap several CQEs.
            for (r, f) in cqes(ring, recv, 1) {
                assert!(r > 0 && cqueue::more(f), "bytes, receive armed: {r}");
                let before = q.len();
                assert!(br.take(r, f, &mut q));
                bundles += usize::from(q.len() - before > 1);
                got += r as usize;
            }
        }
        assert_eq!(got, want);
        (q, bundles)
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8 ^ seed).collect()
    }

    /// Real kernel (6.18): a bundled multishot receive on an incremental
    /// ring goes on in the buffer a small receive left partly used (at its
    /// offset), fills the next ring buffers, and keeps the last one for
    /// the next receive (IORING_CQE_F_BUF_MORE): bundles and incremental
    /// consumption work together. The SQE's length caps each CQE (6.16+).
    /// Ring order is bid order here, so the pieces join into chunks of up
    /// to the cap (a send each), and every buffer comes back.
    #[test]
    fn a_bundle_continues_a_partly_used_buffer_and_its_pieces_join() {
        use std::io::Write;
        let (mut ring, mut br) = bundle_ring();
        let (a, mut b) = tcp_pair();
        let recv = u64::from(Token::new(OpTag::Ignore, 12, 1));
        ring.push(br.recv_multi_sqe(a.as_raw_fd().into(), recv));
        b.write_all(&[7; 100]).unwrap();
        let (small, _) = bundle_bytes(&mut ring, &mut br, recv, 100);
        assert_eq!((small[0].bid, small[0].off, small[0].len), (0, 0, 100));
        for c in small {
            br.put(c).unwrap();
        }
        let data = pattern(3 * 4096, 1);
        b.write_all(&data).unwrap();
        let (mut q, bundles) = bundle_bytes(&mut ring, &mut br, recv, data.len());
        assert!(bundles >= 1, "one CQE covered several buffers");
        assert_eq!(
            (q[0].bid, q[0].off),
            (0, 100),
            "the bundle goes on where the small receive left buffer 0"
        );
        let last = q.back().unwrap();
        assert_eq!((last.bid, last.off, last.len), (3, 0, 100));
        assert_eq!(br.available(), 13, "buffer 3 is still the kernel's");
        assert_eq!(br.in_use(), 4);
        let mut seen = Vec::new();
        let mut sends = 0;
        while let Some(mut cur) = q.pop_front() {
            while let Some(next) = q.pop_front() {
                if let Err(next) = br.join(&mut cur, next) {
                    q.push_front(next);
                    break;
                }
            }
            assert!(cur.len() <= 8192, "joined beyond the cap");
            seen.extend_from_slice(br.bytes(&cur));
            sends += 1;
            let n = cur.len();
            let _send = br.send_sqe(&mut cur, b.as_raw_fd().into(), 0, n, 0);
            let mut cur = br.put(cur).expect_err("in flight");
            cur.complete_write();
            br.put(cur).unwrap();
        }
        assert_eq!(seen, data, "every byte in order");
        assert_eq!(sends, 2, "12 KiB in 8 KiB pieces");
        assert_eq!((br.in_use(), br.available()), (0, 16));
        drop(b);
        cqes(&mut ring, recv, 1);
    }

    /// Real kernel: a bundle's buffers are the ring entries after the one
    /// the CQE names, which are not consecutive ids once buffers come back
    /// out of order: the mirror of the ring hands out the right buffers,
    /// and pieces that are not back to back in memory do not join.
    #[test]
    fn a_bundle_follows_ring_order_not_buffer_ids() {
        use std::io::Write;
        let (mut ring, mut br) = bundle_ring();
        let (a, mut b) = tcp_pair();
        let recv = u64::from(Token::new(OpTag::Ignore, 13, 1));
        ring.push(br.recv_multi_sqe(a.as_raw_fd().into(), recv));
        let first = pattern(16 * 4096, 2);
        b.write_all(&first).unwrap();
        let (q, _) = bundle_bytes(&mut ring, &mut br, recv, first.len());
        let mut held: Vec<Option<Chunk>> = (0..16).map(|_| None).collect();
        let mut seen = Vec::new();
        for c in q {
            seen.extend_from_slice(br.bytes(&c));
            let bid = usize::from(c.bid);
            held[bid] = Some(c);
        }
        assert_eq!(seen, first);
        assert_eq!(br.available(), 0);
        // Back on the ring as 15, 14, ..., 0 (one at a time: `hold` is 1).
        for bid in (0..16).rev() {
            br.put(held[bid].take().expect("one chunk per buffer"))
                .unwrap();
        }
        let second = pattern(16 * 4096, 3);
        b.write_all(&second).unwrap();
        let (q, bundles) = bundle_bytes(&mut ring, &mut br, recv, second.len());
        assert!(bundles >= 1, "one CQE covered several buffers");
        let bids: Vec<u16> = q.iter().map(|c| c.bid).collect();
        assert_eq!(bids, (0..16).rev().collect::<Vec<u16>>(), "ring order");
        let mut seen = Vec::new();
        let mut q = q;
        let mut cur = q.pop_front().unwrap();
        while let Some(next) = q.pop_front() {
            seen.extend_from_slice(br.bytes(&cur));
            cur = match br.join(&mut cur, next) {
                Ok(()) => panic!("descending ids are not back to back"),
                Err(next) => {
                    br.put(cur).unwrap();
                    next
                }
            };
        }
        seen.extend_from_slice(br.bytes(&cur));
        br.put(cur).unwrap();
        assert_eq!(seen, second);
        assert_eq!((br.in_use(), br.available()), (0, 16));
        drop(b);
        cqes(&mut ring, recv, 1);
    }

    /// Bundles forced off (`ProbeFail::bundle`): receives fill one buffer
    /// each, as before 6.10.
    #[test]
    fn bundles_forced_off_receive_one_buffer_per_cqe() {
        use std::io::Write;
        let ring = Ring::with_knobs(
            8,
            16,
            DebugKnobs {
                probe_fail: crate::ring::ProbeFail {
                    bundle: true,
                    ..Default::default()
                },
                ..DebugKnobs::default()
            },
        )
        .expect("ring");
        let mut ring = ring;
        let mut br =
            BufRing::register(&ring, 4, 4096, Metrics::new(1, BufferMode::Ring), 0).expect("ring");
        br.enable_bundles(&ring, 1 << 20);
        assert!(!br.bundles());
        let (a, mut b) = tcp_pair();
        let recv = u64::from(Token::new(OpTag::Ignore, 14, 1));
        ring.push(br.recv_multi_sqe(a.as_raw_fd().into(), recv));
        let data = pattern(3 * 4096, 4);
        b.write_all(&data).unwrap();
        let (q, bundles) = bundle_bytes(&mut ring, &mut br, recv, data.len());
        assert_eq!(bundles, 0);
        assert_eq!(q.len(), 3);
        for c in q {
            br.put(c).unwrap();
        }
        drop(b);
        cqes(&mut ring, recv, 1);
    }
}

//! Fixed mode: a busy connection keeps its slot and a plain READ_FIXED
//! pending between commands; only one that stays idle for [`HOT_IDLE`]
//! gives the slot back and waits on a poll: idle connections still hold no
//! slot, and busy ones do not pay a wake-up per query for it.
//!
//! Waiting on a poll between commands (`idle_io.rs`, `idle_backend_io.rs`)
//! costs every query a readiness completion before each read: at c=1 one
//! more `io_uring_enter` per leg than a read held across the wait
//! (docs/benchmarks.md). A client's next command, and a backend's answer,
//! usually follow soon, so the read is kept *hot*:
//! - Client leg: once the client has sent a command (`HotReads::
//!   client_active`), its next read keeps the slot and is a plain
//!   READ_FIXED. A freshly logged-in client, which may never send anything,
//!   waits on the poll from its first read (a connect storm holds no
//!   slots).
//! - Backend leg: the relay's read of the backend keeps the slot it has
//!   (the buffer the answer was read into). One that waits on the poll
//!   without a slot (the connection was idle) becomes a READ_FIXED as soon
//!   as a command is written to the backend, submitted just before the
//!   write: the answer is imminent. Both take only a free slot; with none
//!   free they stay on the poll, whose wake-up then reads into a heap
//!   buffer at once.
//! - A read (either leg) still pending on an empty buffer [`HOT_IDLE`]
//!   after it was submitted is cancelled (`OpTag::ClientReadCool`,
//!   `OpTag::DownReadCool`). The reads are checked in submission order
//!   (`Worker::hot_queue`) after every batch of completions, which costs
//!   a busy worker no wake-up; a quiet worker checks at its tick, so there
//!   a read is cancelled after 10–100 ms. The interval bounds the slots
//!   that clients running one query now and then hold: about the query
//!   rate times [`HOT_IDLE`]. A cancelled socket read
//!   consumed nothing and completes with -ECANCELED: the connection gives
//!   its slot back and waits on a poll as an idle one always did. A read
//!   that completed with data first (the race every cancel has) is handled
//!   as any read; the cancel then finds nothing (-ENOENT).
//! - Failure-safe: a cancel that fails (or never reached the kernel: a
//!   failed push comes back as a synthetic error) leaves the read pending
//!   and valid, holding its slot; it is tried again [`HOT_IDLE`] later. A closing
//!   session's read completes through the closing path whatever ended it;
//!   a relay that cancels its own backend read gets its -ECANCELED as
//!   before.
//!
//! The polls are one-shot (`idle_io.rs` says why): armed only when the
//! connection goes idle (about once per idle period, beside the cancel),
//! ended by their one wake-up; shutting the socket down ends one at close.

use std::sync::atomic::Ordering::Relaxed;

use super::idle_io::IdleWait;
use super::read_path::{client_layers, Layers};
use super::*;

/// How long a read may stay pending on an empty buffer before the
/// connection counts as idle and gives its slot back. Busy clients send
/// their next command well within it (a round trip on a LAN is tens of
/// µs); a client idle for longer pays a cancel, a poll and one more
/// wake-up when it comes back (docs/benchmarks.md has the measurements).
pub(super) const HOT_IDLE: Duration = Duration::from_millis(10);

/// Which of a session's reads a [`HotEntry`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Leg {
    Client,
    Down,
}

/// A hot read submitted at `at`, checked once [`HOT_IDLE`] has passed;
/// `seq` tells whether it is still the session's pending read.
#[derive(Clone, Copy, Debug)]
pub(super) struct HotEntry {
    sid: SessionId,
    leg: Leg,
    seq: u32,
    at: Instant,
}

/// A session's hot reads: which read is pending (by sequence number), and
/// whether the worker is cancelling it because it went idle.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct HotReads {
    /// The sequence number of the last client read submitted.
    client_seq: u32,
    /// A client read is pending (not yet completed).
    client_pending: bool,
    /// Its cancel was sent ([`OpTag::ClientReadCool`]).
    client_cooling: bool,
    /// The client sent a command since it last went idle: its next read
    /// keeps the slot.
    client_active: bool,
    /// The same for the relay's read of the backend (a read in the
    /// kernel, not a wait on the poll).
    down_seq: u32,
    down_pending: bool,
    /// Its cancel was sent ([`OpTag::DownReadCool`]).
    down_cooling: bool,
    /// A command was written to the backend and no backend read was
    /// submitted since: the next one expects an answer and takes a slot.
    command_sent: bool,
}

impl HotReads {
    /// A read of `leg` was submitted: it is pending, under a new sequence
    /// number (returned), so that entries of earlier reads are stale.
    fn submitted(&mut self, leg: Leg) -> u32 {
        let (seq, pending) = match leg {
            Leg::Client => (&mut self.client_seq, &mut self.client_pending),
            Leg::Down => (&mut self.down_seq, &mut self.down_pending),
        };
        *seq = seq.wrapping_add(1);
        *pending = true;
        *seq
    }
}

impl HotReads {
    /// The backend read just submitted never ran (it was linked behind a
    /// write that failed, `link_write.rs`): no longer pending.
    pub(super) fn read_dropped(&mut self) {
        self.down_pending = false;
    }
}

/// The cancel of a hot read completed with `res`: false when it failed and
/// the read is still pending (anything but 0, -ENOENT: already completed,
/// -EALREADY: completing now).
fn cool_cancel_took(res: i32) -> bool {
    res >= 0 || res == -libc::ENOENT || res == -libc::EALREADY
}

impl Worker {
    /// A client read was submitted.
    pub(super) fn hot_client_submitted(&mut self, sid: SessionId) {
        self.hot_submitted(sid, Leg::Client);
    }

    /// A read of `leg` was submitted: it is the session's pending one, to
    /// be checked for idleness [`HOT_IDLE`] from now.
    fn hot_submitted(&mut self, sid: SessionId, leg: Leg) {
        if !self.idle_poll {
            return;
        }
        if let Some(slot) = self.sessions.slot(sid) {
            let seq = slot.hot.submitted(leg);
            self.queue_hot(sid, leg, seq);
        }
    }

    /// Check read `seq` of `leg` for idleness [`HOT_IDLE`] from now.
    fn queue_hot(&mut self, sid: SessionId, leg: Leg, seq: u32) {
        self.hot_queue.push_back(HotEntry {
            sid,
            leg,
            seq,
            at: self.now,
        });
    }

    /// An idle client read (`idle_client_read`, buffer empty): true when it
    /// is hot, i.e. a plain read that keeps the slot it has.
    pub(super) fn client_read_is_hot(&mut self, sid: SessionId) -> bool {
        self.sessions
            .slot(sid)
            .is_some_and(|s| s.hot.client_active && s.io.buf.is_some())
    }

    /// A command is about to be written to the backend, whose reads poll
    /// when idle (`read_path.rs`): the client is active, and the relay's
    /// read of the backend, waiting on the poll, becomes a READ_FIXED now,
    /// before the write (or, with none waiting, the next backend read takes
    /// a slot).
    pub(super) fn hot_command_written(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.hot.client_active = true;
        let Some(bid) = slot.backend else {
            return;
        };
        if slot.down_wait != IdleWait::Polling {
            // A read in the kernel reads the answer; with none, the next
            // one is submitted for it.
            slot.hot.command_sent = !slot.hot.down_pending;
            return;
        }
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        if b.buf.is_none() {
            // Only a free slot: with none, the poll's wake-up reads into a
            // heap buffer at once (no heap buffer held while waiting).
            match self.buffers.try_acquire_slot(Owner::Backend) {
                Some(buf) => b.buf = Some(buf),
                None => return,
            }
        }
        // The one-shot poll stays in flight: its wake-up finds no waiter.
        self.down_read_now(sid, bid);
    }

    /// The relay's backend read is about to be submitted on an empty
    /// buffer: true when it is hot, a plain read with a slot (the one it
    /// holds, or a free one when a command was just written).
    pub(super) fn down_read_is_hot(&mut self, sid: SessionId, bid: BackendId) -> bool {
        let (Some(slot), Some(b)) = (self.sessions.slot(sid), self.backends.get_mut(bid)) else {
            return false;
        };
        if std::mem::take(&mut slot.hot.command_sent) && b.buf.is_none() {
            b.buf = self.buffers.try_acquire_slot(Owner::Backend);
        }
        b.buf.is_some()
    }

    /// A relay read of the backend was submitted to the kernel.
    pub(super) fn hot_down_submitted(&mut self, sid: SessionId) {
        self.hot_submitted(sid, Leg::Down);
    }

    /// After a batch of completions: cancel the reads that have been
    /// pending on an empty buffer for [`HOT_IDLE`] (oldest first; entries
    /// of reads that completed meanwhile are dropped).
    pub(super) fn cool_idle_reads(&mut self) {
        while let Some(&e) = self.hot_queue.front() {
            if self.now.duration_since(e.at) < HOT_IDLE {
                return;
            }
            self.hot_queue.pop_front();
            self.cool_read(e);
        }
    }

    /// Cancel the read `e` names if it is still pending, idle and empty.
    fn cool_read(&mut self, e: HotEntry) {
        let sid = e.sid;
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if slot.closing {
            return;
        }
        let empty_in_flight = |b: &uring::buffers::ReadBuffer| {
            b.in_flight() && b.filled_len() == 0 && b.wire_len() == 0
        };
        let idle = match e.leg {
            Leg::Client => {
                slot.hot.client_pending
                    && slot.hot.client_seq == e.seq
                    && !slot.hot.client_cooling
                    && slot.idle_wait == IdleWait::None
                    // A client behind a layer keeps its slot (`read_path.rs`).
                    && client_layers(slot) == Layers::NONE
                    && slot.session.is_relaying()
                    && slot.io.buf.as_ref().is_some_and(empty_in_flight)
            }
            Leg::Down => {
                slot.hot.down_pending
                    && slot.hot.down_seq == e.seq
                    && !slot.hot.down_cooling
                    && !slot.down_cancelled
                    && slot.down_wait == IdleWait::None
                    && slot
                        .backend
                        .and_then(|b| self.backends.get_mut(b))
                        .and_then(|b| b.buf.as_ref())
                        .is_some_and(empty_in_flight)
            }
        };
        if !idle {
            return;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let (read, me) = match e.leg {
            Leg::Client => {
                slot.hot.client_cooling = true;
                (OpTag::ClientRead, OpTag::ClientReadCool)
            }
            Leg::Down => {
                slot.hot.down_cooling = true;
                (OpTag::DownRead, OpTag::DownReadCool)
            }
        };
        let read = Token::new(read, sid.index, sid.generation);
        let me = Token::new(me, sid.index, sid.generation);
        self.submit(ops::cancel_user_data(read.into(), me));
        self.metrics().idle_read_cancels_total.fetch_add(1, Relaxed);
    }

    /// A cancel of the `leg` read failed: it is still pending and hot; try
    /// again [`HOT_IDLE`] from now.
    fn cool_failed(&mut self, sid: SessionId, leg: Leg) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let (cooling, seq) = match leg {
            Leg::Client => (&mut slot.hot.client_cooling, slot.hot.client_seq),
            Leg::Down => (&mut slot.hot.down_cooling, slot.hot.down_seq),
        };
        if std::mem::take(cooling) {
            self.queue_hot(sid, leg, seq);
        }
    }

    /// A client read completed (its buffer's completion recorded): true
    /// when the worker's own cancel ended it, and the client now waits on
    /// the poll without its slot.
    pub(super) fn client_read_cooled(&mut self, sid: SessionId, res: Completion) -> bool {
        let Some(slot) = self.sessions.slot(sid) else {
            return false;
        };
        slot.hot.client_pending = false;
        let cooling = std::mem::take(&mut slot.hot.client_cooling);
        if !cooling || res != Completion::Cancelled || slot.closing {
            return false;
        }
        slot.hot.client_active = false;
        self.buffers.give_back_empty(&mut slot.io.buf);
        if slot.io.buf.is_some() {
            // Not empty after all (never: only empty reads are cancelled):
            // read again, as any read.
            self.submit_client_read(sid);
            return true;
        }
        self.wait_readable(sid);
        true
    }

    /// A relay read of the backend completed: true when the worker's own
    /// cancel ended it, and it now waits on the backend's poll without a
    /// slot (still counted in the session's `relay_ops`).
    pub(super) fn down_read_cooled(&mut self, sid: SessionId, res: Completion) -> bool {
        let Some(slot) = self.sessions.slot(sid) else {
            return false;
        };
        slot.hot.down_pending = false;
        let cooling = std::mem::take(&mut slot.hot.down_cooling);
        // A relay that cancelled the read itself (a clean end) gets its
        // -ECANCELED, whichever cancel won.
        if !cooling || res != Completion::Cancelled || slot.closing || slot.down_cancelled {
            return false;
        }
        let Some((bid, b)) = slot
            .backend
            .and_then(|bid| self.backends.get_mut(bid).map(|b| (bid, b)))
        else {
            return false;
        };
        b.op_done();
        if let Some(buf) = b.buf.as_mut() {
            buf.complete(0);
        }
        self.buffers.give_back_empty(&mut b.buf);
        if b.buf.is_some() {
            // Not empty after all (never: only empty reads are cancelled).
            self.down_read_now(sid, bid);
        } else {
            self.wait_down_readable(sid, bid);
        }
        true
    }

    /// The cancel of an idle client read completed: one that failed leaves
    /// the read pending and hot, and it is tried again later.
    pub(super) fn on_client_read_cool(&mut self, sid: SessionId, res: i32) {
        if !cool_cancel_took(res) {
            self.cool_failed(sid, Leg::Client);
        }
    }

    /// The cancel of an idle backend read completed: the same.
    pub(super) fn on_down_read_cool(&mut self, sid: SessionId, res: i32) {
        if !cool_cancel_took(res) {
            self.cool_failed(sid, Leg::Down);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_cancel_leaves_the_read_hot() {
        assert!(cool_cancel_took(0));
        assert!(cool_cancel_took(-libc::ENOENT));
        assert!(cool_cancel_took(-libc::EALREADY));
        // A push that failed comes back as a synthetic error.
        assert!(!cool_cancel_took(-libc::EIO));
        assert!(!cool_cancel_took(-libc::EAGAIN));
    }
}

//! Direct descriptors (`--direct-descriptors auto`): clients accepted into
//! the ring's registered file table, so a client socket has no fd in the
//! process and every SQE names it as `types::Fixed(slot)` (no fd install or
//! close(2) per connection, no fget/fput per operation).
//!
//! What a plain fd did that a slot cannot, and what replaces it:
//! - socket options: set once on the listener, which accepted sockets
//!   inherit (`sockopt.rs` tests it);
//! - the peer address: each of a listener's [`LANES`] one-shot accepts has
//!   its own address buffer (`buffers::accept_addr`); a multishot accept
//!   would share one;
//! - shutdown(2): IORING_OP_SHUTDOWN, counted on the connection like any op;
//! - close(2): IORING_OP_CLOSE of the slot after the connection's last CQE;
//!   the kernel hands the slot out again only after that close ran;
//! - KILL from another thread (`registry.rs`): the killer's worker posts the
//!   session's token to this ring with IORING_OP_MSG_RING, and this worker
//!   shuts the slot down ([`Worker::on_kill_wake`]).
//!
//! A full table fails an accept with -ENFILE after the kernel has taken the
//! connection (and then closes it), so the worker never has more direct
//! accepts in flight than free slots: beyond that a listener gets one plain
//! accept, and that client a plain fd (`ringgate_direct_descriptor_fallbacks_total`).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;

use super::*;
use crate::proxy::conn_io::{ShutdownHow, SockHandle};
use machines::registry::RingWake;
use machines::slab::Slab;
use uring::buffers::accept_addr::AcceptAddrs;

/// One-shot direct accepts in flight per listener: enough that a connection
/// storm does not wait for a re-arm between two accepts.
pub(super) const LANES: usize = 8;

/// How often a close, shutdown or MSG_RING that failed is submitted again.
/// They fail when the ring could not queue them (a synthetic completion:
/// `RINGGATE_FAULT_INJECT=push_fail`, or a failing io_uring_enter): a close
/// lost there would leak the slot, a shutdown or wake-up lost there would
/// leave a killed or closing client waiting.
const RETRIES: u32 = 16;

/// A worker's direct-descriptor state.
pub(super) struct Direct {
    /// Slots in the ring's file table.
    slots: u32,
    /// Slots holding a client (from its accept's CQE to its close's CQE).
    in_use: u32,
    /// Direct accepts in flight (each may take a slot).
    armed: u32,
    addrs: AcceptAddrs,
    /// KILL wake-ups sent to other rings and not yet completed, with the
    /// killer's connection id and the attempts so far (retried on failure).
    wakes: Slab<(RingWake, u32, u32)>,
}

impl Direct {
    pub(super) fn new(slots: u32, listeners: usize) -> Direct {
        Direct {
            slots,
            in_use: 0,
            armed: 0,
            addrs: AcceptAddrs::new(LANES * listeners),
            wakes: Slab::new(),
        }
    }
}

/// The file-table size for one worker: every client the proxy allows, plus
/// headroom for the ones it rejects with ERR 1040 and for closes still in
/// flight. SO_REUSEPORT does not spread clients evenly, so not a per-worker
/// share. Capped by RLIMIT_NOFILE (the kernel refuses a larger table) and
/// the kernel's maximum. Slots cost 8 bytes each.
pub fn table_slots(max_connections: usize) -> u32 {
    let want = u32::try_from(max_connections.saturating_add(256)).unwrap_or(u32::MAX);
    let nofile = match uring::sys::rlimit(uring::sys::Resource::Nofile) {
        Ok(rl) => u32::try_from(rl.soft).unwrap_or(u32::MAX),
        Err(_) => 1024,
    };
    want.min(nofile).min(uring::ring::MAX_FIXED_FILES)
}

impl Worker {
    /// Arm `which`'s direct accepts, as many as free slots allow; with none
    /// free, one plain accept instead.
    pub(super) fn arm_direct_accepts(&mut self, which: usize) {
        let Some(listener) = self.listeners[which].as_mut() else {
            return;
        };
        let Some(d) = self.direct.as_mut() else {
            return;
        };
        if self.draining.is_some() || self.accept_resume_at.is_some() {
            return;
        }
        let fd = listener.sock.as_raw_fd();
        let mut armed = false;
        for lane in which * LANES..(which + 1) * LANES {
            if d.addrs.in_flight(lane) {
                armed = true;
                continue;
            }
            if d.in_use + d.armed >= d.slots {
                break;
            }
            let token = Token::new(OpTag::DirectAccept, lane as u32, 0);
            let sqe = d.addrs.accept_sqe(lane, fd.into(), token.into());
            d.armed += 1;
            armed = true;
            self.ring.push(sqe);
        }
        if !armed && !listener.armed {
            // The table is full: the next client of this listener gets a
            // plain fd rather than a slot the kernel does not have.
            listener.armed = true;
            self.ring
                .push(ops::accept(fd, Token::new(OpTag::Accept, which as u32, 0)));
        }
    }

    pub(super) fn on_direct_accept(&mut self, lane: usize, res: i32) {
        let which = lane / LANES;
        let Some(d) = self.direct.as_mut() else {
            return;
        };
        let peer = d.addrs.complete(lane, res);
        d.armed = d.armed.saturating_sub(1);
        if res < 0 {
            let errno = -res;
            if self.draining.is_some() {
                return;
            }
            self.metrics()
                .direct_descriptor_fallbacks_total
                .fetch_add(1, Relaxed);
            match errno {
                libc::ENFILE | libc::EMFILE => {
                    // ENFILE from the table itself would be a bug in the
                    // count above; from the system, fd exhaustion.
                    return self.accept_paused(errno);
                }
                _ => tracing::debug!(
                    worker = self.id,
                    "direct accept failed: {}",
                    io::Error::from_raw_os_error(errno)
                ),
            }
        } else {
            let slot = res as u32;
            d.in_use += 1;
            self.metrics()
                .direct_descriptors_in_use
                .fetch_add(1, Relaxed);
            if self.draining.is_some() {
                // Raced with the drain: refuse by closing at once.
                self.close_direct(slot);
            } else {
                self.on_new_client(SockHandle::Fixed(slot), peer_strings(peer));
            }
        }
        self.arm_accept(which);
    }

    /// IORING_OP_CLOSE of a slot whose connection has no operation left.
    pub(super) fn close_direct(&mut self, slot: u32) {
        self.submit(ops::close_fixed(
            slot,
            Token::new(OpTag::DirectClose, slot, 0),
        ));
    }

    /// `attempt`: the token's generation field, the tries so far.
    pub(super) fn on_direct_close(&mut self, slot: u32, attempt: u32, res: i32) {
        // EBADF: the slot is empty (closed already); anything else may
        // have left it open: try again, a few times.
        if res < 0 && res != -libc::EBADF && attempt < RETRIES {
            self.submit(ops::close_fixed(
                slot,
                Token::new(OpTag::DirectClose, slot, attempt + 1),
            ));
            return;
        }
        if let Some(d) = self.direct.as_mut() {
            d.in_use = d.in_use.saturating_sub(1);
        }
        self.metrics()
            .direct_descriptors_in_use
            .fetch_sub(1, Relaxed);
        if res < 0 {
            tracing::warn!(
                worker = self.id,
                slot,
                "closing a direct descriptor failed: {}",
                io::Error::from_raw_os_error(-res)
            );
        }
        // A freed slot may let a listener go back to direct accepts.
        if self.direct.as_ref().is_some_and(|d| d.armed == 0) {
            self.arm_accepts();
        }
    }

    /// Carry out a client shutdown: nothing more for a plain socket; for a
    /// direct descriptor an IORING_OP_SHUTDOWN counted on the connection.
    pub(super) fn shutdown_client(&mut self, sid: SessionId, how: ShutdownHow) {
        let ShutdownHow::Submit { slot: n, how } = how else {
            return;
        };
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.io.op_started();
        let token = Token::new(OpTag::ClientShutdown, sid.index, sid.generation);
        self.submit(ops::shutdown(SockRef::Fixed(n), how, token));
    }

    pub(super) fn on_client_shutdown(&mut self, sid: SessionId, res: i32) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.io.op_done();
        let waiter = slot.kill_waiter;
        // A full shutdown that did not run (the ring could not queue it)
        // is tried again: the client's reads would wait for it forever.
        if res < 0 && res != -libc::ENOTCONN {
            if let Some(how) = slot.io.retry_shutdown(RETRIES) {
                return self.shutdown_client(sid, how);
            }
        }
        if res < 0 && res != -libc::ENOTCONN {
            tracing::debug!(
                worker = self.id,
                "client shutdown: {}",
                io::Error::from_raw_os_error(-res)
            );
        }
        if slot.closing {
            self.try_finish_session(sid);
        }
        if let Some(killer) = waiter {
            if let Some(slot) = self.sessions.slot(sid) {
                slot.kill_waiter = None;
            }
            self.tell_killer(killer);
        }
    }

    /// A KILL CONNECTION marked a client held as a direct descriptor: wake
    /// its worker (this one: at once), naming the killer's connection id,
    /// whose answer waits for the shutdown.
    pub(super) fn wake_killed(&mut self, wake: RingWake, killer: u32) {
        if wake.ring_fd == self.ring.fd() {
            if let Some(t) = Token::decode(wake.user_data) {
                let victim = SessionId {
                    index: t.index,
                    generation: t.generation,
                };
                self.on_kill_wake(victim, killer);
            }
            return;
        }
        self.send_wake(wake, killer, 0);
    }

    fn send_wake(&mut self, wake: RingWake, killer: u32, attempts: u32) {
        // The victim's CQE carries the killer's id as its result.
        let res = killer as i32;
        let Some(d) = self.direct.as_mut() else {
            // Only a worker with direct descriptors registers them, but
            // another worker's fallback may differ: send without retries.
            let token = Token::new(OpTag::MsgRingSent, u32::MAX, 0);
            return self.submit(ops::msg_ring_with(wake.ring_fd, wake.user_data, res, token));
        };
        let (index, generation) = d.wakes.insert((wake, killer, attempts));
        let token = Token::new(OpTag::MsgRingSent, index, generation);
        self.submit(ops::msg_ring_with(wake.ring_fd, wake.user_data, res, token));
    }

    /// The client a KILL named has been shut down (or never will be by this
    /// worker): the killer's answer may go out, on its own worker.
    fn tell_killer(&mut self, killer: u32) {
        let Some(wake) = self.shared.registry.ring_wake(killer) else {
            // Gone, or a plain fd whose worker did not hold its answer
            // on a wake: the safety net on its tick covers the rest.
            return;
        };
        let Some(t) = Token::decode(wake.user_data) else {
            return;
        };
        let go = Token::new(OpTag::KillAnswer, t.index, t.generation);
        if wake.ring_fd == self.ring.fd() {
            return self.release_kill_answer(SessionId {
                index: t.index,
                generation: t.generation,
            });
        }
        // Without retries: a lost word only costs the safety net's delay.
        let token = Token::new(OpTag::MsgRingSent, u32::MAX, 0);
        self.submit(ops::msg_ring(wake.ring_fd, go.into(), token));
    }

    /// The KILL this session sent has ended its victim's connection: the
    /// server's OK goes out now (or is not held when it comes).
    pub(super) fn release_kill_answer(&mut self, sid: SessionId) {
        // Its safety-net entry goes too: left behind, it would cut the wait
        // of this session's next KILL short.
        self.held_kill_answers.retain(|(held, _)| *held != sid);
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if let KillAnswer::Held(end) = std::mem::take(&mut slot.kill_answer) {
            self.session_q
                .push_back((sid, SessionAction::Relay(RelayOp::WriteClient { end })));
        }
    }

    /// The safety net: an answer held past [`KILL_ANSWER_TIMEOUT`] (its
    /// victim's worker never told) goes out.
    pub(super) fn release_stale_kill_answers(&mut self, now: Instant) {
        if self.held_kill_answers.is_empty() {
            return;
        }
        let stale: Vec<SessionId> = self
            .held_kill_answers
            .iter()
            .filter(|(_, since)| now.duration_since(*since) >= KILL_ANSWER_TIMEOUT)
            .map(|(sid, _)| *sid)
            .collect();
        for sid in stale {
            self.release_kill_answer(sid);
        }
    }

    pub(super) fn on_msg_ring_sent(&mut self, index: u32, generation: u32, res: i32) {
        let sent = self
            .direct
            .as_mut()
            .and_then(|d| d.wakes.remove_checked(index, generation));
        if res >= 0 {
            return;
        }
        if let Some((wake, killer, attempts)) = sent.filter(|(_, _, n)| *n < RETRIES) {
            return self.send_wake(wake, killer, attempts + 1);
        }
        tracing::warn!(
            worker = self.id,
            "KILL could not wake the victim's worker (IORING_OP_MSG_RING): {}",
            io::Error::from_raw_os_error(-res)
        );
    }

    /// The session named by a KILL's wake-up: if it is still the one that
    /// was killed, shut its client down as shutdown(2) would; the killer
    /// (its connection id) is told once that has run.
    pub(super) fn on_kill_wake(&mut self, sid: SessionId, killer: u32) {
        let Some(slot) = self
            .sessions
            .slot(sid)
            .filter(|s| s.conn.entry().is_killed())
        else {
            return self.tell_killer(killer);
        };
        let how = slot.io.shutdown();
        if matches!(how, ShutdownHow::Submit { .. }) {
            slot.kill_waiter = Some(killer);
            self.shutdown_client(sid, how);
        } else {
            self.tell_killer(killer);
        }
    }
}

/// The longest a KILL's OK waits for word of its victim's shutdown: MariaDB
/// answers a KILL after its victim's connection has ended (mysql2's
/// test-pool-disconnect asserts it), and a direct descriptor's shutdown is
/// asynchronous (IORING_OP_SHUTDOWN runs on io-wq; a victim on another
/// worker is shut down there after an IORING_OP_MSG_RING wake-up, which
/// answers with one back). Past this the answer goes out anyway.
const KILL_ANSWER_TIMEOUT: Duration = Duration::from_millis(200);

/// The server's answer to a session's KILL CONNECTION of a direct
/// descriptor, relative to the victim's shutdown.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum KillAnswer {
    #[default]
    None,
    /// The victim was woken; the next write to the client is the answer.
    Awaited,
    /// The answer (the relay's write of `end` bytes) waits for the word.
    Held(usize),
}

impl KillAnswer {
    /// The relay's write of `end` bytes to the client is an awaited KILL
    /// answer: hold it (true).
    pub(super) fn hold(&mut self, end: usize) -> bool {
        if *self != KillAnswer::Awaited {
            return false;
        }
        *self = KillAnswer::Held(end);
        true
    }
}

//! The worker's own time: the tick (timeouts, users reloaded, the idle
//! sessions cut while others wait), the ring's counters, and the drain.

use std::sync::atomic::Ordering::Relaxed;

use super::*;

impl Worker {
    pub(super) fn on_tick(&mut self) {
        let now = self.now;
        self.users = self.shared.users();
        self.apply_users_reload();
        if self.draining.is_none() && self.shared.shutdown.load(Relaxed) {
            self.begin_drain(now);
        }
        if self.accept_resume_at.is_some_and(|at| now >= at) {
            self.accept_resume_at = None;
            self.arm_accepts();
        }
        let cut = self
            .draining
            .is_some_and(|t| now.duration_since(t) >= self.shared.config.drain_timeout);
        for index in self.sessions.indexes() {
            let generation = self.sessions.generation(index);
            let sid = SessionId { index, generation };
            if cut {
                self.with_session(sid, |s, _, ctx, out| s.cut(ctx, out));
            } else {
                self.with_session(sid, |s, _, ctx, out| s.on_tick(ctx, out));
            }
        }
        if !cut {
            self.cut_idle_holders();
        }
        self.release_stale_kill_answers(now);
        self.follow_writer();
        let mut events = Vec::new();
        self.pool.on_tick(now, &mut events);
        self.pool_q.extend(events);
        self.submit(ops::timeout(self.tick_ts, Token::new(OpTag::Tick, 0, 0)));
    }

    /// Several servers: the pool's connections go to the writer the
    /// monitor names (`machines/pool/writer.rs`); one atomic load while
    /// nothing changed.
    fn follow_writer(&mut self) {
        // A switchover hold (SIGUSR1; with one server it is a pause that
        // SIGUSR2 or its timeout ends).
        self.pool.hold(self.shared.switchover.held(self.now));
        let Some(reader) = self.cluster.as_mut() else {
            return;
        };
        let view = reader.get();
        if view.generation == 0 {
            // The monitor's first round has not ended: keep the configured
            // writer rather than wait for none.
            return;
        }
        let target = view.writer().map(|w| machines::pool::Target {
            server: setup::server_index(&self.shared.config, w.address),
            addr: w.address,
        });
        let mut events = Vec::new();
        self.pool.retarget(target, &mut events);
        self.pool_q.extend(events);
    }

    /// While clients wait for a backend connection (on any worker), cut
    /// the sessions idle holding one past their bound, the longest idle
    /// first, one per waiter (`idle_cut.rs`). Each worker cuts for all
    /// the waiters it sees, so with several workers a wait may cost up to
    /// one cut per worker; what is cut was idle past its bound anyway.
    fn cut_idle_holders(&mut self) {
        let limits = IdleCutLimits {
            transaction: self.shared.config.idle_transaction_timeout,
            pinned: self.shared.config.idle_pinned_timeout,
        };
        let waiting = self.shared.backends.waiting_for_room();
        if !limits.any() || waiting == 0 {
            return;
        }
        let mut holders = Vec::new();
        let ctx = worker_session_ctx!(self);
        for index in self.sessions.indexes() {
            let generation = self.sessions.generation(index);
            if let Some(slot) = self.sessions.get(index) {
                if let Some((held, idle)) = slot.session.held_idle(&ctx) {
                    let session = SessionId { index, generation };
                    holders.push(IdleHolder {
                        session,
                        held,
                        idle,
                    });
                }
            }
        }
        idle_cut::pick(&mut holders, waiting);
        for h in holders {
            self.with_session(h.session, |s, _, ctx, out| {
                s.cut_held_idle(h.held, ctx, out)
            });
        }
    }

    pub(super) fn export_ring_stats(&self) {
        let stats = self.ring.stats();
        let m = self.metrics();
        m.ring_ebusy_reaps.store(stats.ebusy_reaps, Relaxed);
        m.ring_overflow_flushes
            .store(stats.overflow_flushes, Relaxed);
        m.ring_synthetic_failures
            .store(stats.synthetic_failures, Relaxed);
        m.ring_enters.store(stats.enters, Relaxed);
        m.ring_enter_waits.store(stats.waits, Relaxed);
        m.ring_sqes.store(stats.sqes, Relaxed);
        m.ring_busy_poll_hits.store(stats.busy_poll_hits, Relaxed);
        m.ring_busy_poll_sleeps
            .store(stats.busy_poll_sleeps, Relaxed);
    }

    /// SIGTERM/SIGINT: stop accepting at once; idle sessions are closed,
    /// sessions inside a command finish it first (checked at each tick and
    /// command boundary), and everything left after the drain timeout is cut.
    fn begin_drain(&mut self, now: Instant) {
        tracing::info!(worker = self.id, sessions = self.sessions.len(), "draining");
        self.draining = Some(now);
        // shutdown(SHUT_RD) on a listening socket stops it listening (new
        // connects are refused) and completes the armed accept with an
        // error; the fd itself is closed when the worker ends, after that
        // CQE, as the buffer lifetime rules require for every fd.
        for l in self.listeners.iter().flatten() {
            let _ = l.sock.shutdown(std::net::Shutdown::Read);
        }
        if self.id == 0 {
            if let Some(path) = &self.shared.config.socket {
                let _ = std::fs::remove_file(path);
            }
        }
        let mut events = Vec::new();
        self.pool.begin_drain(&mut events);
        self.pool_q.extend(events);
    }
}

//! The pool's housekeeping: serving the queued lease requests when
//! something freed up, the tick (waiters past `--backend-wait-timeout`,
//! connect and idle timeouts), keeping `--backend-pool-size` connections
//! warm, and the drain.

use super::*;

/// A worker with no sessions waiting gives another worker a connection
/// that has been idle this long (one with sessions waiting gives only when
/// it holds two more than the other: `pool/share.rs`). Long enough that a
/// connection idle between one client's transactions is not taken from
/// it, short next to `--backend-wait-timeout`.
pub(super) const IDLE_BEFORE_GIVING: Duration = Duration::from_millis(500);

impl Pool {
    /// Serve queued requests while connections can be had: each key's in
    /// arrival order (FIFO per key), and the keys by the arrival of their
    /// oldest waiter, so that units of the cap go first-come-first-served
    /// across keys. A key whose oldest waiter cannot be served now (it
    /// waits for a reset of its own, or for a unit of the cap) holds up
    /// only its own queue: the next key's waiter is served from that
    /// key's idle connections.
    ///
    /// Called after every batch of completions: besides a connection of
    /// this pool coming back (`dirty`), a unit of the cap that another
    /// worker freed is a reason to try (it cannot tell this worker, whose
    /// ring may be asleep until its next tick), and so is a waiter that
    /// left a free unit to another worker (`deferred`): once that worker
    /// has taken it, the cap is reached and this one may make room. O(keys)
    /// besides the work of the leases themselves.
    pub fn serve_waiters(&mut self, now: Instant, out: &mut Vec<PoolEvent>) {
        let room = !self.waiters.is_empty() && self.share.open() < self.cfg.max_connections;
        let deferred = std::mem::take(&mut self.deferred);
        if !std::mem::take(&mut self.dirty) && !room && !deferred {
            return;
        }
        if self.draining {
            let mut ignored = Vec::new();
            self.close_idle(&mut ignored);
            out.extend(ignored);
            return;
        }
        self.give_to_other_workers(now, out);
        // Connections closed for waiters and not freed yet: one is the unit
        // of each of the oldest waiters that need a unit.
        let mut covered = self.evicting;
        let mut fronts = self.waiters.fronts();
        while let Some(std::cmp::Reverse((_, waiters::KeyOrd(key)))) = fronts.pop() {
            let Some((req, seq, since)) = self.waiters.front_entry(key) else {
                continue;
            };
            let session = req.session;
            let Ok(leasing) = self.try_lease(req, Some((seq, since)), &mut covered, now, out)
            else {
                continue;
            };
            // Off the queue either way; a connection being checked for it
            // counts its wait once the check says alive, and puts it back
            // where it was if it must wait after all (`pool/idle_check.rs`).
            self.waiters.pop_front(key);
            if leasing == Leasing::Opening {
                self.served(session, Some((seq, since)), now);
            }
            // Its next waiter takes its turn by its own arrival.
            if let Some(seq) = self.waiters.front_seq(key) {
                fronts.push(std::cmp::Reverse((seq, waiters::KeyOrd(key))));
            }
        }
        self.publish();
    }

    /// Something freed up or queued since the last [`Pool::serve_waiters`].
    pub fn wants_serving(&self) -> bool {
        self.dirty
    }

    /// With the cap reached, close one idle connection so that another
    /// worker whose sessions wait can open one (the rules and why they do
    /// not oscillate: `pool/share.rs`). Only one such connection closes at
    /// a time: its unit is free once its slot is, and the cap is then no
    /// longer reached until the other worker has taken it.
    pub(super) fn give_to_other_workers(&mut self, now: Instant, out: &mut Vec<PoolEvent>) {
        if self.draining || self.giving > 0 || self.idle.is_empty() {
            return;
        }
        if self.share.open() < self.cfg.max_connections {
            return;
        }
        let Some(theirs) = self.share.neediest_other(self.worker) else {
            return;
        };
        let mine = self.slots.len();
        // Longest idle first (the list is least recently used first).
        let index = self.idle[0];
        let unused = self.waiters.is_empty()
            && self
                .slots
                .get(index)
                .is_some_and(|p| now.duration_since(p.conn.idle_since()) >= IDLE_BEFORE_GIVING);
        if theirs + 2 > mine && !unused {
            return;
        }
        tracing::debug!(
            worker = self.worker,
            mine,
            theirs,
            "backend connection closed so that another worker's waiting clients can have one"
        );
        let id = self.id_of(index);
        if let Some(p) = self.slots.get_mut(id.index, id.generation) {
            p.given = true;
        }
        self.giving += 1;
        self.m().backend_rebalanced_total.fetch_add(1, Relaxed);
        self.close(id, out);
    }

    /// Once per tick: waiters past `--backend-wait-timeout`, exchanges past
    /// `--backend-connect-timeout` (connects included), idle trimming and
    /// refills.
    pub fn on_tick(&mut self, now: Instant, out: &mut Vec<PoolEvent>) {
        self.expire_writer_waits(now, out);
        for (session, since) in self.waiters.expire(now) {
            self.user_limited.remove(&session);
            self.m()
                .record_pool_wait(now.saturating_duration_since(since));
            let msg = format!(
                "ringgate: no backend connection became free within --backend-wait-timeout ({:?}); --backend-max-connections is {}",
                self.cfg.wait_timeout, self.cfg.max_connections
            );
            out.push(PoolEvent::LeaseFailed {
                session,
                err_payload: err_payload(ER_CON_COUNT_ERROR, &msg),
                reject: Some(RejectReason::BackendUnavailable),
            });
        }
        let timeout = self.cfg.connect_timeout;
        for index in self.slots.indexes() {
            let id = self.id_of(index);
            let mut bo = Vec::new();
            if let Some(p) = self.slots.get_mut(id.index, id.generation) {
                p.conn.on_tick(now, timeout, &mut bo);
            }
            self.apply(id, bo, now, out);
        }
        if !self.draining {
            self.trim_idle(now, out);
            self.give_to_other_workers(now, out);
            self.refill(now, out);
        }
        self.publish();
    }

    /// Close idle connections beyond `--backend-pool-size` that have not
    /// been used for `--backend-idle-timeout`, oldest first.
    pub(super) fn trim_idle(&mut self, now: Instant, out: &mut Vec<PoolEvent>) {
        while self.idle.len() > self.cfg.pool_size {
            let index = self.idle[0];
            let expired = self
                .slots
                .get(index)
                .is_some_and(|p| now.duration_since(p.conn.idle_since()) >= self.cfg.idle_timeout);
            if !expired {
                break;
            }
            tracing::debug!(
                worker = self.worker,
                "idle backend connection closed after --backend-idle-timeout"
            );
            let id = self.id_of(index);
            self.close(id, out);
        }
    }

    /// Keep `--backend-pool-size` connections of the warm key ready.
    pub fn refill(&mut self, now: Instant, out: &mut Vec<PoolEvent>) {
        if self.draining || self.target.is_none() || self.retry_at.is_some_and(|t| now < t) {
            return;
        }
        let Some(key) = self.warm_key else {
            return self.probe(out);
        };
        // With passthrough identity the warm key is the most recent user's:
        // counting only its connections would open `--backend-pool-size`
        // more for every user who logs in after another. So any user's
        // ready connections count: at most that many are kept warm in all.
        let per_user = !self.identities.is_shared();
        let have = self
            .slots
            .values()
            .filter(|p| {
                // Reads' connections to replicas warm nothing: refills
                // are for the writer.
                p.conn.key().server.is_none()
                    && (per_user || p.conn.key() == key)
                    && !p.conn.is_closed()
                    && !p.conn.is_leased()
                    && p.leased_to.is_none()
            })
            .count();
        // Warm connections are no one's yet: none while another worker's
        // sessions wait for the last units of the cap.
        if self
            .share
            .room_is_theirs(self.worker, None, self.cfg.max_connections)
        {
            return;
        }
        for _ in have..self.cfg.pool_size {
            if !self.charge_user(key.identity) {
                break;
            }
            if !self.share.try_reserve(self.cfg.max_connections) {
                self.uncharge_user(key.identity);
                break;
            }
            self.open(key, None, out);
        }
    }

    /// Passthrough identity before any login: there is no account to warm
    /// connections for, but the greeting clients get mirrors the backend's
    /// version and capabilities. So one connection reads the server's
    /// greeting and hangs up, without logging in; it is retried like any
    /// backend connection until one succeeds.
    pub(super) fn probe(&mut self, out: &mut Vec<PoolEvent>) {
        if self.probed || self.identities.get(IdentityId::SHARED).is_some() {
            return;
        }
        let probing = self
            .slots
            .values()
            .any(|p| p.conn.key().identity == IdentityId::SHARED && !p.conn.is_closed());
        if !probing && self.share.try_reserve(self.cfg.max_connections) {
            self.open(self.stamp(PoolKey::default_warm()), None, out);
        }
    }

    /// Drain: no more refills; idle connections close now and returning
    /// ones close instead of going idle.
    pub fn begin_drain(&mut self, out: &mut Vec<PoolEvent>) {
        self.draining = true;
        self.close_idle(out);
    }

    pub(super) fn close_idle(&mut self, out: &mut Vec<PoolEvent>) {
        for index in std::mem::take(&mut self.idle) {
            self.m().backend_idle.fetch_sub(1, Relaxed);
            let id = self.id_of(index);
            if let Some(p) = self.slots.get_mut(id.index, id.generation) {
                let mut bo = Vec::new();
                p.conn.close(&mut bo);
                for o in bo {
                    if let BackendOut::Op(op) = o {
                        out.push(PoolEvent::Io(id, op));
                    }
                }
            }
        }
    }
}

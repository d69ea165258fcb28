//! A backend connection coming back to the pool: released by its session
//! (reset and reused when clean, otherwise closed), reset in place for the
//! same session (COM_CHANGE_USER), kept as it is between transactions
//! (transaction pooling, after asking it for LAST_INSERT_ID() when the
//! session needs that), or closed and removed.

use super::*;

impl Pool {
    /// The session is done with its connection. A clean one is reset and
    /// reused; anything else is closed.
    pub fn release(&mut self, id: BackendId, clean: bool, now: Instant, out: &mut Vec<PoolEvent>) {
        let draining = self.draining;
        let metrics = Arc::clone(&self.metrics);
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.leased_to = None;
        p.set_busy(false, metrics.worker(self.worker));
        let mut bo = Vec::new();
        p.conn.release(clean && !draining, now, &mut bo);
        if p.conn.is_resetting() {
            self.m().backend_resets_total.fetch_add(1, Relaxed);
        }
        self.apply(id, bo, now, out);
    }

    /// Reset the session's connection (COM_RESET_CONNECTION, as on release)
    /// and give it back to the same session with [`PoolEvent::Relet`]: its
    /// session state is gone, its schema kept (COM_CHANGE_USER answered on
    /// the old user's connection). A failed reset closes the connection and
    /// the session gets [`PoolEvent::LeaseFailed`].
    pub fn relet(&mut self, id: BackendId, now: Instant, out: &mut Vec<PoolEvent>) {
        let draining = self.draining;
        let backend = self.target_addr();
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        let Some(session) = p.leased_to else {
            return;
        };
        if draining {
            self.release(id, false, now, out);
            out.push(PoolEvent::LeaseFailed {
                session,
                err_payload: unavailable(backend, "ringgate is shutting down"),
                reject: None,
            });
            return;
        }
        p.relet = true;
        let mut bo = Vec::new();
        p.conn.release(true, now, &mut bo);
        self.apply(id, bo, now, out);
    }

    /// Transaction pooling: the session let the connection go between
    /// transactions. It goes back to the idle list as it is, no reset,
    /// with the session's schema and settings fingerprint (`kept`; None:
    /// unchanged, after a login that ran nothing on it).
    pub fn release_kept(
        &mut self,
        id: BackendId,
        kept: Option<(Option<String>, Settings)>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        if self.draining {
            return self.release(id, false, now, out);
        }
        let metrics = Arc::clone(&self.metrics);
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.leased_to = None;
        p.set_busy(false, metrics.worker(self.worker));
        if p.conn.keep(kept, now) {
            self.m().tx_releases_total.fetch_add(1, Relaxed);
            self.push_idle(id, now, out);
        } else {
            let mut bo = Vec::new();
            p.conn.close(&mut bo);
            self.apply(id, bo, now, out);
        }
    }

    /// Transaction pooling: the session gives its connection back, but
    /// first LAST_INSERT_ID() is read on it (the session's OK packets do not
    /// tell; see `multiplex.rs`); the session gets
    /// [`PoolEvent::LastInsertId`], and the connection then goes back as
    /// [`Pool::release_kept`] (or, with `reset`, [`Pool::release`]) would.
    pub fn park_asking(
        &mut self,
        id: BackendId,
        session: SessionId,
        kept: Option<(Option<String>, Settings)>,
        reset: bool,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let draining = self.draining;
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            out.push(PoolEvent::LastInsertId {
                session,
                value: None,
            });
            return;
        };
        if draining || !p.conn.is_leased() {
            out.push(PoolEvent::LastInsertId {
                session,
                value: None,
            });
            return self.release(id, !draining, now, out);
        }
        // Not the session's any more: a failure must not reach it as a
        // failed lease.
        p.leased_to = None;
        p.asking = Some(Asking {
            session,
            kept,
            reset,
        });
        let mut bo = Vec::new();
        p.conn.ask_last_insert_id(now, &mut bo);
        self.m().internal_queries_total[InternalQuery::LastInsertIdRead as usize]
            .fetch_add(1, Relaxed);
        self.apply(id, bo, now, out);
    }

    /// Close a connection for good.
    pub fn close(&mut self, id: BackendId, out: &mut Vec<PoolEvent>) {
        let metrics = Arc::clone(&self.metrics);
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        if p.conn.is_idle() {
            if let Some(pos) = self.idle.iter().position(|&i| i == id.index) {
                self.idle.remove(pos);
                metrics
                    .worker(self.worker)
                    .backend_idle
                    .fetch_sub(1, Relaxed);
            }
        }
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        p.set_busy(false, metrics.worker(self.worker));
        let mut bo = Vec::new();
        p.conn.close(&mut bo);
        for o in bo {
            if let BackendOut::Op(op) = o {
                out.push(PoolEvent::Io(id, op));
            }
        }
        self.sync_prepared(id);
    }

    /// The driver freed a closed connection's slot (after its last CQE),
    /// and dropped its I/O with it: forget it and give its unit of the
    /// global limit back. False if `id` was not the pool's.
    pub fn remove(&mut self, id: BackendId) -> bool {
        let Some(p) = self.slots.remove_checked(id.index, id.generation) else {
            return false;
        };
        self.share.unreserve();
        if let Some(u) = &p.user {
            crate::unreserve(&u.backends);
        }
        self.metrics
            .servers()
            .count_pooled(usize::from(p.server), -1);
        if p.given {
            self.giving -= 1;
        }
        if p.evicted {
            self.evicting -= 1;
        }
        self.give_backs.remove(&id);
        self.publish();
        self.m().backend_discarded_total.fetch_add(1, Relaxed);
        self.dirty = true;
        true
    }
}

//! Causal reads on the pool's side: a read leased to a replica first
//! waits there for the session's writes (`SELECT MASTER_GTID_WAIT(...)`,
//! the last setup statement, `backend/lease.rs`), and goes to the writer
//! when the wait does not reach them in `--causal-read-timeout`. The pool
//! decides, because only it knows which server a connection reaches: a
//! connection to the writer never runs the wait (on a primary it reads an
//! empty `gtid_slave_pos` and times out even for the primary's own
//! GTIDs).

use super::*;

impl Pool {
    /// What the lease of connection `id` for `req` runs first: a read's
    /// lease on a replica (`--read-write-split` names it in the key) waits;
    /// one whose server is the writer now (a replica promoted since the
    /// driver chose it) does not.
    pub(super) fn causal_read(&self, id: BackendId, req: &LeaseRequest) -> ReplicaRead {
        let replica = self
            .slot(id)
            .filter(|p| {
                p.conn.key().server.is_some() && self.target.is_none_or(|t| t.server != p.server)
            })
            .map(|p| p.server);
        match (req.setup.as_ref().and_then(|s| s.causal.as_ref()), replica) {
            (Some(wait), Some(server)) => wait.on_replica(
                self.cfg.causal_read_timeout,
                self.replica_reached.get(&server),
            ),
            _ => ReplicaRead::Run,
        }
    }

    /// A causal wait answered on connection `id`. Reached: the lease
    /// goes on (`SchemaSelected` follows). Not: the connection is fine
    /// (set up, nothing of the read ran) and goes back to the pool, and
    /// the read is leased again for the writer.
    pub(super) fn on_causal_wait(
        &mut self,
        id: BackendId,
        waited: Duration,
        outcome: Result<(), String>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        self.m().record_causal_wait(waited);
        let metrics = Arc::clone(&self.metrics);
        let Some(p) = self.slots.get_mut(id.index, id.generation) else {
            return;
        };
        let retry = p.causal_retry.take();
        let server = p.server;
        let Err(why) = outcome else {
            // The replica has it: a later read that needs no more than
            // this position runs there at once.
            if let Some(pos) = retry {
                self.replica_reached.entry(server).or_default().raise(&pos);
            }
            return;
        };
        tracing::debug!(
            worker = self.worker,
            "causal read: the replica's wait {why}; the read goes to the writer"
        );
        p.leased_to = None;
        // The read is leased again, with the lease's own request.
        let request = p.opened_for.take().filter(|_| retry.is_some());
        p.place = None;
        p.set_busy(false, metrics.worker(self.worker));
        match request {
            Some(req) => self.causal_to_writer(id, req, now, out),
            None => self.make_idle(id, now, out),
        }
    }

    /// The read of `req` goes to the writer instead of connection `id`'s
    /// replica, which goes back to the idle list as it is.
    pub(super) fn causal_to_writer(
        &mut self,
        id: BackendId,
        req: LeaseRequest,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        self.make_idle(id, now, out);
        self.lease_on_writer(req, now, out);
    }

    /// Lease `req`, a causal read that will not run on its replica, for
    /// the writer, without a wait.
    pub(super) fn lease_on_writer(
        &mut self,
        mut req: LeaseRequest,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        self.m().causal_fallbacks_total.fetch_add(1, Relaxed);
        if let Some(setup) = req.setup.as_mut() {
            setup.causal = None;
        }
        // The writer's key: whichever server that is now.
        req.key.server = None;
        self.lease(req, now, out);
    }
}

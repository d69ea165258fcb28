//! The check of an idle connection at its lease, as an operation: the
//! pool takes the connection it would lease out of the idle list, asks the
//! driver to check it ([`PoolEvent::CheckIdle`]), and holds the request
//! until the answer ([`Pool::idle_checked`]). Alive, the connection goes to
//! the request; dead (the server closed it before its close watch was
//! handled), it is discarded and the request tries the next idle
//! connection, or opens one, or waits, as if that connection had never been
//! there.
//!
//! The driver answers within the batch of completions that asked (the peek
//! does not block), so a connection being checked is never seen by a tick,
//! a close watch or a drain; a check still outstanding is not in the idle
//! list, and is counted neither idle nor busy.

use super::*;

/// An idle connection taken for a lease, until the driver's answer.
pub(super) struct Check {
    backend: BackendId,
    /// The session it is checked for (also once it withdrew): a connection
    /// found dead is not news to the session whose command runs elsewhere.
    session: SessionId,
    /// None once the session no longer wants it ([`Pool::cancel`]).
    request: Option<LeaseRequest>,
    /// The request's place in the waiters' queue it was taken from (its
    /// arrival number and since when it waits): it goes back there if it
    /// must wait after all.
    waited: Option<(u64, Instant)>,
}

impl Pool {
    /// Take the idle connection [`Pool::pick_idle`] chooses for `req` and
    /// ask for its check; `Err` gives the request back when none is idle.
    pub(super) fn lease_idle(
        &mut self,
        req: LeaseRequest,
        waited: Option<(u64, Instant)>,
        out: &mut Vec<PoolEvent>,
    ) -> Result<(), LeaseRequest> {
        let Some(pos) = self.pick_idle(&req) else {
            return Err(req);
        };
        let index = self.idle.remove(pos);
        self.m().backend_idle.fetch_sub(1, Relaxed);
        let backend = self.id_of(index);
        self.checks.push(Check {
            backend,
            session: req.session,
            request: Some(req),
            waited,
        });
        out.push(PoolEvent::CheckIdle(backend));
        Ok(())
    }

    /// The driver's answer to [`PoolEvent::CheckIdle`]: whether connection
    /// `id` had nothing to read. Alive, it is leased to the request (or,
    /// withdrawn meanwhile, idle again); dead, it is discarded and the
    /// request goes on as `Pool::try_lease` would without it.
    pub fn idle_checked(
        &mut self,
        id: BackendId,
        alive: bool,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let Some(pos) = self.checks.iter().position(|c| c.backend == id) else {
            return;
        };
        let check = self.checks.swap_remove(pos);
        let open = self
            .slots
            .get_mut(id.index, id.generation)
            .is_some_and(|p| !p.conn.is_closed());
        if alive && open {
            return match check.request {
                Some(req) => {
                    self.served(req.session, check.waited, now);
                    // One that never queued takes its place in the
                    // arrival order now, in case its setup fails.
                    let place = check
                        .waited
                        .unwrap_or_else(|| (self.waiters.reserve_seq(), now));
                    self.give(id, req, Some(place), now, out);
                }
                None => self.push_idle(id, now, out),
            };
        }
        tracing::debug!(
            worker = self.worker,
            "idle backend connection was closed by the server; discarded"
        );
        // Found dead before its close watch's completion was handled: its
        // last session hears of it as from the watch, unless that session
        // is the one leasing (its command, already here, runs on another
        // connection).
        self.discard_server_closed(id, Some(check.session), out);
        if let Some(req) = check.request {
            self.lease_again(req, check.waited, now, out);
        }
    }

    /// A request whose checked connection was dead: the next idle
    /// connection, an open, or back to its place in the queue. Connections
    /// being evicted that no waiter claimed may be its unit, as for a new
    /// request ([`Pool::lease`]).
    fn lease_again(
        &mut self,
        req: LeaseRequest,
        waited: Option<(u64, Instant)>,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let mut covered = self.evicting;
        let session = req.session;
        match self.try_lease(req, waited, &mut covered, now, out) {
            Ok(Leasing::Checking) => {}
            Ok(Leasing::Opening) => self.served(session, waited, now),
            Err(req) => match waited {
                Some((seq, since)) => {
                    let deadline = since + self.cfg.wait_timeout;
                    self.waiters.requeue(req, seq, since, deadline);
                    self.publish();
                }
                None => self.enqueue(req, now),
            },
        }
    }

    /// A request taken from the waiters' queue is served: it waited since
    /// `waited`'s instant (nothing to count for one that never queued).
    pub(super) fn served(
        &mut self,
        session: SessionId,
        waited: Option<(u64, Instant)>,
        now: Instant,
    ) {
        let Some((_, since)) = waited else {
            return;
        };
        self.user_limited.remove(&session);
        self.m()
            .record_pool_wait(now.saturating_duration_since(since));
    }

    /// The session no longer wants the connection being checked for it.
    pub(super) fn withdraw_check(&mut self, session: SessionId) {
        for c in &mut self.checks {
            if c.session == session {
                c.request = None;
            }
        }
    }
}

//! Several servers: the pool opens its connections to one of them, the
//! server that takes writes ([`Target`]). With one `--backend` that never
//! changes. With several, the monitor names the writer and the driver
//! hands each change to [`Pool::retarget`]: from then on new connections
//! go to the new writer, idle ones to any other server close at once, and
//! one that is leased closes when its session gives it back. A session
//! between transactions holds no connection, so it never notices; one
//! inside a transaction keeps its connection to the end of it (or to the
//! old server's death).
//!
//! No writer (the old one is gone and no other is writable yet): nothing
//! opens, and lease requests wait in the queue, bounded by
//! `--writer-wait-timeout` (at most `--backend-wait-timeout`), for the
//! monitor to name one; then they get ERR 1105 naming the failover. Before the
//! monitor has seen a writer die (a few checks), a lease's connect to it
//! is refused: with several servers that request waits too, and leases
//! hold off opening for a second at a time
//! ([`Pool::wait_for_writer_after_failure`]).

use super::*;

/// Where new connections go: an index into the driver's table of
/// `--backend` addresses (in configured order), and that address, for
/// logs and errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub server: u16,
    pub addr: std::net::SocketAddr,
}

impl Pool {
    /// The server new connections go to; None while there is no writer.
    pub fn target(&self) -> Option<Target> {
        self.target
    }

    /// The address errors and logs name: the writer's, or the configured
    /// first server's while there is none.
    pub(super) fn target_addr(&self) -> std::net::SocketAddr {
        self.target.map_or(self.cfg.backend, |t| t.addr)
    }

    /// The server a connection was opened to (index into the driver's
    /// address table).
    pub fn server_of(&self, id: BackendId) -> Option<u16> {
        self.slot(id).map(|p| p.server)
    }

    /// The monitor named another writer (or none). Idle connections of
    /// the writer's key to any other server close now, and so do reads'
    /// connections to the new writer (those to replicas stay); leased ones
    /// close when given back (`Pool::push_idle`); waiters are served
    /// again, so that those who waited for a writer open to the new one.
    pub fn retarget(&mut self, target: Option<Target>, out: &mut Vec<PoolEvent>) {
        if target == self.target {
            return;
        }
        let old = std::mem::replace(&mut self.target, target);
        // A failover may re-point or rebuild replicas: what each was seen
        // to reach is learned again.
        self.replica_reached.clear();
        let stale: Vec<u32> = self
            .idle
            .iter()
            .copied()
            .filter(|&i| {
                self.slots.get(i).is_some_and(|p| {
                    // Reads' connections to the new writer: it is no
                    // replica any more, and nothing would lease them.
                    let promoted = target
                        .is_some_and(|t| p.conn.key().server.map(u16::from) == Some(t.server));
                    !self.belongs_to_target(p) || promoted
                })
            })
            .collect();
        for index in &stale {
            let id = self.id_of(*index);
            self.close(id, out);
        }
        tracing::info!(
            worker = self.worker,
            from = %describe(old),
            to = %describe(target),
            idle_closed = stale.len(),
            "backend writer changed: new connections go to {}",
            describe(target)
        );
        self.retry_at = None;
        self.writer_failing = None;
        self.dirty = true;
    }

    /// Several servers: a connect to the writer failed. Most often the
    /// writer died and the monitor has not seen it yet (it takes a few
    /// checks): the request waits, and leases hold off opening for
    /// `BACKEND_RETRY`, until the monitor names a writer or the server
    /// answers again. Bounded: once connects have failed for
    /// `--writer-wait-timeout`, requests get the error again.
    pub(super) fn wait_for_writer_after_failure(&mut self, now: Instant) -> bool {
        if !self.cfg.wait_for_writer {
            return false;
        }
        let since = self.writer_failing.map_or(now, |(since, _)| since);
        if now.duration_since(since) >= self.cfg.writer_wait_timeout {
            return false;
        }
        self.writer_failing = Some((since, now + BACKEND_RETRY));
        true
    }

    /// Connection `id`, new, logged in and set up for its first lease (or
    /// idle, wanted by nobody): if it reaches the writer, connects and
    /// setups to the writer work again.
    pub(super) fn writer_works(&mut self, id: BackendId) {
        if self.slot(id).is_some_and(|p| p.conn.key().server.is_none()) {
            self.writer_failing = None;
        }
    }

    /// A lease's setup (its schema, its settings) failed because its
    /// connection went: nothing of the session's command was sent. With
    /// one server that is the session's error, as before. With several,
    /// the server most often just died: a read goes to the writer, as for
    /// a replica's refused connect, and a request for the writer goes back
    /// to its place in its key's queue (`place`; at the back for one a
    /// connection was opened for) and waits for the next connection, or
    /// for the monitor's next writer, as a failed connect's does.
    /// Bounded by the same window: a server that takes connections and
    /// resets every setup gets no more than `--writer-wait-timeout`
    /// (the login does not end the window, `Pool::server_answered`).
    pub(super) fn setup_lost(
        &mut self,
        req: LeaseRequest,
        place: Option<(u64, Instant)>,
        cause: &str,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        if self.cfg.wait_for_writer && req.key.server.is_some() {
            return self.replica_open_failed(req, cause, now);
        }
        if !self.wait_for_writer_after_failure(now) {
            return out.push(PoolEvent::LeaseFailed {
                session: req.session,
                err_payload: unavailable(self.target_addr(), cause),
                reject: Some(RejectReason::BackendUnavailable),
            });
        }
        if self.log_limiter.allow(now) {
            tracing::warn!(
                worker = self.worker,
                backend = %self.target_addr(),
                "a lease's setup on the writer failed: {cause}; the statement waits for the writer"
            );
        }
        self.dirty = true;
        match place {
            Some((seq, since)) => {
                let deadline = since + self.cfg.wait_timeout;
                self.waiters.requeue(req, seq, since, deadline);
                self.publish();
            }
            None => self.enqueue(req, now),
        }
    }

    /// No writer: the monitor names none, or connects to the one it names
    /// fail. Only with several servers (with one, a failed connect is an
    /// error at once).
    fn writerless(&self) -> bool {
        self.cfg.wait_for_writer && (self.target.is_none() || self.writer_failing.is_some())
    }

    /// While there is no writer, a waiter gets ERR 1105 naming
    /// `--writer-wait-timeout` once it has waited that long. Every waiter's
    /// deadline is its arrival plus `--backend-wait-timeout`, so those
    /// that arrived more than the writer wait ago are the ones whose
    /// deadline is within the difference from now (the writer wait is cut
    /// to the backend wait at start).
    pub(super) fn expire_writer_waits(&mut self, now: Instant, out: &mut Vec<PoolEvent>) {
        if !self.writerless() || self.waiters.is_empty() {
            return;
        }
        let slack = self
            .cfg
            .wait_timeout
            .saturating_sub(self.cfg.writer_wait_timeout);
        let msg = format!(
            "ringgate: no writer for --writer-wait-timeout ({:?}): the writer {} was lost (failover) and no server took its place yet; the statement did not run; retry it",
            self.cfg.writer_wait_timeout,
            self.target_addr()
        );
        for (session, since) in self.waiters.expire(now + slack) {
            self.user_limited.remove(&session);
            self.m()
                .record_pool_wait(now.saturating_duration_since(since));
            out.push(PoolEvent::LeaseFailed {
                session,
                err_payload: err_payload(ER_UNKNOWN_ERROR, &msg),
                reject: Some(RejectReason::NoWriter),
            });
        }
        self.publish();
    }

    /// Leases hold off opening while a failed writer may be replaced.
    pub(super) fn holding_off(&self, now: Instant) -> bool {
        self.writer_failing.is_some_and(|(_, until)| now < until)
    }

    /// A planned switchover: while held, no lease is served (not even from
    /// the idle list), so that the transactions in flight finish and no
    /// new one starts on the old writer; the requests wait in the queue.
    pub fn hold(&mut self, held: bool) {
        if self.held != held {
            self.held = held;
            self.dirty = true;
        }
    }

    /// A connection may stay idle only if it reaches the server new
    /// connections of its key go to: the writer's, or, for a replica's
    /// key (`--read-write-split`), that replica (one promoted gets no
    /// reads: the driver stops naming it, and [`Pool::retarget`] closes
    /// its idle ones).
    pub(super) fn belongs_to_target(&self, p: &Pooled) -> bool {
        p.conn.key().server.is_some() || self.target.is_some_and(|t| t.server == p.server)
    }

    /// A connect to a replica for a read failed: the read goes to the
    /// writer instead (reads fall back to it whenever no replica will
    /// do), and the monitor takes the replica out within a few checks.
    pub(super) fn replica_open_failed(&mut self, mut req: LeaseRequest, cause: &str, now: Instant) {
        if self.log_limiter.allow(now) {
            tracing::warn!(
                worker = self.worker,
                server = req.key.server.unwrap_or_default(),
                "connection to a replica failed: {cause}; the read goes to the writer"
            );
        }
        req.key.server = None;
        self.dirty = true;
        self.enqueue(req, now);
    }
}

fn describe(target: Option<Target>) -> String {
    match target {
        Some(t) => t.addr.to_string(),
        None => "no writer".into(),
    }
}

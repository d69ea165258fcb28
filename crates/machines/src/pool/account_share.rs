//! Each backend account's share of `--backend-max-connections`
//! (`--backend-max-connections-per-user`): one account's connections,
//! across all workers, never exceed it, so the others always find room.
//!
//! A connection is charged to its account from the moment its unit of the
//! cap is reserved until its slot is freed, like the cap itself: an idle
//! connection of the account counts, since only that account can lease
//! it. An account at its share waits for one of its own connections to
//! come back (its queue is per key, so it holds up nobody else); one of its
//! idle connections of another key (other capabilities or collation) is
//! closed for it, since none of its keys could otherwise ever grow.
//!
//! Accounts, not proxy users: a connection is logged in as one account and
//! only leased to sessions of it, and MariaDB's own `max_user_connections`
//! counts the same way. With `--backend-identity shared` every client is
//! one account and the share does not apply.

use super::*;
use metrics::UserUsage;

impl Pool {
    /// The counters of the account behind `identity`; None for the shared
    /// account (and the greeting probe), which are nobody's share.
    pub(super) fn usage(&mut self, identity: IdentityId) -> Option<Arc<UserUsage>> {
        if self.identities.is_shared() {
            return None;
        }
        if let Some(u) = self.user_usage.get(&identity) {
            return Some(Arc::clone(u));
        }
        let user = self.identities.get(identity)?.user.clone();
        let usage = self.metrics.users().user(&user);
        self.user_usage.insert(identity, Arc::clone(&usage));
        Some(usage)
    }

    /// Charge one connection to the account of `identity`; false when it
    /// holds its share already.
    pub(super) fn charge_user(&mut self, identity: IdentityId) -> bool {
        let max = match self.cfg.max_per_user {
            0 => usize::MAX,
            n => n,
        };
        match self.usage(identity) {
            Some(u) => crate::try_reserve(&u.backends, max),
            None => true,
        }
    }

    /// Give back what [`Pool::charge_user`] took.
    pub(super) fn uncharge_user(&mut self, identity: IdentityId) {
        if let Some(u) = self.usage(identity) {
            crate::unreserve(&u.backends);
        }
    }

    /// `session`'s request found its account at its share: counted once
    /// per wait.
    pub(super) fn note_user_limited(&mut self, session: SessionId, identity: IdentityId) {
        if self.user_limited.insert(session) {
            if let Some(u) = self.usage(identity) {
                u.limit_waits.fetch_add(1, Relaxed);
            }
            self.publish();
        }
    }

    /// The account is at its share and `key` has nothing to lease: close
    /// one of the account's idle connections of another key, whose unit
    /// (of the cap and of the share) this key can then have.
    pub(super) fn evict_own_other_key(&mut self, key: PoolKey, out: &mut Vec<PoolEvent>) {
        let closing = self.slots.values().any(|p| {
            p.conn.key().identity == key.identity && p.conn.key() != key && p.conn.is_closed()
        });
        if closing {
            return;
        }
        let pos = self.idle.iter().position(|&i| {
            self.slots
                .get(i)
                .is_some_and(|p| p.conn.key().identity == key.identity && p.conn.key() != key)
        });
        let Some(pos) = pos else {
            return;
        };
        let index = self.idle.remove(pos);
        self.m().backend_idle.fetch_sub(1, Relaxed);
        let id = self.id_of(index);
        self.close(id, out);
    }
}

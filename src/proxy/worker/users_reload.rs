//! A reload of the users file (SIGHUP), as each worker applies it at its
//! next tick: the backend identities of removed users are revoked (their
//! credentials dropped, and so overwritten), their idle backend
//! connections closed, and with `--on-user-removed close` their live
//! sessions ended. Users are matched by name: a user still in the file
//! keeps its sessions whatever its entries now say, as MySQL keeps a
//! session across ALTER USER.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::*;
use crate::config::OnUserRemoved;

impl Worker {
    /// Apply a users file swapped in since the last call (a no-op when
    /// it is the same set).
    pub(super) fn apply_users_reload(&mut self) {
        if Arc::ptr_eq(&self.users_applied, &self.users) {
            return;
        }
        self.users_applied = Arc::clone(&self.users);
        let users = Arc::clone(&self.users);
        let mut events = Vec::new();
        let revoked = self
            .pool
            .prune_identities(|u| users.contains(u), &mut events);
        self.pool_q.extend(events);
        let closed = match self.shared.config.on_user_removed {
            OnUserRemoved::Close => self.close_removed_sessions(&users),
            OnUserRemoved::Keep => 0,
        };
        if revoked > 0 || closed > 0 {
            tracing::info!(
                worker = self.id,
                "users file reload: {revoked} backend identit{} of removed users revoked, \
                 {closed} of their sessions closed (--on-user-removed {})",
                if revoked == 1 { "y" } else { "ies" },
                match self.shared.config.on_user_removed {
                    OnUserRemoved::Close => "close",
                    OnUserRemoved::Keep => "keep",
                }
            );
        }
    }

    /// End every session whose user is not in `users`, as a KILL
    /// CONNECTION ends one: its client is shut down, so its next read sees
    /// the end (the session then gives its backend connection back, whose
    /// identity is revoked: it is closed, not pooled). Returns how many.
    fn close_removed_sessions(&mut self, users: &Users) -> usize {
        let mut closed = 0;
        for index in self.sessions.indexes() {
            let generation = self.sessions.generation(index);
            let sid = SessionId { index, generation };
            let Some(slot) = self.sessions.get_mut(index, generation) else {
                continue;
            };
            let removed = slot.session.user().is_some_and(|u| !users.contains(u));
            if !removed || slot.closing {
                continue;
            }
            let how = slot.io.shutdown();
            self.shutdown_client(sid, how);
            closed += 1;
        }
        self.metrics()
            .removed_user_sessions_closed_total
            .fetch_add(closed as u64, Relaxed);
        closed
    }
}

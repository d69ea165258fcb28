//! Per-user counters shared by every worker: the backend connections each
//! backend account holds (what `--backend-max-connections-per-user` is
//! enforced against, `crates/machines/src/pool/account_share.rs`) and the leases that waited
//! because their user held its share. Keyed by account name, so the same
//! user on every worker counts once; the table only grows by the accounts
//! that log in, which the users file bounds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One account's counters.
#[derive(Debug, Default)]
pub struct UserUsage {
    /// Backend connections it holds (opening, idle, leased or closing).
    pub backends: AtomicUsize,
    /// Lease requests that waited because it held its share.
    pub limit_waits: AtomicU64,
}

/// Every account's counters, by name.
#[derive(Debug, Default)]
pub struct UserTable {
    users: Mutex<HashMap<String, Arc<UserUsage>>>,
}

impl UserTable {
    /// The counters of `user`, made on first use. A lock, but taken once
    /// per account per worker (the pool keeps what it gets).
    pub fn user(&self, user: &str) -> Arc<UserUsage> {
        let mut users = match self.users.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        Arc::clone(users.entry(user.to_owned()).or_default())
    }

    /// (user, backend connections, limit waits), sorted by user.
    pub fn snapshot(&self) -> Vec<(String, usize, u64)> {
        let users = match self.users.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut rows: Vec<_> = users
            .iter()
            .map(|(name, u)| {
                (
                    name.clone(),
                    u.backends.load(Ordering::Relaxed),
                    u.limit_waits.load(Ordering::Relaxed),
                )
            })
            .collect();
        rows.sort();
        rows
    }
}

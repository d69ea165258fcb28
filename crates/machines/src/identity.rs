//! Who backend connections log in as, per worker.
//!
//! With `--backend-identity passthrough` each client logs in to the
//! backend as itself (or as the account its users-file entry maps it to),
//! with the credential recovered from its own login. Pool keys name that
//! account by a small [`IdentityId`]; this table turns the id back into the
//! user name and credential when a connection logs in. With `shared`,
//! there is one identity, [`IdentityId::SHARED`]: `--backend-user`.
//!
//! The table grows by successful logins: one row per (backend user,
//! password) that the users file accepted, with the proxy users whose
//! logins led to it. A reload prunes it ([`Identities::prune`]): a row
//! none of whose proxy users is left in the file is emptied, and its
//! credential dropped (and so overwritten: `Credential` zeroises itself).
//! An id is never handed out again, since a session's key or a queued
//! lease may still name it; such an id is revoked, and the pool opens no
//! connection for it.

use std::collections::HashMap;
use std::fmt;

use crate::ids::IdentityId;
use wire::auth::{Credential, Stage1};
use wire::users::Authenticated;

/// A backend account and what proves it. `Debug` redacts the credential.
#[derive(Clone, PartialEq, Eq)]
pub struct BackendLogin {
    pub user: String,
    pub credential: Credential,
}

impl fmt::Debug for BackendLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendLogin")
            .field("user", &self.user)
            .field("credential", &self.credential)
            .finish()
    }
}

/// How clients appear on the backend (`--backend-identity`).
#[derive(Clone, Debug)]
pub enum IdentityMode {
    /// Each client as itself (or its `BackendUser`).
    Passthrough,
    /// Every client as this one account (`--backend-user`).
    Shared(BackendLogin),
}

/// One identity: the account, and the proxy users that logged in as it.
struct Row {
    login: BackendLogin,
    proxy_users: Vec<String>,
}

/// One worker's identities: id → account, and account → id.
pub struct Identities {
    shared: bool,
    /// By id; `None`: pruned (revoked).
    logins: Vec<Option<Row>>,
    /// Keyed by what a login sends: the user and the stage1 (two
    /// credentials with the same stage1 are the same identity).
    ids: HashMap<(String, Option<Stage1>), IdentityId>,
}

impl Identities {
    pub fn new(mode: IdentityMode) -> Identities {
        let mut t = Identities {
            shared: false,
            logins: Vec::new(),
            ids: HashMap::new(),
        };
        let login = match mode {
            IdentityMode::Shared(login) => {
                t.shared = true;
                login
            }
            // Id 0 is never handed out in passthrough mode: a placeholder
            // that no login matches keeps SHARED from naming a real user.
            IdentityMode::Passthrough => BackendLogin {
                user: String::new(),
                credential: Credential::Plaintext(Vec::new()),
            },
        };
        t.logins.push(Some(Row {
            login,
            proxy_users: Vec::new(),
        }));
        t
    }

    /// `--backend-identity shared`.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The identity a successful login of `proxy_user` runs as: the shared
    /// one, or the account the login maps to (added on first use).
    pub fn intern(&mut self, proxy_user: &str, auth: &Authenticated) -> IdentityId {
        if self.shared {
            return IdentityId::SHARED;
        }
        let key = (auth.backend_user.clone(), auth.credential.stage1());
        if let Some(&id) = self.ids.get(&key) {
            if let Some(Some(row)) = self.logins.get_mut(id.0 as usize) {
                // The same password, perhaps proven better this time (a full
                // authentication gives the cleartext, which a caching_sha2
                // backend's own full authentication needs): keep the best.
                if auth.credential.strength() > row.login.credential.strength() {
                    row.login.credential = auth.credential.clone();
                }
                if !row.proxy_users.iter().any(|u| u == proxy_user) {
                    row.proxy_users.push(proxy_user.to_owned());
                }
            }
            return id;
        }
        let id = IdentityId(self.logins.len() as u32);
        self.logins.push(Some(Row {
            login: BackendLogin {
                user: auth.backend_user.clone(),
                credential: auth.credential.clone(),
            },
            proxy_users: vec![proxy_user.to_owned()],
        }));
        self.ids.insert(key, id);
        id
    }

    /// The account behind an id (None: not an id of this table, a revoked
    /// one, or the unused shared slot in passthrough mode).
    pub fn get(&self, id: IdentityId) -> Option<&BackendLogin> {
        if !self.shared && id == IdentityId::SHARED {
            return None;
        }
        self.logins
            .get(id.0 as usize)
            .and_then(|r| r.as_ref())
            .map(|r| &r.login)
    }

    /// Whether `id` was pruned: its sessions may open no connection.
    pub fn is_revoked(&self, id: IdentityId) -> bool {
        matches!(self.logins.get(id.0 as usize), Some(None))
    }

    /// A reload: forget the proxy users for which `present` is false (no
    /// longer in the users file), and revoke each identity left with none.
    /// Returns the revoked ids. Shared mode has nothing to prune: its one
    /// account is `--backend-user`, not the users file's.
    pub fn prune(&mut self, present: impl Fn(&str) -> bool) -> Vec<IdentityId> {
        if self.shared {
            return Vec::new();
        }
        let mut revoked = Vec::new();
        for (i, slot) in self.logins.iter_mut().enumerate().skip(1) {
            let Some(row) = slot else { continue };
            row.proxy_users.retain(|u| present(u));
            if row.proxy_users.is_empty() {
                revoked.push(IdentityId(i as u32));
                // Dropping the row drops its credential, which zeroises it.
                *slot = None;
            }
        }
        self.ids.retain(|_, id| !revoked.contains(id));
        revoked
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.logins.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(user: &str, pw: &[u8]) -> Authenticated {
        Authenticated {
            backend_user: user.into(),
            credential: Credential::Stage1(Stage1::of_password(pw)),
        }
    }

    #[test]
    fn passthrough_gives_each_account_its_own_id() {
        let mut t = Identities::new(IdentityMode::Passthrough);
        assert!(!t.is_shared());
        let a = t.intern("p", &auth("alice", b"a"));
        let b = t.intern("p", &auth("bob", b"b"));
        assert_ne!(a, b);
        assert_ne!(a, IdentityId::SHARED);
        assert_eq!(t.intern("p", &auth("alice", b"a")), a);
        // The same password given as plaintext is the same identity.
        let plain = Authenticated {
            backend_user: "alice".into(),
            credential: Credential::Plaintext(b"a".to_vec()),
        };
        assert_eq!(t.intern("p", &plain), a);
        // Another password (a rotation) is another identity.
        assert_ne!(t.intern("p", &auth("alice", b"a2")), a);
        assert_eq!(t.get(b).map(|l| l.user.as_str()), Some("bob"));
        assert_eq!(t.get(IdentityId::SHARED), None);
        assert_eq!(t.get(IdentityId(99)), None);
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_better_proof_of_the_same_password_replaces_the_credential() {
        let mut t = Identities::new(IdentityMode::Passthrough);
        let a = t.intern("p", &auth("erin", b"pw"));
        let full = Authenticated {
            backend_user: "erin".into(),
            credential: Credential::Plaintext(b"pw".to_vec()),
        };
        assert_eq!(t.intern("p", &full), a);
        assert_eq!(t.get(a).unwrap().credential, full.credential);
        // A weaker one later does not take it back.
        assert_eq!(t.intern("p", &auth("erin", b"pw")), a);
        assert_eq!(t.get(a).unwrap().credential, full.credential);
    }

    #[test]
    fn a_reload_revokes_the_identities_of_removed_users_only() {
        let mut t = Identities::new(IdentityMode::Passthrough);
        let alice = t.intern("alice", &auth("alice", b"a"));
        let bob = t.intern("bob", &auth("bob", b"b"));
        // Two proxy users mapped to one backend account and password.
        let shared = t.intern("carol", &auth("reporting", b"r"));
        assert_eq!(t.intern("dan", &auth("reporting", b"r")), shared);
        let revoked = t.prune(|u| u == "bob" || u == "dan");
        assert_eq!(revoked, vec![alice]);
        assert!(t.is_revoked(alice) && t.get(alice).is_none());
        assert!(!t.is_revoked(bob) && t.get(bob).is_some());
        assert!(t.get(shared).is_some(), "dan still logs in as it");
        assert!(!t.is_revoked(IdentityId::SHARED) && !t.is_revoked(IdentityId(99)));
        // Alice added back: a new id, never the revoked one.
        let again = t.intern("alice", &auth("alice", b"a"));
        assert!(again != alice && t.get(again).is_some());
        assert_eq!(t.prune(|_| false), vec![bob, shared, again]);
    }

    #[test]
    fn shared_is_one_identity_for_everyone() {
        let login = BackendLogin {
            user: "ringgate".into(),
            credential: Credential::Plaintext(b"hunter2".to_vec()),
        };
        let mut t = Identities::new(IdentityMode::Shared(login.clone()));
        assert!(t.is_shared());
        assert_eq!(t.intern("p", &auth("alice", b"a")), IdentityId::SHARED);
        assert_eq!(t.intern("p", &auth("bob", b"b")), IdentityId::SHARED);
        assert_eq!(t.get(IdentityId::SHARED), Some(&login));
        assert!(t.prune(|_| false).is_empty());
        assert_eq!(t.get(IdentityId::SHARED), Some(&login));
        assert!(!format!("{login:?}").contains("hunter2"));
    }
}

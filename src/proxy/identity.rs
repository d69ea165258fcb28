//! Who backend connections log in as, per worker.
//!
//! With `--backend-identity passthrough` each client logs in to the
//! backend as itself (or as the account its users-file entry maps it to),
//! with the credential recovered from its own login. Pool keys name that
//! account by a small [`IdentityId`]; this table turns the id back into the
//! user name and credential when a connection logs in. With `shared`,
//! there is one identity, [`IdentityId::SHARED`]: `--backend-user`.
//!
//! The table only grows by successful logins, so it holds at most one row
//! per (backend user, password) that the users file has accepted since the
//! worker started; rows are never removed, because an idle connection or a
//! queued lease may still name one.

use std::collections::HashMap;
use std::fmt;

use super::ids::IdentityId;
use crate::mysql::auth::{Credential, Stage1};
use crate::mysql::users::Authenticated;

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

/// One worker's identities: id → account, and account → id.
pub struct Identities {
    shared: bool,
    logins: Vec<BackendLogin>,
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
        match mode {
            IdentityMode::Shared(login) => {
                t.shared = true;
                t.logins.push(login);
            }
            // Id 0 is never handed out in passthrough mode: a placeholder
            // that no login matches keeps SHARED from naming a real user.
            IdentityMode::Passthrough => t.logins.push(BackendLogin {
                user: String::new(),
                credential: Credential::Plaintext(Vec::new()),
            }),
        }
        t
    }

    /// `--backend-identity shared`.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The identity a successful client login runs as: the shared one, or
    /// the account the login maps to (added on first use).
    pub fn intern(&mut self, auth: &Authenticated) -> IdentityId {
        if self.shared {
            return IdentityId::SHARED;
        }
        let key = (auth.backend_user.clone(), auth.credential.stage1());
        if let Some(&id) = self.ids.get(&key) {
            // The same password, perhaps proven better this time (a full
            // authentication gives the cleartext, which a caching_sha2
            // backend's own full authentication needs): keep the best.
            if let Some(login) = self.logins.get_mut(id.0 as usize) {
                if auth.credential.strength() > login.credential.strength() {
                    login.credential = auth.credential.clone();
                }
            }
            return id;
        }
        let id = IdentityId(self.logins.len() as u32);
        self.logins.push(BackendLogin {
            user: auth.backend_user.clone(),
            credential: auth.credential.clone(),
        });
        self.ids.insert(key, id);
        id
    }

    /// The account behind an id (None: not an id of this table, or the
    /// unused shared slot in passthrough mode).
    pub fn get(&self, id: IdentityId) -> Option<&BackendLogin> {
        if !self.shared && id == IdentityId::SHARED {
            return None;
        }
        self.logins.get(id.0 as usize)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
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
        let a = t.intern(&auth("alice", b"a"));
        let b = t.intern(&auth("bob", b"b"));
        assert_ne!(a, b);
        assert_ne!(a, IdentityId::SHARED);
        assert_eq!(t.intern(&auth("alice", b"a")), a);
        // The same password given as plaintext is the same identity.
        let plain = Authenticated {
            backend_user: "alice".into(),
            credential: Credential::Plaintext(b"a".to_vec()),
        };
        assert_eq!(t.intern(&plain), a);
        // Another password (a rotation) is another identity.
        assert_ne!(t.intern(&auth("alice", b"a2")), a);
        assert_eq!(t.get(b).map(|l| l.user.as_str()), Some("bob"));
        assert_eq!(t.get(IdentityId::SHARED), None);
        assert_eq!(t.get(IdentityId(99)), None);
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_better_proof_of_the_same_password_replaces_the_credential() {
        let mut t = Identities::new(IdentityMode::Passthrough);
        let a = t.intern(&auth("erin", b"pw"));
        let full = Authenticated {
            backend_user: "erin".into(),
            credential: Credential::Plaintext(b"pw".to_vec()),
        };
        assert_eq!(t.intern(&full), a);
        assert_eq!(t.get(a).unwrap().credential, full.credential);
        // A weaker one later does not take it back.
        assert_eq!(t.intern(&auth("erin", b"pw")), a);
        assert_eq!(t.get(a).unwrap().credential, full.credential);
    }

    #[test]
    fn shared_is_one_identity_for_everyone() {
        let login = BackendLogin {
            user: "ringgate".into(),
            credential: Credential::Plaintext(b"hunter2".to_vec()),
        };
        let mut t = Identities::new(IdentityMode::Shared(login.clone()));
        assert!(t.is_shared());
        assert_eq!(t.intern(&auth("alice", b"a")), IdentityId::SHARED);
        assert_eq!(t.intern(&auth("bob", b"b")), IdentityId::SHARED);
        assert_eq!(t.get(IdentityId::SHARED), Some(&login));
        assert!(!format!("{login:?}").contains("hunter2"));
    }
}

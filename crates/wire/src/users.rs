//! The users file: Vitess's static-auth JSON format.
//!
//! ```json
//! {"alice": [{"Password": "secret"}],
//!  "bob":   [{"MysqlNativePassword": "*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"}]}
//! ```
//!
//! Each user maps to a list of entries and any entry may authenticate (this
//! is how Vitess supports password rotation). Vitess's older form, where a
//! user maps to a single entry object, is accepted too. Unknown fields
//! (`UserData`, `SourceHost`, `Groups`) are ignored. Only
//! `SHA1(SHA1(password))` is kept in memory: that is all
//! mysql_native_password verification needs, and it keeps plaintext out of
//! core dumps.
//!
//! ringgate's own optional fields map an entry to a named backend account
//! (used with `--backend-identity passthrough`):
//!
//! ```json
//! {"carol": [{"Password": "pw", "BackendUser": "reporting", "BackendPassword": "rpt-pw"}]}
//! ```
//!
//! `BackendUser` alone keeps the client's own password (recovered from its
//! login); `BackendPassword` alone keeps the client's user name.
//! `BackendPassword` is kept as given: a caching_sha2_password backend
//! asks for the cleartext when its cache misses (full authentication).
//!
//! caching_sha2_password: vtgate checks its fast-auth scramble against the
//! plaintext `Password` only (it has no hash field for it). ringgate does
//! that too and also takes MySQL's own verifier, as
//! `SELECT authentication_string FROM mysql.user` prints it for a
//! caching_sha2 account, in a ringgate field:
//!
//! ```json
//! {"erin": [{"MysqlCachingSha2Password": "0x24412430303524..."}]}
//! ```
//!
//! (the 70 bytes as `$A$005$…` with JSON escapes for the salt's control
//! characters, or their hex as `SELECT HEX(authentication_string)` prints
//! it). Such an entry can only be checked with the cleartext password (full
//! authentication); a successful one is cached (see [`Users::sha2_fast`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Deserialize;

use crate::auth::{native_recover, native_stage2, parse_mysql_hash, Credential, Stage1};
use crate::caching_sha2::{Sha2Stage1, Sha2Stage2, Verifier};

mod decoy;

/// Errors loading the users file. Each names the file (or `<inline>` for
/// [`Users::parse`]) so an operator can find the problem.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    #[error("cannot read users file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("users file {origin}: invalid JSON at line {line}, column {column}: {message}")]
    Json {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("users file {origin}: user {user:?}: {reason}")]
    Entry {
        origin: String,
        user: String,
        reason: String,
    },
}

#[derive(Deserialize)]
struct RawEntry {
    #[serde(rename = "Password", default)]
    password: Option<String>,
    #[serde(rename = "MysqlNativePassword", default)]
    mysql_native_password: Option<String>,
    #[serde(rename = "MysqlCachingSha2Password", default)]
    mysql_caching_sha2_password: Option<String>,
    #[serde(rename = "BackendUser", default)]
    backend_user: Option<String>,
    #[serde(rename = "BackendPassword", default)]
    backend_password: Option<String>,
}

/// What an entry keeps of its password.
#[derive(Clone)]
enum Secret {
    /// `Password`: the native stage2, the sha2 stage2 (fast auth needs no
    /// cache) and the backend credential a login against it proves:
    /// SHA1(password) and SHA256(password), which log in to a backend with
    /// mysql_native_password or caching_sha2 fast auth (`Plaintext` of
    /// nothing for the empty password).
    Plain {
        native: [u8; 20],
        sha2: Sha2Stage2,
        hashes: Credential,
    },
    /// `MysqlNativePassword`: SHA1(SHA1(password)).
    Native([u8; 20]),
    /// `MysqlCachingSha2Password`: MySQL's sha256-crypt verifier.
    CachingSha2(Box<Verifier>),
}

/// One accepted password of a user and where it leads on the backend.
#[derive(Clone)]
struct Entry {
    secret: Secret,
    /// `BackendUser`: log in to the backend as this account instead.
    backend_user: Option<String>,
    /// `BackendPassword`, as what a login needs.
    backend_credential: Option<Credential>,
}

/// A successful login and the backend account it maps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authenticated {
    /// The account to log in to the backend as: the client's own name
    /// unless the entry has a `BackendUser`.
    pub backend_user: String,
    /// Its credential: the one recovered from the client's login, unless
    /// the entry has a `BackendPassword`. `Debug` redacts it.
    pub credential: Credential,
}

/// The answer to a caching_sha2_password fast-auth scramble.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sha2Fast {
    /// It matches (AuthMoreData 0x03, then OK).
    Accepted(Authenticated),
    /// Not in the cache and no `Password` entry matches: ask for the
    /// cleartext (AuthMoreData 0x04), as MySQL does on a cache miss. Every
    /// kind of user gets this, a user with only `Password` entries and an
    /// unknown one too, so the answer does not tell them apart; the full
    /// authentication then refuses them as it refuses a wrong password.
    FullAuth,
    /// The empty token (the empty password) did not match: ERR 1045 at
    /// once, as MySQL answers it, for every kind of user.
    Refused,
}

/// How many distinct successful passwords the cache keeps per user (a
/// rotation has two live at once).
const CACHE_PER_USER: usize = 4;

/// The credential set loaded from a users file.
#[derive(Default)]
pub struct Users {
    /// user name → every accepted password.
    users: HashMap<String, Vec<Entry>>,
    /// caching_sha2_password's cache: user → SHA256(SHA256(pw)) of each
    /// password that passed a full authentication, with what that login
    /// mapped to. Lives and dies with this set: a reload (SIGHUP) makes a
    /// new `Users`, so the cache is emptied, as MySQL empties it on
    /// FLUSH PRIVILEGES. Process-wide (every worker sees every full auth);
    /// the lock is held for a lookup or an insert only.
    sha2_cache: Mutex<HashMap<String, Vec<(Sha2Stage2, Authenticated)>>>,
    /// The entry kinds of every user, in name order: an unknown name gets
    /// one of them as its decoy (`users/decoy.rs`).
    shapes: Vec<Vec<decoy::Kind>>,
}

/// A copy starts with an empty cache.
impl Clone for Users {
    fn clone(&self) -> Users {
        Users {
            users: self.users.clone(),
            sha2_cache: Mutex::default(),
            shapes: self.shapes.clone(),
        }
    }
}

// Hashes are secrets-equivalent for native auth (a stage2 hash plus a
// sniffed handshake reveals stage1), so never print them.
impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.users.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Users").field("users", &names).finish()
    }
}

impl Users {
    /// Parses users-file JSON held in memory.
    pub fn parse(json: &str) -> Result<Users, UsersError> {
        Self::parse_with_origin(json, "<inline>")
    }

    /// Reads and parses a users file.
    pub fn load(path: &Path) -> Result<Users, UsersError> {
        let json = std::fs::read_to_string(path).map_err(|source| UsersError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse_with_origin(&json, &path.display().to_string())
    }

    fn parse_with_origin(json: &str, origin: &str) -> Result<Users, UsersError> {
        let json_err = |e: serde_json::Error| UsersError::Json {
            origin: origin.to_owned(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        };
        let raw: HashMap<String, Vec<RawEntry>> = match serde_json::from_str(json) {
            Ok(raw) => raw,
            // Syntax errors are reported as is; a shape error may just mean
            // the legacy one-object-per-user form.
            Err(e) if e.is_syntax() || e.is_eof() => return Err(json_err(e)),
            Err(e) => match serde_json::from_str::<HashMap<String, RawEntry>>(json) {
                Ok(legacy) => legacy.into_iter().map(|(u, e)| (u, vec![e])).collect(),
                Err(_) => return Err(json_err(e)),
            },
        };
        let mut users = HashMap::with_capacity(raw.len());
        for (user, entries) in raw {
            let bad = |reason: String| UsersError::Entry {
                origin: origin.to_owned(),
                user: user.clone(),
                reason,
            };
            if entries.is_empty() {
                return Err(bad("no password entries".to_owned()));
            }
            let mut parsed = Vec::with_capacity(entries.len());
            for (i, entry) in entries.iter().enumerate() {
                let secret = entry_secret(entry).map_err(|r| bad(format!("entry {i}: {r}")))?;
                if entry.backend_user.as_deref() == Some("") {
                    return Err(bad(format!("entry {i}: BackendUser must not be empty")));
                }
                parsed.push(Entry {
                    secret,
                    backend_user: entry.backend_user.clone(),
                    // Kept as given: a caching_sha2 backend's full
                    // authentication needs the cleartext.
                    backend_credential: entry
                        .backend_password
                        .as_ref()
                        .map(|p| Credential::Plaintext(p.as_bytes().to_vec())),
                });
            }
            users.insert(user, parsed);
        }
        let mut names: Vec<&String> = users.keys().collect();
        names.sort_unstable();
        let shapes = names
            .iter()
            .map(|n| {
                users[*n]
                    .iter()
                    .map(|e| decoy::Kind::of(&e.secret))
                    .collect()
            })
            .collect();
        Ok(Users {
            users,
            sha2_cache: Mutex::default(),
            shapes,
        })
    }

    /// The entries a login for `user` is checked against: the user's own,
    /// or for a name not in the file a decoy's, which no password matches
    /// and which lead down the same code paths as a real user's.
    fn entries(&self, user: &str) -> Cow<'_, [Entry]> {
        match self.users.get(user) {
            Some(entries) => Cow::Borrowed(entries),
            None => Cow::Owned(decoy::entries(user, &self.shapes)),
        }
    }

    /// Checks a mysql_native_password token for `user` against every entry.
    /// Unknown users fail. All entries are checked (no early exit) so timing
    /// does not reveal which entry matched.
    pub fn verify_native(&self, user: &str, scramble: &[u8], token: &[u8]) -> bool {
        self.authenticate(user, scramble, token).is_some()
    }

    /// Checks a mysql_native_password token like [`Users::verify_native`]
    /// and returns the backend account the login maps to, with the
    /// credential to log in with. The first matching entry decides; every
    /// entry is still checked, so timing does not reveal which matched.
    pub fn authenticate(&self, user: &str, scramble: &[u8], token: &[u8]) -> Option<Authenticated> {
        let entries = self.entries(user);
        let mut found: Option<(&Entry, Credential)> = None;
        for e in entries.iter() {
            let recovered = match &e.secret {
                // The entry's hashes also hold SHA256(password).
                Secret::Plain { native, hashes, .. } => {
                    native_recover(native, scramble, token).map(|_| hashes.clone())
                }
                Secret::Native(native) => native_recover(native, scramble, token),
                // A sha256-crypt verifier cannot check a native token.
                Secret::CachingSha2(_) => None,
            };
            if found.is_none() {
                found = recovered.map(|c| (e, c));
            }
        }
        let (entry, recovered) = found?;
        Some(entry.authenticated(user, recovered))
    }

    /// Whether `user` has an entry that caching_sha2_password can check
    /// (`Password` or `MysqlCachingSha2Password`). A client that proposes
    /// that plugin for a user with only native hashes is switched to
    /// mysql_native_password, as before. An unknown name answers for its
    /// decoy.
    pub fn sha2_capable(&self, user: &str) -> bool {
        self.entries(user)
            .iter()
            .any(|e| !matches!(e.secret, Secret::Native(_)))
    }

    /// Whether every entry of `user` is a caching_sha2 verifier: a client
    /// that answered with a native token is switched to
    /// caching_sha2_password, as MySQL switches to the account's plugin.
    /// An unknown name answers for its decoy.
    pub fn sha2_only(&self, user: &str) -> bool {
        self.entries(user)
            .iter()
            .all(|e| matches!(e.secret, Secret::CachingSha2(_)))
    }

    /// Whether `user` is in the file with an entry that only the cleartext
    /// can check (a verifier or a native hash): a failed fast auth of such
    /// a user may be a cache miss, worth a log line when the transport
    /// cannot carry a full authentication. For the log only, never for
    /// the answer.
    pub fn needs_cleartext(&self, user: &str) -> bool {
        self.users
            .get(user)
            .is_some_and(|es| es.iter().any(|e| !matches!(e.secret, Secret::Plain { .. })))
    }

    /// Checks a caching_sha2_password fast-auth scramble for `nonce`:
    /// against the cache of earlier full authentications, then against
    /// `Password` entries. An empty token is the empty password, checked
    /// at once (MySQL does the same).
    pub fn sha2_fast(&self, user: &str, nonce: &[u8], token: &[u8]) -> Sha2Fast {
        if token.is_empty() {
            return match self.authenticate_cleartext(user, b"") {
                Some(a) => Sha2Fast::Accepted(a),
                None => Sha2Fast::Refused,
            };
        }
        let cached = self.sha2_cache.lock().ok().and_then(|c| {
            c.get(user).and_then(|list| {
                list.iter()
                    .find(|(s, _)| s.verify_fast(nonce, token))
                    .map(|(_, a)| a.clone())
            })
        });
        if let Some(a) = cached {
            return Sha2Fast::Accepted(a);
        }
        let entries = self.entries(user);
        let mut found = None;
        for e in entries.iter() {
            if let Secret::Plain { sha2, hashes, .. } = &e.secret {
                if sha2.verify_fast(nonce, token) && found.is_none() {
                    found = Some(e.authenticated(user, hashes.clone()));
                }
            }
        }
        match found {
            Some(a) => Sha2Fast::Accepted(a),
            None => Sha2Fast::FullAuth,
        }
    }

    /// Full authentication with the cleartext password (caching_sha2 over
    /// a secure transport): checked against every kind of entry. A success
    /// is cached for later fast auths of the same password.
    pub fn authenticate_cleartext(&self, user: &str, password: &[u8]) -> Option<Authenticated> {
        let entries = self.entries(user);
        let mut found = None;
        for e in entries.iter() {
            let ok = match &e.secret {
                Secret::Plain { native, .. } | Secret::Native(native) => {
                    ct_eq20(&native_stage2(password), native)
                }
                Secret::CachingSha2(v) => v.verify_cleartext(password),
            };
            if ok && found.is_none() {
                // The cleartext itself: a caching_sha2 backend may need it
                // for its own full authentication.
                found = Some(e.authenticated(user, Credential::Plaintext(password.to_vec())));
            }
        }
        let auth = found?;
        if !password.is_empty() {
            if let Ok(mut cache) = self.sha2_cache.lock() {
                let list = cache.entry(user.to_owned()).or_default();
                let stage2 = Sha2Stage2::of_password(password);
                list.retain(|(s, _)| *s != stage2);
                if list.len() >= CACHE_PER_USER {
                    list.remove(0);
                }
                list.push((stage2, auth.clone()));
            }
        }
        Some(auth)
    }

    /// Whether any entry names a backend account (`BackendUser` or
    /// `BackendPassword`), which only `--backend-identity passthrough` uses.
    pub fn has_backend_mappings(&self) -> bool {
        self.users
            .values()
            .flatten()
            .any(|e| e.backend_user.is_some() || e.backend_credential.is_some())
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    pub fn contains(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }
}

impl Entry {
    /// The login this entry maps to, `recovered` being the credential the
    /// client's own login proved.
    fn authenticated(&self, user: &str, recovered: Credential) -> Authenticated {
        Authenticated {
            backend_user: self.backend_user.clone().unwrap_or_else(|| user.to_owned()),
            credential: self.backend_credential.clone().unwrap_or(recovered),
        }
    }
}

/// Derives what one entry keeps. A non-empty `MysqlCachingSha2Password`
/// or `MysqlNativePassword` wins over `Password` (the hash is what the
/// operator meant to deploy), as `MysqlNativePassword` does in Vitess; an
/// empty `MysqlNativePassword` alone means an empty password, as an empty
/// `authentication_string` does in MySQL.
fn entry_secret(e: &RawEntry) -> Result<Secret, String> {
    if let Some(v) = e.mysql_caching_sha2_password.as_deref() {
        if !v.is_empty() {
            return Verifier::parse(v)
                .map(|v| Secret::CachingSha2(Box::new(v)))
                .map_err(|err| format!("MysqlCachingSha2Password: {err}"));
        }
    }
    match (&e.mysql_native_password, &e.password) {
        (Some(h), _) if !h.is_empty() => parse_mysql_hash(h)
            .map(Secret::Native)
            .map_err(|err| format!("MysqlNativePassword: {err}")),
        (_, Some(p)) => Ok(plain_secret(p.as_bytes())),
        (Some(_), None) => Ok(Secret::Native(native_stage2(b""))),
        (None, None) => Err(
            "entry has none of \"Password\", \"MysqlNativePassword\" and \"MysqlCachingSha2Password\""
                .to_owned(),
        ),
    }
}

/// What a `Password` entry keeps of password `p`.
fn plain_secret(p: &[u8]) -> Secret {
    Secret::Plain {
        native: native_stage2(p),
        sha2: Sha2Stage2::of_password(p),
        hashes: if p.is_empty() {
            Credential::Plaintext(Vec::new())
        } else {
            Credential::Hashes {
                native: Stage1::of_password(p),
                sha2: Sha2Stage1::of_password(p),
            }
        },
    }
}

/// Constant-time equality of two 20-byte digests.
fn ct_eq20(a: &[u8; 20], b: &[u8; 20]) -> bool {
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::native_token;

    const SCRAMBLE: &[u8; 20] = b"abcdefgh0123456789AB";

    #[test]
    fn parse_both_forms() {
        let u = Users::parse(
            r#"{"alice": [{"Password": "secret", "UserData": "x", "SourceHost": "%"}],
                "bob": [{"MysqlNativePassword": "*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"}]}"#,
        )
        .unwrap();
        assert_eq!(u.len(), 2);
        assert!(!u.is_empty());
        assert!(u.contains("alice") && u.contains("bob") && !u.contains("carol"));
        assert!(u.verify_native("alice", SCRAMBLE, &native_token(b"secret", SCRAMBLE)));
        assert!(!u.verify_native("alice", SCRAMBLE, &native_token(b"secreT", SCRAMBLE)));
        assert!(u.verify_native("bob", SCRAMBLE, &native_token(b"123456", SCRAMBLE)));
        assert!(!u.verify_native("bob", SCRAMBLE, &native_token(b"12345", SCRAMBLE)));
        assert!(!u.verify_native("carol", SCRAMBLE, &native_token(b"secret", SCRAMBLE)));
        assert!(!format!("{u:?}").contains("6BB4"));
    }

    #[test]
    fn several_entries_any_matches() {
        let u = Users::parse(
            r#"{"app": [{"Password": "old"},
                        {"MysqlNativePassword": "*2470c0c06dee42fd1618bb99005adca2ec9d1e19"}]}"#,
        )
        .unwrap();
        assert!(u.verify_native("app", SCRAMBLE, &native_token(b"old", SCRAMBLE)));
        assert!(u.verify_native("app", SCRAMBLE, &native_token(b"password", SCRAMBLE)));
        assert!(!u.verify_native("app", SCRAMBLE, &native_token(b"new", SCRAMBLE)));
        assert_eq!(u.users.get("app").map(Vec::len), Some(2));
    }

    #[test]
    fn authenticate_recovers_the_clients_own_credential() {
        let u = Users::parse(
            r#"{"alice": [{"Password": "secret"}],
                "bob": [{"MysqlNativePassword": "*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"}],
                "anon": [{"Password": ""}]}"#,
        )
        .unwrap();
        assert!(!u.has_backend_mappings());
        let a = u
            .authenticate("alice", SCRAMBLE, &native_token(b"secret", SCRAMBLE))
            .unwrap();
        assert_eq!(a.backend_user, "alice");
        assert_eq!(a.credential.stage1(), Some(Stage1::of_password(b"secret")));
        // From a stored hash only: the stage1 comes out of the token.
        let b = u
            .authenticate("bob", SCRAMBLE, &native_token(b"123456", SCRAMBLE))
            .unwrap();
        assert_eq!(b.backend_user, "bob");
        assert_eq!(b.credential.stage1(), Some(Stage1::of_password(b"123456")));
        let other = b"ZYXWVUTSRQponmlkjihg";
        assert_eq!(b.credential.token(other), native_token(b"123456", other));
        let e = u.authenticate("anon", SCRAMBLE, &[]).unwrap();
        assert_eq!(e.credential, Credential::Plaintext(Vec::new()));
        assert_eq!(
            u.authenticate("bob", SCRAMBLE, &native_token(b"x", SCRAMBLE)),
            None
        );
        assert!(!format!("{b:?}").contains("123456"));
    }

    #[test]
    fn backend_user_and_password_map_an_entry() {
        let u = Users::parse(
            r#"{"carol": [{"Password": "pw", "BackendUser": "reporting", "BackendPassword": "rpt"},
                          {"Password": "pw2", "BackendUser": "reporting"}],
                "dan": [{"Password": "d", "BackendPassword": "", "Groups": ["x"]}]}"#,
        )
        .unwrap();
        assert!(u.has_backend_mappings());
        let c = u
            .authenticate("carol", SCRAMBLE, &native_token(b"pw", SCRAMBLE))
            .unwrap();
        assert_eq!(c.backend_user, "reporting");
        assert_eq!(c.credential.stage1(), Some(Stage1::of_password(b"rpt")));
        // BackendUser alone: the client's own password, another name.
        let c2 = u
            .authenticate("carol", SCRAMBLE, &native_token(b"pw2", SCRAMBLE))
            .unwrap();
        assert_eq!(c2.backend_user, "reporting");
        assert_eq!(c2.credential.stage1(), Some(Stage1::of_password(b"pw2")));
        // BackendPassword alone: the client's name, that password.
        let d = u
            .authenticate("dan", SCRAMBLE, &native_token(b"d", SCRAMBLE))
            .unwrap();
        assert_eq!(d.backend_user, "dan");
        assert_eq!(d.credential, Credential::Plaintext(Vec::new()));
        assert!(!format!("{u:?}").contains("rpt"));
        let err = Users::parse(r#"{"e": [{"Password": "p", "BackendUser": ""}]}"#).unwrap_err();
        assert!(err.to_string().contains("BackendUser"), "{err}");
    }

    /// MySQL 8's verifier for `foobar` (see caching_sha2.rs), in hex.
    const FOOBAR_SHA2: &str = "24412430303524031A69251C34295C4B35167C7F1E5A7B63091349503974624D34504B5A424679354856336868686F52485A736E4A733368786E427575516C73446469496537";

    #[test]
    fn caching_sha2_entries_fast_and_full() {
        use crate::caching_sha2::scramble;
        let u = Users::parse(&format!(
            r#"{{"erin": [{{"MysqlCachingSha2Password": "{FOOBAR_SHA2}"}}],
                "fay": [{{"Password": "pw"}}],
                "gus": [{{"MysqlNativePassword": "*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"}}],
                "anon": [{{"Password": ""}}]}}"#
        ))
        .unwrap();
        assert!(u.sha2_capable("erin") && u.sha2_only("erin"));
        assert!(u.sha2_capable("fay") && !u.sha2_only("fay"));
        assert!(!u.sha2_capable("gus") && !u.sha2_only("gus"));
        assert!(u.needs_cleartext("erin") && u.needs_cleartext("gus"));
        assert!(!u.needs_cleartext("fay") && !u.needs_cleartext("nobody"));
        // A verifier entry: a native token can never match it.
        assert!(!u.verify_native("erin", SCRAMBLE, &native_token(b"foobar", SCRAMBLE)));
        // Fast auth before any full auth: a cache miss.
        let tok = scramble(b"foobar", SCRAMBLE);
        assert_eq!(u.sha2_fast("erin", SCRAMBLE, &tok), Sha2Fast::FullAuth);
        assert_eq!(u.authenticate_cleartext("erin", b"foobaR"), None);
        assert_eq!(u.sha2_fast("erin", SCRAMBLE, &tok), Sha2Fast::FullAuth);
        let a = u.authenticate_cleartext("erin", b"foobar").unwrap();
        assert_eq!(a.backend_user, "erin");
        assert_eq!(a.credential.stage1(), Some(Stage1::of_password(b"foobar")));
        // Now cached: fast auth for another nonce, with the same backend credential.
        let other = b"ZYXWVUTSRQponmlkjihg";
        assert_eq!(
            u.sha2_fast("erin", other, &scramble(b"foobar", other)),
            Sha2Fast::Accepted(a.clone())
        );
        assert_eq!(
            u.sha2_fast("erin", other, &scramble(b"foobaR", other)),
            Sha2Fast::FullAuth
        );
        // A reload (a new set) starts with an empty cache; so does a clone.
        assert_eq!(
            u.clone()
                .sha2_fast("erin", other, &scramble(b"foobar", other)),
            Sha2Fast::FullAuth
        );
        // Password entries need no cache; native-hash entries take full auth.
        let f = u.sha2_fast("fay", SCRAMBLE, &scramble(b"pw", SCRAMBLE));
        let Sha2Fast::Accepted(f) = f else {
            panic!("{f:?}")
        };
        assert_eq!(f.credential.stage1(), Some(Stage1::of_password(b"pw")));
        // A wrong one asks for the cleartext, as for every kind of user.
        assert_eq!(
            u.sha2_fast("fay", SCRAMBLE, &scramble(b"px", SCRAMBLE)),
            Sha2Fast::FullAuth
        );
        assert!(u.authenticate_cleartext("gus", b"123456").is_some());
        assert!(u.authenticate_cleartext("fay", b"pw").is_some());
        assert!(u.authenticate_cleartext("nobody", b"pw").is_none());
        // The empty password: an empty token, answered at once.
        assert!(matches!(
            u.sha2_fast("anon", SCRAMBLE, &[]),
            Sha2Fast::Accepted(_)
        ));
        assert_eq!(u.sha2_fast("fay", SCRAMBLE, &[]), Sha2Fast::Refused);
        assert_eq!(u.sha2_fast("nobody", SCRAMBLE, &tok), Sha2Fast::FullAuth);
        assert_eq!(u.sha2_fast("nobody", SCRAMBLE, &[]), Sha2Fast::Refused);
        // A native hash can only be checked with the cleartext (after the full
        // authentication above the right password is cached).
        let g = scramble(b"654321", SCRAMBLE);
        assert_eq!(u.sha2_fast("gus", SCRAMBLE, &g), Sha2Fast::FullAuth);
        let g = scramble(b"123456", SCRAMBLE);
        assert!(matches!(
            u.sha2_fast("gus", SCRAMBLE, &g),
            Sha2Fast::Accepted(_)
        ));
        let text = format!("{u:?} {a:?}");
        assert!(!text.contains("foobar") && !text.contains("2441"), "{text}");
        let err =
            Users::parse(r#"{"h": [{"MysqlCachingSha2Password": "$A$005$short"}]}"#).unwrap_err();
        assert!(
            err.to_string().contains("MysqlCachingSha2Password"),
            "{err}"
        );
    }

    /// An unknown name answers every question as some real user of the
    /// file does, and no password logs it in.
    #[test]
    fn unknown_names_answer_as_real_users_do() {
        use crate::caching_sha2::scramble;
        let u = Users::parse(&format!(
            r#"{{"erin": [{{"MysqlCachingSha2Password": "{FOOBAR_SHA2}"}}],
                "fay": [{{"Password": "pw"}}],
                "gus": [{{"MysqlNativePassword": "*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"}}]}}"#
        ))
        .unwrap();
        let answers = |name: &str| (u.sha2_capable(name), u.sha2_only(name));
        let real: Vec<_> = ["erin", "fay", "gus"].map(answers).to_vec();
        let mut seen = std::collections::HashSet::new();
        for i in 0..60 {
            let name = format!("nobody{i}");
            assert!(real.contains(&answers(&name)), "{name}");
            assert_eq!(answers(&name), answers(&name));
            seen.insert(answers(&name));
            let tok = scramble(b"pw", SCRAMBLE);
            assert_eq!(u.sha2_fast(&name, SCRAMBLE, &tok), Sha2Fast::FullAuth);
            assert_eq!(u.authenticate_cleartext(&name, b"pw"), None);
            assert_eq!(u.authenticate_cleartext(&name, b""), None);
            assert!(!u.verify_native(&name, SCRAMBLE, &native_token(b"pw", SCRAMBLE)));
            assert!(!u.verify_native(&name, SCRAMBLE, &[]));
        }
        assert_eq!(seen.len(), 3, "every kind of user is mimicked");
    }

    #[test]
    fn legacy_single_object_form() {
        let u = Users::parse(r#"{"dave": {"Password": "pw"}}"#).unwrap();
        assert!(u.verify_native("dave", SCRAMBLE, &native_token(b"pw", SCRAMBLE)));
    }

    #[test]
    fn empty_password_account() {
        let u = Users::parse(r#"{"anon": [{"Password": ""}], "x": [{"Password": "p"}]}"#).unwrap();
        assert!(u.verify_native("anon", SCRAMBLE, &[]));
        assert!(!u.verify_native("x", SCRAMBLE, &[]));
    }

    #[test]
    fn bad_json_names_line() {
        let err = Users::parse("{\n  \"alice\": [{\"Password\": \"x\"}],\n  oops\n}").unwrap_err();
        match &err {
            UsersError::Json { line, .. } => assert_eq!(*line, 3),
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("line 3"), "{err}");
        // Wrong shape (not an object of lists/objects) is a JSON error too.
        assert!(matches!(
            Users::parse(r#"["alice"]"#),
            Err(UsersError::Json { .. })
        ));
        assert!(matches!(
            Users::parse(r#"{"a": 5}"#),
            Err(UsersError::Json { .. })
        ));
    }

    #[test]
    fn malformed_hash_names_user() {
        let err = Users::parse(r#"{"bob": [{"MysqlNativePassword": "*XYZ"}]}"#).unwrap_err();
        assert!(matches!(&err, UsersError::Entry { user, .. } if user == "bob"));
        assert!(err.to_string().contains("\"bob\""), "{err}");
        let err = Users::parse(r#"{"eve": [{"UserData": "e"}]}"#).unwrap_err();
        assert!(matches!(&err, UsersError::Entry { user, .. } if user == "eve"));
        let err = Users::parse(r#"{"zed": []}"#).unwrap_err();
        assert!(matches!(&err, UsersError::Entry { user, .. } if user == "zed"));
    }

    #[test]
    fn load_names_file() {
        let dir = std::env::temp_dir().join(format!("ringgate-users-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("users.json");
        std::fs::write(&good, r#"{"alice": [{"Password": "secret"}]}"#).unwrap();
        assert_eq!(Users::load(&good).unwrap().len(), 1);

        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\n\"a\": [,]}").unwrap();
        let msg = Users::load(&bad).unwrap_err().to_string();
        assert!(msg.contains("bad.json") && msg.contains("line 2"), "{msg}");

        let missing = dir.join("missing.json");
        let msg = Users::load(&missing).unwrap_err().to_string();
        assert!(msg.contains("missing.json"), "{msg}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

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
//! login); `BackendPassword` alone keeps the client's user name. Only
//! `SHA1(BackendPassword)` is kept, which is all a backend login needs.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::mysql::auth::{native_recover, native_stage2, parse_mysql_hash, Credential, Stage1};

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
    #[serde(rename = "BackendUser", default)]
    backend_user: Option<String>,
    #[serde(rename = "BackendPassword", default)]
    backend_password: Option<String>,
}

/// One accepted password of a user and where it leads on the backend.
#[derive(Clone)]
struct Entry {
    stage2: [u8; 20],
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

/// The credential set loaded from a users file.
#[derive(Clone, Default)]
pub struct Users {
    /// user name → every accepted password.
    users: HashMap<String, Vec<Entry>>,
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
                let stage2 = entry_stage2(entry).map_err(|r| bad(format!("entry {i}: {r}")))?;
                if entry.backend_user.as_deref() == Some("") {
                    return Err(bad(format!("entry {i}: BackendUser must not be empty")));
                }
                parsed.push(Entry {
                    stage2,
                    backend_user: entry.backend_user.clone(),
                    backend_credential: entry.backend_password.as_ref().map(|p| {
                        if p.is_empty() {
                            Credential::Plaintext(Vec::new())
                        } else {
                            Credential::Stage1(Stage1::of_password(p.as_bytes()))
                        }
                    }),
                });
            }
            users.insert(user, parsed);
        }
        Ok(Users { users })
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
        let entries = self.users.get(user)?;
        let mut found: Option<(&Entry, Credential)> = None;
        for e in entries {
            let recovered = native_recover(&e.stage2, scramble, token);
            if found.is_none() {
                found = recovered.map(|c| (e, c));
            }
        }
        let (entry, recovered) = found?;
        Some(Authenticated {
            backend_user: entry
                .backend_user
                .clone()
                .unwrap_or_else(|| user.to_owned()),
            credential: entry.backend_credential.clone().unwrap_or(recovered),
        })
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

/// Derives the stage2 hash of one entry. A non-empty `MysqlNativePassword`
/// wins over `Password`, as in Vitess; an empty `MysqlNativePassword` alone
/// means an empty password, as an empty `authentication_string` does in
/// MySQL.
fn entry_stage2(e: &RawEntry) -> Result<[u8; 20], String> {
    match (&e.mysql_native_password, &e.password) {
        (Some(h), _) if !h.is_empty() => {
            parse_mysql_hash(h).map_err(|err| format!("MysqlNativePassword: {err}"))
        }
        (_, Some(p)) => Ok(native_stage2(p.as_bytes())),
        (Some(_), None) => Ok(native_stage2(b"")),
        (None, None) => {
            Err("entry has neither \"Password\" nor \"MysqlNativePassword\"".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mysql::auth::native_token;

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

//! Decoy accounts: what a login for a user name that is not in the users
//! file is checked against, so that the answers do not tell which names
//! exist.
//!
//! Which packets a login gets depends on the kinds of the account's
//! entries: a caching_sha2 scramble for an account with only native
//! hashes is switched to mysql_native_password, a native token for an
//! account with only caching_sha2 verifiers is switched to
//! caching_sha2_password, and a verifier costs 5,000 SHA-256 rounds to
//! check. An unknown name therefore gets the entry kinds of a real user of
//! the file (chosen by a keyed hash of the name, so the decoys' kinds are
//! spread as the real users' are), with secrets nobody knows, and follows
//! that user's code path to the same refusal. The key is drawn once per
//! process: one name keeps its decoy for the process's life, so a retry
//! sees the same answers, as it would for a real user (MySQL's decoy
//! accounts work the same way).

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::{plain_secret, Entry, Secret};
use crate::caching_sha2::{Verifier, SALT_LEN};

/// The kind of one entry: all a decoy copies from a real user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Plain,
    Native,
    CachingSha2,
}

impl Kind {
    pub(super) fn of(secret: &Secret) -> Kind {
        match secret {
            Secret::Plain { .. } => Kind::Plain,
            Secret::Native(_) => Kind::Native,
            Secret::CachingSha2(_) => Kind::CachingSha2,
        }
    }
}

/// The process's decoy key. getrandom fails only without any entropy
/// source; the decoys then fall back to a key from the clock and the
/// process id, which still differs between processes.
fn key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        if getrandom::getrandom(&mut k).is_err() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            k = Sha256::new()
                .chain_update(now.to_le_bytes())
                .chain_update(std::process::id().to_le_bytes())
                .finalize()
                .into();
        }
        k
    })
}

/// SHA-256 of the key, a label and the name: the name's own random bytes.
fn keyed(name: &str, label: &[u8], index: usize) -> [u8; 32] {
    Sha256::new()
        .chain_update(key())
        .chain_update(label)
        .chain_update((index as u64).to_le_bytes())
        .chain_update(name.as_bytes())
        .finalize()
        .into()
}

/// The entries an unknown `name` is checked against: the kinds of the
/// real user `shapes` picks for it (one `Plain` entry for an empty file),
/// each with a secret derived from the key, which no password matches.
pub(super) fn entries(name: &str, shapes: &[Vec<Kind>]) -> Vec<Entry> {
    let pick = keyed(name, b"shape", 0);
    let pick = u64::from_le_bytes([
        pick[0], pick[1], pick[2], pick[3], pick[4], pick[5], pick[6], pick[7],
    ]);
    let shape = match shapes.len() {
        0 => &[Kind::Plain][..],
        n => &shapes[(pick % n as u64) as usize][..],
    };
    shape
        .iter()
        .enumerate()
        .map(|(i, kind)| Entry {
            secret: secret(name, i, *kind),
            backend_user: None,
            backend_credential: None,
        })
        .collect()
}

fn secret(name: &str, index: usize, kind: Kind) -> Secret {
    let seed = keyed(name, b"secret", index);
    match kind {
        // A password of 32 random bytes: the same hashing a real
        // `Password` entry gets at load time.
        Kind::Plain => plain_secret(&seed),
        Kind::Native => {
            let mut h = [0u8; 20];
            h.copy_from_slice(&seed[..20]);
            Secret::Native(h)
        }
        Kind::CachingSha2 => {
            let mut salt = [0u8; SALT_LEN];
            salt.copy_from_slice(&keyed(name, b"salt", index)[..SALT_LEN]);
            Secret::CachingSha2(Box::new(Verifier::unmatchable(salt, &seed)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_decoy_and_decoys_follow_the_real_kinds() {
        let shapes = vec![vec![Kind::Plain], vec![Kind::CachingSha2, Kind::Native]];
        let kinds = |name: &str| -> Vec<Kind> {
            entries(name, &shapes)
                .iter()
                .map(|e| Kind::of(&e.secret))
                .collect()
        };
        for name in ["nobody", "root", "x"] {
            assert_eq!(kinds(name), kinds(name), "{name}");
            assert!(shapes.contains(&kinds(name)), "{name}");
        }
        // Both shapes are used by some names.
        let seen: std::collections::HashSet<usize> =
            (0..64).map(|i| kinds(&format!("u{i}")).len()).collect();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(kinds_of_empty(), vec![Kind::Plain]);
    }

    fn kinds_of_empty() -> Vec<Kind> {
        entries("n", &[])
            .iter()
            .map(|e| Kind::of(&e.secret))
            .collect()
    }
}

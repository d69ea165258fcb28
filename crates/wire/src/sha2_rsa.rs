//! The RSA exchange of caching_sha2_password full authentication over an
//! unencrypted connection, both sides.
//!
//! Follows MySQL 8.0/8.4 (`sql/auth/sha2_password.cc`, the client's
//! `sql-common/client_authentication.cc`), which PyMySQL and
//! mysql-connector-python speak too:
//!
//! ```text
//! server                          client
//! 0x01 0x04 (full auth)      ->
//!                            <-   0x02 (send me your public key), unless
//!                                 the client was given the key already
//! 0x01 + PEM public key      ->
//!                            <-   RSA-OAEP(SHA-1, MGF1-SHA-1) of
//!                                 (password ++ NUL) XOR nonce (repeated)
//! OK | ERR                   ->
//! ```
//!
//! The XOR with the nonce binds the ciphertext to this connection, so a
//! captured one cannot be replayed on another. The PEM is SubjectPublicKeyInfo
//! (`-----BEGIN PUBLIC KEY-----`), as MySQL sends it.
//!
//! Decryption uses the `rsa` crate 0.9, whose private-key operation is not
//! constant-time (RUSTSEC-2023-0071, the "Marvin" timing attack): a network
//! attacker timing many decryptions could in theory learn the key. TLS is
//! the better transport for full authentication; `--rsa-key` is for clients
//! that cannot use it.

use std::fmt;
use std::path::Path;

use rsa::pkcs1::{DecodeRsaPrivateKey, DecodeRsaPublicKey};
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use rsa::{Oaep, RsaPrivateKey, RsaPublicKey};

/// Errors loading a key or running the exchange. None carries key material
/// or a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RsaError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{what} is not an RSA {kind} key in PEM (PKCS#1 or PKCS#8): {reason}")]
    Parse {
        what: String,
        kind: &'static str,
        reason: String,
    },
    #[error("the password is too long for a {bits}-bit RSA key ({len} bytes, at most {max})")]
    TooLong { bits: usize, len: usize, max: usize },
    #[error("RSA encryption failed: {0}")]
    Encrypt(String),
    /// Not the key's size, or not OAEP with this key.
    #[error("the client's RSA-encrypted password does not decrypt with --rsa-key")]
    Decrypt,
    /// Decrypted, but not NUL-terminated after the XOR with the nonce: the
    /// client used another nonce.
    #[error("the client's RSA-encrypted password is not NUL-terminated (another nonce?)")]
    Unterminated,
}

/// A server's key pair (`--rsa-key`) and its public half as sent to
/// clients. `Debug` shows only the size.
pub struct RsaPrivate {
    key: RsaPrivateKey,
    public_pem: String,
}

impl fmt::Debug for RsaPrivate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RsaPrivate({} bits)", self.key.size() * 8)
    }
}

/// A server's public key, as learned from it (0x02) or given by
/// `--backend-rsa-public-key`.
#[derive(Clone, PartialEq, Eq)]
pub struct RsaPublic(RsaPublicKey);

impl fmt::Debug for RsaPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RsaPublic({} bits)", self.0.size() * 8)
    }
}

fn read(path: &Path) -> Result<String, RsaError> {
    std::fs::read_to_string(path).map_err(|e| RsaError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

impl RsaPrivate {
    /// Reads a PEM private key (`openssl genrsa`'s PKCS#1 or PKCS#8, the
    /// form MySQL's `private_key.pem` takes).
    pub fn load(path: &Path) -> Result<RsaPrivate, RsaError> {
        Self::parse(&read(path)?, &path.display().to_string())
    }

    pub fn parse(pem: &str, what: &str) -> Result<RsaPrivate, RsaError> {
        let key = RsaPrivateKey::from_pkcs8_pem(pem)
            .or_else(|e8| RsaPrivateKey::from_pkcs1_pem(pem).map_err(|_| e8))
            .map_err(|e| RsaError::Parse {
                what: what.to_string(),
                kind: "private",
                reason: e.to_string(),
            })?;
        let public_pem = key
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| RsaError::Parse {
                what: what.to_string(),
                kind: "private",
                reason: e.to_string(),
            })?;
        Ok(RsaPrivate { key, public_pem })
    }

    /// What the server sends after 0x01 when a client asks for the key.
    pub fn public_pem(&self) -> &str {
        &self.public_pem
    }

    pub fn public(&self) -> RsaPublic {
        RsaPublic(self.key.to_public_key())
    }

    /// The server side: the client's password from its ciphertext (without
    /// the trailing NUL). Runs one RSA private-key operation (about a
    /// millisecond for 2048 bits).
    pub fn decrypt_password(
        &self,
        ciphertext: &[u8],
        nonce: &[u8],
    ) -> Result<zeroize::Zeroizing<Vec<u8>>, RsaError> {
        if ciphertext.len() != self.key.size() || nonce.is_empty() {
            return Err(RsaError::Decrypt);
        }
        let mut plain = zeroize::Zeroizing::new(
            self.key
                .decrypt(Oaep::new::<sha1::Sha1>(), ciphertext)
                .map_err(|_| RsaError::Decrypt)?,
        );
        xor_nonce(&mut plain, nonce);
        match plain.pop() {
            Some(0) => Ok(plain),
            _ => Err(RsaError::Unterminated),
        }
    }
}

impl RsaPublic {
    /// Reads a PEM public key (`-----BEGIN PUBLIC KEY-----`, as MySQL's
    /// `public_key.pem` and its 0x02 answer, or PKCS#1).
    pub fn load(path: &Path) -> Result<RsaPublic, RsaError> {
        Self::parse(read(path)?.as_bytes(), &path.display().to_string())
    }

    /// Parses the key a server sent (the bytes after 0x01; MySQL ends the
    /// PEM with a newline and no NUL, a NUL is tolerated).
    pub fn parse(pem: &[u8], what: &str) -> Result<RsaPublic, RsaError> {
        let bad = |reason: String| RsaError::Parse {
            what: what.to_string(),
            kind: "public",
            reason,
        };
        let pem = pem.strip_suffix(&[0]).unwrap_or(pem);
        let text = std::str::from_utf8(pem).map_err(|_| bad("not UTF-8".into()))?;
        let text = text.trim();
        RsaPublicKey::from_public_key_pem(text)
            .or_else(|e8| RsaPublicKey::from_pkcs1_pem(text).map_err(|_| e8))
            .map(RsaPublic)
            .map_err(|e| bad(e.to_string()))
    }

    /// The client side: `(password ++ NUL) XOR nonce`, RSA-OAEP encrypted.
    pub fn encrypt_password(&self, password: &[u8], nonce: &[u8]) -> Result<Vec<u8>, RsaError> {
        // OAEP with SHA-1 carries at most size - 2 * 20 - 2 bytes.
        let max = self.0.size().saturating_sub(42);
        let mut plain = Vec::with_capacity(password.len() + 1);
        plain.extend_from_slice(password);
        plain.push(0);
        if plain.len() > max {
            return Err(RsaError::TooLong {
                bits: self.0.size() * 8,
                len: plain.len(),
                max,
            });
        }
        if nonce.is_empty() {
            return Err(RsaError::Encrypt("empty nonce".into()));
        }
        xor_nonce(&mut plain, nonce);
        self.0
            .encrypt(
                &mut rsa::rand_core::OsRng,
                Oaep::new::<sha1::Sha1>(),
                &plain,
            )
            .map_err(|e| RsaError::Encrypt(e.to_string()))
    }
}

/// MySQL's `xor_string`: byte i is XORed with nonce[i % len].
fn xor_nonce(data: &mut [u8], nonce: &[u8]) {
    for (i, b) in data.iter_mut().enumerate() {
        *b ^= nonce[i % nonce.len()];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1024-bit test key (small so the tests stay fast; never used
    /// outside them), made with `openssl genrsa -traditional 1024`.
    pub const TEST_KEY_PKCS1: &str = include_str!("testdata/rsa_test_key.pem");
    /// The same key as PKCS#8 (`openssl pkcs8 -topk8 -nocrypt`).
    const TEST_KEY_PKCS8: &str = include_str!("testdata/rsa_test_key_pkcs8.pem");
    /// Its public half as `openssl rsa -pubout` prints it (SPKI).
    const TEST_PUB: &str = include_str!("testdata/rsa_test_key_pub.pem");

    const NONCE: &[u8; 20] = b"0123456789abcdefghij";

    #[test]
    fn both_sides_round_trip_and_the_public_pem_is_openssls() {
        let private = RsaPrivate::parse(TEST_KEY_PKCS1, "test").unwrap();
        assert_eq!(private.public_pem().trim(), TEST_PUB.trim());
        let p8 = RsaPrivate::parse(TEST_KEY_PKCS8, "test").unwrap();
        assert_eq!(p8.public_pem(), private.public_pem());
        let public = RsaPublic::parse(private.public_pem().as_bytes(), "server").unwrap();
        assert_eq!(public, private.public());
        let long = vec![b'x'; 40];
        for pw in [&b"secret"[..], b"", &long] {
            let c = public.encrypt_password(pw, NONCE).unwrap();
            assert_eq!(c.len(), 128);
            assert_eq!(private.decrypt_password(&c, NONCE).unwrap().as_slice(), pw);
        }
        // OAEP is randomised: two encryptions differ.
        assert_ne!(
            public.encrypt_password(b"secret", NONCE).unwrap(),
            public.encrypt_password(b"secret", NONCE).unwrap()
        );
    }

    #[test]
    fn another_nonce_or_a_damaged_ciphertext_is_refused() {
        let private = RsaPrivate::parse(TEST_KEY_PKCS1, "test").unwrap();
        let public = private.public();
        let c = public.encrypt_password(b"secret", NONCE).unwrap();
        assert_eq!(
            private.decrypt_password(&c, b"ABCDEFGHIJKLMNOPQRST"),
            Err(RsaError::Unterminated)
        );
        let mut bad = c.clone();
        bad[5] ^= 1;
        assert_eq!(
            private.decrypt_password(&bad, NONCE),
            Err(RsaError::Decrypt)
        );
        assert_eq!(
            private.decrypt_password(&c[..127], NONCE),
            Err(RsaError::Decrypt)
        );
        assert_eq!(
            private.decrypt_password(&[2], NONCE),
            Err(RsaError::Decrypt)
        );
    }

    #[test]
    fn a_password_too_long_for_the_key_is_an_error_not_a_panic() {
        let public = RsaPrivate::parse(TEST_KEY_PKCS1, "test").unwrap().public();
        let e = public.encrypt_password(&[b'x'; 86], NONCE).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the password is too long for a 1024-bit RSA key (87 bytes, at most 86)"
        );
        assert!(public.encrypt_password(&[b'x'; 85], NONCE).is_ok());
    }

    #[test]
    fn garbage_keys_are_parse_errors_that_name_the_source() {
        let e = RsaPublic::parse(b"-----BEGIN PUBLIC KEY-----\nnope\n", "the server").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the server is not an RSA public key"),
            "{e}"
        );
        let e = RsaPrivate::parse("hello", "/etc/k.pem").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/etc/k.pem is not an RSA private key"),
            "{e}"
        );
        // A NUL after the PEM (some servers send one) is fine.
        let mut pem = TEST_PUB.as_bytes().to_vec();
        pem.push(0);
        assert!(RsaPublic::parse(&pem, "server").is_ok());
    }

    #[test]
    fn debug_shows_only_the_size() {
        let private = RsaPrivate::parse(TEST_KEY_PKCS1, "test").unwrap();
        assert_eq!(format!("{private:?}"), "RsaPrivate(1024 bits)");
        assert_eq!(format!("{:?}", private.public()), "RsaPublic(1024 bits)");
    }
}

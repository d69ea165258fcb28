//! `caching_sha2_password` arithmetic: the fast-auth scramble (both sides),
//! MySQL's stored `$A$005$` verifier and the full-auth check of a cleartext
//! password against it. The RSA exchange of full authentication over an
//! unencrypted connection is in `sha2_rsa`.
//!
//! Follows MySQL 8.0/8.4 (`sql/auth/sha2_password.cc`,
//! `sql/auth/i_sha2_password_common.cc`, `mysys/crypt_genhash_impl.cc`):
//!
//! - fast auth: the client sends
//!   `XOR(SHA256(pw), SHA256(SHA256(SHA256(pw)) ++ nonce))` (32 bytes). The
//!   server checks it against a cached `SHA256(SHA256(pw))` ("stage2"),
//!   which it only has after a full authentication of that user (or, for a
//!   users-file `Password` entry, from the plaintext itself).
//! - full auth: the client sends its cleartext password (over TLS, a unix
//!   socket, or RSA-encrypted); the server runs sha256-crypt over it with
//!   the stored salt and compares with the stored digest.
//! - the stored verifier (`mysql.user.authentication_string`) is
//!   `$A$` + 3 hex digits (rounds / 1000, MySQL writes `005`) + `$` +
//!   20 bytes of salt + 43 characters of sha256-crypt digest: 70 bytes.
//!
//! None of the values here ever goes to a log: `Debug` is redacted.

use std::fmt;

use sha2::{Digest, Sha256};

/// The plugin name on the wire.
pub const CACHING_SHA2_PASSWORD: &str = "caching_sha2_password";

/// AuthMoreData status byte after a good fast-auth scramble.
pub const FAST_AUTH_SUCCESS: u8 = 0x03;
/// AuthMoreData status byte asking the client for full authentication.
pub const PERFORM_FULL_AUTHENTICATION: u8 = 0x04;
/// What a client sends instead of its password to ask for the server's
/// RSA public key (full auth over an unencrypted connection).
pub const REQUEST_PUBLIC_KEY: u8 = 0x02;

/// Length of a fast-auth scramble and of a SHA256 digest.
pub const DIGEST_LEN: usize = 32;
/// Salt length in MySQL's stored verifier (`CRYPT_SALT_LENGTH`).
pub const SALT_LEN: usize = 20;
/// MySQL's stored rounds are this multiple of the 3-hex-digit field.
const ITERATION_MULTIPLIER: u32 = 1000;
/// Bounds MySQL accepts (`caching_sha2_password_digest_rounds`).
const MIN_ROUNDS: u32 = 5000;
const MAX_ROUNDS: u32 = 0xFFF * ITERATION_MULTIPLIER;
/// The digest, in crypt's base64: 10 groups of 4 characters and one of 3.
const CRYPT_DIGEST_LEN: usize = 43;
const VERIFIER_LEN: usize = 7 + SALT_LEN + CRYPT_DIGEST_LEN;
/// crypt(3)'s base64 alphabet (not RFC 4648's).
const B64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn sha256(parts: &[&[u8]]) -> [u8; DIGEST_LEN] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// `SHA256(SHA256(password))`: what fast authentication checks against.
/// A password equivalent for fast auth, so `Debug` never shows it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sha2Stage2([u8; DIGEST_LEN]);

impl Sha2Stage2 {
    pub fn of_password(password: &[u8]) -> Sha2Stage2 {
        Sha2Stage2(sha256(&[&sha256(&[password])]))
    }

    /// Checks a client's fast-auth scramble for `nonce` (the greeting's
    /// 20 bytes). The token is `stage1 XOR SHA256(stage2 ++ nonce)`, so
    /// XORing gives a candidate stage1 whose SHA256 must be stage2.
    /// Constant-time in the comparison.
    pub fn verify_fast(&self, nonce: &[u8], token: &[u8]) -> bool {
        self.recover_fast(nonce, token).is_some()
    }

    /// Like [`Sha2Stage2::verify_fast`], and on success the client's
    /// `SHA256(password)`, which logs in to a caching_sha2 backend by fast
    /// auth as that client (per-user passthrough identity).
    pub fn recover_fast(&self, nonce: &[u8], token: &[u8]) -> Option<Sha2Stage1> {
        if token.len() != DIGEST_LEN {
            return None;
        }
        let mix = sha256(&[&self.0, nonce]);
        let mut candidate = [0u8; DIGEST_LEN];
        for ((c, t), m) in candidate.iter_mut().zip(token).zip(mix.iter()) {
            *c = t ^ m;
        }
        ct_eq(&sha256(&[&candidate]), &self.0).then_some(Sha2Stage1(candidate))
    }
}

impl fmt::Debug for Sha2Stage2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sha2Stage2(<redacted>)")
    }
}

/// The client side of fast auth (what a connector sends in its
/// HandshakeResponse): `XOR(SHA256(pw), SHA256(SHA256(SHA256(pw)) ++ nonce))`.
/// The empty password is sent as an empty response.
pub fn scramble(password: &[u8], nonce: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    Sha2Stage1::of_password(password).scramble(nonce)
}

/// `SHA256(password)` of a non-empty password: all the client side of fast
/// auth needs, so the proxy can log in to a caching_sha2 backend as a
/// client whose cleartext it never saw (recovered from the client's own
/// fast-auth scramble, or kept from a users-file `Password`). Not enough
/// for full authentication, which needs the cleartext. A password
/// equivalent for fast auth, so `Debug` never shows it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha2Stage1([u8; DIGEST_LEN]);

impl Sha2Stage1 {
    pub fn of_password(password: &[u8]) -> Sha2Stage1 {
        Sha2Stage1(sha256(&[password]))
    }

    /// The fast-auth scramble for `nonce` (the greeting's or an
    /// AuthSwitchRequest's 20 bytes).
    pub fn scramble(&self, nonce: &[u8]) -> Vec<u8> {
        let mix = sha256(&[&sha256(&[&self.0]), nonce]);
        self.0.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
    }

    /// Overwrites the value (a credential being dropped).
    pub fn wipe(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }

    /// The stage2 that fast authentication checks this stage1 against.
    pub fn stage2(&self) -> Sha2Stage2 {
        Sha2Stage2(sha256(&[&self.0]))
    }
}

impl fmt::Debug for Sha2Stage1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sha2Stage1(<redacted>)")
    }
}

/// Errors parsing a stored `$A$…` verifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifierError {
    #[error("caching_sha2 verifier must be {VERIFIER_LEN} bytes ('$A$005$', 20 bytes of salt, 43 of digest), got {0}")]
    BadLength(usize),
    #[error("caching_sha2 verifier must start with '$A$' (sha256), three hex digits and '$'")]
    BadPrefix,
    #[error("caching_sha2 verifier rounds {0} are outside {MIN_ROUNDS}..={MAX_ROUNDS}")]
    BadRounds(u32),
    #[error("caching_sha2 verifier digest has a character outside crypt's base64")]
    BadDigest,
    #[error("caching_sha2 verifier in hex has a non-hex character")]
    BadHex,
}

/// A parsed `mysql.user.authentication_string` of a caching_sha2 account.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    rounds: u32,
    salt: [u8; SALT_LEN],
    digest: [u8; CRYPT_DIGEST_LEN],
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Verifier(<redacted>)")
    }
}

impl Verifier {
    /// Parses the verifier as MySQL stores it (70 bytes; the salt is raw
    /// bytes, so in JSON it may need `\u00XX` escapes), or its hex form
    /// (`SELECT HEX(authentication_string)`, 140 digits, with or without
    /// `0x`), which is easier to copy around.
    pub fn parse(s: &str) -> Result<Verifier, VerifierError> {
        let hex = s.strip_prefix("0x").unwrap_or(s);
        if hex.len() == 2 * VERIFIER_LEN && !s.starts_with('$') {
            let bytes = unhex(hex).ok_or(VerifierError::BadHex)?;
            return Self::parse_bytes(&bytes);
        }
        Self::parse_bytes(s.as_bytes())
    }

    /// Parses the 70 raw bytes.
    pub fn parse_bytes(b: &[u8]) -> Result<Verifier, VerifierError> {
        if b.len() != VERIFIER_LEN {
            return Err(VerifierError::BadLength(b.len()));
        }
        let (head, rest) = b.split_at(7);
        if &head[..3] != b"$A$" || head[6] != b'$' {
            return Err(VerifierError::BadPrefix);
        }
        let field = std::str::from_utf8(&head[3..6]).map_err(|_| VerifierError::BadPrefix)?;
        let units = u32::from_str_radix(field, 16).map_err(|_| VerifierError::BadPrefix)?;
        let rounds = units * ITERATION_MULTIPLIER;
        if !(MIN_ROUNDS..=MAX_ROUNDS).contains(&rounds) {
            return Err(VerifierError::BadRounds(rounds));
        }
        let (salt, digest) = rest.split_at(SALT_LEN);
        if !digest.iter().all(|c| B64.contains(c)) {
            return Err(VerifierError::BadDigest);
        }
        let mut v = Verifier {
            rounds,
            salt: [0; SALT_LEN],
            digest: [0; CRYPT_DIGEST_LEN],
        };
        v.salt.copy_from_slice(salt);
        v.digest.copy_from_slice(digest);
        Ok(v)
    }

    /// Makes the verifier MySQL would store for `password` with this salt
    /// (5000 rounds, as MySQL's default `005`).
    pub fn create(password: &[u8], salt: [u8; SALT_LEN]) -> Verifier {
        let rounds = MIN_ROUNDS;
        Verifier {
            rounds,
            salt,
            digest: sha256_crypt(password, &salt, rounds),
        }
    }

    /// A verifier of MySQL's default cost whose digest comes from `seed`,
    /// not from any password: checking a cleartext against it costs what
    /// a real one costs and always fails (a decoy for an unknown user;
    /// a crypt output equal to 43 random characters is 2^-256 likely).
    pub fn unmatchable(salt: [u8; SALT_LEN], seed: &[u8; DIGEST_LEN]) -> Verifier {
        let mut digest = [0u8; CRYPT_DIGEST_LEN];
        for (i, d) in digest.iter_mut().enumerate() {
            let byte = seed[i % DIGEST_LEN].rotate_left((i / DIGEST_LEN) as u32 * 3);
            *d = B64[usize::from(byte & 0x3F)];
        }
        Verifier {
            rounds: MIN_ROUNDS,
            salt,
            digest,
        }
    }

    /// The 70 bytes MySQL stores.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("$A${:03X}$", self.rounds / ITERATION_MULTIPLIER).into_bytes();
        out.extend_from_slice(&self.salt);
        out.extend_from_slice(&self.digest);
        out
    }

    /// Full authentication: does this cleartext password match? (The
    /// client's trailing NUL, if any, is the caller's to strip.)
    /// 5000 SHA256 rounds: about a millisecond, once per cache miss.
    pub fn verify_cleartext(&self, password: &[u8]) -> bool {
        let got = sha256_crypt(password, &self.salt, self.rounds);
        let diff = got
            .iter()
            .zip(self.digest.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y));
        std::hint::black_box(diff) == 0
    }
}

/// Ulrich Drepper's SHA-crypt with SHA256 (glibc's `$5$`), as MySQL's
/// `my_crypt_genhash` runs it: the same steps, but with a 20-byte salt
/// (glibc stops at 16) and the rounds passed in, not read from the salt.
/// Returns the 43-character encoded digest.
fn sha256_crypt(pw: &[u8], salt: &[u8], rounds: u32) -> [u8; CRYPT_DIGEST_LEN] {
    // B = SHA256(pw ++ salt ++ pw)
    let b = sha256(&[pw, salt, pw]);
    // A = SHA256(pw ++ salt ++ B repeated to pw's length ++ bits of len(pw))
    let mut a = Sha256::new();
    a.update(pw);
    a.update(salt);
    let mut n = pw.len();
    while n > DIGEST_LEN {
        a.update(b);
        n -= DIGEST_LEN;
    }
    a.update(&b[..n]);
    let mut n = pw.len();
    while n > 0 {
        if n & 1 != 0 {
            a.update(b);
        } else {
            a.update(pw);
        }
        n >>= 1;
    }
    let a: [u8; DIGEST_LEN] = a.finalize().into();
    // P: SHA256(pw repeated len(pw) times), repeated to pw's length.
    let mut dp = Sha256::new();
    for _ in 0..pw.len() {
        dp.update(pw);
    }
    let dp: [u8; DIGEST_LEN] = dp.finalize().into();
    let p: Vec<u8> = dp.iter().cycle().take(pw.len()).copied().collect();
    // S: SHA256(salt repeated 16 + A[0] times), repeated to salt's length.
    let mut ds = Sha256::new();
    for _ in 0..16 + usize::from(a[0]) {
        ds.update(salt);
    }
    let ds: [u8; DIGEST_LEN] = ds.finalize().into();
    let s: Vec<u8> = ds.iter().cycle().take(salt.len()).copied().collect();
    let mut c = a;
    for i in 0..rounds {
        let mut h = Sha256::new();
        if i & 1 != 0 {
            h.update(&p);
        } else {
            h.update(c);
        }
        if i % 3 != 0 {
            h.update(&s);
        }
        if i % 7 != 0 {
            h.update(&p);
        }
        if i & 1 != 0 {
            h.update(c);
        } else {
            h.update(&p);
        }
        c = h.finalize().into();
    }
    const GROUPS: [(usize, usize, usize); 10] = [
        (0, 10, 20),
        (21, 1, 11),
        (12, 22, 2),
        (3, 13, 23),
        (24, 4, 14),
        (15, 25, 5),
        (6, 16, 26),
        (27, 7, 17),
        (18, 28, 8),
        (9, 19, 29),
    ];
    let mut out = [0u8; CRYPT_DIGEST_LEN];
    let mut at = 0;
    let mut put = |w: u32, chars: usize| {
        let mut w = w;
        for _ in 0..chars {
            out[at] = B64[(w & 0x3F) as usize];
            at += 1;
            w >>= 6;
        }
    };
    for (x, y, z) in GROUPS {
        put(
            (u32::from(c[x]) << 16) | (u32::from(c[y]) << 8) | u32::from(c[z]),
            4,
        );
    }
    put((u32::from(c[31]) << 8) | u32::from(c[30]), 3);
    out
}

fn ct_eq(a: &[u8; DIGEST_LEN], b: &[u8; DIGEST_LEN]) -> bool {
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    b.chunks_exact(2)
        .map(|p| {
            let hi = (p[0] as char).to_digit(16)?;
            let lo = (p[1] as char).to_digit(16)?;
            Some((hi * 16 + lo) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TiDB's test vector (pkg/parser/auth/caching_sha2_test.go), a
    /// verifier made by MySQL 8 for the password `foobar`, in hex.
    const FOOBAR_HEX: &str = "24412430303524031A69251C34295C4B35167C7F1E5A7B63091349503974624D34504B5A424679354856336868686F52485A736E4A733368786E427575516C73446469496537";

    #[test]
    fn sha256_crypt_matches_glibc_for_a_16_byte_salt() {
        // `openssl passwd -5 -salt saltstring 'Hello world!'` (and Drepper's
        // specification): $5$saltstring$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZaBBGWEc5
        assert_eq!(
            &sha256_crypt(b"Hello world!", b"saltstring", 5000),
            b"5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZaBBGWEc5"
        );
    }

    #[test]
    fn a_mysql_verifier_checks_its_password() {
        let v = Verifier::parse(FOOBAR_HEX).unwrap();
        assert!(v.verify_cleartext(b"foobar"));
        assert!(!v.verify_cleartext(b"foobaR"));
        assert!(!v.verify_cleartext(b""));
        assert_eq!(v.rounds, 5000);
        // The raw form and the hex form are the same verifier, and it
        // round-trips to MySQL's bytes.
        let raw = unhex(FOOBAR_HEX).unwrap();
        assert_eq!(Verifier::parse_bytes(&raw).unwrap(), v);
        assert_eq!(v.to_bytes(), raw);
        let text = String::from_utf8(raw).unwrap();
        assert_eq!(Verifier::parse(&text).unwrap(), v);
        assert_eq!(Verifier::parse(&format!("0x{FOOBAR_HEX}")).unwrap(), v);
        // Made again from the password and the same salt: the same bytes.
        let salt: [u8; SALT_LEN] = unhex(FOOBAR_HEX).unwrap()[7..27].try_into().unwrap();
        assert_eq!(Verifier::create(b"foobar", salt), v);
    }

    #[test]
    fn malformed_verifiers_are_refused() {
        let raw = unhex(FOOBAR_HEX).unwrap();
        assert_eq!(
            Verifier::parse_bytes(&raw[..69]),
            Err(VerifierError::BadLength(69))
        );
        let mut b = raw.clone();
        b[1] = b'B';
        assert_eq!(Verifier::parse_bytes(&b), Err(VerifierError::BadPrefix));
        let mut b = raw.clone();
        b[3..6].copy_from_slice(b"004");
        assert_eq!(
            Verifier::parse_bytes(&b),
            Err(VerifierError::BadRounds(4000))
        );
        let mut b = raw.clone();
        b[3..6].copy_from_slice(b"0x5");
        assert_eq!(Verifier::parse_bytes(&b), Err(VerifierError::BadPrefix));
        let mut b = raw.clone();
        b[69] = b'!';
        assert_eq!(Verifier::parse_bytes(&b), Err(VerifierError::BadDigest));
        let mut h = FOOBAR_HEX.to_string();
        h.replace_range(0..1, "g");
        assert_eq!(Verifier::parse(&h), Err(VerifierError::BadHex));
        // Every prefix errors; none panics.
        for n in 0..raw.len() {
            assert!(Verifier::parse_bytes(&raw[..n]).is_err());
        }
        // Hex with a multi-byte character of the right length: no panic.
        let mut h = FOOBAR_HEX[..138].to_string();
        h.push('é');
        assert!(Verifier::parse(&h).is_err());
    }

    #[test]
    fn fast_auth_scramble_known_answer() {
        // hashlib, as PyMySQL's scramble_caching_sha2: password "secret",
        // nonce 1..=20.
        let nonce: Vec<u8> = (1..=20).collect();
        let token = scramble(b"secret", &nonce);
        assert_eq!(
            hex(&token),
            "746ebe205d56a0707acb3e796e834e0dd7b1d61743b26bd5202c7a623230c7c9"
        );
        let stage2 = Sha2Stage2::of_password(b"secret");
        assert_eq!(
            hex(&stage2.0),
            "3881219d087dd9c634373fd33dfa33a2cb6bfc6c520b64b8bb60ef2ceb534ae7"
        );
        assert!(stage2.verify_fast(&nonce, &token));
    }

    #[test]
    fn fast_auth_refuses_what_does_not_match() {
        let nonce: Vec<u8> = (1..=20).collect();
        let stage2 = Sha2Stage2::of_password(b"secret");
        let token = scramble(b"secret", &nonce);
        let mut bad = token.clone();
        bad[31] ^= 0x80;
        assert!(!stage2.verify_fast(&nonce, &bad));
        assert!(!stage2.verify_fast(&nonce, &token[..31]));
        assert!(!stage2.verify_fast(&nonce, &[]));
        let other: Vec<u8> = (2..=21).collect();
        assert!(!stage2.verify_fast(&other, &token));
        assert!(!Sha2Stage2::of_password(b"secreT").verify_fast(&nonce, &token));
        assert!(scramble(b"", &nonce).is_empty());
    }

    #[test]
    fn nothing_secret_in_debug() {
        let v = Verifier::parse(FOOBAR_HEX).unwrap();
        let s = Sha2Stage2::of_password(b"foobar");
        let text = format!("{v:?} {s:?}");
        assert!(
            text.contains("<redacted>") && !text.contains("5000"),
            "{text}"
        );
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}

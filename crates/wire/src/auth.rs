//! `mysql_native_password` arithmetic and scramble generation.
//!
//! The client proves knowledge of the password by sending
//! `SHA1(pw) XOR SHA1(scramble ++ SHA1(SHA1(pw)))`. The verifier only needs
//! `stage2 = SHA1(SHA1(pw))` (MySQL's `*HEX40` hash): XORing the token with
//! `SHA1(scramble ++ stage2)` yields the candidate `SHA1(pw)`, whose SHA1 must
//! equal `stage2`. So the proxy never needs to keep plaintext passwords.

use std::fmt;

use sha1::{Digest, Sha1};

use crate::caching_sha2::{self, Sha2Stage1};

/// The plugin the proxy authenticates clients with (and the backends with).
pub const NATIVE_PASSWORD: &str = "mysql_native_password";

/// Length of a scramble (nonce) and of a SHA1 digest.
pub const SCRAMBLE_LEN: usize = 20;

/// Errors parsing a stored `*HEX40` password hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    #[error("native password hash must be '*' followed by 40 hex digits (got {len} characters)")]
    BadLength { len: usize },
    #[error("native password hash must start with '*'")]
    MissingStar,
    #[error("native password hash contains a non-hex character")]
    BadHex,
}

/// Generates a 20-byte scramble for a greeting or AuthSwitchRequest.
///
/// Mirrors MySQL's `generate_user_salt`: each random byte is masked to 7 bits
/// and then NUL and `'$'` are bumped by one. NUL must not appear because the
/// second scramble half is NUL-terminated in HandshakeV10 and some clients
/// stop at the first NUL; `'$'` is avoided because caching_sha2_password uses
/// it as a field separator in its stored hashes. The result keeps ~7 bits of
/// entropy per byte (~139 bits total), which is what MySQL itself provides.
pub fn new_scramble() -> Result<[u8; SCRAMBLE_LEN], getrandom::Error> {
    let mut s = [0u8; SCRAMBLE_LEN];
    getrandom::getrandom(&mut s)?;
    for b in &mut s {
        *b &= 0x7F;
        if *b == 0 || *b == b'$' {
            *b += 1;
        }
    }
    Ok(s)
}

fn sha1(parts: &[&[u8]]) -> [u8; 20] {
    let mut h = Sha1::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// `SHA1(SHA1(password))`, the value MySQL stores (hex, prefixed by `*`).
pub fn native_stage2(password: &[u8]) -> [u8; 20] {
    sha1(&[&sha1(&[password])])
}

/// `SHA1(password)`: all that a mysql_native_password login needs, and
/// what the proxy recovers from a client's login (see [`native_recover`]).
/// It is a password equivalent for that plugin, so `Debug` never shows it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stage1([u8; SCRAMBLE_LEN]);

impl Stage1 {
    pub fn of_password(password: &[u8]) -> Stage1 {
        Stage1(sha1(&[password]))
    }

    /// `SHA1(stage1)`: the stage2 hash a server stores.
    pub fn stage2(&self) -> [u8; 20] {
        sha1(&[&self.0])
    }

    /// The 20-byte token that proves it for `scramble`:
    /// `stage1 XOR SHA1(scramble ++ SHA1(stage1))`.
    pub fn token(&self, scramble: &[u8]) -> Vec<u8> {
        let mix = sha1(&[scramble, &self.stage2()]);
        self.0.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
    }
}

impl fmt::Debug for Stage1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Stage1(<redacted>)")
    }
}

/// What the client side of a login (the proxy to its backend) proves the
/// password with: the password itself (`--backend-password`, a users-file
/// `BackendPassword`, a client's caching_sha2 full authentication,
/// `ringgate check`), or only hashes of it recovered from a client's own
/// login. mysql_native_password needs [`Stage1`]; caching_sha2_password's
/// fast auth needs [`Sha2Stage1`], its full auth the cleartext. `Debug`
/// never shows any of them.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Credential {
    /// The password; empty means the empty password (an empty auth response).
    Plaintext(Vec<u8>),
    /// `SHA1(password)` of a non-empty password (a native login against a
    /// `MysqlNativePassword` hash): mysql_native_password only.
    Stage1(Stage1),
    /// `SHA1(password)` and `SHA256(password)` of a non-empty password (a
    /// login against a users-file `Password`): either plugin, caching_sha2
    /// by fast auth only.
    Hashes { native: Stage1, sha2: Sha2Stage1 },
}

/// A credential is overwritten when it goes, so that a cleartext password
/// or a recovered SHA1/SHA256 of one (each enough to log in as the user)
/// does not linger in freed memory: a session's, the sha2 cache's, or an
/// identity that a reload dropped. The hashes are `Copy`, so a copy made
/// on the way (a stack temporary) is not covered; the ones kept are.
impl Drop for Credential {
    fn drop(&mut self) {
        match self {
            Credential::Plaintext(p) => zeroize::Zeroize::zeroize(p),
            Credential::Stage1(s) => zeroize::Zeroize::zeroize(&mut s.0),
            Credential::Hashes { native, sha2 } => {
                zeroize::Zeroize::zeroize(&mut native.0);
                sha2.wipe();
            }
        }
    }
}

impl Credential {
    /// The auth response for `scramble`. By protocol convention the empty
    /// password is sent as an empty response, not as a 20-byte token.
    pub fn token(&self, scramble: &[u8]) -> Vec<u8> {
        match self {
            Credential::Plaintext(p) => native_token(p, scramble),
            Credential::Stage1(s) | Credential::Hashes { native: s, .. } => s.token(scramble),
        }
    }

    /// The caching_sha2_password fast-auth response for `nonce` (empty for
    /// the empty password), or None when only `SHA1(password)` is known.
    pub fn sha2_scramble(&self, nonce: &[u8]) -> Option<Vec<u8>> {
        match self {
            Credential::Plaintext(p) => Some(caching_sha2::scramble(p, nonce)),
            Credential::Hashes { sha2, .. } => Some(sha2.scramble(nonce)),
            Credential::Stage1(_) => None,
        }
    }

    /// The cleartext, which caching_sha2_password's full authentication
    /// needs; None when only hashes are known.
    pub fn cleartext(&self) -> Option<&[u8]> {
        match self {
            Credential::Plaintext(p) => Some(p),
            _ => None,
        }
    }

    /// The stage1 this credential proves, `None` for the empty password:
    /// two credentials with the same stage1 log in identically.
    pub fn stage1(&self) -> Option<Stage1> {
        match self {
            Credential::Plaintext(p) if p.is_empty() => None,
            Credential::Plaintext(p) => Some(Stage1::of_password(p)),
            Credential::Stage1(s) | Credential::Hashes { native: s, .. } => Some(*s),
        }
    }

    /// How much of the password it holds (cleartext > both hashes > SHA1
    /// only): of two credentials for the same password, the one that can
    /// log in in more ways.
    pub fn strength(&self) -> u8 {
        match self {
            Credential::Plaintext(_) => 2,
            Credential::Hashes { .. } => 1,
            Credential::Stage1(_) => 0,
        }
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Plaintext(p) if p.is_empty() => f.write_str("Plaintext(<empty>)"),
            Credential::Plaintext(_) => f.write_str("Plaintext(<redacted>)"),
            Credential::Stage1(_) => f.write_str("Stage1(<redacted>)"),
            Credential::Hashes { .. } => f.write_str("Hashes(<redacted>)"),
        }
    }
}

/// The client-side auth response for `mysql_native_password`.
///
/// By protocol convention an empty password is sent as an empty auth
/// response, not as a 20-byte token, hence the `Vec`.
pub fn native_token(password: &[u8], scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    Stage1::of_password(password).token(scramble)
}

/// Verifies a client's native-password token against a stored stage2 hash.
///
/// An empty token is what clients send for an empty password, so it matches
/// exactly when `stage2` is the stage2 of the empty password (an account
/// configured with `"Password": ""`). Any other token must be 20 bytes. The
/// final comparison is constant-time so response timing does not leak how
/// many hash bytes matched.
pub fn native_verify(stage2: &[u8; 20], scramble: &[u8], token: &[u8]) -> bool {
    native_recover(stage2, scramble, token).is_some()
}

/// Verifies a client's token like [`native_verify`] and, when it is good,
/// returns what it proves: the client's [`Credential`], with which the proxy
/// can log in to the backend as that client without ever knowing the
/// password (ProxySQL does the same).
///
/// The token is `stage1 XOR SHA1(scramble ++ stage2)`, so XORing it with
/// `SHA1(scramble ++ stage2)` gives a candidate stage1, which is the real
/// one exactly when `SHA1(candidate) == stage2`.
pub fn native_recover(stage2: &[u8; 20], scramble: &[u8], token: &[u8]) -> Option<Credential> {
    if token.is_empty() {
        return ct_eq(stage2, &native_stage2(b"")).then(|| Credential::Plaintext(Vec::new()));
    }
    if token.len() != SCRAMBLE_LEN {
        return None;
    }
    let mix = sha1(&[scramble, stage2]);
    let mut candidate = [0u8; 20];
    for ((c, t), m) in candidate.iter_mut().zip(token).zip(mix.iter()) {
        *c = t ^ m;
    }
    ct_eq(&sha1(&[&candidate]), stage2).then_some(Credential::Stage1(Stage1(candidate)))
}

/// Constant-time equality of two 20-byte digests.
fn ct_eq(a: &[u8; 20], b: &[u8; 20]) -> bool {
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Parses MySQL's `*` + 40-hex-digit native password hash (as printed by
/// `SELECT authentication_string FROM mysql.user` or `PASSWORD()`), in
/// either case.
pub fn parse_mysql_hash(s: &str) -> Result<[u8; 20], HashError> {
    let b = s.as_bytes();
    if b.len() != 41 {
        return Err(HashError::BadLength {
            len: s.chars().count(),
        });
    }
    let (star, hex) = b.split_at(1);
    if star != b"*" {
        return Err(HashError::MissingStar);
    }
    let mut out = [0u8; 20];
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let [hi, lo] = pair else {
            return Err(HashError::BadHex);
        };
        *o = (hex_val(*hi).ok_or(HashError::BadHex)? << 4)
            | hex_val(*lo).ok_or(HashError::BadHex)?;
    }
    Ok(out)
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drops a credential in place and returns the bytes its hashes held
    /// (still this test's memory: a `MaybeUninit` is never freed).
    /// Unsafe because no safe code can read a value's memory after its drop,
    /// and that is the only way to see that the drop zeroed the hashes.
    #[allow(unsafe_code)]
    fn hashes_after_drop(c: Credential) -> Vec<u8> {
        let mut slot = std::mem::MaybeUninit::new(c);
        // SAFETY: `slot` holds an initialised value, dropped once here;
        // the fields read afterwards lie inside `slot` and were last
        // written (zeroed) by that drop.
        unsafe {
            let spans: Vec<(*const u8, usize)> = match &*slot.as_ptr() {
                Credential::Stage1(s) => vec![(s.0.as_ptr(), 20)],
                Credential::Hashes { native, sha2 } => vec![
                    (native.0.as_ptr(), 20),
                    ((sha2 as *const Sha2Stage1).cast::<u8>(), 32),
                ],
                Credential::Plaintext(_) => Vec::new(),
            };
            std::ptr::drop_in_place(slot.as_mut_ptr());
            spans
                .into_iter()
                .flat_map(|(p, n)| std::slice::from_raw_parts(p, n).to_vec())
                .collect()
        }
    }

    #[test]
    fn a_dropped_credential_leaves_no_hash_behind() {
        let stage1 = Credential::Stage1(Stage1::of_password(b"pw"));
        assert_eq!(hashes_after_drop(stage1), vec![0u8; 20]);
        let both = Credential::Hashes {
            native: Stage1::of_password(b"pw"),
            sha2: Sha2Stage1::of_password(b"pw"),
        };
        assert_eq!(hashes_after_drop(both), vec![0u8; 52]);
    }

    #[test]
    fn known_stage2_vectors() {
        // What MySQL's PASSWORD() prints for these.
        assert_eq!(
            parse_mysql_hash("*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"),
            Ok(native_stage2(b"password"))
        );
        assert_eq!(
            parse_mysql_hash("*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"),
            Ok(native_stage2(b"123456"))
        );
    }

    #[test]
    fn parse_hash_forms() {
        let upper = parse_mysql_hash("*6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9").unwrap();
        let lower = parse_mysql_hash("*6bb4837eb74329105ee4568dda7dc67ed2ca2ad9").unwrap();
        assert_eq!(upper, lower);
        assert_eq!(upper, native_stage2(b"123456"));
        assert_eq!(
            parse_mysql_hash("6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"),
            Err(HashError::BadLength { len: 40 })
        );
        assert_eq!(
            parse_mysql_hash("x6BB4837EB74329105EE4568DDA7DC67ED2CA2AD9"),
            Err(HashError::MissingStar)
        );
        assert_eq!(
            parse_mysql_hash("*6BB4837EB74329105EE4568DDA7DC67ED2CA2ADZ"),
            Err(HashError::BadHex)
        );
        // Multi-byte UTF-8 of the right byte length must not panic.
        assert!(parse_mysql_hash("*é6BB4837EB74329105EE4568DDA7DC67ED2CA2A").is_err());
    }

    #[test]
    fn token_verify_roundtrip() {
        let scramble = new_scramble().unwrap();
        let stage2 = native_stage2(b"s3cret");
        let token = native_token(b"s3cret", &scramble);
        assert_eq!(token.len(), 20);
        assert!(native_verify(&stage2, &scramble, &token));
        // Wrong password, wrong scramble, truncated token, empty token.
        assert!(!native_verify(
            &stage2,
            &scramble,
            &native_token(b"s3creT", &scramble)
        ));
        let other = new_scramble().unwrap();
        assert!(!native_verify(&stage2, &other, &token));
        assert!(!native_verify(&stage2, &scramble, &token[..19]));
        assert!(!native_verify(&stage2, &scramble, &[]));
    }

    #[test]
    fn known_token_vector() {
        // Independently computed: scramble = bytes 1..=20, password "password".
        let scramble: Vec<u8> = (1..=20).collect();
        let token = native_token(b"password", &scramble);
        let stage1 = sha1(&[b"password"]);
        let mix = sha1(&[&scramble, &native_stage2(b"password")]);
        let expect: Vec<u8> = stage1.iter().zip(mix).map(|(a, b)| a ^ b).collect();
        assert_eq!(token, expect);
        assert!(native_verify(
            &native_stage2(b"password"),
            &scramble,
            &token
        ));
    }

    #[test]
    fn empty_password_convention() {
        let scramble = new_scramble().unwrap();
        assert!(native_token(b"", &scramble).is_empty());
        let empty = native_stage2(b"");
        assert!(native_verify(&empty, &scramble, &[]));
        assert!(!native_verify(&native_stage2(b"x"), &scramble, &[]));
    }

    /// A real exchange with MariaDB 10.11 (the sandbox): user `vec_user`,
    /// password `vec-secret`, the `mariadb` CLI (`--skip-ssl`) logging in
    /// through a capturing relay. The scramble is the greeting's 8 + 12
    /// bytes, the token the HandshakeResponse41's auth response; the server
    /// answered OK.
    const REAL_SCRAMBLE: &str = "402123284251522a773b5e493465237b666a6128";
    const REAL_TOKEN: &str = "1a535a1908c11dc0fb4075da17445740662ff88e";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn stage1_is_recovered_from_a_real_mariadb_login() {
        let stage2 = native_stage2(b"vec-secret");
        let scramble = unhex(REAL_SCRAMBLE);
        let token = unhex(REAL_TOKEN);
        let got = native_recover(&stage2, &scramble, &token).expect("the server accepted it");
        assert_eq!(got.stage1(), Some(Stage1::of_password(b"vec-secret")));
        // What the proxy sends the backend for another scramble is exactly
        // what a client knowing the password would send.
        let backend_scramble: Vec<u8> = (40..60).collect();
        assert_eq!(
            got.token(&backend_scramble),
            native_token(b"vec-secret", &backend_scramble)
        );
        // A flipped bit, another scramble or another stored hash: nothing.
        let mut bad = token.clone();
        bad[7] ^= 1;
        assert_eq!(native_recover(&stage2, &scramble, &bad), None);
        assert_eq!(native_recover(&stage2, &backend_scramble, &token), None);
        assert_eq!(
            native_recover(&native_stage2(b"vec-secreT"), &scramble, &token),
            None
        );
    }

    #[test]
    fn recovery_by_the_published_algorithm() {
        // token = SHA1(pw) XOR SHA1(scramble ++ SHA1(SHA1(pw))), computed
        // here step by step, independently of `native_token`.
        let scramble: Vec<u8> = (1..=20).collect();
        let stage1 = sha1(&[b"password"]);
        let stage2 = sha1(&[&stage1]);
        assert_eq!(
            hex_upper(&stage2),
            "2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"
        );
        let mix = sha1(&[&scramble, &stage2]);
        let token: Vec<u8> = stage1.iter().zip(mix).map(|(a, b)| a ^ b).collect();
        let got = native_recover(&stage2, &scramble, &token).unwrap();
        assert_eq!(got, Credential::Stage1(Stage1(stage1)));
        // Random scrambles round-trip through both credential forms.
        for _ in 0..20 {
            let s = new_scramble().unwrap();
            let c = native_recover(&stage2, &s, &native_token(b"password", &s)).unwrap();
            let other = new_scramble().unwrap();
            assert_eq!(
                c.token(&other),
                Credential::Plaintext(b"password".to_vec()).token(&other)
            );
        }
    }

    #[test]
    fn empty_password_recovers_the_empty_credential() {
        let scramble = new_scramble().unwrap();
        let empty = native_stage2(b"");
        let c = native_recover(&empty, &scramble, &[]).unwrap();
        assert_eq!(c.stage1(), None);
        assert!(c.token(&scramble).is_empty());
        assert_eq!(native_recover(&native_stage2(b"x"), &scramble, &[]), None);
        assert_eq!(native_recover(&empty, &scramble, &[1; 19]), None);
    }

    #[test]
    fn credentials_never_show_in_debug() {
        let c = Credential::Plaintext(b"hunter2".to_vec());
        let s = Credential::Stage1(Stage1::of_password(b"hunter2"));
        let text = format!("{c:?} {s:?} {:?}", Stage1::of_password(b"hunter2"));
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
        assert_eq!(c.stage1(), s.stage1());
    }

    #[test]
    fn each_credential_logs_in_with_what_it_knows() {
        let nonce = b"0123456789abcdefghij";
        let plain = Credential::Plaintext(b"hunter2".to_vec());
        let hashes = Credential::Hashes {
            native: Stage1::of_password(b"hunter2"),
            sha2: Sha2Stage1::of_password(b"hunter2"),
        };
        let native = Credential::Stage1(Stage1::of_password(b"hunter2"));
        let sha2 = caching_sha2::scramble(b"hunter2", nonce);
        assert_eq!(plain.sha2_scramble(nonce), Some(sha2.clone()));
        assert_eq!(hashes.sha2_scramble(nonce), Some(sha2));
        assert_eq!(native.sha2_scramble(nonce), None);
        assert_eq!(hashes.token(nonce), plain.token(nonce));
        assert_eq!(plain.cleartext(), Some(&b"hunter2"[..]));
        assert_eq!(hashes.cleartext(), None);
        assert_eq!(hashes.stage1(), plain.stage1());
        assert!(plain.strength() > hashes.strength() && hashes.strength() > native.strength());
        assert_eq!(
            Credential::Plaintext(Vec::new()).sha2_scramble(nonce),
            Some(Vec::new())
        );
        assert_eq!(format!("{hashes:?}"), "Hashes(<redacted>)");
    }

    fn hex_upper(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02X}")).collect()
    }

    #[test]
    fn scramble_has_no_nul_or_dollar() {
        for _ in 0..200 {
            let s = new_scramble().unwrap();
            assert!(s.iter().all(|&b| (1..=127).contains(&b) && b != b'$'));
        }
    }
}

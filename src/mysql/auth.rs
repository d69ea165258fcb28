//! `mysql_native_password` arithmetic and scramble generation.
//!
//! The client proves knowledge of the password by sending
//! `SHA1(pw) XOR SHA1(scramble ++ SHA1(SHA1(pw)))`. The verifier only needs
//! `stage2 = SHA1(SHA1(pw))` (MySQL's `*HEX40` hash): XORing the token with
//! `SHA1(scramble ++ stage2)` yields the candidate `SHA1(pw)`, whose SHA1 must
//! equal `stage2`. So the proxy never needs to keep plaintext passwords.

use sha1::{Digest, Sha1};

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

/// The client-side auth response for `mysql_native_password`.
///
/// By protocol convention an empty password is sent as an empty auth
/// response, not as a 20-byte token, hence the `Vec`.
pub fn native_token(password: &[u8], scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = sha1(&[password]);
    let stage2 = sha1(&[&stage1]);
    let mix = sha1(&[scramble, &stage2]);
    stage1.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

/// Verifies a client's native-password token against a stored stage2 hash.
///
/// An empty token is what clients send for an empty password, so it matches
/// exactly when `stage2` is the stage2 of the empty password (an account
/// configured with `"Password": ""`). Any other token must be 20 bytes. The
/// final comparison is constant-time so response timing does not leak how
/// many hash bytes matched.
pub fn native_verify(stage2: &[u8; 20], scramble: &[u8], token: &[u8]) -> bool {
    if token.is_empty() {
        return ct_eq(stage2, &native_stage2(b""));
    }
    if token.len() != SCRAMBLE_LEN {
        return false;
    }
    let mix = sha1(&[scramble, stage2]);
    let mut candidate = [0u8; 20];
    for ((c, t), m) in candidate.iter_mut().zip(token).zip(mix.iter()) {
        *c = t ^ m;
    }
    ct_eq(&sha1(&[&candidate]), stage2)
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

    #[test]
    fn scramble_has_no_nul_or_dollar() {
        for _ in 0..200 {
            let s = new_scramble().unwrap();
            assert!(s.iter().all(|&b| (1..=127).contains(&b) && b != b'$'));
        }
    }
}

//! How long one caching_sha2_password full authentication holds a worker
//! thread: the RSA decryption of the password (`--rsa-key`) and the
//! 5,000-round sha256-crypt check of a stored verifier, both run on the
//! worker between two completions. Run in a release build:
//!
//! ```sh
//! openssl genrsa -out /tmp/k.pem 2048
//! cargo run --release --example full_auth_cost -- /tmp/k.pem
//! ```
//!
//! Prints the median and the 90th percentile of each step in the thread's
//! CPU time (what the worker spends, whatever else the machine runs;
//! docs/journal/2026-12-06-full-auth-cost.md has the figures, docs/operations.md,
//! "Login storms", what they mean for an operator).

use std::time::Duration;

use wire::caching_sha2::Verifier;
use wire::sha2_rsa::{RsaPrivate, RsaPublic};

const ROUNDS: usize = 200;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: full_auth_cost PRIVATE_KEY.pem (openssl genrsa 2048)")?;
    let key = RsaPrivate::parse(&std::fs::read_to_string(&path)?, &path)?;
    let public = RsaPublic::parse(key.public_pem().as_bytes(), "its public key")?;
    let nonce = *b"0123456789abcdefghij";
    let verifier = Verifier::create(b"not-the-password", [7; 20]);
    let cipher = public.encrypt_password(b"a-wrong-password", &nonce)?;

    let rsa = timed(|| {
        let _ = key.decrypt_password(&cipher, &nonce);
    });
    let crypt = timed(|| {
        std::hint::black_box(verifier.verify_cleartext(b"a-wrong-password"));
    });
    report("RSA-OAEP decryption (--rsa-key)", &rsa);
    report("sha256-crypt, 5000 rounds (a verifier)", &crypt);
    let both: Vec<Duration> = rsa.iter().zip(&crypt).map(|(a, b)| *a + *b).collect();
    report("one full authentication over TCP with --rsa-key", &both);
    Ok(())
}

/// CLOCK_THREAD_CPUTIME_ID: this thread's CPU time.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn timed(mut f: impl FnMut()) -> Vec<Duration> {
    let mut v: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let t = cpu_now();
            f();
            cpu_now().saturating_sub(t)
        })
        .collect();
    v.sort_unstable();
    v
}

fn report(what: &str, sorted: &[Duration]) {
    let mut sorted = sorted.to_vec();
    sorted.sort_unstable();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize];
    println!(
        "{what}: median {:.2} ms, p90 {:.2} ms ({} runs)",
        at(0.5).as_secs_f64() * 1e3,
        at(0.9).as_secs_f64() * 1e3,
        sorted.len()
    );
}

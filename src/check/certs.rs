//! The certificate checks: expiry of every PEM file given (front-end certificate and CAs,
//! backend CA) and whether `--tls-key` belongs to `--tls-cert`, which start-up cannot see for a
//! file replaced on disk before the next SIGHUP.

use std::path::Path;
use std::time::SystemTime;

use super::tls::{self};
use super::Item;

/// A certificate file's validity: expired (or not yet valid) fails, less
/// than 30 days left warns.
pub(super) fn check_cert_expiry(what: &'static str, path: &Path, now: SystemTime) -> Item {
    match tls::check_cert_file(path, now) {
        Ok(info) => {
            let when = humantime::format_rfc3339_seconds(info.first_expiry);
            let detail = format!(
                "{}: {} certificate(s); the first to expire is {:?}, on {when}",
                path.display(),
                info.count,
                info.subject
            );
            let left = info.first_expiry.duration_since(now).unwrap_or_default();
            if left < tls::EXPIRY_WARNING {
                Item::warn(
                    what,
                    format!("{detail} (in {} days)", left.as_secs() / 86400),
                    "renew the certificate before it expires",
                )
            } else {
                Item::ok(what, detail)
            }
        }
        Err(e) => Item::fail(
            what,
            format!("{}: {e}", path.display()),
            "replace the certificate (PEM) with a valid one",
        ),
    }
}

/// `--tls-key` is the private key of `--tls-cert`'s first certificate.
pub(super) fn check_key_match(cert: &Path, key: &Path) -> Item {
    match tls::check_key_pair(cert, key) {
        Ok(()) => Item::ok(
            "tls-key",
            format!("{} is the key of {}", key.display(), cert.display()),
        ),
        Err(e) => Item::fail(
            "tls-key",
            format!("{} and {}: {e}", key.display(), cert.display()),
            "give --tls-key the private key the --tls-cert certificate was issued for",
        ),
    }
}

//! `ringgate check`'s TLS pieces: the certificate files' checks (expiry, a
//! key that matches its certificate). The backend connection, plain or TLS,
//! is `src/blocking_login/stream.rs`.

use std::path::Path;
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use x509_cert::der::Decode;

use crate::tls::backend_client::load_certs;

/// What a certificate file holds, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFileInfo {
    pub count: usize,
    /// The earliest notAfter of them.
    pub first_expiry: SystemTime,
    /// The subject of the certificate that expires first.
    pub subject: String,
}

/// Why a certificate file is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertFileError {
    #[error("{0}")]
    Load(String),
    #[error("certificate {subject:?} expired on {when}")]
    Expired { subject: String, when: String },
    #[error("certificate {subject:?} is not valid before {when}")]
    NotYetValid { subject: String, when: String },
    #[error("the key does not match the certificate ({0})")]
    KeyMismatch(String),
}

/// Reads every certificate of a PEM file and checks its validity window
/// against `now`.
pub fn check_cert_file(path: &Path, now: SystemTime) -> Result<CertFileInfo, CertFileError> {
    let certs = load_certs(path).map_err(|e| CertFileError::Load(e.to_string()))?;
    let mut first: Option<(SystemTime, String)> = None;
    for der in &certs {
        let cert = x509_cert::Certificate::from_der(der.as_ref()).map_err(|e| {
            CertFileError::Load(format!("{}: not an X.509 certificate: {e}", path.display()))
        })?;
        let tbs = &cert.tbs_certificate;
        let subject = tbs.subject.to_string();
        let not_before = tbs.validity.not_before.to_system_time();
        let not_after = tbs.validity.not_after.to_system_time();
        if now > not_after {
            return Err(CertFileError::Expired {
                subject,
                when: humantime::format_rfc3339_seconds(not_after).to_string(),
            });
        }
        if now < not_before {
            return Err(CertFileError::NotYetValid {
                subject,
                when: humantime::format_rfc3339_seconds(not_before).to_string(),
            });
        }
        if first.as_ref().is_none_or(|(t, _)| not_after < *t) {
            first = Some((not_after, subject));
        }
    }
    let (first_expiry, subject) =
        first.ok_or_else(|| CertFileError::Load("no certificate".into()))?;
    Ok(CertFileInfo {
        count: certs.len(),
        first_expiry,
        subject,
    })
}

/// Whether the private key in `key` is the one of the first certificate in
/// `cert` (a server certificate and its key, as `--tls-cert`/`--tls-key`).
pub fn check_key_pair(cert: &Path, key: &Path) -> Result<(), CertFileError> {
    let certs: Vec<CertificateDer<'static>> =
        load_certs(cert).map_err(|e| CertFileError::Load(e.to_string()))?;
    let pem =
        std::fs::read(key).map_err(|e| CertFileError::Load(format!("{}: {e}", key.display())))?;
    let key_der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        CertFileError::Load(format!("{}: no private key in PEM: {e}", key.display()))
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = rustls::sign::CertifiedKey::from_der(certs, key_der, &provider)
        .map_err(|e| CertFileError::KeyMismatch(e.to_string()))?;
    certified
        .keys_match()
        .map_err(|e| CertFileError::KeyMismatch(e.to_string()))
}

/// Less than this left before expiry is a warning.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

#[cfg(test)]
mod tests;

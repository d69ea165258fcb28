//! TLS towards the backend (`--backend-tls`, `--backend-tls-ca`): the
//! rustls client configuration for each mode, as MySQL's client
//! `--ssl-mode` defines them:
//!
//! - `disabled`: no TLS.
//! - `preferred`: TLS when the server offers it (CLIENT_SSL in its
//!   greeting), else plain; the certificate is not verified.
//! - `required`: TLS or fail; the certificate is not verified (encryption
//!   against passive eavesdropping only, as MySQL's REQUIRED).
//! - `verify-ca`: TLS, and the certificate chains to `--backend-tls-ca`
//!   (any name).
//! - `verify-identity`: `verify-ca`, and the certificate names the
//!   backend's address (`--backend` is an IP address: a SAN IP entry).
//!
//! The handshake signatures are checked in every mode (rustls's ring
//! provider); "not verified" means only that the certificate is not
//! checked against a CA or a name.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use crate::config::BackendTls;

#[derive(Debug, thiserror::Error)]
pub enum BackendTlsError {
    #[error(
        "--backend-tls {0} needs --backend-tls-ca (the CA that signed the server's certificate)"
    )]
    NeedsCa(BackendTls),
    #[error("--backend-tls-ca {path}: {reason}")]
    Ca { path: String, reason: String },
    #[error("TLS set-up: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The client side of backend TLS: the mode and its rustls configuration.
#[derive(Clone)]
pub struct BackendTlsConfig {
    pub mode: BackendTls,
    pub config: Arc<ClientConfig>,
    /// What the certificate must name (`verify-identity`); also sent as SNI
    /// when it is a DNS name (never for an IP address).
    pub server_name: ServerName<'static>,
}

impl fmt::Debug for BackendTlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendTlsConfig")
            .field("mode", &self.mode)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl BackendTlsConfig {
    /// Whether a server that offers no TLS must be refused.
    pub fn required(&self) -> bool {
        self.mode != BackendTls::Preferred
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configuration for `mode` towards `backend` (None for `disabled`).
pub fn client_config(
    mode: BackendTls,
    ca: Option<&Path>,
    backend: IpAddr,
) -> Result<Option<BackendTlsConfig>, BackendTlsError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        BackendTls::Disabled => return Ok(None),
        BackendTls::Preferred | BackendTls::Required => Arc::new(NoCertCheck(provider)),
        BackendTls::VerifyCa | BackendTls::VerifyIdentity => {
            let path = ca.ok_or(BackendTlsError::NeedsCa(mode))?;
            let roots = load_roots(path)?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| BackendTlsError::Ca {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?;
            if mode == BackendTls::VerifyCa {
                Arc::new(AnyName(webpki))
            } else {
                webpki
            }
        }
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(BackendTlsConfig {
        mode,
        config: Arc::new(config),
        server_name: ServerName::IpAddress(backend.into()),
    }))
}

/// Why a backend TLS handshake failed, with what to do about it: the log
/// line and the client's `backend unavailable` error quote it.
pub fn handshake_failure(err: &rustls::Error, mode: BackendTls, ca: Option<&Path>) -> String {
    let ca = ca.map_or_else(|| "(none)".into(), |p| p.display().to_string());
    let fix = match err {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "the certificate does not name the --backend address (verify-identity checks a \
              subjectAltName IP entry): reissue it with that address, or use --backend-tls \
              verify-ca"
            .to_string(),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. },
        ) => "the server's certificate is expired or not yet valid: renew it".to_string(),
        rustls::Error::InvalidCertificate(_) => format!(
            "the server's certificate does not verify against --backend-tls-ca {ca}: give the \
             CA that signed it (`ringgate check` shows the chain's expiry), or use --backend-tls \
             required to encrypt without checking it"
        ),
        _ => "check the server's TLS set-up (ssl-cert, ssl-key, tls_version) and that \
              --backend points at it"
            .to_string(),
    };
    format!("TLS handshake with the server failed (--backend-tls {mode}): {err}; {fix}")
}

/// Every certificate of a PEM file (a CA bundle).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, BackendTlsError> {
    let bad = |reason: String| BackendTlsError::Ca {
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    Ok(certs)
}

fn load_roots(path: &Path) -> Result<RootCertStore, BackendTlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| BackendTlsError::Ca {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// `preferred`/`required`: any certificate, handshake signatures checked.
#[derive(Debug)]
struct NoCertCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must verify; the name is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;

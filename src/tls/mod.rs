//! TLS configuration: the front end's certificate, key and optional client
//! CA, loaded into a rustls [`ServerConfig`] at start-up and again on
//! SIGHUP (a file that does not load keeps the previous config).
//!
//! rustls 0.23 with the `ring` provider; TLS 1.3 and 1.2 (1.3 is chosen
//! whenever the client offers it: rustls prefers the highest version both
//! sides support). The record layer runs in `leg.rs`.
//!
//! # Session resumption across workers
//! Workers share one `ServerConfig` (an `Arc`), so whatever resumes a
//! session is process-wide: a client that reconnects usually lands on
//! another worker (SO_REUSEPORT) and still resumes. With
//! `--tls-session-tickets` (the default) that is rustls's stateless ticket
//! key (ChaCha20-Poly1305, random, in memory only, rotated every 6 hours,
//! the previous key still accepted: a ticket lives at most 12 hours); the
//! server keeps nothing per session. Without it, resumption uses a shared
//! in-memory cache of [`SESSION_CACHE_ENTRIES`] sessions (TLS 1.3 tickets
//! that name a cache entry, TLS 1.2 session ids; TLS 1.2 clients that take
//! no tickets use it with tickets on too). Either way a reload
//! builds a new config with a new key and an empty cache: a session made
//! under the old certificate or client CA does not resume under the new
//! one (rustls does not verify a client certificate again on resumption,
//! so a CA removed on reload must not be bypassed), at the price of one
//! full handshake per reconnecting client after a reload.

pub mod backend_client;
pub mod record_layer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use thiserror::Error;

/// Where the front end's certificates come from (`--tls-cert`, `--tls-key`,
/// `--tls-client-ca`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    /// `--tls-session-tickets`: resume with stateless tickets (else from
    /// the shared session cache).
    pub session_tickets: bool,
}

/// Sessions the shared cache holds without tickets (rustls's default is
/// 256, for one process: a reconnect storm of more clients than that
/// would evict sessions before they resume). A few hundred bytes each.
pub const SESSION_CACHE_ENTRIES: usize = 8192;

#[derive(Debug, Error)]
pub enum TlsConfigError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {path} holds no PEM {expected} (fix: give a PEM file with a `-----BEGIN {expected}-----` block)")]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("{what} {path} is not valid PEM: {detail}")]
    Pem {
        what: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("--tls-client-ca {path}: {detail}")]
    ClientCa { path: PathBuf, detail: String },
    #[error("cannot make a TLS session ticket key: {0}")]
    Ticketer(rustls::Error),
    #[error("--tls-cert {cert} and --tls-key {key} do not go together, or one is not usable: {source} (fix: give the certificate and the key it was made for)")]
    KeyMismatch {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    std::fs::read(path).map_err(|source| TlsConfigError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn pem_err(what: &'static str, path: &Path, e: rustls::pki_types::pem::Error) -> TlsConfigError {
    TlsConfigError::Pem {
        what,
        path: path.to_owned(),
        detail: e.to_string(),
    }
}

fn certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(what, path, e))?;
    if certs.is_empty() {
        return Err(TlsConfigError::Empty {
            what,
            path: path.to_owned(),
            expected: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// The crypto provider every TLS config of the process uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS 1.3 first, then 1.2.
pub const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// Load the files into a server config.
pub fn load_server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let chain = certs("--tls-cert", &files.cert)?;
    let key_pem = read("--tls-key", &files.key)?;
    let key = match PrivateKeyDer::from_pem_slice(&key_pem) {
        Ok(k) => k,
        Err(rustls::pki_types::pem::Error::NoItemsFound) => {
            return Err(TlsConfigError::Empty {
                what: "--tls-key",
                path: files.key.clone(),
                expected: "PRIVATE KEY",
            })
        }
        Err(e) => return Err(pem_err("--tls-key", &files.key, e)),
    };
    let mismatch = |source| TlsConfigError::KeyMismatch {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(mismatch)?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs("--tls-client-ca", ca)? {
                roots.add(c).map_err(|e| TlsConfigError::ClientCa {
                    path: ca.clone(),
                    detail: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsConfigError::ClientCa {
                    path: ca.clone(),
                    detail: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(mismatch)?;
    // Also with tickets: a TLS 1.2 client that does not take tickets
    // resumes by session id from the cache.
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
    if files.session_tickets {
        config.ticketer =
            rustls::crypto::ring::Ticketer::new().map_err(TlsConfigError::Ticketer)?;
    }
    Ok(Arc::new(config))
}

/// The live server config, swapped whole on reload; each TLS session takes
/// the one current at its SSLRequest.
pub struct TlsState {
    pub files: TlsFiles,
    config: RwLock<Arc<ServerConfig>>,
}

impl TlsState {
    pub fn load(files: TlsFiles) -> Result<TlsState, TlsConfigError> {
        let config = load_server_config(&files)?;
        Ok(TlsState {
            files,
            config: RwLock::new(config),
        })
    }

    pub fn current(&self) -> Arc<ServerConfig> {
        match self.config.read() {
            Ok(c) => Arc::clone(&c),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Load the files again; on failure the old config stays.
    pub fn reload(&self) -> Result<(), TlsConfigError> {
        let new = load_server_config(&self.files)?;
        match self.config.write() {
            Ok(mut c) => *c = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

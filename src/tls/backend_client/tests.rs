//! Each mode's configuration, and the verifiers against an in-memory
//! rustls server whose certificate (SAN localhost, 127.0.0.1) is signed by
//! testdata/backend_tls/ca.pem.

use std::io::{Read, Write};
use std::path::PathBuf;

use rustls::pki_types::PrivateKeyDer;
use rustls::{ClientConnection, ServerConfig, ServerConnection};

use super::*;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/testdata/backend_tls")
        .join(name)
}

fn server() -> ServerConnection {
    let certs = load_certs(&data("server.pem")).unwrap();
    let key = PrivateKeyDer::from_pem_slice(&std::fs::read(data("server.key")).unwrap()).unwrap();
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    ServerConnection::new(Arc::new(config)).unwrap()
}

/// Runs a handshake in memory; the client's error if it fails.
fn handshake(mode: BackendTls, ca: Option<&str>, addr: &str) -> Result<(), rustls::Error> {
    let ca = ca.map(data);
    let tls = client_config(mode, ca.as_deref(), addr.parse().unwrap())
        .unwrap()
        .unwrap();
    let mut client = ClientConnection::new(tls.config, tls.server_name).unwrap();
    let mut server = server();
    for _ in 0..20 {
        let mut wire = Vec::new();
        client.write_tls(&mut wire).unwrap();
        server.read_tls(&mut &wire[..]).unwrap();
        if let Err(e) = server.process_new_packets() {
            let mut alert = Vec::new();
            let _ = server.write_tls(&mut alert);
            return Err(e);
        }
        let mut wire = Vec::new();
        server.write_tls(&mut wire).unwrap();
        client.read_tls(&mut &wire[..]).unwrap();
        client.process_new_packets()?;
        if !client.is_handshaking() && !server.is_handshaking() {
            // Application data goes both ways.
            client.writer().write_all(b"ping").unwrap();
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut &wire[..]).unwrap();
            server.process_new_packets().unwrap();
            let mut got = [0u8; 4];
            server.reader().read_exact(&mut got).unwrap();
            assert_eq!(&got, b"ping");
            return Ok(());
        }
    }
    panic!("no handshake after 20 rounds");
}

#[test]
fn disabled_is_no_configuration_and_verifying_modes_need_a_ca() {
    let ip = "127.0.0.1".parse().unwrap();
    assert!(client_config(BackendTls::Disabled, None, ip)
        .unwrap()
        .is_none());
    for mode in [BackendTls::VerifyCa, BackendTls::VerifyIdentity] {
        let e = client_config(mode, None, ip).err().unwrap();
        assert!(e.to_string().contains("needs --backend-tls-ca"), "{e}");
    }
    let e = client_config(BackendTls::VerifyCa, Some(&data("nope.pem")), ip)
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("--backend-tls-ca "), "{e}");
    // A key is not a certificate.
    let e = client_config(BackendTls::VerifyCa, Some(&data("other.key")), ip)
        .err()
        .unwrap();
    assert!(e.to_string().contains("no certificate"), "{e}");
    let tls = client_config(BackendTls::Preferred, None, ip)
        .unwrap()
        .unwrap();
    assert!(!tls.required());
    assert!(format!("{tls:?}").contains("Preferred"));
}

#[test]
fn required_and_preferred_take_any_certificate() {
    for mode in [BackendTls::Required, BackendTls::Preferred] {
        handshake(mode, None, "10.9.8.7").unwrap();
    }
}

#[test]
fn verify_ca_checks_the_chain_not_the_name() {
    handshake(BackendTls::VerifyCa, Some("ca.pem"), "10.9.8.7").unwrap();
    // Another CA: refused, whatever the name. server.pem is no CA.
    let e = handshake(BackendTls::VerifyCa, Some("server.pem"), "127.0.0.1").unwrap_err();
    assert!(
        matches!(
            e,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        ),
        "{e:?}"
    );
}

#[test]
fn verify_identity_checks_the_address_too() {
    handshake(BackendTls::VerifyIdentity, Some("ca.pem"), "127.0.0.1").unwrap();
    let e = handshake(BackendTls::VerifyIdentity, Some("ca.pem"), "10.9.8.7").unwrap_err();
    assert!(
        matches!(
            e,
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            )
        ),
        "{e:?}"
    );
}

#[test]
fn a_handshake_failure_names_its_cause_and_its_fix() {
    use rustls::CertificateError;
    let ca = Path::new("/etc/ringgate/ca.pem");
    let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
    let msg = handshake_failure(&unknown, BackendTls::VerifyCa, Some(ca));
    assert!(msg.starts_with("TLS handshake with the server failed (--backend-tls verify-ca): "));
    assert!(msg.contains("UnknownIssuer"), "{msg}");
    assert!(msg.contains("does not verify against --backend-tls-ca /etc/ringgate/ca.pem"));
    let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
    let msg = handshake_failure(&name, BackendTls::VerifyIdentity, Some(ca));
    assert!(msg.contains("use --backend-tls verify-ca"), "{msg}");
    let expired = rustls::Error::InvalidCertificate(CertificateError::Expired);
    assert!(handshake_failure(&expired, BackendTls::Required, None).contains("renew it"));
    let other = rustls::Error::General("x".into());
    assert!(handshake_failure(&other, BackendTls::Required, None).contains("ssl-cert, ssl-key"));
}

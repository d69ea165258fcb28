use super::*;

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/tls/testdata")
        .join(name)
}

fn files(cert: &str, key: &str) -> TlsFiles {
    TlsFiles {
        cert: testdata(cert),
        key: testdata(key),
        client_ca: None,
    }
}

#[test]
fn loads_a_cert_and_its_key() {
    assert!(load_server_config(&files("server.pem", "server.key")).is_ok());
}

#[test]
fn errors_name_the_file_and_the_fix() {
    let e = load_server_config(&files("missing.pem", "server.key"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--tls-cert") && e.contains("missing.pem"), "{e}");
    // A key where the certificate belongs: no CERTIFICATE block.
    let e = load_server_config(&files("server.key", "server.key"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("holds no PEM CERTIFICATE"), "{e}");
    // The CA's certificate with the server's key: they do not match.
    let e = load_server_config(&files("ca.pem", "server.key"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("do not go together"), "{e}");
}

#[test]
fn a_failed_reload_keeps_the_old_config() {
    let dir = std::env::temp_dir().join(format!("ringgate-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("c.pem");
    std::fs::copy(testdata("server.pem"), &cert).unwrap();
    let state = TlsState::load(TlsFiles {
        cert: cert.clone(),
        key: testdata("server.key"),
        client_ca: None,
    })
    .unwrap();
    let before = state.current();
    std::fs::write(&cert, b"not a certificate").unwrap();
    assert!(state.reload().is_err());
    assert!(Arc::ptr_eq(&before, &state.current()));
    std::fs::copy(testdata("server.pem"), &cert).unwrap();
    state.reload().unwrap();
    assert!(!Arc::ptr_eq(&before, &state.current()));
    std::fs::remove_dir_all(&dir).unwrap();
}

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
        session_tickets: true,
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
        session_tickets: true,
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

/// One handshake between a buffered rustls client and a server connection
/// of `server` (a worker's), pumped through memory; the kind the server saw.
fn handshake(
    server: &Arc<ServerConfig>,
    client: &Arc<rustls::ClientConfig>,
) -> rustls::HandshakeKind {
    use rustls::pki_types::ServerName;
    let mut c = rustls::ClientConnection::new(
        Arc::clone(client),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut s = rustls::ServerConnection::new(Arc::clone(server)).unwrap();
    // After the handshake, one more round so the client reads the
    // server's tickets (sent behind its Finished).
    for _ in 0..10 {
        let mut wire = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut wire).unwrap();
        }
        let mut rd = &wire[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).unwrap();
        }
        s.process_new_packets().unwrap();
        let mut wire = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut wire).unwrap();
        }
        let mut rd = &wire[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
        }
        c.process_new_packets().unwrap();
    }
    assert!(!s.is_handshaking());
    s.handshake_kind().unwrap()
}

fn client_config(version: &'static rustls::SupportedProtocolVersion) -> Arc<rustls::ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in certs("ca", &testdata("ca.pem")).unwrap() {
        roots.add(c).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Workers share the one config, so a session made on one connection
/// resumes on another (another worker's); a reload's new config resumes
/// none made before it. With and without tickets, TLS 1.3 and 1.2.
#[test]
fn sessions_resume_across_connections_and_not_across_reloads() {
    use rustls::HandshakeKind::{Full, Resumed};
    for tickets in [true, false] {
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let state = TlsState::load(TlsFiles {
                session_tickets: tickets,
                ..files("server.pem", "server.key")
            })
            .unwrap();
            let client = client_config(version);
            let what = format!("tickets {tickets}, {version:?}");
            assert_eq!(handshake(&state.current(), &client), Full, "{what}");
            assert_eq!(handshake(&state.current(), &client), Resumed, "{what}");
            state.reload().unwrap();
            assert_eq!(
                handshake(&state.current(), &client),
                Full,
                "{what}: after reload"
            );
            assert_eq!(handshake(&state.current(), &client), Resumed, "{what}");
        }
    }
}

/// The tickets are the stateless kind when on: the server config's
/// ticketer is enabled (rustls's default has none).
#[test]
fn tickets_follow_the_flag() {
    let on = load_server_config(&files("server.pem", "server.key")).unwrap();
    assert!(on.ticketer.enabled());
    let off = load_server_config(&TlsFiles {
        session_tickets: false,
        ..files("server.pem", "server.key")
    })
    .unwrap();
    assert!(!off.ticketer.enabled());
}

//! The login's TLS step (`--backend-tls`): SSLRequest, then the
//! HandshakeResponse through TLS.

use super::*;
use crate::caching_sha2::CACHING_SHA2_PASSWORD;
use crate::packet::split_packet;
use crate::reply::ok_payload;

fn greeting(ssl: bool, plugin: &str) -> Vec<u8> {
    let mut caps = 0xdfff_ffff & !CLIENT_SSL;
    if ssl {
        caps |= CLIENT_SSL;
    }
    handshake::build_greeting(&Greeting {
        protocol_version: 10,
        server_version: "8.4.3".into(),
        connection_id: 5,
        scramble: b"abcdefghij0123456789".to_vec(),
        capabilities: caps,
        ext_capabilities: 0,
        charset: UTF8MB4_GENERAL_CI,
        status: SERVER_STATUS_AUTOCOMMIT,
        auth_plugin: plugin.into(),
    })
}

fn login(tls: TlsWish) -> ClientLogin {
    ClientLogin::new(LoginParams {
        user: "app".into(),
        credential: Credential::Plaintext(b"s3cret".to_vec()),
        database: None,
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    })
    .with_tls(tls)
}

fn unframe(bytes: &[u8]) -> (u8, Vec<u8>) {
    let (p, used) = split_packet(bytes).unwrap();
    assert_eq!(used, bytes.len());
    (p.seq, p.payload.to_vec())
}

#[test]
fn ssl_request_then_the_response_through_tls_then_cleartext_full_auth() {
    for wish in [TlsWish::Preferred, TlsWish::Required] {
        let mut l = login(wish);
        let Ok(LoginStep::StartTls(ssl)) = l.on_packet(0, &greeting(true, CACHING_SHA2_PASSWORD))
        else {
            panic!("expected StartTls");
        };
        let (seq, ssl) = unframe(&ssl);
        assert_eq!((seq, ssl.len()), (1, 32));
        let caps = u32::from_le_bytes(ssl[..4].try_into().unwrap());
        assert_ne!(caps & CLIENT_SSL, 0);
        // A packet now (before the handshake) is out of turn.
        let Ok(LoginStep::Send(response)) = l.on_tls_established() else {
            panic!("expected the response");
        };
        let (seq, response) = unframe(&response);
        assert_eq!(seq, 2);
        assert_eq!(&response[..32], &ssl[..], "the SSLRequest is its prefix");
        // Over TLS full authentication sends the cleartext.
        let Ok(LoginStep::Send(pw)) = l.on_packet(3, &[0x01, 0x04]) else {
            panic!("expected the password");
        };
        assert_eq!(unframe(&pw), (4, b"s3cret\0".to_vec()));
        assert!(matches!(
            l.on_packet(5, &ok_payload(0, 0, 2, 0)),
            Ok(LoginStep::Done { capabilities, .. }) if capabilities & CLIENT_SSL != 0
        ));
    }
}

#[test]
fn preferred_falls_back_to_plain_and_required_refuses() {
    let mut l = login(TlsWish::Preferred);
    let Ok(LoginStep::Send(response)) = l.on_packet(0, &greeting(false, NATIVE_PASSWORD)) else {
        panic!("expected a plain response");
    };
    let (seq, response) = unframe(&response);
    assert_eq!(seq, 1);
    assert_eq!(
        u32::from_le_bytes(response[..4].try_into().unwrap()) & CLIENT_SSL,
        0
    );

    let e = login(TlsWish::Required)
        .on_packet(0, &greeting(false, NATIVE_PASSWORD))
        .unwrap_err();
    assert!(
        matches!(e, LoginError::TlsUnavailable(ref v) if v == "8.4.3"),
        "{e:?}"
    );
    assert!(e.to_string().contains("does not offer TLS"), "{e}");

    // Off: never, even when offered.
    let mut l = login(TlsWish::Off);
    assert!(matches!(
        l.on_packet(0, &greeting(true, NATIVE_PASSWORD)),
        Ok(LoginStep::Send(_))
    ));
    assert!(l.on_tls_established().is_err());
}

#[test]
fn a_packet_during_the_handshake_is_a_protocol_error() {
    let mut l = login(TlsWish::Required);
    assert!(matches!(
        l.on_packet(0, &greeting(true, NATIVE_PASSWORD)),
        Ok(LoginStep::StartTls(_))
    ));
    assert!(matches!(
        l.on_packet(2, &ok_payload(0, 0, 2, 0)),
        Err(LoginError::Protocol { .. })
    ));
}

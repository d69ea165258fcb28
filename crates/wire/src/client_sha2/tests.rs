//! The client login speaking caching_sha2_password, driven packet by packet
//! with a MySQL 8-shaped server (the proxy's own front end speaks the same
//! exchange; tests/python/test_backend_sha2.py runs both for real).

use std::sync::Arc;

use super::*;
use crate::auth::{native_token, Stage1, NATIVE_PASSWORD};
use crate::caching_sha2::{scramble, Sha2Stage1, CACHING_SHA2_PASSWORD};
use crate::client_login::{ClientLogin, LoginParams, LoginStep};
use crate::constants::*;
use crate::handshake::{self, build_greeting, ClientHello, Greeting};
use crate::packet::split_packet;
use crate::reply::{err_payload_with_state, ok_payload};
use crate::sha2_rsa::RsaPrivate;

const NONCE: &[u8; 20] = b"abcdefghij0123456789";
const SWITCH_NONCE: &[u8; 20] = b"ZYXWVUTSRQponmlkjihg";
const PASSWORD: &[u8] = b"s3cret-backend";
const TEST_KEY: &str = include_str!("../testdata/rsa_test_key.pem");

fn greeting(plugin: &str) -> Vec<u8> {
    build_greeting(&Greeting {
        protocol_version: 10,
        server_version: "8.4.3".into(),
        connection_id: 42,
        scramble: NONCE.to_vec(),
        capabilities: 0xdfff_ffff & !CLIENT_SSL,
        ext_capabilities: 0,
        charset: 255, // utf8mb4_0900_ai_ci, MySQL 8's default
        status: SERVER_STATUS_AUTOCOMMIT,
        auth_plugin: plugin.into(),
    })
}

fn login(credential: Credential, transport: FullAuthTransport) -> ClientLogin {
    ClientLogin::new(LoginParams {
        user: "app".into(),
        credential,
        database: None,
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    })
    .with_full_auth_transport(transport)
}

fn plaintext() -> Credential {
    Credential::Plaintext(PASSWORD.to_vec())
}

fn plain_tcp() -> FullAuthTransport {
    FullAuthTransport::default()
}

/// The packet inside a `Send`: (sequence id, payload).
fn sent(step: Result<LoginStep, LoginError>) -> (u8, Vec<u8>) {
    match step {
        Ok(LoginStep::Send(bytes)) => {
            let (p, used) = split_packet(&bytes).expect("one whole packet");
            assert_eq!(used, bytes.len());
            (p.seq, p.payload.to_vec())
        }
        other => panic!("expected Send, got {other:?}"),
    }
}

fn done(step: Result<LoginStep, LoginError>) {
    assert!(
        matches!(step, Ok(LoginStep::Done { .. })),
        "expected Done, got {step:?}"
    );
}

/// Greets with `plugin`; returns the response's plugin and auth data.
fn greet(l: &mut ClientLogin, plugin: &str) -> (String, Vec<u8>) {
    let (seq, response) = sent(l.on_packet(0, &greeting(plugin)));
    assert_eq!(seq, 1);
    let Ok(ClientHello::Response(r)) = handshake::parse_handshake_response(&response) else {
        panic!("not a response");
    };
    (r.auth_plugin.unwrap_or_default(), r.auth_response)
}

fn ok() -> Vec<u8> {
    ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0)
}

#[test]
fn fast_auth_answers_the_greetings_plugin_and_waits_for_the_ok() {
    for credential in [
        plaintext(),
        Credential::Hashes {
            native: Stage1::of_password(PASSWORD),
            sha2: Sha2Stage1::of_password(PASSWORD),
        },
    ] {
        let mut l = login(credential, plain_tcp());
        let (plugin, token) = greet(&mut l, CACHING_SHA2_PASSWORD);
        assert_eq!(plugin, CACHING_SHA2_PASSWORD);
        assert_eq!(token, scramble(PASSWORD, NONCE));
        // 0x01 0x03, then the OK with the next sequence id.
        assert_eq!(l.on_packet(2, &[0x01, 0x03]), Ok(LoginStep::Wait));
        done(l.on_packet(3, &ok()));
    }
}

#[test]
fn full_auth_over_a_secure_transport_sends_the_cleartext() {
    let secure = FullAuthTransport {
        secure: true,
        server_key: None,
    };
    let mut l = login(plaintext(), secure);
    greet(&mut l, CACHING_SHA2_PASSWORD);
    let (seq, pw) = sent(l.on_packet(2, &[0x01, 0x04]));
    assert_eq!(seq, 3);
    assert_eq!(pw, b"s3cret-backend\0");
    done(l.on_packet(4, &ok()));
}

#[test]
fn full_auth_over_plain_tcp_asks_for_the_key_and_sends_rsa() {
    let server = RsaPrivate::parse(TEST_KEY, "test").unwrap();
    let mut l = login(plaintext(), plain_tcp());
    greet(&mut l, CACHING_SHA2_PASSWORD);
    assert_eq!(sent(l.on_packet(2, &[0x01, 0x04])), (3, vec![0x02]));
    let mut key = vec![0x01];
    key.extend_from_slice(server.public_pem().as_bytes());
    let (seq, cipher) = sent(l.on_packet(4, &key));
    assert_eq!(seq, 5);
    assert_eq!(cipher.len(), 128);
    assert_eq!(
        server.decrypt_password(&cipher, NONCE).unwrap().as_slice(),
        PASSWORD
    );
    done(l.on_packet(6, &ok()));
}

#[test]
fn full_auth_with_the_configured_key_skips_the_request() {
    let server = RsaPrivate::parse(TEST_KEY, "test").unwrap();
    let transport = FullAuthTransport {
        secure: false,
        server_key: Some(Arc::new(server.public())),
    };
    let mut l = login(plaintext(), transport);
    greet(&mut l, CACHING_SHA2_PASSWORD);
    let (seq, cipher) = sent(l.on_packet(2, &[0x01, 0x04]));
    assert_eq!(seq, 3);
    assert_eq!(
        server.decrypt_password(&cipher, NONCE).unwrap().as_slice(),
        PASSWORD
    );
    done(l.on_packet(4, &ok()));
}

#[test]
fn a_wrong_password_is_the_servers_1045_word_for_word() {
    let message = "Access denied for user 'app'@'10.0.0.5' (using password: YES)";
    let denied = err_payload_with_state(1045, "28000", message);
    // Refused at the scramble (MySQL: fast auth of a cached account) ...
    let mut l = login(plaintext(), plain_tcp());
    greet(&mut l, CACHING_SHA2_PASSWORD);
    let want = Err(LoginError::Server {
        code: 1045,
        sqlstate: "28000".into(),
        message: message.into(),
    });
    assert_eq!(l.on_packet(2, &denied), want);
    // ... or after full authentication.
    let mut l = login(
        plaintext(),
        FullAuthTransport {
            secure: true,
            server_key: None,
        },
    );
    greet(&mut l, CACHING_SHA2_PASSWORD);
    sent(l.on_packet(2, &[0x01, 0x04]));
    assert_eq!(l.on_packet(4, &denied), want);
}

#[test]
fn a_switch_to_caching_sha2_uses_the_switch_nonce() {
    // A server whose default plugin is native and whose account is sha2.
    let server = RsaPrivate::parse(TEST_KEY, "test").unwrap();
    let mut l = login(plaintext(), plain_tcp());
    let (plugin, token) = greet(&mut l, NATIVE_PASSWORD);
    assert_eq!(plugin, NATIVE_PASSWORD);
    assert_eq!(token, native_token(PASSWORD, NONCE));
    let mut switch = vec![0xFE];
    switch.extend_from_slice(b"caching_sha2_password\0");
    switch.extend_from_slice(SWITCH_NONCE);
    switch.push(0);
    let (seq, token) = sent(l.on_packet(2, &switch));
    assert_eq!(seq, 3);
    assert_eq!(token, scramble(PASSWORD, SWITCH_NONCE));
    assert_eq!(sent(l.on_packet(4, &[0x01, 0x04])), (5, vec![0x02]));
    let mut key = vec![0x01];
    key.extend_from_slice(server.public_pem().as_bytes());
    let (_, cipher) = sent(l.on_packet(6, &key));
    // The RSA step XORs with the nonce in effect: the switch's.
    assert_eq!(
        server
            .decrypt_password(&cipher, SWITCH_NONCE)
            .unwrap()
            .as_slice(),
        PASSWORD
    );
    done(l.on_packet(8, &ok()));
}

#[test]
fn a_native_only_credential_answers_natively_and_cannot_follow_a_sha2_switch() {
    let cred = Credential::Stage1(Stage1::of_password(PASSWORD));
    let mut l = login(cred, plain_tcp());
    let (plugin, token) = greet(&mut l, CACHING_SHA2_PASSWORD);
    assert_eq!(plugin, NATIVE_PASSWORD);
    assert_eq!(token, native_token(PASSWORD, NONCE));
    let mut switch = vec![0xFE];
    switch.extend_from_slice(b"caching_sha2_password\0");
    switch.extend_from_slice(NONCE);
    assert_eq!(
        l.on_packet(2, &switch),
        Err(LoginError::Sha2WithoutSha2Hash)
    );
}

#[test]
fn full_auth_with_only_hashes_fails_and_says_why() {
    let cred = Credential::Hashes {
        native: Stage1::of_password(PASSWORD),
        sha2: Sha2Stage1::of_password(PASSWORD),
    };
    let mut l = login(cred, plain_tcp());
    greet(&mut l, CACHING_SHA2_PASSWORD);
    let e = l.on_packet(2, &[0x01, 0x04]).unwrap_err();
    assert_eq!(e, LoginError::FullAuthWithoutPassword);
    assert!(
        e.to_string().contains("needs the cleartext password"),
        "{e}"
    );
}

#[test]
fn out_of_turn_packets_are_protocol_errors() {
    // After 0x03 only OK or ERR.
    let mut l = login(plaintext(), plain_tcp());
    greet(&mut l, CACHING_SHA2_PASSWORD);
    l.on_packet(2, &[0x01, 0x03]).unwrap();
    assert!(matches!(
        l.on_packet(3, &[0x01, 0x04]),
        Err(LoginError::Protocol { .. })
    ));
    // An unknown AuthMoreData status, and garbage instead of a key.
    let mut l = login(plaintext(), plain_tcp());
    greet(&mut l, CACHING_SHA2_PASSWORD);
    assert!(matches!(
        l.on_packet(2, &[0x01, 0x07]),
        Err(LoginError::Protocol { .. })
    ));
    let mut l = login(plaintext(), plain_tcp());
    greet(&mut l, CACHING_SHA2_PASSWORD);
    sent(l.on_packet(2, &[0x01, 0x04]));
    let e = l.on_packet(4, b"\x01not a key").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("caching_sha2_password RSA exchange: the server's public key"),
        "{e}"
    );
    // Sequence ids still count.
    let mut l = login(plaintext(), plain_tcp());
    greet(&mut l, CACHING_SHA2_PASSWORD);
    l.on_packet(2, &[0x01, 0x03]).unwrap();
    assert!(matches!(
        l.on_packet(2, &ok()),
        Err(LoginError::Protocol { .. })
    ));
}

#[test]
fn the_empty_password_sends_an_empty_scramble() {
    let mut l = login(Credential::Plaintext(Vec::new()), plain_tcp());
    let (plugin, token) = greet(&mut l, CACHING_SHA2_PASSWORD);
    assert_eq!(plugin, CACHING_SHA2_PASSWORD);
    assert!(token.is_empty());
    done(l.on_packet(2, &ok()));
}

#[test]
fn nothing_secret_in_debug_or_errors() {
    let mut l = login(plaintext(), plain_tcp());
    greet(&mut l, CACHING_SHA2_PASSWORD);
    let text = format!("{l:?}");
    assert!(!text.contains("s3cret"), "{text}");
    for e in [
        LoginError::FullAuthWithoutPassword,
        LoginError::Sha2WithoutSha2Hash,
    ] {
        assert!(!e.to_string().contains("s3cret"));
    }
}

//! Logins that fail: a wrong password after an auth switch gets the server's own ERR 1045, with
//! its wording, SQL state and sequence id.

use std::time::Duration;

use testkit::env::{backend_env, HASHED_PASSWORD, HASHED_USER};
use testkit::leaks::{assert_no_leaks, baseline};
use testkit::proxy::{Mode, Proxy};
use testkit::rawclient::{
    closed_within, connect_to, hello_with, read_packet, switch_salt, write_packet, RAW_CAPS,
};
use wire::auth::native_token;
use wire::constants::*;
use wire::handshake::parse_greeting;

// ---------------------------------------------------------------------------------------------
// Wrong password after an auth switch
// ---------------------------------------------------------------------------------------------

/// Proposes caching_sha2_password, follows the AuthSwitchRequest to mysql_native_password and
/// answers it with `password`'s token. Returns the final packet's (sequence id, payload).
fn login_through_switch(addr: &str, user: &str, password: &str) -> (u8, Vec<u8>) {
    let mut s = connect_to(addr, Duration::from_secs(10));
    let (_, g) = read_packet(&mut s).expect("greeting");
    parse_greeting(&g).expect("parse greeting");
    let caps = RAW_CAPS | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
    write_packet(
        &mut s,
        1,
        &hello_with(caps, user, "caching_sha2_password", vec![0x5A; 32]),
    )
    .unwrap();
    let (seq, switch) = read_packet(&mut s).expect("AuthSwitchRequest");
    if switch.first() == Some(&0xFF) {
        // Refused before any switch: an unknown name answers as the user
        // its decoy copies, which may be one that no switch can serve.
        closed_within(&mut s, Duration::from_secs(5)).expect("closed after the ERR");
        return (seq, switch);
    }
    let salt = switch_salt(&switch);
    write_packet(
        &mut s,
        seq.wrapping_add(1),
        &native_token(password.as_bytes(), &salt),
    )
    .unwrap();
    let reply = read_packet(&mut s).expect("reply to the switch response");
    if reply.1.first() == Some(&0xFF) {
        closed_within(&mut s, Duration::from_secs(5)).expect("closed after the ERR");
    }
    reply
}

/// (code, SQL state, message) of an ERR payload.
fn parse_err(p: &[u8]) -> (u16, String, String) {
    assert_eq!(p.first(), Some(&0xFF), "want an ERR packet: {p:?}");
    assert_eq!(p.get(3), Some(&b'#'), "an SQL state marker: {p:?}");
    (
        u16::from_le_bytes([p[1], p[2]]),
        String::from_utf8_lossy(&p[4..9]).into_owned(),
        String::from_utf8_lossy(&p[9..]).into_owned(),
    )
}

/// A MySQL 8 client switched to mysql_native_password (a user with only a native hash, which
/// caching_sha2 cannot check) that then sends a wrong password gets
/// ERR 1045 / 28000 with MySQL's wording, and the same sequence id, as from the server itself
/// (checked against the sandbox with its own account); the right password after a switch
/// logs in.
#[test]
fn wrong_password_after_auth_switch_gets_err_1045() {
    let b = backend_env();
    let (server_seq, server_err) = login_through_switch(&b.addr(), &b.user, "wrong-password");
    let (code, state, msg) = parse_err(&server_err);
    assert_eq!((code, state.as_str()), (1045, "28000"), "the server: {msg}");
    let expected = msg.replace(&format!("'{}'@", b.user), &format!("'{HASHED_USER}'@"));
    assert_eq!(
        expected,
        format!("Access denied for user '{HASHED_USER}'@'127.0.0.1' (using password: YES)")
    );

    let mut proxy = Proxy::start(Mode::Fixed);
    let base = baseline(&mut proxy);
    let rejected0 = proxy
        .metrics()
        .get(r#"ringgate_client_rejected_total{reason="auth"}"#);
    let addr = format!("127.0.0.1:{}", proxy.port);
    let (seq, err) = login_through_switch(&addr, HASHED_USER, "wrong-password");
    assert_eq!(
        parse_err(&err),
        (1045, "28000".to_string(), expected),
        "ringgate's answer to a wrong password after an auth switch"
    );
    assert_eq!(seq, server_seq, "the ERR's sequence id, as the server's");
    let (_, ok) = login_through_switch(&addr, HASHED_USER, HASHED_PASSWORD);
    assert_eq!(ok.first(), Some(&0x00), "the right password after a switch");
    assert_eq!(
        proxy
            .metrics()
            .get(r#"ringgate_client_rejected_total{reason="auth"}"#),
        rejected0 + 1.0
    );
    // An unknown user gets the same message shape, after a switch or before it (as the
    // user its decoy copies would).
    let (_, err) = login_through_switch(&addr, "nobody", "x");
    assert_eq!(
        parse_err(&err).2,
        "Access denied for user 'nobody'@'127.0.0.1' (using password: YES)"
    );
    assert_no_leaks(&mut proxy, &base, 3);
}

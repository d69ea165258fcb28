//! The backend login machine against recorded MariaDB exchanges: what it
//! sends, the server's refusals passed on as they are, protocol errors, the
//! capabilities it asks for.

use super::*;
use crate::auth::{native_token, Stage1};
use crate::packet::split_packet;
use crate::reply::{err_payload_with_state, ok_payload};

// Packets captured from MariaDB 10.11.19 (Debian 12) on 127.0.0.1, user
// `ringgate` / `ringgate-backend`, one connection per exchange. Each
// greeting carries its own scramble, so each exchange keeps its own.

/// Greeting of the plain successful login (connection id 6).
const GOOD_GREETING: &str = "0a352e352e352d31302e31312e31392d4d6172696144422d302b6465623132\
    753100060000005b5c3e5e4166603000fef7080200ff81150000000000001d0000006c5130396f464c2e\
    3f327d3f006d7973716c5f6e61746976655f70617373776f726400";
/// The HandshakeResponse41 libmysqlclient-style clients send for it with
/// NATIVE_LOGIN_CAPS, utf8mb4_general_ci and a 16 MiB max packet; the
/// server accepted it.
const GOOD_RESPONSE: &str = "05a22800000000012d00000000000000000000000000000000000000000000\
    0072696e67676174650014e1e02bc62c5d87a56f1fcf9220b850f56beedead6d7973716c5f6e6174697665\
    5f70617373776f726400";
/// Its OK: no rows, no insert id, SERVER_STATUS_AUTOCOMMIT.
const LOGIN_OK: &str = "00000002000000";

/// Greeting and answer of a wrong password.
const BAD_GREETING: &str = "0a352e352e352d31302e31312e31392d4d6172696144422d302b64656231\
    32753100070000005f6d256f7e4c424500fef7080200ff81150000000000001d000000712a7b5160703245\
    44655145006d7973716c5f6e61746976655f70617373776f726400";
const ACCESS_DENIED: &str = "ff15042332383030304163636573732064656e69656420666f72207573657220\
    2772696e67676174652740273132372e302e302e312720287573696e672070617373776f72643a2059455329";

/// A login that named caching_sha2_password in its response: MariaDB
/// switches it to mysql_native_password, re-sending the same scramble.
const SWITCH_GREETING: &str = "0a352e352e352d31302e31312e31392d4d6172696144422d302b6465623132\
    753100080000003930276f7d47283200fef7080200ff81150000000000001d00000061713962634d355f5f42\
    6b75006d7973716c5f6e61746976655f70617373776f726400";
const SWITCH_REQUEST: &str = "fe6d7973716c5f6e61746976655f70617373776f7264003930276f7d4728326171\
    3962634d355f5f426b7500";
const SWITCH_SCRAMBLE: &str = "3930276f7d47283261713962634d355f5f426b75";

/// A login with CLIENT_CONNECT_WITH_DB and a schema that does not exist,
/// and what the server said.
const NODB_GREETING: &str = "0a352e352e352d31302e31312e31392d4d6172696144422d302b6465623132\
    7531000a00000046664f3764753f7600fef7080200ff81150000000000001d0000005836432f60744a523d7a\
    724b006d7973716c5f6e61746976655f70617373776f726400";
const NODB_RESPONSE: &str = "0da22800000000012d000000000000000000000000000000000000000000000072\
    696e676761746500146b2f5d696c5216cda04840da7b7acba085392cc56e6f5f737563685f6462006d7973716c\
    5f6e61746976655f70617373776f726400";
const UNKNOWN_DB: &str = "ff1904233432303030556e6b6e6f776e20646174616261736520276e6f5f737563685f\
    646227";

fn hex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn params() -> LoginParams {
    LoginParams {
        user: "ringgate".into(),
        credential: Credential::Plaintext(b"ringgate-backend".to_vec()),
        database: None,
        capabilities: NATIVE_LOGIN_CAPS,
        collation: UTF8MB4_GENERAL_CI,
        max_packet_size: 1 << 24,
    }
}

/// The packet inside a `Send`, unframed: (sequence id, payload).
fn sent(step: LoginStep) -> (u8, Vec<u8>) {
    let LoginStep::Send(bytes) = step else {
        panic!("expected Send, got {step:?}");
    };
    let (p, used) = split_packet(&bytes).expect("one whole packet");
    assert_eq!(used, bytes.len(), "exactly one packet");
    (p.seq, p.payload.to_vec())
}

/// A login past its greeting: the machine and its HandshakeResponse.
fn after_greeting(params: LoginParams, greeting: &str) -> (ClientLogin, Vec<u8>) {
    let mut login = ClientLogin::new(params);
    let (seq, response) = sent(login.on_packet(0, &hex(greeting)).unwrap());
    assert_eq!(seq, 1);
    (login, response)
}

fn server_err(e: LoginError) -> (u16, String, String) {
    match e {
        LoginError::Server {
            code,
            sqlstate,
            message,
        } => (code, sqlstate, message),
        other => panic!("expected a server error, got {other:?}"),
    }
}

fn assert_protocol(r: Result<LoginStep, LoginError>, what: &str, needle: &str) {
    match r {
        Err(LoginError::Protocol { what: w, detail }) => {
            assert_eq!(w, what, "{detail}");
            assert!(detail.contains(needle), "{detail:?} lacks {needle:?}");
        }
        other => panic!("expected a protocol error about {what}, got {other:?}"),
    }
}

#[test]
fn mariadb_login_sends_what_the_server_accepted_and_reports_the_session() {
    let (mut login, response) = after_greeting(params(), GOOD_GREETING);
    assert_eq!(response, hex(GOOD_RESPONSE));
    match login.on_packet(2, &hex(LOGIN_OK)).unwrap() {
        LoginStep::Done {
            greeting,
            capabilities,
            status,
        } => {
            assert_eq!(greeting.server_version, "5.5.5-10.11.19-MariaDB-0+deb12u1");
            assert_eq!(greeting.connection_id, 6);
            assert_eq!(greeting.capabilities, 0x81FF_F7FE);
            assert_eq!(capabilities, NATIVE_LOGIN_CAPS);
            assert_eq!(status, SERVER_STATUS_AUTOCOMMIT);
        }
        other => panic!("{other:?}"),
    }
    // Finished: anything more is a protocol error.
    assert_protocol(login.on_packet(3, &hex(LOGIN_OK)), "packet", "already over");
}

#[test]
fn wrong_password_is_the_servers_1045_as_is() {
    let (mut login, _) = after_greeting(
        LoginParams {
            credential: Credential::Plaintext(b"nope".to_vec()),
            ..params()
        },
        BAD_GREETING,
    );
    let e = login.on_packet(2, &hex(ACCESS_DENIED)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "1045 (28000): Access denied for user 'ringgate'@'127.0.0.1' (using password: YES)"
    );
    assert_eq!(server_err(e).0, 1045);
    assert_protocol(login.on_packet(3, &hex(LOGIN_OK)), "packet", "already over");
}

#[test]
fn auth_switch_to_native_is_answered_with_a_token_for_the_new_scramble() {
    let (mut login, _) = after_greeting(params(), SWITCH_GREETING);
    let (seq, token) = sent(login.on_packet(2, &hex(SWITCH_REQUEST)).unwrap());
    assert_eq!(seq, 3);
    assert_eq!(
        token,
        native_token(b"ringgate-backend", &hex(SWITCH_SCRAMBLE))
    );
    assert!(matches!(
        login.on_packet(4, &hex(LOGIN_OK)),
        Ok(LoginStep::Done {
            status: SERVER_STATUS_AUTOCOMMIT,
            ..
        })
    ));
}

#[test]
fn wrong_password_after_an_auth_switch_is_the_servers_1045() {
    let (mut login, _) = after_greeting(
        LoginParams {
            credential: Credential::Plaintext(b"wrong".to_vec()),
            ..params()
        },
        SWITCH_GREETING,
    );
    let (seq, _) = sent(login.on_packet(2, &hex(SWITCH_REQUEST)).unwrap());
    assert_eq!(seq, 3);
    let (code, sqlstate, _) = server_err(login.on_packet(4, &hex(ACCESS_DENIED)).unwrap_err());
    assert_eq!((code, sqlstate.as_str()), (1045, "28000"));
}

#[test]
fn a_second_auth_switch_is_a_protocol_error() {
    let (mut login, _) = after_greeting(params(), SWITCH_GREETING);
    sent(login.on_packet(2, &hex(SWITCH_REQUEST)).unwrap());
    assert_protocol(
        login.on_packet(4, &hex(SWITCH_REQUEST)),
        "auth switch request",
        "second switch",
    );
}

#[test]
fn database_is_sent_with_connect_with_db_and_its_err_passed_on() {
    let (mut login, response) = after_greeting(
        LoginParams {
            database: Some("no_such_db".into()),
            ..params()
        },
        NODB_GREETING,
    );
    assert_eq!(response, hex(NODB_RESPONSE));
    let (code, sqlstate, message) = server_err(login.on_packet(2, &hex(UNKNOWN_DB)).unwrap_err());
    assert_eq!(code, 1049);
    assert_eq!(sqlstate, "42000");
    assert_eq!(message, "Unknown database 'no_such_db'");
}

#[test]
fn connect_with_db_is_set_exactly_when_a_database_is_given() {
    let (mut login, response) = after_greeting(
        LoginParams {
            capabilities: NATIVE_LOGIN_CAPS | CLIENT_CONNECT_WITH_DB,
            ..params()
        },
        GOOD_GREETING,
    );
    let caps = u32::from_le_bytes(response[..4].try_into().unwrap());
    assert_eq!(caps & CLIENT_CONNECT_WITH_DB, 0);
    let Ok(LoginStep::Done { capabilities, .. }) = login.on_packet(2, &hex(LOGIN_OK)) else {
        panic!()
    };
    assert_eq!(capabilities, caps);
}

#[test]
fn greeting_phase_err_is_the_servers_refusal() {
    // MariaDB at max_connections: no '#sqlstate', the client's
    // capabilities are not known yet.
    let mut p = vec![0xFF, 0x10, 0x04];
    p.extend_from_slice(b"Too many connections");
    let e = ClientLogin::new(params()).on_packet(0, &p).unwrap_err();
    assert_eq!(e.to_string(), "1040 (HY000): Too many connections");
    // A host blocked by max_connect_errors (1129).
    let mut p = vec![0xFF, 0x69, 0x04];
    p.extend_from_slice(
        b"Host '10.0.0.7' is blocked because of many connection errors; \
          unblock with 'mariadb-admin flush-hosts'",
    );
    let mut login = ClientLogin::new(params());
    let (code, _, message) = server_err(login.on_packet(0, &p).unwrap_err());
    assert_eq!(code, 1129);
    assert!(message.starts_with("Host '10.0.0.7' is blocked"));
    assert_protocol(
        login.on_packet(0, &hex(GOOD_GREETING)),
        "packet",
        "already over",
    );
}

#[test]
fn other_plugins_are_refused_by_name() {
    let mut scramble = b"0123456789abcdefghij".to_vec();
    for (plugin, data_len) in [
        ("client_ed25519", 32), // MariaDB's ed25519
        ("sha256_password", 20),
    ] {
        scramble.resize(data_len, b'x');
        let mut req = vec![0xFE];
        req.extend_from_slice(plugin.as_bytes());
        req.push(0);
        req.extend_from_slice(&scramble);
        req.push(0);
        let (mut login, _) = after_greeting(params(), GOOD_GREETING);
        let e = login.on_packet(2, &req).unwrap_err();
        assert_eq!(e, LoginError::UnsupportedPlugin(plugin.into()));
        assert_eq!(
            e.to_string(),
            format!(
                "the server wants auth plugin '{plugin}'; ringgate logs in with \
                 mysql_native_password or caching_sha2_password"
            )
        );
    }
    // A lone 0xFE is the pre-4.1 "old password" request.
    let (mut login, _) = after_greeting(params(), GOOD_GREETING);
    assert_eq!(
        login.on_packet(2, &[0xFE]),
        Err(LoginError::UnsupportedPlugin("mysql_old_password".into()))
    );
}

#[test]
fn caching_sha2_greeting_with_a_native_only_credential_is_answered_natively() {
    // MySQL 8 names caching_sha2_password in its greeting; with only
    // SHA1(password) known ringgate answers with a native token and
    // follows the server's switch (client_sha2_tests has the rest).
    let mut g = handshake::parse_greeting(&hex(GOOD_GREETING)).unwrap();
    g.auth_plugin = "caching_sha2_password".into();
    g.server_version = "8.0.36".into();
    let mut login = ClientLogin::new(LoginParams {
        credential: Credential::Stage1(Stage1::of_password(b"ringgate-backend")),
        ..params()
    });
    let (_, response) = sent(login.on_packet(0, &handshake::build_greeting(&g)).unwrap());
    let handshake::ClientHello::Response(r) =
        handshake::parse_handshake_response(&response).unwrap()
    else {
        panic!("expected a response");
    };
    assert_eq!(r.auth_plugin.as_deref(), Some(NATIVE_PASSWORD));
    assert_eq!(
        r.auth_response,
        native_token(b"ringgate-backend", &g.scramble)
    );
    assert_eq!(r.username, "ringgate");
    assert_eq!(r.database, None);
    let (seq, _) = sent(login.on_packet(2, &hex(SWITCH_REQUEST)).unwrap());
    assert_eq!(seq, 3);
}

#[test]
fn auth_more_data_and_unknown_replies_are_protocol_errors() {
    let cases: [(&[u8], &str, &str); 4] = [
        (&[0x01, 0x04], "auth reply", "AuthMoreData"), // caching_sha2 "full auth"
        (&[0x05], "auth reply", "unexpected"),
        (&[], "auth reply", "truncated"),
        (&[0x00, 0xFC], "auth reply", "truncated"), // OK cut inside a lenenc int
    ];
    for (payload, what, needle) in cases {
        let (mut login, _) = after_greeting(params(), GOOD_GREETING);
        assert_protocol(login.on_packet(2, payload), what, needle);
    }
}

#[test]
fn switch_scramble_of_the_wrong_length_is_a_protocol_error() {
    let (mut login, _) = after_greeting(params(), GOOD_GREETING);
    let mut req = b"\xFEmysql_native_password\0abcdefgh".to_vec();
    req.push(0);
    assert_protocol(login.on_packet(2, &req), "auth switch request", "8-byte");
}

#[test]
fn out_of_order_sequence_ids_are_protocol_errors() {
    let mut login = ClientLogin::new(params());
    assert_protocol(
        login.on_packet(1, &hex(GOOD_GREETING)),
        "greeting",
        "expected sequence id 0, got 1",
    );
    let (mut login, _) = after_greeting(params(), GOOD_GREETING);
    assert_protocol(
        login.on_packet(1, &hex(LOGIN_OK)),
        "auth reply",
        "expected sequence id 2, got 1",
    );
    let (mut login, _) = after_greeting(params(), SWITCH_GREETING);
    sent(login.on_packet(2, &hex(SWITCH_REQUEST)).unwrap());
    assert_protocol(
        login.on_packet(3, &hex(LOGIN_OK)),
        "auth reply",
        "expected sequence id 4, got 3",
    );
}

#[test]
fn malformed_or_pre_41_greetings_are_protocol_errors() {
    let good = hex(GOOD_GREETING);
    assert_protocol(
        ClientLogin::new(params()).on_packet(0, &[9, 0]),
        "greeting",
        "version 9",
    );
    assert_protocol(
        ClientLogin::new(params()).on_packet(0, &good[..40]),
        "greeting",
        "truncated",
    );
    assert_protocol(
        ClientLogin::new(params()).on_packet(0, &[]),
        "greeting",
        "truncated",
    );
    // Every prefix errors or parses; none panics.
    for n in 0..good.len() {
        let _ = ClientLogin::new(params()).on_packet(0, &good[..n]);
    }
    let mut g = handshake::parse_greeting(&good).unwrap();
    g.capabilities &= !CLIENT_PROTOCOL_41;
    assert_protocol(
        ClientLogin::new(params()).on_packet(0, &handshake::build_greeting(&g)),
        "greeting",
        "4.1 protocol",
    );
}

#[test]
fn capabilities_are_what_both_sides_have_minus_tls_and_compression() {
    let mut g = handshake::parse_greeting(&hex(GOOD_GREETING)).unwrap();
    g.capabilities &= !CLIENT_DEPRECATE_EOF;
    let wanted = NATIVE_LOGIN_CAPS
        | CLIENT_DEPRECATE_EOF
        | CLIENT_MULTI_RESULTS
        | CLIENT_SSL
        | CLIENT_COMPRESS
        | CLIENT_CONNECT_ATTRS;
    let mut login = ClientLogin::new(LoginParams {
        capabilities: wanted,
        ..params()
    });
    let (_, response) = sent(login.on_packet(0, &handshake::build_greeting(&g)).unwrap());
    let caps = u32::from_le_bytes(response[..4].try_into().unwrap());
    assert_eq!(caps, NATIVE_LOGIN_CAPS | CLIENT_MULTI_RESULTS);
    // MariaDB's greeting lacks bit 0, but CLIENT_LONG_PASSWORD is kept.
    assert_eq!(g.capabilities & CLIENT_LONG_PASSWORD, 0);
    assert_ne!(caps & CLIENT_LONG_PASSWORD, 0);
    let Ok(LoginStep::Done { capabilities, .. }) = login.on_packet(2, &ok_payload(0, 0, 2, 0))
    else {
        panic!()
    };
    assert_eq!(capabilities, caps);
}

#[test]
fn extended_capabilities_are_asked_for_as_far_as_mariadb_offers_them() {
    // MariaDB 10.11 offers 0x1d; BULK_UNIT_RESULTS (0x20) is not offered.
    let wanted = MARIADB_CLIENT_EXTENDED_METADATA | MARIADB_CLIENT_BULK_UNIT_RESULTS;
    let mut login = ClientLogin::new(params()).with_ext_capabilities(wanted);
    let (_, response) = sent(login.on_packet(0, &hex(GOOD_GREETING)).unwrap());
    assert_eq!(
        handshake::response_ext_capabilities(&response),
        MARIADB_CLIENT_EXTENDED_METADATA
    );
    let caps = u32::from_le_bytes(response[..4].try_into().unwrap());
    assert_eq!(caps, NATIVE_LOGIN_CAPS & !CLIENT_MYSQL);
    let Ok(LoginStep::Done { capabilities, .. }) = login.on_packet(2, &hex(LOGIN_OK)) else {
        panic!()
    };
    assert_eq!(capabilities, caps);

    // None wanted: the response is byte for byte the captured one.
    let (_, response) = after_greeting(params(), GOOD_GREETING);
    assert_eq!(response, hex(GOOD_RESPONSE));

    // A MySQL server (CLIENT_MYSQL set) is asked for none.
    let mut g = handshake::parse_greeting(&hex(GOOD_GREETING)).unwrap();
    g.capabilities |= CLIENT_MYSQL;
    g.ext_capabilities = 0x1d;
    let mut login = ClientLogin::new(params()).with_ext_capabilities(wanted);
    let (_, response) = sent(login.on_packet(0, &handshake::build_greeting(&g)).unwrap());
    assert_eq!(handshake::response_ext_capabilities(&response), 0);
    assert_ne!(response[0] & CLIENT_MYSQL as u8, 0);
}

#[test]
fn connect_attrs_are_sent_only_to_a_server_that_takes_them() {
    let attrs = vec![
        ("program_name".to_string(), "mysql".to_string()),
        ("_proxy".to_string(), "ringgate".to_string()),
    ];
    let mut login = ClientLogin::new(params()).with_connect_attrs(attrs.clone());
    let (_, response) = sent(login.on_packet(0, &hex(GOOD_GREETING)).unwrap());
    let handshake::ClientHello::Response(r) =
        handshake::parse_handshake_response(&response).unwrap()
    else {
        panic!("expected a response");
    };
    assert_eq!(r.connect_attrs, attrs);
    assert_ne!(r.capabilities & CLIENT_CONNECT_ATTRS, 0);
    let Ok(LoginStep::Done { capabilities, .. }) = login.on_packet(2, &hex(LOGIN_OK)) else {
        panic!()
    };
    assert_eq!(capabilities, r.capabilities);

    // A server without CLIENT_CONNECT_ATTRS gets none, and no flag.
    let mut g = handshake::parse_greeting(&hex(GOOD_GREETING)).unwrap();
    g.capabilities &= !CLIENT_CONNECT_ATTRS;
    let mut login = ClientLogin::new(params()).with_connect_attrs(attrs);
    let (_, response) = sent(login.on_packet(0, &handshake::build_greeting(&g)).unwrap());
    let handshake::ClientHello::Response(r) =
        handshake::parse_handshake_response(&response).unwrap()
    else {
        panic!("expected a response");
    };
    assert!(r.connect_attrs.is_empty());
    assert_eq!(r.capabilities & CLIENT_CONNECT_ATTRS, 0);
}

#[test]
fn empty_password_sends_an_empty_auth_response() {
    let (_, response) = after_greeting(
        LoginParams {
            credential: Credential::Plaintext(Vec::new()),
            ..params()
        },
        GOOD_GREETING,
    );
    let handshake::ClientHello::Response(r) =
        handshake::parse_handshake_response(&response).unwrap()
    else {
        panic!()
    };
    assert!(r.auth_response.is_empty());
}

#[test]
fn server_err_with_another_sqlstate_is_kept_verbatim() {
    let (mut login, _) = after_greeting(params(), GOOD_GREETING);
    let err = err_payload_with_state(
        1227,
        "42000",
        "Access denied; you need (at least one of) the SUPER privilege(s)",
    );
    let (code, sqlstate, message) = server_err(login.on_packet(2, &err).unwrap_err());
    assert_eq!((code, sqlstate.as_str()), (1227, "42000"));
    assert!(message.ends_with("privilege(s)"));
}

#[test]
fn a_stage1_credential_logs_in_as_the_password_would() {
    // The captured exchange, with only SHA1(password) known: the same
    // response bytes the server accepted, and the same switch answer.
    let (_, response) = after_greeting(
        LoginParams {
            credential: Credential::Stage1(Stage1::of_password(b"ringgate-backend")),
            ..params()
        },
        GOOD_GREETING,
    );
    assert_eq!(response, hex(GOOD_RESPONSE));
    let (mut login, _) = after_greeting(
        LoginParams {
            credential: Credential::Stage1(Stage1::of_password(b"ringgate-backend")),
            ..params()
        },
        SWITCH_GREETING,
    );
    let (_, token) = sent(login.on_packet(2, &hex(SWITCH_REQUEST)).unwrap());
    assert_eq!(
        token,
        native_token(b"ringgate-backend", &hex(SWITCH_SCRAMBLE))
    );
    let text = format!("{login:?}");
    assert!(text.contains("Stage1(<redacted>)"), "{text}");
}

#[test]
fn debug_does_not_show_the_password() {
    let login = ClientLogin::new(params());
    let text = format!("{login:?}");
    assert!(!text.contains("ringgate-backend"), "{text}");
    assert!(text.contains("<redacted>"), "{text}");
}

//! The session machine without a socket: login, lease, relay start, errors.

use super::*;
use crate::backend::tx_replay::ReplayOutcome;
use wire::auth::native_token;
use wire::handshake::build_handshake_response;

const SCRAMBLE: [u8; 20] = *b"0123456789abcdefghij";

fn users() -> Users {
    Users::parse(r#"{"app": [{"Password": "pw"}]}"#).unwrap()
}

static CAUSAL_OFF: crate::causal::CausalConfig = crate::causal::CausalConfig {
    mode: crate::causal::CausalMode::Off,
    global: None,
};

/// Also the caching_sha2 login tests' context (session/sha2.rs).
pub(super) fn ctx<'a>(users: &'a Users, now: Instant) -> SessionCtx<'a> {
    static REGISTRY: std::sync::LazyLock<Registry> = std::sync::LazyLock::new(Registry::default);
    SessionCtx {
        users,
        now,
        max_packet_size: 64 << 20,
        handshake_timeout: Duration::from_secs(10),
        timeouts: RelayTimeouts {
            idle: Duration::ZERO,
            client_write: Duration::from_secs(30),
            backend_read: Duration::ZERO,
        },
        idle_cut: Default::default(),
        draining: false,
        read_buffer_size: 16 * 1024,
        registry: &REGISTRY,
        rsa_key: None,
        move_prepared_statements: true,
        statement_limits: Default::default(),
        park_withdraws_idle_read: false,
        several_servers: false,
        read_write_split: false,
        read_only_functions: &[],
        servers: &[],
        transaction_replay: None,
        causal: &CAUSAL_OFF,
    }
}

fn new_session(now: Instant, over_limit: bool) -> (Session, Vec<SessionAction>) {
    let mut out = Vec::new();
    let s = Session::new(
        NewSession {
            scramble: SCRAMBLE,
            connection_id: 1,
            capabilities: PROXY_CAPS | PASSTHROUGH_CAPS,
            ext_capabilities: 0,
            server_version: "10.11.0-MariaDB".into(),
            peer_host: "127.0.0.1".into(),
            now,
            over_limit,
            transaction_pooling: false,
            require_secure_transport: false,
        },
        &mut out,
    );
    (s, out)
}

fn hello(password: &str, plugin: &str) -> Vec<u8> {
    let payload = build_handshake_response(&HandshakeResponse {
        capabilities: PROXY_CAPS | CLIENT_MULTI_RESULTS | CLIENT_IGNORE_SPACE,
        max_packet_size: 1 << 24,
        charset: UTF8MB4_GENERAL_CI,
        username: "app".into(),
        auth_response: native_token(password.as_bytes(), &SCRAMBLE),
        database: None,
        auth_plugin: Some(plugin.into()),
        connect_attrs: Vec::new(),
    });
    let mut v = Vec::new();
    write_packet(&mut v, 1, &payload);
    v
}

fn sent(out: &[SessionAction]) -> Vec<Vec<u8>> {
    out.iter()
        .filter_map(|a| match a {
            SessionAction::SendClient(b) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

/// The ERR code of a framed ERR packet.
fn err_code(packet: &[u8]) -> u16 {
    assert_eq!(packet[4], 0xff, "not an ERR: {packet:?}");
    u16::from_le_bytes([packet[5], packet[6]])
}

/// Greeting written, then the hello read: returns what the hello produced.
fn login(s: &mut Session, bytes: &[u8], users: &Users, now: Instant) -> Vec<SessionAction> {
    let mut out = Vec::new();
    s.on_client_write(Completion::Done(100), &[], &ctx(users, now), &mut out);
    assert_eq!(out, vec![SessionAction::ReadClient]);
    out.clear();
    s.on_client_read(
        Completion::Done(bytes.len()),
        bytes,
        &ctx(users, now),
        &mut out,
    );
    identify(s, &mut out);
    out
}

/// What the driver does with `Authenticated`: intern the identity and
/// answer. The identity the tests' logins run as.
const IDENTITY: IdentityId = IdentityId(7);

fn identify(s: &mut Session, out: &mut Vec<SessionAction>) {
    let auth = out.iter().find_map(|a| match a {
        SessionAction::Authenticated(auth) => Some(auth.clone()),
        _ => None,
    });
    if let Some(auth) = auth {
        assert_eq!(auth.backend_user, "app");
        assert_eq!(
            auth.credential.stage1(),
            Some(wire::auth::Stage1::of_password(b"pw"))
        );
        s.on_identity(IDENTITY, out);
    }
}

#[test]
fn greeting_login_lease_ok_then_relay() {
    let now = Instant::now();
    let u = users();
    let (mut s, out) = new_session(now, false);
    assert_eq!(sent(&out).len(), 1, "the greeting");
    let h = hello("pw", "mysql_native_password");
    let out = login(&mut s, &h, &u, now);
    assert!(out.contains(&SessionAction::Consume(h.len())));
    assert!(out
        .iter()
        .any(|a| matches!(a, SessionAction::Lease { schema: None, .. })));
    // Defect 10: IGNORE_SPACE is part of the key the backend is opened with.
    assert_ne!(s.key().caps & CLIENT_IGNORE_SPACE, 0);
    // So is the backend identity, in what the pool is asked and warms.
    assert_eq!(s.key().identity, IDENTITY);
    assert!(out
        .iter()
        .any(|a| matches!(a, SessionAction::Lease { key, .. } if key.identity == IDENTITY)));
    assert!(out.contains(&SessionAction::LoggedIn { key: s.key() }));
    assert_eq!(s.user(), Some("app"));
    let mut out = Vec::new();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let ok = sent(&out);
    assert_eq!(ok[0][4], 0x00, "login OK");
    assert_eq!(ok[0][3], 2, "sequence id after the hello");
    out.clear();
    s.on_client_write(Completion::Done(ok[0].len()), &[], &ctx(&u, now), &mut out);
    assert!(matches!(out[0], SessionAction::Connected { .. }));
    assert_eq!(out[1], SessionAction::Relay(RelayOp::ReadClient));
    assert!(s.is_relaying());
}

#[test]
fn a_command_pipelined_behind_the_hello_is_relayed() {
    // Defect 7: the bytes after the HandshakeResponse were dropped.
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    let mut bytes = hello("pw", "mysql_native_password");
    let hello_len = bytes.len();
    let query = [5, 0, 0, 0, 0x03, b's', b'e', b'l', b' '];
    bytes.extend_from_slice(&query);
    let out = login(&mut s, &bytes, &u, now);
    assert!(out.contains(&SessionAction::Consume(hello_len)));
    let mut out = Vec::new();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    out.clear();
    // What the buffer holds after Consume: the query.
    s.on_client_write(Completion::Done(11), &query, &ctx(&u, now), &mut out);
    assert!(out.contains(&SessionAction::Relay(RelayOp::WriteBackend {
        end: query.len()
    })));
}

#[test]
fn wrong_password_gets_1045_with_mysqls_text() {
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    let out = login(&mut s, &hello("nope", "mysql_native_password"), &u, now);
    let err = &sent(&out)[0];
    assert_eq!(err_code(err), 1045);
    let text = String::from_utf8_lossy(&err[13..]);
    assert_eq!(
        text,
        "Access denied for user 'app'@'127.0.0.1' (using password: YES)"
    );
    assert!(out.contains(&SessionAction::Reject(RejectReason::Auth)));
    let mut out = Vec::new();
    s.on_client_write(Completion::Done(err.len()), &[], &ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::Close]);
}

#[test]
fn caching_sha2_client_is_switched_and_a_wrong_answer_gets_1045() {
    let now = Instant::now();
    // A user with only a native hash: caching_sha2 cannot check it, so
    // the client is switched to mysql_native_password (session/sha2.rs).
    let u = Users::parse(
        r#"{"app": [{"MysqlNativePassword": "*D821809F681A40A6E379B50D0463EFAE20BDD122"}]}"#,
    )
    .unwrap();
    let (mut s, _) = new_session(now, false);
    let out = login(&mut s, &hello("pw", "caching_sha2_password"), &u, now);
    let switch = &sent(&out)[0];
    assert_eq!(switch[4], 0xfe, "AuthSwitchRequest");
    let mut out = Vec::new();
    s.on_client_write(Completion::Done(switch.len()), &[], &ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::ReadClient]);
    out.clear();
    let mut answer = Vec::new();
    write_packet(&mut answer, 3, &native_token(b"wrong", &SCRAMBLE));
    s.on_client_read(
        Completion::Done(answer.len()),
        &answer,
        &ctx(&u, now),
        &mut out,
    );
    let err = &sent(&out)[0];
    assert_eq!(err_code(err), 1045);
    assert_eq!(err[3], 4, "the ERR answers the switch reply's sequence id");
}

#[test]
fn over_the_connection_limit_the_greeting_is_err_1040() {
    let (_, out) = new_session(Instant::now(), true);
    assert!(out.contains(&SessionAction::Reject(RejectReason::MaxConnections)));
    let err = &sent(&out)[0];
    assert_eq!(err_code(err), 1040);
    assert_eq!(err[3], 0, "sequence id 0: where the greeting was expected");
}

#[test]
fn handshake_timeout_closes_a_silent_client() {
    let t0 = Instant::now();
    let u = users();
    let (mut s, _) = new_session(t0, false);
    let mut out = Vec::new();
    s.on_client_write(Completion::Done(100), &[], &ctx(&u, t0), &mut out);
    out.clear();
    s.on_tick(&ctx(&u, t0 + Duration::from_secs(11)), &mut out);
    assert!(out.contains(&SessionAction::Reject(RejectReason::Handshake)));
    assert_eq!(out.last(), Some(&SessionAction::Close));
}

#[test]
fn a_failed_lease_sends_the_error_then_closes_and_a_late_lease_goes_back() {
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    login(&mut s, &hello("pw", "mysql_native_password"), &u, now);
    let mut out = Vec::new();
    let payload = wire::reply::err_payload(1105, "backend unavailable");
    s.on_lease_failed(&payload, Some(RejectReason::BackendUnavailable), &mut out);
    assert!(out.contains(&SessionAction::Reject(RejectReason::BackendUnavailable)));
    assert_eq!(err_code(&sent(&out)[0]), 1105);
    out.clear();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    assert_eq!(out, vec![SessionAction::Release { clean: true }]);
}

#[test]
fn closing_while_waiting_cancels_the_lease() {
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    login(&mut s, &hello("pw", "mysql_native_password"), &u, now);
    let mut out = Vec::new();
    s.cut(&ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::CancelLease, SessionAction::Close]);
}

#[test]
fn an_unsupported_command_releases_cleanly_and_gets_1047() {
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    login(&mut s, &hello("pw", "mysql_native_password"), &u, now);
    let mut out = Vec::new();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    s.on_client_write(Completion::Done(11), &[], &ctx(&u, now), &mut out);
    out.clear();
    let shutdown = [2, 0, 0, 0, 0x08, 0];
    s.on_client_read(Completion::Done(6), &shutdown, &ctx(&u, now), &mut out);
    // The idle backend read is cancelled; the release waits for it.
    assert_eq!(out, vec![SessionAction::Relay(RelayOp::CancelReadBackend)]);
    out.clear();
    s.on_backend_read(Completion::Cancelled, &mut [], &ctx(&u, now), &mut out);
    assert_eq!(out[0], SessionAction::Release { clean: true });
    let err = &sent(&out)[0];
    assert_eq!(err_code(err), 1047);
    assert_eq!(err[3], 1);
}

#[test]
fn an_oversized_packet_gets_1153_then_lingers() {
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    login(&mut s, &hello("pw", "mysql_native_password"), &u, now);
    let mut out = Vec::new();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let small = SessionCtx {
        max_packet_size: 100,
        ..ctx(&u, now)
    };
    // The tracker was built at the hello with the hello's context; rebuild
    // the limit by logging in again with the small context.
    let (mut s, _) = new_session(now, false);
    let mut o = Vec::new();
    s.on_client_write(Completion::Done(100), &[], &small, &mut o);
    let h = hello("pw", "mysql_native_password");
    s.on_client_read(Completion::Done(h.len()), &h, &small, &mut o);
    identify(&mut s, &mut o);
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut o);
    s.on_client_write(Completion::Done(11), &[], &small, &mut o);
    o.clear();
    let big = [0xe8, 0x03, 0, 0, 0x03, b'x'];
    s.on_client_read(Completion::Done(6), &big, &small, &mut o);
    assert!(o.contains(&SessionAction::AbortBackend));
    // The shut-down idle backend read completes; then the release.
    s.on_backend_read(Completion::Done(0), &mut [], &small, &mut o);
    assert!(o.contains(&SessionAction::Release { clean: false }));
    let err = &sent(&o)[0];
    assert_eq!(err_code(err), 1153);
    o.clear();
    s.on_client_write(Completion::Done(err.len()), &[], &small, &mut o);
    assert_eq!(
        o,
        vec![
            SessionAction::HalfClose,
            SessionAction::ClearBuffer,
            SessionAction::ReadClient
        ]
    );
    o.clear();
    s.on_tick(
        &SessionCtx {
            now: now + LINGER,
            ..small
        },
        &mut o,
    );
    assert_eq!(o, vec![SessionAction::Close]);
}

/// Logged in as `app`, leased, login OK written: relaying.
fn relaying(u: &Users, now: Instant) -> Session {
    let (mut s, _) = new_session(now, false);
    login(&mut s, &hello("pw", "mysql_native_password"), u, now);
    let mut out = Vec::new();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let ok = sent(&out);
    s.on_client_write(Completion::Done(ok[0].len()), &[], &ctx(u, now), &mut out);
    assert!(s.is_relaying());
    assert_eq!(s.user(), Some("app"));
    s
}

/// As [`relaying`], for a client on the unix socket (a secure transport).
fn relaying_secure(u: &Users, now: Instant) -> Session {
    let mut out = Vec::new();
    let mut s = Session::new(
        NewSession {
            scramble: SCRAMBLE,
            connection_id: 1,
            capabilities: PROXY_CAPS | PASSTHROUGH_CAPS,
            ext_capabilities: 0,
            server_version: "10.11.0-MariaDB".into(),
            peer_host: UNIX_PEER_HOST.into(),
            now,
            over_limit: false,
            transaction_pooling: false,
            require_secure_transport: false,
        },
        &mut out,
    );
    login(&mut s, &hello("pw", "mysql_native_password"), u, now);
    out.clear();
    s.on_leased(&[], &ctx(u, now), &mut out);
    let ok = sent(&out);
    s.on_client_write(Completion::Done(ok[0].len()), &[], &ctx(u, now), &mut out);
    assert!(s.is_relaying());
    s
}

fn query(sql: &str) -> Vec<u8> {
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(sql.as_bytes());
    let mut v = Vec::new();
    write_packet(&mut v, 0, &payload);
    v
}

#[test]
fn a_kill_of_a_proxy_id_goes_to_the_backend_thread_behind_it() {
    use crate::registry::PROXY_ID_BASE;
    let now = Instant::now();
    let u = users();
    let reg = std::sync::Arc::new(Registry::default());
    let c = SessionCtx {
        registry: &reg,
        ..ctx(&u, now)
    };
    let same = reg.register(PROXY_ID_BASE + 3, -1).unwrap();
    same.entry().set_leased("app", 41);
    let other = reg.register(PROXY_ID_BASE + 4, -1).unwrap();
    other.entry().set_leased("hashed", 42);
    let mut s = relaying(&u, now);

    // Same user: the buffer's KILL becomes the same KILL of thread 41, and
    // the relay writes exactly the rewritten bytes (plus what followed).
    let kill = query(&format!("kill query {}", same.id()));
    let mut data = kill.clone();
    data.extend_from_slice(&query("SELECT 1"));
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(data.len()), &data, &c, &mut out);
    let rewritten = query("KILL QUERY 41");
    assert_eq!(
        out[0],
        SessionAction::ReplaceBuffered {
            len: kill.len(),
            with: rewritten.clone()
        }
    );
    let end = data.len() - kill.len() + rewritten.len();
    assert!(out.contains(&SessionAction::Relay(RelayOp::WriteBackend { end })));

    // Another user's session: the server is asked to refuse with 1095.
    let mut s = relaying(&u, now);
    let kill = query(&format!("KILL {}", other.id()));
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(kill.len()), &kill, &c, &mut out);
    let Some(SessionAction::ReplaceBuffered { with, .. }) = out.first() else {
        panic!("not rewritten: {out:?}")
    };
    let text = String::from_utf8_lossy(with);
    assert!(text.contains("MYSQL_ERRNO = 1095"), "{text}");
    assert!(text.contains(&format!("You are not owner of thread {}", other.id())));

    // Not a kill, and an unknown proxy id: relayed untouched.
    for sql in [
        "SELECT 1".to_string(),
        format!("KILL {}", PROXY_ID_BASE + 99),
    ] {
        let mut s = relaying(&u, now);
        let q = query(&sql);
        let mut out = Vec::new();
        s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
        assert!(
            !out.iter()
                .any(|a| matches!(a, SessionAction::ReplaceBuffered { .. })),
            "{sql}: {out:?}"
        );
        assert!(out.contains(&SessionAction::Relay(RelayOp::WriteBackend {
            end: q.len()
        })));
    }
}

#[test]
fn a_kill_behind_an_unanswered_command_is_left_alone() {
    use crate::registry::PROXY_ID_BASE;
    let now = Instant::now();
    let u = users();
    let reg = std::sync::Arc::new(Registry::default());
    let c = SessionCtx {
        registry: &reg,
        ..ctx(&u, now)
    };
    let same = reg.register(PROXY_ID_BASE + 3, -1).unwrap();
    same.entry().set_leased("app", 41);
    let mut s = relaying(&u, now);
    // SELECT forwarded, its answer still owed, then the KILL arrives: the
    // relay is not at a command boundary, so the bytes go on unchanged
    // (the server answers 1094 for a proxy id; it never kills a thread
    // it was not asked to).
    let q = query("SELECT SLEEP(10)");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    s.on_backend_write(Completion::Done(q.len()), &c, &mut out);
    out.clear();
    let kill = query(&format!("KILL {}", same.id()));
    s.on_client_read(Completion::Done(kill.len()), &kill, &c, &mut out);
    assert!(
        !out.iter()
            .any(|a| matches!(a, SessionAction::ReplaceBuffered { .. })),
        "{out:?}"
    );
}

/// A session greeting as ringgate does in front of MariaDB 10.11.
fn new_mariadb_session(now: Instant) -> (Session, Vec<SessionAction>) {
    let mut out = Vec::new();
    let s = Session::new(
        NewSession {
            scramble: SCRAMBLE,
            connection_id: 1,
            capabilities: (PROXY_CAPS | PASSTHROUGH_CAPS) & !CLIENT_MYSQL,
            ext_capabilities: MIRRORED_EXT_CAPS,
            server_version: "5.5.5-10.11.19-MariaDB".into(),
            peer_host: "127.0.0.1".into(),
            now,
            over_limit: false,
            transaction_pooling: false,
            require_secure_transport: false,
        },
        &mut out,
    );
    (s, out)
}

#[test]
fn the_greeting_carries_the_extended_capabilities_and_the_key_what_the_client_chose() {
    let now = Instant::now();
    let u = users();
    let (mut s, out) = new_mariadb_session(now);
    let greeting = handshake::parse_greeting(&sent(&out)[0][4..]).unwrap();
    assert_eq!(greeting.capabilities & CLIENT_MYSQL, 0);
    assert_eq!(greeting.ext_capabilities, MIRRORED_EXT_CAPS);

    // A MariaDB client clears CLIENT_MYSQL and asks for some of them (and
    // one that was not offered).
    let mut h = hello("pw", "mysql_native_password");
    h[4] &= !(CLIENT_MYSQL as u8);
    let asked = MARIADB_CLIENT_EXTENDED_METADATA | MARIADB_CLIENT_BULK_UNIT_RESULTS;
    h[4 + 28..4 + 32].copy_from_slice(&asked.to_le_bytes());
    login(&mut s, &h, &u, now);
    assert_eq!(s.key().ext_caps, MARIADB_CLIENT_EXTENDED_METADATA);

    // A client that keeps CLIENT_MYSQL set has none, whatever its filler.
    let (mut s, _) = new_mariadb_session(now);
    let mut h = hello("pw", "mysql_native_password");
    h[4 + 28..4 + 32].copy_from_slice(&asked.to_le_bytes());
    login(&mut s, &h, &u, now);
    assert_eq!(s.key().ext_caps, 0);

    // In front of MySQL nothing was offered, so nothing is taken.
    let (mut s, _) = new_session(now, false);
    let mut h = hello("pw", "mysql_native_password");
    h[4] &= !(CLIENT_MYSQL as u8);
    h[4 + 28..4 + 32].copy_from_slice(&asked.to_le_bytes());
    login(&mut s, &h, &u, now);
    assert_eq!(s.key().ext_caps, 0);
}

#[test]
fn the_backends_refusal_of_the_users_login_reaches_the_client_as_is() {
    // Passthrough identity: the server refused this user's credentials.
    // Its own ERR (code, SQLSTATE, text) answers the client's login, which
    // then closes.
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    login(&mut s, &hello("pw", "mysql_native_password"), &u, now);
    let denied = wire::reply::err_payload_with_state(
        1045,
        "28000",
        "Access denied for user 'app'@'localhost' (using password: YES)",
    );
    let mut out = Vec::new();
    s.on_lease_failed(&denied, Some(RejectReason::BackendAuth), &mut out);
    assert!(out.contains(&SessionAction::Reject(RejectReason::BackendAuth)));
    let err = &sent(&out)[0];
    assert_eq!(&err[4..], &denied[..]);
    assert_eq!(err[3], 2, "answers the login packet (sequence id 1)");
    out.clear();
    s.on_client_write(Completion::Done(err.len()), &[], &ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::Close]);
}

#[test]
fn an_identity_arriving_late_or_twice_asks_for_nothing() {
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    let mut out = Vec::new();
    s.on_identity(IDENTITY, &mut out);
    assert!(out.is_empty(), "no login yet");
    login(&mut s, &hello("pw", "mysql_native_password"), &u, now);
    s.on_identity(IdentityId(8), &mut out);
    assert!(out.is_empty(), "already leasing");
    assert_eq!(s.key().identity, IDENTITY);
}

#[test]
fn a_kill_connection_closes_the_victim_when_the_server_says_ok() {
    use crate::registry::PROXY_ID_BASE;
    use wire::reply::ok_payload;
    let now = Instant::now();
    let u = users();
    let reg = std::sync::Arc::new(Registry::default());
    let c = SessionCtx {
        registry: &reg,
        ..ctx(&u, now)
    };
    let victim = reg.register(PROXY_ID_BASE + 3, -1).unwrap();
    victim.entry().set_leased("app", 41);
    let mut s = relaying(&u, now);
    let kill = query(&format!("KILL {}", victim.id()));
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(kill.len()), &kill, &c, &mut out);
    s.on_backend_write(Completion::Done(kill.len()), &c, &mut out);
    assert!(
        !victim.entry().is_killed(),
        "not before the server's answer"
    );
    let mut ok = Vec::new();
    write_packet(&mut ok, 1, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    s.on_backend_read(Completion::Done(ok.len()), &mut ok.clone(), &c, &mut out);
    assert!(victim.entry().is_killed());
    assert!(out.contains(&SessionAction::Relay(RelayOp::WriteClient {
        end: ok.len()
    })));
}

#[test]
fn a_compressing_client_gets_its_leg_after_the_plain_login_ok() {
    let now = Instant::now();
    let u = users();
    let mut out = Vec::new();
    let mut s = Session::new(
        NewSession {
            scramble: SCRAMBLE,
            connection_id: 1,
            capabilities: PROXY_CAPS | PASSTHROUGH_CAPS | CLIENT_COMPRESS,
            ext_capabilities: 0,
            server_version: "10.11.0-MariaDB".into(),
            peer_host: "127.0.0.1".into(),
            now,
            over_limit: false,
            transaction_pooling: false,
            require_secure_transport: false,
        },
        &mut out,
    );
    let payload = build_handshake_response(&HandshakeResponse {
        capabilities: PROXY_CAPS | CLIENT_COMPRESS,
        max_packet_size: 1 << 24,
        charset: UTF8MB4_GENERAL_CI,
        username: "app".into(),
        auth_response: native_token(b"pw", &SCRAMBLE),
        database: None,
        auth_plugin: Some("mysql_native_password".into()),
        connect_attrs: Vec::new(),
    });
    let mut h = Vec::new();
    write_packet(&mut h, 1, &payload);
    login(&mut s, &h, &u, now);
    assert_eq!(s.key().caps & CLIENT_COMPRESS, 0, "not in the pool key");
    let mut out = Vec::new();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let ok = sent(&out);
    assert_eq!(&ok[0][..5], &[7, 0, 0, 2, 0], "the login OK goes out plain");
    out.clear();
    // Bytes pipelined behind the hello are the leg's, not the relay's.
    s.on_client_write(
        Completion::Done(ok[0].len()),
        &[9, 9, 9],
        &ctx(&u, now),
        &mut out,
    );
    let leg = out
        .iter()
        .position(|a| *a == SessionAction::StartClientLeg(LegKind::Compress))
        .expect("the leg starts");
    let read = out
        .iter()
        .position(|a| *a == SessionAction::Relay(RelayOp::ReadClient))
        .expect("the relay reads (from the leg)");
    assert!(leg < read);
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::Relay(RelayOp::WriteBackend { .. }))));
}

#[test]
fn a_client_without_compression_gets_no_leg() {
    let now = Instant::now();
    let u = users();
    let (mut s, _) = new_session(now, false);
    let h = hello("pw", "mysql_native_password");
    login(&mut s, &h, &u, now);
    let mut out = Vec::new();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let ok = sent(&out);
    out.clear();
    s.on_client_write(Completion::Done(ok[0].len()), &[], &ctx(&u, now), &mut out);
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::StartClientLeg(_))));
}

// ---- COM_CHANGE_USER (session/change_user_flow.rs) ----

fn two_users() -> Users {
    Users::parse(r#"{"app": [{"Password": "pw"}], "bob": [{"Password": "bob-pw"}]}"#).unwrap()
}

fn change_user_packet(user: &str, password: &str, db: &str, charset: u16, plugin: &str) -> Vec<u8> {
    use wire::change_user::{build_change_user, ChangeUser};
    let payload = build_change_user(
        &ChangeUser {
            user: user.into(),
            auth_response: if password.is_empty() {
                Vec::new()
            } else {
                native_token(password.as_bytes(), &SCRAMBLE)
            },
            database: (!db.is_empty()).then(|| db.to_owned()),
            charset: Some(charset),
            auth_plugin: Some(plugin.into()),
            connect_attrs: Vec::new(),
        },
        PROXY_CAPS,
    );
    let mut v = Vec::new();
    write_packet(&mut v, 0, &payload);
    v
}

/// The client sends `bytes` (a COM_CHANGE_USER, maybe more) between
/// commands: the relay ends cleanly and the session asks for its buffer.
fn send_change_user(s: &mut Session, bytes: &[u8], u: &Users, now: Instant) -> Vec<SessionAction> {
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(bytes.len()), bytes, &ctx(u, now), &mut out);
    assert_eq!(out, vec![SessionAction::Relay(RelayOp::CancelReadBackend)]);
    out.clear();
    s.on_backend_read(Completion::Cancelled, &mut [], &ctx(u, now), &mut out);
    assert_eq!(out, vec![SessionAction::ExamineBuffer], "no release yet");
    out.clear();
    s.on_buffered(bytes, &ctx(u, now), &mut out);
    out
}

fn bob_identity(s: &mut Session, out: &mut Vec<SessionAction>) {
    let auth = out.iter().find_map(|a| match a {
        SessionAction::Authenticated(auth) => Some(auth.clone()),
        _ => None,
    });
    let auth = auth.expect("accepted");
    assert_eq!(auth.backend_user, "bob");
    assert_eq!(
        auth.credential.stage1(),
        Some(wire::auth::Stage1::of_password(b"bob-pw")),
        "passthrough identity recovers the new user's stage1"
    );
    out.clear();
    s.on_identity(IdentityId(9), out);
}

#[test]
fn change_user_resets_then_leases_the_new_users_key_and_answers_ok() {
    let now = Instant::now();
    let u = two_users();
    let mut s = relaying(&u, now);
    let old_key = s.key();
    let cu = change_user_packet("bob", "bob-pw", "shop", 8, "mysql_native_password");
    let mut out = send_change_user(&mut s, &cu, &u, now);
    assert!(out.contains(&SessionAction::Consume(cu.len())));
    bob_identity(&mut s, &mut out);
    // The old connection is reset in place first.
    assert_eq!(out, vec![SessionAction::ResetBackend]);
    out.clear();
    s.on_relet(Some("old_db".into()), &mut out);
    let new_key = PoolKey {
        collation: 8,
        identity: IdentityId(9),
        ..old_key
    };
    assert_eq!(
        out,
        vec![
            SessionAction::Release { clean: true },
            SessionAction::LoggedIn { key: new_key },
            SessionAction::Lease {
                key: new_key,
                schema: Some("shop".into()),
                any_settings: false
            },
        ]
    );
    assert_eq!(s.user(), Some("bob"), "KILL ownership follows at once");
    out.clear();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let ok = sent(&out);
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0][4], 0x00, "OK");
    assert_eq!(ok[0][3], 1, "answers the command packet");
    out.clear();
    s.on_client_write(Completion::Done(ok[0].len()), &[], &ctx(&u, now), &mut out);
    assert!(s.is_relaying());
    assert_eq!(out[0], SessionAction::Relay(RelayOp::ReadClient));
    assert_eq!(s.key(), new_key);
}

#[test]
fn change_user_with_a_wrong_password_gets_1045_on_the_reset_old_connection() {
    let now = Instant::now();
    let u = two_users();
    let mut s = relaying(&u, now);
    let old_key = s.key();
    let cu = change_user_packet("bob", "wrong", "shop", 8, "mysql_native_password");
    let mut out = send_change_user(&mut s, &cu, &u, now);
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::Authenticated(_))));
    assert!(out.contains(&SessionAction::ResetBackend));
    assert!(!out.iter().any(|a| matches!(
        a,
        SessionAction::Release { .. } | SessionAction::Lease { .. }
    )));
    out.clear();
    s.on_relet(Some("old_db".into()), &mut out);
    let err = &sent(&out)[0];
    assert_eq!(err_code(err), 1045);
    assert_eq!(err[3], 1);
    let text = String::from_utf8_lossy(&err[13..]).into_owned();
    assert_eq!(
        text,
        "Access denied for user 'bob'@'127.0.0.1' (using password: YES)"
    );
    out.clear();
    s.on_client_write(Completion::Done(err.len()), &[], &ctx(&u, now), &mut out);
    assert!(s.is_relaying(), "the connection stays open");
    assert_eq!(s.user(), Some("app"));
    assert_eq!(s.key(), old_key);
}

#[test]
fn change_user_whose_new_lease_fails_goes_back_to_the_old_user_and_schema() {
    let now = Instant::now();
    let u = two_users();
    let mut s = relaying(&u, now);
    let old_key = s.key();
    let cu = change_user_packet("bob", "bob-pw", "nope", 33, "mysql_native_password");
    let mut out = send_change_user(&mut s, &cu, &u, now);
    bob_identity(&mut s, &mut out);
    out.clear();
    s.on_relet(Some("old_db".into()), &mut out);
    out.clear();
    let unknown_db = err_payload(1049, "Unknown database 'nope'");
    s.on_lease_failed(&unknown_db, None, &mut out);
    assert_eq!(
        out,
        vec![
            SessionAction::LoggedIn { key: old_key },
            SessionAction::Lease {
                key: old_key,
                schema: Some("old_db".into()),
                any_settings: false
            },
        ]
    );
    assert_eq!(s.user(), Some("app"));
    out.clear();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let err = &sent(&out)[0];
    assert_eq!(err_code(err), 1049);
    out.clear();
    s.on_client_write(Completion::Done(err.len()), &[], &ctx(&u, now), &mut out);
    assert!(s.is_relaying());
}

#[test]
fn change_user_for_another_plugin_is_switched_to_native_password() {
    let now = Instant::now();
    let u = two_users();
    let mut s = relaying(&u, now);
    // A MySQL 8 client: an empty response for caching_sha2_password.
    let cu = change_user_packet("bob", "", "", 45, "caching_sha2_password");
    let mut out = send_change_user(&mut s, &cu, &u, now);
    let switch = &sent(&out)[0];
    assert_eq!(switch[3], 1);
    assert_eq!(switch[4], 0xfe, "AuthSwitchRequest");
    assert!(switch.ends_with(&[SCRAMBLE.as_slice(), &[0]].concat()));
    out.clear();
    s.on_client_write(Completion::Done(switch.len()), &[], &ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::ReadClient]);
    out.clear();
    let mut answer = Vec::new();
    write_packet(&mut answer, 2, &native_token(b"bob-pw", &SCRAMBLE));
    s.on_client_read(
        Completion::Done(answer.len()),
        &answer,
        &ctx(&u, now),
        &mut out,
    );
    assert!(out.contains(&SessionAction::Consume(answer.len())));
    bob_identity(&mut s, &mut out);
    s.on_relet(None, &mut out);
    out.clear();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let ok = &sent(&out)[0];
    assert_eq!((ok[3], ok[4]), (3, 0x00), "OK after the switch exchange");
    assert_eq!(s.user(), Some("bob"));
}

#[test]
fn a_malformed_change_user_gets_1047_and_the_session_goes_on() {
    let now = Instant::now();
    let u = two_users();
    let mut s = relaying(&u, now);
    // A user name without its NUL.
    let cu = [4, 0, 0, 0, 0x11, b'b', b'o', b'b'];
    let mut out = send_change_user(&mut s, &cu, &u, now);
    assert!(out.contains(&SessionAction::ResetBackend));
    out.clear();
    s.on_relet(None, &mut out);
    let err = &sent(&out)[0];
    assert_eq!(err_code(err), 1047);
    out.clear();
    s.on_client_write(Completion::Done(err.len()), &[], &ctx(&u, now), &mut out);
    assert!(s.is_relaying());
}

#[test]
fn a_change_user_packet_in_pieces_is_read_whole_and_what_follows_is_kept() {
    let now = Instant::now();
    let u = two_users();
    let mut s = relaying(&u, now);
    let cu = change_user_packet("bob", "bob-pw", "", 45, "mysql_native_password");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(10), &cu[..10], &ctx(&u, now), &mut out);
    out.clear();
    s.on_backend_read(Completion::Cancelled, &mut [], &ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::ExamineBuffer]);
    out.clear();
    s.on_buffered(&cu[..10], &ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::ReadClient]);
    out.clear();
    // The rest, and a pipelined ping behind it.
    let mut all = cu.clone();
    all.extend_from_slice(&[1, 0, 0, 0, 0x0e]);
    s.on_client_read(
        Completion::Done(all.len() - 10),
        &all,
        &ctx(&u, now),
        &mut out,
    );
    assert!(out.contains(&SessionAction::Consume(cu.len())));
    bob_identity(&mut s, &mut out);
    s.on_relet(None, &mut out);
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    let ok = sent(&out).pop().unwrap();
    out.clear();
    // The ping is relayed as soon as the relay restarts.
    s.on_client_write(
        Completion::Done(ok.len()),
        &[1, 0, 0, 0, 0x0e],
        &ctx(&u, now),
        &mut out,
    );
    assert!(out.contains(&SessionAction::Relay(RelayOp::WriteBackend { end: 5 })));
}

#[test]
fn a_refused_change_user_without_a_clean_backend_closes_after_the_err() {
    let now = Instant::now();
    let u = two_users();
    let mut s = relaying(&u, now);
    let cu = change_user_packet("bob", "wrong", "", 45, "mysql_native_password");
    // The header split: its first two bytes reach the backend, which then
    // cannot be reused.
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(2), &cu[..2], &ctx(&u, now), &mut out);
    assert!(out.contains(&SessionAction::Relay(RelayOp::WriteBackend { end: 2 })));
    out.clear();
    s.on_backend_write(Completion::Done(2), &ctx(&u, now), &mut out);
    out.clear();
    s.on_client_read(
        Completion::Done(cu.len() - 2),
        &cu[2..],
        &ctx(&u, now),
        &mut out,
    );
    assert!(out.contains(&SessionAction::AbortBackend));
    out.clear();
    s.on_backend_read(Completion::Done(0), &mut [], &ctx(&u, now), &mut out);
    assert_eq!(
        out,
        vec![
            SessionAction::Release { clean: false },
            SessionAction::ExamineBuffer
        ]
    );
    out.clear();
    s.on_buffered(&cu[2..], &ctx(&u, now), &mut out);
    let err = &sent(&out)[0];
    assert_eq!(err_code(err), 1045);
    out.clear();
    s.on_client_write(Completion::Done(err.len()), &[], &ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::Close]);
}

#[test]
fn change_user_must_finish_within_the_handshake_timeout() {
    let now = Instant::now();
    let u = two_users();
    let mut s = relaying(&u, now);
    let cu = change_user_packet("bob", "bob-pw", "", 45, "mysql_native_password");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(6), &cu[..6], &ctx(&u, now), &mut out);
    s.on_backend_read(Completion::Cancelled, &mut [], &ctx(&u, now), &mut out);
    s.on_buffered(&cu[..6], &ctx(&u, now), &mut out);
    out.clear();
    s.on_tick(&ctx(&u, now + Duration::from_secs(11)), &mut out);
    assert!(out.contains(&SessionAction::Release { clean: true }));
    assert!(out.contains(&SessionAction::Close));
}

#[test]
fn change_user_behind_a_compressed_leg_is_read_like_any_other() {
    let now = Instant::now();
    let u = two_users();
    let mut out = Vec::new();
    let mut s = Session::new(
        NewSession {
            scramble: SCRAMBLE,
            connection_id: 1,
            capabilities: PROXY_CAPS | PASSTHROUGH_CAPS | CLIENT_COMPRESS,
            ext_capabilities: 0,
            server_version: "10.11.0-MariaDB".into(),
            peer_host: "127.0.0.1".into(),
            now,
            over_limit: false,
            transaction_pooling: false,
            require_secure_transport: false,
        },
        &mut out,
    );
    let payload = build_handshake_response(&HandshakeResponse {
        capabilities: PROXY_CAPS | CLIENT_COMPRESS,
        max_packet_size: 1 << 24,
        charset: UTF8MB4_GENERAL_CI,
        username: "app".into(),
        auth_response: native_token(b"pw", &SCRAMBLE),
        database: None,
        auth_plugin: Some("mysql_native_password".into()),
        connect_attrs: Vec::new(),
    });
    let mut h = Vec::new();
    write_packet(&mut h, 1, &payload);
    login(&mut s, &h, &u, now);
    let mut out = Vec::new();
    s.on_leased(&[], &ctx(&users(), Instant::now()), &mut out);
    s.on_client_write(Completion::Done(11), &[], &ctx(&u, now), &mut out);
    out.clear();
    let cu = change_user_packet("bob", "bob-pw", "", 45, "mysql_native_password");
    s.on_client_read(Completion::Done(cu.len()), &cu, &ctx(&u, now), &mut out);
    out.clear();
    s.on_backend_read(Completion::Cancelled, &mut [], &ctx(&u, now), &mut out);
    // The session buffer behind a leg is the leg's plain one (worker/leg.rs
    // keeps the bytes behind the relay's last write), so the flow starts.
    assert!(out.contains(&SessionAction::ExamineBuffer), "{out:?}");
    assert!(sent(&out).is_empty(), "no 1047: {out:?}");
}

// ---- transaction pooling ----

fn tx_session(u: &Users, now: Instant) -> Session {
    tx_session_in(u, &ctx(u, now), now)
}

/// [`tx_session`] logged in under context `c`.
fn tx_session_in(u: &Users, c: &SessionCtx, now: Instant) -> Session {
    let mut out = Vec::new();
    let mut s = Session::new(
        NewSession {
            scramble: SCRAMBLE,
            connection_id: 1,
            capabilities: PROXY_CAPS | PASSTHROUGH_CAPS,
            ext_capabilities: 0,
            server_version: "10.11.0-MariaDB".into(),
            peer_host: "127.0.0.1".into(),
            now,
            over_limit: false,
            transaction_pooling: true,
            require_secure_transport: false,
        },
        &mut out,
    );
    let out = login(&mut s, &hello("pw", "mysql_native_password"), u, now);
    assert!(out.iter().any(|a| matches!(
        a,
        SessionAction::Lease {
            any_settings: true,
            ..
        }
    )));
    let mut out = Vec::new();
    s.on_leased(&[], c, &mut out);
    let ok = sent(&out);
    out.clear();
    s.on_client_write(Completion::Done(ok[0].len()), &[], c, &mut out);
    // The login's connection goes straight back, as it came.
    assert!(out.contains(&SessionAction::Park {
        clean: true,
        kept: None,
        reset: false,
        ask_last_insert_id: false
    }));
    assert!(out.contains(&SessionAction::ReadClient));
    s
}

/// The client sends `sql` to a parked session; the lease comes; the
/// server answers `answer` (one packet payload) and the answer is written.
fn tx_statement(
    s: &mut Session,
    u: &Users,
    now: Instant,
    sql: &str,
    answer: &[u8],
) -> Vec<SessionAction> {
    tx_statement_in(s, &ctx(u, now), sql, answer)
}

/// [`tx_statement`] in context `c`.
fn tx_statement_in(
    s: &mut Session,
    c: &SessionCtx,
    sql: &str,
    answer: &[u8],
) -> Vec<SessionAction> {
    let q = query(sql);
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, c, &mut out);
    assert!(
        out.iter()
            .any(|a| matches!(a, SessionAction::LeaseForCommand { .. })),
        "{out:?}"
    );
    out.clear();
    s.on_leased(&q, c, &mut out);
    assert!(out.contains(&SessionAction::Relay(RelayOp::WriteBackend {
        end: q.len()
    })));
    // The answer's read is submitted with the command.
    assert!(
        out.contains(&SessionAction::Relay(RelayOp::ReadBackend)),
        "{out:?}"
    );
    out.clear();
    s.on_backend_write(Completion::Done(q.len()), c, &mut out);
    let reply = crate::test_packets::framed(1, answer);
    s.on_backend_read(
        Completion::Done(reply.len()),
        &mut reply.clone(),
        c,
        &mut out,
    );
    out.clear();
    s.on_relay_client_write(Completion::Done(reply.len()), c, &mut out);
    out
}

#[test]
fn transaction_pooling_gives_the_backend_back_between_transactions() {
    let now = Instant::now();
    let u = users();
    let mut s = tx_session(&u, now);
    let c = ctx(&u, now);
    // Autocommit statement: the connection goes back (after the idle read
    // is cancelled), without a reset.
    let out = tx_statement(
        &mut s,
        &u,
        now,
        "SELECT 1",
        &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0),
    );
    assert!(
        out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)),
        "{out:?}"
    );
    let mut out = Vec::new();
    s.on_backend_read(Completion::Cancelled, &mut [], &c, &mut out);
    assert!(out.contains(&SessionAction::Park {
        clean: true,
        kept: Some((None, Settings::initial(false, false))),
        reset: false,
        ask_last_insert_id: false
    }));
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::Release { .. })));
    // Inside a transaction it is kept.
    let out = tx_statement(
        &mut s,
        &u,
        now,
        "BEGIN",
        &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_IN_TRANS, 0),
    );
    assert!(!out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)));
    assert_eq!(s.pinned(), None);
}

/// Fixed and heap mode: the park right after an answer withdraws the idle
/// backend read the relay armed in that same batch (it never reaches the
/// kernel), so the connection goes back at once with nothing to cancel:
/// four SQEs per query, as in session pooling, not six.
#[test]
fn a_park_right_after_an_answer_withdraws_the_idle_read_it_would_cancel() {
    let now = Instant::now();
    let u = users();
    let mut s = tx_session(&u, now);
    let mut c = ctx(&u, now);
    c.park_withdraws_idle_read = true;
    let ok = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0);
    for _ in 0..2 {
        let out = tx_statement_in(&mut s, &c, "SELECT 1", &ok);
        assert!(
            !out.contains(&SessionAction::Relay(RelayOp::ReadBackend)),
            "{out:?}"
        );
        assert!(
            !out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)),
            "{out:?}"
        );
        assert!(
            out.contains(&SessionAction::Park {
                clean: true,
                kept: Some((None, Settings::initial(false, false))),
                reset: false,
                ask_last_insert_id: false
            }),
            "{out:?}"
        );
    }
    // Inside a transaction the session keeps the connection, and its idle
    // read watches it.
    let in_tx = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_IN_TRANS, 0);
    let out = tx_statement_in(&mut s, &c, "BEGIN", &in_tx);
    assert!(
        out.contains(&SessionAction::Relay(RelayOp::ReadBackend)),
        "{out:?}"
    );
    assert!(!out.iter().any(|a| matches!(a, SessionAction::Park { .. })));
}

/// A park that comes later than the answer's batch (here: after a KILL of
/// its thread was answered) finds its idle read submitted: it cancels it,
/// as before, and only the cancelled read's completion lets the backend go.
#[test]
fn a_late_park_still_cancels_the_idle_read_it_submitted() {
    let now = Instant::now();
    let u = users();
    let (mut s, _reg, _me, fence) = tx_session_with_kill_in_flight(&u, now, 71, 56);
    let mut c = ctx(&u, now);
    c.park_withdraws_idle_read = true;
    let ok = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0);
    let out = tx_statement_in(&mut s, &c, "SELECT 1", &ok);
    assert!(out.contains(&SessionAction::ParkWaitsForKill), "{out:?}");
    // The idle read goes to the kernel: the park may be a while.
    assert!(
        out.contains(&SessionAction::Relay(RelayOp::ReadBackend)),
        "{out:?}"
    );
    drop(fence);
    let mut c = ctx(&u, now + Duration::from_millis(100));
    c.park_withdraws_idle_read = true;
    let mut out = Vec::new();
    s.on_tick(&c, &mut out);
    assert_eq!(
        out,
        vec![SessionAction::Relay(RelayOp::CancelReadBackend)],
        "{out:?}"
    );
    out.clear();
    s.on_backend_read(Completion::Cancelled, &mut [], &c, &mut out);
    assert!(
        out.iter().any(|a| matches!(a, SessionAction::Park { .. })),
        "{out:?}"
    );
}

#[test]
fn transaction_pooling_asks_for_last_insert_id_and_the_next_command_waits_for_it() {
    let now = Instant::now();
    let u = users();
    let mut s = tx_session(&u, now);
    let c = ctx(&u, now);
    // An INSERT whose OK reports an id: explicit or generated, only the
    // server knows, so the connection is asked before it goes back.
    let out = tx_statement(
        &mut s,
        &u,
        now,
        "INSERT INTO t (id) VALUES (900001)",
        &ok_payload(1, 900001, SERVER_STATUS_AUTOCOMMIT, 0),
    );
    assert!(out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)));
    let mut out = Vec::new();
    s.on_backend_read(Completion::Cancelled, &mut [], &c, &mut out);
    assert!(
        out.contains(&SessionAction::Park {
            clean: true,
            kept: Some((None, Settings::initial(false, false))),
            reset: false,
            ask_last_insert_id: true
        }),
        "{out:?}"
    );
    // The next command arrives before the answer: no lease yet.
    let q = query("SELECT LAST_INSERT_ID()");
    out.clear();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    assert!(
        !out.iter()
            .any(|a| matches!(a, SessionAction::LeaseForCommand { .. })),
        "{out:?}"
    );
    // The answer: the command is examined again and leases with it.
    out.clear();
    s.on_last_insert_id(Some(1), &mut out);
    assert_eq!(out, vec![SessionAction::ExamineBuffer]);
    out.clear();
    s.on_buffered(&q, &c, &mut out);
    let setup = out.iter().find_map(|a| match a {
        SessionAction::LeaseForCommand { setup, .. } => Some(setup.last_insert_id),
        _ => None,
    });
    assert_eq!(setup, Some(Some(1)), "{out:?}");
}

#[test]
fn transaction_pooling_pins_on_a_user_variable_and_quits_without_a_backend() {
    let now = Instant::now();
    let u = users();
    let mut s = tx_session(&u, now);
    let out = tx_statement(
        &mut s,
        &u,
        now,
        "SET @x = 1",
        &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0),
    );
    assert_eq!(s.pinned(), Some(PinReason::UserVariable));
    assert!(!out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)));

    // A parked session's COM_QUIT needs no backend.
    let mut s = tx_session(&u, now);
    let quit = crate::test_packets::framed(0, &[COM_QUIT]);
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(quit.len()), &quit, &ctx(&u, now), &mut out);
    assert!(out.contains(&SessionAction::Close));
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::LeaseForCommand { .. })));
}

#[test]
fn a_parked_session_ends_after_its_own_wait_timeout() {
    let now = Instant::now();
    let u = users();
    let mut s = tx_session(&u, now);
    let c = ctx(&u, now);
    tx_statement(
        &mut s,
        &u,
        now,
        "SET SESSION wait_timeout = 2",
        &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0),
    );
    let mut out = Vec::new();
    s.on_backend_read(Completion::Cancelled, &mut [], &c, &mut out);
    assert!(
        out.iter().any(|a| matches!(a, SessionAction::Park { .. })),
        "{out:?}"
    );
    // Idle, holding no connection: no server counts this; the session does.
    out.clear();
    s.on_tick(&ctx(&u, now + Duration::from_millis(1900)), &mut out);
    assert!(!out.contains(&SessionAction::Close), "{out:?}");
    s.on_tick(&ctx(&u, now + Duration::from_secs(2)), &mut out);
    assert!(out.contains(&SessionAction::Close), "{out:?}");
    assert!(s.is_closed());

    // Without a wait_timeout of its own a parked session stays.
    let mut s = tx_session(&u, now);
    let mut out = Vec::new();
    s.on_tick(&ctx(&u, now + Duration::from_secs(3600)), &mut out);
    assert!(!s.is_closed(), "{out:?}");
}

/// A transaction-pooling session registered as proxy id `PROXY_ID_BASE +
/// offset` and leased to backend thread `thread`, with another client's
/// `KILL QUERY` of it on its way to that thread: the session, the registry
/// and the session's registration (both must outlive the test's use of
/// the session), and the rewrite whose fence holds the KILL in flight
/// until it is dropped.
fn tx_session_with_kill_in_flight(
    u: &Users,
    now: Instant,
    offset: u32,
    thread: u32,
) -> (
    Session,
    std::sync::Arc<Registry>,
    crate::registry::Registration,
    crate::registry::Rewrite,
) {
    use crate::registry::PROXY_ID_BASE;
    let reg = std::sync::Arc::new(Registry::default());
    let me = reg.register(PROXY_ID_BASE + offset, -1).unwrap();
    let mut s = tx_session(u, now);
    s.set_registry_entry(me.shared_entry());
    me.entry().set_leased("app", thread);
    let kill = crate::test_packets::framed(
        0,
        format!("\x03KILL QUERY {}", PROXY_ID_BASE + offset).as_bytes(),
    );
    let fence = crate::registry::intercept(&kill, "app", 0, &reg, 16384).unwrap();
    assert!(fence.fence.is_some());
    (s, reg, me, fence)
}

#[test]
fn a_session_keeps_its_connection_while_a_kill_of_its_thread_is_in_flight() {
    use crate::registry::PROXY_ID_BASE;
    let now = Instant::now();
    let u = users();
    // Another client's KILL QUERY of this session is on its way to thread 55.
    let (mut s, reg, _me, fence) = tx_session_with_kill_in_flight(&u, now, 70, 55);
    let out = tx_statement(
        &mut s,
        &u,
        now,
        "SELECT 1",
        &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0),
    );
    // Done, but the connection is not given back: the KILL could hit the
    // next session's statement on it.
    assert!(out.contains(&SessionAction::ParkWaitsForKill), "{out:?}");
    assert!(!out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)));
    let mut out = Vec::new();
    s.on_tick(&ctx(&u, now + Duration::from_millis(100)), &mut out);
    assert!(!out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)));
    assert!(
        !out.contains(&SessionAction::ParkWaitsForKill),
        "counted once"
    );
    // The killer has its answer: the next tick gives it back.
    drop(fence);
    out.clear();
    s.on_tick(&ctx(&u, now + Duration::from_millis(200)), &mut out);
    assert!(
        out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)),
        "{out:?}"
    );
    assert_eq!(reg.lookup(PROXY_ID_BASE + 70).unwrap().backend_thread, None);
}

// ---- TLS in the handshake ----

fn tls_session(now: Instant, tls: bool, require: bool, peer: &str) -> Session {
    let mut out = Vec::new();
    Session::new(
        NewSession {
            scramble: SCRAMBLE,
            connection_id: 1,
            capabilities: PROXY_CAPS | PASSTHROUGH_CAPS | if tls { CLIENT_SSL } else { 0 },
            ext_capabilities: 0,
            server_version: "10.11.0-MariaDB".into(),
            peer_host: peer.into(),
            now,
            over_limit: false,
            transaction_pooling: false,
            require_secure_transport: require,
        },
        &mut out,
    )
}

fn ssl_request() -> Vec<u8> {
    let mut payload = (CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_SECURE_CONNECTION)
        .to_le_bytes()
        .to_vec();
    payload.extend_from_slice(&(1u32 << 24).to_le_bytes());
    payload.push(45);
    payload.extend_from_slice(&[0; 23]);
    let mut v = Vec::new();
    write_packet(&mut v, 1, &payload);
    v
}

#[test]
fn an_ssl_request_starts_tls_and_the_login_follows_inside_it() {
    let u = users();
    let now = Instant::now();
    let mut s = tls_session(now, true, true, "127.0.0.1");
    let out = login(&mut s, &ssl_request(), &u, now);
    assert_eq!(
        out,
        vec![
            SessionAction::Consume(36),
            SessionAction::StartTls,
            SessionAction::ReadClient
        ]
    );
    // The login response arrives decrypted, with sequence id 2; it is
    // accepted although --require-secure-transport is on.
    let mut hello2 = hello("pw", "mysql_native_password");
    hello2[3] = 2;
    let mut out = Vec::new();
    s.on_client_read(
        Completion::Done(hello2.len()),
        &hello2,
        &ctx(&u, now),
        &mut out,
    );
    assert!(out
        .iter()
        .any(|a| matches!(a, SessionAction::Authenticated(_))));
    // A second SSLRequest inside TLS is refused.
    let mut s = tls_session(now, true, false, "127.0.0.1");
    login(&mut s, &ssl_request(), &u, now);
    let mut again = ssl_request();
    again[3] = 2;
    let mut out = Vec::new();
    s.on_client_read(
        Completion::Done(again.len()),
        &again,
        &ctx(&u, now),
        &mut out,
    );
    assert_eq!(err_code(&sent(&out)[0]), ER_HANDSHAKE_ERROR);
}

#[test]
fn without_tls_configured_an_ssl_request_is_1043() {
    let u = users();
    let now = Instant::now();
    let mut s = tls_session(now, false, false, "127.0.0.1");
    let out = login(&mut s, &ssl_request(), &u, now);
    assert_eq!(err_code(&sent(&out)[0]), ER_HANDSHAKE_ERROR);
    assert!(!out.contains(&SessionAction::StartTls));
}

#[test]
fn require_secure_transport_refuses_plain_tcp_with_3159_before_the_password() {
    let u = users();
    let now = Instant::now();
    for password in ["pw", "wrong"] {
        let mut s = tls_session(now, true, true, "127.0.0.1");
        let out = login(&mut s, &hello(password, "mysql_native_password"), &u, now);
        let err = &sent(&out)[0];
        assert_eq!(err_code(err), ER_SECURE_TRANSPORT_REQUIRED);
        assert_eq!(&err[7..13], b"#HY000");
        assert!(out.contains(&SessionAction::Reject(RejectReason::InsecureTransport)));
        assert!(!out
            .iter()
            .any(|a| matches!(a, SessionAction::Authenticated(_))));
    }
    // The unix socket counts as secure.
    let mut s = tls_session(now, true, true, UNIX_PEER_HOST);
    let out = login(&mut s, &hello("pw", "mysql_native_password"), &u, now);
    assert!(out
        .iter()
        .any(|a| matches!(a, SessionAction::Authenticated(_))));
}

fn clear_hello(password: &[u8]) -> Vec<u8> {
    let mut auth = password.to_vec();
    auth.push(0);
    let payload = build_handshake_response(&HandshakeResponse {
        capabilities: PROXY_CAPS,
        max_packet_size: 1 << 24,
        charset: UTF8MB4_GENERAL_CI,
        username: "app".into(),
        auth_response: auth,
        database: None,
        auth_plugin: Some("mysql_clear_password".into()),
        connect_attrs: Vec::new(),
    });
    let mut v = Vec::new();
    write_packet(&mut v, 1, &payload);
    v
}

#[test]
fn mysql_clear_password_only_over_a_secure_transport() {
    let u = users();
    let now = Instant::now();
    let authenticated = |out: &[SessionAction]| {
        out.iter()
            .any(|a| matches!(a, SessionAction::Authenticated(_)))
    };
    // Plain TCP: 1045 even with the right password.
    let mut s = tls_session(now, true, false, "127.0.0.1");
    let out = login(&mut s, &clear_hello(b"pw"), &u, now);
    assert!(!authenticated(&out));
    assert_eq!(err_code(&sent(&out)[0]), ER_ACCESS_DENIED_ERROR);
    // The unix socket (and TLS, which sets the same flag): the password is
    // checked; a wrong one is 1045 and never logged.
    let mut s = tls_session(now, true, false, UNIX_PEER_HOST);
    let out = login(&mut s, &clear_hello(b"pw"), &u, now);
    assert!(out.contains(&SessionAction::Auth(AuthPath::Clear)));
    let mut s = tls_session(now, true, false, UNIX_PEER_HOST);
    let out = login(&mut s, &clear_hello(b"nope"), &u, now);
    assert!(!authenticated(&out));
    assert_eq!(err_code(&sent(&out)[0]), ER_ACCESS_DENIED_ERROR);
    for a in &out {
        if let SessionAction::Log(line) = a {
            assert!(!line.contains("nope"), "{line}");
        }
    }
}

fn sha2_users() -> Users {
    // MySQL 8's caching_sha2 verifier of "foobar" for bob.
    Users::parse(
        r#"{"app": [{"Password": "pw"}], "bob": [{"MysqlCachingSha2Password": "0x24412430303524031A69251C34295C4B35167C7F1E5A7B63091349503974624D34504B5A424679354856336868686F52485A736E4A733368786E427575516C73446469496537"}]}"#,
    )
    .unwrap()
}

fn sha2_change_user_packet(user: &str, password: &str) -> Vec<u8> {
    use wire::change_user::{build_change_user, ChangeUser};
    let payload = build_change_user(
        &ChangeUser {
            user: user.into(),
            auth_response: wire::caching_sha2::scramble(password.as_bytes(), &SCRAMBLE),
            database: None,
            charset: Some(45),
            auth_plugin: Some("caching_sha2_password".into()),
            connect_attrs: Vec::new(),
        },
        PROXY_CAPS,
    );
    let mut v = Vec::new();
    write_packet(&mut v, 0, &payload);
    v
}

#[test]
fn change_user_to_a_caching_sha2_user_runs_full_then_fast_authentication() {
    let now = Instant::now();
    let u = sha2_users();
    // Over the unix socket (secure): the cleartext may come.
    let mut s = relaying_secure(&u, now);
    let cu = sha2_change_user_packet("bob", "foobar");
    let mut out = send_change_user(&mut s, &cu, &u, now);
    let more = &sent(&out)[0];
    assert_eq!(&more[3..], &[1, 0x01, 0x04], "perform full authentication");
    out.clear();
    s.on_client_write(Completion::Done(more.len()), &[], &ctx(&u, now), &mut out);
    assert_eq!(out, vec![SessionAction::ReadClient]);
    out.clear();
    let mut answer = Vec::new();
    write_packet(&mut answer, 2, b"foobar\0");
    s.on_client_read(
        Completion::Done(answer.len()),
        &answer,
        &ctx(&u, now),
        &mut out,
    );
    let auth = out.iter().find_map(|a| match a {
        SessionAction::Authenticated(auth) => Some(auth.clone()),
        _ => None,
    });
    assert_eq!(auth.expect("accepted").backend_user, "bob");
    out.clear();
    s.on_identity(IdentityId(9), &mut out);
    s.on_relet(None, &mut out);
    out.clear();
    s.on_leased(&[], &ctx(&u, now), &mut out);
    let ok = &sent(&out)[0];
    assert_eq!(
        (ok[3], ok[4]),
        (3, 0x00),
        "OK after the full authentication"
    );
    out.clear();
    s.on_client_write(Completion::Done(ok.len()), &[], &ctx(&u, now), &mut out);
    assert!(s.is_relaying());

    // Again: the cache holds bob now, so fast authentication, with
    // 0x01 0x03 before the OK.
    let mut out = send_change_user(&mut s, &cu, &u, now);
    assert!(out
        .iter()
        .any(|a| matches!(a, SessionAction::Authenticated(_))));
    out.clear();
    s.on_identity(IdentityId(9), &mut out);
    s.on_relet(None, &mut out);
    out.clear();
    s.on_leased(&[], &ctx(&u, now), &mut out);
    let reply = &sent(&out)[0];
    assert_eq!(
        &reply[..6],
        &[2, 0, 0, 1, 0x01, 0x03],
        "fast auth success first"
    );
    assert_eq!((reply[9], reply[10]), (2, 0x00), "then the OK");
}

#[test]
fn change_user_caching_sha2_full_authentication_over_plain_tcp_is_1045() {
    // Over plain TCP without --rsa-key the cleartext is never asked for: a
    // cache miss is refused at once, with the log line that names the fix.
    let now = Instant::now();
    let u = sha2_users();
    let mut s = relaying(&u, now);
    let cu = sha2_change_user_packet("bob", "foobar");
    let out = send_change_user(&mut s, &cu, &u, now);
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::Authenticated(_))));
    assert!(out.iter().any(|a| matches!(a,
        SessionAction::Log(m) if m.contains("needs TLS or RSA keys"))));
    assert!(out.contains(&SessionAction::ResetBackend));
}

#[test]
fn a_parked_session_whose_last_connection_the_server_closed_ends_also_mid_reply() {
    let now = Instant::now();
    let u = users();
    let c = ctx(&u, now);
    // Parked: it ends at once.
    let mut s = tx_session(&u, now);
    let mut out = Vec::new();
    s.on_last_backend_closed(&mut out);
    assert!(out.contains(&SessionAction::Close), "{out:?}");
    assert!(s.is_closed());
    // Writing an answer of its own (SELECT ROW_COUNT() after a parked
    // statement): it ends once the answer is written, not parked again.
    let mut s = tx_session(&u, now);
    let q = query("SELECT ROW_COUNT()");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    let reply = sent(&out);
    assert_eq!(reply.len(), 1, "{out:?}");
    out.clear();
    s.on_last_backend_closed(&mut out);
    assert!(out.is_empty(), "the reply is written first: {out:?}");
    s.on_client_write(Completion::Done(reply[0].len()), &[], &c, &mut out);
    assert!(out.contains(&SessionAction::Close), "{out:?}");
    assert!(!out.contains(&SessionAction::ReadClient), "{out:?}");
    // Without the close the session reads the client's next command.
    let mut s = tx_session(&u, now);
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    let reply = sent(&out);
    out.clear();
    s.on_client_write(Completion::Done(reply[0].len()), &[], &c, &mut out);
    assert!(out.contains(&SessionAction::ReadClient), "{out:?}");
}

/// A transaction-pooled session idle in a transaction past
/// `--idle-transaction-timeout` is cut: the connection goes back clean
/// (the pool resets it, which rolls back), the client gets ERR 4031 with
/// sequence id 0, and the session closes.
#[test]
fn a_session_idle_in_a_transaction_past_its_bound_is_cut_with_4031() {
    let now = Instant::now();
    let u = users();
    let mut s = tx_session(&u, now);
    let c = ctx(&u, now);
    let in_tx = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_IN_TRANS, 0);
    tx_statement_in(&mut s, &c, "BEGIN", &in_tx);
    let at = |secs: u64| SessionCtx {
        idle_cut: IdleCutLimits {
            transaction: Duration::from_secs(10),
            pinned: Duration::from_secs(60),
        },
        ..ctx(&u, now + Duration::from_secs(secs))
    };
    assert_eq!(s.held_idle(&at(9)), None, "not idle long enough");
    assert_eq!(s.held_idle(&c), None, "the bound is off in `ctx`");
    let (held, idle) = s.held_idle(&at(11)).unwrap();
    assert_eq!(held, Held::Transaction);
    assert!(idle >= Duration::from_secs(11));
    let mut out = Vec::new();
    s.cut_held_idle(held, &at(11), &mut out);
    assert_eq!(out, vec![SessionAction::Relay(RelayOp::CancelReadBackend)]);
    out.clear();
    s.on_backend_read(Completion::Cancelled, &mut [], &at(11), &mut out);
    assert_eq!(out[0], SessionAction::Release { clean: true });
    assert!(out.contains(&SessionAction::IdleCut {
        held,
        limit: Duration::from_secs(10)
    }));
    let err = &sent(&out)[0];
    assert_eq!((err_code(err), err[3]), (4031, 0));
    out.clear();
    s.on_client_write(Completion::Done(err.len()), &[], &at(11), &mut out);
    assert!(s.is_closed());
}

/// Pinned by a user variable, the session is cut by the pinned bound and
/// not by the transaction one.
#[test]
fn a_pinned_idle_session_is_cut_by_the_pinned_bound() {
    let now = Instant::now();
    let u = users();
    let mut s = tx_session(&u, now);
    let c = ctx(&u, now);
    let ok = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0);
    tx_statement_in(&mut s, &c, "SET @x = 1", &ok);
    let at = |secs: u64, pinned: u64| SessionCtx {
        idle_cut: IdleCutLimits {
            transaction: Duration::from_secs(1),
            pinned: Duration::from_secs(pinned),
        },
        ..ctx(&u, now + Duration::from_secs(secs))
    };
    assert_eq!(s.held_idle(&at(30, 60)), None);
    assert_eq!(s.held_idle(&at(30, 0)), None, "0: never");
    let (held, _) = s.held_idle(&at(61, 60)).unwrap();
    assert_eq!(held, Held::Pinned("user_variable"));
}

// ---- several servers: the writer lost under a session ----

fn cluster_ctx(u: &Users, now: Instant) -> SessionCtx<'_> {
    SessionCtx {
        several_servers: true,
        ..ctx(u, now)
    }
}

const IN_TRANS: u16 = SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_IN_TRANS;

/// A session in BEGIN; INSERT with the connection still its own (in
/// context `c`: several servers or one).
fn in_transaction_in(u: &Users, c: &SessionCtx, now: Instant) -> Session {
    let mut s = tx_session_in(u, c, now);
    tx_statement_in(&mut s, c, "BEGIN", &ok_payload(0, 0, IN_TRANS, 0));
    let q = query("INSERT INTO t VALUES (1)");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, c, &mut out);
    s.on_backend_write(Completion::Done(q.len()), c, &mut out);
    let reply = crate::test_packets::framed(1, &ok_payload(1, 0, IN_TRANS, 0));
    s.on_backend_read(
        Completion::Done(reply.len()),
        &mut reply.clone(),
        c,
        &mut out,
    );
    s.on_relay_client_write(Completion::Done(reply.len()), c, &mut out);
    s
}

fn in_transaction(u: &Users, now: Instant) -> Session {
    in_transaction_in(u, &cluster_ctx(u, now), now)
}

/// The server's EOF on the connection: the writer died.
fn writer_dies(s: &mut Session, c: &SessionCtx) -> Vec<SessionAction> {
    let mut out = Vec::new();
    s.on_backend_read(Completion::Done(0), &mut [], c, &mut out);
    out
}

#[test]
fn idle_in_a_transaction_the_next_command_gets_1213_and_the_session_goes_on() {
    let now = Instant::now();
    let u = users();
    let c = cluster_ctx(&u, now);
    let mut s = in_transaction(&u, now);
    let out = writer_dies(&mut s, &c);
    assert!(!out.contains(&SessionAction::AbortClient), "{out:?}");
    assert!(!out.contains(&SessionAction::Close), "{out:?}");
    assert!(out.contains(&SessionAction::Park {
        clean: false,
        kept: None,
        reset: false,
        ask_last_insert_id: false
    }));
    assert!(sent(&out).is_empty(), "told at its next command");
    // The next command: the ERR answers it (sequence id 1), no lease.
    let q = query("INSERT INTO t VALUES (2)");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    let err = &sent(&out)[0];
    assert_eq!((err_code(err), err[3]), (1213, 1));
    assert!(String::from_utf8_lossy(err).contains("(failover)"));
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::LeaseForCommand { .. })));
    let mut out = Vec::new();
    s.on_client_write(Completion::Done(err.len()), &[], &c, &mut out);
    assert!(out.contains(&SessionAction::ReadClient));
    // Then a new transaction leases as usual.
    let b = query("BEGIN");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(b.len()), &b, &c, &mut out);
    assert!(out
        .iter()
        .any(|a| matches!(a, SessionAction::LeaseForCommand { .. })));
}

#[test]
fn the_1213_names_the_lost_server_and_says_failover_only_for_the_writer() {
    let now = Instant::now();
    let u = users();
    let servers: [std::net::SocketAddr; 2] = [
        "127.0.0.1:3461".parse().unwrap(),
        "127.0.0.1:3462".parse().unwrap(),
    ];
    let c = SessionCtx {
        servers: &servers,
        ..cluster_ctx(&u, now)
    };
    let told = |server: u16, replica: bool| {
        let mut s = in_transaction_in(&u, &c, now);
        s.set_backend_server(Some(server), replica);
        writer_dies(&mut s, &c);
        let q = query("INSERT INTO t VALUES (2)");
        let mut out = Vec::new();
        s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
        String::from_utf8_lossy(&sent(&out)[0]).into_owned()
    };
    let writer = told(0, false);
    assert!(
        writer.contains("the writer 127.0.0.1:3461 was lost mid-transaction (failover);"),
        "{writer}"
    );
    // A read-only transaction on a replica: no failover, its server named.
    let replica = told(1, true);
    assert!(
        replica.contains("the replica 127.0.0.1:3462 was lost mid-transaction;"),
        "{replica}"
    );
}

#[test]
fn a_rollback_after_the_lost_transaction_gets_an_ok() {
    let now = Instant::now();
    let u = users();
    let c = cluster_ctx(&u, now);
    let mut s = in_transaction(&u, now);
    writer_dies(&mut s, &c);
    let q = query("ROLLBACK");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    assert_eq!(sent(&out)[0][4], 0x00, "an OK: {out:?}");
}

#[test]
fn a_statement_in_flight_in_a_transaction_gets_1213_at_once() {
    let now = Instant::now();
    let u = users();
    let c = cluster_ctx(&u, now);
    let mut s = in_transaction(&u, now);
    let q = query("SELECT SLEEP(5)");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    s.on_backend_write(Completion::Done(q.len()), &c, &mut out);
    let out = writer_dies(&mut s, &c);
    let err = &sent(&out)[0];
    assert_eq!((err_code(err), err[3]), (1213, 1));
    // The relay's client read is still in flight: none is started after
    // the ERR is written.
    let mut out = Vec::new();
    s.on_client_write(Completion::Done(err.len()), &[], &c, &mut out);
    assert!(!out.contains(&SessionAction::ReadClient), "{out:?}");
    assert!(!s.is_closed());
}

#[test]
fn a_commit_in_flight_closes_as_direct() {
    let now = Instant::now();
    let u = users();
    let c = cluster_ctx(&u, now);
    let mut s = in_transaction(&u, now);
    let q = query("COMMIT");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    s.on_backend_write(Completion::Done(q.len()), &c, &mut out);
    let out = writer_dies(&mut s, &c);
    assert!(sent(&out).is_empty(), "no answer made up: {out:?}");
    assert!(out.contains(&SessionAction::Release { clean: false }));
    assert!(out.contains(&SessionAction::Close), "{out:?}");
}

#[test]
fn a_pinned_session_gets_1927_unasked_for_then_closes() {
    let now = Instant::now();
    let u = users();
    let c = cluster_ctx(&u, now);
    let mut s = in_transaction(&u, now);
    if let Some(tx) = s.tx.as_mut() {
        tx.pin(PinReason::UserVariable);
    }
    let out = writer_dies(&mut s, &c);
    let err = &sent(&out)[0];
    assert_eq!((err_code(err), err[3]), (1927, 0));
    assert!(String::from_utf8_lossy(err).contains("user_variable"));
    let mut out = Vec::new();
    s.on_client_write(Completion::Done(err.len()), &[], &c, &mut out);
    assert!(out.contains(&SessionAction::Close));
}

#[test]
fn a_connection_kept_only_for_its_warnings_is_lost_silently() {
    let now = Instant::now();
    let u = users();
    let c = cluster_ctx(&u, now);
    let mut s = tx_session(&u, now);
    // One warning: the session keeps the connection for SHOW WARNINGS.
    let out = tx_statement_in(
        &mut s,
        &c,
        "INSERT INTO t VALUES (1)",
        &ok_payload(1, 0, SERVER_STATUS_AUTOCOMMIT, 1),
    );
    assert!(!out.iter().any(|a| matches!(a, SessionAction::Park { .. })));
    let out = writer_dies(&mut s, &c);
    assert!(sent(&out).is_empty(), "{out:?}");
    assert!(out.contains(&SessionAction::WriterLost(LostOutcome::Nothing)));
    assert!(!out.contains(&SessionAction::Close));
    let q = query("SELECT 1");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    assert!(out
        .iter()
        .any(|a| matches!(a, SessionAction::LeaseForCommand { .. })));
}

#[test]
fn the_writer_lost_outcomes_are_in_the_metrics_label_order() {
    let all = [
        LostOutcome::RolledBack,
        LostOutcome::Pinned,
        LostOutcome::Unknown,
        LostOutcome::Nothing,
    ];
    let labels: Vec<&str> = all
        .iter()
        .map(|o| metrics::WRITER_LOST_OUTCOMES[o.index()])
        .collect();
    assert_eq!(labels, ["rolled_back", "pinned", "unknown", "none"]);
}

#[test]
fn with_one_server_a_lost_transaction_closes_the_session() {
    let now = Instant::now();
    let u = users();
    let c = ctx(&u, now);
    let mut s = in_transaction_in(&u, &c, now);
    let out = writer_dies(&mut s, &c);
    assert!(out.contains(&SessionAction::AbortClient));
    assert!(out.contains(&SessionAction::Close));
}

// ---- the read/write split ----

fn split_ctx(u: &Users, now: Instant) -> SessionCtx<'_> {
    SessionCtx {
        read_write_split: true,
        ..ctx(u, now)
    }
}

/// The route a parked session asks for with `sql`.
fn route_asked(s: &mut Session, c: &SessionCtx, sql: &str) -> Option<multiplex::Route> {
    let q = query(sql);
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, c, &mut out);
    out.into_iter().find_map(|a| match a {
        SessionAction::LeaseForCommand { route, .. } => Some(route),
        _ => None,
    })
}

#[test]
fn a_parked_sessions_safe_read_may_go_to_a_replica_only_with_the_split_on() {
    use multiplex::Route;
    let now = Instant::now();
    let u = users();
    let mut s = tx_session(&u, now);
    assert_eq!(
        route_asked(&mut s, &split_ctx(&u, now), "SELECT @@server_id"),
        Some(Route::Read)
    );
    let mut s = tx_session(&u, now);
    assert_eq!(
        route_asked(&mut s, &ctx(&u, now), "SELECT @@server_id"),
        Some(Route::Writer)
    );
    let mut s = tx_session(&u, now);
    assert_eq!(
        route_asked(&mut s, &split_ctx(&u, now), "INSERT INTO t VALUES (1)"),
        Some(Route::Writer)
    );
}

#[test]
fn with_autocommit_off_every_statement_goes_to_the_writer() {
    let now = Instant::now();
    let u = users();
    let c = split_ctx(&u, now);
    let mut s = tx_session(&u, now);
    // SET autocommit=0 answered: the status word has no AUTOCOMMIT.
    tx_statement_in(&mut s, &c, "SET autocommit = 0", &ok_payload(0, 0, 0, 0));
    let mut out = Vec::new();
    s.on_backend_read(Completion::Cancelled, &mut [], &c, &mut out);
    assert_eq!(
        route_asked(&mut s, &c, "SELECT 1"),
        Some(multiplex::Route::Writer)
    );
}

#[test]
fn a_read_with_warnings_gives_its_connection_back_at_once() {
    let now = Instant::now();
    let u = users();
    let warned = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 1);
    // Split off: the connection stays for the SHOW WARNINGS that may come.
    let mut s = tx_session(&u, now);
    let out = tx_statement_in(&mut s, &ctx(&u, now), "SELECT 1", &warned);
    assert!(!out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)));
    // A read's lease: never kept, it may be a replica's.
    let mut s = tx_session(&u, now);
    let out = tx_statement_in(&mut s, &split_ctx(&u, now), "SELECT 1", &warned);
    assert!(
        out.contains(&SessionAction::Relay(RelayOp::CancelReadBackend)),
        "{out:?}"
    );
}

// ---- transaction replay (--transaction-replay) ----

fn replay_ctx(u: &Users, now: Instant, max: usize) -> SessionCtx<'_> {
    SessionCtx {
        several_servers: true,
        transaction_replay: Some(max),
        ..ctx(u, now)
    }
}

fn replay_asked(out: &[SessionAction]) -> Option<(Vec<String>, Option<Vec<u8>>)> {
    out.iter().find_map(|a| match a {
        SessionAction::ReplayTransaction { statements, then } => Some((
            statements
                .iter()
                .map(|st| String::from_utf8_lossy(&st.sql).into_owned())
                .collect(),
            then.clone(),
        )),
        _ => None,
    })
}

fn leases(out: &[SessionAction]) -> bool {
    out.iter()
        .any(|a| matches!(a, SessionAction::LeaseForCommand { .. }))
}

#[test]
fn idle_in_a_recorded_transaction_the_loss_is_replayed_and_unseen() {
    let now = Instant::now();
    let u = users();
    let c = replay_ctx(&u, now, 1024);
    let mut s = in_transaction_in(&u, &c, now);
    let out = writer_dies(&mut s, &c);
    assert!(leases(&out), "a connection to the new writer: {out:?}");
    assert!(sent(&out).is_empty());
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::WriterLost(_))));
    let mut out = Vec::new();
    s.on_leased(&[], &c, &mut out);
    assert_eq!(
        replay_asked(&out),
        Some((
            vec!["BEGIN".to_string(), "INSERT INTO t VALUES (1)".to_string()],
            None
        ))
    );
    let mut out = Vec::new();
    let status = SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_IN_TRANS;
    s.on_replayed(ReplayOutcome::Replayed { status }, &c, &mut out);
    assert!(out.contains(&SessionAction::TransactionReplay(ReplayResult::Replayed)));
    assert!(out.contains(&SessionAction::WriterLost(LostOutcome::Replayed)));
    assert!(sent(&out).is_empty(), "the client is told nothing");
    // The relay's client read is still in flight: none is started.
    assert!(
        !out.contains(&SessionAction::Relay(RelayOp::ReadClient)),
        "{out:?}"
    );
    // The next statement goes straight to the new connection: no lease.
    let q = query("INSERT INTO t VALUES (2)");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    assert!(!leases(&out));
    assert!(out.contains(&SessionAction::Relay(RelayOp::WriteBackend {
        end: q.len()
    })));
}

#[test]
fn the_statement_in_flight_goes_behind_the_replay_and_its_answer_is_relayed() {
    let now = Instant::now();
    let u = users();
    let c = replay_ctx(&u, now, 1024);
    let mut s = in_transaction_in(&u, &c, now);
    let q = query("SELECT v FROM t");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    s.on_backend_write(Completion::Done(q.len()), &c, &mut out);
    let out = writer_dies(&mut s, &c);
    assert!(leases(&out));
    let mut out = Vec::new();
    s.on_leased(&[], &c, &mut out);
    let (statements, then) = replay_asked(&out).unwrap();
    assert_eq!(statements.len(), 2);
    assert_eq!(then, Some(q.clone()), "the statement in flight, sent after");
    let mut out = Vec::new();
    let status = SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_IN_TRANS;
    s.on_replayed(ReplayOutcome::Replayed { status }, &c, &mut out);
    assert!(
        out.contains(&SessionAction::Relay(RelayOp::ReadBackend)),
        "{out:?}"
    );
    // Its answer reaches the client.
    let reply = crate::test_packets::framed(1, &ok_payload(0, 0, status, 0));
    let mut out = Vec::new();
    s.on_backend_read(
        Completion::Done(reply.len()),
        &mut reply.clone(),
        &c,
        &mut out,
    );
    assert!(
        out.contains(&SessionAction::Relay(RelayOp::WriteClient {
            end: reply.len()
        })),
        "{out:?}"
    );
}

#[test]
fn a_replay_that_does_not_match_ends_in_the_1213() {
    let now = Instant::now();
    let u = users();
    let c = replay_ctx(&u, now, 1024);
    let mut s = in_transaction_in(&u, &c, now);
    let q = query("SELECT NOW(6)");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    s.on_backend_write(Completion::Done(q.len()), &c, &mut out);
    writer_dies(&mut s, &c);
    let mut out = Vec::new();
    s.on_leased(&[], &c, &mut out);
    let mut out = Vec::new();
    s.on_replayed(ReplayOutcome::Mismatch { statement: 1 }, &c, &mut out);
    assert!(out.contains(&SessionAction::TransactionReplay(ReplayResult::Mismatch)));
    assert!(out.contains(&SessionAction::WriterLost(LostOutcome::RolledBack)));
    let err = &sent(&out)[0];
    assert_eq!((err_code(err), err[3]), (1213, 1));
    assert!(!s.is_closed());
}

#[test]
fn no_new_writer_in_time_ends_in_the_1213_at_the_next_command() {
    let now = Instant::now();
    let u = users();
    let c = replay_ctx(&u, now, 1024);
    let mut s = in_transaction_in(&u, &c, now);
    writer_dies(&mut s, &c);
    let mut out = Vec::new();
    s.on_lease_failed(b"no writer", Some(RejectReason::NoWriter), &mut out);
    assert!(out.contains(&SessionAction::TransactionReplay(ReplayResult::Failed)));
    assert!(sent(&out).is_empty(), "told at its next command");
    let q = query("INSERT INTO t VALUES (2)");
    let mut out = Vec::new();
    s.on_client_read(Completion::Done(q.len()), &q, &c, &mut out);
    assert_eq!(err_code(&sent(&out)[0]), 1213);
}

#[test]
fn a_transaction_over_the_bound_is_not_replayed() {
    let now = Instant::now();
    let u = users();
    // BEGIN fits, the INSERT does not.
    let c = replay_ctx(&u, now, 10);
    let mut s = in_transaction_in(&u, &c, now);
    let out = writer_dies(&mut s, &c);
    assert!(!leases(&out));
    assert!(out.contains(&SessionAction::TransactionReplay(ReplayResult::TooLarge)));
    assert!(out.contains(&SessionAction::WriterLost(LostOutcome::RolledBack)));
    // Without the flag nothing is recorded or counted.
    let c = cluster_ctx(&u, now);
    let mut s = in_transaction_in(&u, &c, now);
    let out = writer_dies(&mut s, &c);
    assert!(!leases(&out));
    assert!(!out
        .iter()
        .any(|a| matches!(a, SessionAction::TransactionReplay(_))));
}

//! The backend connection machine without a socket.

use super::*;
use crate::test_packets::errno;
use crate::test_packets::{framed, greeting};
use wire::reply::{err_payload, err_payload_with_state, ok_payload};

static TRANSPORT: FullAuthTransport = FullAuthTransport {
    secure: false,
    server_key: None,
};

fn creds() -> BackendCredentials<'static> {
    static SECRET: std::sync::LazyLock<Credential> =
        std::sync::LazyLock::new(|| Credential::Plaintext(b"secret".to_vec()));
    BackendCredentials {
        user: "bench",
        credential: &SECRET,
        transport: &TRANSPORT,
    }
}

fn has_event(out: &[BackendOut], f: impl Fn(&BackendEvent) -> bool) -> bool {
    out.iter()
        .any(|o| matches!(o, BackendOut::Event(e) if f(e)))
}

fn sends(out: &[BackendOut]) -> Vec<Vec<u8>> {
    out.iter()
        .filter_map(|o| match o {
            BackendOut::Op(BackendOp::Send(b)) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

const CAP: usize = 16 * 1024;

/// Connect, greeting, login OK: a leased-ready connection.
fn logged_in(now: Instant) -> BackendConn {
    let mut out = Vec::new();
    let mut c = BackendConn::open(PoolKey::default_warm(), now, &mut out);
    assert_eq!(out, vec![BackendOut::Op(BackendOp::Connect)]);
    out.clear();
    c.on_connect(
        Completion::Done(0),
        Some(&creds()),
        Duration::from_secs(1),
        now,
        &mut out,
    );
    assert_eq!(out, vec![BackendOut::Op(BackendOp::Read)]);
    out.clear();
    let g = greeting();
    c.on_read(Completion::Done(g.len()), &g, CAP, now, &mut out);
    assert_eq!(sends(&out).len(), 1, "the HandshakeResponse goes out");
    out.clear();
    c.on_write(Completion::Done(1), &mut out);
    assert_eq!(
        out,
        vec![
            BackendOut::Op(BackendOp::Clear),
            BackendOut::Op(BackendOp::Read)
        ]
    );
    out.clear();
    let ok = framed(2, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    c.on_read(Completion::Done(ok.len()), &ok, CAP, now, &mut out);
    assert!(has_event(&out, |e| matches!(e, BackendEvent::Ready { .. })));
    // The greeting's connection id is the backend thread a KILL maps to.
    assert_eq!(c.thread_id(), 7);
    c
}

#[test]
fn login_then_idle_then_lease_without_schema() {
    let now = Instant::now();
    let mut c = logged_in(now);
    c.make_idle(now);
    assert!(c.is_idle());
    let mut out = Vec::new();
    c.lease(None, None, None, now, &mut out);
    assert!(has_event(&out, |e| *e == BackendEvent::SchemaSelected));
    assert!(c.is_leased());
}

#[test]
fn lease_with_a_schema_selects_it_and_skips_it_next_time() {
    let now = Instant::now();
    let mut c = logged_in(now);
    c.make_idle(now);
    let mut out = Vec::new();
    c.lease(Some("app"), None, None, now, &mut out);
    let sent = sends(&out);
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0][4..], b"\x02app", "COM_INIT_DB app");
    out.clear();
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    let ok = framed(1, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    c.on_read(Completion::Done(ok.len()), &ok, CAP, now, &mut out);
    assert!(has_event(&out, |e| *e == BackendEvent::SchemaSelected));
    assert_eq!(c.schema(), Some("app"));
    // Released, reset, leased again for the same schema: no round trip.
    out.clear();
    c.release(true, now, &mut out);
    let reset = sends(&out);
    assert_eq!(reset.len(), 1, "reset and SELECT DATABASE() in one write");
    out.clear();
    c.on_write(Completion::Done(reset[0].len()), &mut out);
    let mut replies = framed(1, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    // A one-column, one-row result: DATABASE() = 'app'.
    replies.extend(framed(1, &[1]));
    replies.extend(framed(
        2,
        b"\x03def\x00\x00\x00\x0aDATABASE()\x00\x0c\x21\x00\x00\x01\x00\x00\xfd\x00\x00\x1f\x00\x00",
    ));
    replies.extend(framed(3, &[0xfe, 0, 0, 2, 0]));
    replies.extend(framed(4, b"\x03app"));
    replies.extend(framed(5, &[0xfe, 0, 0, 2, 0]));
    out.clear();
    c.on_read(
        Completion::Done(replies.len()),
        &replies,
        CAP,
        now,
        &mut out,
    );
    assert!(
        has_event(&out, |e| *e == BackendEvent::ResetDone),
        "{out:?}"
    );
    assert_eq!(c.schema(), Some("app"));
    out.clear();
    c.lease(Some("app"), None, None, now, &mut out);
    assert!(sends(&out).is_empty());
    assert!(has_event(&out, |e| *e == BackendEvent::SchemaSelected));
}

#[test]
fn a_refused_schema_reaches_the_client_and_the_connection_stays_usable() {
    let now = Instant::now();
    let mut c = logged_in(now);
    c.make_idle(now);
    let mut out = Vec::new();
    c.lease(Some("nope"), None, None, now, &mut out);
    c.on_write(Completion::Done(9), &mut out);
    let err = framed(1, &err_payload(1049, "Unknown database 'nope'"));
    out.clear();
    c.on_read(Completion::Done(err.len()), &err, CAP, now, &mut out);
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::SchemaRefused { .. }
    )));
    assert!(c.is_idle());
    assert_eq!(c.schema(), None);
}

#[test]
fn a_dirty_release_closes() {
    let now = Instant::now();
    let mut c = logged_in(now);
    let mut out = Vec::new();
    c.release(false, now, &mut out);
    assert_eq!(out, vec![BackendOut::Op(BackendOp::Close)]);
    assert!(c.is_closed());
}

#[test]
fn connect_refused_and_login_refused_are_open_failures() {
    let now = Instant::now();
    let mut out = Vec::new();
    let mut c = BackendConn::open(PoolKey::default_warm(), now, &mut out);
    out.clear();
    c.on_connect(
        Completion::Failed(errno::ECONNREFUSED),
        Some(&creds()),
        Duration::from_secs(1),
        now,
        &mut out,
    );
    assert!(has_event(
        &out,
        |e| matches!(e, BackendEvent::OpenFailed { cause, login_refused: None } if cause.contains("refused"))
    ));
    assert!(c.is_closed());

    let mut out = Vec::new();
    let mut c = BackendConn::open(PoolKey::default_warm(), now, &mut out);
    c.on_connect(
        Completion::Done(0),
        Some(&creds()),
        Duration::from_secs(1),
        now,
        &mut out,
    );
    let g = greeting();
    c.on_read(Completion::Done(g.len()), &g, CAP, now, &mut out);
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    let denied = err_payload_with_state(1045, "28000", "Access denied for user 'bench'");
    let err = framed(2, &denied);
    c.on_read(Completion::Done(err.len()), &err, CAP, now, &mut out);
    // The server's own ERR, code, SQLSTATE and text, for the client.
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::OpenFailed { cause, login_refused: Some(p) } if cause.contains("1045") && *p == denied
    )));

    // An ERR instead of the greeting (1040) is not about the credentials.
    let mut out = Vec::new();
    let mut c = BackendConn::open(PoolKey::default_warm(), now, &mut out);
    c.on_connect(
        Completion::Done(0),
        Some(&creds()),
        Duration::from_secs(1),
        now,
        &mut out,
    );
    out.clear();
    let err = framed(0, &err_payload(1040, "Too many connections"));
    c.on_read(Completion::Done(err.len()), &err, CAP, now, &mut out);
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::OpenFailed { cause, login_refused: None } if cause.contains("1040")
    )));
}

#[test]
fn a_connect_that_never_completes_is_cut_by_the_tick() {
    // Defect 4: connecting backends were not covered by the stuck-exchange
    // sweep; a lost link timeout left them (and their waiter) forever.
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut c = BackendConn::open(PoolKey::default_warm(), t0, &mut out);
    out.clear();
    c.on_tick(
        t0 + Duration::from_millis(500),
        Duration::from_secs(1),
        &mut out,
    );
    assert!(out.is_empty());
    c.on_tick(
        t0 + Duration::from_secs(2),
        Duration::from_secs(1),
        &mut out,
    );
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::OpenFailed { .. }
    )));
    assert!(out.contains(&BackendOut::Op(BackendOp::Close)));
}

#[test]
fn a_stalled_reset_is_cut_and_a_broken_one_fails() {
    let t0 = Instant::now();
    let mut c = logged_in(t0);
    let mut out = Vec::new();
    c.release(true, t0, &mut out);
    out.clear();
    c.on_tick(
        t0 + Duration::from_secs(5),
        Duration::from_secs(1),
        &mut out,
    );
    // A server that stalls is as good as gone: the pool may serve a
    // lease's request elsewhere.
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::Failed { lost: true, .. }
    )));

    let mut c = logged_in(t0);
    let mut out = Vec::new();
    c.release(true, t0, &mut out);
    out.clear();
    c.on_read(Completion::Done(0), &[], CAP, t0, &mut out);
    assert!(has_event(
        &out,
        |e| matches!(e, BackendEvent::Failed { cause, lost: true } if cause.contains("closed"))
    ));

    // An answer it cannot take is no loss: another connection to the same
    // server would get it too.
    let mut c = logged_in(t0);
    let mut out = Vec::new();
    c.release(true, t0, &mut out);
    out.clear();
    let err = framed(1, &err_payload(1047, "Unknown command"));
    c.on_read(Completion::Done(err.len()), &err, CAP, t0, &mut out);
    assert!(
        has_event(&out, |e| matches!(
            e,
            BackendEvent::Failed { lost: false, .. }
        )),
        "{out:?}"
    );
}

#[test]
fn a_probe_reads_the_greeting_and_closes_without_a_login() {
    let now = Instant::now();
    let mut out = Vec::new();
    let mut c = BackendConn::open(PoolKey::default_warm(), now, &mut out);
    out.clear();
    c.on_connect(
        Completion::Done(0),
        None,
        Duration::from_secs(1),
        now,
        &mut out,
    );
    assert_eq!(out, vec![BackendOut::Op(BackendOp::Read)]);
    assert!(c.is_opening());
    out.clear();
    let g = greeting();
    c.on_read(Completion::Done(g.len()), &g, CAP, now, &mut out);
    assert!(sends(&out).is_empty(), "no credentials are sent");
    assert!(out.contains(&BackendOut::Op(BackendOp::Close)));
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::Probed { .. }
    )));
    assert!(c.is_closed());

    // A server that refuses at once: the probe failed to open.
    let mut out = Vec::new();
    let mut c = BackendConn::open(PoolKey::default_warm(), now, &mut out);
    c.on_connect(
        Completion::Done(0),
        None,
        Duration::from_secs(1),
        now,
        &mut out,
    );
    out.clear();
    let err = framed(0, &err_payload(1040, "Too many connections"));
    c.on_read(Completion::Done(err.len()), &err, CAP, now, &mut out);
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::OpenFailed { .. }
    )));
}

/// The reset's replies in front of MariaDB: OK, then `SELECT DATABASE(), CURRENT_ROLE()` with
/// the given row (classic EOF framing).
fn reset_replies_with_role(row: &[u8]) -> Vec<u8> {
    let mut replies = framed(1, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    replies.extend(framed(1, &[2]));
    replies.extend(framed(
        2,
        b"\x03def\x00\x00\x00\x0aDATABASE()\x00\x0c\x21\x00\x00\x01\x00\x00\xfd\x00\x00\x1f\x00\x00",
    ));
    replies.extend(framed(
        3,
        b"\x03def\x00\x00\x00\x0eCURRENT_ROLE()\x00\x0c\x21\x00\x00\x01\x00\x00\xfd\x00\x00\x1f\x00\x00",
    ));
    replies.extend(framed(4, &[0xfe, 0, 0, 2, 0]));
    replies.extend(framed(5, row));
    replies.extend(framed(6, &[0xfe, 0, 0, 2, 0]));
    replies
}

#[test]
fn in_front_of_mariadb_a_role_left_after_the_reset_closes_the_connection() {
    let now = Instant::now();
    // MariaDB's reset keeps a SET ROLE, and nothing restores an account's default role: a
    // connection that still has a role is not pooled.
    let mut c = logged_in(now);
    c.mariadb = true;
    let mut out = Vec::new();
    c.release(true, now, &mut out);
    let sent = sends(&out);
    assert!(
        sent[0].ends_with(b"SELECT DATABASE(), CURRENT_ROLE()"),
        "{sent:?}"
    );
    out.clear();
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    let replies = reset_replies_with_role(b"\x03app\x05admin");
    out.clear();
    c.on_read(
        Completion::Done(replies.len()),
        &replies,
        CAP,
        now,
        &mut out,
    );
    assert!(
        has_event(
            &out,
            |e| matches!(e, BackendEvent::Failed { cause, .. } if cause.contains("role `admin`"))
        ),
        "{out:?}"
    );
    assert!(out.contains(&BackendOut::Op(BackendOp::Close)));

    // No role (NULL): pooled as before, with the schema learned.
    let mut c = logged_in(now);
    c.mariadb = true;
    let mut out = Vec::new();
    c.release(true, now, &mut out);
    let sent = sends(&out);
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    let replies = reset_replies_with_role(b"\x03app\xfb");
    out.clear();
    c.on_read(
        Completion::Done(replies.len()),
        &replies,
        CAP,
        now,
        &mut out,
    );
    assert!(
        has_event(&out, |e| *e == BackendEvent::ResetDone),
        "{out:?}"
    );
    assert_eq!(c.schema(), Some("app"));
}

/// `SELECT LAST_INSERT_ID()`'s result (classic EOF framing) with the given row.
fn last_insert_id_reply(row: &[u8]) -> Vec<u8> {
    let mut replies = framed(1, &[1]);
    replies.extend(framed(
        2,
        b"\x03def\x00\x00\x00\x10LAST_INSERT_ID()\x00\x0c\x3f\x00\x15\x00\x00\x00\x08\xa1\x00\x00\x00\x00",
    ));
    replies.extend(framed(3, &[0xfe, 0, 0, 2, 0]));
    replies.extend(framed(4, row));
    replies.extend(framed(5, &[0xfe, 0, 0, 2, 0]));
    replies
}

#[test]
fn asking_for_last_insert_id_reads_the_servers_answer_and_leases_again() {
    let now = Instant::now();
    let mut c = logged_in(now);
    let mut out = Vec::new();
    c.ask_last_insert_id(now, &mut out);
    let sent = sends(&out);
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].ends_with(b"\x03SELECT LAST_INSERT_ID()"),
        "{sent:?}"
    );
    out.clear();
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    let replies = last_insert_id_reply(b"\x06900002");
    // In pieces: the answer waits for the whole result.
    out.clear();
    c.on_read(Completion::Done(10), &replies[..10], CAP, now, &mut out);
    assert_eq!(out, vec![BackendOut::Op(BackendOp::Read)]);
    out.clear();
    c.on_read(
        Completion::Done(replies.len()),
        &replies,
        CAP,
        now,
        &mut out,
    );
    assert!(
        has_event(&out, |e| *e == BackendEvent::LastInsertId(900002)),
        "{out:?}"
    );
    assert!(c.is_leased(), "leased again, for the pool to give back");
    // Known now: a lease that wants the same value sends no DO.
    assert!(c.keep(None, now));
    out.clear();
    let same = LeaseSetup {
        last_insert_id: Some(900002),
        ..LeaseSetup::default()
    };
    let work = c.lease(None, Some(&same), None, now, &mut out);
    assert!(!work.last_insert_id && sends(&out).is_empty(), "{out:?}");
    assert!(c.keep(None, now));
    out.clear();
    let other = LeaseSetup {
        last_insert_id: Some(5),
        ..LeaseSetup::default()
    };
    let work = c.lease(None, Some(&other), None, now, &mut out);
    assert!(work.last_insert_id);
    assert!(sends(&out)[0].ends_with(b"DO LAST_INSERT_ID(5)"), "{out:?}");

    // An ERR (or anything but a number) closes the connection.
    let mut c = logged_in(now);
    c.ask_last_insert_id(now, &mut out);
    out.clear();
    c.on_write(Completion::Done(1), &mut out);
    let err = framed(1, &err_payload(1064, "no"));
    out.clear();
    c.on_read(Completion::Done(err.len()), &err, CAP, now, &mut out);
    assert!(
        has_event(&out, |e| matches!(e, BackendEvent::Failed { .. })),
        "{out:?}"
    );
    assert!(out.contains(&BackendOut::Op(BackendOp::Close)));

    // A server that does not answer is cut by the tick.
    let mut c = logged_in(now);
    c.ask_last_insert_id(now, &mut out);
    out.clear();
    c.on_tick(
        now + Duration::from_secs(5),
        Duration::from_secs(1),
        &mut out,
    );
    assert!(
        has_event(&out, |e| matches!(e, BackendEvent::Failed { .. })),
        "{out:?}"
    );
}

/// A MySQL 8-style greeting naming caching_sha2_password.
fn sha2_greeting() -> Vec<u8> {
    use wire::handshake::{build_greeting, Greeting};
    framed(
        0,
        &build_greeting(&Greeting {
            protocol_version: 10,
            server_version: "8.4.3".into(),
            connection_id: 9,
            scramble: b"abcdefghijklmnopqrst".to_vec(),
            capabilities: 0xdfff_ffff & !CLIENT_SSL,
            ext_capabilities: 0,
            charset: UTF8MB4_GENERAL_CI,
            status: SERVER_STATUS_AUTOCOMMIT,
            auth_plugin: "caching_sha2_password".into(),
        }),
    )
}

#[test]
fn caching_sha2_fast_auth_success_and_ok_in_one_read_or_two() {
    let now = Instant::now();
    let fast_ok = framed(2, &[0x01, 0x03]);
    let ok = framed(3, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    for split in [false, true] {
        let mut out = Vec::new();
        let mut c = BackendConn::open(PoolKey::default_warm(), now, &mut out);
        c.on_connect(
            Completion::Done(0),
            Some(&creds()),
            Duration::from_secs(1),
            now,
            &mut out,
        );
        let g = sha2_greeting();
        out.clear();
        c.on_read(Completion::Done(g.len()), &g, CAP, now, &mut out);
        let response = sends(&out);
        assert_eq!(response.len(), 1);
        let tail = b"caching_sha2_password\0";
        assert!(response[0].ends_with(tail), "the greeting's plugin answers");
        c.on_write(Completion::Done(1), &mut out);
        out.clear();
        let mut buf = fast_ok.clone();
        if split {
            // 0x01 0x03 alone: nothing to send, read on, keep the bytes.
            c.on_read(Completion::Done(buf.len()), &buf, CAP, now, &mut out);
            assert_eq!(out, vec![BackendOut::Op(BackendOp::Read)]);
            out.clear();
            // Half of the OK: still waiting.
            buf.extend_from_slice(&ok[..5]);
            c.on_read(Completion::Done(5), &buf, CAP, now, &mut out);
            assert_eq!(out, vec![BackendOut::Op(BackendOp::Read)]);
            out.clear();
            buf.extend_from_slice(&ok[5..]);
        } else {
            buf.extend_from_slice(&ok);
        }
        c.on_read(Completion::Done(buf.len()), &buf, CAP, now, &mut out);
        assert!(
            has_event(&out, |e| matches!(e, BackendEvent::Ready { .. })),
            "{out:?}"
        );
        assert_eq!(c.thread_id(), 9);
    }
}

#[test]
fn caching_sha2_full_auth_refused_passes_the_servers_err_and_logs_no_secret() {
    let now = Instant::now();
    let mut out = Vec::new();
    let mut c = BackendConn::open(PoolKey::default_warm(), now, &mut out);
    c.on_connect(
        Completion::Done(0),
        Some(&creds()),
        Duration::from_secs(1),
        now,
        &mut out,
    );
    let g = sha2_greeting();
    c.on_read(Completion::Done(g.len()), &g, CAP, now, &mut out);
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    // Plain TCP, no key configured: ask the server for its key.
    let more = framed(2, &[0x01, 0x04]);
    c.on_read(Completion::Done(more.len()), &more, CAP, now, &mut out);
    assert_eq!(sends(&out), vec![framed(3, &[0x02])]);
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    let denied = err_payload_with_state(
        1045,
        "28000",
        "Access denied for user 'bench'@'127.0.0.1' (using password: YES)",
    );
    let err = framed(4, &denied);
    c.on_read(Completion::Done(err.len()), &err, CAP, now, &mut out);
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::OpenFailed { login_refused: Some(p), .. } if *p == denied
    )));
    assert!(!format!("{out:?}").contains("secret"));
}

// ---- backend TLS (`--backend-tls`) ----

/// A greeting that offers TLS.
fn tls_greeting() -> Vec<u8> {
    let mut g = greeting();
    // Capability flags (lower 16 bits) follow the protocol version, the
    // NUL-terminated version, the 4-byte id, 8 scramble bytes and a filler.
    let at = 4 + 1 + "10.11.0-MariaDB".len() + 1 + 4 + 8 + 1;
    let caps = u16::from_le_bytes([g[at], g[at + 1]]) | CLIENT_SSL as u16;
    g[at..at + 2].copy_from_slice(&caps.to_le_bytes());
    g
}

/// Connect and read `greeting` with `tls` stamped on the key.
fn greeted(tls: TlsWish, greeting: &[u8], now: Instant) -> (BackendConn, Vec<BackendOut>) {
    let mut out = Vec::new();
    let key = PoolKey {
        tls,
        ..PoolKey::default_warm()
    };
    let mut c = BackendConn::open(key, now, &mut out);
    out.clear();
    c.on_connect(
        Completion::Done(0),
        Some(&creds()),
        Duration::from_secs(1),
        now,
        &mut out,
    );
    out.clear();
    c.on_read(
        Completion::Done(greeting.len()),
        greeting,
        CAP,
        now,
        &mut out,
    );
    (c, out)
}

#[test]
fn tls_login_sends_the_ssl_request_runs_the_handshake_then_logs_in_inside_it() {
    let now = Instant::now();
    let (mut c, out) = greeted(TlsWish::Required, &tls_greeting(), now);
    let sent = sends(&out);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].len(),
        4 + 32,
        "the SSLRequest: the response's first 32 bytes"
    );
    assert!(c.is_opening());
    let mut out = Vec::new();
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    assert_eq!(
        out,
        vec![
            BackendOut::Op(BackendOp::Clear),
            BackendOut::Op(BackendOp::StartTls)
        ]
    );
    assert!(!c.tls_active());
    out.clear();
    c.on_tls(Ok(()), now, &mut out);
    let response = sends(&out);
    assert_eq!(response.len(), 1, "the HandshakeResponse, through TLS");
    assert_eq!(response[0][3], 2, "sequence id 2, after the SSLRequest's 1");
    assert!(c.tls_active());
    out.clear();
    c.on_write(Completion::Done(response[0].len()), &mut out);
    let ok = framed(3, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    c.on_read(Completion::Done(ok.len()), &ok, CAP, now, &mut out);
    assert!(has_event(&out, |e| matches!(e, BackendEvent::Ready { .. })));
}

#[test]
fn a_failed_tls_handshake_fails_the_open_with_its_cause() {
    let now = Instant::now();
    let (mut c, out) = greeted(TlsWish::Required, &tls_greeting(), now);
    let mut out2 = Vec::new();
    c.on_write(Completion::Done(sends(&out)[0].len()), &mut out2);
    out2.clear();
    c.on_tls(
        Err("TLS handshake with the server failed: UnknownIssuer".into()),
        now,
        &mut out2,
    );
    assert!(out2.contains(&BackendOut::Op(BackendOp::Close)));
    assert!(has_event(&out2, |e| matches!(e,
        BackendEvent::OpenFailed { cause, login_refused: None } if cause.contains("UnknownIssuer"))));
    assert!(c.is_closed());
}

#[test]
fn a_stalled_tls_handshake_is_cut_by_the_tick() {
    let now = Instant::now();
    let (mut c, out) = greeted(TlsWish::Required, &tls_greeting(), now);
    let mut out2 = Vec::new();
    c.on_write(Completion::Done(sends(&out)[0].len()), &mut out2);
    out2.clear();
    c.on_tick(
        now + Duration::from_secs(5),
        Duration::from_secs(1),
        &mut out2,
    );
    assert!(has_event(&out2, |e| matches!(
        e,
        BackendEvent::OpenFailed { .. }
    )));
    // The driver's late answer finds it closed and changes nothing.
    out2.clear();
    c.on_tls(Ok(()), now, &mut out2);
    assert!(out2.is_empty(), "{out2:?}");
}

#[test]
fn required_tls_from_a_server_without_it_fails_and_is_counted() {
    let now = Instant::now();
    let (c, out) = greeted(TlsWish::Required, &greeting(), now);
    assert!(sends(&out).is_empty(), "nothing is sent in plain");
    assert!(has_event(&out, |e| *e == BackendEvent::Tls(TlsNote::Unavailable)));
    assert!(has_event(&out, |e| matches!(e,
        BackendEvent::OpenFailed { cause, .. } if cause.contains("does not offer TLS")
            && cause.contains("--backend-tls preferred or disabled"))));
    assert!(c.is_closed());
}

#[test]
fn preferred_tls_falls_back_to_plain_and_says_so() {
    let now = Instant::now();
    let (c, out) = greeted(TlsWish::Preferred, &greeting(), now);
    assert_eq!(sends(&out).len(), 1, "the HandshakeResponse, in plain");
    assert!(has_event(&out, |e| *e == BackendEvent::Tls(TlsNote::PlainFallback)));
    assert!(!c.tls_active());
    // Offered: TLS.
    let (_, out) = greeted(TlsWish::Preferred, &tls_greeting(), now);
    assert_eq!(sends(&out)[0].len(), 4 + 32, "the SSLRequest");
    assert!(!has_event(&out, |e| matches!(e, BackendEvent::Tls(_))));
}

#[test]
fn tls_disabled_never_asks_for_it() {
    let now = Instant::now();
    let (_, out) = greeted(TlsWish::Off, &tls_greeting(), now);
    let sent = sends(&out);
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].len() > 4 + 32,
        "a whole HandshakeResponse, in plain"
    );
    assert!(!has_event(&out, |e| matches!(e, BackendEvent::Tls(_))));
}

/// Ask for `sql`'s statement on a leased connection; the server answers
/// `reply` (framed packets). The outputs of the answer.
fn prepare_with(c: &mut BackendConn, sql: &str, reply: &[u8], now: Instant) -> Vec<BackendOut> {
    let key = std::sync::Arc::new(server_prepared::StmtKey {
        schema: None,
        settings: 0,
        sql: sql.as_bytes().to_vec(),
    });
    let mut out = Vec::new();
    c.statement(key, true, None, now, &mut out);
    assert_eq!(sends(&out).len(), 1, "{out:?}");
    out.clear();
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    c.on_read(Completion::Done(reply.len()), reply, CAP, now, &mut out);
    out
}

fn prepare_ok(id: u32) -> Vec<u8> {
    let mut p = vec![0];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0]);
    framed(1, &p)
}

#[test]
fn a_prepare_refused_at_the_servers_limit_closes_the_connections_statements_and_tries_again() {
    let now = Instant::now();
    let mut c = logged_in(now);
    c.make_idle(now);
    let mut out = Vec::new();
    c.lease(None, None, None, now, &mut out);
    let out = prepare_with(&mut c, "SELECT 1", &prepare_ok(5), now);
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::Statement(server_prepared::StatementReply::Ready { id: 5, .. })
    )));
    // The server's max_prepared_stmt_count is reached (another client set it
    // to 10, as mysql2's own tests do): statement 5 is closed and the prepare
    // sent again, before anyone hears of the refusal.
    let full = framed(
        1,
        &err_payload_with_state(
            1461,
            "42000",
            "Can't create more than max_prepared_stmt_count statements (current value: 10)",
        ),
    );
    let out = prepare_with(&mut c, "SELECT 2", &full, now);
    assert_eq!(
        sends(&out),
        vec![server_prepared::exchange_bytes(&[5], b"SELECT 2")]
    );
    assert!(!has_event(&out, |e| matches!(
        e,
        BackendEvent::Statement(_)
    )));
    assert_eq!(c.prepared_count(), 0);
    let mut out = Vec::new();
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    let ok = prepare_ok(6);
    c.on_read(Completion::Done(ok.len()), &ok, CAP, now, &mut out);
    assert!(
        has_event(&out, |e| matches!(
            e,
            BackendEvent::Statement(server_prepared::StatementReply::Ready {
                id: 6,
                evicted: 1,
                ..
            })
        )),
        "{out:?}"
    );
    // Refused again after its one retry (statement 6 closed): the client
    // gets the server's ERR.
    let out = prepare_with(&mut c, "SELECT 3", &full, now);
    assert_eq!(
        sends(&out),
        vec![server_prepared::exchange_bytes(&[6], b"SELECT 3")]
    );
    let mut out = Vec::new();
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    c.on_read(Completion::Done(full.len()), &full, CAP, now, &mut out);
    assert!(
        has_event(&out, |e| matches!(
            e,
            BackendEvent::Statement(server_prepared::StatementReply::Refused { .. })
        )),
        "{out:?}"
    );
}

#[test]
fn a_prepare_ok_larger_than_the_read_buffer_is_read_on() {
    // 1,000 columns (mysql-connector's BugOra18742429 test): the reply is
    // read in buffer-sized pieces, and the whole of it reaches the session.
    let now = Instant::now();
    let mut c = logged_in(now);
    c.make_idle(now);
    let mut out = Vec::new();
    c.lease(None, None, None, now, &mut out);
    let columns: u16 = 1000;
    let mut head = vec![0];
    head.extend_from_slice(&7u32.to_le_bytes());
    head.extend_from_slice(&columns.to_le_bytes());
    head.extend_from_slice(&[0, 0, 0, 0, 0]);
    let mut reply = framed(1, &head);
    for i in 0..columns {
        let def = format!("def-of-column-{i:04}-with-some-padding-to-make-it-longer");
        reply.extend(framed((2 + i) as u8, def.as_bytes()));
    }
    reply.extend(framed(2, &[0xFE, 0, 0, 2, 0]));
    assert!(reply.len() > 3 * CAP, "{} bytes", reply.len());
    let key = std::sync::Arc::new(server_prepared::StmtKey {
        schema: None,
        settings: 0,
        sql: b"SELECT * FROM wide WHERE col0 = ?".to_vec(),
    });
    c.statement(key, true, None, now, &mut out);
    out.clear();
    c.on_write(Completion::Done(1), &mut out);
    let mut at = 0;
    let mut got = None;
    while at < reply.len() {
        let piece = &reply[at..(at + CAP).min(reply.len())];
        at += piece.len();
        let mut out = Vec::new();
        c.on_read(Completion::Done(piece.len()), piece, CAP, now, &mut out);
        assert!(
            !has_event(&out, |e| matches!(e, BackendEvent::Failed { .. })),
            "{out:?}"
        );
        if let Some(BackendOut::Event(BackendEvent::Statement(r))) = out
            .iter()
            .find(|o| matches!(o, BackendOut::Event(BackendEvent::Statement(_))))
        {
            got = Some(r.clone());
        } else {
            assert!(
                out.iter()
                    .any(|o| matches!(o, BackendOut::Op(BackendOp::Clear))),
                "a full buffer is taken aside and cleared: {out:?}"
            );
        }
    }
    match got {
        Some(server_prepared::StatementReply::Ready {
            id: 7,
            response: Some(r),
            ..
        }) => assert_eq!(&r[..], &reply[..]),
        other => panic!("{other:?}"),
    }
}

// ------------------------------------------------------ transaction replay

/// The answers a client got (no CLIENT_DEPRECATE_EOF, as the key says):
/// BEGIN's OK, an INSERT's OK, a one-row result set.
fn replay_answers(row: &[u8]) -> Vec<Vec<u8>> {
    const IN: u16 = SERVER_STATUS_IN_TRANS | SERVER_STATUS_AUTOCOMMIT;
    let coldef =
        b"\x03def\x00\x00\x00\x01v\x00\x0c\x3f\x00\x0b\x00\x00\x00\x03\x00\x00\x00\x00\x00";
    let mut rows = framed(1, &[1]);
    rows.extend(framed(2, coldef));
    rows.extend(framed(3, &[0xFE, 0, 0, 0x03, 0]));
    rows.extend(framed(4, row));
    rows.extend(framed(5, &[0xFE, 0, 0, 0x03, 0]));
    vec![
        framed(1, &ok_payload(0, 0, IN, 0)),
        framed(1, &ok_payload(1, 9, IN, 0)),
        rows,
    ]
}

/// What the client's tracker said of each answer: the recorded statements.
fn recorded(answers: &[Vec<u8>]) -> Vec<crate::tx_replay::Recorded> {
    let sqls = ["BEGIN", "INSERT INTO t(v) VALUES (1)", "SELECT v FROM t"];
    let mut t = wire::tracker::Tracker::new(false);
    t.capture_commands(64);
    t.checksum_answers();
    sqls.iter()
        .zip(answers)
        .map(|(sql, answer)| {
            t.on_client_bytes(&framed(0, &com_payload(COM_QUERY, sql.as_bytes())))
                .unwrap();
            t.on_server_bytes(answer).unwrap();
            crate::tx_replay::Recorded {
                sql: sql.as_bytes().to_vec(),
                checksum: t.take_completed().unwrap().checksum.unwrap(),
            }
        })
        .collect()
}

fn leased(now: Instant) -> BackendConn {
    let mut c = logged_in(now);
    c.make_idle(now);
    let mut out = Vec::new();
    c.lease(None, None, None, now, &mut out);
    assert!(c.is_leased());
    c
}

fn replayed(out: &[BackendOut]) -> Option<tx_replay::ReplayOutcome> {
    out.iter().find_map(|o| match o {
        BackendOut::Event(BackendEvent::Replayed(r)) => Some(r.clone()),
        _ => None,
    })
}

#[test]
fn a_replay_whose_answers_match_sends_the_statement_in_flight_and_is_leased_again() {
    let now = Instant::now();
    let mut c = leased(now);
    let answers = replay_answers(b"\x011");
    let statements = recorded(&answers);
    let then = framed(0, &com_payload(COM_QUERY, b"INSERT INTO t(v) VALUES (2)"));
    let mut out = Vec::new();
    c.replay(&statements, Some(then.clone()), now, &mut out);
    let sent = sends(&out);
    assert_eq!(sent.len(), 1, "the statements go pipelined, in one write");
    assert!(sent[0].ends_with(b"\x03SELECT v FROM t"));
    out.clear();
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    assert_eq!(out.last(), Some(&BackendOut::Op(BackendOp::Read)));
    // The answers arrive in two reads, cut inside a packet.
    let all = answers.concat();
    let (a, b) = all.split_at(all.len() - 7);
    out.clear();
    c.on_read(Completion::Done(a.len()), a, CAP, now, &mut out);
    assert_eq!(out.last(), Some(&BackendOut::Op(BackendOp::Read)));
    out.clear();
    c.on_read(Completion::Done(b.len()), b, CAP, now, &mut out);
    assert_eq!(
        sends(&out),
        vec![then.clone()],
        "then the statement in flight"
    );
    assert_eq!(replayed(&out), None, "not before it is written");
    out.clear();
    c.on_write(Completion::Done(then.len()), &mut out);
    assert_eq!(
        replayed(&out),
        Some(tx_replay::ReplayOutcome::Replayed {
            status: SERVER_STATUS_IN_TRANS | SERVER_STATUS_AUTOCOMMIT
        })
    );
    assert!(c.is_leased(), "its answer is the relay's to read");
}

#[test]
fn a_replay_that_reads_another_row_is_a_mismatch_and_closes() {
    let now = Instant::now();
    let mut c = leased(now);
    let statements = recorded(&replay_answers(b"\x011"));
    let mut out = Vec::new();
    c.replay(&statements, None, now, &mut out);
    let sent = sends(&out);
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    out.clear();
    let all = replay_answers(b"\x012").concat();
    c.on_read(Completion::Done(all.len()), &all, CAP, now, &mut out);
    assert_eq!(
        replayed(&out),
        Some(tx_replay::ReplayOutcome::Mismatch { statement: 2 })
    );
    assert!(out.contains(&BackendOut::Op(BackendOp::Close)));
    assert!(sends(&out).is_empty(), "nothing more is sent");
    assert!(c.is_closed());
}

#[test]
fn a_replay_with_nothing_in_flight_is_leased_again_after_the_last_answer() {
    let now = Instant::now();
    let mut c = leased(now);
    let answers = replay_answers(b"\x011");
    let statements = recorded(&answers);
    let mut out = Vec::new();
    c.replay(&statements, None, now, &mut out);
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    // An ERR where the client got an OK is a mismatch too; here every
    // answer matches.
    let all = answers.concat();
    c.on_read(Completion::Done(all.len()), &all, CAP, now, &mut out);
    assert!(matches!(
        replayed(&out),
        Some(tx_replay::ReplayOutcome::Replayed { .. })
    ));
    assert!(c.is_leased());
}

#[test]
fn a_replay_the_server_breaks_off_fails_and_a_stalled_one_is_cut() {
    let now = Instant::now();
    let mut c = leased(now);
    let statements = recorded(&replay_answers(b"\x011"));
    let mut out = Vec::new();
    c.replay(&statements, None, now, &mut out);
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    c.on_read(Completion::Done(0), &[], CAP, now, &mut out);
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::Failed { .. }
    )));
    let mut c = leased(now);
    out.clear();
    c.replay(&statements, None, now, &mut out);
    out.clear();
    c.on_tick(
        now + Duration::from_secs(2),
        Duration::from_secs(1),
        &mut out,
    );
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::Failed { .. }
    )));
}

#[test]
fn a_replay_the_server_asks_a_local_file_of_fails_at_once() {
    let now = Instant::now();
    let mut c = leased(now);
    let mut statements = recorded(&replay_answers(b"\x011"));
    statements[1].sql = b"LOAD DATA LOCAL INFILE 'x' INTO TABLE t".to_vec();
    let mut out = Vec::new();
    c.replay(&statements, None, now, &mut out);
    c.on_write(Completion::Done(1), &mut out);
    out.clear();
    let mut answers = replay_answers(b"\x011")[0].clone();
    answers.extend(framed(1, b"\xfbx"));
    c.on_read(
        Completion::Done(answers.len()),
        &answers,
        CAP,
        now,
        &mut out,
    );
    assert!(
        has_event(
            &out,
            |e| matches!(e, BackendEvent::Failed { cause, .. } if cause.contains("LOCAL"))
        ),
        "{out:?}"
    );
    assert!(c.is_closed());
}

/// Lease with the settings `SET` and a causal wait; the setup goes out as
/// one pipelined write.
fn lease_with_wait(now: Instant) -> (BackendConn, Vec<u8>) {
    let mut c = logged_in(now);
    c.make_idle(now);
    let mut out = Vec::new();
    let setup = LeaseSetup {
        last_insert_id: Some(5),
        ..LeaseSetup::default()
    };
    let wait = b"SELECT MASTER_GTID_WAIT('0-1-7', 1.000)".to_vec();
    let work = c.lease(
        None,
        Some(&setup),
        Some((wait, Duration::from_secs(1))),
        now,
        &mut out,
    );
    assert!(work.causal_wait && work.last_insert_id);
    let sent = sends(&out);
    assert_eq!(sent.len(), 1, "pipelined: {out:?}");
    assert!(sent[0].ends_with(b"\x03SELECT MASTER_GTID_WAIT('0-1-7', 1.000)"));
    out.clear();
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    // The DO's OK, then the wait's one-value result set.
    let mut replies = framed(1, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    replies.extend(last_insert_id_reply(b"\x010")[..].iter());
    (c, replies)
}

fn wait_events(out: &[BackendOut]) -> Vec<&BackendEvent> {
    out.iter()
        .filter_map(|o| match o {
            BackendOut::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

#[test]
fn a_causal_wait_that_reaches_leases_the_connection() {
    let now = Instant::now();
    let (mut c, replies) = lease_with_wait(now);
    let later = now + Duration::from_millis(3);
    let mut out = Vec::new();
    // In pieces: the OK alone is not the end.
    c.on_read(Completion::Done(11), &replies[..11], CAP, later, &mut out);
    assert_eq!(out, vec![BackendOut::Op(BackendOp::Read)]);
    out.clear();
    c.on_read(
        Completion::Done(replies.len() - 1),
        &replies[..replies.len() - 1],
        CAP,
        later,
        &mut out,
    );
    assert_eq!(out, vec![BackendOut::Op(BackendOp::Read)]);
    out.clear();
    c.on_read(
        Completion::Done(replies.len()),
        &replies,
        CAP,
        later,
        &mut out,
    );
    assert_eq!(
        wait_events(&out),
        vec![
            &BackendEvent::CausalWait {
                waited: Duration::from_millis(3),
                outcome: Ok(())
            },
            &BackendEvent::SchemaSelected
        ]
    );
    assert!(c.is_leased());
}

#[test]
fn a_causal_wait_that_times_out_leaves_the_connection_clean_and_leased() {
    let now = Instant::now();
    for (row, why) in [(&b"\x02-1"[..], "timed out"), (&b"\xfb"[..], "NULL")] {
        let (mut c, mut replies) = lease_with_wait(now);
        let at = replies.len() - 2 - 4 - 5 - 4;
        // Replace the row "0" with this answer.
        let tail = replies.split_off(at);
        let mut row_packet = framed(4, row);
        row_packet.extend(framed(5, &[0xfe, 0, 0, 2, 0]));
        assert_eq!(tail.len(), 2 + 4 + 5 + 4);
        replies.extend(row_packet);
        let mut out = Vec::new();
        c.on_read(
            Completion::Done(replies.len()),
            &replies,
            CAP,
            now,
            &mut out,
        );
        let events = wait_events(&out);
        assert_eq!(events.len(), 1, "no SchemaSelected: {out:?}");
        assert!(
            matches!(events[0], BackendEvent::CausalWait { outcome: Err(e), .. } if e.contains(why)),
            "{out:?}"
        );
        assert!(c.is_leased() && !c.is_closed());
        // Clean: it goes back to the pool as it is.
        assert!(c.keep(None, now));
        assert!(c.is_idle());
    }
    // An ERR answer (a position the server cannot parse) too.
    let (mut c, replies) = lease_with_wait(now);
    let ok_len = 4 + 7;
    let mut replies = replies[..ok_len].to_vec();
    replies.extend(framed(1, &err_payload(1941, "Could not parse GTID list")));
    let mut out = Vec::new();
    c.on_read(
        Completion::Done(replies.len()),
        &replies,
        CAP,
        now,
        &mut out,
    );
    assert!(
        has_event(
            &out,
            |e| matches!(e, BackendEvent::CausalWait { outcome: Err(e), .. } if e.contains("1941"))
        ),
        "{out:?}"
    );
    assert!(c.is_leased());
}

#[test]
fn a_causal_wait_gets_its_timeout_on_top_of_the_exchange_limit() {
    let now = Instant::now();
    let (mut c, _) = lease_with_wait(now);
    let mut out = Vec::new();
    c.on_tick(
        now + Duration::from_millis(1500),
        Duration::from_secs(1),
        &mut out,
    );
    assert!(out.is_empty(), "{out:?}");
    c.on_tick(
        now + Duration::from_millis(2100),
        Duration::from_secs(1),
        &mut out,
    );
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::Failed { .. }
    )));
}

#[test]
fn a_refused_schema_leaves_no_wait_for_the_next_lease() {
    let now = Instant::now();
    let mut c = logged_in(now);
    c.make_idle(now);
    let mut out = Vec::new();
    let wait = b"SELECT MASTER_GTID_WAIT('0-1-7', 1.000)".to_vec();
    c.lease(
        Some("nope"),
        None,
        Some((wait, Duration::from_secs(1))),
        now,
        &mut out,
    );
    let sent = sends(&out);
    out.clear();
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    let err = framed(1, &err_payload(1049, "Unknown database 'nope'"));
    out.clear();
    c.on_read(Completion::Done(err.len()), &err, CAP, now, &mut out);
    assert!(has_event(&out, |e| matches!(
        e,
        BackendEvent::SchemaRefused { .. }
    )));
    // The next lease sets up one statement, and its OK ends it.
    out.clear();
    let setup = LeaseSetup {
        last_insert_id: Some(5),
        ..LeaseSetup::default()
    };
    c.lease(None, Some(&setup), None, now, &mut out);
    let sent = sends(&out);
    out.clear();
    c.on_write(Completion::Done(sent[0].len()), &mut out);
    let ok = framed(1, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
    out.clear();
    c.on_read(Completion::Done(ok.len()), &ok, CAP, now, &mut out);
    assert_eq!(
        wait_events(&out),
        vec![&BackendEvent::SchemaSelected],
        "{out:?}"
    );
}

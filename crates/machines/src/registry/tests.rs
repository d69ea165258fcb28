//! The connection registry without a worker: id allocation, KILL and
//! SHOW PROCESSLIST interception, and the KILL fences.

use super::*;
use wire::kill::parse_statement;

#[test]
fn ids_are_high_disjoint_between_workers_and_grow_in_arrival_order() {
    let reg = Arc::new(Registry::default());
    let workers: Vec<ConnectionIds> = (0..3).map(|w| ConnectionIds::new(w, 3)).collect();
    let mut seen = std::collections::HashSet::new();
    let mut last = 0;
    let mut held = Vec::new();
    for i in 0..1000usize {
        // Connections arrive at the workers in any order.
        let w = (i * 7 + i / 5) % 3;
        let r = reg.register_next(&workers[w], -1);
        let id = r.id();
        assert!(is_proxy_id(u64::from(id)), "{id}");
        assert_eq!(
            (id - PROXY_ID_BASE) % 3,
            w as u32,
            "the residue is the worker"
        );
        assert!(id > last, "{last} then {id}");
        assert!(seen.insert(id), "{id} twice");
        last = id;
        held.push(r);
    }
    assert!(!is_proxy_id(u64::from(PROXY_ID_BASE - 1)));
    assert!(!is_proxy_id(1 << 32));
}

#[test]
fn ids_wrap_below_2_pow_32() {
    let ids = ConnectionIds::new(2, 3);
    let last = ids.id_for(ids.span - 1);
    assert!(
        last > PROXY_ID_BASE && last as u64 + 3 > u32::MAX as u64,
        "{last}"
    );
    assert_eq!(ids.id_for(ids.span), PROXY_ID_BASE + 2);
    let one = ConnectionIds::new(0, 1);
    assert_eq!(one.id_for(one.span - 1), u32::MAX);
    assert_eq!(one.id_for(one.span), PROXY_ID_BASE);
    assert_eq!(one.id_for(u32::MAX), u32::MAX);
}

#[test]
fn registration_is_unique_and_removed_on_drop() {
    let reg = Arc::new(Registry::default());
    let a = reg.register(PROXY_ID_BASE + 1, -1).unwrap();
    assert!(reg.register(PROXY_ID_BASE + 1, -1).is_none());
    let ids = ConnectionIds::new(0, 1);
    reg.seq.store(1, Ordering::Relaxed);
    // The taken id is skipped.
    let b = reg.register_next(&ids, -1);
    assert_eq!(b.id(), PROXY_ID_BASE + 2);
    assert_eq!(reg.len(), 2);
    a.entry().set_leased("app", 42);
    assert_eq!(
        reg.lookup(PROXY_ID_BASE + 1),
        Some(Target {
            user: Some("app".into()),
            backend_thread: Some(42)
        })
    );
    assert_eq!(reg.by_backend_thread(42).map(|(id, _)| id), Some(a.id()));
    a.entry().clear_backend();
    assert_eq!(reg.by_backend_thread(42), None);
    drop(a);
    drop(b);
    assert!(reg.is_empty());
    assert_eq!(reg.lookup(PROXY_ID_BASE + 1), None);
}

fn kill(sql: &str) -> KillStatement<'_> {
    parse_statement(sql.as_bytes()).unwrap()
}

#[test]
fn kill_decisions() {
    let reg = Arc::new(Registry::default());
    let victim = reg.register(PROXY_ID_BASE + 7, -1).unwrap();
    victim.entry().set_leased("app", 33);
    let waiting = reg.register(PROXY_ID_BASE + 8, -1).unwrap();
    let id = PROXY_ID_BASE + 7;

    // Same user: rewritten to the backend thread, form kept.
    assert_eq!(
        decide_kill(&kill(&format!("KILL QUERY {id}")), "app", &reg, false),
        KillDecision::Kill {
            payload: b"\x03KILL QUERY 33".to_vec(),
            own: true
        }
    );
    // Another user: 1095 with the id the client used.
    let refused = decide_kill(&kill(&format!("kill {id}")), "other", &reg, false);
    assert_eq!(refused, KillDecision::NotOwner { id: id.into() });
    assert_eq!(
        refused.payload().unwrap(),
        format!(
            "\x03SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1095, \
             MESSAGE_TEXT = 'You are not owner of thread {id}'"
        )
        .as_bytes()
    );
    // ... unless the server checks (per-user backend identity): then
    // the server decides, and on MariaDB its refusal names the proxy id.
    let KillDecision::Kill {
        payload: p,
        own: false,
    } = decide_kill(&kill(&format!("kill {id}")), "other", &reg, true)
    else {
        panic!("not sent to the server")
    };
    let sql = String::from_utf8_lossy(&p[1..]).into_owned();
    assert!(
        sql.starts_with("BEGIN NOT ATOMIC DECLARE EXIT HANDLER FOR 1094"),
        "{sql}"
    );
    assert!(sql.contains(&format!("'Unknown thread id: {id}'")), "{sql}");
    assert!(
        sql.contains(&format!("'You are not owner of thread {id}'")),
        "{sql}"
    );
    assert!(sql.ends_with("; KILL CONNECTION 33; END"), "{sql}");
    // The same user's session needs no guard; a MySQL server gets a
    // plain KILL.
    assert_eq!(
        decide_kill(&kill(&format!("kill {id}")), "app", &reg, true),
        KillDecision::Kill {
            payload: b"\x03KILL CONNECTION 33".to_vec(),
            own: true
        }
    );
    reg.set_backend_version("8.0.36");
    assert_eq!(
        decide_kill(&kill(&format!("kill {id}")), "other", &reg, true),
        KillDecision::Kill {
            payload: b"\x03KILL CONNECTION 33".to_vec(),
            own: false
        }
    );
    reg.set_backend_version("5.5.5-10.11.19-MariaDB");
    // Unknown proxy id: the server's own 1094.
    assert_eq!(
        decide_kill(&kill("KILL 2147483999"), "app", &reg, false),
        KillDecision::Forward
    );
    assert_eq!(KillDecision::Forward.payload(), None);
    // A session without a backend connection (not logged in yet).
    let wid = waiting.id();
    assert_eq!(
        decide_kill(&kill(&format!("KILL {wid}")), "app", &reg, false),
        KillDecision::NotOwner { id: wid.into() }
    );
    waiting.entry().set_user("app");
    assert_eq!(
        decide_kill(&kill(&format!("KILL {wid}")), "app", &reg, false),
        KillDecision::Nothing
    );
    assert_eq!(KillDecision::Nothing.payload().unwrap(), b"\x03DO 0");
    // Raw backend thread ids name the session that thread serves now:
    // another user's session is protected in shared mode, the same user's
    // is killed (fenced like a proxy id), and with per-user identity the
    // server decides from the killer's grants.
    assert_eq!(
        decide_kill(&kill("KILL 33"), "other", &reg, false),
        KillDecision::NotOwner { id: 33 }
    );
    assert_eq!(
        decide_kill(&kill("KILL 33"), "app", &reg, false),
        KillDecision::Kill {
            payload: b"\x03KILL CONNECTION 33".to_vec(),
            own: true
        }
    );
    let KillDecision::Kill {
        payload: p,
        own: false,
    } = decide_kill(&kill("KILL QUERY 33"), "other", &reg, true)
    else {
        panic!("not sent to the server")
    };
    let sql = String::from_utf8_lossy(&p[1..]).into_owned();
    assert!(
        sql.contains("IF NOT EXISTS (SELECT 1 FROM information_schema.USER_PRIVILEGES"),
        "{sql}"
    );
    assert!(sql.ends_with("; END IF; KILL QUERY 33; END"), "{sql}");
    // A thread no session has (idle in a pool, or not ringgate's): shared
    // identity refuses it (the server's 1094 if it does not exist), per-user
    // identity needs the killer's privilege; a MySQL server answers alone.
    let KillDecision::Kill { payload: p, .. } = decide_kill(&kill("KILL 34"), "other", &reg, false)
    else {
        panic!("not answered by the server")
    };
    let sql = String::from_utf8_lossy(&p[1..]).into_owned();
    assert!(
        sql.contains("IF EXISTS (SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = 34)"),
        "{sql}"
    );
    assert!(!sql.contains("KILL"), "{sql}");
    let KillDecision::Kill { payload: p, .. } = decide_kill(&kill("KILL 34"), "other", &reg, true)
    else {
        panic!("not answered by the server")
    };
    assert!(p.ends_with(b"END IF; KILL CONNECTION 34; END"), "{p:?}");
    reg.set_backend_version("8.0.36");
    assert_eq!(
        decide_kill(&kill("KILL 34"), "other", &reg, false),
        KillDecision::Forward
    );
    reg.set_backend_version("5.5.5-10.11.19-MariaDB");
    // The thread's session gave it back: nothing is sent to it.
    victim.entry().clear_backend();
    assert_eq!(
        decide_kill(&kill("KILL 33"), "app", &reg, false),
        KillDecision::Nothing
    );
    assert_eq!(
        decide_kill(&kill("KILL 33"), "other", &reg, false),
        KillDecision::NotOwner { id: 33 }
    );
    let KillDecision::Kill { payload: p, .. } =
        decide_kill(&kill(&format!("KILL {id}")), "other", &reg, true)
    else {
        panic!("not sent to the server")
    };
    assert!(p.ends_with(b"; END IF; DO 0; END"), "{p:?}");
}

fn framed(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    write_packet(&mut v, seq, payload);
    v
}

#[test]
fn intercept_replaces_only_the_kill_packet() {
    let reg = Arc::new(Registry::default());
    let victim = reg.register(PROXY_ID_BASE + 5, -1).unwrap();
    victim.entry().set_leased("app", 12);
    let kill = framed(
        0,
        format!("\x03KILL QUERY {}", PROXY_ID_BASE + 5).as_bytes(),
    );
    let next = framed(0, b"\x03SELECT 1");
    let mut data = kill.clone();
    data.extend_from_slice(&next);
    let r = intercept(&data, "app", 0, &reg, 16384).unwrap();
    assert_eq!(r.replaces, kill.len());
    assert_eq!(r.packet, framed(0, b"\x03KILL QUERY 12"));
    // COM_PROCESS_KILL keeps its form.
    let mut p = vec![0x0c];
    p.extend_from_slice(&(PROXY_ID_BASE + 5).to_le_bytes());
    let r = intercept(&framed(0, &p), "app", 0, &reg, 16384).unwrap();
    assert_eq!(r.packet, framed(0, &[0x0c, 12, 0, 0, 0]));
    // Not ours, incomplete, not a command start, or no room: untouched.
    assert_eq!(intercept(&next, "app", 0, &reg, 16384), None);
    assert_eq!(
        intercept(&kill[..kill.len() - 1], "app", 0, &reg, 16384),
        None
    );
    assert_eq!(
        intercept(&framed(1, &kill[4..]), "app", 0, &reg, 16384),
        None
    );
    let fits = data.len() - kill.len() + framed(0, b"\x03KILL QUERY 12").len();
    assert!(intercept(&data, "app", 0, &reg, fits).is_some());
    assert_eq!(intercept(&data, "app", 0, &reg, fits - 1), None);
    // A KILL first in a multi-statement: the rest follows the rewrite.
    let multi = framed(
        0,
        format!("\x03kill {}; select sleep(0.05)", PROXY_ID_BASE + 5).as_bytes(),
    );
    let r = intercept(&multi, "app", 0, &reg, 16384).unwrap();
    assert_eq!(
        r.packet,
        framed(0, b"\x03KILL CONNECTION 12; select sleep(0.05)")
    );
    let r = intercept(&multi, "other", 0, &reg, 16384).unwrap();
    assert!(String::from_utf8_lossy(&r.packet).ends_with("'; select sleep(0.05)"));
    let unknown = framed(0, b"\x03KILL 2147483999");
    assert_eq!(intercept(&unknown, "app", 0, &reg, 16384), None);
}

#[test]
fn show_processlist_maps_ids_and_keeps_to_the_users_sessions() {
    let reg = Arc::new(Registry::default());
    let mine = reg.register(PROXY_ID_BASE + 1, -1).unwrap();
    mine.entry().set_leased("app", 21);
    let also_mine = reg.register(PROXY_ID_BASE + 3, -1).unwrap();
    also_mine.entry().set_leased("app", 23);
    let theirs = reg.register(PROXY_ID_BASE + 2, -1).unwrap();
    theirs.entry().set_leased("hashed", 22);
    assert_eq!(
        reg.sessions_of("app"),
        vec![(PROXY_ID_BASE + 1, 21), (PROXY_ID_BASE + 3, 23)]
    );
    let show = framed(0, b"\x03show processlist");
    let r = intercept(&show, "app", 0, &reg, 16384).unwrap();
    assert_eq!(r.replaces, show.len());
    let sql = String::from_utf8_lossy(&r.packet[5..]).into_owned();
    assert!(
        sql.starts_with(
            "SELECT CASE ID WHEN 21 THEN 2147483649 WHEN 23 THEN 2147483651 ELSE ID END AS `Id`"
        ),
        "{sql}"
    );
    // The own row shows the text as sent ("show processlist" in hex).
    assert!(
        sql.contains("CAST(X'73686F772070726F636573736C697374' AS CHAR)"),
        "{sql}"
    );
    assert!(
        sql.contains("LEFT(INFO, 100)") && sql.contains("CAST(PROGRESS AS DOUBLE) AS `Progress`")
    );
    assert!(
        sql.ends_with(" WHERE ID = CONNECTION_ID() OR ID IN (21,23)"),
        "{sql}"
    );
    // With per-user backend identity the server filters, but the
    // account's other threads are shown only to an account with PROCESS
    // (two proxy users may be one account); FULL keeps Info whole.
    let full = framed(0, b"\x03SHOW FULL PROCESSLIST");
    reg.set_server_checks_owner(true);
    let r = intercept(&full, "app", 0, &reg, 16384).unwrap();
    let sql = String::from_utf8_lossy(&r.packet[5..]).into_owned();
    assert!(!sql.contains("LEFT(INFO"), "{sql}");
    assert!(
        sql.contains(" WHERE ID = CONNECTION_ID() OR ID IN (21,23) OR USER <> LEFT(USER(), "),
        "{sql}"
    );
    assert!(sql.ends_with("AND PRIVILEGE_TYPE IN ('PROCESS'))"), "{sql}");
    // MySQL has no PROGRESS column.
    reg.set_backend_version("8.0.36");
    let r = intercept(&full, "app", 0, &reg, 16384).unwrap();
    assert!(!String::from_utf8_lossy(&r.packet).contains("PROGRESS"));
    // What does not fit is left out; the own row is always listed.
    let p = processlist_query(&ProcessList {
        full: false,
        original: b"show processlist",
        sessions: &[(PROXY_ID_BASE + 1, 21); 1000],
        only_these: true,
        hide_account_peers: false,
        mariadb: true,
        max_len: 1000,
    })
    .unwrap();
    assert!(p.len() <= 1000 && p.len() > 900, "{}", p.len());
    let none = processlist_query(&ProcessList {
        full: false,
        original: b"show processlist",
        sessions: &[],
        only_these: true,
        hide_account_peers: false,
        mariadb: true,
        max_len: 1000,
    })
    .unwrap();
    assert!(String::from_utf8_lossy(&none).contains("SELECT ID AS `Id`"));
    assert!(String::from_utf8_lossy(&none).ends_with(" WHERE ID = CONNECTION_ID()"));
}

#[test]
fn a_kill_in_flight_keeps_its_target_from_giving_the_connection_away() {
    let reg = Arc::new(Registry::default());
    let victim = reg.register(PROXY_ID_BASE + 9, -1).unwrap();
    victim.entry().set_leased("app", 40);
    let vid = victim.id();
    let r = intercept(
        &framed(0, format!("\x03KILL QUERY {vid}").as_bytes()),
        "app",
        0,
        &reg,
        16384,
    )
    .unwrap();
    assert_eq!(r.packet, framed(0, b"\x03KILL QUERY 40"));
    assert!(r.fence.is_some());
    // The victim's session may not give the connection back now: the
    // KILL could reach another session's statement on it.
    assert!(!victim.entry().try_clear_backend());
    assert_eq!(reg.lookup(vid).unwrap().backend_thread, Some(40));
    // A second KILL meanwhile fences it too; the lease moves on.
    let r2 = intercept(
        &framed(0, format!("\x03KILL {vid}").as_bytes()),
        "app",
        0,
        &reg,
        16384,
    )
    .unwrap();
    drop(r);
    assert!(!victim.entry().try_clear_backend());
    drop(r2);
    // Answered: it goes back, and a KILL now finds no thread to send to.
    assert!(victim.entry().try_clear_backend());
    assert_eq!(reg.lookup(vid).unwrap().backend_thread, None);
    let r = intercept(
        &framed(0, format!("\x03KILL QUERY {vid}").as_bytes()),
        "app",
        0,
        &reg,
        16384,
    )
    .unwrap();
    assert_eq!(r.packet, framed(0, b"\x03DO 0"));
    assert!(r.fence.is_none());
    // A session that ends with a KILL in flight learns it (and closes
    // the connection instead of pooling it).
    victim.entry().set_leased("app", 41);
    let f = intercept(
        &framed(0, format!("\x03KILL QUERY {vid}").as_bytes()),
        "app",
        0,
        &reg,
        16384,
    )
    .unwrap();
    victim.entry().set_leased("app", 42);
    assert_eq!(reg.lookup(vid).unwrap().backend_thread, Some(42));
    assert!(victim.entry().clear_backend());
    drop(f);
    victim.entry().set_leased("app", 43);
    assert!(!victim.entry().clear_backend());
    // Refusals and unknown ids hold no fence.
    victim.entry().set_leased("app", 44);
    let r = intercept(
        &framed(0, format!("\x03KILL {vid}").as_bytes()),
        "other",
        0,
        &reg,
        16384,
    )
    .unwrap();
    assert!(r.fence.is_none());
    drop(r);
    assert!(victim.entry().try_clear_backend());
}

#[test]
fn a_kill_connection_of_an_own_session_closes_its_client_first() {
    use std::sync::atomic::AtomicI32;
    // The driver's shutdown(2), recorded: which fd it was asked to shut.
    static SHUT: AtomicI32 = AtomicI32::new(-1);
    let reg = Arc::new(Registry::new(|fd| SHUT.store(fd, Ordering::SeqCst)));
    const VICTIM_FD: i32 = 1005;
    let victim = reg.register(PROXY_ID_BASE + 5, VICTIM_FD).unwrap();
    victim.entry().set_leased("app", 12);
    let killer = reg.register(PROXY_ID_BASE + 6, -1).unwrap();
    killer.entry().set_leased("app", 13);
    let vid = victim.id();
    // KILL QUERY, another user's KILL, and the killer's own id close nothing.
    for (sql, user, own) in [
        (format!("\x03KILL QUERY {vid}"), "app", killer.id()),
        (format!("\x03KILL {vid}"), "other", killer.id()),
        (format!("\x03KILL {vid}"), "app", vid),
    ] {
        let r = intercept(&framed(0, sql.as_bytes()), user, own, &reg, 16384);
        assert_eq!(r.unwrap().close_after_ok, None, "{sql} as {user}");
    }
    let r = intercept(
        &framed(0, format!("\x03KILL {vid}").as_bytes()),
        "app",
        killer.id(),
        &reg,
        16384,
    );
    let r = r.unwrap();
    assert_eq!(r.packet, framed(0, b"\x03KILL CONNECTION 12"));
    assert_eq!(r.close_after_ok, Some(vid));
    assert!(!victim.entry().is_killed());
    assert!(reg.close_client(vid));
    assert!(victim.entry().is_killed());
    // The victim's client socket is shut down at once.
    assert_eq!(SHUT.load(Ordering::SeqCst), VICTIM_FD);
    // Gone sessions are not touched.
    drop(victim);
    assert!(!reg.close_client(vid));
}

/// A client held as a direct descriptor has no fd another thread could shut down: the KILL
/// marks it and hands back the wake-up for its worker's ring (worker/direct.rs), once.
#[test]
fn a_direct_descriptor_client_is_killed_through_its_workers_ring() {
    let reg = Arc::new(Registry::default());
    let wake = RingWake {
        ring_fd: 42,
        user_data: 0xABCD,
    };
    let victim = reg
        .register(PROXY_ID_BASE + 9, ClientSock::Ring(wake))
        .unwrap();
    assert_eq!(reg.kill_client(PROXY_ID_BASE + 9), Killed::Wake(wake));
    assert!(victim.entry().is_killed());
    drop(victim);
    assert_eq!(reg.kill_client(PROXY_ID_BASE + 9), Killed::Gone);
}

#[test]
fn the_backend_server_and_its_login_quoting_are_kept() {
    use wire::constants::{SERVER_STATUS_ANSI_QUOTES, SERVER_STATUS_AUTOCOMMIT};
    use wire::lexer::Server;
    let r = Registry::default();
    assert_eq!(r.backend_server(), Server::Unknown);
    assert_eq!(r.backend_login_quoting(), 0);
    r.set_backend_version("5.5.5-10.11.19-MariaDB-0+deb12u1");
    assert_eq!(r.backend_server(), Server::MariaDb(101119));
    r.set_backend_version("8.0.36");
    assert_eq!(r.backend_server(), Server::MySql(80036));
    r.set_backend_login_status(SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_ANSI_QUOTES);
    assert_eq!(r.backend_login_quoting(), SERVER_STATUS_ANSI_QUOTES);
}

//! A change of writer: where new connections go, what happens to the
//! idle and leased ones of the old server, and leases with no writer.

use super::*;

fn to(server: u16) -> Option<Target> {
    Some(Target {
        server,
        addr: format!("127.0.0.1:{}", 100 + server).parse().unwrap(),
    })
}

fn retarget(h: &mut Harness, target: Option<Target>) -> Vec<PoolEvent> {
    let mut out = Vec::new();
    h.pool.retarget(target, &mut out);
    h.drive(out)
}

#[test]
fn idle_connections_of_the_old_writer_close_and_new_ones_open_to_the_new() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    h.give_back(b);
    assert_eq!(h.pool.server_of(b), Some(0));
    retarget(&mut h, to(1));
    assert_eq!(h.pool.len(), 0, "the idle one closed");
    assert_eq!(h.open.open(), 0, "its unit of the cap is free");
    let (_, b2) = leased(&h.lease(req(2, key))).unwrap();
    assert_eq!(h.pool.server_of(b2), Some(1));
}

#[test]
fn a_connection_leased_across_the_change_closes_when_given_back() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    retarget(&mut h, to(1));
    assert_eq!(
        h.pool.len(),
        1,
        "still the session's, to the end of its transaction"
    );
    h.give_back(b);
    assert_eq!(h.pool.len(), 0);
    let (_, b2) = leased(&h.lease(req(2, key))).unwrap();
    assert_eq!(h.pool.server_of(b2), Some(1));
}

#[test]
fn with_no_writer_a_lease_waits_and_is_served_when_one_is_named() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    retarget(&mut h, None);
    assert!(
        h.lease(req(1, key)).is_empty(),
        "nothing to open to: it waits"
    );
    assert_eq!(h.pool.waiting(), 1);
    assert_eq!(h.pool.len(), 0);
    retarget(&mut h, to(2));
    let ev = h.serve();
    let (s, b) = leased(&ev).expect("served by the new writer");
    assert_eq!(s, sid(1));
    assert_eq!(h.pool.server_of(b), Some(2));
}

#[test]
fn with_no_writer_a_waiter_times_out_with_an_error() {
    let mut h = Harness::new(10, 0);
    retarget(&mut h, None);
    assert!(h.lease(req(1, PoolKey::default_warm())).is_empty());
    h.now += Duration::from_secs(6);
    let ev = h.tick();
    assert_eq!(failed(&ev).map(|(s, _)| s), Some(sid(1)));
}

#[test]
fn the_same_writer_again_changes_nothing() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    h.give_back(b);
    let same = h.pool.target();
    assert!(retarget(&mut h, same).is_empty());
    assert_eq!(h.pool.len(), 1);
}

/// Several servers: the lease's connect to the writer is refused.
fn refused_lease(h: &mut Harness, session: u32) -> Vec<PoolEvent> {
    let mut out = Vec::new();
    h.pool
        .lease(req(session, PoolKey::default_warm()), h.now, &mut out);
    let PoolEvent::Open { key, request } = out.remove(0) else {
        panic!("expected an open")
    };
    let mut ev = Vec::new();
    let id = h.pool.insert_opening(key, request, h.now, &mut ev);
    let mut ev = Vec::new();
    let refused = Completion::Failed(errno::ECONNREFUSED);
    h.pool.on_connect(id, refused, h.now, &mut ev);
    h.drive(ev)
}

fn cluster_harness() -> Harness {
    let mut h = Harness::new(10, 0);
    h.pool.cfg.wait_for_writer = true;
    h
}

#[test]
fn several_servers_a_refused_connect_waits_for_the_next_writer() {
    let mut h = cluster_harness();
    let ev = refused_lease(&mut h, 1);
    assert_eq!(failed(&ev), None, "no error: it waits");
    assert_eq!(h.pool.waiting(), 1);
    // Held off: no connect storm against the dead writer.
    assert!(h.serve().is_empty());
    assert_eq!(h.pool.len(), 0);
    // The monitor names the promoted replica.
    retarget(&mut h, to(1));
    let (s, b) = leased(&h.serve()).expect("served by the new writer");
    assert_eq!(s, sid(1));
    assert_eq!(h.pool.server_of(b), Some(1));
}

#[test]
fn several_servers_the_wait_is_bounded() {
    let mut h = cluster_harness();
    assert_eq!(failed(&refused_lease(&mut h, 1)), None);
    // The waiter times out with the wait's error; past
    // --backend-wait-timeout of refused connects, a refusal is an error
    // at once again.
    h.now += Duration::from_secs(6);
    let ev = h.tick();
    assert_eq!(failed(&ev).map(|(s, _)| s), Some(sid(1)));
    assert_eq!(failed(&refused_lease(&mut h, 2)), Some((sid(2), 1105)));
}

#[test]
fn with_no_writer_a_waiter_gets_the_writer_error_after_the_writer_wait() {
    let mut h = cluster_harness();
    h.pool.cfg.writer_wait_timeout = Duration::from_secs(2);
    retarget(&mut h, None);
    assert!(h.lease(req(1, PoolKey::default_warm())).is_empty());
    h.now += Duration::from_millis(1900);
    assert_eq!(failed(&h.tick()), None, "still within the writer wait");
    h.now += Duration::from_millis(200);
    let ev = h.tick();
    assert_eq!(failed(&ev), Some((sid(1), 1105)));
    let text = ev
        .iter()
        .find_map(|e| match e {
            PoolEvent::LeaseFailed { err_payload, .. } => {
                Some(String::from_utf8_lossy(err_payload).into_owned())
            }
            _ => None,
        })
        .unwrap();
    assert!(text.contains("--writer-wait-timeout"), "{text}");
    assert_eq!(h.pool.waiting(), 0);
}

#[test]
fn with_a_writer_a_waiter_waits_the_whole_backend_wait() {
    // Cap full: the wait is for a free connection, not for a writer.
    let mut h = Harness::new(1, 0);
    h.pool.cfg.wait_for_writer = true;
    h.pool.cfg.writer_wait_timeout = Duration::from_secs(1);
    let key = PoolKey::default_warm();
    leased(&h.lease(req(1, key))).unwrap();
    assert!(h.lease(req(2, key)).is_empty());
    h.now += Duration::from_secs(2);
    assert_eq!(failed(&h.tick()), None, "not the writer wait");
    h.now += Duration::from_secs(4);
    assert_eq!(failed(&h.tick()), Some((sid(2), 1040)));
}

#[test]
fn one_server_a_refused_connect_is_an_error_at_once() {
    let mut h = Harness::new(10, 0);
    assert_eq!(failed(&refused_lease(&mut h, 1)), Some((sid(1), 1105)));
}

#[test]
fn a_switchover_hold_keeps_even_idle_connections_until_it_ends() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    h.give_back(b);
    h.pool.hold(true);
    assert!(h.lease(req(2, key)).is_empty(), "held: it waits");
    assert!(h.serve().is_empty());
    h.pool.hold(false);
    assert_eq!(leased(&h.serve()), Some((sid(2), b)));
}

fn with_schema(i: u32) -> LeaseRequest {
    LeaseRequest {
        schema: Some("app".into()),
        ..req(i, PoolKey::default_warm())
    }
}

/// Two connections to the writer, idle.
fn two_idle(h: &mut Harness) -> (BackendId, BackendId) {
    let key = PoolKey::default_warm();
    let (_, a) = leased(&h.lease(req(1, key))).unwrap();
    let (_, b) = leased(&h.lease(req(2, key))).unwrap();
    h.give_back(a);
    h.give_back(b);
    (a, b)
}

#[test]
fn several_servers_a_lease_whose_setup_dies_is_served_by_the_next_connection() {
    let mut h = cluster_harness();
    let (a, b) = two_idle(&mut h);
    h.reset_setups = true;
    let ev = h.lease(with_schema(3));
    assert_eq!(
        failed(&ev),
        None,
        "nothing of the command was sent: no error"
    );
    assert_eq!(leased(&ev), None);
    assert_eq!(h.pool.waiting(), 1, "back in the queue");
    assert_eq!(h.pool.len(), 1, "the reset connection closed");
    h.reset_setups = false;
    let (s, c) = leased(&h.serve()).expect("served by the other idle connection");
    assert_eq!(s, sid(3));
    assert!(c == a || c == b);
    assert_eq!(h.pool.conn(c).and_then(|c| c.schema()), Some("app"));
    assert_eq!(h.pool.waiting(), 0);
    assert_eq!(h.open.open(), 1, "the closed one's unit went back");
}

#[test]
fn several_servers_a_request_whose_setup_dies_keeps_its_place() {
    // The cap holds two: one connection busy, one idle.
    let mut h = Harness::new(2, 0);
    h.pool.cfg.wait_for_writer = true;
    let key = PoolKey::default_warm();
    let (_, busy) = leased(&h.lease(req(1, key))).unwrap();
    let (_, a) = leased(&h.lease(req(2, key))).unwrap();
    h.give_back(a);
    h.pool.hold(true);
    assert!(h.lease(with_schema(3)).is_empty());
    assert!(h.lease(with_schema(4)).is_empty());
    h.pool.hold(false);
    // 3 gets the idle connection and its setup dies; 4 waits at the cap.
    h.reset_setups = true;
    let ev = h.serve();
    assert_eq!(failed(&ev), None);
    assert_eq!(h.pool.waiting(), 2);
    assert_eq!(h.pool.first_waiter(key), Some(sid(3)), "3 was first");
    h.reset_setups = false;
    // The busy connection comes back: it is 3's, the first.
    h.give_back(busy);
    let ev = h.serve();
    assert_eq!(leased(&ev), Some((sid(3), busy)));
    assert_eq!(h.pool.first_waiter(key), Some(sid(4)));
}

#[test]
fn several_servers_a_server_that_resets_every_setup_fails_the_lease_in_the_writer_wait() {
    let mut h = cluster_harness();
    h.pool.cfg.writer_wait_timeout = Duration::from_secs(3);
    h.reset_setups = true;
    let mut ev = h.lease(with_schema(1));
    let mut tries = 1;
    while failed(&ev).is_none() {
        assert!(tries < 10, "retried without bound");
        assert_eq!(h.pool.waiting(), 1);
        h.now += BACKEND_RETRY;
        ev = h.serve();
        ev.extend(h.tick());
        tries += 1;
    }
    assert_eq!(failed(&ev), Some((sid(1), 1105)));
    assert!(tries >= 3, "retried within the writer wait: {tries}");
    assert_eq!(h.pool.waiting(), 0);
    assert_eq!((h.pool.len(), h.open.open()), (0, 0), "nothing kept");
}

#[test]
fn one_server_a_lease_whose_setup_dies_fails_as_before() {
    let mut h = Harness::new(10, 0);
    two_idle(&mut h);
    h.reset_setups = true;
    let ev = h.lease(with_schema(3));
    assert_eq!(failed(&ev), Some((sid(3), 1105)));
    assert_eq!(h.pool.waiting(), 0);
}

#[test]
fn an_error_answer_to_a_setup_is_the_sessions_even_with_several_servers() {
    let mut h = cluster_harness();
    let key = PoolKey::default_warm();
    let (_, a) = leased(&h.lease(req(1, key))).unwrap();
    h.give_back(a);
    let mut out = Vec::new();
    h.pool.lease(with_schema(3), h.now, &mut out);
    assert_eq!(out, vec![PoolEvent::CheckIdle(a)]);
    let mut out = Vec::new();
    h.pool.idle_checked(a, true, h.now, &mut out);
    let mut out = Vec::new();
    h.pool.on_write(a, Completion::Done(8), h.now, &mut out);
    // Not the answer COM_INIT_DB takes: a broken connection, but no loss.
    let eof = framed(1, &[0xfe, 0, 0, 2, 0]);
    let mut out = Vec::new();
    h.pool.on_read(
        a,
        Completion::Done(eof.len()),
        &eof,
        BUF_CAPACITY,
        h.now,
        &mut out,
    );
    assert_eq!(failed(&h.drive(out)), Some((sid(3), 1105)));
    assert_eq!(h.pool.waiting(), 0);
}

#[test]
fn a_session_gone_while_its_setup_runs_is_not_served_again() {
    let mut h = cluster_harness();
    let key = PoolKey::default_warm();
    let (_, a) = leased(&h.lease(req(1, key))).unwrap();
    h.give_back(a);
    let mut out = Vec::new();
    h.pool.lease(with_schema(3), h.now, &mut out);
    assert_eq!(out, vec![PoolEvent::CheckIdle(a)]);
    let mut out = Vec::new();
    h.pool.idle_checked(a, true, h.now, &mut out);
    assert!(
        matches!(out[..], [PoolEvent::Io(_, BackendOp::Send(_))]),
        "{out:?}"
    );
    // The client closes while COM_INIT_DB is out; then the server dies.
    h.pool.cancel(sid(3));
    let mut out = Vec::new();
    h.pool.on_write(a, Completion::Done(8), h.now, &mut out);
    let reset = Completion::Failed(errno::ECONNRESET);
    let mut out = Vec::new();
    h.pool.on_read(a, reset, &[], BUF_CAPACITY, h.now, &mut out);
    h.drive(out);
    assert_eq!(h.pool.waiting(), 0, "nobody to serve");
    assert!(h.serve().is_empty());
    assert_eq!((h.pool.len(), h.open.open()), (0, 0));
}

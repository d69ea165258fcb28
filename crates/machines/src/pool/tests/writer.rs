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

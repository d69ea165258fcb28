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

//! The check of an idle connection at its lease, answered by hand: the
//! harness's driver is bypassed for the lease itself, so that each test
//! says what the peek found, and when.

use super::*;

/// What the pool returns to a lease, not carried out.
fn ask(h: &mut Harness, r: LeaseRequest) -> Vec<PoolEvent> {
    let mut out = Vec::new();
    h.pool.lease(r, h.now, &mut out);
    out
}

/// The driver's answer to a check, and what follows from it carried out.
fn answer(h: &mut Harness, id: BackendId, alive: bool) -> Vec<PoolEvent> {
    let mut out = Vec::new();
    h.pool.idle_checked(id, alive, h.now, &mut out);
    h.drive(out)
}

fn checked(events: &[PoolEvent]) -> Vec<BackendId> {
    events
        .iter()
        .filter_map(|e| match e {
            PoolEvent::CheckIdle(id) => Some(*id),
            _ => None,
        })
        .collect()
}

fn idle_gauge(h: &Harness) -> i64 {
    h.pool.m().backend_idle.load(Relaxed)
}

/// One connection of `key`, idle, leased last to session 1.
fn one_idle(h: &mut Harness, key: PoolKey) -> BackendId {
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    h.give_back(b);
    b
}

/// One idle connection, taken for session 2's lease and checked for it;
/// then session 2 leaves before the answer.
fn checked_for_a_session_that_left(h: &mut Harness, key: PoolKey) -> BackendId {
    let b = one_idle(h, key);
    assert_eq!(checked(&ask(h, req(2, key))), vec![b]);
    h.pool.cancel(sid(2));
    b
}

/// Two connections of `key`, both idle, leased last to sessions 1 and 2.
fn two_idle(h: &mut Harness, key: PoolKey) -> (BackendId, BackendId) {
    let (_, a) = leased(&h.lease(req(1, key))).unwrap();
    let (_, b) = leased(&h.lease(req(2, key))).unwrap();
    h.give_back(a);
    h.give_back(b);
    (a, b)
}

#[test]
fn an_idle_connection_is_leased_only_once_its_check_says_alive() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let b = one_idle(&mut h, key);
    assert_eq!(idle_gauge(&h), 1);
    let ev = ask(&mut h, req(2, key));
    assert_eq!(ev, vec![PoolEvent::CheckIdle(b)], "nothing but the check");
    assert_eq!(idle_gauge(&h), 0, "being checked is not idle");
    let ev = answer(&mut h, b, true);
    assert_eq!(leased(&ev), Some((sid(2), b)));
    assert_eq!(h.open.open(), 1, "no open");
}

#[test]
fn a_dead_idle_connection_is_discarded_and_the_next_one_checked() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let (a, b) = two_idle(&mut h, key);
    // LIFO: the one given back last is checked first.
    assert_eq!(checked(&ask(&mut h, req(3, key))), vec![b]);
    // The harness's driver answers the next check: that server is there.
    let ev = answer(&mut h, b, false);
    assert!(
        ev.iter()
            .any(|e| matches!(e, PoolEvent::ClosedIdle { session, .. } if *session == sid(2))),
        "its last session hears of it: {ev:?}"
    );
    assert_eq!(leased(&ev), Some((sid(3), a)), "the next idle one");
    assert_eq!(h.pool.len(), 1, "the dead one is gone");
    assert_eq!(idle_gauge(&h), 0);
}

#[test]
fn a_dead_idle_connection_with_none_left_opens_one() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let b = one_idle(&mut h, key);
    assert_eq!(checked(&ask(&mut h, req(1, key))), vec![b]);
    let ev = answer(&mut h, b, false);
    assert!(
        !ev.iter().any(|e| matches!(e, PoolEvent::ClosedIdle { .. })),
        "the session leasing is not told of its own last connection"
    );
    let (s, fresh) = leased(&ev).expect("a new connection for it");
    assert_eq!(s, sid(1));
    assert_ne!(fresh, b);
}

#[test]
fn a_waiter_whose_checked_connection_was_dead_keeps_its_place() {
    let mut h = Harness::new(1, 0);
    let key = PoolKey::default_warm();
    let (_, b) = leased(&h.lease(req(1, key))).unwrap();
    assert!(h.lease(req(2, key)).is_empty(), "queued");
    assert!(h.lease(req(3, key)).is_empty(), "queued behind 2");
    let mut out = Vec::new();
    h.pool.release_kept(b, None, h.now, &mut out);
    h.pool.serve_waiters(h.now, &mut out);
    assert_eq!(checked(&out), vec![b], "checked for 2");
    assert_eq!(h.pool.waiting(), 1);
    // Dead: at the cap, 2 waits again, before 3, for the unit the close
    // frees.
    let ev = answer(&mut h, b, false);
    assert!(leased(&ev).is_none());
    assert_eq!(h.pool.waiting(), 2);
    assert_eq!(h.pool.first_waiter(key), Some(sid(2)));
    let ev = h.serve();
    assert_eq!(leased(&ev).map(|l| l.0), Some(sid(2)));
}

#[test]
fn a_connection_checked_for_a_session_that_left_goes_back_idle() {
    let (mut h, key) = (Harness::new(10, 0), PoolKey::default_warm());
    let b = checked_for_a_session_that_left(&mut h, key);
    let ev = answer(&mut h, b, true);
    assert!(leased(&ev).is_none(), "nobody to lease it to");
    assert_eq!(idle_gauge(&h), 1, "idle again");
    assert!(h.pool.wants_serving(), "and the waiters may have it");
    let ev = h.lease(req(3, key));
    assert_eq!(leased(&ev), Some((sid(3), b)));
}

#[test]
fn a_dead_connection_checked_for_a_session_that_left_is_only_discarded() {
    let (mut h, key) = (Harness::new(10, 0), PoolKey::default_warm());
    let b = checked_for_a_session_that_left(&mut h, key);
    let ev = answer(&mut h, b, false);
    assert!(ev.iter().all(|e| !matches!(
        e,
        PoolEvent::Open { .. } | PoolEvent::Leased { .. } | PoolEvent::CheckIdle(_)
    )));
    assert_eq!(h.pool.len(), 0);
    assert_eq!(h.pool.waiting(), 0);
}

#[test]
fn waiters_served_from_one_batch_each_get_their_own_check() {
    let mut h = Harness::new(2, 0);
    let key = PoolKey::default_warm();
    let (_, a) = leased(&h.lease(req(1, key))).unwrap();
    let (_, b) = leased(&h.lease(req(2, key))).unwrap();
    assert!(h.lease(req(3, key)).is_empty());
    assert!(h.lease(req(4, key)).is_empty());
    let mut out = Vec::new();
    h.pool.release_kept(a, None, h.now, &mut out);
    h.pool.release_kept(b, None, h.now, &mut out);
    h.pool.serve_waiters(h.now, &mut out);
    let checks = checked(&out);
    assert_eq!(checks.len(), 2, "{out:?}");
    assert_eq!(h.pool.waiting(), 0);
    let first = answer(&mut h, checks[0], true);
    let second = answer(&mut h, checks[1], true);
    assert_eq!(leased(&first), Some((sid(3), checks[0])));
    assert_eq!(leased(&second), Some((sid(4), checks[1])));
}

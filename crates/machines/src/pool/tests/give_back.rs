//! Ring mode's give-back carried out once the receive it cancelled has
//! ended: the pool held what the give-back asked for and makes the pool
//! calls itself; clean or not, and whether the driver must shut the socket
//! first.

use super::*;
use crate::prepared::StmtKey;

/// A connection leased to session 1, given back with `asked` while its
/// receive is cancelled; that receive then ends, `clean` or not. What the
/// pool returns (not carried out), and whether the driver shuts first.
fn finish(
    asked: Option<PendingGiveBack>,
    clean: bool,
) -> (Harness, BackendId, Vec<PoolEvent>, bool) {
    let mut h = Harness::new(10, 0);
    let (_, b) = leased(&h.lease(req(1, PoolKey::default_warm()))).unwrap();
    if let Some(asked) = asked {
        h.pool.defer_give_back(b, asked);
    }
    let mut out = Vec::new();
    let shut = h.pool.finish_give_back(b, clean, h.now, &mut out);
    (h, b, out, shut)
}

fn park(reset: bool, ask: bool) -> PendingGiveBack {
    PendingGiveBack::Park(Park {
        kept: None,
        reset,
        ask: ask.then_some(sid(1)),
    })
}

fn closes(out: &[PoolEvent], b: BackendId) -> bool {
    out.contains(&PoolEvent::Io(b, BackendOp::Close))
}

fn sends(out: &[PoolEvent], b: BackendId) -> bool {
    out.iter()
        .any(|e| matches!(e, PoolEvent::Io(id, BackendOp::Send(_)) if *id == b))
}

fn last_insert_id(out: &[PoolEvent]) -> Option<Option<u64>> {
    out.iter().find_map(|e| match e {
        PoolEvent::LastInsertId { value, .. } => Some(*value),
        _ => None,
    })
}

#[test]
fn a_release_is_a_reset_when_clean_and_a_close_when_not() {
    let (h, b, out, shut) = finish(Some(PendingGiveBack::Release), true);
    assert!(!shut);
    assert!(h.pool.conn(b).unwrap().is_resetting(), "{out:?}");
    let (_, b, out, shut) = finish(Some(PendingGiveBack::Release), false);
    assert!(!shut, "the pool closes it itself");
    assert!(closes(&out, b));
}

#[test]
fn nothing_held_is_a_release() {
    let (h, b, _, shut) = finish(None, true);
    assert!(!shut);
    assert!(h.pool.conn(b).unwrap().is_resetting());
}

#[test]
fn a_relet_resets_in_place_and_a_dirty_one_is_shut_first() {
    let (mut h, b, out, shut) = finish(Some(PendingGiveBack::Relet), true);
    assert!(!shut);
    let ev = h.drive(out);
    assert!(
        ev.iter()
            .any(|e| matches!(e, PoolEvent::Relet { session, backend, .. } if *session == sid(1) && *backend == b)),
        "{ev:?}"
    );
    let (_, b, out, shut) = finish(Some(PendingGiveBack::Relet), false);
    assert!(shut, "its reset must fail on a shut socket");
    assert!(sends(&out, b), "the reset is still asked for: {out:?}");
}

#[test]
fn a_park_that_keeps_the_connection_makes_it_idle_when_clean() {
    let (h, b, out, shut) = finish(Some(park(false, false)), true);
    assert!(!shut);
    assert!(out.is_empty(), "{out:?}");
    assert!(h.pool.conn(b).unwrap().is_idle());
    assert_eq!(h.pool.m().backend_idle.load(Relaxed), 1);
    let (h, b, out, shut) = finish(Some(park(false, false)), false);
    assert!(!shut);
    assert!(closes(&out, b));
    assert_eq!(h.pool.m().backend_idle.load(Relaxed), 0);
}

#[test]
fn a_park_with_a_reset_resets_when_clean() {
    let (h, b, _, shut) = finish(Some(park(true, false)), true);
    assert!(!shut);
    assert!(h.pool.conn(b).unwrap().is_resetting());
    let (_, b, out, _) = finish(Some(park(true, false)), false);
    assert!(closes(&out, b));
}

#[test]
fn a_park_that_asks_reads_last_insert_id_when_clean_and_answers_none_when_not() {
    let (_, b, out, shut) = finish(Some(park(false, true)), true);
    assert!(!shut);
    assert!(sends(&out, b), "SELECT LAST_INSERT_ID(): {out:?}");
    assert_eq!(last_insert_id(&out), None, "the answer comes later");
    let (_, b, out, shut) = finish(Some(park(false, true)), false);
    assert!(!shut);
    assert_eq!(last_insert_id(&out), Some(None));
    assert!(closes(&out, b));
}

#[test]
fn a_statement_is_prepared_and_a_dirty_connection_shut_first() {
    let asked = || PendingGiveBack::Statement {
        key: Arc::new(StmtKey {
            schema: None,
            settings: 0,
            sql: b"SELECT ?".to_vec(),
        }),
        want_response: true,
        types: None,
    };
    let (_, b, out, shut) = finish(Some(asked()), true);
    assert!(!shut);
    assert!(sends(&out, b), "COM_STMT_PREPARE: {out:?}");
    let (_, b, out, shut) = finish(Some(asked()), false);
    assert!(shut);
    assert!(sends(&out, b));
}

#[test]
fn a_lease_that_waited_for_the_receive_is_handed_over_and_a_dirty_one_shut_first() {
    let leased_again = |out: &[PoolEvent], b| {
        out == [PoolEvent::Leased {
            session: sid(2),
            backend: b,
        }]
    };
    let (_, b, out, shut) = finish(Some(PendingGiveBack::Lease(sid(2))), true);
    assert!(!shut);
    assert!(leased_again(&out, b), "{out:?}");
    let (_, b, out, shut) = finish(Some(PendingGiveBack::Lease(sid(2))), false);
    assert!(shut, "the session's relay finds the socket shut");
    assert!(leased_again(&out, b));
}

#[test]
fn a_held_give_back_is_forgotten_with_its_connection() {
    let mut h = Harness::new(10, 0);
    let (_, b) = leased(&h.lease(req(1, PoolKey::default_warm()))).unwrap();
    h.pool.defer_give_back(b, PendingGiveBack::Relet);
    h.release(b, false);
    assert!(h.pool.give_backs.is_empty());
}

//! Causal reads: the wait runs on a connection to a replica only, and a
//! wait that does not reach sends the read to the writer.

use super::*;
use crate::causal::CausalWait;
use crate::ids::LeaseSetup;
use wire::gtid::GtidPos;

thread_local! {
    /// What the "replica" answers MASTER_GTID_WAIT with (the row).
    static ANSWER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(b"\x010".to_vec());
}

/// The canned answer to a write that is a causal wait (alone: these
/// leases set nothing else up).
pub(super) fn wait_answer(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.windows(16).any(|w| w == b"MASTER_GTID_WAIT") {
        return None;
    }
    let row = ANSWER.with(|a| a.borrow().clone());
    let mut v = framed(1, &[1]);
    v.extend(framed(
        2,
        b"\x03def\x00\x00\x00\x01x\x00\x0c\x3f\x00\x15\x00\x00\x00\x08\xa1\x00\x00\x00\x00",
    ));
    v.extend(framed(3, &[0xfe, 0, 0, 2, 0]));
    v.extend(framed(4, &row));
    v.extend(framed(5, &[0xfe, 0, 0, 2, 0]));
    Some(v)
}

fn causal_req(i: u32, key: PoolKey) -> LeaseRequest {
    let pos = GtidPos::parse("0-1-7").unwrap();
    LeaseRequest {
        setup: Some(Box::new(LeaseSetup {
            causal: Some(CausalWait::Session(Arc::new(pos))),
            ..LeaseSetup::default()
        })),
        ..req(i, key)
    }
}

fn waits_sent() -> usize {
    SENT.with(|s| {
        s.borrow()
            .iter()
            .filter(|b| b.windows(16).any(|w| w == b"MASTER_GTID_WAIT"))
            .count()
    })
}

/// The key of a read the split sends to replica 2.
fn on_replica() -> PoolKey {
    PoolKey {
        server: Some(2),
        ..PoolKey::default_warm()
    }
}

/// An idle connection to replica 2.
fn idle_replica_conn(h: &mut Harness) -> BackendId {
    let (_, b) = leased(&h.lease(req(1, on_replica()))).unwrap();
    h.give_back(b);
    assert_eq!(h.pool.server_of(b), Some(2));
    b
}

#[test]
fn on_a_replica_the_wait_runs_first_and_a_reached_wait_leases_it() {
    let mut h = Harness::new(10, 0);
    let b = idle_replica_conn(&mut h);
    let before = waits_sent();
    ANSWER.with(|a| *a.borrow_mut() = b"\x010".to_vec());
    let ev = h.lease(causal_req(2, on_replica()));
    assert_eq!(leased(&ev), Some((sid(2), b)), "{ev:?}");
    assert_eq!(waits_sent(), before + 1);
    let s = h.pool.metrics.snapshot();
    assert_eq!(s.causal_wait.count, 1);
    assert_eq!(s.causal_fallbacks_total, 0);
}

#[test]
fn a_wait_that_times_out_sends_the_read_to_the_writer() {
    for answer in [&b"\x02-1"[..], b"\xfb"] {
        let mut h = Harness::new(10, 0);
        let b = idle_replica_conn(&mut h);
        ANSWER.with(|a| *a.borrow_mut() = answer.to_vec());
        let before = waits_sent();
        let ev = h.lease(causal_req(2, on_replica()));
        let (s, writer) = leased(&ev).expect("leased again, on the writer");
        assert_eq!(s, sid(2));
        assert_ne!(writer, b);
        assert_eq!(h.pool.server_of(writer), Some(0));
        assert_eq!(waits_sent(), before + 1, "no wait on the writer");
        let snap = h.pool.metrics.snapshot();
        assert_eq!(
            (snap.causal_wait.count, snap.causal_fallbacks_total),
            (1, 1)
        );
        // The replica's connection is idle again, clean, for the next
        // read; nothing leaked.
        assert_eq!(h.pool.leased_to(b), None);
        assert!(h.pool.conn(b).is_some_and(|c| c.is_idle()));
        h.give_back(writer);
        assert_eq!(h.pool.len(), 2, "{answer:?}");
        assert_eq!(h.open.open(), 2);
        let (_, again) = leased(&h.lease(req(3, on_replica()))).unwrap();
        assert_eq!(again, b, "the replica's connection serves reads again");
    }
}

#[test]
fn the_writer_never_runs_the_wait() {
    let mut h = Harness::new(10, 0);
    let key = PoolKey::default_warm();
    let before = waits_sent();
    let (_, b) = leased(&h.lease(causal_req(1, key))).unwrap();
    h.give_back(b);
    let (_, again) = leased(&h.lease(causal_req(2, key))).unwrap();
    assert_eq!(again, b);
    assert_eq!(waits_sent(), before);
    assert_eq!(h.pool.metrics.snapshot().causal_wait.count, 0);
}

#[test]
fn a_blind_session_on_a_replica_goes_to_the_writer_without_a_wait() {
    let mut h = Harness::new(10, 0);
    let b = idle_replica_conn(&mut h);
    let before = waits_sent();
    let mut r = req(2, on_replica());
    r.setup = Some(Box::new(LeaseSetup {
        causal: Some(CausalWait::Writer),
        ..LeaseSetup::default()
    }));
    let (s, writer) = leased(&h.lease(r)).unwrap();
    assert_eq!(s, sid(2));
    assert_ne!(writer, b);
    assert_eq!(waits_sent(), before);
    assert_eq!(h.pool.metrics.snapshot().causal_fallbacks_total, 1);
}

#[test]
fn a_session_gone_during_the_wait_is_not_leased_again() {
    let mut h = Harness::new(10, 0);
    let b = idle_replica_conn(&mut h);
    ANSWER.with(|a| *a.borrow_mut() = b"\x02-1".to_vec());
    // The wait is sent; the session closes before its answer.
    let mut out = Vec::new();
    h.pool.lease(causal_req(2, on_replica()), h.now, &mut out);
    let mut first = Vec::new();
    for e in out {
        match e {
            PoolEvent::CheckIdle(id) => h.pool.idle_checked(id, true, h.now, &mut first),
            other => first.push(other),
        }
    }
    h.pool.cancel(sid(2));
    let ev = h.drive(first);
    assert_eq!(leased(&ev), None, "{ev:?}");
    assert_eq!(h.pool.leased_to(b), None);
    assert_eq!(h.pool.waiting(), 0);
}

#[test]
fn a_replica_lost_during_the_wait_sends_the_read_to_the_writer() {
    let mut h = Harness::new(10, 0);
    let b = idle_replica_conn(&mut h);
    let mut out = Vec::new();
    h.pool.lease(causal_req(2, on_replica()), h.now, &mut out);
    let mut next = Vec::new();
    for e in out {
        if let PoolEvent::CheckIdle(id) = e {
            h.pool.idle_checked(id, true, h.now, &mut next);
        }
    }
    let sent = next.iter().find_map(|e| match e {
        PoolEvent::Io(id, BackendOp::Send(bytes)) if *id == b => Some(bytes.len()),
        _ => None,
    });
    let mut ev = Vec::new();
    h.pool
        .on_write(b, Completion::Done(sent.expect("the wait")), h.now, &mut ev);
    // The replica goes away before it answers.
    let mut ev = Vec::new();
    h.pool
        .on_read(b, Completion::Done(0), &[], BUF_CAPACITY, h.now, &mut ev);
    let ev = h.drive(ev);
    let (s, writer) = leased(&ev).expect("the writer answers the read");
    assert_eq!(s, sid(2));
    assert_eq!(h.pool.server_of(writer), Some(0));
    assert_eq!(failed(&ev), None, "no error for the read");
    assert!(h.pool.conn(b).is_none_or(|c| c.is_closed()));
    assert_eq!(h.pool.metrics.snapshot().causal_fallbacks_total, 1);
}

#[test]
fn a_position_a_replica_confirmed_is_not_waited_for_again() {
    let mut h = Harness::new(10, 0);
    let b = idle_replica_conn(&mut h);
    ANSWER.with(|a| *a.borrow_mut() = b"\x010".to_vec());
    let before = waits_sent();
    let (_, got) = leased(&h.lease(causal_req(2, on_replica()))).unwrap();
    assert_eq!(got, b);
    h.give_back(b);
    // The same position (another read of the session, or one that needs
    // less): no wait; more: a wait.
    let (_, got) = leased(&h.lease(causal_req(3, on_replica()))).unwrap();
    assert_eq!(got, b);
    assert_eq!(waits_sent(), before + 1);
    h.give_back(b);
    let mut r = causal_req(4, on_replica());
    if let Some(setup) = r.setup.as_mut() {
        setup.causal = Some(CausalWait::Session(Arc::new(
            GtidPos::parse("0-1-8").unwrap(),
        )));
    }
    assert_eq!(leased(&h.lease(r)).map(|(_, b)| b), Some(b));
    assert_eq!(waits_sent(), before + 2);
    assert_eq!(h.pool.metrics.snapshot().causal_wait.count, 2);
}

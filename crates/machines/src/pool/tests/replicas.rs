//! `--read-write-split`: connections for reads, keyed by their replica,
//! beside the writer's: where they open, what a change of writer does to
//! them, a replica that refuses, and their share of the cap.

use super::*;

fn on(server: u8) -> PoolKey {
    PoolKey {
        server: Some(server),
        ..PoolKey::default_warm()
    }
}

fn retarget(h: &mut Harness, server: u16) {
    let mut out = Vec::new();
    let target = Some(Target {
        server,
        addr: format!("127.0.0.1:{}", 100 + server).parse().unwrap(),
    });
    h.pool.retarget(target, &mut out);
    h.drive(out);
}

#[test]
fn a_reads_connection_opens_to_its_replica_and_serves_only_its_key() {
    let mut h = Harness::new(10, 0);
    let (_, r) = leased(&h.lease(req(1, on(2)))).unwrap();
    assert_eq!(h.pool.server_of(r), Some(2));
    h.give_back(r);
    // The writer's key never gets the replica's idle connection.
    let (_, w) = leased(&h.lease(req(2, PoolKey::default_warm()))).unwrap();
    assert_ne!(w, r);
    assert_eq!(h.pool.server_of(w), Some(0));
    // Another read of the same replica does.
    let (_, again) = leased(&h.lease(req(3, on(2)))).unwrap();
    assert_eq!(again, r);
}

#[test]
fn a_change_of_writer_keeps_the_replicas_idle_connections() {
    let mut h = Harness::new(10, 0);
    let (_, r) = leased(&h.lease(req(1, on(2)))).unwrap();
    let (_, w) = leased(&h.lease(req(2, PoolKey::default_warm()))).unwrap();
    h.give_back(r);
    h.give_back(w);
    assert_eq!(h.pool.len(), 2);
    retarget(&mut h, 1);
    assert_eq!(h.pool.len(), 1, "only the old writer's closed");
    let (_, again) = leased(&h.lease(req(3, on(2)))).unwrap();
    assert_eq!(again, r);
    // A replica's connection leased across the change goes back idle.
    retarget(&mut h, 0);
    h.give_back(again);
    assert_eq!(h.pool.len(), 1);
    // Replica 2 promoted: its reads' connection is nobody's now.
    retarget(&mut h, 2);
    assert_eq!(h.pool.len(), 0);
}

#[test]
fn a_refused_connect_to_a_replica_sends_the_read_to_the_writer() {
    let mut h = Harness::new(10, 0);
    let mut out = Vec::new();
    h.pool.lease(req(1, on(2)), h.now, &mut out);
    let PoolEvent::Open { key, request } = out.remove(0) else {
        panic!("expected an open")
    };
    assert_eq!(key.server, Some(2));
    let mut ev = Vec::new();
    let id = h.pool.insert_opening(key, request, h.now, &mut ev);
    let mut ev = Vec::new();
    h.pool
        .on_connect(id, Completion::Failed(errno::ECONNREFUSED), h.now, &mut ev);
    let ev = h.drive(ev);
    assert_eq!(failed(&ev), None, "no error for the read");
    let (s, b) = leased(&h.serve()).expect("served by the writer");
    assert_eq!(s, sid(1));
    assert_eq!(h.pool.server_of(b), Some(0));
    assert_eq!(h.open.open(), 1, "the refused connect's unit went back");
}

#[test]
fn a_flood_of_reads_at_the_cap_does_not_starve_the_writer() {
    // Two units, both held by reads of replica 1 with more reads queued.
    let mut h = Harness::new(2, 0);
    let (_, r1) = leased(&h.lease(req(1, on(1)))).unwrap();
    let (_, r2) = leased(&h.lease(req(2, on(1)))).unwrap();
    for i in 3..8 {
        assert!(leased(&h.lease(req(i, on(1)))).is_none());
    }
    // A write arrives behind them.
    assert!(leased(&h.lease(req(100, PoolKey::default_warm()))).is_none());
    // Reads come back one by one and are served in arrival order, until
    // the write's turn: it gets a unit of the cap (a read's connection
    // is closed for it) although reads queued before it keep coming.
    let mut served = Vec::new();
    let mut held = vec![r1, r2];
    for next in 200..216 {
        let Some(b) = held.pop() else { break };
        h.give_back(b);
        // The flood goes on: another read arrives every round.
        let ev = h.lease(req(next, on(1)));
        assert!(leased(&ev).is_none(), "it queues behind the others");
        let ev = h.serve();
        for e in &ev {
            if let PoolEvent::Leased { session, backend } = e {
                served.push(*session);
                held.push(*backend);
            }
        }
        if served.contains(&sid(100)) {
            break;
        }
    }
    assert!(
        served.contains(&sid(100)),
        "the write was served: {served:?}"
    );
    let write_at = served.iter().position(|s| *s == sid(100)).unwrap();
    assert!(write_at <= 6, "served after {write_at} reads");
    assert!(h.open.open() <= 2, "the cap holds across servers");
}

#[test]
fn each_servers_connections_are_counted_until_their_slots_are_freed() {
    let mut h = Harness::new(10, 0);
    let servers = ["w", "r1", "r2"].map(String::from).to_vec();
    h.pool.metrics.servers().init_pooled(servers);
    let count = |h: &Harness| -> Vec<i64> {
        let snap = h.pool.metrics.servers().pooled_snapshot();
        snap.into_iter().map(|(_, n)| n).collect()
    };
    let (_, r) = leased(&h.lease(req(1, on(2)))).unwrap();
    let (_, w) = leased(&h.lease(req(2, PoolKey::default_warm()))).unwrap();
    assert_eq!(count(&h), [1, 0, 1]);
    h.release(r, false);
    h.release(w, false);
    assert_eq!(h.pool.len(), 0);
    assert_eq!(count(&h), [0, 0, 0]);
}

#[test]
fn a_reads_setup_that_dies_on_its_replica_goes_to_the_writer() {
    let mut h = Harness::new(10, 0);
    h.pool.cfg.wait_for_writer = true;
    h.reset_setups = true;
    let read = LeaseRequest {
        schema: Some("app".into()),
        ..req(1, on(2))
    };
    let ev = h.lease(read);
    assert_eq!(failed(&ev), None, "no error for the read");
    assert_eq!(leased(&ev), None);
    h.reset_setups = false;
    let (s, b) = leased(&h.serve()).expect("served by the writer");
    assert_eq!(s, sid(1));
    assert_eq!(h.pool.server_of(b), Some(0));
    assert_eq!(h.pool.conn(b).map(|c| c.key().server), Some(None));
}

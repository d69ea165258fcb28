use super::*;

fn gtid(s: &str) -> Gtid {
    s.parse().unwrap()
}

fn text(w: &CausalWait) -> String {
    match w.on_replica(Duration::from_millis(1500), None) {
        ReplicaRead::Wait { sql, .. } => String::from_utf8(sql).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn off_never_waits() {
    let mut s = SessionGtids::new(&CausalConfig::new(CausalMode::Off));
    s.note(gtid("0-1-5"));
    assert_eq!(s.wait(), None);
}

#[test]
fn a_session_waits_for_its_own_highest_write() {
    let cfg = CausalConfig::new(CausalMode::Session);
    let mut s = SessionGtids::new(&cfg);
    assert_eq!(s.wait(), None, "nothing written yet");
    s.note(gtid("0-1-9"));
    s.note(gtid("0-1-10"));
    let w = s.wait().unwrap();
    assert_eq!(text(&w), "SELECT MASTER_GTID_WAIT('0-1-10', 1.500)");
    // An older GTID (another session's, as text "0-2-9" > "0-1-10") does
    // not move it back; the lease taken before keeps its own copy.
    s.note(gtid("0-2-9"));
    assert_eq!(
        text(&s.wait().unwrap()),
        "SELECT MASTER_GTID_WAIT('0-1-10', 1.500)"
    );
    s.note(gtid("0-2-11"));
    assert_eq!(text(&w), "SELECT MASTER_GTID_WAIT('0-1-10', 1.500)");
    assert_eq!(
        text(&s.wait().unwrap()),
        "SELECT MASTER_GTID_WAIT('0-2-11', 1.500)"
    );
    // Another session of the same process is not affected.
    assert_eq!(SessionGtids::new(&cfg).wait(), None);
}

#[test]
fn global_mode_shares_the_position_between_sessions() {
    let cfg = CausalConfig::new(CausalMode::Global);
    let mut a = SessionGtids::new(&cfg);
    let b = SessionGtids::new(&cfg);
    let w = b.wait().unwrap();
    assert_eq!(
        w.on_replica(Duration::from_secs(1), None),
        ReplicaRead::Run,
        "nothing written yet"
    );
    a.note(gtid("0-1-7"));
    a.note(gtid("1-1-2"));
    // b's wait, taken before a's write, reads the position when it runs.
    assert_eq!(text(&w), "SELECT MASTER_GTID_WAIT('0-1-7,1-1-2', 1.500)");
    // A lower sequence number from another worker leaves it.
    b.clone_note(gtid("0-3-6"));
    assert_eq!(
        text(&b.wait().unwrap()),
        "SELECT MASTER_GTID_WAIT('0-1-7,1-1-2', 1.500)"
    );
}

#[test]
fn a_blind_session_reads_on_the_writer() {
    assert_eq!(
        CausalWait::Writer.on_replica(Duration::from_secs(1), None),
        ReplicaRead::Writer
    );
}

#[test]
fn last_gtid_is_read_from_the_tracked_variables() {
    let vars: [(&[u8], &[u8]); 2] = [(b"autocommit", b"ON"), (b"last_gtid", b"0-1-33")];
    assert_eq!(last_gtid_of(vars.into_iter()), Some(gtid("0-1-33")));
    let none: [(&[u8], &[u8]); 1] = [(b"autocommit", b"ON")];
    assert_eq!(last_gtid_of(none.into_iter()), None);
    // An empty or broken value is no GTID (and no panic).
    for bad in [&b""[..], b"garbage", b"0-1"] {
        assert_eq!(last_gtid_of([(&b"last_gtid"[..], bad)].into_iter()), None);
    }
}

#[test]
fn the_timeout_is_written_in_seconds() {
    let w = CausalWait::Session(Arc::new(GtidPos::of(gtid("0-1-1"))));
    let t = |d| match w.on_replica(d, None) {
        ReplicaRead::Wait { sql, .. } => String::from_utf8(sql).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        t(Duration::from_secs(1)),
        "SELECT MASTER_GTID_WAIT('0-1-1', 1.000)"
    );
    assert_eq!(
        t(Duration::from_millis(250)),
        "SELECT MASTER_GTID_WAIT('0-1-1', 0.250)"
    );
}

impl SessionGtids {
    /// `note` through a shared reference's clone: another session.
    fn clone_note(&self, g: Gtid) {
        if let SessionGtids::Global(global) = self {
            global.note(&GtidPos::of(g));
        }
    }
}

#[test]
fn a_position_the_replica_reached_spares_the_wait() {
    let second = Duration::from_secs(1);
    let reached = GtidPos::parse("0-1-10,1-1-3").unwrap();
    let w = CausalWait::Session(Arc::new(GtidPos::parse("0-2-9").unwrap()));
    assert_eq!(w.on_replica(second, Some(&reached)), ReplicaRead::Run);
    let w = CausalWait::Session(Arc::new(GtidPos::parse("0-1-11").unwrap()));
    assert!(matches!(
        w.on_replica(second, Some(&reached)),
        ReplicaRead::Wait { pos, .. } if pos.to_string() == "0-1-11"
    ));
    // A domain the replica was not seen to reach is waited for.
    let w = CausalWait::Session(Arc::new(GtidPos::parse("2-1-1").unwrap()));
    assert!(matches!(
        w.on_replica(second, Some(&reached)),
        ReplicaRead::Wait { .. }
    ));
    let cfg = CausalConfig::new(CausalMode::Global);
    let mut a = SessionGtids::new(&cfg);
    a.note(gtid("0-1-10"));
    assert_eq!(
        a.wait().unwrap().on_replica(second, Some(&reached)),
        ReplicaRead::Run
    );
}

use std::time::{Duration, Instant};

use wire::gtid::GtidPos;

use super::*;

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(3);

fn pos(s: &str) -> GtidPos {
    GtidPos::parse(s).unwrap()
}

fn primary(at: &str) -> CheckResult {
    CheckResult::Answered(Probe {
        read_only: false,
        gtid_binlog_pos: pos(at),
        gtid_slave_pos: GtidPos::default(),
        gtid_current_pos: pos(at),
        channels: vec![],
    })
}

fn channel(io: IoThread, sql: bool, sbm: Option<u64>, io_pos: &str) -> Channel {
    Channel {
        io,
        sql_running: sql,
        seconds_behind: sbm,
        gtid_io_pos: pos(io_pos),
        last_io_errno: if io == IoThread::Connecting { 2003 } else { 0 },
    }
}

fn replica(applied: &str, ch: Channel) -> CheckResult {
    CheckResult::Answered(Probe {
        read_only: true,
        gtid_binlog_pos: pos(applied),
        gtid_slave_pos: pos(applied),
        gtid_current_pos: pos(applied),
        channels: vec![ch],
    })
}

fn caught_up(at: &str) -> CheckResult {
    replica(at, channel(IoThread::Yes, true, Some(0), at))
}

fn refused() -> CheckResult {
    CheckResult::ConnectFailed("Connection refused (os error 111)".into())
}

/// A monitor of three auto servers after one good round: 0 primary at
/// 0-1-5, 1 and 2 caught-up replicas.
fn cluster(t0: Instant) -> Monitor {
    let mut m = Monitor::new(&[ConfiguredRole::Auto; 3], Thresholds::new(SEC), t0);
    m.on_check(0, primary("0-1-5"), MS, t0);
    m.on_check(1, caught_up("0-1-5"), MS, t0);
    m.on_check(2, caught_up("0-1-5"), MS, t0);
    m.settle(t0);
    m
}

/// Three refused checks, a second apart, from `t0`.
fn take_down(m: &mut Monitor, server: usize, t0: Instant) {
    for k in 1..=3 {
        m.on_check(server, refused(), MS, t0 + k * SEC);
    }
}

fn state(m: &Monitor, i: usize) -> State {
    m.servers()[i].health.state
}

#[test]
fn first_answer_brings_a_server_up_with_its_role_from_read_only() {
    let t0 = Instant::now();
    let mut m = Monitor::new(&[ConfiguredRole::Auto; 2], Thresholds::new(SEC), t0);
    assert_eq!(state(&m, 0), State::Down);
    assert_eq!(m.servers()[0].role, Role::Unknown);
    let c = m.on_check(0, primary("0-1-1"), MS, t0);
    assert!(c.contains(&Change::State {
        server: 0,
        from: State::Down,
        to: State::Up,
        why: "first answer since start-up".into()
    }));
    assert!(c.iter().any(|c| matches!(
        c,
        Change::Role {
            to: Role::Primary,
            ..
        }
    )));
    m.on_check(1, caught_up("0-1-1"), MS, t0);
    assert_eq!(m.servers()[1].role, Role::Replica);
    let c = m.settle(t0);
    assert_eq!(m.writer(), Some(0));
    assert!(c.iter().any(|c| matches!(
        c,
        Change::Writer {
            from: None,
            to: Some(0),
            ..
        }
    )));
}

#[test]
fn a_server_down_from_the_start_says_why_once_per_reason() {
    let t0 = Instant::now();
    let mut m = Monitor::new(&[ConfiguredRole::Auto], Thresholds::new(SEC), t0);
    let denied = || CheckResult::LoginRefused("Access denied for user 'monitor'".into());
    let c = m.on_check(0, denied(), MS, t0);
    assert_eq!(
        c,
        vec![Change::StillDown {
            server: 0,
            why: "login refused: Access denied for user 'monitor'".into()
        }]
    );
    assert!(m.on_check(0, denied(), MS, t0 + SEC).is_empty());
    let c = m.on_check(0, refused(), MS, t0 + 2 * SEC);
    assert!(matches!(&c[..], [Change::StillDown { why, .. }] if why.contains("refused")));
}

#[test]
fn a_server_goes_down_after_fall_failures_in_a_row_and_says_why() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    assert!(m.on_check(1, refused(), MS, t0 + SEC).is_empty());
    // A good check in between starts the count again.
    m.on_check(1, caught_up("0-1-5"), MS, t0 + 2 * SEC);
    m.on_check(1, refused(), MS, t0 + 3 * SEC);
    assert!(m
        .on_check(1, CheckResult::TimedOut, MS, t0 + 4 * SEC)
        .is_empty());
    assert_eq!(state(&m, 1), State::Up);
    let c = m.on_check(1, refused(), MS, t0 + 5 * SEC);
    let [Change::State { from, to, why, .. }] = c.as_slice() else {
        panic!("{c:?}")
    };
    assert_eq!((*from, *to), (State::Up, State::Down));
    assert!(why.contains("3 failed checks in a row"), "{why}");
    assert!(why.contains("Connection refused"), "{why}");
    assert_eq!(m.servers()[1].checks_failed_total, 4);
}

#[test]
fn checks_of_a_down_server_back_off_up_to_a_cap() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    let mut now = t0;
    let mut gaps = Vec::new();
    for _ in 0..9 {
        now = m.servers()[2].health.next_check.max(now);
        m.on_check(2, refused(), MS, now);
        gaps.push(m.servers()[2].health.next_check - now);
    }
    let secs: Vec<u64> = gaps.iter().map(|d| d.as_secs()).collect();
    assert_eq!(secs, [1, 1, 1, 2, 4, 8, 8, 8, 8]);
    // Not due before its time; the others are.
    let due = m.due(now + SEC);
    assert!(!due.contains(&2), "{due:?}");
}

#[test]
fn a_server_that_comes_back_is_shunned_until_rise_good_checks() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    take_down(&mut m, 1, t0);
    assert_eq!(state(&m, 1), State::Down);
    let c = m.on_check(1, caught_up("0-1-5"), MS, t0 + 10 * SEC);
    assert!(
        matches!(
            c[0],
            Change::State {
                to: State::Shunned,
                ..
            }
        ),
        "{c:?}"
    );
    m.on_check(1, caught_up("0-1-5"), MS, t0 + 11 * SEC);
    assert_eq!(state(&m, 1), State::Shunned);
    let c = m.on_check(1, caught_up("0-1-5"), MS, t0 + 12 * SEC);
    assert!(matches!(&c[0], Change::State { to: State::Up, why, .. } if why.contains("3 good")));
    // On probation, one failure sends it back down.
    for k in 13..=15 {
        m.on_check(1, refused(), MS, t0 + k * SEC);
    }
    m.on_check(1, caught_up("0-1-5"), MS, t0 + 20 * SEC);
    assert_eq!(state(&m, 1), State::Shunned);
    m.on_check(1, refused(), MS, t0 + 21 * SEC);
    assert_eq!(state(&m, 1), State::Down);
}

#[test]
fn sbm_is_the_lag_while_both_threads_run() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    let r = replica("0-1-5", channel(IoThread::Yes, true, Some(4), "0-1-5"));
    m.on_check(1, r, MS, t0 + SEC);
    m.settle(t0 + SEC);
    let lag = &m.servers()[1].lag;
    assert_eq!(lag.seconds, Some(4 * SEC));
    assert_eq!(lag.stale, None);
    assert!(lag.within(5 * SEC));
    assert!(!lag.within(3 * SEC));
    // The primary has no lag.
    assert_eq!(m.servers()[0].lag, Lag::default());
}

#[test]
fn a_stopped_sql_thread_shows_lag_rising_though_sbm_is_null() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    for k in 1..=5u64 {
        let now = t0 + k as u32 * SEC;
        // One write a second on the primary; the replica receives it
        // (Gtid_IO_Pos) but applies nothing.
        let at = format!("0-1-{}", 5 + k);
        m.on_check(0, primary(&at), MS, now);
        let r = replica("0-1-5", channel(IoThread::Yes, false, None, &at));
        m.on_check(1, r, MS, now);
        m.settle(now);
        let lag = &m.servers()[1].lag;
        assert_eq!(lag.seconds, Some(Duration::from_secs(k)), "round {k}");
        assert_eq!(lag.behind_transactions, Some(k));
        assert_eq!(lag.stale, Some(Stale::SqlStopped));
        assert!(!lag.within(Duration::from_secs(3600)));
    }
}

#[test]
fn a_stopped_io_thread_is_stale_though_it_looks_caught_up() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    // IO = applied = 0-1-5 while the primary is at 0-1-6: SBM NULL.
    m.on_check(0, primary("0-1-6"), MS, t0 + SEC);
    let r = replica("0-1-5", channel(IoThread::No, true, None, "0-1-5"));
    m.on_check(1, r.clone(), MS, t0 + SEC);
    m.settle(t0 + SEC);
    let lag = &m.servers()[1].lag;
    assert_eq!(
        lag.stale,
        Some(Stale::IoThread {
            io: IoThread::No,
            last_io_errno: 0
        })
    );
    assert_eq!(lag.seconds, Some(SEC));
    assert!(!lag.within(Duration::from_secs(3600)));
    // Even with no writes to be behind on, it stays stale.
    m.on_check(0, primary("0-1-5"), MS, t0 + 2 * SEC);
    m.settle(t0 + 2 * SEC);
    assert!(m.servers()[1].lag.stale.is_some());
}

#[test]
fn sbm_null_is_never_zero_without_a_writer_to_compare_with() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    take_down(&mut m, 0, t0);
    let r = replica("0-1-5", channel(IoThread::Connecting, true, None, "0-1-5"));
    m.on_check(1, r, MS, t0 + 3 * SEC);
    m.settle(t0 + 3 * SEC);
    assert_eq!(m.writer(), None);
    let lag = &m.servers()[1].lag;
    assert_eq!(lag.seconds, None);
    assert_eq!(lag.behind_transactions, None);
    assert!(matches!(
        lag.stale,
        Some(Stale::IoThread {
            io: IoThread::Connecting,
            last_io_errno: 2003
        })
    ));
}

#[test]
fn the_writer_moves_when_an_orchestrator_promotes_a_replica() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    take_down(&mut m, 0, t0);
    let c = m.settle(t0 + 3 * SEC);
    assert!(c.iter().any(|c| matches!(
        c,
        Change::Writer {
            from: Some(0),
            to: None,
            ..
        }
    )));
    // Promoted: read_only=0, a new server_id in its GTIDs.
    let now = t0 + 4 * SEC;
    let c = m.on_check(1, primary("0-2-6"), MS, now);
    assert!(c.iter().any(|c| matches!(
        c,
        Change::Role {
            server: 1,
            to: Role::Primary,
            ..
        }
    )));
    m.on_check(2, caught_up("0-2-6"), MS, now);
    m.settle(now);
    assert_eq!(m.writer(), Some(1));
    // 0-2-6 covers the old primary's 0-1-5: server 2 is caught up.
    assert_eq!(m.servers()[2].lag.seconds, Some(Duration::ZERO));
    assert_eq!(m.servers()[2].lag.behind_transactions, Some(0));
}

#[test]
fn a_promoted_replica_writes_at_once_when_the_old_writer_cannot_be_reached() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    // One refused check: the old writer is still up (fall is 3)...
    m.on_check(0, refused(), MS, t0 + SEC);
    assert_eq!(state(&m, 0), State::Up);
    m.settle(t0 + SEC);
    assert_eq!(m.writer(), Some(0), "no other server is writable yet");
    // ...and the orchestrator promoted 1: it takes the writes now.
    m.on_check(1, primary("0-2-6"), MS, t0 + SEC);
    let c = m.settle(t0 + SEC);
    assert_eq!(m.writer(), Some(1));
    assert!(c.iter().any(|c| matches!(
        c,
        Change::Writer {
            from: Some(0),
            to: Some(1),
            ..
        }
    )));
    // A writer that merely timed out keeps its place: it may be busy,
    // and two writers would diverge the set.
    let mut m = cluster(t0);
    m.on_check(0, CheckResult::TimedOut, MS, t0 + SEC);
    m.on_check(1, primary("0-2-6"), MS, t0 + SEC);
    m.settle(t0 + SEC);
    assert_eq!(m.writer(), Some(0));
}

#[test]
fn two_writable_servers_keep_the_current_writer_and_say_so() {
    let t0 = Instant::now();
    let mut m = cluster(t0);
    m.on_check(1, primary("0-1-5"), MS, t0 + SEC);
    let c = m.settle(t0 + SEC);
    assert_eq!(m.writer(), Some(0));
    assert_eq!(
        c,
        vec![Change::Ambiguous {
            writable: vec![0, 1],
            kept: Some(0)
        }]
    );
    // Unchanged ambiguity is not reported again.
    assert!(m.settle(t0 + 2 * SEC).is_empty());
    // The old writer goes read-only: the ambiguity ends and 1 writes.
    m.on_check(0, caught_up("0-1-5"), MS, t0 + 3 * SEC);
    let c = m.settle(t0 + 3 * SEC);
    assert_eq!(m.writer(), Some(1));
    assert!(c.contains(&Change::Ambiguous {
        writable: vec![],
        kept: Some(1)
    }));
}

#[test]
fn two_writable_servers_and_no_writer_yet_choose_none() {
    let t0 = Instant::now();
    let mut m = Monitor::new(&[ConfiguredRole::Auto; 2], Thresholds::new(SEC), t0);
    m.on_check(0, primary("0-1-5"), MS, t0);
    m.on_check(1, primary("0-2-3"), MS, t0);
    m.settle(t0);
    assert_eq!(m.writer(), None);
}

#[test]
fn configured_roles_beat_read_only_and_a_mismatch_is_reported_once() {
    let t0 = Instant::now();
    let roles = [
        ConfiguredRole::Replica,
        ConfiguredRole::Primary,
        ConfiguredRole::Auto,
    ];
    let mut m = Monitor::new(&roles, Thresholds::new(SEC), t0);
    assert_eq!(m.servers()[1].role, Role::Primary);
    // The configured replica is writable; the configured primary is not.
    let c = m.on_check(0, primary("0-1-5"), MS, t0);
    assert!(c.contains(&Change::RoleMismatch {
        server: 0,
        configured: ConfiguredRole::Replica,
        read_only: false
    }));
    let again = m.on_check(0, primary("0-1-5"), MS, t0 + SEC);
    assert!(!again
        .iter()
        .any(|c| matches!(c, Change::RoleMismatch { .. })));
    m.on_check(1, caught_up("0-1-5"), MS, t0);
    m.on_check(2, caught_up("0-1-5"), MS, t0);
    m.settle(t0);
    assert_eq!(m.servers()[0].role, Role::Replica);
    assert_eq!(m.writer(), Some(1));
}

#[test]
fn the_writer_is_checked_first_in_a_round() {
    let t0 = Instant::now();
    let mut m = Monitor::new(&[ConfiguredRole::Auto; 3], Thresholds::new(SEC), t0);
    m.on_check(0, caught_up("0-1-5"), MS, t0);
    m.on_check(1, caught_up("0-1-5"), MS, t0);
    m.on_check(2, primary("0-1-5"), MS, t0);
    m.settle(t0);
    assert_eq!(m.due(t0 + SEC), vec![2, 0, 1]);
    assert_eq!(m.next_due(), Some(t0 + SEC));
}

//! The relay without sockets: completions in, operations out.

use super::*;
use crate::test_packets::errno;

const AUTOCOMMIT: u16 = 0x0002;
const IN_TRANS: u16 = 0x0001;

fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 4);
    let len = payload.len() as u32;
    v.extend_from_slice(&len.to_le_bytes()[..3]);
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

fn query(sql: &str) -> Vec<u8> {
    let mut p = vec![0x03];
    p.extend_from_slice(sql.as_bytes());
    frame(0, &p)
}

fn ok(status: u16) -> Vec<u8> {
    let s = status.to_le_bytes();
    frame(1, &[0x00, 0, 0, s[0], s[1], 0, 0])
}

fn timeouts() -> RelayTimeouts {
    RelayTimeouts {
        idle: Duration::from_secs(60),
        client_write: Duration::from_secs(10),
        backend_read: Duration::ZERO,
    }
}

fn started(now: Instant) -> (Relay, Vec<RelayEvent>) {
    let mut r = Relay::new(Tracker::new(false), now);
    let mut out = Vec::new();
    r.start(&[], now, &mut out);
    // The client is read, and the backend is watched from the start.
    assert_eq!(
        out,
        vec![
            RelayEvent::Op(RelayOp::ReadClient),
            RelayEvent::Op(RelayOp::ReadBackend)
        ]
    );
    out.clear();
    (r, out)
}

fn ops(out: &[RelayEvent]) -> Vec<RelayOp> {
    out.iter()
        .filter_map(|e| match e {
            RelayEvent::Op(op) => Some(*op),
            _ => None,
        })
        .collect()
}

fn ended(out: &[RelayEvent]) -> Option<(RelayEnd, bool)> {
    out.iter().find_map(|e| match e {
        RelayEvent::Ended { reason, clean } => Some((reason.clone(), *clean)),
        _ => None,
    })
}

#[test]
fn a_query_goes_up_and_its_answer_comes_down() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    assert!(out.contains(&RelayEvent::CommandStarted));
    // The command goes up; the idle backend read already armed reads the
    // answer (one read per socket).
    assert_eq!(ops(&out), vec![RelayOp::WriteBackend { end: q.len() }]);
    out.clear();
    r.on_backend_write(Completion::Done(q.len()), now, &mut out);
    // The client is read again while the answer is outstanding.
    assert_eq!(ops(&out), vec![RelayOp::ReadClient]);
    out.clear();
    let answer = ok(AUTOCOMMIT);
    r.on_backend_read(
        Completion::Done(answer.len()),
        &mut answer.clone(),
        now,
        &mut out,
    );
    assert_eq!(ops(&out), vec![RelayOp::WriteClient { end: answer.len() }]);
    out.clear();
    r.on_client_write(Completion::Done(answer.len()), now, &mut out);
    assert_eq!(
        ops(&out),
        vec![RelayOp::ReadBackend],
        "nothing owed: the backend is watched"
    );
    assert!(r.idle_at_boundary());
}

#[test]
fn a_command_pipelined_behind_a_pending_answer_is_forwarded_at_once() {
    // Defect 8: half duplex stopped reading the backend while a client
    // command was being forwarded; here both pipes move independently.
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let q1 = query("select big");
    r.on_client_read(Completion::Done(q1.len()), &q1, now, &mut out);
    r.on_backend_write(Completion::Done(q1.len()), now, &mut out);
    out.clear();
    // A second command arrives while the first answer is being read.
    let q2 = query("insert big");
    r.on_client_read(Completion::Done(q2.len()), &q2, now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::WriteBackend { end: q2.len() }]);
    out.clear();
    // The first answer arrives while the second command is still going up.
    let a1 = ok(AUTOCOMMIT);
    r.on_backend_read(Completion::Done(a1.len()), &mut a1.clone(), now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::WriteClient { end: a1.len() }]);
    out.clear();
    r.on_client_write(Completion::Done(a1.len()), now, &mut out);
    // One answer still owed: keep reading the backend.
    assert_eq!(ops(&out), vec![RelayOp::ReadBackend]);
}

#[test]
fn quit_waits_for_earlier_answers_and_leaves_a_clean_backend() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let mut bytes = query("select 1");
    let forward = bytes.len();
    bytes.extend_from_slice(&frame(0, &[0x01]));
    r.on_client_read(Completion::Done(bytes.len()), &bytes, now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::WriteBackend { end: forward }]);
    out.clear();
    r.on_backend_write(Completion::Done(forward), now, &mut out);
    assert!(ops(&out).is_empty(), "stopped: no more client reads");
    assert_eq!(ended(&out), None, "the answer to select 1 is still owed");
    let a = ok(AUTOCOMMIT);
    r.on_backend_read(Completion::Done(a.len()), &mut a.clone(), now, &mut out);
    out.clear();
    r.on_client_write(Completion::Done(a.len()), now, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::Quit, true)));
}

#[test]
fn unsupported_command_ends_after_pending_answers() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let shutdown = frame(0, &[0x08, 0]);
    r.on_client_read(Completion::Done(shutdown.len()), &shutdown, now, &mut out);
    // A clean end cancels the idle backend read and waits for it.
    assert_eq!(ops(&out), vec![RelayOp::CancelReadBackend]);
    assert_eq!(ended(&out), None);
    r.on_backend_read(Completion::Cancelled, &mut [], now, &mut out);
    assert_eq!(
        ended(&out),
        Some((RelayEnd::Unsupported { command: 0x08 }, true))
    );
}

#[test]
fn change_user_ends_cleanly_with_its_packet_left_in_the_buffer() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let ping = frame(0, &[0x0e]);
    let mut chunk = ping.clone();
    chunk.extend(frame(0, &[0x11, b'x', 0, 0, 0]));
    r.on_client_read(Completion::Done(chunk.len()), &chunk, now, &mut out);
    // Only the ping goes to the backend.
    assert!(ops(&out).contains(&RelayOp::WriteBackend { end: ping.len() }));
    out.clear();
    r.on_backend_write(Completion::Done(ping.len()), now, &mut out);
    let a = ok(AUTOCOMMIT);
    r.on_backend_read(Completion::Done(a.len()), &mut a.clone(), now, &mut out);
    out.clear();
    r.on_client_write(Completion::Done(a.len()), now, &mut out);
    assert_eq!(
        ended(&out),
        Some((
            RelayEnd::ChangeUser {
                header: [5, 0, 0, 0],
                header_buffered: 4
            },
            true
        ))
    );
}

#[test]
fn client_gone_mid_answer_discards_the_backend_after_its_ops_complete() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    r.on_backend_write(Completion::Done(q.len()), now, &mut out);
    out.clear();
    // The client resets while the backend read is in flight.
    r.on_client_read(Completion::Failed(errno::ECONNRESET), &[], now, &mut out);
    assert!(out.contains(&RelayEvent::AbortBackend));
    assert_eq!(ended(&out), None, "a backend read is still in flight");
    out.clear();
    // The shut-down backend read completes with an error: now it ends.
    r.on_backend_read(
        Completion::Failed(errno::ECONNRESET),
        &mut [],
        now,
        &mut out,
    );
    assert_eq!(ended(&out), Some((RelayEnd::ClientGone, false)));
    assert!(!r.backend_ops());
}

#[test]
fn backend_reset_mid_answer_ends_dirty() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    r.on_backend_write(Completion::Done(q.len()), now, &mut out);
    out.clear();
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert!(out.contains(&RelayEvent::AbortClient));
    // The client read is in flight but names only the client.
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::BackendLost(_), false))
    ));
}

#[test]
fn backend_write_failure_ends_dirty() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    out.clear();
    r.on_backend_write(Completion::Failed(errno::EPIPE), now, &mut out);
    // The down read on the same dead socket must complete first.
    assert_eq!(ended(&out), None);
    r.on_backend_read(Completion::Cancelled, &mut [], now, &mut out);
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::BackendLost(_), false))
    ));
}

#[test]
fn oversized_packet_ends_dirty_without_forwarding() {
    let now = Instant::now();
    let mut t = Tracker::new(false);
    t.set_max_client_packet(100);
    let mut r = Relay::new(t, now);
    let mut out = Vec::new();
    r.start(&[], now, &mut out);
    out.clear();
    let mut big = vec![0u8; 4];
    big[..3].copy_from_slice(&1000u32.to_le_bytes()[..3]);
    big.push(0x03);
    r.on_client_read(Completion::Done(big.len()), &big, now, &mut out);
    assert!(ops(&out).is_empty(), "nothing forwarded");
    assert!(out.contains(&RelayEvent::AbortBackend));
    // The shut-down idle backend read completes.
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::TooLarge { max: 100, .. }, false))
    ));
    assert!(
        !out.contains(&RelayEvent::AbortClient),
        "the ERR must reach the client"
    );
}

#[test]
fn bytes_behind_the_login_packet_are_relayed_first() {
    // Defect 7: a command pipelined behind the HandshakeResponse.
    let now = Instant::now();
    let mut r = Relay::new(Tracker::new(false), now);
    let mut out = Vec::new();
    let q = query("select 1");
    r.start(&q, now, &mut out);
    assert_eq!(
        ops(&out),
        vec![RelayOp::WriteBackend { end: q.len() }, RelayOp::ReadBackend]
    );
}

#[test]
fn client_write_timeout_cuts_a_client_that_stopped_reading() {
    let t0 = Instant::now();
    let (mut r, mut out) = started(t0);
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, t0, &mut out);
    r.on_backend_write(Completion::Done(q.len()), t0, &mut out);
    let a = ok(AUTOCOMMIT);
    r.on_backend_read(Completion::Done(a.len()), &mut a.clone(), t0, &mut out);
    out.clear();
    r.on_tick(t0 + Duration::from_secs(11), &timeouts(), false, &mut out);
    assert!(out.contains(&RelayEvent::AbortClient));
    assert!(out.contains(&RelayEvent::AbortBackend));
    assert_eq!(ended(&out), None, "the client write is still in flight");
    out.clear();
    r.on_client_write(Completion::Failed(errno::EPIPE), t0, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::ClientWriteTimeout, false)));
}

#[test]
fn backend_read_timeout_is_off_by_default_and_bounds_a_stall_when_set() {
    let t0 = Instant::now();
    let (mut r, mut out) = started(t0);
    let q = query("select sleep(100)");
    r.on_client_read(Completion::Done(q.len()), &q, t0, &mut out);
    r.on_backend_write(Completion::Done(q.len()), t0, &mut out);
    out.clear();
    let later = t0 + Duration::from_secs(3600);
    r.on_tick(later, &timeouts(), false, &mut out);
    assert!(out.is_empty(), "a long query is not cut by default");
    let strict = RelayTimeouts {
        backend_read: Duration::from_secs(30),
        ..timeouts()
    };
    r.on_tick(later, &strict, false, &mut out);
    assert!(out.contains(&RelayEvent::AbortBackend));
    r.on_backend_read(Completion::Cancelled, &mut [], later, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::BackendReadTimeout, false)));
}

#[test]
fn drain_and_idle_timeout_end_only_between_commands_outside_a_transaction() {
    let t0 = Instant::now();
    let (mut r, mut out) = started(t0);
    let q = query("begin");
    r.on_client_read(Completion::Done(q.len()), &q, t0, &mut out);
    r.on_backend_write(Completion::Done(q.len()), t0, &mut out);
    out.clear();
    // Mid-command: neither drain nor idle applies.
    r.on_tick(t0 + Duration::from_secs(120), &timeouts(), true, &mut out);
    assert!(out.is_empty());
    let a = ok(AUTOCOMMIT | IN_TRANS);
    r.on_backend_read(Completion::Done(a.len()), &mut a.clone(), t0, &mut out);
    r.on_client_write(Completion::Done(a.len()), t0, &mut out);
    out.clear();
    // In a transaction: a drain waits for it to finish.
    r.on_tick(t0 + Duration::from_secs(1), &timeouts(), true, &mut out);
    assert!(out.is_empty());
    // The idle timeout still applies.
    r.on_tick(t0 + Duration::from_secs(61), &timeouts(), false, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::CancelReadBackend]);
    r.on_backend_read(Completion::Cancelled, &mut [], t0, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::IdleTimeout, true)));
}

#[test]
fn completions_after_the_end_are_absorbed() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    r.on_tick(now, &timeouts(), true, &mut out);
    r.on_backend_read(Completion::Cancelled, &mut [], now, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::Drained, true)));
    out.clear();
    // The client read, shut down by the driver, completes: nothing happens.
    r.on_client_read(Completion::Cancelled, &[], now, &mut out);
    assert!(out.is_empty());
}

#[test]
fn a_half_close_after_a_command_still_gets_the_answer() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    r.on_backend_write(Completion::Done(q.len()), now, &mut out);
    out.clear();
    r.on_client_read(Completion::Done(0), &[], now, &mut out);
    assert!(
        out.is_empty(),
        "EOF between commands: keep relaying the answer"
    );
    let a = ok(AUTOCOMMIT);
    r.on_backend_read(Completion::Done(a.len()), &mut a.clone(), now, &mut out);
    out.clear();
    r.on_client_write(Completion::Done(a.len()), now, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::ClientGone, true)));
}

#[test]
fn a_half_close_in_the_middle_of_a_command_discards_the_backend() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let q = query("select 'cut in the middle'");
    r.on_client_read(Completion::Done(10), &q[..10], now, &mut out);
    r.on_backend_write(Completion::Done(10), now, &mut out);
    out.clear();
    r.on_client_read(Completion::Done(0), &[], now, &mut out);
    assert!(out.contains(&RelayEvent::AbortBackend));
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::ClientGone, false)));
}

#[test]
fn com_set_option_makes_the_backend_unreusable() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    // COM_SET_OPTION MYSQL_OPTION_MULTI_STATEMENTS_ON.
    let set = frame(0, &[0x1b, 0, 0]);
    r.on_client_read(Completion::Done(set.len()), &set, now, &mut out);
    r.on_backend_write(Completion::Done(set.len()), now, &mut out);
    let eof = frame(1, &[0xfe, 0, 0, 2, 0]);
    r.on_backend_read(Completion::Done(eof.len()), &mut eof.clone(), now, &mut out);
    r.on_client_write(Completion::Done(eof.len()), now, &mut out);
    out.clear();
    let quit = frame(0, &[0x01]);
    r.on_client_read(Completion::Done(quit.len()), &quit, now, &mut out);
    assert!(out.contains(&RelayEvent::AbortBackend));
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::Quit, false)));
}

// ---- the server closing an idle connection ----

fn killed_err(seq: u8) -> Vec<u8> {
    let mut p = vec![0xFF, 0x87, 0x07, b'#'];
    p.extend_from_slice(b"70100Connection was killed");
    frame(seq, &p)
}

#[test]
fn an_unsolicited_err_between_commands_reaches_the_client_then_both_close() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let err = killed_err(0);
    // It may arrive in pieces: the idle read is re-armed, the buffer kept.
    r.on_backend_read(Completion::Done(5), &mut err.clone()[..5], now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::ReadBackend]);
    out.clear();
    r.on_backend_read(
        Completion::Done(err.len() - 5),
        &mut err.clone(),
        now,
        &mut out,
    );
    assert_eq!(ops(&out), vec![RelayOp::WriteClient { end: err.len() }]);
    assert_eq!(ended(&out), None, "the ERR is written first");
    out.clear();
    r.on_client_write(Completion::Done(err.len()), now, &mut out);
    assert!(out.contains(&RelayEvent::AbortBackend));
    assert!(out.contains(&RelayEvent::AbortClient));
    // A client read in flight names only the client.
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::ServerClosed(cause), false)) if cause.contains("ERR 1927")
    ));
}

#[test]
fn eof_or_reset_between_commands_closes_the_client() {
    for res in [Completion::Done(0), Completion::Failed(errno::ECONNRESET)] {
        let now = Instant::now();
        let (mut r, mut out) = started(now);
        r.on_backend_read(res, &mut [], now, &mut out);
        assert!(out.contains(&RelayEvent::AbortClient));
        assert!(out.contains(&RelayEvent::AbortBackend));
        assert!(matches!(
            ended(&out),
            Some((RelayEnd::ServerClosed(_), false))
        ));
    }
}

#[test]
fn other_bytes_between_commands_are_a_protocol_error() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let stray = ok(AUTOCOMMIT);
    r.on_backend_read(
        Completion::Done(stray.len()),
        &mut stray.clone(),
        now,
        &mut out,
    );
    assert!(ops(&out).is_empty(), "nothing is forwarded");
    assert!(out.contains(&RelayEvent::AbortClient));
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::BackendLost(cause), false)) if cause.contains("between commands")
    ));
}

#[test]
fn a_command_racing_the_idle_read_is_answered_by_that_read() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    assert_eq!(
        ops(&out),
        vec![RelayOp::WriteBackend { end: q.len() }],
        "no second read on the backend socket"
    );
    out.clear();
    // The answer completes the idle read before the command's write even
    // completes: it is the answer, not an unsolicited packet.
    let a = ok(AUTOCOMMIT);
    r.on_backend_read(Completion::Done(a.len()), &mut a.clone(), now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::WriteClient { end: a.len() }]);
    out.clear();
    r.on_backend_write(Completion::Done(q.len()), now, &mut out);
    r.on_client_write(Completion::Done(a.len()), now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::ReadClient, RelayOp::ReadBackend]);
    assert!(r.idle_at_boundary());
    // A server that answers a command with its closing ERR (it timed out
    // just as the command arrived): the client gets it as the answer, and
    // the EOF behind it ends the session.
    out.clear();
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    let err = killed_err(0);
    r.on_backend_read(Completion::Done(err.len()), &mut err.clone(), now, &mut out);
    assert!(ops(&out).contains(&RelayOp::WriteClient { end: err.len() }));
    r.on_client_write(Completion::Done(err.len()), now, &mut out);
    r.on_backend_write(Completion::Done(q.len()), now, &mut out);
    out.clear();
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::ServerClosed(_), false))
    ));
}

#[test]
fn a_command_sent_while_the_closing_err_is_written_is_not_forwarded() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let err = killed_err(1);
    r.on_backend_read(Completion::Done(err.len()), &mut err.clone(), now, &mut out);
    out.clear();
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    assert!(out.is_empty(), "the server is gone: nothing goes up");
    r.on_client_write(Completion::Done(err.len()), now, &mut out);
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::ServerClosed(_), false))
    ));
}

#[test]
fn bytes_that_beat_the_cancel_of_the_idle_read_make_the_end_dirty() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let quit = frame(0, &[0x01]);
    r.on_client_read(Completion::Done(quit.len()), &quit, now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::CancelReadBackend]);
    assert!(
        r.backend_ops(),
        "the backend stays named until the cancel lands"
    );
    let err = killed_err(0);
    r.on_backend_read(Completion::Done(err.len()), &mut err.clone(), now, &mut out);
    assert_eq!(ended(&out), Some((RelayEnd::Quit, false)));
}

#[test]
fn the_idle_read_is_not_cut_by_the_backend_read_timeout() {
    let t0 = Instant::now();
    let (mut r, mut out) = started(t0);
    let strict = RelayTimeouts {
        backend_read: Duration::from_secs(1),
        ..timeouts()
    };
    r.on_tick(t0 + Duration::from_secs(30), &strict, false, &mut out);
    assert!(out.is_empty(), "nothing is owed, so nothing is late");
}

// ---- transaction pooling: the server closing the connection while the relay parks ----

#[test]
fn a_park_whose_cancel_loses_to_the_servers_eof_ends_the_session_instead() {
    for res in [Completion::Done(0), Completion::Failed(errno::ECONNRESET)] {
        let now = Instant::now();
        let (mut r, mut out) = started(now);
        assert!(r.can_park());
        r.park(&mut out);
        assert_eq!(ops(&out), vec![RelayOp::CancelReadBackend]);
        assert_eq!(ended(&out), None, "the cancel has not landed");
        out.clear();
        // The KILL's EOF completes the idle read before the cancel does.
        r.on_backend_read(res, &mut [], now, &mut out);
        assert!(out.contains(&RelayEvent::AbortClient));
        assert!(out.contains(&RelayEvent::AbortBackend));
        assert!(
            matches!(ended(&out), Some((RelayEnd::ServerClosed(_), false))),
            "{out:?}"
        );
    }
}

#[test]
fn a_park_whose_cancel_loses_to_the_servers_err_forwards_it_then_ends() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    r.park(&mut out);
    out.clear();
    let err = killed_err(0);
    r.on_backend_read(Completion::Done(err.len()), &mut err.clone(), now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::WriteClient { end: err.len() }]);
    assert_eq!(ended(&out), None, "the ERR is written first");
    assert!(!r.can_park(), "the server is closing: no park");
    out.clear();
    r.on_client_write(Completion::Done(err.len()), now, &mut out);
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::ServerClosed(cause), false)) if cause.contains("ERR 1927")
    ));
}

#[test]
fn a_park_whose_cancel_lands_gives_a_clean_backend_back() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    r.park(&mut out);
    out.clear();
    r.on_backend_read(Completion::Cancelled, &mut [], now, &mut out);
    assert_eq!(
        ended(&out),
        Some((RelayEnd::Parked { client_read: None }, true))
    );
    assert!(!out.contains(&RelayEvent::AbortClient));
}

#[test]
fn part_of_an_err_between_commands_keeps_the_session_from_parking() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    let err = killed_err(0);
    r.on_backend_read(Completion::Done(5), &mut err.clone()[..5], now, &mut out);
    assert_eq!(ops(&out), vec![RelayOp::ReadBackend]);
    assert!(
        !r.can_park(),
        "the rest of the ERR and the EOF are on their way"
    );
}

#[test]
fn a_park_whose_cancel_failed_ends_dirty_on_the_proxys_own_shutdown() {
    let now = Instant::now();
    let (mut r, mut out) = started(now);
    r.park(&mut out);
    out.clear();
    // The cancel failed: the driver shuts the backend down, whose EOF ends
    // the read. The session goes on parked; the connection is discarded.
    r.backend_shut();
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert_eq!(
        ended(&out),
        Some((RelayEnd::Parked { client_read: None }, false))
    );
    assert!(!out.contains(&RelayEvent::AbortClient));
}

/// Several servers: the relay is told to keep its client when its
/// connection is lost.
fn keeping(now: Instant) -> (Relay, Vec<RelayEvent>) {
    let (mut r, out) = started(now);
    r.keep_client_on_loss();
    (r, out)
}

#[test]
fn a_lost_connection_with_nothing_of_the_answer_forwarded_keeps_the_client() {
    let now = Instant::now();
    let (mut r, mut out) = keeping(now);
    let q = query("select sleep(5)");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    r.on_backend_write(Completion::Done(q.len()), now, &mut out);
    out.clear();
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert!(!out.contains(&RelayEvent::AbortClient), "{out:?}");
    assert!(out.contains(&RelayEvent::AbortBackend));
    let Some((RelayEnd::WriterLost(lost), false)) = ended(&out) else {
        panic!("{out:?}");
    };
    assert!(lost.owed);
    assert!(lost.reading, "the relay's client read is still in flight");
    assert_eq!(lost.client_read, None);
}

#[test]
fn a_lost_connection_between_commands_keeps_the_client_with_nothing_owed() {
    let now = Instant::now();
    let (mut r, mut out) = keeping(now);
    // The idle read armed at start sees the server's EOF.
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert!(!out.contains(&RelayEvent::AbortClient));
    let Some((RelayEnd::WriterLost(lost), false)) = ended(&out) else {
        panic!("{out:?}");
    };
    assert!(!lost.owed && lost.reading);
}

#[test]
fn a_lost_connection_after_part_of_the_answer_still_closes_the_client() {
    let now = Instant::now();
    let (mut r, mut out) = keeping(now);
    let q = query("select 1");
    r.on_client_read(Completion::Done(q.len()), &q, now, &mut out);
    r.on_backend_write(Completion::Done(q.len()), now, &mut out);
    // A column count: the result set has begun, and goes to the client.
    let mut part = frame(1, &[0x01]);
    r.on_backend_read(Completion::Done(part.len()), &mut part, now, &mut out);
    r.on_client_write(Completion::Done(part.len()), now, &mut out);
    out.clear();
    r.on_backend_read(Completion::Done(0), &mut [], now, &mut out);
    assert!(out.contains(&RelayEvent::AbortClient));
    assert!(matches!(
        ended(&out),
        Some((RelayEnd::BackendLost(_), false))
    ));
}

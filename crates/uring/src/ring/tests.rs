//! Real-kernel tests of the rare paths: a full SQ, a full CQ (overflow and
//! EBUSY), linked pairs at the SQ boundary, and injected failures.

use std::collections::HashMap;
use std::os::fd::RawFd;

use super::*;

fn tiny(knobs: DebugKnobs) -> Ring {
    // 4 SQ / 8 CQ: a few dozen pushes overflow the CQ many times over.
    let ring = Ring::with_knobs(4, 8, knobs).expect("io_uring set-up");
    assert_eq!((ring.sq_capacity(), ring.cq_capacity()), (4, 8));
    ring
}

fn token(i: u32) -> Token {
    Token::new(OpTag::Ignore, i, 0)
}

/// Submit and reap until `n` completions arrived. Never waits in the
/// kernel (NOPs and cancels complete during submission), so a lost
/// completion fails the test instead of hanging it.
fn collect(ring: &mut Ring, n: usize) -> HashMap<u64, Vec<i32>> {
    let mut seen: HashMap<u64, Vec<i32>> = HashMap::new();
    let mut batch = Vec::new();
    let mut total = 0;
    for _ in 0..10_000 {
        if total >= n {
            break;
        }
        let _ = ring.flush_sq();
        batch.clear();
        ring.reap(&mut batch);
        for c in &batch {
            seen.entry(c.user_data).or_default().push(c.result);
        }
        total += batch.len();
    }
    assert!(ring.latched.is_none(), "hard error {:?}", ring.latched);
    assert_eq!(total, n, "completions lost or duplicated");
    seen
}

#[test]
fn a_flood_of_nops_into_a_tiny_ring_loses_nothing() {
    let mut ring = tiny(DebugKnobs::default());
    const N: u32 = 2000;
    for i in 0..N {
        ring.push(ops::nop(token(i)));
    }
    let seen = collect(&mut ring, N as usize);
    for i in 0..N {
        assert_eq!(seen.get(&token(i).into()), Some(&vec![0]), "nop {i}");
    }
    let stats = ring.stats();
    assert!(
        stats.overflow_flushes > 0,
        "the CQ never overflowed: {stats:?}"
    );
    assert_eq!(stats.synthetic_failures, 0);
}

#[cfg(debug_assertions)]
#[test]
fn injected_ebusy_reaps_into_the_backlog_and_loses_nothing() {
    let faults = FaultPlan {
        push_fail: 0,
        // Between two injected EBUSYs, four submits of 4 NOPs: more than the
        // 8-entry CQ holds, so real overflow happens as well.
        ebusy: 5,
        cancel_fail: 0,
        link_eagain: 0,
    };
    let mut ring = tiny(DebugKnobs {
        faults,
        cq_entries: None,
        ..DebugKnobs::default()
    });
    const N: u32 = 1000;
    for i in 0..N {
        ring.push(ops::nop(token(i)));
    }
    let seen = collect(&mut ring, N as usize);
    assert!((0..N).all(|i| seen.get(&token(i).into()) == Some(&vec![0])));
    let stats = ring.stats();
    assert!(stats.ebusy_reaps > 0, "{stats:?}");
    assert!(stats.overflow_flushes > 0, "{stats:?}");
    assert_eq!(stats.synthetic_failures, 0);
}

#[cfg(debug_assertions)]
#[test]
fn injected_push_failures_come_back_as_synthetic_completions() {
    let faults = FaultPlan {
        push_fail: 3,
        ebusy: 0,
        cancel_fail: 0,
        link_eagain: 0,
    };
    let mut ring = tiny(DebugKnobs {
        faults,
        cq_entries: None,
        ..DebugKnobs::default()
    });
    for i in 0..30 {
        ring.push(ops::nop(token(i)));
    }
    let seen = collect(&mut ring, 30);
    for i in 0..30 {
        let want = if (i + 1) % 3 == 0 { -libc::EIO } else { 0 };
        assert_eq!(seen.get(&token(i).into()), Some(&vec![want]), "op {i}");
    }
    assert_eq!(ring.stats().synthetic_failures, 10);
}

/// `cancel_fail=2`: every second cancel comes back as a synthetic -EIO
/// without reaching the kernel; other operations are not counted or failed.
#[cfg(debug_assertions)]
#[test]
fn injected_cancel_failures_hit_only_cancels() {
    let faults = FaultPlan {
        cancel_fail: 2,
        ..FaultPlan::default()
    };
    let mut ring = tiny(DebugKnobs {
        faults,
        ..DebugKnobs::default()
    });
    for i in 0..10 {
        ring.push(ops::nop(token(100 + i)));
        ring.push(ops::cancel_user_data(u64::MAX, token(i)));
    }
    let seen = collect(&mut ring, 20);
    for i in 0..10 {
        assert_eq!(seen[&token(100 + i).into()], vec![0], "nop {i}");
        let want = if i % 2 == 1 {
            -libc::EIO
        } else {
            -libc::ENOENT
        };
        assert_eq!(seen[&token(i).into()], vec![want], "cancel {i}");
    }
    assert_eq!(ring.stats().synthetic_failures, 5);
}

/// A cancel of an unknown user_data fails with ENOENT, and a failed link
/// head cancels the rest of its chain. So if every pair is really linked,
/// every second half completes with -ECANCELED; a split pair would let it
/// run on its own and complete with 0.
#[test]
fn push_linked_never_splits_a_pair() {
    let mut ring = tiny(DebugKnobs::default());
    const PAIRS: u32 = 200;
    for p in 0..PAIRS {
        // Singles in between shift where each pair lands in the 4-slot SQ,
        // so some pairs would straddle a full SQ.
        if p % 3 == 0 {
            ring.push(ops::nop(token(10_000 + p)));
        }
        let head = ops::cancel_user_data(u64::MAX, token(2 * p));
        ring.push_linked(head, ops::nop(token(2 * p + 1)));
    }
    let singles = PAIRS.div_ceil(3);
    let seen = collect(&mut ring, (2 * PAIRS + singles) as usize);
    for p in 0..PAIRS {
        assert_eq!(seen[&token(2 * p).into()], vec![-libc::ENOENT], "head {p}");
        assert_eq!(
            seen[&token(2 * p + 1).into()],
            vec![-libc::ECANCELED],
            "pair {p} was split"
        );
    }
}

#[cfg(debug_assertions)]
#[test]
fn a_failed_linked_push_fails_both_halves() {
    let faults = FaultPlan {
        push_fail: 1,
        ebusy: 0,
        cancel_fail: 0,
        link_eagain: 0,
    };
    let mut ring = tiny(DebugKnobs {
        faults,
        cq_entries: None,
        ..DebugKnobs::default()
    });
    ring.push_linked(ops::nop(token(1)), ops::nop(token(2)));
    let seen = collect(&mut ring, 2);
    assert_eq!(seen[&token(1).into()], vec![-libc::EIO]);
    assert_eq!(seen[&token(2).into()], vec![-libc::ECANCELED]);
    assert_eq!(ring.stats().synthetic_failures, 2);
}

#[test]
fn submit_and_wait_does_not_block_on_a_backlog() {
    // A synthetic completion sits in the backlog while nothing is in flight
    // in the kernel: waiting for a CQE here would block forever.
    let mut ring = tiny(DebugKnobs::default());
    ring.synthesize(42, -libc::EIO);
    ring.submit_and_wait().expect("must not block");
    let mut out = Vec::new();
    ring.reap(&mut out);
    assert_eq!(
        out,
        vec![Completion {
            user_data: 42,
            result: -libc::EIO,
            flags: 0
        }]
    );
}

#[test]
fn ring_sizes_are_clamped_to_what_the_kernel_allows() {
    assert_eq!(ring_sizes(4, 1, None), (4, 8));
    assert_eq!(ring_sizes(1000, 5000, None), (1024, 8192));
    assert_eq!(ring_sizes(1 << 20, 1 << 20, None), (32768, 65536));
    assert_eq!(ring_sizes(1024, 1 << 30, None), (1024, 65536));
    // A forced tiny CQ shrinks the SQ with it (the kernel wants CQ >= SQ).
    assert_eq!(ring_sizes(1024, 4096, Some(8)), (8, 8));
    let ring = Ring::with_knobs(8, 4, DebugKnobs::default()).expect("set-up");
    assert_eq!((ring.sq_capacity(), ring.cq_capacity()), (8, 16));
}

#[test]
fn cq_entries_for_adds_headroom_and_clamps() {
    assert_eq!(cq_entries_for(0), 32);
    assert_eq!(cq_entries_for(100), 128);
    assert_eq!(cq_entries_for(1000), 2048); // 1250 -> 2048
    assert_eq!(cq_entries_for(1600), 2048); // 2000 -> 2048
    assert_eq!(cq_entries_for(1700), 4096); // 2125 -> 4096
    assert_eq!(cq_entries_for(60_000), MAX_CQ_ENTRIES);
    assert_eq!(cq_entries_for(usize::MAX), MAX_CQ_ENTRIES);
}

#[test]
fn fault_specs_parse_strictly() {
    assert_eq!(parse_fault_plan(""), Ok(FaultPlan::default()));
    assert_eq!(
        parse_fault_plan("push_fail=37,ebusy=11"),
        Ok(FaultPlan {
            push_fail: 37,
            ebusy: 11,
            cancel_fail: 0,
            link_eagain: 0,
        })
    );
    assert_eq!(
        parse_fault_plan("cancel_fail=2"),
        Ok(FaultPlan {
            cancel_fail: 2,
            ..FaultPlan::default()
        })
    );
    assert_eq!(
        parse_fault_plan("ebusy=2"),
        Ok(FaultPlan {
            push_fail: 0,
            ebusy: 2,
            cancel_fail: 0,
            link_eagain: 0,
        })
    );
    for bad in [
        "push_fail",
        "push_fail=",
        "push_fail=0",
        "push_fail=-1",
        "push_fail=+3",
        "push_fail=x",
        "push_fail=1 ",
        " push_fail=1",
        "push_fail=1,",
        "push_fail=1,push_fail=2",
        "overflow=3",
        "push_fail=99999999999",
    ] {
        assert!(parse_fault_plan(bad).is_err(), "{bad:?} was accepted");
    }
    assert_eq!(parse_cq_entries("8"), Ok(8));
    for bad in ["", "0", "1", "65537", "eight", "-8"] {
        assert!(parse_cq_entries(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn a_malformed_variable_is_named_in_the_error() {
    let e = RingError::DebugEnv {
        var: FAULT_INJECT_VAR,
        reason: parse_fault_plan("bogus").unwrap_err(),
    };
    assert!(e.to_string().contains("RINGGATE_FAULT_INJECT"), "{e}");
}

#[test]
fn a_latched_error_fails_later_pushes_and_ends_the_loop() {
    let mut ring = tiny(DebugKnobs::default());
    ring.latched = Some(libc::EBADF);
    ring.push(ops::nop(token(1)));
    ring.push_linked(ops::nop(token(2)), ops::nop(token(3)));
    assert!(matches!(ring.submit_and_wait(), Err(RingError::Enter(_))));
    let mut out = Vec::new();
    ring.reap(&mut out);
    let results: Vec<(u64, i32)> = out.iter().map(|c| (c.user_data, c.result)).collect();
    assert_eq!(
        results,
        vec![
            (token(1).into(), -libc::EBADF),
            (token(2).into(), -libc::EBADF),
            (token(3).into(), -libc::ECANCELED),
        ]
    );
    ring.latched = Some(libc::EBADR);
    assert!(matches!(
        ring.submit_and_wait(),
        Err(RingError::CompletionsLost)
    ));
}

#[test]
fn the_ring_fd_is_registered_and_enters_use_it() {
    let mut ring = tiny(DebugKnobs::default());
    assert!(
        ring.features().registered_ring,
        "{:?}",
        ring.ring_fd_fallback()
    );
    assert!(ring.ring_fd_registered());
    ring.push(ops::nop(token(1)));
    ring.push(ops::nop(token(2)));
    ring.submit_and_wait()
        .expect("enter through the registered index");
    let seen = collect(&mut ring, 2);
    assert_eq!(seen.len(), 2);
    let stats = ring.stats();
    assert_eq!(stats.sqes, 2, "{stats:?}");
    assert!(stats.enters >= 1 && stats.waits >= 1, "{stats:?}");
}

#[test]
fn a_thread_registers_more_rings_than_it_has_slots_when_each_is_dropped() {
    // A thread has 16 registered-ring slots; a dropped ring gives its slot
    // back, or the 17th worker ring built on a test thread would fall back.
    for _ in 0..40 {
        let ring = tiny(DebugKnobs::default());
        assert!(ring.ring_fd_registered(), "{:?}", ring.ring_fd_fallback());
    }
}

#[cfg(debug_assertions)]
#[test]
fn a_forced_ring_fd_probe_failure_falls_back_to_the_plain_fd() {
    let mut ring = tiny(DebugKnobs {
        probe_fail: ProbeFail {
            ring_fd: true,
            ..ProbeFail::default()
        },
        ..DebugKnobs::default()
    });
    assert!(!ring.features().registered_ring);
    assert!(ring
        .ring_fd_fallback()
        .is_some_and(|why| why.contains("RINGGATE_DEBUG_PROBE_FAIL")));
    ring.push(ops::nop(token(7)));
    ring.submit_and_wait().expect("enter through the fd");
    assert_eq!(collect(&mut ring, 1)[&token(7).into()], vec![0]);
    assert_eq!(ring.stats().sqes, 1);
}

/// A one-shot RECV on one end of a socket pair, 16 bytes, 'static.
fn recv_sqe(fd: RawFd, user_data: u64) -> Sqe {
    static mut BUF: [u8; 16] = [0; 16];
    // Only `busy_poll_sees_deferred_work_without_sleeping` uses BUF.
    let ptr = std::ptr::addr_of_mut!(BUF).cast::<u8>();
    let e = io_uring::opcode::Recv::new(io_uring::types::Fd(fd), ptr, 16)
        .build()
        .user_data(user_data);
    // SAFETY: BUF is 'static and nothing else reads or writes it meanwhile.
    unsafe { Sqe::new(e) }
}

#[test]
fn busy_poll_sees_deferred_work_without_sleeping() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let mut ring = Ring::with_knobs(8, 16, DebugKnobs::default()).expect("set-up");
    if !(ring.features().defer_taskrun && ring.features().taskrun_flag) {
        eprintln!("skipped: no DEFER_TASKRUN + TASKRUN_FLAG here");
        return;
    }
    let (a, mut b) = UnixStream::pair().unwrap();
    use std::os::fd::AsRawFd;
    ring.push(recv_sqe(a.as_raw_fd(), 77));
    // Nothing to read yet: the poll runs out and sleeps, and the peer's
    // write (from another thread, after the budget) wakes it.
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        b.write_all(b"hello").unwrap();
        b
    });
    ring.submit_and_wait_polling(Some(std::time::Duration::from_micros(200)))
        .unwrap();
    let mut out = Vec::new();
    ring.reap(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].user_data, out[0].result), (77, 5));
    assert_eq!(ring.stats().busy_poll_sleeps, 1);
    let mut b = writer.join().unwrap();
    // Now data is already there when the poll starts: DEFER_TASKRUN keeps it
    // as task work (no CQE until an enter with GETEVENTS), which the poll
    // must notice through IORING_SQ_TASKRUN instead of spinning to its end.
    ring.push(recv_sqe(a.as_raw_fd(), 78));
    ring.flush_sq().expect("the receive is armed on the socket");
    let waits_before = ring.stats().waits;
    b.write_all(b"again!").unwrap();
    assert!(ring.kernel_has_work(), "IORING_SQ_TASKRUN not raised");
    assert!(ring.uring.completion().is_empty(), "no CQE before an enter");
    let started = std::time::Instant::now();
    out.clear();
    while out.is_empty() {
        ring.submit_and_wait_polling(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        ring.reap(&mut out);
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    assert_eq!((out[0].user_data, out[0].result), (78, 6));
    assert_eq!(ring.stats().waits, waits_before, "the poll slept");
    assert!(ring.stats().busy_poll_hits >= 1, "{:?}", ring.stats());
}

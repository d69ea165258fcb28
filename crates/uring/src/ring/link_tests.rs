//! Kernel facts for linking a relay write to the read that follows it, so
//! that one `io_uring_enter` submits both: WRITE with IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS,
//! then a READ. Checked on real loopback TCP sockets, so that a kernel that
//! behaves otherwise fails here and not in the relay. How the relay uses
//! them (transaction pooling's command write linked to its answer's read,
//! `worker/link_write.rs`) is in docs/architecture.md ("Relay").

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types};

use super::*;

/// A connected loopback TCP pair: (ours, the peer's).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

/// [`tcp_pair`] with 64 KiB socket buffers, for the tests that fill them:
/// full default-sized buffers (and a short write into them) take enough of
/// the machine's TCP memory that other sockets' writes wait too.
fn small_pair() -> (TcpStream, TcpStream) {
    let (a, b) = tcp_pair();
    for s in [&a, &b] {
        let s = socket2::SockRef::from(s);
        s.set_send_buffer_size(64 << 10).unwrap();
        s.set_recv_buffer_size(64 << 10).unwrap();
    }
    (a, b)
}

/// WRITE of `buf` to `fd`, linked to the next SQE, posting no CQE when it
/// writes everything; `rw_flags` e.g. RWF_NOWAIT.
///
/// # Safety
/// `buf` must outlive the write's completion (the test keeps it on its
/// stack until every CQE is reaped).
unsafe fn linked_write(fd: RawFd, buf: &[u8], rw_flags: i32, user_data: u64) -> Sqe {
    let e = opcode::Write::new(types::Fd(fd), buf.as_ptr(), buf.len() as u32)
        .offset(u64::MAX)
        .rw_flags(rw_flags)
        .build()
        .flags(squeue::Flags::IO_LINK | squeue::Flags::SKIP_SUCCESS)
        .user_data(user_data);
    // SAFETY: the caller keeps `buf` alive until the completion.
    unsafe { Sqe::new(e) }
}

/// READ from `fd` into `buf`.
///
/// # Safety
/// As for [`linked_write`].
unsafe fn read(fd: RawFd, buf: &mut [u8], user_data: u64) -> Sqe {
    let e = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), buf.len() as u32)
        .offset(u64::MAX)
        .build()
        .user_data(user_data);
    // SAFETY: the caller keeps `buf` alive until the completion.
    unsafe { Sqe::new(e) }
}

const WRITE: u64 = 0x5752_4954_4500_0001;
const READ: u64 = 0x5245_4144_0000_0002;

fn ring() -> Ring {
    Ring::with_knobs(8, 16, DebugKnobs::default()).expect("io_uring set-up")
}

/// Reap until `n` completions arrived (each wait bounded by the peer's
/// activity; a lost completion hangs the test, which the harness reports).
fn wait_for(ring: &mut Ring, n: usize) -> Vec<(u64, i32)> {
    static TS: types::Timespec = types::Timespec::new().sec(2);
    // A bound on the waits: its CQE (TICK) is left out of what is returned.
    ring.push(ops::timeout(&TS, Token::new(OpTag::Tick, 0, 0)));
    let tick: u64 = Token::new(OpTag::Tick, 0, 0).into();
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < n {
        assert!(Instant::now() < deadline, "only {seen:?} after 10 s");
        ring.submit_and_wait().unwrap();
        out.clear();
        ring.reap(&mut out);
        if out.iter().any(|c| c.user_data == tick) {
            ring.push(ops::timeout(&TS, Token::new(OpTag::Tick, 0, 0)));
        }
        seen.extend(
            out.iter()
                .filter(|c| c.user_data != tick)
                .map(|c| (c.user_data, c.result)),
        );
    }
    seen
}

/// Everything that completes within the next 200 ms (a TIMEOUT bounds the
/// wait; its own CQE is left out).
fn settle(ring: &mut Ring) -> Vec<(u64, i32)> {
    static TS: types::Timespec = types::Timespec::new().nsec(200_000_000);
    let mark: u64 = Token::new(OpTag::Tick, 1, 0).into();
    ring.push(ops::timeout(&TS, Token::new(OpTag::Tick, 1, 0)));
    let mut out = Vec::new();
    let mut seen = Vec::new();
    loop {
        ring.submit_and_wait().unwrap();
        out.clear();
        ring.reap(&mut out);
        let done = out.iter().any(|c| c.user_data == mark);
        seen.extend(
            out.iter()
                .filter(|c| c.user_data != mark)
                .map(|c| (c.user_data, c.result)),
        );
        if done {
            return seen;
        }
    }
}

/// Fill our send buffer and the peer's receive buffer (the peer does not
/// read) until a write finds no room at all, even after the segments in
/// flight have landed: a write then has to wait.
fn fill(a: &TcpStream) {
    a.set_nonblocking(true).unwrap();
    let chunk = [0u8; 65536];
    let mut a = a;
    loop {
        let mut wrote = 0;
        // Down to single bytes: a small write still fits in the tail of
        // the last queued segment after a large one found no room.
        for size in [65536, 1] {
            loop {
                match a.write(&chunk[..size]) {
                    Ok(n) => wrote += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("fill: {e}"),
                }
            }
        }
        if wrote == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    a.set_nonblocking(false).unwrap();
}

/// The fast path: one enter submits the pair and sleeps until the read's
/// bytes arrive; the write posts nothing, the read's is the only CQE.
#[test]
fn a_linked_write_posts_no_cqe_and_one_enter_sleeps_until_the_read() {
    let (a, mut b) = tcp_pair();
    let mut ring = ring();
    let ping = *b"ping";
    let mut pong = [0u8; 16];
    let peer = std::thread::spawn(move || {
        let mut got = [0u8; 4];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        std::thread::sleep(Duration::from_millis(50));
        b.write_all(b"pong").unwrap();
        b
    });
    let before = ring.stats();
    // SAFETY: `ping` and `pong` live until both CQEs are reaped below.
    unsafe {
        ring.push(linked_write(a.as_raw_fd(), &ping, 0, WRITE));
        ring.push(read(a.as_raw_fd(), &mut pong, READ));
    }
    let started = Instant::now();
    let seen = wait_for(&mut ring, 1);
    let after = ring.stats();
    assert!(started.elapsed() >= Duration::from_millis(40), "woke early");
    assert_eq!(seen, vec![(READ, 4)], "only the read's CQE");
    assert_eq!(&pong[..4], b"pong");
    assert_eq!(after.enters - before.enters, 1, "{after:?}");
    // The pair and `wait_for`'s bounding TIMEOUT.
    assert_eq!(after.sqes - before.sqes, 3);
    let _b = peer.join().unwrap();
    // Nothing more comes: the write's success was really skipped.
    let mut out = Vec::new();
    ring.flush_sq().unwrap();
    ring.reap(&mut out);
    assert!(out.is_empty(), "{out:?}");
}

/// A write that fails posts its CQE despite SKIP_SUCCESS (req_set_fail
/// clears the skip), and the linked read is cancelled *without a CQE*: the
/// same req_set_fail sets REQ_F_SKIP_LINK_CQES, so io_fail_links marks the
/// rest of the chain CQE_SKIP. The write's CQE is the last word on the pair.
#[test]
fn a_failed_write_posts_its_cqe_and_drops_the_linked_read_silently() {
    let (a, b) = tcp_pair();
    a.shutdown(std::net::Shutdown::Write).unwrap();
    let mut ring = ring();
    let ping = *b"ping";
    let mut buf = [0u8; 16];
    // SAFETY: as above.
    unsafe {
        ring.push(linked_write(a.as_raw_fd(), &ping, 0, WRITE));
        ring.push(read(a.as_raw_fd(), &mut buf, READ));
    }
    assert_eq!(wait_for(&mut ring, 1), vec![(WRITE, -libc::EPIPE)]);
    assert_eq!(settle(&mut ring), vec![], "no CQE for the cancelled read");
    drop(b);
}

/// A write the socket takes only part of (the peer reads nothing) is a
/// short write: it completes with the count and posts its CQE, and the
/// linked read is dropped without one, as after a failure. The relay
/// would then write the rest and arm the read itself.
#[test]
fn a_short_write_posts_its_cqe_and_drops_the_linked_read_silently() {
    let (a, b) = small_pair();
    let mut ring = ring();
    let big = vec![7u8; 4 << 20];
    let mut buf = [0u8; 16];
    // SAFETY: as above.
    unsafe {
        ring.push(linked_write(a.as_raw_fd(), &big, 0, WRITE));
        ring.push(read(a.as_raw_fd(), &mut buf, READ));
    }
    let seen = wait_for(&mut ring, 1);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, WRITE, "{seen:?}");
    assert!(
        seen[0].1 > 0 && (seen[0].1 as usize) < big.len(),
        "{seen:?}"
    );
    assert_eq!(settle(&mut ring), vec![], "no CQE for the cancelled read");
    drop(b);
}

/// A write with no room waits for it (armed on the socket), and the
/// linked read is not issued meanwhile even though its bytes are there:
/// the read's CQE proves the write finished, all of it.
#[test]
fn the_linked_read_completes_only_after_its_write() {
    let (a, mut b) = small_pair();
    fill(&a);
    // The read's bytes wait on another connection: bytes arriving on `a`
    // would open room for the write (its ACKs), not test the link.
    let (c, mut d) = tcp_pair();
    d.write_all(b"pong").unwrap();
    let mut ring = ring();
    let ping = *b"ping";
    let mut buf = [0u8; 16];
    // SAFETY: as above.
    unsafe {
        ring.push(linked_write(a.as_raw_fd(), &ping, 0, WRITE));
        ring.push(read(c.as_raw_fd(), &mut buf, READ));
    }
    ring.flush_sq().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // An enter with GETEVENTS runs any deferred work without waiting.
    ring.flush_sq().unwrap();
    let mut out = Vec::new();
    ring.reap(&mut out);
    assert!(out.is_empty(), "the read ran before its write: {out:?}");
    // The peer drains: the write goes out, then the read is issued.
    let drainer = std::thread::spawn(move || {
        let mut sink = vec![0u8; 1 << 20];
        let mut total = 0usize;
        b.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        while let Ok(n) = b.read(&mut sink) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let seen = wait_for(&mut ring, 1);
    assert_eq!(seen, vec![(READ, 4)], "only the read's CQE");
    assert_eq!(&buf[..4], b"pong");
    assert!(drainer.join().unwrap() > 4);
}

/// With RWF_NOWAIT a write that finds no room does not wait for it: it
/// fails with -EAGAIN (its CQE posted, SKIP_SUCCESS notwithstanding, by the
/// next enter that asks for events), and the linked read is dropped without
/// a CQE. A fallback for a write the socket cannot take at once.
#[test]
fn a_nowait_write_without_room_fails_at_once() {
    let (a, b) = small_pair();
    fill(&a);
    let (c, mut d) = tcp_pair();
    d.write_all(b"pong").unwrap();
    let mut ring = ring();
    let ping = *b"ping";
    let mut buf = [0u8; 16];
    // SAFETY: as above.
    unsafe {
        ring.push(linked_write(a.as_raw_fd(), &ping, libc::RWF_NOWAIT, WRITE));
        ring.push(read(c.as_raw_fd(), &mut buf, READ));
    }
    ring.flush_sq().unwrap();
    let first: Vec<_> = ring
        .uring
        .completion()
        .map(|c| (c.user_data(), c.result()))
        .collect();
    // The submit-only enter (no GETEVENTS) did not post it: the failure
    // is completed through deferred task work, which the next enter that
    // asks for events runs (the worker's waits always do).
    assert_eq!(first, vec![]);
    assert_eq!(settle(&mut ring), vec![(WRITE, -libc::EAGAIN)]);
    drop((b, c));
}

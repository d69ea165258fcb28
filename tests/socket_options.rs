//! The socket options of both legs: every client and backend socket of the proxy has
//! keepalive and a user timeout, read back from the kernel with getsockopt on duplicates of
//! ringgate's own fds.

use std::io::{self};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use mysql::prelude::Queryable;
use testkit::env::backend_env;
use testkit::proxy::{Mode, Proxy, ProxyOpts};

// ---------------------------------------------------------------------------------------------
// Keepalive and TCP_USER_TIMEOUT on both legs
// ---------------------------------------------------------------------------------------------

/// The keepalive settings the proxy is to use by default on both legs.
#[derive(Debug, PartialEq, Eq)]
struct Keepalive {
    keepalive: bool,
    idle: Duration,
    interval: Duration,
    count: u32,
    user_timeout: Option<Duration>,
}

const WANT_KEEPALIVE: Keepalive = Keepalive {
    keepalive: true,
    idle: Duration::from_secs(60),
    interval: Duration::from_secs(10),
    count: 6,
    user_timeout: Some(Duration::from_secs(120)),
};

/// Every TCP socket of `pid` that has a peer, duplicated into this process with
/// pidfd_getfd(2) (root, or the same user with ptrace rights): (local, peer, socket).
fn peer_sockets(pid: u32) -> Vec<(SocketAddr, SocketAddr, socket2::Socket)> {
    tcp_sockets(pid)
        .into_iter()
        .filter_map(|(l, p, s)| Some((l, p?, s)))
        .collect()
}

/// Every TCP socket of `pid`, as [`peer_sockets`], listeners (no peer) included.
fn tcp_sockets(pid: u32) -> Vec<(SocketAddr, Option<SocketAddr>, socket2::Socket)> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is passed.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    assert!(
        pidfd >= 0,
        "pidfd_open({pid}): {}",
        io::Error::last_os_error()
    );
    // SAFETY: pidfd is a fresh fd we own (checked above); OwnedFd closes it once.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("read /proc/PID/fd") {
        let Ok(e) = e else { continue };
        let link = std::fs::read_link(e.path()).unwrap_or_default();
        if !link.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(target) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_getfd takes two fds and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            // The fd was closed since we listed it.
            if err.raw_os_error() == Some(libc::EBADF) {
                continue;
            }
            panic!("pidfd_getfd({pid}, {target}): {err}");
        }
        // SAFETY: fd is a fresh duplicate that we own; the Socket closes it once.
        let sock = unsafe { socket2::Socket::from_raw_fd(fd as i32) };
        let Some(local) = sock.local_addr().ok().and_then(|a| a.as_socket()) else {
            continue;
        };
        let peer = sock.peer_addr().ok().and_then(|a| a.as_socket());
        out.push((local, peer, sock));
    }
    out
}

fn keepalive_of(sock: &socket2::Socket) -> Keepalive {
    Keepalive {
        keepalive: sock.keepalive().unwrap(),
        idle: sock.keepalive_time().unwrap(),
        interval: sock.keepalive_interval().unwrap(),
        count: sock.keepalive_retries().unwrap(),
        user_timeout: sock.tcp_user_timeout().unwrap(),
    }
}

/// The client and backend sockets of `proxy` (with a session open) whose settings differ from
/// `want`, one line each. With direct descriptors (the default) a client socket has no fd to
/// duplicate: the listeners are checked instead, whose options every accepted socket
/// inherits (src/sockopt.rs tests that kernel fact), and must also have TCP_NODELAY.
fn sockets_without(proxy: &Proxy, want: &Keepalive) -> Vec<String> {
    let mut conn = proxy.connect_app();
    assert_eq!(conn.query_first::<u32, _>("SELECT 1").unwrap(), Some(1));
    let backend_port = backend_env().port;
    let direct = proxy.metrics().get("ringgate_direct_descriptors_in_use") > 0.0;
    let all = tcp_sockets(proxy.pid());
    if direct {
        let listeners: Vec<_> = all
            .iter()
            .filter(|(l, p, _)| l.port() == proxy.port && p.is_none())
            .collect();
        assert!(!listeners.is_empty(), "no listener socket found");
        let mut wrong = Vec::new();
        for (local, _, sock) in listeners {
            let got = keepalive_of(sock);
            if got != *want || !sock.nodelay().unwrap() {
                wrong.push(format!(
                    "listener {local}: {got:?}, nodelay {:?}",
                    sock.nodelay()
                ));
            }
        }
        if !wrong.is_empty() {
            return wrong;
        }
    }
    let sockets = peer_sockets(proxy.pid());
    let clients: Vec<_> = sockets
        .iter()
        .filter(|(l, _, _)| l.port() == proxy.port)
        .collect();
    let backends: Vec<_> = sockets
        .iter()
        .filter(|(_, p, _)| p.port() == backend_port)
        .collect();
    assert!(
        (direct || !clients.is_empty()) && !backends.is_empty(),
        "want at least one client and one backend socket, found {} and {}",
        clients.len(),
        backends.len()
    );
    let mut wrong = Vec::new();
    for (what, list) in [("client", &clients), ("backend", &backends)] {
        for (local, peer, sock) in list.iter() {
            let got = keepalive_of(sock);
            if got != *want {
                wrong.push(format!("{what} socket {local} -> {peer}: {got:?}"));
            }
        }
    }
    drop(conn);
    wrong
}

/// A client or server host that vanishes without a FIN is only noticed with TCP keepalive and
/// TCP_USER_TIMEOUT. Both legs (the accepted client socket and every backend socket) must have
/// SO_KEEPALIVE on, idle 60 s, interval 10 s, 6 probes and TCP_USER_TIMEOUT 60 s by default,
/// and the `--tcp-keepalive-*` / `--tcp-user-timeout` flags must reach both legs. Read from the
/// proxy's own sockets, duplicated with pidfd_getfd(2).
#[test]
fn client_and_backend_sockets_have_keepalive_and_user_timeout() {
    let proxy = Proxy::start(Mode::Fixed);
    let wrong = sockets_without(&proxy, &WANT_KEEPALIVE);
    assert!(
        wrong.is_empty(),
        "want {WANT_KEEPALIVE:?} on every client and backend socket by default, got:\n  {}",
        wrong.join("\n  ")
    );
    drop(proxy);

    // Plain client fds: set on each accepted socket.
    let mut o = ProxyOpts::new(Mode::Fixed);
    o.extra_args = ["--direct-descriptors", "off"].map(String::from).to_vec();
    let proxy = Proxy::start_with(o);
    let wrong = sockets_without(&proxy, &WANT_KEEPALIVE);
    assert!(
        wrong.is_empty(),
        "want {WANT_KEEPALIVE:?} on every plain client socket and backend socket, got:\n  {}",
        wrong.join("\n  ")
    );
    drop(proxy);

    let mut o = ProxyOpts::new(Mode::Fixed);
    o.extra_args = [
        "--tcp-keepalive-idle=20s",
        "--tcp-keepalive-interval=5s",
        "--tcp-keepalive-count=3",
        "--tcp-user-timeout=15s",
    ]
    .map(String::from)
    .to_vec();
    let proxy = Proxy::start_with(o);
    let want = Keepalive {
        keepalive: true,
        idle: Duration::from_secs(20),
        interval: Duration::from_secs(5),
        count: 3,
        user_timeout: Some(Duration::from_secs(15)),
    };
    let wrong = sockets_without(&proxy, &want);
    assert!(
        wrong.is_empty(),
        "want {want:?} from the flags on every client and backend socket, got:\n  {}",
        wrong.join("\n  ")
    );
}

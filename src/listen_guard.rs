//! Refuse to share `--listen` with another process by accident.
//!
//! Every worker binds `--listen` with SO_REUSEPORT, so that the kernel
//! spreads connections over the workers. The same option lets a *second*
//! ringgate (same user) bind the same port without an error, and the kernel
//! then silently splits new connections between the two processes. With an
//! old and a new version, or two configs, half the clients land on the wrong
//! one. So before the workers bind, ringgate probes the address with a socket
//! that does *not* set SO_REUSEPORT: its bind fails with EADDRINUSE exactly
//! when some other socket holds the address, whoever owns it.
//!
//! A deliberate hand-over (start the new process, then stop the old one, with
//! no moment where nobody listens) is what `--reuse-port-handover` is for:
//! then the same finding is a warning.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Socket, Type};

/// Whether another socket already holds an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// Nothing holds it (or the probe could not tell; the workers' own bind
    /// then reports any real problem with its own message).
    Free,
    /// Another socket is bound to it: usually another process listening.
    Held,
}

/// Probes `addr` by binding a plain socket to it. Port 0 is always free.
pub fn probe(addr: SocketAddr) -> PortState {
    if addr.port() == 0 {
        return PortState::Free;
    }
    match try_bind(addr) {
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => PortState::Held,
        // EACCES (a port below 1024), EADDRNOTAVAIL (not a local address):
        // the workers' bind fails too and says so.
        _ => PortState::Free,
    }
}

fn try_bind(addr: SocketAddr) -> io::Result<()> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    // SO_REUSEADDR, as the workers set it, so connections of an earlier run
    // still in TIME_WAIT do not count as a holder. Without SO_REUSEPORT a
    // listening socket on the address still makes this bind fail.
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())
    // Dropped unconnected: closing it leaves nothing behind.
}

/// What is wrong, for the log line and `ringgate check`.
pub fn held_detail(addr: SocketAddr) -> String {
    format!(
        "another process already listens on {addr} (find it with `ss -ltnp 'sport = :{}'`); \
         a second ringgate there would silently take part of its connections (SO_REUSEPORT)",
        addr.port()
    )
}

/// The fix, when the sharing is not wanted.
pub const HELD_FIX: &str = "stop that process, or choose another --listen; for a deliberate \
                            hand-over from a running ringgate pass --reuse-port-handover";

/// The warning when `--reuse-port-handover` was given.
pub fn handover_detail(addr: SocketAddr) -> String {
    format!(
        "another process already listens on {addr}; --reuse-port-handover: both share new \
         connections until it stops (check with `ss -ltnp 'sport = :{}'`)",
        addr.port()
    )
}

/// Start-up's decision: `Ok(None)` when the address is free, `Ok(Some(warning))`
/// on a hand-over, `Err(message)` when ringgate must not start.
pub fn check_listen(addr: SocketAddr, handover: bool) -> Result<Option<String>, String> {
    match (probe(addr), handover) {
        (PortState::Free, _) => Ok(None),
        (PortState::Held, true) => Ok(Some(handover_detail(addr))),
        (PortState::Held, false) => Err(format!("cannot start: {}; {HELD_FIX}", held_detail(addr))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// A listener the way a worker makes one: SO_REUSEADDR + SO_REUSEPORT.
    fn reuseport_listener(addr: SocketAddr) -> Socket {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None).unwrap();
        s.set_reuse_address(true).unwrap();
        s.set_reuse_port(true).unwrap();
        s.bind(&addr.into()).unwrap();
        s.listen(16).unwrap();
        s
    }

    #[test]
    fn a_reuseport_listener_is_seen_though_it_would_let_us_bind() {
        let first = reuseport_listener("127.0.0.1:0".parse().unwrap());
        let addr = first.local_addr().unwrap().as_socket().unwrap();
        // What SO_REUSEPORT allows: a second identical listener binds fine.
        let _second = reuseport_listener(addr);
        assert_eq!(probe(addr), PortState::Held);
        let e = check_listen(addr, false).unwrap_err();
        assert!(e.contains(&format!("listens on {addr}")), "{e}");
        assert!(
            e.contains(&format!("ss -ltnp 'sport = :{}'", addr.port())),
            "{e}"
        );
        assert!(e.contains("--reuse-port-handover"), "{e}");
        let w = check_listen(addr, true).unwrap().unwrap();
        assert!(w.contains("--reuse-port-handover"), "{w}");
    }

    #[test]
    fn a_plain_listener_is_seen_and_a_free_port_is_free() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        assert_eq!(probe(addr), PortState::Held);
        drop(l);
        assert_eq!(probe(addr), PortState::Free);
        assert_eq!(check_listen(addr, false), Ok(None));
        assert_eq!(probe("127.0.0.1:0".parse().unwrap()), PortState::Free);
    }

    #[test]
    fn time_wait_connections_of_an_earlier_run_do_not_count() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = TcpStream::connect(addr).unwrap();
        let (s, _) = l.accept().unwrap();
        // The server side closes first, so its end goes to TIME_WAIT.
        drop(s);
        drop(c);
        drop(l);
        assert_eq!(probe(addr), PortState::Free);
    }
}

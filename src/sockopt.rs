//! TCP options that let ringgate notice a dead peer, set on every accepted
//! client socket and every backend socket.
//!
//! Without them a client host that vanishes without a FIN (power loss, a
//! dropped NAT entry, a cable pulled) keeps its session, its read buffer and
//! its leased backend connection forever: nothing ever completes the read
//! that is waiting on it.
//!
//! - **Keepalive** (`SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`,
//!   `TCP_KEEPCNT`) covers an idle connection: after `--tcp-keepalive-idle`
//!   of silence the kernel probes every `--tcp-keepalive-interval` and
//!   resets the connection after `--tcp-keepalive-count` unanswered probes,
//!   so the pending read completes with an error and the normal close path
//!   returns everything.
//! - **`TCP_USER_TIMEOUT`** covers a connection with unacknowledged data in
//!   flight (we were writing when the peer vanished), where keepalive does
//!   not probe and retransmissions would otherwise go on for ~15 minutes.
//!
//! The two interact: once a keepalive probe is out, Linux's keepalive timer
//! resets the connection as soon as the time since the peer last sent
//! anything reaches TCP_USER_TIMEOUT (`tcp_keepalive_timer`), instead of
//! after `--tcp-keepalive-count` unanswered probes. With the user timeout
//! at or below the keepalive idle time, one probe lost on a loaded box (a
//! loopback backlog drop when thousands of idle connections probe at once)
//! kills a healthy idle connection: the idle-max run lost 4,400 of 18,900
//! idle clients that way with both at 60 s. So the default user timeout is
//! idle + interval × count (120 s), and a smaller one gets a warning.
//!
//! Both are kernel timers: they cost nothing on the data path.

use std::io;

use socket2::{Protocol, Socket, TcpKeepalive, Type};

use crate::config::Config;

/// Applies `--tcp-keepalive*` and `--tcp-user-timeout` to `sock`.
///
/// A unix socket, a UDP socket or any other socket that is not TCP is left
/// alone and `Ok(())` is returned, so callers can apply this to every
/// accepted connection without checking which listener it came from.
pub fn apply_tcp_options(sock: &Socket, cfg: &Config) -> io::Result<()> {
    if !is_tcp(sock)? {
        return Ok(());
    }
    if cfg.tcp_keepalive {
        let keepalive = TcpKeepalive::new()
            .with_time(cfg.tcp_keepalive_idle)
            .with_interval(cfg.tcp_keepalive_interval)
            .with_retries(cfg.tcp_keepalive_count);
        sock.set_tcp_keepalive(&keepalive)?;
    } else {
        sock.set_keepalive(false)?;
    }
    // 0 means "the kernel's default" both in the flag and in the option.
    let user_timeout = (!cfg.tcp_user_timeout.is_zero()).then_some(cfg.tcp_user_timeout);
    sock.set_tcp_user_timeout(user_timeout)?;
    Ok(())
}

/// A warning when `--tcp-user-timeout` would cut idle connections before
/// keepalive has had its `--tcp-keepalive-count` probes (see the module
/// comment); `None` when the settings agree or either is off.
pub fn user_timeout_warning(cfg: &Config) -> Option<String> {
    if !cfg.tcp_keepalive || cfg.tcp_user_timeout.is_zero() {
        return None;
    }
    let probes = cfg.tcp_keepalive_interval * cfg.tcp_keepalive_count;
    let keepalive_gives_up = cfg.tcp_keepalive_idle + probes;
    (cfg.tcp_user_timeout < keepalive_gives_up).then(|| {
        format!(
            "--tcp-user-timeout {:?} is below --tcp-keepalive-idle + interval x count ({:?}):              an idle connection is reset as soon as one keepalive probe goes unanswered              (a single lost probe on a loaded host); set --tcp-user-timeout to at least {:?}",
            cfg.tcp_user_timeout, keepalive_gives_up, keepalive_gives_up
        )
    })
}

/// True for an IPv4/IPv6 stream socket whose protocol is TCP (or unstated,
/// which for an inet stream socket means TCP).
fn is_tcp(sock: &Socket) -> io::Result<bool> {
    // A unix socket's address has no inet form; an unbound inet socket still
    // reports 0.0.0.0:0, so this does not depend on the socket's state.
    if sock.local_addr()?.as_socket().is_none() || sock.r#type()? != Type::STREAM {
        return Ok(false);
    }
    Ok(match sock.protocol()? {
        None => true,
        Some(p) => p == Protocol::TCP,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use socket2::{Domain, SockRef};
    use std::net::{SocketAddr, TcpListener};
    use std::time::Duration;

    fn config(extra: &[&str]) -> Config {
        let mut args = vec!["ringgate", "--users-file", "u.json"];
        args.extend_from_slice(extra);
        Config::try_parse_from(args).unwrap()
    }

    /// A connected client socket and the server side of it, both real TCP.
    fn tcp_pair() -> (Socket, Socket) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let client = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        client.connect(&addr.into()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, Socket::from(server))
    }

    #[test]
    fn defaults_are_set_and_read_back_with_getsockopt() {
        let cfg = config(&[]);
        let (client, server) = tcp_pair();
        for sock in [&client, &server] {
            apply_tcp_options(sock, &cfg).unwrap();
            assert!(sock.keepalive().unwrap());
            assert_eq!(sock.keepalive_time().unwrap(), Duration::from_secs(60));
            assert_eq!(sock.keepalive_interval().unwrap(), Duration::from_secs(10));
            assert_eq!(sock.keepalive_retries().unwrap(), 6);
            assert_eq!(
                sock.tcp_user_timeout().unwrap(),
                Some(Duration::from_secs(120))
            );
        }
    }

    #[test]
    fn the_defaults_let_keepalive_probe_before_the_user_timeout_cuts() {
        assert_eq!(user_timeout_warning(&config(&[])), None);
        let w = user_timeout_warning(&config(&["--tcp-user-timeout=60s"])).unwrap();
        assert!(w.contains("at least 120s"), "{w}");
        for ok in [
            &["--tcp-user-timeout=0"][..],
            &["--tcp-keepalive=false", "--tcp-user-timeout=5s"],
            &[
                "--tcp-keepalive-idle=7s",
                "--tcp-keepalive-interval=3s",
                "--tcp-keepalive-count=2",
                "--tcp-user-timeout=13s",
            ],
        ] {
            assert_eq!(user_timeout_warning(&config(ok)), None, "{ok:?}");
        }
    }

    #[test]
    fn flags_are_honoured_and_zero_or_false_turn_options_off() {
        let (client, _server) = tcp_pair();
        let cfg = config(&[
            "--tcp-keepalive-idle=7s",
            "--tcp-keepalive-interval=3s",
            "--tcp-keepalive-count=2",
            "--tcp-user-timeout=1500ms",
        ]);
        apply_tcp_options(&client, &cfg).unwrap();
        assert_eq!(client.keepalive_time().unwrap(), Duration::from_secs(7));
        assert_eq!(client.keepalive_interval().unwrap(), Duration::from_secs(3));
        assert_eq!(client.keepalive_retries().unwrap(), 2);
        assert_eq!(
            client.tcp_user_timeout().unwrap(),
            Some(Duration::from_millis(1500))
        );

        let cfg = config(&["--tcp-keepalive=false", "--tcp-user-timeout=0"]);
        apply_tcp_options(&client, &cfg).unwrap();
        assert!(!client.keepalive().unwrap());
        assert_eq!(client.tcp_user_timeout().unwrap(), None);
    }

    /// Direct descriptors (worker/direct.rs) have no fd to setsockopt on:
    /// the options are set once on the listener, and this is the kernel
    /// fact that rests on (Linux 6.18): an accepted socket inherits
    /// TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE/INTVL/CNT and TCP_USER_TIMEOUT.
    #[test]
    fn an_accepted_socket_inherits_the_listeners_options() {
        let cfg = config(&[
            "--tcp-keepalive-idle=7s",
            "--tcp-keepalive-interval=3s",
            "--tcp-keepalive-count=2",
            "--tcp-user-timeout=1500ms",
        ]);
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        listener.bind(&any.into()).unwrap();
        listener.set_nodelay(true).unwrap();
        apply_tcp_options(&listener, &cfg).unwrap();
        listener.listen(4).unwrap();
        let client = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        client.connect(&listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(accepted.nodelay().unwrap());
        assert!(accepted.keepalive().unwrap());
        assert_eq!(accepted.keepalive_time().unwrap(), Duration::from_secs(7));
        assert_eq!(
            accepted.keepalive_interval().unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(accepted.keepalive_retries().unwrap(), 2);
        assert_eq!(
            accepted.tcp_user_timeout().unwrap(),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn works_on_an_unconnected_socket() {
        let cfg = config(&[]);
        // A backend socket is configured before its connect is submitted.
        let fresh = Socket::new(Domain::IPV6, Type::STREAM, None).unwrap();
        apply_tcp_options(&fresh, &cfg).unwrap();
        assert!(fresh.keepalive().unwrap());
    }

    #[test]
    fn unix_and_udp_sockets_are_left_alone() {
        let cfg = config(&[]);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        apply_tcp_options(&SockRef::from(&a), &cfg).unwrap();
        assert!(!SockRef::from(&a).keepalive().unwrap());
        let udp = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        apply_tcp_options(&udp, &cfg).unwrap();
    }
}

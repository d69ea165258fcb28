//! Accepting clients: multishot accept, the EMFILE back-off, and the new
//! session's greeting.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;

use super::*;
use crate::proxy::conn_io::SockHandle;
use machines::registry::{ClientSock, RingWake};

impl Worker {
    // ---- accepting ----

    pub(super) fn arm_accepts(&mut self) {
        for which in [LISTENER_TCP, LISTENER_UNIX] {
            self.arm_accept(which);
        }
    }

    pub(super) fn arm_accept(&mut self, which: usize) {
        if self.direct.is_some() {
            return self.arm_direct_accepts(which);
        }
        let multishot = self.accept_multishot;
        let Some(listener) = self.listeners[which].as_mut() else {
            return;
        };
        if listener.armed || self.draining.is_some() || self.accept_resume_at.is_some() {
            return;
        }
        let fd = listener.sock.as_raw_fd();
        let token = Token::new(OpTag::Accept, which as u32, 0);
        listener.armed = true;
        let sqe = if multishot {
            ops::accept_multi(fd, token)
        } else {
            ops::accept(fd, token)
        };
        self.submit(sqe);
    }

    pub(super) fn on_accept(&mut self, which: usize, res: i32, flags: u32) {
        if !io_uring::cqueue::more(flags) {
            if let Some(l) = self.listeners.get_mut(which).and_then(Option::as_mut) {
                l.armed = false;
            }
        }
        if res < 0 {
            let errno = -res;
            match errno {
                // Multishot accept is 5.19+: older kernels reject it.
                libc::EINVAL if self.accept_multishot && self.draining.is_none() => {
                    tracing::info!(
                        worker = self.id,
                        "multishot accept unsupported; using one-shot accept"
                    );
                    self.accept_multishot = false;
                }
                libc::EMFILE | libc::ENFILE => return self.accept_paused(errno),
                _ if self.draining.is_some() => return,
                _ => tracing::debug!(
                    worker = self.id,
                    "accept failed: {}",
                    io::Error::from_raw_os_error(errno)
                ),
            }
        } else {
            let sock = uring::ring::accepted_socket(res);
            if self.draining.is_some() {
                // Raced with the drain: refuse by closing at once.
                drop(sock);
            } else {
                if self.direct.is_some() {
                    // The file table was full (`direct.rs`).
                    self.metrics()
                        .direct_descriptor_fallbacks_total
                        .fetch_add(1, Relaxed);
                } else {
                    // Both fail harmlessly on a unix socket. With direct
                    // descriptors on, the listener's options are inherited.
                    let _ = sock.set_nodelay(true);
                    if let Err(e) = crate::sockopt::apply_tcp_options(&sock, &self.shared.config) {
                        tracing::debug!(worker = self.id, "client socket options: {e}");
                    }
                }
                let peer = peer_of(&sock);
                self.on_new_client(SockHandle::Plain(sock), peer);
            }
        }
        self.arm_accept(which);
    }

    /// EMFILE/ENFILE: back off instead of spinning, with a log line at most
    /// once per interval.
    pub(super) fn accept_paused(&mut self, errno: i32) {
        let now = self.now;
        self.fd_exhaustion_paused += 1;
        if self
            .fd_exhaustion_logged_at
            .is_none_or(|t| now.duration_since(t) >= FD_EXHAUSTION_LOG_INTERVAL)
        {
            tracing::warn!(
                worker = self.id,
                "out of file descriptors ({}); accepts paused {} time(s) for {:?} each: raise LimitNOFILE / ulimit -n",
                io::Error::from_raw_os_error(errno),
                self.fd_exhaustion_paused,
                ACCEPT_BACKOFF
            );
            self.fd_exhaustion_logged_at = Some(now);
            self.fd_exhaustion_paused = 0;
        }
        self.accept_resume_at = Some(now + ACCEPT_BACKOFF);
    }

    /// What the greeting offers: the proxy's own capabilities plus the
    /// pass-through ones the backend supports (all of them until the first
    /// backend greeting tells us otherwise), and the MariaDB extended
    /// capabilities.
    pub(super) fn advertised_caps(&self) -> (u32, u32) {
        let mut pass = PASSTHROUGH_CAPS & self.template.capabilities.unwrap_or(u32::MAX);
        if !self.shared.config.allow_local_infile {
            pass &= !CLIENT_LOCAL_FILES;
        }
        // Compression is the proxy's own (client leg only), whatever the
        // backend offers.
        let compress = if self.shared.config.no_client_compression {
            0
        } else {
            CLIENT_COMPRESS
        };
        // TLS is the proxy's own too (the client leg).
        let ssl = if self.shared.tls.is_some() {
            CLIENT_SSL
        } else {
            0
        };
        machines::presentation::greeting_capabilities(
            PROXY_CAPS | compress | ssl | pass,
            self.template.capabilities,
            self.template.ext_capabilities,
        )
    }

    /// A client accepted: `peer` is (address for log lines, host for the
    /// login's `'user'@'host'`).
    pub(super) fn on_new_client(&mut self, sock: SockHandle, (peer, peer_host): (String, String)) {
        let m = self.metrics();
        m.client_connections_total.fetch_add(1, Relaxed);
        m.client_connections.fetch_add(1, Relaxed);
        let counted = try_reserve(&self.shared.clients, self.shared.config.max_connections);
        let scramble = fresh_scramble();
        if !counted && self.log_limiter.allow(self.now) {
            tracing::warn!(
                worker = self.id,
                peer = %peer,
                "rejected a client: --max-connections {} reached (ERR 1040)",
                self.shared.config.max_connections
            );
        }
        // The read buffer is taken now, before the greeting is written, so a
        // connection storm meets the pool at accept time (never blocking).
        let buf = counted.then(|| self.buffers.acquire(Owner::Client));
        let (index, generation) = self.sessions.next_key();
        let conn = self.register_client(&sock, index, generation);
        let connection_id = conn.id();
        let mut out = Vec::new();
        let (capabilities, ext_capabilities) = self.advertised_caps();
        let mut session = Session::new(
            NewSession {
                scramble,
                connection_id,
                capabilities,
                ext_capabilities,
                server_version: self.template.server_version.clone(),
                peer_host,
                now: self.now,
                over_limit: !counted,
                transaction_pooling: self.shared.config.pooling == Pooling::Transaction,
                require_secure_transport: self.shared.config.require_secure_transport,
            },
            &mut out,
        );
        session.set_registry_entry(conn.shared_entry());
        let io = ConnIo::with_handle(sock, buf);
        let key = self
            .sessions
            .insert(SessionSlot::new(conn, io, session, counted, peer));
        debug_assert_eq!(key, (index, generation), "the key the registry was given");
        let sid = SessionId { index, generation };
        self.session_q.extend(out.into_iter().map(|a| (sid, a)));
    }

    /// Registered at once: the greeting tells the client this id. A direct
    /// descriptor is reached through this ring, by the token of the session
    /// about to be inserted at (`index`, `generation`).
    fn register_client(&mut self, sock: &SockHandle, index: u32, generation: u32) -> Registration {
        let client_sock = match sock {
            SockHandle::Plain(s) => ClientSock::Fd(s.as_raw_fd()),
            SockHandle::Fixed(_) => ClientSock::Ring(RingWake {
                ring_fd: self.ring.fd(),
                user_data: Token::new(OpTag::KillWake, index, generation).into(),
            }),
        };
        self.shared
            .registry
            .register_next(&self.conn_ids, client_sock)
    }
}

/// The greeting's scramble (a fixed one, logged, when the system gives no
/// randomness).
fn fresh_scramble() -> [u8; 20] {
    match auth::new_scramble() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("no randomness for the scramble: {e}");
            [b'x'; 20]
        }
    }
}

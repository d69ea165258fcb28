//! A relay write becomes an SQE. The transport a write goes out on is
//! chosen once, in [`Worker::relay_transport`], from the connection's
//! layers (TLS, a client leg) and the worker's read mode (ring, fixed,
//! heap); each transport then builds its SQE in one place. The reads'
//! paths are chosen the same way, in `read_path.rs`.

use super::*;

/// How a relay write goes out.
enum Transport {
    /// Backend TLS: the write to the backend sends a sealed copy.
    BackendTls(BackendId),
    /// Client TLS: the write to the client sends a sealed copy.
    ClientTls,
    /// Ring mode: the write sends the ring chunk the relay was handed.
    RingChunk(Sqe),
    /// The connection's own buffer, or behind a leg the leg's; a command's
    /// write to the backend may go out linked to the read behind it
    /// (`link_write.rs`).
    OwnBuffer { linked: bool },
}

impl Worker {
    /// Submit one relay write for `sid`. Up writes send the session's
    /// buffer to the backend's socket; down writes the backend's buffer to
    /// the client's socket. The op is counted on the socket it names and on
    /// the session its token names.
    pub(super) fn relay_submit(&mut self, sid: SessionId, io: RelayIo) {
        let Some(fds) = self.relay_fds(sid) else {
            return;
        };
        let tag = match io {
            RelayIo::UpWrite { .. } => OpTag::UpWrite,
            RelayIo::DownWrite { .. } => OpTag::DownWrite,
        };
        let user_data = Token::new(tag, sid.index, sid.generation).into();
        let Some(transport) = self.relay_transport(sid, io, fds, user_data) else {
            return;
        };
        match (transport, io) {
            (Transport::BackendTls(bid), RelayIo::UpWrite { pos, end }) => {
                self.backend_tls_up_write(sid, bid, pos, end)
            }
            (Transport::ClientTls, RelayIo::DownWrite { pos, end }) => {
                self.client_tls_down_write(sid, pos, end)
            }
            (Transport::RingChunk(sqe), _) => self.relay_counted(sid, io, sqe),
            (Transport::OwnBuffer { linked }, _) => {
                self.relay_own_buffer(sid, io, fds, user_data, linked)
            }
            (Transport::BackendTls(_) | Transport::ClientTls, _) => {
                debug_assert!(false, "a TLS transport chosen for the wrong operation")
            }
        }
    }

    /// (client, backend) sockets of a relaying session.
    fn relay_fds(&mut self, sid: SessionId) -> Option<(SockRef, SockRef)> {
        let slot = self.sessions.slot(sid)?;
        let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) else {
            // The session keeps its backend until the relay has ended, so
            // the relay never asks for this without one.
            debug_assert!(false, "relay operation without a leased backend");
            return None;
        };
        Some((slot.io.fd(), b.fd()))
    }

    /// The transport `io` goes out on: TLS first (it seals what the layers
    /// above it framed), then the ring's chunk where no layer copies the
    /// bytes, else the connection's own buffer.
    fn relay_transport(
        &mut self,
        sid: SessionId,
        io: RelayIo,
        (client_fd, backend_fd): (SockRef, SockRef),
        user_data: u64,
    ) -> Option<Transport> {
        let linked = self.up_write_links(sid, io);
        let slot = self.sessions.slot(sid)?;
        let (has_leg, client_tls, backend) = (slot.leg.is_some(), slot.tls.is_some(), slot.backend);
        match (io, backend) {
            (RelayIo::UpWrite { .. }, Some(bid)) if self.backend_tls_on(bid) => {
                return Some(Transport::BackendTls(bid))
            }
            (RelayIo::DownWrite { .. }, _) if client_tls => return Some(Transport::ClientTls),
            _ => {}
        }
        let target_fd = match io {
            RelayIo::UpWrite { .. } => backend_fd,
            RelayIo::DownWrite { .. } => client_fd,
        };
        if !has_leg && !client_tls {
            if let Some(sqe) = self.ring_send_sqe(sid, io, target_fd, user_data) {
                return Some(Transport::RingChunk(sqe));
            }
        }
        Some(Transport::OwnBuffer { linked })
    }

    /// Behind client TLS the write to the client sends a sealed copy of
    /// those bytes.
    fn client_tls_down_write(&mut self, sid: SessionId, pos: usize, end: usize) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        slot.io.op_started();
        slot.relay_ops += 1;
        self.tls_send(sid, tls_io::Upper::Down, (pos, end))
    }

    /// The operation on the connection's own buffer (behind a leg, a write
    /// sends the leg's buffer instead).
    fn relay_own_buffer(
        &mut self,
        sid: SessionId,
        io: RelayIo,
        (client_fd, backend_fd): (SockRef, SockRef),
        user_data: u64,
        linked: bool,
    ) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) else {
            return;
        };
        let buf = match io {
            RelayIo::UpWrite { .. } => slot.io.buf.as_mut(),
            RelayIo::DownWrite { .. } => b.buf.as_mut(),
        };
        let Some(buf) = buf else {
            debug_assert!(false, "relay operation on a released buffer");
            return;
        };
        let leg_sqe = slot.leg.as_mut().map(|leg| match io {
            // Behind a leg the relay's writes send the leg's buffers.
            RelayIo::UpWrite { pos, end } => {
                debug_assert_eq!(end, leg.up.len());
                leg.up.write_sqe(backend_fd, pos, user_data)
            }
            RelayIo::DownWrite { pos, end } => {
                debug_assert_eq!(end, leg.down.len());
                leg.down.write_sqe(client_fd, pos, user_data)
            }
        });
        let sqe = leg_sqe.unwrap_or_else(|| match io {
            RelayIo::UpWrite { pos, end } if linked => {
                buf.write_nowait_sqe(backend_fd, pos, end, user_data)
            }
            RelayIo::UpWrite { pos, end } => buf.write_sqe(backend_fd, pos, end, user_data),
            RelayIo::DownWrite { pos, end } => buf.write_sqe(client_fd, pos, end, user_data),
        });
        if let (true, RelayIo::UpWrite { pos, end }) = (linked, io) {
            // Held for the read the relay asked for behind it.
            self.relay_count(sid, io);
            return self.hold_up_write(sid, sqe, end - pos);
        }
        self.relay_counted(sid, io, sqe);
    }

    /// Count a relay write on the socket it names and on its session, then
    /// submit it.
    fn relay_counted(&mut self, sid: SessionId, io: RelayIo, sqe: Sqe) {
        self.relay_count(sid, io);
        self.submit(sqe);
    }

    /// Count a relay operation on the socket it names and on its session.
    fn relay_count(&mut self, sid: SessionId, io: RelayIo) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        match io {
            RelayIo::UpWrite { .. } => {
                if let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) {
                    b.op_started();
                }
            }
            RelayIo::DownWrite { .. } => slot.io.op_started(),
        }
        slot.relay_ops += 1;
    }
}

//! The relay writes a chunk straight from its ring buffer: the send, its
//! completion, and the chunk going back to the ring once forwarded (bytes
//! behind what was forwarded are kept in the connection's own buffer).

use super::*;

impl Worker {
    /// The relay's write source: the chunk it was handed, if any (else the
    /// connection's own buffer). Builds the send and marks it in flight.
    pub(in crate::proxy::worker) fn ring_send_sqe(
        &mut self,
        sid: SessionId,
        io: RelayIo,
        fd: SockRef,
        user_data: u64,
    ) -> Option<Sqe> {
        let ring = self.buffers.buf_ring()?;
        let slot = self.sessions.slot(sid)?;
        let (recv, pos, end) = match io {
            RelayIo::UpWrite { pos, end } => (slot.io.recv.as_mut()?, pos, end),
            RelayIo::DownWrite { pos, end } => {
                let b = slot.backend.and_then(|b| self.backends.get_mut(b))?;
                (b.recv.as_mut()?, pos, end)
            }
        };
        let chunk = recv.current.as_mut()?;
        Some(ring.send_sqe(chunk, fd, pos, end, user_data))
    }

    /// A relay write completed: clear the in-flight mark of the chunk it
    /// sent. False when it was sent from the connection's own buffer.
    pub(in crate::proxy::worker) fn ring_write_done(&mut self, sid: SessionId, side: Side) -> bool {
        let Some(recv) = self.recv_of(sid, side) else {
            return false;
        };
        match recv.current.as_mut().filter(|c| c.in_flight()) {
            Some(c) => {
                c.complete_write();
                true
            }
            None => false,
        }
    }

    /// The relay wrote `..end` of its chunk: give it back to the ring. Bytes
    /// behind `end` (a COM_CHANGE_USER the relay stopped at) are kept in the
    /// connection's own buffer for the session, as the other modes keep them.
    /// No chunk (a write from the connection's own buffer): nothing to do.
    pub(in crate::proxy::worker) fn ring_forwarded(
        &mut self,
        sid: SessionId,
        side: Side,
        end: usize,
    ) {
        let Some(io) = side_io(&mut self.sessions, &mut self.backends, sid, side) else {
            return;
        };
        let Some(chunk) = io.recv.as_mut().and_then(|r| r.current.take()) else {
            return;
        };
        let mut lost = 0;
        // A backend's chunk is forwarded whole: `end` is all the relay was
        // handed, less the session-state blocks it stripped in place; an
        // unsolicited ERR with bytes behind it ends the relay.
        if chunk.len() > end && side == Side::Client {
            // They fit: only the client's side gets here, and
            // a client's chunk is never joined, so it is one ring buffer of
            // --read-buffer-size at most, the connection buffer's size; the
            // relay wrote it from the chunk, handed over to an empty
            // buffer, which the write's completion cleared.
            let owner = match side {
                Side::Client => Owner::Client,
                Side::Backend => Owner::Backend,
            };
            let buf = self.buffers.ensure(&mut io.buf, owner);
            if let Some(ring) = self.buffers.buf_ring() {
                if buf.append(&ring.bytes(&chunk)[end..]) {
                    copied(&self.shared, self.id, chunk.len() - end);
                } else {
                    lost = chunk.len() - end;
                }
            }
        }
        let Some(ring) = self.buffers.buf_ring() else {
            return;
        };
        if let Err(c) = ring.put(chunk) {
            debug_assert!(false, "forwarded chunk still in flight");
            if let Some(r) = io.recv.as_mut() {
                r.current = Some(c);
            }
        }
        if lost > 0 {
            self.ring_lost(sid, side, "bytes behind a forwarded command", lost);
        }
    }

    /// Keep the client's current chunk, if it has one, in its own buffer (a
    /// KILL is about to be rewritten there) and give the chunk back.
    pub(in crate::proxy::worker) fn ring_stage_client(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let Some(chunk) = slot.io.recv.as_mut().and_then(|r| r.current.take()) else {
            return;
        };
        // It fits: a client's chunk is never joined (one ring buffer of
        // --read-buffer-size at most, the connection buffer's size), and a
        // current chunk was handed over only to an empty buffer.
        let buf = self.buffers.ensure(&mut slot.io.buf, Owner::Client);
        let Some(ring) = self.buffers.buf_ring() else {
            return;
        };
        let kept = buf.append(ring.bytes(&chunk));
        let n = chunk.len();
        let _ = ring.put(chunk);
        if kept {
            copied(&self.shared, self.id, n);
        } else {
            self.ring_lost(sid, Side::Client, "a client's staged command", n);
        }
    }

    /// The client's chunk was consumed (ClearBuffer).
    pub(in crate::proxy::worker) fn ring_drop_client_chunk(&mut self, sid: SessionId) {
        self.ring_forwarded(sid, Side::Client, usize::MAX);
    }
}

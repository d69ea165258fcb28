//! A relay read in ring mode: the next chunk (joined with what follows when
//! a client's command crosses ring buffers, or behind bytes kept in the
//! connection's own buffer), or the receive's end, handed to the session.

use super::*;
use crate::proxy::worker::read_path::ReadPath;
use uring::buffers::provided::{BufRing, Chunk, RingRecv};
use uring::buffers::ReadBuffer;

/// A new relay read gives back the chunk the last one was handed. The
/// backend's is kept for the next read, as the backend buffer keeps it in
/// the other modes. It fits: the relay reads its backend again without
/// forwarding only for a partial unsolicited ERR between commands (or one
/// that beat a park's cancel), which the tracker bounds below 4 +
/// MAX_UNSOLICITED_ERR = 4096 bytes, the smallest --read-buffer-size;
/// longer data, even a chunk joined at delivery (a response owed, up to
/// --large-read-size), is forwarded whole or ends the relay. A current
/// chunk was handed over only to an empty buffer, and nothing fills that
/// buffer before this read. The bytes lost if it did not fit.
fn put_back_current(
    recv: &mut RingRecv<RecvEnd>,
    own: &mut Option<ReadBuffer>,
    buffers: &mut BufferPool,
    side: Side,
    copy: Copied,
) -> usize {
    let Some(chunk) = recv.current.take() else {
        return 0;
    };
    let mut lost = 0;
    if side == Side::Backend {
        let buf = buffers.ensure(own, Owner::Backend);
        if let Some(ring) = buffers.buf_ring() {
            if buf.append(ring.bytes(&chunk)) {
                copy.count(chunk.len());
            } else {
                lost = chunk.len();
            }
        }
    }
    if let Some(ring) = buffers.buf_ring() {
        if let Err(c) = ring.put(chunk) {
            debug_assert!(false, "relay read while its chunk is being sent");
            recv.current = Some(c);
        }
    }
    lost
}

/// Whether the next chunk is a tail to join with what follows. Only the
/// client's commands need the join: the tracker follows server bytes across
/// any cut, so a backend's chunks (a large result: every 16 KiB chunk ends
/// its buffer) go out as they are, without a copy.
fn needs_join(recv: &RingRecv<RecvEnd>, side: Side) -> bool {
    side == Side::Client && recv.queue.front().is_some_and(|c| c.is_tail())
}

/// A chunk that ends its ring buffer with more bytes behind it may end
/// inside a packet header (a 5-byte COM_QUIT cut 3 + 2 would have its first
/// bytes forwarded alone, and the connection could not be reused): join it
/// with what follows in the connection's own buffer (a copy of up to a read
/// buffer per ring buffer's worth of client traffic). The tail, then as
/// much of the next chunk as fits: (joined, bytes lost).
fn join_tail(
    recv: &mut RingRecv<RecvEnd>,
    buf: Option<&mut ReadBuffer>,
    ring: &mut BufRing,
    copy: Copied,
) -> (bool, usize) {
    let Some(buf) = buf.filter(|b| !b.in_flight()) else {
        return (false, 0);
    };
    let mut joined = false;
    for _ in 0..2 {
        let Some(mut c) = recv.queue.pop_front() else {
            break;
        };
        let n = c.len().min(buf.capacity() - buf.filled_len());
        if !buf.append(&ring.bytes(&c)[..n]) {
            // Cannot happen: `n` is the room left.
            recv.queue.push_front(c);
            return (joined, n);
        }
        copy.count(n);
        joined = true;
        if n == c.len() {
            let _ = ring.put(c);
        } else {
            c.advance(n);
            recv.queue.push_front(c);
            break;
        }
    }
    (joined, 0)
}

/// What a ring read hands the session next: the joined bytes in the
/// connection's own buffer, the next chunk (behind bytes kept there, or on
/// its own as the receive's current chunk), or the receive's end; none
/// while nothing is there. (result, bytes, bytes lost)
fn next_delivery<'a>(
    recv: &'a mut RingRecv<RecvEnd>,
    buf: Option<&'a mut ReadBuffer>,
    ring: &'a mut BufRing,
    joined: bool,
    gather: bool,
    copy: Copied,
) -> Option<(Completion, &'a mut [u8], usize)> {
    if joined {
        let buf = buf?;
        return Some((Completion::Done(buf.filled_len()), buf.filled_mut(), 0));
    }
    let Some(mut chunk) = recv.queue.pop_front() else {
        let end = recv.end?.completion();
        return Some((end, buf.map_or(&mut [][..], |b| b.filled_mut()), 0));
    };
    let kept = buf.as_ref().is_some_and(|b| b.filled_len() > 0);
    if gather && !kept {
        // Give the relay every queued chunk that follows this one in
        // memory (a bundle's buffers, the next pieces of an incremental
        // buffer), up to a large read's size, for one send instead of one
        // per ring buffer.
        while let Some(next) = recv.queue.pop_front() {
            if let Err(next) = ring.join(&mut chunk, next) {
                recv.queue.push_front(next);
                break;
            }
        }
    }
    let res = Completion::Done(chunk.len());
    Some(match buf.filter(|b| b.filled_len() > 0) {
        Some(buf) => {
            let (data, lost) = append_behind_kept(recv, buf, ring, chunk, copy);
            (res, data, lost)
        }
        None => (res, ring.bytes_mut(recv.current.insert(chunk)), 0),
    })
}

/// Bytes kept from earlier reads come first; what does not fit stays
/// queued for the next read. (the buffer's bytes, bytes lost)
fn append_behind_kept<'a>(
    recv: &mut RingRecv<RecvEnd>,
    buf: &'a mut ReadBuffer,
    ring: &mut BufRing,
    mut chunk: Chunk,
    copy: Copied,
) -> (&'a mut [u8], usize) {
    let n = chunk.len().min(buf.capacity() - buf.filled_len());
    if !buf.append(&ring.bytes(&chunk)[..n]) {
        // Cannot happen: `n` is the room left.
        recv.queue.push_front(chunk);
        return (&mut [][..], n);
    }
    copy.count(n);
    if n == chunk.len() {
        let _ = ring.put(chunk);
    } else {
        chunk.advance(n);
        recv.queue.push_front(chunk);
    }
    (buf.filled_mut(), 0)
}

/// A ring read's result (bytes or the receive's end) to the session
/// machine's read of `side`.
fn hand_to_session(
    session: &mut Session,
    side: Side,
    res: Completion,
    data: &mut [u8],
    ctx: &SessionCtx,
    out: &mut Vec<SessionAction>,
) {
    match side {
        Side::Client => session.on_client_read(res, data, ctx, out),
        Side::Backend => session.on_backend_read(res, data, ctx, out),
    }
}

impl Worker {
    /// A relay read of `side` through the ring (its [`ReadPath`] is
    /// [`ReadPath::Ring`]).
    pub(in crate::proxy::worker) fn ring_read(&mut self, sid: SessionId, side: Side) {
        debug_assert!(
            matches!(self.read_path(sid, side, true), Some(ReadPath::Ring) | None),
            "a ring read of a side that reads into its own buffer"
        );
        let Some(io) = side_io(&mut self.sessions, &mut self.backends, sid, side) else {
            return;
        };
        let recv = io.recv.get_or_insert_with(RingRecv::default);
        recv.owner = Some((sid.index, sid.generation));
        // A new read: any cancel of the previous one has been delivered.
        recv.cancelling = false;
        let copy = Copied(&self.shared, self.id);
        let lost = put_back_current(recv, &mut io.buf, &mut self.buffers, side, copy);
        if lost > 0 {
            self.ring_lost(sid, side, "a backend's kept bytes", lost);
            // The read ends with the error ring_lost left on the receive.
            return self.ring_deliver(sid, side);
        }
        if recv.ready() {
            self.ring_deliver(sid, side);
        } else {
            recv.waiting = true;
            recv.shrink_idle();
            // Waiting for bytes: hold no buffer meanwhile.
            self.buffers.shed(&mut io.buf);
            self.ring_arm(sid, side);
        }
    }

    /// The relay's next read of the client through the ring: what it was
    /// handed is consumed, so bytes kept in the client's own buffer go, and
    /// so does that buffer (unless a read still names it).
    pub(in crate::proxy::worker) fn ring_read_consumed(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if let Some(buf) = slot.io.buf.as_mut().filter(|b| !b.in_flight()) {
            buf.clear();
        }
        self.buffers.shed(&mut slot.io.buf);
        self.ring_read(sid, Side::Client);
    }

    /// Hand the next chunk (or the receive's end) to the session.
    pub(super) fn ring_deliver(&mut self, sid: SessionId, side: Side) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let SessionSlot {
            io: client_io,
            session,
            backend,
            ..
        } = slot;
        let io = match side {
            Side::Client => client_io,
            Side::Backend => match backend.and_then(|b| self.backends.get_mut(b)) {
                Some(b) => b,
                None => return,
            },
        };
        let Some(recv) = io.recv.as_mut() else { return };
        let join = needs_join(recv, side);
        if join && (recv.queue.len() >= 2 || !recv.armed) {
            // The join below needs the connection's own buffer (a
            // client's: only a client's chunks are joined).
            self.buffers.ensure(&mut io.buf, Owner::Client);
        }
        let Some(ring) = self.buffers.buf_ring() else {
            return;
        };
        let copy = Copied(&self.shared, self.id);
        let mut joined = false;
        if join {
            if recv.queue.len() < 2 && recv.armed {
                // The continuation's CQE is on its way.
                recv.waiting = true;
                return;
            }
            let lost;
            (joined, lost) = join_tail(recv, io.buf.as_mut(), ring, copy);
            if lost > 0 {
                self.ring_lost(sid, side, "a client's joined command", lost);
                return self.ring_deliver(sid, side);
            }
        }
        recv.waiting = false;
        // A response is owed when the relay reads its backend other than
        // between commands: it forwards all it is handed.
        let gather = side == Side::Backend && !session.relay_between_commands();
        let Some((res, data, lost)) =
            next_delivery(recv, io.buf.as_mut(), ring, joined, gather, copy)
        else {
            return;
        };
        if lost > 0 {
            self.ring_lost(sid, side, "bytes behind kept ones", lost);
            return self.ring_deliver(sid, side);
        }
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        let backend = *backend;
        hand_to_session(session, side, res, data, &ctx, &mut out);
        if side == Side::Backend && res == Completion::Cancelled && session.in_statement_flow() {
            self.ring_watch_end_seen(backend);
        }
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
    }

    /// The relay stopped at a statement command, and this was the end of
    /// its own watch, cancelled at the stop: it has been seen. A session
    /// that keeps its connection (pinned, in a transaction) and goes on
    /// without the pool's exchange (COM_STMT_CLOSE) would otherwise read it
    /// again in its next relay as the server closing the connection.
    fn ring_watch_end_seen(&mut self, backend: Option<BackendId>) {
        if let Some(recv) = backend
            .and_then(|b| self.backends.get_mut(b))
            .and_then(|b| b.recv.as_mut())
            .filter(|r| !r.armed && r.queue.is_empty())
        {
            recv.end = None;
        }
    }

    /// Transaction pooling hands a client read to the session again once
    /// it has a connection: in ring mode its bytes are the current chunk
    /// (false: none, they are in the connection's own buffer).
    pub(in crate::proxy::worker) fn ring_redeliver(
        &mut self,
        sid: SessionId,
        res: Completion,
    ) -> bool {
        let (Some(ring), Some(slot)) = (self.buffers.buf_ring(), self.sessions.slot(sid)) else {
            return false;
        };
        let Some(chunk) = slot.io.recv.as_ref().and_then(|r| r.current.as_ref()) else {
            return false;
        };
        let mut out = std::mem::take(&mut self.action_scratch);
        let ctx = worker_session_ctx!(self);
        slot.session
            .on_client_read(res, ring.bytes(chunk), &ctx, &mut out);
        self.session_q.extend(out.drain(..).map(|a| (sid, a)));
        self.action_scratch = out;
        true
    }
}

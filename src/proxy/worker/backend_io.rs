//! Backend connections' own completions, and the operations on their
//! sockets the pool asks for (open, connect, read, write, close).

use socket2::{Domain, Protocol, Socket, Type};

use super::*;

impl Worker {
    // ---- backend connections ----

    pub(super) fn on_backend_connect(&mut self, bid: BackendId, res: Completion) {
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        b.op_done();
        let mut events = Vec::new();
        self.pool.on_connect(bid, res, self.now, &mut events);
        self.pool_q.extend(events);
        self.try_finish_backend(Some(bid));
    }

    pub(super) fn on_backend_read(&mut self, bid: BackendId, res: Completion) {
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        b.op_done();
        if self.backend_tls_on(bid) {
            return self.backend_tls_own_read(bid, res);
        }
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        if let Some(buf) = b.buf.as_mut() {
            buf.complete(res.bytes());
        }
        self.pool_read(bid, res);
        self.try_finish_backend(Some(bid));
    }

    /// Hand the pool a read of the connection's own exchange with what its
    /// buffer holds now (nothing to hand while it holds no buffer).
    pub(super) fn pool_read(&mut self, bid: BackendId, res: Completion) {
        let Some(buf) = self.backends.get(bid).and_then(|b| b.buf.as_ref()) else {
            return;
        };
        let (filled, capacity) = (buf.filled(), buf.capacity());
        let mut events = Vec::new();
        self.pool
            .on_read(bid, res, filled, capacity, self.now, &mut events);
        self.pool_q.extend(events);
    }

    /// Whether the pool closed connection `bid` (or forgot it).
    pub(super) fn backend_closed(&self, bid: BackendId) -> bool {
        self.pool.conn(bid).is_none_or(|c| c.is_closed())
    }

    /// A backend connection's close watch completed.
    pub(super) fn on_backend_watch(&mut self, bid: BackendId, res: Completion) {
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        b.op_done();
        let mut events = Vec::new();
        self.pool.on_watch(bid, res, &mut events);
        self.pool_q.extend(events);
        self.try_finish_backend(Some(bid));
    }

    pub(super) fn on_backend_write(&mut self, bid: BackendId, res: Completion) {
        let closed = self.backend_closed(bid);
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        b.op_done();
        b.out.complete();
        let res = written(res);
        if let (Completion::Done(n), false) = (res, closed) {
            b.out_pos += n;
            if b.out_pos < b.out.len() {
                let token = Token::new(OpTag::BackendWrite, bid.index, bid.generation);
                let fd = b.fd();
                let sqe = b.out.write_sqe(fd, b.out_pos, token.into());
                b.op_started();
                return self.submit(sqe);
            }
        }
        // The pool hears of the whole packet, written or not.
        let whole = match res {
            Completion::Done(_) => Completion::Done(b.out.len()),
            res => res,
        };
        let mut events = Vec::new();
        self.pool.on_write(bid, whole, self.now, &mut events);
        self.pool_q.extend(events);
        self.try_finish_backend(Some(bid));
    }

    /// Free a closed backend connection once nothing names it.
    pub(super) fn try_finish_backend(&mut self, bid: Option<BackendId>) {
        let Some(bid) = bid else { return };
        if !self.backend_closed(bid) {
            return;
        }
        if !self.backends.get(bid).is_some_and(ConnIo::quiescent) {
            return;
        }
        self.backend_tls_forget(bid);
        // Both halves go here, together: the pool's slot (and its unit of
        // the cap) and the driver's I/O, whose drop closes the socket.
        let removed = self.pool.remove(bid);
        let Some(mut io) = self.backends.remove(bid) else {
            return;
        };
        debug_assert!(removed, "backend I/O without its pool slot");
        debug_assert_eq!(self.backends.len(), self.pool.len(), "backend halves apart");
        if let (Some(recv), Some(ring)) = (io.recv.as_mut(), self.buffers.buf_ring()) {
            recv.drain_into(ring);
        }
        if let Some(buf) = io.buf.take() {
            if self.buffers.release(buf).is_err() {
                tracing::error!("backend buffer still in flight at close; leaked");
            }
        }
    }

    pub(super) fn open_backend(&mut self, key: PoolKey, request: Option<LeaseRequest>) {
        let addr = self.shared.config.backend;
        let sock = match Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)) {
            Ok(s) => s,
            Err(e) => {
                let mut events = Vec::new();
                self.pool.open_failed(
                    key,
                    request,
                    &format!("socket(): {e}"),
                    self.now,
                    &mut events,
                );
                self.pool_q.extend(events);
                return;
            }
        };
        let _ = sock.set_nodelay(true);
        if let Err(e) = crate::sockopt::apply_tcp_options(&sock, &self.shared.config) {
            tracing::debug!(worker = self.id, "backend socket options: {e}");
        }
        let attrs = self.backend_connect_attrs(key, request.as_ref());
        let buf = self.buffers.acquire(Owner::Backend);
        let mut events = Vec::new();
        let bid = self
            .pool
            .insert_opening(key, request, self.now, &mut events);
        self.backends.insert(bid, ConnIo::new(sock, Some(buf)));
        debug_assert_eq!(self.backends.len(), self.pool.len(), "backend halves apart");
        // The connect was only queued: the login has not started yet.
        self.pool.set_connect_attrs(bid, attrs);
        self.pool_q.extend(events);
    }

    /// The connection attributes for a backend connection: those of the
    /// client it is opened for, or (a refill) of the first client waiting
    /// for its key, which it will go to; else ringgate's own.
    fn backend_connect_attrs(
        &self,
        key: PoolKey,
        request: Option<&LeaseRequest>,
    ) -> Vec<(String, String)> {
        let session = request
            .map(|r| r.session)
            .or_else(|| self.pool.first_waiter(key));
        let slot = session.and_then(|id| {
            self.sessions
                .get(id.index)
                .filter(|_| self.sessions.generation(id.index) == id.generation)
        });
        match slot {
            Some(slot) => connect_attrs::for_client(slot.session.connect_attrs(), &slot.peer),
            None => connect_attrs::own(),
        }
    }

    pub(super) fn backend_op(&mut self, bid: BackendId, op: BackendOp) {
        // Ring mode: a receive a park left armed would take the answer.
        let Some(op) = self.ring_pool_op(bid, op) else {
            return;
        };
        let Some(op) = self.backend_tls_op(bid, op) else {
            return;
        };
        let connect_timeout = self.connect_timeout;
        let server = self.pool.server_of(bid).unwrap_or(0) as usize;
        let addr = self.backend_addrs[server.min(self.backend_addrs.len() - 1)];
        let Some(b) = self.backends.get_mut(bid) else {
            return;
        };
        let fd = b.fd();
        match op {
            BackendOp::Connect => {
                let connect = ops::connect(
                    fd,
                    addr,
                    Token::new(OpTag::BackendConnect, bid.index, bid.generation),
                );
                let timeout = ops::link_timeout(connect_timeout, Token::new(OpTag::Ignore, 0, 0));
                b.op_started();
                self.flush_held_write();
                self.ring.push_linked(connect, timeout);
            }
            BackendOp::Read => {
                let buf = self.buffers.ensure(&mut b.buf, Owner::Backend);
                let token = Token::new(OpTag::BackendRead, bid.index, bid.generation);
                let sqe = buf.read_sqe(fd, token.into());
                b.op_started();
                self.submit(sqe);
            }
            BackendOp::Clear => {
                if let Some(buf) = b.buf.as_mut().filter(|b| !b.in_flight()) {
                    buf.clear();
                }
                // A large result's buffer goes back: an idle connection
                // holds at most an ordinary one.
                self.buffers.shrink(&mut b.buf);
                // Ring mode: an idle backend connection holds no buffer.
                self.buffers.shed(&mut b.buf);
                // Nor, once idle, in fixed mode: its next read takes a slot.
                self.shed_idle_backend_slot(bid);
            }
            BackendOp::Send(bytes) => {
                *b.out.bytes_mut() = bytes;
                b.out_pos = 0;
                let token = Token::new(OpTag::BackendWrite, bid.index, bid.generation);
                let sqe = b.out.write_sqe(fd, 0, token.into());
                b.op_started();
                self.submit(sqe);
            }
            BackendOp::StartTls => self.backend_start_tls(bid),
            BackendOp::Close => {
                b.shutdown();
                self.try_finish_backend(Some(bid));
            }
        }
    }

    /// Backend TLS: a send goes through the record layer, and a read with
    /// no room beside a partial record fails as too large; every other
    /// operation (None: carried out here) is the plain one.
    fn backend_tls_op(&mut self, bid: BackendId, op: BackendOp) -> Option<BackendOp> {
        if !self.backend_tls_on(bid) {
            return Some(op);
        }
        match op {
            BackendOp::Send(bytes) => {
                self.backend_tls_send_own(bid, bytes);
                None
            }
            BackendOp::Read if !self.backend_tls_room(bid) => {
                // A partial record fills the buffer beside the plaintext.
                self.pool_read(bid, Completion::Fault(Fault::TooLarge));
                None
            }
            op => Some(op),
        }
    }
}

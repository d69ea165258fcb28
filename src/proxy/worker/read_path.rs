//! The read side's transports. Which one a read of a session's client or
//! backend goes through is decided in one place, [`Worker::read_path`],
//! from the connection's facts: the worker's read mode, the layers the
//! session runs, whether the ring already receives for the client, and
//! whether the relay is the reader. Each read handler then matches on the
//! [`ReadPath`] once, as the write side matches on its transport
//! (`relay_execute.rs`).
//!
//! - [`ReadPath::Ring`]: `--read-buffers ring` with nothing that copies the
//!   bytes: the socket's multishot receive hands the relay chunks of the
//!   provided-buffer ring (`ring_io/`). The relay reads this way, and so
//!   does a session parked between transactions, so that it waits holding
//!   no buffer; a login reads into the client's own buffer.
//! - [`ReadPath::OwnBuffer`]: a read into the connection's own buffer, a
//!   registered slot (fixed mode) or a heap buffer: heap and fixed mode,
//!   and ring mode behind a layer. `poll_when_idle` (fixed mode without
//!   `--hold-idle-slots`): a read that would start on an empty buffer of a
//!   connection gone quiet gives the slot back and waits on a poll
//!   (`idle_io.rs`, `idle_backend_io.rs`), a busy one keeps its slot and a
//!   plain read (`hot_read.rs`); otherwise the read is submitted at once.
//! - [`Layers`] over the own buffer. The client's: TLS beneath, compression
//!   (the leg) above it. A read asks the top layer first, and each serves
//!   what it holds back before the one beneath is read, down to the socket
//!   ([`Worker::own_read_client`]); a completed read goes up the same
//!   layers (`tls_io.rs`, `leg.rs`). A client behind a layer keeps its slot
//!   while idle: its layers' steps read with it. The backend's layer:
//!   backend TLS (`backend_tls_io.rs`). A session with a client layer reads
//!   both of its sockets into own buffers: its transform copies every byte
//!   anyway.

use super::ring_io::Side;
use super::*;

/// How one read of a session's client or backend goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReadPath {
    /// The socket's multishot receive and the provided-buffer ring.
    Ring,
    /// The connection's own buffer, with the layers over it.
    OwnBuffer {
        poll_when_idle: bool,
        layers: Layers,
    },
}

/// The transforms a side's bytes pass between its socket and the session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Layers {
    /// TLS: the client's on the client side, the backend's on the backend
    /// side.
    pub tls: bool,
    /// The client leg (compression), above the client's TLS.
    pub leg: bool,
}

impl Layers {
    pub const NONE: Layers = Layers {
        tls: false,
        leg: false,
    };
}

/// The layers a session's client bytes pass.
pub(super) fn client_layers(slot: &SessionSlot) -> Layers {
    Layers {
        tls: slot.tls.is_some(),
        leg: slot.leg.is_some(),
    }
}

/// What the choice of a read's path depends on.
#[derive(Clone, Copy, Debug)]
struct ReadFacts {
    side: Side,
    /// `--read-buffers ring` (and the ring was set up).
    ring_mode: bool,
    /// Fixed mode without `--hold-idle-slots`.
    idle_poll: bool,
    client: Layers,
    backend_tls: bool,
    /// The ring has received for the client (its receive may be armed).
    client_ring_receives: bool,
    /// The relay asks for the read, or the session relays or is parked.
    relay_reads: bool,
}

/// The one decision of a read's path.
fn choose(f: ReadFacts) -> ReadPath {
    let (layers, ring_reader, poll_when_idle) = match f.side {
        // Once the ring has received for the client, every later read
        // takes its chunks (the multishot may still be armed).
        Side::Client => (
            f.client,
            f.client_ring_receives || f.relay_reads,
            f.idle_poll && f.client == Layers::NONE,
        ),
        Side::Backend => (
            Layers {
                tls: f.backend_tls,
                leg: false,
            },
            true,
            f.idle_poll,
        ),
    };
    if f.ring_mode && f.client == Layers::NONE && !layers.tls && ring_reader {
        ReadPath::Ring
    } else {
        ReadPath::OwnBuffer {
            poll_when_idle,
            layers,
        }
    }
}

impl Worker {
    /// How `sid` reads `side` now. `relay_reads`: the relay asks for the
    /// read, or the session relays or is parked (a login's reads are not
    /// the relay's).
    pub(super) fn read_path(
        &mut self,
        sid: SessionId,
        side: Side,
        relay_reads: bool,
    ) -> Option<ReadPath> {
        let (ring_mode, idle_poll) = (self.buffers.is_ring(), self.idle_poll);
        let slot = self.sessions.slot(sid)?;
        let (client, client_ring_receives) = (client_layers(slot), slot.io.recv.is_some());
        let backend = slot.backend;
        let backend_tls = side == Side::Backend && backend.is_some_and(|b| self.backend_tls_on(b));
        Some(choose(ReadFacts {
            side,
            ring_mode,
            idle_poll,
            client,
            backend_tls,
            client_ring_receives,
            relay_reads,
        }))
    }

    /// The client's read into its own buffer, through its layers: the leg,
    /// then TLS, each serving what it holds back before the one beneath is
    /// read; then the socket. `clear`: the relay consumed what the buffers
    /// held. `poll_when_idle`: [`ReadPath::OwnBuffer`]'s.
    pub(super) fn own_read_client(&mut self, sid: SessionId, clear: bool, poll_when_idle: bool) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let layers = client_layers(slot);
        // Input the leg holds back is read before the socket.
        if layers.leg && self.leg_client_read(sid, clear) {
            return;
        }
        if layers.tls {
            self.clear_client_read_buffer(sid, clear);
            if self.tls_client_read(sid) {
                return;
            }
        }
        if !self.clear_client_read_buffer(sid, clear) {
            return;
        }
        // Fixed mode: an idle client waits for its bytes without a slot.
        if poll_when_idle && self.idle_client_read(sid) {
            return;
        }
        self.submit_client_read(sid);
    }

    /// Empty the client's read buffer if `clear`; false when the session
    /// is gone.
    fn clear_client_read_buffer(&mut self, sid: SessionId, clear: bool) -> bool {
        let Some(slot) = self.sessions.slot(sid) else {
            return false;
        };
        if clear {
            if let Some(buf) = slot.io.buf.as_mut() {
                buf.clear();
            }
        }
        true
    }

    /// Read the client into its buffer (taken now if it has none: ring mode
    /// and fixed mode give an idle connection's buffer back).
    pub(super) fn submit_client_read(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let fd = slot.io.fd();
        let buf = self.buffers.ensure(&mut slot.io.buf, Owner::Client);
        let token = Token::new(OpTag::ClientRead, sid.index, sid.generation);
        let sqe = buf.read_sqe(fd, token.into());
        slot.io.op_started();
        self.submit(sqe);
        self.hot_client_submitted(sid);
    }

    /// The relay's read of the backend into the connection's own buffer
    /// (taken now if it has none; in ring mode, while the ring is empty).
    /// Counted on the backend's socket and on the session; linked behind the
    /// command's write when that is held for it (`link_write.rs`).
    /// `poll_when_idle`: [`ReadPath::OwnBuffer`]'s.
    pub(super) fn own_read_backend(&mut self, sid: SessionId, poll_when_idle: bool) {
        self.shrink_between_commands(sid);
        // Fixed mode: a backend read between commands waits without a slot.
        if poll_when_idle && self.idle_down_read(sid) {
            return;
        }
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) else {
            // The session keeps its backend until the relay has ended, so
            // the relay never asks for this without one.
            debug_assert!(false, "relay operation without a leased backend");
            return;
        };
        let fd = b.fd();
        let token = Token::new(OpTag::DownRead, sid.index, sid.generation);
        let sqe = self
            .buffers
            .ensure(&mut b.buf, Owner::Backend)
            .read_sqe(fd, token.into());
        b.op_started();
        slot.relay_ops += 1;
        self.submit_down_read(sid, sqe);
        self.hot_down_submitted(sid);
    }

    /// A command is about to be written to the backend: its answer is
    /// imminent. A backend that polls when idle reads with a slot now
    /// (`hot_read.rs`); the other paths' reads are in the kernel already or
    /// taken when the relay asks.
    pub(super) fn answer_imminent(&mut self, sid: SessionId) {
        if let Some(ReadPath::OwnBuffer {
            poll_when_idle: true,
            ..
        }) = self.read_path(sid, Side::Backend, true)
        {
            self.hot_command_written(sid);
        }
    }

    /// Debug builds: a backend read into the connection's own buffer never
    /// runs beside an armed ring receive of that socket, which would take
    /// the bytes (a lease to a session that reads so waited for a receive
    /// a park left armed to end: `ring_lease_waits`).
    pub(super) fn debug_assert_no_armed_receive(&mut self, sid: SessionId) {
        debug_assert!(
            self.sessions
                .slot(sid)
                .and_then(|s| s.backend)
                .and_then(|b| self.backends.get_mut(b))
                .and_then(|b| b.recv.as_ref())
                .is_none_or(|r| !r.armed),
            "a backend read beside an armed ring receive"
        );
    }

    /// A large result's buffer goes back before the read that watches the
    /// backend between commands: the result's last read may have brought
    /// more than an ordinary buffer holds, which keeps the large buffer
    /// (`BufferPool::fit_to_result`), and that read would then hold it while
    /// the session idles (heap mode: for as long as it idles; transaction
    /// pooling: in the pool, until the connection's next result).
    fn shrink_between_commands(&mut self, sid: SessionId) {
        let Some(slot) = self.sessions.slot(sid) else {
            return;
        };
        if !slot.session.relay_between_commands() {
            return;
        }
        if let Some(b) = slot.backend.and_then(|b| self.backends.get_mut(b)) {
            self.buffers.shrink(&mut b.buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A relaying session's read in `mode` ("ring", "fixed": polls when
    /// idle, "heap"), with no layer.
    fn facts(side: Side, mode: &str) -> ReadFacts {
        ReadFacts {
            side,
            ring_mode: mode == "ring",
            idle_poll: mode == "fixed",
            client: Layers::NONE,
            backend_tls: false,
            client_ring_receives: false,
            relay_reads: true,
        }
    }

    const TLS: Layers = Layers {
        tls: true,
        leg: false,
    };
    const LEG: Layers = Layers {
        tls: false,
        leg: true,
    };

    fn own(poll_when_idle: bool, layers: Layers) -> ReadPath {
        ReadPath::OwnBuffer {
            poll_when_idle,
            layers,
        }
    }

    #[test]
    fn ring_mode_reads_the_ring_where_no_layer_copies_the_bytes() {
        for side in [Side::Client, Side::Backend] {
            assert_eq!(choose(facts(side, "ring")), ReadPath::Ring);
            for client in [TLS, LEG] {
                let f = ReadFacts {
                    client,
                    ..facts(side, "ring")
                };
                let layers = if side == Side::Client {
                    client
                } else {
                    Layers::NONE
                };
                assert_eq!(choose(f), own(false, layers), "{side:?} behind {client:?}");
            }
        }
        let backend_tls = ReadFacts {
            backend_tls: true,
            ..facts(Side::Backend, "ring")
        };
        assert_eq!(choose(backend_tls), own(false, TLS));
    }

    #[test]
    fn a_login_reads_its_own_buffer_until_the_ring_has_received_for_it() {
        let login = ReadFacts {
            relay_reads: false,
            ..facts(Side::Client, "ring")
        };
        assert_eq!(choose(login), own(false, Layers::NONE));
        let received = ReadFacts {
            client_ring_receives: true,
            ..login
        };
        assert_eq!(choose(received), ReadPath::Ring);
    }

    #[test]
    fn fixed_mode_polls_when_idle_except_a_client_behind_a_layer() {
        for side in [Side::Client, Side::Backend] {
            assert_eq!(choose(facts(side, "fixed")), own(true, Layers::NONE));
            assert_eq!(choose(facts(side, "heap")), own(false, Layers::NONE));
        }
        for client in [TLS, LEG] {
            let client_side = ReadFacts {
                client,
                ..facts(Side::Client, "fixed")
            };
            assert_eq!(choose(client_side), own(false, client));
            // The backend of such a session still waits on its poll.
            let backend_side = ReadFacts {
                client,
                ..facts(Side::Backend, "fixed")
            };
            assert_eq!(choose(backend_side), own(true, Layers::NONE));
        }
    }
}

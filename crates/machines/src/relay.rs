//! The relay: one client session paired with one backend connection, in
//! full duplex.
//!
//! Two pipes run at once, each with at most one operation in flight:
//! - **up**: read the client into the session's buffer, write it to the
//!   backend. It keeps reading while responses are outstanding (pipelining).
//! - **down**: read the backend into the backend connection's buffer, write
//!   it to the client. A read is armed whenever nothing is being written,
//!   also between commands, so a server that closes an idle connection
//!   (wait_timeout, KILL, shutdown) is noticed at once, not at the client's
//!   next command. That idle read becomes the response read when the client
//!   sends a command (one read per socket, no bytes lost). What arrives
//!   between commands may only be one ERR packet, forwarded to the client
//!   before both sides close, or EOF; anything else closes both as a
//!   protocol error. A clean end cancels the idle read before the backend
//!   goes back to the pool.
//!
//! Half duplex deadlocks on pipelining: a client that sends a command bigger
//! than the socket buffers behind a query with a big result blocks on its
//! write, the server blocks writing the result, and a proxy that only moves
//! one direction at a time waits on both. With both pipes moving, the
//! result drains to the client while the command drains to the server.
//!
//! Pure: takes completions (result and the bytes the driver's buffer holds)
//! and time, and returns [`RelayEvent`]s. The driver owns the buffers: it
//! clears the up buffer after each up write and the down buffer after each
//! down write, so every read starts at offset 0.

use std::time::{Duration, Instant};

use crate::completion::Completion;
use crate::idle_cut::Held;
use wire::state_strip::strip_packet;
use wire::tracker::{Direction, StopReason, StoppedHeader, TrackError, Tracker, Unsolicited};

/// An operation the relay wants submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayOp {
    /// READ from the client into the (empty) session buffer.
    ReadClient,
    /// WRITE `session buffer[..end]` to the backend, all of it.
    WriteBackend { end: usize },
    /// READ from the backend into the (empty) backend buffer.
    ReadBackend,
    /// WRITE `backend buffer[..end]` to the client, all of it.
    WriteClient { end: usize },
    /// Cancel the idle backend read (IORING_OP_ASYNC_CANCEL): the session
    /// ends cleanly and the backend goes back to the pool once it completes.
    CancelReadBackend,
}

/// Why the relay ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayEnd {
    /// COM_QUIT: the client is done.
    Quit,
    /// A command the proxy does not relay on a pooled connection.
    Unsupported { command: u8 },
    /// COM_CHANGE_USER, once every earlier answer was relayed. Its packet
    /// stays in the session buffer, which starts with the last
    /// `header_buffered` bytes of its `header` (4 unless the header was
    /// split across reads and its first bytes were forwarded, which makes
    /// the end dirty), then the payload.
    ChangeUser {
        header: [u8; 4],
        header_buffered: usize,
    },
    /// Transaction pooling: a binary prepared-statement command, once every
    /// earlier answer was relayed; its packet starts the session buffer
    /// (unless the end is dirty: its header was split across reads and its
    /// first bytes reached the server). The backend stays the session's.
    Statement,
    /// A client packet longer than `--max-packet-size` (ERR 1153).
    TooLarge { len: u64, max: u64 },
    /// The client closed its socket or a read/write on it failed.
    ClientGone,
    /// The client's bytes broke the protocol.
    ClientProtocol(String),
    /// The backend closed, failed, or sent bytes that break the protocol.
    BackendLost(String),
    /// The server closed the connection between commands (wait_timeout,
    /// KILL, shutdown); its ERR, if it sent one, was forwarded first.
    ServerClosed(String),
    /// The backend connection was lost (`BackendLost` or `ServerClosed`)
    /// with nothing of an answer forwarded, in a relay told to keep its
    /// client then ([`Relay::keep_client_on_loss`]): the client's socket
    /// stays open and the session decides what the client is told
    /// (`session/writer_lost.rs`). `owed`: a command was in flight;
    /// `client_read`: the client read that completed while the relay was
    /// ending; `reading`: a client read is still in flight.
    WriterLost(Lost),
    /// The client stopped reading a result for `--client-write-timeout`.
    ClientWriteTimeout,
    /// The backend sent nothing for `--backend-read-timeout` while owing a response.
    BackendReadTimeout,
    /// No command for `--idle-timeout`.
    IdleTimeout,
    /// Idle holding the backend past `--idle-transaction-timeout` or
    /// `--idle-pinned-timeout` while other clients waited for one
    /// (`idle_cut.rs`).
    HeldIdle(Held),
    /// Graceful shutdown reached this session between commands.
    Drained,
    /// Transaction pooling: the session lets the backend go between
    /// transactions and goes on without one. `client_read`: the result of
    /// the client read that completed while the relay was ending (its
    /// bytes are in the session buffer); `None` while it is still in flight.
    Parked { client_read: Option<Completion> },
}

/// What is left of a relay whose backend connection was lost with nothing
/// of an answer forwarded ([`RelayEnd::WriterLost`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// Why the connection ended, for the log.
    pub cause: String,
    /// A command was in flight (and the client waits for its answer).
    pub owed: bool,
    /// The client read that completed while the relay was ending.
    pub client_read: Option<Completion>,
    /// A client read is still in flight.
    pub reading: bool,
}

/// What the relay tells its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayEvent {
    Op(RelayOp),
    /// A new command began (for `commands_total`).
    CommandStarted,
    /// The backend is no longer reusable: shut its socket down so that the
    /// relay's operations on it complete now.
    AbortBackend,
    /// The client is gone: shut its socket down for the same reason.
    AbortClient,
    /// The relay ended and no relay operation names the backend any more
    /// (a client read may still be in flight; it names only the client).
    /// `clean`: the backend sits at a command boundary and may be reused.
    Ended {
        reason: RelayEnd,
        clean: bool,
    },
}

/// Timeouts the relay enforces; `Duration::ZERO` turns one off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelayTimeouts {
    pub idle: Duration,
    pub client_write: Duration,
    pub backend_read: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Up {
    /// Nothing in flight (before start, or after the end).
    Idle,
    /// A client read is in flight.
    Reading,
    /// A write to the backend is in flight; `stop` applies once it is done.
    Writing { stop: Option<StopReason> },
    /// The client stream stopped (COM_QUIT or an unsupported command): no
    /// more reads; the stop takes effect once every response is relayed.
    Stopped(StopReason),
    /// The client half-closed (EOF) between commands: answers still owed
    /// are relayed, then the session ends.
    Eof,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Down {
    Idle,
    /// A read is in flight between commands: nothing is owed, so anything
    /// that arrives is the server closing the connection.
    Watching,
    /// A read is in flight while a response is owed.
    Reading {
        since: Instant,
    },
    Writing {
        since: Instant,
    },
}

pub struct Relay {
    tracker: Tracker,
    up: Up,
    down: Down,
    last_activity: Instant,
    /// Set when the relay decided to end; `Ended` goes out once quiescent.
    ending: Option<(RelayEnd, bool)>,
    /// The server's unsolicited ERR is being written to the client; the
    /// relay ends with this once it is written.
    end_after_write: Option<RelayEnd>,
    /// Part of an ERR arrived between commands: the server is closing the
    /// connection, so the session may not park with it.
    server_closing: bool,
    /// Bytes of an answer still owed were read (and so may have reached
    /// the client): a lost connection can no longer be answered by the
    /// proxy without the client seeing two answers.
    answer_started: bool,
    /// See [`Relay::keep_client_on_loss`].
    keep_client_on_loss: bool,
    ended: bool,
}

impl Relay {
    pub fn new(tracker: Tracker, now: Instant) -> Relay {
        Relay {
            tracker,
            up: Up::Idle,
            down: Down::Idle,
            last_activity: now,
            ending: None,
            end_after_write: None,
            server_closing: false,
            answer_started: false,
            keep_client_on_loss: false,
            ended: false,
        }
    }

    /// Several servers: a lost backend connection whose loss the client
    /// has seen nothing of ends with [`RelayEnd::WriterLost`] and leaves
    /// the client's socket open, so that the session can answer it and go
    /// on with another connection (the writer died; a new one takes over).
    pub fn keep_client_on_loss(&mut self) {
        self.keep_client_on_loss = true;
    }

    /// Begin relaying. `buffered` holds client bytes that arrived behind
    /// the login packet (a client may pipeline its first command with its
    /// HandshakeResponse); they are relayed before anything is read.
    pub fn start(&mut self, buffered: &[u8], now: Instant, out: &mut Vec<RelayEvent>) {
        debug_assert_eq!(self.up, Up::Idle);
        self.up = Up::Reading;
        if buffered.is_empty() {
            out.push(RelayEvent::Op(RelayOp::ReadClient));
            self.pump(now, out);
        } else {
            self.on_client_read(Completion::Done(buffered.len()), buffered, now, out);
        }
    }

    /// Begin relaying on a connection where a transaction was just
    /// replayed (`backend/tx_replay.rs`): the statement in flight, if any,
    /// was written by the replay, and the tracker owes its answer, which is
    /// read first. `client_reading`: the client read the lost relay left
    /// is still the session's (in flight, or completed and handed back
    /// next), so none is started.
    pub fn resume_after_replay(
        &mut self,
        client_reading: bool,
        now: Instant,
        out: &mut Vec<RelayEvent>,
    ) {
        debug_assert_eq!(self.up, Up::Idle);
        self.up = Up::Reading;
        if !client_reading {
            out.push(RelayEvent::Op(RelayOp::ReadClient));
        }
        self.pump(now, out);
    }

    /// True once `Ended` was emitted.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Operations in flight that name the backend's socket or buffer.
    pub fn backend_ops(&self) -> bool {
        matches!(self.up, Up::Writing { .. }) || self.down != Down::Idle
    }

    /// Transaction pooling: the relay may end now to give the backend back
    /// (between commands, nothing owed, not already ending).
    pub fn can_park(&self) -> bool {
        self.idle_at_boundary()
            && !self.finishing()
            && self.end_after_write.is_none()
            && !self.server_closing
    }

    /// End to give the backend back (see [`RelayEnd::Parked`]); only when
    /// [`Relay::can_park`]. The client read stays in flight: it belongs to
    /// the session from now on.
    pub fn park(&mut self, out: &mut Vec<RelayEvent>) {
        debug_assert!(self.can_park());
        self.end(RelayEnd::Parked { client_read: None }, out);
    }

    /// Transaction pooling: forget the idle backend read armed in the
    /// batch of events just returned, which the session withdraws before
    /// it was submitted because it parks now (true). A park right after
    /// an answer would otherwise arm that read and cancel it at once: two
    /// SQEs and a completion per query for nothing, since the pool's close
    /// watch, not this read, watches a parked connection. False: no idle
    /// read is armed.
    pub fn withdraw_idle_read(&mut self) -> bool {
        if self.down != Down::Watching {
            return false;
        }
        self.down = Down::Idle;
        true
    }

    /// The tracker, for commands that finished (transaction pooling).
    pub fn tracker_mut(&mut self) -> &mut Tracker {
        &mut self.tracker
    }

    /// The tracker back, once the relay has ended.
    pub fn into_tracker(self) -> Tracker {
        self.tracker
    }

    /// The backend read in flight (or just asked for) is owed an answer: the
    /// server will send something, unlike the idle read between commands.
    /// The driver links a command's write only to such a read, whose
    /// completion is certain to come (`worker/link_write.rs`).
    pub fn awaits_answer(&self) -> bool {
        matches!(self.down, Down::Reading { .. })
    }

    /// Waiting for the client's next command with nothing outstanding.
    pub fn idle_at_boundary(&self) -> bool {
        self.up == Up::Reading && self.down_free() && self.tracker.at_command_boundary()
    }

    /// The down pipe moves nothing: no read owed a response, no write.
    fn down_free(&self) -> bool {
        matches!(self.down, Down::Idle | Down::Watching)
    }

    /// The client read completed; `data` is everything the session
    /// buffer holds.
    pub fn on_client_read(
        &mut self,
        res: Completion,
        data: &[u8],
        now: Instant,
        out: &mut Vec<RelayEvent>,
    ) {
        debug_assert_eq!(self.up, Up::Reading);
        self.up = Up::Idle;
        if self.finishing() {
            if let Some((
                RelayEnd::Parked { client_read } | RelayEnd::WriterLost(Lost { client_read, .. }),
                _,
            )) = self.ending.as_mut()
            {
                // The session handles these bytes once the relay has ended.
                *client_read = Some(res);
            }
            return self.maybe_end(out);
        }
        if self.end_after_write.is_some() {
            // The server is gone; the session ends once its ERR is written.
            return;
        }
        if res.is_eof()
            && self.tracker.pending_responses() > 0
            && self.tracker.next_read() == Direction::Server
        {
            // shutdown(SHUT_WR) after a complete command: the client still
            // reads its answers (a half-sent command is handled below).
            self.up = Up::Eof;
            return self.pump(now, out);
        }
        if !res.brought_bytes() {
            return self.end(RelayEnd::ClientGone, out);
        }
        self.last_activity = now;
        let at_boundary = self.tracker.at_command_boundary();
        let chunk = match self.tracker.on_client_bytes(data) {
            Ok(c) => c,
            Err(TrackError::PacketTooLarge { len, max }) => {
                return self.end(RelayEnd::TooLarge { len, max }, out)
            }
            Err(e) => return self.end(RelayEnd::ClientProtocol(e.to_string()), out),
        };
        if at_boundary && chunk.forward > 0 {
            out.push(RelayEvent::CommandStarted);
        }
        if chunk.forward > 0 {
            self.up = Up::Writing { stop: chunk.stop };
            out.push(RelayEvent::Op(RelayOp::WriteBackend { end: chunk.forward }));
        } else if let Some(stop) = chunk.stop {
            self.up = Up::Stopped(stop);
        } else {
            self.up = Up::Reading;
            out.push(RelayEvent::Op(RelayOp::ReadClient));
        }
        self.pump(now, out);
    }

    /// The write to the backend completed (all of it, or failed).
    pub fn on_backend_write(&mut self, res: Completion, now: Instant, out: &mut Vec<RelayEvent>) {
        let Up::Writing { stop } = self.up else {
            debug_assert!(false, "backend write completion without a write");
            return;
        };
        self.up = Up::Idle;
        if self.finishing() {
            return self.maybe_end(out);
        }
        if res.is_error() {
            let cause = res.error();
            return self.end(
                RelayEnd::BackendLost(format!("sending a command: {cause}")),
                out,
            );
        }
        match stop {
            Some(stop) => self.up = Up::Stopped(stop),
            None if self.end_after_write.is_some() => {}
            None => {
                self.up = Up::Reading;
                out.push(RelayEvent::Op(RelayOp::ReadClient));
            }
        }
        self.pump(now, out);
    }

    /// The backend read completed; `data` is what the backend buffer holds.
    pub fn on_backend_read(
        &mut self,
        res: Completion,
        data: &mut [u8],
        now: Instant,
        out: &mut Vec<RelayEvent>,
    ) {
        debug_assert!(matches!(self.down, Down::Reading { .. } | Down::Watching));
        let watching = self.down == Down::Watching;
        self.down = Down::Idle;
        if self.finishing() {
            // Only a cancelled idle read leaves the backend reusable: bytes
            // or EOF that beat the cancel mean the server is closing it.
            if res != Completion::Cancelled {
                if self.unpark() {
                    // Parking: the session would go on without telling its
                    // client, whose thread this was; it ends as a held
                    // connection's would, its ERR first if it sent one.
                    return self.on_idle_backend_read(res, data, now, out);
                }
                if let Some((_, clean)) = self.ending.as_mut() {
                    *clean = false;
                }
            }
            return self.maybe_end(out);
        }
        if watching {
            return self.on_idle_backend_read(res, data, now, out);
        }
        if !res.brought_bytes() {
            let cause = if res.is_eof() {
                "the server closed the connection".to_string()
            } else {
                res.error().to_string()
            };
            return self.end(
                RelayEnd::BackendLost(format!("waiting for a response: {cause}")),
                out,
            );
        }
        self.answer_started = true;
        if let Err(e) = self.tracker.on_server_bytes(data) {
            return self.end(
                RelayEnd::BackendLost(format!("unexpected bytes from the server: {e}")),
                out,
            );
        }
        // Conservative with pipelining: bytes of one answer count for the
        // next one owed too.
        self.answer_started = self.tracker.pending_responses() > 0;
        // What the client did not negotiate goes (back to front: each
        // strip moves only the bytes behind it).
        let mut end = data.len();
        if let Some(view) = self.tracker.strip_view() {
            for &at in self.tracker.state_flagged().iter().rev() {
                end -= strip_packet(&mut data[..end], at, view);
            }
        }
        self.down = Down::Writing { since: now };
        out.push(RelayEvent::Op(RelayOp::WriteClient { end }));
    }

    /// The driver shuts the backend down to end the idle read whose cancel
    /// failed: the end is dirty, and the EOF that follows is the proxy's
    /// own (no park is called off for it).
    pub fn backend_shut(&mut self) {
        if let Some((_, clean)) = self.ending.as_mut() {
            *clean = false;
        }
    }

    /// A clean park (transaction pooling) whose cancelled idle read found
    /// the server's EOF or bytes first: the park is called off (true), and
    /// the read is handled as one between commands. The park's window
    /// (the answer forwarded, the idle read armed, its cancel not yet
    /// landed) is where an operator's KILL right after the answer lands;
    /// parked, the connection was discarded and the session went on as if
    /// nothing happened, its client never told.
    fn unpark(&mut self) -> bool {
        if !matches!(self.ending, Some((RelayEnd::Parked { .. }, true))) {
            return false;
        }
        self.ending = None;
        true
    }

    /// Bytes arrived between commands. `data` is all the backend buffer
    /// holds: a partial ERR stays there and the next read appends to it.
    fn on_idle_backend_read(
        &mut self,
        res: Completion,
        data: &[u8],
        now: Instant,
        out: &mut Vec<RelayEvent>,
    ) {
        if !res.brought_bytes() {
            let cause = if res.is_eof() {
                "closed the connection".to_string()
            } else {
                res.error().to_string()
            };
            let reason = if data.is_empty() {
                RelayEnd::ServerClosed(format!("between commands: {cause}"))
            } else {
                RelayEnd::BackendLost(format!(
                    "between commands: {cause} inside an unsolicited ERR packet"
                ))
            };
            return self.end(reason, out);
        }
        // The server is closing the connection: it cannot go back.
        self.server_closing = true;
        match self.tracker.unsolicited_server_bytes(data) {
            Ok(Unsolicited::Partial) => {
                self.down = Down::Watching;
                out.push(RelayEvent::Op(RelayOp::ReadBackend));
            }
            Ok(Unsolicited::Err { len }) => {
                let code = u16::from_le_bytes([data[5], data[6]]);
                self.end_after_write = Some(RelayEnd::ServerClosed(format!(
                    "between commands, after ERR {code} (forwarded to the client)"
                )));
                self.down = Down::Writing { since: now };
                out.push(RelayEvent::Op(RelayOp::WriteClient { end: len }));
            }
            Err(e) => self.end(RelayEnd::BackendLost(format!("protocol error: {e}")), out),
        }
    }

    /// The write to the client completed (all of it, or failed).
    pub fn on_client_write(&mut self, res: Completion, now: Instant, out: &mut Vec<RelayEvent>) {
        debug_assert!(matches!(self.down, Down::Writing { .. }));
        self.down = Down::Idle;
        if self.finishing() {
            return self.maybe_end(out);
        }
        if res.is_error() {
            return self.end(RelayEnd::ClientGone, out);
        }
        if let Some(reason) = self.end_after_write.take() {
            return self.end(reason, out);
        }
        self.last_activity = now;
        self.pump(now, out);
    }

    /// End now (the drain timeout is over): whatever is in flight is cut.
    pub fn abort(&mut self, reason: RelayEnd, out: &mut Vec<RelayEvent>) {
        if !self.finishing() {
            // The session closes either way: shut the client too, so a
            // write to a client that stopped reading completes.
            out.push(RelayEvent::AbortClient);
            self.end(reason, out);
        }
    }

    /// Deadlines; `draining` ends a session that waits between commands
    /// outside a transaction.
    pub fn on_tick(
        &mut self,
        now: Instant,
        timeouts: &RelayTimeouts,
        draining: bool,
        out: &mut Vec<RelayEvent>,
    ) {
        if self.finishing() {
            return;
        }
        let expired = |since: Instant, limit: Duration| {
            limit > Duration::ZERO && now.duration_since(since) >= limit
        };
        match self.down {
            Down::Writing { since } if expired(since, timeouts.client_write) => {
                return self.end(RelayEnd::ClientWriteTimeout, out)
            }
            Down::Reading { since } if expired(since, timeouts.backend_read) => {
                return self.end(RelayEnd::BackendReadTimeout, out)
            }
            _ => {}
        }
        if self.idle_at_boundary() {
            if draining && !self.tracker.in_transaction() {
                return self.end(RelayEnd::Drained, out);
            }
            if expired(self.last_activity, timeouts.idle) {
                self.end(RelayEnd::IdleTimeout, out);
            }
        }
    }

    /// When the client last sent or took bytes (the idle bounds count from it).
    pub fn idle_since(&self) -> Instant {
        self.last_activity
    }

    /// The tracker: what the server's last answer said.
    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// End between commands because the session held its backend idle for
    /// too long while others waited (`idle_cut.rs`). The end is clean: the
    /// backend goes back through a reset, which rolls back what it held.
    pub fn cut_idle(&mut self, held: Held, out: &mut Vec<RelayEvent>) {
        if self.idle_at_boundary() && !self.finishing() {
            self.end(RelayEnd::HeldIdle(held), out);
        }
    }

    /// Decided to end (or ended): completions are absorbed, nothing new starts.
    /// Ending (or ended): the session, not the relay, will handle what the
    /// client sends next (transaction pooling: after the park).
    pub fn finishing(&self) -> bool {
        self.ending.is_some() || self.ended
    }

    /// Give the down pipe work, and apply a stop once everything before it
    /// has been answered.
    fn pump(&mut self, now: Instant, out: &mut Vec<RelayEvent>) {
        if self.tracker.pending_responses() > 0 {
            match self.down {
                Down::Idle => {
                    self.down = Down::Reading { since: now };
                    out.push(RelayEvent::Op(RelayOp::ReadBackend));
                }
                // The idle read is already armed: it reads the response.
                Down::Watching => self.down = Down::Reading { since: now },
                Down::Reading { .. } | Down::Writing { .. } => {}
            }
        }
        let drained = self.down_free() && self.tracker.pending_responses() == 0;
        match self.up {
            Up::Stopped(stop) if drained => {
                let reason = match stop {
                    StopReason::Quit => RelayEnd::Quit,
                    StopReason::Unsupported { command } => RelayEnd::Unsupported { command },
                    StopReason::ChangeUser => {
                        let stopped = self.tracker.stopped_header().unwrap_or(StoppedHeader {
                            header: [0; 4],
                            in_chunk: 0,
                        });
                        RelayEnd::ChangeUser {
                            header: stopped.header,
                            header_buffered: stopped.in_chunk,
                        }
                    }
                    StopReason::Statement => RelayEnd::Statement,
                };
                self.end(reason, out);
            }
            Up::Eof if drained => self.end(RelayEnd::ClientGone, out),
            _ => {}
        }
        if self.down == Down::Idle && !self.finishing() && self.end_after_write.is_none() {
            self.down = Down::Watching;
            out.push(RelayEvent::Op(RelayOp::ReadBackend));
        }
    }

    /// Decide to end. The backend is reusable only at a command boundary
    /// with no operation on it (a client read names only the client).
    fn end(&mut self, reason: RelayEnd, out: &mut Vec<RelayEvent>) {
        debug_assert!(self.ending.is_none());
        let reason = self.as_writer_lost(reason);
        let clean = self.tracker.at_command_boundary()
            && !matches!(self.up, Up::Writing { .. })
            && self.down_free()
            && !matches!(
                reason,
                RelayEnd::TooLarge { .. }
                    | RelayEnd::BackendLost(_)
                    | RelayEnd::ServerClosed(_)
                    | RelayEnd::WriterLost(_)
            )
            // COM_SET_OPTION survives COM_RESET_CONNECTION: a connection
            // that carries it would give the next client multi-statements
            // it never negotiated (stacked-query injection), so it goes.
            && !self.tracker.set_option_seen();
        if !clean {
            out.push(RelayEvent::AbortBackend);
        } else if self.down == Down::Watching {
            out.push(RelayEvent::Op(RelayOp::CancelReadBackend));
        }
        if matches!(
            reason,
            RelayEnd::ClientGone
                | RelayEnd::ClientWriteTimeout
                | RelayEnd::ClientProtocol(_)
                | RelayEnd::BackendLost(_)
                | RelayEnd::ServerClosed(_)
                | RelayEnd::BackendReadTimeout
        ) {
            out.push(RelayEvent::AbortClient);
        }
        self.ending = Some((reason, clean));
        self.maybe_end(out);
    }

    /// A lost connection the client has seen nothing of, in a relay told
    /// to keep its client: [`RelayEnd::WriterLost`]. Anything forwarded of
    /// an answer (or of the server's closing ERR), a second command owed,
    /// or a client packet half sent, and the end stays as it was: the
    /// proxy could not answer without breaking the client's stream.
    fn as_writer_lost(&self, reason: RelayEnd) -> RelayEnd {
        let (RelayEnd::BackendLost(cause) | RelayEnd::ServerClosed(cause)) = &reason else {
            return reason;
        };
        let owed = self.tracker.pending_responses();
        let unseen = self.keep_client_on_loss
            && !self.answer_started
            && !self.server_closing
            && self.end_after_write.is_none()
            && owed <= 1
            && !self.tracker.client_mid_packet()
            && matches!(self.up, Up::Reading | Up::Idle | Up::Writing { stop: None });
        if !unseen {
            return reason;
        }
        RelayEnd::WriterLost(Lost {
            cause: cause.clone(),
            owed: owed == 1,
            client_read: None,
            reading: false,
        })
    }

    fn maybe_end(&mut self, out: &mut Vec<RelayEvent>) {
        if self.ended || self.backend_ops() {
            return;
        }
        if let Some((mut reason, clean)) = self.ending.take() {
            if let RelayEnd::WriterLost(lost) = &mut reason {
                lost.reading = self.up == Up::Reading;
            }
            self.ended = true;
            out.push(RelayEvent::Ended { reason, clean });
        }
    }
}

#[cfg(test)]
mod tests;

//! The command phase of a session: the relay between the client and its
//! backend (`relay.rs` decides whose turn it is), the completions it is
//! fed, and what the session does with the relay's events, up to the
//! relay's end. Transaction pooling's parking lives in
//! `session/parked.rs`.

use super::*;

impl Session {
    /// Relay from now on: the login (or a COM_CHANGE_USER) is answered;
    /// `buffered` is what the client already sent behind it.
    pub(super) fn start_relay(
        &mut self,
        buffered: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let tracker = match self.tracker.take() {
            Some(t) => t,
            None => self.new_tracker(ctx),
        };
        let mut relay = Box::new(Relay::new(tracker, ctx.now));
        if ctx.several_servers {
            relay.keep_client_on_loss();
        }
        let mut events = std::mem::take(&mut self.relay_scratch);
        let buffered = match self.client_leg {
            // Pipelined bytes are the transform's input now; the
            // relay's first read is served from them.
            Some(kind) => {
                out.push(SessionAction::StartClientLeg(kind));
                &[][..]
            }
            None => buffered,
        };
        relay.start(buffered, ctx.now, &mut events);
        self.state = State::Relay(relay);
        self.apply_relay(&mut events, ctx, out);
    }

    /// The relay's write to the backend completed.
    pub fn on_backend_write(
        &mut self,
        res: Completion,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if let State::Relay(relay) = &mut self.state {
            let mut events = std::mem::take(&mut self.relay_scratch);
            relay.on_backend_write(res, ctx.now, &mut events);
            self.apply_relay(&mut events, ctx, out);
        }
    }

    /// The relay's read from the backend completed.
    pub fn on_backend_read(
        &mut self,
        res: Completion,
        data: &mut [u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if let State::Relay(relay) = &mut self.state {
            // The server answered (or the connection ended): the KILL has
            // run, and its target may give its connection back.
            self.kill_fence = None;
            if let Some(victim) = self.kill_victim.take() {
                // The answer to this session's KILL CONNECTION: an OK means
                // the server killed the victim's thread.
                if res.brought_bytes() && data.get(4) == Some(&0x00) {
                    if let Killed::Wake(wake) = ctx.registry.kill_client(victim) {
                        out.push(SessionAction::WakeKilled(wake));
                    }
                }
            }
            let mut events = std::mem::take(&mut self.relay_scratch);
            relay.on_backend_read(res, data, ctx.now, &mut events);
            self.apply_relay(&mut events, ctx, out);
        }
    }

    /// The relay's write of backend bytes to the client completed.
    pub fn on_relay_client_write(
        &mut self,
        res: Completion,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if let State::Relay(relay) = &mut self.state {
            let mut events = std::mem::take(&mut self.relay_scratch);
            relay.on_client_write(res, ctx.now, &mut events);
            self.apply_relay(&mut events, ctx, out);
        }
    }

    /// Idle between commands holding the backend past its bound
    /// (`--idle-transaction-timeout`, `--idle-pinned-timeout`): what it
    /// holds and for how long it has idled. The driver asks only while
    /// other clients wait for a connection (`idle_cut.rs`).
    pub fn held_idle(&self, ctx: &SessionCtx) -> Option<(Held, Duration)> {
        let State::Relay(relay) = &self.state else {
            return None;
        };
        if !relay.idle_at_boundary() || relay.finishing() {
            return None;
        }
        let tx = self.tx.as_deref();
        let held =
            if relay.tracker().in_transaction() || tx.is_some_and(|t| t.maybe_in_transaction()) {
                Held::Transaction
            } else if let Some(why) = tx.and_then(|t| t.holds()) {
                Held::Pinned(why)
            } else if self.stmts.as_ref().is_some_and(|r| r.holds_backend()) {
                // Long data or an open cursor lives in the connection's statement.
                Held::Pinned("statement")
            } else {
                // Session pooling outside a transaction: every session holds
                // its connection by design (`--idle-timeout` bounds those).
                return None;
            };
        let idle = ctx.now.saturating_duration_since(relay.idle_since());
        let limit = ctx.idle_cut.limit(held)?;
        (idle >= limit).then_some((held, idle))
    }

    /// Cut the session for [`Session::held_idle`]: the relay ends cleanly,
    /// the backend goes back through a reset (which rolls back the
    /// transaction), and the client gets ERR 4031 and is closed.
    pub fn cut_held_idle(&mut self, held: Held, ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        if let State::Relay(relay) = &mut self.state {
            let mut events = std::mem::take(&mut self.relay_scratch);
            relay.cut_idle(held, &mut events);
            self.apply_relay(&mut events, ctx, out);
        }
    }

    /// The drain timeout is over: end now, whatever is in flight.
    pub fn cut(&mut self, ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        if let State::Relay(relay) = &mut self.state {
            if !relay.is_ended() {
                let mut events = std::mem::take(&mut self.relay_scratch);
                relay.abort(RelayEnd::Drained, &mut events);
                return self.apply_relay(&mut events, ctx, out);
            }
        }
        self.close(out)
    }

    /// Act on the relay's events; in transaction pooling, then learn from
    /// the commands that finished and give the backend back when the
    /// session may go on without it.
    pub(super) fn apply_relay(
        &mut self,
        events: &mut Vec<RelayEvent>,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        // What this batch asks of the driver starts here: nothing from
        // `mark` on has been carried out yet.
        let mark = out.len();
        self.apply_relay_events(events, ctx, out);
        let (State::Relay(relay), Some(tx)) = (&mut self.state, self.tx.as_mut()) else {
            return;
        };
        learn_completed(
            relay.tracker_mut(),
            tx,
            &mut self.stmts,
            &mut self.own_kill_command,
            out,
        );
        // Long data not consumed yet, or an open cursor, lives in the
        // server's statement on this connection.
        let statements_hold = self.stmts.as_ref().is_some_and(|r| r.holds_backend());
        if relay.can_park() && tx.releasable() && !statements_hold {
            // A KILL mapped to this connection's thread is on its way: keep
            // the connection until the server has run it, so that it cannot
            // hit another session's statement; tried again at the next
            // completion or tick (registry.rs).
            if !self.own.as_ref().is_none_or(|e| e.try_clear_backend()) {
                if !std::mem::replace(&mut self.park_waits_for_kill, true) {
                    out.push(SessionAction::ParkWaitsForKill);
                }
                return;
            }
            self.park_waits_for_kill = false;
            if ctx.park_withdraws_idle_read {
                // The answer was just written and the relay armed its idle
                // read of the backend in this batch: it would be submitted
                // only to be cancelled by the park (two SQEs and a
                // completion per query). Withdrawn, the read never reaches
                // the kernel and the relay parks with nothing to cancel.
                let read = SessionAction::Relay(RelayOp::ReadBackend);
                if let Some(i) = out[mark..].iter().rposition(|a| *a == read) {
                    if relay.withdraw_idle_read() {
                        out.remove(mark + i);
                    }
                }
            }
            let mut events = std::mem::take(&mut self.relay_scratch);
            relay.park(&mut events);
            self.apply_relay_events(&mut events, ctx, out);
        }
    }

    /// The relay's cancel of its idle backend read failed, and the driver
    /// shuts the backend down to end that read: the relay's end is dirty,
    /// and the EOF is not the server closing the connection.
    pub fn on_backend_cancel_failed(&mut self) {
        if let State::Relay(relay) = &mut self.state {
            relay.backend_shut();
        }
    }

    /// Act on the relay's events, then keep the emptied vector as the
    /// scratch for the next completion, so the relay path does not allocate.
    pub(super) fn apply_relay_events(
        &mut self,
        events: &mut Vec<RelayEvent>,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        for event in events.drain(..) {
            match event {
                RelayEvent::Op(op) => out.push(SessionAction::Relay(op)),
                RelayEvent::CommandStarted => out.push(SessionAction::CommandStarted),
                RelayEvent::AbortBackend => out.push(SessionAction::AbortBackend),
                RelayEvent::AbortClient => out.push(SessionAction::AbortClient),
                RelayEvent::Ended { reason, clean } => self.on_relay_end(reason, clean, ctx, out),
            }
        }
        self.relay_scratch = std::mem::take(events);
    }

    /// The relay ended and nothing names the backend any more: release it
    /// and finish the session as the reason asks.
    pub(super) fn on_relay_end(
        &mut self,
        reason: RelayEnd,
        clean: bool,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        match reason {
            RelayEnd::Parked { client_read } => {
                return self.on_parked(client_read, clean, ctx, out);
            }
            RelayEnd::Statement => return self.statement_begin(clean, out),
            RelayEnd::WriterLost(lost) => return self.on_writer_lost(lost, ctx, out),
            RelayEnd::ChangeUser {
                header,
                header_buffered,
            } => {
                // A change of user resets the connection and the session: from
                // here on the session keeps its connection, as in session pooling.
                if let Some(reason) = self
                    .tx
                    .as_mut()
                    .and_then(|t| t.pin(PinReason::SessionCommand))
                {
                    out.push(SessionAction::Pinned(reason));
                }
                // Behind a compressed client leg the session buffer is the
                // leg's plain one, which keeps the bytes behind the relay's last
                // write as the slot does (worker/leg.rs).
                return self.change_user_begin(header, header_buffered, clean, ctx, out);
            }
            _ => {}
        }
        self.has_backend = false;
        out.push(SessionAction::Release { clean });
        self.end_released(reason, ctx, out);
    }

    /// The backend is released: answer the client if the reason calls for
    /// an ERR, else close the session.
    fn end_released(&mut self, reason: RelayEnd, ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        match reason {
            RelayEnd::HeldIdle(held) => self.send_idle_cut_err(held, ctx, out),
            RelayEnd::Unsupported { command } => {
                // An ERR answers the command packet: sequence id 1.
                self.seq = 1;
                let msg = format!(
                    "ringgate does not support {} on a pooled connection",
                    command_name(command)
                );
                self.send_err(ER_UNKNOWN_COM_ERROR, &msg, State::SendErrThenClose, out)
            }
            RelayEnd::TooLarge { len, max } => {
                out.push(SessionAction::Log(format!(
                    "client packet of {len}+ bytes refused (--max-packet-size {max}); ERR 1153"
                )));
                self.seq = 1;
                self.send_err(
                    ER_NET_PACKET_TOO_LARGE,
                    "Got a packet bigger than 'max_allowed_packet' bytes",
                    State::SendErrThenLinger,
                    out,
                )
            }
            // Handled before the release; never reached.
            RelayEnd::Parked { .. } => {}
            reason => {
                if let Some(line) = closing_log(reason) {
                    out.push(SessionAction::Log(line));
                }
                self.close(out)
            }
        }
    }

    /// The relay was cut for holding its connection idle past its limit
    /// ([`Session::cut_held_idle`]): an ERR says so, then the session closes.
    fn send_idle_cut_err(&mut self, held: Held, ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let limit = ctx.idle_cut.limit(held).unwrap_or_default();
        out.push(SessionAction::IdleCut { held, limit });
        // Unasked for, as MySQL sends it: sequence id 0. The client
        // reads it at its next command, then finds the socket closed.
        self.seq = 0;
        let payload = idle_cut::cut_err(held, limit);
        self.send_payload(&payload, State::SendErrThenClose, out)
    }
}

/// What the log says when a relay's end closes the session without an
/// answer. A flat match of one line per reason: kept whole as a table.
fn closing_log(reason: RelayEnd) -> Option<String> {
    match reason {
        RelayEnd::IdleTimeout => Some("session idle for --idle-timeout; closed".into()),
        RelayEnd::ClientProtocol(cause) => Some(format!("client protocol error: {cause}")),
        RelayEnd::BackendLost(cause) => Some(format!("backend connection lost {cause}")),
        // The client sees its connection end as it would direct.
        RelayEnd::ServerClosed(cause) => Some(format!(
            "the server closed the backend connection {cause}; client disconnected"
        )),
        RelayEnd::ClientWriteTimeout => {
            Some("client stopped reading for --client-write-timeout; disconnected".into())
        }
        RelayEnd::BackendReadTimeout => Some(
            "backend sent nothing for --backend-read-timeout mid-response; disconnected".into(),
        ),
        // The client ended it, the session was drained, or the reason is
        // answered (or handled before the release) elsewhere.
        RelayEnd::Quit
        | RelayEnd::ClientGone
        | RelayEnd::Drained
        | RelayEnd::ChangeUser { .. }
        | RelayEnd::Statement
        | RelayEnd::HeldIdle(_)
        | RelayEnd::Unsupported { .. }
        | RelayEnd::TooLarge { .. }
        | RelayEnd::Parked { .. }
        | RelayEnd::WriterLost(_) => None,
    }
}

/// `--transaction-replay`: the command's answer goes into the record; a
/// session holding its connection for state (`held`) cannot replay.
fn record_completed(
    record: &mut crate::tx_replay::TxRecord,
    done: &wire::tracker::Completed,
    held: bool,
    out: &mut Vec<SessionAction>,
) {
    let notes = [
        record.on_completed(done),
        held.then(|| record.pinned()).flatten(),
    ];
    for crate::tx_replay::RecordNote::TurnedOff(off) in notes.into_iter().flatten() {
        out.push(SessionAction::ReplayOff(off));
    }
}

/// Transaction pooling: learn from every command the tracker saw finish
/// (pins, the session's settings, its statements' cursors and long data,
/// a COM_RESET_CONNECTION that closed every statement). A command's
/// answer completes it in the batch that read the answer, before the relay
/// can stop at a statement command behind it (that waits for the answer's
/// write to the client), so a pipelined prepare meets what it left behind.
fn learn_completed(
    tracker: &mut Tracker,
    tx: &mut TxState,
    stmts: &mut Option<Box<crate::prepared::Registry>>,
    own_kill_command: &mut bool,
    out: &mut Vec<SessionAction>,
) {
    while let Some(mut done) = tracker.take_completed() {
        if std::mem::take(own_kill_command) && done.command == COM_QUERY {
            // The proxy's KILL, refusal or block in place of the client's
            // KILL (the first command after it, sent at a boundary): no
            // session state, whatever its lexing says.
            done.text = Some(b"DO 0".to_vec());
        }
        let pinned = tx.on_completed(&done);
        if let Some(reason) = pinned {
            out.push(SessionAction::Pinned(reason));
        }
        let held = pinned.is_some() || tx.holds().is_some_and(|w| w != "warnings");
        if let Some(record) = tx.replay_record_mut() {
            record_completed(record, &done, held, out);
        }
        tracker.strip_state(tx.client_view());
        if done.command == COM_RESET_CONNECTION && !done.err {
            // The server closed every prepared statement on the
            // connection: the client's ids are gone, as they are direct,
            // and the connection's own record of server ids must not
            // answer the next prepare with a closed statement.
            if let Some(registry) = stmts.as_deref_mut() {
                let before = registry.kept();
                registry.clear();
                super::prepared_commands::report_kept(before, registry, out);
            }
            out.push(SessionAction::BackendStatementsClosed);
        }
        let executed = stmts
            .as_mut()
            .and_then(|r| r.on_completed(done.command, done.status));
        if let Some(reason) = executed.and_then(|key| tx.on_statement_executed(&key.sql, &done)) {
            out.push(SessionAction::Pinned(reason));
        }
    }
}

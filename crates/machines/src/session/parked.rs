//! Transaction pooling: a session between transactions. After the login,
//! and whenever the relay may give the backend back, the session parks
//! holding no backend connection; the client's next command resumes it
//! with a connection leased for that command (set up as the session's
//! schema and settings ask), or is answered by the proxy itself.

use super::*;

impl Session {
    /// Transaction pooling: the login OK is written. The login's connection
    /// goes back as it came (it may carry another session's settings;
    /// nothing ran on it) and the session waits for its first command
    /// holding none. A compressed client leg is pinned instead: the parked
    /// session reads the client itself, without the leg's decoder.
    pub(super) fn start_transaction_pooling(
        &mut self,
        buffered: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let schema = self.login.as_ref().and_then(|l| l.database.clone());
        let mut tx = Box::new(
            TxState::new(
                schema,
                self.key.collation,
                self.key.caps & CLIENT_SESSION_TRACK != 0,
                ctx.registry.backend_server(),
                ctx.registry.backend_login_quoting(),
            )
            .with_causal(ctx.causal),
        );
        tx.set_read_only_functions(ctx.read_only_functions);
        let mut tracker = match self.tracker.take() {
            Some(t) => t,
            None => self.new_tracker(ctx),
        };
        tracker.capture_commands(multiplex::CAPTURE_LIMIT);
        tracker.strip_state(tx.client_view());
        if let Some(max) = ctx.transaction_replay {
            tracker.checksum_answers();
            tx.record_transactions(max);
        }
        // Statement ids are mapped to each connection's (the registry is
        // made at the first statement command: an idle session has none);
        // with `--tx-prepared-statements pin` the first statement command
        // pins instead.
        if ctx.move_prepared_statements {
            tracker.stop_at_statements();
        } else {
            tx.pin_prepared_statements = true;
        }
        if self.client_leg.is_some() {
            if let Some(reason) = tx.pin(PinReason::CompressedClient) {
                out.push(SessionAction::Pinned(reason));
            }
            self.tx = Some(tx);
            self.tracker = Some(tracker);
            return self.start_relay(buffered, ctx, out);
        }
        self.tx = Some(tx);
        self.has_backend = false;
        out.push(SessionAction::Park {
            clean: true,
            kept: None,
            reset: false,
            ask_last_insert_id: false,
        });
        self.state = State::Parked {
            tracker: Box::new(tracker),
            reading: buffered.is_empty(),
            since: ctx.now,
        };
        if buffered.is_empty() {
            out.push(SessionAction::ReadClient);
        } else {
            // A command pipelined behind the login.
            self.resume(buffered, ctx, out);
        }
    }

    /// Transaction pooling: LAST_INSERT_ID() as the connection the session
    /// gave back answered it (None: it could not be read, and the value
    /// from the session's OK packets stays). A command that waited for it
    /// goes on now.
    pub fn on_last_insert_id(&mut self, value: Option<u64>, out: &mut Vec<SessionAction>) {
        if let Some(tx) = self.tx.as_mut() {
            tx.set_last_insert_id(value);
        }
        if value.is_none() {
            out.push(SessionAction::Log(
                "LAST_INSERT_ID() could not be read on the connection given back; the OK packet's value is kept".into(),
            ));
        }
        self.last_insert_id_pending = false;
        if std::mem::take(&mut self.command_waiting) {
            out.push(SessionAction::ExamineBuffer);
        }
    }

    /// Transaction pooling: the server closed the backend connection this
    /// session used last, idle in the pool since (a KILL CONNECTION of the
    /// thread its `SELECT CONNECTION_ID()` named, its wait_timeout, a
    /// server shutdown). A parked session ends as a direct connection
    /// would: a bare close.
    /// One writing an answer the proxy made itself ends once it is written.
    pub fn on_last_backend_closed(&mut self, out: &mut Vec<SessionAction>) {
        match self.state {
            State::Parked { .. } => self.last_backend_gone(out),
            State::ParkedReply { .. } => self.last_backend_closed = true,
            _ => {}
        }
    }

    pub(super) fn last_backend_gone(&mut self, out: &mut Vec<SessionAction>) {
        out.push(SessionAction::Log(
            "the server closed the backend connection this session used last (idle since); client disconnected"
                .into(),
        ));
        self.close(out);
    }

    /// Transaction pooling: the relay ended to give the backend back. A
    /// clean connection goes back as it is; one that was not (the server
    /// closed it between commands) is closed, and the session, which had
    /// nothing on it, goes on. `client_read`: a client read that completed
    /// meanwhile, handed back to [`Session::on_client_read`].
    pub(super) fn on_parked(
        &mut self,
        client_read: Option<Completion>,
        clean: bool,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        self.has_backend = false;
        if !matches!(self.state, State::Relay(_)) {
            return self.close(out);
        }
        let State::Relay(relay) = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        let mut tracker = Box::new(relay.into_tracker());
        // Parked sessions are the idle ones: keep no spare queue capacity.
        tracker.shrink_idle();
        let kept = self
            .tx
            .as_ref()
            .map(|t| (t.schema().map(String::from), t.settings()));
        let reset = self.tx.as_mut().is_some_and(|t| t.take_reset_needed());
        let ask_last_insert_id = self
            .tx
            .as_mut()
            .is_some_and(|t| t.take_last_insert_id_ask());
        if let Some(tx) = self.tx.as_mut() {
            tx.end_read_lease();
        }
        // The next command's lease setup needs the answer: it waits for it.
        self.last_insert_id_pending = ask_last_insert_id;
        out.push(SessionAction::Park {
            clean,
            kept,
            reset,
            ask_last_insert_id,
        });
        self.state = State::Parked {
            tracker,
            reading: true,
            since: ctx.now,
        };
        if let Some(res) = client_read {
            out.push(SessionAction::Redeliver(res));
        }
    }

    /// Transaction pooling: the client sent a command while the session
    /// held no connection. `data`: the session buffer.
    pub(super) fn resume(&mut self, data: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        if !matches!(self.state, State::Parked { .. }) {
            return;
        }
        if self.last_insert_id_pending {
            // Its lease setup needs LAST_INSERT_ID(): on_last_insert_id
            // examines the buffer again.
            self.command_waiting = true;
            return;
        }
        let whole = split_packet(data)
            .filter(|(p, used)| *used == data.len() && p.seq == 0 && !p.has_continuation());
        let mut refuse = false;
        let mut answer = None;
        if let Some((pkt, _)) = &whole {
            if pkt.payload.first() == Some(&COM_QUIT) {
                // Nothing to tell a server the session holds nothing on.
                return self.close(out);
            }
            if self.answer_lost_transaction(pkt.payload, out) {
                return;
            }
            if let Some(sql) = pkt.payload.strip_prefix(&[COM_QUERY]) {
                (answer, refuse) = self.answer_from_records(sql);
            }
        }
        let Some(tx) = self.tx.as_mut() else {
            return self.close(out);
        };
        let setup = Box::new(tx.lease_setup(data));
        let route = if ctx.read_write_split {
            tx.route(data)
        } else {
            multiplex::Route::Writer
        };
        let schema = tx.schema().map(String::from);
        let State::Parked { tracker, .. } = std::mem::replace(&mut self.state, State::Closed)
        else {
            return;
        };
        if let Some(bytes) = answer {
            if let Some(tx) = self.tx.as_mut() {
                tx.answered_one_row();
            }
            self.state = State::ParkedReply { tracker };
            out.push(SessionAction::SendClient(bytes));
            return;
        }
        if refuse {
            self.seq = 1;
            return self.send_err(
                multiplex::ER_NOT_SUPPORTED_YET,
                "ringgate --pooling transaction: ROW_COUNT() and FOUND_ROWS() inside an expression are only supported inside a transaction (or after SQL_CALC_FOUND_ROWS, which pins the session); the plain SELECT ROW_COUNT() and SELECT FOUND_ROWS() work",
                State::ParkedReply { tracker },
                out,
            );
        }
        if self.lost_transaction.take().is_some() {
            // A command in several packets after a lost transaction: no
            // answer can go before its rest, which would read as commands.
            out.push(SessionAction::Log(
                "a command too long to answer after the writer was lost mid-transaction; client disconnected".into(),
            ));
            return self.close(out);
        }
        self.leasing = true;
        self.state = State::Resuming { tracker };
        out.push(SessionAction::LeaseForCommand {
            key: self.key,
            schema,
            setup,
            route,
        });
    }

    /// A statement that reads the count of the one before (ROW_COUNT(),
    /// FOUND_ROWS()), which ran on a connection the session has given back:
    /// the result set answered from the session's records, or `true` when
    /// it must be refused as a form the records cannot answer.
    fn answer_from_records(&self, sql: &[u8]) -> (Option<Vec<u8>>, bool) {
        let Some(tx) = self.tx.as_deref() else {
            return (None, false);
        };
        // The plain forms are answered from the session's records
        // (not with extended or cached metadata, whose column
        // definitions differ).
        let plain_metadata = self.key.ext_caps
            & (MARIADB_CLIENT_CACHE_METADATA | MARIADB_CLIENT_EXTENDED_METADATA)
            == 0;
        let answer = Some(sql)
            .filter(|_| plain_metadata)
            .and_then(|sql| tx.answer_previous(sql))
            .and_then(|(name, value)| {
                wire::result_set::one_bigint(
                    &name,
                    value,
                    self.client_caps & CLIENT_DEPRECATE_EOF != 0,
                    tx.status() & !SERVER_SESSION_STATE_CHANGED,
                )
            });
        let refuse = answer.is_none() && multiplex::reads_previous_statement(sql);
        (answer, refuse)
    }

    /// Transaction pooling: the connection for the client's command is
    /// here; relay from the command on (a KILL or SHOW PROCESSLIST is
    /// mapped first, as between commands of a held connection).
    pub(super) fn resume_relay(
        &mut self,
        buffered: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let State::Resuming { tracker } = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        self.leasing = false;
        self.has_backend = true;
        let mut relay = Box::new(Relay::new(*tracker, ctx.now));
        if ctx.several_servers {
            relay.keep_client_on_loss();
        }
        let mut events = std::mem::take(&mut self.relay_scratch);
        let user = self.login.as_ref().map_or("", |l| l.user.as_str());
        match intercept(
            buffered,
            user,
            self.connection_id,
            ctx.registry,
            ctx.read_buffer_size,
        ) {
            Some(mut r) => {
                self.kill_victim = r.close_after_ok;
                self.kill_fence = r.fence.take();
                self.own_kill_command = r.stateless;
                let mut bytes = r.packet.clone();
                bytes.extend_from_slice(&buffered[r.replaces..]);
                out.push(SessionAction::ReplaceBuffered {
                    len: r.replaces,
                    with: r.packet,
                });
                relay.start(&bytes, ctx.now, &mut events);
            }
            None => relay.start(buffered, ctx.now, &mut events),
        }
        self.state = State::Relay(relay);
        self.apply_relay(&mut events, ctx, out);
    }
}

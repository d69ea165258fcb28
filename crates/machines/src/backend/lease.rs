//! A backend connection's lease cycle, after the login: leased to a
//! session (its schema selected, and in transaction pooling the session's
//! settings and per-command statements replayed, pipelined), given back
//! (reset with COM_RESET_CONNECTION, or kept as it is between
//! transactions, after reading LAST_INSERT_ID() when the session needs it)
//! and idle again.

use super::*;

impl BackendConn {
    pub(super) fn on_reset_replies(
        &mut self,
        data: &[u8],
        capacity: usize,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
        let restore = usize::from(self.key.caps & CLIENT_IGNORE_SPACE != 0);
        match parse_reset_replies(data, deprecate_eof, restore) {
            Ok(None) if data.len() < capacity => out.push(BackendOut::Op(BackendOp::Read)),
            Ok(Some(ResetOutcome::Reset {
                role: Some(role), ..
            })) => self.fail(
                format!(
                    "role `{role}` still active after COM_RESET_CONNECTION (SET ROLE outlives it): closed, not pooled"
                ),
                out,
            ),
            Ok(Some(ResetOutcome::Reset { schema, role: None })) => {
                self.schema = schema;
                self.settings = Settings::default();
                self.known_last_insert_id = None;
                // COM_RESET_CONNECTION closed every prepared statement.
                self.statements.clear();
                self.state = State::Idle;
                self.since = now;
                out.push(BackendOut::Op(BackendOp::Clear));
                out.push(BackendOut::Event(BackendEvent::ResetDone));
            }
            outcome => self.fail(format!("COM_RESET_CONNECTION failed ({outcome:?})"), out),
        }
    }

    /// The answer to `SELECT LAST_INSERT_ID()`: leased again, with the value.
    pub(super) fn on_last_insert_id_reply(
        &mut self,
        data: &[u8],
        capacity: usize,
        out: &mut Vec<BackendOut>,
    ) {
        let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
        match parse_one_value(data, deprecate_eof) {
            Ok(None) if data.len() < capacity => out.push(BackendOut::Op(BackendOp::Read)),
            Ok(Some(Ok(Some(text)))) => match text.parse::<u64>() {
                Ok(value) => {
                    self.known_last_insert_id = Some(value);
                    self.state = State::Leased;
                    out.push(BackendOut::Op(BackendOp::Clear));
                    out.push(BackendOut::Event(BackendEvent::LastInsertId(value)));
                }
                Err(_) => self.fail(format!("LAST_INSERT_ID() answered {text:?}"), out),
            },
            outcome => self.fail(format!("SELECT LAST_INSERT_ID() failed ({outcome:?})"), out),
        }
    }

    /// Transaction pooling: the session giving the connection back may have
    /// changed LAST_INSERT_ID() in a way its OK packets do not show (an
    /// explicit AUTO_INCREMENT value is reported there but does not set
    /// it): read it on the connection, whose answer is
    /// [`BackendEvent::LastInsertId`] (then leased again, to be given back)
    /// or `Failed`.
    pub fn ask_last_insert_id(&mut self, now: Instant, out: &mut Vec<BackendOut>) {
        if !matches!(self.state, State::Leased) {
            return self.fail("asked for LAST_INSERT_ID() while not leased".into(), out);
        }
        let mut bytes = Vec::with_capacity(32);
        write_packet(
            &mut bytes,
            0,
            &com_payload(COM_QUERY, b"SELECT LAST_INSERT_ID()"),
        );
        self.state = State::AskingLastInsertId { writing: true };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
    }

    /// Answers to the setup statements (`Replaying`): every one must be
    /// OK, but a causal read's wait, last, which answers one value.
    pub(super) fn on_setup_replies(
        &mut self,
        data: &[u8],
        capacity: usize,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        let State::Replaying { left, .. } = self.state else {
            return;
        };
        let oks = left - usize::from(self.causal_wait.is_some());
        let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
        let mut rest = data;
        let mut answered = 0;
        while answered < oks {
            let Some((pkt, used)) = split_packet(rest) else {
                break;
            };
            match parse_reply(pkt.payload, deprecate_eof) {
                Ok(ServerReply::Ok { .. }) => answered += 1,
                Ok(ServerReply::Err {
                    code,
                    sqlstate,
                    message,
                }) => {
                    let cause = format!(
                        "replaying the session's settings failed: {code} ({sqlstate}) {message}"
                    );
                    return self.fail(cause, out);
                }
                _ => return self.fail("unexpected reply to a setup statement".into(), out),
            }
            rest = &rest[used..];
        }
        let waited = match self.causal_wait {
            Some(_) if answered == oks => match parse_one_value(rest, deprecate_eof) {
                Ok(Some(value)) => Some(wait_outcome(value)),
                Ok(None) => None,
                Err(e) => return self.fail(format!("causal read wait: {e}"), out),
            },
            _ => None,
        };
        if answered < oks || (self.causal_wait.is_some() && waited.is_none()) {
            if data.len() >= capacity {
                return self.fail("setup replies larger than the read buffer".into(), out);
            }
            return out.push(BackendOut::Op(BackendOp::Read));
        }
        if let State::Replaying { settings, .. } = std::mem::replace(&mut self.state, State::Leased)
        {
            self.settings = settings;
        }
        out.push(BackendOut::Op(BackendOp::Clear));
        if let Some(outcome) = waited {
            self.causal_wait = None;
            let reached = outcome.is_ok();
            out.push(BackendOut::Event(BackendEvent::CausalWait {
                waited: now.saturating_duration_since(self.since),
                outcome,
            }));
            if !reached {
                return;
            }
        }
        out.push(BackendOut::Event(BackendEvent::SchemaSelected));
    }

    /// Hand the connection to a session; with `schema`, select it first
    /// unless it is already current. With `setup` (transaction pooling),
    /// then run the session's settings (unless the connection carries
    /// them already) and its per-command statements.
    /// `causal_wait`: a causal read's `SELECT MASTER_GTID_WAIT(...)` and
    /// its timeout, run last (on a replica only: the pool decides).
    pub fn lease(
        &mut self,
        schema: Option<&str>,
        setup: Option<&LeaseSetup>,
        causal_wait: Option<(Vec<u8>, Duration)>,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) -> LeaseWork {
        debug_assert!(matches!(self.state, State::Idle | State::Leased));
        let mut work = LeaseWork::default();
        let mut then = Vec::new();
        let mut settings = self.settings.clone();
        if let Some(setup) = setup {
            let as_is = setup.settings == self.settings.fingerprint()
                || setup.settings == ANY_SETTINGS
                || (setup.alt != 0 && setup.alt == self.settings.fingerprint());
            if !as_is {
                // Only what differs is set; a connection whose settings
                // cannot be set back was reset by the pool first.
                match setup
                    .wanted
                    .diff_from(&self.settings, self.key.collation, self.key.caps)
                {
                    Ok(stmt) => {
                        work.settings = stmt.is_some();
                        then.extend(stmt);
                    }
                    Err(()) => {
                        self.fail(
                            "leased with settings that cannot be set back (not reset)".into(),
                            out,
                        );
                        return work;
                    }
                }
                settings = setup.wanted.clone();
            }
            then.extend(setup.always.iter().cloned());
            if let Some(n) = setup.last_insert_id {
                // Skipped when the connection holds the value already (the
                // last session's answer, or an earlier DO); setup failures
                // close the connection, so the value is known from here.
                if self.known_last_insert_id != Some(n) {
                    then.push(format!("DO LAST_INSERT_ID({n})").into_bytes());
                    work.last_insert_id = true;
                    self.known_last_insert_id = Some(n);
                }
            }
        }
        // Pipelined behind the settings: the read runs only after the
        // wait answered 0, and on this connection only then. Set on every
        // lease: one whose schema was refused never ran its wait.
        self.causal_wait = causal_wait.as_ref().map(|(_, timeout)| *timeout);
        if let Some((sql, _)) = causal_wait {
            then.push(sql);
            work.causal_wait = true;
        }
        match schema {
            Some(db) if self.schema.as_deref() != Some(db) => {
                let mut bytes = Vec::with_capacity(db.len() + 5);
                write_packet(&mut bytes, 0, &com_payload(COM_INIT_DB, db.as_bytes()));
                self.state = State::SelectingSchema {
                    schema: db.to_string(),
                    writing: true,
                    then,
                    settings,
                };
                self.since = now;
                out.push(BackendOut::Op(BackendOp::Send(bytes)));
                work.init_db = true;
            }
            _ => self.run_setup(then, settings, now, out),
        }
        work
    }

    /// Send the setup statements (pipelined), or finish the lease now.
    pub(super) fn run_setup(
        &mut self,
        then: Vec<Vec<u8>>,
        settings: Settings,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        if then.is_empty() {
            self.settings = settings;
            self.state = State::Leased;
            out.push(BackendOut::Event(BackendEvent::SchemaSelected));
            return;
        }
        let mut bytes = Vec::new();
        for sql in &then {
            write_packet(&mut bytes, 0, &com_payload(COM_QUERY, sql));
        }
        self.state = State::Replaying {
            left: then.len(),
            writing: true,
            settings,
        };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
    }

    /// Transaction pooling: reset an idle connection that carries another
    /// session's settings, so that a session with other settings can have
    /// it (it is idle again, settings 0, after `ResetDone`).
    pub fn reset_idle(&mut self, now: Instant, out: &mut Vec<BackendOut>) {
        if matches!(self.state, State::Idle) {
            self.state = State::Leased;
        }
        self.release(true, now, out)
    }

    /// Transaction pooling: the session let the connection go between
    /// transactions, without a reset. It keeps the session's schema and
    /// settings, which the next lease
    /// compares with its own (`kept`; None: as they are). False if it was
    /// not leased.
    pub fn keep(&mut self, kept: Option<(Option<String>, Settings)>, now: Instant) -> bool {
        if !matches!(self.state, State::Leased) {
            return false;
        }
        if let Some((schema, settings)) = kept {
            self.schema = schema;
            self.settings = settings;
        }
        self.state = State::Idle;
        self.since = now;
        true
    }

    /// Newly logged in and not wanted by anyone: idle.
    pub fn make_idle(&mut self, now: Instant) {
        if matches!(self.state, State::Leased) {
            self.state = State::Idle;
            self.since = now;
        }
    }

    /// The session is done with it. A clean connection is reset (pipelined
    /// with the query that learns the schema the reset keeps); anything
    /// else is closed.
    pub fn release(&mut self, clean: bool, now: Instant, out: &mut Vec<BackendOut>) {
        if !clean || !matches!(self.state, State::Leased) {
            return self.close(out);
        }
        let mut bytes = Vec::with_capacity(32);
        write_packet(&mut bytes, 0, &com_payload(COM_RESET_CONNECTION, &[]));
        if self.key.caps & CLIENT_IGNORE_SPACE != 0 {
            // MariaDB's reset puts sql_mode back to the global value and so
            // drops the IGNORE_SPACE that the handshake flag had added.
            write_packet(&mut bytes, 0, &com_payload(COM_QUERY, RESTORE_IGNORE_SPACE));
        }
        let query = if self.mariadb {
            RESET_QUERY_MARIADB
        } else {
            RESET_QUERY
        };
        write_packet(&mut bytes, 0, &com_payload(COM_QUERY, query));
        self.state = State::Resetting { writing: true };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
    }
}

/// MASTER_GTID_WAIT's answer: 0 when the replica has the GTIDs; -1 when
/// the timeout passed first; NULL for a NULL position; an ERR (1941 for a
/// list it cannot parse) otherwise.
fn wait_outcome(value: Result<Option<String>, (u16, String)>) -> Result<(), String> {
    match value {
        Ok(Some(v)) if v == "0" => Ok(()),
        Ok(Some(v)) if v == "-1" => Err("timed out (--causal-read-timeout)".into()),
        Ok(Some(v)) => Err(format!("answered {v:?}")),
        Ok(None) => Err("answered NULL".into()),
        Err((code, message)) => Err(format!("refused: {code} {message}")),
    }
}

//! Transaction pooling: binary prepared-statement commands. The statement
//! ids a client sees are the session's (`prepared.rs`); the connection it holds at the moment may know the
//! statement under another id, or not at all.
//!
//! The relay stops at every COM_STMT_* command (once every earlier answer
//! is relayed) and leaves its packet in the session buffer; the backend
//! stays the session's. Then:
//! - COM_STMT_PREPARE: the connection prepares the text (or already holds
//!   it under the same schema and settings: `backend/server_prepared.rs`), and
//!   the proxy answers the client with the PREPARE_OK under a new id of the
//!   session's. Over the session's limits (`statement_limits.rs`) the
//!   client gets ERR 1461 instead.
//! - COM_STMT_CLOSE: the session forgets the id; nothing reaches the server
//!   (the connection's LRU closes statements).
//! - COM_STMT_EXECUTE, BULK_EXECUTE, SEND_LONG_DATA, FETCH, RESET: the
//!   connection's id for the statement (prepared there first if missing,
//!   transparently: the client never sees that PREPARE_OK) replaces the
//!   client's, parameter types are bound when the server's statement lacks
//!   them, and the relay goes on from the rewritten command. An id the
//!   session does not know is sent as 0, which the server refuses as it
//!   would the client's.
//!
//! When the relay's end was not clean (the command's header was split
//! across reads and its first bytes already reached the server) the
//! session cannot go on: it is closed.

use std::sync::Arc;

use super::*;
use crate::backend::server_prepared::StatementReply;
use crate::prepared::{
    client_prepare_response, parse_command, prepare_ok_counts, rewrite, types_after, Command,
    ParseError, Registry, StmtKey,
};
use crate::statement_limits::Refusal;

/// Where a statement command stands.
pub(super) enum Phase {
    /// Reading the command from the session buffer.
    Examine,
    /// The pool owes the connection's id for the statement.
    Asking {
        cmd: Command,
        client_id: Option<u32>,
        key: Arc<StmtKey>,
    },
    /// The id is here: rewrite the command (more of it may have to be read).
    Apply {
        cmd: Command,
        client_id: Option<u32>,
        key: Arc<StmtKey>,
        reply: StatementReply,
    },
    /// Writing the proxy's answer (a PREPARE_OK or an ERR).
    Replying,
    /// The relay restarts from the session buffer.
    Restart,
}

pub(super) struct Flow {
    tracker: Box<Tracker>,
    phase: Phase,
}

impl Session {
    fn stmt_flow(&mut self) -> Option<&mut Flow> {
        match &mut self.state {
            State::Statement(flow) => Some(flow),
            _ => None,
        }
    }

    /// The relay stopped at a statement command and nothing names the
    /// backend any more.
    pub(super) fn statement_begin(&mut self, clean: bool, out: &mut Vec<SessionAction>) {
        let State::Relay(relay) = std::mem::replace(&mut self.state, State::Closed) else {
            return self.close(out);
        };
        if !clean || !self.has_backend {
            self.has_backend = false;
            out.push(SessionAction::Release { clean: false });
            out.push(SessionAction::Log(
                "a prepared-statement command split across reads reached the server in part; closed"
                    .into(),
            ));
            return self.close(out);
        }
        self.stmts.get_or_insert_with(|| Box::new(Registry::new()));
        self.state = State::Statement(Box::new(Flow {
            tracker: Box::new(relay.into_tracker()),
            phase: Phase::Examine,
        }));
        out.push(SessionAction::ExamineBuffer);
    }

    /// The session buffer's bytes (after ExamineBuffer or a client read).
    pub(super) fn statement_bytes(
        &mut self,
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(flow) = self.stmt_flow() else {
            return;
        };
        match flow.phase {
            Phase::Examine => self.statement_examine(data, ctx, out),
            Phase::Apply { .. } => self.statement_apply(data, ctx, out),
            Phase::Restart => self.statement_restart(data, ctx, out),
            Phase::Asking { .. } | Phase::Replying => {}
        }
    }

    /// More of the command must be in the buffer first.
    fn statement_need(&mut self, n: usize, ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        if n > ctx.read_buffer_size {
            out.push(SessionAction::Log(format!(
                "a prepared-statement command needs {n} bytes buffered, more than --read-buffer-size; closed"
            )));
            return self.close(out);
        }
        out.push(SessionAction::ReadClient);
    }

    fn statement_examine(&mut self, data: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let cmd = match parse_command(data) {
            Ok(cmd) => cmd,
            Err(ParseError::Need(n)) => return self.statement_need(n, ctx, out),
            Err(e) => {
                out.push(SessionAction::Log(format!("{e}; closed")));
                return self.close(out);
            }
        };
        match cmd.command {
            COM_STMT_PREPARE => self.statement_prepare(cmd, data, ctx, out),
            COM_STMT_CLOSE => {
                if data.len() < cmd.packet_len {
                    return self.statement_need(cmd.packet_len, ctx, out);
                }
                if let Some(registry) = self.stmts.as_deref_mut() {
                    let before = registry.kept();
                    registry.close(cmd.id);
                    report_kept(before, registry, out);
                }
                out.push(SessionAction::Consume(cmd.packet_len));
                self.statement_resume(false, out)
            }
            _ => {
                let Some(registry) = self.stmts.as_mut() else {
                    return self.close(out);
                };
                let Some(id) = registry.resolve(cmd.id) else {
                    // The server refuses (or, for long data, ignores) an id
                    // it does not know, as it would the client's.
                    let mut with = data[..9].to_vec();
                    with[5..9].copy_from_slice(&0u32.to_le_bytes());
                    out.push(SessionAction::ReplaceBuffered { len: 9, with });
                    return self.statement_resume(true, out);
                };
                let Some(stmt) = registry.get_mut(id) else {
                    return self.close(out);
                };
                let types = match types_after(data, stmt) {
                    Ok(t) => t,
                    Err(ParseError::Need(n)) => return self.statement_need(n, ctx, out),
                    Err(e) => {
                        out.push(SessionAction::Log(format!("{e}; closed")));
                        return self.close(out);
                    }
                };
                let key = Arc::clone(&stmt.key);
                self.statement_ask(cmd, Some(id), key, false, types, out)
            }
        }
    }

    /// COM_STMT_PREPARE: within the session's limits, the connection's
    /// statement for the text (prepared there if missing).
    fn statement_prepare(
        &mut self,
        cmd: Command,
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if data.len() < cmd.packet_len {
            return self.statement_need(cmd.packet_len, ctx, out);
        }
        let tx = self.tx.as_deref();
        let key = StmtKey {
            schema: tx.and_then(|t| t.schema()).map(String::from),
            settings: tx.map_or(0, |t| t.settings().fingerprint()),
            sql: data[5..cmd.packet_len].to_vec(),
        };
        let Some(registry) = self.stmts.as_deref() else {
            return self.close(out);
        };
        // Refused before the server (or the connection's copy of the
        // statement) is asked: nothing is kept for it.
        if let Err(refusal) = registry.room_for(&key, &ctx.statement_limits) {
            return self.statement_refuse(cmd, refusal, out);
        }
        let key = registry.shared_key(key);
        self.statement_ask(cmd, None, key, true, None, out)
    }

    fn statement_ask(
        &mut self,
        cmd: Command,
        client_id: Option<u32>,
        key: Arc<StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(flow) = self.stmt_flow() else {
            return;
        };
        flow.phase = Phase::Asking {
            cmd,
            client_id,
            key: Arc::clone(&key),
        };
        out.push(SessionAction::Statement {
            key,
            want_response,
            types,
        });
    }

    /// The pool's answer to [`SessionAction::Statement`].
    pub fn on_statement(&mut self, reply: StatementReply, out: &mut Vec<SessionAction>) {
        let Some(flow) = self.stmt_flow() else {
            return;
        };
        let Phase::Asking {
            cmd,
            client_id,
            key,
        } = std::mem::replace(&mut flow.phase, Phase::Examine)
        else {
            return self.close(out);
        };
        flow.phase = Phase::Apply {
            cmd,
            client_id,
            key,
            reply,
        };
        out.push(SessionAction::ExamineBuffer);
    }

    fn statement_apply(&mut self, data: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let Some(flow) = self.stmt_flow() else {
            return;
        };
        let Phase::Apply {
            cmd,
            client_id,
            key,
            reply,
        } = &flow.phase
        else {
            return;
        };
        let (cmd, client_id) = (*cmd, *client_id);
        match (reply.clone(), client_id) {
            (
                StatementReply::Ready {
                    response: Some(response),
                    ..
                },
                None,
            ) => {
                let key = Arc::clone(key);
                self.statement_answer_prepare(cmd, key, &response, ctx, out)
            }
            (StatementReply::Refused { err_payload, .. }, _) if data.len() >= cmd.packet_len => {
                out.push(SessionAction::Consume(cmd.packet_len));
                if cmd.command == COM_STMT_SEND_LONG_DATA {
                    // No answer to long data: the execute meets the error.
                    return self.statement_resume(false, out);
                }
                let (bytes, _) = packet(1, &err_payload);
                out.push(SessionAction::SendClient(bytes));
                self.statement_replying()
            }
            (StatementReply::Refused { .. }, Some(_)) => {
                // Too long to drop: the server refuses id 0 instead.
                let mut with = data[..9].to_vec();
                with[5..9].copy_from_slice(&0u32.to_le_bytes());
                out.push(SessionAction::ReplaceBuffered { len: 9, with });
                self.statement_resume(true, out)
            }
            (
                StatementReply::Ready {
                    id, types_bound, ..
                },
                Some(client_id),
            ) => self.statement_relay_as(cmd, client_id, (id, types_bound), data, ctx, out),
            (StatementReply::Refused { .. }, None) => self.statement_need(cmd.packet_len, ctx, out),
            (StatementReply::Ready { .. }, None) => self.close(out),
        }
    }

    /// The client's COM_STMT_PREPARE is answered from the connection's
    /// statement: the session's registry gives it a client id (or refuses
    /// it over the session's limits).
    fn statement_answer_prepare(
        &mut self,
        cmd: Command,
        key: Arc<StmtKey>,
        response: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let params = prepare_ok_counts(response.get(4..).unwrap_or(&[])).map_or(0, |(_, _, p)| p);
        let Some(registry) = self.stmts.as_mut() else {
            return self.close(out);
        };
        let before = registry.kept();
        let id = match registry.try_add(key, params, &ctx.statement_limits) {
            Ok(id) => id,
            Err(refusal) => return self.statement_refuse(cmd, refusal, out),
        };
        report_kept(before, registry, out);
        out.push(SessionAction::Consume(cmd.packet_len));
        out.push(SessionAction::SendClient(client_prepare_response(
            response, id,
        )));
        self.statement_replying()
    }

    /// A command on statement `client_id` goes to the server as one on the
    /// connection's statement `id`, its parameter types bound again if the
    /// connection's statement does not have them.
    fn statement_relay_as(
        &mut self,
        cmd: Command,
        client_id: u32,
        (id, types_bound): (u32, bool),
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(registry) = self.stmts.as_mut() else {
            return self.close(out);
        };
        let Some(stmt) = registry.get_mut(client_id) else {
            return self.close(out);
        };
        match rewrite(data, stmt, id, types_bound) {
            Ok(rw) => {
                if data.len() - rw.replaces + rw.with.len() > ctx.read_buffer_size {
                    out.push(SessionAction::Log(
                        "a prepared-statement execute whose parameter types must be bound again does not fit --read-buffer-size; closed".into(),
                    ));
                    return self.close(out);
                }
                registry.on_relayed(cmd.command, client_id);
                out.push(SessionAction::ReplaceBuffered {
                    len: rw.replaces,
                    with: rw.with,
                });
                self.statement_resume(true, out)
            }
            Err(ParseError::Need(n)) => self.statement_need(n, ctx, out),
            Err(e) => {
                out.push(SessionAction::Log(format!("{e}; closed")));
                self.close(out)
            }
        }
    }

    /// A prepare over the session's limits: the client gets the ERR (the
    /// server's statement, if prepared, stays the connection's to share).
    fn statement_refuse(&mut self, cmd: Command, refusal: Refusal, out: &mut Vec<SessionAction>) {
        out.push(SessionAction::PrepareRefused);
        out.push(SessionAction::Log(refusal.log_line()));
        out.push(SessionAction::Consume(cmd.packet_len));
        let (bytes, _) = packet(1, &refusal.err_payload());
        out.push(SessionAction::SendClient(bytes));
        self.statement_replying()
    }

    fn statement_replying(&mut self) {
        if let Some(flow) = self.stmt_flow() {
            flow.phase = Phase::Replying;
        }
    }

    /// Go on relaying from the session buffer; `pass`: the command at its
    /// start was rewritten and goes to the server.
    fn statement_resume(&mut self, pass: bool, out: &mut Vec<SessionAction>) {
        let Some(flow) = self.stmt_flow() else {
            return;
        };
        flow.tracker.resume_statement(pass);
        flow.phase = Phase::Restart;
        out.push(SessionAction::ExamineBuffer);
    }

    /// The proxy's answer was written.
    pub(super) fn statement_written(&mut self, res: Completion, out: &mut Vec<SessionAction>) {
        if res.is_error() {
            return self.close(out);
        }
        self.statement_resume(false, out)
    }

    fn statement_restart(&mut self, data: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let State::Statement(flow) = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        let mut relay = Box::new(Relay::new(*flow.tracker, ctx.now));
        if ctx.several_servers {
            relay.keep_client_on_loss();
        }
        let mut events = std::mem::take(&mut self.relay_scratch);
        relay.start(data, ctx.now, &mut events);
        self.state = State::Relay(relay);
        self.apply_relay(&mut events, ctx, out);
    }
}

/// Keep the gauges in step with the session's statements: what changed
/// since `before` (`Registry::kept`).
pub(super) fn report_kept(
    before: (usize, usize),
    registry: &Registry,
    out: &mut Vec<SessionAction>,
) {
    let (count, bytes) = registry.kept();
    if (count, bytes) != before {
        out.push(SessionAction::Statements {
            count: count as i64 - before.0 as i64,
            bytes: bytes as i64 - before.1 as i64,
        });
    }
}

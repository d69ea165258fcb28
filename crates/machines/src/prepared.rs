//! Transaction pooling: a session's binary prepared statements, which
//! outlive the backend connection they were prepared on.
//!
//! The client never sees a server's statement id. Each COM_STMT_PREPARE is
//! answered with an id the proxy assigns ([`Registry::add`]); the session
//! keeps what it needs to prepare the statement again on any connection:
//! the SQL, the schema and settings it was prepared under ([`StmtKey`]),
//! the parameter count, and the parameter types the client last bound.
//! Ids with equal keys share one copy of the key, and what the statements
//! keep is counted against the session's limits (`statement_limits.rs`).
//! A COM_RESET_CONNECTION the client sends closes them all, on the server
//! as here ([`Registry::clear`]).
//! Each backend connection keeps its own statements keyed by the same
//! [`StmtKey`] (`backend/server_prepared.rs`); before a statement command runs,
//! the session asks its current connection for the server's id of the key
//! (prepared there first if missing) and rewrites the command's id
//! ([`rewrite`]).
//!
//! Parameter types: a client binds them once (`new_params_bound` = 1 on
//! the first COM_STMT_EXECUTE) and then sends 0; the server remembers the
//! types per statement. A statement re-prepared on another connection, or
//! shared with another session whose last execute bound other types, does
//! not have this session's types, so every execute that sends 0 is given
//! the recorded types (`new_params_bound` = 1). It costs two bytes per
//! parameter and no round trip, and it does not depend on which session
//! used the server's statement last.
//!
//! What still holds the connection (`Registry::holds_backend`): long data
//! sent and not yet consumed by an execute (it lives in the server's
//! statement), and an open cursor (COM_STMT_FETCH must reach the connection
//! that opened it) until its last row is fetched or the statement is reset
//! or closed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::statement_limits::{Refusal, StatementLimits};
use wire::constants::*;

/// MariaDB: the statement id that means "the statement prepared last on
/// this connection" (prepare + execute pipelined by Connector/C, bulk).
pub const LAST_PREPARED: u32 = 0xFFFF_FFFF;

/// COM_STMT_BULK_EXECUTE flag: parameter types follow the flags.
const BULK_SEND_TYPES_TO_SERVER: u16 = 128;

/// Longest first physical packet (a longer command is split, and the proxy
/// does not rewrite across the split).
const MAX_PHYSICAL: usize = 0xFF_FFFF;

/// What a server statement is prepared from, and under which context: a
/// statement names tables of the schema that was current when it was
/// prepared, and sql_mode (ANSI_QUOTES, ...) changes how it was parsed,
/// so statements are shared on a backend connection only between
/// sessions with the same schema and settings fingerprint (the backend
/// account is the pool key's, so it is the same too).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StmtKey {
    pub schema: Option<String>,
    pub settings: u64,
    pub sql: Vec<u8>,
}

/// One of the session's statements.
#[derive(Clone, Debug)]
pub struct Statement {
    pub key: Arc<StmtKey>,
    pub params: u16,
    /// The parameter types the client bound last (2 bytes each), if any.
    pub types: Option<Vec<u8>>,
}

/// The session's statements by client id.
#[derive(Debug, Default)]
pub struct Registry {
    stmts: HashMap<u32, Statement>,
    /// One copy of each distinct key the ids use, with how many use it: a
    /// client that prepares one text many times keeps it once.
    keys: HashMap<Arc<StmtKey>, usize>,
    /// What the statements keep, as `--max-prepared-bytes` counts it.
    bytes: usize,
    next_id: u32,
    last: Option<u32>,
    /// Statements with long data sent and not consumed yet.
    long_data: HashSet<u32>,
    /// Statements with a cursor open on the current connection.
    cursors: HashSet<u32>,
    /// The statement command relayed last, for its completion.
    in_flight: Option<(u8, u32)>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry {
            next_id: 1,
            ..Registry::default()
        }
    }

    /// The session's own copy of `key` when one of its statements has it
    /// already (the connection's statements then share it too).
    pub fn shared_key(&self, key: StmtKey) -> Arc<StmtKey> {
        match self.keys.get_key_value(&key) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::new(key),
        }
    }

    /// Whether one more statement of `key` fits `limits`, before the server
    /// prepares it (its parameters are not known yet).
    pub fn room_for(&self, key: &StmtKey, limits: &StatementLimits) -> Result<(), Refusal> {
        limits.check(self.stmts.len() + 1, self.bytes + self.new_key_bytes(key))
    }

    /// Record a prepared statement within `limits`; the client's id for it.
    pub fn try_add(
        &mut self,
        key: Arc<StmtKey>,
        params: u16,
        limits: &StatementLimits,
    ) -> Result<u32, Refusal> {
        let bytes = self.bytes + self.new_key_bytes(&key) + types_bytes(params);
        limits.check(self.stmts.len() + 1, bytes)?;
        Ok(self.add(key, params))
    }

    /// (statements, bytes) kept, as the limits count them.
    pub fn kept(&self) -> (usize, usize) {
        (self.stmts.len(), self.bytes)
    }

    fn new_key_bytes(&self, key: &StmtKey) -> usize {
        if self.keys.contains_key(key) {
            0
        } else {
            key_bytes(key)
        }
    }

    /// Record a prepared statement; returns the client's id for it.
    pub fn add(&mut self, key: Arc<StmtKey>, params: u16) -> u32 {
        let mut id = self.next_id;
        // 0 is never a valid id and 0xFFFFFFFF means "the last prepared".
        while id == 0 || id == LAST_PREPARED || self.stmts.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        self.next_id = id.wrapping_add(1);
        let uses = self.keys.entry(Arc::clone(&key)).or_insert(0);
        if *uses == 0 {
            self.bytes += key_bytes(&key);
        }
        *uses += 1;
        self.bytes += types_bytes(params);
        self.stmts.insert(
            id,
            Statement {
                key,
                params,
                types: None,
            },
        );
        self.last = Some(id);
        id
    }

    /// The client's id as the session means it (0xFFFFFFFF: the last
    /// prepared).
    pub fn resolve(&self, id: u32) -> Option<u32> {
        let id = if id == LAST_PREPARED { self.last? } else { id };
        self.stmts.contains_key(&id).then_some(id)
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut Statement> {
        self.stmts.get_mut(&id)
    }

    /// COM_STMT_CLOSE: the entry goes (the server's statement stays with
    /// its connection until that connection's LRU evicts it).
    pub fn close(&mut self, id: u32) -> bool {
        let id = self.resolve(id).unwrap_or(id);
        self.long_data.remove(&id);
        self.cursors.remove(&id);
        if self.last == Some(id) {
            self.last = None;
        }
        let Some(stmt) = self.stmts.remove(&id) else {
            return false;
        };
        self.bytes -= types_bytes(stmt.params);
        if let Some(uses) = self.keys.get_mut(&stmt.key) {
            *uses -= 1;
            if *uses == 0 {
                self.keys.remove(&stmt.key);
                self.bytes -= key_bytes(&stmt.key);
            }
        }
        true
    }

    /// COM_RESET_CONNECTION: every statement goes; returns how many there
    /// were. Ids are not reused, so an old one stays unknown.
    pub fn clear(&mut self) -> usize {
        let n = self.stmts.len();
        self.stmts.clear();
        self.keys.clear();
        self.bytes = 0;
        self.last = None;
        self.long_data.clear();
        self.cursors.clear();
        n
    }

    /// State on the current connection that the next command needs: the
    /// session must keep it.
    pub fn holds_backend(&self) -> bool {
        !self.long_data.is_empty() || !self.cursors.is_empty()
    }

    /// The SQL of the statement an execute in flight runs (None when no
    /// execute is in flight): what a connection lost under it was running.
    pub fn in_flight_execute(&self) -> Option<&[u8]> {
        let (cmd, id) = self.in_flight?;
        if !matches!(cmd, COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE) {
            return None;
        }
        self.stmts.get(&id).map(|s| s.key.sql.as_slice())
    }

    /// The connection died with the command in flight: it never completes.
    pub fn connection_lost(&mut self) {
        self.in_flight = None;
    }

    /// The command for statement `id` goes to the backend now.
    pub fn on_relayed(&mut self, command: u8, id: u32) {
        if command == COM_STMT_SEND_LONG_DATA {
            self.long_data.insert(id);
        }
        if command == COM_STMT_RESET {
            self.long_data.remove(&id);
            self.cursors.remove(&id);
        }
        self.in_flight = Some((command, id));
    }

    /// A command finished with these status flags (only statement commands
    /// change anything). Returns the key of the statement an execute ran:
    /// what it did to the session is judged from its SQL
    /// (`TxState::on_statement_executed`).
    pub fn on_completed(&mut self, command: u8, status: u16) -> Option<Arc<StmtKey>> {
        let (cmd, id) = self.in_flight?;
        if cmd != command {
            return None;
        }
        self.in_flight = None;
        let executed = matches!(command, COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE)
            .then(|| self.stmts.get(&id).map(|s| Arc::clone(&s.key)))
            .flatten();
        match command {
            COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE => {
                self.long_data.remove(&id);
                if status & SERVER_STATUS_CURSOR_EXISTS != 0 {
                    self.cursors.insert(id);
                } else {
                    self.cursors.remove(&id);
                }
            }
            COM_STMT_FETCH if status & SERVER_STATUS_LAST_ROW_SENT != 0 => {
                self.cursors.remove(&id);
            }
            _ => {}
        }
        executed
    }
}

/// What a distinct key keeps: its text and schema.
fn key_bytes(key: &StmtKey) -> usize {
    key.sql.len() + key.schema.as_ref().map_or(0, String::len)
}

/// The parameter types an execute binds and the session replays: two bytes
/// each, counted from the prepare on so an execute never has to be refused.
fn types_bytes(params: u16) -> usize {
    2 * usize::from(params)
}

/// A statement command at the start of the session buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    pub command: u8,
    pub id: u32,
    /// The whole first physical packet, header included.
    pub packet_len: usize,
}

/// Why a buffer cannot be read as a statement command yet, or at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// At least this many bytes (header included) must be buffered first.
    #[error("need {0} bytes")]
    Need(usize),
    #[error("malformed statement command: {0}")]
    Malformed(&'static str),
}

/// Read the statement command at the start of `buf` (its header, command
/// byte and statement id; COM_STMT_PREPARE has no id: 0).
pub fn parse_command(buf: &[u8]) -> Result<Command, ParseError> {
    if buf.len() < 5 {
        return Err(ParseError::Need(5));
    }
    let len = usize::from(buf[0]) | usize::from(buf[1]) << 8 | usize::from(buf[2]) << 16;
    let command = buf[4];
    let id = if command == COM_STMT_PREPARE {
        0
    } else {
        if len < 5 {
            return Err(ParseError::Malformed("no statement id"));
        }
        if buf.len() < 9 {
            return Err(ParseError::Need(9));
        }
        u32::from_le_bytes([buf[5], buf[6], buf[7], buf[8]])
    };
    Ok(Command {
        command,
        id,
        packet_len: len + 4,
    })
}

/// The rewritten start of a statement command: the first `replaces` bytes
/// of the buffer become `with`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite {
    pub replaces: usize,
    pub with: Vec<u8>,
}

/// The parameter types the server's statement has bound once the command
/// at the start of `buf` ran: those it binds itself (recorded in `stmt`),
/// else those `stmt` recorded earlier (the proxy binds them when the
/// server's statement has others). None for other commands.
pub fn types_after(buf: &[u8], stmt: &mut Statement) -> Result<Option<Vec<u8>>, ParseError> {
    let cmd = parse_command(buf)?;
    if !matches!(cmd.command, COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE) || stmt.params == 0 {
        return Ok(None);
    }
    // The rewrite records what the client binds; the id is irrelevant here.
    rewrite(buf, stmt, 0, true)?;
    Ok(stmt.types.clone())
}

/// Rewrite the statement command at the start of `buf` for the server's
/// statement `backend_id`: its id, and for an execute that does not bind
/// types, the types `stmt` recorded unless `server_has_types` (the server's
/// statement has them bound already). Records the types an execute binds.
pub fn rewrite(
    buf: &[u8],
    stmt: &mut Statement,
    backend_id: u32,
    server_has_types: bool,
) -> Result<Rewrite, ParseError> {
    let cmd = parse_command(buf)?;
    let payload_len = cmd.packet_len - 4;
    let n = usize::from(stmt.params);
    let with_id = |upto: usize| {
        let mut with = buf[..upto].to_vec();
        with[5..9].copy_from_slice(&backend_id.to_le_bytes());
        with
    };
    match cmd.command {
        COM_STMT_EXECUTE if n > 0 => {
            // id, flags (1), iteration count (4), null bitmap, new_params_bound.
            let bitmap = n.div_ceil(8);
            let npb_at = 4 + 1 + 4 + 1 + 4 + bitmap;
            if payload_len < npb_at - 4 + 1 {
                // No values at all: the server answers as it would.
                return Ok(Rewrite {
                    replaces: 9,
                    with: with_id(9),
                });
            }
            if buf.len() <= npb_at {
                return Err(ParseError::Need(npb_at + 1));
            }
            let bound = buf[npb_at] == 1;
            bind_types(
                buf,
                stmt,
                npb_at + 1,
                bound,
                server_has_types,
                with_id,
                |head| head[npb_at] = 1,
            )
        }
        COM_STMT_BULK_EXECUTE if n > 0 => {
            let flags_at = 9;
            if buf.len() < flags_at + 2 {
                return Err(ParseError::Need(flags_at + 2));
            }
            let flags = u16::from_le_bytes([buf[flags_at], buf[flags_at + 1]]);
            let bound = flags & BULK_SEND_TYPES_TO_SERVER != 0;
            bind_types(
                buf,
                stmt,
                flags_at + 2,
                bound,
                server_has_types,
                with_id,
                |head| {
                    let set = (flags | BULK_SEND_TYPES_TO_SERVER).to_le_bytes();
                    head[flags_at..flags_at + 2].copy_from_slice(&set);
                },
            )
        }
        COM_STMT_PREPARE => Err(ParseError::Malformed("a prepare has no id to rewrite")),
        _ => Ok(Rewrite {
            replaces: 9,
            with: with_id(9),
        }),
    }
}

/// `head` (the first `at` bytes, already rewritten) + `types` + whatever
/// the client sent after `at`, with the packet length grown to match.
/// The types part that EXECUTE and BULK_EXECUTE share. The types sit (or
/// would sit) at `types_at`; `bound`: the client sent them, so they are
/// recorded and only the id changes. Otherwise the recorded types are
/// inserted there, with `mark_bound` setting the command's own "types
/// follow" flag in the head, unless the server's statement has them.
fn bind_types(
    buf: &[u8],
    stmt: &mut Statement,
    types_at: usize,
    bound: bool,
    server_has_types: bool,
    with_id: impl Fn(usize) -> Vec<u8>,
    mark_bound: impl FnOnce(&mut [u8]),
) -> Result<Rewrite, ParseError> {
    let n = usize::from(stmt.params);
    let id_only = || Rewrite {
        replaces: 9,
        with: with_id(9),
    };
    if bound {
        let end = types_at + 2 * n;
        if buf.len() < end {
            return Err(ParseError::Need(end));
        }
        stmt.types = Some(buf[types_at..end].to_vec());
        return Ok(id_only());
    }
    let Some(types) = stmt
        .types
        .as_ref()
        .filter(|t| t.len() == 2 * n && !server_has_types)
    else {
        return Ok(id_only());
    };
    let mut head = with_id(types_at);
    mark_bound(&mut head);
    insert_types(buf, types_at, types, head)
}

fn insert_types(
    buf: &[u8],
    at: usize,
    types: &[u8],
    mut head: Vec<u8>,
) -> Result<Rewrite, ParseError> {
    let len = usize::from(buf[0]) | usize::from(buf[1]) << 8 | usize::from(buf[2]) << 16;
    if len >= MAX_PHYSICAL || len + types.len() >= MAX_PHYSICAL {
        return Err(ParseError::Malformed(
            "an execute of 16 MiB or more without bound parameter types",
        ));
    }
    let new_len = len + types.len();
    head[0..3].copy_from_slice(&(new_len as u32).to_le_bytes()[..3]);
    head.extend_from_slice(types);
    Ok(Rewrite {
        replaces: at,
        with: head,
    })
}

/// The server's PREPARE_OK response (`response`, whole packets from the
/// backend) as the client sees it: with the client's statement id.
pub fn client_prepare_response(response: &[u8], client_id: u32) -> Vec<u8> {
    let mut out = response.to_vec();
    if out.len() >= 9 && out[4] == 0x00 {
        out[5..9].copy_from_slice(&client_id.to_le_bytes());
    }
    out
}

/// Column and parameter counts of a PREPARE_OK payload.
pub fn prepare_ok_counts(payload: &[u8]) -> Option<(u32, u16, u16)> {
    if payload.len() < 9 || payload[0] != 0x00 {
        return None;
    }
    let id = u32::from_le_bytes([payload[1], payload[2], payload[3], payload[4]]);
    let columns = u16::from_le_bytes([payload[5], payload[6]]);
    let params = u16::from_le_bytes([payload[7], payload[8]]);
    Some((id, columns, params))
}

#[cfg(test)]
mod tests;

//! Transaction pooling: the prepared statements one backend connection
//! holds on the server, as a bounded LRU.
//!
//! Sessions share a connection's statements by [`StmtKey`] (schema,
//! settings fingerprint and SQL text): the second session that prepares
//! `SELECT ... WHERE id = ?` under the same schema on this connection gets
//! the server's statement without a round trip. The server keeps every
//! statement until it is closed, and counts them against
//! `max_prepared_stmt_count` (16,382 by default, for the whole server), so
//! each connection keeps at most `--backend-max-prepared` of them and
//! closes the least recently used one (COM_STMT_CLOSE, which has no
//! answer) to make room. A client's COM_STMT_CLOSE never reaches the
//! server: another session may use the same statement on this connection.
//! COM_RESET_CONNECTION closes every statement on the server, so a reset
//! empties the LRU ([`BackendStatements::clear`]): the pool's own, and a
//! client's that the session relayed ([`BackendConn::statements_closed`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::{BackendConn, BackendEvent, BackendOp, BackendOut, State};
pub use crate::prepared::StmtKey;
use wire::constants::*;
use wire::packet::{split_packet, write_packet};

/// What [`BackendConn::statement`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatementReply {
    /// The server's id for the key; `response`: its PREPARE_OK packets
    /// (when asked for), `prepared`: it was prepared now (not shared),
    /// `evicted`: statements closed to make room.
    Ready {
        id: u32,
        response: Option<Arc<[u8]>>,
        prepared: bool,
        evicted: usize,
        /// The server's statement had the asked types bound already.
        types_bound: bool,
    },
    /// The server refused the prepare: its ERR payload.
    Refused {
        err_payload: Vec<u8>,
        evicted: usize,
    },
}

impl BackendConn {
    /// How many prepared statements it holds on the server.
    pub fn prepared_count(&self) -> usize {
        self.statements.len()
    }

    /// The server closed every prepared statement (a COM_RESET_CONNECTION
    /// the session relayed): none of the kept ids is valid any more.
    pub fn statements_closed(&mut self) {
        self.statements.clear();
    }

    /// `--backend-max-prepared`.
    pub fn set_max_prepared(&mut self, cap: usize) {
        self.statements = BackendStatements::new(cap);
    }

    /// Transaction pooling, while leased: the server's id for `key`,
    /// prepared first when this connection does not hold it (closing the
    /// least recently used statements to stay within the bound). The answer
    /// is [`BackendEvent::Statement`] (at once when it is held), or
    /// `Failed`. `want_response`: the PREPARE_OK packets are wanted too (a
    /// client's own prepare).
    pub fn statement(
        &mut self,
        key: Arc<StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        if !matches!(self.state, State::Leased) {
            return self.fail("asked for a statement while not leased".into(), out);
        }
        if let Some((id, types_bound)) = self.statements.use_for(&key, types.clone()) {
            let response = if want_response {
                self.statements.get(&key).map(|(_, r)| r)
            } else {
                None
            };
            out.push(BackendOut::Event(BackendEvent::Statement(
                StatementReply::Ready {
                    id,
                    response,
                    prepared: false,
                    evicted: 0,
                    types_bound,
                },
            )));
            return;
        }
        let evicted = self.statements.make_room();
        self.pending_evicted = evicted.len();
        let bytes = exchange_bytes(&evicted, &key.sql);
        self.state = State::Preparing {
            writing: true,
            key,
            want_response,
            types,
            partial: Vec::new(),
        };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
    }

    /// The answer to the prepare (the closes before it have none).
    pub(super) fn on_prepare_reply(
        &mut self,
        data: &[u8],
        capacity: usize,
        out: &mut Vec<BackendOut>,
    ) {
        let Some(reply) = self.whole_prepare_reply(data, capacity, out) else {
            return;
        };
        let State::Preparing {
            key,
            want_response,
            types,
            ..
        } = std::mem::replace(&mut self.state, State::Leased)
        else {
            return;
        };
        out.push(BackendOut::Op(BackendOp::Clear));
        if let PrepareReply::Err { payload } = &reply {
            if err_code(payload) == Some(ER_MAX_PREPARED_STMT_COUNT_REACHED)
                && !self.statements.is_empty()
            {
                return self.prepare_again_after_closing_all(key, want_response, types, out);
            }
        }
        let evicted = std::mem::take(&mut self.pending_evicted);
        let reply = match reply {
            PrepareReply::Ok { id, response } => {
                let response: Arc<[u8]> = Arc::from(response);
                self.statements
                    .insert(Arc::clone(&key), id, Arc::clone(&response));
                // The command that follows binds them.
                self.statements.use_for(&key, types);
                StatementReply::Ready {
                    id,
                    response: want_response.then_some(response),
                    prepared: true,
                    evicted,
                    types_bound: false,
                }
            }
            PrepareReply::Err { payload } => StatementReply::Refused {
                err_payload: payload,
                evicted,
            },
        };
        out.push(BackendOut::Event(BackendEvent::Statement(reply)));
    }

    /// The prepare's whole reply, once it is read; until then `None`, with
    /// the read that goes on asked for (or the connection failed).
    fn whole_prepare_reply(
        &mut self,
        data: &[u8],
        capacity: usize,
        out: &mut Vec<BackendOut>,
    ) -> Option<PrepareReply> {
        let deprecate_eof = self.key.caps & CLIENT_DEPRECATE_EOF != 0;
        let State::Preparing { partial, .. } = &mut self.state else {
            return None;
        };
        // A reply that filled the read buffer goes on in `partial` (a
        // SELECT of 1,000 columns prepares to about 40 KiB of column
        // definitions; mysql-connector's suite has one).
        let joined;
        let all = if partial.is_empty() {
            data
        } else {
            joined = [partial.as_slice(), data].concat();
            joined.as_slice()
        };
        match read_prepare_reply(all, deprecate_eof) {
            Ok(Some((reply, _))) => Some(reply),
            Ok(None) if data.len() < capacity => {
                out.push(BackendOut::Op(BackendOp::Read));
                None
            }
            Ok(None) if all.len() < MAX_PREPARE_REPLY => {
                partial.extend_from_slice(data);
                out.push(BackendOut::Op(BackendOp::Clear));
                out.push(BackendOut::Op(BackendOp::Read));
                None
            }
            Ok(None) => {
                self.fail(
                    format!("a PREPARE_OK larger than {MAX_PREPARE_REPLY} bytes"),
                    out,
                );
                None
            }
            Err(e) => {
                self.fail(e.into(), out);
                None
            }
        }
    }

    /// The server's limit for all connections is reached (its
    /// max_prepared_stmt_count may be far below what
    /// --backend-max-prepared assumed, or other connections hold
    /// the rest): close every statement this connection keeps
    /// (sessions prepare theirs again where missing) and prepare
    /// once more; a second refusal reaches the client.
    fn prepare_again_after_closing_all(
        &mut self,
        key: Arc<StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
        out: &mut Vec<BackendOut>,
    ) {
        let evicted = self.statements.take_all();
        self.pending_evicted += evicted.len();
        let bytes = exchange_bytes(&evicted, &key.sql);
        self.state = State::Preparing {
            writing: true,
            key,
            want_response,
            types,
            partial: Vec::new(),
        };
        out.push(BackendOut::Op(BackendOp::Send(bytes)));
    }
}

/// The `--backend-max-prepared` default when the server's
/// `max_prepared_stmt_count` is not known: MariaDB's default limit (16,382)
/// shared by a pool of about 64 connections, with room left for clients
/// that prepare outside the proxy.
pub const DEFAULT_MAX_PREPARED: usize = 128;

/// MariaDB's (and MySQL's) default `max_prepared_stmt_count`.
pub const MARIADB_MAX_PREPARED_STMT_COUNT: u64 = 16_382;

/// The `--backend-max-prepared` default: three quarters of the server's
/// `max_prepared_stmt_count` (a quarter is left for clients that prepare
/// without the proxy) split over every connection the proxy may open
/// (`--backend-max-connections`); at least 8.
pub fn default_max_prepared(max_prepared_stmt_count: u64, connections: u64) -> usize {
    let share = max_prepared_stmt_count.saturating_mul(3) / 4 / connections.max(1);
    usize::try_from(share).unwrap_or(usize::MAX).max(8)
}

#[derive(Debug)]
struct Entry {
    id: u32,
    /// The PREPARE_OK response as the server sent it (packets), for a
    /// session that prepares the same key here: answered without the server.
    response: Arc<[u8]>,
    /// The parameter types the server's statement has bound (the last
    /// execute's, as the session that sent it said).
    types: Option<Vec<u8>>,
    tick: u64,
}

/// One connection's statements on the server.
#[derive(Debug)]
pub struct BackendStatements {
    cap: usize,
    by_key: HashMap<Arc<StmtKey>, Entry>,
    by_tick: BTreeMap<u64, Arc<StmtKey>>,
    tick: u64,
}

impl BackendStatements {
    pub fn new(cap: usize) -> BackendStatements {
        BackendStatements {
            cap: cap.max(1),
            by_key: HashMap::new(),
            by_tick: BTreeMap::new(),
            tick: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The server's id for `key` if held, marked as used now; whether its
    /// bound types were `types` already; they are `types` from now on
    /// (unless None: the command binds none).
    pub fn use_for(&mut self, key: &StmtKey, types: Option<Vec<u8>>) -> Option<(u32, bool)> {
        self.get(key)?;
        let e = self.by_key.get_mut(key)?;
        let same = types.is_some() && e.types == types;
        if types.is_some() {
            e.types = types;
        }
        Some((e.id, same))
    }

    /// The server's id and PREPARE_OK for `key`, marked as used now.
    pub fn get(&mut self, key: &StmtKey) -> Option<(u32, Arc<[u8]>)> {
        self.tick += 1;
        let tick = self.tick;
        let (k, e) = self.by_key.get_key_value(key)?;
        let k = Arc::clone(k);
        let old = e.tick;
        self.by_tick.remove(&old);
        self.by_tick.insert(tick, k);
        let e = self.by_key.get_mut(key)?;
        e.tick = tick;
        Some((e.id, Arc::clone(&e.response)))
    }

    /// Make room for one more: the ids of the statements evicted (to be
    /// closed on the server before the next prepare).
    pub fn make_room(&mut self) -> Vec<u32> {
        let mut evicted = Vec::new();
        while self.by_key.len() >= self.cap {
            let Some((_, key)) = self.by_tick.pop_first() else {
                break;
            };
            if let Some(e) = self.by_key.remove(&key) {
                evicted.push(e.id);
            }
        }
        evicted
    }

    /// The server prepared `key` as `id` (after [`Self::make_room`]).
    pub fn insert(&mut self, key: Arc<StmtKey>, id: u32, response: Arc<[u8]>) {
        self.tick += 1;
        if let Some(old) = self.by_key.remove(&key) {
            self.by_tick.remove(&old.tick);
        }
        self.by_tick.insert(self.tick, Arc::clone(&key));
        self.by_key.insert(
            key,
            Entry {
                id,
                response,
                types: None,
                tick: self.tick,
            },
        );
    }

    /// Forget every statement: their ids, to be closed on the server.
    pub fn take_all(&mut self) -> Vec<u32> {
        self.by_tick.clear();
        self.by_key.drain().map(|(_, e)| e.id).collect()
    }

    /// The server dropped every statement (reset, reconnect): how many
    /// there were.
    pub fn clear(&mut self) -> usize {
        let n = self.by_key.len();
        self.by_key.clear();
        self.by_tick.clear();
        n
    }
}

/// The bytes that close `evicted` and prepare `sql`, pipelined (the closes
/// have no answer, so the first answer is the prepare's).
pub fn exchange_bytes(evicted: &[u32], sql: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(evicted.len() * 9 + sql.len() + 5);
    for id in evicted {
        let mut p = vec![COM_STMT_CLOSE];
        p.extend_from_slice(&id.to_le_bytes());
        write_packet(&mut out, 0, &p);
    }
    let mut p = Vec::with_capacity(sql.len() + 1);
    p.push(COM_STMT_PREPARE);
    p.extend_from_slice(sql);
    write_packet(&mut out, 0, &p);
    out
}

/// ER_MAX_PREPARED_STMT_COUNT_REACHED: "Can't create more than
/// max_prepared_stmt_count statements".
pub const ER_MAX_PREPARED_STMT_COUNT_REACHED: u16 = 1461;

/// The error code of an ERR payload.
/// Largest PREPARE_OK (with its parameter and column definitions) read
/// for a statement: MariaDB allows 4,096 columns and 65,535 parameters, so
/// a real one stays far below; a larger one fails the connection rather
/// than grow a buffer without bound.
pub const MAX_PREPARE_REPLY: usize = 16 << 20;

fn err_code(payload: &[u8]) -> Option<u16> {
    match payload {
        [0xFF, lo, hi, ..] => Some(u16::from_le_bytes([*lo, *hi])),
        _ => None,
    }
}

/// The answer to a COM_STMT_PREPARE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrepareReply {
    /// PREPARE_OK: the server's id; `response` is every packet of it.
    Ok { id: u32, response: Vec<u8> },
    /// ERR: its payload.
    Err { payload: Vec<u8> },
}

/// Read a whole COM_STMT_PREPARE answer from `data`: `Ok(None)` while
/// packets are missing; the answer and the bytes it took.
pub fn read_prepare_reply(
    data: &[u8],
    deprecate_eof: bool,
) -> Result<Option<(PrepareReply, usize)>, &'static str> {
    let Some((first, used)) = split_packet(data) else {
        return Ok(None);
    };
    match first.payload.first() {
        Some(0xFF) => {
            return Ok(Some((
                PrepareReply::Err {
                    payload: first.payload.to_vec(),
                },
                used,
            )))
        }
        Some(0x00) => {}
        _ => return Err("unexpected reply to COM_STMT_PREPARE"),
    }
    let Some((id, columns, params)) = crate::prepared::prepare_ok_counts(first.payload) else {
        return Err("short PREPARE_OK");
    };
    let eof = |n: u16| usize::from(n > 0 && !deprecate_eof);
    let follow = usize::from(params) + eof(params) + usize::from(columns) + eof(columns);
    let mut at = used;
    for _ in 0..follow {
        let Some((_, used)) = split_packet(&data[at..]) else {
            return Ok(None);
        };
        at += used;
    }
    Ok(Some((
        PrepareReply::Ok {
            id,
            response: data[..at].to_vec(),
        },
        at,
    )))
}

#[cfg(test)]
mod tests;

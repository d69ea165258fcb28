//! The full OK packet, including its session-state-change blocks.
//!
//! Transaction pooling takes session state from the server rather than
//! guessing it: each backend connection negotiates
//! CLIENT_SESSION_TRACK and turns the trackers on, and every OK then says
//! which system variables, schema and transaction state changed.
//! [`crate::reply`] only needs the status flags; this module decodes
//! everything an OK carries.
//!
//! # API for the proxy
//!
//! - [`is_ok_packet`]`(payload, deprecate_eof)`: is this command-phase reply
//!   an OK (0x00, or the 0xFE-headed OK that ends a result set under
//!   CLIENT_DEPRECATE_EOF)?
//! - [`parse_ok`]`(payload, capabilities) -> Result<OkInfo, ProtocolError>`,
//!   where `capabilities` are the ones negotiated on *that backend
//!   connection* (CLIENT_PROTOCOL_41 and CLIENT_SESSION_TRACK decide the
//!   layout). Accepts both the 0x00 and the 0xFE header.
//! - [`OkInfo`]: `affected_rows`, `last_insert_id`, `status`, `warnings`,
//!   `info` and `session_state: Vec<StateChange>`, all borrowing the payload.
//!   Helpers: [`OkInfo::in_transaction`], [`OkInfo::state_changed`],
//!   [`OkInfo::schema`], [`OkInfo::system_variables`],
//!   [`OkInfo::transaction_state`], [`OkInfo::transaction_characteristics`].
//! - [`StateChange`]: one block per tracker entry (types 0–5, unknown kept
//!   raw). [`TrxState`] decodes the 8-character transaction state.
//!
//! # Layout (MariaDB `net_send_ok`, MySQL `net_send_ok`)
//!
//! ```text
//! header          0x00 (OK) or 0xFE (OK that ends a result set, DEPRECATE_EOF)
//! affected_rows   lenenc int
//! last_insert_id  lenenc int
//! status          u16        (CLIENT_PROTOCOL_41 or CLIENT_TRANSACTIONS)
//! warnings        u16        (CLIENT_PROTOCOL_41)
//! with CLIENT_SESSION_TRACK:
//!   info          lenenc str (absent when empty and no state changed)
//!   state         lenenc str (only when status has SESSION_STATE_CHANGED)
//!                 = a sequence of blocks: type u8, data lenenc str; the data
//!                 is itself one or two lenenc strings, except for type 2
//!                 (STATE_CHANGE), whose data is the bare byte '1'
//! without it:
//!   info          string<EOF>
//! ```
//!
//! The server writes the info field only when it is non-empty or state
//! changed, so an OK that ends right after the warnings is valid and has an
//! empty info.

use crate::constants::{
    CLIENT_PROTOCOL_41, CLIENT_SESSION_TRACK, CLIENT_TRANSACTIONS, EOF_HEADER, MAX_PAYLOAD,
    OK_HEADER, SERVER_SESSION_STATE_CHANGED, SERVER_STATUS_IN_TRANS,
};
use crate::packet::Reader;
use crate::ProtocolError;

/// SESSION_TRACK_SYSTEM_VARIABLES: one changed system variable (name, value).
pub const SESSION_TRACK_SYSTEM_VARIABLES: u8 = 0;
/// SESSION_TRACK_SCHEMA: the new current schema.
pub const SESSION_TRACK_SCHEMA: u8 = 1;
/// SESSION_TRACK_STATE_CHANGE: "some session state changed" ('1').
pub const SESSION_TRACK_STATE_CHANGE: u8 = 2;
/// SESSION_TRACK_GTIDS: GTIDs of the transaction (MySQL only).
pub const SESSION_TRACK_GTIDS: u8 = 3;
/// SESSION_TRACK_TRANSACTION_CHARACTERISTICS: SQL that recreates the
/// characteristics of the transaction (`SET TRANSACTION …; START …`).
pub const SESSION_TRACK_TRANSACTION_CHARACTERISTICS: u8 = 4;
/// SESSION_TRACK_TRANSACTION_STATE: the 8-character transaction state.
pub const SESSION_TRACK_TRANSACTION_STATE: u8 = 5;

/// Length of a legacy EOF packet (0xFE, warnings u16, status u16). An OK with
/// a 0xFE header is at least 7 bytes, so a 5-byte 0xFE is always a legacy EOF.
const LEGACY_EOF_LEN: usize = 5;

/// One session-state-change block of an OK packet.
///
/// Names and values are raw bytes: they are in the connection's character
/// set, which need not be UTF-8 (use [`String::from_utf8_lossy`] for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateChange<'a> {
    /// A session system variable now has this value (one block per
    /// variable; `SET NAMES` yields three: character_set_client,
    /// character_set_connection, character_set_results, plus collation).
    SystemVariable { name: &'a [u8], value: &'a [u8] },
    /// The current schema is now this one.
    Schema(&'a [u8]),
    /// Session state changed in a way the other trackers do not describe.
    /// The block's data is the raw byte `1` (not a lenenc string).
    StateChanged(&'a [u8]),
    /// GTIDs (MySQL's `session_track_gtids`): encoding specification byte
    /// and the GTID set text.
    Gtids { spec: u8, gtids: &'a [u8] },
    /// The SQL that would recreate the current transaction's
    /// characteristics, e.g. `SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;`
    /// or `START TRANSACTION READ ONLY;`. Empty when there are none.
    TransactionCharacteristics(&'a [u8]),
    /// The transaction state (normally 8 characters, see [`TrxState`]).
    TransactionState(&'a [u8]),
    /// A block of a type this parser does not know, kept raw.
    Unknown { kind: u8, data: &'a [u8] },
}

/// A decoded OK packet (header 0x00, or 0xFE under CLIENT_DEPRECATE_EOF).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OkInfo<'a> {
    pub affected_rows: u64,
    pub last_insert_id: u64,
    /// Server status flags (0 when a pre-4.1 server without
    /// CLIENT_TRANSACTIONS omitted them).
    pub status: u16,
    pub warnings: u16,
    /// The human-readable info ("Rows matched: 1  Changed: 1 …"), may be empty.
    pub info: &'a [u8],
    /// Session-state blocks in the order the server sent them; empty unless
    /// CLIENT_SESSION_TRACK was negotiated and SERVER_SESSION_STATE_CHANGED
    /// is set.
    pub session_state: Vec<StateChange<'a>>,
}

impl<'a> OkInfo<'a> {
    /// SERVER_STATUS_IN_TRANS: a transaction is open after this statement.
    pub fn in_transaction(&self) -> bool {
        self.status & SERVER_STATUS_IN_TRANS != 0
    }

    /// SERVER_SESSION_STATE_CHANGED is set.
    pub fn state_changed(&self) -> bool {
        self.status & SERVER_SESSION_STATE_CHANGED != 0
    }

    /// The last schema block, if the schema changed.
    pub fn schema(&self) -> Option<&'a [u8]> {
        self.session_state.iter().rev().find_map(|c| match c {
            StateChange::Schema(s) => Some(*s),
            _ => None,
        })
    }

    /// Every (name, value) of a system-variable block, in order.
    pub fn system_variables(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + '_ {
        self.session_state.iter().filter_map(|c| match c {
            StateChange::SystemVariable { name, value } => Some((*name, *value)),
            _ => None,
        })
    }

    /// The last transaction-state block, decoded (None if there is none or
    /// it is not the 8-character form).
    pub fn transaction_state(&self) -> Option<TrxState> {
        self.session_state.iter().rev().find_map(|c| match c {
            StateChange::TransactionState(s) => TrxState::parse(s),
            _ => None,
        })
    }

    /// The last transaction-characteristics block (may be empty: the
    /// characteristics were cleared).
    pub fn transaction_characteristics(&self) -> Option<&'a [u8]> {
        self.session_state.iter().rev().find_map(|c| match c {
            StateChange::TransactionCharacteristics(s) => Some(*s),
            _ => None,
        })
    }

    /// A state-change block of type SESSION_TRACK_STATE_CHANGE is present.
    pub fn has_state_change_block(&self) -> bool {
        self.session_state
            .iter()
            .any(|c| matches!(c, StateChange::StateChanged(_)))
    }
}

/// The 8-character transaction state of SESSION_TRACK_TRANSACTION_STATE
/// (`session_track_transaction_info=STATE` or `CHARACTERISTICS`). Each
/// position is `_` when the condition does not hold.
///
/// | pos | char | meaning |
/// |---|---|---|
/// | 0 | `T` / `I` | explicit / implicit (autocommit=0) transaction open |
/// | 1 | `r` | non-transactional table read |
/// | 2 | `R` | transactional table read |
/// | 3 | `w` | non-transactional table write |
/// | 4 | `W` | transactional table write |
/// | 5 | `s` | unsafe statement (e.g. `UUID()`) |
/// | 6 | `S` | a result set was sent |
/// | 7 | `L` | tables locked with `LOCK TABLES` |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrxState(pub [u8; 8]);

impl TrxState {
    /// Decodes the tracker's text; None unless it is exactly 8 bytes.
    pub fn parse(text: &[u8]) -> Option<TrxState> {
        let a: [u8; 8] = text.try_into().ok()?;
        Some(TrxState(a))
    }

    /// `________`: no transaction, no locked tables, nothing pending. The
    /// only state in which a connection can be shared.
    pub fn is_idle(&self) -> bool {
        self.0.iter().all(|&c| c == b'_')
    }

    /// An explicit (`T`) or implicit (`I`) transaction is open.
    pub fn transaction_open(&self) -> bool {
        matches!(self.0[0], b'T' | b'I')
    }

    /// `LOCK TABLES` holds tables.
    pub fn locked_tables(&self) -> bool {
        self.0[7] == b'L'
    }
}

/// Is `payload` (a command-phase reply) an OK packet: a 0x00 header, or with
/// CLIENT_DEPRECATE_EOF a 0xFE header on a packet shorter than a full
/// 0xFFFFFF payload (a longer one is a row) that is not a 5-byte legacy EOF.
pub fn is_ok_packet(payload: &[u8], deprecate_eof: bool) -> bool {
    match payload.first() {
        Some(&OK_HEADER) => true,
        Some(&EOF_HEADER) => {
            deprecate_eof && payload.len() < MAX_PAYLOAD && payload.len() != LEGACY_EOF_LEN
        }
        _ => false,
    }
}

/// Decodes an OK payload (header 0x00 or 0xFE) sent on a connection that
/// negotiated `capabilities`. Errors (never panics) on truncated or
/// malformed input.
pub fn parse_ok(payload: &[u8], capabilities: u32) -> Result<OkInfo<'_>, ProtocolError> {
    let mut r = Reader::new(payload);
    match r.u8("OK header")? {
        OK_HEADER | EOF_HEADER => {}
        _ => {
            return Err(ProtocolError::Malformed {
                what: "OK packet",
                reason: "header is neither 0x00 nor 0xFE",
            })
        }
    }
    let affected_rows = r.lenenc_int("affected rows")?;
    let last_insert_id = r.lenenc_int("last insert id")?;
    let (status, warnings) = if capabilities & CLIENT_PROTOCOL_41 != 0 {
        (r.u16("status flags")?, r.u16("warning count")?)
    } else if capabilities & CLIENT_TRANSACTIONS != 0 {
        (r.u16("status flags")?, 0)
    } else {
        (0, 0)
    };
    let mut ok = OkInfo {
        affected_rows,
        last_insert_id,
        status,
        warnings,
        info: &[],
        session_state: Vec::new(),
    };
    if capabilities & CLIENT_SESSION_TRACK == 0 {
        ok.info = r.rest();
        return Ok(ok);
    }
    if !r.is_empty() || status & SERVER_SESSION_STATE_CHANGED != 0 {
        ok.info = r.lenenc_bytes("OK info")?;
    }
    // The flag promises the blocks: an OK that has the flag but not the
    // blocks is truncated (the caller must then treat the state as unknown).
    if status & SERVER_SESSION_STATE_CHANGED != 0 {
        let blocks = r.lenenc_bytes("session state info")?;
        ok.session_state = parse_state_blocks(blocks)?;
    }
    Ok(ok)
}

/// Decodes the concatenated session-state blocks (the content of the
/// `session state info` string).
pub fn parse_state_blocks(mut blocks: &[u8]) -> Result<Vec<StateChange<'_>>, ProtocolError> {
    let mut out = Vec::new();
    while !blocks.is_empty() {
        let mut r = Reader::new(blocks);
        let kind = r.u8("session state type")?;
        let data = r.lenenc_bytes("session state data")?;
        out.push(parse_block(kind, data)?);
        blocks = r.rest();
    }
    Ok(out)
}

/// One block's data. Bytes after the fields a type defines are ignored
/// (a newer server may append some), as the client library does.
fn parse_block(kind: u8, data: &[u8]) -> Result<StateChange<'_>, ProtocolError> {
    let mut r = Reader::new(data);
    Ok(match kind {
        SESSION_TRACK_SYSTEM_VARIABLES => StateChange::SystemVariable {
            name: r.lenenc_bytes("system variable name")?,
            value: r.lenenc_bytes("system variable value")?,
        },
        SESSION_TRACK_SCHEMA => StateChange::Schema(r.lenenc_bytes("schema name")?),
        // Unlike the other types, the data is the flag itself, not a
        // lenenc string: `02 01 31` (checked against MariaDB 10.11).
        SESSION_TRACK_STATE_CHANGE => StateChange::StateChanged(data),
        SESSION_TRACK_GTIDS => StateChange::Gtids {
            spec: r.u8("gtid encoding")?,
            gtids: r.lenenc_bytes("gtids")?,
        },
        SESSION_TRACK_TRANSACTION_CHARACTERISTICS => {
            StateChange::TransactionCharacteristics(r.lenenc_bytes("transaction characteristics")?)
        }
        SESSION_TRACK_TRANSACTION_STATE => {
            StateChange::TransactionState(r.lenenc_bytes("transaction state")?)
        }
        kind => StateChange::Unknown { kind, data },
    })
}

#[cfg(test)]
mod tests;

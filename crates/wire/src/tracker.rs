//! Streaming response-boundary tracker for the MySQL client/server protocol (command phase).
//!
//! The relay forwards bytes in fixed-size chunks that cut packets at arbitrary positions and never
//! reassembles them. The [`Tracker`] sees every byte of both directions in order and says which
//! side the relay must read next ([`Tracker::next_read`]), whether the session is between commands
//! ([`Tracker::at_command_boundary`]) and whether a transaction is open
//! ([`Tracker::in_transaction`]). It does no I/O, allocates nothing per chunk (one queue of pending
//! responses is allocated up front and only grows for deep pipelines) and is O(bytes): payload
//! bytes are skipped, only the first [`PREFIX_LEN`] bytes of each packet are kept.
//!
//! # Framing
//! A packet is a 3-byte little-endian payload length, a sequence id and the payload. A logical
//! packet of N bytes is sent as physical packets of exactly `0xFFFFFF` bytes followed by one
//! shorter (possibly empty) packet. Continuation packets are not classified; a logical packet is
//! classified by the first bytes of its first physical packet, and a "short" packet means a first
//! physical length below `0xFFFFFF`.
//!
//! # Responses (rules checked against MariaDB 10.11 captures, see `testdata/`)
//! * `COM_QUERY`, `COM_STMT_EXECUTE`, `COM_PROCESS_INFO`: OK | ERR | LOCAL INFILE request (`0xFB`,
//!   then the client sends packets ending with an empty one, then OK/ERR) | result set: column
//!   count, definitions, EOF (not with `CLIENT_DEPRECATE_EOF`), rows, terminator (short `0xFE`
//!   packet: a 5-byte EOF, or with `CLIENT_DEPRECATE_EOF` an OK packet with a `0xFE` header) or
//!   ERR. `SERVER_MORE_RESULTS_EXISTS` in an OK/terminator means another result follows.
//! * `COM_STMT_EXECUTE` that asked for a cursor (flags & 7 != 0): when the server opens one, no
//!   rows follow the definitions. Without `CLIENT_DEPRECATE_EOF` the definitions' EOF carries
//!   `SERVER_STATUS_CURSOR_EXISTS` and ends the response; with it, MariaDB sends the definitions
//!   and then a `0xFE` OK carrying `SERVER_STATUS_CURSOR_EXISTS` (an ordinary terminator). A
//!   stored procedure that uses a cursor internally leaks `SERVER_STATUS_CURSOR_EXISTS` into its
//!   result sets' EOFs, always together with `SERVER_MORE_RESULTS_EXISTS`, and rows do follow, so
//!   an EOF ends the response only with CURSOR_EXISTS set and MORE_RESULTS_EXISTS clear.
//! * `COM_STMT_FETCH`: rows, then a terminator or ERR.
//! * `COM_STMT_PREPARE`: ERR | PREPARE_OK, parameter definitions (+ EOF if any and no
//!   `CLIENT_DEPRECATE_EOF`), column definitions (+ EOF likewise). MariaDB omits both EOFs with
//!   `CLIENT_DEPRECATE_EOF`.
//! * `COM_FIELD_LIST`: definitions until a short `0xFE` packet, or ERR.
//! * `COM_STMT_SEND_LONG_DATA`, `COM_STMT_CLOSE`: no response. `COM_QUIT` and commands the proxy
//!   does not support stop the session ([`StopReason`]). Every other command: one packet.
//! * `COM_STMT_BULK_EXECUTE` (MariaDB, `MARIADB_CLIENT_STMT_BULK_OPERATIONS`): like
//!   `COM_STMT_EXECUTE`, OK | ERR | result set (`INSERT ... RETURNING`).
//! * With `MARIADB_CLIENT_CACHE_METADATA` every column-count packet is followed by one byte:
//!   1 = the column definitions follow, 0 = they are omitted (a `COM_STMT_EXECUTE` whose
//!   metadata the client has seen), and the EOF (not with `CLIENT_DEPRECATE_EOF`) or the rows
//!   come next.
//! * MariaDB progress reports (an ERR packet with error code `0xFFFF`, sent e.g. during
//!   `LOAD DATA` when the client enables progress reporting) never end a response and are skipped.

use std::collections::VecDeque;

use crate::constants::*;
use crate::state_strip::ClientView;
use client::ClientPacket;
use framing::{lenenc, Framer, Step};

pub mod checksum;
mod client;
mod framing;
mod server;

/// Bytes of each logical packet kept for decoding (OK: 1 + 9 + 9 + 2 = 21, PREPARE_OK: 12).
const PREFIX_LEN: usize = 32;
/// Commands whose responses may be outstanding at once before the tracker gives up.
const MAX_PENDING: usize = 16_384;

const MAX_PACKET: u32 = 0xFF_FFFF;

/// `COM_STMT_EXECUTE` flags that request a cursor (read only, for update, scrollable).
const CURSOR_TYPE_MASK: u8 = 0x07;

/// Which side the relay must read next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Client,
    Server,
}

/// Result of [`Tracker::on_client_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientChunk {
    /// How many leading bytes of the chunk the proxy must forward to the backend.
    pub forward: usize,
    /// Set when a command that ends the session starts in this chunk; `forward` stops right
    /// before its packet header (if the header began in an earlier chunk, `forward` is 0 and
    /// those header bytes were already forwarded: see [`Tracker::at_command_boundary`]).
    pub stop: Option<StopReason>,
}

/// Why the client stream must not be forwarded any further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `COM_QUIT`.
    Quit,
    /// A command the proxy does not relay (replication, `COM_SHUTDOWN`, unknown bytes, ...).
    Unsupported { command: u8 },
    /// `COM_CHANGE_USER`: the session logs in again, which the proxy answers itself
    /// ([`Tracker::stopped_header`] says where the packet's header went).
    ChangeUser,
    /// A binary prepared-statement command, with [`Tracker::stop_at_statements`] on: the
    /// proxy maps its statement id first (transaction pooling), then
    /// [`Tracker::resume_statement`] lets it through.
    Statement,
}

/// The header of the packet that stopped the client stream, and how many of its bytes are at
/// the start of the chunk that stopped it (4 unless the header began in an earlier chunk, whose
/// bytes were forwarded: the payload then starts at `in_chunk` in the stop chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoppedHeader {
    pub header: [u8; 4],
    pub in_chunk: usize,
}

/// The byte streams do not follow the protocol as the tracker understands it. The tracker is
/// unusable afterwards (every call returns [`TrackError::Poisoned`]) until [`Tracker::reset`].
#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    #[error("server sent data while no response was pending")]
    UnexpectedServerData,
    #[error("client sent a command packet with sequence id {seq} (expected 0)")]
    BadCommandSequence { seq: u8 },
    #[error("client sent an empty command packet")]
    EmptyCommand,
    #[error("malformed response to command 0x{command:02x}: {reason}")]
    MalformedResponse { command: u8, reason: &'static str },
    #[error("more than {limit} pipelined commands awaiting responses")]
    TooManyPending { limit: usize },
    #[error("client packet of at least {len} bytes exceeds the limit of {max}")]
    PacketTooLarge { len: u64, max: u64 },
    #[error("tracker is unusable after an earlier protocol error")]
    Poisoned,
    #[error("server sent {what} between commands")]
    UnsolicitedServerData { what: &'static str },
}

/// What the bytes an idle server sent amount to so far (see
/// [`Tracker::unsolicited_server_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsolicited {
    /// The start of an ERR packet: read on.
    Partial,
    /// One whole ERR packet of `len` bytes (header included).
    Err { len: usize },
}

/// A finished command, as transaction pooling needs it: what the client
/// asked and how the server's answer ended. Recorded only after
/// [`Tracker::capture_commands`]; taken with [`Tracker::take_completed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub command: u8,
    /// The command's payload after the command byte (the SQL of a
    /// COM_QUERY, the schema of a COM_INIT_DB), or `None` when it was
    /// longer than the capture limit.
    pub text: Option<Vec<u8>>,
    /// The answer ended with an ERR packet.
    pub err: bool,
    /// The answer was an OK packet (not a result set): its counts.
    pub ok: Option<OkCounts>,
    /// Warning count of the final OK or EOF (0 after an ERR).
    pub warnings: u16,
    /// The status flags of the last OK/EOF seen, after this answer.
    pub status: u16,
    /// The whole payload of the final OK packet when it carries session
    /// state (SERVER_SESSION_STATE_CHANGED, CLIENT_SESSION_TRACK
    /// negotiated) and is at most [`MAX_STATE_OK`] bytes; for
    /// `ok_packet::parse_ok`.
    pub state_ok: Option<Vec<u8>>,
    /// The answer ended with a result set: its row count (what FOUND_ROWS()
    /// then returns without SQL_CALC_FOUND_ROWS). None for an OK or ERR.
    pub rows: Option<u64>,
    /// The answer's checksum ([`checksum`]), with
    /// [`Tracker::checksum_answers`] on.
    pub checksum: Option<u64>,
}

/// Longest OK payload kept for its session-state blocks (a `SET` of many
/// variables reports each name and value).
pub const MAX_STATE_OK: usize = 8192;

/// The counters of an OK packet that LAST_INSERT_ID() and ROW_COUNT() report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OkCounts {
    pub affected_rows: u64,
    pub last_insert_id: u64,
}

/// Copies of client commands kept for [`Completed`].
#[derive(Debug)]
struct Capture {
    /// Longest command payload kept.
    limit: usize,
    /// The current client command's bytes so far (command byte included).
    current: Vec<u8>,
    over: bool,
    /// The text of each command in `pending`, in the same order.
    texts: VecDeque<Option<Vec<u8>>>,
    done: VecDeque<Completed>,
    /// [`Tracker::checksum_answers`] is on: `packet_sum` is the hash of the
    /// server packet's payload so far, `answer_sum` the answer's checksum
    /// so far ([`checksum`]).
    checksums: bool,
    packet_sum: u64,
    answer_sum: u64,
}

/// Largest unsolicited ERR payload accepted: a server error message is at most 512 bytes
/// (MYSQL_ERRMSG_SIZE), and 4092 + 4 fits in every read buffer (a multiple of 4096).
const MAX_UNSOLICITED_ERR: usize = 4092;

/// What a command expects back, decided from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommandClass {
    Quit,
    Unsupported,
    ChangeUser,
    NoResponse,
    /// OK | ERR | LOCAL INFILE | result set(s).
    Result,
    Fetch,
    Prepare,
    FieldList,
    /// Exactly one packet.
    Single,
}

/// The binary prepared-statement commands, which name a statement by id (or, for a prepare,
/// create one).
pub fn is_statement_command(cmd: u8) -> bool {
    matches!(
        cmd,
        COM_STMT_PREPARE
            | COM_STMT_EXECUTE
            | COM_STMT_SEND_LONG_DATA
            | COM_STMT_CLOSE
            | COM_STMT_RESET
            | COM_STMT_FETCH
            | COM_STMT_BULK_EXECUTE
    )
}

fn classify(cmd: u8) -> CommandClass {
    use CommandClass::*;
    match cmd {
        COM_QUIT => Quit,
        COM_CHANGE_USER => ChangeUser,
        COM_QUERY | COM_STMT_EXECUTE | COM_PROCESS_INFO | COM_STMT_BULK_EXECUTE => Result,
        COM_STMT_FETCH => Fetch,
        COM_STMT_PREPARE => Prepare,
        COM_FIELD_LIST => FieldList,
        COM_STMT_SEND_LONG_DATA | COM_STMT_CLOSE => NoResponse,
        COM_INIT_DB | COM_CREATE_DB | COM_DROP_DB | COM_REFRESH | COM_STATISTICS
        | COM_PROCESS_KILL | COM_DEBUG | COM_PING | COM_STMT_RESET | COM_SET_OPTION
        | COM_RESET_CONNECTION => Single,
        COM_SLEEP | COM_SHUTDOWN | COM_CONNECT | COM_TIME | COM_DELAYED_INSERT
        | COM_BINLOG_DUMP | COM_TABLE_DUMP | COM_CONNECT_OUT | COM_REGISTER_SLAVE | COM_DAEMON
        | COM_BINLOG_DUMP_GTID => Unsupported,
        _ => Unsupported,
    }
}

/// Where the response at the head of the queue stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RespState {
    /// Waiting for the first packet of a (next) result: OK, ERR, 0xFB or a column count.
    ResultStart,
    ColumnDefs {
        left: u64,
    },
    ColumnsEof,
    Rows,
    /// The server asked for a LOCAL INFILE; the client sends packets up to an empty one.
    InfileData,
    /// The file was sent; waiting for the server's OK/ERR.
    InfileResult,
    FetchRows,
    PrepareStart,
    PrepareParams {
        left: u16,
        cols: u16,
    },
    PrepareParamsEof {
        cols: u16,
    },
    PrepareCols {
        left: u16,
    },
    PrepareColsEof,
    FieldList,
    Single,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    command: u8,
    /// `COM_STMT_EXECUTE` asked for a cursor.
    cursor: bool,
    state: RespState,
    /// Rows of the current result set so far (FOUND_ROWS()).
    rows: u64,
}

/// Tracks command/response boundaries of one session. See the module docs.
#[derive(Debug)]
pub struct Tracker {
    deprecate_eof: bool,
    /// `MARIADB_CLIENT_CACHE_METADATA` was negotiated: column counts carry a
    /// "metadata follows" byte.
    cache_metadata: bool,
    client: Framer,
    client_kind: ClientPacket,
    server: Framer,
    pending: VecDeque<Pending>,
    last_status: u16,
    stopped: Option<StopReason>,
    /// Bytes of the packet that caused the stop were forwarded in an earlier chunk.
    stop_dirty: bool,
    /// The stopping packet's header (see [`StoppedHeader`]).
    stop_header: Option<StoppedHeader>,
    /// A COM_SET_OPTION was forwarded: it flips CLIENT_MULTI_STATEMENTS on
    /// the server's connection, and COM_RESET_CONNECTION does not undo it.
    set_option_seen: bool,
    poisoned: bool,
    /// Largest client logical packet allowed (`--max-packet-size`).
    max_client_packet: u64,
    /// Transaction pooling: commands and how their answers ended.
    capture: Option<Box<Capture>>,
    /// Stop at every COM_STMT_* command ([`StopReason::Statement`]).
    stop_statements: bool,
    /// The next statement command goes through (it was rewritten).
    pass_one_statement: bool,
    /// Note where the flagged packets of each server chunk start
    /// ([`Tracker::state_flagged`]), for a client that gets less session
    /// tracking than its backend connection has.
    strip: Option<ClientView>,
    /// Where the server packet being read started in the current chunk
    /// (None: in an earlier one).
    server_packet_at: Option<usize>,
    /// Offsets in the last server chunk of the OK/EOF packets that start
    /// and end in it and raise SERVER_SESSION_STATE_CHANGED.
    flagged: Vec<usize>,
}

impl Tracker {
    /// `deprecate_eof`: `CLIENT_DEPRECATE_EOF` was negotiated between client and server.
    pub fn new(deprecate_eof: bool) -> Self {
        Tracker {
            deprecate_eof,
            cache_metadata: false,
            client: Framer::new(),
            client_kind: ClientPacket::Command,
            server: Framer::new(),
            // Grown on the first command: an idle session (thousands of them under
            // transaction pooling) should not carry a queue it is not using.
            pending: VecDeque::new(),
            last_status: 0,
            stopped: None,
            stop_dirty: false,
            stop_header: None,
            poisoned: false,
            set_option_seen: false,
            max_client_packet: u64::MAX,
            capture: None,
            stop_statements: false,
            pass_one_statement: false,
            strip: None,
            server_packet_at: None,
            flagged: Vec::new(),
        }
    }

    /// Note where the OK and EOF packets that raise SERVER_SESSION_STATE_CHANGED
    /// start in each server chunk: the relay strips them down to what the
    /// client gets (`view`; None: everything the server sends).
    pub fn strip_state(&mut self, view: Option<ClientView>) {
        self.strip = view;
    }

    /// What the relay strips the flagged packets down to.
    pub fn strip_view(&self) -> Option<ClientView> {
        self.strip
    }

    /// Offsets, in the chunk last given to [`Tracker::on_server_bytes`], of
    /// the packets (header included) that start and end in it and raise
    /// SERVER_SESSION_STATE_CHANGED. A packet cut by a chunk's end is not
    /// listed: its first bytes may already be on their way.
    pub fn state_flagged(&self) -> &[usize] {
        &self.flagged
    }

    /// Between transactions (transaction pooling parks the session): give
    /// back the capacity of queues that are empty now, so that an idle
    /// session costs no more than one that never ran a command.
    pub fn shrink_idle(&mut self) {
        if self.pending.is_empty() {
            self.pending = VecDeque::new();
        }
        if let Some(c) = self.capture.as_mut() {
            if c.texts.is_empty() {
                c.texts = VecDeque::new();
            }
            if c.done.is_empty() {
                c.done = VecDeque::new();
            }
            c.current = Vec::new();
        }
    }

    /// Transaction pooling: stop the client stream at every binary prepared-statement command
    /// ([`StopReason::Statement`]), whose statement id the proxy maps to the connection's.
    pub fn stop_at_statements(&mut self) {
        self.stop_statements = true;
    }

    /// Go on after a [`StopReason::Statement`]: the stream resumes at that command (rewritten
    /// by the proxy), which is let through (`pass`) or was answered by the proxy and dropped;
    /// the next statement command stops again.
    pub fn resume_statement(&mut self, pass: bool) {
        if self.stopped == Some(StopReason::Statement) {
            self.stopped = None;
            self.stop_dirty = false;
            self.stop_header = None;
            // The command's header and first byte were read: it is fed again from its start.
            self.client = Framer::new();
            self.client_kind = ClientPacket::Command;
            if let Some(c) = self.capture.as_mut() {
                c.current.clear();
                c.over = false;
            }
        }
        self.pass_one_statement = pass;
    }

    /// Record every command (its first `limit` payload bytes) with the end
    /// of its answer, for [`Tracker::take_completed`]. Costs a copy of each
    /// command; transaction pooling reads statements to see what they leave
    /// on the connection.
    pub fn capture_commands(&mut self, limit: usize) {
        self.capture = Some(Box::new(Capture {
            limit,
            current: Vec::new(),
            over: false,
            texts: VecDeque::new(),
            done: VecDeque::new(),
            checksums: false,
            packet_sum: checksum::FNV_OFFSET,
            answer_sum: checksum::FNV_OFFSET,
        }));
    }

    /// Give every captured answer its checksum ([`Completed::checksum`],
    /// the rule in [`checksum`]): transaction replay compares what a
    /// client was answered with what a replay reads.
    /// Only with capture on ([`Tracker::capture_commands`]), whose box
    /// holds the sums: a parked session's tracker does not grow.
    pub fn checksum_answers(&mut self) {
        if let Some(c) = self.capture.as_mut() {
            c.checksums = true;
        }
    }

    /// The oldest finished command not taken yet (with capture on).
    pub fn take_completed(&mut self) -> Option<Completed> {
        self.capture.as_mut()?.done.pop_front()
    }

    /// `MARIADB_CLIENT_CACHE_METADATA` was negotiated between client and server.
    pub fn set_cache_metadata(&mut self, on: bool) {
        self.cache_metadata = on;
    }

    /// Refuse client logical packets longer than `max` bytes: the check runs
    /// as soon as a packet header arrives, before its payload is forwarded.
    pub fn set_max_client_packet(&mut self, max: u64) {
        self.max_client_packet = max;
    }

    /// Back to the initial "waiting for a command" state (keeps the negotiated EOF mode and the
    /// queue's allocation; clears the last status flags).
    pub fn reset(&mut self) {
        self.client = Framer::new();
        self.client_kind = ClientPacket::Command;
        self.server = Framer::new();
        self.pending.clear();
        self.last_status = 0;
        self.stopped = None;
        self.stop_dirty = false;
        self.stop_header = None;
        self.poisoned = false;
        self.set_option_seen = false;
        if let Some(c) = self.capture.as_mut() {
            c.current.clear();
            c.over = false;
            c.texts.clear();
            c.done.clear();
            c.packet_sum = checksum::FNV_OFFSET;
            c.answer_sum = checksum::FNV_OFFSET;
        }
    }

    /// Seeds the status flags, e.g. from the OK that ended authentication.
    pub fn set_last_status(&mut self, status: u16) {
        self.last_status = status;
    }

    /// The session was stopped by a `COM_QUIT` or an unsupported command.
    pub fn stopped(&self) -> Option<StopReason> {
        self.stopped
    }

    /// The header of the packet that stopped the client stream (None before a stop).
    pub fn stopped_header(&self) -> Option<StoppedHeader> {
        self.stop_header
    }

    /// Which side the relay must read next.
    pub fn next_read(&self) -> Direction {
        if self.stopped.is_none() && self.client.mid_packet() {
            return Direction::Client;
        }
        match self.pending.front() {
            Some(p) if p.state == RespState::InfileData => Direction::Client,
            Some(_) => Direction::Server,
            None => Direction::Client,
        }
    }

    /// True when no packet is partially seen in either direction and no response is pending.
    /// After a stop, the stopped packet counts as partially seen only if some of its bytes were
    /// forwarded (its header began in an earlier chunk).
    pub fn at_command_boundary(&self) -> bool {
        if self.poisoned || self.server.mid_packet() || !self.pending.is_empty() {
            return false;
        }
        if self.stopped.is_some() {
            !self.stop_dirty
        } else {
            !self.client.mid_packet()
        }
    }

    /// From the status flags of the last OK/EOF the server sent (`SERVER_STATUS_IN_TRANS`).
    pub fn in_transaction(&self) -> bool {
        self.last_status & SERVER_STATUS_IN_TRANS != 0
    }

    /// Status flags of the last OK/EOF the server sent (0 before any).
    pub fn last_status(&self) -> u16 {
        self.last_status
    }

    /// A COM_SET_OPTION was forwarded in this session: the connection
    /// carries a multi-statements setting that a reset does not restore.
    pub fn set_option_seen(&self) -> bool {
        self.set_option_seen
    }

    /// Commands forwarded whose responses are not finished.
    pub fn pending_responses(&self) -> usize {
        self.pending.len()
    }

    /// The oldest command still owed an answer: its command byte and, with
    /// capture on, its payload after that byte (None when it was longer
    /// than the capture limit). What a lost connection was running.
    pub fn owed_command(&self) -> Option<(u8, Option<&[u8]>)> {
        let command = self.pending.front()?.command;
        let text = self
            .capture
            .as_ref()
            .and_then(|c| c.texts.front())
            .and_then(|t| t.as_deref());
        Some((command, text))
    }

    /// Part of a client packet was forwarded and the rest is still to come.
    pub fn client_mid_packet(&self) -> bool {
        self.client.mid_packet()
    }
}

#[cfg(test)]
mod tests;

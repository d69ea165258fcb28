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

use crate::mysql::constants::*;

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

/// Incremental packet framer for one direction.
#[derive(Debug, Clone)]
struct Framer {
    hdr: [u8; 4],
    /// Header bytes seen of the current physical packet; 4 while in its payload.
    hdr_len: u8,
    /// Payload bytes left in the current physical packet.
    remaining: u32,
    /// Length of the current physical packet.
    phys_len: u32,
    /// The next/current physical packet continues a logical packet (previous one was 0xFFFFFF).
    continuation: bool,
    /// First physical length of the current logical packet.
    first_len: u32,
    /// Sum of the physical lengths of the current logical packet so far.
    logical_len: u64,
    /// Sequence id of the first physical packet.
    seq: u8,
    prefix: [u8; PREFIX_LEN],
    prefix_len: u8,
    /// Keep the whole logical packet in `full` when it is an OK packet
    /// (first byte 0x00) of at most MAX_STATE_OK bytes: set by the tracker
    /// at the start of a packet that may end a response with session state.
    keep_full: bool,
    full: Vec<u8>,
}

impl Framer {
    fn new() -> Self {
        Framer {
            hdr: [0; 4],
            hdr_len: 0,
            remaining: 0,
            phys_len: 0,
            continuation: false,
            first_len: 0,
            logical_len: 0,
            seq: 0,
            prefix: [0; PREFIX_LEN],
            prefix_len: 0,
            keep_full: false,
            full: Vec::new(),
        }
    }

    /// A packet is partially seen (header, payload, or a logical packet awaiting continuation).
    fn mid_packet(&self) -> bool {
        self.hdr_len > 0 || self.continuation
    }

    /// The next byte fed starts a new logical packet.
    fn at_logical_start(&self) -> bool {
        self.hdr_len == 0 && !self.continuation
    }

    fn prefix(&self) -> &[u8] {
        &self.prefix[..self.prefix_len as usize]
    }

    /// Packet as the response state machine needs it.
    fn packet(&self) -> Packet<'_> {
        Packet {
            first_len: self.first_len,
            prefix: self.prefix(),
        }
    }
}

/// Step of the framer over a chunk.
enum Step {
    /// Header of a new logical packet complete (first physical packet).
    LogicalHeader,
    /// Logical packet complete.
    LogicalEnd,
    /// Nothing notable (header bytes, payload bytes, a continuation header, ...).
    None,
}

impl Framer {
    /// Consumes bytes from `chunk[*pos..]` up to the next notable event.
    fn step(&mut self, chunk: &[u8], pos: &mut usize) -> Step {
        if self.hdr_len < 4 {
            let take = (4 - self.hdr_len as usize).min(chunk.len() - *pos);
            let h = self.hdr_len as usize;
            self.hdr[h..h + take].copy_from_slice(&chunk[*pos..*pos + take]);
            self.hdr_len += take as u8;
            *pos += take;
            if self.hdr_len < 4 {
                return Step::None;
            }
            self.phys_len = u32::from_le_bytes([self.hdr[0], self.hdr[1], self.hdr[2], 0]);
            self.remaining = self.phys_len;
            let new_logical = !self.continuation;
            if new_logical {
                self.logical_len = 0;
            }
            self.logical_len += u64::from(self.phys_len);
            if new_logical {
                self.first_len = self.phys_len;
                self.seq = self.hdr[3];
                self.prefix_len = 0;
                self.full.clear();
            }
            if self.phys_len == 0 {
                // An empty physical packet ends its logical packet at once.
                if new_logical {
                    // Report the header first; the caller calls step again (0 bytes) for the end.
                    return Step::LogicalHeader;
                }
                return self.end_physical();
            }
            return if new_logical {
                Step::LogicalHeader
            } else {
                Step::None
            };
        }
        if self.remaining == 0 {
            // Only reached for an empty first physical packet right after LogicalHeader.
            return self.end_physical();
        }
        let n = (self.remaining as usize).min(chunk.len() - *pos);
        if self.keep_full
            && self.logical_len <= MAX_STATE_OK as u64
            && (self.full.first().copied().or(chunk.get(*pos).copied()) == Some(0x00))
        {
            self.full.extend_from_slice(&chunk[*pos..*pos + n]);
        }
        let have = self.prefix_len as usize;
        if have < PREFIX_LEN {
            let k = n.min(PREFIX_LEN - have);
            self.prefix[have..have + k].copy_from_slice(&chunk[*pos..*pos + k]);
            self.prefix_len += k as u8;
        }
        *pos += n;
        self.remaining -= n as u32;
        if self.remaining == 0 {
            return self.end_physical();
        }
        Step::None
    }

    fn end_physical(&mut self) -> Step {
        self.hdr_len = 0;
        if self.phys_len == MAX_PACKET {
            self.continuation = true;
            Step::None
        } else {
            self.continuation = false;
            Step::LogicalEnd
        }
    }
}

/// A complete logical packet from the server, as far as the tracker keeps it.
#[derive(Debug, Clone, Copy)]
struct Packet<'a> {
    first_len: u32,
    prefix: &'a [u8],
}

impl Packet<'_> {
    fn first_byte(&self) -> Option<u8> {
        self.prefix.first().copied()
    }
    /// Legacy EOF or OK-with-0xFE-header: first byte 0xFE and shorter than 0xFFFFFF.
    fn is_terminator(&self) -> bool {
        self.first_byte() == Some(0xFE) && self.first_len < MAX_PACKET
    }
    fn is_err(&self) -> bool {
        self.first_byte() == Some(0xFF)
    }
    fn is_ok(&self) -> bool {
        self.first_byte() == Some(0x00)
    }
    /// MariaDB progress report: an ERR packet with error code 0xFFFF.
    fn is_progress(&self) -> bool {
        self.prefix.len() >= 3 && self.prefix[..3] == [0xFF, 0xFF, 0xFF]
    }
    /// Affected rows and last insert id of an OK packet (0x00 header).
    fn ok_counts(&self) -> Option<OkCounts> {
        let p = self.prefix;
        if *p.first()? != 0x00 {
            return None;
        }
        let (affected_rows, a) = lenenc(p.get(1..)?)?;
        let (last_insert_id, _) = lenenc(p.get(1 + a..)?)?;
        Some(OkCounts {
            affected_rows,
            last_insert_id,
        })
    }

    /// Warning count of an OK packet or a legacy EOF.
    fn warnings(&self) -> Option<u16> {
        let p = self.prefix;
        match *p.first()? {
            0xFE if self.first_len < 7 => Some(u16::from_le_bytes([*p.get(1)?, *p.get(2)?])),
            0x00 | 0xFE => {
                let (_, a) = lenenc(p.get(1..)?)?;
                let (_, b) = lenenc(p.get(1 + a..)?)?;
                let i = 1 + a + b + 2;
                Some(u16::from_le_bytes([*p.get(i)?, *p.get(i + 1)?]))
            }
            _ => None,
        }
    }

    /// Status flags of an OK packet (0x00 or 0xFE header) or of a 5-byte legacy EOF.
    fn status(&self) -> Option<u16> {
        let p = self.prefix;
        match *p.first()? {
            0xFE if self.first_len < 7 => {
                // Legacy EOF: 0xFE, warnings u16, status u16.
                Some(u16::from_le_bytes([*p.get(3)?, *p.get(4)?]))
            }
            0x00 | 0xFE => {
                let (_, a) = lenenc(p.get(1..)?)?;
                let (_, b) = lenenc(p.get(1 + a..)?)?;
                let i = 1 + a + b;
                Some(u16::from_le_bytes([*p.get(i)?, *p.get(i + 1)?]))
            }
            _ => None,
        }
    }
}

/// Decodes a length-encoded integer; `None` for NULL (0xFB), 0xFF or truncated input.
fn lenenc(p: &[u8]) -> Option<(u64, usize)> {
    let b = *p.first()?;
    let width = match b {
        0..=0xFA => return Some((u64::from(b), 1)),
        0xFC => 2,
        0xFD => 3,
        0xFE => 8,
        _ => return None,
    };
    let bytes = p.get(1..1 + width)?;
    let mut v = [0u8; 8];
    v[..width].copy_from_slice(bytes);
    Some((u64::from_le_bytes(v), 1 + width))
}

/// Which way the current client logical packet is interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientPacket {
    Command,
    InfileData,
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
        }
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
        }));
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

    /// Bytes the client sent. `forward` = how many leading bytes of `chunk` the proxy must
    /// forward to the backend. If a `COM_QUIT` or an unsupported command starts inside this
    /// chunk, `forward` stops right before it and `stop` says why; the rest is not looked at.
    /// After a stop every further call returns `forward: 0` and the same `stop`.
    pub fn on_client_bytes(&mut self, chunk: &[u8]) -> Result<ClientChunk, TrackError> {
        if self.poisoned {
            return Err(TrackError::Poisoned);
        }
        if let Some(reason) = self.stopped {
            return Ok(ClientChunk {
                forward: 0,
                stop: Some(reason),
            });
        }
        match self.client_inner(chunk) {
            Ok(c) => Ok(c),
            Err(e) => {
                self.poisoned = true;
                Err(e)
            }
        }
    }

    fn client_inner(&mut self, chunk: &[u8]) -> Result<ClientChunk, TrackError> {
        let mut pos = 0;
        // Offset in this chunk where the current logical packet's header began, if it did.
        let mut packet_start: Option<usize> = None;
        while pos < chunk.len() || self.client.hdr_len == 4 && self.client.remaining == 0 {
            if self.client.at_logical_start() {
                packet_start = Some(pos);
                self.client_kind = match self.pending.front() {
                    Some(p) if p.state == RespState::InfileData => ClientPacket::InfileData,
                    _ => ClientPacket::Command,
                };
            }
            let before = self.client.prefix_len;
            let step_start = pos;
            let in_payload = self.client.hdr_len == 4;
            let start = pos;
            let step = self.client.step(chunk, &mut pos);
            if let Some(c) = self.capture.as_mut() {
                if in_payload && self.client_kind == ClientPacket::Command {
                    let bytes = &chunk[start..pos];
                    if c.current.len() + bytes.len() > c.limit + 1 {
                        c.over = true;
                    } else if !c.over {
                        c.current.extend_from_slice(bytes);
                    }
                }
            }
            if self.client.logical_len > self.max_client_packet {
                return Err(TrackError::PacketTooLarge {
                    len: self.client.logical_len,
                    max: self.max_client_packet,
                });
            }
            if self.client_kind == ClientPacket::Command {
                if let Step::LogicalHeader = step {
                    if self.client.seq != 0 {
                        return Err(TrackError::BadCommandSequence {
                            seq: self.client.seq,
                        });
                    }
                    if self.client.first_len == 0 {
                        return Err(TrackError::EmptyCommand);
                    }
                }
                // First payload byte of a command: decide whether it may be forwarded at all.
                if before == 0 && self.client.prefix_len > 0 {
                    let command = self.client.prefix[0];
                    let stop = match classify(command) {
                        CommandClass::Quit => Some(StopReason::Quit),
                        CommandClass::Unsupported => Some(StopReason::Unsupported { command }),
                        CommandClass::ChangeUser => Some(StopReason::ChangeUser),
                        _ if self.stop_statements && is_statement_command(command) => {
                            if std::mem::take(&mut self.pass_one_statement) {
                                None
                            } else {
                                Some(StopReason::Statement)
                            }
                        }
                        _ => None,
                    };
                    if let Some(reason) = stop {
                        self.stopped = Some(reason);
                        self.stop_dirty = packet_start.is_none();
                        // The command byte is at `step_start`; this chunk's header bytes
                        // are right before it.
                        self.stop_header = Some(StoppedHeader {
                            header: self.client.hdr,
                            in_chunk: match packet_start {
                                Some(_) => 4,
                                None => step_start.min(4),
                            },
                        });
                        return Ok(ClientChunk {
                            forward: packet_start.unwrap_or(0),
                            stop: Some(reason),
                        });
                    }
                }
            }
            if let Step::LogicalEnd = step {
                self.client_packet_done()?;
            }
        }
        Ok(ClientChunk {
            forward: chunk.len(),
            stop: None,
        })
    }

    /// A client logical packet just completed.
    fn client_packet_done(&mut self) -> Result<(), TrackError> {
        match self.client_kind {
            ClientPacket::InfileData => {
                // An empty logical packet ends the file.
                if self.client.first_len == 0 {
                    if let Some(front) = self.pending.front_mut() {
                        front.state = RespState::InfileResult;
                    }
                }
                Ok(())
            }
            ClientPacket::Command => {
                let p = self.client.prefix();
                let Some(&command) = p.first() else {
                    return Err(TrackError::EmptyCommand);
                };
                if command == COM_SET_OPTION {
                    self.set_option_seen = true;
                }
                let text = self.capture.as_mut().map(|c| {
                    let over = std::mem::take(&mut c.over);
                    let mut bytes = std::mem::take(&mut c.current);
                    (!over && !bytes.is_empty()).then(|| {
                        bytes.remove(0);
                        bytes
                    })
                });
                let state = match classify(command) {
                    CommandClass::Result => RespState::ResultStart,
                    CommandClass::Fetch => RespState::FetchRows,
                    CommandClass::Prepare => RespState::PrepareStart,
                    CommandClass::FieldList => RespState::FieldList,
                    CommandClass::Single => RespState::Single,
                    CommandClass::NoResponse => {
                        if let Some(c) = self.capture.as_mut() {
                            c.done.push_back(Completed {
                                command,
                                text: text.flatten(),
                                err: false,
                                ok: None,
                                warnings: 0,
                                status: self.last_status,
                                state_ok: None,
                                rows: None,
                            });
                        }
                        return Ok(());
                    }
                    // Stopped at the first byte; never completes.
                    CommandClass::Quit | CommandClass::Unsupported | CommandClass::ChangeUser => {
                        return Ok(())
                    }
                };
                let cursor = command == COM_STMT_EXECUTE
                    && p.get(5).is_some_and(|f| f & CURSOR_TYPE_MASK != 0);
                if self.pending.len() >= MAX_PENDING {
                    return Err(TrackError::TooManyPending { limit: MAX_PENDING });
                }
                self.pending.push_back(Pending {
                    command,
                    cursor,
                    state,
                    rows: 0,
                });
                if let Some(c) = self.capture.as_mut() {
                    c.texts.push_back(text.flatten());
                }
                Ok(())
            }
        }
    }

    /// Bytes the backend sent (all of them are forwarded to the client).
    pub fn on_server_bytes(&mut self, chunk: &[u8]) -> Result<(), TrackError> {
        if self.poisoned {
            return Err(TrackError::Poisoned);
        }
        match self.server_inner(chunk) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.poisoned = true;
                Err(e)
            }
        }
    }

    fn server_inner(&mut self, chunk: &[u8]) -> Result<(), TrackError> {
        let mut pos = 0;
        while pos < chunk.len() || self.server.hdr_len == 4 && self.server.remaining == 0 {
            if self.server.at_logical_start() {
                match self.pending.front() {
                    None => return Err(TrackError::UnexpectedServerData),
                    Some(p) if p.state == RespState::InfileData => {
                        return Err(TrackError::UnexpectedServerData)
                    }
                    // An OK that ends a command may carry session state.
                    Some(p) => {
                        self.server.keep_full = self.capture.is_some()
                            && matches!(
                                p.state,
                                RespState::ResultStart
                                    | RespState::InfileResult
                                    | RespState::Single
                            );
                    }
                }
            }
            if let Step::LogicalEnd = self.server.step(chunk, &mut pos) {
                self.server_packet_done()?;
            }
        }
        Ok(())
    }

    /// A server logical packet just completed: advance the response at the head of the queue.
    fn server_packet_done(&mut self) -> Result<(), TrackError> {
        let deprecate_eof = self.deprecate_eof;
        let cache_metadata = self.cache_metadata;
        let pkt = self.server.packet();
        let Some(front) = self.pending.front_mut() else {
            return Err(TrackError::UnexpectedServerData);
        };
        if pkt.is_progress() && front.state != RespState::Single {
            return Ok(());
        }
        let command = front.command;
        let malformed = |reason| TrackError::MalformedResponse { command, reason };
        let mut status = None;
        let mut result_rows = None;
        let done = match front.state {
            RespState::InfileResult => {
                if pkt.is_err() {
                    true
                } else if pkt.is_ok() || pkt.is_terminator() {
                    status = pkt.status();
                    end_of_result(&mut front.state, status)
                } else {
                    return Err(malformed("expected OK or ERR after LOCAL INFILE data"));
                }
            }
            RespState::ResultStart => match pkt.first_byte() {
                Some(0xFF) => true,
                Some(0xFB) => {
                    front.state = RespState::InfileData;
                    false
                }
                // OK; a short 0xFE packet here (an EOF instead of a result) is taken as an OK.
                Some(0x00) | Some(0xFE) if pkt.is_ok() || pkt.first_len < 9 => {
                    status = pkt.status();
                    end_of_result(&mut front.state, status)
                }
                _ => match lenenc(pkt.prefix) {
                    // The server skipped the metadata: the definitions' EOF
                    // or the rows come next.
                    Some((n, w)) if n > 0 && cache_metadata && pkt.prefix.get(w) == Some(&0) => {
                        front.state = if deprecate_eof {
                            RespState::Rows
                        } else {
                            RespState::ColumnsEof
                        };
                        false
                    }
                    Some((n, _)) if n > 0 => {
                        front.state = RespState::ColumnDefs { left: n };
                        false
                    }
                    _ => return Err(malformed("bad column count")),
                },
            },
            RespState::ColumnDefs { left } => {
                if pkt.is_err() {
                    true
                } else {
                    front.state = if left > 1 {
                        RespState::ColumnDefs { left: left - 1 }
                    } else if deprecate_eof {
                        RespState::Rows
                    } else {
                        RespState::ColumnsEof
                    };
                    false
                }
            }
            RespState::ColumnsEof => {
                if pkt.is_err() {
                    true
                } else if pkt.is_terminator() {
                    status = pkt.status();
                    let s = status.unwrap_or(0);
                    if front.cursor
                        && s & SERVER_STATUS_CURSOR_EXISTS != 0
                        && s & SERVER_MORE_RESULTS_EXISTS == 0
                    {
                        true
                    } else {
                        front.state = RespState::Rows;
                        false
                    }
                } else {
                    return Err(malformed("expected EOF after column definitions"));
                }
            }
            RespState::Rows => {
                if pkt.is_err() {
                    true
                } else if pkt.is_terminator() {
                    status = pkt.status();
                    // The next result set, if any, counts its own rows.
                    result_rows = Some(std::mem::take(&mut front.rows));
                    end_of_result(&mut front.state, status)
                } else {
                    front.rows += 1;
                    false
                }
            }
            RespState::FetchRows => {
                if pkt.is_terminator() {
                    status = pkt.status();
                    true
                } else {
                    pkt.is_err()
                }
            }
            RespState::InfileData => return Err(TrackError::UnexpectedServerData),
            RespState::PrepareStart => {
                if pkt.is_err() {
                    true
                } else if pkt.is_ok() && pkt.prefix.len() >= 9 {
                    let p = pkt.prefix;
                    let cols = u16::from_le_bytes([p[5], p[6]]);
                    let params = u16::from_le_bytes([p[7], p[8]]);
                    if params > 0 {
                        front.state = RespState::PrepareParams { left: params, cols };
                        false
                    } else {
                        prepare_columns(&mut front.state, cols)
                    }
                } else {
                    return Err(malformed("expected PREPARE_OK or ERR"));
                }
            }
            RespState::PrepareParams { left, cols } => {
                if left > 1 {
                    front.state = RespState::PrepareParams {
                        left: left - 1,
                        cols,
                    };
                    false
                } else if !deprecate_eof {
                    front.state = RespState::PrepareParamsEof { cols };
                    false
                } else {
                    prepare_columns(&mut front.state, cols)
                }
            }
            RespState::PrepareParamsEof { cols } => {
                if !pkt.is_terminator() {
                    return Err(malformed("expected EOF after parameter definitions"));
                }
                status = pkt.status();
                prepare_columns(&mut front.state, cols)
            }
            RespState::PrepareCols { left } => {
                if left > 1 {
                    front.state = RespState::PrepareCols { left: left - 1 };
                    false
                } else if !deprecate_eof {
                    front.state = RespState::PrepareColsEof;
                    false
                } else {
                    true
                }
            }
            RespState::PrepareColsEof => {
                if !pkt.is_terminator() {
                    return Err(malformed("expected EOF after column definitions"));
                }
                status = pkt.status();
                true
            }
            RespState::FieldList => {
                if pkt.is_terminator() {
                    status = pkt.status();
                    true
                } else {
                    pkt.is_err()
                }
            }
            RespState::Single => {
                if pkt.is_ok() || pkt.is_terminator() {
                    status = pkt.status();
                }
                true
            }
        };
        if let Some(s) = status {
            self.last_status = s;
        }
        if done {
            self.pending.pop_front();
            if let Some(c) = self.capture.as_mut() {
                c.done.push_back(Completed {
                    command,
                    text: c.texts.pop_front().flatten(),
                    err: pkt.is_err(),
                    ok: pkt.ok_counts(),
                    warnings: pkt.warnings().unwrap_or(0),
                    status: self.last_status,
                    state_ok: (pkt.is_ok()
                        && status.is_some_and(|s| s & SERVER_SESSION_STATE_CHANGED != 0)
                        && self.server.full.len() as u64 == self.server.logical_len
                        && !self.server.full.is_empty())
                    .then(|| self.server.full.clone()),
                    rows: result_rows.filter(|_| !pkt.is_err()),
                });
            }
        }
        Ok(())
    }

    /// Bytes the server sent while no response is owed (`buf`: all of them since the command
    /// boundary). A server that closes an idle connection may first send one ERR packet: MySQL
    /// 8.0.24+ sends 4031 with sequence id 0 when wait_timeout expires, MariaDB tries 1927 with
    /// sequence id 1 after KILL (and usually loses the race with its own shutdown(2)), so any
    /// sequence id is accepted. Anything else is a protocol error. Pure: the connection is
    /// finished either way, so the tracker's state does not change.
    pub fn unsolicited_server_bytes(&self, buf: &[u8]) -> Result<Unsolicited, TrackError> {
        if !self.at_command_boundary() {
            return Err(TrackError::UnexpectedServerData);
        }
        let bad = |what| Err(TrackError::UnsolicitedServerData { what });
        if buf.len() > 4 && buf[4] != 0xFF {
            return bad("a packet that is not an ERR");
        }
        let Some(hdr) = buf.get(..4) else {
            return Ok(Unsolicited::Partial);
        };
        let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], 0]) as usize;
        if len < 3 {
            return bad("a truncated ERR packet");
        }
        if len > MAX_UNSOLICITED_ERR {
            return bad("an oversized ERR packet");
        }
        if buf.len() < 4 + len {
            return Ok(Unsolicited::Partial);
        }
        if u16::from_le_bytes([buf[5], buf[6]]) == 0xFFFF {
            return bad("a progress report");
        }
        if buf.len() > 4 + len {
            return bad("bytes after an ERR packet");
        }
        Ok(Unsolicited::Err { len: 4 + len })
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
}

/// After an OK/terminator: another result follows if MORE_RESULTS_EXISTS is set (the state
/// goes back to [`RespState::ResultStart`]); returns whether the response is complete.
fn end_of_result(state: &mut RespState, status: Option<u16>) -> bool {
    if status.is_some_and(|s| s & SERVER_MORE_RESULTS_EXISTS != 0) {
        *state = RespState::ResultStart;
        false
    } else {
        true
    }
}

/// After the parameter definitions (and their EOF) of a prepare response: column definitions
/// follow if there are any; returns whether the response is complete.
fn prepare_columns(state: &mut RespState, cols: u16) -> bool {
    if cols > 0 {
        *state = RespState::PrepareCols { left: cols };
        false
    } else {
        true
    }
}

#[cfg(test)]
mod tests;

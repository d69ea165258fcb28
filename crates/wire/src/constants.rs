//! Numeric constants of the MySQL/MariaDB client/server protocol.
//!
//! Values come from the MySQL `include/mysql_com.h` / `my_command.h` headers
//! and the MariaDB protocol documentation; they are wire-level and never change.

// ---------------------------------------------------------------------------
// Capability flags (HandshakeV10 / HandshakeResponse41, 32 bits on the wire).
// ---------------------------------------------------------------------------

/// New (4.1) password hashing. MariaDB reuses this bit as `CLIENT_MYSQL`:
/// when a MariaDB peer clears it, the last 4 reserved bytes of the handshake
/// carry MariaDB extended capabilities.
pub const CLIENT_LONG_PASSWORD: u32 = 1;
/// MariaDB's name for bit 0, see [`CLIENT_LONG_PASSWORD`].
pub const CLIENT_MYSQL: u32 = CLIENT_LONG_PASSWORD;
/// Report rows matched instead of rows changed in UPDATE affected-rows.
pub const CLIENT_FOUND_ROWS: u32 = 1 << 1;
/// Column definitions carry all column flags.
pub const CLIENT_LONG_FLAG: u32 = 1 << 2;
/// The HandshakeResponse carries an initial schema name.
pub const CLIENT_CONNECT_WITH_DB: u32 = 1 << 3;
/// Disallow `db.table.column` syntax (obsolete).
pub const CLIENT_NO_SCHEMA: u32 = 1 << 4;
/// Compressed protocol (the proxy never offers it).
pub const CLIENT_COMPRESS: u32 = 1 << 5;
/// ODBC client (no effect in modern servers).
pub const CLIENT_ODBC: u32 = 1 << 6;
/// Client may answer LOAD DATA LOCAL INFILE requests (0xFB packets).
pub const CLIENT_LOCAL_FILES: u32 = 1 << 7;
/// Parser ignores spaces before '('.
pub const CLIENT_IGNORE_SPACE: u32 = 1 << 8;
/// The 4.1 protocol: sqlstate in ERR, status/warnings in OK/EOF.
pub const CLIENT_PROTOCOL_41: u32 = 1 << 9;
/// `wait_timeout` becomes `interactive_timeout` for this session.
pub const CLIENT_INTERACTIVE: u32 = 1 << 10;
/// Client wants TLS; it sends an SSLRequest before the real response.
pub const CLIENT_SSL: u32 = 1 << 11;
/// Obsolete client-side flag.
pub const CLIENT_IGNORE_SIGPIPE: u32 = 1 << 12;
/// Client understands the transaction status flags.
pub const CLIENT_TRANSACTIONS: u32 = 1 << 13;
/// Obsolete (was the 4.1 protocol flag in 4.1.0).
pub const CLIENT_RESERVED: u32 = 1 << 14;
/// 4.1 authentication: auth response prefixed by a 1-byte length.
pub const CLIENT_SECURE_CONNECTION: u32 = 1 << 15;
/// Several statements separated by ';' in one COM_QUERY.
pub const CLIENT_MULTI_STATEMENTS: u32 = 1 << 16;
/// Client handles multiple result sets (SERVER_MORE_RESULTS_EXISTS).
pub const CLIENT_MULTI_RESULTS: u32 = 1 << 17;
/// Multiple result sets from COM_STMT_EXECUTE (stored procedures).
pub const CLIENT_PS_MULTI_RESULTS: u32 = 1 << 18;
/// Pluggable authentication: plugin names in greeting and response.
pub const CLIENT_PLUGIN_AUTH: u32 = 1 << 19;
/// The HandshakeResponse carries connection attributes.
pub const CLIENT_CONNECT_ATTRS: u32 = 1 << 20;
/// Auth response is length-encoded (may exceed 255 bytes).
pub const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 1 << 21;
/// Client can handle a session in expired-password sandbox mode.
pub const CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS: u32 = 1 << 22;
/// OK packets may carry session-state-change information.
pub const CLIENT_SESSION_TRACK: u32 = 1 << 23;
/// The EOF packet after column definitions is omitted and the result-set
/// terminator is an OK packet with a 0xFE header.
pub const CLIENT_DEPRECATE_EOF: u32 = 1 << 24;
/// Client may ask to omit result-set metadata (MySQL 8).
pub const CLIENT_OPTIONAL_RESULTSET_METADATA: u32 = 1 << 25;
/// zstd compression (MySQL 8.0.18+); adds a byte to HandshakeResponse41.
pub const CLIENT_ZSTD_COMPRESSION_ALGORITHM: u32 = 1 << 26;
/// COM_QUERY carries query attributes (MySQL 8.0.23+).
pub const CLIENT_QUERY_ATTRIBUTES: u32 = 1 << 27;
/// Multi-factor authentication (MySQL 8.0.27+).
pub const MULTI_FACTOR_AUTHENTICATION: u32 = 1 << 28;
/// Client-side only: verify the server certificate.
pub const CLIENT_SSL_VERIFY_SERVER_CERT: u32 = 1 << 30;
/// Client-side only: remember options after a failed connect.
pub const CLIENT_REMEMBER_OPTIONS: u32 = 1 << 31;

/// What a 4.1-protocol client logging in with mysql_native_password always
/// sets: ringgate's own logins to the backend (and `ringgate check`'s) use it.
pub const NATIVE_LOGIN_CAPS: u32 = CLIENT_LONG_PASSWORD
    | CLIENT_LONG_FLAG
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_PLUGIN_AUTH
    | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;

/// Capabilities that change how a backend session behaves or frames its
/// responses. A pooled backend connection may only be handed to a client
/// whose bits here match the ones the connection was authenticated with,
/// because they cannot be changed after the handshake.
pub const SESSION_KEY_CAPS: u32 = CLIENT_DEPRECATE_EOF
    | CLIENT_FOUND_ROWS
    // The server parses `f (x)` as a function call only with IGNORE_SPACE.
    | CLIENT_IGNORE_SPACE
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_PS_MULTI_RESULTS
    | CLIENT_LOCAL_FILES
    | CLIENT_INTERACTIVE
    | CLIENT_SESSION_TRACK;

// ---------------------------------------------------------------------------
// MariaDB extended capabilities: a second 32-bit word, bits 32..63 of
// MariaDB's 64-bit capability set. A MariaDB server announces them in the
// last 4 of the greeting's 10 reserved bytes, and a client answers in the
// last 4 of the HandshakeResponse's 23-byte filler; both only count when the
// sender cleared CLIENT_MYSQL (bit 0). Values as in MariaDB's mysql_com.h
// (`MARIADB_CLIENT_* >> 32`).
// ---------------------------------------------------------------------------

/// `MARIADB_CLIENT_PROGRESS`: the server may send progress reports (ERR
/// packets with code 0xFFFF) in the middle of a long statement.
pub const MARIADB_CLIENT_PROGRESS: u32 = 1;
/// `MARIADB_CLIENT_COM_MULTI`: COM_MULTI (0xFE), never released; no
/// MariaDB 10.6+ server offers it.
pub const MARIADB_CLIENT_COM_MULTI: u32 = 1 << 1;
/// `MARIADB_CLIENT_STMT_BULK_OPERATIONS`: COM_STMT_BULK_EXECUTE (0xFA).
pub const MARIADB_CLIENT_STMT_BULK_OPERATIONS: u32 = 1 << 2;
/// `MARIADB_CLIENT_EXTENDED_METADATA`: column definitions carry a block of
/// type information (data type name such as `uuid`, format such as `json`).
pub const MARIADB_CLIENT_EXTENDED_METADATA: u32 = 1 << 3;
/// `MARIADB_CLIENT_CACHE_METADATA`: every column-count packet carries a
/// "metadata follows" byte, and COM_STMT_EXECUTE may omit the column
/// definitions the client has already seen.
pub const MARIADB_CLIENT_CACHE_METADATA: u32 = 1 << 4;
/// `MARIADB_CLIENT_BULK_UNIT_RESULTS` (MariaDB 11.5+): one result per row of
/// a COM_STMT_BULK_EXECUTE.
pub const MARIADB_CLIENT_BULK_UNIT_RESULTS: u32 = 1 << 5;

/// The extended capabilities ringgate passes through from a MariaDB
/// backend: the ones whose effect on the command phase the response tracker
/// follows (progress reports are skipped, the metadata byte is read,
/// COM_STMT_BULK_EXECUTE is a result-returning command; extended metadata
/// only lengthens column definitions, which are counted, not parsed).
/// COM_MULTI was never released and BULK_UNIT_RESULTS is not in the MariaDB
/// 10.11 that the tests run against, so neither is offered.
pub const MIRRORED_EXT_CAPS: u32 = MARIADB_CLIENT_PROGRESS
    | MARIADB_CLIENT_STMT_BULK_OPERATIONS
    | MARIADB_CLIENT_EXTENDED_METADATA
    | MARIADB_CLIENT_CACHE_METADATA;

// ---------------------------------------------------------------------------
// Server status flags (OK / EOF packets, 16 bits).
// ---------------------------------------------------------------------------

/// A transaction is open; the backend connection must stay pinned.
pub const SERVER_STATUS_IN_TRANS: u16 = 0x0001;
/// Autocommit mode is on.
pub const SERVER_STATUS_AUTOCOMMIT: u16 = 0x0002;
/// Another result set follows this one (multi-statement / CALL).
pub const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;
/// The query used no good index.
pub const SERVER_STATUS_NO_GOOD_INDEX_USED: u16 = 0x0010;
/// The query used no index.
pub const SERVER_STATUS_NO_INDEX_USED: u16 = 0x0020;
/// A server-side cursor is open (COM_STMT_EXECUTE with a cursor); rows come
/// later through COM_STMT_FETCH.
pub const SERVER_STATUS_CURSOR_EXISTS: u16 = 0x0040;
/// The last row of a cursor has been sent.
pub const SERVER_STATUS_LAST_ROW_SENT: u16 = 0x0080;
/// A database was dropped.
pub const SERVER_STATUS_DB_DROPPED: u16 = 0x0100;
/// NO_BACKSLASH_ESCAPES sql_mode is active.
pub const SERVER_STATUS_NO_BACKSLASH_ESCAPES: u16 = 0x0200;
/// A prepared statement's metadata changed after re-preparation.
pub const SERVER_STATUS_METADATA_CHANGED: u16 = 0x0400;
/// The query was logged as slow.
pub const SERVER_QUERY_WAS_SLOW: u16 = 0x0800;
/// The result set carries OUT parameters of a stored procedure.
pub const SERVER_PS_OUT_PARAMS: u16 = 0x1000;
/// The open transaction is read-only.
pub const SERVER_STATUS_IN_TRANS_READONLY: u16 = 0x2000;
/// Session state changed (details in the OK packet's session-track info).
pub const SERVER_SESSION_STATE_CHANGED: u16 = 0x4000;
/// MariaDB only: the session's sql_mode has ANSI_QUOTES (`"…"` is an
/// identifier). MySQL leaves this bit unused.
pub const SERVER_STATUS_ANSI_QUOTES: u16 = 0x8000;

// ---------------------------------------------------------------------------
// Command bytes (first payload byte of a client command packet).
// ---------------------------------------------------------------------------

pub const COM_SLEEP: u8 = 0x00;
pub const COM_QUIT: u8 = 0x01;
pub const COM_INIT_DB: u8 = 0x02;
pub const COM_QUERY: u8 = 0x03;
pub const COM_FIELD_LIST: u8 = 0x04;
pub const COM_CREATE_DB: u8 = 0x05;
pub const COM_DROP_DB: u8 = 0x06;
pub const COM_REFRESH: u8 = 0x07;
pub const COM_SHUTDOWN: u8 = 0x08;
pub const COM_STATISTICS: u8 = 0x09;
pub const COM_PROCESS_INFO: u8 = 0x0a;
pub const COM_CONNECT: u8 = 0x0b;
pub const COM_PROCESS_KILL: u8 = 0x0c;
pub const COM_DEBUG: u8 = 0x0d;
pub const COM_PING: u8 = 0x0e;
pub const COM_TIME: u8 = 0x0f;
pub const COM_DELAYED_INSERT: u8 = 0x10;
pub const COM_CHANGE_USER: u8 = 0x11;
pub const COM_BINLOG_DUMP: u8 = 0x12;
pub const COM_TABLE_DUMP: u8 = 0x13;
pub const COM_CONNECT_OUT: u8 = 0x14;
pub const COM_REGISTER_SLAVE: u8 = 0x15;
pub const COM_STMT_PREPARE: u8 = 0x16;
pub const COM_STMT_EXECUTE: u8 = 0x17;
pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
pub const COM_STMT_CLOSE: u8 = 0x19;
pub const COM_STMT_RESET: u8 = 0x1a;
pub const COM_SET_OPTION: u8 = 0x1b;
pub const COM_STMT_FETCH: u8 = 0x1c;
pub const COM_DAEMON: u8 = 0x1d;
pub const COM_BINLOG_DUMP_GTID: u8 = 0x1e;
pub const COM_RESET_CONNECTION: u8 = 0x1f;
/// MariaDB: execute a prepared statement for many rows at once
/// (with MARIADB_CLIENT_STMT_BULK_OPERATIONS).
pub const COM_STMT_BULK_EXECUTE: u8 = 0xfa;

/// Human-readable command name, for logs and metrics labels.
pub const fn command_name(cmd: u8) -> &'static str {
    match cmd {
        COM_SLEEP => "COM_SLEEP",
        COM_QUIT => "COM_QUIT",
        COM_INIT_DB => "COM_INIT_DB",
        COM_QUERY => "COM_QUERY",
        COM_FIELD_LIST => "COM_FIELD_LIST",
        COM_CREATE_DB => "COM_CREATE_DB",
        COM_DROP_DB => "COM_DROP_DB",
        COM_REFRESH => "COM_REFRESH",
        COM_SHUTDOWN => "COM_SHUTDOWN",
        COM_STATISTICS => "COM_STATISTICS",
        COM_PROCESS_INFO => "COM_PROCESS_INFO",
        COM_CONNECT => "COM_CONNECT",
        COM_PROCESS_KILL => "COM_PROCESS_KILL",
        COM_DEBUG => "COM_DEBUG",
        COM_PING => "COM_PING",
        COM_TIME => "COM_TIME",
        COM_DELAYED_INSERT => "COM_DELAYED_INSERT",
        COM_CHANGE_USER => "COM_CHANGE_USER",
        COM_BINLOG_DUMP => "COM_BINLOG_DUMP",
        COM_TABLE_DUMP => "COM_TABLE_DUMP",
        COM_CONNECT_OUT => "COM_CONNECT_OUT",
        COM_REGISTER_SLAVE => "COM_REGISTER_SLAVE",
        COM_STMT_PREPARE => "COM_STMT_PREPARE",
        COM_STMT_EXECUTE => "COM_STMT_EXECUTE",
        COM_STMT_SEND_LONG_DATA => "COM_STMT_SEND_LONG_DATA",
        COM_STMT_CLOSE => "COM_STMT_CLOSE",
        COM_STMT_RESET => "COM_STMT_RESET",
        COM_SET_OPTION => "COM_SET_OPTION",
        COM_STMT_FETCH => "COM_STMT_FETCH",
        COM_DAEMON => "COM_DAEMON",
        COM_BINLOG_DUMP_GTID => "COM_BINLOG_DUMP_GTID",
        COM_RESET_CONNECTION => "COM_RESET_CONNECTION",
        COM_STMT_BULK_EXECUTE => "COM_STMT_BULK_EXECUTE",
        _ => "COM_UNKNOWN",
    }
}

// ---------------------------------------------------------------------------
// First-byte markers of server response packets.
// ---------------------------------------------------------------------------

/// OK packet header.
pub const OK_HEADER: u8 = 0x00;
/// AuthMoreData header during the connection phase (caching_sha2 etc.).
pub const AUTH_MORE_DATA_HEADER: u8 = 0x01;
/// LOCAL INFILE request header (in place of a column count).
pub const LOCAL_INFILE_HEADER: u8 = 0xFB;
/// EOF packet, DEPRECATE_EOF terminator, or AuthSwitchRequest during login.
pub const EOF_HEADER: u8 = 0xFE;
/// ERR packet header.
pub const ERR_HEADER: u8 = 0xFF;

// ---------------------------------------------------------------------------
// Error codes and SQLSTATEs the proxy sends itself.
// ---------------------------------------------------------------------------

/// Too many connections.
pub const ER_CON_COUNT_ERROR: u16 = 1040;
/// Bad handshake.
pub const ER_HANDSHAKE_ERROR: u16 = 1043;
/// Access denied for user.
pub const ER_ACCESS_DENIED_ERROR: u16 = 1045;
/// Unknown command.
pub const ER_UNKNOWN_COM_ERROR: u16 = 1047;
/// Got a packet bigger than `max_allowed_packet`.
pub const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
/// Client does not support the authentication protocol requested.
pub const ER_NOT_SUPPORTED_AUTH_MODE: u16 = 1251;
/// MySQL 5.7+'s refusal of a TCP login without TLS under
/// `require_secure_transport` (SQLSTATE HY000, the default below).
pub const ER_SECURE_TRANSPORT_REQUIRED: u16 = 3159;

/// MySQL 8.0.24+'s ER_CLIENT_INTERACTION_TIMEOUT (SQLSTATE HY000): sent
/// with sequence id 0 to a client the server disconnects for inactivity,
/// just before it closes the connection. MariaDB has no such error (its
/// 4031 is ER_REFERENCED_TRG_DOES_NOT_EXIST; its idle timeouts close with
/// a bare reset), so this is the one code clients and drivers already map
/// to "disconnected for inactivity" (SQLAlchemy, mysqlnd).
pub const ER_CLIENT_INTERACTION_TIMEOUT: u16 = 4031;

/// The SQLSTATE MySQL pairs with each error code we emit, so clients that
/// branch on SQLSTATE (JDBC, ODBC) classify our errors like the server's.
pub const fn sqlstate_for(code: u16) -> &'static str {
    match code {
        ER_CON_COUNT_ERROR => "08004",
        ER_HANDSHAKE_ERROR => "08S01",
        ER_ACCESS_DENIED_ERROR => "28000",
        ER_UNKNOWN_COM_ERROR => "08S01",
        ER_NET_PACKET_TOO_LARGE => "08S01",
        ER_NOT_SUPPORTED_AUTH_MODE => "08004",
        _ => "HY000",
    }
}

// ---------------------------------------------------------------------------
// Framing and character sets.
// ---------------------------------------------------------------------------

/// Largest payload of one physical packet; a payload of exactly this size
/// means the logical packet continues in the next physical packet.
pub const MAX_PAYLOAD: usize = 0xFF_FFFF;
/// 3-byte little-endian length + 1-byte sequence id.
pub const HEADER_LEN: usize = 4;

/// Collation id of utf8mb4_general_ci (the handshake "charset" byte is a
/// collation id).
pub const UTF8MB4_GENERAL_CI: u8 = 45;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_bits_match_mysql_com_h() {
        assert_eq!(CLIENT_PROTOCOL_41, 0x200);
        assert_eq!(CLIENT_SSL, 0x800);
        assert_eq!(CLIENT_SECURE_CONNECTION, 0x8000);
        assert_eq!(CLIENT_PLUGIN_AUTH, 0x0008_0000);
        assert_eq!(CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, 0x0020_0000);
        assert_eq!(CLIENT_DEPRECATE_EOF, 0x0100_0000);
        assert_eq!(CLIENT_REMEMBER_OPTIONS, 0x8000_0000);
    }

    #[test]
    fn session_key_caps_bits() {
        assert_eq!(SESSION_KEY_CAPS, 0x0187_0582);
        assert_eq!(SESSION_KEY_CAPS & CLIENT_SSL, 0);
        assert_eq!(SESSION_KEY_CAPS & CLIENT_CONNECT_WITH_DB, 0);
    }

    #[test]
    fn sqlstates() {
        assert_eq!(sqlstate_for(ER_CON_COUNT_ERROR), "08004");
        assert_eq!(sqlstate_for(ER_HANDSHAKE_ERROR), "08S01");
        assert_eq!(sqlstate_for(ER_ACCESS_DENIED_ERROR), "28000");
        assert_eq!(sqlstate_for(ER_UNKNOWN_COM_ERROR), "08S01");
        assert_eq!(sqlstate_for(ER_NET_PACKET_TOO_LARGE), "08S01");
        assert_eq!(sqlstate_for(ER_NOT_SUPPORTED_AUTH_MODE), "08004");
        assert_eq!(sqlstate_for(1064), "HY000");
        for code in [1040, 1043, 1045, 1047, 1153, 1251, 1] {
            assert_eq!(sqlstate_for(code).len(), 5);
        }
    }

    #[test]
    fn command_names() {
        assert_eq!(command_name(COM_QUERY), "COM_QUERY");
        assert_eq!(command_name(COM_RESET_CONNECTION), "COM_RESET_CONNECTION");
        assert_eq!(command_name(0xEE), "COM_UNKNOWN");
        assert_eq!(COM_STMT_PREPARE, 0x16);
    }
}

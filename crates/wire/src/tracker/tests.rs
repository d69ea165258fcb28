//! Tests of the response-boundary tracker: hand-built exchanges for every
//! command and reply shape, and replays of the MariaDB 10.11 captures in
//! `crates/wire/src/testdata/`, cut into chunks of many sizes, which must all give
//! the same answers.

use super::*;
use std::io::Read;

// ------------------------------------------------------------------ helpers

/// Frames a logical packet (splitting at 0xFFFFFF) starting at sequence id `seq`.
fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 8);
    let mut seq = seq;
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_PACKET as usize);
        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        seq = seq.wrapping_add(1);
        if n < MAX_PACKET as usize {
            return out;
        }
    }
}

fn ok(status: u16) -> Vec<u8> {
    let s = status.to_le_bytes();
    vec![0x00, 0, 0, s[0], s[1], 0, 0]
}
fn ok_fe(status: u16) -> Vec<u8> {
    let s = status.to_le_bytes();
    vec![0xFE, 0, 0, s[0], s[1], 0, 0]
}
fn eof(status: u16) -> Vec<u8> {
    let s = status.to_le_bytes();
    vec![0xFE, 0, 0, s[0], s[1]]
}
fn err() -> Vec<u8> {
    b"\xff\x7a\x04#42S02Table doesn't exist".to_vec()
}
fn coldef() -> Vec<u8> {
    b"\x03def\x00\x00\x00\x01a\x00\x0c\x3f\x00\x01\x00\x00\x00\x08\x81\x00\x00\x00\x00".to_vec()
}
fn query(sql: &str) -> Vec<u8> {
    let mut p = vec![COM_QUERY];
    p.extend_from_slice(sql.as_bytes());
    frame(0, &p)
}

/// Server packets of a whole response, sequence ids from 1.
fn response(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut seq = 1u8;
    for p in packets {
        out.extend_from_slice(&frame(seq, p));
        seq = seq.wrapping_add(((p.len() / MAX_PACKET as usize) + 1) as u8);
    }
    out
}

/// A text result set with one column and `rows` rows.
fn result_set(deprecate_eof: bool, rows: usize, status: u16) -> Vec<Vec<u8>> {
    let mut v = vec![vec![1u8], coldef()];
    if !deprecate_eof {
        v.push(eof(status & !SERVER_MORE_RESULTS_EXISTS));
    }
    for i in 0..rows {
        v.push(vec![1, b'0' + (i % 10) as u8]);
    }
    v.push(if deprecate_eof {
        ok_fe(status)
    } else {
        eof(status)
    });
    v
}

fn client(t: &mut Tracker, bytes: &[u8]) {
    let r = t.on_client_bytes(bytes).unwrap();
    assert_eq!(
        r,
        ClientChunk {
            forward: bytes.len(),
            stop: None
        }
    );
}

/// Feeds a whole server response in chunks of `step`, asserting the relay keeps reading the
/// server until the very last byte.
fn server_all(t: &mut Tracker, bytes: &[u8], step: usize) {
    for (i, c) in bytes.chunks(step).enumerate() {
        assert_eq!(t.next_read(), Direction::Server, "chunk {i}");
        t.on_server_bytes(c).unwrap();
    }
}

// ------------------------------------------------------------------ hand-built tests

#[test]
fn simple_query_ok_and_result_set_in_both_modes() {
    for dep in [false, true] {
        for step in [1, 3, 7, 1000] {
            let mut t = Tracker::new(dep);
            assert_eq!(t.next_read(), Direction::Client);
            assert!(t.at_command_boundary());
            client(&mut t, &query("INSERT 1"));
            assert_eq!(t.pending_responses(), 1);
            assert!(!t.at_command_boundary());
            server_all(&mut t, &response(&[ok(0x0002)]), step);
            assert!(t.at_command_boundary());
            assert_eq!(t.next_read(), Direction::Client);
            client(&mut t, &query("SELECT"));
            server_all(&mut t, &response(&result_set(dep, 3, 0x0022)), step);
            assert!(t.at_command_boundary());
            assert_eq!(t.last_status(), 0x0022);
        }
    }
}

#[test]
fn pipelined_stmt_close_then_query() {
    for dep in [false, true] {
        let mut t = Tracker::new(dep);
        let mut chunk = frame(0, &[COM_STMT_CLOSE, 1, 0, 0, 0]);
        chunk.extend(frame(0, &[COM_STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0, 0, b'x']));
        chunk.extend(query("SELECT 1"));
        chunk.extend(frame(0, &[COM_PING]));
        client(&mut t, &chunk);
        assert_eq!(t.pending_responses(), 2);
        assert_eq!(t.next_read(), Direction::Server);
        let mut resp = response(&result_set(dep, 1, 2));
        resp.extend(response(&[ok(2)]));
        // Both responses in one chunk, then in tiny chunks.
        let mut t2 = Tracker::new(dep);
        client(&mut t2, &chunk);
        server_all(&mut t, &resp, resp.len());
        server_all(&mut t2, &resp, 2);
        for t in [t, t2] {
            assert_eq!(t.pending_responses(), 0);
            assert!(t.at_command_boundary());
        }
    }
}

#[test]
fn no_response_commands_leave_the_session_at_a_boundary() {
    let mut t = Tracker::new(false);
    client(&mut t, &frame(0, &[COM_STMT_CLOSE, 7, 0, 0, 0]));
    assert!(t.at_command_boundary());
    assert_eq!(t.next_read(), Direction::Client);
    assert!(matches!(
        t.on_server_bytes(&[1]),
        Err(TrackError::UnexpectedServerData)
    ));
}

#[test]
fn quit_mid_chunk_stops_right_before_its_header() {
    let mut t = Tracker::new(false);
    let q = query("SELECT 1");
    let mut chunk = q.clone();
    chunk.extend(frame(0, &[COM_QUIT]));
    chunk.extend(b"trailing garbage that must not be looked at");
    let r = t.on_client_bytes(&chunk).unwrap();
    assert_eq!(
        r,
        ClientChunk {
            forward: q.len(),
            stop: Some(StopReason::Quit)
        }
    );
    assert_eq!(t.stopped(), Some(StopReason::Quit));
    // The query's response can still be relayed.
    assert_eq!(t.pending_responses(), 1);
    assert_eq!(t.next_read(), Direction::Server);
    server_all(&mut t, &response(&[ok(0)]), 3);
    assert!(t.at_command_boundary());
    // Further client bytes are refused.
    assert_eq!(
        t.on_client_bytes(b"xyz").unwrap(),
        ClientChunk {
            forward: 0,
            stop: Some(StopReason::Quit)
        }
    );
}

#[test]
fn quit_whose_header_began_in_an_earlier_chunk() {
    let mut t = Tracker::new(false);
    let quit = frame(0, &[COM_QUIT]);
    client(&mut t, &quit[..2]);
    assert_eq!(t.next_read(), Direction::Client);
    let r = t.on_client_bytes(&quit[2..]).unwrap();
    assert_eq!(r.forward, 0);
    assert_eq!(r.stop, Some(StopReason::Quit));
    // Two header bytes reached the backend: not a clean boundary.
    assert!(!t.at_command_boundary());
    // Header complete in an earlier chunk, payload byte in this one: also dirty.
    let mut t = Tracker::new(false);
    client(&mut t, &quit[..4]);
    let r = t.on_client_bytes(&quit[4..]).unwrap();
    assert_eq!((r.forward, r.stop), (0, Some(StopReason::Quit)));
    assert!(!t.at_command_boundary());
}

#[test]
fn unsupported_commands_stop_the_session() {
    for cmd in [
        COM_SLEEP,
        COM_SHUTDOWN,
        COM_CONNECT,
        COM_TIME,
        COM_DELAYED_INSERT,
        COM_BINLOG_DUMP,
        COM_TABLE_DUMP,
        COM_CONNECT_OUT,
        COM_REGISTER_SLAVE,
        COM_DAEMON,
        COM_BINLOG_DUMP_GTID,
        0x20,
        0xFB,
        0xFF,
    ] {
        let mut t = Tracker::new(true);
        let mut chunk = frame(0, &[COM_PING]);
        let ping_len = chunk.len();
        chunk.extend(frame(0, &[cmd, 1, 2, 3]));
        let r = t.on_client_bytes(&chunk).unwrap();
        assert_eq!(
            r,
            ClientChunk {
                forward: ping_len,
                stop: Some(StopReason::Unsupported { command: cmd })
            },
            "command 0x{cmd:02x}"
        );
        assert_eq!(t.pending_responses(), 1);
    }
}

#[test]
fn change_user_stops_and_says_where_its_header_went() {
    let ping = frame(0, &[COM_PING]);
    let cu = frame(0, &[COM_CHANGE_USER, b'u', 0, 0, 0]);
    // Whole header in the stop chunk, behind a pipelined ping.
    let mut t = Tracker::new(true);
    let mut chunk = ping.clone();
    chunk.extend_from_slice(&cu);
    let r = t.on_client_bytes(&chunk).unwrap();
    assert_eq!(
        (r.forward, r.stop),
        (ping.len(), Some(StopReason::ChangeUser))
    );
    let h = t.stopped_header().unwrap();
    assert_eq!((h.header, h.in_chunk), ([5, 0, 0, 0], 4));
    // The header split across reads: its first bytes went out with the
    // previous chunk; the stop chunk holds the rest of it, then the payload.
    for split in 1..=4 {
        let mut t = Tracker::new(true);
        let r = t.on_client_bytes(&cu[..split]).unwrap();
        assert_eq!((r.forward, r.stop), (split, None));
        let r = t.on_client_bytes(&cu[split..]).unwrap();
        assert_eq!((r.forward, r.stop), (0, Some(StopReason::ChangeUser)));
        let h = t.stopped_header().unwrap();
        assert_eq!(
            (h.header, h.in_chunk),
            ([5, 0, 0, 0], 4 - split),
            "split {split}"
        );
        assert!(!t.at_command_boundary(), "header bytes were forwarded");
    }
}

#[test]
fn stmt_bulk_execute_answers_like_stmt_execute() {
    for dep in [false, true] {
        let mut t = Tracker::new(dep);
        // COM_STMT_BULK_EXECUTE: stmt id, flags, then the parameter rows.
        let bulk = frame(0, &[COM_STMT_BULK_EXECUTE, 1, 0, 0, 0, 0x80, 0, 1, 0, 0]);
        client(&mut t, &bulk);
        assert_eq!(t.pending_responses(), 1);
        server_all(&mut t, &response(&[ok(0x0002)]), 3);
        assert!(t.at_command_boundary());
        // INSERT ... RETURNING answers a bulk execute with a result set.
        client(&mut t, &bulk);
        server_all(&mut t, &response(&result_set(dep, 4, 0x0002)), 5);
        assert!(t.at_command_boundary());
    }
}

/// With MARIADB_CLIENT_CACHE_METADATA, bytes as MariaDB 10.11 sends them for
/// `SELECT 1 AS a, ? AS b` executed twice: the first execute carries the
/// definitions (column count `02 01`), the second omits them (`02 00`).
#[test]
fn cache_metadata_byte_decides_whether_definitions_follow() {
    let row = b"\x00\x00\x01\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00".to_vec();
    for dep in [false, true] {
        for step in [1, 2, 5, 1000] {
            let end = if dep { ok_fe(0x0002) } else { eof(0x0002) };
            let mut t = Tracker::new(dep);
            t.set_cache_metadata(true);
            let exec = frame(0, &[COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0]);
            client(&mut t, &exec);
            let mut first = vec![vec![2u8, 1], coldef(), coldef()];
            if !dep {
                first.push(eof(0x0002));
            }
            first.extend([row.clone(), end.clone()]);
            server_all(&mut t, &response(&first), step);
            assert!(t.at_command_boundary(), "dep {dep} step {step}");
            client(&mut t, &exec);
            let mut second = vec![vec![2u8, 0]];
            if !dep {
                second.push(eof(0x0002));
            }
            second.extend([row.clone(), end.clone()]);
            server_all(&mut t, &response(&second), step);
            assert!(t.at_command_boundary(), "dep {dep} step {step}");
            // Text results carry the byte too, always 1.
            client(&mut t, &query("SELECT 1"));
            let mut text = result_set(dep, 2, 0x0002);
            text[0] = vec![1, 1];
            server_all(&mut t, &response(&text), step);
            assert!(t.at_command_boundary(), "dep {dep} step {step}");
        }
    }
}

#[test]
fn without_cache_metadata_a_zero_after_the_count_is_not_read() {
    // `01 00` is only a column count of 1 (a lenenc int and a stray byte)
    // when the capability was not negotiated: one definition follows.
    let mut t = Tracker::new(true);
    client(&mut t, &query("SELECT 1"));
    let resp = response(&[vec![1, 0], coldef(), vec![1, b'1'], ok_fe(2)]);
    server_all(&mut t, &resp, 4);
    assert!(t.at_command_boundary());
}

#[test]
fn single_packet_commands() {
    for cmd in [
        COM_INIT_DB,
        COM_CREATE_DB,
        COM_DROP_DB,
        COM_REFRESH,
        COM_STATISTICS,
        COM_PROCESS_KILL,
        COM_DEBUG,
        COM_PING,
        COM_STMT_RESET,
        COM_SET_OPTION,
        COM_RESET_CONNECTION,
    ] {
        for reply in [ok(2), eof(2), err(), b"Uptime: 5  Threads: 1".to_vec()] {
            let mut t = Tracker::new(false);
            client(&mut t, &frame(0, &[cmd, 0, 0]));
            assert_eq!(t.next_read(), Direction::Server);
            server_all(&mut t, &response(&[reply]), 1);
            assert!(t.at_command_boundary(), "command 0x{cmd:02x}");
        }
    }
}

#[test]
fn in_transaction_follows_status_flags() {
    for dep in [false, true] {
        let mut t = Tracker::new(dep);
        assert!(!t.in_transaction());
        client(&mut t, &query("BEGIN"));
        server_all(&mut t, &response(&[ok(0x0003)]), 100);
        assert!(t.in_transaction());
        assert_eq!(t.last_status(), 0x0003);
        // A result-set terminator updates the flags too.
        client(&mut t, &query("SELECT"));
        server_all(&mut t, &response(&result_set(dep, 2, 0x0003)), 100);
        assert!(t.in_transaction());
        assert!(t.at_command_boundary());
        client(&mut t, &query("COMMIT"));
        server_all(&mut t, &response(&[ok(0x0002)]), 100);
        assert!(!t.in_transaction());
        // OK with multi-byte lenenc affected rows / insert id.
        client(&mut t, &query("INSERT"));
        let mut okp = vec![0x00, 0xFC, 0x10, 0x27, 0xFD, 1, 2, 3, 0x01, 0x00, 0, 0];
        server_all(&mut t, &response(&[okp.clone()]), 1);
        assert!(t.in_transaction());
        okp[8] = 0x02;
        client(&mut t, &query("ROLLBACK"));
        server_all(&mut t, &response(&[okp]), 1);
        assert!(!t.in_transaction());
        t.set_last_status(1);
        assert!(t.in_transaction());
        t.reset();
        assert!(!t.in_transaction());
    }
}

#[test]
fn fe_first_row_of_max_length_is_not_a_terminator() {
    for dep in [false, true] {
        // A text row whose first column is >= 16 MiB starts with the 8-byte lenenc prefix 0xFE.
        let mut row = vec![b'x'; MAX_PACKET as usize + 100];
        row[0] = 0xFE;
        let value_len = (row.len() - 9) as u64;
        row[1..9].copy_from_slice(&value_len.to_le_bytes());
        let mut packets = vec![vec![1u8], coldef()];
        if !dep {
            packets.push(eof(2));
        }
        packets.push(row);
        packets.push(if dep { ok_fe(2) } else { eof(2) });
        let resp = response(&packets);
        for step in [16384, 4096 + 3] {
            let mut t = Tracker::new(dep);
            client(&mut t, &query("SELECT REPEAT('x', 17000000)"));
            server_all(&mut t, &resp, step);
            assert!(t.at_command_boundary());
        }
        // A row of exactly 0xFFFFFF bytes: a full packet plus an empty continuation.
        let mut row = vec![b'y'; MAX_PACKET as usize];
        row[0] = 0xFE;
        let mut packets = vec![vec![1u8], coldef()];
        if !dep {
            packets.push(eof(2));
        }
        packets.push(row);
        packets.push(if dep { ok_fe(2) } else { eof(2) });
        let resp = response(&packets);
        let mut t = Tracker::new(dep);
        client(&mut t, &query("SELECT"));
        server_all(&mut t, &resp, 16384);
        assert!(t.at_command_boundary());
    }
}

#[test]
fn multi_packet_client_command_is_read_to_the_end() {
    // Continuation packets start with arbitrary bytes, including COM_QUIT.
    let mut payload = vec![b'a'; MAX_PACKET as usize + 10];
    payload[0] = COM_QUERY;
    payload[MAX_PACKET as usize] = COM_QUIT;
    let bytes = frame(0, &payload);
    let mut t = Tracker::new(false);
    for c in bytes.chunks(16384) {
        assert_eq!(t.next_read(), Direction::Client);
        client(&mut t, c);
    }
    assert_eq!(t.next_read(), Direction::Server);
    assert_eq!(t.pending_responses(), 1);
    // Exactly 0xFFFFFF bytes: full packet + empty packet; the relay must wait for the latter.
    let mut payload = vec![b'b'; MAX_PACKET as usize];
    payload[0] = COM_QUERY;
    let bytes = frame(0, &payload);
    assert_eq!(bytes.len(), MAX_PACKET as usize + 8);
    let mut t = Tracker::new(false);
    client(&mut t, &bytes[..bytes.len() - 4]);
    assert_eq!(t.next_read(), Direction::Client);
    assert_eq!(t.pending_responses(), 0);
    client(&mut t, &bytes[bytes.len() - 4..]);
    assert_eq!(t.next_read(), Direction::Server);
    server_all(&mut t, &response(&[ok(2)]), 5);
    assert!(t.at_command_boundary());
}

#[test]
fn multi_results_and_errors() {
    for dep in [false, true] {
        let mut t = Tracker::new(dep);
        client(&mut t, &query("SELECT 1; SELECT 2,3; DO 1"));
        let mut packets = result_set(dep, 1, 0x000A);
        packets.extend(result_set(dep, 2, 0x000A));
        packets.push(ok(0x0002));
        server_all(&mut t, &response(&packets), 1);
        assert!(t.at_command_boundary());
        // ERR after a first result set ends the response.
        client(&mut t, &query("SELECT 1; SELECT * FROM nope; SELECT 2"));
        let mut packets = result_set(dep, 1, 0x000A);
        packets.push(err());
        server_all(&mut t, &response(&packets), 2);
        assert!(t.at_command_boundary());
        // ERR in the middle of the rows ends it too.
        client(&mut t, &query("SELECT"));
        let mut packets = result_set(dep, 3, 2);
        packets.pop();
        packets.push(err());
        server_all(&mut t, &response(&packets), 2);
        assert!(t.at_command_boundary());
        // OK with MORE_RESULTS_EXISTS then OK (e.g. "DO 1; DO 2").
        client(&mut t, &query("DO 1; DO 2"));
        server_all(&mut t, &response(&[ok(0x000A), ok(0x0002)]), 3);
        assert!(t.at_command_boundary());
    }
}

#[test]
fn local_infile_round_trip() {
    for dep in [false, true] {
        let mut t = Tracker::new(dep);
        client(&mut t, &query("LOAD DATA LOCAL INFILE 'f' INTO TABLE t"));
        server_all(&mut t, &response(&[b"\xfbf".to_vec()]), 1);
        assert_eq!(t.next_read(), Direction::Client);
        assert_eq!(t.pending_responses(), 1);
        assert!(!t.at_command_boundary());
        // Server bytes now are a protocol violation.
        let mut bad = Tracker::new(dep);
        client(&mut bad, &query("LOAD DATA"));
        bad.on_server_bytes(&frame(1, b"\xfbf")).unwrap();
        assert!(bad.on_server_bytes(&frame(4, &ok(2))).is_err());
        // File packets, one of them 0xFFFFFF bytes (followed by an empty continuation that
        // does NOT end the file), then the empty packet that does.
        let mut data = frame(2, b"line1\nline2\n");
        data.extend(frame(3, &vec![b'z'; MAX_PACKET as usize]));
        assert_eq!(t.next_read(), Direction::Client);
        for c in data.chunks(16384) {
            client(&mut t, c);
            assert_eq!(t.next_read(), Direction::Client);
        }
        let end = frame(6, b"");
        client(&mut t, &end[..3]);
        assert_eq!(t.next_read(), Direction::Client);
        client(&mut t, &end[3..]);
        assert_eq!(t.next_read(), Direction::Server);
        // MariaDB progress report, then the OK.
        let progress = b"\xff\xff\xff\x01\x02\x02\x00\x00\x00\x0fStage".to_vec();
        let mut resp = frame(7, &progress);
        resp.extend(frame(8, &ok(2)));
        server_all(&mut t, &resp, 1);
        assert!(t.at_command_boundary());
        // An empty file right away, answered by ERR.
        client(&mut t, &query("LOAD DATA"));
        t.on_server_bytes(&frame(1, b"\xfbmissing")).unwrap();
        client(&mut t, &frame(2, b""));
        server_all(&mut t, &frame(3, &err()), 1);
        assert!(t.at_command_boundary());
    }
}

#[test]
fn prepare_responses() {
    // (params, cols)
    for (params, cols) in [(0u16, 0u16), (1, 0), (0, 1), (2, 3), (1, 1)] {
        for dep in [false, true] {
            let mut okp = vec![0x00, 1, 0, 0, 0];
            okp.extend(cols.to_le_bytes());
            okp.extend(params.to_le_bytes());
            okp.extend([0, 0, 0]);
            let mut packets = vec![okp];
            for n in [params, cols] {
                for _ in 0..n {
                    packets.push(coldef());
                }
                if n > 0 && !dep {
                    packets.push(eof(2));
                }
            }
            let mut t = Tracker::new(dep);
            let mut p = vec![COM_STMT_PREPARE];
            p.extend(b"SELECT ?");
            client(&mut t, &frame(0, &p));
            server_all(&mut t, &response(&packets), 1);
            assert!(
                t.at_command_boundary(),
                "params={params} cols={cols} dep={dep}"
            );
        }
    }
    let mut t = Tracker::new(false);
    client(&mut t, &frame(0, b"\x16SELECT FROM"));
    server_all(&mut t, &response(&[err()]), 1);
    assert!(t.at_command_boundary());
    // A missing EOF is reported, not silently mis-tracked.
    let mut t = Tracker::new(false);
    client(&mut t, &frame(0, b"\x16SELECT ?"));
    let okp = vec![0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    let r = t.on_server_bytes(&response(&[okp, coldef(), coldef()]));
    assert!(matches!(r, Err(TrackError::MalformedResponse { .. })));
    assert!(matches!(t.on_server_bytes(b"x"), Err(TrackError::Poisoned)));
    assert!(!t.at_command_boundary());
    t.reset();
    assert!(t.at_command_boundary());
    client(&mut t, &frame(0, &[COM_PING]));
    server_all(&mut t, &response(&[ok(2)]), 1);
    assert!(t.at_command_boundary());
}

fn execute(cursor: u8) -> Vec<u8> {
    frame(0, &[COM_STMT_EXECUTE, 1, 0, 0, 0, cursor, 1, 0, 0, 0])
}

#[test]
fn cursor_without_deprecate_eof() {
    // Cursor opened: the definitions' EOF carries CURSOR_EXISTS, nothing follows.
    let mut t = Tracker::new(false);
    client(&mut t, &execute(1));
    server_all(&mut t, &response(&[vec![1], coldef(), eof(0x0062)]), 1);
    assert!(t.at_command_boundary());
    // COM_STMT_FETCH: rows then EOF.
    client(&mut t, &frame(0, &[COM_STMT_FETCH, 1, 0, 0, 0, 2, 0, 0, 0]));
    server_all(
        &mut t,
        &response(&[vec![0, 0, 1], vec![0, 0, 2], eof(0x0042)]),
        1,
    );
    assert!(t.at_command_boundary());
    client(&mut t, &frame(0, &[COM_STMT_FETCH, 1, 0, 0, 0, 2, 0, 0, 0]));
    server_all(&mut t, &response(&[err()]), 1);
    assert!(t.at_command_boundary());
    // No cursor requested: a CURSOR_EXISTS flag (leaked from a procedure) does not end it.
    let mut t = Tracker::new(false);
    client(&mut t, &execute(0));
    let p = [vec![1], coldef(), eof(0x0042), vec![0, 0, 1], eof(0x0042)];
    server_all(&mut t, &response(&p), 1);
    assert!(t.at_command_boundary());
    // Cursor requested for a CALL whose procedure uses a cursor: CURSOR_EXISTS comes with
    // MORE_RESULTS_EXISTS and rows follow (as MariaDB 10.11 does).
    let mut t = Tracker::new(false);
    client(&mut t, &execute(1));
    let p = [
        vec![1],
        coldef(),
        eof(0x004A),
        vec![0, 0, 1],
        eof(0x004A),
        ok(0x0002),
    ];
    server_all(&mut t, &response(&p), 1);
    assert!(t.at_command_boundary());
    // Cursor requested but not opened (status without CURSOR_EXISTS): rows follow.
    let mut t = Tracker::new(false);
    client(&mut t, &execute(1));
    let p = [vec![1], coldef(), eof(0x0002), vec![0, 0, 1], eof(0x0002)];
    server_all(&mut t, &response(&p), 1);
    assert!(t.at_command_boundary());
}

#[test]
fn cursor_with_deprecate_eof() {
    // MariaDB: definitions, then an OK with 0xFE header carrying CURSOR_EXISTS.
    let mut t = Tracker::new(true);
    client(&mut t, &execute(1));
    server_all(&mut t, &response(&[vec![1], coldef(), ok_fe(0x0062)]), 1);
    assert!(t.at_command_boundary());
    client(&mut t, &frame(0, &[COM_STMT_FETCH, 1, 0, 0, 0, 2, 0, 0, 0]));
    server_all(&mut t, &response(&[vec![0, 0, 1], ok_fe(0x0082)]), 1);
    assert!(t.at_command_boundary());
}

#[test]
fn field_list() {
    for dep in [false, true] {
        let mut t = Tracker::new(dep);
        client(&mut t, &frame(0, b"\x04t\x00"));
        let term = if dep { ok_fe(2) } else { eof(2) };
        server_all(&mut t, &response(&[coldef(), coldef(), term]), 1);
        assert!(t.at_command_boundary());
        client(&mut t, &frame(0, b"\x04nope\x00"));
        server_all(&mut t, &response(&[err()]), 1);
        assert!(t.at_command_boundary());
    }
}

#[test]
fn client_protocol_violations() {
    let mut t = Tracker::new(false);
    assert!(matches!(
        t.on_client_bytes(&frame(3, &[COM_PING])),
        Err(TrackError::BadCommandSequence { seq: 3 })
    ));
    assert!(matches!(t.on_client_bytes(&[]), Err(TrackError::Poisoned)));
    let mut t = Tracker::new(false);
    assert!(matches!(
        t.on_client_bytes(&frame(0, &[])),
        Err(TrackError::EmptyCommand)
    ));
    let mut t = Tracker::new(false);
    client(&mut t, &query("SELECT"));
    // 0xFB first: a LOCAL INFILE request, never a column count (0xFB is a NULL lenenc).
    t.on_server_bytes(&response(&[vec![0xFB, b'f']])).unwrap();
    assert_eq!(t.next_read(), Direction::Client);
    let mut t = Tracker::new(false);
    client(&mut t, &query("SELECT"));
    assert!(matches!(
        t.on_server_bytes(&response(&[vec![0xFC, 0x00, 0x00]])),
        Err(TrackError::MalformedResponse { .. })
    ));
}

#[test]
fn too_many_pending_is_an_error_not_unbounded_growth() {
    let mut t = Tracker::new(false);
    let ping = frame(0, &[COM_PING]);
    let chunk: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * MAX_PENDING)
        .collect();
    client(&mut t, &chunk);
    assert_eq!(t.pending_responses(), MAX_PENDING);
    assert!(matches!(
        t.on_client_bytes(&ping),
        Err(TrackError::TooManyPending { .. })
    ));
}

// ------------------------------------------------------------------ fuzz-ish

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut buf = vec![0u8; 4096];
    for round in 0..3000 {
        let mut t = Tracker::new(round % 2 == 0);
        for _ in 0..20 {
            let n = rng.below(buf.len() as u64) as usize;
            for b in &mut buf[..n] {
                *b = rng.next() as u8;
            }
            let r = if rng.below(2) == 0 {
                t.on_client_bytes(&buf[..n]).map(|c| {
                    assert!(c.forward <= n);
                })
            } else {
                t.on_server_bytes(&buf[..n])
            };
            let _ = (
                t.next_read(),
                t.at_command_boundary(),
                t.pending_responses(),
            );
            if r.is_err() && rng.below(2) == 0 {
                t.reset();
            }
        }
    }
}

/// Random but well-framed packets with interesting first bytes, always fed to the side the
/// tracker asks for, so that deep states (definitions, rows, infile, prepare) are reached.
#[test]
fn random_framed_packets_never_panic() {
    let interesting = [
        0x00, 0x01, 0x03, 0x04, 0x09, 0x0e, 0x16, 0x17, 0x18, 0x19, 0x1c, 0xFB, 0xFC, 0xFD, 0xFE,
        0xFF, 0x02, 0x05,
    ];
    let mut rng = XorShift(12345);
    let mut packet = Vec::with_capacity(64);
    for round in 0..5000 {
        let mut t = Tracker::new(round % 3 == 0);
        let mut seqs = [0u8; 2];
        for _ in 0..60 {
            let dir = t.next_read();
            let side = (dir == Direction::Server) as usize;
            let len = rng.below(24) as usize;
            packet.clear();
            let seq = if rng.below(4) == 0 {
                rng.next() as u8
            } else if side == 0 && t.pending_responses() == 0 {
                0
            } else {
                seqs[side]
            };
            seqs[side] = seq.wrapping_add(1);
            packet.extend_from_slice(&(len as u32).to_le_bytes()[..3]);
            packet.push(seq);
            for i in 0..len {
                let b = if i == 0 || rng.below(3) == 0 {
                    interesting[rng.below(interesting.len() as u64) as usize]
                } else {
                    rng.below(4) as u8
                };
                packet.push(b);
            }
            let split = rng.below(packet.len() as u64 + 1) as usize;
            for part in [&packet[..split], &packet[split..]] {
                let r = match dir {
                    Direction::Client => t.on_client_bytes(part).map(|_| ()),
                    Direction::Server => t.on_server_bytes(part),
                };
                if r.is_err() {
                    t.reset();
                    seqs = [0, 0];
                    break;
                }
            }
            let _ = (t.at_command_boundary(), t.in_transaction());
        }
    }
}

// ------------------------------------------------------------------ real captures

/// A capture made by `scripts/capture-mysql-stream.py` against MariaDB 10.11.
/// Format: b"RGCAP1\0\0", u32 LE capability flags in effect, u32 LE 0, then records of
/// (u8 direction 0 = client->server / 1 = server->client, u32 LE length, bytes).
struct Capture {
    name: &'static str,
    caps: u32,
    records: Vec<(Direction, Vec<u8>)>,
}

fn parse_capture(name: &'static str, raw: &[u8]) -> Capture {
    assert_eq!(&raw[..8], b"RGCAP1\0\0", "{name}: bad magic");
    let caps = u32::from_le_bytes(raw[8..12].try_into().unwrap());
    let mut records = Vec::new();
    let mut i = 16;
    while i < raw.len() {
        let dir = match raw[i] {
            0 => Direction::Client,
            1 => Direction::Server,
            d => panic!("{name}: bad direction {d}"),
        };
        let len = u32::from_le_bytes(raw[i + 1..i + 5].try_into().unwrap()) as usize;
        records.push((dir, raw[i + 5..i + 5 + len].to_vec()));
        i += 5 + len;
    }
    Capture {
        name,
        caps,
        records,
    }
}

fn gunzip(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(raw)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn capture(name: &str) -> Capture {
    match name {
        "raw-eof" => parse_capture("raw-eof", include_bytes!("../testdata/raw-eof.bin")),
        "raw-deprecate-eof" => parse_capture(
            "raw-deprecate-eof",
            include_bytes!("../testdata/raw-deprecate-eof.bin"),
        ),
        "cli" => parse_capture("cli", include_bytes!("../testdata/cli.bin")),
        "big-eof" => parse_capture(
            "big-eof",
            &gunzip(include_bytes!("../testdata/big-eof.bin.gz")),
        ),
        "big-deprecate-eof" => parse_capture(
            "big-deprecate-eof",
            &gunzip(include_bytes!("../testdata/big-deprecate-eof.bin.gz")),
        ),
        _ => unreachable!(),
    }
}

/// State after each run of same-direction bytes: (pending, last_status, boundary, next).
type Trace = Vec<(usize, u16, bool, Direction)>;

/// Replays a capture. `coalesce`: join consecutive same-direction records (the relay may
/// read several of them at once) before re-chunking; `split` gives the next chunk size.
fn replay(cap: &Capture, coalesce: bool, split: &mut dyn FnMut() -> usize) -> Trace {
    let deprecate_eof = cap.caps & CLIENT_DEPRECATE_EOF != 0;
    let mut runs: Vec<(Direction, Vec<u8>)> = Vec::new();
    for (d, data) in &cap.records {
        match runs.last_mut() {
            Some((ld, ldata)) if coalesce && ld == d => ldata.extend_from_slice(data),
            _ => runs.push((*d, data.clone())),
        }
    }
    let mut t = Tracker::new(deprecate_eof);
    let mut trace = Trace::new();
    let mut quit = false;
    let mut saw_transaction = false;
    let mut pipelined = 0usize;
    for (i, (dir, data)) in runs.iter().enumerate() {
        assert!(!quit, "{}: data after COM_QUIT", cap.name);
        let mut off = 0;
        while off < data.len() {
            let n = split().clamp(1, data.len() - off);
            let sub = &data[off..off + n];
            let next = t.next_read();
            if next != *dir {
                // Only allowed for a pipelining client: complete commands are pending and
                // the relay may read their responses before the client's further commands
                // (the server needs nothing more from the client to answer them).
                assert!(
                    *dir == Direction::Client
                        && t.pending_responses() > 0
                        && !t.client.mid_packet(),
                    "{}: run {i} at offset {off} of {}: tracker wants {next:?} (pending {})",
                    cap.name,
                    data.len(),
                    t.pending_responses()
                );
                pipelined += 1;
            }
            match dir {
                Direction::Client => {
                    let r = t.on_client_bytes(sub).unwrap();
                    if let Some(stop) = r.stop {
                        assert_eq!(stop, StopReason::Quit, "{}", cap.name);
                        // The QUIT is the last 5 bytes the client ever sent.
                        let q = data.len() - 5;
                        assert_eq!(&data[q..], &[1, 0, 0, 0, COM_QUIT]);
                        assert_eq!(i, runs.len() - 1, "{}", cap.name);
                        if q >= off {
                            assert_eq!(r.forward, q - off);
                            assert!(t.at_command_boundary());
                        } else {
                            assert_eq!(r.forward, 0);
                            assert!(!t.at_command_boundary());
                        }
                        quit = true;
                        break;
                    }
                    assert_eq!(r.forward, n);
                }
                Direction::Server => t
                    .on_server_bytes(sub)
                    .unwrap_or_else(|e| panic!("{}: run {i}: {e}", cap.name)),
            }
            saw_transaction |= t.in_transaction();
            off += n;
        }
        if quit {
            // Whether the QUIT's header straddled a chunk boundary depends on the split.
            break;
        }
        trace.push((
            t.pending_responses(),
            t.last_status(),
            t.at_command_boundary(),
            t.next_read(),
        ));
    }
    assert!(quit, "{}: capture should end with COM_QUIT", cap.name);
    // Only the two pipelined writes of the raw-client scenario (3 commands) may cause this.
    assert!(pipelined <= 3, "{}: {pipelined} pipelined splits", cap.name);
    assert_eq!(t.pending_responses(), 0);
    if !cap.name.starts_with("big") {
        assert!(saw_transaction, "{}: BEGIN was not tracked", cap.name);
        assert!(!t.in_transaction());
    }
    trace
}

fn replay_all_splits(name: &str, small_splits: bool) {
    let cap = capture(name);
    assert!(cap.records.len() > 10);
    for coalesce in [false, true] {
        let reference = replay(&cap, coalesce, &mut || usize::MAX);
        let mut sizes: Vec<usize> = vec![4096, 16384, 65536];
        if small_splits {
            sizes.extend([1, 2, 3, 4, 5, 7, 13]);
        } else {
            sizes.extend([7, 1021]);
        }
        for size in sizes {
            let trace = replay(&cap, coalesce, &mut || size);
            assert_eq!(trace, reference, "{name}: split {size}");
        }
        for seed in 1..=3u64 {
            let mut rng = XorShift(seed * 0x2545_F491_4F6C_DD1D);
            let max = if small_splits { 64 } else { 40_000 };
            let trace = replay(&cap, coalesce, &mut || 1 + rng.below(max) as usize);
            assert_eq!(trace, reference, "{name}: random split seed {seed}");
            let trace = replay(&cap, coalesce, &mut || 1 + rng.below(20_000) as usize);
            assert_eq!(trace, reference, "{name}: random split seed {seed}");
        }
    }
}

#[test]
fn capture_raw_client_legacy_eof() {
    let cap = capture("raw-eof");
    assert_eq!(cap.caps & CLIENT_DEPRECATE_EOF, 0);
    replay_all_splits("raw-eof", true);
}

#[test]
fn capture_raw_client_deprecate_eof() {
    let cap = capture("raw-deprecate-eof");
    assert_ne!(cap.caps & CLIENT_DEPRECATE_EOF, 0);
    replay_all_splits("raw-deprecate-eof", true);
}

#[test]
fn capture_mariadb_cli() {
    let cap = capture("cli");
    assert_eq!(cap.caps & CLIENT_DEPRECATE_EOF, 0);
    replay_all_splits("cli", true);
}

#[test]
fn capture_big_packets_legacy_eof() {
    replay_all_splits("big-eof", false);
}

#[test]
fn capture_big_packets_deprecate_eof() {
    let cap = capture("big-deprecate-eof");
    assert_ne!(cap.caps & CLIENT_DEPRECATE_EOF, 0);
    replay_all_splits("big-deprecate-eof", false);
}

/// The real captures contain what they are meant to cover.
#[test]
fn captures_cover_the_protocol_features() {
    let cmds = |cap: &Capture| {
        let mut seen = [false; 256];
        for (d, data) in &cap.records {
            // Records of small captures start at packet boundaries for commands.
            if *d == Direction::Client && data.len() > 4 && data[3] == 0 {
                seen[data[4] as usize] = true;
            }
        }
        seen
    };
    for name in ["raw-eof", "raw-deprecate-eof"] {
        let seen = cmds(&capture(name));
        for c in [
            COM_QUERY,
            COM_INIT_DB,
            COM_PING,
            COM_STATISTICS,
            COM_FIELD_LIST,
            COM_STMT_PREPARE,
            COM_STMT_EXECUTE,
            COM_STMT_FETCH,
            COM_STMT_CLOSE,
            COM_STMT_SEND_LONG_DATA,
            COM_STMT_RESET,
            COM_PROCESS_INFO,
            COM_SET_OPTION,
            COM_RESET_CONNECTION,
            COM_QUIT,
        ] {
            assert!(seen[c as usize], "{name}: no command 0x{c:02x}");
        }
    }
    // The CLI capture holds a MariaDB progress report during LOAD DATA LOCAL INFILE.
    let cli = capture("cli");
    let all: Vec<u8> = cli
        .records
        .iter()
        .filter(|(d, _)| *d == Direction::Server)
        .flat_map(|(_, b)| b.iter().copied())
        .collect();
    assert!(all.windows(4).any(|w| w == [0xFF, 0xFF, 0xFF, 0x01]));
}

#[test]
fn client_packet_over_the_limit_is_refused_at_its_header() {
    let mut t = Tracker::new(false);
    t.set_max_client_packet(1000);
    let mut small = vec![5, 0, 0, 0, 0x03];
    small.extend_from_slice(b"SELE");
    assert_eq!(
        t.on_client_bytes(&small).map(|c| c.forward).ok(),
        Some(small.len())
    );
    let mut t = Tracker::new(false);
    t.set_max_client_packet(1000);
    let header = [0xe9, 0x03, 0, 0]; // 1001 bytes
    assert!(matches!(
        t.on_client_bytes(&header),
        Err(TrackError::PacketTooLarge {
            len: 1001,
            max: 1000
        })
    ));
}

#[test]
fn an_unsolicited_err_at_a_command_boundary_is_accepted_whole() {
    let t = Tracker::new(false);
    // MySQL 8's wait_timeout ERR (seq 0) and MariaDB's KILL ERR (seq 1).
    for seq in [0, 1] {
        let mut p = vec![0xFF, 0x87, 0x07, b'#'];
        p.extend_from_slice(b"70100Connection was killed");
        let pkt = frame(seq, &p);
        for cut in 0..pkt.len() {
            assert_eq!(
                t.unsolicited_server_bytes(&pkt[..cut]).ok(),
                Some(Unsolicited::Partial),
                "cut at {cut}"
            );
        }
        assert_eq!(
            t.unsolicited_server_bytes(&pkt).ok(),
            Some(Unsolicited::Err { len: pkt.len() })
        );
        let mut more = pkt.clone();
        more.push(0);
        assert!(t.unsolicited_server_bytes(&more).is_err());
    }
    // The tracker itself is untouched: still at a boundary.
    assert!(t.at_command_boundary());
}

#[test]
fn anything_but_an_err_at_a_command_boundary_is_refused() {
    let t = Tracker::new(false);
    for bytes in [
        frame(0, &ok(0)),                    // an OK nobody asked for
        frame(0, &[0xFF, 0x01]),             // too short to be an ERR
        frame(0, &[0xFF, 0xFF, 0xFF, 0x01]), // a progress report
        vec![0x00, 0x20, 0x00, 0x00, 0xFF],  // an 8 KiB "ERR"
    ] {
        assert!(
            matches!(
                t.unsolicited_server_bytes(&bytes),
                Err(TrackError::UnsolicitedServerData { .. })
            ),
            "{bytes:?}"
        );
    }
    // While a response is owed the bytes are a response, not unsolicited.
    let mut t = Tracker::new(false);
    client(&mut t, &query("select 1"));
    assert!(t.unsolicited_server_bytes(&frame(1, &err())).is_err());
}

#[test]
fn capture_records_each_command_with_the_end_of_its_answer() {
    let mut t = Tracker::new(false);
    t.capture_commands(16);
    let mut q = vec![COM_QUERY];
    q.extend_from_slice(b"INSERT x");
    let bytes = frame(0, &q);
    // The command arrives cut in two.
    t.on_client_bytes(&bytes[..6]).unwrap();
    t.on_client_bytes(&bytes[6..]).unwrap();
    // OK: affected 1, insert id 300 (0xFC 2-byte lenenc), autocommit, 2 warnings.
    let ok = frame(1, &[0x00, 1, 0xFC, 0x2C, 0x01, 0x02, 0x00, 0x02, 0x00]);
    assert_eq!(t.take_completed(), None);
    t.on_server_bytes(&ok).unwrap();
    let done = t.take_completed().unwrap();
    assert_eq!(done.command, COM_QUERY);
    assert_eq!(done.text.as_deref(), Some(&b"INSERT x"[..]));
    assert_eq!(
        done.ok,
        Some(OkCounts {
            affected_rows: 1,
            last_insert_id: 300
        })
    );
    assert_eq!(done.warnings, 2);
    assert_eq!(done.status, SERVER_STATUS_AUTOCOMMIT);
    assert!(!done.err);
    // Longer than the limit: no text. An ERR answer is marked.
    let mut long = vec![COM_QUERY];
    long.extend_from_slice(&[b'x'; 40]);
    t.on_client_bytes(&frame(0, &long)).unwrap();
    t.on_server_bytes(&frame(
        1,
        &[0xFF, 0x48, 0x04, b'#', b'4', b'2', b'0', b'0', b'0', b'e'],
    ))
    .unwrap();
    let done = t.take_completed().unwrap();
    assert_eq!(done.text, None);
    assert!(done.err);
    // A command without an answer is recorded at once.
    t.on_client_bytes(&frame(0, &[COM_STMT_CLOSE, 1, 0, 0, 0]))
        .unwrap();
    assert_eq!(t.take_completed().unwrap().command, COM_STMT_CLOSE);
}

#[test]
fn statement_commands_stop_when_asked_and_one_passes_after_a_resume() {
    let ping = frame(0, &[COM_PING]);
    let exec = frame(0, &[COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0]);
    let close = frame(0, &[COM_STMT_CLOSE, 1, 0, 0, 0]);
    // Without stop_at_statements they pass as before.
    let mut t = Tracker::new(true);
    let r = t.on_client_bytes(&exec).unwrap();
    assert_eq!((r.forward, r.stop), (exec.len(), None));

    let mut t = Tracker::new(true);
    t.stop_at_statements();
    let mut chunk = ping.clone();
    chunk.extend_from_slice(&exec);
    chunk.extend_from_slice(&close);
    let r = t.on_client_bytes(&chunk).unwrap();
    assert_eq!(
        (r.forward, r.stop),
        (ping.len(), Some(StopReason::Statement))
    );
    server_all(&mut t, &response(&[ok(SERVER_STATUS_AUTOCOMMIT)]), 64);
    assert!(t.at_command_boundary());
    // The rewritten execute goes through; the close behind it stops again.
    t.resume_statement(true);
    let rest = &chunk[ping.len()..];
    let r = t.on_client_bytes(rest).unwrap();
    assert_eq!(
        (r.forward, r.stop),
        (exec.len(), Some(StopReason::Statement))
    );
    server_all(&mut t, &response(&[ok(SERVER_STATUS_AUTOCOMMIT)]), 64);
    // The proxy answers the close itself: resumed without a pass, the
    // next statement command stops again.
    t.resume_statement(false);
    let r = t.on_client_bytes(&ping).unwrap();
    assert_eq!((r.forward, r.stop), (ping.len(), None));
    let r = t.on_client_bytes(&exec).unwrap();
    assert_eq!((r.forward, r.stop), (0, Some(StopReason::Statement)));
}

// ------------------------------------------------------- answer checksums

/// The checksum of each answer when `answers` (whole server bytes, one
/// per query) are fed in chunks of `cut` bytes.
fn checksums(answers: &[Vec<u8>], deprecate_eof: bool, cut: usize) -> Vec<u64> {
    let mut t = Tracker::new(deprecate_eof);
    t.capture_commands(64);
    t.checksum_answers();
    let mut sums = Vec::new();
    for answer in answers {
        t.on_client_bytes(&query("SELECT a FROM t")).unwrap();
        for piece in answer.chunks(cut.max(1)) {
            t.on_server_bytes(piece).unwrap();
        }
        let done = t.take_completed().expect("the answer completed");
        sums.push(done.checksum.expect("checksums are on"));
    }
    sums
}

fn rows_answer(rows: &[&[u8]], last_status: u16) -> Vec<u8> {
    let mut packets = vec![vec![1], coldef(), eof(0)];
    packets.extend(rows.iter().map(|r| r.to_vec()));
    packets.push(eof(last_status));
    response(&packets)
}

fn ok_answer(affected: u8, insert_id: u8, status: u16, tail: &[u8]) -> Vec<u8> {
    let s = status.to_le_bytes();
    let mut p = vec![0x00, affected, insert_id, s[0], s[1], 0, 0];
    p.extend_from_slice(tail);
    response(&[p])
}

#[test]
fn checksum_ignores_sequence_ids_cuts_and_status_flags() {
    let a = rows_answer(&[b"\x011", b"\x012"], SERVER_STATUS_IN_TRANS);
    let flagged = rows_answer(
        &[b"\x011", b"\x012"],
        SERVER_STATUS_IN_TRANS | SERVER_SESSION_STATE_CHANGED,
    );
    let mut shifted = a.clone();
    // Other sequence ids: every header's fourth byte.
    let mut at = 0;
    while at < shifted.len() {
        let len = usize::from(shifted[at]) | usize::from(shifted[at + 1]) << 8;
        shifted[at + 3] = shifted[at + 3].wrapping_add(7);
        at += 4 + len;
    }
    let whole = checksums(std::slice::from_ref(&a), false, usize::MAX)[0];
    assert_eq!(checksums(&[a], false, 1)[0], whole);
    assert_eq!(checksums(&[flagged], false, 3)[0], whole);
    assert_eq!(checksums(&[shifted], false, 5)[0], whole);
}

#[test]
fn checksum_of_an_ok_leaves_out_its_state_block_and_info() {
    let plain = ok_answer(1, 5, SERVER_STATUS_IN_TRANS, b"");
    let tracked = ok_answer(
        1,
        5,
        SERVER_STATUS_IN_TRANS | SERVER_SESSION_STATE_CHANGED,
        b"\x00\x13\x00\x11\x09last_gtid\x060-1-33",
    );
    let sums = checksums(&[plain, tracked], false, 4);
    assert_eq!(sums[0], sums[1]);
}

#[test]
fn checksum_tells_apart_rows_counts_and_errors() {
    let sums = checksums(
        &[
            rows_answer(&[b"\x011"], 0),
            rows_answer(&[b"\x012"], 0),
            rows_answer(&[b"\x011", b"\x011"], 0),
            ok_answer(1, 5, 0, b""),
            ok_answer(2, 5, 0, b""),
            ok_answer(1, 6, 0, b""),
            response(&[err()]),
        ],
        false,
        7,
    );
    for (i, a) in sums.iter().enumerate() {
        for b in &sums[i + 1..] {
            assert_ne!(a, b, "answers {sums:x?}");
        }
    }
}

#[test]
fn checksum_is_none_unless_asked_for() {
    let mut t = Tracker::new(false);
    t.capture_commands(64);
    t.on_client_bytes(&query("SELECT 1")).unwrap();
    t.on_server_bytes(&ok_answer(0, 0, 0, b"")).unwrap();
    assert_eq!(t.take_completed().unwrap().checksum, None);
}

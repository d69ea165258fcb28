use super::*;
use crate::constants::*;
use crate::packet::{write_lenenc_int, write_lenenc_str};

const TRACK: u32 = CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS | CLIENT_SESSION_TRACK;
const NO_TRACK: u32 = CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS;

fn block(kind: u8, fields: &[&[u8]]) -> Vec<u8> {
    let mut data = Vec::new();
    for f in fields {
        write_lenenc_str(&mut data, f);
    }
    let mut out = vec![kind];
    write_lenenc_str(&mut out, &data);
    out
}

/// An OK as MariaDB's `net_send_ok` writes it with CLIENT_SESSION_TRACK.
fn ok_tracked(
    header: u8,
    affected: u64,
    id: u64,
    status: u16,
    info: &[u8],
    blocks: &[u8],
) -> Vec<u8> {
    let mut out = vec![header];
    write_lenenc_int(&mut out, affected);
    write_lenenc_int(&mut out, id);
    out.extend_from_slice(&status.to_le_bytes());
    out.extend_from_slice(&3u16.to_le_bytes());
    if !info.is_empty() || status & SERVER_SESSION_STATE_CHANGED != 0 {
        write_lenenc_str(&mut out, info);
    }
    if status & SERVER_SESSION_STATE_CHANGED != 0 {
        write_lenenc_str(&mut out, blocks);
    }
    out
}

#[test]
fn plain_ok_without_tracking() {
    let p = crate::reply::ok_payload(300, 70_000, SERVER_STATUS_AUTOCOMMIT, 2);
    let ok = parse_ok(&p, NO_TRACK).unwrap();
    assert_eq!(
        ok,
        OkInfo {
            affected_rows: 300,
            last_insert_id: 70_000,
            status: SERVER_STATUS_AUTOCOMMIT,
            warnings: 2,
            info: b"",
            session_state: vec![],
        }
    );
    // With CLIENT_SESSION_TRACK an OK may end right after the warnings.
    assert_eq!(parse_ok(&p, TRACK).unwrap(), ok);
    assert!(!ok.in_transaction() && !ok.state_changed());
}

#[test]
fn info_is_string_eof_without_tracking_and_lenenc_with_it() {
    let mut p = crate::reply::ok_payload(1, 0, 2, 0);
    p.extend_from_slice(b"Rows matched: 1  Changed: 1  Warnings: 0");
    assert_eq!(
        parse_ok(&p, NO_TRACK).unwrap().info,
        b"Rows matched: 1  Changed: 1  Warnings: 0"
    );
    let p = ok_tracked(0, 1, 0, 2, b"Rows matched: 1  Changed: 1  Warnings: 0", b"");
    let ok = parse_ok(&p, TRACK).unwrap();
    assert_eq!(ok.info, b"Rows matched: 1  Changed: 1  Warnings: 0");
    assert!(ok.session_state.is_empty());
}

#[test]
fn every_block_type() {
    let mut blocks = Vec::new();
    blocks.extend(block(0, &[b"autocommit", b"OFF"]));
    blocks.extend(block(1, &[b"shop"]));
    blocks.extend([2, 1, b'1']);
    // GTIDS: spec byte then a lenenc string.
    blocks.extend([3, 6, 0, 4]);
    blocks.extend(b"0-1-");
    blocks.extend(block(4, &[b"START TRANSACTION READ ONLY;"]));
    blocks.extend(block(5, &[b"T_______"]));
    blocks.extend([0x2A, 2, 0xAB, 0xCD]);
    let status = SERVER_STATUS_IN_TRANS | SERVER_SESSION_STATE_CHANGED;
    let p = ok_tracked(0, 0, 0, status, b"", &blocks);
    let ok = parse_ok(&p, TRACK).unwrap();
    assert_eq!(
        ok.session_state,
        vec![
            StateChange::SystemVariable {
                name: b"autocommit",
                value: b"OFF"
            },
            StateChange::Schema(b"shop"),
            StateChange::StateChanged(b"1"),
            StateChange::Gtids {
                spec: 0,
                gtids: b"0-1-"
            },
            StateChange::TransactionCharacteristics(b"START TRANSACTION READ ONLY;"),
            StateChange::TransactionState(b"T_______"),
            StateChange::Unknown {
                kind: 0x2A,
                data: &[0xAB, 0xCD]
            },
        ]
    );
    assert!(ok.in_transaction() && ok.state_changed() && ok.has_state_change_block());
    assert_eq!(ok.schema(), Some(&b"shop"[..]));
    assert_eq!(
        ok.system_variables().collect::<Vec<_>>(),
        vec![(&b"autocommit"[..], &b"OFF"[..])]
    );
    let t = ok.transaction_state().unwrap();
    assert!(t.transaction_open() && !t.is_idle() && !t.locked_tables());
    assert_eq!(
        ok.transaction_characteristics(),
        Some(&b"START TRANSACTION READ ONLY;"[..])
    );
}

#[test]
fn blocks_are_ignored_without_the_flag_or_the_capability() {
    let blocks = block(1, &[b"shop"]);
    let mut p = ok_tracked(0, 0, 0, SERVER_SESSION_STATE_CHANGED, b"", &blocks);
    assert_eq!(parse_ok(&p, TRACK).unwrap().schema(), Some(&b"shop"[..]));
    // Without CLIENT_SESSION_TRACK the rest is the info text.
    let ok = parse_ok(&p, NO_TRACK).unwrap();
    assert!(ok.session_state.is_empty());
    assert_eq!(ok.info, &p[7..]);
    // Flag cleared: the blocks are not read.
    p[3] = 0;
    p[4] = 0;
    assert!(parse_ok(&p, TRACK).unwrap().session_state.is_empty());
}

#[test]
fn ok_in_eof_form() {
    let blocks = block(0, &[b"character_set_results", b"utf8mb4"]);
    let p = ok_tracked(0xFE, 0, 0, SERVER_SESSION_STATE_CHANGED | 2, b"", &blocks);
    assert!(is_ok_packet(&p, true));
    assert!(!is_ok_packet(&p, false));
    let ok = parse_ok(&p, TRACK).unwrap();
    assert_eq!(ok.system_variables().count(), 1);
    // A 5-byte 0xFE is a legacy EOF even under DEPRECATE_EOF.
    assert!(!is_ok_packet(&[0xFE, 0, 0, 2, 0], true));
    assert!(is_ok_packet(&[0x00, 0, 0, 2, 0, 0, 0], false));
    assert!(!is_ok_packet(&[0xFF, 0x15, 0x04], true));
    assert!(!is_ok_packet(&[], true));
    let row = vec![0xFE; MAX_PAYLOAD];
    assert!(!is_ok_packet(&row, true));
}

#[test]
fn trx_state() {
    assert!(TrxState::parse(b"________").unwrap().is_idle());
    assert!(TrxState::parse(b"I_______").unwrap().transaction_open());
    assert!(TrxState::parse(b"_______L").unwrap().locked_tables());
    assert!(TrxState::parse(b"T______").is_none());
}

#[test]
fn old_protocol_layouts() {
    assert_eq!(
        parse_ok(&[0, 1, 2, 3, 0], CLIENT_TRANSACTIONS)
            .unwrap()
            .status,
        3
    );
    let ok = parse_ok(&[0, 1, 2, b'h', b'i'], 0).unwrap();
    assert_eq!((ok.status, ok.info), (0, &b"hi"[..]));
}

#[test]
fn truncations_are_errors_never_panics() {
    let mut blocks = block(0, &[b"sql_mode", b"STRICT_TRANS_TABLES"]);
    blocks.extend(block(5, &[b"________"]));
    let p = ok_tracked(0, 1, 2, SERVER_SESSION_STATE_CHANGED, b"x", &blocks);
    assert_eq!(parse_ok(&p, TRACK).unwrap().session_state.len(), 2);
    for cut in 0..p.len() {
        // The flag promises the blocks, so even a cut right after the
        // warnings is an error.
        let r = parse_ok(&p[..cut], TRACK);
        assert!(r.is_err(), "cut {cut}: {r:?}");
    }
    assert!(matches!(
        parse_ok(&[0xFF, 0, 0], TRACK),
        Err(ProtocolError::Malformed { .. })
    ));
    assert!(parse_ok(&[], TRACK).is_err());
    // A block whose fields overrun its own data length.
    let bad = [0u8, 3, 5, b'a', b'b'];
    assert!(parse_state_blocks(&bad).is_err());
    // A known type with trailing bytes inside its data: the fields are read,
    // the rest ignored.
    let extra = [1u8, 3, 1, b'd', b'!'];
    assert_eq!(
        parse_state_blocks(&extra).unwrap(),
        vec![StateChange::Schema(b"d")]
    );
}

/// The OKs MariaDB 10.11 sent in tests/session_track.rs (CLIENT_SESSION_TRACK,
/// DEPRECATE_EOF, the four trackers on), by statement.
fn captured() -> Vec<(&'static str, Vec<u8>)> {
    include_str!("../testdata/session-track-oks.txt")
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (label, hex) = l.rsplit_once(' ').unwrap();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (label, bytes)
        })
        .collect()
}

fn captured_ok(label: &str) -> Vec<u8> {
    captured()
        .into_iter()
        .find(|(l, _)| *l == label)
        .unwrap_or_else(|| panic!("no capture {label}"))
        .1
}

const MARIADB: u32 = TRACK | CLIENT_DEPRECATE_EOF;

#[test]
fn every_captured_ok_parses_and_every_prefix_fails() {
    let all = captured();
    assert!(all.len() > 30);
    for (label, p) in &all {
        assert!(is_ok_packet(p, true), "{label}");
        let ok = parse_ok(p, MARIADB).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(ok.state_changed(), !ok.session_state.is_empty(), "{label}");
        // Cuts inside the blocks are errors (cuts right after the warnings are a
        // valid short OK unless the flag promises blocks).
        for cut in 7..p.len() {
            if ok.state_changed() {
                assert!(parse_ok(&p[..cut], MARIADB).is_err(), "{label} cut {cut}");
            }
        }
    }
}

#[test]
fn captured_set_autocommit() {
    let p = captured_ok("SET_autocommit=0");
    let ok = parse_ok(&p, MARIADB).unwrap();
    assert_eq!(ok.status, SERVER_SESSION_STATE_CHANGED);
    assert_eq!(
        ok.session_state,
        vec![
            StateChange::SystemVariable {
                name: b"autocommit",
                value: b"OFF"
            },
            StateChange::StateChanged(b"1"),
        ]
    );
}

#[test]
fn captured_transactions_and_locks() {
    let ok_of = |l: &str| captured_ok(l);
    let p = ok_of("BEGIN");
    let ok = parse_ok(&p, MARIADB).unwrap();
    assert!(ok.in_transaction() && ok.transaction_state().unwrap().transaction_open());
    assert_eq!(
        ok.transaction_characteristics(),
        Some(&b"START TRANSACTION;"[..])
    );
    let p = ok_of("COMMIT");
    let ok = parse_ok(&p, MARIADB).unwrap();
    assert!(ok.transaction_state().unwrap().is_idle());
    assert_eq!(ok.transaction_characteristics(), Some(&b""[..]));
    let p = ok_of("LOCK_TABLES_t_READ");
    let ok = parse_ok(&p, MARIADB).unwrap();
    assert!(ok.transaction_state().unwrap().locked_tables() && !ok.in_transaction());
    let p = ok_of("SET_TRANSACTION_ISOLATION_LEVEL_SERIALIZABLE");
    let ok = parse_ok(&p, MARIADB).unwrap();
    assert!(!ok.has_state_change_block());
    assert_eq!(
        ok.transaction_characteristics(),
        Some(&b"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;"[..])
    );
}

#[test]
fn captured_schema_user_variable_and_insert_id() {
    let p = captured_ok("USE_muxlex_track");
    let ok = parse_ok(&p, MARIADB).unwrap();
    assert_eq!(ok.schema(), Some(&b"muxlex_track"[..]));
    // A user variable: only the '1' block.
    let p = captured_ok("SET_@x_=_1");
    let ok = parse_ok(&p, MARIADB).unwrap();
    assert_eq!(ok.session_state, vec![StateChange::StateChanged(b"1")]);
    // `SELECT @y := 2`: its 0xFE terminator has no flag at all.
    let p = captured_ok("SELECT_@y_:=_2");
    assert_eq!(p[0], 0xFE);
    assert!(!parse_ok(&p, MARIADB).unwrap().state_changed());
    let p = captured_ok("UPDATE_t_SET_a_=_LAST_INSERT_ID(a_+_1000)_WHERE_id_=_1");
    let ok = parse_ok(&p, MARIADB).unwrap();
    assert_eq!((ok.affected_rows, ok.last_insert_id), (1, 1001));
    assert_eq!(
        ok.info,
        b"Rows matched: 1  Changed: 1  Warnings: 0".as_slice()
    );
    let p = captured_ok("INSERT_IGNORE_INTO_t_(a)_VALUES_('12x')");
    assert_eq!(parse_ok(&p, MARIADB).unwrap().warnings, 1);
}

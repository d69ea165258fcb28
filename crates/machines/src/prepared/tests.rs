use super::*;
use crate::statement_limits::{Refusal, StatementLimits};
use wire::packet::write_packet;

const TYPE_LONG: u8 = 3;
const TYPE_VAR_STRING: u8 = 253;

fn key(sql: &str) -> Arc<StmtKey> {
    Arc::new(StmtKey {
        schema: Some("db".into()),
        settings: 0,
        sql: sql.as_bytes().to_vec(),
    })
}

fn packet(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_packet(&mut out, 0, payload);
    out
}

/// COM_STMT_EXECUTE of `id` with 2 parameters; `types`: bound now.
fn execute(id: u32, types: Option<&[u8]>, values: &[u8]) -> Vec<u8> {
    let mut p = vec![COM_STMT_EXECUTE];
    p.extend_from_slice(&id.to_le_bytes());
    p.push(0); // flags
    p.extend_from_slice(&1u32.to_le_bytes());
    p.push(0); // null bitmap for 2 params
    match types {
        Some(t) => {
            p.push(1);
            p.extend_from_slice(t);
        }
        None => p.push(0),
    }
    p.extend_from_slice(values);
    packet(&p)
}

#[test]
fn ids_are_the_proxys_and_last_prepared_resolves() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT 1"), 0);
    let b = r.add(key("SELECT ?"), 1);
    assert_ne!(a, b);
    assert_eq!(r.resolve(LAST_PREPARED), Some(b));
    assert_eq!(r.resolve(a), Some(a));
    assert_eq!(r.resolve(999), None);
    assert!(r.close(b));
    assert_eq!(r.resolve(LAST_PREPARED), None);
    assert!(!r.close(b));
    assert_eq!(r.kept().0, 1);
}

#[test]
fn a_reset_forgets_every_statement_and_never_reuses_their_ids() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT ?"), 1);
    r.on_relayed(COM_STMT_SEND_LONG_DATA, a);
    assert!(r.holds_backend());
    assert_eq!(r.clear(), 1);
    assert!(!r.holds_backend());
    assert_eq!(r.resolve(a), None);
    assert_eq!(r.resolve(LAST_PREPARED), None);
    // The same text prepared again is another statement: the old id stays unknown.
    let b = r.add(key("SELECT ?"), 1);
    assert_ne!(a, b);
    assert_eq!(r.resolve(a), None);
}

fn raw_key(sql: &str) -> StmtKey {
    StmtKey {
        schema: Some("db".into()),
        settings: 0,
        sql: sql.as_bytes().to_vec(),
    }
}

#[test]
fn one_text_prepared_many_times_is_kept_once() {
    let limits = StatementLimits::default();
    let text = "SELECT ?, ".repeat(1600); // 16,000 bytes, 1,600 parameters
    let mut r = Registry::new();
    let first = r.shared_key(raw_key(&text));
    r.try_add(Arc::clone(&first), 1600, &limits).unwrap();
    for _ in 0..999 {
        let k = r.shared_key(raw_key(&text));
        assert!(Arc::ptr_eq(&k, &first));
        r.try_add(k, 1600, &limits).unwrap();
    }
    // The text and schema once, 3,200 bytes of types per statement.
    assert_eq!(r.kept(), (1000, 16_002 + 1000 * 3200));
    assert_eq!(r.keys.len(), 1);
}

#[test]
fn the_limits_refuse_before_and_after_the_server_prepares() {
    let limits = StatementLimits {
        statements: 3,
        bytes: 100,
    };
    let mut r = Registry::new();
    let a = r
        .try_add(r.shared_key(raw_key("SELECT 1")), 0, &limits)
        .unwrap();
    r.try_add(r.shared_key(raw_key("SELECT 1")), 0, &limits)
        .unwrap();
    // 10 bytes kept (text and schema once); 91 more (89 + the schema) do not fit.
    assert_eq!(r.kept(), (2, 10));
    let long = raw_key(&"x".repeat(89));
    assert_eq!(r.room_for(&long, &limits), Err(Refusal::Bytes { max: 100 }));
    // Known only from the PREPARE_OK: 2 bytes per parameter.
    let short = raw_key(&"y".repeat(88));
    assert_eq!(r.room_for(&short, &limits), Ok(()));
    let k = r.shared_key(short);
    assert_eq!(
        r.try_add(Arc::clone(&k), 1, &limits),
        Err(Refusal::Bytes { max: 100 })
    );
    r.try_add(Arc::clone(&k), 0, &limits).unwrap();
    assert_eq!(r.kept(), (3, 100));
    assert_eq!(
        r.room_for(&raw_key("SELECT 1"), &limits),
        Err(Refusal::Statements { max: 3 })
    );
    // Closing frees what only that statement kept.
    assert!(r.close(a));
    assert_eq!(r.kept(), (2, 100));
    assert_eq!(r.clear(), 2);
    assert_eq!(r.kept(), (0, 0));
}

#[test]
fn ids_skip_zero_the_last_prepared_marker_and_live_ids() {
    let mut r = Registry::new();
    r.next_id = LAST_PREPARED - 1;
    let a = r.add(key("a"), 0);
    let b = r.add(key("b"), 0);
    assert_eq!(a, LAST_PREPARED - 1);
    assert_eq!(b, 1, "0xFFFFFFFF and 0 are skipped");
    r.next_id = a;
    let c = r.add(key("c"), 0);
    assert_eq!(c, 2, "ids in use are skipped");
}

#[test]
fn long_data_holds_until_the_execute_completes() {
    let mut r = Registry::new();
    let a = r.add(key("INSERT INTO t VALUES (?)"), 1);
    r.on_relayed(COM_STMT_SEND_LONG_DATA, a);
    assert!(r.holds_backend());
    r.on_completed(COM_STMT_SEND_LONG_DATA, 0);
    assert!(r.holds_backend());
    r.on_relayed(COM_STMT_EXECUTE, a);
    r.on_completed(COM_STMT_EXECUTE, SERVER_STATUS_AUTOCOMMIT);
    assert!(!r.holds_backend());
}

#[test]
fn a_cursor_holds_until_its_last_row_or_a_reset() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT * FROM t"), 0);
    r.on_relayed(COM_STMT_EXECUTE, a);
    r.on_completed(COM_STMT_EXECUTE, SERVER_STATUS_CURSOR_EXISTS);
    assert!(r.holds_backend());
    r.on_relayed(COM_STMT_FETCH, a);
    r.on_completed(COM_STMT_FETCH, SERVER_STATUS_CURSOR_EXISTS);
    assert!(r.holds_backend());
    r.on_relayed(COM_STMT_FETCH, a);
    r.on_completed(COM_STMT_FETCH, SERVER_STATUS_LAST_ROW_SENT);
    assert!(!r.holds_backend());
    r.on_relayed(COM_STMT_EXECUTE, a);
    r.on_completed(COM_STMT_EXECUTE, SERVER_STATUS_CURSOR_EXISTS);
    r.on_relayed(COM_STMT_RESET, a);
    assert!(!r.holds_backend());
    r.on_relayed(COM_STMT_EXECUTE, a);
    r.on_completed(COM_STMT_EXECUTE, SERVER_STATUS_CURSOR_EXISTS);
    assert!(r.close(a));
    assert!(!r.holds_backend());
}

#[test]
fn parse_command_needs_the_id() {
    let close = packet(&[COM_STMT_CLOSE, 7, 0, 0, 0]);
    assert_eq!(parse_command(&close[..6]), Err(ParseError::Need(9)));
    assert_eq!(
        parse_command(&close),
        Ok(Command {
            command: COM_STMT_CLOSE,
            id: 7,
            packet_len: 9
        })
    );
    let prepare = packet(b"\x16SELECT 1");
    assert_eq!(parse_command(&prepare).map(|c| c.id), Ok(0));
    assert!(matches!(
        parse_command(&packet(&[COM_STMT_FETCH, 1])),
        Err(ParseError::Malformed(_))
    ));
}

#[test]
fn an_execute_that_binds_types_is_recorded_and_only_its_id_changes() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT ?, ?"), 2);
    let types = [TYPE_LONG, 0, TYPE_LONG, 0];
    let pkt = execute(a, Some(&types), &[1, 0, 0, 0, 2, 0, 0, 0]);
    let st = r.get_mut(a).unwrap();
    let rw = rewrite(&pkt, st, 77, false).unwrap();
    assert_eq!(rw.replaces, 9);
    assert_eq!(&rw.with[5..9], &77u32.to_le_bytes());
    assert_eq!(&rw.with[..5], &pkt[..5]);
    assert_eq!(st.types.as_deref(), Some(&types[..]));
}

#[test]
fn an_execute_without_types_gets_the_recorded_ones() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT ?, ?"), 2);
    let types = [TYPE_LONG, 0, TYPE_VAR_STRING, 0];
    let st = r.get_mut(a).unwrap();
    st.types = Some(types.to_vec());
    let values = [5, 0, 0, 0, 2, b'h', b'i'];
    let pkt = execute(a, None, &values);
    let rw = rewrite(&pkt, st, 9, false).unwrap();
    let mut whole = rw.with.clone();
    whole.extend_from_slice(&pkt[rw.replaces..]);
    assert_eq!(whole, execute(9, Some(&types), &values));
}

#[test]
fn an_execute_without_types_and_none_recorded_passes_with_its_id() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT ?, ?"), 2);
    let pkt = execute(a, None, &[]);
    let rw = rewrite(&pkt, r.get_mut(a).unwrap(), 3, false).unwrap();
    assert_eq!(rw.replaces, 9);
}

#[test]
fn an_execute_cut_before_its_types_asks_for_more() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT ?, ?"), 2);
    let pkt = execute(a, Some(&[3, 0, 3, 0]), &[1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(
        rewrite(&pkt[..16], r.get_mut(a).unwrap(), 3, false),
        Err(ParseError::Need(20))
    );
}

#[test]
fn bulk_execute_gets_the_types_flag_and_types() {
    let mut r = Registry::new();
    let a = r.add(key("INSERT INTO t VALUES (?, ?)"), 2);
    let types = [TYPE_LONG, 0, TYPE_LONG, 0];
    let mut p = vec![COM_STMT_BULK_EXECUTE];
    p.extend_from_slice(&a.to_le_bytes());
    p.extend_from_slice(&BULK_SEND_TYPES_TO_SERVER.to_le_bytes());
    p.extend_from_slice(&types);
    p.extend_from_slice(&[0, 1, 0, 0, 0, 0, 2, 0, 0, 0]);
    let st = r.get_mut(a).unwrap();
    let rw = rewrite(&packet(&p), st, 4, false).unwrap();
    assert_eq!(rw.replaces, 9);
    assert_eq!(st.types.as_deref(), Some(&types[..]));

    let mut q = vec![COM_STMT_BULK_EXECUTE];
    q.extend_from_slice(&LAST_PREPARED.to_le_bytes());
    q.extend_from_slice(&0u16.to_le_bytes());
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 2, 0, 0, 0]);
    let pkt = packet(&q);
    let rw = rewrite(&pkt, st, 4, false).unwrap();
    let mut whole = rw.with.clone();
    whole.extend_from_slice(&pkt[rw.replaces..]);
    let mut expect = p.clone();
    expect[1..5].copy_from_slice(&4u32.to_le_bytes());
    assert_eq!(whole, packet(&expect));
}

#[test]
fn other_commands_change_only_the_id() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT 1"), 0);
    for cmd in [COM_STMT_FETCH, COM_STMT_RESET, COM_STMT_SEND_LONG_DATA] {
        let mut p = vec![cmd];
        p.extend_from_slice(&a.to_le_bytes());
        p.extend_from_slice(&[1, 0, 0, 0]);
        let pkt = packet(&p);
        let rw = rewrite(&pkt, r.get_mut(a).unwrap(), 0x0102_0304, false).unwrap();
        assert_eq!(rw.replaces, 9);
        assert_eq!(&rw.with[5..9], &0x0102_0304u32.to_le_bytes());
    }
}

#[test]
fn the_prepare_response_carries_the_client_id() {
    let mut resp = packet(&[0, 9, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0]);
    resp.extend_from_slice(&packet(b"def"));
    let out = client_prepare_response(&resp, 3);
    assert_eq!(&out[5..9], &3u32.to_le_bytes());
    assert_eq!(&out[9..], &resp[9..]);
    assert_eq!(prepare_ok_counts(&resp[4..16]), Some((9, 1, 2)));
}

#[test]
fn types_are_not_inserted_when_the_server_has_them() {
    let mut r = Registry::new();
    let a = r.add(key("SELECT ?, ?"), 2);
    let types = [TYPE_LONG, 0, TYPE_LONG, 0];
    let st = r.get_mut(a).unwrap();
    st.types = Some(types.to_vec());
    let pkt = execute(a, None, &[1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(types_after(&pkt, st), Ok(Some(types.to_vec())));
    let rw = rewrite(&pkt, st, 9, true).unwrap();
    assert_eq!(rw.replaces, 9);
    let bound = execute(
        a,
        Some(&[TYPE_VAR_STRING, 0, TYPE_LONG, 0]),
        &[1, b'x', 2, 0, 0, 0],
    );
    assert_eq!(
        types_after(&bound, st),
        Ok(Some(vec![TYPE_VAR_STRING, 0, TYPE_LONG, 0]))
    );
    let fetch = packet(&[COM_STMT_FETCH, 1, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(types_after(&fetch, st), Ok(None));
}

use super::*;

fn key(sql: &str) -> Arc<StmtKey> {
    Arc::new(StmtKey {
        schema: None,
        settings: 0,
        sql: sql.as_bytes().to_vec(),
    })
}

fn resp() -> Arc<[u8]> {
    Arc::from(&b"ok"[..])
}

fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_packet(&mut out, seq, payload);
    out
}

#[test]
fn the_least_recently_used_statement_is_evicted() {
    let mut s = BackendStatements::new(2);
    assert!(s.make_room().is_empty());
    s.insert(key("a"), 1, resp());
    assert!(s.make_room().is_empty());
    s.insert(key("b"), 2, resp());
    // "a" is used again: "b" is now the oldest.
    assert_eq!(s.get(&key("a")).map(|(id, _)| id), Some(1));
    assert_eq!(s.make_room(), vec![2]);
    s.insert(key("c"), 3, resp());
    assert_eq!(s.len(), 2);
    assert!(s.get(&key("b")).is_none());
    assert_eq!(s.make_room(), vec![1]);
}

#[test]
fn churn_stays_bounded() {
    let mut s = BackendStatements::new(16);
    let mut closed = 0;
    for i in 0..10_000u32 {
        let k = key(&format!("SELECT {i}"));
        if s.get(&k).is_none() {
            closed += s.make_room().len();
            s.insert(k, i + 1, resp());
        }
        assert!(s.len() <= 16);
    }
    assert_eq!(closed, 10_000 - 16);
    assert_eq!(s.by_tick.len(), s.len());
}

#[test]
fn the_key_includes_the_schema_and_settings() {
    let mut s = BackendStatements::new(8);
    s.insert(key("SELECT * FROM t"), 1, resp());
    let other_schema = StmtKey {
        schema: Some("other".into()),
        settings: 0,
        sql: b"SELECT * FROM t".to_vec(),
    };
    assert!(s.get(&other_schema).is_none());
    let other_settings = StmtKey {
        schema: None,
        settings: 42,
        sql: b"SELECT * FROM t".to_vec(),
    };
    assert!(s.get(&other_settings).is_none());
    assert!(s.get(&key("SELECT * FROM t")).is_some());
}

#[test]
fn clear_forgets_everything() {
    let mut s = BackendStatements::new(8);
    s.insert(key("a"), 1, resp());
    s.insert(key("b"), 2, resp());
    assert_eq!(s.clear(), 2);
    assert!(s.is_empty());
    assert!(s.make_room().is_empty());
}

#[test]
fn the_default_bound_shares_the_servers_limit() {
    assert_eq!(default_max_prepared(16_382, 64), 191);
    assert_eq!(default_max_prepared(16_382, 0), 12_286);
    assert_eq!(default_max_prepared(10, 100), 8);
}

#[test]
fn exchange_closes_then_prepares() {
    let bytes = exchange_bytes(&[5, 6], b"SELECT 1");
    let mut expect = packet(0, &[COM_STMT_CLOSE, 5, 0, 0, 0]);
    expect.extend(packet(0, &[COM_STMT_CLOSE, 6, 0, 0, 0]));
    expect.extend(packet(0, b"\x16SELECT 1"));
    assert_eq!(bytes, expect);
}

#[test]
fn a_prepare_reply_is_read_whole() {
    // 1 column, 2 params, legacy EOFs.
    let mut data = packet(1, &[0, 9, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0]);
    data.extend(packet(2, b"param1"));
    data.extend(packet(3, b"param2"));
    data.extend(packet(4, &[0xFE, 0, 0, 2, 0]));
    data.extend(packet(5, b"col1"));
    let cut = data.len();
    data.extend(packet(6, &[0xFE, 0, 0, 2, 0]));
    assert_eq!(read_prepare_reply(&data[..cut], false), Ok(None));
    let (reply, used) = read_prepare_reply(&data, false).unwrap().unwrap();
    assert_eq!(used, data.len());
    assert_eq!(
        reply,
        PrepareReply::Ok {
            id: 9,
            response: data.clone()
        }
    );
    // Without EOFs (CLIENT_DEPRECATE_EOF) the reply ends at the last definition.
    let (_, used) = read_prepare_reply(&data, true).unwrap().unwrap();
    assert!(used < data.len());
}

#[test]
fn a_prepare_error_is_one_packet() {
    let err = packet(1, b"\xff\x28\x04#42000syntax");
    let (reply, used) = read_prepare_reply(&err, false).unwrap().unwrap();
    assert_eq!(used, err.len());
    assert!(matches!(reply, PrepareReply::Err { .. }));
    assert!(read_prepare_reply(&packet(1, b"\x05"), false).is_err());
}

use super::*;

const IN: u16 = SERVER_STATUS_IN_TRANS | SERVER_STATUS_AUTOCOMMIT;
const OUT: u16 = SERVER_STATUS_AUTOCOMMIT;

fn done(command: u8, sql: Option<&str>, status: u16, checksum: u64) -> Completed {
    Completed {
        command,
        text: sql.map(|s| s.as_bytes().to_vec()),
        err: false,
        ok: None,
        warnings: 0,
        status,
        state_ok: None,
        rows: None,
        checksum: Some(checksum),
    }
}

fn sqls(r: &TxRecord) -> Vec<(String, u64)> {
    r.replayable()
        .map(|s| {
            s.iter()
                .map(|e| (String::from_utf8_lossy(&e.sql).into_owned(), e.checksum))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn records_the_open_transaction_from_its_begin() {
    let mut r = TxRecord::new(1024);
    assert_eq!(
        r.on_completed(&done(COM_QUERY, Some("SELECT 1"), OUT, 1)),
        None
    );
    assert_eq!(r.replayable(), Err(None));
    r.on_completed(&done(COM_QUERY, Some("BEGIN"), IN, 2));
    r.on_completed(&done(COM_QUERY, Some("INSERT INTO t VALUES (1)"), IN, 3));
    assert_eq!(
        sqls(&r),
        vec![("BEGIN".into(), 2), ("INSERT INTO t VALUES (1)".into(), 3)]
    );
    r.on_completed(&done(COM_QUERY, Some("COMMIT"), OUT, 4));
    assert_eq!(r.replayable(), Err(None));
    assert_eq!(r.bytes(), 0);
    // The next transaction starts a new record.
    r.on_completed(&done(COM_QUERY, Some("START TRANSACTION READ ONLY"), IN, 5));
    assert_eq!(sqls(&r), vec![("START TRANSACTION READ ONLY".into(), 5)]);
}

#[test]
fn another_command_or_a_pin_turns_replay_off_until_the_transaction_ends() {
    let mut r = TxRecord::new(1024);
    r.on_completed(&done(COM_QUERY, Some("BEGIN"), IN, 1));
    assert_eq!(
        r.on_completed(&done(COM_PING, None, IN, 2)),
        Some(RecordNote::TurnedOff(Off::NotAQuery))
    );
    assert_eq!(
        r.on_completed(&done(COM_QUERY, Some("SELECT 1"), IN, 3)),
        None
    );
    assert_eq!(r.replayable(), Err(Some(Off::NotAQuery)));
    r.on_completed(&done(COM_QUERY, Some("ROLLBACK"), OUT, 4));
    r.on_completed(&done(COM_QUERY, Some("BEGIN"), IN, 5));
    assert_eq!(sqls(&r), vec![("BEGIN".into(), 5)]);
    assert_eq!(r.pinned(), Some(RecordNote::TurnedOff(Off::Pinned)));
    assert_eq!(r.pinned(), None, "said once");
    assert_eq!(r.replayable(), Err(Some(Off::Pinned)));
}

#[test]
fn over_the_bound_replay_is_off_and_the_text_is_dropped() {
    let mut r = TxRecord::new(20);
    r.on_completed(&done(COM_QUERY, Some("BEGIN"), IN, 1));
    assert_eq!(
        r.on_completed(&done(COM_QUERY, Some("INSERT INTO t VALUES (1)"), IN, 2)),
        Some(RecordNote::TurnedOff(Off::TooLarge))
    );
    assert_eq!(r.bytes(), 0);
    assert_eq!(r.replayable(), Err(Some(Off::TooLarge)));
    // A statement the tracker kept no text of is too large as well.
    let mut r = TxRecord::new(1024);
    r.on_completed(&done(COM_QUERY, Some("BEGIN"), IN, 1));
    r.on_completed(&done(COM_QUERY, None, IN, 2));
    assert_eq!(r.replayable(), Err(Some(Off::TooLarge)));
}

#[test]
fn clear_forgets_the_transaction() {
    let mut r = TxRecord::new(1024);
    r.on_completed(&done(COM_QUERY, Some("BEGIN"), IN, 1));
    r.clear();
    assert_eq!(r.replayable(), Err(None));
    // Not open any more: a statement inside a new transaction starts over.
    r.on_completed(&done(COM_QUERY, Some("SELECT 2"), IN, 2));
    assert_eq!(sqls(&r), vec![("SELECT 2".into(), 2)]);
}

use super::*;

fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    p.push(seq);
    p.extend_from_slice(payload);
    p
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// What MariaDB 10.11 sent for `SET @y = 2` with and without
/// CLIENT_SESSION_TRACK (session_track_state_change on).
#[test]
fn a_set_of_a_user_variable_loses_its_block_and_empty_info() {
    let mut data = packet(1, &hex("000000014000000003020131"));
    let shrunk = strip_packet(&mut data, 0, ClientView::Untracked);
    data.truncate(data.len() - shrunk);
    assert_eq!(data, packet(1, &hex("00000001000000")));
}

#[test]
fn a_use_keeps_nothing_but_the_counts() {
    let tracked = hex("000000014000000013010e0d72696e67676174655f74657374020131");
    let mut data = packet(1, &tracked);
    let shrunk = strip_packet(&mut data, 0, ClientView::Untracked);
    data.truncate(data.len() - shrunk);
    assert_eq!(data, packet(1, &hex("00000001000000")));
}

#[test]
fn an_info_message_stays_length_encoded_as_the_server_writes_it() {
    // UPDATE with an info message, and a state block behind it.
    let info = b"Rows matched: 1  Changed: 1  Warnings: 0";
    let with_info = |status: &str, tail: &str| {
        let mut ok = hex(&format!("000100{status}0000"));
        ok.push(info.len() as u8);
        ok.extend_from_slice(info);
        ok.extend_from_slice(&hex(tail));
        ok
    };
    let mut data = packet(1, &with_info("0240", "03020131"));
    let shrunk = strip_packet(&mut data, 0, ClientView::Untracked);
    data.truncate(data.len() - shrunk);
    assert_eq!(data, packet(1, &with_info("0200", "")));
}

#[test]
fn the_bytes_behind_move_forward() {
    // A flagged OK with MORE_RESULTS (0x0a) in the middle, then a plain OK.
    let mut data = packet(1, &hex("0000000a40000000"));
    data.extend_from_slice(&hex("03020131"));
    data[0] = 12;
    let tail = packet(2, &hex("00000002000000"));
    data.extend_from_slice(&tail);
    let shrunk = strip_packet(&mut data, 0, ClientView::Untracked);
    assert_eq!(shrunk, 5);
    data.truncate(data.len() - shrunk);
    let mut want = packet(1, &hex("0000000a000000"));
    want.extend_from_slice(&tail);
    assert_eq!(data, want);
}

#[test]
fn a_legacy_eof_loses_the_flag_only() {
    let mut data = packet(5, &hex("fe00000140"));
    assert_eq!(strip_packet(&mut data, 0, ClientView::Untracked), 0);
    assert_eq!(data, packet(5, &hex("fe00000100")));
}

#[test]
fn unflagged_rows_and_errors_are_left_alone() {
    for payload in ["00000002000000", "ff1504233432303030", "0131", "fe00000200"] {
        let mut data = packet(1, &hex(payload));
        let before = data.clone();
        assert_eq!(strip_packet(&mut data, 0, ClientView::Untracked), 0);
        assert_eq!(data, before);
    }
}

#[test]
fn a_packet_not_whole_in_the_data_is_left_alone() {
    let full = packet(1, &hex("000000014000000003020131"));
    let mut cut = full[..10].to_vec();
    assert_eq!(strip_packet(&mut cut, 0, ClientView::Untracked), 0);
    assert_eq!(cut, full[..10]);
}

/// A tracking client with the server's default trackers keeps the schema
/// and the default system variables, and loses the proxy's state-change
/// and other variables' blocks.
#[test]
fn a_tracking_client_keeps_only_what_its_default_trackers_report() {
    // USE shop; SET autocommit = 0, sql_mode = '' under the proxy's trackers.
    let schema = hex("01050473686f70"); // type 1, data lenenc(5): lenenc(4) "shop"
    let state_change = hex("020131");
    let autocommit = hex("000f0a6175746f636f6d6d6974034f4646");
    let sql_mode = hex("000a0873716c5f6d6f646500");
    let blocks = [&schema[..], &state_change, &autocommit, &sql_mode].concat();
    let mut ok = hex("0000000240000000");
    ok.push(blocks.len() as u8);
    ok.extend_from_slice(&blocks);
    let mut data = packet(1, &ok);
    let shrunk = strip_packet(&mut data, 0, ClientView::Defaults);
    data.truncate(data.len() - shrunk);
    let kept = [&schema[..], &autocommit].concat();
    let mut want = hex("0000000240000000");
    want.push(kept.len() as u8);
    want.extend_from_slice(&kept);
    assert_eq!(data, packet(1, &want));
}

#[test]
fn a_tracking_client_with_nothing_left_gets_the_plain_ok() {
    // SET @a = 1 under the proxy's trackers: only the state-change block.
    let mut data = packet(1, &hex("000000024000000003020131"));
    let tail = packet(2, &hex("00000002000000"));
    data.extend_from_slice(&tail);
    let shrunk = strip_packet(&mut data, 0, ClientView::Defaults);
    data.truncate(data.len() - shrunk);
    let mut want = packet(1, &hex("00000002000000"));
    want.extend_from_slice(&tail);
    assert_eq!(data, want);
}

/// Causal reads track `last_gtid`: what MariaDB 10.11 sent for an
/// autocommit INSERT that binlogged 0-1-33 (the block alone) and for a
/// COMMIT (0-1-34), and what a direct connection without the tracker
/// gets: the counts, no flag, no empty info, whether or not the client
/// negotiated CLIENT_SESSION_TRACK (the default trackers do not report
/// last_gtid).
#[test]
fn a_last_gtid_block_is_stripped_for_both_views() {
    let cases = [
        (
            "00010d0240000000130011096c6173745f6774696406302d312d3333",
            "00010d02000000",
        ),
        (
            "0000000240000000130011096c6173745f6774696406302d312d3334",
            "00000002000000",
        ),
    ];
    for (tracked, direct) in cases {
        for view in [ClientView::Untracked, ClientView::Defaults] {
            let mut data = packet(1, &hex(tracked));
            let shrunk = strip_packet(&mut data, 0, view);
            data.truncate(data.len() - shrunk);
            assert_eq!(data, packet(1, &hex(direct)), "{view:?}");
        }
    }
}

use std::io::{Read, Write};
use std::time::Duration;

use super::*;
use clap::Parser;
use wire::packet::write_packet;

fn cfg(extra: &[&str]) -> Config {
    let mut args = vec!["ringgate", "--users-file", "u.json", "--workers", "2"];
    args.extend_from_slice(extra);
    let mut c = Config::try_parse_from(args).unwrap();
    c.resolve_backends().unwrap();
    c
}

#[test]
fn versions() {
    assert_eq!(parse_version("6.8.0-45-generic"), Some((6, 8)));
    assert_eq!(
        parse_version("5.15.153.1-microsoft-standard-WSL2"),
        Some((5, 15))
    );
    assert_eq!(parse_version("unknown"), None);
}

#[test]
fn memlock_shortfall_names_the_exact_fix() {
    let c = cfg(&[]);
    let need = 2 * 1024 * 16384u64;
    let lim = Limit {
        soft: Some(65536),
        hard: Some(65536),
    };
    let item = check_memlock(&c, 0, Some(lim), Some(0));
    assert_eq!(item.status, Status::Fail);
    let fix = item.fix.unwrap();
    assert!(fix.contains(&format!("LimitMEMLOCK={need}")), "{fix}");
    assert!(fix.contains(&format!("ulimit -l {}", need / 1024)), "{fix}");
    // Enough, unlimited, CAP_IPC_LOCK, heap: all fine.
    let big = Limit {
        soft: Some(need),
        hard: Some(need),
    };
    assert_eq!(check_memlock(&c, 0, Some(big), Some(0)).status, Status::Ok);
    let inf = Limit {
        soft: None,
        hard: None,
    };
    assert_eq!(check_memlock(&c, 0, Some(inf), Some(0)).status, Status::Ok);
    assert_eq!(
        check_memlock(&c, 0, Some(lim), Some(1 << CAP_IPC_LOCK)).status,
        Status::Ok
    );
    let heap = cfg(&["--read-buffers", "heap"]);
    assert_eq!(
        check_memlock(&heap, 0, Some(lim), Some(0)).status,
        Status::Ok
    );
    // Kernels that charge the rings: 2 × 136 KiB on top of the pool.
    let ring = 136 * 1024;
    let item = check_memlock(&c, ring, Some(big), Some(0));
    assert_eq!(item.status, Status::Fail);
    assert!(
        item.fix
            .unwrap()
            .contains(&format!("LimitMEMLOCK={}", need + 2 * ring)),
        "rings must be counted"
    );
    assert_eq!(
        check_memlock(&heap, ring, Some(lim), Some(0)).status,
        Status::Fail,
        "64 KiB cannot hold two rings"
    );
}

#[test]
fn nofile_counts_clients_and_backends() {
    let c = cfg(&[
        "--max-connections",
        "1000",
        "--backend-max-connections",
        "100",
    ]);
    let need = fds_needed(&c);
    assert!(need >= 1100);
    let low = Limit {
        soft: Some(1024),
        hard: Some(1024),
    };
    let item = check_nofile(&c, Some(low));
    assert_eq!(item.status, Status::Fail);
    assert!(item.fix.unwrap().contains(&format!("LimitNOFILE={need}")));
    let raisable = Limit {
        soft: Some(1024),
        hard: Some(65536),
    };
    assert_eq!(check_nofile(&c, Some(raisable)).status, Status::Ok);
}

#[test]
fn ring_cost_matches_what_linux_6_18_charges() {
    assert_eq!(ring_locked_bytes(1024, 4096), 136 * 1024);
}

#[test]
fn report_fails_on_any_fail() {
    let r = Report {
        items: vec![Item::ok("a", "fine"), Item::warn("b", "meh", "do x")],
    };
    assert!(r.passed());
    assert!(r.render().contains("ready:"));
    let r = Report {
        items: vec![Item::fail("c", "broken", "fix it\nsecond line")],
    };
    assert!(!r.passed());
    let text = r.render();
    assert!(text.contains("FAIL  c         broken"), "{text}");
    assert!(text.contains("fix: fix it"), "{text}");
    assert!(text.contains("NOT ready"), "{text}");
}

/// A one-connection fake backend: sends `script[0]` on accept, then the
/// next entry after each whole packet it reads from the client.
fn fake_backend(script: Vec<Vec<u8>>) -> (String, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        for (i, packet) in script.iter().enumerate() {
            if i > 0 {
                let mut header = [0u8; 4];
                s.read_exact(&mut header).unwrap();
                let len = usize::from(header[0])
                    | usize::from(header[1]) << 8
                    | usize::from(header[2]) << 16;
                s.read_exact(&mut vec![0; len]).unwrap();
            }
            s.write_all(packet).unwrap();
        }
        // Hold the connection until the client is done with it.
        let _ = s.read(&mut [0u8; 64]);
    });
    (addr, server)
}

fn framed(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_packet(&mut out, seq, payload);
    out
}

fn greeting_packet() -> Vec<u8> {
    use wire::constants::*;
    framed(
        0,
        &wire::handshake::build_greeting(&wire::handshake::Greeting {
            protocol_version: 10,
            server_version: "5.5.5-10.11.19-MariaDB".into(),
            connection_id: 7,
            scramble: b"abcdefgh0123456789AB".to_vec(),
            capabilities: 0x81FF_F7FE,
            ext_capabilities: 0x1d,
            charset: UTF8MB4_GENERAL_CI,
            status: SERVER_STATUS_AUTOCOMMIT,
            auth_plugin: wire::auth::NATIVE_PASSWORD.into(),
        }),
    )
}

fn check_against(script: Vec<Vec<u8>>) -> Item {
    let (addr, server) = fake_backend(script);
    let item = check_backend(&cfg(&["--backend", &addr, "--backend-identity", "shared"]));
    server.join().unwrap();
    item
}

#[test]
fn passthrough_identity_checks_the_greeting_without_a_login() {
    let (addr, server) = fake_backend(vec![greeting_packet()]);
    let item = check_backend(&cfg(&["--backend", &addr]));
    server.join().unwrap();
    assert_eq!(item.status, Status::Ok, "{item:?}");
    assert!(item.detail.contains("no login was tried"), "{item:?}");
    assert!(item.detail.contains("server 5.5.5-10.11.19"), "{item:?}");
    let (addr, server) = fake_backend(vec![framed(0, b"\xFF\x10\x04Too many connections")]);
    let item = check_backend(&cfg(&["--backend", &addr]));
    server.join().unwrap();
    assert_eq!(item.status, Status::Fail, "{item:?}");
    assert!(item.detail.contains("1040"), "{item:?}");
}

#[test]
fn backend_login_follows_the_shared_login_machine() {
    use wire::reply::ok_payload;
    let switch = b"\xFEmysql_native_password\x00abcdefgh0123456789AB\x00";
    let item = check_against(vec![
        greeting_packet(),
        framed(2, switch),
        framed(4, &ok_payload(0, 0, 2, 0)),
    ]);
    assert_eq!(item.status, Status::Ok, "{item:?}");
    assert!(
        item.detail.contains("server 5.5.5-10.11.19-MariaDB"),
        "{item:?}"
    );
}

#[test]
fn backend_refusing_before_the_greeting_is_reported_as_a_refusal() {
    use wire::reply::err_payload;
    let item = check_against(vec![framed(0, &err_payload(1040, "Too many connections"))]);
    assert_eq!(item.status, Status::Fail);
    assert!(
        item.detail
            .contains("server refused the connection: 1040 (08004): Too many connections"),
        "{item:?}"
    );
    assert!(item.fix.unwrap().contains("FLUSH HOSTS"));
}

#[test]
fn backend_wanting_another_plugin_names_it_and_the_fix() {
    let switch = b"\xFEclient_ed25519\x00abcdefgh0123456789ABabcdefgh0123\x00";
    let item = check_against(vec![greeting_packet(), framed(2, switch)]);
    assert_eq!(item.status, Status::Fail);
    assert!(item.detail.contains("'client_ed25519'"), "{item:?}");
    assert!(item
        .fix
        .unwrap()
        .contains("IDENTIFIED WITH caching_sha2_password"));
}

#[test]
fn backend_login_follows_a_switch_to_caching_sha2_and_its_fast_auth() {
    use wire::reply::ok_payload;
    let switch = b"\xFEcaching_sha2_password\x00abcdefgh0123456789AB\x00";
    let item = check_against(vec![
        greeting_packet(),
        framed(2, switch),
        // 0x01 0x03 is answered by nothing: the OK follows at once.
        [framed(4, &[0x01, 0x03]), framed(5, &ok_payload(0, 0, 2, 0))].concat(),
    ]);
    assert_eq!(item.status, Status::Ok, "{item:?}");
}

#[test]
fn backend_that_is_not_mysql_is_a_protocol_failure() {
    // Framed, but protocol version 9: not a HandshakeV10.
    let item = check_against(vec![framed(0, b"\x09not a greeting\x00")]);
    assert_eq!(item.status, Status::Fail);
    assert!(item.detail.contains("malformed greeting"), "{item:?}");
    assert!(item.fix.unwrap().contains("MySQL/MariaDB server"));
}

#[test]
fn silent_backend_times_out_with_a_clear_message() {
    // Listening, so the connect succeeds, but nothing ever answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = cfg(&["--backend", &listener.local_addr().unwrap().to_string()]);
    match backend_login(&c, Duration::from_millis(200)) {
        Err(BackendError::Io(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
            assert_eq!(e.to_string(), "timed out waiting for the server");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn backend_down_is_an_io_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = cfg(&["--backend", &format!("127.0.0.1:{port}")]);
    match backend_login(&c, Duration::from_secs(2)) {
        Err(BackendError::Io(_)) => {}
        other => panic!("{other:?}"),
    }
}

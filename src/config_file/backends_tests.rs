//! Several servers through the command line and the config file; one
//! server stays the simple case it always was.

use super::file::parse_file;
use super::tests::temp_file;
use super::*;
use crate::config::BackendRole;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const TABLES: &str = "users-file = \"u.json\"\nmonitor-user = \"monitor\"\n\
    monitor-password = \"monpw\"\n\n\
    [[backend]]\naddress = \"127.0.0.1:3441\"\n\n\
    [[backend]]\naddress = \"127.0.0.1:3442\"\nrole = \"replica\"\nweight = 2\nmax-lag = \"5s\"\n";

#[test]
fn one_backend_is_the_simple_case_on_the_command_line_and_in_a_file() {
    let inv = parse(["ringgate", "--users-file", "u"]).unwrap();
    assert_eq!(inv.config.backend, addr("127.0.0.1:3306"));
    assert_eq!(inv.config.backends.len(), 1);
    let text = inv.render_config();
    assert!(
        text.contains("backend = \"127.0.0.1:3306\"  # default"),
        "{text}"
    );
    let path = temp_file("one", "users-file = \"u\"\nbackend = \"127.0.0.1:3407\"\n");
    let inv = parse(["ringgate", "--config", path.to_str().unwrap()]).unwrap();
    assert_eq!(inv.config.backend, addr("127.0.0.1:3407"));
    assert_eq!(inv.origin("backend"), Origin::File);
}

#[test]
fn backend_repeats_on_the_command_line() {
    let inv = parse([
        "ringgate",
        "--users-file",
        "u",
        "--backend",
        "127.0.0.1:3441",
        "--backend",
        "127.0.0.1:3442,role=primary",
        "--monitor-user",
        "monitor",
    ])
    .unwrap();
    assert_eq!(inv.config.backends.len(), 2);
    // Everything goes to the configured primary until routing comes.
    assert_eq!(inv.config.backend, addr("127.0.0.1:3442"));
    assert_eq!(inv.config.monitor_interval, Duration::from_secs(1));
}

#[test]
fn backend_tables_in_a_file_print_back_and_read_back() {
    let path = temp_file("tables", TABLES);
    let inv = parse(["ringgate", "--config", path.to_str().unwrap()]).unwrap();
    let b = &inv.config.backends;
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].role, BackendRole::Auto);
    assert_eq!(b[0].weight, 1);
    assert_eq!(b[1].role, BackendRole::Replica);
    assert_eq!(b[1].max_lag, Some(Duration::from_secs(5)));
    assert_eq!(inv.config.backend, addr("127.0.0.1:3441"));
    assert_eq!(inv.config.monitor_password, "monpw");
    let text = inv.render_config();
    assert!(text.contains("monitor-password = \"********\""), "{text}");
    assert!(!text.contains("monpw"), "{text}");
    // What --print-config prints is a file --config takes.
    let again = parse_file(&text, "printed").unwrap();
    let back: Vec<BackendSpec> = again.backends.unwrap().into();
    assert_eq!(&back, b);
    // The command line replaces the file's list.
    let inv = parse([
        "ringgate",
        "--config",
        path.to_str().unwrap(),
        "--backend",
        "127.0.0.1:3443",
    ])
    .unwrap();
    assert_eq!(inv.config.backends.len(), 1);
}

#[test]
fn conflicts_and_bad_tables_are_refused_with_the_place() {
    let e = parse_file(
        "[[backend]]\naddress = \"127.0.0.1:1\"\nrole = \"boss\"\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(e.starts_with("f.toml:"), "{e}");
    let e = parse_file("backend = 3306\n", "f.toml").unwrap_err();
    assert!(e.contains("[[backend]] tables"), "{e}");
    let conflict = |args: &[&str]| {
        let mut all = vec!["ringgate", "--users-file", "u"];
        all.extend_from_slice(args);
        match parse(all) {
            Err(CliError::Conflict(m)) => m,
            other => panic!("{other:?}"),
        }
    };
    let m = conflict(&["--backend", "127.0.0.1:1", "--backend", "127.0.0.1:2"]);
    assert!(m.contains("--monitor-user"), "{m}");
    let m = conflict(&["--monitor-password", "x"]);
    assert!(
        m.contains("--monitor-password without --monitor-user"),
        "{m}"
    );
    let bad = parse([
        "ringgate",
        "--users-file",
        "u",
        "--monitor-interval",
        "10ms",
    ]);
    assert!(bad.is_err());
}

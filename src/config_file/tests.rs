use super::file::{kind_of, parse_file, Kind};
use super::*;
use crate::config::{LogFormat, ReadBufferMode};
use std::io::Write;
use std::time::Duration;

pub(super) fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ringgate-config-file-test-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ringgate.toml");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    path
}

fn file_err(text: &str) -> String {
    parse_file(text, "ringgate.toml").unwrap_err()
}

#[test]
fn command_is_consistent() {
    command().debug_assert();
}

#[test]
fn file_sets_values_and_satisfies_users_file() {
    let path = temp_file(
        "values",
        "# a comment\n\
         users-file = \"/etc/ringgate/users.json\"\n\
         read-buffers = \"heap\"\n\
         backend-pool-size = 8\n\
         drain-timeout = \"45s\"\n\
         metrics-listen = \"127.0.0.1:9104\"\n\
         allow-local-infile = true\n\
         log-format = \"json\"\n\
         socket = \"/run/ringgate/ringgate.sock\"\n",
    );
    let inv = parse(["ringgate", "--config", path.to_str().unwrap()]).unwrap();
    assert_eq!(inv.action, Action::Run);
    let c = &inv.config;
    assert_eq!(c.users_file, PathBuf::from("/etc/ringgate/users.json"));
    assert_eq!(c.read_buffers, ReadBufferMode::Heap);
    assert_eq!(c.backend_pool_size, 8);
    assert_eq!(c.drain_timeout, Duration::from_secs(45));
    assert_eq!(c.metrics_listen, Some("127.0.0.1:9104".parse().unwrap()));
    assert!(c.allow_local_infile);
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(c.socket, Some(PathBuf::from("/run/ringgate/ringgate.sock")));
    // Untouched keys keep their defaults.
    assert_eq!(c.read_buffer_count, 1024);
}

#[test]
fn flags_override_the_file_wherever_they_stand() {
    let path = temp_file(
        "precedence",
        "users-file = \"file.json\"\nbackend-pool-size = 8\nread-buffers = \"heap\"\n",
    );
    let p = path.to_str().unwrap();
    // Flag after --config.
    let inv = parse([
        "ringgate",
        "--config",
        p,
        "--backend-pool-size",
        "2",
        "--users-file=cli.json",
    ])
    .unwrap();
    assert_eq!(inv.config.backend_pool_size, 2);
    assert_eq!(inv.config.users_file, PathBuf::from("cli.json"));
    assert_eq!(inv.config.read_buffers, ReadBufferMode::Heap);
    // Flag before --config, and --config=PATH form.
    let inv = parse([
        "ringgate",
        "--read-buffers",
        "fixed",
        &format!("--config={p}"),
    ])
    .unwrap();
    assert_eq!(inv.config.read_buffers, ReadBufferMode::Fixed);
    assert_eq!(inv.config.backend_pool_size, 8);
    let origin = |k: &str| inv.origins.iter().find(|(id, _)| *id == k).unwrap().1;
    assert_eq!(origin("read_buffers"), Origin::Flag);
    assert_eq!(origin("backend_pool_size"), Origin::File);
    assert_eq!(origin("listen"), Origin::Default);
}

#[test]
fn check_subcommand_takes_the_same_flags_and_file() {
    let path = temp_file("check", "users-file = \"u.json\"\nworkers = 3\n");
    let inv = parse([
        "ringgate",
        "check",
        "--config",
        path.to_str().unwrap(),
        "--workers",
        "5",
    ])
    .unwrap();
    assert_eq!(inv.action, Action::Check);
    assert_eq!(inv.config.workers, Some(5));
    assert_eq!(inv.config.users_file, PathBuf::from("u.json"));
    // --help of the subcommand is clap's DisplayHelp.
    match parse(["ringgate", "check", "--help"]) {
        Err(CliError::Clap(e)) => {
            assert_eq!(e.kind(), ErrorKind::DisplayHelp);
            assert!(e.to_string().contains("Preflight"), "{e}");
        }
        other => panic!("expected help, got {other:?}"),
    }
}

#[test]
fn unknown_key_names_line_and_suggests() {
    let e = file_err("users-file = \"u.json\"\n\n# comment\nread-bufers = \"fixed\"\n");
    assert_eq!(
        e,
        "ringgate.toml:4: unknown key \"read-bufers\" (did you mean \"read-buffers\"?)"
    );
    let e = file_err("backend_pool_size = 3\n");
    assert_eq!(
        e,
        "ringgate.toml:1: unknown key \"backend_pool_size\" (keys use dashes: did you mean \"backend-pool-size\"?)"
    );
    let e = file_err("print-config = true\n");
    assert!(
        e.starts_with("ringgate.toml:1: unknown key \"print-config\""),
        "{e}"
    );
    let e = file_err("\n\n[proxy]\nlisten = \"x\"\n");
    assert!(
        e.starts_with("ringgate.toml:3: unknown key \"proxy\""),
        "{e}"
    );
    let e = file_err("zzzzzzzz = 1\n");
    assert_eq!(e, "ringgate.toml:1: unknown key \"zzzzzzzz\"");
}

#[test]
fn wrong_type_names_key_line_and_expected_type() {
    assert_eq!(
        file_err("\nbackend-pool-size = \"8\"\n"),
        "ringgate.toml:2: key \"backend-pool-size\" must be an integer, found a string \"8\""
    );
    assert_eq!(
        file_err("drain-timeout = 30\n"),
        "ringgate.toml:1: key \"drain-timeout\" must be a string such as \"5s\", found an integer 30"
    );
    assert_eq!(
        file_err("allow-local-infile = \"yes\"\n"),
        "ringgate.toml:1: key \"allow-local-infile\" must be true or false, found a string \"yes\""
    );
    assert_eq!(
        file_err("a = 1\nlisten = [\"127.0.0.1:1\"]\n"),
        "ringgate.toml:1: unknown key \"a\""
    );
    assert_eq!(
        file_err("listen = [\"127.0.0.1:1\"]\n"),
        "ringgate.toml:1: key \"listen\" must be a string such as \"127.0.0.1:3306\", found an array"
    );
}

#[test]
fn bad_value_names_key_line_and_reason() {
    let e = file_err("users-file = \"u\"\nread-buffers = \"fixd\"\n");
    assert_eq!(
        e,
        "ringgate.toml:2: invalid value \"fixd\" for key \"read-buffers\": possible values: fixed, heap, ring (did you mean \"fixed\"?)"
    );
    let e = file_err("\n\n\nread-buffer-count = 16385\n");
    assert!(
        e.starts_with("ringgate.toml:4: invalid value 16385 for key \"read-buffer-count\": must be between 1 and 16384"),
        "{e}"
    );
    let e = file_err("drain-timeout = \"5 parsecs\"\n");
    assert!(
        e.starts_with("ringgate.toml:1: invalid value \"5 parsecs\" for key \"drain-timeout\":"),
        "{e}"
    );
    let e = file_err("listen = \"localhost\"\n");
    assert!(
        e.starts_with("ringgate.toml:1: invalid value \"localhost\" for key \"listen\": invalid socket address"),
        "{e}"
    );
    let e = file_err("workers = -1\n");
    assert_eq!(
        e,
        "ringgate.toml:1: invalid value -1 for key \"workers\": must not be negative"
    );
}

#[test]
fn toml_syntax_errors_name_the_line() {
    let e = file_err("listen = \"127.0.0.1:1\"\nworkers = = 2\n");
    assert!(e.starts_with("ringgate.toml:2: "), "{e}");
    let e = file_err("workers = 1\nworkers = 2\n");
    assert!(e.starts_with("ringgate.toml:2: "), "{e}");
}

#[test]
fn missing_file_is_an_error() {
    match parse(["ringgate", "--config", "/nonexistent/ringgate.toml"]) {
        Err(CliError::File(m)) => {
            assert!(
                m.starts_with("cannot read config file /nonexistent/ringgate.toml"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_default_on_switch_can_be_turned_off_in_the_file_and_back_on_by_flag() {
    let path = temp_file(
        "keepalive",
        "users-file = \"u.json\"\ntcp-keepalive = false\ntcp-keepalive-idle = \"30s\"\n",
    );
    let p = path.to_str().unwrap();
    let inv = parse(["ringgate", "--config", p]).unwrap();
    assert!(!inv.config.tcp_keepalive);
    assert_eq!(inv.config.tcp_keepalive_idle, Duration::from_secs(30));
    assert!(inv
        .render_config()
        .contains("tcp-keepalive = false  # file"));
    let inv = parse(["ringgate", "--config", p, "--tcp-keepalive"]).unwrap();
    assert!(inv.config.tcp_keepalive);
    let e = file_err("tcp-keepalive = \"no\"\n");
    assert_eq!(
        e,
        "ringgate.toml:1: key \"tcp-keepalive\" must be true or false, found a string \"no\""
    );
}

#[test]
fn the_file_struct_has_exactly_the_flags_in_flag_order() {
    let flags: Vec<String> = settings()
        .iter()
        .map(|a| a.get_id().as_str().to_owned())
        .collect();
    assert_eq!(FileConfig::IDS, flags);
}

#[test]
fn users_file_is_required_from_the_flags_or_the_file() {
    match parse(["ringgate", "--workers", "2"]) {
        Err(CliError::Clap(e)) => {
            assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
            assert!(e.to_string().contains("--users-file <PATH>"), "{e}");
        }
        other => panic!("expected a missing --users-file, got {other:?}"),
    }
    assert!(matches!(
        parse(["ringgate", "check"]),
        Err(CliError::Clap(e)) if e.kind() == ErrorKind::MissingRequiredArgument
    ));
    let path = temp_file("users-only", "users-file = \"from-file.json\"\n");
    let inv = parse(["ringgate", "check", "--config", path.to_str().unwrap()]).unwrap();
    assert_eq!(inv.config.users_file, PathBuf::from("from-file.json"));
}

#[test]
fn integer_and_duration_values_use_the_flag_rules() {
    let e = file_err("read-buffer-size = 5000\n");
    assert_eq!(
        e,
        "ringgate.toml:1: invalid value 5000 for key \"read-buffer-size\": must be a multiple of 4096 between 4096 and 16777216"
    );
    let e = file_err("\ntcp-keepalive-idle = \"1500ms\"\n");
    assert_eq!(
        e,
        "ringgate.toml:2: invalid value \"1500ms\" for key \"tcp-keepalive-idle\": must be whole seconds between 1s and 32767s"
    );
    let e = file_err("tcp-keepalive-count = 0\n");
    assert_eq!(
        e,
        "ringgate.toml:1: invalid value 0 for key \"tcp-keepalive-count\": must be between 1 and 127"
    );
    let e = file_err("log-format = \"jsn\"\n");
    assert_eq!(
        e,
        "ringgate.toml:1: invalid value \"jsn\" for key \"log-format\": possible values: text, json (did you mean \"json\"?)"
    );
    let f = parse_file(
        "tcp-keepalive-idle = \"2m\"\nread-buffer-size = 8192\nbackend-read-timeout = \"1h\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        f.present(),
        [
            "read_buffer_size",
            "tcp_keepalive_idle",
            "backend_read_timeout"
        ]
    );
}

#[test]
fn values_starting_with_a_dash_survive() {
    let path = temp_file(
        "dash",
        "users-file = \"u.json\"\nbackend-identity = \"shared\"\nbackend-user = \"-odd\"\nlog-level = \"warn\"\n",
    );
    let inv = parse(["ringgate", "--config", path.to_str().unwrap()]).unwrap();
    assert_eq!(inv.config.backend_user, "-odd");
}

#[test]
fn print_config_masks_secrets_and_round_trips() {
    let path = temp_file(
        "print",
        "users-file = \"u.json\"\nbackend-identity = \"shared\"\nbackend-password = \"hunter2\"\nworkers = 2\nidle-timeout = \"10m\"\n",
    );
    let inv = parse([
        "ringgate",
        "--config",
        path.to_str().unwrap(),
        "--print-config",
        "--listen",
        "127.0.0.1:1",
    ])
    .unwrap();
    assert_eq!(inv.action, Action::PrintConfig);
    let text = inv.render_config();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        text.contains("backend-password = \"********\"  # file"),
        "{text}"
    );
    assert!(text.contains("listen = \"127.0.0.1:1\"  # flag"), "{text}");
    assert!(text.contains("workers = 2  # file"), "{text}");
    assert!(text.contains("idle-timeout = \"10m\"  # file"), "{text}");
    assert!(
        text.contains("read-buffer-count = 1024  # default"),
        "{text}"
    );
    assert!(
        text.contains("allow-local-infile = false  # default"),
        "{text}"
    );
    assert!(text.contains("# socket is unset"), "{text}");
    // What it prints is a valid config file that gives the same settings.
    let back = temp_file("print-back", &text);
    let again = parse(["ringgate", "--config", back.to_str().unwrap()]).unwrap();
    assert_eq!(again.config.listen, inv.config.listen);
    assert_eq!(again.config.workers, Some(2));
    assert_eq!(again.config.idle_timeout, inv.config.idle_timeout);
    assert_eq!(again.config.backend_password, MASK);
}

#[test]
fn a_backend_account_without_shared_identity_is_refused_with_the_fix() {
    let conflict = |r: Result<Invocation, CliError>| match r {
        Err(CliError::Conflict(m)) => m,
        other => panic!("expected a conflict, got {other:?}"),
    };
    let m = conflict(parse([
        "ringgate",
        "--users-file",
        "u",
        "--backend-user",
        "x",
    ]));
    assert!(m.contains("--backend-user given"), "{m}");
    assert!(m.contains("--backend-identity shared"), "{m}");
    assert!(m.contains("remove --backend-user"), "{m}");
    // From the config file and for `check` too.
    let path = temp_file(
        "conflict",
        "users-file = \"u\"\nbackend-password = \"pw\"\n",
    );
    let m = conflict(parse([
        "ringgate",
        "check",
        "--config",
        path.to_str().unwrap(),
    ]));
    assert!(m.contains("backend-password in the config file"), "{m}");
    assert!(!m.contains("\"pw\""), "{m}");
    // --print-config shows it instead of refusing.
    let inv = parse([
        "ringgate",
        "--config",
        path.to_str().unwrap(),
        "--print-config",
    ])
    .unwrap();
    assert!(inv
        .render_config()
        .contains("# error: ringgate would refuse to start"));
    // Fine with shared identity, and without the account.
    let ok = parse([
        "ringgate",
        "--users-file",
        "u",
        "--backend-user",
        "x",
        "--backend-identity",
        "shared",
    ])
    .unwrap();
    assert_eq!(ok.config.backend_identity, BackendIdentity::Shared);
    assert_eq!(ok.origin("backend_user"), Origin::Flag);
    let ok = parse(["ringgate", "--users-file", "u"]).unwrap();
    assert_eq!(ok.config.backend_identity, BackendIdentity::Passthrough);
}

#[test]
fn transaction_pooling_runs_on_every_buffer_mode() {
    for mode in ["fixed", "heap", "ring"] {
        let args = [
            "ringgate",
            "--users-file",
            "u",
            "--pooling",
            "transaction",
            "--read-buffers",
            mode,
        ];
        assert!(parse(args).is_ok(), "{mode}");
    }
}

#[test]
fn example_config_is_valid_and_mentions_every_key() {
    let text = include_str!("../../docs/deploy/ringgate.toml");
    parse_file(text, "docs/deploy/ringgate.toml").unwrap();
    for arg in settings() {
        let key = arg.get_long().unwrap();
        assert!(
            text.contains(&format!("\n{key} = ")) || text.contains(&format!("\n# {key} = ")),
            "docs/deploy/ringgate.toml does not document {key}"
        );
    }
}

#[test]
fn every_setting_has_a_known_kind() {
    // Integer-valued flags must be classified as integers, and nothing
    // else: a new flag with an unusual parser shows up here.
    let kinds: BTreeMap<String, Kind> = settings()
        .iter()
        .map(|a| (a.get_long().unwrap().to_owned(), kind_of(a)))
        .collect();
    for k in [
        "workers",
        "read-buffer-size",
        "read-buffer-count",
        "max-connections",
        "backend-pool-size",
        "backend-max-connections",
        "backend-max-prepared",
        "max-prepared-statements",
        "max-prepared-bytes",
        "max-packet-size",
        "busy-poll-us",
    ] {
        assert_eq!(kinds[k], Kind::Integer, "{k}");
    }
    assert_eq!(kinds["allow-local-infile"], Kind::Bool);
    assert_eq!(kinds["tcp-keepalive"], Kind::Bool);
    assert_eq!(kinds["tcp-keepalive-count"], Kind::Integer);
    assert_eq!(kinds["drain-timeout"], Kind::Text);
    assert_eq!(kinds["read-buffers"], Kind::Text);
}

#[test]
fn the_old_prepared_statement_key_names_its_replacement() {
    let e = file_err("tx-move-prepared-statements = false\n");
    assert!(
        e.starts_with(
            "ringgate.toml:1: unknown key \"tx-move-prepared-statements\" (replaced by \
             tx-prepared-statements"
        ),
        "{e}"
    );
    assert!(e.contains("\"pin\""), "{e}");
    let path = temp_file(
        "tx-prepared",
        "users-file = \"u.json\"\ntx-prepared-statements = \"pin\"\n",
    );
    let inv = parse(["ringgate", "--config", path.to_str().unwrap()]).unwrap();
    assert_eq!(
        inv.config.tx_prepared_statements,
        crate::config::TxPreparedStatements::Pin
    );
    assert!(inv
        .render_config()
        .contains("tx-prepared-statements = \"pin\"  # file"));
}

#[test]
fn causal_reads_are_off_by_default_and_take_three_modes() {
    let parse = |args: &[&str]| {
        let mut all = vec!["ringgate", "--users-file", "u"];
        all.extend_from_slice(args);
        parse(all).map(|i| i.config)
    };
    let d = parse(&[]).unwrap();
    assert_eq!(d.causal_reads, crate::config::CausalReads::Off);
    assert_eq!(d.causal_read_timeout, Duration::from_secs(1));
    for (flag, mode) in [
        ("off", crate::config::CausalReads::Off),
        ("session", crate::config::CausalReads::Session),
        ("global", crate::config::CausalReads::Global),
    ] {
        let c = parse(&["--causal-reads", flag, "--causal-read-timeout", "250ms"]).unwrap();
        assert_eq!(
            (c.causal_reads, c.causal_read_timeout),
            (mode, Duration::from_millis(250))
        );
    }
    assert!(parse(&["--causal-reads", "always"]).is_err());
    let path = temp_file(
        "causal",
        "users-file = \"u\"\ncausal-reads = \"global\"\ncausal-read-timeout = \"2s\"\n",
    );
    let c = parse(&["--config", path.to_str().unwrap()]).unwrap();
    assert_eq!(
        (c.causal_reads, c.causal_read_timeout),
        (crate::config::CausalReads::Global, Duration::from_secs(2))
    );
}

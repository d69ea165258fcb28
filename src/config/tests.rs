//! The command line: clap's consistency, the defaults, the parsing of the
//! options with modes, the sizes derived from them (locked memory, read
//! buffers) and the checks that refuse a configuration.

use super::*;
use clap::CommandFactory;

#[test]
fn cli_is_consistent() {
    Config::command().debug_assert();
}

#[test]
fn defaults() {
    let c = Config::try_parse_from(["ringgate", "--users-file", "u.json"]).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:15306");
    assert_eq!(c.read_buffers, ReadBufferMode::Fixed);
    assert_eq!(c.read_buffer_size, 16384);
    assert_eq!(c.read_buffer_count, 1024);
    assert_eq!(c.backend_wait_timeout, Duration::from_secs(5));
    assert!(c.tcp_keepalive);
    assert_eq!(c.tcp_keepalive_idle, Duration::from_secs(60));
    assert_eq!(c.tcp_keepalive_interval, Duration::from_secs(10));
    assert_eq!(c.tcp_keepalive_count, 6);
    assert_eq!(c.tcp_user_timeout, Duration::from_secs(120));
    assert_eq!(c.backend_read_timeout, Duration::ZERO);
    assert_eq!(c.backend_identity, BackendIdentity::Passthrough);
}

#[test]
fn pooling_takes_two_modes_and_defaults_to_transaction() {
    let parse = |args: &[&str]| {
        let mut all = vec!["ringgate", "--users-file", "u"];
        all.extend_from_slice(args);
        Config::try_parse_from(all)
    };
    assert_eq!(parse(&[]).unwrap().pooling, Pooling::Transaction);
    assert_eq!(
        parse(&["--pooling", "transaction"]).unwrap().pooling,
        Pooling::Transaction
    );
    assert_eq!(
        parse(&["--pooling", "session"]).unwrap().pooling,
        Pooling::Session
    );
    assert!(parse(&["--pooling", "statement"]).is_err());
}

#[test]
fn prepared_statements_move_by_default_and_pin_on_request() {
    let parse = |args: &[&str]| {
        let mut all = vec!["ringgate", "--users-file", "u"];
        all.extend_from_slice(args);
        crate::config_file::parse(all)
    };
    let default = parse(&["--pooling", "transaction"]).unwrap();
    assert_eq!(
        default.config.tx_prepared_statements,
        TxPreparedStatements::Move
    );
    assert!(!default.renamed_flag);
    let pin = parse(&["--tx-prepared-statements", "pin"]).unwrap();
    assert_eq!(pin.config.tx_prepared_statements, TxPreparedStatements::Pin);
    assert!(parse(&["--tx-prepared-statements", "pinned"]).is_err());
    // The old switch still works, asks for moving, and is reported so that
    // `main` can name its replacement; the last flag given wins as usual.
    let old = parse(&["--tx-move-prepared-statements"]).unwrap();
    assert_eq!(
        old.config.tx_prepared_statements,
        TxPreparedStatements::Move
    );
    assert!(old.renamed_flag);
    let later = parse(&[
        "--tx-move-prepared-statements",
        "--tx-prepared-statements",
        "pin",
    ])
    .unwrap();
    assert_eq!(
        later.config.tx_prepared_statements,
        TxPreparedStatements::Pin
    );
    // --help hides it: one flag, two documented choices.
    let help = crate::config_file::command().render_long_help().to_string();
    assert!(help.contains("--tx-prepared-statements"), "{help}");
    assert!(!help.contains("--tx-move-prepared-statements"), "{help}");
}

#[test]
fn backend_identity_takes_two_modes() {
    let parse = |v: &str| {
        Config::try_parse_from(["ringgate", "--users-file", "u", "--backend-identity", v])
    };
    assert_eq!(
        parse("shared").unwrap().backend_identity,
        BackendIdentity::Shared
    );
    assert_eq!(
        parse("passthrough").unwrap().backend_identity,
        BackendIdentity::Passthrough
    );
    assert!(parse("per-user").is_err());
}

#[test]
fn tcp_keepalive_switch_takes_an_optional_bool() {
    let parse = |extra: &[&str]| {
        let mut args = vec!["ringgate", "--users-file", "u"];
        args.extend_from_slice(extra);
        Config::try_parse_from(args)
    };
    assert!(parse(&["--tcp-keepalive"]).unwrap().tcp_keepalive);
    assert!(parse(&["--tcp-keepalive=true"]).unwrap().tcp_keepalive);
    assert!(!parse(&["--tcp-keepalive=false"]).unwrap().tcp_keepalive);
    assert!(parse(&["--tcp-keepalive=maybe"]).is_err());
    assert!(parse(&["--tcp-keepalive-idle", "1500ms"]).is_err());
    assert!(parse(&["--tcp-keepalive-count", "0"]).is_err());
    let c = parse(&["--tcp-user-timeout", "0", "--backend-read-timeout", "10m"]).unwrap();
    assert_eq!(c.tcp_user_timeout, Duration::ZERO);
    assert_eq!(c.backend_read_timeout, Duration::from_secs(600));
}

#[test]
fn debug_masks_the_password() {
    let c = Config::try_parse_from([
        "ringgate",
        "--users-file",
        "u.json",
        "--backend-password",
        "hunter2",
    ])
    .unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("hunter2"), "{dbg}");
    assert!(dbg.contains("********"), "{dbg}");
}

#[test]
fn locked_memory_is_workers_times_slots_times_size() {
    let c = Config::try_parse_from(["ringgate", "--users-file", "u", "--workers", "4"]).unwrap();
    assert_eq!(c.locked_memory_bytes(), 4 * 1024 * 16384);
    let c = Config::try_parse_from([
        "ringgate",
        "--users-file",
        "u",
        "--workers",
        "4",
        "--read-buffers",
        "heap",
    ])
    .unwrap();
    assert_eq!(c.locked_memory_bytes(), 0);
}

#[test]
fn busy_poll_is_off_by_default_and_bounded() {
    let c = Config::try_parse_from(["ringgate", "--users-file", "u"]).unwrap();
    assert_eq!(c.busy_poll(), None);
    let c =
        Config::try_parse_from(["ringgate", "--users-file", "u", "--busy-poll-us", "50"]).unwrap();
    assert_eq!(c.busy_poll(), Some(Duration::from_micros(50)));
    for bad in ["10001", "-1", "x"] {
        let r = Config::try_parse_from(["ringgate", "--users-file", "u", "--busy-poll-us", bad]);
        assert!(r.is_err(), "{bad} was accepted");
    }
}

#[test]
fn rejects_too_many_buffers() {
    let r = Config::try_parse_from([
        "ringgate",
        "--users-file",
        "u.json",
        "--read-buffer-count",
        "16385",
    ]);
    assert!(r.is_err());
}

/// Backend TLS grows the default read-buffer size too.
#[test]
fn backend_tls_sizes_the_default_read_buffer() {
    let args = ["ringgate", "--users-file", "u", "--backend-tls", "required"];
    let inv = crate::config_file::parse(args).unwrap();
    assert_eq!(inv.config.read_buffer_size, TLS_MIN_READ_BUFFER);
    assert_eq!(inv.read_buffer_resized, Some(16384));
    let inv =
        crate::config_file::parse(args.iter().chain(&["--read-buffer-size", "16384"])).unwrap();
    assert_eq!(inv.config.read_buffer_size, 16384);
    let inv = crate::config_file::parse(["ringgate", "--users-file", "u"]).unwrap();
    assert_eq!(inv.read_buffer_resized, None);
}

/// TLS grows the default read-buffer size to hold a record, and only
/// the default: a size from the flag or the config file is kept (and
/// refused when too small).
#[test]
fn tls_sizes_the_default_read_buffer_only() {
    let tls = [
        "ringgate",
        "--users-file",
        "u",
        "--tls-cert",
        "c",
        "--tls-key",
        "k",
    ];
    let inv = crate::config_file::parse(tls).unwrap();
    assert_eq!(inv.config.read_buffer_size, TLS_MIN_READ_BUFFER);
    assert_eq!(inv.read_buffer_resized, Some(16384));
    assert!(inv.config.tls_files().unwrap().is_some());

    let inv =
        crate::config_file::parse(tls.iter().chain(&["--read-buffer-size", "16384"])).unwrap();
    assert_eq!(inv.config.read_buffer_size, 16384);
    assert_eq!(inv.read_buffer_resized, None);
    let e = inv.config.tls_files().unwrap_err();
    assert!(e.contains("--read-buffer-size 24576"), "{e}");

    let inv =
        crate::config_file::parse(tls.iter().chain(&["--read-buffer-size", "65536"])).unwrap();
    assert_eq!(inv.config.read_buffer_size, 65536);

    let dir = std::env::temp_dir().join(format!("ringgate-tls-size-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("r.toml");
    std::fs::write(&file, "read-buffer-size = 16384\n").unwrap();
    let file_arg = file.to_str().unwrap();
    let inv = crate::config_file::parse(tls.iter().chain(&["--config", file_arg])).unwrap();
    assert_eq!(inv.config.read_buffer_size, 16384);
    std::fs::remove_dir_all(&dir).unwrap();

    let plain = crate::config_file::parse(["ringgate", "--users-file", "u"]).unwrap();
    assert_eq!(plain.config.read_buffer_size, 16384);
    assert_eq!(plain.read_buffer_resized, None);
    assert!(plain.config.tls_session_tickets);
}

#[test]
fn verify_identity_is_refused_with_several_servers() {
    let parse = |tls: &str, extra: &[&str]| {
        let mut args = vec!["ringgate", "--users-file", "u", "--backend-tls", tls];
        args.extend_from_slice(extra);
        let mut c = Config::try_parse_from(args).unwrap();
        c.resolve_backends()
    };
    let two = [
        "--monitor-user",
        "m",
        "--backend",
        "127.0.0.1:1",
        "--backend",
        "127.0.0.1:2",
    ];
    let e = parse("verify-identity", &two).unwrap_err();
    assert!(e.contains("use verify-ca"), "{e}");
    assert!(parse("verify-ca", &two).is_ok());
    assert!(parse("verify-identity", &["--backend", "127.0.0.1:1"]).is_ok());
}

#[test]
fn the_read_write_split_is_off_by_default_and_read_only_functions_are_names() {
    let parse = |extra: &[&str]| {
        let mut args = vec!["ringgate", "--users-file", "u"];
        args.extend_from_slice(extra);
        Config::try_parse_from(args)
    };
    let c = parse(&[]).unwrap();
    assert!(!c.read_write_split);
    assert!(read_only_function_list(&c.read_only_functions).is_empty());
    let c = parse(&[
        "--read-write-split",
        "--read-only-functions",
        "price_of, shop.Tax,",
    ])
    .unwrap();
    assert!(c.read_write_split);
    assert_eq!(
        read_only_function_list(&c.read_only_functions),
        ["PRICE_OF".into(), "SHOP.TAX".into()] as [Box<str>; 2]
    );
    for bad in ["a.b.c", "f()", "`f`", "shop.", "my func"] {
        assert!(parse(&["--read-only-functions", bad]).is_err(), "{bad}");
    }
    // The config file's value is checked too.
    let mut c = parse(&[]).unwrap();
    c.read_only_functions = "f(x)".into();
    assert!(c
        .resolve_backends()
        .unwrap_err()
        .contains("--read-only-functions"));
}

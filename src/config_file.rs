//! The command line as a whole: `--config FILE` (TOML), `--print-config`,
//! and the `check` subcommand, on top of the flags of [`Config`].
//!
//! The file takes the same keys as the long flags (`read-buffers = "fixed"`,
//! `backend-pool-size = 8`, `drain-timeout = "30s"`). It is validated key by
//! key against the flags' own clap definitions, so a key has exactly the
//! values its flag has, and each problem is reported as `FILE:LINE: ...`.
//! The validated entries then become `--key=value` arguments placed before
//! the real command-line arguments; with `args_override_self` the later
//! (command-line) occurrence wins.
//!
//! Precedence, highest first: command-line flag, environment variable (only
//! `RINGGATE_BACKEND_PASSWORD`), config file, built-in default.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, Command, CommandFactory, FromArgMatches};
use toml::Spanned;

use crate::config::Config;

/// What `--print-config` prints instead of a secret.
pub const MASK: &str = "********";

/// Keys whose values are never printed.
const SECRET_KEYS: &[&str] = &["backend-password"];

/// Long options that are not settings, so not accepted in the file.
const NOT_SETTINGS: &[&str] = &["help", "version", "config", "print-config"];

/// What the invocation asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Run the proxy.
    Run,
    /// `--print-config`: print the effective configuration and exit.
    PrintConfig,
    /// `ringgate check`: the preflight report.
    Check,
}

/// Where an effective setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Default,
    File,
    Env,
    Flag,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Origin::Default => "default",
            Origin::File => "file",
            Origin::Env => "env",
            Origin::Flag => "flag",
        }
    }
}

/// How a key's value is written in TOML.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A switch (`allow-local-infile = true`).
    Bool,
    /// A number (`backend-pool-size = 8`).
    Integer,
    /// Everything else is a string: addresses, paths, durations, modes.
    Text,
}

fn kind_of(arg: &Arg) -> Kind {
    use std::any::TypeId;
    let t = arg.get_value_parser().type_id();
    if matches!(arg.get_action(), ArgAction::SetTrue) || t == TypeId::of::<bool>() {
        return Kind::Bool;
    }
    let integers = [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
    ];
    if integers.iter().any(|i| t == *i) {
        Kind::Integer
    } else {
        Kind::Text
    }
}

/// One effective setting, for `--print-config`.
#[derive(Debug, Clone)]
struct Effective {
    key: String,
    kind: Kind,
    /// The raw value as given (e.g. "5s"); `None` when unset.
    value: Option<String>,
    origin: Origin,
}

/// A parsed command line.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub action: Action,
    pub config: Config,
    /// `--config PATH`, when given.
    pub config_path: Option<PathBuf>,
    effective: Vec<Effective>,
}

/// Why the command line could not be parsed.
#[derive(Debug)]
pub enum CliError {
    /// A flag problem, or `--help`/`--version`: `clap::Error::exit` prints
    /// it and exits with the right code.
    Clap(clap::Error),
    /// A config-file problem: `FILE:LINE: ...`.
    File(String),
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Clap(e) => write!(f, "{e}"),
            CliError::File(m) => f.write_str(m),
        }
    }
}

/// One validated key of the config file.
#[derive(Debug, Clone)]
struct FileEntry {
    key: String,
    /// The arguments it becomes: `--key=value`, `--key`, or none (`false`).
    args: Vec<OsString>,
}

/// Settings that the file may set: every long flag of [`Config`].
fn settings() -> Vec<Arg> {
    Config::command()
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| !NOT_SETTINGS.contains(&l)))
        .cloned()
        .collect()
}

fn with_file_args(cmd: Command) -> Command {
    cmd.args_override_self(true).arg(
        Arg::new("config")
            .long("config")
            .value_name("PATH")
            .value_parser(clap::value_parser!(PathBuf))
            .help(
                "Read settings from this TOML file. Its keys are the long flag names \
                 (read-buffers = \"fixed\", backend-pool-size = 8, drain-timeout = \"30s\"); \
                 flags given on the command line override it",
            ),
    )
}

/// The full command: the proxy's flags, `--config`, `--print-config` and
/// the `check` subcommand.
pub fn command() -> Command {
    let check = with_file_args(Config::command())
        .name("check")
        .about(
            "Preflight: check that this host can run ringgate well with these settings \
             (kernel and io_uring, locked-memory and fd limits, backend login, users file). \
             Prints one OK/WARN/FAIL line per check and exits non-zero on any FAIL",
        )
        .long_about(None);
    with_file_args(Config::command())
        .arg(
            Arg::new("print-config")
                .long("print-config")
                .action(ArgAction::SetTrue)
                .help(
                    "Print the effective configuration (flags, environment, --config file and \
                     defaults merged) as TOML, secrets masked, and exit",
                ),
        )
        .subcommand(check)
        .subcommand_negates_reqs(true)
        .args_conflicts_with_subcommands(true)
        .disable_help_subcommand(true)
}

/// Parses `args` (including the program name) the way `main` does.
pub fn parse<I, T>(args: I) -> Result<Invocation, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.is_empty() {
        args.push("ringgate".into());
    }
    let is_check = args.get(1).is_some_and(|a| a == "check");
    let head = if is_check { 2 } else { 1 };
    let cli: Vec<OsString> = args[head..].to_vec();

    let config_path = find_config_flag(&cli);
    let file = match &config_path {
        Some(p) => load_file(p).map_err(CliError::File)?,
        None => Vec::new(),
    };

    // Environment beats the file: drop file values whose flag's variable is set.
    let env_set = |arg: &Arg| {
        arg.get_env()
            .and_then(std::env::var_os)
            .is_some_and(|v| !v.is_empty())
    };
    let all = settings();
    let mut from_file = Vec::new();
    let mut file_keys = Vec::new();
    for entry in file {
        let Some(arg) = all
            .iter()
            .find(|a| a.get_long() == Some(entry.key.as_str()))
        else {
            continue;
        };
        if env_set(arg) {
            continue;
        }
        file_keys.push(entry.key.clone());
        from_file.extend(entry.args);
    }

    let mut argv: Vec<OsString> = args[..head].to_vec();
    argv.extend(from_file);
    argv.extend(cli.iter().cloned());
    let matches = command()
        .try_get_matches_from(argv)
        .map_err(CliError::Clap)?;

    let (action, m) = match matches.subcommand() {
        Some(("check", sub)) => (Action::Check, sub),
        _ if matches.get_flag("print-config") => (Action::PrintConfig, &matches),
        _ => (Action::Run, &matches),
    };
    let config = Config::from_arg_matches(m).map_err(CliError::Clap)?;

    let effective = all
        .iter()
        .map(|arg| {
            let key = arg.get_long().unwrap_or_default().to_owned();
            let id = arg.get_id().as_str();
            let value = m
                .get_raw(id)
                .and_then(|mut v| v.next_back())
                .map(|v| v.to_string_lossy().into_owned());
            let origin = match m.value_source(id) {
                Some(ValueSource::CommandLine) => {
                    if on_command_line(&cli, &key) || !file_keys.contains(&key) {
                        Origin::Flag
                    } else {
                        Origin::File
                    }
                }
                Some(ValueSource::EnvVariable) => Origin::Env,
                _ => Origin::Default,
            };
            Effective {
                kind: kind_of(arg),
                key,
                value,
                origin,
            }
        })
        .collect();

    Ok(Invocation {
        action,
        config,
        config_path,
        effective,
    })
}

/// The last `--config PATH` / `--config=PATH` before a `--`.
fn find_config_flag(cli: &[OsString]) -> Option<PathBuf> {
    let mut found = None;
    let mut it = cli.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--config" {
            found = it.next().map(PathBuf::from);
        } else if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            found = Some(PathBuf::from(v));
        }
    }
    found
}

fn on_command_line(cli: &[OsString], key: &str) -> bool {
    let flag = format!("--{key}");
    let with_eq = format!("--{key}=");
    cli.iter()
        .take_while(|a| *a != "--")
        .filter_map(|a| a.to_str())
        .any(|a| a == flag || a.starts_with(&with_eq))
}

fn load_file(path: &Path) -> Result<Vec<FileEntry>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    parse_file(&text, &path.display().to_string())
}

/// 1-based line of byte offset `pos` in `text`.
fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Validates a config file's text; `origin` names it in messages.
fn parse_file(text: &str, origin: &str) -> Result<Vec<FileEntry>, String> {
    let table: BTreeMap<Spanned<String>, Spanned<toml::Value>> =
        toml::from_str(text).map_err(|e| {
            let msg = e.message().trim().to_owned();
            match e.span() {
                Some(span) => format!("{origin}:{}: {msg}", line_of(text, span.start)),
                None => format!("{origin}: {msg}"),
            }
        })?;
    let mut items: Vec<_> = table.into_iter().collect();
    items.sort_by_key(|(k, _)| k.span().start);

    let all = settings();
    let mut out = Vec::with_capacity(items.len());
    for (key, value) in items {
        let name = key.get_ref().as_str();
        let at = format!("{origin}:{}", line_of(text, key.span().start));
        let Some(arg) = all.iter().find(|a| a.get_long() == Some(name)) else {
            return Err(format!(
                "{at}: unknown key \"{name}\"{}",
                suggest(name, &all)
            ));
        };
        let value_at = format!("{origin}:{}", line_of(text, value.span().start));
        let args =
            entry_args(arg, name, value.get_ref()).map_err(|m| format!("{value_at}: {m}"))?;
        out.push(FileEntry {
            key: name.to_owned(),
            args,
        });
    }
    Ok(out)
}

fn toml_type(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

fn expected(arg: &Arg, kind: Kind) -> String {
    match kind {
        Kind::Bool => "true or false".into(),
        Kind::Integer => "an integer".into(),
        Kind::Text => {
            let name = arg
                .get_value_names()
                .and_then(|n| n.first())
                .map(|n| n.as_str().to_owned())
                .unwrap_or_default();
            match name.as_str() {
                "DURATION" => "a string such as \"5s\"".into(),
                "ADDR" => "a string such as \"127.0.0.1:3306\"".into(),
                "PATH" => "a string (a path)".into(),
                _ => "a string".into(),
            }
        }
    }
}

/// The arguments one file entry becomes, after checking its type and value.
fn entry_args(arg: &Arg, key: &str, value: &toml::Value) -> Result<Vec<OsString>, String> {
    let kind = kind_of(arg);
    let wrong = || {
        let shown = match value {
            toml::Value::String(s) => format!(" {s:?}"),
            toml::Value::Integer(i) => format!(" {i}"),
            _ => String::new(),
        };
        format!(
            "key \"{key}\" must be {}, found {}{shown}",
            expected(arg, kind),
            toml_type(value)
        )
    };
    let switch = matches!(arg.get_action(), ArgAction::SetTrue);
    let raw = match (kind, value) {
        // A plain switch has no `=false` form: absent is false.
        (Kind::Bool, toml::Value::Boolean(true)) if switch => {
            return Ok(vec![format!("--{key}").into()])
        }
        (Kind::Bool, toml::Value::Boolean(false)) if switch => return Ok(Vec::new()),
        (Kind::Bool, toml::Value::Boolean(b)) => b.to_string(),
        (Kind::Integer, toml::Value::Integer(i)) if *i < 0 => {
            return Err(format!(
                "invalid value {i} for key \"{key}\": must not be negative"
            ));
        }
        (Kind::Integer, toml::Value::Integer(i)) => i.to_string(),
        (Kind::Text, toml::Value::String(s)) => s.clone(),
        _ => return Err(wrong()),
    };
    check_value(arg, key, &raw)?;
    Ok(vec![format!("--{key}={raw}").into()])
}

/// Runs the flag's own value parser on `raw`.
fn check_value(arg: &Arg, key: &str, raw: &str) -> Result<(), String> {
    let probe = Command::new("ringgate")
        .no_binary_name(true)
        .arg(arg.clone().required(false));
    let err = match probe.try_get_matches_from([format!("--{key}={raw}")]) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    let shown = if SECRET_KEYS.contains(&key) {
        MASK.to_owned()
    } else {
        format!("{raw:?}")
    };
    let why = match err.kind() {
        ErrorKind::ValueValidation => std::error::Error::source(&err)
            .map(|s| s.to_string())
            .unwrap_or_else(|| first_line(&err)),
        ErrorKind::InvalidValue => {
            let mut why = String::from("possible values:");
            if let Some(ContextValue::Strings(v)) = err.get(ContextKind::ValidValue) {
                why.push(' ');
                why.push_str(&v.join(", "));
            }
            let suggested = match err.get(ContextKind::SuggestedValue) {
                Some(ContextValue::String(s)) => Some(s.clone()),
                Some(ContextValue::Strings(v)) => v.first().cloned(),
                _ => None,
            };
            if let Some(s) = suggested {
                let _ = write!(why, " (did you mean \"{s}\"?)");
            }
            why
        }
        _ => first_line(&err),
    };
    Err(format!("invalid value {shown} for key \"{key}\": {why}"))
}

fn first_line(err: &clap::Error) -> String {
    let text = err.to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// ` (did you mean "read-buffers"?)`, or nothing.
fn suggest(name: &str, all: &[Arg]) -> String {
    let longs = all.iter().filter_map(Arg::get_long);
    let dashed = name.replace('_', "-");
    if dashed != name && all.iter().any(|a| a.get_long() == Some(dashed.as_str())) {
        return format!(" (keys use dashes: did you mean \"{dashed}\"?)");
    }
    if NOT_SETTINGS.contains(&name) {
        return " (not a setting: only usable on the command line)".into();
    }
    let best = longs
        .map(|l| (levenshtein(name, l), l))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, l)) if d <= 3.max(name.len() / 4) => format!(" (did you mean \"{l}\"?)"),
        _ => String::new(),
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

impl Invocation {
    /// The effective configuration as TOML that `--config` accepts back,
    /// each line commented with where its value came from; secrets masked.
    pub fn render_config(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# ringgate effective configuration");
        match &self.config_path {
            Some(p) => {
                let _ = writeln!(out, "# config file: {}", p.display());
            }
            None => {
                let _ = writeln!(out, "# config file: none (--config not given)");
            }
        }
        let _ = writeln!(
            out,
            "# each value's origin: flag > env > file > default; secrets are masked\n"
        );
        for e in &self.effective {
            let origin = e.origin.as_str();
            let Some(v) = &e.value else {
                let note = match e.key.as_str() {
                    "workers" => format!(" (one per CPU: {} here)", self.config.worker_count()),
                    _ => String::new(),
                };
                let _ = writeln!(out, "# {} is unset{note}", e.key);
                continue;
            };
            let shown = if SECRET_KEYS.contains(&e.key.as_str()) {
                if v.is_empty() {
                    toml_string("")
                } else {
                    toml_string(MASK)
                }
            } else {
                match e.kind {
                    Kind::Bool | Kind::Integer => v.clone(),
                    Kind::Text => toml_string(v),
                }
            };
            let _ = writeln!(out, "{} = {shown}  # {origin}", e.key);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LogFormat, ReadBufferMode};
    use std::io::Write;
    use std::time::Duration;

    fn temp_file(name: &str, text: &str) -> PathBuf {
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
        let origin = |k: &str| inv.effective.iter().find(|e| e.key == k).unwrap().origin;
        assert_eq!(origin("read-buffers"), Origin::Flag);
        assert_eq!(origin("backend-pool-size"), Origin::File);
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
            "ringgate.toml:2: invalid value \"fixd\" for key \"read-buffers\": possible values: fixed, heap (did you mean \"fixed\"?)"
        );
        let e = file_err("\n\n\nread-buffer-count = 16385\n");
        assert!(
            e.starts_with("ringgate.toml:4: invalid value \"16385\" for key \"read-buffer-count\": must be between 1 and 16384"),
            "{e}"
        );
        let e = file_err("drain-timeout = \"5 parsecs\"\n");
        assert!(
            e.starts_with(
                "ringgate.toml:1: invalid value \"5 parsecs\" for key \"drain-timeout\":"
            ),
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
    fn values_starting_with_a_dash_survive() {
        let path = temp_file(
            "dash",
            "users-file = \"u.json\"\nbackend-user = \"-odd\"\nlog-level = \"warn\"\n",
        );
        let inv = parse(["ringgate", "--config", path.to_str().unwrap()]).unwrap();
        assert_eq!(inv.config.backend_user, "-odd");
    }

    #[test]
    fn print_config_masks_secrets_and_round_trips() {
        let path = temp_file(
            "print",
            "users-file = \"u.json\"\nbackend-password = \"hunter2\"\nworkers = 2\nidle-timeout = \"10m\"\n",
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
    fn example_config_is_valid_and_mentions_every_key() {
        let text = include_str!("../docs/deploy/ringgate.toml");
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
            "max-packet-size",
        ] {
            assert_eq!(kinds[k], Kind::Integer, "{k}");
        }
        assert_eq!(kinds["allow-local-infile"], Kind::Bool);
        assert_eq!(kinds["tcp-keepalive"], Kind::Bool);
        assert_eq!(kinds["tcp-keepalive-count"], Kind::Integer);
        assert_eq!(kinds["drain-timeout"], Kind::Text);
        assert_eq!(kinds["read-buffers"], Kind::Text);
    }
}

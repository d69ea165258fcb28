//! The command line as a whole: `--config FILE` (TOML), `--print-config`,
//! and the `check` subcommand, on top of the flags of [`Config`].
//!
//! The file takes the same keys as the long flags (`read-buffers = "fixed"`,
//! `backend-pool-size = 8`, `drain-timeout = "30s"`). serde deserializes it
//! into [`FileConfig`], whose value types validate with the very functions
//! the flags use (so a key accepts exactly what its flag accepts). clap
//! parses the command line and the environment; then every setting that was
//! not given there takes the file's value, if the file has one.
//!
//! Precedence, highest first: command-line flag, environment variable (only
//! `RINGGATE_BACKEND_PASSWORD`), config file, built-in default.
//!
//! Each problem in the file is reported as `FILE:LINE: ...` naming the key:
//! a first pass reads the file as spanned TOML to find unknown keys (with a
//! "did you mean") and wrongly typed values, a second lets serde type it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, Command, CommandFactory, FromArgMatches};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::config::{
    self, BackendIdentity, BackendTls, Config, LogFormat, Pooling, ReadBufferMode,
};

/// What `--print-config` prints instead of a secret.
pub const MASK: &str = "********";

/// Keys whose values are never printed.
const SECRET_KEYS: &[&str] = &["backend-password"];

/// Stands in for `--users-file` while clap parses, when the file may give
/// it; `parse` refuses to go on when neither did.
const USERS_FILE_UNSET: &str = "-";

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

/// A parsed command line.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub action: Action,
    pub config: Config,
    /// `--config PATH`, when given.
    pub config_path: Option<PathBuf>,
    /// Each setting's key and where its value came from, in flag order.
    origins: Vec<(&'static str, Origin)>,
    /// TLS grew the default read-buffer size from this many bytes
    /// ([`Config::size_read_buffers_for_tls`]); `main` logs it.
    pub read_buffer_resized: Option<u32>,
}

/// Why the command line could not be parsed.
#[derive(Debug)]
pub enum CliError {
    /// A flag problem, or `--help`/`--version`: `clap::Error::exit` prints
    /// it and exits with the right code.
    Clap(clap::Error),
    /// A config-file problem: `FILE:LINE: ...`.
    File(String),
    /// Settings that contradict each other, wherever they came from.
    Conflict(String),
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Clap(e) => write!(f, "{e}"),
            CliError::File(m) | CliError::Conflict(m) => f.write_str(m),
        }
    }
}

// ---------------------------------------------------------------------------
// The file's typed form
// ---------------------------------------------------------------------------

/// Declares [`FileConfig`] with one optional field per setting, in flag
/// order, and its two conversions: onto a [`Config`] (only the settings the
/// command line and environment left alone) and back from one (for
/// `--print-config`). A field is `plain` when the `Config` field holds the
/// value itself and `optional` when it holds an `Option`.
macro_rules! file_config {
    ($($kind:ident $field:ident: $ty:ty,)*) => {
        /// The config file, as serde reads it: every key optional, unknown
        /// keys refused, values validated by their flag's rules.
        #[derive(Debug, Default, Deserialize, Serialize)]
        #[serde(rename_all = "kebab-case", deny_unknown_fields)]
        pub struct FileConfig {
            $(
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
        }

        impl FileConfig {
            /// clap ids (the `Config` field names), in flag order.
            const IDS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// The clap ids of the settings the file gives.
            fn present(&self) -> Vec<&'static str> {
                let mut ids = Vec::new();
                $(
                    if self.$field.is_some() {
                        ids.push(stringify!($field));
                    }
                )*
                ids
            }

            /// Sets every value the file has onto `config`, unless
            /// `explicit(id)` says the command line or environment set it.
            fn apply(self, config: &mut Config, explicit: impl Fn(&str) -> bool) {
                $(
                    if let Some(v) = self.$field {
                        if !explicit(stringify!($field)) {
                            file_config!(@set $kind config.$field, v);
                        }
                    }
                )*
            }

            /// The file that gives exactly `config`.
            fn from_config(config: &Config) -> FileConfig {
                FileConfig {
                    $($field: file_config!(@get $kind config.$field),)*
                }
            }
        }
    };
    (@set plain $dst:expr, $v:expr) => { $dst = $v.into() };
    (@set optional $dst:expr, $v:expr) => { $dst = Some($v.into()) };
    (@get plain $src:expr) => { Some($src.clone().into()) };
    (@get optional $src:expr) => { $src.clone().map(Into::into) };
}

file_config! {
    plain listen: SocketAddr,
    plain reuse_port_handover: bool,
    optional workers: usize,
    plain backend: SocketAddr,
    plain backend_identity: BackendIdentity,
    plain pooling: Pooling,
    plain backend_user: String,
    plain backend_password: String,
    optional backend_rsa_public_key: PathBuf,
    plain backend_tls: BackendTls,
    optional backend_tls_ca: PathBuf,
    plain users_file: PathBuf,
    optional rsa_key: PathBuf,
    plain read_buffers: ReadBufferMode,
    plain read_buffer_size: BufferSize,
    plain read_buffer_count: BufferCount,
    plain max_connections: usize,
    plain backend_pool_size: usize,
    plain backend_max_connections: usize,
    optional backend_max_prepared: u64,
    plain tx_move_prepared_statements: bool,
    plain backend_wait_timeout: HumanDuration,
    plain backend_idle_timeout: HumanDuration,
    plain backend_connect_timeout: HumanDuration,
    plain handshake_timeout: HumanDuration,
    plain idle_timeout: HumanDuration,
    plain client_write_timeout: HumanDuration,
    plain tcp_keepalive: bool,
    plain tcp_keepalive_idle: KeepaliveTime,
    plain tcp_keepalive_interval: KeepaliveTime,
    plain tcp_keepalive_count: KeepaliveCount,
    plain tcp_user_timeout: HumanDuration,
    plain backend_read_timeout: HumanDuration,
    plain max_packet_size: u64,
    plain busy_poll_us: BusyPollUs,
    plain drain_timeout: HumanDuration,
    optional socket: PathBuf,
    plain allow_local_infile: bool,
    plain hold_idle_slots: bool,
    plain no_client_compression: bool,
    optional tls_cert: PathBuf,
    optional tls_key: PathBuf,
    optional tls_client_ca: PathBuf,
    plain tls_session_tickets: bool,
    plain require_secure_transport: bool,
    optional metrics_listen: SocketAddr,
    plain log_level: String,
    plain log_format: LogFormat,
}

/// Declares a newtype that serde reads through `$from` (the file's raw
/// type, named again as a string for serde's attribute) and the flag's own
/// parser, and writes back as `$from` with `$show`.
macro_rules! validated {
    ($(#[$doc:meta])* $name:ident($inner:ty) from $from:ty = $from_name:literal,
     parse $parse:path, show $show:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Deserialize, Serialize)]
        #[serde(try_from = $from_name, into = $from_name)]
        pub struct $name($inner);

        impl TryFrom<$from> for $name {
            type Error = String;
            fn try_from(raw: $from) -> Result<Self, String> {
                $parse(&raw.to_string()).map($name)
            }
        }
        impl From<$name> for $from {
            fn from(v: $name) -> $from {
                $show(v.0)
            }
        }
        impl From<$name> for $inner {
            fn from(v: $name) -> $inner {
                v.0
            }
        }
        impl From<$inner> for $name {
            fn from(v: $inner) -> $name {
                $name(v)
            }
        }
    };
}

fn show_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn show_u32(v: u32) -> u64 {
    u64::from(v)
}

validated!(
    /// A duration such as "5s" or "2m" ("0" where the flag allows off).
    HumanDuration(Duration) from String = "String",
    parse config::parse_duration, show show_duration
);
validated!(
    /// A keepalive time: whole seconds, 1s..=32767s.
    KeepaliveTime(Duration) from String = "String",
    parse config::parse_keepalive_secs, show show_duration
);
validated!(
    /// Bytes per read buffer: a multiple of 4096.
    BufferSize(u32) from u64 = "u64",
    parse config::parse_buffer_size, show show_u32
);
validated!(
    /// Registered read buffers per worker: 1..=16384.
    BufferCount(u32) from u64 = "u64",
    parse config::parse_buffer_count, show show_u32
);
validated!(
    /// Keepalive probes: 1..=127.
    KeepaliveCount(u32) from u64 = "u64",
    parse config::parse_keepalive_count, show show_u32
);

validated!(
    /// Busy-poll budget in microseconds: 0..=10000.
    BusyPollUs(u32) from u64 = "u64",
    parse config::parse_busy_poll_us, show show_u32
);

// ---------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------

/// Settings that the file may set: every long flag of [`Config`].
fn settings() -> Vec<Arg> {
    Config::command()
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| !NOT_SETTINGS.contains(&l)))
        .cloned()
        .collect()
}

fn with_file_args(cmd: Command) -> Command {
    cmd.args_override_self(true)
        // May come from the file instead; `parse` checks it after the merge.
        .mut_arg("users_file", |a| {
            a.required(false)
                .default_value(USERS_FILE_UNSET)
                .hide_default_value(true)
        })
        .arg(
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
    let matches = command()
        .try_get_matches_from(args)
        .map_err(CliError::Clap)?;
    let (action, m) = match matches.subcommand() {
        Some(("check", sub)) => (Action::Check, sub),
        _ if matches.get_flag("print-config") => (Action::PrintConfig, &matches),
        _ => (Action::Run, &matches),
    };
    let config_path = m.get_one::<PathBuf>("config").cloned();
    let file = match &config_path {
        Some(p) => load_file(p).map_err(CliError::File)?,
        None => FileConfig::default(),
    };
    let explicit = |id: &str| {
        matches!(
            m.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    let in_file = file.present();
    if !explicit("users_file") && !in_file.contains(&"users_file") {
        let mut cmd = match action {
            Action::Check => command().find_subcommand("check").cloned(),
            _ => None,
        }
        .unwrap_or_else(command);
        return Err(CliError::Clap(cmd.error(
            ErrorKind::MissingRequiredArgument,
            "the following required arguments were not provided:\n  --users-file <PATH> \
             (or users-file in the --config file)",
        )));
    }
    let mut config = Config::from_arg_matches(m).map_err(CliError::Clap)?;
    file.apply(&mut config, explicit);
    let read_buffer_resized = config.size_read_buffers_for_tls(
        explicit("read_buffer_size") || in_file.contains(&"read_buffer_size"),
    );
    let origins = FileConfig::IDS
        .iter()
        .map(|&id| {
            let origin = match m.value_source(id) {
                Some(ValueSource::CommandLine) => Origin::Flag,
                Some(ValueSource::EnvVariable) => Origin::Env,
                _ if in_file.contains(&id) => Origin::File,
                _ => Origin::Default,
            };
            (id, origin)
        })
        .collect();
    let inv = Invocation {
        action,
        config,
        config_path,
        origins,
        read_buffer_resized,
    };
    // --print-config shows the settings even when they conflict (it says
    // so in a comment): it is how one finds out where a value came from.
    if action != Action::PrintConfig {
        inv.check_identity().map_err(CliError::Conflict)?;
    }
    Ok(inv)
}

impl Invocation {
    /// Where a setting's value came from (`id` is the `Config` field name).
    pub fn origin(&self, id: &str) -> Origin {
        self.origins
            .iter()
            .find(|(k, _)| *k == id)
            .map_or(Origin::Default, |(_, o)| *o)
    }

    /// `--backend-user` and `--backend-password` name the one account of
    /// shared identity. Given with passthrough identity (the default) they
    /// would be silently unused, and a deployment that relied on them
    /// would change who its clients are on the backend without a word: so
    /// they are refused, with both ways out.
    fn check_identity(&self) -> Result<(), String> {
        if self.config.backend_identity != BackendIdentity::Passthrough {
            return Ok(());
        }
        let set: Vec<String> = [
            ("backend_user", "--backend-user"),
            ("backend_password", "--backend-password"),
        ]
        .iter()
        .filter_map(|&(id, flag)| {
            let how = match self.origin(id) {
                Origin::Default => return None,
                Origin::Flag => flag.to_owned(),
                Origin::Env => "RINGGATE_BACKEND_PASSWORD".to_owned(),
                Origin::File => format!("{} in the config file", &flag[2..]),
            };
            Some(how)
        })
        .collect();
        if set.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} given, but --backend-identity is passthrough (the default): each client logs in \
             to the backend as itself, so there is no shared backend account. Either add \
             --backend-identity shared (backend-identity = \"shared\" in the config file) to keep \
             every client on that one account, or remove {} (see \"Backend identity\" in \
             docs/operations.md)",
            set.join(" and "),
            set.join(" and "),
        ))
    }
}

// ---------------------------------------------------------------------------
// Reading the file
// ---------------------------------------------------------------------------

fn load_file(path: &Path) -> Result<FileConfig, String> {
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

/// The file's entries with their places, for messages.
type Entries = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// Reads a config file's text; `origin` names it in messages.
fn parse_file(text: &str, origin: &str) -> Result<FileConfig, String> {
    let at = |pos: usize| format!("{origin}:{}", line_of(text, pos));
    // Pass 1: syntax, keys and TOML types, with the line of each.
    let entries: Entries = toml::from_str(text).map_err(|e| {
        let msg = e.message().trim().to_owned();
        match e.span() {
            Some(span) => format!("{}: {msg}", at(span.start)),
            None => format!("{origin}: {msg}"),
        }
    })?;
    let mut items: Vec<_> = entries.iter().collect();
    items.sort_by_key(|(k, _)| k.span().start);
    let all = settings();
    for (key, value) in items {
        let name = key.get_ref().as_str();
        let Some(arg) = all.iter().find(|a| a.get_long() == Some(name)) else {
            return Err(format!(
                "{}: unknown key \"{name}\"{}",
                at(key.span().start),
                suggest(name)
            ));
        };
        check_type(arg, name, value.get_ref())
            .map_err(|m| format!("{}: {m}", at(value.span().start)))?;
    }
    // Pass 2: serde, with each value checked by its flag's rules.
    toml::from_str::<FileConfig>(text).map_err(|e| {
        let msg = e.message().trim().to_owned();
        let Some(span) = e.span() else {
            return format!("{origin}: {msg}");
        };
        let entry = entries
            .iter()
            .find(|(_, v)| v.span().contains(&span.start) || v.span() == span);
        match entry {
            Some((k, v)) => {
                let key = k.get_ref();
                let shown = if SECRET_KEYS.contains(&key.as_str()) {
                    format!("{MASK:?}")
                } else {
                    v.get_ref().to_string()
                };
                format!(
                    "{}: invalid value {shown} for key \"{key}\": {msg}",
                    at(v.span().start)
                )
            }
            None => format!("{}: {msg}", at(span.start)),
        }
    })
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

fn expected(arg: &Arg, kind: Kind) -> &'static str {
    match kind {
        Kind::Bool => "true or false",
        Kind::Integer => "an integer",
        Kind::Text => match arg
            .get_value_names()
            .and_then(|n| n.first())
            .map(|n| n.as_str())
        {
            Some("DURATION") => "a string such as \"5s\"",
            Some("ADDR") => "a string such as \"127.0.0.1:3306\"",
            Some("PATH") => "a string (a path)",
            _ => "a string",
        },
    }
}

/// The value's TOML type must be the one its flag takes; integers are
/// never negative. Everything else serde checks.
fn check_type(arg: &Arg, key: &str, value: &toml::Value) -> Result<(), String> {
    let kind = kind_of(arg);
    match (kind, value) {
        (Kind::Bool, toml::Value::Boolean(_)) | (Kind::Text, toml::Value::String(_)) => Ok(()),
        (Kind::Integer, toml::Value::Integer(i)) if *i < 0 => Err(format!(
            "invalid value {i} for key \"{key}\": must not be negative"
        )),
        (Kind::Integer, toml::Value::Integer(_)) => Ok(()),
        _ => {
            let shown = match value {
                toml::Value::String(s) if !SECRET_KEYS.contains(&key) => format!(" {s:?}"),
                toml::Value::Integer(i) => format!(" {i}"),
                _ => String::new(),
            };
            Err(format!(
                "key \"{key}\" must be {}, found {}{shown}",
                expected(arg, kind),
                toml_type(value)
            ))
        }
    }
}

/// ` (did you mean "read-buffers"?)`, or nothing.
fn suggest(name: &str) -> String {
    let keys: Vec<String> = FileConfig::IDS
        .iter()
        .map(|id| id.replace('_', "-"))
        .collect();
    let dashed = name.replace('_', "-");
    if dashed != name && keys.contains(&dashed) {
        return format!(" (keys use dashes: did you mean \"{dashed}\"?)");
    }
    if NOT_SETTINGS.contains(&name) {
        return " (not a setting: only usable on the command line)".into();
    }
    let best = keys
        .iter()
        .map(|k| (strsim::levenshtein(name, k), k))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, k)) if d <= 3.max(name.len() / 4) => format!(" (did you mean \"{k}\"?)"),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------
// --print-config
// ---------------------------------------------------------------------------

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
        if let Err(conflict) = self.check_identity() {
            let _ = writeln!(out, "# error: ringgate would refuse to start: {conflict}\n");
        }
        // serde writes the values, so they read back as they were given.
        let values = match toml::Value::try_from(FileConfig::from_config(&self.config)) {
            Ok(toml::Value::Table(t)) => t,
            _ => toml::Table::new(),
        };
        for &(id, origin) in &self.origins {
            let key = id.replace('_', "-");
            let Some(v) = values.get(&key) else {
                let note = match id {
                    "workers" => format!(" (one per CPU: {} here)", self.config.worker_count()),
                    _ => String::new(),
                };
                let _ = writeln!(out, "# {key} is unset{note}");
                continue;
            };
            let shown = match v {
                toml::Value::String(s) if SECRET_KEYS.contains(&key.as_str()) && !s.is_empty() => {
                    toml::Value::String(MASK.into())
                }
                _ => v.clone(),
            };
            let _ = writeln!(out, "{key} = {shown}  # {}", origin.as_str());
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
            "backend-max-prepared",
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
}

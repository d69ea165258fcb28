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
//! `RINGGATE_BACKEND_PASSWORD` and `RINGGATE_MONITOR_PASSWORD`), config
//! file, built-in default.
//!
//! `backend` is the one key that takes a list: an address, or
//! `[[backend]]` tables (`src/config/backends.rs`).
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
    self, BackendIdentity, BackendList, BackendSpec, BackendTls, CausalReads, Config,
    DirectDescriptors, LogFormat, OnUserRemoved, Pooling, ReadBufferMode, TxPreparedStatements,
};

mod file;

use file::load_file;

/// What `--print-config` prints instead of a secret.
pub const MASK: &str = "********";

/// Keys whose values are never printed.
const SECRET_KEYS: &[&str] = &["backend-password", "monitor-password"];

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
    /// The command line used [`config::RENAMED_TX_MOVE_FLAG`]; `main`
    /// names its replacement.
    pub renamed_flag: bool,
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
/// value itself and `optional` when it holds an `Option`. `as "key"` gives
/// a key (and clap id) other than the field's name.
macro_rules! file_config {
    ($($kind:ident $field:ident $(as $key:literal)?: $ty:ty,)*) => {
        /// The config file, as serde reads it: every key optional, unknown
        /// keys refused, values validated by their flag's rules.
        #[derive(Debug, Default, Deserialize, Serialize)]
        #[serde(rename_all = "kebab-case", deny_unknown_fields)]
        pub struct FileConfig {
            $(
                #[serde(default, skip_serializing_if = "Option::is_none")]
                $(#[serde(rename = $key)])?
                pub $field: Option<$ty>,
            )*
        }

        impl FileConfig {
            /// clap ids (the `Config` field names), in flag order.
            const IDS: &'static [&'static str] = &[$(file_config!(@id $field $($key)?)),*];

            /// The clap ids of the settings the file gives.
            fn present(&self) -> Vec<&'static str> {
                let mut ids = Vec::new();
                $(
                    if self.$field.is_some() {
                        ids.push(file_config!(@id $field $($key)?));
                    }
                )*
                ids
            }

            /// Sets every value the file has onto `config`, unless
            /// `explicit(id)` says the command line or environment set it.
            fn apply(self, config: &mut Config, explicit: impl Fn(&str) -> bool) {
                $(
                    if let Some(v) = self.$field {
                        if !explicit(file_config!(@id $field $($key)?)) {
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
    (@id $field:ident) => { stringify!($field) };
    (@id $field:ident $key:literal) => { $key };
    (@set plain $dst:expr, $v:expr) => { $dst = $v.into() };
    (@set optional $dst:expr, $v:expr) => { $dst = Some($v.into()) };
    (@get plain $src:expr) => { Some($src.clone().into()) };
    (@get optional $src:expr) => { $src.clone().map(Into::into) };
}

file_config! {
    plain listen: SocketAddr,
    plain reuse_port_handover: bool,
    optional workers: usize,
    plain backends as "backend": Backends,
    plain backend_identity: BackendIdentity,
    plain pooling: Pooling,
    plain backend_user: String,
    plain backend_password: String,
    optional backend_rsa_public_key: PathBuf,
    plain backend_tls: BackendTls,
    optional backend_tls_ca: PathBuf,
    plain monitor_user: String,
    plain monitor_password: String,
    plain monitor_interval: MonitorInterval,
    plain switchover_hold_timeout: HumanDuration,
    optional writer_wait_timeout: HumanDuration,
    plain read_write_split: bool,
    plain read_only_functions: String,
    plain causal_reads: CausalReads,
    plain causal_read_timeout: HumanDuration,
    plain transaction_replay: bool,
    plain transaction_replay_max_size: u64,
    plain users_file: PathBuf,
    optional rsa_key: PathBuf,
    plain read_buffers: ReadBufferMode,
    plain read_buffer_size: BufferSize,
    plain read_buffer_count: BufferCount,
    plain large_read_size: LargeReadSize,
    plain max_connections: usize,
    plain backend_pool_size: usize,
    plain backend_max_connections: usize,
    plain backend_max_connections_per_user: usize,
    optional backend_max_prepared: u64,
    plain max_prepared_statements: u64,
    plain max_prepared_bytes: u64,
    plain tx_prepared_statements: TxPreparedStatements,
    plain on_user_removed: OnUserRemoved,
    plain backend_wait_timeout: HumanDuration,
    plain backend_idle_timeout: HumanDuration,
    plain backend_connect_timeout: HumanDuration,
    plain handshake_timeout: HumanDuration,
    plain idle_timeout: HumanDuration,
    plain idle_transaction_timeout: HumanDuration,
    plain idle_pinned_timeout: HumanDuration,
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
    plain direct_descriptors: DirectDescriptors,
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
    /// Bytes per read of a large result: 0 (off) or a multiple of 4096.
    LargeReadSize(u32) from u64 = "u64",
    parse config::parse_large_read_size, show show_u32
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
    /// How often the monitor checks each server: 100ms or more.
    MonitorInterval(Duration) from String = "String",
    parse config::parse_monitor_interval, show show_duration
);

/// The `backend` key's servers, checked by the flag's own rules.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(try_from = "BackendList", into = "BackendList")]
pub struct Backends(Vec<BackendSpec>);

impl TryFrom<BackendList> for Backends {
    type Error = String;
    fn try_from(list: BackendList) -> Result<Self, String> {
        Vec::<BackendSpec>::try_from(list).map(Backends)
    }
}
impl From<Backends> for BackendList {
    fn from(b: Backends) -> BackendList {
        BackendList::from(b.0.as_slice())
    }
}
impl From<Backends> for Vec<BackendSpec> {
    fn from(b: Backends) -> Vec<BackendSpec> {
        b.0
    }
}
impl From<Vec<BackendSpec>> for Backends {
    fn from(v: Vec<BackendSpec>) -> Backends {
        Backends(v)
    }
}

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
    // The old switch asks for what is now the default: it is read as the
    // new flag's value, so a command line that gives both still takes the
    // last one, and `main` says what to write instead.
    let mut renamed_flag = false;
    for a in args.iter_mut().skip(1) {
        if a == config::RENAMED_TX_MOVE_FLAG {
            *a = "--tx-prepared-statements=move".into();
            renamed_flag = true;
        }
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
    let backends_ok = config.resolve_backends();
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
        renamed_flag,
    };
    // --print-config shows the settings even when they conflict (it says
    // so in a comment): it is how one finds out where a value came from.
    if action != Action::PrintConfig {
        inv.check_identity().map_err(CliError::Conflict)?;
        backends_ok.map_err(CliError::Conflict)?;
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
        let mut config = self.config.clone();
        if let Err(conflict) = self.check_identity().and(config.resolve_backends()) {
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
mod backends_tests;
#[cfg(test)]
mod tests;

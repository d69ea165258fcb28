//! Log set-up: `--log-format text|json` to stderr, filtered by `--log-level`
//! (or `RUST_LOG`). ANSI colours only when stderr is a terminal.
//!
//! Nothing here logs secrets; callers never pass the backend password or a
//! scramble to a log macro, and `Config`'s `Debug` masks the password.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Returns a warning to log once logging is
/// up when `level` is not a valid filter (then `info` is used).
pub fn init(level: &str, format: LogFormat) -> Option<String> {
    let mut warning = None;
    let filter = match EnvFilter::try_from_default_env() {
        Ok(f) => f,
        Err(_) => EnvFilter::try_new(level).unwrap_or_else(|e| {
            warning = Some(format!(
                "invalid --log-level {level:?} ({e}); using \"info\""
            ));
            EnvFilter::new("info")
        }),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        // One JSON object per line: timestamp, level, target, message and
        // the event's fields at the top level.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_ansi(false)
            .try_init(),
    };
    // A subscriber already installed (tests) is not an error.
    drop(result);
    warning
}

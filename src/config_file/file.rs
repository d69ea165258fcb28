//! Reading `--config FILE`: a first pass over the file as spanned TOML finds unknown keys (with
//! a "did you mean") and wrongly typed values and reports them as `FILE:LINE: ...`; only then
//! does serde type it into [`FileConfig`], whose errors carry no line of their own.

use super::*;

pub(super) fn load_file(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    parse_file(&text, &path.display().to_string())
}

/// 1-based line of byte offset `pos` in `text`.
pub(super) fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The file's entries with their places, for messages.
pub(super) type Entries = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// Reads a config file's text; `origin` names it in messages.
pub(super) fn parse_file(text: &str, origin: &str) -> Result<FileConfig, String> {
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
pub(super) enum Kind {
    /// A switch (`allow-local-infile = true`).
    Bool,
    /// A number (`backend-pool-size = 8`).
    Integer,
    /// Everything else is a string: addresses, paths, durations, modes.
    Text,
    /// A repeatable flag (`backend`): a string, or an array (of tables).
    List,
}

pub(super) fn kind_of(arg: &Arg) -> Kind {
    use std::any::TypeId;
    let t = arg.get_value_parser().type_id();
    if matches!(arg.get_action(), ArgAction::SetTrue) || t == TypeId::of::<bool>() {
        return Kind::Bool;
    }
    if matches!(arg.get_action(), ArgAction::Append) {
        return Kind::List;
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

pub(super) fn toml_type(v: &toml::Value) -> &'static str {
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

pub(super) fn expected(arg: &Arg, kind: Kind) -> &'static str {
    match kind {
        Kind::Bool => "true or false",
        Kind::Integer => "an integer",
        Kind::List => "a string such as \"127.0.0.1:3306\", or [[backend]] tables",
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
pub(super) fn check_type(arg: &Arg, key: &str, value: &toml::Value) -> Result<(), String> {
    let kind = kind_of(arg);
    match (kind, value) {
        (Kind::Bool, toml::Value::Boolean(_))
        | (Kind::Text | Kind::List, toml::Value::String(_))
        | (Kind::List, toml::Value::Array(_)) => Ok(()),
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
pub(super) fn suggest(name: &str) -> String {
    let keys: Vec<String> = FileConfig::IDS
        .iter()
        .map(|id| id.replace('_', "-"))
        .collect();
    let dashed = name.replace('_', "-");
    if dashed != name && keys.contains(&dashed) {
        return format!(" (keys use dashes: did you mean \"{dashed}\"?)");
    }
    if name == &config::RENAMED_TX_MOVE_FLAG[2..] {
        // Not a plain rename: `false`, the old default, meant "pin".
        return " (replaced by tx-prepared-statements: \"move\", now the default, moves \
                statements between backend connections; \"pin\" pins the session at its first \
                prepare, as tx-move-prepared-statements = false did)"
            .into();
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

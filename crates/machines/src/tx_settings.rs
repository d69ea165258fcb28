//! Transaction pooling: the session settings a client wants, per variable,
//! and the one `SET` that gives a backend connection carrying another
//! session's settings these instead: on lease, only the differences are
//! applied, so a lease costs no round trip when nothing differs.
//!
//! A session records each replayable `SET` item: a system variable with a
//! constant value, `SET NAMES …`, `SET CHARACTER SET …`, and `SET SESSION
//! TRANSACTION …`. A connection the session gives back carries the session's
//! [`Settings`]; the next session that leases it runs
//! [`Settings::diff_from`] on it, never a COM_RESET_CONNECTION: only the
//! variables that differ are set, and a variable only the connection has is
//! set back.
//!
//! Setting back is where the trap is: `DEFAULT` is the *global* value,
//! which for the character-set variables is not what the connection started
//! with (the handshake's collation set those), and for `sql_mode` not
//! either when the client asked for CLIENT_IGNORE_SPACE (the handshake adds
//! IGNORE_SPACE). So the character-set variables go back through `SET NAMES`
//! of the handshake's own character set and collation ([`handshake_names`]),
//! and a connection whose state cannot be set back (an unknown handshake
//! collation, sql_mode under IGNORE_SPACE) is not leased with a diff.
//!
//! Values are the statement's own text, replayed as they were sent; only
//! constants are taken (no `@`, no call, no `?`), since an expression such
//! as `CONCAT(@@sql_mode, ',X')` means something else on a connection in
//! another state. A `SET` with anything else is not replayable: the caller
//! pins the session.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use wire::constants::CLIENT_IGNORE_SPACE;
use wire::lexer::{Scope, SetItem};

/// The variables that `SET NAMES` sets (and the handshake's collation).
const CHARSET_VARS: [&str; 4] = [
    "character_set_client",
    "character_set_connection",
    "character_set_results",
    "collation_connection",
];

/// A session's replayable settings; cheap to clone (shared).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings(Option<Arc<Inner>>);

#[derive(Debug, PartialEq, Eq, Hash)]
struct Inner {
    /// `NAMES …` or `CHARACTER SET …`, as it follows `SET ` (the last one
    /// the session ran; it set every character-set variable).
    names: Option<String>,
    /// Lower-cased variable name → the value's source text.
    vars: BTreeMap<String, String>,
    fingerprint: u64,
}

/// The server's session-state trackers, turned on for the sessions of
/// clients that negotiated CLIENT_SESSION_TRACK: every OK then reports the
/// system variables a statement changed (`'*'`), the schema, the
/// transaction state and characteristics, and "some other state changed"
/// (`state_change`: user variables, temporary tables, prepared statements).
/// A connection without the capability sends none of it, whatever these
/// variables say (checked on MariaDB 10.11: no SESSION_STATE_CHANGED flag,
/// no block), so every backend connection negotiates it.
pub const TRACKERS: [(&str, &str); 4] = [
    ("session_track_schema", "ON"),
    ("session_track_state_change", "ON"),
    ("session_track_system_variables", "'*'"),
    ("session_track_transaction_info", "'CHARACTERISTICS'"),
];

/// The one tracker turned on for the sessions of clients that did not
/// negotiate CLIENT_SESSION_TRACK: the proxy's own net. State the lexer
/// cannot see (a stored function or a trigger that sets a user variable,
/// a named lock taken in a routine, a temporary table made by a procedure)
/// raises SERVER_SESSION_STATE_CHANGED, which pins the session; the
/// relay strips the flag and the blocks from what such a client gets.
/// Only this one: the transaction-info tracker raises the flag in the
/// result sets of every transaction, which would read as state.
pub const NET_TRACKER: (&str, &str) = ("session_track_state_change", "ON");

/// Causal reads, for the sessions of clients that did not negotiate
/// CLIENT_SESSION_TRACK: the server's default system-variables list plus
/// `last_gtid`, which MariaDB then reports in the OK of every statement
/// (or COMMIT) that binlogged. The defaults stay so that a `SET` of one of
/// them to an expression is still replayed from the tracked value; the
/// relay strips every block from what such a client sees. (Clients with
/// CLIENT_SESSION_TRACK have `'*'`, which includes `last_gtid`: checked on
/// MariaDB 10.11.) A `last_gtid` block comes alone, with no state-change
/// block, so it never pins.
pub const CAUSAL_TRACKER: (&str, &str) = (
    "session_track_system_variables",
    "'autocommit,character_set_client,character_set_connection,character_set_results,time_zone,last_gtid'",
);

/// Why a `SET` cannot be replayed per variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReplayable(pub String);

impl Settings {
    fn parts(&self) -> (Option<&str>, Option<&BTreeMap<String, String>>) {
        match &self.0 {
            Some(i) => (i.names.as_deref(), Some(&i.vars)),
            None => (None, None),
        }
    }

    fn names(&self) -> Option<&str> {
        self.parts().0
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.parts().1.and_then(|v| v.get(name)).map(String::as_str)
    }

    fn var_names(&self) -> impl Iterator<Item = &String> {
        self.parts().1.into_iter().flat_map(|v| v.keys())
    }

    /// `wait_timeout` as the session set it, in whole seconds (None: not
    /// set, `DEFAULT`, or not a plain number). While a session holds no
    /// backend connection no server counts its idle time, so transaction
    /// pooling ends it after this long itself (`Session::on_tick`), as the
    /// server ends a direct connection. MariaDB takes 0 as 1.
    pub fn wait_timeout(&self) -> Option<std::time::Duration> {
        let v = self.var("wait_timeout")?.trim().trim_matches('\'');
        let secs: u64 = v.parse().ok()?;
        Some(std::time::Duration::from_secs(secs.max(1)))
    }

    /// How many variables (and NAMES) it sets.
    pub fn len_hint(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |i| i.vars.len() + usize::from(i.names.is_some()))
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// 0 for no settings, else a hash of them (never 0 or `u64::MAX`):
    /// equal settings, equal fingerprints.
    pub fn fingerprint(&self) -> u64 {
        self.0.as_ref().map_or(0, |i| i.fingerprint)
    }

    fn build(names: Option<String>, vars: BTreeMap<String, String>) -> Settings {
        if names.is_none() && vars.is_empty() {
            return Settings(None);
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        names.hash(&mut h);
        vars.hash(&mut h);
        let fingerprint = h.finish().clamp(1, u64::MAX - 1);
        Settings(Some(Arc::new(Inner {
            names,
            vars,
            fingerprint,
        })))
    }

    /// The settings of a fresh session: the trackers ([`TRACKERS`]) when
    /// the client negotiated CLIENT_SESSION_TRACK, else the proxy's own
    /// ([`NET_TRACKER`], with [`CAUSAL_TRACKER`] when `causal` reads are
    /// on).
    ///
    /// Every session starts with one of these, so each worker thread
    /// builds them once and hands out clones of its own: a session costs a
    /// pointer, not a map (ten thousand idle clients would otherwise carry
    /// ten thousand copies), and no other thread touches the count.
    pub fn initial(session_track: bool, causal: bool) -> Settings {
        thread_local! {
            static INITIAL: [Settings; 3] = [
                Settings::of_trackers(std::slice::from_ref(&NET_TRACKER)),
                Settings::of_trackers(&TRACKERS),
                Settings::of_trackers(&[NET_TRACKER, CAUSAL_TRACKER]),
            ];
        }
        let which = match (session_track, causal) {
            (true, _) => 1,
            (false, false) => 0,
            (false, true) => 2,
        };
        INITIAL.with(|initial| initial[which].clone())
    }

    /// Whether the system-variables tracker these settings turn on reports
    /// `last_gtid` (`'*'`, or a list that names it); false when they
    /// leave the tracker as the server starts it (its default list does
    /// not name it).
    pub fn tracks_last_gtid(&self) -> bool {
        self.var("session_track_system_variables").is_some_and(|v| {
            let v = v.trim().trim_matches(|c| c == '\'' || c == '"');
            v.split(',')
                .map(str::trim)
                .any(|n| n == "*" || n.eq_ignore_ascii_case("last_gtid"))
        })
    }

    fn of_trackers(trackers: &[(&str, &str)]) -> Settings {
        let vars = trackers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        Settings::build(None, vars)
    }

    /// The settings after a `SET` of `items` ran on a connection that
    /// carried these. `collation`: the handshake's collation id (a `SET
    /// NAMES` of exactly it is no setting at all).
    #[cfg(test)]
    pub fn with_items(&self, items: &[SetItem], collation: u8) -> Result<Settings, NotReplayable> {
        self.with_items_tracked(items, collation, &[])
    }

    /// [`Settings::with_items`], where a variable set to an expression takes
    /// the value the server's system-variables tracker reported for it in
    /// the statement's OK packet (`tracked`: name, value), replayed as a
    /// literal.
    pub fn with_items_tracked(
        &self,
        items: &[SetItem],
        collation: u8,
        tracked: &[(String, String)],
    ) -> Result<Settings, NotReplayable> {
        let (names, vars) = self.parts();
        let mut names = names.map(str::to_owned);
        let mut vars = vars.cloned().unwrap_or_default();
        for item in items {
            match item {
                SetItem::Variable {
                    scope: Scope::Global,
                    ..
                } => {}
                SetItem::Variable { name, value, .. } => {
                    let name = name.to_ascii_lowercase();
                    if constant(value) {
                        vars.insert(name, value.trim().to_owned());
                    } else if let Some((_, v)) = tracked.iter().find(|(n, _)| *n == name) {
                        let assigned = wire::session_vars::assignment(&name, Some(v));
                        let literal = assigned.split_once(" = ").map_or("", |(_, l)| l);
                        vars.insert(name, literal.to_owned());
                    } else {
                        return Err(NotReplayable(format!("SET {name} = {value}")));
                    }
                }
                SetItem::Names {
                    charset,
                    collation: coll,
                } => {
                    for v in CHARSET_VARS {
                        vars.remove(v);
                    }
                    let text = match (charset, coll) {
                        (None, _) => "NAMES DEFAULT".to_owned(),
                        (Some(cs), None) => format!("NAMES {}", quoted(cs)),
                        (Some(cs), Some(c)) => {
                            format!("NAMES {} COLLATE {}", quoted(cs), quoted(c))
                        }
                    };
                    let baseline = handshake_names(collation).is_some_and(|h| {
                        charset.as_deref() == Some(h.charset)
                            && coll
                                .as_deref()
                                .map_or(h.default_of_charset, |c| c == h.collation)
                    });
                    names = (!baseline).then_some(text);
                }
                SetItem::CharacterSet(cs) => {
                    for v in CHARSET_VARS {
                        vars.remove(v);
                    }
                    names = Some(match cs {
                        None => "CHARACTER SET DEFAULT".to_owned(),
                        Some(cs) => format!("CHARACTER SET {}", quoted(cs)),
                    });
                }
            }
        }
        Ok(Settings::build(names, vars))
    }

    /// After `SET SESSION TRANSACTION <characteristics>`.
    pub fn with_session_transaction(
        &self,
        characteristics: &str,
    ) -> Result<Settings, NotReplayable> {
        let (names, vars) = self.parts();
        let mut vars = vars.cloned().unwrap_or_default();
        let words: Vec<String> = characteristics
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_uppercase)
            .collect();
        let refuse = || NotReplayable(format!("SET SESSION TRANSACTION {characteristics}"));
        let mut i = 0;
        while i < words.len() {
            match (words[i].as_str(), words.get(i + 1).map(String::as_str)) {
                ("ISOLATION", Some("LEVEL")) => {
                    let level = match (
                        words.get(i + 2).map(String::as_str),
                        words.get(i + 3).map(String::as_str),
                    ) {
                        (Some("READ"), Some("UNCOMMITTED")) => "'READ-UNCOMMITTED'",
                        (Some("READ"), Some("COMMITTED")) => "'READ-COMMITTED'",
                        (Some("REPEATABLE"), Some("READ")) => "'REPEATABLE-READ'",
                        (Some("SERIALIZABLE"), _) => "'SERIALIZABLE'",
                        _ => return Err(refuse()),
                    };
                    vars.insert("tx_isolation".into(), level.into());
                    i += if level == "'SERIALIZABLE'" { 3 } else { 4 };
                }
                ("READ", Some("ONLY")) => {
                    vars.insert("tx_read_only".into(), "1".into());
                    i += 2;
                }
                ("READ", Some("WRITE")) => {
                    vars.insert("tx_read_only".into(), "0".into());
                    i += 2;
                }
                _ => return Err(refuse()),
            }
        }
        Ok(Settings::build(names.map(str::to_owned), vars))
    }

    /// The statement that turns a connection carrying `from` into one
    /// carrying `self` (None: nothing to run), for a connection of the pool
    /// key with handshake collation `collation` and capabilities `caps`.
    /// `Err(())` when `from` cannot be set back (see the module docs): such
    /// a connection needs a COM_RESET_CONNECTION first.
    #[allow(clippy::result_unit_err)]
    pub fn diff_from(
        &self,
        from: &Settings,
        collation: u8,
        caps: u32,
    ) -> Result<Option<Vec<u8>>, ()> {
        if self == from {
            return Ok(None);
        }
        let mut parts: Vec<String> = Vec::new();
        let charset_differs =
            self.names() != from.names() || CHARSET_VARS.iter().any(|v| self.var(v) != from.var(v));
        if charset_differs {
            match self.names() {
                Some(n) => parts.push(n.to_owned()),
                None => {
                    let h = handshake_names(collation).ok_or(())?;
                    parts.push(format!(
                        "NAMES {} COLLATE {}",
                        quoted(h.charset),
                        quoted(h.collation)
                    ));
                }
            }
        }
        let (_, vars) = self.parts();
        for (name, value) in vars.into_iter().flatten() {
            let charset_var = CHARSET_VARS.contains(&name.as_str());
            if (charset_var && charset_differs) || from.var(name) != Some(value.as_str()) {
                parts.push(format!("@@session.{} = {value}", identifier(name)));
            }
        }
        for name in from.var_names() {
            if self.var(name).is_some() || CHARSET_VARS.contains(&name.as_str()) {
                continue;
            }
            if name == "sql_mode" && caps & CLIENT_IGNORE_SPACE != 0 {
                // DEFAULT would drop the IGNORE_SPACE the handshake added.
                return Err(());
            }
            parts.push(format!("@@session.{} = DEFAULT", identifier(name)));
        }
        if parts.is_empty() {
            return Ok(None);
        }
        Ok(Some(format!("SET {}", parts.join(", ")).into_bytes()))
    }
}

/// A value that means the same on every connection: a literal, a number, a
/// keyword (`ON`, `DEFAULT`, `READ-COMMITTED` unquoted is not one, but the
/// server refuses it alike everywhere). No variable, call or placeholder.
fn constant(value: &str) -> bool {
    let v = value.trim();
    if v.is_empty() {
        return false;
    }
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in v.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '@' | '(' | '?' | '`' | ';' => return false,
                _ => {}
            },
        }
    }
    quote.is_none()
}

/// A character-set or collation name as `SET NAMES` takes it.
fn quoted(name: &str) -> String {
    if name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        name.to_owned()
    } else {
        format!("'{}'", name.replace('\'', "''"))
    }
}

/// A variable name as an identifier: plain when it is one, else backquoted.
fn identifier(name: &str) -> String {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        name.to_owned()
    } else {
        format!("`{}`", name.replace('`', "``"))
    }
}

/// The character set and collation a handshake collation id gives the
/// connection (MariaDB 10.11's ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeNames {
    pub charset: &'static str,
    pub collation: &'static str,
    /// The collation is its character set's default (a `SET NAMES cs`
    /// without COLLATE gives it).
    pub default_of_charset: bool,
}

/// The names for the common handshake collations; None for the others
/// (their connections are reset rather than set back).
pub fn handshake_names(id: u8) -> Option<HandshakeNames> {
    let (charset, collation, default_of_charset) = match id {
        8 => ("latin1", "latin1_swedish_ci", true),
        47 => ("latin1", "latin1_bin", false),
        33 => ("utf8mb3", "utf8mb3_general_ci", true),
        83 => ("utf8mb3", "utf8mb3_bin", false),
        192 => ("utf8mb3", "utf8mb3_unicode_ci", false),
        45 => ("utf8mb4", "utf8mb4_general_ci", true),
        46 => ("utf8mb4", "utf8mb4_bin", false),
        224 => ("utf8mb4", "utf8mb4_unicode_ci", false),
        63 => ("binary", "binary", true),
        11 => ("ascii", "ascii_general_ci", true),
        _ => return None,
    };
    Some(HandshakeNames {
        charset,
        collation,
        default_of_charset,
    })
}

#[cfg(test)]
mod tests;

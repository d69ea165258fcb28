//! The session state a client wants (system variables, schema), as the
//! server's trackers report it, and the minimal statements that give a
//! backend connection that state (on lease, only the differences are
//! applied).
//!
//! # API for the proxy
//!
//! - [`SessionVars::default`]: a fresh session (no variable changed, no
//!   schema). Keep one per client session and one per backend connection.
//! - [`SessionVars::apply_ok`]`(&OkInfo)`: record the system-variable and
//!   schema blocks of an OK the backend sent (call it for the client's
//!   session and for the backend connection alike: both changed).
//! - [`SessionVars::apply_set`]`(&[SetItem])`: record what the lexer saw that
//!   the trackers do not report: the collation of `SET NAMES … COLLATE …`
//!   (MariaDB 10.11 reports only the three character_set_* variables).
//! - [`SessionVars::diff`]`(&backend) -> Vec<String>`: the statements (at
//!   most one `SET`) that bring `backend` to `self`'s variables, values
//!   quoted as the server needs them. Empty when they already match.
//! - [`SessionVars::schema_to_apply`]`(&backend) -> Option<&str>`: the schema
//!   to send with COM_INIT_DB, when it differs.
//! - [`SessionVars::fingerprint`]: a hash of the variables (not the schema),
//!   to prefer an idle backend whose settings already match.
//!
//! - [`SessionVars::adopt_vars`]`(&client)`: on the backend's record, once
//!   the diff ran (it also covers what no tracker reports).
//!
//! Values are the tracker's text (normalised by the server: `OFF`, not `0`),
//! so two sessions that set the same thing differently still match.
//!
//! A variable only the backend changed goes back to `DEFAULT`, which is the
//! *global* value. The character-set variables start from the handshake's
//! collation instead, so seed both records with the connection's initial
//! `character_set_client`, `character_set_connection`,
//! `character_set_results` and `collation_connection` when the client's
//! handshake collation differs from the backend's.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use crate::lexer::SetItem;
use crate::ok_packet::OkInfo;

/// The system variables and schema a session has changed from the
/// connection defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionVars {
    /// Lower-cased name → value, as the tracker reported them.
    vars: BTreeMap<String, String>,
    /// The current schema; None when none was chosen.
    schema: Option<String>,
}

impl SessionVars {
    /// The variables, by name.
    pub fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }

    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// Sets one variable (as reported by the tracker).
    pub fn set_var(&mut self, name: &str, value: &str) {
        self.vars
            .insert(name.to_ascii_lowercase(), value.to_owned());
    }

    /// Sets the schema (COM_INIT_DB, or the schema tracker; an empty name
    /// means the current schema was dropped).
    pub fn set_schema(&mut self, schema: Option<&str>) {
        self.schema = schema.filter(|s| !s.is_empty()).map(str::to_owned);
    }

    /// Records the system-variable and schema blocks of a backend's OK.
    /// Names and values that are not UTF-8 are kept lossily.
    pub fn apply_ok(&mut self, ok: &OkInfo<'_>) {
        for (name, value) in ok.system_variables() {
            self.set_var(
                &String::from_utf8_lossy(name),
                &String::from_utf8_lossy(value),
            );
        }
        if let Some(s) = ok.schema() {
            self.set_schema(Some(&String::from_utf8_lossy(s)));
        }
    }

    /// Records what a replayable SET changes that the trackers do not
    /// report: `SET NAMES cs COLLATE coll` sets `collation_connection`; a
    /// `SET NAMES` without COLLATE resets it to the character set's default,
    /// which the entry's absence stands for (see [`SessionVars::diff`]).
    pub fn apply_set(&mut self, items: &[SetItem]) {
        for item in items {
            if let SetItem::Names { collation, .. } = item {
                match collation {
                    Some(c) => self.set_var("collation_connection", c),
                    None => {
                        self.vars.remove("collation_connection");
                    }
                }
            }
        }
    }

    /// The statements that make `backend`'s variables equal to `self`'s: one
    /// `SET` of every variable whose value differs, in name order (so
    /// `character_set_connection` comes before `collation_connection`,
    /// which it would reset). A variable only `backend` has changed goes
    /// back to `DEFAULT` (the global value, which a fresh session starts
    /// from); `collation_connection` instead goes back to its character
    /// set's default collation by setting `character_set_connection` again.
    pub fn diff(&self, backend: &SessionVars) -> Vec<String> {
        let mut assigns: Vec<String> = Vec::new();
        let mut reset_collation = false;
        for (name, value) in &self.vars {
            if backend.vars.get(name) != Some(value) {
                assigns.push(assignment(name, Some(value)));
            }
        }
        for name in backend.vars.keys() {
            if self.vars.contains_key(name) {
                continue;
            }
            if name == "collation_connection" {
                reset_collation = true;
            } else {
                assigns.push(assignment(name, None));
            }
        }
        if reset_collation {
            let cs = self.vars.get("character_set_connection");
            let a = assignment("character_set_connection", cs);
            if !assigns.contains(&a) {
                assigns.push(a);
            }
        }
        if assigns.is_empty() {
            return Vec::new();
        }
        vec![format!("SET {}", assigns.join(", "))]
    }

    /// After `self.diff(backend)` ran on `backend` successfully: `backend`
    /// now has `self`'s variables (including those no tracker reports, such
    /// as `collation_connection`).
    pub fn adopt_vars(&mut self, from: &SessionVars) {
        self.vars.clone_from(&from.vars);
    }

    /// The schema to select on `backend` (COM_INIT_DB) before running this
    /// session's statements. None when they match, and when this session has
    /// none: a schema cannot be unselected, so a session without one should
    /// be given a backend without one.
    pub fn schema_to_apply(&self, backend: &SessionVars) -> Option<&str> {
        match &self.schema {
            Some(s) if backend.schema.as_ref() != Some(s) => Some(s),
            _ => None,
        }
    }

    /// A hash of the variables (not the schema, which is cheap to apply):
    /// equal for equal settings within one process.
    pub fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.vars.hash(&mut h);
        h.finish()
    }
}

/// `@@session.name = value`, or `= DEFAULT` when `value` is None.
pub fn assignment(name: &str, value: Option<&String>) -> String {
    let v = match value {
        // The tracker reports `SET character_set_results = NULL` (which
        // Connector/J sends) as an empty value, and no character set or
        // collation is named ''.
        Some(v) if v.is_empty() && is_charset_var(name) => "NULL".to_owned(),
        Some(v) => literal(v),
        None => "DEFAULT".to_owned(),
    };
    format!("@@session.{} = {v}", identifier(name))
}

fn is_charset_var(name: &str) -> bool {
    name.starts_with("character_set_") || name.starts_with("collation_")
}

/// A variable name as an identifier: plain when it is one, else backquoted.
fn identifier(name: &str) -> String {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        name.to_owned()
    } else {
        format!("`{}`", name.replace('`', "``"))
    }
}

/// A value as the server accepts it for a system variable: numbers bare
/// (numeric variables refuse strings), plain text quoted, and anything with a
/// quote, a backslash or a control or non-ASCII character as a hex string, so
/// that neither the backend's NO_BACKSLASH_ESCAPES nor its character set can
/// change its meaning.
fn literal(v: &str) -> String {
    let numeric = {
        let digits = v.strip_prefix('-').unwrap_or(v);
        let mut parts = digits.splitn(2, '.');
        let int = parts.next().unwrap_or("");
        let frac = parts.next();
        !int.is_empty()
            && int.bytes().all(|b| b.is_ascii_digit())
            && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
    };
    if numeric {
        return v.to_owned();
    }
    let plain = v
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'\'' && b != b'\\' || b == b' ');
    if plain {
        format!("'{v}'")
    } else {
        let hex: String = v.bytes().map(|b| format!("{b:02X}")).collect();
        format!("X'{hex}'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::{classify, Class, LexOptions};
    use crate::ok_packet::StateChange;

    fn vars(pairs: &[(&str, &str)]) -> SessionVars {
        let mut s = SessionVars::default();
        for (n, v) in pairs {
            s.set_var(n, v);
        }
        s
    }

    #[test]
    fn equal_settings_need_nothing() {
        let a = vars(&[("autocommit", "OFF"), ("sql_mode", "ANSI")]);
        let b = vars(&[("sql_mode", "ANSI"), ("AUTOCOMMIT", "OFF")]);
        assert!(a.diff(&b).is_empty());
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), SessionVars::default().fingerprint());
    }

    #[test]
    fn differences_in_one_set() {
        let client = vars(&[
            ("autocommit", "OFF"),
            ("wait_timeout", "60"),
            ("long_query_time", "1.500000"),
            ("sql_mode", "ANSI_QUOTES,STRICT_ALL_TABLES"),
        ]);
        let backend = vars(&[("autocommit", "OFF"), ("time_zone", "+00:00")]);
        assert_eq!(
            client.diff(&backend),
            vec!["SET @@session.long_query_time = 1.500000, \
                 @@session.sql_mode = 'ANSI_QUOTES,STRICT_ALL_TABLES', \
                 @@session.wait_timeout = 60, @@session.time_zone = DEFAULT"
                .to_owned()]
        );
    }

    #[test]
    fn quoting() {
        assert_eq!(literal("-12"), "-12");
        assert_eq!(literal("1.5"), "1.5");
        assert_eq!(literal("1."), "'1.'");
        assert_eq!(literal(""), "''");
        assert_eq!(literal("READ-COMMITTED"), "'READ-COMMITTED'");
        assert_eq!(literal("it's"), "X'69742773'");
        assert_eq!(literal("a\\b"), "X'615C62'");
        assert_eq!(literal("é"), "X'C3A9'");
        assert_eq!(
            assignment("character_set_results", Some(&String::new())),
            "@@session.character_set_results = NULL"
        );
        assert_eq!(
            assignment("sql_mode", Some(&String::new())),
            "@@session.sql_mode = ''"
        );
        assert_eq!(identifier("sql_mode"), "sql_mode");
        assert_eq!(identifier("a.b`c"), "`a.b``c`");
    }

    #[test]
    fn ok_blocks_and_set_names() {
        let mut s = SessionVars::default();
        let ok = OkInfo {
            affected_rows: 0,
            last_insert_id: 0,
            status: 0x4002,
            warnings: 0,
            info: b"",
            session_state: vec![
                StateChange::SystemVariable {
                    name: b"character_set_client",
                    value: b"latin1",
                },
                StateChange::SystemVariable {
                    name: b"character_set_connection",
                    value: b"latin1",
                },
                StateChange::Schema(b"shop"),
                StateChange::StateChanged(b"1"),
            ],
        };
        s.apply_ok(&ok);
        assert_eq!(s.schema(), Some("shop"));
        let sql = "SET NAMES latin1 COLLATE latin1_bin";
        let Class::Set(items) = &classify(sql.as_bytes(), &LexOptions::default())[0].class else {
            panic!("a SET");
        };
        s.apply_set(items);
        let fresh = SessionVars::default();
        assert_eq!(
            s.diff(&fresh),
            vec!["SET @@session.character_set_client = 'latin1', \
                 @@session.character_set_connection = 'latin1', \
                 @@session.collation_connection = 'latin1_bin'"
                .to_owned()]
        );
        assert_eq!(s.schema_to_apply(&fresh), Some("shop"));
        assert_eq!(s.schema_to_apply(&s), None);
        assert_eq!(fresh.schema_to_apply(&s), None);
        // Back to a plain session: a collation goes back through its
        // character set.
        assert_eq!(
            fresh.diff(&s),
            vec!["SET @@session.character_set_client = DEFAULT, \
                 @@session.character_set_connection = DEFAULT"
                .to_owned()]
        );
        // SET NAMES without COLLATE forgets the collation.
        let mut t = s.clone();
        t.apply_set(&[SetItem::Names {
            charset: Some("latin1".into()),
            collation: None,
        }]);
        assert!(!t.vars().contains_key("collation_connection"));
        assert_eq!(
            t.diff(&s),
            vec!["SET @@session.character_set_connection = 'latin1'".to_owned()]
        );
        // A dropped schema.
        let mut u = s.clone();
        u.set_schema(Some(""));
        assert_eq!(u.schema(), None);
    }
}

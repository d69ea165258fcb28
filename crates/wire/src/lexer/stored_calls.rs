//! Which `name(` in a statement calls a stored function.
//!
//! A stored function can set user variables or take named locks, and the
//! server reports neither for it: a result set's EOF carries no fresh
//! SESSION_STATE_CHANGED, and a named lock is never flagged (MariaDB
//! 10.11). So a statement that calls one pins its session. MariaDB resolves
//! an unqualified `name(` to a native function or a grammar construct when
//! it has one ([`NATIVE_FUNCTIONS`], read off the server by
//! scripts/native-functions.py), and only otherwise to a stored function of
//! the current schema; a qualified `db.f(` or a quoted `` `f`( `` is always
//! a stored routine. Names in front of a column list (`INSERT INTO t (a)`,
//! `CREATE TABLE t (…)`, `KEY k (c)`) are no calls.

use super::native_functions::NATIVE_FUNCTIONS;

/// Keywords after which a name followed by `(` names a table, an index or a
/// routine being defined, not a call.
const NAME_BEFORE_LIST: [&str; 18] = [
    "INTO",
    "TABLE",
    "UPDATE",
    "FROM",
    "JOIN",
    "REFERENCES",
    "EXISTS",
    "ON",
    "VIEW",
    "TRIGGER",
    "PROCEDURE",
    "FUNCTION",
    "INDEX",
    "KEY",
    "UNIQUE",
    "WITH",
    "CALL",
    "CONSTRAINT",
];

/// `name` (unquoted) is one the server resolves as its own.
pub(super) fn is_native(name: &[u8]) -> bool {
    NATIVE_FUNCTIONS
        .binary_search_by(|probe| {
            let a = probe.as_bytes().iter();
            let b = name.iter().map(u8::to_ascii_uppercase);
            a.copied().cmp(b)
        })
        .is_ok()
}

/// A keyword in [`NAME_BEFORE_LIST`].
pub(super) fn names_a_list_owner(word: &[u8]) -> bool {
    NAME_BEFORE_LIST
        .iter()
        .any(|k| word.eq_ignore_ascii_case(k.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins_as_stored(sql: &str) -> bool {
        let sts = crate::lexer::classify(sql.as_bytes(), &Default::default());
        sts.iter()
            .any(|st| st.class == crate::lexer::Class::Pin(crate::lexer::Pin::StoredFunction))
    }

    #[test]
    fn calls_of_stored_functions_pin() {
        for sql in [
            "SELECT f()",
            "SELECT shop.f(1)",
            "SELECT `f`()",
            "select x, my_func (a) from t",
            "DO shop.setvar()",
            "INSERT INTO t (a) VALUES (f())",
            "UPDATE t SET a = shop.f(a)",
            "SELECT * FROM t WHERE a = `shop`.`f`(1)",
        ] {
            assert!(pins_as_stored(sql), "{sql}");
        }
    }

    #[test]
    fn native_calls_and_column_lists_do_not() {
        for sql in [
            "SELECT NOW(), CONCAT('a', 'b'), COUNT(*), json_extract(d, '$.a') FROM t",
            "INSERT INTO t (a, b) VALUES (1, 2)",
            "INSERT INTO shop.t (a) SELECT MAX(a) FROM u",
            "CREATE TABLE IF NOT EXISTS shop.t (a INT, b VARCHAR(10), KEY k (a))",
            "SELECT * FROM a JOIN b USING (id) WHERE a.x IN (1, 2)",
            "ALTER TABLE t ADD INDEX i (a), ADD UNIQUE u (b)",
            "SELECT * FROM (SELECT 1) AS x",
            "SELECT IF(a, 1, 2), CAST(a AS CHAR), DATE(now()) FROM t",
            "SELECT 'f()' AS text /* g() */",
        ] {
            assert!(!pins_as_stored(sql), "{sql}");
        }
    }

    #[test]
    fn functions_declared_read_only_do_not_pin() {
        static DECLARED: std::sync::LazyLock<Vec<Box<str>>> =
            std::sync::LazyLock::new(|| vec!["PRICE_OF".into(), "SHOP.TAX".into()]);
        let opts = crate::lexer::LexOptions {
            read_only_functions: DECLARED.as_slice(),
            ..Default::default()
        };
        let pins = |sql: &str| {
            crate::lexer::classify(sql.as_bytes(), &opts)
                .iter()
                .any(|st| st.class == crate::lexer::Class::Pin(crate::lexer::Pin::StoredFunction))
        };
        for sql in [
            "SELECT price_of(1)",
            "SELECT `shop`.`price_of`(1), shop.tax(2)",
            "SELECT Price_Of(id) FROM t",
        ] {
            assert!(!pins(sql), "{sql}");
        }
        // Another schema's TAX, an undeclared function beside a declared one.
        for sql in [
            "SELECT other.tax(1)",
            "SELECT tax(1)",
            "SELECT price_of(1), f(2)",
        ] {
            assert!(pins(sql), "{sql}");
        }
        // A declared function does not hide a lock taken beside it.
        let sts = crate::lexer::classify(b"SELECT price_of(1), GET_LOCK('a', 1)", &opts);
        assert_eq!(
            sts[0].class,
            crate::lexer::Class::Pin(crate::lexer::Pin::LockFunction)
        );
    }

    #[test]
    fn the_list_is_sorted_for_the_binary_search() {
        assert!(NATIVE_FUNCTIONS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn native_names_in_any_case() {
        for n in [
            &b"now"[..],
            b"COUNT",
            b"Json_Extract",
            b"get_lock",
            b"if",
            b"st_astext",
        ] {
            assert!(is_native(n), "{}", String::from_utf8_lossy(n));
        }
        for n in [&b"my_func"[..], b"f", b"status", b"nowx"] {
            assert!(!is_native(n), "{}", String::from_utf8_lossy(n));
        }
    }
}

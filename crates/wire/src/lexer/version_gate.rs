//! Version-gated comments (`/*!NNNNN … */`, MariaDB's `/*M!NNNNNN … */`):
//! whether the connected server runs their contents as code or skips them
//! as a comment. The tokenizer must decide exactly as the server does, or a
//! statement hidden in a comment the lexer skips (or shown in one the
//! server skips) reaches the server unseen.
//!
//! The rules, from the servers' lexers (`sql_lex.cc`) and checked against
//! MariaDB 10.11:
//! - MariaDB reads `/*!` or `/*M!`, then a version of exactly 5 digits, or
//!   6 when a sixth digit follows (more digits are code). Fewer than 5
//!   digits: no version, the contents (digits included) are code. With a
//!   version, the contents are code when the version is at most the
//!   server's and, without `M`, outside MySQL's 5.7+ range 50700–99999
//!   (MariaDB skips those, as MySQL-only syntax).
//! - MySQL knows no `/*M!` (an ordinary comment there) and reads 5 digits
//!   before 8.1, 6 after: this module gives up on a sixth digit.
//! - A skipped comment ends at the first `*/` that is not the end of one
//!   nested `/* … */`; quotes and `#` inside it mean nothing.

/// The server a text is lexed for, from its handshake greeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Server {
    /// MariaDB, its version as MAJOR*10000 + MINOR*100 + PATCH
    /// (10.11.19 is 101119, as `/*!101119` compares it).
    MariaDb(u32),
    /// MySQL (or a server that does not say MariaDB), the same encoding.
    MySql(u32),
    /// Not known yet: only the comments every MariaDB ≥ 10 and MySQL ≥ 5.7
    /// read alike are decided (`/*!` without a version, versions below
    /// 50700); the others make the text unsure.
    #[default]
    Unknown,
}

impl Server {
    /// From a greeting's server version, e.g. `5.5.5-10.11.19-MariaDB-0+deb12u1`
    /// (MariaDB's replication-era `5.5.5-` prefix is not its version) or
    /// `8.0.36`. Unknown when it does not start with `major.minor.patch`.
    pub fn from_greeting(version: &str) -> Server {
        let mariadb = version.contains("MariaDB");
        let v = match version.strip_prefix("5.5.5-") {
            Some(rest) if mariadb => rest,
            _ => version,
        };
        let mut parts = v.splitn(3, '.');
        let mut num = || -> Option<u32> {
            let p = parts.next()?;
            let digits = p.bytes().take_while(u8::is_ascii_digit).count();
            p.get(..digits)?.parse().ok()
        };
        let (Some(major), Some(minor), Some(patch)) = (num(), num(), num()) else {
            return Server::Unknown;
        };
        if minor > 99 || patch > 99 || major > 99 {
            return Server::Unknown;
        }
        let id = major * 10000 + minor * 100 + patch;
        if mariadb {
            Server::MariaDb(id)
        } else {
            Server::MySql(id)
        }
    }

    /// Does this server read `/*M!` as an executable comment?
    pub(super) fn knows_m_marker(self) -> bool {
        !matches!(self, Server::MySql(_))
    }
}

/// What the server makes of an executable comment's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Code, starting at this index (just past the version, if any).
    Code(usize),
    /// A comment, to be skipped from this index.
    Comment(usize),
    /// The servers this could be read differently: the text is unsure.
    Unsure,
}

/// The gate of the executable comment whose marker (`/*!` or `/*M!`, `m`
/// telling which) ends just before `at`.
pub(super) fn gate(sql: &[u8], at: usize, m: bool, server: Server) -> Gate {
    let digit = |k: usize| sql.get(at + k).is_some_and(u8::is_ascii_digit);
    if !(0..5).all(digit) {
        // No version: the contents run, digits and all. Only MySQL would
        // have treated `/*M!` as a comment, and that never reaches here.
        return match (server, m) {
            (Server::Unknown, true) => Gate::Unsure,
            _ => Gate::Code(at),
        };
    }
    let six = digit(5);
    let len = if six { 6 } else { 5 };
    let version: u32 = sql
        .get(at..at + len)
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| d.parse().ok())
        .unwrap_or(u32::MAX);
    let runs = match server {
        Server::MariaDb(v) => version <= v && (m || !(50700..=99999).contains(&version)),
        Server::MySql(_) if six => return Gate::Unsure,
        Server::MySql(v) => version <= v,
        Server::Unknown if m || six || version >= 50700 => return Gate::Unsure,
        Server::Unknown => true,
    };
    if runs {
        Gate::Code(at + len)
    } else {
        Gate::Comment(at + len)
    }
}

/// Just past the `*/` that ends a skipped version comment whose contents
/// start at `from` (one nested `/* … */` may come first). None when it is
/// unterminated.
pub(super) fn skip_comment(sql: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        match (sql.get(i)?, sql.get(i + 1)) {
            (b'/', Some(b'*')) => {
                let close = sql.get(i + 2..)?.windows(2).position(|w| w == b"*/")?;
                i = i + 2 + close + 2;
            }
            (b'*', Some(b'/')) => return Some(i + 2),
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests;

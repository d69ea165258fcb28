//! One log line per change the monitor machine reports, naming the server,
//! old → new, and why.

use std::net::SocketAddr;

use machines::monitor::{Change, ConfiguredRole, State};
use tracing::Level;

pub(super) fn changes(names: &[SocketAddr], changes: &[Change]) {
    for c in changes {
        let (level, line) = line(names, c);
        match level {
            Level::ERROR => tracing::error!("{line}"),
            Level::WARN => tracing::warn!("{line}"),
            _ => tracing::info!("{line}"),
        }
    }
}

/// The change's level and words.
fn line(names: &[SocketAddr], c: &Change) -> (Level, String) {
    let name = |i: usize| names.get(i).map_or_else(|| "?".into(), |a| a.to_string());
    let maybe = |i: Option<usize>| i.map_or_else(|| "none".into(), name);
    match c {
        Change::State {
            server,
            from,
            to,
            why,
        } => (
            if *to == State::Down {
                Level::WARN
            } else {
                Level::INFO
            },
            format!(
                "server {}: {} → {}: {why}",
                name(*server),
                from.as_str(),
                to.as_str()
            ),
        ),
        Change::StillDown { server, why } => (
            Level::WARN,
            format!("server {} is down: {why}", name(*server)),
        ),
        Change::Role {
            server,
            from,
            to,
            why,
        } => (
            Level::INFO,
            format!(
                "server {}: role {} → {} ({why})",
                name(*server),
                from.as_str(),
                to.as_str()
            ),
        ),
        Change::Writer { from, to, why } => (
            Level::WARN,
            format!("writer: {} → {}: {why}", maybe(*from), maybe(*to)),
        ),
        Change::Ambiguous { writable, kept } if writable.is_empty() => (
            Level::INFO,
            format!(
                "only one server is writable again; the writer is {}",
                maybe(*kept)
            ),
        ),
        Change::Ambiguous { writable, kept } => {
            let list: Vec<String> = writable.iter().map(|&i| name(i)).collect();
            (
                Level::ERROR,
                format!(
                    "servers {} all have read_only=0: writes to more than one would diverge \
                     the set; the writer is {} until only one is writable (set read_only=1 on \
                     the others)",
                    list.join(", "),
                    maybe(*kept)
                ),
            )
        }
        Change::RoleMismatch {
            server,
            configured,
            read_only,
        } => {
            let (role, effect) = match configured {
                ConfiguredRole::Primary => {
                    ("primary", "writes to it fail with ERR 1290 (--read-only)")
                }
                _ => ("replica", "it is never chosen as the writer"),
            };
            (
                Level::WARN,
                format!(
                    "server {} is configured role={role} but has read_only={}: {effect}",
                    name(*server),
                    u8::from(*read_only)
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_server_old_new_and_why() {
        let names: Vec<SocketAddr> = vec!["127.0.0.1:3441".parse().unwrap()];
        let (level, text) = line(
            &names,
            &Change::State {
                server: 0,
                from: State::Up,
                to: State::Down,
                why: "3 failed checks in a row".into(),
            },
        );
        assert_eq!(level, Level::WARN);
        assert_eq!(
            text,
            "server 127.0.0.1:3441: up → down: 3 failed checks in a row"
        );
        let (level, text) = line(
            &names,
            &Change::Ambiguous {
                writable: vec![0, 1],
                kept: Some(0),
            },
        );
        assert_eq!(level, Level::ERROR);
        assert!(text.contains("127.0.0.1:3441, ?"), "{text}");
    }
}

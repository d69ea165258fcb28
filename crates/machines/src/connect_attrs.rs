//! The connection attributes a backend connection logs in with, so that
//! `performance_schema.session_connect_attrs` on the server names the program
//! behind each of ringgate's connections.
//!
//! Attributes are fixed at the backend login, and ringgate pools
//! connections: a connection opened for a client carries that client's
//! attributes (its program name, pid, connector) for its whole life, also
//! while it later serves other clients of the same pool key. That is why they
//! are not part of the pool key (a pid per key would end pooling), and why a
//! marker says which client they came from. Connections the pool opens on its
//! own (warm-up, refill) carry ringgate's own attributes, as ProxySQL's do.

use std::fmt::Write;

/// Name of the marker attribute every ringgate backend connection carries:
/// `ringgate <version>`.
pub const PROXY_ATTR: &str = "_proxy";
/// The address (ip:port, or `local` for the unix socket) of the client whose
/// attributes a connection carries.
pub const PROXY_CLIENT_ATTR: &str = "_proxy_client";

/// Largest attribute block sent, in wire bytes (length prefixes included).
/// MariaDB's and MySQL's default `performance_schema_session_connect_attrs_size`
/// is 512: the server would silently cut a longer block, losing the
/// attributes at its end. Attributes that do not fit are left out whole.
pub const MAX_ATTRS_LEN: usize = 512;

fn proxy_marker() -> (String, String) {
    (
        PROXY_ATTR.to_string(),
        format!("ringgate {}", env!("CARGO_PKG_VERSION")),
    )
}

/// Wire size of one attribute: length-encoded key and value (lengths over
/// 250 take 3 bytes; the client's block is already bounded at 64 KiB).
fn wire_len(k: &str, v: &str) -> usize {
    let lenenc = |n: usize| if n < 251 { 1 } else { 3 };
    lenenc(k.len()) + k.len() + lenenc(v.len()) + v.len()
}

/// Adds `(k, v)` unless the block would exceed [`MAX_ATTRS_LEN`].
fn push_bounded(out: &mut Vec<(String, String)>, used: &mut usize, k: &str, v: &str) {
    let n = wire_len(k, v);
    if *used + n <= MAX_ATTRS_LEN {
        *used += n;
        out.push((k.to_string(), v.to_string()));
    }
}

/// Attributes for a connection opened for a client: ringgate's marker and
/// the client's address first (so they survive any limit), then the
/// client's own attributes in its order, as many as fit. A client cannot
/// set the marker attributes itself.
pub fn for_client(client: &[(String, String)], client_addr: &str) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(client.len() + 2);
    let mut used = 0;
    let (k, v) = proxy_marker();
    push_bounded(&mut out, &mut used, &k, &v);
    push_bounded(&mut out, &mut used, PROXY_CLIENT_ATTR, client_addr);
    for (k, v) in client {
        if k.starts_with(PROXY_ATTR) {
            continue;
        }
        push_bounded(&mut out, &mut used, k, v);
    }
    out
}

/// Attributes for a connection the pool opens with no client waiting:
/// ringgate's own, in the shape connectors use.
pub fn own() -> Vec<(String, String)> {
    let mut pid = String::new();
    let _ = write!(pid, "{}", std::process::id());
    let mut out = vec![proxy_marker()];
    for (k, v) in [
        ("_client_name", "ringgate"),
        ("_client_version", env!("CARGO_PKG_VERSION")),
        ("_os", std::env::consts::OS),
        ("_platform", std::env::consts::ARCH),
        ("_pid", pid.as_str()),
        ("program_name", "ringgate"),
    ] {
        out.push((k.to_string(), v.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::packet::write_lenenc_str;

    fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The block as build_handshake_response writes it (without its own
    /// length prefix).
    fn wire(a: &[(String, String)]) -> usize {
        let mut out = Vec::new();
        for (k, v) in a {
            write_lenenc_str(&mut out, k.as_bytes());
            write_lenenc_str(&mut out, v.as_bytes());
        }
        out.len()
    }

    #[test]
    fn a_clients_attributes_follow_the_marker_and_its_address() {
        // What the mariadb CLI sends.
        let cli = attrs(&[
            ("_os", "Linux"),
            ("_client_name", "libmariadb"),
            ("_pid", "4242"),
            ("_client_version", "3.3.20"),
            ("_platform", "x86_64"),
            ("program_name", "mysql"),
            ("_server_host", "127.0.0.1"),
        ]);
        let out = for_client(&cli, "10.0.0.7:51234");
        assert_eq!(out[0].0, "_proxy");
        assert!(out[0].1.starts_with("ringgate "));
        assert_eq!(out[1], ("_proxy_client".into(), "10.0.0.7:51234".into()));
        assert_eq!(&out[2..], &cli[..]);
    }

    #[test]
    fn a_client_cannot_forge_the_markers() {
        let out = for_client(
            &attrs(&[
                ("_proxy", "evil"),
                ("_proxy_client", "1.2.3.4:5"),
                ("a", "b"),
            ]),
            "local",
        );
        assert_eq!(out.len(), 3);
        assert_eq!(out[1].1, "local");
        assert_eq!(out[2], ("a".into(), "b".into()));
    }

    #[test]
    fn the_block_never_exceeds_the_servers_default_size() {
        let big = "x".repeat(300);
        let client = attrs(&[
            ("program_name", "app"),
            ("huge", &big),
            ("also_huge", &big),
            ("_pid", "7"),
        ]);
        let out = for_client(&client, "127.0.0.1:1");
        assert!(wire(&out) <= MAX_ATTRS_LEN, "{}", wire(&out));
        let names: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        // The first huge one fits, the second does not; the small one after
        // it still does.
        assert_eq!(
            names,
            ["_proxy", "_proxy_client", "program_name", "huge", "_pid"]
        );
        // wire_len agrees with the real encoding, 3-byte lengths included.
        for (k, v) in &out {
            assert_eq!(wire_len(k, v), wire(&[(k.clone(), v.clone())]));
        }
    }

    #[test]
    fn own_attributes_name_ringgate() {
        let out = own();
        assert_eq!(out[0].0, PROXY_ATTR);
        assert!(out.contains(&("program_name".into(), "ringgate".into())));
        assert!(out.contains(&("_pid".into(), std::process::id().to_string())));
        assert!(wire(&out) <= MAX_ATTRS_LEN);
    }
}

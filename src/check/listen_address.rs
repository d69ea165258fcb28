//! The listening-address checks: `--listen` is free (another ringgate there would silently
//! split the traffic) and `--socket`'s path can be taken.

use std::path::Path;

use super::Item;
use crate::config::Config;
use crate::listen_guard;

pub(super) fn check_listen(cfg: &Config) -> Item {
    let what = "listen";
    // The same probe and wording as start-up (defect: a second ringgate on
    // the same port used to share it silently through SO_REUSEPORT).
    if listen_guard::probe(cfg.listen) == listen_guard::PortState::Held {
        return if cfg.reuse_port_handover {
            Item::warn(
                what,
                listen_guard::handover_detail(cfg.listen),
                "stop the old ringgate once the new one runs",
            )
        } else {
            Item::fail(
                what,
                listen_guard::held_detail(cfg.listen),
                listen_guard::HELD_FIX,
            )
        };
    }
    if let Err(e) = std::net::TcpListener::bind(cfg.listen) {
        return Item::warn(
            what,
            format!("cannot bind {}: {e}", cfg.listen),
            "ringgate will not be able to listen there: choose another --listen",
        );
    }
    if let Some(m) = cfg.metrics_listen {
        if let Err(e) = std::net::TcpListener::bind(m) {
            return Item::warn(
                what,
                format!("cannot bind --metrics-listen {m}: {e}"),
                "stop the process that holds it, or choose another --metrics-listen",
            );
        }
    }
    if let Some(path) = &cfg.socket {
        if let Some(item) = check_socket_path(path) {
            return item;
        }
    }
    Item::ok(
        what,
        format!(
            "{} is free{}{}",
            cfg.listen,
            cfg.metrics_listen
                .map(|m| format!(", metrics {m} is free"))
                .unwrap_or_default(),
            cfg.socket
                .as_ref()
                .map(|p| format!(", unix socket {} can be created", p.display()))
                .unwrap_or_default()
        ),
    )
}

/// `--socket`: the same rules as the worker's bind (a stale socket is
/// replaced, a live one or a non-socket refused), and a writable directory.
pub(super) fn check_socket_path(path: &Path) -> Option<Item> {
    use std::os::unix::fs::FileTypeExt;
    let what = "listen";
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Some(Item::fail(
                what,
                format!("--socket {} exists and is not a socket", path.display()),
                "ringgate never deletes it: remove it or choose another --socket",
            ));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Some(Item::warn(
                what,
                format!("--socket {} is in use by a running server", path.display()),
                "stop it (is ringgate already running?), or choose another --socket",
            ));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A path with a NUL byte cannot be a socket path: nothing to say here.
    match uring::sys::access_writable(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::InvalidInput => Some(Item::fail(
            what,
            format!(
                "cannot create --socket {}: directory {}: {e}",
                path.display(),
                dir.display(),
            ),
            "create the directory writable by ringgate's user (systemd: RuntimeDirectory=ringgate \
             gives /run/ringgate)",
        )),
        _ => None,
    }
}

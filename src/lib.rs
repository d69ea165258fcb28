//! ringgate: a MySQL-protocol proxy on io_uring whose read buffers are
//! kernel-registered fixed buffers. See `docs/architecture.md`.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod backend_tls;
pub mod buffers;
pub mod check;
pub mod config;
pub mod config_file;
pub mod listen_guard;
pub mod logging;
pub mod metrics;
pub mod mysql;
pub mod proxy;
pub mod ring;
pub mod sockopt;
pub mod tls;

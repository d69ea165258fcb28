//! ringgate: a MySQL-protocol proxy on io_uring whose read buffers are
//! kernel-registered fixed buffers. This crate is the binary's part: the
//! worker driver, configuration, `ringgate check`, the metrics endpoint and
//! TLS. The protocol (`wire`), the machines (`machines`), the ring and its
//! buffers (`uring`) and the counters (`metrics`) are crates of their own;
//! docs/architecture.md draws the layers.
#![forbid(unsafe_code)]

pub mod blocking_login;
pub mod check;
pub mod config;
pub mod config_file;
pub mod listen_guard;
pub mod logging;
pub mod metrics_endpoint;
pub mod monitor;
pub mod proxy;
pub mod sockopt;
pub mod tls;

//! The one harness of ringgate's integration tests (tests/) and its bench (bench/).
//!
//! - [`env`]: the sandbox MariaDB's address, the binary, free ports, scratch directories.
//! - [`proxy`]: the real `ringgate` binary started with flags, and the leak checks on its
//!   metrics ([`leaks`] adds its fds).
//! - [`prometheus`] and [`http`]: the metrics endpoint read as samples.
//! - [`procfs`]: CPU, memory, fds, state and sockets from /proc.
//! - [`children`]: child processes in their own process groups, stopped however the run ends.
//! - [`rawclient`]: a blocking MySQL client over a bare socket.
//! - [`own_mariadb`] and [`general_log`]: a private MariaDB a test may kill, and the shared
//!   one's general log.
//!
//! The parts that hand out `mysql` crate connections need the `mysql` feature.

pub mod children;
pub mod env;
pub mod haproxy;
pub mod http;
pub mod procfs;
pub mod prometheus;
pub mod rawclient;
pub mod rlimit;

#[cfg(feature = "mysql")]
pub mod general_log;
#[cfg(feature = "mysql")]
pub mod good_client;
#[cfg(feature = "mysql")]
pub mod leaks;
#[cfg(feature = "mysql")]
pub mod mysql_client;
#[cfg(feature = "mysql")]
pub mod own_mariadb;
#[cfg(feature = "mysql")]
pub mod proxy;

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

/// Generates `mod $name { #[test] fn fixed(); #[test] fn heap(); #[test] fn ring(); }`, each
/// calling the scenario function `$scenario(Mode)` defined next to the macro call.
#[cfg(feature = "mysql")]
#[macro_export]
macro_rules! both_modes {
    ($name:ident, $scenario:ident) => {
        mod $name {
            #[test]
            fn fixed() {
                super::$scenario($crate::proxy::Mode::Fixed)
            }
            #[test]
            fn heap() {
                super::$scenario($crate::proxy::Mode::Heap)
            }
            #[test]
            fn ring() {
                super::$scenario($crate::proxy::Mode::Ring)
            }
        }
    };
}

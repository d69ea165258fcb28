//! The types every part of the bench shares: the targets, the scenarios and their cells, the
//! profile, and the result rows. A leaf: it imports nothing of the bench but the histogram's
//! percentiles, so the set-up, the scenarios, the run and the report all build on it without
//! importing each other.

pub mod cluster;
pub mod pooling;
pub mod profile;
pub mod records;
pub mod scenario;
pub mod target;
pub mod tls;

use std::net::SocketAddr;

/// The database, user and password the bench's clients use through every proxy (the
/// proxies' users file holds this user; MariaDB has the database).
pub const BENCH_DB: &str = "ringgate_bench";
pub const BENCH_USER: &str = "bench";
pub const BENCH_PASSWORD: &str = "bench-secret";

pub type Res<T> = Result<T, String>;

/// A port on the loopback address, where every process of a run listens.
pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

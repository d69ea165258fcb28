//! The bench's children and what it reads about them, from the shared harness (crates/testkit).

pub use testkit::children::{
    child_alive, cleanup_all, port_busy, register_file, register_sandbox_stop, spawn, stop,
    wait_child, wait_for_port,
};
pub use testkit::haproxy::haproxy_frontend_stats;
pub use testkit::http::get_ok as http_get;
pub use testkit::procfs::{
    cpu_seconds, cpu_times, peak_rss_kib, reset_peak_rss, rss_kib, voluntary_ctx_switches, CpuTimes,
};
pub use testkit::prometheus::parse_prometheus;

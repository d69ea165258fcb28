//! The scenarios, one module each. They build on the shared types (model), the set-up
//! (setup) and the measuring tools (measure), and never import each other but in one place:
//! `cluster` runs the cells' steps (`cells::run_step`) over its own fronts, so that its CPU per
//! query is measured exactly as every cell's is.
//!
//! - `cells`: connect, point-select and large-result, run by the load generator (load.rs) in
//!   interleaved rounds over every target;
//! - `sysbench`: sysbench's OLTP tests through every target;
//! - `tls`: the TLS section, with its own ringgate and client;
//! - `cluster`: ringgate in front of a three-node replication set of its own: where reads
//!   land, CPU per routed query against one server, a failover and a switchover under writes
//!   (its knobs: scenarios/cluster/mod.rs);
//! - `many_clients`, `idle`: the transaction-pooling scenarios. Unlike the cells they are not
//!   run per target in rounds: each starts its own ringgate(s) with the flags it needs, runs
//!   once, stops them, and reports its own table (appended to the run's table and
//!   summary.md) and records (summary.json's `mux`).
//!
//! The transaction-pooling scenarios are selected with BENCH_SCENARIOS like the others.
//! Defaults: `many-clients` and `idle-10k` in the quick and full profiles; `idle-max` (≥ 3
//! minutes of idling) only in the full profile or when named; the smoke profile runs
//! `idle-10k` with 200 clients in fixed mode. Knobs (environment): BENCH_MANY_CLIENTS (1000),
//! BENCH_MANY_BACKENDS (64), BENCH_MANY_TIME (seconds per sysbench run: 10 quick, 30 full),
//! BENCH_IDLE_CLIENTS (10000), BENCH_IDLE_MODES (fixed,ring,heap), BENCH_IDLE_MAX (100000),
//! BENCH_IDLE_MAX_HOLD (seconds idle before every client must answer: 200),
//! BENCH_IDLE_MAX_ARGS (more ringgate flags for idle-max, e.g. `--tcp-keepalive=false`).

pub mod cells;
pub mod cluster;
pub mod idle;
pub mod many_clients;
pub mod sysbench;
pub mod tls;

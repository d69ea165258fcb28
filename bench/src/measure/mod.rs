//! What the bench reads from the processes it measures while it runs: a target's counters
//! around a step, ringgate's gauge peaks, and the server connections in use.

pub mod counters;
pub mod peaks;
pub mod poller;

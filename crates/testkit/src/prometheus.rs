//! The metrics endpoint's text as samples, read by the metrics crate's own reader
//! (`crates/metrics/src/text.rs`), so that the harness and the crate that writes the text share
//! one parser.

use std::collections::HashMap;

/// Samples keyed by `name` or `name{k="v",...}` with the labels sorted by name; `get` finds a
/// key whatever order its labels are written in.
pub use metrics::text::Samples as Metrics;

/// Prometheus text as a map from `name{labels}` (labels sorted) to value.
pub fn parse_prometheus(text: &str) -> HashMap<String, f64> {
    Metrics::parse(text).samples.into_iter().collect()
}

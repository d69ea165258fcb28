//! The one Prometheus text-format reader: what ringgate's /metrics endpoint says, as samples
//! keyed by `name` or `name{k="v",...}` with the labels sorted by name.

use std::collections::{BTreeMap, HashMap};

/// Samples of a Prometheus text exposition, keyed by `name` or `name{k="v",...}` with the
/// labels sorted by name.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub samples: BTreeMap<String, f64>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some((key, value)) = parse_sample(line) {
                samples.insert(key, value);
            }
        }
        Metrics { samples }
    }

    pub fn try_get(&self, key: &str) -> Option<f64> {
        self.samples.get(&normalize_key(key)).copied()
    }

    /// The value of `key` (`name` or `name{label="v"}`); panics listing what exists if absent.
    pub fn get(&self, key: &str) -> f64 {
        match self.try_get(key) {
            Some(v) => v,
            None => panic!("metric {key} not found; ringgate exports:\n{}", self.dump()),
        }
    }

    pub fn dump(&self) -> String {
        self.samples
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

fn parse_sample(line: &str) -> Option<(String, f64)> {
    if let Some(open) = line.find('{') {
        // Find the closing brace outside quoted label values.
        let bytes = line.as_bytes();
        let mut i = open + 1;
        let mut in_quotes = false;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if in_quotes => i += 1,
                b'"' => in_quotes = !in_quotes,
                b'}' if !in_quotes => break,
                _ => {}
            }
            i += 1;
        }
        if i >= bytes.len() {
            return None;
        }
        let key = normalize_key(&line[..=i]);
        let value = line[i + 1..].split_whitespace().next()?;
        Some((key, parse_value(value)?))
    } else {
        let mut it = line.split_whitespace();
        let name = it.next()?;
        let value = it.next()?;
        Some((name.to_string(), parse_value(value)?))
    }
}

/// `name{b="2",a="1"}` -> `name{a="1",b="2"}`; `name{}` -> `name`.
fn normalize_key(key: &str) -> String {
    let key = key.trim();
    let Some(open) = key.find('{') else {
        return key.to_string();
    };
    let name = key[..open].trim();
    let inner = key[open + 1..].trim_end_matches('}');
    let mut labels: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    let mut escaped = false;
    for c in inner.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' if in_quotes => {
                cur.push(c);
                escaped = true;
            }
            '"' => {
                in_quotes = !in_quotes;
                cur.push(c);
            }
            ',' if !in_quotes => {
                if !cur.trim().is_empty() {
                    labels.push(cur.trim().to_string());
                }
                cur.clear();
            }
            _ => cur.push(c),
        }
    }
    if !cur.trim().is_empty() {
        labels.push(cur.trim().to_string());
    }
    // `k = "v"` -> `k="v"`
    let mut labels: Vec<String> = labels
        .into_iter()
        .map(|l| match l.split_once('=') {
            Some((k, v)) => format!("{}={}", k.trim(), v.trim()),
            None => l,
        })
        .collect();
    labels.sort();
    if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{}}}", labels.join(","))
    }
}

/// Prometheus text as a map from `name{labels}` (labels sorted) to value.
pub fn parse_prometheus(text: &str) -> HashMap<String, f64> {
    Metrics::parse(text).samples.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_sorted_and_quoted_braces_and_commas_kept() {
        let text = "# HELP ringgate_read_buffers_total Read buffers.\n\
                    # TYPE ringgate_read_buffers_total gauge\n\
                    ringgate_read_buffers_total{mode=\"fixed\"} 2048\n\
                    ringgate_read_buffers_in_use{owner=\"client\"} 0\n\
                    ringgate_backend_connections{state=\"idle\",pool=\"a\"} 3 1700000000000\n\
                    ringgate_commands_total 1.5e3\n\
                    ringgate_connect_duration_seconds_bucket{le=\"+Inf\"} 7\n\
                    ringgate_weird{a=\"x,}y\"} NaN\n";
        let m = Metrics::parse(text);
        assert_eq!(
            m.get(r#"ringgate_read_buffers_total{mode="fixed"}"#),
            2048.0
        );
        assert_eq!(
            m.get(r#"ringgate_read_buffers_in_use{owner="client"}"#),
            0.0
        );
        assert_eq!(
            m.get(r#"ringgate_backend_connections{pool="a",state="idle"}"#),
            3.0
        );
        assert_eq!(
            m.get(r#"ringgate_backend_connections{state="idle", pool="a"}"#),
            3.0
        );
        assert_eq!(m.get("ringgate_commands_total"), 1500.0);
        assert_eq!(
            m.get(r#"ringgate_connect_duration_seconds_bucket{le="+Inf"}"#),
            7.0
        );
        assert!(m.get(r#"ringgate_weird{a="x,}y"}"#).is_nan());
        assert!(m.try_get("ringgate_missing").is_none());
    }

    #[test]
    fn timestamps_quantiles_and_plain_names() {
        let m = parse_prometheus(
            "# HELP x y\n# TYPE x gauge\nringgate_workers 2\n\
             ringgate_read_buffers_in_use{owner=\"client\"} 33\n\
             ringgate_connect_duration_seconds_quantile{quantile=\"0.99\"} 0.00123\n\
             with_ts 5 1700000000000\n",
        );
        assert_eq!(m["ringgate_workers"], 2.0);
        assert_eq!(m["ringgate_read_buffers_in_use{owner=\"client\"}"], 33.0);
        assert_eq!(
            m["ringgate_connect_duration_seconds_quantile{quantile=\"0.99\"}"],
            0.00123
        );
        assert_eq!(m["with_ts"], 5.0);
    }
}

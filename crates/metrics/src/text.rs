//! The text exposition read back as samples: the one Prometheus text-format reader of the
//! workspace. The tests here and the harness (`crates/testkit/src/prometheus.rs`, which
//! re-exports it) check what `/metrics` says through it, so a sample is found by its name and
//! labels whatever order the labels were written in.

use std::collections::BTreeMap;

/// Samples of a Prometheus text exposition, keyed by `name` or `name{k="v",...}` with the
/// labels sorted by name. Comments, blank lines and lines that do not parse are skipped; a
/// trailing timestamp is ignored.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    pub samples: BTreeMap<String, f64>,
}

impl Samples {
    pub fn parse(text: &str) -> Samples {
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
        Samples { samples }
    }

    /// The value of `key` (`name` or `name{label="v",...}`, labels in any order), if present.
    pub fn try_get(&self, key: &str) -> Option<f64> {
        self.samples.get(&normalize_key(key)).copied()
    }

    /// The value of `key`; panics listing what exists if absent.
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

/// A sample's value as the text format writes it, `+Inf`, `-Inf` and `NaN` included.
pub fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

fn parse_sample(line: &str) -> Option<(String, f64)> {
    let split = key_end(line)?;
    let (key, rest) = line.split_at(split);
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some((normalize_key(key), value))
}

/// Byte index where the `name{labels}` part of a sample line ends. Label values are quoted and
/// may hold spaces, braces, commas and escaped quotes.
fn key_end(line: &str) -> Option<usize> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    if !line[name_end..].starts_with('{') {
        return Some(name_end);
    }
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in line.char_indices().skip_while(|&(i, _)| i <= name_end) {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '}' if !in_quotes => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// `name{b="2",a="1"}` -> `name{a="1",b="2"}`; `name{ k = "v" }` -> `name{k="v"}`;
/// `name{}` -> `name`.
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
        let m = Samples::parse(text);
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
        let m = Samples::parse(
            "# HELP x y\n# TYPE x gauge\nringgate_workers 2\n\
             ringgate_read_buffers_in_use{owner=\"client\"} 33\n\
             ringgate_connect_duration_seconds_quantile{quantile=\"0.99\"} 0.00123\n\
             with_ts 5 1700000000000\n",
        );
        assert_eq!(m.samples["ringgate_workers"], 2.0);
        assert_eq!(
            m.samples["ringgate_read_buffers_in_use{owner=\"client\"}"],
            33.0
        );
        assert_eq!(
            m.samples["ringgate_connect_duration_seconds_quantile{quantile=\"0.99\"}"],
            0.00123
        );
        assert_eq!(m.samples["with_ts"], 5.0);
    }

    #[test]
    fn escapes_infinities_and_broken_lines() {
        let odd = "# comment\n\nfoo{a=\"x y}\\\"z\"} 1.5 1700000000\nbar +Inf\nbaz NaN\n\
                   broken{a=\"b\" 3\nnovalue\nqux -2\n";
        let m = Samples::parse(odd);
        assert_eq!(m.get("foo{a=\"x y}\\\"z\"}"), 1.5);
        assert_eq!(m.get("bar"), f64::INFINITY);
        assert!(m.get("baz").is_nan());
        assert_eq!(m.get("qux"), -2.0);
        assert_eq!(m.samples.len(), 4);
    }
}

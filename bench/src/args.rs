//! The options of a run: `--name value` on the command line, else the environment variable.

use std::collections::HashMap;
use std::time::Duration;

use crate::model::Res;

/// `--name value` from the command line, else the environment variable.
pub struct Args {
    pub flags: HashMap<String, String>,
}

impl Args {
    pub fn parse(v: &[String]) -> Res<Args> {
        let mut flags = HashMap::new();
        let mut i = 0;
        while i < v.len() {
            let a = &v[i];
            let Some(name) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument {a:?}"));
            };
            if let Some((k, val)) = name.split_once('=') {
                flags.insert(k.to_string(), val.to_string());
                i += 1;
            } else {
                let val = v.get(i + 1).ok_or(format!("--{name} needs a value"))?;
                flags.insert(name.to_string(), val.clone());
                i += 2;
            }
        }
        Ok(Args { flags })
    }

    pub fn get(&self, flag: &str, env: &str) -> Option<String> {
        self.flags
            .get(flag)
            .cloned()
            .or_else(|| std::env::var(env).ok())
            .filter(|s| !s.trim().is_empty())
    }

    pub fn num<T: std::str::FromStr>(&self, flag: &str, env: &str) -> Res<Option<T>> {
        match self.get(flag, env) {
            None => Ok(None),
            Some(s) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("--{flag}/{env}: not a number: {s:?}")),
        }
    }
}

/// Seconds as a duration, negative ones as zero.
pub fn secs(d: f64) -> Duration {
    Duration::from_secs_f64(d.max(0.0))
}

/// A number from the environment, else `default` (the scenarios' knobs).
pub fn env_num<T: std::str::FromStr>(k: &str, default: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

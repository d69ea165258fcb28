//! The servers ringgate fronts: `--backend` (repeatable) or the config
//! file's `backend` key, either an address string or `[[backend]]` tables
//! with `address`, `role`, `weight` and `max-lag`.
//!
//! On the command line one `--backend` is `ADDR` or
//! `ADDR,role=replica,weight=2,max-lag=5s`, so that a flag can say what a
//! table says. One server with no options is the simple case, printed back
//! as the plain address it always was.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a server's role is decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendRole {
    /// From the server's `@@read_only` (0: primary, 1: replica), as the
    /// monitor sees it.
    #[default]
    Auto,
    Primary,
    Replica,
}

impl BackendRole {
    fn parse(s: &str) -> Result<BackendRole, String> {
        match s {
            "auto" => Ok(BackendRole::Auto),
            "primary" => Ok(BackendRole::Primary),
            "replica" => Ok(BackendRole::Replica),
            _ => Err(format!(
                "role {s:?}: possible values: auto, primary, replica"
            )),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            BackendRole::Auto => "auto",
            BackendRole::Primary => "primary",
            BackendRole::Replica => "replica",
        }
    }
}

/// One server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    pub address: SocketAddr,
    pub role: BackendRole,
    /// Share of the reads (once reads are routed); 0 takes none.
    pub weight: u32,
    /// A replica further behind than this takes no reads; None: no bound.
    pub max_lag: Option<Duration>,
}

impl BackendSpec {
    pub fn new(address: SocketAddr) -> BackendSpec {
        BackendSpec {
            address,
            role: BackendRole::Auto,
            weight: 1,
            max_lag: None,
        }
    }

    /// Only an address: written back as a plain string.
    fn is_plain(&self) -> bool {
        *self == BackendSpec::new(self.address)
    }
}

/// `ADDR[,role=R][,weight=N][,max-lag=DURATION]`.
pub fn parse_backend(s: &str) -> Result<BackendSpec, String> {
    let mut parts = s.split(',').map(str::trim);
    let addr = parts.next().unwrap_or_default();
    let address: SocketAddr = addr
        .parse()
        .map_err(|e| format!("{addr:?} is not an address such as 127.0.0.1:3306 ({e})"))?;
    let mut spec = BackendSpec::new(address);
    for opt in parts {
        let (key, value) = opt
            .split_once('=')
            .ok_or_else(|| format!("{opt:?}: expected key=value (role, weight, max-lag)"))?;
        match key.trim() {
            "role" => spec.role = BackendRole::parse(value.trim())?,
            "weight" => spec.weight = parse_weight(value.trim())?,
            "max-lag" => spec.max_lag = Some(super::parse_duration(value.trim())?),
            other => {
                return Err(format!(
                    "unknown backend option {other:?} (role, weight, max-lag)"
                ))
            }
        }
    }
    Ok(spec)
}

fn parse_weight(s: &str) -> Result<u32, String> {
    s.parse()
        .map_err(|_| format!("weight {s:?}: a whole number from 0"))
}

impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.address)?;
        if self.is_plain() {
            return Ok(());
        }
        write!(f, ",role={},weight={}", self.role.as_str(), self.weight)?;
        if let Some(lag) = self.max_lag {
            write!(f, ",max-lag={}", humantime::format_duration(lag))?;
        }
        Ok(())
    }
}

/// A `[[backend]]` table, as the file writes it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BackendTable {
    pub address: SocketAddr,
    #[serde(default)]
    pub role: BackendRole,
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lag: Option<String>,
}

fn one() -> u32 {
    1
}

/// The file's `backend` key: one address (the simple case, as before), an
/// array of addresses, or `[[backend]]` tables.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum BackendList {
    One(String),
    Tables(Vec<BackendTable>),
}

impl TryFrom<BackendList> for Vec<BackendSpec> {
    type Error = String;

    fn try_from(list: BackendList) -> Result<Vec<BackendSpec>, String> {
        match list {
            BackendList::One(s) => Ok(vec![parse_backend(&s)?]),
            BackendList::Tables(tables) => tables
                .into_iter()
                .map(|t| {
                    let max_lag = t
                        .max_lag
                        .as_deref()
                        .map(super::parse_duration)
                        .transpose()
                        .map_err(|e| format!("max-lag: {e}"))?;
                    Ok(BackendSpec {
                        address: t.address,
                        role: t.role,
                        weight: t.weight,
                        max_lag,
                    })
                })
                .collect(),
        }
    }
}

impl From<&[BackendSpec]> for BackendList {
    fn from(specs: &[BackendSpec]) -> BackendList {
        match specs {
            [one] if one.is_plain() => BackendList::One(one.address.to_string()),
            _ => BackendList::Tables(
                specs
                    .iter()
                    .map(|s| BackendTable {
                        address: s.address,
                        role: s.role,
                        weight: s.weight,
                        max_lag: s.max_lag.map(|d| humantime::format_duration(d).to_string()),
                    })
                    .collect(),
            ),
        }
    }
}

/// Settings that contradict each other; the first problem found.
pub fn validate(backends: &[BackendSpec], monitor_user: &str) -> Result<(), String> {
    for (i, b) in backends.iter().enumerate() {
        if let Some(dup) = backends[..i].iter().find(|o| o.address == b.address) {
            return Err(format!(
                "backend {} is given twice: each server once, with its role, weight and max-lag",
                dup.address
            ));
        }
    }
    let primaries: Vec<String> = backends
        .iter()
        .filter(|b| b.role == BackendRole::Primary)
        .map(|b| b.address.to_string())
        .collect();
    if primaries.len() > 1 {
        return Err(format!(
            "backends {} are both role=primary: one server takes writes (leave the role \
             auto to follow read_only)",
            primaries.join(" and ")
        ));
    }
    if let Some(p) = backends
        .iter()
        .find(|b| b.role == BackendRole::Primary && b.max_lag.is_some())
    {
        return Err(format!(
            "backend {}: max-lag on a role=primary server, which is never behind",
            p.address
        ));
    }
    if backends.len() < 2 {
        return Ok(());
    }
    let readers = backends
        .iter()
        .filter(|b| b.role != BackendRole::Primary)
        .any(|b| b.weight > 0);
    if !readers {
        return Err(
            "weight 0 on every server that may be a replica: no replica could take a read".into(),
        );
    }
    if monitor_user.is_empty() {
        return Err(format!(
            "{} backends but no --monitor-user: the monitor decides which server is up and \
             which takes writes (see docs/design/monitor.md for its grants)",
            backends.len()
        ));
    }
    Ok(())
}

/// The server the proxy sends everything to until reads and writes are
/// routed: the configured primary, else the first.
pub fn first_writer(backends: &[BackendSpec]) -> Option<SocketAddr> {
    backends
        .iter()
        .find(|b| b.role == BackendRole::Primary)
        .or(backends.first())
        .map(|b| b.address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> BackendSpec {
        parse_backend(s).unwrap()
    }

    #[test]
    fn a_flag_takes_an_address_and_options() {
        let b = spec("127.0.0.1:3441");
        assert_eq!(b, BackendSpec::new("127.0.0.1:3441".parse().unwrap()));
        assert_eq!(b.to_string(), "127.0.0.1:3441");
        let b = spec("127.0.0.1:3442, role=replica, weight=3, max-lag=5s");
        assert_eq!(b.role, BackendRole::Replica);
        assert_eq!(b.weight, 3);
        assert_eq!(b.max_lag, Some(Duration::from_secs(5)));
        assert_eq!(
            b.to_string(),
            "127.0.0.1:3442,role=replica,weight=3,max-lag=5s"
        );
        assert_eq!(spec(&b.to_string()), b);
    }

    #[test]
    fn a_bad_flag_says_what_is_wrong() {
        let e = |s: &str| parse_backend(s).unwrap_err();
        assert!(e("db:3306").contains("not an address"), "{}", e("db:3306"));
        assert!(e("127.0.0.1:1,role=boss").contains("auto, primary, replica"));
        assert!(e("127.0.0.1:1,weight=-1").contains("weight"));
        assert!(e("127.0.0.1:1,lag=1s").contains("unknown backend option"));
        assert!(e("127.0.0.1:1,replica").contains("key=value"));
        assert!(e("127.0.0.1:1,max-lag=soon").contains("examples"));
    }

    #[test]
    fn validation_names_the_conflict() {
        let v = |specs: &[&str], user: &str| {
            let list: Vec<BackendSpec> = specs.iter().map(|s| spec(s)).collect();
            validate(&list, user)
        };
        assert!(v(&["127.0.0.1:1"], "").is_ok());
        assert!(v(&["127.0.0.1:1", "127.0.0.1:2"], "mon").is_ok());
        let e = v(&["127.0.0.1:1", "127.0.0.1:1,weight=2"], "mon").unwrap_err();
        assert!(e.contains("127.0.0.1:1 is given twice"), "{e}");
        let e = v(
            &["127.0.0.1:1,role=primary", "127.0.0.1:2,role=primary"],
            "mon",
        )
        .unwrap_err();
        assert!(e.contains("both role=primary"), "{e}");
        let e = v(&["127.0.0.1:1,role=primary", "127.0.0.1:2,weight=0"], "mon").unwrap_err();
        assert!(e.contains("weight 0 on every"), "{e}");
        let e = v(&["127.0.0.1:1,role=primary,max-lag=1s"], "").unwrap_err();
        assert!(e.contains("max-lag on a role=primary"), "{e}");
        let e = v(&["127.0.0.1:1", "127.0.0.1:2"], "").unwrap_err();
        assert!(e.contains("--monitor-user"), "{e}");
    }

    #[test]
    fn the_first_writer_is_the_configured_primary_else_the_first() {
        let list = [spec("127.0.0.1:1"), spec("127.0.0.1:2,role=primary")];
        assert_eq!(first_writer(&list), Some("127.0.0.1:2".parse().unwrap()));
        assert_eq!(
            first_writer(&list[..1]),
            Some("127.0.0.1:1".parse().unwrap())
        );
    }
}

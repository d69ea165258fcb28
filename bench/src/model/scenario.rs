//! What a run measures: the scenarios of the interleaved rounds, their cells, and the
//! transaction-pooling scenarios that run once each.

use super::records::{cell_label, human_bytes};

/// A scenario of the interleaved rounds, run by the load generator (load.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    Connect,
    PointSelect,
    LargeResult,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Connect => "connect",
            Scenario::PointSelect => "point-select",
            Scenario::LargeResult => "large-result",
        }
    }

    pub fn parse(s: &str) -> Option<Scenario> {
        match s.trim() {
            "connect" => Some(Scenario::Connect),
            "point-select" | "point_select" | "select" => Some(Scenario::PointSelect),
            "large-result" | "large_result" | "large" => Some(Scenario::LargeResult),
            _ => None,
        }
    }
}

/// A transaction-pooling scenario: it starts its own ringgate(s) and runs once, not per
/// target in rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolingScenario {
    ManyClients,
    Idle10k,
    IdleMax,
}

impl PoolingScenario {
    pub fn parse(s: &str) -> Option<PoolingScenario> {
        match s.trim() {
            "many-clients" | "many_clients" => Some(PoolingScenario::ManyClients),
            "idle-10k" | "idle_10k" => Some(PoolingScenario::Idle10k),
            "idle-max" | "idle_max" => Some(PoolingScenario::IdleMax),
            _ => None,
        }
    }

    /// What runs when BENCH_SCENARIOS is not set.
    pub fn defaults(profile: &str) -> Vec<PoolingScenario> {
        match profile {
            "quick" => vec![PoolingScenario::ManyClients, PoolingScenario::Idle10k],
            "full" => vec![
                PoolingScenario::ManyClients,
                PoolingScenario::Idle10k,
                PoolingScenario::IdleMax,
            ],
            // A few seconds: 200 idle clients in fixed mode (the raw clients, the RSS and
            // backend figures, every client answering afterwards).
            "smoke" => vec![PoolingScenario::Idle10k],
            _ => Vec::new(),
        }
    }
}

/// Whether `--scenarios`/BENCH_SCENARIOS asks for the TLS section (it does
/// by default), and the other scenarios of the list.
pub fn split_scenarios(list: Option<&str>) -> (bool, Option<String>) {
    match list {
        None => (true, None),
        Some(s) => {
            let rest: Vec<&str> = s.split(',').filter(|x| x.trim() != "tls").collect();
            (rest.len() < s.split(',').count(), Some(rest.join(",")))
        }
    }
}

/// One scenario at one concurrency (and row size): a row group of the report.
#[derive(Clone, Debug)]
pub struct Cell {
    pub scenario: Scenario,
    pub concurrency: usize,
    pub row_bytes: Option<u64>,
}

impl Cell {
    pub fn label(&self) -> String {
        cell_label(self.scenario.name(), self.concurrency, self.row_bytes)
    }
    pub fn file_stem(&self) -> String {
        match self.row_bytes {
            Some(b) => format!(
                "{}-{}-c{}",
                self.scenario.name(),
                human_bytes(b),
                self.concurrency
            ),
            None => format!("{}-c{}", self.scenario.name(), self.concurrency),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_defaults() {
        assert_eq!(
            PoolingScenario::parse("many-clients"),
            Some(PoolingScenario::ManyClients)
        );
        assert_eq!(
            PoolingScenario::parse(" idle-10k"),
            Some(PoolingScenario::Idle10k)
        );
        assert_eq!(
            PoolingScenario::parse("idle_max"),
            Some(PoolingScenario::IdleMax)
        );
        assert_eq!(PoolingScenario::parse("connect"), None);
        assert!(!PoolingScenario::defaults("quick").contains(&PoolingScenario::IdleMax));
        assert!(PoolingScenario::defaults("full").contains(&PoolingScenario::IdleMax));
        assert_eq!(
            PoolingScenario::defaults("smoke"),
            vec![PoolingScenario::Idle10k]
        );
    }

    #[test]
    fn tls_is_a_scenario_of_its_own() {
        assert_eq!(split_scenarios(None), (true, None));
        assert_eq!(
            split_scenarios(Some("connect,tls")),
            (true, Some("connect".into()))
        );
        assert_eq!(split_scenarios(Some("tls")), (true, Some("".into())));
        assert_eq!(
            split_scenarios(Some("connect,point-select")),
            (false, Some("connect,point-select".into()))
        );
    }
}

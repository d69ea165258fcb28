//! The result rows of the TLS section: one per target and mode, merged over its rounds.

use serde::Serialize;

use crate::hist::Percentiles;

/// What a step measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    ConnectPlain,
    ConnectFull,
    ConnectResumed,
    SelectPlain,
    SelectTls,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::ConnectPlain,
        Mode::ConnectFull,
        Mode::ConnectResumed,
        Mode::SelectPlain,
        Mode::SelectTls,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Mode::ConnectPlain => "connect-plain",
            Mode::ConnectFull => "connect-full",
            Mode::ConnectResumed => "connect-resumed",
            Mode::SelectPlain => "select-plain",
            Mode::SelectTls => "select-tls",
        }
    }
    pub fn tls(self) -> bool {
        !matches!(self, Mode::ConnectPlain | Mode::SelectPlain)
    }
    pub fn connects(self) -> bool {
        matches!(
            self,
            Mode::ConnectPlain | Mode::ConnectFull | Mode::ConnectResumed
        )
    }
}

/// One target × mode, merged over rounds.
#[derive(Clone, Debug, Serialize)]
pub struct TlsRecord {
    pub target: String,
    pub mode: Mode,
    pub concurrency: usize,
    pub count: u64,
    pub failures: u64,
    pub first_error: Option<String>,
    pub rate: f64,
    pub latency: Percentiles,
    /// TLS handshakes the client saw resumed / all TLS handshakes.
    pub resumed: u64,
    pub handshakes: u64,
    /// CPU per successful operation, µs.
    pub proxy_cpu_us_per_op: Option<f64>,
    pub mariadb_cpu_us_per_op: Option<f64>,
    pub seconds: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TlsReport {
    pub records: Vec<TlsRecord>,
    pub notes: Vec<String>,
    /// ringgate's leak check after the section.
    pub leaks: Vec<String>,
    pub loadavg_start: String,
    pub loadavg_end: String,
}

impl TlsReport {
    /// What makes a smoke run fail: failures or nothing measured.
    pub fn problems(&self) -> Vec<String> {
        let mut p: Vec<String> = self
            .records
            .iter()
            .filter(|r| r.failures > 0 || r.count == 0)
            .map(|r| {
                format!(
                    "tls {} / {}: count {} failures {} ({:?})",
                    r.mode.name(),
                    r.target,
                    r.count,
                    r.failures,
                    r.first_error
                )
            })
            .collect();
        if self.records.is_empty() {
            p.push("tls: nothing measured".into());
        }
        p.extend(self.leaks.iter().map(|l| format!("tls leak check: {l}")));
        p
    }
}

//! `ringgate check`: a preflight report on whether this host can run
//! ringgate well with the given settings.
//!
//! Each check prints one `OK`/`WARN`/`FAIL` line saying what it found, and a
//! `fix:` line for anything that is not OK. The report exits non-zero when
//! any check FAILs: something that stops ringgate from starting, or makes
//! it run worse than configured (e.g. heap buffers instead of fixed ones).

use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

use crate::config::Config;
use wire::Users;

mod backend_reach;
mod certs;
mod kernel;
mod limits;
mod listen_address;
pub mod tls;

pub use crate::blocking_login::BackendError;
use backend_reach::check_backend;
pub use backend_reach::{backend_greeting, backend_login, BackendSummary};
use certs::{check_cert_expiry, check_key_match};
use kernel::{
    check_io_uring, check_kernel, kernel_charges_rings, kernel_release, worker_ring_sizes,
};
pub use kernel::{parse_version, ring_locked_bytes, Kernel};
use limits::{cap_eff, memlock_limit, nofile_limit, CAP_IPC_LOCK};
pub use limits::{check_memlock, check_nofile, fds_needed, Limit};
use listen_address::check_listen;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Item {
    pub status: Status,
    pub what: &'static str,
    pub detail: String,
    pub fix: Option<String>,
}

impl Item {
    fn ok(what: &'static str, detail: impl Into<String>) -> Item {
        Item {
            status: Status::Ok,
            what,
            detail: detail.into(),
            fix: None,
        }
    }
    fn warn(what: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Item {
        Item {
            status: Status::Warn,
            what,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    fn fail(what: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Item {
        Item {
            status: Status::Fail,
            what,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct Report {
    pub items: Vec<Item>,
}

impl Report {
    /// True when nothing FAILed (WARNs are allowed).
    pub fn passed(&self) -> bool {
        self.items.iter().all(|i| i.status != Status::Fail)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for i in &self.items {
            let _ = writeln!(out, "{:<4}  {:<9} {}", i.status.as_str(), i.what, i.detail);
            if let Some(fix) = &i.fix {
                for (n, line) in fix.lines().enumerate() {
                    let lead = if n == 0 { "fix:" } else { "    " };
                    let _ = writeln!(out, "{:<4}  {:<9} {lead} {line}", "", "");
                }
            }
        }
        let fails = self
            .items
            .iter()
            .filter(|i| i.status == Status::Fail)
            .count();
        let warns = self
            .items
            .iter()
            .filter(|i| i.status == Status::Warn)
            .count();
        if fails == 0 {
            let _ = writeln!(
                out,
                "\nready: {warns} warning(s), no problem blocks a good run"
            );
        } else {
            let _ = writeln!(
                out,
                "\nNOT ready: {fails} problem(s) block a good run, {warns} warning(s)"
            );
        }
        out
    }
}

/// Runs every check for `cfg`.
pub fn run(cfg: &Config) -> Report {
    let kernel = kernel_release();
    let caps = cap_eff();
    let mut items = vec![check_kernel(&kernel, cfg)];
    let exempt = caps.is_some_and(|c| c & (1 << CAP_IPC_LOCK) != 0);
    let ring_bytes = if !exempt && kernel_charges_rings() == Some(true) {
        let (sq, cq) = worker_ring_sizes(cfg);
        ring_locked_bytes(sq, cq)
    } else {
        0
    };
    items.push(check_io_uring(cfg, &kernel, ring_bytes));
    items.push(check_memlock(cfg, ring_bytes, memlock_limit(), caps));
    items.push(check_nofile(cfg, nofile_limit()));
    items.push(check_listen(cfg));
    items.push(check_users(&cfg.users_file));
    // Every server of several: any of them may become the writer.
    let servers: Vec<_> = cfg.backends.iter().map(|b| b.address).collect();
    if servers.len() > 1 {
        for address in servers {
            let mut one = cfg.clone();
            one.backend = address;
            items.push(check_backend(&one));
        }
    } else {
        items.push(check_backend(cfg));
    }
    if let Some(ca) = &cfg.backend_tls_ca {
        items.push(check_cert_expiry("backend-tls-ca", ca, SystemTime::now()));
    }
    // The front end's certificates: start-up refuses a broken set, but an
    // expiry weeks away or a key replaced on disk (read at the next SIGHUP)
    // is only seen here.
    if let Some(cert) = &cfg.tls_cert {
        items.push(check_cert_expiry("tls-cert", cert, SystemTime::now()));
        if let Some(key) = &cfg.tls_key {
            items.push(check_key_match(cert, key));
        }
    }
    if let Some(ca) = &cfg.tls_client_ca {
        items.push(check_cert_expiry("tls-client-ca", ca, SystemTime::now()));
    }
    Report { items }
}

// ---------------------------------------------------------------------------
// Users file
// ---------------------------------------------------------------------------

fn check_users(path: &Path) -> Item {
    let what = "users";
    match Users::load(path) {
        Ok(u) if u.is_empty() => Item::warn(
            what,
            format!(
                "{} parses but has no users: every login fails",
                path.display()
            ),
            "add users in Vitess static-auth JSON: {\"user\": [{\"Password\": \"...\"}]}",
        ),
        Ok(u) => Item::ok(what, format!("{}: {} user(s)", path.display(), u.len())),
        Err(e) => Item::fail(
            what,
            e.to_string(),
            "fix the file (Vitess static-auth JSON: {\"user\": [{\"Password\": \"...\"}]} or \
             {\"user\": [{\"MysqlNativePassword\": \"*HEX\"}]}) or --users-file",
        ),
    }
}

#[cfg(test)]
mod tests;

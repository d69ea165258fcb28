//! Setting a run up: the host (limits, paths, what the machine is), the MariaDB backend and
//! its data, and the proxies the bench launches. Scenarios start their own ringgates through
//! `launch`, with the run's context below.

pub mod backend;
pub mod host;
pub mod launch;

use std::path::Path;
use std::time::Duration;

use crate::model::addr;
use crate::model::profile::Profile;
use crate::model::target::Backend;
use crate::rawclient::Login;

/// What a scenario needs from the run to start a ringgate and to reach MariaDB.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub bin: &'a Path,
    pub backend: &'a Backend,
    pub users: &'a Path,
    pub run_dir: &'a Path,
    pub prof: &'a Profile,
    pub base_port: u16,
}

impl Ctx<'_> {
    /// A raw login to MariaDB itself, for its status counters.
    pub fn server_login(&self) -> Login {
        Login {
            addr: addr(self.backend.port),
            user: self.backend.user.clone(),
            password: self.backend.password.clone(),
            db: None,
            timeout: Duration::from_secs(10),
        }
    }
}

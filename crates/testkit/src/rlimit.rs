//! This process's fd limit: the idle and memory tests hold thousands of sockets at once.

use uring::sys::{rlimit, set_rlimit, Resource, Rlimit};

fn nofile() -> Rlimit {
    rlimit(Resource::Nofile).unwrap_or_else(|e| panic!("getrlimit(NOFILE): {e}"))
}

/// The hard limit on open fds (RLIMIT_NOFILE).
pub fn hard_nofile() -> u64 {
    nofile().hard
}

/// Raises the soft fd limit to the hard one, and the hard one to `want` when it is lower
/// (allowed as root); panics when the limit cannot reach `want`.
pub fn raise_nofile(want: u64) {
    let mut lim = nofile();
    if lim.hard < want {
        lim.hard = want;
    }
    lim.soft = lim.hard;
    if let Err(e) = set_rlimit(Resource::Nofile, lim) {
        panic!(
            "setrlimit(NOFILE, {want}): raise the hard fd limit (ulimit -Hn) or run as root: {e}"
        );
    }
}

//! This process's fd limit: the idle and memory tests hold thousands of sockets at once.

fn nofile() -> libc::rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid struct we own.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert_eq!(r, 0, "getrlimit(NOFILE)");
    lim
}

/// The hard limit on open fds (RLIMIT_NOFILE).
pub fn hard_nofile() -> u64 {
    nofile().rlim_max
}

/// Raises the soft fd limit to the hard one, and the hard one to `want` when it is lower
/// (allowed as root); panics when the limit cannot reach `want`.
pub fn raise_nofile(want: u64) {
    let mut lim = nofile();
    if lim.rlim_max < want {
        lim.rlim_max = want;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads a valid, initialised struct.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    assert_eq!(
        r, 0,
        "setrlimit(NOFILE, {want}): raise the hard fd limit (ulimit -Hn) or run as root"
    );
}

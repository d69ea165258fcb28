//! The few plain system calls the layers above need outside the ring, as
//! safe functions.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// shutdown(2) both ways. Used on a client socket that another worker owns
/// (a KILL): the owner's pending reads then complete, and it closes the fd.
/// The caller guarantees that `fd` is still that socket (not yet closed,
/// so not reused for another file).
pub fn shutdown_fd(fd: RawFd) {
    // SAFETY: shutdown(2) takes no memory. On a wrong fd it fails with
    // EBADF or ENOTSOCK and changes nothing.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

/// The release field of uname(2), e.g. `6.8.0-45-generic`; `None` when
/// uname fails.
pub fn kernel_release() -> Option<String> {
    // SAFETY: utsname is plain arrays of C chars, for which all-zero is a
    // valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname that uname fills.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    // SAFETY: uname NUL-terminates `release` inside its array, and `uts`
    // outlives the borrow (the string is copied out before it ends).
    let release = unsafe { CStr::from_ptr(uts.release.as_ptr()) };
    Some(release.to_string_lossy().into_owned())
}

/// The resource limits ringgate reads or sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// RLIMIT_NOFILE: open file descriptors (every client and backend
    /// connection is one, and it caps a direct-descriptor table's size).
    Nofile,
    /// RLIMIT_MEMLOCK: locked memory, which registered buffers and, on some
    /// kernels, the rings themselves are charged to.
    Memlock,
}

impl Resource {
    fn raw(self) -> libc::__rlimit_resource_t {
        match self {
            Resource::Nofile => libc::RLIMIT_NOFILE,
            Resource::Memlock => libc::RLIMIT_MEMLOCK,
        }
    }
}

/// "No limit" in an [`Rlimit`] field (the kernel's RLIM_INFINITY).
pub const RLIM_INFINITY: u64 = libc::RLIM_INFINITY;

/// A resource limit's soft and hard values; [`RLIM_INFINITY`] means none.
/// (rlim_t is a u64 on the 64-bit Linux targets ringgate builds for.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub soft: u64,
    pub hard: u64,
}

/// getrlimit(2).
pub fn rlimit(resource: Resource) -> io::Result<Rlimit> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(resource.raw(), &mut rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Rlimit {
        soft: rl.rlim_cur,
        hard: rl.rlim_max,
    })
}

/// setrlimit(2). Lowering either value is always allowed; raising the soft
/// one up to the hard one is too; raising the hard one needs
/// CAP_SYS_RESOURCE.
pub fn set_rlimit(resource: Resource, limit: Rlimit) -> io::Result<()> {
    let rl = libc::rlimit {
        rlim_cur: limit.soft,
        rlim_max: limit.hard,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    if unsafe { libc::setrlimit(resource.raw(), &rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// access(2) with W_OK | X_OK: whether this process may create entries in
/// the directory `dir` (writing a directory's entries needs both). A path
/// with a NUL byte in it is `InvalidInput`.
pub fn access_writable(dir: &Path) -> io::Result<()> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: access(2) only reads the NUL-terminated path we pass, which
    // `c` keeps alive for the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_shut_down_socket_reads_eof_at_its_peer() {
        let (ours, mut peer) = UnixStream::pair().unwrap();
        shutdown_fd(ours.as_raw_fd());
        let mut buf = [0u8; 1];
        assert_eq!(peer.read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn the_kernel_release_starts_with_its_version() {
        let release = kernel_release().unwrap();
        assert!(
            release.starts_with(|c: char| c.is_ascii_digit()),
            "{release}"
        );
    }

    #[test]
    fn a_limit_set_to_what_it_is_reads_back() {
        // Only a no-op set: rlimits are per process, and the tests running
        // beside this one register buffers and open fds under them.
        let orig = rlimit(Resource::Memlock).unwrap();
        assert!(orig.soft <= orig.hard);
        set_rlimit(Resource::Memlock, orig).unwrap();
        assert_eq!(rlimit(Resource::Memlock).unwrap(), orig);
    }

    #[test]
    fn a_soft_limit_above_the_hard_one_is_refused() {
        let orig = rlimit(Resource::Nofile).unwrap();
        if orig.hard == RLIM_INFINITY {
            return;
        }
        let over = Rlimit {
            soft: orig.hard + 1,
            hard: orig.hard,
        };
        let err = set_rlimit(Resource::Nofile, over).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(rlimit(Resource::Nofile).unwrap(), orig);
    }

    #[test]
    fn a_private_directory_is_writable_and_a_missing_one_is_not() {
        let dir = std::env::temp_dir().join(format!("uring-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        access_writable(&dir).unwrap();
        let missing = dir.join("absent");
        let err = access_writable(&missing).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let nul = Path::new(std::ffi::OsStr::from_bytes(b"a\0b"));
        let err = access_writable(nul).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        std::fs::remove_dir(&dir).unwrap();
    }
}

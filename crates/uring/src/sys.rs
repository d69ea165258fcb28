//! The few plain system calls the layers above need outside the ring, as
//! safe functions.

use std::os::fd::RawFd;

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
}

//! The peer-address buffers of direct accepts.
//!
//! A multishot accept shares one address buffer between its completions,
//! so a worker that needs each client's address (the `'u'@'host'` of ERR
//! 1045, log lines) accepts with several one-shot accepts in flight, each
//! with its own `sockaddr_storage` here. The kernel writes the address and
//! its length when the accept completes: the entry is in flight, and not
//! read, from [`AcceptAddrs::accept_sqe`] until [`AcceptAddrs::complete`].

use std::cell::UnsafeCell;
use std::net::SocketAddr;

use io_uring::{opcode, types};

use crate::ring::{SockRef, Sqe};
use crate::sock_op;

struct Addr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

/// One address per accept lane; the memory never moves (a boxed slice is
/// never reallocated) and the kernel's writes go through `UnsafeCell`s.
pub struct AcceptAddrs {
    addrs: Box<[UnsafeCell<Addr>]>,
    in_flight: Vec<bool>,
}

impl AcceptAddrs {
    pub fn new(lanes: usize) -> AcceptAddrs {
        let addrs = (0..lanes)
            .map(|_| {
                UnsafeCell::new(Addr {
                    // SAFETY: all-zero is a valid sockaddr_storage (AF_UNSPEC).
                    storage: unsafe { std::mem::zeroed() },
                    len: 0,
                })
            })
            .collect();
        AcceptAddrs {
            addrs,
            in_flight: vec![false; lanes],
        }
    }

    pub fn lanes(&self) -> usize {
        self.addrs.len()
    }

    pub fn in_flight(&self, lane: usize) -> bool {
        self.in_flight.get(lane).copied().unwrap_or(false)
    }

    /// A one-shot accept on `listener` into a direct descriptor the kernel
    /// allocates (IORING_FILE_INDEX_ALLOC), writing the peer's address into
    /// lane `lane`'s buffer. The lane is in flight until `complete`.
    pub fn accept_sqe(&mut self, lane: usize, listener: SockRef, user_data: u64) -> Sqe {
        assert!(!self.in_flight[lane], "second accept on a busy lane");
        self.in_flight[lane] = true;
        let a = self.addrs[lane].get();
        // SAFETY: the lane was idle, so nothing else reads or writes it;
        // `a` points into the boxed slice, which does not move.
        let (addr, len) = unsafe {
            (*a).len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            (
                std::ptr::addr_of_mut!((*a).storage).cast::<libc::sockaddr>(),
                std::ptr::addr_of_mut!((*a).len),
            )
        };
        let entry = sock_op!(listener, |t| opcode::Accept::new(t, addr, len)
            // No SOCK_CLOEXEC: the kernel refuses it with a file slot
            // (EINVAL), and a direct descriptor has no fd to inherit anyway.
            .file_index(Some(types::DestinationSlot::auto_target()))
            .build())
        .user_data(user_data);
        // SAFETY: the lane is marked in flight: it is not read or handed to
        // another accept until `complete` for this accept's (real or
        // synthetic) completion, and dropping `AcceptAddrs` while a lane is
        // in flight leaks the memory instead of freeing it.
        unsafe { Sqe::new(entry) }
    }

    /// The accept of `lane` completed: the lane is free again, and the
    /// peer's address if the accept succeeded (`res >= 0`) and it is an
    /// IPv4/IPv6 one (`None` for a unix peer).
    pub fn complete(&mut self, lane: usize, res: i32) -> Option<SocketAddr> {
        debug_assert!(self.in_flight[lane], "completion of an idle lane");
        self.in_flight[lane] = false;
        if res < 0 {
            return None;
        }
        // SAFETY: the lane is no longer in flight: the kernel is done with it.
        let a = unsafe { &*self.addrs[lane].get() };
        let len = a
            .len
            .min(std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t);
        // SAFETY: the kernel wrote a sockaddr of `len` bytes (at most the
        // storage's size) into `storage`.
        let sa = unsafe { socket2::SockAddr::new(a.storage, len) };
        sa.as_socket()
    }
}

impl Drop for AcceptAddrs {
    fn drop(&mut self) {
        if self.in_flight.iter().any(|&b| b) {
            // The kernel may still write an address here: leak it.
            std::mem::forget(std::mem::take(&mut self.addrs));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{DebugKnobs, OpTag, Ring, Token};
    use std::os::fd::AsRawFd;

    #[test]
    fn a_direct_accept_reports_its_peers_address_per_lane() {
        let mut ring = Ring::with_knobs(8, 16, DebugKnobs::default()).unwrap();
        ring.setup_direct_files(4).expect("direct descriptors");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut addrs = AcceptAddrs::new(2);
        for lane in 0..2 {
            let t = Token::new(OpTag::Ignore, lane, 0);
            ring.push(addrs.accept_sqe(lane as usize, listener.as_raw_fd().into(), t.into()));
        }
        let c1 = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let c2 = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut got = Vec::new();
        let mut batch = Vec::new();
        while got.len() < 2 {
            ring.submit_and_wait().unwrap();
            batch.clear();
            ring.reap(&mut batch);
            for c in &batch {
                let lane = Token::decode(c.user_data).unwrap().index as usize;
                assert!(c.result >= 0, "accept: {}", c.result);
                got.push((c.result, addrs.complete(lane, c.result)));
            }
        }
        let mut slots: Vec<i32> = got.iter().map(|g| g.0).collect();
        slots.sort();
        assert!(
            slots[0] != slots[1] && slots[1] < 4,
            "two slots of the table: {slots:?}"
        );
        let mut peers: Vec<SocketAddr> = got.iter().map(|g| g.1.unwrap()).collect();
        peers.sort();
        let mut want = vec![c1.local_addr().unwrap(), c2.local_addr().unwrap()];
        want.sort();
        assert_eq!(peers, want);
        assert!(!addrs.in_flight(0) && !addrs.in_flight(1));
    }
}

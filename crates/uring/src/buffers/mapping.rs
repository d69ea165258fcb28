//! The page-aligned anonymous mappings behind the fixed region and the
//! buffer ring: page alignment makes the locked-memory charge of a fixed
//! registration exactly its size, and both hand the kernel addresses that
//! must stay mapped until the ring is gone.

use std::io;

/// A page-aligned anonymous mapping, unmapped on drop.
pub(super) struct Mapping {
    pub(super) base: *mut u8,
    len: usize,
}

impl Mapping {
    pub(super) fn new(len: usize) -> io::Result<Mapping> {
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`. The worker drops its
        // io_uring (which releases a fixed-buffer registration or
        // unregisters a buffer ring) before its buffer pool; pages a live
        // registration still pins stay allocated by the kernel's refcount.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

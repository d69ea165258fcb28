//! The registered region: one page-aligned anonymous mapping per worker,
//! registered with the worker's ring as `count` equal slots.
//!
//! One mapping instead of `count` allocations because the kernel charges
//! locked memory per pinned page: page-aligned slots cost exactly
//! `count × size` against RLIMIT_MEMLOCK, unaligned heap buffers up to twice
//! that (a heap buffer pins every page it touches, shared pages included).

use std::io;

use thiserror::Error;

use super::mapping::Mapping;
use crate::ring::Ring;

/// Why the fixed pool could not be set up. Every variant's message names
/// the cause and the fix; the worker then runs in heap mode.
#[derive(Debug, Error)]
pub enum RegisterError {
    #[error(
        "cannot register {bytes} bytes of read buffers: locked-memory limit too small \
         (RLIMIT_MEMLOCK soft limit {limit}); raise LimitMEMLOCK (systemd) or `ulimit -l`, \
         or grant CAP_IPC_LOCK, or lower --read-buffer-count/--read-buffer-size"
    )]
    MemlockTooSmall { bytes: usize, limit: String },
    #[error(
        "cannot register read buffers: permission denied ({0}); grant CAP_IPC_LOCK or raise \
         LimitMEMLOCK"
    )]
    PermissionDenied(io::Error),
    #[error("cannot map {bytes} bytes for read buffers: {source}")]
    Map { bytes: usize, source: io::Error },
    #[error(
        "this kernel rejected the buffer table ({0}); fixed buffers need Linux 5.1+, \
         and more than 1024 slots need 5.13+"
    )]
    Unsupported(io::Error),
}

pub(super) struct FixedRegion {
    /// Unmapped on drop, after the worker's ring has released the
    /// registration.
    map: Mapping,
    slot_size: usize,
    count: usize,
}

fn memlock_limit() -> String {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
        return "unknown".into();
    }
    if rl.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        format!("{} bytes", rl.rlim_cur)
    }
}

impl FixedRegion {
    pub(super) fn map_and_register(
        ring: &Ring,
        slot_size: usize,
        count: usize,
    ) -> Result<FixedRegion, RegisterError> {
        let len = slot_size * count;
        let map = Mapping::new(len).map_err(|source| RegisterError::Map { bytes: len, source })?;
        let region = FixedRegion {
            map,
            slot_size,
            count,
        };
        let iovecs: Vec<libc::iovec> = (0..count)
            .map(|i| libc::iovec {
                iov_base: region.slot_ptr(i as u16).cast(),
                iov_len: slot_size,
            })
            .collect();
        // SAFETY: the iovecs cover `region`, which stays mapped until the
        // region is dropped; the worker drops its ring (which releases the
        // registration) before its buffer pool.
        match unsafe { ring.register_buffers(&iovecs) } {
            Ok(()) => Ok(region),
            Err(e) => Err(match e.raw_os_error() {
                Some(libc::ENOMEM) => RegisterError::MemlockTooSmall {
                    bytes: len,
                    limit: memlock_limit(),
                },
                Some(libc::EPERM) | Some(libc::EACCES) => RegisterError::PermissionDenied(e),
                _ => RegisterError::Unsupported(e),
            }),
            // `region` is dropped (unmapped) on the error paths above.
        }
    }

    pub(super) fn count(&self) -> usize {
        self.count
    }

    pub(super) fn slot_ptr(&self, index: u16) -> *mut u8 {
        let index = usize::from(index);
        assert!(index < self.count);
        // SAFETY: index < count, so the offset stays inside the mapping.
        unsafe { self.map.base.add(index * self.slot_size) }
    }
}

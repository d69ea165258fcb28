//! Debug-build knobs that make the ring's rare paths happen on command, so
//! tests can show that every slot, fd and backend comes back:
//!
//! - `RINGGATE_FAULT_INJECT=push_fail=37,ebusy=11`: every 37th push (or
//!   linked pair) fails with a synthetic `-EIO` completion, and every 11th
//!   io_uring_enter is replaced by an EBUSY, which forces the
//!   reap-into-backlog path. `cancel_fail=N`: every Nth ASYNC_CANCEL push
//!   fails the same way (a cancel that never reached the kernel: the
//!   operation it named stays in flight). `link_eagain=N`: every Nth
//!   write linked to a read (`Ring::push_write_then_read`) comes back as
//!   one that found no room: -EAGAIN for the write, the read dropped without
//!   a CQE, as the kernel does (`ring::link_tests`).
//! - `RINGGATE_DEBUG_CQ_ENTRIES=N`: a completion ring of N entries, so that
//!   real kernel CQ overflow happens under load.
//!
//! - `RINGGATE_DEBUG_PROBE_FAIL=buf_ring,recv_multishot,pbuf_inc,ring_fd,direct_fd,bundle`:
//!   the start-up probes of `--read-buffers ring` (and the ring-fd
//!   registration, and direct descriptors) report these kernel features missing, so each fallback
//!   runs on a kernel that has them.
//!
//! Release builds never read these variables (the hooks compile to
//! `false`). A malformed value is a start-up error that names the variable.

use super::RingError;

pub const FAULT_INJECT_VAR: &str = "RINGGATE_FAULT_INJECT";
pub const DEBUG_CQ_ENTRIES_VAR: &str = "RINGGATE_DEBUG_CQ_ENTRIES";
pub const DEBUG_PROBE_FAIL_VAR: &str = "RINGGATE_DEBUG_PROBE_FAIL";

/// Kernel features whose start-up probe is forced to fail (debug builds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeFail {
    /// IORING_REGISTER_PBUF_RING (provided-buffer rings, 5.19).
    pub buf_ring: bool,
    /// IORING_RECV_MULTISHOT (6.0).
    pub recv_multishot: bool,
    /// IOU_PBUF_RING_INC (incremental consumption, 6.12).
    pub pbuf_inc: bool,
    /// IORING_REGISTER_RING_FDS (registered ring fd, 5.18).
    pub ring_fd: bool,
    /// Direct descriptors (registered file table + IORING_FILE_INDEX_ALLOC, 5.19).
    pub direct_fd: bool,
    /// IORING_RECVSEND_BUNDLE (bundled receives, 6.10).
    pub bundle: bool,
}

/// Parse `name[,name]`: buf_ring, recv_multishot, pbuf_inc, ring_fd, direct_fd, bundle.
pub fn parse_probe_fail(spec: &str) -> Result<ProbeFail, String> {
    let mut p = ProbeFail::default();
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        match item {
            "buf_ring" => p.buf_ring = true,
            "recv_multishot" => p.recv_multishot = true,
            "pbuf_inc" => p.pbuf_inc = true,
            "ring_fd" => p.ring_fd = true,
            "direct_fd" => p.direct_fd = true,
            "bundle" => p.bundle = true,
            _ => {
                return Err(format!(
                    "unknown probe `{item}` (known: buf_ring, recv_multishot, pbuf_inc, ring_fd, \
                     direct_fd, bundle)"
                ))
            }
        }
    }
    Ok(p)
}

/// Which faults to inject: "every Nth", 0 = never.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    pub push_fail: u32,
    pub ebusy: u32,
    /// Every Nth cancel (IORING_OP_ASYNC_CANCEL) push fails.
    pub cancel_fail: u32,
    /// Every Nth linked write finds no room (-EAGAIN, its read dropped).
    pub link_eagain: u32,
}

impl FaultPlan {
    pub fn is_active(&self) -> bool {
        self.push_fail != 0 || self.ebusy != 0 || self.cancel_fail != 0 || self.link_eagain != 0
    }
}

/// Parse `key=N[,key=N]`: keys `push_fail`, `ebusy`, `cancel_fail` and `link_eagain`, each at
/// most once,
/// N a positive integer. The empty string means no injection.
pub fn parse_fault_plan(spec: &str) -> Result<FaultPlan, String> {
    let mut plan = FaultPlan::default();
    if spec.is_empty() {
        return Ok(plan);
    }
    for item in spec.split(',') {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| format!("`{item}` is not key=N"))?;
        let n = parse_positive(value).map_err(|why| format!("{key}: {why}"))?;
        let slot = match key {
            "push_fail" => &mut plan.push_fail,
            "ebusy" => &mut plan.ebusy,
            "cancel_fail" => &mut plan.cancel_fail,
            "link_eagain" => &mut plan.link_eagain,
            _ => {
                return Err(format!(
                    "unknown key `{key}` (known: push_fail, ebusy, cancel_fail, link_eagain)"
                ))
            }
        };
        if *slot != 0 {
            return Err(format!("`{key}` given twice"));
        }
        *slot = n;
    }
    Ok(plan)
}

/// Parse a forced CQ size: 2..=65536 (the kernel's IORING_MAX_CQ_ENTRIES;
/// 2 so that a linked pair still fits the SQ, which may not exceed the CQ).
pub fn parse_cq_entries(value: &str) -> Result<u32, String> {
    let n = parse_positive(value)?;
    if !(2..=super::MAX_CQ_ENTRIES).contains(&n) {
        return Err(format!("{n} is outside 2..={}", super::MAX_CQ_ENTRIES));
    }
    Ok(n)
}

fn parse_positive(value: &str) -> Result<u32, String> {
    // `u32::from_str` accepts a leading '+'; strict means digits only.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{value}` is not a positive integer"));
    }
    match value.parse::<u32>() {
        Ok(0) => Err("0 is not a positive integer".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("`{value}`: {e}")),
    }
}

/// The knobs a ring is built with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugKnobs {
    pub faults: FaultPlan,
    pub cq_entries: Option<u32>,
    pub probe_fail: ProbeFail,
}

impl DebugKnobs {
    /// Read both variables (debug builds only; release builds return the
    /// default without looking).
    pub fn from_env() -> Result<DebugKnobs, RingError> {
        #[cfg(debug_assertions)]
        {
            let read = |var: &'static str| match std::env::var(var) {
                Ok(v) => Ok(Some(v)),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => Err(RingError::DebugEnv {
                    var,
                    reason: "not valid UTF-8".into(),
                }),
            };
            let bad = |var: &'static str| move |reason| RingError::DebugEnv { var, reason };
            let faults = match read(FAULT_INJECT_VAR)? {
                Some(v) => parse_fault_plan(&v).map_err(bad(FAULT_INJECT_VAR))?,
                None => FaultPlan::default(),
            };
            let cq_entries = match read(DEBUG_CQ_ENTRIES_VAR)? {
                Some(v) => Some(parse_cq_entries(&v).map_err(bad(DEBUG_CQ_ENTRIES_VAR))?),
                None => None,
            };
            let probe_fail = match read(DEBUG_PROBE_FAIL_VAR)? {
                Some(v) => parse_probe_fail(&v).map_err(bad(DEBUG_PROBE_FAIL_VAR))?,
                None => ProbeFail::default(),
            };
            let knobs = DebugKnobs {
                faults,
                cq_entries,
                probe_fail,
            };
            if knobs.faults.is_active() || knobs.cq_entries.is_some() {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    let every = |n: u32| match n {
                        0 => "never".to_owned(),
                        n => format!("every {n}th"),
                    };
                    tracing::warn!(
                        "io_uring fault injection is active (debug build, {FAULT_INJECT_VAR} / \
                         {DEBUG_CQ_ENTRIES_VAR}): push fails {}, cancel push fails {}, enter \
                         acts as EBUSY {}, CQ size {}",
                        every(knobs.faults.push_fail),
                        every(knobs.faults.cancel_fail),
                        every(knobs.faults.ebusy),
                        knobs
                            .cq_entries
                            .map_or("as configured".to_owned(), |n| n.to_string())
                    );
                });
            }
            Ok(knobs)
        }
        #[cfg(not(debug_assertions))]
        Ok(DebugKnobs::default())
    }
}

/// Counts pushes and enters and says when a fault is due.
#[derive(Debug, Default)]
pub(super) struct Injector {
    #[cfg(debug_assertions)]
    plan: FaultPlan,
    #[cfg(debug_assertions)]
    pushes: u32,
    #[cfg(debug_assertions)]
    cancels: u32,
    #[cfg(debug_assertions)]
    links: u32,
    #[cfg(debug_assertions)]
    enters: u32,
}

impl Injector {
    pub(super) fn new(plan: FaultPlan) -> Injector {
        #[cfg(debug_assertions)]
        {
            Injector {
                plan,
                pushes: 0,
                cancels: 0,
                links: 0,
                enters: 0,
            }
        }
        #[cfg(not(debug_assertions))]
        {
            let _ = plan;
            Injector {}
        }
    }

    /// Called once per push (a linked pair counts once).
    #[inline]
    pub(super) fn fail_push(&mut self) -> bool {
        #[cfg(debug_assertions)]
        {
            due(&mut self.pushes, self.plan.push_fail)
        }
        #[cfg(not(debug_assertions))]
        false
    }

    /// Called once per push (after `fail_push`) with the SQE's opcode:
    /// counts the cancels.
    #[inline]
    pub(super) fn fail_cancel(&mut self, opcode: u32) -> bool {
        #[cfg(debug_assertions)]
        {
            opcode == u32::from(io_uring::opcode::AsyncCancel::CODE)
                && due(&mut self.cancels, self.plan.cancel_fail)
        }
        #[cfg(not(debug_assertions))]
        {
            let _ = opcode;
            false
        }
    }

    /// Called once per write linked to a read (after `fail_push`).
    #[inline]
    pub(super) fn link_eagain(&mut self) -> bool {
        #[cfg(debug_assertions)]
        {
            due(&mut self.links, self.plan.link_eagain)
        }
        #[cfg(not(debug_assertions))]
        false
    }

    /// Called once per io_uring_enter that submits.
    #[inline]
    pub(super) fn ebusy(&mut self) -> bool {
        #[cfg(debug_assertions)]
        {
            due(&mut self.enters, self.plan.ebusy)
        }
        #[cfg(not(debug_assertions))]
        false
    }
}

#[cfg(debug_assertions)]
fn due(counter: &mut u32, every: u32) -> bool {
    if every == 0 {
        return false;
    }
    *counter += 1;
    if *counter >= every {
        *counter = 0;
        true
    } else {
        false
    }
}

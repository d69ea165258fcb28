//! What /proc says about a process: CPU time, memory, fds, threads' context switches, state,
//! io_uring file tables, and the TCP queues of a port.
//!
//! Two flavours: the bench's readers return `None` when /proc cannot be read (a process that
//! just ended); the tests' readers panic instead of reporting 0, which would let an fd, CPU or
//! RSS check pass without measuring anything. Both parse /proc the same way.

use std::fs;
use std::time::Duration;

/// Fields 3 onwards of /proc/PID/stat. They follow the command name, which is in parentheses
/// and may hold spaces and parentheses itself: they start after the last ')'.
fn stat_fields(pid: u32) -> Result<Vec<String>, String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("read /proc/{pid}/stat: {e}"))?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("no ')' in /proc/{pid}/stat: {stat:?}"))?;
    Ok(rest.split_whitespace().map(String::from).collect())
}

/// (utime, stime) in clock ticks (USER_HZ).
fn cpu_ticks_of(pid: u32) -> Result<(u64, u64), String> {
    let f = stat_fields(pid)?;
    // f[0] is field 3 (state); utime is field 14, stime 15.
    let field = |i: usize, name: &str| -> Result<u64, String> {
        f.get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no {name} in /proc/{pid}/stat: {f:?}"))
    };
    Ok((field(11, "utime")?, field(12, "stime")?))
}

/// utime + stime of the process, in clock ticks; panics when /proc cannot be read.
pub fn cpu_ticks(pid: u32) -> u64 {
    let (user, system) = cpu_ticks_of(pid).unwrap_or_else(|e| panic!("{e}"));
    user + system
}

/// A process's CPU time split into user and system (kernel) time, all threads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    pub user_s: f64,
    pub system_s: f64,
}

impl CpuTimes {
    /// What the process spent from `self` to `later`.
    pub fn until(self, later: CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: later.user_s - self.user_s,
            system_s: later.system_s - self.system_s,
        }
    }
}

/// User and system CPU time of a process (all threads). A proxy's system time is mostly the
/// network stack working for it (copies in and out of socket buffers, loopback delivery),
/// which every proxy pays the same way; its user time is what the proxy's own code costs.
pub fn cpu_times(pid: u32) -> Option<CpuTimes> {
    let (user, system) = cpu_ticks_of(pid).ok()?;
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tck = if tck > 0 { tck as f64 } else { 100.0 };
    Some(CpuTimes {
        user_s: user as f64 / tck,
        system_s: system as f64 / tck,
    })
}

/// CPU time (user + system, all threads) of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_times(pid).map(|t| t.user_s + t.system_s)
}

/// The process state letter from /proc/PID/stat (R, S, T, Z, ...); None once it is reaped.
pub fn proc_state(pid: u32) -> Option<char> {
    stat_fields(pid).ok()?.first()?.chars().next()
}

/// Alive: exists and is not a zombie (a killed grandchild of ours via setsid stays a zombie
/// until its parent reaps it).
pub fn is_alive(pid: u32) -> bool {
    !matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

/// A `kB` field of /proc/PID/status (VmRSS, VmHWM, VmPin...), in KiB.
fn status_kib(pid: u32, field: &str) -> Result<Option<u64>, String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("read /proc/{pid}/status: {e}"))?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()))
}

/// Current resident set size (VmRSS) in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:").ok().flatten()
}

/// Peak resident set size (VmHWM) in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:").ok().flatten()
}

/// VmRSS in bytes; panics when /proc cannot be read or has no VmRSS.
pub fn rss_bytes(pid: u32) -> u64 {
    match status_kib(pid, "VmRSS:") {
        Ok(Some(kb)) => kb * 1024,
        Ok(None) => panic!("no VmRSS in /proc/{pid}/status"),
        Err(e) => panic!("{e}"),
    }
}

/// The largest of five RSS samples 100 ms apart, in bytes: RSS moves a little while the
/// worker threads finish.
pub fn settled_rss_bytes(pid: u32) -> u64 {
    let mut v = 0;
    for _ in 0..5 {
        v = v.max(rss_bytes(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    v
}

/// VmPin and VmLck in bytes (0 when absent: registered buffers are pinned, and older kernels
/// account them as locked instead).
pub fn pinned_bytes(pid: u32) -> (u64, u64) {
    let field = |name: &str| {
        status_kib(pid, name)
            .ok()
            .flatten()
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmPin:"), field("VmLck:"))
}

/// Resets the process's peak RSS to its current RSS (clear_refs "5"), so that VmHWM afterwards
/// is the peak of the next scenario alone.
pub fn reset_peak_rss(pid: u32) -> bool {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// Voluntary context switches of every thread of a process: each is a thread going to sleep
/// (for ringgate, a worker waiting in io_uring_enter), so per query it counts the wake-ups.
/// /proc/PID/status has the main thread's only; the workers are in /proc/PID/task/*/status.
pub fn voluntary_ctx_switches(pid: u32) -> Option<u64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for t in tasks.flatten() {
        let Ok(s) = fs::read_to_string(t.path().join("status")) else {
            continue; // a thread that just ended
        };
        total += s
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(total)
}

/// Open fds of the process; panics when /proc cannot be read.
pub fn fd_count(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/fd: {e}"))
        .count()
}

/// Every open fd as `fd->target`, sorted (for failure messages).
pub fn fd_list(pid: u32) -> String {
    let mut v: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .map(|e| {
                    let l = fs::read_link(e.path()).unwrap_or_default();
                    format!("{}->{}", e.file_name().to_string_lossy(), l.display())
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.join(" ")
}

/// One IPv4 TCP socket of this network namespace, from /proc/net/tcp.
#[derive(Clone, Copy, Debug)]
pub struct TcpQueue {
    pub local_port: u16,
    pub remote_port: u16,
    /// Bytes in the send queue not yet acknowledged (on loopback: not yet taken by the peer,
    /// whose receive window is full).
    pub tx: u64,
    /// Bytes received and not yet read by the socket's owner.
    pub rx: u64,
}

/// Every IPv4 TCP socket whose local or remote port is `port`, with its queue sizes.
pub fn tcp_queues(port: u16) -> Vec<TcpQueue> {
    let text =
        fs::read_to_string("/proc/net/tcp").unwrap_or_else(|e| panic!("read /proc/net/tcp: {e}"));
    let port_of = |addr: &str| {
        addr.rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            // sl local_address rem_address st tx_queue:rx_queue ...
            let f: Vec<&str> = l.split_whitespace().collect();
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some(TcpQueue {
                local_port: port_of(f.get(1)?)?,
                remote_port: port_of(f.get(2)?)?,
                tx: u64::from_str_radix(tx, 16).ok()?,
                rx: u64::from_str_radix(rx, 16).ok()?,
            })
        })
        .filter(|q| q.local_port == port || q.remote_port == port)
        .collect()
}

/// For every io_uring fd of `pid`: (fd, number of registered buffers from its `UserBufs:` line).
pub fn io_uring_user_bufs(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    for e in entries.flatten() {
        let fd = e.file_name().to_string_lossy().into_owned();
        let link = fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let Ok(info) = fs::read_to_string(e.path()) else {
            continue;
        };
        let is_ring = link.contains("io_uring") || info.contains("UserBufs:");
        if !is_ring {
            continue;
        }
        let bufs = info
            .lines()
            .find_map(|l| l.trim().strip_prefix("UserBufs:"))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(n) = bufs {
            out.push((fd, n));
        }
    }
    out.sort();
    out
}

/// For every io_uring fd of `pid` with a registered file table: (fd, slots of it that hold a
/// file). fdinfo lists `UserFiles: N` (the table size) and then one `i: name` line per
/// occupied slot, before `UserBufs:`.
pub fn io_uring_user_files(pid: u32) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    for e in entries.flatten() {
        let fd = e.file_name().to_string_lossy().into_owned();
        let Ok(info) = fs::read_to_string(e.path()) else {
            continue;
        };
        let mut lines = info
            .lines()
            .skip_while(|l| !l.trim().starts_with("UserFiles:"));
        if lines.next().is_none() {
            continue;
        }
        let held = lines
            .take_while(|l| !l.trim().starts_with("UserBufs:"))
            .filter(|l| l.contains(": "))
            .count();
        out.push((fd, held));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_context_switches_are_summed_over_threads() {
        let pid = std::process::id();
        let before = voluntary_ctx_switches(pid).unwrap();
        // A thread that sleeps a few times switches out voluntarily each time.
        std::thread::spawn(|| {
            for _ in 0..5 {
                std::thread::sleep(Duration::from_millis(2));
            }
        })
        .join()
        .unwrap();
        // The ended thread's switches are gone with it; ours (join waited) remain.
        let after = voluntary_ctx_switches(pid).unwrap();
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn own_cpu_rss_fds_and_state_are_readable() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        assert!(peak_rss_kib(me).unwrap() > 0);
        assert!(rss_kib(me).unwrap() > 0);
        assert!(rss_bytes(me) > 0);
        assert!(fd_count(me) >= 3);
        assert!(is_alive(me));
    }

    #[test]
    fn a_process_that_does_not_exist_reads_as_none_or_panics() {
        // Above Linux's largest pid_max (2^22): never a live process.
        let none = 4_194_400;
        assert_eq!(cpu_times(none), None);
        assert_eq!(rss_kib(none), None);
        assert!(!is_alive(none));
        assert!(std::panic::catch_unwind(|| rss_bytes(none)).is_err());
        assert!(std::panic::catch_unwind(|| cpu_ticks(none)).is_err());
        assert!(std::panic::catch_unwind(|| fd_count(none)).is_err());
    }
}

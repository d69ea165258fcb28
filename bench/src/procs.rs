//! Child processes and what can be read about them: start/stop with a
//! clean-up registry (also run on Ctrl-C), CPU time and peak RSS from /proc,
//! ringgate's /metrics, HAProxy's stats socket.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Everything that must be stopped when the bench ends, however it ends.
#[derive(Default)]
pub struct Cleanup {
    /// Children started in their own process group: (name, child).
    children: Vec<(String, Child)>,
    /// `scripts/mariadb-sandbox.sh stop DIR PORT`, when we started the sandbox.
    sandbox_stop: Option<Command>,
    /// Files to remove.
    files: Vec<PathBuf>,
}

pub static CLEANUP: Mutex<Option<Cleanup>> = Mutex::new(None);

fn with_cleanup<R>(f: impl FnOnce(&mut Cleanup) -> R) -> R {
    let mut g = CLEANUP.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Cleanup::default))
}

pub fn register_sandbox_stop(cmd: Command) {
    with_cleanup(|c| c.sandbox_stop = Some(cmd));
}

pub fn register_file(p: PathBuf) {
    with_cleanup(|c| c.files.push(p));
}

/// Spawns `cmd` in a new process group (so a terminal's Ctrl-C reaches only
/// us, and we stop the children in order), registered for clean-up.
pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> std::io::Result<u32> {
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0);
    let child = cmd.spawn()?;
    let pid = child.id();
    with_cleanup(|c| c.children.push((name.to_string(), child)));
    Ok(pid)
}

/// True while the registered child `pid` is running.
pub fn child_alive(pid: u32) -> bool {
    with_cleanup(|c| {
        c.children
            .iter_mut()
            .find(|(_, ch)| ch.id() == pid)
            .map(|(_, ch)| matches!(ch.try_wait(), Ok(None)))
            .unwrap_or(false)
    })
}

/// Waits for the registered child `pid` to exit (polling, so a signal
/// handler elsewhere can still run the clean-up), then forgets it.
pub fn wait_child(pid: u32, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        let st = with_cleanup(|c| {
            let Some(pos) = c.children.iter().position(|(_, ch)| ch.id() == pid) else {
                return Some(None);
            };
            match c.children[pos].1.try_wait() {
                Ok(Some(st)) => {
                    c.children.remove(pos);
                    Some(Some(st))
                }
                Ok(None) => None,
                Err(_) => {
                    c.children.remove(pos);
                    Some(None)
                }
            }
        });
        if let Some(st) = st {
            return st;
        }
        if Instant::now() >= deadline {
            kill_group(pid, libc::SIGKILL);
            continue;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops the registered child `pid` before the run ends: SIGTERM, then SIGKILL after `within`.
pub fn stop(pid: u32, within: Duration) {
    kill_group(pid, libc::SIGTERM);
    let _ = wait_child(pid, within);
}

fn kill_group(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals that process group; the
    // group was created by `process_group(0)` for our own child only.
    unsafe {
        libc::kill(-(pid as i32), sig);
    }
}

/// Stops every child (SIGTERM, then SIGKILL after 5 s), stops the sandbox if
/// we started it, removes temporary files. Idempotent.
pub fn cleanup_all(quiet: bool) {
    let taken = {
        let mut g = CLEANUP.lock().unwrap_or_else(|e| e.into_inner());
        g.take()
    };
    let Some(mut c) = taken else { return };
    for (name, child) in c.children.iter_mut().rev() {
        if let Ok(None) = child.try_wait() {
            if !quiet {
                eprintln!("bench: stopping {name} (pid {})", child.id());
            }
            kill_group(child.id(), libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for (name, child) in c.children.iter_mut().rev() {
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    eprintln!(
                        "bench: {name} (pid {}) ignored SIGTERM; SIGKILL",
                        child.id()
                    );
                    kill_group(child.id(), libc::SIGKILL);
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    if let Some(mut cmd) = c.sandbox_stop.take() {
        if !quiet {
            eprintln!("bench: stopping the MariaDB sandbox");
        }
        let _ = cmd.stdout(Stdio::null()).status();
    }
    for f in c.files {
        let _ = std::fs::remove_file(f);
    }
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, within: Duration, pid: Option<u32>) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(p) = pid {
            if !child_alive(p) {
                return Err(format!("process {p} exited before listening on {addr}"));
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("nothing listens on {addr} after {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// True when something already listens on `addr`.
pub fn port_busy(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// CPU time (user + system, all threads) of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_times(pid).map(|t| t.user_s + t.system_s)
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
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime field 15.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tck = if tck > 0 { tck as f64 } else { 100.0 };
    Some(CpuTimes {
        user_s: utime / tck,
        system_s: stime / tck,
    })
}

/// Voluntary context switches of every thread of a process: each is a
/// thread going to sleep (for ringgate, a worker waiting in io_uring_enter),
/// so per query it counts the wake-ups. /proc/PID/status has the main
/// thread's only; the workers are in /proc/PID/task/*/status.
pub fn voluntary_ctx_switches(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for t in tasks.flatten() {
        let Ok(s) = std::fs::read_to_string(t.path().join("status")) else {
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

/// Peak resident set size (VmHWM) in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_field(pid, "VmHWM:")
}

/// Current resident set size (VmRSS) in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_field(pid, "VmRSS:")
}

fn status_field(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Resets the process's peak RSS to its current RSS (clear_refs "5"), so
/// that VmHWM afterwards is the peak of the next scenario alone.
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// GET http://addr/path with a plain HTTP/1.0 request; the body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).map_err(|e| e.to_string())?;
    let (head, body) = buf
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
        return Err(format!(
            "GET {path}: {}",
            head.lines().next().unwrap_or_default()
        ));
    }
    Ok(body.to_string())
}

/// Prometheus text → `name{labels}` → value (the same shape as
/// `tests/common`'s `Metrics::parse`, without depending on the proxy crate).
pub fn parse_prometheus(text: &str) -> HashMap<String, f64> {
    let mut m = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key_end = match (line.find('{'), line.rfind('}')) {
            (Some(open), Some(close)) if open < close && !line[..open].contains(' ') => close + 1,
            _ => match line.find(char::is_whitespace) {
                Some(i) => i,
                None => continue,
            },
        };
        let key = &line[..key_end];
        let Some(val) = line[key_end..].split_whitespace().next() else {
            continue;
        };
        let v = match val {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            s => match s.parse() {
                Ok(v) => v,
                Err(_) => continue,
            },
        };
        m.insert(key.trim().to_string(), v);
    }
    m
}

/// HAProxy `show stat` over its stats socket: the FRONTEND row of `frontend`
/// as field name → value.
pub fn haproxy_frontend_stats(
    sock: &Path,
    frontend: &str,
) -> Result<HashMap<String, String>, String> {
    let mut s = UnixStream::connect(sock).map_err(|e| format!("{}: {e}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(b"show stat\n").map_err(|e| e.to_string())?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).map_err(|e| e.to_string())?;
    parse_haproxy_csv(&buf, frontend, "FRONTEND")
}

pub fn parse_haproxy_csv(
    csv: &str,
    pxname: &str,
    svname: &str,
) -> Result<HashMap<String, String>, String> {
    let mut lines = csv.lines();
    let header = lines.next().ok_or("empty stats")?;
    let names: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        if f.first() == Some(&pxname) && f.get(1) == Some(&svname) {
            return Ok(names
                .iter()
                .zip(f.iter())
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect());
        }
    }
    Err(format!("no {pxname}/{svname} row in HAProxy stats"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_parsing() {
        let m = parse_prometheus(
            "# HELP x y\n# TYPE x gauge\nringgate_workers 2\n\
             ringgate_read_buffers_in_use{owner=\"client\"} 33\n\
             ringgate_connect_duration_seconds_quantile{quantile=\"0.99\"} 0.00123\n\
             with_ts 5 1700000000000\n",
        );
        assert_eq!(m["ringgate_workers"], 2.0);
        assert_eq!(m["ringgate_read_buffers_in_use{owner=\"client\"}"], 33.0);
        assert_eq!(
            m["ringgate_connect_duration_seconds_quantile{quantile=\"0.99\"}"],
            0.00123
        );
        assert_eq!(m["with_ts"], 5.0);
    }

    #[test]
    fn haproxy_csv() {
        let csv = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout\n\
                   fe,FRONTEND,,,3,10,20000,1234,100,200\n\
                   be,db,0,0,3,10,,1234,100,200\n";
        let r = parse_haproxy_csv(csv, "fe", "FRONTEND").unwrap();
        assert_eq!(r["stot"], "1234");
        assert_eq!(r["bout"], "200");
        assert!(parse_haproxy_csv(csv, "nope", "FRONTEND").is_err());
    }

    #[test]
    fn own_context_switches_are_summed_over_threads() {
        let pid = std::process::id();
        let before = voluntary_ctx_switches(pid).unwrap();
        // A thread that sleeps a few times switches out voluntarily each time.
        std::thread::spawn(|| {
            for _ in 0..5 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
        .join()
        .unwrap();
        // The ended thread's switches are gone with it; ours (join waited) remain.
        let after = voluntary_ctx_switches(pid).unwrap();
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn own_cpu_and_rss_are_readable() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        assert!(peak_rss_kib(me).unwrap() > 0);
        assert!(rss_kib(me).unwrap() > 0);
    }
}

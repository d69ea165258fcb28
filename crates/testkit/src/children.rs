//! Child processes that must not outlive their parent however it ends: each is started in
//! its own process group and kept in a clean-up registry, which the bench also runs on Ctrl-C;
//! and the signals and port probes that go with them.

use std::net::{SocketAddr, TcpStream};
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

/// `kill SIG PID`; panics unless `kill` succeeds (a signal that was not delivered must not let
/// a test go on as if it had been).
pub fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill {sig} {pid} failed: {st}");
}

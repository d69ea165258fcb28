//! Where things are: the sandbox MariaDB's address (from the `RINGGATE_TEST_*` variables that
//! `scripts/mariadb-sandbox.sh env` exports), the repository, the ringgate binary, free ports,
//! scratch directories, and the tools a test runs ringgate under.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The account tests/users.json gives the suites.
pub const APP_USER: &str = "app";
pub const APP_PASSWORD: &str = "app-secret";
/// A tests/users.json account stored as a hash only.
pub const HASHED_USER: &str = "hashed";
pub const HASHED_PASSWORD: &str = "hashed-secret";
/// The schema the sandbox creates for the suites.
pub const TEST_DB: &str = "ringgate_test";

/// Where the private MariaDB (the proxy's backend) listens, from the sandbox's env exports.
#[derive(Clone, Debug)]
pub struct BackendEnv {
    pub host: String,
    pub port: u16,
    pub socket: Option<String>,
    pub user: String,
    pub password: String,
}

impl BackendEnv {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

fn required_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "environment variable {name} is not set: these integration tests need the private \
             MariaDB sandbox. Run `make test` (or `scripts/mariadb-sandbox.sh start && eval \
             \"$(scripts/mariadb-sandbox.sh env)\"` before `cargo test`)."
        ),
    }
}

/// Reads the `RINGGATE_TEST_*` variables; panics (fails the test) when they are missing.
pub fn backend_env() -> BackendEnv {
    let port = required_env("RINGGATE_TEST_MYSQL_PORT");
    let port: u16 = port
        .parse()
        .unwrap_or_else(|_| panic!("RINGGATE_TEST_MYSQL_PORT={port:?} is not a port number"));
    BackendEnv {
        host: std::env::var("RINGGATE_TEST_MYSQL_HOST").unwrap_or_else(|_| "127.0.0.1".into()),
        port,
        socket: std::env::var("RINGGATE_TEST_MYSQL_SOCKET").ok(),
        user: required_env("RINGGATE_TEST_BACKEND_USER"),
        password: required_env("RINGGATE_TEST_BACKEND_PASSWORD"),
    }
}

/// The repository's root (this crate lives in crates/testkit).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/testkit has a grandparent")
        .to_path_buf()
}

/// The users file the suites run ringgate with.
pub fn users_file() -> PathBuf {
    repo_root().join("tests").join("users.json")
}

/// The `ringgate` binary cargo built for this test run. A test executable lives in
/// `target/<profile>/deps/`, and cargo builds the package's binaries into `target/<profile>/`
/// before it runs integration tests; panics when there is none, rather than run another.
pub fn ringgate_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not in target/<profile>/deps", exe.display()));
    let bin = profile_dir.join("ringgate");
    assert!(
        bin.is_file(),
        "no ringgate binary at {} (built beside the test executable {})",
        bin.display(),
        exe.display()
    );
    bin
}

/// Where `free_port` looks: below the kernel's ephemeral range (net.ipv4.ip_local_port_range,
/// 32768–60999 by default). A port the kernel hands out for `bind(0)` comes from that range,
/// and so does every outgoing connection's local port: a MariaDB a test restarts after
/// `kill -9` on such a port, or one started a moment after the port was picked, could find it
/// taken by some client's connection (the idle tests open 10,000 of them). Below the range only
/// another test's pick can collide, and the bind check catches a port in use.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

static PORT_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A port nobody listens on right now, outside the ephemeral range (released before we return).
pub fn free_port() -> u16 {
    let span = (TEST_PORTS.end - TEST_PORTS.start) as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    // Spread the picks of concurrent test processes (pid) and threads (sequence, time).
    let mut x = nanos ^ ((std::process::id() as u64) << 20);
    for _ in 0..200 {
        x = x
            .wrapping_add(PORT_SEQ.fetch_add(1, Ordering::Relaxed) as u64)
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let port = TEST_PORTS.start + ((x >> 33) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("bound address").port()
}

static SCRATCH_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under the system temp dir, mode 0755 (readable by `nobody`).
pub fn scratch_dir(tag: &str) -> PathBuf {
    let n = SCRATCH_SEQ.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "ringgate-test-{}-{}-{}",
        std::process::id(),
        tag,
        n
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create scratch dir");
    set_mode(&dir, 0o755);
    dir
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {:o} {}: {e}", mode, path.display()));
}

/// A string no other test sends, to look for in the server's general log.
pub fn unique_marker(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "rg-{tag}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The effective uid of this process, from /proc (no libc needed).
pub fn current_euid() -> u32 {
    let status = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("Uid:") {
            let mut it = rest.split_whitespace();
            let _real = it.next();
            return it.next().and_then(|s| s.parse().ok()).expect("parse Uid");
        }
    }
    panic!("no Uid: line in /proc/self/status");
}

/// A command prefix that runs its command with RLIMIT_MEMLOCK = `memlock_bytes` and, when
/// we are root, as `nobody` without capabilities: root's CAP_IPC_LOCK would ignore the limit.
pub fn low_memlock_wrapper(memlock_bytes: usize) -> Vec<String> {
    let prlimit = find_in_path("prlimit").expect("prlimit (util-linux) is required");
    let mut wrapper = vec![
        prlimit.display().to_string(),
        format!("--memlock={memlock_bytes}:{memlock_bytes}"),
    ];
    if current_euid() == 0 {
        let setpriv = find_in_path("setpriv").expect("setpriv (util-linux) is required");
        wrapper.extend(
            [
                setpriv.display().to_string().as_str(),
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                "--inh-caps=-all",
                "--",
            ]
            .map(String::from),
        );
    }
    wrapper
}

/// `name` in PATH or in the system directories a non-login shell may leave out of it.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    for extra in ["/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
        dirs.push(PathBuf::from(extra));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repo_root_holds_the_test_users() {
        assert!(users_file().is_file(), "{}", users_file().display());
    }

    #[test]
    fn a_free_port_can_be_bound() {
        let port = free_port();
        assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
    }
}

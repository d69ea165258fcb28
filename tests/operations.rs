//! Operating ringgate: the config file and `--print-config`, SIGHUP reload of
//! the users file, and the `ringgate check` preflight report.
//!
//! Tests that talk to MariaDB need the sandbox's `RINGGATE_TEST_*` variables
//! (`make test` sets them).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use testkit::env::{
    backend_env, free_port, low_memlock_wrapper, ringgate_bin, scratch_dir, set_mode, users_file,
    APP_PASSWORD, APP_USER,
};
use testkit::mysql_client::mysql_error_code;
use testkit::proxy::{Mode, Proxy, ProxyOpts};
use testkit::tail;

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn write(path: &Path, contents: &str) {
    fs::write(path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    set_mode(path, 0o644);
}

// ---------------------------------------------------------------------------------------------
// Config file and --print-config
// ---------------------------------------------------------------------------------------------

#[test]
fn print_config_merges_file_env_and_flags_and_masks_the_password() {
    let dir = scratch_dir("print-config");
    let cfg = dir.join("ringgate.toml");
    write(
        &cfg,
        "# example\n\
         users-file = \"/etc/ringgate/users.json\"\n\
         backend-password = \"file-secret-1\"\n\
         backend-pool-size = 8\n\
         drain-timeout = \"45s\"\n",
    );
    let out = run(Command::new(ringgate_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["--print-config", "--backend-pool-size", "3"])
        .env("RINGGATE_BACKEND_PASSWORD", "env-secret-2"));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    for secret in ["file-secret-1", "env-secret-2"] {
        assert!(!stdout.contains(secret), "{secret} leaked:\n{stdout}");
        assert!(!stderr.contains(secret), "{secret} leaked:\n{stderr}");
    }
    assert!(
        stdout.contains("backend-password = \"********\"  # env"),
        "{stdout}"
    );
    assert!(stdout.contains("backend-pool-size = 3  # flag"), "{stdout}");
    assert!(
        stdout.contains("drain-timeout = \"45s\"  # file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("users-file = \"/etc/ringgate/users.json\"  # file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("listen = \"127.0.0.1:15306\"  # default"),
        "{stdout}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn config_file_errors_name_the_file_line_and_key() {
    let dir = scratch_dir("config-errors");
    let cfg = dir.join("ringgate.toml");
    let cases = [
        (
            "users-file = \"u.json\"\n\n# buffers\nread-bufers = \"fixed\"\n",
            ":4: unknown key \"read-bufers\" (did you mean \"read-buffers\"?)",
        ),
        (
            "users-file = \"u.json\"\nbackend-pool-size = \"8\"\n",
            ":2: key \"backend-pool-size\" must be an integer, found a string \"8\"",
        ),
        (
            "read-buffers = \"fixd\"\n",
            ":1: invalid value \"fixd\" for key \"read-buffers\": possible values: fixed, heap, ring",
        ),
    ];
    for (contents, want) in cases {
        write(&cfg, contents);
        let out = run(Command::new(ringgate_bin()).arg("--config").arg(&cfg));
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{contents:?}: {stderr}");
        let want = format!("{}{want}", cfg.display());
        assert!(stderr.contains(&want), "want {want:?} in:\n{stderr}");
    }
    let _ = fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// SIGHUP reloads the users file
// ---------------------------------------------------------------------------------------------

fn sighup(pid: u32) {
    // SAFETY: kill(2) with a pid we spawned and a valid signal number.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) };
    assert_eq!(
        rc,
        0,
        "kill -HUP {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// Waits until `needle` occurs in ringgate's log `count` times.
fn wait_for_log(proxy: &mut Proxy, needle: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        proxy.assert_running();
        let log = proxy.stderr();
        if log.matches(needle).count() >= count {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "no {needle:?} (x{count}) in ringgate's log:\n{}",
                tail(&log, 40)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn login(proxy: &Proxy, user: &str, password: &str) -> Result<(), mysql::Error> {
    let mut conn = proxy.connect(proxy.opts(user, password))?;
    let one: Option<i64> = conn.query_first("SELECT 1")?;
    assert_eq!(one, Some(1));
    Ok(())
}

fn assert_denied(proxy: &Proxy, user: &str, password: &str) {
    match login(proxy, user, password) {
        Ok(()) => panic!("{user} could still log in"),
        Err(e) => assert_eq!(mysql_error_code(&e), Some(1045), "{user}: {e}"),
    }
}

#[test]
fn sighup_reloads_users_and_keeps_them_when_the_file_is_broken() {
    let dir = scratch_dir("sighup");
    let users = dir.join("users.json");
    write(
        &users,
        r#"{"app": [{"Password": "app-secret"}], "leaver": [{"Password": "leaver-pw"}]}"#,
    );
    let mut opts = ProxyOpts::new(Mode::Fixed);
    opts.users_file = users.clone();
    let mut proxy = Proxy::start_with(opts);

    login(&proxy, "leaver", "leaver-pw").expect("leaver logs in before the reload");
    assert_denied(&proxy, "newbie", "newbie-pw");

    // Add newbie, remove leaver.
    write(
        &users,
        r#"{"app": [{"Password": "app-secret"}], "newbie": [{"Password": "newbie-pw"}]}"#,
    );
    sighup(proxy.pid());
    wait_for_log(&mut proxy, "users file reloaded", 1);
    login(&proxy, "newbie", "newbie-pw").expect("newbie logs in after the reload");
    assert_denied(&proxy, "leaver", "leaver-pw");

    // A broken file is refused and the users stay.
    write(
        &users,
        r#"{"app": [{"Password": "app-secret"}], "newbie": ["#,
    );
    sighup(proxy.pid());
    wait_for_log(&mut proxy, "reload refused", 1);
    login(&proxy, "newbie", "newbie-pw").expect("newbie still logs in after a broken reload");
    login(&proxy, APP_USER, APP_PASSWORD).expect("app still logs in after a broken reload");
    assert_denied(&proxy, "leaver", "leaver-pw");
    let log = proxy.stderr();
    assert!(
        log.contains("keeping the 2 user(s) loaded before"),
        "the refusal names what stays:\n{}",
        tail(&log, 20)
    );
    for secret in ["newbie-pw", "leaver-pw", "app-secret"] {
        assert!(!log.contains(secret), "{secret} appears in the log");
    }
    proxy.assert_running();
    let _ = fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// ringgate check
// ---------------------------------------------------------------------------------------------

/// `ringgate check` against the sandbox backend, with a free listen port.
fn check_cmd(bin: &Path, users: &Path, backend: &str) -> Command {
    let env = backend_env();
    let mut c = Command::new(bin);
    c.arg("check")
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--workers", "2", "--max-connections", "1000"])
        .args(["--backend-max-connections", "100"])
        .args(["--backend", backend, "--backend-identity", "shared"])
        .args(["--backend-user", &env.user])
        .arg("--users-file")
        .arg(users)
        .env("RINGGATE_BACKEND_PASSWORD", &env.password)
        .env_remove("RUST_LOG");
    c
}

fn assert_check_fails(out: &Output, line: &str, fix: &str) {
    let (stdout, stderr) = text(out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "check must fail:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains(line), "want {line:?} in:\n{stdout}");
    assert!(stdout.contains(fix), "want {fix:?} in:\n{stdout}");
    assert!(stdout.contains("NOT ready"), "{stdout}");
}

#[test]
fn check_passes_on_this_machine() {
    let env = backend_env();
    let out = run(&mut check_cmd(&ringgate_bin(), &users_file(), &env.addr()));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "check failed:\n{stdout}\n{stderr}");
    for what in ["kernel", "io_uring", "memlock", "fds", "users", "backend"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(what) && (l.starts_with("OK") || l.starts_with("WARN"))),
            "no OK/WARN line for {what}:\n{stdout}"
        );
    }
    assert!(stdout.contains("logged in as"), "{stdout}");
    assert!(
        !stdout.contains(&env.password),
        "the password leaked:\n{stdout}"
    );
}

#[test]
fn check_help_works() {
    let out = run(Command::new(ringgate_bin()).args(["check", "--help"]));
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(stdout.contains("Usage: ringgate check"), "{stdout}");
    assert!(stdout.contains("--config <PATH>"), "{stdout}");
}

#[test]
fn check_fails_when_the_backend_is_down() {
    let closed = format!("127.0.0.1:{}", free_port());
    let out = run(&mut check_cmd(&ringgate_bin(), &users_file(), &closed));
    assert_check_fails(
        &out,
        &format!("FAIL  backend   cannot reach {closed}"),
        "start the server, or fix --backend",
    );
}

#[test]
fn check_reaches_every_server_of_several() {
    let env = backend_env();
    let closed = format!("127.0.0.1:{}", free_port());
    let out = run(
        check_cmd(&ringgate_bin(), &users_file(), &env.addr()).args([
            "--backend",
            &closed,
            "--monitor-user",
            "monitor",
        ]),
    );
    let (stdout, _) = text(&out);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("OK    backend") && l.contains(&env.addr())),
        "the reachable server has its OK line:\n{stdout}"
    );
    assert_check_fails(
        &out,
        &format!("FAIL  backend   cannot reach {closed}"),
        "start the server, or fix --backend",
    );
}

#[test]
fn check_fails_when_the_backend_password_is_wrong() {
    let env = backend_env();
    let out = run(check_cmd(&ringgate_bin(), &users_file(), &env.addr())
        .env("RINGGATE_BACKEND_PASSWORD", "not-the-password"));
    assert_check_fails(&out, "1045", "RINGGATE_BACKEND_PASSWORD");
    assert!(!text(&out).0.contains("not-the-password"));
}

#[test]
fn check_fails_when_the_users_file_is_broken() {
    let dir = scratch_dir("check-users");
    let users = dir.join("users.json");
    write(&users, "{\"app\": [{\"Password\": \"x\"}\n");
    let env = backend_env();
    let out = run(&mut check_cmd(&ringgate_bin(), &users, &env.addr()));
    assert_check_fails(&out, "FAIL  users", "Vitess static-auth JSON");
    let _ = fs::remove_dir_all(&dir);
}

/// Runs check as `nobody` (root has CAP_IPC_LOCK, which lifts RLIMIT_MEMLOCK)
/// under a 64 KiB locked-memory limit.
#[test]
fn check_fails_when_memlock_is_too_small_for_the_pool() {
    let dir = scratch_dir("check-memlock");
    let bin: PathBuf = dir.join("ringgate");
    fs::copy(ringgate_bin(), &bin).expect("copy ringgate binary");
    set_mode(&bin, 0o755);
    let users = dir.join("users.json");
    fs::copy(users_file(), &users).expect("copy users file");
    set_mode(&users, 0o644);

    let wrapper = low_memlock_wrapper(65536);
    let env = backend_env();
    let inner = check_cmd(&bin, &users, &env.addr());
    let mut cmd = Command::new(&wrapper[0]);
    cmd.args(&wrapper[1..])
        .arg(inner.get_program())
        .args(inner.get_args())
        .env("RINGGATE_BACKEND_PASSWORD", &env.password);
    let out = run(&mut cmd);
    // 2 workers × 1024 slots × 16384 bytes = 32 MiB, plus the rings on
    // kernels that charge them.
    assert_check_fails(&out, "FAIL  memlock", "LimitMEMLOCK=");
    let (stdout, _) = text(&out);
    assert!(stdout.contains("ulimit -l "), "{stdout}");
    assert!(
        stdout.contains("2 workers × 1024 slots × 16384 bytes"),
        "{stdout}"
    );
    let _ = fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------------------------

#[test]
fn json_logs_are_one_object_per_line_without_secrets() {
    let mut opts = ProxyOpts::new(Mode::Heap);
    opts.extra_args = vec!["--log-format".into(), "json".into()];
    let proxy = Proxy::start_with(opts);
    login(&proxy, APP_USER, APP_PASSWORD).expect("app logs in");
    assert!(login(&proxy, APP_USER, "wrong-password").is_err());
    let log = proxy.stderr();
    let mut started = false;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            v.get("level").is_some() && v.get("message").is_some(),
            "{line}"
        );
        started |= v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("ringgate started"));
    }
    assert!(started, "no start-up line:\n{log}");
    for secret in [
        APP_PASSWORD,
        "wrong-password",
        proxy.backend.password.as_str(),
    ] {
        assert!(!log.contains(secret), "{secret} appears in the log");
    }
}

// ---------------------------------------------------------------------------------------------
// A second instance on the same port, and a failed worker
// ---------------------------------------------------------------------------------------------

/// Starts `cmd` with stderr captured and waits until it exits or `timeout` passes (then it is
/// killed). Returns the exit code (`None` if it had to be killed) and stderr.
fn run_bounded(cmd: &mut Command, timeout: Duration) -> (Option<i32>, String) {
    let dir = scratch_dir("bounded");
    let log = dir.join("stderr");
    let file = fs::File::create(&log).unwrap();
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let deadline = Instant::now() + timeout;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = fs::read_to_string(&log).unwrap_or_default();
    let _ = fs::remove_dir_all(&dir);
    (code, stderr)
}

/// A plain ringgate command line on `listen`, against the sandbox backend.
fn ringgate_on(listen: &str) -> Command {
    let env = backend_env();
    let mut c = Command::new(ringgate_bin());
    c.args([
        "--listen",
        listen,
        "--workers",
        "2",
        "--read-buffers",
        "heap",
    ])
    .args(["--backend", &env.addr(), "--backend-identity", "shared"])
    .args(["--backend-user", &env.user])
    .arg("--users-file")
    .arg(users_file())
    .env("RINGGATE_BACKEND_PASSWORD", &env.password)
    .env("RUST_LOG", "info");
    c
}

fn error_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("ERROR")).collect()
}

#[test]
fn a_second_ringgate_on_the_same_port_refuses_to_start() {
    let mut first = Proxy::start(Mode::Heap);
    let listen = format!("127.0.0.1:{}", first.port);
    let (code, log) = run_bounded(&mut ringgate_on(&listen), Duration::from_secs(20));
    assert_eq!(code, Some(1), "the second ringgate must exit 1:\n{log}");
    let errors = error_lines(&log);
    assert_eq!(errors.len(), 1, "want one ERROR line:\n{log}");
    for want in [
        format!("another process already listens on {listen}"),
        format!("ss -ltnp 'sport = :{}'", first.port),
        "--reuse-port-handover".to_owned(),
    ] {
        assert!(errors[0].contains(&want), "want {want:?} in:\n{log}");
    }
    assert!(!log.contains("ringgate started"), "{log}");
    // The first one still has all the traffic.
    first.assert_running();
    login(&first, APP_USER, APP_PASSWORD).expect("the first ringgate still serves");
}

#[test]
fn reuse_port_handover_starts_a_second_ringgate_with_a_warning() {
    let mut first = Proxy::start(Mode::Heap);
    let listen = format!("127.0.0.1:{}", first.port);
    // It runs until killed: 4 s is plenty to see it start.
    let (code, log) = run_bounded(
        ringgate_on(&listen).arg("--reuse-port-handover"),
        Duration::from_secs(4),
    );
    assert_eq!(
        code, None,
        "with --reuse-port-handover it must keep running:\n{log}"
    );
    assert!(log.contains("ringgate started"), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("--reuse-port-handover")),
        "want a warning naming the flag:\n{log}"
    );
    assert!(error_lines(&log).is_empty(), "{log}");
    first.assert_running();
}

#[test]
fn check_fails_when_another_process_listens_and_warns_with_handover() {
    let env = backend_env();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let port = taken.local_addr().unwrap().port();
    let mut cmd = check_cmd(&ringgate_bin(), &users_file(), &env.addr());
    let out = run(cmd.args(["--listen", &addr]));
    assert_check_fails(
        &out,
        &format!("FAIL  listen    another process already listens on {addr}"),
        "--reuse-port-handover",
    );
    assert!(
        text(&out)
            .0
            .contains(&format!("ss -ltnp 'sport = :{port}'")),
        "{}",
        text(&out).0
    );
    let mut cmd = check_cmd(&ringgate_bin(), &users_file(), &env.addr());
    let out = run(cmd.args(["--listen", &addr, "--reuse-port-handover"]));
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "check must pass with a WARN:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("WARN  listen"), "{stdout}");
}

/// Debug builds only: `RINGGATE_DEBUG_WORKER_FAIL_AFTER_MS` reports worker 0 failed (see
/// `debug_fault` in src/main.rs). Release builds do not contain the hook.
#[cfg(debug_assertions)]
#[test]
fn a_failed_worker_stops_the_process_with_one_error_line_and_a_nonzero_exit() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let (code, log) = run_bounded(
        ringgate_on(&listen).env("RINGGATE_DEBUG_WORKER_FAIL_AFTER_MS", "500"),
        Duration::from_secs(30),
    );
    assert_eq!(
        code,
        Some(1),
        "a failed worker must end the process with exit 1:\n{log}"
    );
    assert!(log.contains("ringgate started"), "{log}");
    let errors = error_lines(&log);
    assert_eq!(errors.len(), 1, "want one ERROR line:\n{log}");
    assert!(
        errors[0].contains("worker 0 (ringgate-w0) failed")
            && errors[0].contains("injected by RINGGATE_DEBUG_WORKER_FAIL_AFTER_MS"),
        "the ERROR line must name the worker and the cause:\n{log}"
    );
    // The others were drained at once (no sessions), not left running.
    assert!(log.contains("stopped: "), "{log}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
}

//! Per-user backend identity (`--backend-identity passthrough`, the default), with real clients
//! against the sandbox MariaDB. Each test creates its own backend accounts (through a direct
//! connection as the sandbox's `ringgate` account, which holds GRANT OPTION) and a users file
//! that names them: one account with a plaintext `Password`, one with only a
//! `MysqlNativePassword` hash, so that the proxy must recover SHA1(password) from the client's
//! login. What each test proves is in its comment; every test ends with the leak check.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::Conn;
use testkit::both_modes;
use testkit::env::scratch_dir;
use testkit::mysql_client::{direct_conn, mysql_error_code, mysql_error_message};
use testkit::proxy::{Mode, Proxy, ProxyOpts};
use testkit::tail;

/// Two backend accounts and a users file naming them, dropped again at the end.
struct Accounts {
    /// (name, password): `a` is in the users file with `Password`, `b` with only its hash.
    a: (String, String),
    b: (String, String),
    /// A table only `a` may read.
    table: String,
    users_file: PathBuf,
    extra_users: Vec<String>,
}

impl Accounts {
    /// `tag` keeps parallel tests (and both buffer modes) apart. `extra` entries are added to
    /// the users file as they are (JSON object members).
    fn create(tag: &str, extra: &[String]) -> Accounts {
        let a = (format!("ida_{tag}"), format!("a-secret-{tag}"));
        let b = (format!("idb_{tag}"), format!("b-secret-{tag}"));
        let table = format!("ringgate_test.only_a_{tag}");
        let mut root = direct_conn();
        for (user, pw) in [&a, &b] {
            root.query_drop(format!("DROP USER IF EXISTS '{user}'@'%'"))
                .unwrap();
            root.query_drop(format!(
                "CREATE USER '{user}'@'%' IDENTIFIED WITH mysql_native_password \
                 USING PASSWORD('{pw}')"
            ))
            .unwrap();
        }
        root.query_drop(format!("DROP TABLE IF EXISTS {table}"))
            .unwrap();
        root.query_drop(format!("CREATE TABLE {table} (v INT)"))
            .unwrap();
        root.query_drop(format!("INSERT INTO {table} VALUES (42)"))
            .unwrap();
        root.query_drop(format!("GRANT SELECT ON {table} TO '{}'@'%'", a.0))
            .unwrap();
        let hash: String = root
            .query_first(format!("SELECT PASSWORD('{}')", b.1))
            .unwrap()
            .unwrap();
        let mut members = vec![
            format!(r#""{}": [{{"Password": "{}"}}]"#, a.0, a.1),
            format!(r#""{}": [{{"MysqlNativePassword": "{hash}"}}]"#, b.0),
        ];
        members.extend(extra.iter().cloned());
        let dir = scratch_dir(&format!("identity-{tag}"));
        let users_file = dir.join("users.json");
        std::fs::write(&users_file, format!("{{{}}}", members.join(",\n"))).unwrap();
        Accounts {
            a,
            b,
            table,
            users_file,
            extra_users: Vec::new(),
        }
    }

    /// A further backend account with a password (dropped at the end).
    fn add_backend_user(&mut self, user: &str, password: &str) {
        let mut root = direct_conn();
        root.query_drop(format!("DROP USER IF EXISTS '{user}'@'%'"))
            .unwrap();
        root.query_drop(format!(
            "CREATE USER '{user}'@'%' IDENTIFIED WITH mysql_native_password \
             USING PASSWORD('{password}')"
        ))
        .unwrap();
        self.extra_users.push(user.to_owned());
    }

    fn proxy(&self, mode: Mode, extra: &[&str]) -> Proxy {
        let mut opts = ProxyOpts::with_args(mode, extra);
        opts.passthrough = true;
        opts.users_file = self.users_file.clone();
        Proxy::start_with(opts)
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        let mut root = direct_conn();
        for user in [&self.a.0, &self.b.0].into_iter().chain(&self.extra_users) {
            let _ = root.query_drop(format!("DROP USER IF EXISTS '{user}'@'%'"));
        }
        let _ = root.query_drop(format!("DROP TABLE IF EXISTS {}", self.table));
    }
}

fn connect(proxy: &Proxy, user: &str, password: &str) -> Conn {
    match proxy.connect(proxy.opts(user, password)) {
        Ok(c) => c,
        Err(e) => panic!(
            "connect as {user}: {e}\n--- ringgate stderr ---\n{}",
            tail(&proxy.stderr(), 40)
        ),
    }
}

fn current_user(c: &mut Conn) -> String {
    c.query_first("SELECT CURRENT_USER()").unwrap().unwrap()
}

/// The isolation test: each user is its own account on the backend. `CURRENT_USER()` is
/// itself (the hash-only user too, so the proxy recovered its SHA1(password)); another user's
/// running query is not in its PROCESSLIST and KILL of it is refused by the server (1095);
/// a table granted to `a` only is refused to `b` (1142).
fn users_are_themselves(mode: Mode) {
    let acc = Accounts::create(&format!("self_{}", mode.as_str()), &[]);
    let mut proxy = acc.proxy(mode, &[]);
    let base = proxy.connections_total();
    let mut a = connect(&proxy, &acc.a.0, &acc.a.1);
    let mut b = connect(&proxy, &acc.b.0, &acc.b.1);
    assert_eq!(current_user(&mut a), format!("{}@%", acc.a.0));
    assert_eq!(current_user(&mut b), format!("{}@%", acc.b.0));

    // a's long query, running while b looks.
    let a_thread: u64 = a.query_first("SELECT CONNECTION_ID()").unwrap().unwrap();
    let (tx, rx) = mpsc::channel();
    let sleeper = std::thread::spawn(move || {
        tx.send(()).unwrap();
        let r: Option<u32> = a.query_first("SELECT SLEEP(4)").unwrap();
        (a, r)
    });
    rx.recv().unwrap();
    // Wait until the server runs it (seen with the PROCESS privilege of the direct account),
    // so that b not seeing it means something.
    let mut root = direct_conn();
    let mut running = false;
    for _ in 0..50 {
        let n: u64 = root
            .query_first(format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE ID = {a_thread} AND INFO LIKE 'SELECT SLEEP(4)%' AND USER = '{}'",
                acc.a.0
            ))
            .unwrap()
            .unwrap();
        if n == 1 {
            running = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(running, "a's query never showed up on the server as a's");
    let rows: Vec<mysql::Row> = b.query("SHOW FULL PROCESSLIST").unwrap();
    let listing = format!("{rows:?}");
    assert!(!listing.contains("SLEEP"), "b sees a's query: {listing}");
    assert!(!listing.contains(&acc.a.0), "b sees a's session: {listing}");
    let e = b
        .query_drop(format!("KILL QUERY {a_thread}"))
        .expect_err("b must not kill a's query");
    assert_eq!(mysql_error_code(&e), Some(1095), "{e}");

    // Privileges are each account's own.
    let e = b
        .query_first::<i32, _>(format!("SELECT v FROM {}", acc.table))
        .expect_err("b must not read a's table");
    assert_eq!(mysql_error_code(&e), Some(1142), "{e}");
    let grants: Vec<String> = b.query("SHOW GRANTS").unwrap();
    assert!(
        !grants.iter().any(|g| g.contains("only_a")),
        "b has a's grant: {grants:?}"
    );

    let (mut a, slept) = sleeper.join().unwrap();
    assert_eq!(slept, Some(0), "a's query ran to its end");
    let v: Option<i32> = a
        .query_first(format!("SELECT v FROM {}", acc.table))
        .unwrap();
    assert_eq!(v, Some(42));
    drop((a, b));
    proxy.assert_settled(base, 2);
}
both_modes!(each_user_is_itself_on_the_backend, users_are_themselves);

/// A user whose backend login fails gets the server's own ERR (code, SQLSTATE, text) and its
/// connection closes, while another user's open session and new logins are unaffected:
/// - a password in the users file that the server does not accept: the server's 1045;
/// - a user that does not exist on the server: the server's 1045;
/// - a schema the account may not use: the server's 1044 (42000), which ringgate never makes.
///
/// None of them counts as a refusal by ringgate itself (`client_rejected_total{reason="auth"}`);
/// the refused accounts count as `reason="backend_auth"`.
#[test]
fn a_backend_login_failure_reaches_only_that_client() {
    let tag = "refused";
    let ghost = format!("idghost_{tag}");
    let stale = format!("idstale_{tag}");
    let extra = [
        format!(r#""{ghost}": [{{"Password": "ghost-pw"}}]"#),
        format!(r#""{stale}": [{{"Password": "proxy-side-pw"}}]"#),
    ];
    let mut acc = Accounts::create(tag, &extra);
    acc.add_backend_user(&stale, "server-side-pw");
    let mut proxy = acc.proxy(Mode::Fixed, &["--backend-pool-size", "1"]);
    let base = proxy.connections_total();
    let rejects = |reason: &str| {
        proxy.metrics().get(&format!(
            r#"ringgate_client_rejected_total{{reason="{reason}"}}"#
        ))
    };
    let rejects_before = rejects("auth");
    let backend_auth_before = rejects("backend_auth");
    let mut a = connect(&proxy, &acc.a.0, &acc.a.1);
    assert_eq!(current_user(&mut a), format!("{}@%", acc.a.0));

    for (user, pw) in [(&stale, "proxy-side-pw"), (&ghost, "ghost-pw")] {
        let e = proxy
            .connect(proxy.opts(user, pw))
            .expect_err("the server refuses this login");
        assert_eq!(mysql_error_code(&e), Some(1045), "{e}");
        let msg = mysql_error_message(&e).unwrap();
        assert!(
            msg.starts_with(&format!("Access denied for user '{user}'@'127.0.0.1'")),
            "{msg}"
        );
        if let mysql::Error::MySqlError(me) = &e {
            assert_eq!(me.state, "28000");
        }
        // a is still fine, on its own account.
        assert_eq!(current_user(&mut a), format!("{}@%", acc.a.0));
    }
    let e = proxy
        .connect(
            proxy
                .opts(&acc.b.0, &acc.b.1)
                .db_name(Some("ringgate_test")),
        )
        .expect_err("b may not use ringgate_test");
    assert_eq!(mysql_error_code(&e), Some(1044), "{e}");
    if let mysql::Error::MySqlError(me) = &e {
        assert_eq!(me.state, "42000");
        assert!(me.message.contains(&acc.b.0), "{}", me.message);
    }
    // The proxy itself refused nothing: these were the server's answers.
    assert_eq!(rejects("auth"), rejects_before);
    assert_eq!(rejects("backend_auth"), backend_auth_before + 2.0);
    // New logins of good users still work, and the failures left nothing behind.
    let mut b = connect(&proxy, &acc.b.0, &acc.b.1);
    assert_eq!(current_user(&mut b), format!("{}@%", acc.b.0));
    assert!(
        proxy
            .stderr()
            .contains("backend login refused for this user"),
        "{}",
        tail(&proxy.stderr(), 20)
    );
    assert!(!proxy.stderr().contains("proxy-side-pw"));
    drop((a, b));
    proxy.assert_settled(base, 5);
}

/// `BackendUser` + `BackendPassword` map a proxy user to a named backend account; with
/// `BackendUser` alone the client's own password (recovered from its login) is used.
#[test]
fn backend_user_mapping_logs_in_as_the_named_account() {
    let tag = "mapping";
    let a_name = format!("ida_{tag}");
    let b_name = format!("idb_{tag}");
    let extra = [
        format!(
            r#""idmap_{tag}": [{{"Password": "map-pw", "BackendUser": "{a_name}",
                                 "BackendPassword": "a-secret-{tag}", "UserData": "ignored"}}]"#
        ),
        format!(
            r#""idalias_{tag}": [{{"Password": "b-secret-{tag}", "BackendUser": "{b_name}"}}]"#
        ),
    ];
    let acc = Accounts::create(tag, &extra);
    let mut proxy = acc.proxy(Mode::Heap, &[]);
    let base = proxy.connections_total();
    let mut m = connect(&proxy, &format!("idmap_{tag}"), "map-pw");
    assert_eq!(current_user(&mut m), format!("{a_name}@%"));
    let v: Option<i32> = m
        .query_first(format!("SELECT v FROM {}", acc.table))
        .unwrap();
    assert_eq!(v, Some(42), "the mapped account's privileges");
    let mut alias = connect(&proxy, &format!("idalias_{tag}"), &acc.b.1);
    assert_eq!(current_user(&mut alias), format!("{b_name}@%"));
    drop((m, alias));
    proxy.assert_settled(base, 2);
}

/// Two clients, one pooled backend connection at most (`--workers 1 --backend-pool-size 1
/// --backend-max-connections 1`): user b never receives user a's connection. a's idle
/// connection is evicted for b (a new server thread, b's own account), also when b was
/// queued behind a's lease; and a gets its own account back afterwards.
#[test]
fn two_users_never_share_a_pooled_connection() {
    let acc = Accounts::create("pool", &[]);
    let mut proxy = acc.proxy(
        Mode::Fixed,
        &[
            "--workers",
            "1",
            "--backend-pool-size",
            "1",
            "--backend-max-connections",
            "1",
        ],
    );
    let base = proxy.connections_total();
    let ident = |c: &mut Conn| -> (String, u64) {
        c.query_first("SELECT CURRENT_USER(), CONNECTION_ID()")
            .unwrap()
            .unwrap()
    };
    let mut a = connect(&proxy, &acc.a.0, &acc.a.1);
    let (ua, ida) = ident(&mut a);
    a.query_drop("SET @owner = 'a'").unwrap();
    drop(a);
    let mut b = connect(&proxy, &acc.b.0, &acc.b.1);
    let (ub, idb) = ident(&mut b);
    assert_eq!(ua, format!("{}@%", acc.a.0));
    assert_eq!(ub, format!("{}@%", acc.b.0));
    assert_ne!(ida, idb, "b got a's server connection");
    let owner: Option<Option<String>> = b.query_first("SELECT @owner").unwrap();
    assert_eq!(owner, Some(None));

    // b holds the only connection; a queues, and gets its own account when b leaves.
    let proxy_port = proxy.port;
    let a_creds = acc.a.clone();
    let waiter = std::thread::spawn(move || {
        let opts = mysql::OptsBuilder::new()
            .ip_or_hostname(Some("127.0.0.1"))
            .tcp_port(proxy_port)
            .user(Some(a_creds.0))
            .pass(Some(a_creds.1))
            .prefer_socket(false);
        let mut a = Conn::new(opts).expect("a after waiting");
        let r: (String, u64) = a
            .query_first("SELECT CURRENT_USER(), CONNECTION_ID()")
            .unwrap()
            .unwrap();
        r
    });
    std::thread::sleep(Duration::from_millis(500));
    drop(b);
    let (ua2, ida2) = waiter.join().unwrap();
    assert_eq!(ua2, format!("{}@%", acc.a.0));
    assert_ne!(ida2, idb, "a got b's server connection");
    proxy.assert_settled(base, 3);
}

/// The greeting's first packet, read raw from the proxy.
fn raw_greeting(port: u16) -> wire::handshake::Greeting {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut header = [0u8; 4];
    s.read_exact(&mut header).unwrap();
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).unwrap();
    wire::handshake::parse_greeting(&payload).unwrap()
}

/// With passthrough identity nothing can log in before a client has, but the greeting still
/// mirrors the backend at once: one probe connection reads the server's greeting and hangs up.
/// No backend connection is kept (nothing idle, nothing busy) until a user logs in.
#[test]
fn before_any_login_the_greeting_mirrors_the_backend_without_a_login() {
    let acc = Accounts::create("probe", &[]);
    let mut proxy = acc.proxy(Mode::Heap, &["--workers", "1"]);
    let base = proxy.connections_total();
    let mut direct = direct_conn();
    let version: String = direct.query_first("SELECT VERSION()").unwrap().unwrap();
    let mut greeting = raw_greeting(proxy.port);
    for _ in 0..50 {
        if greeting.server_version.ends_with(&version) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        greeting = raw_greeting(proxy.port);
    }
    assert!(
        greeting.server_version.ends_with(&version),
        "{} vs the backend's {version}",
        greeting.server_version
    );
    assert_eq!(
        greeting.capabilities & wire::constants::CLIENT_MYSQL,
        0,
        "presents as MariaDB"
    );
    let m = proxy.metrics();
    assert_eq!(m.get(r#"ringgate_backend_connections{state="idle"}"#), 0.0);
    assert_eq!(m.get(r#"ringgate_backend_connections{state="busy"}"#), 0.0);
    // The first login then works as usual.
    let mut a = connect(&proxy, &acc.a.0, &acc.a.1);
    assert_eq!(current_user(&mut a), format!("{}@%", acc.a.0));
    drop(a);
    proxy.assert_settled(base, 1);
}

/// KILL with the ids clients see, under passthrough identity: another user's session is the
/// server's to protect. b's `KILL QUERY <a's proxy id>` is refused by the server (1095, naming
/// the proxy id) and a's query runs on; an account the server grants CONNECTION ADMIN may kill
/// it, and a's query ends at once. b's SHOW PROCESSLIST shows only what the server shows b.
#[test]
fn kill_of_another_users_session_is_the_servers_decision() {
    let tag = "kill";
    let admin = (format!("idadm_{tag}"), format!("adm-secret-{tag}"));
    let extra = [format!(r#""{}": [{{"Password": "{}"}}]"#, admin.0, admin.1)];
    let mut acc = Accounts::create(tag, &extra);
    acc.add_backend_user(&admin.0, &admin.1);
    direct_conn()
        .query_drop(format!(
            "GRANT CONNECTION ADMIN ON *.* TO '{}'@'%'",
            admin.0
        ))
        .unwrap();
    let mut proxy = acc.proxy(Mode::Fixed, &[]);
    let base = proxy.connections_total();
    let mut b = connect(&proxy, &acc.b.0, &acc.b.1);
    let mut adm = connect(&proxy, &admin.0, &admin.1);

    let run_sleep = |proxy: &Proxy| {
        let mut a = connect(proxy, &acc.a.0, &acc.a.1);
        let a_id = a.connection_id();
        assert!(a_id >= 1 << 31, "a proxy connection id: {a_id}");
        let (tx, rx) = mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(()).unwrap();
            let started = std::time::Instant::now();
            let r = a
                .query_first::<u32, _>("SELECT SLEEP(3)")
                .map_err(|e| mysql_error_code(&e));
            (r, started.elapsed())
        });
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(400));
        (a_id, t)
    };

    let (a_id, sleeper) = run_sleep(&proxy);
    let rows: Vec<mysql::Row> = b.query("SHOW PROCESSLIST").unwrap();
    let listing = format!("{rows:?}");
    assert!(!listing.contains(&acc.a.0), "b sees a: {listing}");
    let e = b
        .query_drop(format!("KILL QUERY {a_id}"))
        .expect_err("b may not kill a's query");
    assert_eq!(mysql_error_code(&e), Some(1095), "{e}");
    assert!(
        mysql_error_message(&e).unwrap().contains(&a_id.to_string()),
        "{e}"
    );
    let (slept, took) = sleeper.join().unwrap();
    assert_eq!(slept, Ok(Some(0)), "a's query ran to its end");
    assert!(took >= Duration::from_secs(3));

    let (a_id, sleeper) = run_sleep(&proxy);
    adm.query_drop(format!("KILL QUERY {a_id}"))
        .expect("CONNECTION ADMIN may kill another user's query");
    let (slept, took) = sleeper.join().unwrap();
    // ER_QUERY_INTERRUPTED: MariaDB's answer to the killed statement.
    assert_eq!(slept, Err(Some(1317)), "a's query was interrupted");
    assert!(took < Duration::from_secs(3), "{took:?}");
    drop((b, adm));
    proxy.assert_settled(base, 4);
}

/// `--backend-identity shared` ignores BackendUser mappings (every client is the shared
/// account), and says so at start-up.
#[test]
fn shared_identity_ignores_mappings_and_says_so() {
    let acc = Accounts::create(
        "sharedmap",
        &[r#""idmapped_sharedmap": [{"Password": "m", "BackendUser": "nobody_here"}]"#.into()],
    );
    let mut opts = ProxyOpts::new(Mode::Heap);
    opts.users_file = acc.users_file.clone();
    let mut proxy = Proxy::start_with(opts);
    let base = proxy.connections_total();
    let mut c = connect(&proxy, "idmapped_sharedmap", "m");
    assert_eq!(
        current_user(&mut c),
        format!("{}@127.0.0.1", proxy.backend.user),
        "the shared account"
    );
    assert!(
        proxy.stderr().contains("--backend-identity shared ignores"),
        "{}",
        tail(&proxy.stderr(), 20)
    );
    drop(c);
    proxy.assert_settled(base, 1);
}

/// SIGHUP with passthrough identity: a user added to the users file logs in as its own
/// account at once, and a user whose password changed (in the file and on the server) runs on
/// its new credential, while a session opened before keeps working.
#[test]
fn a_reload_brings_new_users_and_new_passwords_to_the_backend() {
    let acc = Accounts::create("reload", &[]);
    // Start with a's entry only.
    let only_a = format!(r#"{{"{}": [{{"Password": "{}"}}]}}"#, acc.a.0, acc.a.1);
    std::fs::write(&acc.users_file, &only_a).unwrap();
    let mut proxy = acc.proxy(Mode::Fixed, &["--workers", "1"]);
    let base = proxy.connections_total();
    let mut early = connect(&proxy, &acc.a.0, &acc.a.1);
    let e = proxy
        .connect(proxy.opts(&acc.b.0, &acc.b.1))
        .expect_err("b is not in the users file yet");
    assert_eq!(mysql_error_code(&e), Some(1045));

    // b joins; a's password changes on the server and in the file.
    let new_a = "a-rotated-reload";
    direct_conn()
        .query_drop(format!(
            "SET PASSWORD FOR '{}'@'%' = PASSWORD('{new_a}')",
            acc.a.0
        ))
        .unwrap();
    std::fs::write(
        &acc.users_file,
        format!(
            r#"{{"{}": [{{"Password": "{new_a}"}}], "{}": [{{"Password": "{}"}}]}}"#,
            acc.a.0, acc.b.0, acc.b.1
        ),
    )
    .unwrap();
    // SAFETY: kill(2) with the pid of the ringgate this test spawned and a valid signal.
    assert_eq!(
        unsafe { libc::kill(proxy.pid() as libc::pid_t, libc::SIGHUP) },
        0
    );
    let mut b = None;
    for _ in 0..100 {
        if let Ok(c) = proxy.connect(proxy.opts(&acc.b.0, &acc.b.1)) {
            b = Some(c);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut b = b.expect("b logs in after the reload");
    assert_eq!(current_user(&mut b), format!("{}@%", acc.b.0));
    let mut a = connect(&proxy, &acc.a.0, new_a);
    assert_eq!(current_user(&mut a), format!("{}@%", acc.a.0));
    // The old password is refused by ringgate itself now.
    let e = proxy
        .connect(proxy.opts(&acc.a.0, &acc.a.1))
        .expect_err("a's old password");
    assert_eq!(mysql_error_code(&e), Some(1045));
    // The session opened before the change runs on.
    assert_eq!(current_user(&mut early), format!("{}@%", acc.a.0));
    drop((early, a, b));
    proxy.assert_settled(base, 4);
}

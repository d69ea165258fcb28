//! `mysql` crate connections that bypass the proxy, and what a `mysql::Error` says.

use std::time::Duration;

use mysql::{Conn, OptsBuilder};

use crate::env::{backend_env, TEST_DB};

/// The sandbox as the backend account, over TCP (never its unix socket).
fn sandbox_opts() -> (OptsBuilder, String) {
    let b = backend_env();
    let opts = OptsBuilder::new()
        .ip_or_hostname(Some(b.host.clone()))
        .tcp_port(b.port)
        .user(Some(b.user.clone()))
        .pass(Some(b.password.clone()))
        .prefer_socket(false);
    (opts, b.addr())
}

/// A connection straight to the sandbox, as the backend user, in the test schema (setup and
/// comparisons that must not go through the proxy).
pub fn direct_conn() -> Conn {
    let (opts, addr) = sandbox_opts();
    let opts = opts
        .db_name(Some(TEST_DB))
        .read_timeout(Some(Duration::from_secs(30)));
    Conn::new(opts).unwrap_or_else(|e| panic!("direct connection to the sandbox at {addr}: {e}"))
}

/// A connection straight to the sandbox as the backend account (ALL privileges), in no
/// schema: to look at the server's processlist and general log.
pub fn backend_admin() -> Conn {
    let (opts, addr) = sandbox_opts();
    Conn::new(opts).unwrap_or_else(|e| panic!("direct connection to {addr}: {e}"))
}

/// The server error code of a mysql crate error, if it is one.
pub fn mysql_error_code(e: &mysql::Error) -> Option<u16> {
    match e {
        mysql::Error::MySqlError(me) => Some(me.code),
        _ => None,
    }
}

/// The server's error message of a mysql crate error, if it is one.
pub fn mysql_error_message(e: &mysql::Error) -> Option<String> {
    match e {
        mysql::Error::MySqlError(me) => Some(me.message.clone()),
        _ => None,
    }
}

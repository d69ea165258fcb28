//! The fd half of the leak checks: a proxy's fd count at rest before a scenario, and back at
//! it afterwards once its idle backend connections are accounted for.

use std::time::{Duration, Instant};

use crate::procfs::{fd_count, fd_list};
use crate::proxy::{Proxy, SETTLE_TIMEOUT};
use crate::tail;

/// What a proxy looked like at rest before a scenario.
#[derive(Clone, Copy, Debug)]
pub struct Baseline {
    pub connections_total: f64,
    /// fds that are neither a client nor a backend connection (rings, listeners, metrics,
    /// stdio, ...): `fd_count - idle - busy` at rest.
    pub fixed_fds: i64,
}

fn backend_conns(p: &Proxy) -> (f64, f64) {
    let m = p.metrics();
    (
        m.get(r#"ringgate_backend_connections{state="idle"}"#),
        m.get(r#"ringgate_backend_connections{state="busy"}"#),
    )
}

/// Every backend connection the pool has opened is idle or busy: none is still connecting or
/// logging in (its socket would count as a fixed fd), none closing.
fn backends_at_rest(p: &Proxy) -> bool {
    let m = p.metrics();
    let (idle, busy) = (
        m.get(r#"ringgate_backend_connections{state="idle"}"#),
        m.get(r#"ringgate_backend_connections{state="busy"}"#),
    );
    idle + busy
        == m.get("ringgate_backend_connects_total") - m.get("ringgate_backend_discarded_total")
}

fn fixed_fds(p: &Proxy) -> i64 {
    let (idle, busy) = backend_conns(p);
    fd_count(p.pid()) as i64 - idle as i64 - busy as i64
}

/// Waits until the warm-up pool is open and the fd count is stable, then records it.
pub fn baseline(p: &mut Proxy) -> Baseline {
    let deadline = Instant::now() + Duration::from_secs(10);
    let want_idle = (p.opts.backend_pool_size * p.opts.workers) as f64;
    let mut last = (-1i64, 0u32);
    loop {
        p.assert_running();
        let (idle, _) = backend_conns(p);
        let f = fixed_fds(p);
        // A connection still logging in (slow on a loaded machine) holds a socket that is
        // neither idle nor busy: a baseline taken then is too high by one per such connection.
        let at_rest = backends_at_rest(p);
        if f == last.0 && ((idle >= want_idle && at_rest) || Instant::now() > deadline) {
            last.1 += 1;
            if last.1 >= 3 {
                return Baseline {
                    connections_total: p.connections_total(),
                    fixed_fds: f,
                };
            }
        } else {
            last = (f, 0);
        }
        if Instant::now() > deadline + Duration::from_secs(5) {
            panic!("ringgate fd count never settled: {}", fd_list(p.pid()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The leak checks every scenario ends with: no client holds a buffer, no backend is busy,
/// backend-held buffers == idle + busy, fixed free == total - backend-held, no client
/// connection open (all in `assert_settled`), and the fd count back at baseline once the idle
/// backend connections are accounted for.
pub fn assert_no_leaks(p: &mut Proxy, base: &Baseline, min_new_connections: u64) {
    p.assert_settled(base.connections_total, min_new_connections);
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let f = fixed_fds(p);
        if f == base.fixed_fds {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "fd leak: {} fds that are not backend connections, baseline {}\nfds: {}\n--- metrics ---\n{}\n--- stderr ---\n{}",
                f,
                base.fixed_fds,
                fd_list(p.pid()),
                p.metrics().dump(),
                tail(&p.stderr(), 40)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

//! Debug builds: `RINGGATE_DEBUG_PARK_DELAY_MS=N[,armed]` holds the worker N
//! ms when a relay cancels its idle backend read to end cleanly (a
//! transaction-pooling park, or a session's clean end), so that a test can
//! make the server close that connection inside the window a loaded box
//! opens there (tests/python/test_server_close_races.py). A park that
//! cancels nothing (right after an answer it withdrew the idle read it
//! would have cancelled; and the login's) is held where the connection goes
//! back to the pool instead: the server's EOF is then in the socket when
//! the connection turns idle, and the pool's close watch (in ring mode also
//! the receive the park kept armed) must find it. For
//! the cancelling parks:
//! - `N`: the relay's idle read is still queued, not yet in the kernel: the
//!   server's EOF is there before it, and the read finds it at once (the
//!   EOF beats the cancel).
//! - `N,armed`: the queued read is handed to the kernel first and waits
//!   there; the EOF wakes it (and the pool's close watch) while the worker
//!   is held, and the cancel then races that wake-up.
//!
//! Release builds never read it.

use super::*;

#[cfg(debug_assertions)]
struct ParkDelay {
    delay: Duration,
    armed: bool,
}

#[cfg(debug_assertions)]
fn parse(v: &str) -> Option<ParkDelay> {
    let (ms, armed) = match v.split_once(',') {
        Some((ms, "armed")) => (ms, true),
        Some(_) => return None,
        None => (v, false),
    };
    let delay = Duration::from_millis(ms.trim().parse().ok()?);
    Some(ParkDelay { delay, armed })
}

impl Worker {
    /// The relay is about to cancel its idle backend read: hold the worker
    /// here when the debug variable asks for it.
    pub(super) fn debug_park_delay(&mut self) {
        #[cfg(debug_assertions)]
        {
            static DELAY: std::sync::OnceLock<Option<ParkDelay>> = std::sync::OnceLock::new();
            let Some(d) = DELAY.get_or_init(|| {
                std::env::var("RINGGATE_DEBUG_PARK_DELAY_MS")
                    .ok()
                    .and_then(|v| parse(&v))
            }) else {
                return;
            };
            if d.armed {
                // A failed submit latches the ring's error; the worker's own
                // next submit reports it.
                let _ = self.ring.submit_queued_now();
            }
            std::thread::sleep(d.delay);
        }
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn the_variable_takes_a_delay_and_optionally_armed() {
        let d = parse("200").unwrap();
        assert_eq!((d.delay, d.armed), (Duration::from_millis(200), false));
        let d = parse("50,armed").unwrap();
        assert_eq!((d.delay, d.armed), (Duration::from_millis(50), true));
        assert!(parse("50,later").is_none());
        assert!(parse("x").is_none());
    }
}

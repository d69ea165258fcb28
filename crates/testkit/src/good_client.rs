//! A well-behaved client beside a scenario: it queries in a loop on one connection, and the
//! scenario ends by asserting that it was never affected.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use mysql::Conn;

use crate::proxy::{quick_opts, Proxy};
use crate::tail;

/// A well-behaved client querying in a loop on one connection while a scenario runs.
pub struct GoodClient {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    errors: Arc<Mutex<Vec<String>>>,
    handle: Option<JoinHandle<()>>,
}

impl GoodClient {
    pub fn spawn(p: &Proxy) -> GoodClient {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (s, o, e) = (stop.clone(), ok.clone(), errors.clone());
        let opts = quick_opts(p);
        let handle = std::thread::spawn(move || {
            let mut conn = match Conn::new(opts) {
                Ok(c) => c,
                Err(err) => {
                    e.lock().unwrap().push(format!("connect: {err}"));
                    return;
                }
            };
            let mut i: u64 = 0;
            while !s.load(Ordering::Relaxed) {
                i += 1;
                match conn.query_first::<u64, _>(format!("SELECT {i}")) {
                    Ok(Some(v)) if v == i => {
                        o.fetch_add(1, Ordering::Relaxed);
                    }
                    other => e.lock().unwrap().push(format!("SELECT {i} -> {other:?}")),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        GoodClient {
            stop,
            ok,
            errors,
            handle: Some(handle),
        }
    }

    /// Stops it and asserts it never failed and made progress.
    pub fn finish(mut self, p: &Proxy) {
        // Let it make some progress even when the scenario was quick.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.ok.load(Ordering::Relaxed) < 20 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("good client thread");
        }
        let errors = self.errors.lock().unwrap();
        let ok = self.ok.load(Ordering::Relaxed);
        assert!(
            errors.is_empty() && ok >= 20,
            "the good client was affected: {ok} ok, errors: {:?}\n--- stderr ---\n{}",
            *errors,
            tail(&p.stderr(), 30)
        );
    }
}

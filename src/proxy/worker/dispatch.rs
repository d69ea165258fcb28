//! Dispatch: the worker's loop, and each completion turned into a call of
//! the handler its token names (which hands the machine a typed event
//! through `execute.rs`).

use super::*;

impl Worker {
    /// Run until a drain completes.
    pub fn run(mut self) -> Result<(), WorkerError> {
        self.arm_accepts();
        self.submit(ops::timeout(self.tick_ts, Token::new(OpTag::Tick, 0, 0)));
        self.now = Instant::now();
        let mut refill = Vec::new();
        self.pool.refill(self.now, &mut refill);
        self.pool_q.extend(refill);
        self.drive();
        let mut batch = Vec::with_capacity(1024);
        let busy_poll = self.shared.config.busy_poll();
        loop {
            self.ring.submit_and_wait_polling(busy_poll)?;
            batch.clear();
            self.ring.reap(&mut batch);
            self.now = Instant::now();
            for cqe in batch.iter() {
                self.dispatch(cqe.user_data, cqe.result, cqe.flags);
                self.drive();
            }
            // A few relaxed stores: cheap enough per batch, and a scrape
            // right after a failure sees it (a per-tick export raced tests).
            self.export_ring_stats();
            // What serving sets off can leave more to serve (a connection
            // back, a session asking again at once, which queues while
            // others wait): serve again rather than leave it to the next
            // batch, which may be a tick away. Bounded: each round serves.
            for _ in 0..SERVE_ROUNDS {
                let mut events = Vec::new();
                self.pool.serve_waiters(self.now, &mut events);
                self.pool_q.extend(events);
                self.drive();
                if !self.pool.wants_serving() {
                    break;
                }
            }
            // Fixed mode: reads idle for a while give their slots back
            // (checked here, so a busy worker needs no wake-up for it).
            self.cool_idle_reads();
            // Ring mode: now that every completion is accounted for.
            self.ring_rearm_starved();
            if self.draining.is_some() && self.sessions.is_empty() && self.pool.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// A completion's token names its connection (slab index and
    /// generation) and what the operation was: one handler per operation.
    pub(super) fn dispatch(&mut self, user_data: u64, res: i32, flags: u32) {
        let Some(token) = Token::decode(user_data) else {
            return;
        };
        let sid = SessionId {
            index: token.index,
            generation: token.generation,
        };
        let bid = BackendId {
            index: token.index,
            generation: token.generation,
        };
        match token.tag {
            OpTag::Accept => self.on_accept(token.index as usize, res, flags),
            OpTag::Tick => self.on_tick(),
            OpTag::ClientRead => self.on_client_read(sid, completion(res)),
            OpTag::ClientWrite => self.on_client_write(sid, completion(res)),
            OpTag::UpWrite => self.on_up_write(sid, completion(res)),
            OpTag::DownRead => self.on_down_read(sid, completion(res)),
            OpTag::DownWrite => self.on_down_write(sid, completion(res)),
            OpTag::DownCancel => self.on_down_cancel(sid, res),
            OpTag::TlsWrite => self.on_tls_write(sid, completion(res)),
            OpTag::ClientRecv => self.on_client_recv(sid, res, flags),
            OpTag::BackendRecv => self.on_backend_recv(bid, res, flags),
            OpTag::BackendRecvCancel => self.on_backend_recv_cancel(bid, res),
            OpTag::ClientPoll => self.on_client_poll(sid, completion(res)),
            OpTag::BackendPoll => self.on_backend_poll(bid, completion(res)),
            OpTag::ClientReadCool => self.on_client_read_cool(sid, res),
            OpTag::DownReadCool => self.on_down_read_cool(sid, res),
            OpTag::BackendConnect => self.on_backend_connect(bid, completion(res)),
            OpTag::BackendRead => self.on_backend_read(bid, completion(res)),
            OpTag::BackendWrite => self.on_backend_write(bid, completion(res)),
            OpTag::BackendTlsWrite => self.on_backend_tls_write(bid, completion(res)),
            OpTag::BackendWatch => self.on_backend_watch(bid, completion(res)),
            OpTag::DirectAccept => self.on_direct_accept(token.index as usize, res),
            OpTag::DirectClose => self.on_direct_close(token.index, token.generation, res),
            OpTag::ClientShutdown => self.on_client_shutdown(sid, res),
            OpTag::KillWake => self.on_kill_wake(sid, res as u32),
            OpTag::KillAnswer => self.release_kill_answer(sid),
            OpTag::MsgRingSent => self.on_msg_ring_sent(token.index, token.generation, res),
            OpTag::Ignore => {}
        }
    }
}

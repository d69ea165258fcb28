//! Building a worker: its ring, its read buffers in the mode asked for (or
//! the one it falls back to), its listeners, the direct-descriptor table
//! and its backend pool.

use super::*;

/// Register the worker's provided-buffer ring and check that multishot
/// receive works on this kernel.
fn ring_buffers(
    ring: &mut Ring,
    cfg: &crate::config::Config,
    metrics: Arc<metrics::Metrics>,
    id: usize,
) -> Result<BufRing, RingSetupError> {
    let count = u16::try_from(cfg.read_buffer_count).unwrap_or(u16::MAX);
    let mut bufs = BufRing::register(ring, count, cfg.read_buffer_size, metrics, id)?;
    bufs.enable_bundles(ring, cfg.large_read_size);
    let mut probed = bufs.probe_recv_multishot(ring);
    if probed.is_err() && bufs.bundles() {
        bufs.disable_bundles(&format!(
            "a capped bundled receive failed: {}",
            probed
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        ));
        probed = bufs.probe_recv_multishot(ring);
    }
    if let Err(e) = probed {
        // Nothing may take from the ring once its memory is unmapped.
        let _ = ring.unregister_buf_ring(uring::buffers::provided::BGID);
        return Err(e);
    }
    Ok(bufs)
}

/// The worker's read buffers in the mode asked for, or in the mode it falls
/// back to: (pool, why not fixed, why not ring).
fn read_buffers(
    ring: &mut Ring,
    cfg: &crate::config::Config,
    metrics: &Arc<metrics::Metrics>,
    id: usize,
) -> (BufferPool, Option<String>, Option<String>) {
    let size = cfg.read_buffer_size as usize;
    let mut mode = cfg.read_buffers;
    let mut ring_pool = None;
    let mut ring_fallback = None;
    if mode == ReadBufferMode::Ring {
        match ring_buffers(ring, cfg, Arc::clone(metrics), id) {
            Ok(r) => ring_pool = Some(BufferPool::ring(r, size, Arc::clone(metrics), id)),
            Err(e) => {
                ring_fallback = Some(e.to_string());
                mode = ReadBufferMode::Fixed;
            }
        }
    }
    let metrics = Arc::clone(metrics);
    let (buffers, fallback) = match (ring_pool, mode) {
        (Some(pool), _) => (pool, None),
        (None, ReadBufferMode::Heap | ReadBufferMode::Ring) => {
            (BufferPool::heap(size, metrics, id), None)
        }
        (None, ReadBufferMode::Fixed) => {
            let count = cfg.read_buffer_count as usize;
            match BufferPool::fixed(ring, size, count, Arc::clone(&metrics), id) {
                Ok(pool) => (pool, None),
                Err(e) => (BufferPool::heap(size, metrics, id), Some(e.to_string())),
            }
        }
    };
    let buffers = buffers.with_large_reads(cfg.large_read_size as usize);
    (buffers, fallback, ring_fallback)
}

/// The ring's file table for clients accepted as direct descriptors, or
/// why there is none although asked for.
fn direct_table(
    ring: &mut Ring,
    listener: &Socket,
    cfg: &crate::config::Config,
    id: usize,
) -> (Option<direct::Direct>, Option<String>) {
    match cfg.direct_descriptors {
        DirectDescriptors::Off => (None, None),
        DirectDescriptors::Auto => {
            match ring.setup_direct_files(direct::table_slots(cfg.max_connections)) {
                Ok(()) => {
                    // A direct descriptor has no fd to set options on:
                    // accepted sockets inherit the listener's.
                    let _ = listener.set_nodelay(true);
                    if let Err(e) = crate::sockopt::apply_tcp_options(listener, cfg) {
                        tracing::warn!(worker = id, "listener socket options: {e}");
                    }
                    (Some(direct::Direct::new(ring.direct_slots(), 2)), None)
                }
                Err(e) => (None, Some(e)),
            }
        }
    }
}

/// Where `addr` stands in the table of `--backend` addresses
/// ([`backend_addresses`]).
pub(super) fn server_index(cfg: &crate::config::Config, addr: std::net::SocketAddr) -> u16 {
    let index = cfg.backends.iter().position(|b| b.address == addr);
    index.and_then(|i| u16::try_from(i).ok()).unwrap_or(0)
}

/// Every `--backend` address, in configured order, for the connects: a
/// connect SQE points at its address until it completes, so each lives as
/// long as the worker (leaked once, like the tick's timespec).
fn backend_addresses(cfg: &crate::config::Config) -> Vec<&'static SockAddr> {
    let mut addrs: Vec<_> = cfg.backends.iter().map(|b| b.address).collect();
    if addrs.is_empty() {
        addrs.push(cfg.backend);
    }
    addrs.into_iter().map(|a| leak(SockAddr::from(a))).collect()
}

/// The pool's configuration, from the proxy's.
fn pool_config(shared: &Shared) -> PoolConfig {
    let cfg = &shared.config;
    PoolConfig {
        backend: cfg.backend,
        backend_index: server_index(cfg, cfg.backend),
        wait_for_writer: cfg.backends.len() > 1,
        identity: match cfg.backend_identity {
            BackendIdentity::Passthrough => IdentityMode::Passthrough,
            BackendIdentity::Shared => IdentityMode::Shared(BackendLogin {
                user: cfg.backend_user.clone(),
                credential: auth::Credential::Plaintext(cfg.backend_password.as_bytes().to_vec()),
            }),
        },
        pool_size: cfg.backend_pool_size,
        max_connections: cfg.backend_max_connections,
        max_per_user: cfg.backend_max_connections_per_user,
        wait_timeout: cfg.backend_wait_timeout,
        writer_wait_timeout: cfg.writer_wait(),
        idle_timeout: cfg.backend_idle_timeout,
        connect_timeout: cfg.backend_connect_timeout,
        causal_read_timeout: cfg.causal_read_timeout,
        full_auth: FullAuthTransport {
            secure: false,
            server_key: shared.backend_rsa_public_key.clone(),
        },
        tls: match &shared.backend_tls {
            None => TlsWish::Off,
            Some(t) if t.required() => TlsWish::Required,
            Some(_) => TlsWish::Preferred,
        },
    }
}

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

fn timespec(d: Duration) -> Timespec {
    Timespec::new().sec(d.as_secs()).nsec(d.subsec_nanos())
}
impl Worker {
    /// Build a worker on the current thread (SINGLE_ISSUER ties the ring
    /// to the thread that creates it).
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        unix: Option<Socket>,
    ) -> Result<(Worker, WorkerStartup), WorkerError> {
        let cfg = &shared.config;
        let (sq, cq) = ring_sizes(cfg, shared.metrics.worker_count());
        let mut ring = Ring::new(sq, cq)?;
        let (buffers, fallback, ring_fallback) = read_buffers(&mut ring, cfg, &shared.metrics, id);
        let listener = listen::tcp(cfg.listen)?;
        let (direct, direct_fallback) = direct_table(&mut ring, &listener, cfg, id);
        let startup = WorkerStartup {
            features: ring.features(),
            mode: buffers.mode(),
            fallback,
            ring_fallback,
            ring_fd_fallback: ring.ring_fd_fallback().map(str::to_owned),
            ring_fd: ring.fd(),
            direct_slots: ring.direct_slots(),
            direct_fallback,
        };
        let mut pool = Pool::new(
            pool_config(&shared),
            Arc::clone(&shared.backends),
            Arc::clone(&shared.metrics),
            id,
        );
        pool.set_max_prepared(crate::proxy::backend_max_prepared(cfg));
        let buffers_mode = buffers.mode();
        let worker = Worker {
            ring,
            buffers,
            id,
            users: shared.users(),
            users_applied: shared.users(),
            listeners: [Some(listener), unix].map(|l| l.map(Listener::disarmed)),
            accept_multishot: true,
            accept_resume_at: None,
            direct,
            sessions: Slab::new(),
            backends: Default::default(),
            pool,
            template: BackendTemplate::before_any_greeting(),
            backend_addrs: backend_addresses(cfg),
            cluster: shared.cluster.as_ref().map(|c| c.reader()),
            replica_chooser: Default::default(),
            replica_candidates: Vec::new(),
            connect_timeout: leak(timespec(cfg.backend_connect_timeout)),
            tick_ts: leak(timespec(TICK)),
            conn_ids: ConnectionIds::new(id, shared.metrics.worker_count()),
            draining: None,
            log_limiter: LogLimiter::default(),
            fd_exhaustion_logged_at: None,
            fd_exhaustion_paused: 0,
            session_q: VecDeque::new(),
            held_kill_answers: Vec::new(),
            pool_q: VecDeque::new(),
            now: Instant::now(),
            action_scratch: Vec::new(),
            lease_scratch: Vec::new(),
            held_write: None,
            link_up_write: false,
            ring_pending_ops: std::collections::HashMap::new(),
            ring_starved: std::collections::VecDeque::new(),
            idle_poll: buffers_mode == BufferMode::Fixed && !shared.config.hold_idle_slots,
            hot_queue: VecDeque::new(),
            backend_tls: std::collections::HashMap::new(),
            shared,
        };
        Ok((worker, startup))
    }
}

//! The TLS section of `make bench`: connect storms with TLS,
//! full and resumed handshakes measured apart, and query throughput with
//! and without TLS, for ringgate's front-end TLS against MariaDB's own.
//!
//! mysql_async is built without TLS here, and no MySQL client library lets
//! one choose per connection between a full and a resumed handshake and
//! then tell which one happened, so this module speaks the few packets it
//! needs itself (greeting, SSLRequest, HandshakeResponse41 with
//! mysql_native_password, COM_QUERY, COM_QUIT) over blocking sockets, one
//! thread per client, with rustls as the TLS client. The same client runs
//! with and without TLS, so the differences are TLS's.
//!
//! Modes, each a closed loop of `concurrency` clients:
//! - `connect-plain`: connect, log in, quit, without TLS (the baseline);
//! - `connect-full`: the same over TLS with resumption off in the client;
//! - `connect-resumed`: over TLS offering a session ticket from an earlier
//!   connection of the same client process (rustls's in-memory client
//!   store; the server decides whether it resumes, the client counts it);
//! - `select-plain` / `select-tls`: persistent connections running point
//!   selects on `sbtest1`.
//!
//! Around each step it reads the CPU time of the proxy and of mariadbd
//! (`/proc/PID/stat`), so "CPU µs per connect" is the server side's work
//! for one connect: ringgate's own (its pool spares MariaDB the logins)
//! and mariadbd's (for direct, the whole handshake and login).

use std::fmt::Write as _;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use serde::Serialize;
use sha1::{Digest, Sha1};

use crate::checks;
use crate::hist::{self, Percentiles};
use crate::model::target::Kind;
use crate::model::BENCH_DB;
use crate::procs;
use crate::setup::launch::start_ringgate;
use crate::setup::Ctx;

type Res<T> = Result<T, String>;

const CLIENT_LONG_PASSWORD: u32 = 0x1;
const CLIENT_CONNECT_WITH_DB: u32 = 0x8;
const CLIENT_PROTOCOL_41: u32 = 0x200;
const CLIENT_SSL: u32 = 0x800;
const CLIENT_TRANSACTIONS: u32 = 0x2000;
const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
const CLIENT_PLUGIN_AUTH: u32 = 0x80000;
const NATIVE: &str = "mysql_native_password";

/// One server the section measures.
#[derive(Clone, Debug)]
pub struct TlsTarget {
    pub name: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub db: String,
    /// The proxy's pid (none for direct).
    pub proxy_pid: Option<u32>,
}

/// What a step measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    ConnectPlain,
    ConnectFull,
    ConnectResumed,
    SelectPlain,
    SelectTls,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::ConnectPlain,
        Mode::ConnectFull,
        Mode::ConnectResumed,
        Mode::SelectPlain,
        Mode::SelectTls,
    ];
    fn name(self) -> &'static str {
        match self {
            Mode::ConnectPlain => "connect-plain",
            Mode::ConnectFull => "connect-full",
            Mode::ConnectResumed => "connect-resumed",
            Mode::SelectPlain => "select-plain",
            Mode::SelectTls => "select-tls",
        }
    }
    fn tls(self) -> bool {
        !matches!(self, Mode::ConnectPlain | Mode::SelectPlain)
    }
    fn connects(self) -> bool {
        matches!(
            self,
            Mode::ConnectPlain | Mode::ConnectFull | Mode::ConnectResumed
        )
    }
}

/// One target × mode, merged over rounds.
#[derive(Clone, Debug, Serialize)]
pub struct TlsRecord {
    pub target: String,
    pub mode: Mode,
    pub concurrency: usize,
    pub count: u64,
    pub failures: u64,
    pub first_error: Option<String>,
    pub rate: f64,
    pub latency: Percentiles,
    /// TLS handshakes the client saw resumed / all TLS handshakes.
    pub resumed: u64,
    pub handshakes: u64,
    /// CPU per successful operation, µs.
    pub proxy_cpu_us_per_op: Option<f64>,
    pub mariadb_cpu_us_per_op: Option<f64>,
    pub seconds: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TlsReport {
    pub records: Vec<TlsRecord>,
    pub notes: Vec<String>,
    /// ringgate's leak check after the section.
    pub leaks: Vec<String>,
    pub loadavg_start: String,
    pub loadavg_end: String,
}

/// Settings of the section.
pub struct TlsSpec {
    pub connect_concurrency: usize,
    pub select_concurrency: usize,
    pub rounds: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub table_size: u64,
    pub mariadb_pid: Option<u32>,
}

// ───────────────────────────── the client ─────────────────────────────

/// Accepts any certificate: the bench measures the servers' side, and the
/// client's verification would only add client CPU on the shared cores.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client TLS config; `resume`: keep sessions (tickets) in memory and
/// offer them (shared by every thread of a step, as one application's
/// connection pool would).
pub fn client_config(resume: bool) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("rustls's default versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    cfg.resumption = if resume {
        rustls::client::Resumption::in_memory_sessions(4096)
    } else {
        rustls::client::Resumption::disabled()
    };
    Arc::new(cfg)
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

pub struct Conn {
    io: BufReader<Stream>,
    seq: u8,
    /// Whether the TLS handshake resumed (None without TLS).
    pub resumed: Option<bool>,
}

fn io_err(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

fn read_packet(r: &mut impl Read, seq: &mut u8) -> Res<Vec<u8>> {
    let mut h = [0u8; 4];
    r.read_exact(&mut h).map_err(|e| io_err("read", e))?;
    let len = usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16;
    *seq = h[3].wrapping_add(1);
    let mut p = vec![0; len];
    r.read_exact(&mut p).map_err(|e| io_err("read", e))?;
    Ok(p)
}

fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut v = Vec::with_capacity(n + 4);
    v.extend_from_slice(&[n as u8, (n >> 8) as u8, (n >> 16) as u8, seq]);
    v.extend_from_slice(payload);
    v
}

fn err_text(p: &[u8]) -> String {
    let code = p.get(1..3).map_or(0, |c| u16::from_le_bytes([c[0], c[1]]));
    let msg = p.get(9..).unwrap_or_default();
    format!("server error {code}: {}", String::from_utf8_lossy(msg))
}

/// mysql_native_password: SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw))).
fn native_scramble(password: &str, scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = Sha1::digest(password.as_bytes());
    let h2 = Sha1::digest(h1);
    let mut h = Sha1::new();
    h.update(scramble);
    h.update(h2);
    let h3 = h.finalize();
    h1.iter().zip(h3.iter()).map(|(a, b)| a ^ b).collect()
}

/// The greeting's 20-byte scramble.
fn greeting_scramble(g: &[u8]) -> Res<Vec<u8>> {
    let bad = || "malformed greeting".to_string();
    if g.first() != Some(&10) {
        return Err(if g.first() == Some(&0xff) {
            err_text(g)
        } else {
            bad()
        });
    }
    let ver_end = g.iter().skip(1).position(|&b| b == 0).ok_or_else(bad)? + 1;
    let p = ver_end + 1 + 4;
    let mut s = g.get(p..p + 8).ok_or_else(bad)?.to_vec();
    // filler 1, caps 2, charset 1, status 2, caps 2, auth len 1, reserved 10
    let q = p + 8 + 1 + 2 + 1 + 2 + 2 + 1 + 10;
    s.extend_from_slice(g.get(q..q + 12).ok_or_else(bad)?);
    Ok(s)
}

impl Conn {
    /// Connect and log in; with `tls`, upgrade with an SSLRequest first.
    pub fn open(t: &TlsTarget, tls: Option<&Arc<ClientConfig>>) -> Res<Conn> {
        let sock = TcpStream::connect(("127.0.0.1", t.port)).map_err(|e| io_err("connect", e))?;
        let _ = sock.set_nodelay(true);
        let _ = sock.set_read_timeout(Some(Duration::from_secs(20)));
        let mut io = BufReader::new(Stream::Plain(sock));
        let mut seq = 0;
        let greeting = read_packet(&mut io, &mut seq)?;
        let scramble = greeting_scramble(&greeting)?;
        let mut caps = CLIENT_LONG_PASSWORD
            | CLIENT_CONNECT_WITH_DB
            | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH;
        let mut resumed = None;
        if let Some(cfg) = tls {
            caps |= CLIENT_SSL;
            let mut req = Vec::with_capacity(32);
            req.extend_from_slice(&caps.to_le_bytes());
            req.extend_from_slice(&(1u32 << 24).to_le_bytes());
            req.push(45);
            req.extend_from_slice(&[0; 23]);
            let Stream::Plain(mut sock) = io.into_inner() else {
                unreachable!("plain before the upgrade")
            };
            sock.write_all(&frame(seq, &req))
                .map_err(|e| io_err("write", e))?;
            seq = seq.wrapping_add(1);
            let name = ServerName::try_from("localhost").expect("a valid name");
            let conn = ClientConnection::new(Arc::clone(cfg), name)
                .map_err(|e| format!("TLS client: {e}"))?;
            let mut s = StreamOwned::new(conn, sock);
            while s.conn.is_handshaking() {
                s.conn
                    .complete_io(&mut s.sock)
                    .map_err(|e| io_err("TLS handshake", e))?;
            }
            resumed = Some(s.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed));
            io = BufReader::new(Stream::Tls(Box::new(s)));
        }
        let mut resp = Vec::with_capacity(128);
        resp.extend_from_slice(&caps.to_le_bytes());
        resp.extend_from_slice(&(1u32 << 24).to_le_bytes());
        resp.push(45);
        resp.extend_from_slice(&[0; 23]);
        resp.extend_from_slice(t.user.as_bytes());
        resp.push(0);
        let auth = native_scramble(&t.password, &scramble);
        resp.push(auth.len() as u8);
        resp.extend_from_slice(&auth);
        resp.extend_from_slice(t.db.as_bytes());
        resp.push(0);
        resp.extend_from_slice(NATIVE.as_bytes());
        resp.push(0);
        let mut c = Conn { io, seq, resumed };
        c.send(&resp)?;
        loop {
            let p = c.read()?;
            match p.first() {
                Some(0x00) => return Ok(c),
                Some(0xff) => return Err(err_text(&p)),
                Some(0xfe) => {
                    // Auth switch: only mysql_native_password is spoken here.
                    let rest = &p[1..];
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    let plugin = String::from_utf8_lossy(&rest[..end]).to_string();
                    if plugin != NATIVE {
                        return Err(format!("auth switch to {plugin} (not spoken here)"));
                    }
                    let data = rest.get(end + 1..).unwrap_or_default();
                    let scr = &data[..data.len().min(20)];
                    let a = native_scramble(&t.password, scr);
                    c.send(&a)?;
                }
                _ => return Err(format!("unexpected login answer {:?}", p.first())),
            }
        }
    }

    fn send(&mut self, payload: &[u8]) -> Res<()> {
        let f = frame(self.seq, payload);
        self.seq = self.seq.wrapping_add(1);
        let w = self.io.get_mut();
        w.write_all(&f).map_err(|e| io_err("write", e))?;
        w.flush().map_err(|e| io_err("write", e))
    }

    fn read(&mut self) -> Res<Vec<u8>> {
        read_packet(&mut self.io, &mut self.seq)
    }

    /// A text query whose result is read to its end; returns the rows.
    pub fn query(&mut self, sql: &str) -> Res<usize> {
        self.seq = 0;
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(0x03);
        p.extend_from_slice(sql.as_bytes());
        self.send(&p)?;
        let first = self.read()?;
        match first.first() {
            Some(0x00) => return Ok(0),
            Some(0xff) => return Err(err_text(&first)),
            _ => {}
        }
        let is_eof = |p: &[u8]| p.first() == Some(&0xfe) && p.len() < 9;
        // Column definitions up to their EOF, then rows up to the last EOF.
        loop {
            let p = self.read()?;
            if is_eof(&p) {
                break;
            }
        }
        let mut rows = 0;
        loop {
            let p = self.read()?;
            if is_eof(&p) {
                return Ok(rows);
            }
            if p.first() == Some(&0xff) {
                return Err(err_text(&p));
            }
            rows += 1;
        }
    }

    /// COM_QUIT (no answer), then the socket closes with the value.
    pub fn quit(mut self) {
        self.seq = 0;
        let _ = self.send(&[0x01]);
        if let Stream::Tls(s) = self.io.get_mut() {
            s.conn.send_close_notify();
            let _ = s.flush();
        }
    }
}

// ───────────────────────────── the load ─────────────────────────────

struct StepOut {
    hist: Histogram<u64>,
    count: u64,
    failures: u64,
    first_error: Option<String>,
    resumed: u64,
    handshakes: u64,
    seconds: f64,
    proxy_cpu_s: Option<f64>,
    mariadb_cpu_s: Option<f64>,
}

/// One closed-loop step: `warmup` unrecorded, then `duration` measured.
fn step(
    t: &TlsTarget,
    mode: Mode,
    concurrency: usize,
    spec: &TlsSpec,
    tls: Option<Arc<ClientConfig>>,
) -> StepOut {
    let recording = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let resumed = Arc::new(AtomicU64::new(0));
    let handshakes = Arc::new(AtomicU64::new(0));
    let hist = Arc::new(Mutex::new(hist::new_hist()));
    let failures = Arc::new(AtomicU64::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let mut threads = Vec::new();
    for i in 0..concurrency {
        let (t, tls) = (t.clone(), tls.clone());
        let (recording, stop) = (Arc::clone(&recording), Arc::clone(&stop));
        let (resumed, handshakes) = (Arc::clone(&resumed), Arc::clone(&handshakes));
        let (hist, failures, count) =
            (Arc::clone(&hist), Arc::clone(&failures), Arc::clone(&count));
        let first_error = Arc::clone(&first_error);
        let table = spec.table_size.max(1);
        threads.push(std::thread::spawn(move || {
            let mut local = hist::new_hist();
            let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ ((i as u64 + 1) * 0x2545_f491_4f6c_dd1d);
            let mut held: Option<Conn> = None;
            let fail = |e: String| {
                if recording.load(Ordering::Relaxed) {
                    failures.fetch_add(1, Ordering::Relaxed);
                    first_error.lock().unwrap().get_or_insert(e);
                }
            };
            while !stop.load(Ordering::Relaxed) {
                let rec = recording.load(Ordering::Relaxed);
                let t0 = Instant::now();
                let ok = if mode.connects() {
                    match Conn::open(&t, tls.as_ref()) {
                        Ok(c) => {
                            if rec {
                                if let Some(r) = c.resumed {
                                    handshakes.fetch_add(1, Ordering::Relaxed);
                                    resumed.fetch_add(u64::from(r), Ordering::Relaxed);
                                }
                            }
                            c.quit();
                            true
                        }
                        Err(e) => {
                            fail(e);
                            false
                        }
                    }
                } else {
                    if held.is_none() {
                        match Conn::open(&t, tls.as_ref()) {
                            Ok(c) => held = Some(c),
                            Err(e) => {
                                fail(e);
                                std::thread::sleep(Duration::from_millis(50));
                                continue;
                            }
                        }
                    }
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let id = seed % table + 1;
                    let sql = format!("SELECT c FROM sbtest1 WHERE id={id}");
                    let t1 = Instant::now();
                    match held.as_mut().map(|c| c.query(&sql)) {
                        Some(Ok(_)) => {
                            if rec {
                                local
                                    .record(hist::clamp_us(t1.elapsed().as_micros() as u64))
                                    .ok();
                                count.fetch_add(1, Ordering::Relaxed);
                            }
                            continue;
                        }
                        Some(Err(e)) => {
                            held = None;
                            fail(e);
                            false
                        }
                        None => false,
                    }
                };
                if ok && rec {
                    local
                        .record(hist::clamp_us(t0.elapsed().as_micros() as u64))
                        .ok();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            if let Some(c) = held {
                c.quit();
            }
            hist.lock().unwrap().add(&local).ok();
        }));
    }
    std::thread::sleep(spec.warmup);
    let cpu = |pid: Option<u32>| pid.and_then(procs::cpu_seconds);
    let (p0, m0) = (cpu(t.proxy_pid), cpu(spec.mariadb_pid));
    let start = Instant::now();
    recording.store(true, Ordering::Relaxed);
    std::thread::sleep(spec.duration);
    recording.store(false, Ordering::Relaxed);
    let seconds = start.elapsed().as_secs_f64();
    let (p1, m1) = (cpu(t.proxy_pid), cpu(spec.mariadb_pid));
    stop.store(true, Ordering::Relaxed);
    for th in threads {
        let _ = th.join();
    }
    let hist = std::mem::replace(&mut *hist.lock().unwrap(), hist::new_hist());
    let first_error = first_error.lock().unwrap().take();
    StepOut {
        hist,
        count: count.load(Ordering::Relaxed),
        failures: failures.load(Ordering::Relaxed),
        first_error,
        resumed: resumed.load(Ordering::Relaxed),
        handshakes: handshakes.load(Ordering::Relaxed),
        seconds,
        proxy_cpu_s: p0.zip(p1).map(|(a, b)| b - a),
        mariadb_cpu_s: m0.zip(m1).map(|(a, b)| b - a),
    }
}

/// Run every mode on every target, `rounds` times, the targets' order
/// rotated each round; `out_dir` gets `tls.json`, `tls.md` and `.hgrm`s.
pub fn run(targets: &[TlsTarget], spec: &TlsSpec, out_dir: &Path) -> Res<TlsReport> {
    let loadavg = || {
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    let mut report = TlsReport {
        loadavg_start: loadavg(),
        ..Default::default()
    };
    struct Acc {
        hist: Histogram<u64>,
        count: u64,
        failures: u64,
        first_error: Option<String>,
        resumed: u64,
        handshakes: u64,
        seconds: f64,
        proxy_cpu_s: Option<f64>,
        mariadb_cpu_s: Option<f64>,
    }
    let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (x, None) | (None, x) => x,
    };
    let mut accs: Vec<Vec<Option<Acc>>> = Mode::ALL
        .iter()
        .map(|_| targets.iter().map(|_| None).collect())
        .collect();
    for round in 0..spec.rounds.max(1) {
        for (mi, &mode) in Mode::ALL.iter().enumerate() {
            let conc = if mode.connects() {
                spec.connect_concurrency
            } else {
                spec.select_concurrency
            };
            for k in 0..targets.len() {
                let ti = (k + round) % targets.len();
                let t = &targets[ti];
                // One client config per step: its session store starts empty,
                // and the warm-up's first handshakes fill it.
                let cfg = mode
                    .tls()
                    .then(|| client_config(mode == Mode::ConnectResumed));
                eprintln!(
                    "bench: tls round {}/{} {} c={conc} {}",
                    round + 1,
                    spec.rounds,
                    mode.name(),
                    t.name
                );
                let o = step(t, mode, conc, spec, cfg);
                let a = accs[mi][ti].get_or_insert_with(|| Acc {
                    hist: hist::new_hist(),
                    count: 0,
                    failures: 0,
                    first_error: None,
                    resumed: 0,
                    handshakes: 0,
                    seconds: 0.0,
                    proxy_cpu_s: None,
                    mariadb_cpu_s: None,
                });
                a.hist.add(&o.hist).ok();
                a.count += o.count;
                a.failures += o.failures;
                if a.first_error.is_none() {
                    a.first_error = o.first_error;
                }
                a.resumed += o.resumed;
                a.handshakes += o.handshakes;
                a.seconds += o.seconds;
                a.proxy_cpu_s = add(a.proxy_cpu_s, o.proxy_cpu_s);
                a.mariadb_cpu_s = add(a.mariadb_cpu_s, o.mariadb_cpu_s);
            }
        }
    }
    for (mi, &mode) in Mode::ALL.iter().enumerate() {
        for (ti, t) in targets.iter().enumerate() {
            let Some(a) = accs[mi][ti].take() else {
                continue;
            };
            let per = |s: Option<f64>| {
                s.filter(|_| a.count > 0)
                    .map(|s| (s * 1e6 / a.count as f64 * 10.0).round() / 10.0)
            };
            let name = format!("tls-{}-{}.hgrm", mode.name(), t.name);
            std::fs::write(out_dir.join(&name), hist::hgrm(&a.hist, 1000.0))
                .map_err(|e| e.to_string())?;
            report.records.push(TlsRecord {
                target: t.name.clone(),
                mode,
                concurrency: if mode.connects() {
                    spec.connect_concurrency
                } else {
                    spec.select_concurrency
                },
                count: a.count,
                failures: a.failures,
                first_error: a.first_error,
                rate: if a.seconds > 0.0 {
                    (a.count as f64 / a.seconds).round()
                } else {
                    0.0
                },
                latency: Percentiles::of(&a.hist),
                resumed: a.resumed,
                handshakes: a.handshakes,
                proxy_cpu_us_per_op: per(a.proxy_cpu_s),
                mariadb_cpu_us_per_op: per(a.mariadb_cpu_s),
                seconds: a.seconds,
            });
        }
    }
    report.loadavg_end = loadavg();
    std::fs::write(
        out_dir.join("tls.json"),
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(out_dir.join("tls.md"), report.table()).map_err(|e| e.to_string())?;
    Ok(report)
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

impl TlsReport {
    /// The section's table, and the ratios it is about.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "── TLS (own client: connect → login → COM_QUIT; point selects on persistent connections) ──"
        );
        let _ = writeln!(
            s,
            "  load average at start {}, at end {}",
            self.loadavg_start, self.loadavg_end
        );
        let _ = writeln!(
            s,
            "  {:<16} {:<14} {:>3} {:>8} {:>7} {:>7} {:>7} {:>5} {:>9} {:>12} {:>14}",
            "mode",
            "target",
            "c",
            "ops/s",
            "p50",
            "p99",
            "p99.9",
            "fail",
            "resumed",
            "proxy cpu/op",
            "mariadb cpu/op"
        );
        for r in &self.records {
            let resumed = if r.handshakes > 0 {
                format!("{:.0}%", 100.0 * r.resumed as f64 / r.handshakes as f64)
            } else {
                "-".into()
            };
            let _ = writeln!(
                s,
                "  {:<16} {:<14} {:>3} {:>8} {:>7} {:>7} {:>7} {:>5} {:>9} {:>12} {:>14}",
                r.mode.name(),
                r.target,
                r.concurrency,
                r.rate,
                r.latency.p50_us,
                r.latency.p99_us,
                r.latency.p999_us,
                r.failures,
                resumed,
                opt(r.proxy_cpu_us_per_op),
                opt(r.mariadb_cpu_us_per_op)
            );
        }
        let find = |t: &str, m: Mode| self.records.iter().find(|r| r.target == t && r.mode == m);
        let mut targets: Vec<&str> = Vec::new();
        for r in &self.records {
            if !targets.contains(&r.target.as_str()) {
                targets.push(&r.target);
            }
        }
        for t in targets {
            let ratio = |a: Mode, b: Mode, f: &dyn Fn(&TlsRecord) -> Option<f64>| match (
                find(t, a).and_then(f),
                find(t, b).and_then(f),
            ) {
                (Some(x), Some(y)) if y > 0.0 => format!("{:.2}", x / y),
                _ => "-".into(),
            };
            let cpu = |r: &TlsRecord| match (r.proxy_cpu_us_per_op, r.mariadb_cpu_us_per_op) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            };
            let rate = |r: &TlsRecord| Some(r.rate);
            let _ = writeln!(
                s,
                "  {t}: server CPU per connect full/plain {} resumed/full {}; connects/s full/plain {} resumed/full {}; select ops/s tls/plain {}",
                ratio(Mode::ConnectFull, Mode::ConnectPlain, &cpu),
                ratio(Mode::ConnectResumed, Mode::ConnectFull, &cpu),
                ratio(Mode::ConnectFull, Mode::ConnectPlain, &rate),
                ratio(Mode::ConnectResumed, Mode::ConnectFull, &rate),
                ratio(Mode::SelectTls, Mode::SelectPlain, &rate),
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "  note: {n}");
        }
        s
    }

    /// What makes a smoke run fail: failures or nothing measured.
    pub fn problems(&self) -> Vec<String> {
        let mut p: Vec<String> = self
            .records
            .iter()
            .filter(|r| r.failures > 0 || r.count == 0)
            .map(|r| {
                format!(
                    "tls {} / {}: count {} failures {} ({:?})",
                    r.mode.name(),
                    r.target,
                    r.count,
                    r.failures,
                    r.first_error
                )
            })
            .collect();
        if self.records.is_empty() {
            p.push("tls: nothing measured".into());
        }
        p.extend(self.leaks.iter().map(|l| format!("tls leak check: {l}")));
        p
    }
}

/// Where the certificate for ringgate's TLS comes from: the MariaDB
/// sandbox's (so both servers sign with the same RSA 2048 key type), else
/// the test certificate in src/tls/testdata.
pub fn cert_files(root: &Path, sandbox_tls_dir: Option<&Path>) -> (PathBuf, PathBuf) {
    match sandbox_tls_dir {
        Some(d) if d.join("server.pem").is_file() && d.join("server.key").is_file() => {
            (d.join("server.pem"), d.join("server.key"))
        }
        _ => (
            root.join("src/tls/testdata/server.pem"),
            root.join("src/tls/testdata/server.key"),
        ),
    }
}

// ───────────────────────────── in `make bench` ─────────────────────────────

/// Whether `--scenarios`/BENCH_SCENARIOS asks for the TLS section (it does
/// by default), and the other scenarios of the list.
pub fn split_scenarios(list: Option<&str>) -> (bool, Option<String>) {
    match list {
        None => (true, None),
        Some(s) => {
            let rest: Vec<&str> = s.split(',').filter(|x| x.trim() != "tls").collect();
            (rest.len() < s.split(',').count(), Some(rest.join(",")))
        }
    }
}

/// The section within `make bench`: a ringgate with TLS on `base + 8`
/// (metrics `base + 18`) and MariaDB's own TLS when the sandbox has it.
pub async fn section(
    ctx: &Ctx<'_>,
    root: &Path,
    out_dir: &Path,
    own_server: bool,
) -> Res<TlsReport> {
    let (prof, backend, base) = (ctx.prof, ctx.backend, ctx.base_port);
    let smoke = prof.name == "smoke";
    // The sandbox marks a server started with RINGGATE_SANDBOX_TLS=1.
    let sandbox_tls = if own_server {
        Some(root.join("target/bench-mariadb/tls"))
    } else {
        std::env::var_os("RINGGATE_TEST_MYSQL_TLS_DIR").map(PathBuf::from)
    }
    .filter(|d| d.join("enabled").exists());
    let (cert, key) = cert_files(root, sandbox_tls.as_deref());
    // Session pooling, as the recorded TLS figures were measured (transaction is the default).
    let extra = [
        "--pooling".to_string(),
        "session".to_string(),
        "--tls-cert".to_string(),
        cert.display().to_string(),
        "--tls-key".to_string(),
        key.display().to_string(),
    ];
    let rg = start_ringgate(ctx, "tls", base + 8, base + 18, &extra)?;
    let mut targets = vec![TlsTarget {
        name: "ringgate".into(),
        port: rg.ep.port,
        user: rg.ep.user.clone(),
        password: rg.ep.password.clone(),
        db: rg.ep.db.clone(),
        proxy_pid: rg.pid,
    }];
    let mut notes = vec![format!(
        "ringgate: fixed mode, --workers 2, TLS certificate {} (MariaDB's own when the sandbox \
         has TLS, else the test certificate); the client verifies no certificate",
        cert.display()
    )];
    if sandbox_tls.is_some() {
        targets.push(TlsTarget {
            name: "direct".into(),
            port: backend.port,
            user: backend.user.clone(),
            password: backend.password.clone(),
            db: BENCH_DB.into(),
            proxy_pid: None,
        });
    } else {
        notes.push("direct: the MariaDB sandbox has no TLS here, so no direct TLS figures".into());
    }
    let spec = TlsSpec {
        connect_concurrency: if smoke { 2 } else { 16 },
        select_concurrency: if smoke { 2 } else { 16 },
        rounds: if smoke { 1 } else { prof.rounds },
        warmup: if smoke {
            Duration::from_millis(200)
        } else {
            prof.warmup
        },
        duration: if smoke {
            Duration::from_millis(300)
        } else {
            prof.duration
        },
        table_size: prof.table_size,
        mariadb_pid: backend.pid,
    };
    let dir = out_dir.to_path_buf();
    let t2 = targets.clone();
    let mut report = tokio::task::spawn_blocking(move || run(&t2, &spec, &dir))
        .await
        .map_err(|e| format!("tls section: {e}"))??;
    report.notes.extend(notes);
    // What ringgate itself counted: the resumed handshakes the client saw
    // must be the server's too; and nothing leaked.
    if let Kind::Ringgate { metrics } = &rg.kind {
        let deadline = Instant::now() + Duration::from_secs(10);
        let (m, problems) = loop {
            let m = procs::parse_prometheus(&procs::http_get(*metrics, "/metrics")?);
            // The TLS target runs without --hold-idle-slots.
            let problems = checks::leak_problems(&m, false);
            if problems.is_empty() || Instant::now() > deadline {
                break (m, problems);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let get = |k: &str| m.get(k).copied().unwrap_or(f64::NAN);
        report.notes.push(format!(
            "ringgate counted {} full and {} resumed TLS handshakes (warm-ups included), {} TLS errors",
            get("ringgate_client_tls_handshakes_total{kind=\"full\"}"),
            get("ringgate_client_tls_handshakes_total{kind=\"resumed\"}"),
            get("ringgate_client_tls_errors_total"),
        ));
        for p in problems {
            report
                .notes
                .push(format!("LEAK ringgate (tls) after the run: {p}"));
            report.leaks.push(p);
        }
    }
    std::fs::write(
        out_dir.join("tls.json"),
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(out_dir.join("tls.md"), report.table()).map_err(|e| e.to_string())?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_scramble_matches_the_protocol_example() {
        // An empty password sends an empty response.
        assert!(native_scramble("", &[1; 20]).is_empty());
        // SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw))): XOR with SHA1(pw)
        // again gives SHA1(scramble + SHA1(SHA1(pw))).
        let s = [7u8; 20];
        let r = native_scramble("pw", &s);
        let h1 = Sha1::digest(b"pw");
        let mut h = Sha1::new();
        h.update(s);
        h.update(Sha1::digest(h1));
        let back: Vec<u8> = r.iter().zip(h1.iter()).map(|(a, b)| a ^ b).collect();
        assert_eq!(back, h.finalize().to_vec());
    }

    #[test]
    fn greeting_scramble_takes_both_parts() {
        let mut g = vec![10];
        g.extend_from_slice(b"10.11.0-MariaDB\0");
        g.extend_from_slice(&[1, 0, 0, 0]);
        g.extend_from_slice(b"abcdefgh");
        g.push(0);
        g.extend_from_slice(&[0xff, 0xf7, 45, 2, 0, 0xff, 0x81, 21]);
        g.extend_from_slice(&[0; 10]);
        g.extend_from_slice(b"ijklmnopqrst\0");
        g.extend_from_slice(b"mysql_native_password\0");
        assert_eq!(greeting_scramble(&g).unwrap(), b"abcdefghijklmnopqrst");
        assert!(greeting_scramble(&[0xff, 0x10, 0x04, b'#']).is_err());
    }

    #[test]
    fn tls_is_a_scenario_of_its_own() {
        assert_eq!(split_scenarios(None), (true, None));
        assert_eq!(
            split_scenarios(Some("connect,tls")),
            (true, Some("connect".into()))
        );
        assert_eq!(split_scenarios(Some("tls")), (true, Some("".into())));
        assert_eq!(
            split_scenarios(Some("connect,point-select")),
            (false, Some("connect,point-select".into()))
        );
    }
}

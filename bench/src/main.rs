//! ringgate-bench: `make bench`.
//!
//!   ringgate-bench run   [options]   the whole benchmark: MariaDB sandbox, HAProxy, ringgate
//!                                    fixed + busy (fixed with --busy-poll-us) + tx (fixed with
//!                                    --pooling transaction) + ring + heap, direct;
//!                                    scenarios in interleaved rounds; sysbench; then the
//!                                    transaction-pooling scenarios (scenarios/) with their
//!                                    own ringgates; the cluster scenario with its own
//!                                    replication set; results under bench/results/<timestamp>/
//!   ringgate-bench smoke [options]   the same with the smoke profile (a few seconds per
//!                                    scenario, fixed + direct), reusing a running sandbox
//!                                    when RINGGATE_TEST_MYSQL_PORT etc. are set
//!   ringgate-bench load  [options]   one scenario against one endpoint (no set-up)
//!
//! Options (each also as an environment variable):
//!   --profile quick|full|smoke       BENCH_PROFILE      (default quick)
//!   --targets fixed,busy,hold,tx,plainfd,ring,heap,direct,haproxy   BENCH_TARGETS (hold = fixed
//!                   with --hold-idle-slots, not in the default set; tx = fixed with --pooling
//!                   transaction; plainfd = fixed with --direct-descriptors off, not in the
//!                   default set: the A/B of direct descriptors)
//!   --select-concurrency 1,32  point-select concurrencies   BENCH_SELECT_CONC
//!   --large-cells 1048576:1,1048576:8  large-result cells, ROW_BYTES:CONCURRENCY   BENCH_LARGE_CELLS
//!   --ringgate-args "FLAGS"  extra flags for every ringgate target   BENCH_RINGGATE_ARGS
//!   --busy-poll-us N  the busy target's --busy-poll-us   BENCH_BUSY_POLL_US (default 100)
//!   --scenarios connect,point-select,large-result,tls,many-clients,idle-10k,idle-max,cluster
//!                   BENCH_SCENARIOS (tls: scenarios/tls/; default: all but idle-max, which the
//!                   full profile adds; knobs of many-clients and idle-*: see scenarios/mod.rs;
//!                   cluster: scenarios/cluster/, not in the smoke profile unless named). A
//!                   list of only tls, cluster, many-clients, idle-* starts no target of the
//!                   rounds and runs sysbench only with --sysbench on
//!   --rate N        open loop, N operations/s per cell, coordinated-omission corrected  BENCH_RATE
//!   --rounds N      BENCH_ROUNDS        --duration SECS  BENCH_DURATION (per round)
//!   --warmup SECS   BENCH_WARMUP        --sysbench on|off BENCH_SYSBENCH
//!   --out DIR       BENCH_OUT           (default bench/results/<timestamp>)
//!   --ringgate-bin PATH  RINGGATE_BIN   (default target/release/ringgate)
//!   --baseline-bin PATH  BENCH_BASELINE_BIN  (default none: an A/B of two builds; every
//!                   ringgate target also runs as `<target>@base` with this binary and the
//!                   same flags, right after it in the same rounds; its ports are its
//!                   target's +40, so +41..+47, metrics +51..+57)
//!   --mysql-port N  BENCH_MYSQL_PORT    (default 3408; sandbox in target/bench-mariadb)
//!   --base-port N   BENCH_BASE_PORT     (default 16400: haproxy +0, fixed +1, heap +2, ring +3,
//!                                       busy +4, hold +5, tx +6, plainfd +7, metrics +11..+17;
//!                                       the transaction-pooling scenarios' ringgates +20..+25,
//!                                       metrics +30..+35; TLS's +8, metrics +18; the
//!                                       cluster's +60..+62, metrics +70..+72)
//!   (environment only) BENCH_CLUSTER_PORT: the cluster scenario's nodes on N..N+2 (3461)
//! load: --host H --port P --user U --password PW --db D --scenario S --concurrency N
//!       [--row-bytes N] [--table-size N] [--duration S] [--warmup S] [--rate N]

mod args;
mod checks;
mod hist;
mod load;
mod measure;
mod model;
mod procs;
use testkit::rawclient;
mod report;
mod run;
mod scenarios;
mod schedule;
mod setup;
mod single_load;
mod sysbench_output;
mod sysctl;

use args::Args;
use run::run_bench;
use single_load::run_load;

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match argv.split_first() {
        Some((c, r)) => (c.as_str(), r.to_vec()),
        None => ("run", Vec::new()),
    };
    if matches!(cmd, "-h" | "--help" | "help") {
        println!(
            "{}",
            include_str!("main.rs")
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .map(|l| l.trim_start_matches("//!").strip_prefix(' ').unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n")
        );
        return;
    }
    let args = match Args::parse(&rest) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ringgate-bench: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cmd = cmd.to_string();
    let rc = rt.block_on(async move {
        let work = tokio::spawn(async move {
            match cmd.as_str() {
                "run" => run_bench(args, "quick").await,
                "smoke" => run_bench(args, "smoke").await,
                "load" => run_load(args).await,
                other => Err(format!("unknown command {other:?} (run, smoke, load, help)")),
            }
        });
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).expect("SIGHUP handler");
        tokio::select! {
            r = work => match r {
                Ok(Ok(())) => 0,
                Ok(Err(e)) => { eprintln!("ringgate-bench: {e}"); 1 }
                Err(e) => { eprintln!("ringgate-bench: {e}"); 1 }
            },
            _ = tokio::signal::ctrl_c() => { eprintln!("\nringgate-bench: interrupted; cleaning up"); 130 }
            _ = term.recv() => { eprintln!("ringgate-bench: SIGTERM; cleaning up"); 143 }
            _ = hup.recv() => { eprintln!("ringgate-bench: SIGHUP; cleaning up"); 129 }
        }
    });
    procs::cleanup_all(false);
    procs::stop_cluster();
    // Don't wait for the (possibly blocked) bench task.
    std::process::exit(rc);
}

#!/usr/bin/env python3
"""Per-query kernel accounting at concurrency 1: ringgate modes beside HAProxy.

One `mariadb` client runs N `SELECT 1` on one connection through each target,
in interleaved rounds. For each target and round it reports, per query:
wall time, the proxy's utime/stime (summed over its threads from
/proc/PID/task/*/stat, clock ticks), voluntary/involuntary context switches,
and, in a second run of the same N queries with `perf stat -p PID` attached
(tracepoint counting; perf sampling gives no samples on the bench machine),
the counts of io_uring, scheduler, IPI and syscall tracepoints.
docs/benchmarks.md, "2026-12-04: where the c=1 kernel time goes", has what it
measured.

usage: scripts/c1-kernel-counts.py RINGGATE_BIN ROUNDS N [target,target,...]
env:   C1_BACKEND (127.0.0.1:3511), C1_USER / C1_PASSWORD (the backend account,
       also written to the proxy's users file), C1_BASE_PORT (3530),
       C1_PERF=0 (skip the perf run), C1_OUT (JSON of all rounds),
       C1_RG_EXTRA (more ringgate flags), C1_HOG=1 (one busy loop runs during
       each round: shows what an idle CPU's wake-up costs on this VM),
       C1_OLD_BIN (a second ringgate binary: each ringgate target also runs
       as old-<target> with it, in the same interleaved rounds)
targets: fixed-sess-w{1,2} fixed-tx-w{1,2} ring-sess-w{1,2} ring-tx-w{1,2}
         heap-sess-w{1,2} haproxy-t{1,2} (nbthread) direct
"""
import atexit
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

BIN, ROUNDS, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
WANT = sys.argv[4].split(",") if len(sys.argv) > 4 else None
BACKEND = os.environ.get("C1_BACKEND", "127.0.0.1:3511")
USER = os.environ.get("C1_USER", "ringgate")
PASSWORD = os.environ.get("C1_PASSWORD", "ringgate-backend")
PERF = os.environ.get("C1_PERF", "1") == "1"
HOG = os.environ.get("C1_HOG", "0") == "1"
EXTRA = os.environ.get("C1_RG_EXTRA", "").split()
CLK = os.sysconf("SC_CLK_TCK")
WORK = tempfile.mkdtemp(prefix="c1-kernel-")
port = int(os.environ.get("C1_BASE_PORT", "3530"))

users = os.path.join(WORK, "users.json")
with open(users, "w") as f:
    json.dump({USER: [{"Password": PASSWORD}]}, f)
for name, n in (("q.sql", N), ("w.sql", 500)):
    with open(os.path.join(WORK, name), "w") as f:
        f.write("SELECT 1;\n" * n)

targets = []  # (name, port, argv, env)


def ringgate(name, workers, mode, pooling, binary=BIN):
    global port
    if binary == BIN and os.environ.get("C1_OLD_BIN"):
        ringgate(f"old-{name}", workers, mode, pooling, os.environ["C1_OLD_BIN"])
    p, port = port, port + 2
    argv = [binary, "--listen", f"127.0.0.1:{p}", "--workers", str(workers),
            "--backend", BACKEND, "--backend-identity", "shared", "--backend-user", USER,
            "--users-file", users, "--read-buffers", mode, "--pooling", pooling,
            "--max-connections", "200", "--backend-max-connections", "100",
            "--metrics-listen", f"127.0.0.1:{p + 1}", "--log-level", "warn", *EXTRA]
    targets.append((name, p, argv, dict(os.environ, RINGGATE_BACKEND_PASSWORD=PASSWORD)))


def haproxy(name, nbthread):
    # As bench/src/main.rs's haproxy_config: mode tcp, no health checks.
    global port
    p, port = port, port + 2
    cfg = os.path.join(WORK, f"{name}.cfg")
    with open(cfg, "w") as f:
        f.write(f"global\n    maxconn 4096\n    nbthread {nbthread}\n\n"
                "defaults\n    mode tcp\n    maxconn 4096\n    timeout connect 5s\n"
                "    timeout client 300s\n    timeout server 300s\n\n"
                f"frontend fe_mysql\n    bind 127.0.0.1:{p}\n    default_backend be_mysql\n\n"
                f"backend be_mysql\n    server mariadb {BACKEND} maxconn 4096\n")
    targets.append((name, p, ["haproxy", "-db", "-f", cfg], None))


for w in (1, 2):
    ringgate(f"fixed-sess-w{w}", w, "fixed", "session")
    ringgate(f"fixed-tx-w{w}", w, "fixed", "transaction")
    ringgate(f"ring-sess-w{w}", w, "ring", "session")
    ringgate(f"ring-tx-w{w}", w, "ring", "transaction")
    ringgate(f"heap-sess-w{w}", w, "heap", "session")
    haproxy(f"haproxy-t{w}", w)
targets.append(("direct", int(BACKEND.rsplit(":", 1)[1]), None, None))
if WANT:
    targets = [t for t in targets
               if t[0] in WANT or (t[0].startswith("old-") and t[0][4:] in WANT)]

procs = {}
atexit.register(lambda: [p.terminate() for p in procs.values()])
for name, p, argv, env in targets:
    if argv:
        log = open(os.path.join(WORK, f"{name}.log"), "w")
        procs[name] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
time.sleep(1.5)


def client(p, script):
    host = BACKEND.rsplit(":", 1)[0]
    t = time.perf_counter()
    with open(os.path.join(WORK, script)) as f:
        subprocess.run(["mariadb", f"-h{host}", f"-P{p}", f"-u{USER}", f"-p{PASSWORD}", "-N", "-B"],
                       stdin=f, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def cpu(pid):
    """utime, stime (ticks), voluntary and involuntary switches over all threads."""
    u = s = vcs = nvcs = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            u += int(st[11])
            s += int(st[12])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vcs += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        nvcs += int(line.split()[1])
        except FileNotFoundError:
            pass
    return u, s, vcs, nvcs


EVENTS = ["io_uring:io_uring_submit_req", "io_uring:io_uring_poll_arm",
          "io_uring:io_uring_task_add", "io_uring:io_uring_local_work_run",
          "io_uring:io_uring_task_work_run", "io_uring:io_uring_req_failed",
          "io_uring:io_uring_complete", "io_uring:io_uring_cqring_wait",
          "io_uring:io_uring_queue_async_work", "sched:sched_switch", "sched:sched_wakeup",
          "sched:sched_waking", "ipi:ipi_send_cpu", "raw_syscalls:sys_enter",
          "syscalls:sys_enter_io_uring_enter", "syscalls:sys_enter_epoll_wait",
          "syscalls:sys_enter_recvfrom", "syscalls:sys_enter_sendto",
          "syscalls:sys_enter_clock_gettime", "task-clock", "cpu-migrations"]

res = {}
for r in range(ROUNDS):
    for name, p, argv, env in targets:
        hog = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if HOG else None
        client(p, "w.sql")
        pid = procs[name].pid if name in procs else None
        d = res.setdefault(name, {"lat_us": [], "utime_us": [], "stime_us": [], "vcs": [], "nvcs": []})
        c0 = cpu(pid) if pid else None
        dt = client(p, "q.sql")
        d["lat_us"].append(dt / N * 1e6)
        if pid:
            c1 = cpu(pid)
            d["utime_us"].append((c1[0] - c0[0]) / CLK * 1e6 / N)
            d["stime_us"].append((c1[1] - c0[1]) / CLK * 1e6 / N)
            d["vcs"].append((c1[2] - c0[2]) / N)
            d["nvcs"].append((c1[3] - c0[3]) / N)
        if pid and PERF:
            out = os.path.join(WORK, f"perf-{name}.txt")
            args = [a for e in EVENTS for a in ("-e", e)]
            perf = subprocess.Popen(["perf", "stat", "-x,", "-o", out, *args, "-p", str(pid)])
            time.sleep(0.3)
            client(p, "q.sql")
            time.sleep(0.05)
            perf.send_signal(signal.SIGINT)
            perf.wait()
            with open(out) as f:
                for line in f:
                    fs = line.strip().split(",")
                    if len(fs) > 3 and fs[0][:1].isdigit():
                        # task-clock is in ms: per query in µs.
                        scale = 1000.0 if fs[2] == "task-clock" else 1.0
                        d.setdefault(fs[2], []).append(float(fs[0]) * scale / N)
        if hog:
            hog.kill()
            hog.wait()

if os.environ.get("C1_OUT"):
    with open(os.environ["C1_OUT"], "w") as f:
        json.dump(res, f, indent=1)
for name, d in res.items():
    print(name)
    for k, v in d.items():
        if v and any(v):
            print(f"   {k:40s} median {statistics.median(v):9.3f}   rounds " + " ".join(f"{x:.2f}" for x in v))

#!/usr/bin/env python3
"""Instructions per query by function, one ringgate under callgrind, c=1.

perf sampling gives no samples on the bench VM, so this counts instead:
ringgate runs under `valgrind --tool=callgrind` (valgrind 3.19 runs its
io_uring calls), one `mariadb` client connection sends SMALL x `SELECT 1`,
another BIG x `SELECT 1`; the counters are zeroed before and dumped after
each (callgrind_control), so (BIG dump - SMALL dump) / (BIG - SMALL) is the
cost of one query with the connect, login and close cancelled out.
docs/benchmarks.md, "2026-12-04: transaction pooling's user time per query",
has what it measured.

usage: scripts/callgrind-per-query.py RINGGATE_BIN POOLING [BIG] [SMALL]
       (a release build with debug symbols: CARGO_PROFILE_RELEASE_DEBUG=true)
env:   CG_BACKEND (127.0.0.1:3512), CG_USER / CG_PASSWORD (the backend
       account, also written to the proxy's users file), CG_PORT (3620),
       CG_RG_EXTRA (more ringgate flags), CG_TOP (30 rows), CG_KEEP (a
       directory to keep the callgrind dumps in), CG_SQL (the statements
       sent in turn, separated by `|`; default `SELECT 1`: transaction
       pooling keeps the last statement lexed, so a text sent again is not
       lexed again, and `SELECT 1|SELECT 2` measures one lexing per query)
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

BIN, POOLING = sys.argv[1], sys.argv[2]
BIG = int(sys.argv[3]) if len(sys.argv) > 3 else 2200
SMALL = int(sys.argv[4]) if len(sys.argv) > 4 else 200
BACKEND = os.environ.get("CG_BACKEND", "127.0.0.1:3512")
USER = os.environ.get("CG_USER", "ringgate")
PASSWORD = os.environ.get("CG_PASSWORD", "ringgate-backend")
PORT = int(os.environ.get("CG_PORT", "3620"))
TOP = int(os.environ.get("CG_TOP", "30"))
EXTRA = os.environ.get("CG_RG_EXTRA", "").split()
SQL = os.environ.get("CG_SQL", "SELECT 1").split("|")
WORK = tempfile.mkdtemp(prefix="cg-per-query-")

users = os.path.join(WORK, "users.json")
with open(users, "w") as f:
    json.dump({USER: [{"Password": PASSWORD}]}, f)

argv = ["valgrind", "--tool=callgrind", "--trace-children=no",
        f"--callgrind-out-file={WORK}/cg.out",
        BIN, "--listen", f"127.0.0.1:{PORT}", "--workers", "1",
        "--backend", BACKEND, "--backend-identity", "shared", "--backend-user", USER,
        "--users-file", users, "--read-buffers", "fixed", "--pooling", POOLING,
        "--log-level", "warn", *EXTRA]
with socket.socket() as probe:  # a client must not reach some other proxy
    if probe.connect_ex(("127.0.0.1", PORT)) == 0:
        sys.exit(f"port {PORT} is taken: set CG_PORT")
log = open(os.path.join(WORK, "valgrind.log"), "w")
proc = subprocess.Popen(argv, env=dict(os.environ, RINGGATE_BACKEND_PASSWORD=PASSWORD),
                        stdout=log, stderr=subprocess.STDOUT)


def client(n):
    host = BACKEND.rsplit(":", 1)[0]
    subprocess.run(["mariadb", f"-h{host}", f"-P{PORT}", f"-u{USER}", f"-p{PASSWORD}", "-N", "-B"],
                   input="".join(f"{SQL[i % len(SQL)]};\n" for i in range(n)), text=True,
                   stdout=subprocess.DEVNULL, check=True)


def control(flag):
    subprocess.run(["callgrind_control", flag, str(proc.pid)], stdout=subprocess.DEVNULL,
                   check=True, timeout=120)


try:
    for _ in range(120):  # valgrind starts slowly
        try:
            client(1)
            break
        except subprocess.CalledProcessError:
            time.sleep(1)
    client(200)  # warm up: the pool's backend connection, the allocator
    runs = {}
    for n in (SMALL, BIG):
        control("-z")
        client(n)
        before = set(os.listdir(WORK))
        control("-d")
        [dump] = [d for d in set(os.listdir(WORK)) - before if d.startswith("cg.out")]
        runs[n] = os.path.join(WORK, dump)
finally:
    proc.terminate()
    proc.wait()


def load(path):
    """(total, {function: self Ir}, {function: inclusive Ir}) from a callgrind dump.

    Read directly: callgrind_annotate 3.19 mis-attributes costs in these
    Rust dumps (inlined-file switches), so its self column is unusable.
    Inclusive = self + the costs of the calls made, so a recursive function
    counts its inner calls twice (none on this path)."""
    names, self_ir, incl = {}, {}, {}
    fn, after_calls = None, False

    def name(v):
        m = re.match(r"\((\d+)\)(?: (.*))?$", v)
        if not m:
            return v
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names[m.group(1)]

    total = 0
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("fn="):
                fn = name(line[3:])
            elif line.startswith("cfn="):
                name(line[4:])  # registers the id only
            elif line.startswith("calls="):
                after_calls = True
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                ir = int(parts[1]) if len(parts) > 1 else 0
                if after_calls:
                    incl[fn] = incl.get(fn, 0) + ir
                    after_calls = False
                else:
                    self_ir[fn] = self_ir.get(fn, 0) + ir
                    incl[fn] = incl.get(fn, 0) + ir
                    total += ir
    return total, self_ir, incl


n = BIG - SMALL
t_small, *small = load(runs[SMALL])
t_big, *big = load(runs[BIG])
print(f"{POOLING}: {(t_big - t_small) / n:.0f} instructions per query "
      f"(({t_big:,} - {t_small:,}) / {n})")
for i, kind in enumerate(("self", "inclusive")):
    print(f"--- {kind} instructions per query, top {TOP}")
    b, s = big[i], small[i]
    per = {k: (b.get(k, 0) - s.get(k, 0)) / n for k in set(b) | set(s)}
    for fname, ir in sorted(per.items(), key=lambda kv: -kv[1])[:TOP]:
        print(f"{ir:10.0f}  {fname}")
keep = os.environ.get("CG_KEEP")
if keep:
    os.makedirs(keep, exist_ok=True)
    for n, path in runs.items():
        shutil.copy(path, os.path.join(keep, f"callgrind.{POOLING}.{n}"))
shutil.rmtree(WORK, ignore_errors=True)

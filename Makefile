# ringgate — common tasks. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
# Where cargo puts binaries (respects CARGO_TARGET_DIR).
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

.PHONY: all build test run lint fmt clean deps deps-bench sandbox-start sandbox-stop sandbox-status

all: build

build:
	cargo build

# deps -> cargo build -> MariaDB sandbox -> cargo test -> pytest -> sandbox stop (even on failure)
test:
	scripts/test.sh

# Demo: ringgate (release) on 127.0.0.1:15306 for user demo/demo; Ctrl-C stops everything.
run:
	scripts/run.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	scripts/check-doc-refs.sh

fmt:
	cargo fmt --all

deps:
	scripts/ensure-deps.sh

deps-bench:
	scripts/ensure-deps.sh --bench

sandbox-start:
	scripts/mariadb-sandbox.sh start

sandbox-stop:
	scripts/mariadb-sandbox.sh stop

sandbox-status:
	scripts/mariadb-sandbox.sh status

clean:
	-scripts/mariadb-sandbox.sh stop
	cargo clean
	rm -rf .sandbox
	find tests/python -name __pycache__ -type d -prune -exec rm -rf {} +

# Benchmark: MariaDB sandbox + HAProxy + ringgate fixed/ring/heap + direct, interleaved
# rounds, sysbench; prints a table and writes bench/results/<timestamp>/ (see docs/benchmarks.md).
# BENCH_PROFILE=quick|full, BENCH_TARGETS=fixed,busy,hold,tx,ring,heap,direct,haproxy (tx = fixed with
# --pooling transaction), BENCH_SCENARIOS=connect,point-select,large-result,tls,many-clients,idle-10k,
# idle-max: the last three start their own ringgates (bench/src/scenarios/); idle-max holds ~19,000 idle
# clients for 200 s and runs only when named or with BENCH_PROFILE=full. BENCH_RATE=N (open loop),
# BENCH_SYSBENCH=off. Idle scenarios need fds: the bench raises its soft RLIMIT_NOFILE to the hard one.
.PHONY: bench bench-smoke
bench:
	cargo build --release -p ringgate -p ringgate-bench
	RINGGATE_BIN="$${RINGGATE_BIN:-$(TARGET_DIR)/release/ringgate}" $(TARGET_DIR)/release/ringgate-bench run

# The bench's unit tests and a few-seconds smoke run (fixed + direct, and 200 idle clients through a
# transaction-pooling ringgate; debug builds). Reuses the
# MariaDB from RINGGATE_TEST_MYSQL_* (scripts/mariadb-sandbox.sh env) when set, else starts one.
bench-smoke:
	cargo test -p ringgate-bench
	cargo build -p ringgate -p ringgate-bench
	RINGGATE_BIN="$${RINGGATE_BIN:-$(TARGET_DIR)/debug/ringgate}" $(TARGET_DIR)/debug/ringgate-bench smoke

# Drivers' own test suites (PyMySQL 0.10.1, mysql2 1.0.0-rc.9, mysql-connector-python 9.7.0),
# each run directly against the sandbox MariaDB and through ringgate; fails when a test passes direct and fails through ringgate,
# or when a suite cannot be fetched (pip/npm, cached in .cache/drivers). About 5 minutes, so not
# part of `make test`. DRIVERS=pymysql,mysql2,connector picks suites. See docs/operations.md.
.PHONY: drivers
drivers:
	cargo build
	scripts/drivers.sh

# The whole suite with the Python tests under --pooling transaction (RINGGATE_TEST_POOLING, the
# default now, so that only tests that chose session stay there) and the prepared-statement bound
# checked after 10,000 distinct prepares (make test runs 2,000). About 20 minutes, so
# not part of make test; run it before changing pooling code.
.PHONY: test-transaction test-session
test-transaction:
	RINGGATE_TEST_POOLING=transaction RINGGATE_TEST_PREPARES=10000 scripts/test.sh

# The whole suite with the Python tests under --pooling session (RINGGATE_TEST_POOLING): make test
# runs them under the default, transaction pooling, so this is session pooling's run. ~20 minutes.
test-session:
	RINGGATE_TEST_POOLING=session scripts/test.sh

# The cluster tests (tests/python/test_cluster_*.py) against a private three-node replication set
# (scripts/mariadb-cluster.sh: a primary and two GTID replicas on RINGGATE_CLUSTER_PORT, default
# 3451-3453), started and stopped by scripts/test-cluster.sh. About two minutes; CI (.ci/run) runs
# it after make test, which stays within its budget without it. See docs/design/replication-harness.md.
.PHONY: test-cluster
test-cluster:
	scripts/test-cluster.sh

.PHONY: fuzz chaos mem

# Fuzz each cargo-fuzz target for FUZZ_SECONDS (default 60) from the committed seeds
# (fuzz/seeds/, built by scripts/fuzz-seeds.py). Needs `cargo install cargo-fuzz`; runs on the
# stable toolchain with RUSTC_BOOTSTRAP=1. Prints executions per target; fails on any crash.
fuzz:
	scripts/fuzz.sh

# The full 60 s chaos test (tests/faults_under_load.rs) against a private MariaDB it starts and restarts.
# CHAOS_SECONDS / CHAOS_MODE=heap override. Needs the sandbox env (as make test sets it).
chaos:
	scripts/reliability.sh chaos

# Memory per connection: 2,000 idle sessions, RSS before/after (tests/memory.rs, ignored by
# default; MEM_SESSIONS overrides the count), then 10,000 idle clients that must hold no read
# buffer (tests/idle.rs; make test runs it with 1,000; IDLE_CLIENTS overrides).
mem:
	scripts/reliability.sh mem

# ringgate — common tasks. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash

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
	cargo clippy --all-targets -- -D warnings

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

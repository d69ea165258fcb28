#!/usr/bin/env bash
# Installs what ringgate's tests (and, with --bench, the benchmark) need, and only what is missing.
# Idempotent: a second run installs nothing and prints nothing but the final line.
#
#   scripts/ensure-deps.sh           # mariadb-server, mariadb-client, util-linux tools, nodejs, npm,
#                                    # PyMySQL, pytest, mysql-connector-python, node mysql2
#                                    # (tests/node), rustfmt + clippy (rustup components)
#   scripts/ensure-deps.sh --bench   # ... plus haproxy and sysbench (openssl is in the base list)
set -euo pipefail

BENCH=0
for arg in "$@"; do
    case "$arg" in
    --bench) BENCH=1 ;;
    -h | --help)
        sed -n '2,8p' "$0"
        exit 0
        ;;
    *)
        echo "ensure-deps: unknown argument: $arg" >&2
        exit 2
        ;;
    esac
done

export PATH="$PATH:/usr/sbin:/sbin:/usr/local/sbin"

have() { command -v "$1" >/dev/null 2>&1; }

# "package:command [command...]" — the package is missing when any of its commands is.
CHECKS=(
    "mariadb-server:mariadbd mariadb-install-db"
    "mariadb-client:mariadb mariadb-admin"
    "util-linux:setpriv prlimit setsid"
    "procps:ps"
    # node mysql2 (tests/node) and the driver suites of `make drivers` (scripts/drivers.sh).
    "nodejs:node"
    "npm:npm"
    # Certificates for the TLS tests and the bench's TLS section (mariadb-sandbox.sh, test_tls.py).
    "openssl:openssl"
)
if [ "$BENCH" = 1 ]; then
    CHECKS+=("haproxy:haproxy" "sysbench:sysbench")
fi

MISSING=()
for entry in "${CHECKS[@]}"; do
    pkg="${entry%%:*}"
    cmds="${entry#*:}"
    for c in $cmds; do
        if ! have "$c"; then
            MISSING+=("$pkg")
            break
        fi
    done
done

if [ "${#MISSING[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "ensure-deps: missing Debian package(s): ${MISSING[*]}; run this script as root or: sudo apt-get install -y ${MISSING[*]}" >&2
        exit 1
    fi
    if ! have apt-get; then
        echo "ensure-deps: missing package(s) ${MISSING[*]} and no apt-get on this machine; install them by hand" >&2
        exit 1
    fi
    echo "ensure-deps: apt-get update"
    apt-get update -qq >/dev/null
    for pkg in "${MISSING[@]}"; do
        echo "ensure-deps: installing $pkg"
    done
    # policy-rc.d may refuse to start the packaged service; that is fine, we run our own.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${MISSING[@]}" >/dev/null
    for entry in "${CHECKS[@]}"; do
        for c in ${entry#*:}; do
            if ! have "$c"; then
                echo "ensure-deps: $c still missing after installing ${entry%%:*}" >&2
                exit 1
            fi
        done
    done
fi

PYTHON="${PYTHON:-python3}"
if ! have "$PYTHON"; then
    echo "ensure-deps: $PYTHON not found (the tests need a python3 with pip)" >&2
    exit 1
fi
# cryptography: PyMySQL's RSA step of caching_sha2_password full authentication.
if ! "$PYTHON" -c 'import pymysql, pytest, mysql.connector, cryptography' >/dev/null 2>&1; then
    PY_MISSING=()
    "$PYTHON" -c 'import pymysql' >/dev/null 2>&1 || PY_MISSING+=("PyMySQL")
    "$PYTHON" -c 'import cryptography' >/dev/null 2>&1 || PY_MISSING+=("cryptography")
    "$PYTHON" -c 'import pytest' >/dev/null 2>&1 || PY_MISSING+=("pytest")
    "$PYTHON" -c 'import mysql.connector' >/dev/null 2>&1 || PY_MISSING+=("mysql-connector-python")
    for p in "${PY_MISSING[@]}"; do
        echo "ensure-deps: installing python package $p"
    done
    PIP_ARGS=(-q)
    if [ "$(id -u)" = 0 ]; then PIP_ARGS+=(--root-user-action=ignore); fi
    if ! "$PYTHON" -m pip install "${PIP_ARGS[@]}" "${PY_MISSING[@]}"; then
        echo "ensure-deps: pip install of ${PY_MISSING[*]} failed (as $(id -un)); install them for $PYTHON by hand" >&2
        exit 1
    fi
    # pyenv shims need a rehash to see new console scripts; harmless elsewhere.
    if have pyenv; then pyenv rehash >/dev/null 2>&1 || true; fi
fi

# node mysql2 for the node scenarios under tests/node (run by tests/python): installed from
# tests/node/package-lock.json when node and npm are there; without node those tests skip.
NODE_DIR="$(cd "$(dirname "$0")/.." && pwd)/tests/node"
if [ -f "$NODE_DIR/package.json" ] && [ ! -d "$NODE_DIR/node_modules/mysql2" ]; then
    if have node && have npm; then
        echo "ensure-deps: npm ci in tests/node (mysql2)"
        if ! npm ci --prefix "$NODE_DIR" --no-audit --no-fund >/dev/null; then
            echo "ensure-deps: npm ci in $NODE_DIR failed; the node mysql2 tests will be skipped" >&2
        fi
    else
        echo "ensure-deps: node/npm not found; the node mysql2 tests will be skipped"
    fi
fi

# rustfmt and clippy: `make test` lints with them and must never skip that step. They are
# rustup components of the active toolchain; add them when missing, and fail when that is not
# possible (no rustup, or no way to fetch components) rather than let the lint be skipped.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if ! have rustup; then
        echo "ensure-deps: rustfmt/clippy are missing and there is no rustup to add them; install them with the toolchain" >&2
        exit 1
    fi
    echo "ensure-deps: rustup component add rustfmt clippy"
    if ! rustup component add rustfmt clippy; then
        echo "ensure-deps: rustup component add rustfmt clippy failed; make test needs both for its lint step" >&2
        exit 1
    fi
    if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
        echo "ensure-deps: cargo fmt / cargo clippy still missing after rustup component add" >&2
        exit 1
    fi
fi

echo "ensure-deps: ok"

# shellcheck shell=bash
# Sourced by scripts/mariadb-sandbox.sh and scripts/mariadb-cluster.sh: where the MariaDB
# binaries are. Sets MARIADBD, INSTALL_DB, ADMIN and CLIENT, or exits naming the fix.

# sbin is not on every PATH (non-login shells, non-root users).
export PATH="$PATH:/usr/sbin:/sbin:/usr/local/sbin"

find_bin() {
    local b
    for b in "$@"; do
        if command -v "$b" >/dev/null 2>&1; then
            command -v "$b"
            return 0
        fi
    done
    echo "$(basename "$0" .sh): none of [$*] found; run scripts/ensure-deps.sh (as root) first" >&2
    exit 1
}

MARIADBD="$(find_bin mariadbd mysqld)"
INSTALL_DB="$(find_bin mariadb-install-db mysql_install_db)"
ADMIN="$(find_bin mariadb-admin mysqladmin)"
CLIENT="$(find_bin mariadb mysql)"

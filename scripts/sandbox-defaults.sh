# Sourced by the scripts that use the private MariaDB: one place for where it
# lives and which port it takes. RINGGATE_SANDBOX_DIR / RINGGATE_SANDBOX_PORT
# override both. Expects REPO_ROOT to be set.
SANDBOX="$REPO_ROOT/scripts/mariadb-sandbox.sh"
SANDBOX_DIR="${RINGGATE_SANDBOX_DIR:-$REPO_ROOT/.sandbox/mariadb}"
SANDBOX_PORT="${RINGGATE_SANDBOX_PORT:-3407}"

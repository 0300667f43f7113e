#!/usr/bin/env bash
# Runs the whole lockguard test suite. Works on a fresh Debian machine as
# root: installs redis-server, PostgreSQL, ZooKeeper, MariaDB (and openssl) with
# apt-get when missing, then builds and runs every test, doctest and example.
set -euo pipefail
cd "$(dirname "$0")/.."

# The servers and tools the tests need, installed when missing; `pg_bin`.
source scripts/setup.sh

# A build of every feature with its tests takes about 3 GB; say so up front
# rather than fail at link time. A one-off build (CI's fresh clone) keeps no
# incremental caches.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kb:-0}" -lt 4000000 ]; then
  echo "warning: only $((free_kb / 1024)) MB free where the build goes; it needs about 3 GB" >&2
fi
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

# Unit, integration and doc tests of every crate, against real redis-server
# processes the tests start and stop themselves.
log=$(mktemp)
cargo test --workspace --all-features -- --skip postgres --skip zookeeper --skip mysql --skip history_checker_ 2>&1 | tee "$log"
# The PostgreSQL, ZooKeeper and MySQL (MariaDB) tests in passes of their own: their servers
# would otherwise share the two cores of a small machine with the Redlock
# tests, whose nodes must answer within a per-node timeout.
cargo test --workspace --all-features postgres 2>&1 | tee -a "$log"
cargo test --workspace --all-features zookeeper 2>&1 | tee -a "$log"
cargo test --workspace --all-features mysql 2>&1 | tee -a "$log"
# The store crates' doctests: the first pass skips them (their paths,
# lockguard-postgres/..., match its --skip filters) and the name-filtered
# passes run no doctests.
cargo test --workspace --all-features --doc -- postgres zookeeper mysql 2>&1 | tee -a "$log"
# With every feature on, rustls serves rediss://; the TLS tests again on the
# platform's TLS library.
cargo test -p lockguard-redis --features tls-native-tls,sentinel --test faults tls 2>&1 | tee -a "$log"
# The history checker (lockguard-chaos/tests/chaos.rs): worker processes on
# every store (Redis, Redlock, PostgreSQL, MySQL, ZooKeeper, Sentinel,
# Cluster) under random faults, their histories checked; then the
# self-test, which breaks the locking on purpose and passes only if the
# checker catches it on every store. Its binary comes with the first
# build; about 80 s and 35 s on two cores. A failure prints the check, the
# operations and the seed to replay with `--seed`.
cargo test --workspace --all-features history_checker_ -- --nocapture --test-threads 1 2>&1 | tee -a "$log"
summary=$(awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed", p, f }' "$log")
rm -f "$log"

# The README's first command (and the locks example), on the in-memory
# store and on a real Redis. flash_sale exits non-zero when a check fails.
# The examples run from the test build (every feature on), so nothing is
# compiled again; .ci/run checks that they build with the default features,
# as the README runs them.
example() { cargo run --quiet --all-features --example "$@"; }
example flash_sale
example locks
example macros
dir=$(mktemp -d)
redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" --appendonly no \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
trap 'kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done
LOCKGUARD_URL="redis+unix://$dir/redis.sock" example flash_sale
LOCKGUARD_URL="redis+unix://$dir/redis.sock" example locks
# REDIS_URL, read when LOCKGUARD_URL is unset.
REDIS_URL="redis+unix://$dir/redis.sock" example macros

# flash_sale on a PostgreSQL started here (as the postgres user when root:
# PostgreSQL refuses to run as root), on a unix socket.
pgdir=$(mktemp -d)
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$pgdir"
  as_pg=(runuser -u postgres --)
fi
trap 'kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null || true; "${as_pg[@]}" "$(pg_bin)/pg_ctl" -D "$pgdir/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$dir" "$pgdir"' EXIT
"${as_pg[@]}" "$(pg_bin)/initdb" -D "$pgdir/data" -U postgres --auth=trust --no-sync -E UTF8 >/dev/null
"${as_pg[@]}" "$(pg_bin)/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w \
  -o "-c listen_addresses='' -k $pgdir -p 5432" start >/dev/null
LOCKGUARD_URL="postgresql://postgres@/postgres?host=$pgdir&port=5432" \
  example flash_sale
# The application's own database, for its own table.
DATABASE_URL="host=$pgdir port=5432 user=postgres dbname=postgres" \
  example postgres_fenced

echo
echo "tests: $summary"

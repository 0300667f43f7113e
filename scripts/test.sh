#!/usr/bin/env bash
# Runs the whole lockguard test suite. Works on a fresh Debian machine as
# root: installs redis-server, PostgreSQL, ZooKeeper, MariaDB, etcd (and openssl,
# protoc) with apt-get when missing, then builds and runs every test, doctest and example.
set -euo pipefail
cd "$(dirname "$0")/.."

# The servers and tools the tests need, installed when missing; `pg_bin`.
source scripts/setup.sh

# A build of every feature with its tests takes about 4 GB (and CI's lints
# and docs beside it 1 GB more); say so up front rather than fail at link
# time. A one-off build (CI's fresh clone) keeps no incremental caches.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kb:-0}" -lt 6000000 ]; then
  echo "warning: only $((free_kb / 1024)) MB free where the build goes; it needs about 5 GB" >&2
fi
# What the script leaves behind goes when it exits, last made first: the
# examples' servers, the jobs beside the tests, the tests' scratch
# directory.
cleanups=()
trap 'for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done' EXIT
# The test servers' data directories (the tests' temporary directories)
# go on a tmpfs when the machine has one with room: every server a test
# starts writes its data directory and logs there (a MariaDB bootstrap
# alone is 114 MB, an etcd or ZooKeeper member preallocates 64 MB of log
# and syncs each write), and on disk those writes queue behind the build
# that runs beside the tests. Processes killed by a test lose nothing on a
# tmpfs; only the machine's power does. Set TMPDIR to choose.
shm_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
if [ -z "${TMPDIR:-}" ] && [ "${shm_kb:-0}" -ge 4000000 ]; then
  TMPDIR=$(mktemp -d /dev/shm/lockguard-tests.XXXXXX)
  # Like /tmp: PostgreSQL's servers run as another user when root.
  chmod 1777 "$TMPDIR"
  export TMPDIR
  cleanups+=("rm -rf '$TMPDIR'")
fi
# CI's build also keeps line tables only, not full debug info (a
# failure's backtrace still names files and lines): 211 s for the first
# build below on two cores, where full debug info took 233 s.
if [ -n "${CI:-}" ]; then
  export CARGO_INCREMENTAL=0
  export CARGO_PROFILE_DEV_DEBUG=line-tables-only
fi

# The conformance suites (each store crate's test targets `conformance`
# and `conformance_*`, the kit run on a variant of the store) run eight
# tests at a time: their tests mostly wait, on leases, queues and
# timeouts (Redis's suite at eight: 44 s where four took 76 s, its
# process busy two thirds of the two cores' time). Every other test, the
# fault tests above all (a failover's, a reconnection's timing), runs two
# at a time. `others` selects every test target but
# those and the macros' `ui` (cargo's --test takes globs; each must match
# a target). `ui` (trybuild) compiles its cases, a minute of CPU that
# waits on nothing, so it runs apart (below).
others=(--lib --bins --test '[!cu]*' --test 'c[!o]*' --test 'con[!f]*')
targets=$(cargo metadata --no-deps --format-version 1 |
  grep -o '"kind":\["test"\][^}]*"name":"[^"]*"' | sed 's/.*"name":"//; s/"$//' | sort -u)
for t in $targets; do
  case $t in
    conformance | conformance_* | [!cu]* | c[!o]* | con[!f]* | ui) ;;
    *) echo "error: test target $t is in no test pass; extend \`others' in $0" >&2; exit 1 ;;
  esac
done
conformance=(--test 'conformance*' -- --test-threads 8)
ui=(--workspace --all-features --test ui)

# The examples, which tests/examples.rs runs (a test build with target
# selection builds none), and every test binary, in one build: one graph
# keeps both cores busy where two builds in a row would wait on each
# other's last crates, and the test passes below find it all built.
cargo build --workspace --all-features --examples --tests

# On CI, what only compiles runs beside the test passes below: the build
# of the TLS tests on the platform's TLS library (features of their own)
# and $TEST_BESIDE (.ci/run's lints and docs), and the macros' UI test
# (trybuild, which compiles its cases in a target directory of its own
# and runs the passing ones on the in-memory store). The test passes
# mostly wait (on leases, timeouts, servers), leaving a core and more
# idle; the fault tests' timings (a ZooKeeper member's reconnection, a
# Sentinel failover) must not lose a core to a build, so these run in the
# idle scheduling class, in an autogroup of their own at nice 19 (the
# kernel weighs autogroups against each other before their tasks) and in
# the idle I/O class: they take only what no test and no server wants.
# The builds have a target directory of their own, so the passes' cargo
# never waits for their lock. They go on through the history checker's
# runs (whose workers, release builds, mostly wait on their stores) and
# are waited for after them: waited for before, they kept the machine to
# themselves for 36-65 s of CI's runs once the passes had ended.
beside_dir="$PWD/target/beside"
beside_pids=()
in_idle() {
  setsid bash -c '
    echo 19 > /proc/self/autogroup 2>/dev/null || true
    exec ionice -c 3 chrt --idle 0 bash -c "$1"' _ "$1"
}
if [ -n "${CI:-}" ]; then
  beside_log=$(mktemp)
  ui_log=$(mktemp)
  cleanups+=('for p in "${beside_pids[@]}"; do kill -- -"$p" 2>/dev/null || true; done')
  CARGO_TARGET_DIR="$beside_dir" in_idle \
    "set -e; cargo test -p lockguard-redis --features tls-native-tls,sentinel --test faults --no-run; ${TEST_BESIDE:-}" \
    > "$beside_log" 2>&1 &
  beside_pids+=($!)
  in_idle "cargo test ${ui[*]}" > "$ui_log" 2>&1 &
  beside_pids+=($!)
fi

# Unit and integration tests of every crate, against real redis-server
# processes the tests start and stop themselves.
log=$(mktemp)
skips=(--skip postgres --skip zookeeper --skip mysql --skip etcd)
cargo test --workspace --all-features "${others[@]}" -- "${skips[@]}" --skip history_checker_ 2>&1 | tee "$log"
cargo test --workspace --all-features "${conformance[@]}" "${skips[@]}" 2>&1 | tee -a "$log"
# The PostgreSQL, ZooKeeper, MySQL (MariaDB) and etcd tests in passes of
# their own: their servers would otherwise share the two cores of a small
# machine with the Redlock tests, whose nodes must answer within a
# per-node timeout. One store at a time: two stores' passes side by side
# (PostgreSQL then ZooKeeper beside MySQL then etcd) took 362-417 s
# where one after another took 493 s, but each pass ran 1.5-2.5 times as
# long as alone, and a MySQL conformance test's request outlasted its
# 300 ms wait under that load.
for store in postgres zookeeper mysql etcd; do
  cargo test --workspace --all-features "${others[@]}" -- "$store" 2>&1 | tee -a "$log"
  cargo test --workspace --all-features "${conformance[@]}" "$store" 2>&1 | tee -a "$log"
done
# Every crate's doctests.
cargo test --workspace --all-features --doc 2>&1 | tee -a "$log"
[ -n "${CI:-}" ] || cargo test "${ui[@]}" 2>&1 | tee -a "$log"
# The history checker (lockguard-chaos/tests/chaos.rs): worker processes on
# every store (Redis, Redlock, PostgreSQL, MySQL, ZooKeeper, etcd, Sentinel,
# Cluster) under random faults, their histories checked, in two runs (the
# Redis stores, the database stores); and the self-test, which breaks the
# locking on purpose and passes only if the checker catches it on every
# store. Its binary comes with the first build. The runs go one at a time,
# nothing beside them but CI's jobs in the idle class, about two minutes
# in all. Side by side (two at a time, 75 s) a store's start in one run (a
# MariaDB server's first start, 8 s under that load) once starved the
# other run's workers for most of a second: a Sentinel watchdog's 600 ms
# lease ran out with no fault in effect, and the Cluster run's first write
# timed out (seed 578267681062005846; alone, the same seed passes). Three
# at a time put two MariaDB servers under load at once and slowed MySQL's
# handoffs fivefold. A failure prints the check, the operations and the
# seed to replay with `--seed`.
cargo test --workspace --all-features history_checker_ -- --nocapture --test-threads 1 2>&1 | tee -a "$log"

# The README's first command (and the locks example), on the in-memory
# store and on a real Redis. flash_sale exits non-zero when a check fails.
# The examples run as the first build made them (every feature on, the
# workspace's features unified): `cargo run` of the facade alone would
# resolve other features and build half the tree again, about 80 s on two
# cores. .ci/run checks that they build with the default features, as the
# README runs them.
target_dir=$(cargo metadata --no-deps --format-version 1 |
  sed 's/.*"target_directory":"\([^"]*\)".*/\1/')
example() { "$target_dir/debug/examples/$1"; }
example flash_sale
example locks
example macros
dir=$(mktemp -d)
redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" --appendonly no \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
cleanups+=('kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"')
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
cleanups+=('"${as_pg[@]}" "$(pg_bin)/pg_ctl" -D "$pgdir/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$pgdir"')
"${as_pg[@]}" "$(pg_bin)/initdb" -D "$pgdir/data" -U postgres --auth=trust --no-sync -E UTF8 >/dev/null
"${as_pg[@]}" "$(pg_bin)/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w \
  -o "-c listen_addresses='' -k $pgdir -p 5432" start >/dev/null
LOCKGUARD_URL="postgresql://postgres@/postgres?host=$pgdir&port=5432" \
  example flash_sale
# The application's own database, for its own table.
DATABASE_URL="host=$pgdir port=5432 user=postgres dbname=postgres" \
  example postgres_fenced

# On CI, what ran beside the tests: its output, and its status.
if [ -n "${CI:-}" ]; then
  statuses=()
  for p in "${beside_pids[@]}"; do
    s=0
    wait "$p" || s=$?
    statuses+=("$s")
  done
  beside_pids=()
  echo "--- beside the tests (lints, docs, builds) ---"
  cat "$beside_log"
  echo "--- beside the tests (the macros' UI test) ---"
  tee -a "$log" < "$ui_log"
  rm -f "$beside_log" "$ui_log"
  if [ "${statuses[0]}" -ne 0 ] || [ "${statuses[1]}" -ne 0 ]; then
    echo "error: what ran beside the tests failed (exit statuses: builds ${statuses[0]}, UI test ${statuses[1]})" >&2
    exit 1
  fi
fi
# With every feature on, rustls serves rediss://; the TLS tests again on the
# platform's TLS library (on CI, built beside the passes above).
tls_target=()
[ -z "${CI:-}" ] || tls_target=(--target-dir "$beside_dir")
cargo test "${tls_target[@]}" -p lockguard-redis --features tls-native-tls,sentinel --test faults tls 2>&1 | tee -a "$log"
summary=$(awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed", p, f }' "$log")
rm -f "$log"

echo
echo "tests: $summary"

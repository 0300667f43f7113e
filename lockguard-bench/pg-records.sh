#!/usr/bin/env bash
# What a lock's record costs PostgreSQL, by kind: `pgbench` cycles/s of the
# native advisory lock pair beside the same pair with a fence and a lease
# recorded in each way lockguard could record them (a row written after the
# grant, a transaction id alone, sequences, a row written before the wait
# and committed after the grant, a stripe of unlogged sequences written
# without a transaction id), and lockguard's own wait and release
# statements (also with 16 and 64 clients on the one lock, the native pair
# and lockguard's). A server of its own (`fsync=off`, as the benchmarks'), on a
# free port, stopped at the end. BENCHMARKS.md ("PostgreSQL locks beside
# `pg_advisory_lock`") has a run's figures.
#
#   bash lockguard-bench/pg-records.sh [SECONDS] [RUNS]     # default 4 2
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-4}
runs=${2:-2}
pg_bin() {
  if command -v initdb >/dev/null 2>&1; then dirname "$(readlink -f "$(command -v initdb)")"; return; fi
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}
bin=$(pg_bin)
[ -x "$bin/initdb" ] || { echo "PostgreSQL's initdb not found: run scripts/setup.sh" >&2; exit 1; }
dir=$(mktemp -d)
# PostgreSQL refuses to run as root: the server runs as `postgres` then.
as=()
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; as=(runuser -u postgres --); fi
port=$(for p in $(shuf -i 20000-60000 -n 50); do (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; break; }; done)
cleanup() { "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
"${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 >/dev/null
"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=100" start >/dev/null
psql=(psql -q -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres postgres)

# lockguard's schema, as `lg`, and what the variants write.
sed 's/__SCHEMA__/lg/g; s/__VERSION__/0/g' lockguard-postgres/src/schema.sql | "${psql[@]}" >/dev/null
"${psql[@]}" <<'SQL' >/dev/null
CREATE UNLOGGED TABLE lg.bench_sessions (id int PRIMARY KEY, token text, expires_at timestamptz);
INSERT INTO lg.bench_sessions SELECT g, NULL, NULL FROM generate_series(0, 64) g;
CREATE SEQUENCE lg.bench_fences;
CREATE UNLOGGED TABLE lg.bench_holds (k text, token text, lease_ms bigint);
CREATE INDEX ON lg.bench_holds (k);
CREATE UNLOGGED TABLE lg.bench_holders (id int PRIMARY KEY, k text, token text, lease_ms bigint, held boolean);
CREATE INDEX ON lg.bench_holders (k);
INSERT INTO lg.bench_holders SELECT g, NULL, NULL, NULL, false FROM generate_series(0, 64) g;
SELECT format('CREATE UNLOGGED SEQUENCE lg.bench_lease_%s', g) FROM generate_series(0, 64) g \gexec
CREATE UNLOGGED SEQUENCE lg.bench_fence_clock;
SELECT setval('lg.bench_fence_clock', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
CREATE UNLOGGED TABLE lg.bench_keys (hi int, lo int, expires_at timestamptz, PRIMARY KEY (hi, lo));
INSERT INTO lg.bench_keys SELECT 7, g, NULL FROM generate_series(0, 64) g;
INSERT INTO lg.bench_keys VALUES (1, 1, NULL);
SELECT acquired FROM lg.lock_take('k', 'first', 1);
SQL

# lockguard's own statements, with pgbench's variables for $1..$3 and a
# token per client.
statement() {
  sed "/__DRAW__/{
r lockguard-postgres/src/locks/draw.sql
d
}" "lockguard-postgres/src/locks/$1.sql" | sed 's/__SCHEMA__/lg/g' | grep -v '^ *--' | tr '\n' ' ' |
    sed "s/\\\$1/:key/g; s/\\\$2::text/('t' || :client_id)::text/g; s/\\\$3/:lease/g; s/  */ /g"
  echo ';'
}
s="$dir/scripts"
mkdir "$s"
{ statement wait; statement release; } > "$s/lockguard"
lock='SELECT pg_advisory_lock(1, 1)'
unlock='SELECT pg_advisory_unlock(1, 1);'
after() { echo "WITH g AS MATERIALIZED ($lock AS ok, clock_timestamp() AS t) SELECT g.ok, $1 FROM g;"; echo "$unlock"; }
{ echo "$lock;"; echo "$unlock"; } > "$s/native"
after "nextval('lg.bench_fences')" > "$s/nextval"
after "setval('lg.bench_lease_0', (extract(epoch FROM g.t) * 1000)::bigint)" > "$s/setval"
after "txid_current()" > "$s/txid"
{
  echo "WITH g AS MATERIALIZED ($lock AS ok, clock_timestamp() AS t), u AS (UPDATE lg.bench_sessions s SET token = 'x', expires_at = g.t + interval '30 s' FROM g WHERE s.id = :client_id RETURNING 1) SELECT g.ok, (SELECT count(*) FROM u) FROM g;"
  echo "$unlock"
} > "$s/update"
{
  echo '\startpipeline'
  echo 'BEGIN;'
  echo "UPDATE lg.bench_sessions s SET token = 'x', expires_at = clock_timestamp() + interval '30 s' WHERE s.id = :client_id;"
  echo "$lock, nextval('lg.bench_fences');"
  echo 'COMMIT;'
  echo '\endpipeline'
  echo "$unlock"
} > "$s/update-before"
# A row per hold, inserted before the wait in a transaction committed after
# the grant (a waiter that dies waiting leaves nothing), the key's other
# rows read after the grant with a lock (so the read waits for a release
# still committing; a row left there is a holder cut off, whose lease the
# new holder would wait out), and the release deleting its row in the
# statement that unlocks.
holds_release="WITH d AS (DELETE FROM lg.bench_holds WHERE k = :key::text AND token = ('t' || :client_id) RETURNING 1) SELECT pg_advisory_unlock(1, 1) FROM (SELECT count(*) FROM d) c;"
{
  echo '\startpipeline'
  echo 'BEGIN;'
  echo "INSERT INTO lg.bench_holds VALUES (:key::text, 't' || :client_id, :lease);"
  echo "$lock, nextval('lg.bench_fences');"
  echo "SELECT count(*) FROM (SELECT 1 FROM lg.bench_holds WHERE k = :key::text AND token <> ('t' || :client_id) FOR SHARE) h;"
  echo 'COMMIT;'
  echo '\endpipeline'
  echo "$holds_release"
} > "$s/insert-before"
# The same with a row per client session (updated in place, never
# inserted; the key indexed, so a session taking the same key again updates
# it as a heap-only tuple): the session's row names the key and is marked
# held before the wait, in a transaction committed after the grant; the key's
# held rows are read after the grant, without a lock (a locking read waits
# for the waiters' own rows, which deadlocks); the release unmarks its row,
# committed before the unlock (a statement of its own: a release that wrote
# in the unlocking statement would be read as still held).
{
  echo '\startpipeline'
  echo 'BEGIN;'
  echo "UPDATE lg.bench_holders SET k = :key::text, token = 't' || :client_id, lease_ms = :lease, held = true WHERE id = :client_id;"
  echo "$lock, nextval('lg.bench_fences');"
  echo "SELECT count(*) FROM lg.bench_holders WHERE k = :key::text AND held AND id <> :client_id;"
  echo 'COMMIT;'
  echo '\endpipeline'
  echo "UPDATE lg.bench_holders SET held = false WHERE id = :client_id;"
  echo "$unlock"
} > "$s/session-rows"
# Uncontended: a key per client.
{ echo 'SELECT pg_try_advisory_lock(7, :client_id);'; echo 'SELECT pg_advisory_unlock(7, :client_id);'; } > "$s/u-native"
{
  echo "SELECT pg_try_advisory_lock(7, :client_id), nextval('lg.bench_fences'), setval(('lg.bench_lease_' || :client_id)::regclass, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 30000);"
  echo "SELECT setval(('lg.bench_lease_' || :client_id)::regclass, 1), pg_advisory_unlock(7, :client_id);"
} > "$s/u-sequences"
{
  echo "WITH g AS MATERIALIZED (SELECT pg_try_advisory_lock(7, :client_id) AS ok, clock_timestamp() AS t), u AS (UPDATE lg.bench_sessions s SET token = 'x', expires_at = g.t + interval '30 s' FROM g WHERE s.id = :client_id RETURNING 1) SELECT g.ok, (SELECT count(*) FROM u) FROM g;"
  echo 'SELECT pg_advisory_unlock(7, :client_id);'
} > "$s/u-update"

# Stripes: a record in one of a fixed set of unlogged sequences (a stripe
# the key hashes to), written without a transaction id, under a
# transaction-level advisory lock of the stripe (a compare-and-set among
# the stripe's keys); the fence from one unlogged sequence for every key
# (above the clock when the schema starts, rebased after a crash); the
# key's row only read (where a stripe's collision would record instead).
# One flat statement each way, in CASE order; the stripe named by its OID
# (the bench_lease_ sequences, created in a row).
sbase=$("${psql[@]}" -tA -c "SELECT 'lg.bench_lease_0'::regclass::oid::bigint")
last=$("${psql[@]}" -tA -c "SELECT 'lg.bench_lease_64'::regclass::oid::bigint")
[ "$((last - sbase))" = 64 ] || { echo "the stripes' OIDs are not in a row ($sbase..$last)" >&2; exit 1; }
stripe_draw() { # $1: the lock call, $2: the stripe's lock key, $3: the stripe's OID, $4 $5: the key's halves
  echo "SELECT CASE WHEN $1::text IS NOT NULL AND pg_advisory_xact_lock(2, $2)::text IS NOT NULL THEN ARRAY[pg_sequence_last_value(($3)::oid::regclass), nextval('lg.bench_fence_clock'), setval(($3)::oid::regclass, ((extract(epoch FROM clock_timestamp()) * 1000)::bigint + :lease) * 2097152 + 12345), (SELECT count(*) FROM lg.bench_keys f WHERE f.hi = $4 AND f.lo = $5 AND f.expires_at > clock_timestamp())] END, set_config('application_name', 'lg t' || :client_id, false);"
}
stripe_release() { # $1: the stripe's lock key, $2: the stripe's OID, $3: the unlock call
  echo "SELECT CASE WHEN pg_advisory_xact_lock(2, $1)::text IS NOT NULL AND setval(($2)::oid::regclass, 1) IS NOT NULL THEN $3 END, set_config('application_name', 'lockguard', false);"
}
{
  stripe_draw 'pg_advisory_lock(1, 1)' 17 "$sbase + 17" 1 1
  stripe_release 17 "$sbase + 17" 'pg_advisory_unlock(1, 1)'
} > "$s/stripes"
{
  stripe_draw 'pg_try_advisory_lock(7, :client_id)' ':client_id' "$sbase + :client_id" 7 ':client_id'
  stripe_release ':client_id' "$sbase + :client_id" 'pg_advisory_unlock(7, :client_id)'
} > "$s/u-stripes"
# u-stripes a step at a time: the try and the fence; with the stripe's
# write (and the release's); with its lock; with the key's row read.
T='SELECT CASE WHEN pg_try_advisory_lock(7, :client_id)::text IS NOT NULL'
ST="($sbase + :client_id)::oid::regclass"
W="setval($ST, ((extract(epoch FROM clock_timestamp()) * 1000)::bigint + :lease) * 2097152 + 12345)"
U='pg_advisory_unlock(7, :client_id)'
{ echo "$T THEN nextval('lg.bench_fence_clock') END;"; echo "SELECT $U;"; } > "$s/u-stripes-fence"
{ echo "$T THEN ARRAY[nextval('lg.bench_fence_clock'), $W] END;"; echo "SELECT CASE WHEN setval($ST, 1) IS NOT NULL THEN $U END;"; } > "$s/u-stripes-write"
{
  echo "$T AND pg_advisory_xact_lock(2, :client_id)::text IS NOT NULL THEN ARRAY[nextval('lg.bench_fence_clock'), $W] END;"
  echo "SELECT CASE WHEN pg_advisory_xact_lock(2, :client_id)::text IS NOT NULL AND setval($ST, 1) IS NOT NULL THEN $U END;"
} > "$s/u-stripes-lock"
{
  echo "$T AND pg_advisory_xact_lock(2, :client_id)::text IS NOT NULL THEN ARRAY[nextval('lg.bench_fence_clock'), $W, (SELECT count(*) FROM lg.bench_keys f WHERE f.hi = 7 AND f.lo = :client_id AND f.expires_at > clock_timestamp())] END;"
  echo "SELECT CASE WHEN pg_advisory_xact_lock(2, :client_id)::text IS NOT NULL AND setval($ST, 1) IS NOT NULL THEN $U END;"
} > "$s/u-stripes-row"

bench() {
  local clients=$1 script=$2
  "${as[@]}" "$bin/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -M prepared -T "$secs" -c "$clients" -j 2 \
    -D key=k -D lease=30000 -f "$s/$script" postgres 2>&1 |
    awk -v s="$script" '/^tps/ { printf "%s %.0f\n", s, $3; found = 1 } END { if (!found) exit 1 }' ||
    { echo "pgbench failed on $script" >&2; exit 1; }
}
echo "4 clients on one advisory lock, no hold (cycles/s, $runs runs of ${secs}s):"
for ((r = 1; r <= runs; r++)); do
  for v in native lockguard nextval setval txid update update-before insert-before session-rows stripes; do bench 4 "$v"; done
done | awk '{ a[$1] = a[$1] (a[$1] ? ", " : "") $2; if (!($1 in o)) { o[$1] = n++; k[n - 1] = $1 } } END { for (i = 0; i < n; i++) print "  " k[i] ": " a[k[i]] }'
echo "16 and 64 clients on one advisory lock, no hold (cycles/s): a handoff's cost as the waiters grow"
for ((r = 1; r <= runs; r++)); do
  for c in 16 64; do
    for v in native lockguard; do bench "$c" "$v" | sed "s/^/$c clients, /"; done
  done
done | awk '{ v = $1 " " $2 " " $3; a[v] = a[v] (a[v] ? ", " : "") $4; if (!(v in o)) { o[v] = n++; k[n - 1] = v } } END { for (i = 0; i < n; i++) print "  " k[i] ": " a[k[i]] }'
echo "16 clients, a key each (cycles/s):"
for ((r = 1; r <= runs; r++)); do
  for v in u-native u-sequences u-update u-stripes-fence u-stripes-write u-stripes-lock u-stripes-row u-stripes; do bench 16 "$v"; done
done | awk '{ a[$1] = a[$1] (a[$1] ? ", " : "") $2; if (!($1 in o)) { o[$1] = n++; k[n - 1] = $1 } } END { for (i = 0; i < n; i++) print "  " k[i] ": " a[k[i]] }'

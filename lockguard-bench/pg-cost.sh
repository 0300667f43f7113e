#!/usr/bin/env bash
# Instructions per uncontended PostgreSQL lock cycle in the client, lockguard
# beside raw tokio-postgres calling the same functions, counted by valgrind's
# callgrind, which does not move with the machine's load (the server is
# another process, not counted). Each variant runs twice, with 1,000 and
# 3,000 cycles; the difference divided by 2,000 is the cost of one cycle,
# start-up excluded.
#
#   bash lockguard-bench/pg-cost.sh lockguard raw
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "pg-cost.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p lockguard-bench --example pg_cost
bin=target/release/examples/pg_cost
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ $# -gt 0 ] || set -- lockguard raw
printf '| variant | instructions / cycle |\n|---|---:|\n'
for v in "$@"; do
  declare -A ir
  for n in 1000 3000; do
    ir[$n]=$(N=$n valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" "$v" 2>&1 \
      | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
  done
  printf '| %s | %d |\n' "$v" $(( (ir[3000] - ir[1000]) / 2000 ))
done

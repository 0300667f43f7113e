#!/usr/bin/env bash
# Instructions per uncontended lock cycle in the client, lockguard beside the
# raw driver doing the same work (examples/cycle_cost.rs), counted by valgrind's
# callgrind, which does not move with the machine's load (the server is
# another process, not counted). Each variant runs twice, with 1,000 and
# 3,000 cycles; the difference divided by 2,000 is the cost of one cycle,
# start-up excluded.
#
#   bash lockguard-bench/cycle-cost.sh postgres raw-postgres redis raw-redis
#   bash lockguard-bench/cycle-cost.sh etcd raw-etcd
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "cycle-cost.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p lockguard-bench --example cycle_cost
bin=target/release/examples/cycle_cost
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ $# -gt 0 ] || set -- postgres raw-postgres redis raw-redis
printf '| variant | instructions / cycle |\n|---|---:|\n'
for v in "$@"; do
  declare -A ir
  for n in 1000 3000; do
    ir[$n]=$(N=$n valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" "$v" 2>&1 \
      | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
  done
  printf '| %s | %d |\n' "$v" $(( (ir[3000] - ir[1000]) / 2000 ))
done

#!/usr/bin/env bash
# Instructions and heap allocations per request of each HTTP layer, counted
# by valgrind (callgrind and DHAT), which do not move with the machine's load.
# Each variant runs twice, with 2,000 and 12,000 requests; the difference
# divided by 10,000 is the cost of one request, start-up excluded.
#
#   bash lockguard-bench/layer-cost.sh none rate governor lock concurrency
#
# METRICS=1 builds lockguard with its metrics on and a recorder installed
# (the bench's `metrics` feature), as a service that exports them runs.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "layer-cost.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
features=()
[ "${METRICS:-0}" = 1 ] && features=(--features metrics)
cargo build --release -q -p lockguard-bench --example layer_cost "${features[@]}"
bin=target/release/examples/layer_cost
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ $# -gt 0 ] || set -- none rate governor lock concurrency
printf '| variant | instructions / request | allocations / request |\n|---|---:|---:|\n'
for v in "$@"; do
  declare -A ir blocks
  for n in 2000 12000; do
    ir[$n]=$(N=$n ROUNDS=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" "$v" 2>&1 \
      | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    blocks[$n]=$(N=$n ROUNDS=1 valgrind --tool=dhat --dhat-out-file="$out/dhat" "$bin" "$v" 2>&1 \
      | sed -n 's/.*Total: .* in \([0-9,]*\) blocks.*/\1/p' | tr -d ,)
  done
  printf '| %s | %d | %.1f |\n' "$v" $(( (ir[12000] - ir[2000]) / 10000 )) \
    "$(echo "(${blocks[12000]} - ${blocks[2000]}) / 10000" | bc -l)"
done

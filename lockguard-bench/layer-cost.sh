#!/usr/bin/env bash
# Instructions and heap allocations per request of each HTTP layer, counted
# by valgrind (callgrind and DHAT), which do not move with the machine's load.
# Each variant runs twice, with 2,000 and 12,000 requests; the difference
# divided by 10,000 is the cost of one request, start-up excluded.
#
# Beside them, the request's code footprint: how many distinct 64-byte lines
# of machine code run once a request or more (an instruction whose count
# grew by at least 5,000 between the two runs), which is what the
# instruction cache must hold for the server's hot path and what an
# instruction count cannot show (a loop of many instructions spans few
# lines; a path of many small functions spans many). It moves by a few
# lines with where the linker places code.
#
#   bash lockguard-bench/layer-cost.sh none rate governor lock concurrency
#
# BY_FUNCTION=lockguard adds, after the table, each variant's hot code
# lines by function, for the functions whose names hold the text.
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
# The 64-byte lines holding an instruction run 5,000 times more in the
# second callgrind profile than in the first (its own costs only: a
# `calls=` line's next line is the call's inclusive cost). Addresses are
# hex; a line is the address without its last two digits, and which
# quarter of 256 bytes those two digits fall in (mawk has no strtonum).
hot_lines() {
  awk '
    function line(a,   d) {
      d = index("0123456789abcdef", substr(a, length(a) - 1, 1)) - 1
      return substr(a, 1, length(a) - 2) ":" int(d / 4)
    }
    FNR == 1 { file++ }
    /^calls=/ { skip = 1; next }
    /^0x/ {
      if (skip) { skip = 0; next }
      n[file, $1] += $2; seen[$1] = 1
    }
    END {
      for (a in seen) if (n[2, a] - n[1, a] >= 5000) hot[line(a)] = 1
      for (l in hot) c++
      print c + 0
    }' "$1" "$2"
}
# With BY_FUNCTION set, the hot lines of each function whose name holds
# it (`BY_FUNCTION=lockguard`), most first; a line two functions share
# counts half to each. Callgrind names a function without its hash, so
# the copies of one generic function count together.
by_function() {
  awk -v want="$BY_FUNCTION" '
    function line(a,   d) {
      d = index("0123456789abcdef", substr(a, length(a) - 1, 1)) - 1
      return substr(a, 1, length(a) - 2) ":" int(d / 4)
    }
    FNR == 1 { file++ }
    /^fn=/ { fn = substr($0, 4); next }
    /^calls=/ { skip = 1; next }
    /^0x/ {
      if (skip) { skip = 0; next }
      n[file, $1] += $2; seen[$1] = 1; of[$1] = fn
    }
    END {
      for (a in seen) if (n[2, a] - n[1, a] >= 5000) {
        l = line(a)
        if (!((l, of[a]) in pair)) { pair[l, of[a]] = 1; fns[l]++ }
      }
      for (k in pair) {
        split(k, part, SUBSEP)
        if (index(part[2], want)) per[part[2]] += 1 / fns[part[1]]
      }
      for (f in per) printf "  %6.1f  %s\n", per[f], substr(f, 1, 140)
    }' "$1" "$2" | sort -rn
}
printf '| variant | instructions / request | allocations / request | hot code lines / request |\n|---|---:|---:|---:|\n'
for v in "$@"; do
  declare -A ir blocks
  for n in 2000 12000; do
    ir[$n]=$(N=$n ROUNDS=1 valgrind --tool=callgrind --dump-instr=yes --dump-line=no \
      --compress-pos=no --compress-strings=no --callgrind-out-file="$out/cg$n" "$bin" "$v" 2>&1 \
      | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    blocks[$n]=$(N=$n ROUNDS=1 valgrind --tool=dhat --dhat-out-file="$out/dhat" "$bin" "$v" 2>&1 \
      | sed -n 's/.*Total: .* in \([0-9,]*\) blocks.*/\1/p' | tr -d ,)
  done
  printf '| %s | %d | %.1f | %d |\n' "$v" $(( (ir[12000] - ir[2000]) / 10000 )) \
    "$(echo "(${blocks[12000]} - ${blocks[2000]}) / 10000" | bc -l)" \
    "$(hot_lines "$out/cg2000" "$out/cg12000")"
  if [ -n "${BY_FUNCTION:-}" ]; then
    by_function "$out/cg2000" "$out/cg12000" >> "$out/functions"
    printf '%s:\n' "$v" >> "$out/by-function"
    cat "$out/functions" >> "$out/by-function"
    rm "$out/functions"
  fi
done
if [ -n "${BY_FUNCTION:-}" ]; then
  printf '\nHot code lines / request by function (names holding %s):\n' "$BY_FUNCTION"
  cat "$out/by-function"
fi

#!/usr/bin/env bash
# Two builds of the HTTP bench server side by side: this checkout's and the
# one at BASE (a commit), each variant of each build in every round, in an
# order that turns round by round, with http-wrk.sh's set-up (the server
# pinned to CPU 0 with one runtime worker, wrk on CPU 1, 32 keep-alive
# connections). On a machine whose rounds swing by a third (seen here), a
# change shows only against its base measured in the same rounds: the
# ratios printed are each build's RateLimitLayer over tower_governor and
# this build's requests/s over the base's, variant by variant (medians over
# the rounds, with the lowest and highest).
#
#   BASE=f00f0ed bash lockguard-bench/http-ab.sh [ROUNDS] [SECONDS]    # default 15 2
#
# VARIANTS picks the variants (default "none rate governor rate-per-ip
# governor-per-ip"). The base's server is built in a worktree under
# target/http-ab/, with a target directory of its own kept for later runs.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${BASE:-}" ] || { echo "http-ab.sh needs BASE, the commit to compare with" >&2; exit 1; }
rounds=${1:-15}
secs=${2:-2}
NAME=http-ab.sh
# shellcheck source=lockguard-bench/http-common.sh
source lockguard-bench/http-common.sh
base=$(git rev-parse --short "$BASE^{commit}")
tree=target/http-ab/tree-$base
if [ ! -d "$tree" ]; then
  git worktree add -q --detach "$tree" "$base"
fi
CARGO_TARGET_DIR="$PWD/target/http-ab/target" cargo build --release -q \
  --manifest-path "$tree/Cargo.toml" -p lockguard-bench --example http_server
base_bin=target/http-ab/target/release/examples/http_server
read -r -a variants <<< "${VARIANTS:-none rate governor rate-per-ip governor-per-ip}"
runs=()
for v in "${variants[@]}"; do runs+=("new:$v" "base:$v"); done
for ((r = 1; r <= rounds; r++)); do
  k=$((r % ${#runs[@]}))
  order=("${runs[@]:k}" "${runs[@]:0:k}")
  for run in "${order[@]}"; do
    build=${run%%:*}
    v=${run#*:}
    if [ "$build" = base ]; then bin=$base_bin; else bin=target/release/examples/http_server; fi
    start_server "$v"
    warm_up
    load "$secs"
    stop_server
    check_answers "$run"
    rps=$(requests_per_sec "$run")
    echo "$r $run $rps" >> "$out/runs"
  done
  echo "round $r/$rounds: $(awk -v r="$r" '$1 == r { printf "%s %.0f/s  ", $2, $3 }' "$out/runs")" >&2
done
awk -v variants="${variants[*]}" -v base="$base" "$ROUNDS_AWK"'
  # The median over the rounds of a / b, with its range, written out.
  function ratio(a, b,   m) {
    m = over_rounds(a, b)
    return sprintf("%.3fx (%.2f–%.2fx)", m, lo, hi)
  }
  { rps[$1, $2] = $3; if ($1 > rounds) rounds = $1; have[$2] = 1 }
  END {
    n = split(variants, vs, " ")
    printf "| variant | this build / %s (median; range) |\n|---|---:|\n", base
    for (k = 1; k <= n; k++) printf "| %s | %s |\n", vs[k], ratio("new:" vs[k], "base:" vs[k])
    split("new base", builds, " ")
    for (k = 1; k <= 2; k++) {
      b = builds[k]; name = b == "new" ? "this build" : base
      if ((b ":rate") in have && (b ":governor") in have)
        printf "\n%s: RateLimitLayer / tower_governor %s", name, ratio(b ":rate", b ":governor")
      if ((b ":rate-per-ip") in have && (b ":governor-per-ip") in have)
        printf "; a key per client IP %s", ratio(b ":rate-per-ip", b ":governor-per-ip")
    }
    printf "\n"
  }' "$out/runs"

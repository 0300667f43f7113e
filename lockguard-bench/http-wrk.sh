#!/usr/bin/env bash
# Throughput of the HTTP hello-world with each layer when the server is the
# bottleneck: the server (examples/http_server.rs, one runtime worker) is
# pinned to CPU 0 and wrk (one thread, 32 keep-alive connections) to CPU 1,
# so each request costs the server its full price and nothing of the load
# generator's. Rounds interleave the variants, each round starting at the
# next one, so a drift of the machine's speed hits them alike; each ratio is the median over the rounds of one
# variant's requests/s divided by another's in the same round.
#
#   bash lockguard-bench/http-wrk.sh [ROUNDS] [SECONDS]     # default 15 3
#
# VARIANTS picks the variants (default "none rate governor lock
# concurrency"); it must name `none`, and `rate` and `governor` (or
# `rate-per-ip` and `governor-per-ip`) for their comparison line: `VARIANTS="none rate governor" bash ... 40 2` spends
# every round on the one comparison.
#
# Every request carries its own `x-conn` value, so the lock layer takes a
# free lock each time, as in the in-process figures. A run whose server is
# not busy close to all the time (the load generator could not keep up) or
# that got any answer but 200 fails.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-15}
secs=${2:-3}
NAME=http-wrk.sh
# shellcheck source=lockguard-bench/http-common.sh
source lockguard-bench/http-common.sh
read -r -a variants <<< "${VARIANTS:-none rate governor lock concurrency}"
[[ " ${variants[*]} " == *" none "* ]] || { echo "VARIANTS must name none, the yardstick" >&2; exit 1; }
tick=$(getconf CLK_TCK)
# utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
for ((r = 1; r <= rounds; r++)); do
  # Each round starts at another variant, so that none always runs first
  # (right after the previous round's last server was stopped).
  k=$((r % ${#variants[@]}))
  order=("${variants[@]:k}" "${variants[@]:0:k}")
  for v in "${order[@]}"; do
    start_server "$v"
    warm_up
    before=$(cpu_ticks "$server")
    load "$secs"
    after=$(cpu_ticks "$server")
    stop_server
    check_answers "$v"
    rps=$(requests_per_sec "$v")
    busy=$(awk -v a="$after" -v b="$before" -v t="$tick" -v s="$secs" 'BEGIN { printf "%.2f", (a - b) / t / s }')
    echo "$r $v $rps $busy" >> "$out/runs"
  done
  echo "round $r/$rounds: $(awk -v r="$r" '$1 == r { printf "%s %.0f/s (busy %s)  ", $2, $3, $4 }' "$out/runs")" >&2
done
awk -v rounds="$rounds" -v variants="${variants[*]}" "$ROUNDS_AWK"'
  { rps[$1, $2] = $3; busy[$1, $2] = $4; names[$2] = 1 }
  END {
    n = split(variants, order, " ")
    printf "| variant | requests/s (median) | server core busy (lowest) | ratio to hello-world | range |\n|---|---:|---:|---:|---:|\n"
    for (k = 1; k <= n; k++) {
      v = order[k]; low = 1e9
      for (r = 1; r <= rounds; r++) {
        a[r] = rps[r, v]
        if (busy[r, v] < low) low = busy[r, v]
      }
      m = over_rounds(v, "none")
      printf "| %s | %.0f | %.2f | %.3fx | %.2f–%.2fx |\n", v, median(a, rounds), low, m, lo, hi
      if (low < 0.9) starved = starved " " v
    }
    if (("rate" in names) && ("governor" in names)) {
      m = over_rounds("rate", "governor")
      printf "\nRateLimitLayer / tower_governor: %.3fx (range %.2f–%.2fx)\n", m, lo, hi
    }
    if (("rate-per-ip" in names) && ("governor-per-ip" in names)) {
      m = over_rounds("rate-per-ip", "governor-per-ip")
      printf "RateLimitLayer / tower_governor, a key per client IP (one IP here: wrk connects from 127.0.0.1): %.3fx (range %.2f–%.2fx)\n", m, lo, hi
    }
    if (starved != "") { printf "the server was not the bottleneck in some rounds of:%s\n", starved > "/dev/stderr"; exit 1 }
  }' "$out/runs"

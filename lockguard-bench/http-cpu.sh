#!/usr/bin/env bash
# The server's CPU time per request of the HTTP hello-world with each layer,
# the server the bottleneck: the server (examples/http_server.rs, one
# runtime worker) pinned to CPU 0, wrk (one thread, 32 keep-alive
# connections) to CPU 1, and `perf stat -e task-clock` on the server while
# wrk runs. What a layer costs a served request, network included, where
# `http-wrk.sh`'s requests/s also move with the load generator and
# `layer-cost.sh`'s instructions do not see copies, cache misses or the
# kernel. Rounds interleave the variants; each variant's figure is the mean
# of its rounds, with every round's figure beside it.
#
#   bash lockguard-bench/http-cpu.sh [ROUNDS] [SECONDS] [VARIANT...]
#     # default 8 3 none governor-per-ip-bare governor-per-ip rate-per-ip-bare rate-per-ip
#
# A `-bare` variant answers without rate-limit headers (tower_governor
# without `use_headers`, ours with `standard_headers(false)`). A run that
# got any answer but 200 fails.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-8}
secs=${2:-3}
shift $(($# < 2 ? $# : 2))
[ $# -gt 0 ] || set -- none governor-per-ip-bare governor-per-ip rate-per-ip-bare rate-per-ip
NAME=http-cpu.sh
# shellcheck source=lockguard-bench/http-common.sh
source lockguard-bench/http-common.sh
command -v perf >/dev/null || { echo "http-cpu.sh needs perf (apt-get install linux-perf)" >&2; exit 1; }
for ((r = 1; r <= rounds; r++)); do
  for v in "$@"; do
    start_server "$v"
    warm_up
    perf stat -e task-clock -p "$server" -o "$out/stat" -- sleep "$secs" > /dev/null 2>&1 &
    stat=$!
    load "$secs"
    wait "$stat"
    stop_server
    check_answers "$v"
    requests=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$out/wrk")
    ms=$(awk '/task-clock/ { gsub(",", "", $1); print $1 }' "$out/stat")
    [ -n "$requests" ] && [ -n "$ms" ] || { echo "$v: no count from wrk or perf" >&2; exit 1; }
    echo "$v $(awk -v ms="$ms" -v n="$requests" 'BEGIN { printf "%.3f", ms * 1000 / n }')" >> "$out/runs"
  done
  echo "round $r/$rounds done" >&2
done
printf '| variant | server CPU µs / request (mean) | rounds |\n|---|---:|---|\n'
for v in "$@"; do
  awk -v v="$v" '$1 == v { s += $2; n++; all = all (all ? " " : "") $2 } END { printf "| %s | %.2f | %s |\n", v, s / n, all }' "$out/runs"
done

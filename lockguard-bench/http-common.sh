# What http-wrk.sh, http-cpu.sh and http-ab.sh share (sourced, from the workspace root):
# the checks, the server built, a temporary directory with wrk's request
# script (every request its own `x-conn` value), and the server of one
# variant started on CPU 0.
#
#   NAME=http-wrk.sh; source lockguard-bench/http-common.sh
#   start_server VARIANT     # sets $server (pid) and $addr
#   warm_up; load SECONDS    # a second of load, then the measured run in $out/wrk
#   stop_server
#   check_answers LABEL      # fails on answers other than 200
#   rps=$(requests_per_sec LABEL)
#   awk "$ROUNDS_AWK"' ...'   # median() and over_rounds() for the summary
[ "$(nproc)" -ge 2 ] || { echo "$NAME needs 2 cores: one for the server, one for wrk" >&2; exit 1; }
if ! command -v wrk >/dev/null; then
  apt-get update -q >/dev/null && apt-get install -y -q wrk >/dev/null
fi
cargo build --release -q -p lockguard-bench --example http_server
bin=target/release/examples/http_server
out=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$out"' EXIT
cat > "$out/conn.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/", { ["x-conn"] = tostring(n) })
end
LUA

start_server() {
  taskset -c 0 "$bin" "$1" 127.0.0.1:0 > "$out/server" 2>&1 &
  server=$!
  for _ in $(seq 100); do grep -q "listening on" "$out/server" && break; sleep 0.05; done
  addr=$(sed -n 's/^listening on //p' "$out/server")
  [ -n "$addr" ] || { cat "$out/server" >&2; exit 1; }
}

stop_server() {
  kill "$server"; wait "$server" 2>/dev/null || true; server=
}

# A second of wrk's load on the running server, not measured.
warm_up() {
  taskset -c 1 wrk -t1 -c32 -d1s -s "$out/conn.lua" "http://$addr/" > /dev/null
}

# $1 seconds of wrk's load on the running server, its report in $out/wrk.
load() {
  taskset -c 1 wrk -t1 -c32 -d"$1s" -s "$out/conn.lua" "http://$addr/" > "$out/wrk"
}

# Fails the script when the last load (run $1) got an answer other than
# 200 or a socket error.
check_answers() {
  if grep -q "Non-2xx\|Socket errors" "$out/wrk"; then
    echo "$1: answers other than 200, or socket errors:" >&2; cat "$out/wrk" >&2; exit 1
  fi
}

# The last load's (run $1's) requests per second.
requests_per_sec() {
  local rps
  rps=$(sed -n 's/^Requests\/sec: *//p' "$out/wrk")
  [ -n "$rps" ] || { echo "$1: wrk printed no Requests/sec:" >&2; cat "$out/wrk" >&2; exit 1; }
  echo "$rps"
}

# awk functions for a script's summary over rps[round, run], the runs'
# requests per second, and rounds: median(xs, n) of xs[1..n]; and
# over_rounds(a, b), the median over the rounds where both ran of
# rps[r, a] / rps[r, b], with the lowest and highest left in lo and hi.
ROUNDS_AWK='
  function median(xs, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (xs[j] < xs[i]) { t = xs[i]; xs[i] = xs[j]; xs[j] = t }
    return n % 2 ? xs[(n + 1) / 2] : (xs[n / 2] + xs[n / 2 + 1]) / 2
  }
  function over_rounds(a, b,   r, n, q, c) {
    lo = 1e9; hi = 0; n = 0
    for (r = 1; r <= rounds; r++) {
      if (!((r, a) in rps) || !((r, b) in rps)) continue
      q = rps[r, a] / rps[r, b]; c[++n] = q
      if (q < lo) lo = q; if (q > hi) hi = q
    }
    return median(c, n)
  }
'

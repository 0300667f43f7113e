# What http-wrk.sh, http-cpu.sh and http-ab.sh share (sourced, from the workspace root):
# the checks, the server built, a temporary directory with wrk's request
# script (every request its own `x-conn` value), and the server of one
# variant started on CPU 0.
#
#   NAME=http-wrk.sh; source lockguard-bench/http-common.sh
#   start_server VARIANT     # sets $server (pid) and $addr
#   stop_server
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

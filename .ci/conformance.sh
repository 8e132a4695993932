#!/usr/bin/env bash
# Runs the official MCP conformance suite (2025-11-25 requirements) three ways:
#   1. the example server directly (the baseline: a gateway may not lose what it has),
#   2. Gantry in front of the example server over stdio,
#   3. Gantry in front of the example server over Streamable HTTP.
# Every run must pass every check. Uses the debug binaries (cargo build --bins).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
shared=${GANTRY_SHARED:-$root/../shared}
suite="$shared/tools/conformance.sh"
bin=${GANTRY_BIN_DIR:-$root/target/debug}
out=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Starts a command whose stderr announces "listening on http://ADDR/mcp" and sets
# $url to that URL (not via $(...): the background process would hold the pipe).
start() {
  local log=$1; shift
  url=
  "$@" >/dev/null 2>"$log" &
  pids+=($!)
  for _ in $(seq 1 300); do
    url=$(grep -o 'listening on http://[^ ]*' "$log" 2>/dev/null | head -n1 | sed 's/listening on //') || true
    if [[ -n $url ]]; then return 0; fi
    sleep 0.1
  done
  echo "did not start: $*" >&2; cat "$log" >&2; return 1
}

run() {
  local name=$1 url=$2
  echo "=== conformance: $name ($url)"
  if bash "$suite" "$url" --requirements 2025-11-25 -o "$out/$name" >"$out/$name.log" 2>&1; then
    grep -E '^Total:' "$out/$name.log" | sed "s/^/$name: /"
  else
    cat "$out/$name.log"
    echo "conformance FAILED: $name" >&2
    return 1
  fi
}

start "$out/example.log" "$bin/gantry-example" --http 127.0.0.1:0
run example-direct "$url"

start "$out/gantry-stdio.log" "$bin/gantry" --listen 127.0.0.1:0 --stdio "$bin/gantry-example"
run gantry-stdio "$url"

start "$out/example-http.log" "$bin/gantry-example" --http 127.0.0.1:0
start "$out/gantry-http.log" "$bin/gantry" --listen 127.0.0.1:0 --http "$url"
run gantry-http "$url"
echo "conformance: all runs passed"

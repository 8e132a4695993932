#!/usr/bin/env bash
# Instructions Gantry's gateway process executes per call, counted by valgrind's
# callgrind: a figure that does not move with the neighbours of a shared VM, for
# A/B comparisons of two builds (wall-clock rows on such a host range by ±20 %).
#
#   crates/bench/instructions.sh GANTRY MODE PAYLOAD CLIENTS [gantry-bench options]
#   crates/bench/instructions.sh target/release/gantry shared 100 8 --era stateless
#
# Needs valgrind (apt-get install valgrind) and a built gantry-bench next to GANTRY
# or in target/release. The gateway runs under callgrind (about 50x slower), so only
# instructions per call mean anything here, not calls/s. Counting starts after the
# warm-up and covers a few seconds of load; calls are counted in the profile itself
# (hyper's response encoder runs once per HTTP response). Memory copies are counted
# per byte (`rep movsb`), so large payloads weigh copies far above their real cost.
# KEEP_PROFILE=FILE keeps the callgrind profile (for callgrind_annotate --inclusive=yes).
set -euo pipefail

if [[ $# -lt 4 ]]; then
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
gantry=$(realpath "$1")
mode=$2
payload=$3
clients=$4
shift 4
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 2; }
bench=$(dirname "$gantry")/gantry-bench
[[ -x $bench ]] || bench=target/release/gantry-bench
[[ -x $bench ]] || { echo "instructions.sh: no gantry-bench next to $gantry or in target/release" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ $mode == relay* ]]; then
    # The bench's relays are gantry-bench itself (`--serve-relay`), started by the
    # bench: the bench runs under valgrind, uninstrumented, with its children but the
    # backends; only the relay is counted. The load generator is slowed by valgrind,
    # so fewer calls are counted, each as many instructions as natively.
    valgrind --tool=callgrind --trace-children=yes \
        --trace-children-skip-by-arg='*--serve-direct*,*--serve-stdio-echo*' \
        --instr-atstart=no --callgrind-out-file="$work/cg.%p" \
        "$bench" --gantry "$gantry" --duration 30s --warmup 10s --clients "$clients" \
        --payloads "$payload" --modes "$mode" --idle-sessions 0 "$@" >"$work/bench.out" 2>&1 &
    load=$!
    sleep 25
    gateway=$(pgrep -f -- "--serve-relay" | head -1 || true)
else
    # gantry-bench starts "gantry" itself: a wrapper of the same name runs it under
    # callgrind. The supervisor re-executes itself as the gateway; that child is the one
    # measured. Backends (gantry-bench itself) run natively.
    wrapper=$work/$(basename "$gantry")
    cat >"$wrapper" <<EOF
#!/usr/bin/env bash
exec valgrind --tool=callgrind --trace-children=yes --trace-children-skip='*gantry-bench*' \
    --instr-atstart=no --callgrind-out-file=$work/cg.%p "$gantry" "\$@"
EOF
    chmod +x "$wrapper"

    "$bench" --gantry "$wrapper" --duration 14s --warmup 4s --clients "$clients" \
        --payloads "$payload" --modes "$mode" --idle-sessions 0 "$@" >"$work/bench.out" 2>&1 &
    load=$!
    sleep 10
    gateway=
    for p in $(pgrep -f "callgrind.*$(basename "$gantry")" || true); do
        parent=$(ps -o ppid= -p "$p" | tr -d ' ')
        if ps -o cmd= -p "$parent" | grep -q callgrind; then gateway=$p; fi
    done
fi
if [[ -z $gateway ]]; then
    wait $load || true
    echo "instructions.sh: the gateway process was not found; gantry-bench said:" >&2
    cat "$work/bench.out" >&2
    exit 1
fi
callgrind_control -i on "$gateway" >/dev/null 2>&1
sleep 1
callgrind_control -z "$gateway" >/dev/null 2>&1
sleep 4
callgrind_control -d "$gateway" >/dev/null 2>&1
callgrind_control -i off "$gateway" >/dev/null 2>&1
wait $load || { cat "$work/bench.out" >&2; exit 1; }
profile=$(ls -S "$work"/cg."$gateway".* | head -1)
if [[ -n ${KEEP_PROFILE:-} ]]; then cp "$profile" "$KEEP_PROFILE"; fi
python3 - "$profile" "$mode" "$payload" "$clients" "$*" <<'EOF'
import re, sys
path, mode, payload, clients, extra = sys.argv[1:]
names, total, calls, callee = {}, 0, 0, None
per_call = re.compile(r"Server as hyper::proto::h1::Http1Transaction>::encode$")
for line in open(path):
    if line.startswith(("fn=", "cfn=")):
        m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.strip())
        if m and m.group(2):
            names[m.group(1)] = m.group(2)
        if line.startswith("cfn=") and m:
            callee = names.get(m.group(1), "")
    elif line.startswith("calls=") and callee and per_call.search(callee):
        calls += int(line.split("=")[1].split()[0])
    elif line.startswith(("summary:", "totals:")):
        total = int(line.split()[1])
if not calls:
    sys.exit("instructions.sh: no calls in the profile")
print(f"{mode} N={clients} P={payload} {extra}".strip()
      + f": {calls} calls, {total / calls:,.0f} instructions per call")
EOF

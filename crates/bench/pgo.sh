#!/usr/bin/env bash
# Builds gantry with profile-guided optimization (PGO): an instrumented build is run
# under a training load (gantry-bench: both protocol eras, stdio and HTTP backends,
# every session mode, small and large payloads, lists, new sessions, API keys, OAuth
# access tokens, TLS and rate limits), and the counts it records steer the optimized
# build (which code is hot, how it is laid out, what is inlined). BENCHMARKS.md
# ("Profile-guided builds") says what it gives; the container images are built this
# way (docker/Dockerfile).
#
#   crates/bench/pgo.sh [PROFILE]        # PROFILE: a cargo profile [dist]
#
# Prints the path of the optimized binary: target/pgo/PROFILE/gantry, with
# gantry-example (the demo backend) beside it. Needs llvm-profdata of the
# toolchain's LLVM (`rustup component add llvm-tools`; run when it is missing) and
# loopback networking for the training load. Takes about three builds' time: the
# instrumented build, the training (about three minutes), the optimized build.
# Extra RUSTFLAGS are kept for both builds. PGO_TRAIN_SCALE=N multiplies the
# training durations (default 1). PGO_BENCH=PATH uses a gantry-bench already built
# (any profile: the load generator's own speed hardly moves the counts) instead of
# building it in PROFILE.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
profile=${1:-dist}
scale=${PGO_TRAIN_SCALE:-1}
say() { echo "pgo.sh: $*" >&2; }

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$sysroot/lib/rustlib/$host/bin/llvm-profdata
if [[ ! -x $profdata ]]; then
    say "llvm-profdata missing; rustup component add llvm-tools"
    rustup component add llvm-tools >&2
fi
[[ -x $profdata ]] || { say "no llvm-profdata at $profdata"; exit 2; }

# Separate target directories: RUSTFLAGS differ, and neither build must invalidate the
# plain one (target/PROFILE).
gen_dir=$root/target/pgo-generate
out_dir=$root/target/pgo
raw=$gen_dir/profiles
rm -rf "$raw"
mkdir -p "$raw"

if [[ -n ${PGO_BENCH:-} ]]; then
    bench=$(realpath "$PGO_BENCH")
    [[ -x $bench ]] || { say "PGO_BENCH: no executable at $PGO_BENCH"; exit 2; }
else
    say "the load generator (plain $profile build)"
    cargo build --profile "$profile" --locked -p gantry-bench --bin gantry-bench >&2
    bench=$root/target/$profile/gantry-bench
fi

say "instrumented build"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$raw" \
    cargo build --profile "$profile" --locked --bin gantry --target-dir "$gen_dir" >&2
instrumented=$gen_dir/$profile/gantry

# Scaled durations: d 2 -> "2s" (times PGO_TRAIN_SCALE).
d() { echo "$(( $1 * scale ))s"; }
train() {
    say "training: $*"
    "$bench" --gantry "$instrumented" --duration "$(d 2)" --warmup "$(d 1)" "$@" >/dev/null
}
# The session era, each backend kind and session mode, SSE answers (the default).
train --modes shared,per-session,per-user,shared+jwt,shared+tls,http,http+h2,shared+limit \
    --clients 1,16 --payloads 100,10240 --idle-sessions 0
# JSON answers, large messages, and idle sessions (the memory figure's path).
train --modes shared,http --clients 16 --payloads 100 --json-only --idle-sessions 300
train --modes shared,http --clients 4 --payloads 102400 --idle-sessions 0
# The stateless era, with a session-era (stdio) and a stateless-era (HTTP) backend.
train --modes shared,http --clients 1,16 --payloads 100,10240 --era stateless --idle-sessions 0
# Lists from the catalog cache, and new sessions (initialize, a call, DELETE).
train --modes shared,catalog --clients 8 --payloads 100 --op list --idle-sessions 0
train --modes shared,per-session,per-session+warm --clients 8 --payloads 100 --op session --idle-sessions 0
shopt -s nullglob
raws=("$raw"/*.profraw)
[[ ${#raws[@]} -gt 0 ]] || { say "the training wrote no profile"; exit 1; }
"$profdata" merge -o "$gen_dir/gantry.profdata" "${raws[@]}"

say "optimized build"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$gen_dir/gantry.profdata" \
    cargo build --profile "$profile" --locked --bin gantry --bin gantry-example \
    --target-dir "$out_dir" >&2
echo "$out_dir/$profile/gantry"

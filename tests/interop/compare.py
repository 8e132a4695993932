#!/usr/bin/env python3
"""Compares the interop runs in OUT/runs (written by run.sh): a check that passed in the
DIRECT run of a (target, backend transport, client variant) must pass through Gantry,
on the Streamable HTTP front and on the legacy HTTP+SSE front alike (both are compared
with the same client's direct run). Prints a summary table and every regression with
both details; writes OUT/results.jsonl (every check, with its run's coordinates) and
OUT/regressions.jsonl. Exit status 1 on any regression or on a run without results.

    compare.py OUT
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

FRONTS = ["direct", "gantry", "gantry-sse"]


def load(out: Path):
    runs = {}
    for f in sorted((out / "runs").glob("*.jsonl")):
        target, backend, front, client, era = f.stem.split("__")
        checks = {}
        bad_lines = 0
        for line in f.read_text(errors="replace").splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
                checks[(r["scenario"], r["check"])] = r
            except (ValueError, KeyError):
                bad_lines += 1
        runs[(target, backend, client, era, front)] = {"checks": checks, "bad": bad_lines, "file": f}
    return runs


def counts(checks) -> str:
    c = defaultdict(int)
    for r in checks.values():
        c[r["status"]] += 1
    return f"{c['pass']:>2}/{c['fail']:>2}/{c['skip']:>2}"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    runs = load(out)
    if not runs:
        print("compare: no runs found", file=sys.stderr)
        return 1

    empty = [k for k, v in runs.items() if not v["checks"]]
    regressions = []
    gains = 0
    with open(out / "results.jsonl", "w") as all_out:
        for (target, backend, client, era, front), run in sorted(runs.items()):
            for r in run["checks"].values():
                all_out.write(json.dumps({"target": target, "backend": backend, "front": front, **r}) + "\n")
    for (target, backend, client, era, front), run in sorted(runs.items()):
        if front == "direct":
            continue
        base = runs.get((target, backend, client, era, "direct"))
        if base is None or not base["checks"]:
            continue  # no baseline to compare with (reported as an empty run if it ran)
        for key, b in base["checks"].items():
            if b["status"] != "pass":
                g = run["checks"].get(key)
                if g and g["status"] == "pass" and b["status"] == "fail":
                    gains += 1
                continue
            g = run["checks"].get(key)
            if g is None or g["status"] != "pass":
                regressions.append({
                    "target": target, "backend": backend, "front": front, "client": f"{client}/{era}",
                    "scenario": key[0], "check": key[1],
                    "status": g["status"] if g else "missing",
                    "direct": b.get("detail", ""),
                    "gantry": g.get("detail", "") if g else "(no such check in the run through Gantry)",
                })

    # Summary: one row per (target, backend, client variant); pass/fail/skip per front.
    rows = sorted({(t, b, c, e) for (t, b, c, e, _f) in runs})
    reg_count = defaultdict(int)
    for r in regressions:
        c, e = r["client"].split("/")
        reg_count[(r["target"], r["backend"], c, e, r["front"])] += 1
    print()
    print("pass/fail/skip per run; [R n] = n regressions against the direct run")
    hdr = f"{'target':<15} {'backend':<7} {'client':<16}" + "".join(f" {f:<17}" for f in FRONTS)
    print(hdr)
    print("-" * len(hdr))
    for (t, b, c, e) in rows:
        cells = []
        for f in FRONTS:
            run = runs.get((t, b, c, e, f))
            if run is None:
                cells.append("-")
                continue
            cell = counts(run["checks"]) if run["checks"] else "NO RESULTS"
            n = reg_count.get((t, b, c, e, f))
            if n:
                cell += f" [R {n}]"
            cells.append(cell)
        print(f"{t:<15} {b:<7} {c + '/' + e:<16}" + "".join(f" {x:<17}" for x in cells))
    print()

    with open(out / "regressions.jsonl", "w") as reg_out:
        for r in regressions:
            reg_out.write(json.dumps(r) + "\n")
    if regressions:
        print(f"REGRESSIONS ({len(regressions)}): passed directly, not through Gantry")
        for r in regressions:
            print(f"  {r['target']}/{r['backend']} {r['front']} {r['client']}: {r['scenario']} / {r['check']} [{r['status']}]")
            print(f"      direct: {r['direct']}")
            print(f"      gantry: {r['gantry']}")
        print()
    for k in empty:
        print(f"EMPTY RUN (no results): {'/'.join(k)} — see {runs[k]['file'].with_suffix('.log')}")
    for k, v in runs.items():
        if v["bad"]:
            print(f"note: {v['bad']} unparsable line(s) in {v['file']}")
    if gains:
        print(f"note: {gains} check(s) fail directly but pass through Gantry (not regressions)")
    total = sum(len(v["checks"]) for v in runs.values())
    print(f"interop: {len(runs)} runs, {total} checks, {len(regressions)} regressions, {len(empty)} empty runs")
    return 1 if regressions or empty else 0


if __name__ == "__main__":
    sys.exit(main())

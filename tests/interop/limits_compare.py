#!/usr/bin/env python3
"""The limits leg's report (limits.sh): reads OUT/runs/<client>.jsonl (one JSON line per
check from clients/limits.mjs or clients/limits.py), prints a table per client and
scenario, what each SDK exposes on the refused call, every failed or missing check, and
writes OUT/results.jsonl. Exit status 1 if any check failed or is missing.

    limits_compare.py OUT CLIENT...
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CHECKS = ["connect", "call 1", "call 2", "call 3", "call 3 _meta", "session after"]
COLUMNS = ["connect", "call 1", "call 2", "call 3", "_meta", "session"]
SCENARIOS = [("direct", "baseline"), ("gantry", "error"), ("gantry", "tool_result")]


def expected(client: str) -> list[tuple[str, str, str]]:
    out = []
    for front, scenario in SCENARIOS:
        if scenario == "baseline" and client.endswith("/stateless"):
            continue  # server-everything speaks the session era only: no direct run
        for check in CHECKS:
            if check == "call 3 _meta" and scenario != "tool_result":
                continue
            out.append((front, scenario, check))
    return out


def call3(line: dict | None, scenario: str) -> str:
    """How the SDK surfaced call 3, in a few words, and how long the call took."""
    if line is None:
        return ""
    m = re.search(r" (\d+) ms$", line["detail"])
    took = f" ({m.group(1)} ms)" if m else ""
    return how(line, scenario) + took


def how(line: dict, scenario: str) -> str:
    seen = line.get("seen")
    detail = re.sub(r" \d+ ms$", "", line["detail"])
    if not line["ok"] or seen is None:
        if scenario == "baseline":
            return f"result {json.dumps(detail)}"
        return ("" if line["ok"] else "FAILED: ") + detail
    if scenario == "error":
        if "error.code" in seen:  # Python
            cls = seen["class"].rsplit(".", 1)[-1]
            return f"{cls} .error.code={seen['error.code']} .error.data={json.dumps(seen['error.data'])}"
        return f"{seen['class']} .code={seen['code']} .data={json.dumps(seen['data'])}"
    flag = "is_error" if "is_error" in seen else "isError"
    return f"result {flag}={json.dumps(seen.get(flag))} {json.dumps(seen.get('text'))}"


def main() -> int:
    out = Path(sys.argv[1])
    clients = sys.argv[2:]
    results, failures, missing = [], [], []
    rows = []
    times = []  # per client: its two Gantrys' start, the client process, the stop
    for client in clients:
        name = client.replace("/", "-")
        path = out / "runs" / f"{name}.jsonl"
        got: dict[tuple[str, str, str], dict] = {}
        for raw in path.read_text().splitlines() if path.exists() else []:
            try:
                d = json.loads(raw)
            except json.JSONDecodeError:
                continue
            got[(d.get("front"), d.get("scenario"), d.get("check"))] = d
        meta_path = out / "runs" / f"{name}.meta.json"
        ms = json.loads(meta_path.read_text())["ms"] if meta_path.exists() else None
        for key in expected(client):
            d = got.get(key)
            if d is None:
                missing.append((client, *key))
                results.append({"client": client, "front": key[0], "scenario": key[1], "check": key[2], "ok": False,
                                "detail": "missing (the client did not report it: see the log)"})
                continue
            results.append(d)
            if not d["ok"]:
                failures.append(d)
        for front, scenario in SCENARIOS:
            keys = [(front, scenario, c) for c in CHECKS]
            if not any(k in expected(client) for k in keys):
                continue
            cells = []
            for c in CHECKS:
                k = (front, scenario, c)
                if k not in expected(client):
                    cells.append("-")
                elif k not in got:
                    cells.append("MISSING")
                else:
                    cells.append("ok" if got[k]["ok"] else "FAIL")
            rows.append([client, front, scenario, *cells, call3(got.get((front, scenario, "call 3")), scenario)])
        rows.append(None)  # a blank line between clients
        times.append(f"{client} {ms / 1000:.1f}s" if ms is not None else f"{client} ?")
    header = ["client", "front", "scenario", *COLUMNS, "call 3, as the SDK surfaces it"]
    body = [r for r in rows if r is not None]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)] if body else [len(h) for h in header]
    fmt = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r[:-1], widths[:-1])) + "  " + str(r[-1])  # noqa: E731
    print(fmt(header))
    print("-" * min(160, sum(widths[:-1]) + 2 * len(widths) + 30))
    for r in rows[:-1]:
        print(fmt(r) if r is not None else "")

    print("time per client (two Gantrys, the client's three connections, the stop): " + ", ".join(times))

    # What each SDK exposes on the refused call (answer = "error"), in full.
    exposed = [d for d in results if d.get("scenario") == "error" and d.get("check") == "call 3" and d.get("seen")]
    if exposed:
        print("\nWhat each SDK exposes on the refused call (answer = \"error\"):")
        for d in exposed:
            print(f"  {d['client']:16} {json.dumps(d['seen'])}")
    if failures or missing:
        print("\nFailed or missing checks:")
        for d in failures:
            print(f"  FAIL {d['client']} {d['front']}/{d['scenario']} {d['check']}: {d['detail']}")
        for client, front, scenario, check in missing:
            print(f"  MISSING {client} {front}/{scenario} {check} (see {out}/runs/{client.replace('/', '-')}.log)")

    with (out / "results.jsonl").open("w") as f:
        for d in results:
            f.write(json.dumps(d) + "\n")
    total = len(results)
    print(f"\nlimits: {len(clients)} clients, {total} checks, {total - len(failures) - len(missing)} passed, "
          f"{len(failures)} failed, {len(missing)} missing")
    return 1 if failures or missing else 0


if __name__ == "__main__":
    sys.exit(main())

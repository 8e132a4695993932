#!/usr/bin/env python3
"""Compares two runs of the MCP conformance suite check by check.

Usage: conformance_compare.py NAME BASELINE_DIR RUN_DIR EXPECTED_FILE

BASELINE_DIR and RUN_DIR are `conformance server -o DIR` outputs: one directory per
scenario (`<scenario>-<timestamp>/checks.json`). Every check of the baseline must
have the same status in the run (SUCCESS, WARNING, INFO, FAILURE, SKIPPED: all
compared), and the run must not have checks the baseline lacks, except for the
differences listed in EXPECTED_FILE. Lines there are

    RUN-NAME-GLOB  SCENARIO  CHECK-ID  BASELINE-STATUS  RUN-STATUS   # why

(`-` as a status: the check is absent from that side). An expected difference
that no longer occurs is reported too, so the list never outgrows the truth.
Exit status 1 on any unexpected difference, on an empty or missing result
directory, or on an expected difference that did not occur.
"""

import fnmatch
import json
import os
import re
import sys

STAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def load(directory):
    """{(scenario, check id, n): status}; n numbers repeated ids in a scenario."""
    checks = {}
    if not os.path.isdir(directory):
        return checks
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry, "checks.json")
        if not os.path.isfile(path):
            continue
        scenario = STAMP.sub("", entry)
        with open(path, encoding="utf-8") as f:
            items = json.load(f)
        seen = {}
        for item in items:
            cid = str(item.get("id") or item.get("name") or "?")
            n = seen.get(cid, 0)
            seen[cid] = n + 1
            checks[(scenario, cid, n)] = str(item.get("status", "?"))
    return checks


def expected_for(name, path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 5:
                sys.exit(f"{path}:{lineno}: expected 5 fields, got {len(parts)}")
            glob, scenario, cid, base, run = parts
            if fnmatch.fnmatch(name, glob):
                out[(scenario, cid)] = (base, run)
    return out


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    name, base_dir, run_dir, expected_file = sys.argv[1:]
    base, run = load(base_dir), load(run_dir)
    if not base:
        print(f"conformance {name}: the baseline has no results ({base_dir})")
        return 1
    if not run:
        print(f"conformance {name}: no results ({run_dir})")
        return 1
    expected = expected_for(name, expected_file)
    seen_expected = set()
    problems = []
    for key in sorted(set(base) | set(run)):
        scenario, cid, _ = key
        b, r = base.get(key, "-"), run.get(key, "-")
        if b == r:
            continue
        if expected.get((scenario, cid)) == (b, r):
            seen_expected.add((scenario, cid))
            continue
        problems.append(f"  {scenario} / {cid}: {b} directly, {r} through Gantry")
    for (scenario, cid), (b, r) in sorted(expected.items()):
        if (scenario, cid) not in seen_expected:
            problems.append(
                f"  {scenario} / {cid}: listed as {b} -> {r} in {expected_file}, "
                "but did not differ so (remove or fix the line)"
            )
    counts = {}
    for status in run.values():
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    if problems:
        print(f"conformance {name}: differs from the baseline:")
        print("\n".join(problems))
        return 1
    print(f"conformance {name}: {len(run)} checks as the baseline ({summary}; "
          f"{len(seen_expected)} expected differences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

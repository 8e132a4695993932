#!/usr/bin/env bash
# Installs the pinned npm packages the tests use (tests/interop/package-lock.json:
# the official MCP SDKs, the conformance suite, a Node 22 binary) into
# tests/interop/node_modules, once per lockfile. Prints the directory.
set -euo pipefail
dir="$(cd "$(dirname "$0")/.." && pwd)/tests/interop"
stamp="$dir/node_modules/.gantry-lock.sha256"
want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$want" >"$stamp"
fi
echo "$dir/node_modules"

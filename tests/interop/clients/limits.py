#!/usr/bin/env python3
"""The limits leg's Python client (../limits.sh), on the Python MCP SDK (`mcp`, pinned in
../requirements.txt): what it sees when Gantry rate-limits its tools/call, compared with a
direct connection to the same server.

    limits.py --stdio "<command line>" [--url-error URL] [--url-tool-result URL]
              [--mode auto|legacy|stateless] [--timeout-ms N]

--mode: Client(mode=...): "auto" (the default, the SDK's own: server/discover, then
initialize), "legacy" (initialize), "stateless" ("2026-07-28", adopted with no probe). Three scenarios, each on a connection of its own, each calling `echo` three
times and then tools/list:
  baseline     (front direct) the client spawns the server over stdio (--stdio);
  error        (front gantry) --url-error: Gantry with a 2/m rule on tools/call, answer "error";
  tool_result  (front gantry) --url-tool-result: the same rule with answer = "tool_result".
Prints one JSON line per check: {client, front, scenario, check, ok, detail[, seen]}.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import warnings
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp
from mcp import Client, StdioServerParameters, types

warnings.simplefilter("ignore")


MODES = {"auto": "auto", "legacy": "legacy", "stateless": "2026-07-28"}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--stdio")
    p.add_argument("--url-error")
    p.add_argument("--url-tool-result")
    p.add_argument("--mode", default="auto", choices=sorted(MODES))
    p.add_argument("--timeout-ms", type=int, default=10000)
    return p.parse_args()


OPTS = parse_args()
TIMEOUT = OPTS.timeout_ms / 1000
CLIENT = "py" if OPTS.mode == "auto" else f"py/{OPTS.mode}"


def emit(front: str, scenario: str, check: str, ok: bool, detail: Any, seen: Any = None) -> None:
    line: dict[str, Any] = {"client": CLIENT, "front": front, "scenario": scenario, "check": check, "ok": bool(ok),
                            "detail": str(detail)[:600]}
    if seen is not None:
        line["seen"] = seen
    print(json.dumps(line, default=str), flush=True)


def text(r: Any) -> str:
    return "\n".join(c.text for c in (getattr(r, "content", None) or []) if getattr(c, "type", None) == "text")


def essence(r: Any) -> str:
    """What a result is, for "the same as direct": content and isError (not _meta)."""
    d = r.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps({"content": d.get("content"), "isError": d.get("isError", False)}, sort_keys=True)


def err_line(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(err_line(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"[:400]


def describe(e: BaseException) -> dict[str, Any]:
    """What the SDK exposes on the exception it raised."""
    error = getattr(e, "error", None)
    return {
        "class": f"{type(e).__module__}.{type(e).__qualname__}",
        "mro": " < ".join(c.__name__ for c in type(e).__mro__[:-1]),
        "isinstance_MCPError": isinstance(e, mcp.MCPError),
        "code": getattr(e, "code", None),
        "error.code": getattr(error, "code", None),
        "error.data": getattr(error, "data", None),
        "error.message": getattr(error, "message", None),
        "str": str(e),
    }


DIRECT: dict[int, str] = {}


async def scenario(front: str, name: str, server: Any) -> None:
    def e(check: str, ok: bool, detail: Any, seen: Any = None) -> None:
        emit(front, name, check, ok, detail, seen)

    async with AsyncExitStack() as stack:
        try:
            client = Client(server, mode=MODES[OPTS.mode], read_timeout_seconds=TIMEOUT,
                            client_info=types.Implementation(name="interop-limits", version="1.0.0"))
            # No cancel scope around this: the client's task groups must outlive it (the
            # handshake is bounded by read_timeout_seconds; limits.sh bounds the process).
            await stack.enter_async_context(client)
            e("connect", True, f"protocol {client.protocol_version}")
        except BaseException as x:  # noqa: BLE001 - reported, not raised
            if isinstance(x, (KeyboardInterrupt, SystemExit)):
                raise
            e("connect", False, err_line(x))
            return
        for i in (1, 2, 3):
            want = f"Echo: limits-{i}"
            check = f"call {i}"
            r = err = None
            t0 = time.monotonic()
            try:
                with anyio.fail_after(TIMEOUT + 1):
                    r = await client.call_tool("echo", {"message": f"limits-{i}"}, read_timeout_seconds=TIMEOUT)
            except Exception as x:  # noqa: BLE001
                err = x
            ms = round((time.monotonic() - t0) * 1000)
            if i < 3 or name == "baseline":
                if err is not None:
                    e(check, False, f"raised {err_line(err)}", describe(err))
                    continue
                if name == "baseline":
                    DIRECT[i] = essence(r)
                    vs = ""
                elif i not in DIRECT:
                    vs = " (no direct run to compare)"
                elif DIRECT[i] == essence(r):
                    vs = " (= direct)"
                else:
                    vs = f" (direct: {DIRECT[i]}, here: {essence(r)})"
                same = name == "baseline" or i not in DIRECT or DIRECT[i] == essence(r)
                e(check, not r.is_error and text(r) == want and same,
                  f"{'isError: ' if r.is_error else ''}{text(r)}{vs} {ms} ms")
            elif name == "error":
                if err is None:
                    e(check, False, f"no error: {'isError: ' if r.is_error else ''}{text(r)}")
                    continue
                d = describe(err)
                data = d["error.data"] if isinstance(d["error.data"], dict) else {}
                problems = []
                if not d["isinstance_MCPError"]:
                    problems.append("not an mcp.MCPError")
                if d["error.code"] != -32029:
                    problems.append(f"error.code {d['error.code']}")
                ra = data.get("retryAfterMs")
                if not (isinstance(ra, (int, float)) and ra > 0):
                    problems.append(f"error.data['retryAfterMs'] {ra!r}")
                if data.get("rule") != "calls":
                    problems.append(f"error.data['rule'] {data.get('rule')!r}")
                e(check, not problems,
                  f"{', '.join(problems) + '; ' if problems else ''}raised {type(err).__name__} error.code={d['error.code']} "
                  f"error.data={json.dumps(d['error.data'])} message={json.dumps(d['error.message'])} {ms} ms", d)
            else:
                if err is not None:
                    e(check, False, f"raised {err_line(err)}", describe(err))
                    continue
                t = text(r)
                meta = (r.meta or {}).get("io.gantry/rateLimit")
                problems = []
                if r.is_error is not True:
                    problems.append(f"isError {r.is_error!r}")
                if "Rate limited by rule" not in t:
                    problems.append('no "Rate limited by rule"')
                if "retry in" not in t:
                    problems.append('no "retry in"')
                e(check, not problems,
                  f"{', '.join(problems) + '; ' if problems else ''}is_error={r.is_error} text={json.dumps(t)} {ms} ms",
                  {"class": type(r).__name__, "is_error": r.is_error, "text": t, "meta": meta})
                ok_meta = isinstance(meta, dict) and (meta.get("retryAfterMs") or 0) > 0 and meta.get("rule") == "calls"
                e("call 3 _meta", ok_meta,
                  f'_meta["io.gantry/rateLimit"] = {json.dumps(meta)}' if meta is not None
                  else f'no _meta["io.gantry/rateLimit"]: meta = {json.dumps(r.meta)}')
        try:
            with anyio.fail_after(TIMEOUT + 1):
                tools = [t.name for t in (await client.list_tools(cache_mode="bypass")).tools]
            e("session after", "echo" in tools,
              f"tools/list: {len(tools)} tools{', echo among them' if 'echo' in tools else ', no echo'}")
        except Exception as x:  # noqa: BLE001
            e("session after", False, f"tools/list raised {err_line(x)}")


async def amain() -> None:
    if OPTS.stdio:
        argv = shlex.split(OPTS.stdio)
        await scenario("direct", "baseline", StdioServerParameters(command=argv[0], args=argv[1:]))
    if OPTS.url_error:
        await scenario("gantry", "error", OPTS.url_error)
    if OPTS.url_tool_result:
        await scenario("gantry", "tool_result", OPTS.url_tool_result)


if __name__ == "__main__":
    anyio.run(amain)
    sys.stdout.flush()

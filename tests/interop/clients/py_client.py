#!/usr/bin/env python3
"""Interop client on the Python MCP SDK (`mcp`, pinned in ../requirements.txt).

    py_client.py --url URL [--transport streamable|sse] | --stdio "<command line>"
                 --era session|stateless|auto [--scenarios a,b]

--era session:   Client(mode="legacy"): initialize, 2025-11-25 (also the only choice for SSE).
--era stateless: Client(mode="2026-07-28"): the version is adopted with no probe and no initialize.
--era auto:      Client(mode="auto"), the SDK's default: server/discover, initialize if that fails.

Runs the same scenarios as scenarios.mjs (the TypeScript clients) and prints one JSON
object per check on stdout. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import sys
import time
import warnings
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp import Client, StdioServerParameters, types
from mcp.client.sse import sse_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

warnings.simplefilter("ignore")  # the session-era APIs are deprecated in this SDK; we test them on purpose

CALL_TIMEOUT = float(os.environ.get("INTEROP_CALL_TIMEOUT_MS", "10000")) / 1000
NOTIFY_WAIT = float(os.environ.get("INTEROP_NOTIFY_WAIT_MS", "3000")) / 1000
UPDATE_WAIT = float(os.environ.get("INTEROP_UPDATE_WAIT_MS", "3000")) / 1000
SCENARIO_TIMEOUT = 20.0
SCENARIOS = ["connect", "sampling", "elicitation", "roots", "progress", "logging", "resources", "concurrent-duplicate-ids"]
MODES = {"session": "legacy", "stateless": "2026-07-28", "auto": "auto"}
LOG_LEVEL_KEY = "io.modelcontextprotocol/logLevel"


def short(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= 300 else s[:300] + "…"


def err_msg(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(err_msg(x) for x in e.exceptions)
    s = str(e) or type(e).__name__
    code = getattr(e, "code", None)
    if code is None:
        code = getattr(getattr(e, "error", None), "code", None)
    if code is not None and str(code) not in s:
        s += f" (code {code})"
    return f"{type(e).__name__}: {s}"[:500]


def tool_text(r: Any) -> str:
    if r is None:
        return ""
    return "\n".join(c.text for c in (r.content or []) if getattr(c, "type", None) == "text")


async def wait_for(pred, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        await anyio.sleep(0.02)
    return pred()


class State:
    """What one connection's handlers saw."""

    def __init__(self) -> None:
        self.sampling: list[dict] = []
        self.elicitation: list[dict] = []
        self.roots_calls = 0
        self.roots = [{"uri": f"file:///interop-{secrets.token_hex(4)}", "name": "r"}]
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.updated: list[str] = []

    async def sampling_cb(self, _ctx, params: types.CreateMessageRequestParams):
        m = params.messages[-1]
        c = m.content[0] if isinstance(m.content, list) else m.content
        prompt = getattr(c, "text", None)
        self.sampling.append({"prompt": prompt, "maxTokens": params.max_tokens})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled:{prompt}"),
            model="interop-model",
            stop_reason="endTurn",
        )

    async def elicitation_cb(self, _ctx, params):
        self.elicitation.append({"message": getattr(params, "message", None)})
        return types.ElicitResult(action="accept", content={"name": "x"})

    async def roots_cb(self, _ctx):
        self.roots_calls += 1
        return types.ListRootsResult(roots=[types.Root(uri=r["uri"], name=r["name"]) for r in self.roots])

    async def logging_cb(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    async def message_handler(self, message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))


class Conn:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.version = client.protocol_version
        self.era = "stateless" if self.version in MODERN_PROTOCOL_VERSIONS else "session"

    async def list_tools(self) -> list[str]:
        return [t.name for t in (await self.client.list_tools()).tools]

    async def call_tool(self, name: str, args: dict, progress=None, log_level: str | None = None):
        meta = {LOG_LEVEL_KEY: log_level} if log_level else None
        return await self.client.call_tool(name, args, read_timeout_seconds=CALL_TIMEOUT, progress_callback=progress, meta=meta)

    async def list_resources(self) -> list[str]:
        return [str(r.uri) for r in (await self.client.list_resources(cache_mode="bypass")).resources]

    async def read_resource(self, uri: str):
        return await self.client.read_resource(uri, cache_mode="bypass")

    async def set_log_level(self, level: str) -> None:
        await self.client.set_logging_level(level)

    async def subscribe_session(self, uri: str) -> None:
        await self.client.subscribe_resource(uri)


async def open_conn(opts, st: State, stack: AsyncExitStack) -> Conn:
    mode = MODES[opts.era]
    if opts.stdio:
        argv = shlex.split(opts.stdio)
        server: Any = StdioServerParameters(command=argv[0], args=argv[1:])
    elif opts.transport == "sse":
        server = sse_client(opts.url)
    else:
        server = opts.url
    client = Client(
        server,
        mode=mode,
        read_timeout_seconds=CALL_TIMEOUT,
        sampling_callback=st.sampling_cb,
        elicitation_callback=st.elicitation_cb,
        list_roots_callback=st.roots_cb,
        logging_callback=st.logging_cb,
        message_handler=st.message_handler,
        client_info=types.Implementation(name="interop-py", version="1.0.0"),
    )
    # No cancel scope around this: the client's task groups must outlive it (the
    # handshake is bounded by read_timeout_seconds).
    await stack.enter_async_context(client)
    return Conn(client)


# --- scenarios -----------------------------------------------------------------


async def sampling(conn: Conn, st: State, emit, _opts) -> None:
    r = err = None
    try:
        r = await conn.call_tool("sample", {"prompt": "hi"})
    except Exception as e:
        err = err_msg(e)
    got = next((s for s in st.sampling if s["prompt"] == "hi"), None)
    emit("handler called", "pass" if got else "fail",
         f"prompt={got['prompt']} maxTokens={got['maxTokens']}" if got else f"handler calls: {st.sampling}; {err or tool_text(r)}")
    t = tool_text(r)
    ok = not err and not r.is_error and "sampled:hi" in t
    emit("result", "pass" if ok else "fail", err or (("isError: " if r.is_error else "") + t))


sampling.needs = ["sample"]  # type: ignore[attr-defined]
sampling.checks = ["handler called", "result"]  # type: ignore[attr-defined]


async def elicitation(conn: Conn, st: State, emit, _opts) -> None:
    r = err = None
    try:
        r = await conn.call_tool("elicit", {"message": "who?"})
    except Exception as e:
        err = err_msg(e)
    got = next((s for s in st.elicitation if s["message"] == "who?"), None)
    emit("handler called", "pass" if got else "fail",
         f"message={got['message']}" if got else f"handler calls: {st.elicitation}; {err or tool_text(r)}")
    t = tool_text(r)
    ok = not err and not r.is_error and "action=accept" in t and ('"name":"x"' in t or '"name": "x"' in t)
    emit("result", "pass" if ok else "fail", err or (("isError: " if r.is_error else "") + t))


elicitation.needs = ["elicit"]  # type: ignore[attr-defined]
elicitation.checks = ["handler called", "result"]  # type: ignore[attr-defined]


async def roots(conn: Conn, st: State, emit, _opts) -> None:
    r = err = None
    try:
        r = await conn.call_tool("roots", {})
    except Exception as e:
        err = err_msg(e)
    emit("handler called", "pass" if st.roots_calls else "fail",
         f"calls={st.roots_calls}" + ("" if st.roots_calls else f"; {err or tool_text(r)}"))
    t = tool_text(r)
    ok = not err and not r.is_error and st.roots[0]["uri"] in t
    emit("result", "pass" if ok else "fail", err or (("isError: " if r.is_error else "") + t))


roots.needs = ["roots"]  # type: ignore[attr-defined]
roots.checks = ["handler called", "result"]  # type: ignore[attr-defined]


async def progress(conn: Conn, st: State, emit, _opts) -> None:
    seen: list[float] = []

    async def on_progress(p: float, _total, _message) -> None:
        seen.append(p)

    r = err = None
    try:
        r = await conn.call_tool("progress", {"steps": 3}, progress=on_progress)
    except Exception as e:
        err = err_msg(e)
    await wait_for(lambda: len(seen) >= 3, 0.3)
    increasing = all(seen[i] > seen[i - 1] for i in range(1, len(seen)))
    emit("notifications", "pass" if len(seen) == 3 and increasing else "fail", f"progress values: {seen}")
    t = tool_text(r)
    emit("result", "pass" if not err and not r.is_error and t == "done 3" else "fail", err or t)


progress.needs = ["progress"]  # type: ignore[attr-defined]
progress.checks = ["notifications", "result"]  # type: ignore[attr-defined]


async def logging(conn: Conn, st: State, emit, _opts) -> None:
    tag = secrets.token_hex(3)
    level = None
    if conn.era == "session":
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                await conn.set_log_level("info")
            emit("set level", "pass", "logging/setLevel info")
        except Exception as e:
            emit("set level", "fail", err_msg(e))
    else:
        level = "info"
        emit("set level", "pass", "per-request _meta logLevel info")

    def data(p) -> str:
        return p.data if isinstance(p.data, str) else json.dumps(p.data, default=str)

    r1 = await conn.call_tool("log", {"level": "warning", "message": f"warn-{tag}"}, log_level=level)
    got = await wait_for(lambda: any(f"warn-{tag}" in data(p) for p in st.logs), NOTIFY_WAIT)
    emit("warning delivered", "pass" if got else "fail",
         "level=warning" if got else f"tool: {tool_text(r1)}; logs seen: {[data(p) for p in st.logs]}")
    r2 = await conn.call_tool("log", {"level": "debug", "message": f"debug-{tag}"}, log_level=level)
    await anyio.sleep(0.3 if got else 0.8)
    leaked = next((p for p in st.logs if f"debug-{tag}" in data(p)), None)
    emit("debug filtered", "pass" if leaked is None and tool_text(r2) == "logged" else "fail",
         f"debug message delivered: {data(leaked)}" if leaked else tool_text(r2))


logging.needs = ["log"]  # type: ignore[attr-defined]
logging.checks = ["set level", "warning delivered", "debug filtered"]  # type: ignore[attr-defined]


async def resources(conn: Conn, st: State, emit, _opts) -> None:
    try:
        with anyio.fail_after(CALL_TIMEOUT):
            uris = await conn.list_resources()
        emit("list", "pass" if "test://static" in uris else "fail", ",".join(uris))
    except Exception as e:
        emit("list", "fail", err_msg(e))
    try:
        with anyio.fail_after(CALL_TIMEOUT):
            r = await conn.read_resource("test://static")
        t = getattr(r.contents[0], "text", None) if r.contents else None
        emit("read", "pass" if t == "static text" else "fail", short(t if t is not None else str(r)))
    except Exception as e:
        emit("read", "fail", err_msg(e))
    uri = "test://watched"

    async def touch_and_wait() -> None:
        before = len(st.updated)
        r = await conn.call_tool("touch", {"uri": uri})
        got = await wait_for(lambda: uri in st.updated[before:], UPDATE_WAIT)
        emit("updated", "pass" if got else "fail",
             f"notifications/resources/updated {uri}" if got
             else f"no update within {UPDATE_WAIT:g} s (touch: {tool_text(r)}; updates seen: {st.updated})")

    if conn.era == "session":
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                await conn.subscribe_session(uri)
            emit("subscribe", "pass", "resources/subscribe")
        except Exception as e:
            emit("subscribe", "fail", err_msg(e))
            emit("updated", "fail", "not subscribed")
            return
        await touch_and_wait()
        return
    try:
        listen_cm = conn.client.listen(resource_subscriptions=[uri])
        sub = await listen_cm.__aenter__()
    except Exception as e:
        emit("subscribe", "fail", err_msg(e))
        emit("updated", "fail", "not subscribed")
        return
    try:
        if uri not in (sub.honored.resource_subscriptions or []):
            emit("subscribe", "fail", f"listen acknowledged without {uri}: {sub.honored}")
            emit("updated", "fail", "not subscribed")
            return
        emit("subscribe", "pass", "subscriptions/listen acknowledged")

        async def pump() -> None:
            try:
                async for ev in sub:
                    u = getattr(ev, "uri", None)
                    if u is not None:
                        st.updated.append(str(u))
            except Exception:
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            try:
                await touch_and_wait()
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.move_on_after(3):
            await listen_cm.__aexit__(None, None, None)


resources.needs = ["touch"]  # type: ignore[attr-defined]
resources.checks = ["list", "read", "subscribe", "updated"]  # type: ignore[attr-defined]


async def concurrent(conn: Conn, st: State, emit, opts) -> None:
    n, per = 3, 10
    has_slow = "slow" in opts.tools
    results: list[tuple[str, str]] = []
    conns: list[Conn | None] = [None] * n
    errors: list[str] = []
    ready = [anyio.Event() for _ in range(n)]
    done = anyio.Event()

    async def hold(i: int) -> None:
        # Each connection is opened and closed by its own task (anyio scopes must be
        # exited by the task that entered them), so the three open in parallel.
        try:
            async with AsyncExitStack() as stack:
                conns[i] = await open_conn(opts, State(), stack)
                ready[i].set()
                await done.wait()
        except Exception as e:
            errors.append(err_msg(e))
        finally:
            ready[i].set()

    async def one(i: int, j: int) -> None:
        if has_slow and j % 2 == 1:
            ms = 50 + i * per + j
            tool, args, want = "slow", {"ms": ms}, f"slept {ms}"
        else:
            tool, args, want = "echo", {"message": f"c{i}-m{j}"}, f"c{i}-m{j}"
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                got = tool_text(await conns[i].call_tool(tool, args))
        except Exception as e:
            got = f"error: {err_msg(e)}"
        results.append((want, got))

    async with anyio.create_task_group() as holders:
        for i in range(n):
            holders.start_soon(hold, i)
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                for ev in ready:
                    await ev.wait()
            if errors or None in conns:
                raise RuntimeError(f"could not open {n} connections: {errors}")
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    for j in range(per):
                        tg.start_soon(one, i, j)
        finally:
            done.set()
    bad = [{"want": w, "got": g} for w, g in results if w != g]
    emit("answers match", "pass" if not bad else "fail",
         f"{len(bad)}/{len(results)} wrong, e.g. {json.dumps(bad[:3])}" if bad else f"{len(results)} calls over {n} connections")


concurrent.needs = ["echo"]  # type: ignore[attr-defined]
concurrent.checks = ["answers match"]  # type: ignore[attr-defined]

SCENARIO_FNS = {
    "sampling": sampling,
    "elicitation": elicitation,
    "roots": roots,
    "progress": progress,
    "logging": logging,
    "resources": resources,
    "concurrent-duplicate-ids": concurrent,
}


async def run(opts) -> None:
    only = set(opts.scenarios.split(",")) if opts.scenarios else None

    def emit(scenario: str, check: str, status: str, detail: str = "") -> None:
        sys.stdout.write(json.dumps({"client": "py", "era": opts.era, "scenario": scenario, "check": check,
                                     "status": status, "detail": short(detail)}) + "\n")
        sys.stdout.flush()

    st = State()
    opts.tools = []
    async with AsyncExitStack() as stack:
        conn = None
        connect_error = None
        tools_error = None
        try:
            conn = await open_conn(opts, st, stack)
        except BaseException as e:  # noqa: BLE001 - anyio wraps transport failures in groups
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            connect_error = err_msg(e)
        if not only or "connect" in only:
            if conn:
                emit("connect", "connected", "pass", f"era={conn.era} version={conn.version}")
            else:
                emit("connect", "connected", "fail", connect_error)
        if conn:
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    opts.tools = await conn.list_tools()
                if not only or "connect" in only:
                    emit("connect", "tools listed", "pass" if opts.tools else "fail", ",".join(opts.tools))
            except Exception as e:
                tools_error = err_msg(e)
                if not only or "connect" in only:
                    emit("connect", "tools listed", "fail", tools_error)
        for name in SCENARIOS[1:]:
            if only and name not in only:
                continue
            fn = SCENARIO_FNS[name]
            if conn is None:
                for c in fn.checks:
                    emit(name, c, "fail", f"not connected: {connect_error}")
                continue
            if tools_error:
                for c in fn.checks:
                    emit(name, c, "fail", f"tools/list failed: {tools_error}")
                continue
            missing = [t for t in fn.needs if t not in opts.tools]
            if missing:
                for c in fn.checks:
                    emit(name, c, "skip", f"server lacks tool(s) {','.join(missing)}")
                continue
            done: set[str] = set()

            def scoped(check: str, status: str, detail: str = "", _name=name) -> None:
                done.add(check)
                emit(_name, check, status, detail)

            try:
                with anyio.fail_after(SCENARIO_TIMEOUT):
                    await fn(conn, st, scoped, opts)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                for c in fn.checks:
                    if c not in done:
                        emit(name, c, "fail", f"scenario threw: {err_msg(e)}")
                done.update(fn.checks)
            for c in fn.checks:
                if c not in done:
                    emit(name, c, "fail", "check not reached")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url")
    p.add_argument("--transport", default="streamable", choices=["streamable", "sse"])
    p.add_argument("--stdio")
    p.add_argument("--era", default="session", choices=list(MODES))
    p.add_argument("--scenarios")
    opts = p.parse_args()
    if bool(opts.url) == bool(opts.stdio):
        p.error('give exactly one of --url URL or --stdio "<command line>"')
    try:
        anyio.run(run, opts)
    except BaseException as e:  # noqa: BLE001 - closing the SDK's transports may raise; the checks are out
        if isinstance(e, KeyboardInterrupt):
            raise
        sys.stderr.write(f"py_client: after the scenarios: {err_msg(e)}\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

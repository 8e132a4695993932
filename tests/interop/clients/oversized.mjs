// The official MCP TypeScript SDK v1 client (over Node's fetch) calling a tool with an
// argument of --bytes bytes, --calls times on one connection:
//   node tests/interop/clients/oversized.mjs --url http://HOST:PORT/mcp --bytes N [--calls 3]
//        [--uplink-ms MS]
// --uplink-ms: a slow uplink: every request body is sent as a stream (chunked, no
// Content-Length), 256 KiB every MS milliseconds, as a client far from the server would.
// Prints ONE JSON line: {"outcomes":[{"ok":true,"text_bytes":N} | {"ok":false,"status":413|null,"error":".."}],
// "after":{"ok":..} } where "after" is a small call made once the large ones are done.
import { Client, StreamableHTTPClientTransport } from '../oidc_deps.mjs';
import { consoleToStderr, parseArgs, printLine, withTimeout } from '../../oidc/util.mjs';

consoleToStderr();
const args = parseArgs({ url: 'string', bytes: 'string', calls: 'string', 'uplink-ms': 'string' });
const bytes = Number(args.bytes);
const calls = Number(args.calls ?? '3');

async function call(client, message) {
  try {
    const r = await withTimeout(
      client.callTool({ name: 'echo', arguments: { message } }),
      20000,
      'tools/call',
    );
    return { ok: true, text_bytes: r.content?.[0]?.text?.length ?? null };
  } catch (e) {
    // The transport's error, and what lies under it (Node's fetch: e.cause.code).
    const cause = e?.cause?.code ?? e?.cause?.message;
    // StreamableHTTPError carries the HTTP status as `code`.
    return { ok: false, status: e?.code ?? null, error: `${e?.message ?? e}${cause ? ` (cause: ${cause})` : ''}` };
  }
}

/** fetch whose request bodies go out 256 KiB every `ms` milliseconds. */
function slowUplink(ms) {
  return (url, init = {}) => {
    if (typeof init.body !== 'string') return fetch(url, init);
    const bytes = new TextEncoder().encode(init.body);
    const chunk = 256 * 1024;
    let offset = 0;
    const body = new ReadableStream({
      async pull(controller) {
        if (offset >= bytes.length) return controller.close();
        await new Promise((resolve) => setTimeout(resolve, ms));
        controller.enqueue(bytes.subarray(offset, offset + chunk));
        offset += chunk;
      },
    });
    return fetch(url, { ...init, body, duplex: 'half' });
  };
}

const uplinkMs = args['uplink-ms'] === undefined ? undefined : Number(args['uplink-ms']);
const transport = new StreamableHTTPClientTransport(new URL(args.url), {
  ...(uplinkMs === undefined ? {} : { fetch: slowUplink(uplinkMs) }),
});
const client = new Client({ name: 'oversized', version: '1.0.0' });
await withTimeout(client.connect(transport), 10000, 'connect');
const outcomes = [];
for (let i = 0; i < calls; i++) outcomes.push(await call(client, 'x'.repeat(bytes)));
const after = await call(client, 'small');
printLine({ outcomes, after });
await client.close();

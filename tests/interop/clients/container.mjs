// A client on the official TypeScript SDK (@modelcontextprotocol/sdk, v1) for the
// container checks of docker/ci-images.sh: initialize, tools/list, then each call in
// order, through Gantry's Streamable HTTP endpoint.
//
//   node clients/container.mjs --url URL [--tool NAME]... \
//        [--call NAME JSON [--expect TEXT]]... [--timeout-ms N]
//
// --tool: a tool tools/list must name. --call: a tools/call with these arguments; the
// call must not be an error, and with --expect its text content must contain TEXT.
// --timeout-ms bounds each request (default 90000: the first initialize through a
// `npx -y` or `uvx` backend waits for the package to be fetched). One line per step on
// stdout; exit status 0 when every step passed, 1 otherwise.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const o = { url: null, tools: [], calls: [], timeout: 90000 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--url') o.url = argv[++i];
  else if (a === '--tool') o.tools.push(argv[++i]);
  else if (a === '--call') {
    const name = argv[++i];
    o.calls.push({ name, args: JSON.parse(argv[++i] ?? '{}'), expect: null });
  } else if (a === '--expect') {
    if (!o.calls.length) throw new Error('--expect follows a --call');
    o.calls[o.calls.length - 1].expect = argv[++i];
  } else if (a === '--timeout-ms') o.timeout = Number(argv[++i]);
  else throw new Error(`unknown argument: ${a}`);
}
if (!o.url) throw new Error('--url URL is required');

// Nothing may hang: the whole run is bounded too.
const overall = setTimeout(() => {
  console.log('FAIL: the client did not finish in time');
  process.exit(1);
}, o.timeout * (2 + o.calls.length) + 5000);
overall.unref();

const short = (s, n = 240) => (s.length > n ? `${s.slice(0, n)}…` : s);
const text = (result) =>
  (result.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');

let failed = 0;
const client = new Client({ name: 'gantry-container-check', version: '1.0.0' });
try {
  const transport = new StreamableHTTPClientTransport(new URL(o.url));
  await client.connect(transport, { timeout: o.timeout });
  const info = client.getServerVersion();
  console.log(`initialize: ok (server ${info?.name} ${info?.version}, protocol ${transport.protocolVersion ?? '?'})`);

  const tools = (await client.listTools(undefined, { timeout: o.timeout })).tools.map((t) => t.name);
  const missing = o.tools.filter((t) => !tools.includes(t));
  console.log(`tools/list: ${missing.length ? 'FAIL' : 'ok'} (${tools.length} tools: ${short(tools.join(', '))})`);
  if (missing.length) {
    console.log(`  missing: ${missing.join(', ')}`);
    failed++;
  }

  for (const c of o.calls) {
    const result = await client.callTool({ name: c.name, arguments: c.args }, CallToolResultSchema, {
      timeout: o.timeout,
    });
    const got = text(result);
    const ok = !result.isError && (c.expect == null || got.includes(c.expect));
    console.log(`tools/call ${c.name}: ${ok ? 'ok' : 'FAIL'} -> ${short(got.replace(/\s+/g, ' '))}`);
    if (!ok) {
      if (result.isError) console.log('  the result is an error');
      if (c.expect != null && !got.includes(c.expect)) console.log(`  expected the text to contain: ${c.expect}`);
      failed++;
    }
  }
} catch (e) {
  console.log(`FAIL: ${e?.message ?? e}`);
  failed++;
} finally {
  await client.close().catch(() => {});
}
process.exit(failed ? 1 : 0);

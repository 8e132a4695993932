// Helpers shared by the interop servers: command line, node:http <-> fetch
// Request/Response bridging, the fixture texts every server returns.
import { createServer } from 'node:http';
import { Readable } from 'node:stream';

/** `--http HOST:PORT` (port 0 = any free port) or stdio when absent. */
export function parseArgs(argv = process.argv.slice(2)) {
  const out = { http: null };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--http') out.http = argv[++i];
    else throw new Error(`unknown argument: ${argv[i]}`);
  }
  return out;
}

export const SAMPLE_MAX_TOKENS = 100;
export const ELICIT_SCHEMA = {
  type: 'object',
  properties: { name: { type: 'string' } },
  required: ['name'],
};
export const STATIC_TEXT = 'static text';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function text(s, isError = false) {
  return isError ? { content: [{ type: 'text', text: s }], isError: true } : { content: [{ type: 'text', text: s }] };
}

export function errText(feature, e) {
  return text(`${feature} not supported or error: ${e?.message ?? e}`, true);
}

/** JSON with sorted keys, compact (same rendering as tests/fixtures/dual_era_server.py). */
export function sortedJson(v) {
  if (Array.isArray(v)) return `[${v.map(sortedJson).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${sortedJson(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v ?? null);
}

/** Starts node:http on HOST:PORT and announces the URL on stderr. */
export function listen(spec, handler) {
  const idx = spec.lastIndexOf(':');
  const host = spec.slice(0, idx);
  const port = Number(spec.slice(idx + 1));
  const server = createServer((req, res) => {
    Promise.resolve(handler(req, res)).catch((e) => {
      process.stderr.write(`request failed: ${e?.stack ?? e}\n`);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  server.listen(port, host, () => {
    const a = server.address();
    process.stderr.write(`listening on http://${a.address}:${a.port}/mcp\n`);
  });
  return server;
}

/** node:http request -> web Request (the body is read whole first). */
export async function toWebRequest(req, res) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = Buffer.concat(chunks);
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (Array.isArray(v)) v.forEach((x) => headers.append(k, x));
    else if (v !== undefined) headers.set(k, v);
  }
  const ac = new AbortController();
  res.once('close', () => ac.abort());
  const init = { method: req.method, headers, signal: ac.signal };
  if (req.method !== 'GET' && req.method !== 'HEAD' && body.length) init.body = body;
  return new Request(`http://${req.headers.host ?? 'localhost'}${req.url}`, init);
}

/** web Response -> node:http response, streaming the body. */
export async function sendWebResponse(res, response) {
  const headers = {};
  response.headers.forEach((v, k) => {
    headers[k] = v;
  });
  res.writeHead(response.status, headers);
  if (!response.body) return res.end();
  const body = Readable.fromWeb(response.body);
  res.on('close', () => body.destroy());
  body.on('error', () => res.end());
  body.pipe(res);
}

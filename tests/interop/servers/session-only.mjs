// A session-era-only MCP server written with the TypeScript SDK v1
// (@modelcontextprotocol/sdk McpServer): 2025-11-25 and older, no server/discover.
//   node servers/session-only.mjs                       stdio
//   node servers/session-only.mjs --http 127.0.0.1:0    Streamable HTTP at /mcp (sessions)
// Tool set: see tests/interop/README.md.
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CreateMessageResultSchema,
  ElicitResultSchema,
  ListRootsResultSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { ELICIT_SCHEMA, SAMPLE_MAX_TOKENS, STATIC_TEXT, errText, listen, parseArgs, sleep, sortedJson, text } from './common.mjs';

/** Every live connection (one McpServer each) with the URIs it subscribed to. */
const connections = new Set();

function build() {
  const mcp = new McpServer(
    { name: 'interop-session-only', version: '1.0.0' },
    { capabilities: { tools: {}, resources: { subscribe: true }, logging: {} } },
  );
  const conn = { mcp, subs: new Set() };
  connections.add(conn);
  const srv = mcp.server;

  mcp.registerTool('echo', { description: 'Echoes the message.', inputSchema: { message: z.string() } }, async ({ message }) =>
    text(message),
  );
  mcp.registerTool('sample', { description: 'Asks the client for sampling.', inputSchema: { prompt: z.string() } }, async ({ prompt }, extra) => {
    try {
      const r = await extra.sendRequest(
        {
          method: 'sampling/createMessage',
          params: { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: SAMPLE_MAX_TOKENS },
        },
        CreateMessageResultSchema,
      );
      const c = Array.isArray(r.content) ? r.content[0] : r.content;
      return text(`LLM response: ${c?.text}`);
    } catch (e) {
      return errText('Sampling', e);
    }
  });
  mcp.registerTool('elicit', { description: 'Asks the client for input.', inputSchema: { message: z.string() } }, async ({ message }, extra) => {
    try {
      const r = await extra.sendRequest(
        { method: 'elicitation/create', params: { mode: 'form', message, requestedSchema: ELICIT_SCHEMA } },
        ElicitResultSchema,
      );
      return text(`User response: action=${r.action}, content=${sortedJson(r.content ?? null)}`);
    } catch (e) {
      return errText('Elicitation', e);
    }
  });
  mcp.registerTool('roots', { description: "Lists the client's roots." }, async (extra) => {
    try {
      const r = await extra.sendRequest({ method: 'roots/list' }, ListRootsResultSchema);
      return text(JSON.stringify(r.roots));
    } catch (e) {
      return errText('Roots', e);
    }
  });
  mcp.registerTool('progress', { description: 'Sends progress.', inputSchema: { steps: z.number().int() } }, async ({ steps }, extra) => {
    const token = extra._meta?.progressToken;
    for (let i = 1; i <= steps; i++) {
      if (token !== undefined) {
        await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: steps } });
      }
      await sleep(10);
    }
    // The TypeScript SDK clients dispatch notifications a microtask late: a progress
    // notification read together with the response would be dropped. Leave a gap.
    await sleep(50);
    return text(`done ${steps}`);
  });
  mcp.registerTool(
    'log',
    { description: 'Sends a log message.', inputSchema: { level: z.string(), message: z.string() } },
    async ({ level, message }, extra) => {
      // The level set with logging/setLevel is honoured (the SDK's own filter), and the
      // message is sent on the call (its HTTP response stream).
      if (!srv.isMessageIgnored(level, extra.sessionId)) {
        await extra.sendNotification({ method: 'notifications/message', params: { level, logger: 'interop', data: message } });
      }
      return text('logged');
    },
  );
  mcp.registerTool('touch', { description: 'Announces an update of a resource.', inputSchema: { uri: z.string() } }, async ({ uri }) => {
    for (const c of connections) {
      if (c.subs.has(uri)) await c.mcp.server.sendResourceUpdated({ uri }).catch(() => {});
    }
    return text('touched');
  });
  mcp.registerTool('slow', { description: 'Sleeps.', inputSchema: { ms: z.number() } }, async ({ ms }) => {
    await sleep(ms);
    return text(`slept ${ms}`);
  });

  mcp.registerResource('static', 'test://static', { mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: STATIC_TEXT }],
  }));
  mcp.registerResource('watched', 'test://watched', { mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: `watched ${Date.now()}` }],
  }));
  srv.setRequestHandler(SubscribeRequestSchema, async (req) => {
    conn.subs.add(req.params.uri);
    return {};
  });
  srv.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    conn.subs.delete(req.params.uri);
    return {};
  });
  mcp.server.onclose = () => connections.delete(conn);
  return mcp;
}

const args = parseArgs();
if (!args.http) {
  await build().connect(new StdioServerTransport());
} else {
  const transports = new Map();
  listen(args.http, async (req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    let body;
    if (req.method === 'POST') {
      const chunks = [];
      for await (const c of req) chunks.push(c);
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
        return;
      }
    }
    const sid = req.headers['mcp-session-id'];
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport) {
      if (sid || req.method !== 'POST' || !isInitializeRequest(body)) {
        res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: sid ? 'Session not found' : 'Bad Request: no session' } }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      const t = transport;
      t.onclose = () => {
        if (t.sessionId) transports.delete(t.sessionId);
      };
      await build().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  });
}

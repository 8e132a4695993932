// The interop tool set on the TypeScript SDK v2 (@modelcontextprotocol/server), shared by
// dual-era.mjs (session-era push APIs: the realistic server whose stateless answers lose
// sampling, elicitation and roots) and stateless-only.mjs (2026-07-28 only, multi
// round-trip `inputRequired` for everything that needs the client).
import { randomUUID } from 'node:crypto';
import {
  McpServer,
  WebStandardStreamableHTTPServerTransport,
  createMcpHandler,
  inputRequired,
  inputResponse,
  isLegacyRequest,
} from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';
import {
  ELICIT_SCHEMA,
  SAMPLE_MAX_TOKENS,
  STATIC_TEXT,
  errText,
  listen,
  parseArgs,
  sendWebResponse,
  sleep,
  sortedJson,
  text,
  toWebRequest,
} from './common.mjs';

const sampleParams = (prompt) => ({
  messages: [{ role: 'user', content: { type: 'text', text: prompt } }],
  maxTokens: SAMPLE_MAX_TOKENS,
});
const samplingText = (r) => {
  const c = Array.isArray(r.content) ? r.content[0] : r.content;
  return `LLM response: ${c?.text}`;
};

/**
 * Serves the tool set. opts.name: serverInfo name; opts.mrtr: tools that need the client
 * use inputRequired (else the session-era push APIs); opts.legacy: serve the session era.
 */
export function serve({ name, mrtr, legacy }) {
  const args = parseArgs();
  /** Live instances that can send resources/updated: { server, era, subs }. */
  const live = new Set();
  let httpHandler = null;

  const touch = async (uri) => {
    for (const c of live) {
      if (c.era === 'legacy' && !c.subs.has(uri)) continue;
      // A modern stdio instance: the SDK's listen router delivers it to the
      // subscriptions/listen streams that asked for this URI.
      await c.server.server.sendResourceUpdated({ uri }).catch(() => {});
    }
    httpHandler?.notify.resourceUpdated(uri);
  };

  const factory = (ctx, track = true) => {
    const mcp = new McpServer(
      { name, version: '1.0.0' },
      { capabilities: { tools: {}, resources: { subscribe: true }, logging: {} } },
    );
    const conn = { server: mcp, era: ctx.era, subs: new Set() };
    if (track) live.add(conn);

    mcp.registerTool('echo', { description: 'Echoes the message.', inputSchema: z.object({ message: z.string() }) }, async ({ message }) =>
      text(message),
    );
    mcp.registerTool('sample', { description: 'Asks the client for sampling.', inputSchema: z.object({ prompt: z.string() }) }, async ({ prompt }, c) => {
      if (mrtr) {
        const r = inputResponse(c.mcpReq.inputResponses, 'sample');
        if (r.kind === 'sampling') return text(samplingText(r.result));
        return inputRequired({ inputRequests: { sample: inputRequired.createMessage(sampleParams(prompt)) } });
      }
      try {
        return text(samplingText(await c.mcpReq.requestSampling(sampleParams(prompt))));
      } catch (e) {
        return errText('Sampling', e);
      }
    });
    mcp.registerTool('elicit', { description: 'Asks the client for input.', inputSchema: z.object({ message: z.string() }) }, async ({ message }, c) => {
      if (mrtr) {
        const r = inputResponse(c.mcpReq.inputResponses, 'elicit');
        if (r.kind === 'elicit') return text(`User response: action=${r.action}, content=${sortedJson(r.content ?? null)}`);
        return inputRequired({ inputRequests: { elicit: inputRequired.elicit({ message, requestedSchema: ELICIT_SCHEMA }) } });
      }
      try {
        const r = await c.mcpReq.elicitInput({ mode: 'form', message, requestedSchema: ELICIT_SCHEMA });
        return text(`User response: action=${r.action}, content=${sortedJson(r.content ?? null)}`);
      } catch (e) {
        return errText('Elicitation', e);
      }
    });
    mcp.registerTool('roots', { description: "Lists the client's roots." }, async (c) => {
      if (mrtr) {
        const r = inputResponse(c.mcpReq.inputResponses, 'roots');
        if (r.kind === 'roots') return text(JSON.stringify(r.roots));
        return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
      }
      try {
        return text(JSON.stringify((await mcp.server.listRoots()).roots));
      } catch (e) {
        return errText('Roots', e);
      }
    });
    mcp.registerTool('progress', { description: 'Sends progress.', inputSchema: z.object({ steps: z.number().int() }) }, async ({ steps }, c) => {
      const token = c.mcpReq._meta?.progressToken;
      for (let i = 1; i <= steps; i++) {
        if (token !== undefined) {
          await c.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: steps } });
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
      { description: 'Sends a log message.', inputSchema: z.object({ level: z.enum(['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency']), message: z.string() }) },
      async ({ level, message }, c) => {
        await c.mcpReq.log(level, message, 'interop');
        return text('logged');
      },
    );
    mcp.registerTool('touch', { description: 'Announces an update of a resource.', inputSchema: z.object({ uri: z.string() }) }, async ({ uri }) => {
      await touch(uri);
      return text('touched');
    });
    mcp.registerTool('slow', { description: 'Sleeps.', inputSchema: z.object({ ms: z.number() }) }, async ({ ms }) => {
      await sleep(ms);
      return text(`slept ${ms}`);
    });
    mcp.registerResource('static', 'test://static', { mimeType: 'text/plain' }, async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'text/plain', text: STATIC_TEXT }],
    }));
    mcp.registerResource('watched', 'test://watched', { mimeType: 'text/plain' }, async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'text/plain', text: `watched ${Date.now()}` }],
    }));
    if (ctx.era === 'legacy') {
      mcp.server.setRequestHandler('resources/subscribe', async (req) => {
        conn.subs.add(req.params.uri);
        return {};
      });
      mcp.server.setRequestHandler('resources/unsubscribe', async (req) => {
        conn.subs.delete(req.params.uri);
        return {};
      });
    }
    mcp.server.onclose = () => live.delete(conn);
    return mcp;
  };

  if (!args.http) {
    // One instance per connection (plus a discarded one for a server/discover probe).
    serveStdio((ctx) => factory(ctx), { legacy: legacy ? 'serve' : 'reject', onerror: (e) => process.stderr.write(`${e.message}\n`) });
    return;
  }

  // HTTP: 2026-07-28 requests go to createMcpHandler (one instance per request: not
  // tracked, resource updates reach listen streams through handler.notify). The session
  // era, when served, is the SDK's sessionful Streamable HTTP transport routed by
  // isLegacyRequest, as the SDK documents for servers that keep 2025 sessions.
  httpHandler = createMcpHandler((ctx) => factory(ctx, false), { legacy: 'reject', onerror: (e) => process.stderr.write(`${e.message}\n`) });
  const sessions = new Map();
  listen(args.http, async (req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    const request = await toWebRequest(req, res);
    if (!legacy || !(await isLegacyRequest(request))) {
      await sendWebResponse(res, await httpHandler.fetch(request));
      return;
    }
    const sid = request.headers.get('mcp-session-id');
    let transport = sid ? sessions.get(sid) : undefined;
    if (!transport) {
      let body = null;
      if (request.method === 'POST') body = await request.clone().json().catch(() => null);
      if (sid || body?.method !== 'initialize') {
        res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: sid ? 'Session not found' : 'Bad Request: no session' } }));
        return;
      }
      transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => sessions.set(id, transport),
        onsessionclosed: (id) => sessions.delete(id),
      });
      await factory({ era: 'legacy' }).connect(transport);
    }
    await sendWebResponse(res, await transport.handleRequest(request));
  });
}

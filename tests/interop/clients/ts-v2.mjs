// Interop client on the TypeScript SDK v2 (@modelcontextprotocol/client).
//   node clients/ts-v2.mjs --url URL [--transport streamable|sse] | --stdio "<command line>"
//        --era session|stateless|auto [--scenarios a,b]
// --era session:   versionNegotiation 'legacy' (the SDK's default): initialize, 2025-11-25.
// --era stateless: versionNegotiation { pin: '2026-07-28' }: no initialize, no fallback.
// --era auto:      versionNegotiation 'auto': server/discover first, initialize if the
//                  server is not of the 2026-07-28 era.
import { Client, LOG_LEVEL_META_KEY, SSEClientTransport, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { CALL_TIMEOUT_MS, main, splitCommand } from './scenarios.mjs';

const MODES = { session: 'legacy', stateless: { pin: '2026-07-28' }, auto: 'auto' };

function makeAdapter(opts) {
  if (!(opts.era in MODES)) {
    process.stderr.write(`ts-v2: --era must be session, stateless or auto (asked: ${opts.era})\n`);
    process.exit(2);
  }
  return {
    async open({ handlers }) {
      const client = new Client(
        { name: 'interop-ts-v2', version: '1.0.0' },
        {
          capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } },
          versionNegotiation: { mode: MODES[opts.era], probe: { timeoutMs: 3000 } },
        },
      );
      client.setRequestHandler('sampling/createMessage', (req) => handlers.sampling(req.params));
      client.setRequestHandler('elicitation/create', (req) => handlers.elicitation(req.params));
      client.setRequestHandler('roots/list', () => handlers.roots());
      client.setNotificationHandler('notifications/message', (n) => handlers.log(n.params));
      client.setNotificationHandler('notifications/resources/updated', (n) => handlers.updated(n.params.uri));
      let transport;
      if (opts.stdio) {
        const [command, ...args] = splitCommand(opts.stdio);
        transport = new StdioClientTransport({ command, args, stderr: 'inherit' });
      } else if (opts.transport === 'sse') {
        transport = new SSEClientTransport(new URL(opts.url));
      } else {
        transport = new StreamableHTTPClientTransport(new URL(opts.url));
      }
      await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
      // A tap on what the transport delivers, before the SDK dispatches it: the SDK runs
      // notification handlers a microtask late, so a notification read together with the
      // call's response can miss its progress callback (see README). The scenarios tell
      // the two apart.
      const wire = [];
      const onmessage = transport.onmessage;
      transport.onmessage = (msg, extra) => {
        if (msg && msg.method && msg.id === undefined) wire.push(msg);
        return onmessage?.call(transport, msg, extra);
      };
      const era = client.getProtocolEra() === 'modern' ? 'stateless' : 'session';
      const subs = [];
      return {
        era,
        version: client.getNegotiatedProtocolVersion(),
        wire,
        async listTools() {
          return (await client.listTools()).tools.map((t) => t.name);
        },
        callTool(name, args, { onprogress, logLevel } = {}) {
          const params = { name, arguments: args };
          if (logLevel) params._meta = { [LOG_LEVEL_META_KEY]: logLevel };
          return client.callTool(params, { onprogress, timeout: CALL_TIMEOUT_MS });
        },
        async listResources() {
          return (await client.listResources(undefined, { cacheMode: 'bypass' })).resources.map((r) => r.uri);
        },
        readResource(uri) {
          return client.readResource({ uri }, { cacheMode: 'bypass' });
        },
        setLogLevel(level) {
          return client.setLoggingLevel(level);
        },
        async subscribe(uri) {
          if (era === 'session') {
            await client.subscribeResource({ uri });
            return { close: () => client.unsubscribeResource({ uri }) };
          }
          const sub = await client.listen({ resourceSubscriptions: [uri] }, { timeout: CALL_TIMEOUT_MS });
          subs.push(sub);
          if (!sub.honoredFilter?.resourceSubscriptions?.includes(uri)) {
            await sub.close();
            throw new Error(`listen acknowledged without ${uri}: ${JSON.stringify(sub.honoredFilter)}`);
          }
          return sub;
        },
        async close() {
          for (const s of subs) await s.close().catch(() => {});
          if (transport.terminateSession && era === 'session') await transport.terminateSession().catch(() => {});
          await client.close();
        },
      };
    },
  };
}

await main(makeAdapter, 'ts-v2');

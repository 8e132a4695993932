// Interop client on the TypeScript SDK v1 (@modelcontextprotocol/sdk): session era only.
//   node clients/ts-v1.mjs --url URL [--transport streamable|sse] | --stdio "<command line>"
//        [--era session] [--scenarios a,b]
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { CALL_TIMEOUT_MS, main, splitCommand } from './scenarios.mjs';

function makeAdapter(opts) {
  if (opts.era !== 'session') {
    process.stderr.write(`ts-v1 speaks only the session era (asked: ${opts.era})\n`);
    process.exit(2);
  }
  return {
    async open({ handlers }) {
      const client = new Client(
        { name: 'interop-ts-v1', version: '1.0.0' },
        { capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } } },
      );
      client.setRequestHandler(CreateMessageRequestSchema, (req) => handlers.sampling(req.params));
      client.setRequestHandler(ElicitRequestSchema, (req) => handlers.elicitation(req.params));
      client.setRequestHandler(ListRootsRequestSchema, () => handlers.roots());
      client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => handlers.log(n.params));
      client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => handlers.updated(n.params.uri));
      let transport;
      if (opts.stdio) {
        const [command, ...args] = splitCommand(opts.stdio);
        transport = new StdioClientTransport({ command, args, stderr: 'inherit' });
      } else if (opts.transport === 'sse') {
        transport = new SSEClientTransport(new URL(opts.url));
      } else {
        transport = new StreamableHTTPClientTransport(new URL(opts.url));
      }
      let negotiated;
      const setVersion = transport.setProtocolVersion?.bind(transport);
      transport.setProtocolVersion = (v) => {
        negotiated = v;
        setVersion?.(v);
      };
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
      return {
        era: 'session',
        version: negotiated,
        wire,
        async listTools() {
          return (await client.listTools()).tools.map((t) => t.name);
        },
        callTool(name, args, { onprogress } = {}) {
          return client.callTool({ name, arguments: args }, CallToolResultSchema, { onprogress, timeout: CALL_TIMEOUT_MS });
        },
        async listResources() {
          return (await client.listResources()).resources.map((r) => r.uri);
        },
        readResource(uri) {
          return client.readResource({ uri });
        },
        setLogLevel(level) {
          return client.setLoggingLevel(level);
        },
        async subscribe(uri) {
          await client.subscribeResource({ uri });
          return { close: () => client.unsubscribeResource({ uri }) };
        },
        async close() {
          if (transport.terminateSession) await transport.terminateSession().catch(() => {});
          await client.close();
        },
      };
    },
  };
}

await main(makeAdapter, 'ts-v1');

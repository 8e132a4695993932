// An MCP server (TypeScript SDK v1 McpServer, stateless Streamable HTTP) protected by the
// SDK's own requireBearerAuth + mcpAuthMetadataRouter, verifying the provider's JWT access
// tokens with jose against its JWKS. The "direct" baseline of the OAuth tests.
//   node tests/oidc/protected_server.mjs --issuer http://127.0.0.1:PORT[/path] [--port 0]
// Prints {"url":"http://127.0.0.1:<port>/mcp","resource_metadata":"..."} on stdout.
// Tools: echo {message} (needs mcp:read), secret (needs mcp:read + mcp:admin; without
// mcp:admin: 403 insufficient_scope, scope="mcp:read mcp:admin").
import {
  InvalidTokenError,
  McpServer,
  StreamableHTTPServerTransport,
  discoverAuthorizationServerMetadata,
  express,
  getOAuthProtectedResourceMetadataUrl,
  jose,
  mcpAuthMetadataRouter,
  requireBearerAuth,
  z,
} from '../interop/oidc_deps.mjs';
import { consoleToStderr, exitOnEofAndSignals, parseArgs, printLine, withTimeout } from './util.mjs';

consoleToStderr();
const args = parseArgs({ issuer: 'string', port: 'string', scopes: 'string', 'no-stdin': 'bool' });
if (!args.issuer) throw new Error('--issuer URL is required');
const READ = 'mcp:read';
const ADMIN = 'mcp:admin';
const SCOPES = (args.scopes ?? 'mcp:read mcp:write mcp:admin').split(/\s+/).filter(Boolean);

// The authorization server's metadata (the SDK's discovery: RFC 8414 then OIDC forms).
const asMeta = await withTimeout(discoverAuthorizationServerMetadata(new URL(args.issuer)), 10000, 'authorization server discovery');
if (!asMeta) throw new Error(`no authorization server metadata for ${args.issuer}`);
const jwks = jose.createRemoteJWKSet(new URL(asMeta.jwks_uri), { timeoutDuration: 5000 });

const app = express();
const http = await new Promise((resolve, reject) => {
  const s = app.listen(Number(args.port ?? 0), '127.0.0.1', (err) => (err ? reject(err) : resolve(s)));
});
const url = `http://127.0.0.1:${http.address().port}/mcp`;
const resourceMetadataUrl = getOAuthProtectedResourceMetadataUrl(new URL(url));

/** Token verification: signature (JWKS), iss, aud = this server's URL exactly, typ at+jwt. */
const verifier = {
  async verifyAccessToken(token) {
    let payload;
    try {
      ({ payload } = await jose.jwtVerify(token, jwks, { issuer: asMeta.issuer, audience: url, typ: 'at+jwt', clockTolerance: 5 }));
    } catch (e) {
      throw new InvalidTokenError(`token rejected: ${e.code ?? ''} ${e.message}`.trim());
    }
    return {
      token,
      clientId: String(payload.client_id ?? ''),
      scopes: typeof payload.scope === 'string' ? payload.scope.split(' ').filter(Boolean) : [],
      expiresAt: payload.exp,
      resource: new URL(String(payload.aud)),
      extra: { sub: payload.sub },
    };
  },
};
const readAuth = requireBearerAuth({ verifier, requiredScopes: [READ], resourceMetadataUrl, expectedResource: new URL(url) });
const adminAuth = requireBearerAuth({ verifier, requiredScopes: [READ, ADMIN], resourceMetadataUrl, expectedResource: new URL(url) });

/** Does this JSON-RPC body (or batch) call the `secret` tool? */
const callsSecret = (body) => (Array.isArray(body) ? body : [body]).some((m) => m?.method === 'tools/call' && m?.params?.name === 'secret');

function build(auth) {
  const mcp = new McpServer({ name: 'oidc-protected', version: '1.0.0' }, { capabilities: { tools: {} } });
  mcp.registerTool('echo', { description: 'Echoes the message.', inputSchema: { message: z.string() } }, async ({ message }) => ({
    content: [{ type: 'text', text: message }],
  }));
  mcp.registerTool('secret', { description: 'Needs mcp:admin.' }, async (extra) => {
    // Checked by the HTTP layer already (403 step-up); checked again here.
    if (!extra.authInfo?.scopes.includes(ADMIN)) return { content: [{ type: 'text', text: 'forbidden' }], isError: true };
    return { content: [{ type: 'text', text: `the secret is 42 (sub=${auth?.extra?.sub})` }] };
  });
  return mcp;
}

// Protected resource metadata (RFC 9728) at /.well-known/oauth-protected-resource/mcp.
app.use(mcpAuthMetadataRouter({ oauthMetadata: asMeta, resourceServerUrl: new URL(url), scopesSupported: SCOPES, resourceName: 'oidc protected test server' }));
app.post('/mcp', express.json(), (req, res, next) => (callsSecret(req.body) ? adminAuth : readAuth)(req, res, next), async (req, res) => {
  // Stateless: one server and transport per request.
  const mcp = build(req.auth);
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => {
    transport.close();
    mcp.close();
  });
  await mcp.connect(transport);
  await transport.handleRequest(req, res, req.body);
});
// GET (standalone SSE) and DELETE: not offered by this stateless server (after auth).
app.all('/mcp', readAuth, (_req, res) => res.status(405).set('allow', 'POST').json({ error: 'method not allowed' }));

exitOnEofAndSignals(() => new Promise((r) => http.close(r)), { watchStdin: !args['no-stdin'] });
printLine({ url, resource_metadata: resourceMetadataUrl, issuer: asMeta.issuer });

// The official MCP TypeScript SDK v2 (@modelcontextprotocol/client 2.4.0) as an OAuth client:
// dynamic registration, PKCE authorization code flow (the browser played by browser.mjs),
// step-up on 403 insufficient_scope. The same command line and output as sdk_flow.mjs (v1):
//   node tests/oidc/sdk_flow_v2.mjs --url http://HOST:PORT/mcp [--tool NAME [--args JSON]]
//        [--username alice] [--password pw] [--client-scope "a b"] [--timeout-ms 20000]
//        [--mode legacy|auto]
// --mode is the client's versionNegotiation mode (default: the SDK's default, 'legacy').
// Prints ONE JSON line: {"ok":true,"tools":[..],"call":<result|null>,"authorizations":n,
// "scopes_requested":[..],"resource_requested":[..],...} or {"ok":false,"error":".."}
// (exit 1).
import { randomBytes } from 'node:crypto';
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '../interop/oidc_deps_v2.mjs';
import { playBrowser } from './browser.mjs';
import { consoleToStderr, parseArgs, printLine, withTimeout } from './util.mjs';

consoleToStderr();
const REDIRECT_URL = 'http://127.0.0.1:8976/callback'; // never listened on: the code is taken from the URL

/**
 * An in-memory v2 OAuthClientProvider whose "browser" is playBrowser. v2 differences from
 * v1 handled here: the discovery state must be kept alongside the code verifier (v2
 * refuses the callback leg without it when saveDiscoveryState exists), and the callback's
 * parameters (code and RFC 9207 `iss`) go to finishAuth as a URLSearchParams.
 */
class MemoryOAuthProvider {
  constructor({ username, password, clientScope }) {
    Object.assign(this, { username, password, clientScope });
    this.authorizations = 0;
    this.scopesRequested = [];
    this.resourcesRequested = [];
    this.pendingCallback = undefined;
    this._state = undefined;
  }
  get redirectUrl() {
    return REDIRECT_URL;
  }
  get clientMetadata() {
    return {
      client_name: 'gantry tests/oidc/sdk_flow_v2.mjs',
      redirect_uris: [REDIRECT_URL],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      ...(this.clientScope ? { scope: this.clientScope } : {}),
    };
  }
  state() {
    this._state = randomBytes(12).toString('base64url');
    return this._state;
  }
  clientInformation() {
    return this._client;
  }
  saveClientInformation(info) {
    this._client = info;
  }
  tokens() {
    return this._tokens;
  }
  saveTokens(tokens) {
    this._tokens = tokens;
  }
  saveCodeVerifier(v) {
    this._verifier = v;
  }
  codeVerifier() {
    if (!this._verifier) throw new Error('no code verifier saved');
    return this._verifier;
  }
  saveDiscoveryState(s) {
    this._discovery = s;
  }
  discoveryState() {
    return this._discovery;
  }
  invalidateCredentials(scope) {
    if (scope === 'all' || scope === 'client') this._client = undefined;
    if (scope === 'all' || scope === 'tokens') this._tokens = undefined;
    if (scope === 'all' || scope === 'verifier') this._verifier = undefined;
    if (scope === 'all' || scope === 'discovery') this._discovery = undefined;
  }
  async redirectToAuthorization(url) {
    this.authorizations += 1;
    this.scopesRequested.push(url.searchParams.get('scope'));
    this.resourcesRequested.push(url.searchParams.get('resource'));
    const back = new URL(await playBrowser(url.href, { username: this.username, password: this.password }));
    const p = back.searchParams;
    if (p.get('error')) throw new Error(`authorization failed: ${p.get('error')}: ${p.get('error_description') ?? ''}`);
    if (p.get('state') !== this._state) throw new Error(`state mismatch: sent ${this._state}, got ${p.get('state')}`);
    if (!p.get('code')) throw new Error(`no code in redirect ${back.href}`);
    this.pendingCallback = p;
  }
  /** The callback parameters of the last authorization (code, state, iss), once. */
  takeCallback() {
    const c = this.pendingCallback;
    this.pendingCallback = undefined;
    if (!c) throw new Error('no authorization code was obtained');
    return c;
  }
}

const args = parseArgs({
  url: 'string',
  tool: 'string',
  args: 'string',
  username: 'string',
  password: 'string',
  'client-scope': 'string',
  'timeout-ms': 'string',
  mode: 'string',
});
const STEP_MS = Number(args['timeout-ms'] ?? 20000);
let step = 'start';
const steps = [];

/** Runs one named step with a timeout; the name shows in errors. */
async function run(name, fn) {
  step = name;
  steps.push(name);
  return withTimeout(fn(), STEP_MS, name);
}

/** `fn()`; on UnauthorizedError after an authorization (401, or the transport's own 403
 * step-up that ended in a redirect), finish it on `transport` and retry (at most 3 times). */
async function withReauth(name, transport, provider, fn) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run(attempt === 1 ? name : `${name} (retry ${attempt - 1})`, fn);
    } catch (e) {
      if (!UnauthorizedError.isInstance(e) || !provider.pendingCallback || attempt > 3) throw e;
      await run(`finishAuth after ${name}`, () => transport.finishAuth(provider.takeCallback()));
    }
  }
}

const newClient = () =>
  new Client(
    { name: 'gantry-oidc-sdk-flow-v2', version: '1.0.0' },
    { capabilities: {}, ...(args.mode ? { versionNegotiation: { mode: args.mode } } : {}) },
  );
let client;
try {
  if (!args.url) throw new Error('--url is required');
  if (args.mode && !['legacy', 'auto'].includes(args.mode)) throw new Error(`--mode must be legacy or auto (asked: ${args.mode})`);
  const toolArgs = args.args ? JSON.parse(args.args) : {};
  const provider = new MemoryOAuthProvider({ username: args.username ?? 'alice', password: args.password ?? 'pw', clientScope: args['client-scope'] });
  const url = new URL(args.url);
  const opts = { authProvider: provider };

  // 1. Unauthenticated connect: 401 -> discovery, registration, authorization (browser).
  const first = new StreamableHTTPClientTransport(url, opts);
  try {
    await run('connect (unauthenticated)', () => newClient().connect(first, { timeout: STEP_MS }));
    throw new Error('the server accepted the connection without authorization');
  } catch (e) {
    if (!UnauthorizedError.isInstance(e)) throw e;
  }
  // 2. Exchange the code for tokens (code and iss from the callback URL).
  await run('finishAuth', () => first.finishAuth(provider.takeCallback()));
  await first.close().catch(() => {});

  // 3. Connect again with the tokens (same provider).
  const transport = new StreamableHTTPClientTransport(url, opts);
  client = newClient();
  await withReauth('connect (authorized)', transport, provider, () => client.connect(transport, { timeout: STEP_MS }));
  const listed = await withReauth('tools/list', transport, provider, () => client.listTools(undefined, { timeout: STEP_MS }));
  let call = null;
  if (args.tool) {
    call = await withReauth(`tools/call ${args.tool}`, transport, provider, () =>
      client.callTool({ name: args.tool, arguments: toolArgs }, { timeout: STEP_MS }),
    );
  }
  printLine({
    ok: true,
    tools: listed.tools.map((t) => t.name),
    call,
    authorizations: provider.authorizations,
    scopes_requested: provider.scopesRequested,
    resource_requested: provider.resourcesRequested,
    client_id: provider.clientInformation()?.client_id ?? null,
    token_scope: provider.tokens()?.scope ?? null,
    protocol_version: client.getNegotiatedProtocolVersion() ?? null,
  });
  await client.close().catch(() => {});
  process.exit(0);
} catch (e) {
  let msg = String(e?.message ?? e);
  if (e?.code !== undefined) msg += ` (code ${e.code})`;
  if (e?.cause?.message) msg += ` (cause: ${e.cause.message})`;
  printLine({ ok: false, error: msg.startsWith(step) ? msg : `${step}: ${msg}`, steps });
  process.stderr.write(`${e?.stack ?? e}\n`);
  process.exit(1);
}

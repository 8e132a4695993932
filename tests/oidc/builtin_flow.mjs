// The official MCP TypeScript SDK v1 as an OAuth client of Gantry's built-in authorization
// server: registration (dynamic, or a client ID metadata document), the authorization code
// flow (the browser played by browser.mjs), MCP requests, a refresh with rotation, then the
// replay of the rotated-out refresh token and what it revokes.
//   node tests/oidc/builtin_flow.mjs --url http://HOST:PORT/mcp [--tool NAME [--args JSON]]
//        [--username alice] [--password pw] [--client-scope "a b"] [--cimd-port N]
//        [--grace-ms 3000] [--poll-ms 10000] [--timeout-ms 20000]
// Prints ONE JSON line: {"ok":true,"tools":[..],"call":..,"client_id":..,"registration":
// "dcr"|"cimd","token_endpoint":..,"issuer":..,"refresh_rotated":bool,
// "after_refresh_call_ok":bool,"replay":{"status","error"},"newest_after_replay":{..},
// "access_refused_after_ms":N|null,"steps":[..],...} or {"ok":false,"error":"<step>: <msg>",
// "steps":[..]} (exit 1). Details: tests/oidc/README.md.
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { Client, StreamableHTTPClientTransport, UnauthorizedError, auth } from '../interop/oidc_deps.mjs';
import { playBrowser } from './browser.mjs';
import { consoleToStderr, fetchWithTimeout, parseArgs, printLine, withTimeout } from './util.mjs';

consoleToStderr();
const REDIRECT_URL = 'http://127.0.0.1:8976/callback'; // never listened on: the code is taken from the URL
const CLIENT_NAME = 'gantry tests/oidc/builtin_flow.mjs';
const log = (m) => process.stderr.write(`builtin_flow: ${m}\n`);

/**
 * An in-memory OAuthClientProvider whose "browser" is playBrowser.
 *
 * Client ID metadata documents: SDK 1.32.2 uses `clientMetadataUrl` only when it is an
 * **https** URL with a non-root path (else `InvalidClientMetadataError`, before any request)
 * and the authorization server metadata says `client_id_metadata_document_supported: true`;
 * then it stores `{client_id: clientMetadataUrl, issuer}` as the client information instead
 * of registering (SEP-991; client/auth.js `authInternal`). Our document is served over
 * plain http on 127.0.0.1, so this provider does the very same thing itself in
 * `clientInformation()` (it sees the metadata through `saveDiscoveryState`, which the SDK
 * calls before `clientInformation()`), and leaves `clientMetadataUrl` unset.
 */
class MemoryOAuthProvider {
  constructor({ username, password, clientScope, cimdUrl }) {
    Object.assign(this, { username, password, clientScope, cimdUrl });
    this.authorizations = 0;
    this.browserAllowed = true; // false: a new authorization is an error (refresh steps)
    this.registration = null; // 'dcr' | 'cimd'
    this.discovery = undefined; // the SDK's last saveDiscoveryState()
    this.tokenSaves = 0;
    this.pendingCode = undefined;
    this._state = undefined;
  }
  get redirectUrl() {
    return REDIRECT_URL;
  }
  get clientMetadata() {
    return {
      client_name: CLIENT_NAME,
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
  // Only saved (captured), never handed back: the SDK runs its discovery on every auth().
  saveDiscoveryState(state) {
    this.discovery = state;
  }
  clientInformation() {
    if (!this._client && this.cimdUrl && this.discovery && !this.cimdChecked) {
      this.cimdChecked = true;
      if (this.discovery.authorizationServerMetadata?.client_id_metadata_document_supported !== true) {
        log('the authorization server metadata has no client_id_metadata_document_supported: true; dynamic registration instead (as the SDK does)');
      }
    }
    if (!this._client && this.cimdUrl && this.discovery?.authorizationServerMetadata?.client_id_metadata_document_supported === true) {
      // What the SDK does for an https clientMetadataUrl (see the class comment).
      this._client = { client_id: this.cimdUrl, issuer: this.discovery.authorizationServerUrl };
      this.registration = 'cimd';
      log(`client ID metadata document: client_id ${this.cimdUrl}`);
    }
    return this._client;
  }
  saveClientInformation(info) {
    if (this._client?.client_id !== info.client_id) {
      this.registration = 'dcr';
      log(`dynamic registration: client_id ${info.client_id}`);
    }
    this._client = info;
  }
  tokens() {
    return this._tokens;
  }
  saveTokens(tokens) {
    this._tokens = tokens;
    this.tokenSaves += 1;
  }
  saveCodeVerifier(v) {
    this._verifier = v;
  }
  codeVerifier() {
    if (!this._verifier) throw new Error('no code verifier saved');
    return this._verifier;
  }
  invalidateCredentials(scope) {
    log(`the SDK invalidates credentials: ${scope}`);
    if (scope === 'all' || scope === 'client') this._client = undefined;
    if (scope === 'all' || scope === 'tokens') this._tokens = undefined;
    if (scope === 'all' || scope === 'verifier') this._verifier = undefined;
  }
  async redirectToAuthorization(url) {
    if (!this.browserAllowed) throw new Error(`the SDK started a new authorization instead (${url.origin}${url.pathname})`);
    this.authorizations += 1;
    const back = new URL(await playBrowser(url.href, { username: this.username, password: this.password, timeoutMs: STEP_MS }));
    const p = back.searchParams;
    if (p.get('error')) throw new Error(`authorization failed: ${p.get('error')}: ${p.get('error_description') ?? ''}`);
    if (p.get('state') !== this._state) throw new Error(`state mismatch: sent ${this._state}, got ${p.get('state')}`);
    if (!p.get('code')) throw new Error(`no code in redirect ${back.href}`);
    this.callbackIss = p.get('iss');
    this.pendingCode = p.get('code');
  }
  takeCode() {
    const c = this.pendingCode;
    this.pendingCode = undefined;
    if (!c) throw new Error('no authorization code was obtained');
    return c;
  }
}

let args;
try {
  args = parseArgs({
    url: 'string',
    tool: 'string',
    args: 'string',
    username: 'string',
    password: 'string',
    'client-scope': 'string',
    'cimd-port': 'string',
    'grace-ms': 'string',
    'poll-ms': 'string',
    'timeout-ms': 'string',
  });
} catch (e) {
  printLine({ ok: false, error: `arguments: ${e.message}`, steps: [] });
  process.exit(1);
}
const STEP_MS = Number(args['timeout-ms'] ?? 20000);
const GRACE_MS = Number(args['grace-ms'] ?? 3000);
const POLL_MS = Number(args['poll-ms'] ?? 10000);
let step = 'start';
const steps = [];

/** Runs one named step with a timeout (`ms`, default --timeout-ms); the name shows in errors. */
async function run(name, fn, ms = STEP_MS) {
  step = name;
  steps.push(name);
  return withTimeout(fn(), ms, name);
}

/** `fn()`; on UnauthorizedError after an authorization (401 or 403 step-up), exchange the
 * code on `transport` and retry the same request (at most 3 times). */
async function withReauth(name, transport, provider, fn) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run(attempt === 1 ? name : `${name} (retry ${attempt - 1})`, fn);
    } catch (e) {
      if (!(e instanceof UnauthorizedError) || !provider.pendingCode || attempt > 3) throw e;
      await run(`finishAuth after ${name}`, () => transport.finishAuth(provider.takeCode()));
    }
  }
}

function errorText(e) {
  let msg = String(e?.message ?? e);
  if (e?.code !== undefined) msg += ` (code ${e.code})`;
  if (e?.cause?.message) msg += ` (cause: ${e.cause.message})`;
  return msg;
}

/** Serves the client ID metadata document on http://127.0.0.1:PORT/client.json. */
async function serveCimd(port) {
  const served = { url: undefined, fetches: 0 };
  const server = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    if (req.method !== 'GET' || path !== '/client.json') return res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    served.fetches += 1;
    log(`client ID metadata document fetched (${req.headers['user-agent'] ?? 'no user-agent'})`);
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        client_id: served.url,
        client_name: CLIENT_NAME,
        redirect_uris: [REDIRECT_URL],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
      }),
    );
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  server.unref();
  served.url = `http://127.0.0.1:${server.address().port}/client.json`;
  return served;
}

/** A raw refresh-token request at the token endpoint: { status, error, error_description, body }. */
async function postRefresh(tokenEndpoint, clientInfo, refreshToken) {
  const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: clientInfo.client_id });
  const headers = { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' };
  if (clientInfo.client_secret) {
    // A confidential registration (the SDK asked for "none"): authenticate as it registered.
    if (clientInfo.token_endpoint_auth_method === 'client_secret_post') form.set('client_secret', clientInfo.client_secret);
    else headers.authorization = `Basic ${Buffer.from(`${encodeURIComponent(clientInfo.client_id)}:${encodeURIComponent(clientInfo.client_secret)}`).toString('base64')}`;
  }
  const res = await fetchWithTimeout(tokenEndpoint, { method: 'POST', headers, body: form }, STEP_MS);
  const text = await res.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return {
    status: res.status,
    error: body?.error ?? null,
    error_description: body?.error_description ?? null,
    issued_tokens: res.ok ? Boolean(body?.access_token) : undefined,
    ...(body === undefined ? { body: text.slice(0, 300) } : {}),
  };
}

const newClient = () => new Client({ name: 'gantry-oidc-builtin-flow', version: '1.0.0' });
let client;
try {
  if (!args.url) throw new Error('--url is required');
  for (const [k, v] of [['timeout-ms', STEP_MS], ['grace-ms', GRACE_MS], ['poll-ms', POLL_MS]]) {
    if (!Number.isFinite(v) || v < 0) throw new Error(`--${k} must be a number of milliseconds`);
  }
  const toolArgs = args.args ? JSON.parse(args.args) : {};
  const url = new URL(args.url);

  let cimd;
  if (args['cimd-port'] !== undefined) cimd = await run('serve client ID metadata document', () => serveCimd(Number(args['cimd-port'])));
  const provider = new MemoryOAuthProvider({
    username: args.username ?? 'alice',
    password: args.password ?? 'pw',
    clientScope: args['client-scope'],
    cimdUrl: cimd?.url,
  });
  const opts = { authProvider: provider, requestInit: {} };

  // (a) Unauthenticated connect: 401 -> discovery, registration, authorization (browser).
  const first = new StreamableHTTPClientTransport(url, opts);
  try {
    await run('connect (unauthenticated)', () => newClient().connect(first));
    throw new Error('the server accepted the connection without authorization');
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  // (b) Exchange the code for tokens, connect again with them (same provider), list, call.
  await run('finishAuth', () => first.finishAuth(provider.takeCode()));
  await first.close().catch(() => {});
  const asMetadata = provider.discovery?.authorizationServerMetadata;
  const asUrl = provider.discovery?.authorizationServerUrl;
  const tokenEndpoint = asMetadata?.token_endpoint ?? (asUrl ? new URL('/token', asUrl).href : undefined);
  const firstTokens = provider.tokens();

  const transport = new StreamableHTTPClientTransport(url, opts);
  client = newClient();
  await withReauth('connect (authorized)', transport, provider, () => client.connect(transport));
  const listed = await withReauth('tools/list', transport, provider, () => client.listTools(undefined, { timeout: STEP_MS }));
  let call = null;
  if (args.tool) {
    call = await withReauth(`tools/call ${args.tool}`, transport, provider, () =>
      client.callTool({ name: args.tool, arguments: toolArgs }, undefined, { timeout: STEP_MS }),
    );
  }

  /** An MCP request with a static bearer token (no authProvider: a 401 is just an error):
   * a fresh client, initialize + tools/list. { ok, status, error }. */
  async function bearerRequest(accessToken) {
    const c = newClient();
    const t = new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${accessToken}` } } });
    try {
      await withTimeout(c.connect(t), STEP_MS, 'connect');
      await c.listTools(undefined, { timeout: STEP_MS });
      await withTimeout(t.terminateSession(), STEP_MS, 'DELETE session').catch(() => {});
      return { ok: true, status: 200, error: null };
    } catch (e) {
      return { ok: false, status: typeof e?.code === 'number' && e.code >= 100 ? e.code : null, error: errorText(e) };
    } finally {
      await c.close().catch(() => {});
    }
  }

  // (c) Refresh through the SDK: auth() with a saved refresh token refreshes (and saves the
  // answer; a response without refresh_token keeps the old one). No new authorization: a
  // failed refresh would make the SDK start one, which redirectToAuthorization refuses.
  const tokenResponses = []; // what the token endpoint answered to the SDK during the refresh
  const recordingFetch = async (input, init) => {
    const res = await fetchWithTimeout(input, init, STEP_MS);
    const target = new URL(input instanceof Request ? input.url : input);
    if (tokenEndpoint && target.href === new URL(tokenEndpoint).href) {
      const body = await res.clone().json().catch(() => undefined);
      tokenResponses.push({ status: res.status, error: body?.error ?? null, error_description: body?.error_description ?? null });
    }
    return res;
  };
  provider.browserAllowed = false;
  const old = provider.tokens();
  await run('refresh (SDK auth())', async () => {
    if (!old?.refresh_token) throw new Error(`the token response had no refresh_token (scope ${JSON.stringify(old?.scope ?? null)})`);
    let result;
    try {
      result = await auth(provider, {
        serverUrl: url,
        resourceMetadataUrl: provider.discovery?.resourceMetadataUrl ? new URL(provider.discovery.resourceMetadataUrl) : undefined,
        fetchFn: recordingFetch,
      });
    } catch (e) {
      const last = tokenResponses.at(-1);
      throw new Error(`${errorText(e)}${last ? ` (token endpoint: ${last.status} ${last.error ?? ''} ${last.error_description ?? ''})` : ''}`);
    }
    if (result !== 'AUTHORIZED') throw new Error(`auth() answered ${result}`);
    if (!tokenResponses.some((r) => r.status === 200)) throw new Error('auth() made no successful token request');
  });
  const refreshedAt = Date.now();
  const refreshed = provider.tokens();
  const refreshRotated = refreshed.refresh_token !== old.refresh_token;
  log(`refreshed: access token ${refreshed.access_token !== old.access_token ? 'new' : 'SAME'}, refresh token ${refreshRotated ? 'rotated' : 'NOT rotated'}`);

  // One more MCP request with the new access token: a fresh client with the token as a
  // static header (a 401 would be final), then the existing session through the provider
  // (a token save there means the SDK had to refresh again: the new token was refused).
  const fresh = await run('tools/list with the new access token (new client)', () => bearerRequest(refreshed.access_token));
  let session = { ok: true, error: null };
  const saves = provider.tokenSaves;
  try {
    await run('tools/list after refresh (same session)', () => client.listTools(undefined, { timeout: STEP_MS }));
    if (provider.tokenSaves !== saves) session = { ok: false, error: 'the SDK refreshed again (the new access token was refused)' };
  } catch (e) {
    session = { ok: false, error: errorText(e) };
  }
  const afterRefresh = { new_client: fresh, same_session: session };
  const afterRefreshOk = fresh.ok && session.ok;

  let replay = null;
  let newest = null;
  let refusedAfter = null;
  let originalAccess = null;
  const clientInfo = provider.clientInformation();
  if (!refreshRotated) {
    steps.push('replay skipped: the refresh token did not rotate');
  } else {
    if (!tokenEndpoint) throw new Error('no token endpoint known');
    // (d) Past the grace period, the rotated-out refresh token again.
    const wait = Math.max(0, refreshedAt + GRACE_MS - Date.now());
    await run(`wait past the grace (${GRACE_MS} ms)`, () => new Promise((r) => setTimeout(r, wait)), wait + STEP_MS);
    replay = await run('replay the old refresh token', () => postRefresh(tokenEndpoint, clientInfo, old.refresh_token));
    const replayedAt = Date.now();
    // (e) The newest refresh token (the provider's, should the SDK have refreshed again).
    const newestToken = provider.tokens()?.refresh_token ?? refreshed.refresh_token;
    newest = await run('the newest refresh token after the replay', () => postRefresh(tokenEndpoint, clientInfo, newestToken));
    // (f) Until the newest access token is refused (401), at most --poll-ms after the replay.
    const current = provider.tokens()?.access_token ?? refreshed.access_token;
    let last;
    await run(
      `poll until the access token is refused (${POLL_MS} ms)`,
      async () => {
        for (;;) {
          last = await bearerRequest(current);
          if (last.status === 401) {
            refusedAfter = Date.now() - replayedAt;
            return;
          }
          if (Date.now() - replayedAt >= POLL_MS) return;
          await new Promise((r) => setTimeout(r, 200));
        }
      },
      POLL_MS + 2 * STEP_MS,
    );
    if (refusedAfter === null) log(`access token still not refused after ${POLL_MS} ms: ${JSON.stringify(last)}`);
    // The access token from before the refresh, once.
    if (old.access_token !== current) {
      const r = await run('the first access token', () => bearerRequest(old.access_token));
      originalAccess = { status: r.status, error: r.error };
    }
  }

  printLine({
    ok: true,
    tools: listed.tools.map((t) => t.name),
    call,
    client_id: clientInfo?.client_id ?? null,
    registration: provider.registration,
    cimd_url: cimd?.url ?? null,
    cimd_fetches: cimd?.fetches ?? null,
    cimd_supported: asMetadata?.client_id_metadata_document_supported ?? null,
    token_endpoint: tokenEndpoint ?? null,
    issuer: asMetadata?.issuer ?? null,
    authorization_server_url: asUrl ?? null,
    callback_iss: provider.callbackIss ?? null,
    authorizations: provider.authorizations,
    token_scope: firstTokens?.scope ?? null,
    expires_in: firstTokens?.expires_in ?? null,
    refresh_rotated: refreshRotated,
    access_token_changed: refreshed.access_token !== old.access_token,
    after_refresh_call_ok: afterRefreshOk,
    after_refresh: afterRefresh,
    replay,
    newest_after_replay: newest,
    access_refused_after_ms: refusedAfter,
    first_access_after_replay: originalAccess,
    protocol_version: transport.protocolVersion ?? null,
    steps,
  });
  await client.close().catch(() => {});
  process.exit(0);
} catch (e) {
  const msg = errorText(e);
  printLine({ ok: false, error: msg.startsWith(step) ? msg : `${step}: ${msg}`, steps });
  process.stderr.write(`${e?.stack ?? e}\n`);
  process.exit(1);
}

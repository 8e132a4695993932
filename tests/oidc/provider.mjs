// A real OpenID Provider / OAuth 2.1 authorization server for tests (oidc-provider 9.x).
//   node tests/oidc/provider.mjs [--resource URL]... [--opaque-resource URL]... [options]
// Prints ONE JSON line on stdout once listening (issuer, endpoints, clients); logs go to
// stderr. Exits on stdin EOF and on SIGTERM. Options and quirks: tests/oidc/README.md.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { Provider, jose, oidcErrors } from '../interop/oidc_deps.mjs';
import { TOKEN_EXCHANGE, exchangeExtraClaims, registerTokenExchange } from './token_exchange.mjs';
import { consoleToStderr, exitOnEofAndSignals, parseArgs, printLine } from './util.mjs';

consoleToStderr(); // oidc-provider prints its NOTICEs with console.info (stdout)

const args = parseArgs({
  port: 'string',
  'issuer-path': 'string',
  resource: 'list',
  'opaque-resource': 'list',
  scopes: 'string',
  ttl: 'string',
  alg: 'string',
  'keys-out': 'string',
  discovery: 'string',
  'refresh-tokens': 'string',
  'default-resource': 'string',
  'web-client': 'list',
  'no-stdin': 'bool',
});

const SCOPES = (args.scopes ?? 'mcp:read mcp:write mcp:admin').split(/\s+/).filter(Boolean);
const TTL = Number(args.ttl ?? 300);
const ALGS = (args.alg ?? 'RS256').split(',').map((a) => a.trim());
const DISCOVERY = args.discovery ?? 'all'; // all | oidc | oauth
const REFRESH = args['refresh-tokens'] ?? 'offline_access'; // offline_access | always
let issuerPath = args['issuer-path'] ?? '';
if (issuerPath === '/') issuerPath = '';
if (issuerPath && (!issuerPath.startsWith('/') || issuerPath.endsWith('/'))) {
  throw new Error('--issuer-path must start with "/" and not end with "/" (e.g. /tenant1)');
}
if (!Number.isFinite(TTL) || TTL <= 0) throw new Error('--ttl must be a positive number of seconds');
if (!['all', 'oidc', 'oauth'].includes(DISCOVERY)) throw new Error('--discovery must be all, oidc or oauth');
if (!['offline_access', 'always'].includes(REFRESH)) throw new Error('--refresh-tokens must be offline_access or always');

/** Resource indicator (exact string) -> { format: 'jwt' | 'opaque', scopes: [..] }. */
const resources = new Map();
for (const r of args.resource) resources.set(r, { format: 'jwt', scopes: SCOPES });
for (const r of args['opaque-resource']) resources.set(r, { format: 'opaque', scopes: SCOPES });

// ---- signing keys: generated at startup, the first one signs the JWT access tokens ----
const keys = [];
for (const alg of ALGS) {
  let pair;
  if (alg === 'RS256' || alg === 'PS256') pair = generateKeyPairSync('rsa', { modulusLength: 2048 });
  else if (alg === 'ES256') pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  else throw new Error(`--alg: unsupported ${alg} (RS256, PS256, ES256)`);
  const publicJwk = pair.publicKey.export({ format: 'jwk' });
  const kid = `${alg.toLowerCase()}-${(await jose.calculateJwkThumbprint(publicJwk)).slice(0, 16)}`;
  keys.push({
    kid,
    alg,
    private_pem: pair.privateKey.export({ format: 'pem', type: 'pkcs8' }),
    public_jwk: { ...publicJwk, kid, alg, use: 'sig' },
    private_jwk: { ...pair.privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' },
  });
}
const SIGN_ALG = ALGS[0];
if (args['keys-out']) {
  const out = keys.map(({ kid, alg, private_pem, public_jwk }) => ({ kid, alg, private_pem, public_jwk }));
  writeFileSync(args['keys-out'], `${JSON.stringify(out, null, 2)}\n`, { mode: 0o600 });
}

// ---- pre-registered clients ----
const secret = () => randomBytes(24).toString('base64url');
const clients = {
  // client_credentials, every scope, every resource: mints real tokens quickly.
  minter: { client_id: 'test-minter', client_secret: secret(), token_endpoint_auth_method: 'client_secret_basic' },
  // Resource-server credentials for the introspection endpoint (one per auth method).
  introspector: { client_id: 'gantry-introspector', client_secret: secret(), token_endpoint_auth_method: 'client_secret_basic' },
  introspector_post: { client_id: 'gantry-introspector-post', client_secret: secret(), token_endpoint_auth_method: 'client_secret_post' },
  // RFC 8693 token exchange (token_exchange.mjs): a user's access token -> one for a backend.
  exchanger: { client_id: 'gantry-exchanger', client_secret: secret(), token_endpoint_auth_method: 'client_secret_basic' },
};
const INTROSPECTORS = new Set([clients.introspector.client_id, clients.introspector_post.client_id]);

// ---- OpenID Connect relying parties (--web-client ID:SECRET:REDIRECT_URI, repeatable) ----
// Confidential web clients (client_secret_basic) with the authorization code flow, e.g.
// Gantry's built-in authorization server delegating its login to this provider.
// POST /__test/web-clients adds more after start (a redirect URI known only later).
const OIDC_SCOPES = ['openid', 'offline_access', 'email', 'groups'];
const webClientScope = () => [...OIDC_SCOPES, ...SCOPES].join(' ');
function webClientMetadata({ client_id, client_secret, redirect_uris }) {
  return {
    client_id,
    client_secret,
    token_endpoint_auth_method: 'client_secret_basic',
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    redirect_uris,
    scope: webClientScope(),
  };
}
const webClients = args['web-client'].map((spec) => {
  // The redirect URI has colons of its own: split at the first two only.
  const m = /^([^:]+):([^:]+):(.+)$/.exec(spec);
  if (!m || !URL.canParse(m[3])) throw new Error(`--web-client ${spec}: expected ID:SECRET:REDIRECT_URI (no ':' in ID and SECRET)`);
  return { client_id: m[1], client_secret: m[2], redirect_uris: [m[3]] };
});
const ids = [...Object.values(clients), ...webClients].map((c) => c.client_id);
if (new Set(ids).size !== ids.length) throw new Error('--web-client: duplicate client id');

// Accounts: any username; these claims (released by scope, see `claims` below).
const GROUPS = { alice: ['staff', 'admins'], bob: ['staff'] };
const accountClaims = (sub) => ({ sub, email: `${sub}@example.test`, email_verified: true, groups: GROUPS[sub] ?? [] });

// ---- HTTP: listen first (the issuer needs the port), then build the provider ----
let handle = (_req, res) => res.writeHead(503).end('starting');
const server = createServer((req, res) => {
  Promise.resolve(handle(req, res)).catch((e) => {
    process.stderr.write(`request failed: ${e?.stack ?? e}\n`);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  });
});
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(Number(args.port ?? 0), '127.0.0.1', resolve);
});
const origin = `http://127.0.0.1:${server.address().port}`;
const issuer = `${origin}${issuerPath}`;

const configuration = {
  clients: [
    {
      ...pick(clients.minter),
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      scope: SCOPES.join(' '),
    },
    {
      // No `scope` allow-list: an exchange is bounded by the subject token's scopes.
      ...pick(clients.exchanger),
      grant_types: [TOKEN_EXCHANGE],
      response_types: [],
      redirect_uris: [],
    },
    ...[clients.introspector, clients.introspector_post].map((c) => ({
      ...pick(c),
      grant_types: [],
      response_types: [],
      redirect_uris: [],
    })),
    ...webClients.map(webClientMetadata),
  ],
  jwks: { keys: keys.map((k) => k.private_jwk) },
  // The resource scopes are also "static" scopes: dynamic registration validates a
  // client's `scope` against this list, and discovery lists them in scopes_supported.
  scopes: [...OIDC_SCOPES, ...SCOPES],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
  // The scopes' claims go into the ID token too (no userinfo call needed); oidc-provider's
  // default (true) puts only `sub` there when an access token for userinfo is issued.
  conformIdTokenClaims: false,
  // Any username is an account; its subject is the username (claims: accountClaims).
  async findAccount(_ctx, sub) {
    return { accountId: sub, claims: async () => accountClaims(sub) };
  },
  clientDefaults: { id_token_signed_response_alg: SIGN_ALG },
  clientBasedCORS: () => true,
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  pkce: { required: () => true }, // S256 is the only method oidc-provider 9 supports
  responseTypes: ['code'],
  ttl: {
    AccessToken: TTL,
    ClientCredentials: TTL,
    AuthorizationCode: 60,
    Interaction: 600,
    Session: 3600,
    Grant: 3600,
    RefreshToken: 3600,
  },
  // client_credentials tokens: sub = client_id in introspection too (the JWT format
  // already does that), so opaque and JWT tokens carry the same claims. Token-exchange
  // tokens: their `act` claim (oidc-provider replaces token.extra with this hook's answer).
  extraTokenClaims: async (_ctx, token) => (token.kind === 'ClientCredentials' ? { sub: token.clientId } : exchangeExtraClaims(token)),
  issueRefreshToken: async (_ctx, client, code) =>
    client.grantTypeAllowed('refresh_token') && (REFRESH === 'always' || code.scopes.has('offline_access')),
  features: {
    devInteractions: { enabled: true }, // login (any user, any password) + consent forms
    clientCredentials: { enabled: true },
    introspection: {
      enabled: true,
      // The introspector clients may introspect every token; any other client only its own.
      allowedPolicy: async (_ctx, client, token) => INTROSPECTORS.has(client.clientId) || token.clientId === client.clientId,
    },
    revocation: { enabled: true },
    registration: { enabled: true, initialAccessToken: false }, // open dynamic registration
    resourceIndicators: {
      enabled: true,
      // No `resource` parameter: --default-resource if given, else none (token without aud).
      defaultResource: async (_ctx, _client, oneOf) => oneOf ?? args['default-resource'],
      // Token requests without `resource` use the resource granted at authorization.
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, indicator) => resourceServerInfo(indicator),
    },
  },
};

/** oidc-provider's view of a registered resource (exact string match, no normalisation). */
function resourceServerInfo(indicator) {
  const rs = resources.get(indicator);
  if (!rs) throw new oidcErrors.InvalidTarget(`unknown resource indicator: ${indicator}`);
  const info = { scope: rs.scopes.join(' '), audience: indicator, accessTokenTTL: TTL };
  if (rs.format === 'jwt') return { ...info, accessTokenFormat: 'jwt', jwt: { sign: { alg: SIGN_ALG } } };
  return { ...info, accessTokenFormat: 'opaque' };
}

const provider = new Provider(issuer, configuration);
registerTokenExchange(provider, {
  resourceInfo: (indicator) => resources.get(indicator),
  resourceServerInfo,
  publicJwks: keys.map((k) => k.public_jwk),
  onSuccess: () => (requests.token_exchange += 1),
});
provider.on('server_error', (_ctx, err) => process.stderr.write(`server_error: ${err?.stack ?? err}\n`));
for (const ev of ['grant.error', 'registration_create.error', 'introspection.error', 'authorization.error']) {
  provider.on(ev, (_ctx, err) => process.stderr.write(`${ev}: ${err?.message} ${err?.error_description ?? ''}\n`));
}
const callback = provider.callback();

const WK_OAUTH = '/.well-known/oauth-authorization-server';
const WK_OIDC = '/.well-known/openid-configuration';

handle = async (req, res) => {
  const url = new URL(req.url, origin);
  const path = url.pathname;
  if (path.startsWith('/__test/')) return admin(req, res, url);
  // Counted for the tests (how often a resource server fetches the keys).
  if (path === `${issuerPath}/jwks`) requests.jwks += 1;

  // Discovery documents: which URL forms are served (--discovery).
  //   oidc : {issuer}/.well-known/openid-configuration            (OpenID Connect Discovery)
  //   oauth: {origin}/.well-known/oauth-authorization-server{path} (RFC 8414, path inserted)
  //   all  : both, plus the other two combinations.
  let wk = null;
  let form = null;
  for (const w of [WK_OAUTH, WK_OIDC]) {
    if (path === `${issuerPath}${w}`) [wk, form] = [w, w === WK_OIDC ? 'oidc' : issuerPath ? 'oauth-appended' : 'oauth'];
    else if (issuerPath && path === `${w}${issuerPath}`) [wk, form] = [w, w === WK_OAUTH ? 'oauth' : 'oidc-inserted'];
  }
  if (wk) {
    if (DISCOVERY !== 'all' && form !== DISCOVERY) return notFound(res);
    req.url = `${issuerPath}${wk}${url.search}`;
  }

  // Mount the provider under the issuer path (the way Express's app.use(path) does it:
  // oidc-provider derives its mount path from req.originalUrl minus req.url).
  if (issuerPath) {
    if (!(req.url === issuerPath || req.url.startsWith(`${issuerPath}/`) || req.url.startsWith(`${issuerPath}?`))) {
      return notFound(res);
    }
    req.originalUrl = req.url;
    req.url = req.url.slice(issuerPath.length) || '/';
    if (req.url.startsWith('?')) req.url = `/${req.url}`;
  }

  // Dynamic registration: drop the `scope` member, so a registered client may later ask
  // for any supported scope (oidc-provider would otherwise refuse a step-up to a scope
  // beyond the one the MCP SDK registered with).
  if (req.method === 'POST' && new URL(req.url, origin).pathname === '/reg') {
    const body = await readBody(req);
    try {
      const json = JSON.parse(body.toString('utf8'));
      if (json && typeof json === 'object' && 'scope' in json) {
        process.stderr.write(`registration: ignoring scope ${JSON.stringify(json.scope)}\n`);
        delete json.scope;
      }
      req.body = json; // oidc-provider uses an already parsed body when the stream is consumed
    } catch {
      req.body = body.toString('utf8');
    }
  }
  return callback(req, res);
};

/** Requests counted for the tests (`GET /__test/requests`); token_exchange = tokens issued. */
const requests = { jwks: 0, token_exchange: 0 };

/** Test-only admin API at the origin (outside the issuer path). */
async function admin(req, res, url) {
  if (url.pathname === '/__test/requests') return json(res, 200, requests);
  if (url.pathname === '/__test/web-clients') return addWebClient(req, res);
  if (url.pathname !== '/__test/resources') return notFound(res);
  if (req.method === 'GET') return json(res, 200, { resources: Object.fromEntries(resources) });
  if (req.method !== 'POST') return json(res, 405, { error: 'method not allowed' });
  // POST {"resource": URL, "format": "jwt"|"opaque", "scopes": "a b"} (JSON or form-encoded)
  const raw = (await readBody(req)).toString('utf8');
  let body;
  try {
    body = (req.headers['content-type'] ?? '').includes('json') ? JSON.parse(raw) : Object.fromEntries(new URLSearchParams(raw));
  } catch {
    return json(res, 400, { error: 'bad body' });
  }
  const format = body.format ?? 'jwt';
  if (typeof body.resource !== 'string' || !URL.canParse(body.resource) || !['jwt', 'opaque'].includes(format)) {
    return json(res, 400, { error: 'need {"resource": absolute URL, "format": "jwt"|"opaque"}' });
  }
  const scopes = body.scopes ? String(body.scopes).split(/\s+/).filter(Boolean) : SCOPES;
  resources.set(body.resource, { format, scopes });
  process.stderr.write(`resource added: ${body.resource} (${format}, ${scopes.join(' ')})\n`);
  return json(res, 200, { resource: body.resource, format, scopes });
}

/** POST /__test/web-clients {"client_id", "client_secret"?, "redirect_uri" | "redirect_uris"}:
 * adds (or replaces) a web client like --web-client; answers it with its secret. */
async function addWebClient(req, res) {
  if (req.method !== 'POST') return json(res, 405, { error: 'method not allowed' });
  let body;
  try {
    body = JSON.parse((await readBody(req)).toString('utf8'));
  } catch {
    return json(res, 400, { error: 'bad JSON body' });
  }
  const redirectUris = body?.redirect_uris ?? (body?.redirect_uri ? [body.redirect_uri] : []);
  if (typeof body?.client_id !== 'string' || !body.client_id || !Array.isArray(redirectUris) || !redirectUris.length) {
    return json(res, 400, { error: 'need {"client_id", "redirect_uri" or "redirect_uris", "client_secret"?}' });
  }
  const staticIds = [...Object.values(clients), ...webClients].map((c) => c.client_id);
  if (staticIds.includes(body.client_id)) return json(res, 409, { error: `${body.client_id} is a static client` });
  const wc = { client_id: body.client_id, client_secret: body.client_secret ?? secret(), redirect_uris: redirectUris };
  let client;
  try {
    client = new provider.Client(webClientMetadata(wc)); // validates like a registration
  } catch (e) {
    return json(res, 400, { error: e.error ?? 'invalid_client_metadata', error_description: e.error_description ?? e.message });
  }
  await provider.Client.adapter.upsert(client.clientId, client.metadata());
  process.stderr.write(`web client added: ${wc.client_id} -> ${redirectUris.join(' ')}\n`);
  return json(res, 200, { ...wc, token_endpoint_auth_method: 'client_secret_basic', scope: webClientScope() });
}

function pick({ client_id, client_secret, token_endpoint_auth_method }) {
  return { client_id, client_secret, token_endpoint_auth_method };
}
async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks);
}
function json(res, status, obj) {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(obj));
}
function notFound(res) {
  res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
}

exitOnEofAndSignals(() => new Promise((r) => server.close(r)), { watchStdin: !args['no-stdin'] });

const discovery = DISCOVERY === 'oauth' ? `${origin}${WK_OAUTH}${issuerPath}` : `${issuer}${WK_OIDC}`;
printLine({
  issuer,
  discovery_url: discovery,
  authorization_endpoint: provider.urlFor('authorization'),
  token_endpoint: provider.urlFor('token'),
  introspection_endpoint: provider.urlFor('introspection'),
  revocation_endpoint: provider.urlFor('revocation'),
  userinfo_endpoint: provider.urlFor('userinfo'),
  registration_endpoint: provider.urlFor('registration'),
  jwks_uri: provider.urlFor('jwks'),
  admin_resources_url: `${origin}/__test/resources`,
  resources: [...resources].filter(([, v]) => v.format === 'jwt').map(([k]) => k),
  opaque_resources: [...resources].filter(([, v]) => v.format === 'opaque').map(([k]) => k),
  scopes: SCOPES,
  alg: SIGN_ALG,
  kids: keys.map((k) => k.kid),
  ttl: TTL,
  clients,
  web_clients: webClients.map((c) => ({ ...c, token_endpoint_auth_method: 'client_secret_basic', scope: webClientScope() })),
});

// End-to-end check of the OAuth fixtures WITHOUT Gantry (the "direct" baseline):
// provider.mjs + protected_server.mjs + sdk_flow.mjs, plus hand-made token requests,
// introspection and forged tokens. Prints one line per check and "N passed, N failed".
//   tests/interop/node_modules/.bin/node tests/oidc/check_direct.mjs [--verbose]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jose } from '../interop/oidc_deps.mjs';
import { signToken } from './sign.mjs';
import { fetchWithTimeout, parseArgs, runNode, spawnJsonLine } from './util.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const args = parseArgs({ verbose: 'bool' });
const log = args.verbose ? (l) => process.stderr.write(`${l}\n`) : () => {};
const tmp = mkdtempSync(join(tmpdir(), 'gantry-oidc-'));
const children = [];
let passed = 0;
let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    passed++;
    process.stdout.write(`PASS ${name}\n`);
  } catch (e) {
    failed++;
    process.stdout.write(`FAIL ${name}: ${e?.message ?? e}\n`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
const eq = (a, b, what) => assert(JSON.stringify(a) === JSON.stringify(b), `${what}: expected ${JSON.stringify(b)}, got ${JSON.stringify(a)}`);

async function start(script, scriptArgs) {
  const { child, line } = await spawnJsonLine(join(here, script), scriptArgs, { log });
  children.push(child);
  return line;
}

/** POST form to the token endpoint as the minter (client_secret_basic). */
async function mint(p, params) {
  const { client_id, client_secret } = p.clients.minter;
  const res = await fetchWithTimeout(p.token_endpoint, {
    method: 'POST',
    headers: { authorization: `Basic ${Buffer.from(`${client_id}:${client_secret}`).toString('base64')}` },
    body: new URLSearchParams({ grant_type: 'client_credentials', ...params }),
  });
  return { status: res.status, body: await res.json() };
}
async function introspect(p, token, which = 'introspector') {
  const { client_id, client_secret, token_endpoint_auth_method: m } = p.clients[which];
  const headers = {};
  const body = new URLSearchParams({ token });
  if (m === 'client_secret_basic') headers.authorization = `Basic ${Buffer.from(`${client_id}:${client_secret}`).toString('base64')}`;
  else Object.entries({ client_id, client_secret }).forEach(([k, v]) => body.set(k, v));
  const res = await fetchWithTimeout(p.introspection_endpoint, { method: 'POST', headers, body });
  return { status: res.status, body: await res.json() };
}
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const TT_ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
const TT_JWT = 'urn:ietf:params:oauth:token-type:jwt';
/** RFC 8693 token exchange at the token endpoint, as `which` (client_secret_basic) or with `auth` {id, secret}. */
async function exchange(p, params, { which = 'exchanger', auth } = {}) {
  const { client_id, client_secret } = auth ?? p.clients[which];
  const body = new URLSearchParams({ grant_type: TOKEN_EXCHANGE, subject_token_type: TT_ACCESS_TOKEN });
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) body.delete(k);
    else if (Array.isArray(v)) v.forEach((x) => body.append(k, x));
    else body.set(k, v);
  }
  const res = await fetchWithTimeout(p.token_endpoint, {
    method: 'POST',
    headers: { authorization: `Basic ${Buffer.from(`${client_id}:${client_secret}`).toString('base64')}` },
    body,
  });
  return { status: res.status, body: await res.json() };
}
/** One JSON-RPC POST to the MCP endpoint. */
async function mcpPost(url, token, message) {
  const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await fetchWithTimeout(url, { method: 'POST', headers, body: JSON.stringify(message) });
  const text = await res.text();
  return { status: res.status, www: res.headers.get('www-authenticate') ?? '', text };
}
const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'check', version: '1' } },
};
const CALL_SECRET = { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'secret', arguments: {} } };

async function scenario(name, providerArgs) {
  const opaque = 'http://127.0.0.1:1/opaque-rs';
  const keysFile = join(tmp, `keys-${name.replace(/[^a-z0-9]+/gi, '_')}.json`);
  const p = await start('provider.mjs', ['--opaque-resource', opaque, '--keys-out', keysFile, ...providerArgs]);
  const s = await start('protected_server.mjs', ['--issuer', p.issuer]);
  const url = s.url;
  // The server's URL is known only now: register it as a JWT resource.
  const added = await fetchWithTimeout(p.admin_resources_url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ resource: url, format: 'jwt' }),
  });
  assert(added.ok, `admin add resource: HTTP ${added.status}`);
  const t = (n) => `${name}: ${n}`;

  await check(t('sdk_flow lists tools and calls echo (one authorization, scope from the 401)'), async () => {
    const r = await runNode(join(here, 'sdk_flow.mjs'), ['--url', url, '--tool', 'echo', '--args', '{"message":"hello"}']);
    const out = JSON.parse(r.stdout.trim().split('\n').pop());
    assert(out.ok, `sdk_flow failed: ${out.error}\n${r.stderr}`);
    eq(out.tools, ['echo', 'secret'], 'tools');
    eq(out.call?.content?.[0]?.text, 'hello', 'echo result');
    eq(out.authorizations, 1, 'authorizations');
    eq(out.scopes_requested, ['mcp:read'], 'scopes_requested');
    eq(out.resource_requested, [url], 'resource_requested');
  });
  await check(t('sdk_flow calls secret via 403 insufficient_scope step-up'), async () => {
    const r = await runNode(join(here, 'sdk_flow.mjs'), ['--url', url, '--tool', 'secret', '--username', 'bob']);
    const out = JSON.parse(r.stdout.trim().split('\n').pop());
    assert(out.ok, `sdk_flow failed: ${out.error}\n${r.stderr}`);
    eq(out.call?.content?.[0]?.text, 'the secret is 42 (sub=bob)', 'secret result');
    eq(out.authorizations, 2, 'authorizations');
    eq(out.scopes_requested, ['mcp:read', 'mcp:read mcp:admin'], 'scopes_requested');
    eq(out.resource_requested, [url, url], 'resource_requested');
  });
  await check(t('no token: 401 with resource_metadata and scope'), async () => {
    const r = await mcpPost(url, null, INIT);
    eq(r.status, 401, 'status');
    assert(r.www.includes(`resource_metadata="${s.resource_metadata}"`) && r.www.includes('scope="mcp:read"'), `WWW-Authenticate: ${r.www}`);
  });

  let readToken;
  await check(t('client_credentials JWT for the server: claims, and accepted by the server'), async () => {
    const r = await mint(p, { resource: url, scope: 'mcp:read' });
    eq(r.status, 200, `token status (${JSON.stringify(r.body)})`);
    readToken = r.body.access_token;
    const header = jose.decodeProtectedHeader(readToken);
    const claims = jose.decodeJwt(readToken);
    eq([header.alg, header.typ, p.kids.includes(header.kid)], [p.alg, 'at+jwt', true], 'header alg/typ/kid');
    eq([claims.aud, claims.scope, claims.client_id, claims.sub, claims.iss], [url, 'mcp:read', 'test-minter', 'test-minter', p.issuer], 'claims');
    assert(claims.exp - claims.iat === p.ttl && typeof claims.jti === 'string', `exp/iat/jti: ${JSON.stringify(claims)}`);
    const m = await mcpPost(url, readToken, INIT);
    eq(m.status, 200, `initialize with the token (${m.text.slice(0, 200)})`);
    assert(m.text.includes('"serverInfo"'), `initialize result: ${m.text.slice(0, 200)}`);
  });
  await check(t('mcp:read token calling secret: 403 insufficient_scope challenge'), async () => {
    const m = await mcpPost(url, readToken, CALL_SECRET);
    eq(m.status, 403, 'status');
    assert(/error="insufficient_scope"/.test(m.www) && m.www.includes('scope="mcp:read mcp:admin"') && m.www.includes('resource_metadata='), `WWW-Authenticate: ${m.www}`);
  });
  await check(t('mcp:read mcp:admin token calling secret: 200'), async () => {
    const r = await mint(p, { resource: url, scope: 'mcp:read mcp:admin' });
    const m = await mcpPost(url, r.body.access_token, CALL_SECRET);
    eq(m.status, 200, `status (${m.text.slice(0, 200)})`);
    assert(m.text.includes('the secret is 42'), m.text.slice(0, 200));
  });
  await check(t('forged with the real key (--keys-out): valid accepted, expired / wrong aud / nbf future rejected'), async () => {
    const base = { iss: p.issuer, aud: url, sub: 'mallory', client_id: 'forged', scope: 'mcp:read', iat: '+0', exp: '+60' };
    const ok = await mcpPost(url, await signToken(keysFile, base), INIT);
    eq(ok.status, 200, 'valid forged token');
    for (const [what, claims] of [
      ['expired', { ...base, iat: '-600', exp: '-300' }],
      ['wrong aud', { ...base, aud: `${url}/other` }],
      ['aud with trailing slash', { ...base, aud: `${url}/` }],
      ['nbf in the future', { ...base, nbf: '+300' }],
      ['wrong iss', { ...base, iss: `${p.issuer}/x` }],
    ]) {
      const r = await mcpPost(url, await signToken(keysFile, claims), INIT);
      eq(r.status, 401, what);
    }
  });
  await check(t('opaque resource token: gantry-introspector (basic and post) gets active:true with aud/scope/sub/client_id/exp'), async () => {
    const r = await mint(p, { resource: opaque, scope: 'mcp:read mcp:write' });
    eq(r.status, 200, 'token status');
    const tok = r.body.access_token;
    assert(tok.split('.').length !== 3, 'opaque token looks like a JWT');
    for (const which of ['introspector', 'introspector_post']) {
      const i = await introspect(p, tok, which);
      eq(i.status, 200, `${which} status`);
      const b = i.body;
      eq([b.active, b.aud, b.scope, b.sub, b.client_id, b.iss, b.token_type], [true, opaque, 'mcp:read mcp:write', 'test-minter', 'test-minter', p.issuer, 'Bearer'], which);
      assert(b.exp - b.iat === p.ttl, `${which} exp/iat: ${JSON.stringify(b)}`);
    }
    const junk = await introspect(p, 'not-a-token');
    eq(junk.body, { active: false }, 'unknown token');
  });
  await check(t('authorization-code opaque token: introspection has sub = the username; token exchange keeps it'), async () => {
    // The browser flow by hand (no SDK): register, authorize with PKCE, exchange.
    const { playBrowser } = await import('./browser.mjs');
    const redirect = 'http://127.0.0.1:8976/callback';
    const reg = await (
      await fetchWithTimeout(p.registration_endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ redirect_uris: [redirect], grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' }),
      })
    ).json();
    const verifier = jose.base64url.encode(crypto.getRandomValues(new Uint8Array(32)));
    const challenge = jose.base64url.encode(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
    const a = new URL(p.authorization_endpoint);
    const q = { client_id: reg.client_id, response_type: 'code', redirect_uri: redirect, scope: 'mcp:read', state: 's1', code_challenge: challenge, code_challenge_method: 'S256', resource: opaque };
    for (const [k, v] of Object.entries(q)) a.searchParams.set(k, v);
    const back = new URL(await playBrowser(a.href, { username: 'carol' }));
    eq([back.searchParams.get('state'), back.searchParams.get('iss')], ['s1', p.issuer], 'state / iss in the redirect');
    const tok = await (
      await fetchWithTimeout(p.token_endpoint, {
        method: 'POST',
        body: new URLSearchParams({ grant_type: 'authorization_code', code: back.searchParams.get('code'), redirect_uri: redirect, client_id: reg.client_id, code_verifier: verifier }),
      })
    ).json();
    const i = await introspect(p, tok.access_token);
    eq([i.body.active, i.body.sub, i.body.aud, i.body.scope, i.body.client_id], [true, 'carol', opaque, 'mcp:read', reg.client_id], 'introspection');
    // ... and exchangeable (RFC 8693) for a JWT for the server, still for carol.
    const x = await exchange(p, { subject_token: tok.access_token, resource: url });
    const xc = jose.decodeJwt(x.body.access_token ?? '');
    eq([x.status, xc.sub, xc.aud, xc.scope, xc.act], [200, 'carol', url, 'mcp:read', { sub: 'gantry-exchanger' }], `token exchange (${JSON.stringify(x.body)})`);
  });
  await check(t('JWT introspection: 400 unsupported_token_type (oidc-provider does not introspect its JWTs)'), async () => {
    const i = await introspect(p, readToken);
    eq([i.status, i.body.error], [400, 'unsupported_token_type'], 'introspection of a JWT');
  });
  await check(t('resource indicators are exact: trailing slash / unknown -> invalid_target; none -> token without aud'), async () => {
    for (const bad of [`${url}/`, 'http://127.0.0.1:1/unknown']) {
      const r = await mint(p, { resource: bad, scope: 'mcp:read' });
      eq([r.status, r.body.error], [400, 'invalid_target'], bad);
    }
    const none = await mint(p, { scope: 'mcp:read' });
    eq(none.status, 200, 'no resource');
    assert(none.body.access_token.split('.').length !== 3, 'no resource: expected an opaque token');
    const i = await introspect(p, none.body.access_token);
    eq([i.body.active, i.body.aud], [true, undefined], 'no resource: introspection');
  });
  // RFC 8693 token exchange: Gantry's resource (A, a JWT resource) -> the server (B).
  const gantryA = 'http://127.0.0.1:1/gantry-mcp';
  const addedA = await fetchWithTimeout(p.admin_resources_url, { method: 'POST', body: new URLSearchParams({ resource: gantryA, format: 'jwt' }) });
  assert(addedA.ok, `admin add resource A: HTTP ${addedA.status}`);
  const alice = { iss: p.issuer, aud: gantryA, sub: 'alice', client_id: 'some-mcp-client', scope: 'mcp:read mcp:write', iat: '+0', exp: '+300' };
  const counter = async () => (await (await fetchWithTimeout(new URL('/__test/requests', p.admin_resources_url))).json()).token_exchange;
  await check(t('token exchange: alice token for A -> JWT for B (sub, aud, scope, act, client_id), accepted by B; opaque target introspected'), async () => {
    const before = await counter();
    const aliceToken = await signToken(keysFile, alice);
    const r = await exchange(p, { subject_token: aliceToken, resource: url, scope: 'mcp:read' });
    eq(r.status, 200, `status (${JSON.stringify(r.body)})`);
    eq(
      [r.body.issued_token_type, r.body.token_type, r.body.expires_in, r.body.scope],
      [TT_ACCESS_TOKEN, 'Bearer', p.ttl, 'mcp:read'],
      'response',
    );
    const header = jose.decodeProtectedHeader(r.body.access_token);
    const c = jose.decodeJwt(r.body.access_token);
    eq([header.alg, header.typ, p.kids.includes(header.kid)], [p.alg, 'at+jwt', true], 'header alg/typ/kid');
    eq([c.sub, c.aud, c.scope, c.act, c.client_id, c.iss], ['alice', url, 'mcp:read', { sub: 'gantry-exchanger' }, 'gantry-exchanger', p.issuer], 'claims');
    assert(c.exp - c.iat === p.ttl && typeof c.jti === 'string', `exp/iat/jti: ${JSON.stringify(c)}`);
    const m = await mcpPost(url, r.body.access_token, INIT);
    eq(m.status, 200, `B accepts the exchanged token (${m.text.slice(0, 200)})`);
    // Without scope: the subject token's scopes that the target accepts; JWT type; audience.
    const d = await exchange(p, { subject_token: aliceToken, subject_token_type: TT_JWT, audience: url });
    eq([d.status, jose.decodeJwt(d.body.access_token ?? '').scope, d.body.scope], [200, 'mcp:read mcp:write', 'mcp:read mcp:write'], `default scope (${JSON.stringify(d.body)})`);
    // Opaque target: introspection shows sub / act / client_id.
    const o = await exchange(p, { subject_token: aliceToken, resource: opaque, scope: 'mcp:write' });
    eq(o.status, 200, `opaque target (${JSON.stringify(o.body)})`);
    assert(o.body.access_token.split('.').length !== 3, 'opaque target: expected an opaque token');
    const i = await introspect(p, o.body.access_token);
    eq(
      [i.body.active, i.body.sub, i.body.aud, i.body.scope, i.body.client_id, i.body.act],
      [true, 'alice', opaque, 'mcp:write', 'gantry-exchanger', { sub: 'gantry-exchanger' }],
      'introspection of the exchanged opaque token',
    );
    eq((await counter()) - before, 3, 'GET /__test/requests token_exchange');
  });
  await check(t('token exchange of real provider tokens (client_credentials JWT and opaque; nested act)'), async () => {
    const jwt = await exchange(p, { subject_token: readToken, resource: gantryA });
    eq([jwt.status, jose.decodeJwt(jwt.body.access_token ?? '').sub, jwt.body.scope], [200, 'test-minter', 'mcp:read'], `JWT subject (${JSON.stringify(jwt.body)})`);
    const cc = await mint(p, { resource: opaque, scope: 'mcp:read mcp:admin' });
    const op = await exchange(p, { subject_token: cc.body.access_token, resource: url, scope: 'mcp:admin' });
    eq([op.status, jose.decodeJwt(op.body.access_token ?? '').sub, op.body.scope], [200, 'test-minter', 'mcp:admin'], `opaque subject (${JSON.stringify(op.body)})`);
    // An exchanged token exchanged again: act nests the previous actor (RFC 8693 §4.1).
    const again = await exchange(p, { subject_token: jwt.body.access_token, resource: url });
    eq(jose.decodeJwt(again.body.access_token ?? '').act, { sub: 'gantry-exchanger', act: { sub: 'gantry-exchanger' } }, `nested act (${JSON.stringify(again.body)})`);
  });
  await check(t('token exchange errors: invalid_scope, invalid_target, invalid_grant, invalid_client, unauthorized_client, invalid_request'), async () => {
    const aliceToken = await signToken(keysFile, alice);
    const ok = { subject_token: aliceToken, resource: url };
    const cases = [
      ['scope the subject token lacks', { ...ok, scope: 'mcp:read mcp:admin' }, {}, 400, 'invalid_scope'],
      ['unknown target', { ...ok, resource: 'http://127.0.0.1:1/unknown' }, {}, 400, 'invalid_target'],
      ['target with a trailing slash', { ...ok, resource: `${url}/` }, {}, 400, 'invalid_target'],
      ['two targets', { ...ok, resource: [url, gantryA] }, {}, 400, 'invalid_target'],
      ['expired subject token', { ...ok, subject_token: await signToken(keysFile, { ...alice, iat: '-600', exp: '-300' }) }, {}, 400, 'invalid_grant'],
      ['garbage subject token', { ...ok, subject_token: 'garbage' }, {}, 400, 'invalid_grant'],
      ['garbage JWT', { ...ok, subject_token: 'eyJhbGciOiJub25lIn0.e30.x' }, {}, 400, 'invalid_grant'],
      ['wrong iss', { ...ok, subject_token: await signToken(keysFile, { ...alice, iss: `${p.issuer}/x` }) }, {}, 400, 'invalid_grant'],
      ['subject aud not a resource', { ...ok, subject_token: await signToken(keysFile, { ...alice, aud: 'http://127.0.0.1:1/nope' }) }, {}, 400, 'invalid_grant'],
      ['typ JWT (not an access token)', { ...ok, subject_token: await signToken(keysFile, alice, { header: { typ: 'JWT' } }) }, {}, 400, 'invalid_grant'],
      ['may_act for another client', { ...ok, subject_token: await signToken(keysFile, { ...alice, may_act: { sub: 'someone-else' } }) }, {}, 400, 'invalid_grant'],
      ['wrong client secret', ok, { auth: { client_id: 'gantry-exchanger', client_secret: 'wrong' } }, 401, 'invalid_client'],
      ['test-minter (grant not registered)', ok, { which: 'minter' }, 400, 'unauthorized_client'],
      ['no subject_token', { ...ok, subject_token: undefined }, {}, 400, 'invalid_request'],
      ['no subject_token_type', { ...ok, subject_token_type: undefined }, {}, 400, 'invalid_request'],
      ['no resource / audience', { ...ok, resource: undefined }, {}, 400, 'invalid_request'],
      ['requested_token_type id_token', { ...ok, requested_token_type: 'urn:ietf:params:oauth:token-type:id_token' }, {}, 400, 'invalid_request'],
    ];
    for (const [what, params, opts, status, error] of cases) {
      const r = await exchange(p, params, opts);
      eq([r.status, r.body.error], [status, error], `${what} (${JSON.stringify(r.body)})`);
    }
    // A public client registered for the grant: unauthorized_client (confidential clients only).
    const reg = await (
      await fetchWithTimeout(p.registration_endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ grant_types: [TOKEN_EXCHANGE], response_types: [], redirect_uris: [], token_endpoint_auth_method: 'none' }),
      })
    ).json();
    assert(reg.client_id, `registration: ${JSON.stringify(reg)}`);
    const pub = await fetchWithTimeout(p.token_endpoint, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: TOKEN_EXCHANGE, client_id: reg.client_id, subject_token: aliceToken, subject_token_type: TT_ACCESS_TOKEN, resource: url }),
    });
    const pubBody = await pub.json();
    eq([pub.status, pubBody.error], [400, 'unauthorized_client'], `public client (${JSON.stringify(pubBody)})`);
    const allowed = await exchange(p, { ...ok, subject_token: await signToken(keysFile, { ...alice, may_act: { sub: 'gantry-exchanger' } }) });
    eq(allowed.status, 200, `may_act for gantry-exchanger (${JSON.stringify(allowed.body)})`);
  });

  await check(t('discovery documents'), async () => {
    const origin = new URL(p.issuer).origin;
    const path = new URL(p.issuer).pathname.replace(/\/$/, '');
    const urls = [`${p.issuer}/.well-known/openid-configuration`, `${origin}/.well-known/oauth-authorization-server${path}`];
    for (const u of urls) {
      const r = await fetchWithTimeout(u);
      eq(r.status, 200, u);
      const d = await r.json();
      eq([d.issuer, d.jwks_uri, d.introspection_endpoint, d.code_challenge_methods_supported], [p.issuer, p.jwks_uri, p.introspection_endpoint, ['S256']], u);
      assert(d.grant_types_supported.includes(TOKEN_EXCHANGE), `${u}: grant_types_supported ${JSON.stringify(d.grant_types_supported)}`);
    }
    if (path) eq((await fetchWithTimeout(`${origin}/.well-known/openid-configuration`)).status, 404, 'root discovery of a path issuer');
    const jwks = await (await fetchWithTimeout(p.jwks_uri)).json();
    eq(jwks.keys.map((k) => k.kid), p.kids, 'JWKS kids');
    assert(jwks.keys.every((k) => !('d' in k)), 'JWKS leaks private parts');
  });
}

async function discoveryOnly(form) {
  const p = await start('provider.mjs', ['--issuer-path', '/t2', '--discovery', form]);
  const origin = new URL(p.issuer).origin;
  await check(`--discovery ${form}: only the ${form} URL form is served`, async () => {
    const oidc = (await fetchWithTimeout(`${p.issuer}/.well-known/openid-configuration`)).status;
    const oauth = (await fetchWithTimeout(`${origin}/.well-known/oauth-authorization-server/t2`)).status;
    eq([oidc, oauth], form === 'oidc' ? [200, 404] : [404, 200], '[oidc, oauth] status');
  });
}

const watchdog = setTimeout(() => {
  process.stdout.write('FAIL check_direct: overall timeout (120 s)\n');
  cleanup();
  process.exit(1);
}, 120000);
function cleanup() {
  for (const c of children) c.kill('SIGTERM');
  rmSync(tmp, { recursive: true, force: true });
}
try {
  await scenario('issuer at the root, RS256', []);
  await scenario('issuer /tenant1, ES256 (+RS256 key)', ['--issuer-path', '/tenant1', '--alg', 'ES256,RS256']);
  await discoveryOnly('oidc');
  await discoveryOnly('oauth');
} catch (e) {
  failed++;
  process.stdout.write(`FAIL setup: ${e?.message ?? e}\n`);
} finally {
  clearTimeout(watchdog);
  cleanup();
}
process.stdout.write(`${passed} passed, ${failed} failed\n`);
process.exit(failed ? 1 : 0);

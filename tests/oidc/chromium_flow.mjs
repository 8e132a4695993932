// Gantry's built-in authorization server in a real headless browser (Debian's `chromium`,
// driven by puppeteer-core): the login page and the consent page render, their forms are
// submitted by real clicks, the browser follows the redirect to the client (which the pages'
// CSP `form-action` must allow), and the code is exchanged and used for one MCP request.
//   node tests/oidc/chromium_flow.mjs --base http://127.0.0.1:PORT [--username alice]
//        [--password pw] [--chromium /usr/bin/chromium] [--mcp-url BASE/mcp]
//        [--screenshots DIR] [--timeout-ms 30000]
// Prints ONE JSON line: {"ok":true,"steps":[..],"login_title":..,"consent_title":..,
// "consent_mentions_client":true,"consent_mentions_redirect_host":true,"consent_csp":..,
// "callback":{"url","code_present","state_ok","iss"},"token_type":..,"mcp_status":200,
// "navigations":[..],"csp_violations":[],"console":[],"page_errors":[],"failed_requests":[],
// "browser":..,"ms":N} or {"ok":false,"error":"<step>: <msg>","steps":[..],"stopped_at":URL,
// ...the same diagnostics} (exit 1). Details: tests/oidc/README.md.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { loadPuppeteer } from '../interop/oidc_deps.mjs';
import { consoleToStderr, fetchWithTimeout, parseArgs, printLine, withTimeout } from './util.mjs';

consoleToStderr();
const CLIENT_NAME = 'Chromium check';
const log = (m) => process.stderr.write(`chromium_flow: ${m}\n`);
const started = Date.now();

let args;
try {
  args = parseArgs({
    base: 'string',
    username: 'string',
    password: 'string',
    chromium: 'string',
    'mcp-url': 'string',
    screenshots: 'string',
    'timeout-ms': 'string',
  });
  if (!args.base) throw new Error('--base http://HOST:PORT is required');
  if (!(Number(args['timeout-ms'] ?? 30000) > 0)) throw new Error('--timeout-ms must be a positive number');
} catch (e) {
  printLine({ ok: false, error: `arguments: ${e.message}`, steps: [] });
  process.exit(1);
}
const BASE = new URL(args.base).origin;
const MCP_URL = args['mcp-url'] ?? `${BASE}/mcp`;
const USERNAME = args.username ?? 'alice';
const PASSWORD = args.password ?? 'pw';
const CHROMIUM = args.chromium ?? '/usr/bin/chromium';
const STEP_MS = Number(args['timeout-ms'] ?? 30000);

let step = 'start';
const steps = [];
/** Runs one named step bounded by --timeout-ms; the name shows in errors. */
async function run(name, fn, ms = STEP_MS) {
  step = name;
  steps.push(name);
  log(name);
  return withTimeout(Promise.resolve().then(fn), ms, name);
}
const fail = (msg) => {
  throw new Error(msg);
};

// What the pages did, for the result line (and for the error report).
const diag = { navigations: [], csp_violations: [], console: [], page_errors: [], failed_requests: [] };
const CSP_TAG = 'gantry-chromium-flow-csp-violation ';
/** A URL for the result line: an authorization code is never printed. */
const redact = (url) => String(url).replace(/([?&]code=)[^&#]*/, '$1…');

/** The redirect URI: a tiny server whose /callback answers 200 "done" and records the query. */
function startCallbackServer() {
  let resolveHit;
  const hit = new Promise((r) => (resolveHit = r));
  const hits = [];
  const server = createServer((req, res) => {
    const u = new URL(req.url, 'http://127.0.0.1');
    if (req.method === 'GET' && u.pathname === '/callback') {
      const query = Object.fromEntries(u.searchParams);
      hits.push(query);
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' });
      res.end('done');
      resolveHit({ url: `http://${req.headers.host}${req.url}`, query, referer: req.headers.referer ?? null });
      return;
    }
    // The browser asks for the callback page's icon: none, and no 404 in its console.
    res.writeHead(u.pathname === '/favicon.ico' ? 204 : 404, { 'content-type': 'text/plain' });
    res.end(u.pathname === '/favicon.ico' ? undefined : 'not found');
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve({ server, hit, hits, port: server.address().port }));
  });
}

async function readJson(res, what) {
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    fail(`${what}: HTTP ${res.status}, not JSON: ${text.slice(0, 300)}`);
  }
}

/** The visible text of the page (the body's innerText), whitespace collapsed. */
const pageText = (page) => page.evaluate(() => (document.body?.innerText ?? '').replace(/\s+/g, ' ').trim());

/** Asserts that `selector` exists, is visible and has a non-empty box; returns the handle. */
async function visible(page, selector) {
  const el = await page.$(selector);
  if (!el) fail(`no element ${selector} on ${page.url()}`);
  const box = await el.boundingBox();
  if (!box || !(box.width > 0 && box.height > 0) || !(await el.isVisible())) fail(`${selector} is not visible (box ${JSON.stringify(box)})`);
  return el;
}

/** The submit button whose text is `label`, inside a POST form with decision=`decision`. */
async function decisionButton(page, label, decision) {
  const buttons = await page.$$('form button');
  for (const b of buttons) {
    const ok = await b.evaluate(
      (el, label, decision) =>
        el.textContent.trim() === label &&
        (el.type || 'submit') === 'submit' &&
        el.form?.method === 'post' &&
        (el.form.querySelector('input[name="decision"]')?.value === decision || (el.name === 'decision' && el.value === decision)),
      label,
      decision,
    );
    if (ok) return b;
  }
  fail(`no "${label}" button (decision=${decision}) on ${page.url()}`);
}

async function screenshot(page, name) {
  if (!args.screenshots) return;
  mkdirSync(args.screenshots, { recursive: true });
  await page.screenshot({ path: join(args.screenshots, `${name}.png`), fullPage: true });
}

let browser;
let callback;
/** Set while the Allow click is under way: a CSP violation or a failed navigation ends it. */
let onTrouble = null;
let page;
let exitCode = 1;
try {
  callback = await run('callback server', startCallbackServer);
  const redirectUri = `http://127.0.0.1:${callback.port}/callback`;

  const meta = await run('metadata', async () => {
    const res = await fetchWithTimeout(`${BASE}/.well-known/oauth-authorization-server`, {}, STEP_MS);
    if (res.status !== 200) fail(`HTTP ${res.status}`);
    return readJson(res, 'metadata');
  });
  for (const k of ['issuer', 'authorization_endpoint', 'token_endpoint', 'registration_endpoint']) {
    if (typeof meta[k] !== 'string') fail(`metadata has no ${k}`);
  }

  const client = await run('register', async () => {
    const res = await fetchWithTimeout(
      meta.registration_endpoint,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({
          client_name: CLIENT_NAME,
          redirect_uris: [redirectUri],
          token_endpoint_auth_method: 'none',
          grant_types: ['authorization_code', 'refresh_token'],
          response_types: ['code'],
        }),
      },
      STEP_MS,
    );
    const body = await readJson(res, 'register');
    if (res.status !== 201 || typeof body.client_id !== 'string') fail(`HTTP ${res.status}: ${JSON.stringify(body)}`);
    return body;
  });

  const verifier = randomBytes(32).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const state = randomBytes(16).toString('base64url');
  const authorizeUrl = new URL(meta.authorization_endpoint);
  authorizeUrl.search = new URLSearchParams({
    response_type: 'code',
    client_id: client.client_id,
    redirect_uri: redirectUri,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state,
    resource: MCP_URL,
  }).toString();

  const puppeteer = await run('load puppeteer-core', loadPuppeteer);
  browser = await run('launch chromium', () =>
    puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true, // puppeteer passes --headless=new
      args: [
        '--no-sandbox', // we run as root
        // Names resolve to nothing but the Gantry host: the browser reaches no other host
        // (puppeteer's defaults already turn off background networking, sync, updates).
        `--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE ${new URL(BASE).hostname}`,
      ],
      timeout: STEP_MS,
      protocolTimeout: STEP_MS,
    }),
  );
  const browserVersion = await browser.version();
  log(`browser ${browserVersion}: ${browser.process()?.spawnargs.join(' ')}`);

  page = await run('new page', async () => {
    const p = await browser.newPage();
    p.setDefaultTimeout(STEP_MS);
    p.setDefaultNavigationTimeout(STEP_MS);
    // A listener in every document for CSP violations (CDP-injected, so the pages' own CSP,
    // which allows no script, does not stop it); reported through the console.
    await p.evaluateOnNewDocument((tag) => {
      document.addEventListener(
        'securitypolicyviolation',
        (e) =>
          console.error(
            tag +
              JSON.stringify({
                directive: e.effectiveDirective,
                blocked: e.blockedURI,
                document: e.documentURI,
                disposition: e.disposition,
                policy: e.originalPolicy,
              }),
          ),
        true,
      );
    }, CSP_TAG);
    p.on('console', (m) => {
      const text = m.text();
      if (text.startsWith(CSP_TAG)) {
        const v = JSON.parse(text.slice(CSP_TAG.length));
        diag.csp_violations.push(v);
        onTrouble?.(`CSP ${v.directive} violation on ${redact(v.document)} (blocked ${redact(v.blocked)})`);
        return;
      }
      diag.console.push({ type: m.type(), text, url: m.location()?.url ?? null });
    });
    p.on('pageerror', (e) => diag.page_errors.push(String(e?.message ?? e)));
    p.on('requestfailed', (r) => {
      const error = r.failure()?.errorText ?? null;
      diag.failed_requests.push({ url: redact(r.url()), method: r.method(), error });
      if (r.resourceType() === 'document') onTrouble?.(`${r.method()} ${redact(r.url())} failed: ${error}`);
    });
    p.on('response', (r) => {
      const req = r.request();
      if (req.resourceType() !== 'document') return;
      diag.navigations.push({ method: req.method(), url: redact(r.url()), status: r.status() });
    });
    return p;
  });

  const authorizeRes = await run('GET /authorize', () => page.goto(authorizeUrl.href, { waitUntil: 'load' }));
  if (authorizeRes?.status() !== 200) fail(`GET /authorize: HTTP ${authorizeRes?.status()} at ${page.url()}: ${await pageText(page)}`);

  const login = await run('login page renders', async () => {
    const title = await page.title();
    if (!/log ?in|sign ?in/i.test(title)) fail(`title ${JSON.stringify(title)}: ${await pageText(page)}`);
    const username = await visible(page, 'form[method="post"] input[name="username"]');
    const password = await visible(page, 'form[method="post"] input[name="password"][type="password"]');
    const submit = await visible(page, 'form[method="post"] button[type="submit"], form[method="post"] input[type="submit"]');
    const action = await page.$eval('form[method="post"]', (f) => f.action);
    await screenshot(page, 'login');
    return { title, username, password, submit, action };
  });

  const loginRes = await run('log in (type, click)', async () => {
    await login.username.type(USERNAME);
    await login.password.type(PASSWORD);
    const [res] = await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), login.submit.click()]);
    return res;
  });
  if (loginRes && loginRes.status() !== 200) fail(`after the login POST: HTTP ${loginRes.status()} at ${page.url()}: ${await pageText(page)}`);

  const consent = await run('consent page renders', async () => {
    const title = await page.title();
    const text = await pageText(page);
    if (await page.$('input[type="password"]')) fail(`still a login page at ${page.url()} (title ${JSON.stringify(title)}): ${text.slice(0, 400)}`);
    const allow = await decisionButton(page, 'Allow', 'approve');
    const deny = await decisionButton(page, 'Deny', 'deny');
    for (const b of [allow, deny]) {
      const box = await b.boundingBox();
      if (!box || !(box.width > 0 && box.height > 0) || !(await b.isVisible())) fail('the Allow/Deny buttons are not visible');
    }
    const redirectHost = new URL(redirectUri).host;
    await screenshot(page, 'consent');
    return {
      title,
      allow,
      mentionsClient: text.includes(CLIENT_NAME),
      mentionsRedirectHost: text.includes(redirectHost),
      csp: loginRes?.headers()['content-security-policy'] ?? null,
      text: text.slice(0, 600),
    };
  });
  if (!consent.mentionsClient) fail(`the consent page does not name the client "${CLIENT_NAME}": ${consent.text}`);
  if (!consent.mentionsRedirectHost) fail(`the consent page does not show the redirect host ${new URL(redirectUri).host}: ${consent.text}`);

  // The consent POST answers 302 to the redirect URI: the browser must follow it (the
  // consent page's CSP form-action must allow the redirect origin). A blocked redirect shows
  // as a CSP violation and a failed document request, not as an error of the click.
  const cb = await run(
    'click Allow, redirect to the client',
    async () => {
      const trouble = new Promise((_, reject) => {
        onTrouble = (m) => {
          onTrouble = null;
          // Let the other records of it arrive; a CSP violation is the better explanation.
          setTimeout(() => {
            const v = diag.csp_violations[0];
            reject(new Error(v ? `CSP ${v.directive} blocked ${redact(v.blocked)} (policy of ${redact(v.document)}: ${v.policy}); ${m}` : m));
          }, 300);
        };
      });
      const nav = page.waitForNavigation({ waitUntil: 'load' });
      nav.catch(() => {}); // a blocked redirect is reported through `trouble` or the timeout
      await consent.allow.click();
      const hit = await withTimeout(Promise.race([callback.hit, trouble]), STEP_MS, 'the redirect to the callback')
        .catch((e) => fail(`${e.message}; the browser stopped at ${redact(page.url())}`))
        .finally(() => (onTrouble = null));
      await nav;
      return hit;
    },
    STEP_MS + 2000, // the inner bound (which tells where the browser stopped) answers first
  );
  const pageUrl = page.url();
  const shown = await run('callback page', () => pageText(page));
  if (!pageUrl.startsWith(redirectUri)) fail(`the browser is at ${redact(pageUrl)}, not at ${redirectUri}`);
  if (shown !== 'done') fail(`the callback page shows ${JSON.stringify(shown)}`);
  const q = cb.query;
  if (q.error) fail(`the redirect carries error=${q.error} ${q.error_description ?? ''}`);
  if (!q.code) fail(`no code in ${redact(cb.url)}`);
  if (q.state !== state) fail(`state ${JSON.stringify(q.state)}, expected ${state}`);
  if (q.iss !== meta.issuer) fail(`iss ${JSON.stringify(q.iss)}, expected the issuer ${meta.issuer}`);

  const tokens = await run('POST /token', async () => {
    const res = await fetchWithTimeout(
      meta.token_endpoint,
      {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: new URLSearchParams({
          grant_type: 'authorization_code',
          code: q.code,
          client_id: client.client_id,
          redirect_uri: redirectUri,
          code_verifier: verifier,
          resource: MCP_URL,
        }),
      },
      STEP_MS,
    );
    const body = await readJson(res, 'token');
    if (res.status !== 200 || typeof body.access_token !== 'string') fail(`HTTP ${res.status}: ${JSON.stringify(body)}`);
    return body;
  });

  const mcpStatus = await run('POST /mcp initialize', async () => {
    const res = await fetchWithTimeout(
      MCP_URL,
      {
        method: 'POST',
        headers: {
          authorization: `Bearer ${tokens.access_token}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'chromium_flow', version: '1' } },
        }),
      },
      STEP_MS,
    );
    const text = await res.text();
    if (res.status !== 200) fail(`HTTP ${res.status} ${res.headers.get('www-authenticate') ?? ''}: ${text.slice(0, 300)}`);
    if (!text.includes('"result"')) fail(`no JSON-RPC result: ${text.slice(0, 300)}`);
    return res.status;
  });

  step = 'page diagnostics';
  const consoleErrors = diag.console.filter((m) => m.type === 'error');
  if (diag.csp_violations.length) fail(`CSP violations: ${JSON.stringify(diag.csp_violations)}`);
  if (consoleErrors.length) fail(`console errors: ${JSON.stringify(consoleErrors)}`);
  if (diag.page_errors.length) fail(`page errors: ${JSON.stringify(diag.page_errors)}`);
  if (diag.failed_requests.length) fail(`failed requests: ${JSON.stringify(diag.failed_requests)}`);

  printLine({
    ok: true,
    steps,
    browser: browserVersion,
    client_id: client.client_id,
    login_title: login.title,
    login_form_action: login.action,
    consent_title: consent.title,
    consent_mentions_client: consent.mentionsClient,
    consent_mentions_redirect_host: consent.mentionsRedirectHost,
    consent_csp: consent.csp,
    callback: {
      url: redact(cb.url),
      code_present: true,
      state_ok: true,
      iss: q.iss,
      referer: cb.referer,
      page_text: shown,
    },
    token_type: tokens.token_type ?? null,
    mcp_status: mcpStatus,
    ...diag,
    ms: Date.now() - started,
  });
  exitCode = 0;
} catch (e) {
  const cause = e?.cause ? ` (${e.cause.code ?? ''} ${e.cause.message ?? e.cause})` : ''; // fetch's "fetch failed"
  const msg = String(e?.message ?? e) + cause;
  let stoppedAt = null;
  try {
    stoppedAt = page ? redact(page.url()) : null;
  } catch {}
  printLine({ ok: false, error: msg.startsWith(step) ? msg : `${step}: ${msg}`, steps, stopped_at: stoppedAt, ...diag, ms: Date.now() - started });
  process.stderr.write(`${e?.stack ?? e}\n`);
} finally {
  if (browser) {
    const proc = browser.process();
    const t0 = Date.now();
    await withTimeout(browser.close(), 10000, 'browser close').catch((e) => {
      log(`${e.message}; killing chromium (pid ${proc?.pid})`);
      proc?.kill('SIGKILL');
    });
    log(`browser closed in ${Date.now() - t0} ms`);
  }
  if (callback) {
    callback.server.closeAllConnections();
    const t1 = Date.now();
    await new Promise((r) => callback.server.close(r));
    log(`callback server closed in ${Date.now() - t1} ms`);
  }
}
process.exit(exitCode);

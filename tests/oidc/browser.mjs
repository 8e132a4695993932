// "Plays the browser" through an authorization request: plain fetch, a manual cookie jar,
// the provider's login and consent forms submitted as a user would. No browser.
//   import { playBrowser } from './browser.mjs';
//   const redirect = await playBrowser(authorizationUrl, { username: 'alice' });
//   // redirect = 'http://127.0.0.1:8976/callback?code=...&state=...&iss=...' (not fetched)

/** A small RFC 6265 cookie jar: host-only cookies, Path matching, expiry and deletion. */
export class CookieJar {
  #cookies = new Map(); // "host path name" -> { host, path, name, value, expires }

  /** Stores the Set-Cookie headers of a response to `url`. */
  store(url, response) {
    const u = new URL(url);
    for (const header of response.headers.getSetCookie()) {
      const [pair, ...attrs] = header.split(';');
      const eq = pair.indexOf('=');
      if (eq <= 0) continue;
      const cookie = { host: u.host, name: pair.slice(0, eq).trim(), value: pair.slice(eq + 1).trim(), path: defaultPath(u.pathname), expires: Infinity };
      for (const attr of attrs) {
        const [k, ...v] = attr.split('=');
        const key = k.trim().toLowerCase();
        const val = v.join('=').trim();
        if (key === 'path' && val.startsWith('/')) cookie.path = val;
        else if (key === 'max-age') cookie.expires = Date.now() + Number(val) * 1000;
        else if (key === 'expires' && cookie.expires === Infinity) cookie.expires = Date.parse(val);
      }
      const id = `${cookie.host} ${cookie.path} ${cookie.name}`;
      if (!(cookie.expires > Date.now())) this.#cookies.delete(id);
      else this.#cookies.set(id, cookie);
    }
  }

  /** The Cookie header value for a request to `url` (undefined when none). */
  header(url) {
    const u = new URL(url);
    const now = Date.now();
    const matching = [...this.#cookies.values()]
      .filter((c) => c.host === u.host && c.expires > now && pathMatches(u.pathname, c.path))
      .sort((a, b) => b.path.length - a.path.length); // longer paths first (RFC 6265 5.4)
    return matching.length ? matching.map((c) => `${c.name}=${c.value}`).join('; ') : undefined;
  }
}

function defaultPath(path) {
  const i = path.lastIndexOf('/');
  return i <= 0 ? '/' : path.slice(0, i);
}
function pathMatches(reqPath, cookiePath) {
  if (reqPath === cookiePath) return true;
  if (!reqPath.startsWith(cookiePath)) return false;
  return cookiePath.endsWith('/') || reqPath[cookiePath.length] === '/';
}

const decode = (s) =>
  s.replace(/&(amp|lt|gt|quot|#39|#x27|#x2F);/g, (_, e) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'", '#x27': "'", '#x2F': '/' })[e]);
const attr = (tag, name) => {
  const m = tag.match(new RegExp(`\\s${name}\\s*=\\s*("([^"]*)"|'([^']*)'|([^\\s>]+))`, 'i'));
  return m ? decode(m[2] ?? m[3] ?? m[4]) : undefined;
};

/** The first POST form of an HTML page: { action, fields } with every named input. */
function findForm(html) {
  for (const m of html.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/gi)) {
    const [, formAttrs, inner] = m;
    if ((attr(formAttrs, 'method') ?? 'get').toLowerCase() !== 'post') continue;
    const fields = [];
    for (const input of inner.matchAll(/<input\b[^>]*>/gi)) {
      const name = attr(input[0], 'name');
      if (name) fields.push({ name, type: (attr(input[0], 'type') ?? 'text').toLowerCase(), value: attr(input[0], 'value') ?? '' });
    }
    return { action: attr(formAttrs, 'action') ?? '', fields };
  }
  return null;
}

const snippet = (html) =>
  html.replace(/<style[\s\S]*?<\/style>|<script[\s\S]*?<\/script>/gi, ' ').replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 400);

/**
 * Follows `authorizationUrl` through login and consent until the provider redirects to the
 * client's redirect_uri; returns that redirect URL (string) without fetching it. Any
 * username is accepted by tests/oidc/provider.mjs (devInteractions); the password is ignored.
 * Throws with the status and a text snippet of the page when stuck or after `maxHops`.
 */
export async function playBrowser(
  authorizationUrl,
  { username = 'alice', password = 'pw', jar = new CookieJar(), maxHops = 20, timeoutMs = 10000 } = {},
) {
  const redirectUri = new URL(authorizationUrl).searchParams.get('redirect_uri');
  if (!redirectUri) throw new Error(`playBrowser: the authorization URL has no redirect_uri: ${authorizationUrl}`);
  const target = new URL(redirectUri);
  const isRedirectUri = (u) => u.origin === target.origin && u.pathname === target.pathname;

  let request = { url: String(authorizationUrl), method: 'GET', body: undefined };
  for (let hop = 1; hop <= maxHops; hop++) {
    const headers = { accept: 'text/html' };
    const cookie = jar.header(request.url);
    if (cookie) headers.cookie = cookie;
    if (request.body) headers['content-type'] = 'application/x-www-form-urlencoded';
    let res;
    try {
      res = await fetch(request.url, { method: request.method, headers, body: request.body, redirect: 'manual', signal: AbortSignal.timeout(timeoutMs) });
    } catch (e) {
      throw new Error(`playBrowser: ${request.method} ${request.url} failed: ${e.message}`);
    }
    jar.store(request.url, res);

    if (res.status >= 300 && res.status < 400) {
      await res.body?.cancel();
      const location = res.headers.get('location');
      if (!location) throw new Error(`playBrowser: ${res.status} without Location from ${request.url}`);
      const next = new URL(location, request.url);
      if (isRedirectUri(next)) return next.href;
      request = { url: next.href, method: 'GET', body: undefined };
      continue;
    }

    const html = await res.text();
    const form = res.ok ? findForm(html) : null;
    if (!form) {
      throw new Error(`playBrowser: stuck at ${request.method} ${request.url}: HTTP ${res.status}: ${snippet(html)}`);
    }
    // Fill the form: hidden inputs as they are, the login fields with the credentials.
    const body = new URLSearchParams();
    for (const f of form.fields) {
      if (f.type === 'password') body.set(f.name, password);
      else if (f.name === 'login' || f.name === 'username' || f.type === 'email') body.set(f.name, username);
      else if (f.type !== 'submit' || f.value) body.set(f.name, f.value);
    }
    const action = new URL(form.action || request.url, request.url);
    // A form that posts straight to the redirect_uri (response_mode=form_post): hand back
    // its fields as a query string.
    if (isRedirectUri(action)) {
      for (const [k, v] of body) action.searchParams.set(k, v);
      return action.href;
    }
    request = { url: action.href, method: 'POST', body: body.toString() };
  }
  throw new Error(`playBrowser: no redirect to ${redirectUri} after ${maxHops} hops (last: ${request.method} ${request.url})`);
}

// playBrowser (browser.mjs) as a command, for OAuth clients not written in JavaScript
// (tests/oidc/py_flow.py): follows an authorization URL through login and consent.
//   node tests/oidc/browser_cli.mjs --url AUTHORIZATION_URL [--username alice] [--password pw] [--timeout-ms 10000]
// Prints ONE JSON line: {"redirect":"http://127.0.0.1:8976/callback?code=…&state=…&iss=…"}
// (exit 0) or {"error":"…"} (exit 1).
import { playBrowser } from './browser.mjs';
import { consoleToStderr, parseArgs, printLine, withTimeout } from './util.mjs';

consoleToStderr();
try {
  const args = parseArgs({ url: 'string', username: 'string', password: 'string', 'timeout-ms': 'string' });
  if (!args.url) throw new Error('--url is required');
  const ms = Number(args['timeout-ms'] ?? 10000);
  const redirect = await withTimeout(
    playBrowser(args.url, { username: args.username ?? 'alice', password: args.password ?? 'pw', timeoutMs: ms }),
    ms,
    'playBrowser',
  );
  printLine({ redirect });
  process.exit(0);
} catch (e) {
  printLine({ error: String(e?.message ?? e) });
  process.exit(1);
}

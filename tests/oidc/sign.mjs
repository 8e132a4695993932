// Signs a JWT with a key written by `provider.mjs --keys-out FILE`, so tests can forge
// tokens with the provider's real key (expired, wrong audience, not yet valid...).
//   node tests/oidc/sign.mjs --keys FILE --claims JSON [--kid KID] [--header JSON]
// Prints the compact JWT on stdout. In --claims, a string value "+N" / "-N" for exp, nbf
// or iat means now + N / now - N seconds. Header: {alg, kid, typ: "at+jwt"} unless
// overridden by --header (e.g. '{"typ":"JWT"}' or '{"kid":"unknown"}').
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { jose } from '../interop/oidc_deps.mjs';
import { parseArgs } from './util.mjs';

/** Signs `claims` with the key `kid` (default: the first key) of a --keys-out file. */
export async function signToken(keysFile, claims, { kid, header = {} } = {}) {
  const keys = JSON.parse(readFileSync(keysFile, 'utf8'));
  const key = kid ? keys.find((k) => k.kid === kid) : keys[0];
  if (!key) throw new Error(`no key ${kid ?? ''} in ${keysFile}`);
  const now = Math.floor(Date.now() / 1000);
  const payload = { ...claims };
  for (const c of ['exp', 'nbf', 'iat']) {
    if (typeof payload[c] === 'string' && /^[+-]\d+$/.test(payload[c])) payload[c] = now + Number(payload[c]);
  }
  const privateKey = await jose.importPKCS8(key.private_pem, key.alg);
  return new jose.SignJWT(payload).setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'at+jwt', ...header }).sign(privateKey);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = parseArgs({ keys: 'string', claims: 'string', kid: 'string', header: 'string' });
  if (!args.keys || !args.claims) throw new Error('--keys FILE and --claims JSON are required');
  const jwt = await signToken(args.keys, JSON.parse(args.claims), { kid: args.kid, header: args.header ? JSON.parse(args.header) : {} });
  process.stdout.write(`${jwt}\n`);
}

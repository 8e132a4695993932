// RFC 8693 OAuth 2.0 Token Exchange for provider.mjs (an oidc-provider extension grant).
// A confidential client presents an access token this provider issued (subject_token) and
// gets a new access token, for the same subject, for another registered resource:
//   grant_type=urn:ietf:params:oauth:grant-type:token-exchange
//   subject_token=… subject_token_type=urn:ietf:params:oauth:token-type:access_token|jwt
//   resource=<target> (and/or audience=<target>) [scope=…] [requested_token_type=…access_token]
// The issued token is one of oidc-provider's own AccessToken models (same format, signing key
// and claims as its other access tokens) plus `act: {sub: <client id>}` (RFC 8693 §4.1).
// Behaviour and error codes: tests/oidc/README.md ("Token exchange").
import { jose, oidcErrors } from '../interop/oidc_deps.mjs';

export const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
export const TT_ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
export const TT_JWT = 'urn:ietf:params:oauth:token-type:jwt';
/** `gty` of the issued AccessToken models (marks them for `exchangeExtraClaims`). */
const GTY = 'token_exchange';

const PARAMETERS = [
  'subject_token',
  'subject_token_type',
  'actor_token',
  'actor_token_type',
  'requested_token_type',
  'resource',
  'audience',
  'scope',
];

/**
 * The `extraTokenClaims` of a token-exchange AccessToken (its `act` claim), else undefined.
 * oidc-provider overwrites `token.extra` with the result of `configuration.extraTokenClaims`
 * while it formats a token, so the configuration hook must hand it back (see README quirks).
 */
export function exchangeExtraClaims(token) {
  return token.kind === 'AccessToken' && token.gty === GTY ? token.extra : undefined;
}

/**
 * Registers the grant on `provider`.
 *   resourceInfo(indicator) -> {format: 'jwt'|'opaque', scopes: [..]} | undefined (registered resources)
 *   resourceServerInfo(indicator) -> the getResourceServerInfo answer for a registered resource
 *   publicJwks: the provider's public signing keys (verifies JWT subject tokens)
 *   onSuccess(): called once per issued token
 */
export function registerTokenExchange(provider, { resourceInfo, resourceServerInfo, publicJwks, onSuccess = () => {} }) {
  const keySet = jose.createLocalJWKSet({ keys: publicJwks });
  const algorithms = [...new Set(publicJwks.map((k) => k.alg))];

  async function tokenExchangeHandler(ctx) {
    const { params, client } = ctx.oidc;
    // Confidential clients only: client authentication already ran (invalid_client on a bad
    // secret); a public client (token_endpoint_auth_method none) authenticates nothing.
    if (client.clientAuthMethod === 'none') {
      throw new oidcErrors.UnauthorizedClient('token exchange requires a confidential client');
    }
    for (const p of ['subject_token', 'subject_token_type']) {
      if (!params[p]) throw new oidcErrors.InvalidRequest(`missing required parameter ${p}`);
    }
    if (![TT_ACCESS_TOKEN, TT_JWT].includes(params.subject_token_type)) {
      throw new oidcErrors.InvalidRequest(`unsupported subject_token_type (supported: ${TT_ACCESS_TOKEN}, ${TT_JWT})`);
    }
    if (params.requested_token_type !== undefined && params.requested_token_type !== TT_ACCESS_TOKEN) {
      throw new oidcErrors.InvalidRequest(`unsupported requested_token_type (supported: ${TT_ACCESS_TOKEN})`);
    }
    if (params.actor_token !== undefined || params.actor_token_type !== undefined) {
      throw new oidcErrors.InvalidRequest('actor_token is not supported (the authenticated client is the actor)');
    }

    // The target: resource and/or audience, both taken as resource indicators (exact strings).
    const targets = [...new Set([...asList(params.resource), ...asList(params.audience)])];
    if (targets.length === 0) throw new oidcErrors.InvalidRequest('missing required parameter resource (or audience)');
    if (targets.length > 1) throw new oidcErrors.InvalidTarget('only one target resource is supported (resource / audience)');
    const [target] = targets;
    const targetInfo = resourceInfo(target);
    if (!targetInfo) throw new oidcErrors.InvalidTarget(`unknown resource indicator: ${target}`);

    const subject = await readSubjectToken(ctx, params.subject_token, params.subject_token_type);
    if (subject.mayAct !== undefined && subject.mayAct?.sub !== client.clientId) {
      throw invalidGrant(`the subject token's may_act does not allow client ${client.clientId}`);
    }

    // Scope: never more than the subject token had, and only what the target accepts.
    const accepted = new Set(targetInfo.scopes);
    const requested = (params.scope ?? '').split(' ').filter(Boolean);
    let granted;
    if (requested.length) {
      for (const s of requested) {
        if (!subject.scopes.has(s)) throw new oidcErrors.InvalidScope(`the subject token does not carry scope ${s}`, s);
        if (!accepted.has(s)) throw new oidcErrors.InvalidScope(`resource ${target} does not accept scope ${s}`, s);
      }
      granted = [...new Set(requested)];
    } else {
      granted = [...subject.scopes].filter((s) => accepted.has(s));
    }

    const act = { sub: client.clientId, ...(subject.act !== undefined ? { act: subject.act } : {}) };
    const at = new provider.AccessToken({
      accountId: subject.sub,
      client,
      gty: GTY,
      scope: granted.join(' ') || undefined,
      extra: { act },
    });
    at.resourceServer = new provider.ResourceServer(target, await resourceServerInfo(target));
    ctx.oidc.entity('AccessToken', at);
    const value = await at.save();
    onSuccess();
    process.stderr.write(`token exchange: ${client.clientId} for sub=${subject.sub}: ${subject.aud} -> ${target} (${at.format}, scope "${at.scope ?? ''}")\n`);

    ctx.body = {
      access_token: value,
      issued_token_type: TT_ACCESS_TOKEN,
      token_type: at.tokenType,
      expires_in: at.expiration,
      ...(at.scope ? { scope: at.scope } : {}),
    };
  }

  /** -> {sub, aud, scopes: Set, act, mayAct} of a valid access token of this provider. */
  async function readSubjectToken(ctx, value, type) {
    const looksJwt = value.split('.').length === 3;
    if (type === TT_JWT && !looksJwt) throw invalidGrant('subject_token is not a JWT (subject_token_type jwt)');
    let claims;
    if (looksJwt) {
      try {
        ({ payload: claims } = await jose.jwtVerify(value, keySet, {
          issuer: provider.issuer,
          typ: 'at+jwt', // an access token, not an ID token signed with the same key
          algorithms,
          requiredClaims: ['sub', 'aud', 'exp'],
        }));
      } catch (e) {
        throw invalidGrant(e?.code === 'ERR_JWT_EXPIRED' ? 'subject_token is expired' : `subject_token is invalid: ${e?.message ?? e}`);
      }
    } else {
      // Opaque: one of this provider's stored access tokens (authorization code / refresh /
      // token exchange = AccessToken, client_credentials = ClientCredentials).
      const token = (await provider.AccessToken.find(value)) ?? (await provider.ClientCredentials.find(value));
      if (!token?.isValid) throw invalidGrant('subject_token is unknown, expired or revoked');
      if (token.grantId) {
        const grant = await provider.Grant.find(token.grantId, { ignoreExpiration: true });
        if (!grant || grant.isExpired || grant.clientId !== token.clientId || grant.accountId !== token.accountId) {
          throw invalidGrant('the grant of subject_token is gone');
        }
      }
      claims = { ...token.extra, sub: token.accountId ?? token.clientId, aud: token.aud, scope: token.scope };
    }
    if (typeof claims.sub !== 'string' || !claims.sub) throw invalidGrant('subject_token has no sub');
    const auds = asList(claims.aud);
    const aud = auds.find((a) => typeof a === 'string' && resourceInfo(a));
    if (!aud) throw invalidGrant(`subject_token audience ${JSON.stringify(claims.aud ?? null)} is not a resource of this provider`);
    const scopes = new Set(typeof claims.scope === 'string' ? claims.scope.split(' ').filter(Boolean) : []);
    return { sub: claims.sub, aud, scopes, act: claims.act, mayAct: claims.may_act };
  }

  provider.registerGrantType(TOKEN_EXCHANGE, tokenExchangeHandler, PARAMETERS, ['resource', 'audience']);

  // oidc-provider answers a grant type the client is not registered for with invalid_request
  // ("requested grant type is not allowed for this client"); RFC 6749 §5.2 says
  // unauthorized_client. Rewritten for this grant only (the other grants keep their answer).
  provider.use(async (ctx, next) => {
    await next();
    if (
      ctx.status === 400 &&
      ctx.body?.error === 'invalid_request' &&
      ctx.body.error_description === 'requested grant type is not allowed for this client' &&
      ctx.oidc?.params?.grant_type === TOKEN_EXCHANGE
    ) {
      ctx.body = { error: 'unauthorized_client', error_description: 'this client is not allowed to use the token-exchange grant' };
    }
  });
}

function asList(v) {
  if (v === undefined || v === null) return [];
  return Array.isArray(v) ? v : [v];
}

/** invalid_grant with a description (oidc-provider's InvalidGrant has a fixed one). */
function invalidGrant(description) {
  const e = new oidcErrors.InvalidGrant({ detail: description });
  e.error_description = description;
  return e;
}

//! Who is calling: turns a request's headers into a [`Principal`], or refuses it with
//! an [`AuthError`].
//!
//! Today's one source of identity is static API keys from `[auth]` in the config
//! file. A key is presented as `Authorization: Bearer <key>` or `X-API-Key: <key>`;
//! the config holds only its SHA-256, so the presented key is hashed and the digest
//! compared with every configured digest in constant time (no early exit, whichever
//! key matches). With no key configured, every caller is the one anonymous principal.
//!
//! Invariants: a key (presented or configured) is never logged, displayed or put in
//! an error; authentication fails closed (keys configured but none usable → every
//! request refused); the decision is made from headers alone, before any body is read
//! or any stream starts. This module does not know HTTP responses: the front door maps
//! an [`AuthError`] to a status, a JSON-RPC body and the [`AuthError::challenge`].
//!
//! With `[auth.oauth]`, OAuth 2.1 access tokens (JWT) of trusted authorization
//! servers are a second source ([`oauth`]). A bearer value that matches a configured
//! key is that key; any other is a token: the two are never confused (a key is an
//! exact digest match, and `X-API-Key` carries keys only).

pub mod builtin;
pub mod oauth;
pub mod policy;
pub mod vault;

use crate::config::AuthConfig;
use http::header::{HeaderMap, AUTHORIZATION};
use oauth::{OAuthError, ResourceServer, TokenInfo};
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Name of the principal every caller is when no key is configured. Reserved: config
/// validation refuses it as the principal of an API key.
pub const ANONYMOUS: &str = "anonymous";

/// Header carrying an API key, as an alternative to `Authorization: Bearer`.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The realm named in every `WWW-Authenticate` challenge.
pub const REALM: &str = "gantry";

/// An authenticated caller. Sessions (and `per-user` backend connections) belong to
/// one principal; two requests with the same principal are the same caller. An OAuth
/// caller is its (issuer, subject): a refreshed token keeps its sessions.
#[derive(Clone)]
pub struct Principal {
    name: Arc<str>,
    token: Option<Arc<TokenInfo>>,
}

impl PartialEq for Principal {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Principal {}

impl std::hash::Hash for Principal {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl Principal {
    /// The principal of every caller when authentication is off.
    pub fn anonymous() -> Self {
        Self::named(ANONYMOUS)
    }

    /// A principal with this name (as configured; validated by the config loader).
    pub fn named(name: &str) -> Self {
        Self {
            name: Arc::from(name),
            token: None,
        }
    }

    /// The caller an access token speaks for: `<subject>@<issuer>` (no API-key
    /// principal can contain `/` or `:`, so the two never collide).
    pub fn from_token(info: TokenInfo) -> Self {
        Self {
            name: Arc::from(format!("{}@{}", info.subject, info.issuer)),
            token: Some(Arc::new(info)),
        }
    }

    /// The name: what sessions are bound to and what logs show.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The name, shared (no copy).
    pub fn shared_name(&self) -> Arc<str> {
        self.name.clone()
    }

    /// Whether this is the anonymous principal (authentication off).
    pub fn is_anonymous(&self) -> bool {
        &*self.name == ANONYMOUS
    }

    /// The access token's claims, for an OAuth caller.
    pub fn token(&self) -> Option<&TokenInfo> {
        self.token.as_deref()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Principal({:?})", &*self.name)
    }
}

/// Why a request has no principal. The message is what the client sees; it never
/// contains the presented credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credentials (or only credentials of a scheme Gantry does not use, such as
    /// `Basic`): 401 with a bare `Bearer` challenge (RFC 6750 §3: no error code when
    /// the client sent no token).
    #[error("Unauthorized: an API key is required (send `Authorization: Bearer <key>` or `X-API-Key: <key>`)")]
    Missing,
    /// A key was presented and matches none configured: 401, `error="invalid_token"`.
    #[error("Unauthorized: the API key is not valid")]
    InvalidKey,
    /// Credentials that cannot be read (two of them, an empty one, not visible ASCII,
    /// a token in the query string): 400, `error="invalid_request"` (RFC 6750 §3.1).
    #[error("Bad Request: {0}")]
    Malformed(&'static str),
    /// With OAuth on, no credentials: 401 with the challenge that starts a login.
    #[error("Unauthorized: an access token is required (`Authorization: Bearer <token>`; the WWW-Authenticate header says where to get one)")]
    NoToken,
    /// An access token that was not accepted (401 / 403 / 503).
    #[error("{}", token_message(.0))]
    Token(OAuthError),
}

fn token_message(e: &OAuthError) -> String {
    match e {
        OAuthError::Invalid(_, why) => format!("Unauthorized: {why}"),
        OAuthError::InsufficientScope { .. } => format!("Forbidden: {e}"),
        OAuthError::Unavailable(_) => format!("Service Unavailable: {e}"),
    }
}

impl AuthError {
    /// The `WWW-Authenticate` value that goes with this refusal (RFC 6750 §3).
    pub fn challenge(&self) -> &'static str {
        match self {
            Self::Missing | Self::NoToken | Self::Token(OAuthError::Unavailable(_)) => {
                "Bearer realm=\"gantry\""
            }
            Self::InvalidKey | Self::Token(_) => "Bearer realm=\"gantry\", error=\"invalid_token\"",
            Self::Malformed(_) => "Bearer realm=\"gantry\", error=\"invalid_request\"",
        }
    }

    /// The refusal's metric label (a fixed set).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Missing | Self::NoToken => "no_credentials",
            Self::InvalidKey => "invalid_key",
            Self::Malformed(_) => "malformed",
            Self::Token(OAuthError::Invalid(label, _)) => label,
            Self::Token(OAuthError::InsufficientScope { .. }) => "insufficient_scope",
            Self::Token(OAuthError::Unavailable(_)) => "issuer_unavailable",
        }
    }

    /// The HTTP status this refusal gets.
    pub fn status(&self) -> u16 {
        match self {
            Self::Malformed(_) => 400,
            Self::Token(OAuthError::InsufficientScope { .. }) => 403,
            Self::Token(OAuthError::Unavailable(_)) => 503,
            _ => 401,
        }
    }
}

/// A configured key: its digest and whom it identifies.
struct ApiKey {
    digest: [u8; 32],
    principal: Principal,
}

/// Decides who a request is from. Built once from the validated config.
pub struct Authenticator {
    /// Whether keys are configured at all. Kept apart from `keys` so that a key that
    /// fails to decode (impossible after validation) can never turn authentication off.
    required: bool,
    keys: Vec<ApiKey>,
    oauth: Option<ResourceServer>,
    /// Remember each OAuth caller's latest token (a backend exchanges them).
    keep_tokens: bool,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("required", &self.required)
            .field("keys", &self.keys.len())
            .field("oauth", &self.oauth)
            .finish()
    }
}

impl Authenticator {
    /// Builds the authenticator for a validated `[auth]` section; `public_url` is the
    /// MCP endpoint's public URL (required with `[auth.oauth]`).
    /// Whether callers' tokens are kept for token exchange.
    pub fn keeps_tokens(&self) -> bool {
        self.keep_tokens
    }

    /// With `keep_tokens`, each OAuth caller's latest token is remembered for the
    /// backends that exchange it ([`vault`]).
    /// With `builtin`, Gantry's own authorization server is the first trusted issuer.
    pub fn with_oauth(
        cfg: &AuthConfig,
        public_url: Option<&str>,
        keep_tokens: bool,
        builtin: Option<Arc<builtin::AuthServer>>,
    ) -> Result<Self, String> {
        let mut a = Self::new(cfg);
        let oauth = match (&cfg.oauth, &builtin) {
            (Some(o), _) => Some(o.clone()),
            (None, Some(_)) => Some(crate::config::OAuthConfig::builtin_only()),
            (None, None) => None,
        };
        if let Some(o) = &oauth {
            let url = public_url.ok_or("[auth.oauth] needs the public URL of the MCP endpoint")?;
            let rs = ResourceServer::new(o, url, builtin)?;
            tracing::info!(issuers = ?o.issuers.iter().map(|i| i.issuer.as_str()).collect::<Vec<_>>(), resource = url, "OAuth access tokens are accepted");
            a.oauth = Some(rs);
            a.required = true;
            a.keep_tokens = keep_tokens;
        }
        Ok(a)
    }

    /// The OAuth resource server, when `[auth.oauth]` is configured.
    pub fn oauth(&self) -> Option<&ResourceServer> {
        self.oauth.as_ref()
    }

    /// Builds the authenticator for a validated `[auth]` section (API keys only).
    pub fn new(cfg: &AuthConfig) -> Self {
        let keys: Vec<ApiKey> = cfg
            .api_keys
            .iter()
            .enumerate()
            .filter_map(|(i, k)| match decode_sha256_hex(&k.sha256) {
                Some(digest) => Some(ApiKey {
                    digest,
                    principal: Principal::named(&k.principal),
                }),
                None => {
                    tracing::error!("auth.api_keys[{i}]: unusable key digest; this key is refused");
                    None
                }
            })
            .collect();
        let auth = Self {
            required: !cfg.api_keys.is_empty(),
            keys,
            oauth: None,
            keep_tokens: false,
        };
        if auth.required {
            let mut principals: Vec<&str> =
                auth.keys.iter().map(|k| k.principal.as_str()).collect();
            principals.sort_unstable();
            principals.dedup();
            tracing::info!(
                keys = auth.keys.len(),
                principals = principals.len(),
                "API-key authentication is on"
            );
        }
        auth
    }

    /// Whether callers must present a key (false: everyone is anonymous).
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// The principal behind these request headers. `query` is the request's query
    /// string: an access token there is refused (it would end up in logs).
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<Principal, AuthError> {
        if !self.required {
            return Ok(Principal::anonymous());
        }
        if query.is_some_and(|q| {
            q.split('&')
                .any(|kv| kv.split('=').next() == Some("access_token"))
        }) {
            return Err(AuthError::Malformed(
                "access tokens in the query string are refused; send `Authorization: Bearer <token>`",
            ));
        }
        let missing = if self.oauth.is_some() {
            AuthError::NoToken
        } else {
            AuthError::Missing
        };
        let (value, via_bearer) = presented_key(headers)?.ok_or(missing)?;
        if let Some(p) = self.lookup(value) {
            return Ok(p);
        }
        match &self.oauth {
            Some(rs) if via_bearer => {
                let info = rs.validate(value).await.map_err(AuthError::Token)?;
                let exp = info.expires_at;
                let p = Principal::from_token(info);
                if self.keep_tokens {
                    vault::remember(p.as_str(), value, exp.unwrap_or(u64::MAX));
                }
                Ok(p)
            }
            _ => Err(AuthError::InvalidKey),
        }
    }

    /// The `WWW-Authenticate` value for a refusal: with OAuth on, one that names
    /// the protected-resource metadata (and the scopes to ask for).
    pub fn challenge(&self, e: &AuthError) -> String {
        let Some(rs) = &self.oauth else {
            return e.challenge().to_owned();
        };
        match e {
            AuthError::Missing
            | AuthError::NoToken
            | AuthError::Token(OAuthError::Unavailable(_)) => rs.challenge(None, None),
            AuthError::InvalidKey => rs.challenge(
                Some(("invalid_token", "the credentials are not valid")),
                None,
            ),
            AuthError::Token(OAuthError::Invalid(_, why)) => {
                rs.challenge(Some(("invalid_token", why)), None)
            }
            AuthError::Token(OAuthError::InsufficientScope { missing, ask }) => rs.challenge(
                Some((
                    "insufficient_scope",
                    &format!("this request needs the scope {missing}"),
                )),
                Some(ask),
            ),
            AuthError::Malformed(why) => rs.challenge(Some(("invalid_request", why)), None),
        }
    }

    /// The principal of `key`, scanning every configured digest in constant time.
    fn lookup(&self, key: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let mut found = Choice::from(0);
        let mut index = 0u32;
        for (i, k) in self.keys.iter().enumerate() {
            let eq = k.digest.as_slice().ct_eq(digest.as_slice());
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            index.conditional_assign(&i, eq);
            found |= eq;
        }
        if bool::from(found) {
            let index = usize::try_from(index).ok()?;
            self.keys.get(index).map(|k| k.principal.clone())
        } else {
            None
        }
    }
}

/// The key in `Authorization: Bearer <key>` or `X-API-Key: <key>`, if any.
///
/// An `Authorization` header of another scheme (`Basic …`) is not ours and is
/// ignored. Two ways of sending a key at once, a repeated header, an empty key or a
/// value that is not visible ASCII is malformed (RFC 6750 §2: one method per request).
fn presented_key(headers: &HeaderMap) -> Result<Option<(&str, bool)>, AuthError> {
    let bearer = match single(headers, AUTHORIZATION.as_str())? {
        None => None,
        Some(v) => {
            let (scheme, rest) = v.split_once(' ').unwrap_or((v, ""));
            if scheme.eq_ignore_ascii_case("bearer") {
                Some(token(
                    rest.trim_start_matches(' '),
                    "the Bearer token is empty",
                )?)
            } else {
                None
            }
        }
    };
    let api_key = match single(headers, API_KEY_HEADER)? {
        None => None,
        Some(v) => Some(token(v, "the X-API-Key header is empty")?),
    };
    match (bearer, api_key) {
        (Some(_), Some(_)) => Err(AuthError::Malformed(
            "send the API key in Authorization or in X-API-Key, not both",
        )),
        (Some(b), None) => Ok(Some((b, true))),
        (None, Some(k)) => Ok(Some((k, false))),
        (None, None) => Ok(None),
    }
}

/// The one value of header `name` as text (`None` if absent).
fn single<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<Option<&'h str>, AuthError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(AuthError::Malformed(if name == API_KEY_HEADER {
            "more than one X-API-Key header"
        } else {
            "more than one Authorization header"
        }));
    }
    first
        .to_str()
        .map(|v| Some(v.trim()))
        .map_err(|_| AuthError::Malformed("credentials must be visible ASCII"))
}

/// A key as presented: non-empty, no whitespace inside.
fn token<'a>(v: &'a str, empty: &'static str) -> Result<&'a str, AuthError> {
    let v = v.trim();
    if v.is_empty() {
        Err(AuthError::Malformed(empty))
    } else if v
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        Err(AuthError::Malformed("the credentials contain whitespace"))
    } else {
        Ok(v)
    }
}

/// 64 hexadecimal characters (either case) as 32 bytes.
pub fn decode_sha256_hex(s: &str) -> Option<[u8; 32]> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let hi = hex_value(*pair.first()?)?;
        let lo = hex_value(*pair.get(1)?)?;
        *o = (hi << 4) | lo;
    }
    Some(out)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::config::ApiKeyConfig;
    use http::HeaderValue;

    const ALICE_KEY: &str = "alice-key";
    const BOB_KEY: &str = "bob-key";

    fn hex(key: &str) -> String {
        Sha256::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn auth(keys: &[(&str, &str)]) -> Authenticator {
        Authenticator::new(&AuthConfig {
            oauth: None,
            rules: Vec::new(),
            api_keys: keys
                .iter()
                .map(|(principal, key)| ApiKeyConfig {
                    principal: (*principal).to_owned(),
                    sha256: hex(key),
                })
                .collect(),
            ..AuthConfig::default()
        })
    }

    fn authn(a: &Authenticator, h: &HeaderMap) -> Result<Principal, AuthError> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(a.authenticate(h, None))
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn digest_matches_the_readme_recipe() {
        // `printf %s alice-key | sha256sum`
        assert_eq!(
            hex(ALICE_KEY),
            "72ee9d4355ccb9d3a4c9dbf37382e38e75c1b1a225b5bd1f729ee91bbda30c20"
        );
    }

    #[test]
    fn bearer_and_x_api_key_are_read() {
        let h = headers(&[("authorization", "Bearer k1")]);
        assert_eq!(presented_key(&h), Ok(Some(("k1", true))));
        let h = headers(&[("authorization", "bearer   k1 ")]);
        assert_eq!(
            presented_key(&h),
            Ok(Some(("k1", true))),
            "scheme is case-insensitive"
        );
        let h = headers(&[("x-api-key", " k2 ")]);
        assert_eq!(presented_key(&h), Ok(Some(("k2", false))));
        assert_eq!(presented_key(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn other_schemes_are_not_credentials() {
        let h = headers(&[("authorization", "Basic YWxpY2U6cHc=")]);
        assert_eq!(presented_key(&h), Ok(None));
        let h = headers(&[("authorization", "Bearerish k1")]);
        assert_eq!(presented_key(&h), Ok(None));
        // A Basic header beside an X-API-Key is not "two methods".
        let h = headers(&[("authorization", "Basic eA=="), ("x-api-key", "k2")]);
        assert_eq!(presented_key(&h), Ok(Some(("k2", false))));
    }

    #[test]
    fn malformed_credentials() {
        for h in [
            headers(&[("authorization", "Bearer")]),
            headers(&[("authorization", "Bearer   ")]),
            headers(&[("authorization", "Bearer a b")]),
            headers(&[("x-api-key", "")]),
            headers(&[("authorization", "Bearer k1"), ("x-api-key", "k1")]),
            headers(&[
                ("authorization", "Bearer k1"),
                ("authorization", "Bearer k2"),
            ]),
            headers(&[("x-api-key", "k1"), ("x-api-key", "k1")]),
        ] {
            assert!(
                matches!(presented_key(&h), Err(AuthError::Malformed(_))),
                "{h:?}"
            );
        }
        let mut h = HeaderMap::new();
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer \xffk").unwrap(),
        );
        assert!(matches!(presented_key(&h), Err(AuthError::Malformed(_))));
    }

    #[test]
    fn no_keys_means_anonymous() {
        let a = auth(&[]);
        assert!(!a.is_required());
        for h in [
            HeaderMap::new(),
            headers(&[("authorization", "Bearer whatever")]),
        ] {
            let p = authn(&a, &h).unwrap();
            assert!(p.is_anonymous());
            assert_eq!(p.as_str(), ANONYMOUS);
        }
    }

    #[test]
    fn keys_map_to_their_principals() {
        let a = auth(&[("alice", ALICE_KEY), ("bob", BOB_KEY), ("alice", "alice-2")]);
        assert!(a.is_required());
        let p = authn(&a, &headers(&[("authorization", "Bearer alice-key")])).unwrap();
        assert_eq!(p, Principal::named("alice"));
        assert!(!p.is_anonymous());
        let p = authn(&a, &headers(&[("x-api-key", BOB_KEY)])).unwrap();
        assert_eq!(p.as_str(), "bob");
        // Two keys of one principal (rotation): both work.
        let p = authn(&a, &headers(&[("x-api-key", "alice-2")])).unwrap();
        assert_eq!(p.as_str(), "alice");
    }

    #[test]
    fn refusals() {
        let a = auth(&[("alice", ALICE_KEY)]);
        assert_eq!(authn(&a, &HeaderMap::new()), Err(AuthError::Missing));
        assert_eq!(
            authn(&a, &headers(&[("authorization", "Basic eA==")])),
            Err(AuthError::Missing)
        );
        for wrong in ["alice-ke", "alice-key2", "ALICE-KEY", "bob-key"] {
            assert_eq!(
                authn(
                    &a,
                    &headers(&[("authorization", &format!("Bearer {wrong}"))])
                ),
                Err(AuthError::InvalidKey),
                "{wrong}"
            );
        }
        // The digest itself is not a key.
        assert_eq!(
            authn(&a, &headers(&[("x-api-key", &hex(ALICE_KEY))])),
            Err(AuthError::InvalidKey)
        );
    }

    #[test]
    fn errors_never_show_the_key() {
        let a = auth(&[("alice", ALICE_KEY)]);
        let e = authn(&a, &headers(&[("x-api-key", "wrong-secret")])).unwrap_err();
        assert!(!e.to_string().contains("wrong-secret"));
        assert!(!format!("{a:?}").contains(&hex(ALICE_KEY)));
    }

    #[test]
    fn challenges_follow_rfc_6750() {
        assert_eq!(AuthError::Missing.challenge(), "Bearer realm=\"gantry\"");
        assert!(AuthError::InvalidKey
            .challenge()
            .ends_with("error=\"invalid_token\""));
        assert!(AuthError::Malformed("x")
            .challenge()
            .ends_with("error=\"invalid_request\""));
        assert!(AuthError::Missing.challenge().contains(REALM));
    }

    #[test]
    fn hex_decoding() {
        let upper = hex(ALICE_KEY).to_ascii_uppercase();
        assert_eq!(
            decode_sha256_hex(&upper),
            decode_sha256_hex(&hex(ALICE_KEY))
        );
        let d: [u8; 32] = Sha256::digest(ALICE_KEY.as_bytes()).into();
        assert_eq!(decode_sha256_hex(&hex(ALICE_KEY)), Some(d));
        assert_eq!(decode_sha256_hex(&"0".repeat(63)), None);
        assert_eq!(decode_sha256_hex(&"0".repeat(65)), None);
        assert_eq!(decode_sha256_hex(&"g".repeat(64)), None);
        assert_eq!(decode_sha256_hex(&"é".repeat(32)), None);
    }

    #[test]
    fn an_undecodable_digest_fails_closed() {
        let a = Authenticator::new(&AuthConfig {
            oauth: None,
            rules: Vec::new(),
            api_keys: vec![ApiKeyConfig {
                principal: "alice".into(),
                sha256: "not-hex".into(),
            }],
            ..AuthConfig::default()
        });
        assert!(a.is_required());
        assert_eq!(authn(&a, &HeaderMap::new()), Err(AuthError::Missing));
        assert_eq!(
            authn(&a, &headers(&[("x-api-key", "not-hex")])),
            Err(AuthError::InvalidKey)
        );
    }
}

//! Gantry as an OAuth 2.1 resource server: JWT access tokens from trusted
//! authorization servers, checked on every request (signature against the issuer's
//! JWKS, `alg` from an asymmetric allow-list and fitting the key, `iss` exact, `aud`
//! naming Gantry's public URL, `exp` required, `nbf` / `iat` with leeway, required
//! scopes), and the RFC 6750 / RFC 9728 challenges that send a client to log in.
//!
//! Invariants: a token is never logged or put in an error; every refusal is decided
//! from headers alone; a key the issuer lacks is fetched again at most once per
//! `jwks_refetch_interval`, whatever clients send.

mod cache;
mod introspect;
pub(crate) mod issuer;
pub mod resource;

use crate::config::OAuthConfig;
use base64::Engine as _;
use issuer::Issuer;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
pub use resource::Resource;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    /// Invalid, expired, not for Gantry, from an untrusted issuer: 401 `invalid_token`.
    /// The label is the reason's metric label (a fixed set).
    #[error("{1}")]
    Invalid(&'static str, String),
    /// Valid, but without a scope Gantry requires: 403 `insufficient_scope`.
    #[error("the token lacks the scope {missing}")]
    InsufficientScope {
        /// The scopes missing, space-separated.
        missing: String,
        /// What to ask for: the scopes already granted and the missing ones.
        ask: String,
    },
    /// The issuer's metadata or keys cannot be fetched now: 503.
    #[error("cannot check tokens now: {0}")]
    Unavailable(String),
}

/// Who a token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub issuer: String,
    pub subject: String,
    /// `client_id` (or `azp`) claim.
    pub client_id: Option<String>,
    pub scopes: Vec<String>,
    /// `exp` (Unix seconds), when the token says.
    pub expires_at: Option<u64>,
}

/// A JWT checked once: who it speaks for, and the built-in authorization server's
/// grant it belongs to (checked for revocation on every use).
#[derive(Debug, Clone)]
struct Verified {
    info: TokenInfo,
    grant: Option<String>,
}

/// Checks tokens for Gantry's one resource.
pub struct ResourceServer {
    resource: Resource,
    issuers: Vec<Arc<Issuer>>,
    issuer_ids: Vec<String>,
    required_scopes: Vec<String>,
    scopes_supported: Vec<String>,
    algorithms: Vec<Algorithm>,
    leeway: Duration,
    resource_name: String,
    introspected: introspect::Cache,
    /// JWTs whose signature and claims were checked (`jwt_cache_ttl`).
    verified: cache::TokenCache<Verified>,
    /// Gantry's own authorization server (`auth.mode = "builtin"`).
    builtin: Option<Arc<crate::auth::builtin::AuthServer>>,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("resource", &self.resource.url())
            .field("issuers", &self.issuer_ids)
            .finish()
    }
}

/// The key families an algorithm may be verified with.
pub(crate) fn fits(alg: Algorithm, jwk: &Jwk) -> bool {
    use Algorithm as A;
    let family = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => matches!(
            alg,
            A::RS256 | A::RS384 | A::RS512 | A::PS256 | A::PS384 | A::PS512
        ),
        AlgorithmParameters::EllipticCurve(ec) => matches!(
            (alg, &ec.curve),
            (A::ES256, EllipticCurve::P256) | (A::ES384, EllipticCurve::P384)
        ),
        AlgorithmParameters::OctetKeyPair(_) => alg == A::EdDSA,
        AlgorithmParameters::OctetKey(_) => false,
    };
    // A key published for encryption, or for another algorithm, verifies nothing.
    let for_signing = !matches!(
        jwk.common.public_key_use,
        Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
    );
    let named_ok = match jwk.common.key_algorithm {
        None => true,
        Some(a) => format!("{a:?}")
            .parse::<Algorithm>()
            .is_ok_and(|n| n == alg),
    };
    family && for_signing && named_ok
}

/// Segment `i` of a JWT as a JSON object, unverified.
fn segment_json(token: &str, i: usize) -> Option<serde_json::Map<String, Value>> {
    let segment = token.split('.').nth(i)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(segment.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The payload of a JWT, unverified: only to pick the issuer whose key checks it.
fn unverified_claims(token: &str) -> Option<serde_json::Map<String, Value>> {
    segment_json(token, 1)
}

use crate::auth::now_secs;

impl ResourceServer {
    /// The resource server for a validated `[auth.oauth]` and the public URL.
    pub fn new(
        cfg: &OAuthConfig,
        public_url: &str,
        builtin: Option<Arc<crate::auth::builtin::AuthServer>>,
    ) -> Result<Self, String> {
        let resource = Resource::new(public_url)
            .ok_or_else(|| format!("`{public_url}` cannot be a resource identifier"))?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client for the issuers: {e}"))?;
        let issuers = cfg
            .issuers
            .iter()
            .map(|i| Arc::new(Issuer::new(i, cfg.jwks_refetch_interval, http.clone())))
            .collect();
        let algorithms = cfg
            .algorithms
            .iter()
            .filter_map(|a| a.parse::<Algorithm>().ok())
            .collect();
        let mut issuer_ids: Vec<String> = builtin.iter().map(|b| b.issuer.clone()).collect();
        issuer_ids.extend(cfg.issuers.iter().map(|i| i.issuer.clone()));
        Ok(Self {
            resource,
            issuers,
            issuer_ids,
            builtin,
            required_scopes: cfg.required_scopes.clone(),
            scopes_supported: cfg
                .scopes_supported
                .clone()
                .unwrap_or_else(|| cfg.required_scopes.clone()),
            algorithms,
            leeway: cfg.leeway,
            resource_name: cfg.resource_name.clone(),
            introspected: introspect::Cache::new(
                cfg.introspection_cache_ttl,
                cfg.introspection_cache_entries,
            ),
            verified: cache::TokenCache::new(cfg.jwt_cache_ttl, cfg.jwt_cache_entries),
        })
    }

    /// The resource Gantry protects.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// Fetches every issuer's metadata and keys in the background, so the first
    /// client does not wait for them.
    pub fn warm_up(&self) {
        for i in &self.issuers {
            let i = i.clone();
            tokio::spawn(async move { i.warm_up().await });
        }
    }

    /// Key-set fetches per issuer: (issuer, worked, failed).
    pub fn jwks_fetches(&self) -> Vec<(&str, u64, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        self.issuers
            .iter()
            .map(|i| {
                (
                    i.id.as_str(),
                    i.fetched_ok.load(Relaxed),
                    i.fetch_failed.load(Relaxed),
                )
            })
            .collect()
    }

    /// Introspection answers reused from the cache, and introspection calls made.
    pub fn introspections(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.introspected.hits.load(Relaxed),
            self.introspected.calls.load(Relaxed),
        )
    }

    /// The protected-resource metadata served at `path`.
    pub fn metadata(&self, path: &str) -> Value {
        self.resource.metadata(
            path,
            &self.issuer_ids,
            &self.scopes_supported,
            &self.resource_name,
        )
    }

    /// Checks an access token — a JWT by its signature, an opaque one by
    /// introspection — and the scopes Gantry requires; who it speaks for, or why not.
    pub async fn validate(&self, token: &str) -> Result<TokenInfo, OAuthError> {
        let info = if token.split('.').count() == 3 || !self.introspects() {
            self.validate_jwt_cached(token).await?
        } else {
            self.validate_opaque(token).await?
        };
        self.check_scopes(info)
    }

    /// A JWT checked before is taken from the cache: a signature check costs far more
    /// than the rest of a request (an ES256 verification several times a relayed
    /// call). What can change while the token is cached is checked again: the
    /// built-in server's grant (revocation takes effect at once) and, through the
    /// entry's lifetime, `exp`. Only accepted tokens are kept.
    async fn validate_jwt_cached(&self, token: &str) -> Result<TokenInfo, OAuthError> {
        if !self.verified.enabled() {
            let v = self.validate_jwt(token).await?;
            self.check_grant(&v).await?;
            return Ok(v.info);
        }
        let key = cache::digest(token);
        let v = match self.verified.get(&key) {
            Some(v) => v,
            None => {
                self.verified
                    .calls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let v = self.validate_jwt(token).await?;
                self.verified
                    .put(key, v.clone(), self.verified.ttl(), v.info.expires_at);
                v
            }
        };
        self.check_grant(&v).await?;
        Ok(v.info)
    }

    /// A token of Gantry's own authorization server is refused once its grant is
    /// revoked.
    async fn check_grant(&self, v: &Verified) -> Result<(), OAuthError> {
        let (Some(grant), Some(b)) = (&v.grant, &self.builtin) else {
            return Ok(());
        };
        if b.grant_live(grant).await.map_err(OAuthError::Unavailable)? {
            Ok(())
        } else {
            Err(OAuthError::Invalid(
                "revoked",
                "the token's grant was revoked".to_owned(),
            ))
        }
    }

    fn introspects(&self) -> bool {
        self.issuers.iter().any(|i| i.introspection.is_some())
    }

    /// An opaque token: the cached answer, or the first issuer (with introspection)
    /// that says it is active.
    async fn validate_opaque(&self, token: &str) -> Result<TokenInfo, OAuthError> {
        let key = cache::digest(token);
        if let Some(answer) = self.introspected.get(&key) {
            return answer;
        }
        let mut last = None;
        for issuer in self.issuers.iter().filter(|i| i.introspection.is_some()) {
            self.introspected
                .calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let doc = issuer.introspect(token).await?;
            let (answer, exp) =
                introspect::read_answer(&doc, &issuer.id, &self.resource, &issuer.audiences);
            if doc.get("active") == Some(&Value::Bool(true)) {
                self.introspected
                    .put(key, answer.clone(), self.introspected.ttl(), exp);
                return answer;
            }
            last = Some((answer, exp));
        }
        let (answer, exp) = last.unwrap_or_else(|| {
            (
                Err(OAuthError::Invalid(
                    "inactive",
                    "the token is not active".into(),
                )),
                None,
            )
        });
        let keep = match &answer {
            Ok(_) => self.introspected.ttl(),
            Err(_) => introspect::NEGATIVE_TTL,
        };
        self.introspected.put(key, answer.clone(), keep, exp);
        answer
    }

    /// The required scopes: all granted, or 403 asking for granted + missing.
    fn check_scopes(&self, info: TokenInfo) -> Result<TokenInfo, OAuthError> {
        let missing: Vec<&String> = self
            .required_scopes
            .iter()
            .filter(|s| !info.scopes.contains(s))
            .collect();
        if missing.is_empty() {
            return Ok(info);
        }
        // Granted + missing, but never `offline_access`: a challenge names what the
        // resource needs, and refresh tokens are not that (SEP-2207).
        let mut ask: Vec<String> = info
            .scopes
            .iter()
            .filter(|s| *s != "offline_access")
            .cloned()
            .collect();
        ask.extend(missing.iter().map(|s| (*s).clone()));
        Err(OAuthError::InsufficientScope {
            missing: missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            ask: ask.join(" "),
        })
    }

    /// A JWT access token: signature, algorithm, issuer, audience, lifetime. The
    /// built-in server's grant is named, not checked ([`Self::check_grant`]).
    async fn validate_jwt(&self, token: &str) -> Result<Verified, OAuthError> {
        let invalid = |label: &'static str, why: &str| OAuthError::Invalid(label, why.to_owned());
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            // A readable header with an algorithm Gantry does not know (`none`) says so.
            match segment_json(token, 0).and_then(|h| h.get("alg")?.as_str().map(str::to_owned)) {
                Some(alg) => OAuthError::Invalid(
                    "algorithm",
                    format!(
                        "the token's algorithm `{}` is not accepted",
                        alg.chars().take(16).collect::<String>()
                    ),
                ),
                None => invalid("not_jwt", "the access token is not a readable JWT"),
            }
        })?;
        if !self.algorithms.contains(&header.alg) {
            return Err(OAuthError::Invalid(
                "algorithm",
                format!("the token's algorithm {:?} is not accepted", header.alg),
            ));
        }
        let claims = unverified_claims(token)
            .ok_or_else(|| invalid("not_jwt", "the token's claims are not JSON"))?;
        let iss = claims.get("iss").and_then(Value::as_str).unwrap_or("");
        let alg = header.alg;
        let own = self.builtin.as_ref().filter(|b| b.issuer == iss);
        let (issuer_id, audiences, jwk) = match own {
            Some(b) => {
                let kid = header
                    .kid
                    .as_deref()
                    .ok_or_else(|| invalid("unknown_key", "the token names no key (kid)"))?;
                let jwk = b
                    .verifying_key(kid)
                    .await
                    .map_err(OAuthError::Unavailable)?
                    .ok_or_else(|| {
                        invalid(
                            "unknown_key",
                            "the token is signed with a key Gantry does not (or no longer) use",
                        )
                    })?;
                (b.issuer.clone(), &[][..], jwk)
            }
            None => {
                let issuer = self.issuers.iter().find(|i| i.id == iss).ok_or_else(|| {
                    invalid(
                        "untrusted_issuer",
                        "the token is from an authorization server Gantry does not trust",
                    )
                })?;
                let jwk = issuer.key(header.kid.as_deref(), |j| fits(alg, j)).await?;
                (issuer.id.clone(), issuer.audiences.as_slice(), jwk)
            }
        };
        if !fits(alg, &jwk) {
            return Err(invalid(
                "algorithm",
                "the token's algorithm does not fit the key it names",
            ));
        }
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|_| invalid("unknown_key", "the issuer's key is unusable"))?;
        let mut v = Validation::new(alg);
        v.leeway = self.leeway.as_secs();
        v.validate_exp = true;
        v.validate_nbf = true;
        v.validate_aud = false;
        v.set_required_spec_claims(&["exp", "iss", "sub"]);
        v.set_issuer(&[issuer_id.as_str()]);
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &v)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                let (label, why) = match e.kind() {
                    K::ExpiredSignature => ("expired", "the token has expired".into()),
                    K::ImmatureSignature => {
                        ("not_yet_valid", "the token is not valid yet (nbf)".into())
                    }
                    K::InvalidSignature => {
                        ("signature", "the token's signature is not valid".into())
                    }
                    K::MissingRequiredClaim(c) => {
                        ("missing_claim", format!("the token has no `{c}` claim"))
                    }
                    K::InvalidIssuer => (
                        "untrusted_issuer",
                        "the token's issuer does not match".into(),
                    ),
                    _ => ("invalid", "the token is not valid".into()),
                };
                OAuthError::Invalid(label, why)
            })?;
        let claims = data.claims;
        let now = now_secs();
        if claims
            .get("iat")
            .and_then(Value::as_u64)
            .is_some_and(|iat| iat > now + self.leeway.as_secs())
        {
            return Err(invalid(
                "issued_in_future",
                "the token was issued in the future (iat)",
            ));
        }
        let for_us = names_us(claims.get("aud"), &self.resource, audiences);
        if !for_us {
            return Err(OAuthError::Invalid(
                "audience",
                format!(
                    "the token's audience is not this server ({})",
                    self.resource.url()
                ),
            ));
        }
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| invalid("missing_claim", "the token has no subject"))?
            .to_owned();
        let scopes: Vec<String> = match claims.get("scope").or_else(|| claims.get("scp")) {
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        let client_id = claims
            .get("client_id")
            .or_else(|| claims.get("azp"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        // Every token of the built-in server belongs to a grant ("" for none: refused).
        let grant = own.map(|_| {
            claims
                .get("gid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        });
        Ok(Verified {
            info: TokenInfo {
                issuer: issuer_id,
                subject,
                client_id,
                scopes,
                expires_at: claims.get("exp").and_then(Value::as_u64),
            },
            grant,
        })
    }

    /// The `WWW-Authenticate` value for a refusal: where the metadata is, the scopes
    /// to ask for, and (when a token was presented) what was wrong with it.
    pub fn challenge(&self, error: Option<(&str, &str)>, scope: Option<&str>) -> String {
        let mut parts = Vec::new();
        if let Some((code, description)) = error {
            parts.push(format!("error=\"{code}\""));
            parts.push(format!(
                "error_description=\"{}\"",
                description_safe(description)
            ));
        }
        let default_scope = self.required_scopes.join(" ");
        let scope = scope.unwrap_or(&default_scope);
        if !scope.is_empty() {
            parts.push(format!("scope=\"{scope}\""));
        }
        parts.push(format!(
            "resource_metadata=\"{}\"",
            self.resource.metadata_url()
        ));
        format!("Bearer {}", parts.join(", "))
    }
}

/// Whether an `aud` claim (a string or an array) names Gantry: its public URL (up
/// to case, default port, trailing slash) or one of the issuer's `audiences`.
pub(super) fn names_us(aud: Option<&Value>, resource: &Resource, extra: &[String]) -> bool {
    let one = |a: &str| resource.is_audience(a) || extra.iter().any(|e| e == a);
    match aud {
        Some(Value::String(a)) => one(a),
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).any(one),
        _ => false,
    }
}

/// RFC 6750 §3: `error_description` is visible ASCII without `"` and `\`.
fn description_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii() && (' '..='~').contains(&c) && c != '"' && c != '\\' {
                c
            } else {
                '\''
            }
        })
        .collect()
}

/// A confidential client's request to a token or introspection endpoint: its
/// credentials in HTTP Basic (`client_secret_basic`) or in the form
/// (`client_secret_post`), then the form sent.
pub fn client_request<'a>(
    req: reqwest::RequestBuilder,
    mut form: Vec<(&'a str, &'a str)>,
    client_id: &'a str,
    client_secret: &'a str,
    auth_method: &str,
) -> reqwest::RequestBuilder {
    if auth_method == "client_secret_post" {
        form.push(("client_id", client_id));
        form.push(("client_secret", client_secret));
        req.form(&form)
    } else {
        req.basic_auth(form_encode(client_id), Some(form_encode(client_secret)))
            .form(&form)
    }
}

/// RFC 6749 §2.3.1: client credentials in HTTP Basic are form-encoded first.
pub fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

//! Gantry as its own OAuth 2.1 authorization server (`auth.mode = "builtin"`).
//!
//! The issuer is the origin of `server.public_url`; the endpoints sit at that
//! origin's `/authorize`, `/token`, `/register`, `/revoke` (where clients that
//! ignore metadata look for them), the metadata at every well-known path clients
//! probe. Users log in through an upstream OpenID provider ([`upstream`]) or a
//! static development list, then approve each client once on Gantry's consent page
//! (the per-client consent MCP requires of a proxy in front of an IdP). Tokens are
//! ES256 JWTs for exactly one resource, Gantry's MCP endpoint; the resource server
//! ([`crate::auth::oauth`]) checks them like any issuer's, with the keys and grant
//! revocations read from here rather than over HTTP.
//!
//! Invariants: PKCE S256 for every authorization; redirect URIs match exactly
//! (loopback up to the port) before anything is redirected; codes are single-use and
//! a replayed code revokes what it issued; a rotated-out refresh token presented
//! after the grace revokes the grant; only hashes of codes, refresh tokens and client
//! secrets are stored; nothing secret is logged.

pub mod cimd;
pub mod clients;
mod endpoints;
pub mod keys;
mod pages;
pub mod store;
pub mod upstream;

use crate::auth::oauth::Resource;
use crate::config::{BuiltinConfig, Config};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use clients::Client;
use dashmap::DashMap;
use ring::rand::SecureRandom as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use store::{Kind, Store, StoreError};
use tokio::time::Instant;
use upstream::{Upstream, User};

pub use endpoints::routes;

/// How long an authorization request waits for the user (login + consent).
const PENDING_TTL: Duration = Duration::from_secs(600);
/// How long a checked grant is taken to be unrevoked before asking the store again.
const LIVE_CHECK_TTL: Duration = Duration::from_secs(2);
const MAX_LIVE_ENTRIES: usize = 100_000;
/// Authorization requests accepted per client address and minute.
const AUTHORIZE_PER_MINUTE: NonZeroU32 = match NonZeroU32::new(60) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};
/// Password attempts accepted per client address and minute.
const LOGINS_PER_MINUTE: NonZeroU32 = match NonZeroU32::new(10) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};
/// A per-address limiter forgets quiet addresses once it holds this many.
const MAX_LIMITER_KEYS: usize = 10_000;

/// Whom a per-address limit counts a request against: the connection's address, or
/// from a trusted proxy the right-most `X-Forwarded-For` address that is not one; an
/// IPv6 client by its /64 (which one host can fill at will).
fn client_key(trusted: &[crate::limits::Cidr], peer: IpAddr, forwarded: Option<&str>) -> IpAddr {
    let mut ip = peer;
    if trusted.iter().any(|c| c.contains(peer)) {
        for hop in forwarded.unwrap_or_default().rsplit(',') {
            match hop.trim().parse::<IpAddr>() {
                Ok(h) if trusted.iter().any(|c| c.contains(h)) => continue,
                Ok(h) => {
                    ip = h;
                    break;
                }
                Err(_) => break,
            }
        }
    }
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(std::net::Ipv6Addr::from(bits))
            }
        },
        v4 => v4,
    }
}

/// Whether `ip` may go on under `limiter` (which forgets quiet addresses when full).
fn admit(limiter: &governor::DefaultKeyedRateLimiter<IpAddr>, ip: IpAddr) -> bool {
    if limiter.len() >= MAX_LIMITER_KEYS {
        limiter.retain_recent();
        limiter.shrink_to_fit();
    }
    limiter.check_key(&ip).is_ok()
}

/// 256 random bits, base64url: codes, tokens, request ids, CSRF tokens.
pub fn random_token() -> String {
    let mut b = [0u8; 32];
    // SystemRandom only fails when the OS has no randomness; then nothing is safe.
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        tracing::error!("the operating system gave no randomness");
    }
    URL_SAFE_NO_PAD.encode(b)
}

/// Hex SHA-256: how bearer secrets are stored and looked up.
pub fn digest(secret: &str) -> String {
    let d = Sha256::digest(secret.as_bytes());
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

pub(crate) use crate::auth::now_secs;

/// An authorization request between `/authorize` and the redirect back.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    client_id: String,
    redirect_uri: String,
    /// Whether the client sent `redirect_uri` (then `/token` must repeat it).
    redirect_given: bool,
    state: Option<String>,
    challenge: String,
    scopes: Vec<String>,
    resource: String,
    /// Hash of the browser cookie that started it: only that browser continues it.
    browser: String,
    /// The consent and login forms' CSRF token.
    csrf: String,
    /// The upstream login under way.
    attempt: Option<upstream::Attempt>,
    /// Who logged in.
    user: Option<User>,
}

/// A code not yet exchanged (stored under its hash).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CodeGrant {
    client_id: String,
    redirect_uri: String,
    redirect_given: bool,
    challenge: String,
    scopes: Vec<String>,
    resource: String,
    user: User,
    grant: String,
}

/// A refresh token (stored under its hash).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RefreshGrant {
    client_id: String,
    scopes: Vec<String>,
    resource: String,
    user: User,
    grant: String,
}

/// What the server did, for `/metrics` (label values are fixed strings).
#[derive(Default)]
pub struct Stats {
    /// (endpoint, OAuth error code) of every refusal.
    refused: parking_lot::Mutex<std::collections::BTreeMap<(&'static str, &'static str), u64>>,
    /// Tokens issued, by grant type.
    issued: parking_lot::Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// Grants revoked, by reason.
    revoked: parking_lot::Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// Clients registered, by how (`dynamic`, `document`).
    registered: parking_lot::Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

impl Stats {
    fn bump<K: Ord + Copy>(m: &parking_lot::Mutex<std::collections::BTreeMap<K, u64>>, k: K) {
        *m.lock().entry(k).or_insert(0) += 1;
    }

    /// Refusals: ((endpoint, error), count).
    pub fn refused(&self) -> Vec<((&'static str, &'static str), u64)> {
        self.refused.lock().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Tokens issued: (grant type, count).
    pub fn issued(&self) -> Vec<(&'static str, u64)> {
        self.issued.lock().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Grants revoked: (reason, count).
    pub fn revoked(&self) -> Vec<(&'static str, u64)> {
        self.revoked.lock().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Clients registered: (how, count).
    pub fn registered(&self) -> Vec<(&'static str, u64)> {
        self.registered
            .lock()
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }
}

/// Why the server could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("auth.builtin: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The built-in authorization server.
pub struct AuthServer {
    /// `https://host[:port]`: `iss` of every token, `issuer` of the metadata.
    pub issuer: String,
    resource: Resource,
    cfg: BuiltinConfig,
    /// Scopes any client may be granted.
    grantable: Vec<String>,
    /// Scopes granted when a client asks for none.
    default_scopes: Vec<String>,
    store: Arc<dyn Store>,
    keys: keys::Keys,
    upstream: Option<Upstream>,
    users: Vec<(String, String)>,
    statics: HashMap<String, Client>,
    documents: cimd::Documents,
    registrations: governor::DefaultKeyedRateLimiter<IpAddr>,
    /// Authorization requests per client address (each stores a pending request
    /// and may fetch a metadata document).
    authorizations: governor::DefaultKeyedRateLimiter<IpAddr>,
    /// Password attempts per client address (development users).
    logins: governor::DefaultKeyedRateLimiter<IpAddr>,
    /// Grants recently found unrevoked, and when.
    live: DashMap<String, Instant>,
    /// Whether pages are served over https (then cookies are `__Host-`/`Secure`).
    secure: bool,
    /// Counters for `/metrics`.
    pub stats: Stats,
    /// `[limits] trusted_proxies`: whose `X-Forwarded-For` names the client.
    trusted: Vec<crate::limits::Cidr>,
}

impl std::fmt::Debug for AuthServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthServer")
            .field("issuer", &self.issuer)
            .finish()
    }
}

impl AuthServer {
    /// The server for a validated config with `auth.mode = "builtin"`.
    pub fn new(cfg: &Config) -> Result<Arc<Self>, BuildError> {
        let b = cfg.auth.builtin.clone().unwrap_or_default();
        let public = cfg
            .server
            .public_url
            .as_deref()
            .ok_or_else(|| BuildError::Config("needs server.public_url".into()))?;
        let url = reqwest::Url::parse(public).map_err(|_| {
            BuildError::Config(format!("server.public_url `{public}` is not a URL"))
        })?;
        let issuer = url.origin().ascii_serialization();
        let resource = Resource::new(public)
            .ok_or_else(|| BuildError::Config(format!("`{public}` cannot be a resource")))?;
        let (store, db): (Arc<dyn Store>, Option<&std::path::Path>) = match b.store.as_str() {
            "redis" => {
                let u = b.redis_url.as_deref().ok_or_else(|| {
                    BuildError::Config("store = \"redis\" needs redis_url".into())
                })?;
                (Arc::new(store::RedisStore::new(u, "gantry:auth:")?), None)
            }
            _ => (
                Arc::new(store::SqliteStore::open(&b.path)?),
                Some(b.path.as_path()),
            ),
        };
        let sealer = keys::state_key(b.state_key.as_deref(), db).map_err(BuildError::Config)?;
        let oauth = cfg.auth.oauth.as_ref();
        let grantable = b.scopes.clone().unwrap_or_else(|| {
            let mut v: Vec<String> = oauth
                .and_then(|o| o.scopes_supported.clone())
                .unwrap_or_default();
            for s in oauth.map(|o| o.required_scopes.clone()).unwrap_or_default() {
                if !v.contains(&s) {
                    v.push(s);
                }
            }
            v
        });
        let default_scopes = oauth
            .map(|o| o.required_scopes.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| grantable.clone());
        let upstream = match &b.upstream {
            Some(u) => Some(
                Upstream::new(u, format!("{issuer}/oauth/callback")).map_err(BuildError::Config)?,
            ),
            None => None,
        };
        let statics = b
            .clients
            .iter()
            .map(|c| {
                let client = Client {
                    client_id: c.client_id.clone(),
                    secret_sha256: c
                        .client_secret_sha256
                        .as_ref()
                        .map(|s| s.to_ascii_lowercase()),
                    auth_method: if c.client_secret_sha256.is_some() {
                        "client_secret_basic".into()
                    } else {
                        "none".into()
                    },
                    name: c.name.clone(),
                    redirect_uris: c.redirect_uris.clone(),
                    grant_types: c.grant_types.clone(),
                    scopes: c.scopes.clone(),
                    metadata: serde_json::Value::Null,
                    issued_at: 0,
                };
                (c.client_id.clone(), client)
            })
            .collect();
        let per_hour = NonZeroU32::new(b.registrations_per_hour.max(1)).unwrap_or(NonZeroU32::MIN);
        let documents =
            cimd::Documents::new(b.allow_loopback_client_ids).map_err(BuildError::Config)?;
        Ok(Arc::new(Self {
            secure: url.scheme() == "https",
            issuer,
            resource,
            grantable,
            default_scopes,
            keys: keys::Keys::new(store.clone(), sealer, b.key_rotation),
            store,
            upstream,
            users: b
                .users
                .iter()
                .map(|u| (u.name.clone(), u.password_hash.clone()))
                .collect(),
            statics,
            documents,
            registrations: governor::RateLimiter::keyed(governor::Quota::per_hour(per_hour)),
            authorizations: governor::RateLimiter::keyed(
                governor::Quota::per_minute(AUTHORIZE_PER_MINUTE).allow_burst(AUTHORIZE_PER_MINUTE),
            ),
            logins: governor::RateLimiter::keyed(
                governor::Quota::per_minute(LOGINS_PER_MINUTE).allow_burst(LOGINS_PER_MINUTE),
            ),
            live: DashMap::new(),
            stats: Stats::default(),
            trusted: cfg
                .limits
                .trusted_proxies
                .iter()
                .filter_map(|c| crate::limits::Cidr::parse(c))
                .collect(),
            cfg: b,
        }))
    }

    /// The resource its tokens are for.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The verifying key named `kid` (as a JWK), if it is one of Gantry's.
    pub async fn verifying_key(&self, kid: &str) -> Result<Option<jsonwebtoken::jwk::Jwk>, String> {
        match self.keys.find(kid).await {
            Ok(k) => Ok(k.map(|k| k.jwk.clone())),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Whether a grant (the `gid` of a token) is still in force. Answers from a
    /// short-lived memory of recent checks; a revocation here is seen at once, one on
    /// another replica within [`LIVE_CHECK_TTL`].
    pub async fn grant_live(&self, grant: &str) -> Result<bool, String> {
        if let Some(at) = self.live.get(grant) {
            if at.elapsed() < LIVE_CHECK_TTL {
                return Ok(true);
            }
        }
        let revoked = self
            .store
            .get(Kind::Revoked, grant)
            .await
            .map_err(|e| e.to_string())?
            .is_some();
        if revoked {
            self.live.remove(grant);
        } else {
            if self.live.len() >= MAX_LIVE_ENTRIES {
                self.live.clear();
            }
            self.live.insert(grant.to_owned(), Instant::now());
        }
        Ok(!revoked)
    }

    /// Revokes a grant: its refresh tokens stop refreshing and its access tokens are
    /// refused.
    /// `reason` is the metric label (`code_replayed`, `refresh_reused`, `client`).
    async fn revoke_grant(
        &self,
        grant: &str,
        reason: &'static str,
        why: &str,
    ) -> Result<(), StoreError> {
        tracing::warn!(grant, why, "grant revoked");
        Stats::bump(&self.stats.revoked, reason);
        self.live.remove(grant);
        let ttl = self.cfg.refresh_token_ttl + self.cfg.access_token_ttl + Duration::from_secs(60);
        self.store
            .put(
                Kind::Revoked,
                grant,
                now_secs().to_string().as_bytes(),
                Some(ttl),
            )
            .await
    }

    /// The client `client_id` names: configured, registered, or a metadata document.
    async fn client(&self, client_id: &str) -> Result<Option<Arc<Client>>, String> {
        if let Some(c) = self.statics.get(client_id) {
            return Ok(Some(Arc::new(c.clone())));
        }
        if self.cfg.client_id_metadata_documents
            && cimd::is_document_id(client_id, self.cfg.allow_loopback_client_ids)
        {
            let (client, fetched) = self
                .documents
                .client(client_id, &self.cfg.redirect_schemes, &self.grantable)
                .await?;
            if fetched {
                Stats::bump(&self.stats.registered, "document");
            }
            return Ok(Some(client));
        }
        if client_id.is_empty() || client_id.len() > 200 {
            return Ok(None);
        }
        match self.store.get(Kind::Client, client_id).await {
            Ok(Some(bytes)) => Ok(serde_json::from_slice(&bytes).ok().map(Arc::new)),
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The scopes granted for a request of `asked` (space-separated, or none) by
    /// `client`: what it may have of what it asked; with nothing asked, the default.
    fn narrow(&self, client: &Client, asked: Option<&str>) -> Vec<String> {
        // `offline_access` (SEP-2207) is accepted and dropped: refresh tokens go to
        // clients registered for the refresh_token grant either way, and the access
        // token's scopes are the resource's only (as an OpenID provider's are).
        let may = |s: &str| {
            s != "offline_access"
                && self.grantable.iter().any(|g| g == s)
                && client
                    .scopes
                    .as_ref()
                    .is_none_or(|allowed| allowed.iter().any(|a| a == s))
        };
        let mut out: Vec<String> = Vec::new();
        let wanted: Vec<&str> = match asked.map(str::split_whitespace) {
            Some(words) => words.collect(),
            None => self.default_scopes.iter().map(String::as_str).collect(),
        };
        for s in wanted {
            if may(s) && !out.iter().any(|o| o == s) {
                out.push(s.to_owned());
            }
        }
        out
    }

    /// Mints an access token for `user` under `grant`.
    async fn access_token(
        &self,
        user: &User,
        client_id: &str,
        scopes: &[String],
        resource: &str,
        grant: &str,
    ) -> Result<String, String> {
        let key = self.keys.current().await.map_err(|e| e.to_string())?;
        let now = now_secs();
        let mut claims = serde_json::Map::new();
        for (k, v) in &user.claims {
            if !matches!(
                k.as_str(),
                "iss"
                    | "sub"
                    | "aud"
                    | "exp"
                    | "iat"
                    | "nbf"
                    | "jti"
                    | "scope"
                    | "client_id"
                    | "gid"
            ) {
                claims.insert(k.clone(), v.clone());
            }
        }
        let fixed = serde_json::json!({
            "iss": self.issuer,
            "sub": user.subject,
            "aud": resource,
            "client_id": client_id,
            "scope": scopes.join(" "),
            "iat": now,
            "exp": now + self.cfg.access_token_ttl.as_secs(),
            "jti": random_token(),
            "gid": grant,
        });
        if let serde_json::Value::Object(m) = fixed {
            claims.extend(m);
        }
        key.sign(&serde_json::Value::Object(claims))
            .map_err(|e| e.to_string())
    }

    /// Stores a new refresh token for the grant; returns it.
    async fn refresh_token(&self, r: &RefreshGrant) -> Result<String, StoreError> {
        let token = random_token();
        let bytes = serde_json::to_vec(r).unwrap_or_default();
        self.store
            .put(
                Kind::Refresh,
                &digest(&token),
                &bytes,
                Some(self.cfg.refresh_token_ttl),
            )
            .await?;
        Ok(token)
    }

    /// The RFC 8414 metadata (also served as OpenID Connect discovery).
    pub fn metadata(&self) -> serde_json::Value {
        let i = &self.issuer;
        let mut grants = vec!["authorization_code", "refresh_token"];
        if self.statics.values().any(|c| c.may("client_credentials")) || self.cfg.registration {
            grants.push("client_credentials");
        }
        let mut doc = serde_json::json!({
            "issuer": i,
            "authorization_endpoint": format!("{i}/authorize"),
            "token_endpoint": format!("{i}/token"),
            "revocation_endpoint": format!("{i}/revoke"),
            "jwks_uri": format!("{i}/oauth/jwks.json"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": grants,
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "revocation_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "authorization_response_iss_parameter_supported": true,
            "client_id_metadata_document_supported": self.cfg.client_id_metadata_documents,
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        });
        if let Some(o) = doc.as_object_mut() {
            if self.cfg.registration {
                o.insert(
                    "registration_endpoint".into(),
                    format!("{i}/register").into(),
                );
            }
            // `offline_access` here (not in the protected-resource metadata) tells
            // clients they may ask for it (SEP-2207).
            let mut scopes = self.grantable.clone();
            scopes.push("offline_access".into());
            o.insert("scopes_supported".into(), serde_json::json!(scopes));
        }
        doc
    }
}

/// Checks a password against an argon2 PHC hash.
fn password_ok(hash: &str, password: &str) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier as _};
    PasswordHash::new(hash).is_ok_and(|h| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// An argon2id PHC hash of `password` (`gantry hash-password`).
pub fn hash_password(password: &str) -> Result<String, String> {
    use argon2::password_hash::{rand_core::OsRng, PasswordHasher as _, SaltString};
    let salt = SaltString::generate(&mut OsRng);
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// `BASE64URL(SHA256(verifier)) == challenge`, for a verifier of the RFC 7636 form.
fn pkce_ok(verifier: &str, challenge: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    let well_formed = (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
    if !well_formed {
        return false;
    }
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    computed.as_bytes().ct_eq(challenge.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn pkce_is_s256_of_a_well_formed_verifier() {
        // RFC 7636 Appendix B.
        let v = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert!(pkce_ok(v, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"));
        assert!(!pkce_ok(v, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cN"));
        assert!(!pkce_ok("short", "x"));
        assert!(!pkce_ok(&format!("{v}!"), "x"));
    }

    #[test]
    fn limits_count_the_client_behind_trusted_proxies_and_ipv6_by_64() {
        let trusted = vec![crate::limits::Cidr::parse("10.0.0.0/8").unwrap()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            client_key(&trusted, ip("10.1.1.1"), Some("203.0.113.5, 10.2.2.2")),
            ip("203.0.113.5")
        );
        assert_eq!(
            client_key(&[], ip("10.1.1.1"), Some("203.0.113.5")),
            ip("10.1.1.1"),
            "no trust, no header"
        );
        assert_eq!(
            client_key(&trusted, ip("198.51.100.1"), Some("203.0.113.5")),
            ip("198.51.100.1"),
            "an untrusted peer's header is ignored"
        );
        assert_eq!(client_key(&trusted, ip("10.1.1.1"), None), ip("10.1.1.1"));
        assert_eq!(
            client_key(&[], ip("2001:db8:1:2:3:4:5:6"), None),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            client_key(&[], ip("::ffff:192.0.2.1"), None),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn passwords_hash_and_verify() {
        let h = hash_password("s3cret").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(password_ok(&h, "s3cret"));
        assert!(!password_ok(&h, "S3cret"));
        assert!(!password_ok("not a hash", "s3cret"));
    }
}

//! One trusted authorization server: its metadata (discovered once, RFC 8414 then
//! OpenID Connect Discovery, in the order MCP clients use) and its signing keys
//! (JWKS, fetched at start, fetched again for a key it lacks at most once per
//! `jwks_refetch_interval`).

use super::OAuthError;
use crate::telemetry::error_chain;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Largest metadata or JWKS document accepted.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed discovery, the next request may try again this soon.
const RETRY_DISCOVERY: Duration = Duration::from_secs(5);

/// What Gantry uses of an authorization server's metadata.
#[derive(Debug, Clone)]
pub(crate) struct Metadata {
    pub jwks_uri: String,
    pub introspection_endpoint: Option<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
}

#[derive(Default)]
struct Cache {
    meta: Option<Metadata>,
    meta_failed: Option<(Instant, String)>,
    keys: Option<JwkSet>,
    fetched: Option<Instant>,
}

pub(crate) struct Issuer {
    /// The issuer identifier, as configured (and as in its tokens' `iss`).
    pub id: String,
    jwks_override: Option<String>,
    /// More audiences that name Gantry in this issuer's tokens (`audiences`).
    pub audiences: Vec<String>,
    /// Gantry's client at the introspection endpoint, if opaque tokens are checked.
    pub introspection: Option<crate::config::IntrospectionConfig>,
    refetch: Duration,
    http: reqwest::Client,
    cache: Mutex<Cache>,
    /// Key-set fetches that worked and that failed (metrics).
    pub fetched_ok: std::sync::atomic::AtomicU64,
    pub fetch_failed: std::sync::atomic::AtomicU64,
}

/// The metadata URLs to try for an issuer, in order (MCP 2025-11-25 §Authorization
/// Server Metadata Discovery).
pub(super) fn discovery_urls(issuer: &str) -> Vec<String> {
    let Ok(u) = reqwest::Url::parse(issuer) else {
        return Vec::new();
    };
    let origin = u.origin().ascii_serialization();
    let path = u.path().trim_end_matches('/');
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    }
}

impl Issuer {
    pub(crate) fn new(
        cfg: &crate::config::IssuerConfig,
        refetch: Duration,
        http: reqwest::Client,
    ) -> Self {
        Self {
            id: cfg.issuer.clone(),
            jwks_override: cfg.jwks_uri.clone(),
            introspection: cfg.introspection.clone(),
            audiences: cfg.audiences.clone(),
            refetch,
            http,
            cache: Mutex::new(Cache::default()),
            fetched_ok: Default::default(),
            fetch_failed: Default::default(),
        }
    }

    /// Fetches a JSON document, bounded in time and size.
    async fn fetch(&self, url: &str) -> Result<serde_json::Value, String> {
        let resp = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("{url}: {}", error_chain(&e)))?;
        if !resp.status().is_success() {
            return Err(format!("{url}: HTTP {}", resp.status().as_u16()));
        }
        let body = crate::bounded::read_bounded(resp, MAX_DOCUMENT_BYTES)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        serde_json::from_slice(&body).map_err(|e| format!("{url}: not JSON ({e})"))
    }

    /// Discovers the metadata: the first document found whose `issuer` is this
    /// issuer exactly (RFC 8414 §3.3: any other is not to be used).
    async fn discover(&self) -> Result<Metadata, String> {
        let mut tried = Vec::new();
        for url in discovery_urls(&self.id) {
            match self.fetch(&url).await {
                Ok(doc) => {
                    let named = doc.get("issuer").and_then(|v| v.as_str()).unwrap_or("");
                    if named != self.id {
                        tried.push(format!("{url}: names issuer `{named}`, not `{}`", self.id));
                        continue;
                    }
                    let jwks = self.jwks_override.clone().or_else(|| {
                        doc.get("jwks_uri")
                            .and_then(|v| v.as_str())
                            .map(str::to_owned)
                    });
                    let Some(jwks_uri) = jwks else {
                        tried.push(format!("{url}: no jwks_uri"));
                        continue;
                    };
                    let introspection_endpoint = doc
                        .get("introspection_endpoint")
                        .and_then(|v| v.as_str())
                        .map(str::to_owned);
                    let endpoint = |k: &str| doc.get(k).and_then(|v| v.as_str()).map(str::to_owned);
                    return Ok(Metadata {
                        jwks_uri,
                        introspection_endpoint,
                        authorization_endpoint: endpoint("authorization_endpoint"),
                        token_endpoint: endpoint("token_endpoint"),
                    });
                }
                Err(e) => tried.push(e),
            }
        }
        Err(format!(
            "no usable metadata for issuer {}: {}",
            self.id,
            tried.join("; ")
        ))
    }

    async fn metadata(&self, cache: &mut Cache) -> Result<Metadata, OAuthError> {
        if let Some(m) = &cache.meta {
            return Ok(m.clone());
        }
        if let Some((at, why)) = &cache.meta_failed {
            if at.elapsed() < RETRY_DISCOVERY {
                return Err(OAuthError::Unavailable(why.clone()));
            }
        }
        match self.discover().await {
            Ok(m) => {
                cache.meta = Some(m.clone());
                cache.meta_failed = None;
                Ok(m)
            }
            Err(why) => {
                tracing::warn!(issuer = %self.id, %why, "authorization server metadata unavailable");
                cache.meta_failed = Some((Instant::now(), why.clone()));
                Err(OAuthError::Unavailable(why))
            }
        }
    }

    async fn fetch_keys(&self, cache: &mut Cache) -> Result<(), OAuthError> {
        use std::sync::atomic::Ordering::Relaxed;
        let r = self.fetch_keys_once(cache).await;
        match &r {
            Ok(()) => self.fetched_ok.fetch_add(1, Relaxed),
            Err(_) => self.fetch_failed.fetch_add(1, Relaxed),
        };
        r
    }

    async fn fetch_keys_once(&self, cache: &mut Cache) -> Result<(), OAuthError> {
        let meta = self.metadata(cache).await?;
        cache.fetched = Some(Instant::now());
        let doc = self
            .fetch(&meta.jwks_uri)
            .await
            .map_err(OAuthError::Unavailable)?;
        let set: JwkSet = serde_json::from_value(doc).map_err(|e| {
            OAuthError::Unavailable(format!("{}: not a JWK set ({e})", meta.jwks_uri))
        })?;
        tracing::info!(issuer = %self.id, keys = set.keys.len(), "signing keys fetched");
        cache.keys = Some(set);
        Ok(())
    }

    /// Asks the issuer about an opaque token (RFC 7662): its answer, as JSON.
    pub(super) async fn introspect(&self, token: &str) -> Result<serde_json::Value, OAuthError> {
        let Some(client) = &self.introspection else {
            return Err(OAuthError::Unavailable(
                "no introspection configured".into(),
            ));
        };
        let endpoint = match &client.endpoint {
            Some(e) => e.clone(),
            None => {
                let mut cache = self.cache.lock().await;
                self.metadata(&mut cache).await?.introspection_endpoint.ok_or_else(|| {
                    OAuthError::Unavailable(format!(
                        "issuer {} publishes no introspection_endpoint (set introspection.endpoint)",
                        self.id
                    ))
                })?
            }
        };
        let form = vec![("token", token), ("token_type_hint", "access_token")];
        let req = self
            .http
            .post(&endpoint)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(FETCH_TIMEOUT);
        let req = super::client_request(
            req,
            form,
            &client.client_id,
            &client.client_secret,
            &client.auth_method,
        );
        let resp = req
            .send()
            .await
            .map_err(|e| OAuthError::Unavailable(format!("{endpoint}: {}", error_chain(&e))))?;
        let status = resp.status();
        if !status.is_success() {
            tracing::warn!(issuer = %self.id, status = status.as_u16(), "introspection refused Gantry's request (check introspection.client_id / client_secret)");
            return Err(OAuthError::Unavailable(format!(
                "{endpoint}: HTTP {}",
                status.as_u16()
            )));
        }
        let body = crate::bounded::read_bounded(resp, MAX_DOCUMENT_BYTES)
            .await
            .map_err(|e| OAuthError::Unavailable(format!("{endpoint}: {e}")))?;
        serde_json::from_slice(&body)
            .map_err(|e| OAuthError::Unavailable(format!("{endpoint}: not JSON ({e})")))
    }

    /// The issuer's metadata (discovered once).
    pub(crate) async fn discovered(&self) -> Result<Metadata, OAuthError> {
        let mut cache = self.cache.lock().await;
        self.metadata(&mut cache).await
    }

    /// Fetches the metadata and keys ahead of the first token.
    pub(super) async fn warm_up(&self) {
        let mut cache = self.cache.lock().await;
        if cache.keys.is_none() {
            let _ = self.fetch_keys(&mut cache).await;
        }
    }

    /// The key a token names (`kid`; without one, the only key that fits `fits`).
    /// A key the set lacks makes Gantry fetch the set again, unless it did so less
    /// than `jwks_refetch_interval` ago.
    pub(crate) async fn key(
        &self,
        kid: Option<&str>,
        fits: impl Fn(&Jwk) -> bool,
    ) -> Result<Jwk, OAuthError> {
        let find = |set: &JwkSet| -> Option<Jwk> {
            match kid {
                Some(k) => set
                    .keys
                    .iter()
                    .find(|j| j.common.key_id.as_deref() == Some(k))
                    .cloned(),
                None => {
                    let mut fitting = set.keys.iter().filter(|j| fits(j));
                    match (fitting.next(), fitting.next()) {
                        (Some(j), None) => Some(j.clone()),
                        _ => None,
                    }
                }
            }
        };
        let mut cache = self.cache.lock().await;
        if let Some(j) = cache.keys.as_ref().and_then(&find) {
            return Ok(j);
        }
        let may_refetch =
            cache.fetched.is_none_or(|at| at.elapsed() >= self.refetch) || cache.keys.is_none();
        if may_refetch {
            self.fetch_keys(&mut cache).await?;
            if let Some(j) = cache.keys.as_ref().and_then(&find) {
                return Ok(j);
            }
        }
        Err(OAuthError::Invalid(
            "unknown_key",
            match kid {
                Some(_) => "the token is signed with a key its issuer does not publish".into(),
                None => {
                    "the token names no key (kid) and its issuer has no single fitting key".into()
                }
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn discovery_follows_the_mcp_order() {
        assert_eq!(
            discovery_urls("https://auth.example.com"),
            vec![
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            discovery_urls("https://auth.example.com/tenant1"),
            vec![
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
    }
}

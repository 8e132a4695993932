//! Gantry's own credentials at an HTTP backend (`http.oauth`), from the backend's
//! token endpoint: OAuth 2.1 client credentials (a token for Gantry, shared by every
//! connection that uses the same client), or RFC 8693 token exchange (a token for
//! one user, exchanged for that user's latest token to Gantry). Renewed before they
//! expire, fetched anew once when the backend answers 401. Never a client's token.

use crate::config::BackendOAuthConfig;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::time::Instant;

/// How long a token request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest token response accepted.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;
/// Lifetime assumed when the token response has no `expires_in`.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

struct Token {
    value: String,
    /// Token exchange: the subject token it was exchanged for.
    subject: Option<String>,
    fetched: Instant,
    /// When to fetch a new one (before it expires).
    renew_at: Instant,
}

/// One client at one token endpoint.
pub(crate) struct ClientCredentials {
    cfg: BackendOAuthConfig,
    http: reqwest::Client,
    token: tokio::sync::Mutex<Option<Token>>,
}

/// Every client in use, so connections of one backend share one token.
static CLIENTS: LazyLock<Mutex<HashMap<String, Arc<ClientCredentials>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

impl ClientCredentials {
    /// The shared client for `cfg`.
    pub(crate) fn for_config(cfg: &BackendOAuthConfig) -> Result<Arc<Self>, String> {
        let key = format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n{}",
            cfg.token_url,
            cfg.client_id,
            cfg.scope.as_deref().unwrap_or(""),
            cfg.resource.as_deref().unwrap_or(""),
            cfg.audience.as_deref().unwrap_or(""),
            cfg.grant,
            cfg.for_principal.as_deref().unwrap_or("")
        );
        let mut all = CLIENTS.lock();
        if let Some(c) = all.get(&key) {
            return Ok(c.clone());
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the token client: {e}"))?;
        let c = Arc::new(Self {
            cfg: cfg.clone(),
            http,
            token: tokio::sync::Mutex::new(None),
        });
        all.insert(key, c.clone());
        Ok(c)
    }

    /// A valid access token: the cached one, or a new one.
    pub(crate) async fn bearer(&self) -> Result<String, String> {
        // Token exchange: the user's latest token to Gantry (a renewed or stepped-up
        // one makes a new exchange).
        let subject = match &self.cfg.for_principal {
            Some(p) if self.cfg.grant == "token_exchange" => Some(
                crate::auth::vault::latest(p)
                    .map(|(t, _)| t)
                    .ok_or_else(|| format!("no valid token of {p} to exchange"))?,
            ),
            _ => None,
        };
        let mut t = self.token.lock().await;
        if let Some(tok) = t
            .as_ref()
            .filter(|t| t.renew_at > Instant::now() && t.subject == subject)
        {
            return Ok(tok.value.clone());
        }
        let fresh = self.fetch(subject).await?;
        let value = fresh.value.clone();
        *t = Some(fresh);
        Ok(value)
    }

    /// The backend answered 401: the next [`Self::bearer`] fetches anew (unless the
    /// token is brand new: a burst of 401s costs one fetch).
    pub(crate) async fn refused(&self) {
        let mut t = self.token.lock().await;
        if t.as_ref()
            .is_some_and(|t| t.fetched.elapsed() >= Duration::from_secs(1))
        {
            *t = None;
        }
    }

    async fn fetch(&self, subject: Option<String>) -> Result<Token, String> {
        let c = &self.cfg;
        let mut form: Vec<(&str, &str)> = match &subject {
            None => vec![("grant_type", "client_credentials")],
            Some(token) => vec![
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                ("subject_token", token),
                (
                    "subject_token_type",
                    "urn:ietf:params:oauth:token-type:access_token",
                ),
                (
                    "requested_token_type",
                    "urn:ietf:params:oauth:token-type:access_token",
                ),
            ],
        };
        for (k, v) in [
            ("scope", &c.scope),
            ("resource", &c.resource),
            ("audience", &c.audience),
        ] {
            if let Some(v) = v {
                form.push((k, v));
            }
        }
        let req = self
            .http
            .post(&c.token_url)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(TOKEN_TIMEOUT);
        let req = crate::auth::oauth::client_request(
            req,
            form,
            &c.client_id,
            &c.client_secret,
            &c.auth_method,
        );
        let resp = req.send().await.map_err(|e| {
            format!(
                "token endpoint {}: {}",
                c.token_url,
                crate::telemetry::error_chain(&e)
            )
        })?;
        let status = resp.status();
        let body = crate::bounded::read_bounded(resp, MAX_TOKEN_RESPONSE)
            .await
            .map_err(|e| format!("token endpoint {}: {e}", c.token_url))?;
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if !status.is_success() {
            let field = |k: &str| doc.get(k).and_then(|v| v.as_str()).unwrap_or("");
            let mut why = field("error").to_owned();
            if why.is_empty() {
                why = "no error code".into();
            }
            let detail: String = field("error_description").chars().take(200).collect();
            if !detail.is_empty() {
                why = format!("{why}: {detail}");
            }
            return Err(format!(
                "token endpoint {} refused Gantry's client `{}`: HTTP {} ({why})",
                c.token_url,
                c.client_id,
                status.as_u16()
            ));
        }
        let value = doc
            .get("access_token")
            .and_then(|v| v.as_str())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("token endpoint {}: no access_token", c.token_url))?
            .to_owned();
        let lifetime = doc
            .get("expires_in")
            .and_then(|v| v.as_u64())
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        // Renewed when a fifth of its life (at most 60s) is left.
        let margin = (lifetime / 5).min(Duration::from_secs(60));
        tracing::info!(token_url = %c.token_url, client = %c.client_id, grant = %c.grant, principal = c.for_principal.as_deref().unwrap_or("-"), lifetime = %crate::telemetry::human(lifetime), "backend access token fetched");
        Ok(Token {
            value,
            subject,
            fetched: Instant::now(),
            renew_at: Instant::now() + lifetime.saturating_sub(margin),
        })
    }
}

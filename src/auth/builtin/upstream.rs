//! Login through an upstream OpenID provider: Gantry is its relying party
//! (authorization code + PKCE S256 + `nonce`, through the `oauth2` crate), checks the
//! ID token it gets back (signature by the provider's JWKS, `iss`, `aud` = Gantry's
//! client id, `exp`, `nonce`), applies the allow-lists, and turns the claims into the
//! user Gantry's tokens speak for. The upstream's tokens are not kept.

use crate::auth::oauth::issuer::Issuer;
use crate::config::UpstreamIdpConfig;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet, EndpointSet,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, TokenUrl,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// The user a login established.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct User {
    /// The `sub` of Gantry's tokens.
    pub subject: String,
    /// Claims copied into Gantry's tokens.
    #[serde(default)]
    pub claims: Map<String, Value>,
}

/// Why a login did not establish a user. The message is shown to the user.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("the identity provider is unavailable: {0}")]
    Unavailable(String),
    #[error("the identity provider's answer was not accepted: {0}")]
    Rejected(String),
    #[error("{0}")]
    NotAllowed(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct IdFields {
    #[serde(default)]
    id_token: Option<String>,
}

impl oauth2::ExtraTokenFields for IdFields {}

type TokenResponse = oauth2::StandardTokenResponse<IdFields, oauth2::basic::BasicTokenType>;

type UpstreamClient = oauth2::Client<
    oauth2::basic::BasicErrorResponse,
    TokenResponse,
    oauth2::basic::BasicTokenIntrospectionResponse,
    oauth2::StandardRevocableToken,
    oauth2::basic::BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

/// What one login attempt needs to remember between the redirect and the callback.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub verifier: String,
    pub nonce: String,
}

pub struct Upstream {
    cfg: UpstreamIdpConfig,
    issuer: Arc<Issuer>,
    http: reqwest::Client,
    redirect_uri: String,
}

impl Upstream {
    /// The relying party for `cfg`, with Gantry's callback at `redirect_uri`.
    pub fn new(cfg: &UpstreamIdpConfig, redirect_uri: String) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client for the identity provider: {e}"))?;
        let issuer_cfg = crate::config::IssuerConfig {
            issuer: cfg.issuer.clone(),
            jwks_uri: None,
            audiences: Vec::new(),
            introspection: None,
        };
        Ok(Self {
            cfg: cfg.clone(),
            issuer: Arc::new(Issuer::new(
                &issuer_cfg,
                Duration::from_secs(60),
                http.clone(),
            )),
            http,
            redirect_uri,
        })
    }

    /// What the login button says.
    pub fn display_name(&self) -> String {
        self.cfg.display_name.clone().unwrap_or_else(|| {
            reqwest::Url::parse(&self.cfg.issuer)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_else(|| self.cfg.issuer.clone())
        })
    }

    async fn client(&self) -> Result<UpstreamClient, LoginError> {
        let meta = self
            .issuer
            .discovered()
            .await
            .map_err(|e| LoginError::Unavailable(e.to_string()))?;
        let missing = |what: &str| {
            LoginError::Unavailable(format!("{} publishes no {what}", self.cfg.issuer))
        };
        let auth = meta
            .authorization_endpoint
            .ok_or_else(|| missing("authorization_endpoint"))?;
        let token = meta
            .token_endpoint
            .ok_or_else(|| missing("token_endpoint"))?;
        let bad = |e: oauth2::url::ParseError| LoginError::Unavailable(e.to_string());
        let mut c: UpstreamClient = oauth2::Client::new(ClientId::new(self.cfg.client_id.clone()))
            .set_auth_uri(AuthUrl::new(auth).map_err(bad)?)
            .set_token_uri(TokenUrl::new(token).map_err(bad)?)
            .set_redirect_uri(RedirectUrl::new(self.redirect_uri.clone()).map_err(bad)?);
        if !self.cfg.client_secret.is_empty() {
            c = c.set_client_secret(ClientSecret::new(self.cfg.client_secret.clone()));
            if self.cfg.auth_method == "client_secret_post" {
                c = c.set_auth_type(oauth2::AuthType::RequestBody);
            }
        }
        Ok(c)
    }

    /// Where to send the browser (`state` round-trips to the callback).
    pub async fn start(&self, state: &str) -> Result<(String, Attempt), LoginError> {
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let nonce = super::random_token();
        let state = state.to_owned();
        let (url, _) = client
            .authorize_url(move || CsrfToken::new(state))
            .add_scopes(self.cfg.scopes.iter().cloned().map(Scope::new))
            .set_pkce_challenge(challenge)
            .add_extra_param("nonce", nonce.clone())
            .url();
        Ok((
            url.to_string(),
            Attempt {
                verifier: verifier.secret().clone(),
                nonce,
            },
        ))
    }

    /// Exchanges the code and checks the ID token: the user, or why not.
    pub async fn finish(&self, code: &str, attempt: &Attempt) -> Result<User, LoginError> {
        let client = self.client().await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(PkceCodeVerifier::new(attempt.verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                oauth2::RequestTokenError::ServerResponse(r) => {
                    LoginError::Rejected(format!("the code exchange was refused: {}", r.error()))
                }
                other => LoginError::Unavailable(format!(
                    "the code exchange failed: {}",
                    crate::telemetry::error_chain(&other)
                )),
            })?;
        let id_token = tokens.extra_fields().id_token.clone().ok_or_else(|| {
            LoginError::Rejected("no ID token (is `openid` among the scopes?)".into())
        })?;
        let claims = self.verify(&id_token, &attempt.nonce).await?;
        self.user(claims)
    }

    async fn verify(&self, token: &str, nonce: &str) -> Result<Map<String, Value>, LoginError> {
        use jsonwebtoken::Algorithm as A;
        let rejected = |why: &str| LoginError::Rejected(why.to_owned());
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| rejected("the ID token is not a readable JWT"))?;
        let alg = header.alg;
        if !matches!(
            alg,
            A::RS256
                | A::RS384
                | A::RS512
                | A::PS256
                | A::PS384
                | A::PS512
                | A::ES256
                | A::ES384
                | A::EdDSA
        ) {
            return Err(rejected("the ID token's algorithm is not accepted"));
        }
        let jwk = self
            .issuer
            .key(header.kid.as_deref(), |j| crate::auth::oauth::fits(alg, j))
            .await
            .map_err(|e| LoginError::Unavailable(e.to_string()))?;
        if !crate::auth::oauth::fits(alg, &jwk) {
            return Err(rejected("the ID token's algorithm does not fit its key"));
        }
        let key = jsonwebtoken::DecodingKey::from_jwk(&jwk)
            .map_err(|_| rejected("the provider's key is unusable"))?;
        let mut v = jsonwebtoken::Validation::new(alg);
        v.leeway = 60;
        v.set_issuer(&[self.cfg.issuer.as_str()]);
        v.set_audience(&[self.cfg.client_id.as_str()]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v)
            .map_err(|e| LoginError::Rejected(format!("the ID token is not valid: {e}")))?;
        let claims = data.claims;
        if claims.get("nonce").and_then(Value::as_str) != Some(nonce) {
            return Err(rejected("the ID token's nonce is not this login's"));
        }
        Ok(claims)
    }

    /// The user the claims name, if the allow-lists let them in.
    fn user(&self, claims: Map<String, Value>) -> Result<User, LoginError> {
        let verified_email = claims
            .get("email")
            .and_then(Value::as_str)
            .filter(|_| claims.get("email_verified") == Some(&Value::Bool(true)))
            .map(str::to_owned);
        let subject = match self.cfg.subject_claim.as_str() {
            "email" => verified_email.clone(),
            other => match claims.get(other) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            },
        }
        .filter(|s| !s.is_empty() && s.len() <= 256)
        .ok_or_else(|| {
            LoginError::Rejected(format!(
                "the ID token has no usable `{}` claim",
                self.cfg.subject_claim
            ))
        })?;
        let c = &self.cfg;
        if !c.allowed_users.is_empty()
            && !c
                .allowed_users
                .iter()
                .any(|u| *u == subject || verified_email.as_deref() == Some(u.as_str()))
        {
            return Err(LoginError::NotAllowed(format!(
                "{subject} may not use this server"
            )));
        }
        if !c.allowed_domains.is_empty() {
            let domain = verified_email
                .as_deref()
                .and_then(|e| e.rsplit_once('@'))
                .map(|(_, d)| d.to_ascii_lowercase());
            if !domain.is_some_and(|d| c.allowed_domains.iter().any(|a| a.eq_ignore_ascii_case(&d)))
            {
                return Err(LoginError::NotAllowed(format!(
                    "{subject} has no verified email address in an allowed domain"
                )));
            }
        }
        if !c.allowed_groups.is_empty() {
            let groups: Vec<&str> = match claims.get(&c.groups_claim) {
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                Some(Value::String(s)) => s.split_whitespace().collect(),
                _ => Vec::new(),
            };
            if !groups
                .iter()
                .any(|g| c.allowed_groups.iter().any(|a| a == g))
            {
                return Err(LoginError::NotAllowed(format!(
                    "{subject} is in none of the groups allowed to use this server"
                )));
            }
        }
        let copied = c
            .claims
            .iter()
            .filter_map(|k| claims.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        Ok(User {
            subject,
            claims: copied,
        })
    }
}

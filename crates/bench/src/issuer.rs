//! The identity provider of the `shared+jwt` rows: an ES256 key made at start, its
//! metadata (RFC 8414) and key set served on loopback, and one access token per bench
//! client, so that Gantry checks a signed JWT on every request, as it does behind a
//! real IdP (`[auth.oauth]`). Gantry fetches the metadata and keys once; the tokens
//! are minted here, before the clock starts.

use anyhow::{Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::json;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The audience the tokens name and Gantry is configured to accept
/// (`issuers[].audiences`).
pub(crate) const AUDIENCE: &str = "gantry-bench";
/// The key's id in the key set and in every token's header.
const KID: &str = "bench";
/// How long a token is valid: longer than any run.
const LIFETIME: Duration = Duration::from_secs(24 * 3600);

pub(crate) struct Issuer {
    /// The issuer identifier (`iss`), `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    key: EcdsaKeyPair,
    rng: SystemRandom,
    server: tokio::task::JoinHandle<()>,
}

impl Issuer {
    /// Makes the key and serves its metadata and key set on a loopback port.
    pub(crate) async fn start() -> Result<Self> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| anyhow::anyhow!("cannot make an ES256 key"))?;
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| anyhow::anyhow!("cannot load the ES256 key"))?;
        // An uncompressed P-256 point: 0x04, then x and y, 32 bytes each.
        let point = key.public_key().as_ref();
        let (x, y) = match point {
            [4, rest @ ..] if rest.len() == 64 => rest.split_at(32),
            _ => anyhow::bail!("unexpected public key encoding"),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot listen on 127.0.0.1 for the issuer")?;
        let url = format!("http://{}", listener.local_addr()?);
        let metadata = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        });
        let jwks = json!({ "keys": [{
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": KID,
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        }]});
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(metadata) }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || async move { axum::Json(jwks) }),
            );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            url,
            key,
            rng,
            server,
        })
    }

    /// An access token for `subject`, valid for a day.
    pub(crate) fn token(&self, subject: &str) -> Result<String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .context("the clock is before 1970")?
            .as_secs();
        let header = json!({ "alg": "ES256", "typ": "at+jwt", "kid": KID });
        let claims = json!({
            "iss": self.url,
            "sub": subject,
            "aud": AUDIENCE,
            "client_id": "gantry-bench",
            "scope": "mcp",
            "iat": now,
            "exp": now + LIFETIME.as_secs(),
        });
        let mut jwt = URL_SAFE_NO_PAD.encode(header.to_string());
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(claims.to_string()));
        // ES256 (RFC 7518 §3.4): r and s, 32 bytes each, as ring's FIXED signing gives.
        let sig = self
            .key
            .sign(&self.rng, jwt.as_bytes())
            .map_err(|_| anyhow::anyhow!("cannot sign a token"))?;
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(sig.as_ref()));
        Ok(jwt)
    }

    /// The `[auth.oauth]` section that makes Gantry trust this issuer.
    pub(crate) fn gantry_config(&self) -> String {
        let issuer = toml::Value::String(self.url.clone());
        let jwks = toml::Value::String(format!("{}/jwks", self.url));
        let audience = toml::Value::String(AUDIENCE.to_owned());
        format!(
            "\n[auth.oauth]\n\n[[auth.oauth.issuers]]\nissuer = {issuer}\njwks_uri = {jwks}\naudiences = [{audience}]\n"
        )
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

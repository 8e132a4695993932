//! The authorization server's HTTP endpoints: metadata, JWKS, `/authorize` with its
//! login and consent steps, `/token`, `/register`, `/revoke`.

use super::clients::{self, Client, Registration};
use super::store::Kind;
use super::upstream::{LoginError, User};
use super::{digest, now_secs, pages, random_token, AuthServer, CodeGrant, Pending, RefreshGrant};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq as _;

/// Largest form or JSON body accepted by these endpoints.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long a code stays known as used (a replay within it revokes the grant).
const USED_CODE_TTL: Duration = Duration::from_secs(600);
/// How long the browser cookie binding logins to one browser lives.
const BROWSER_COOKIE_SECS: u64 = 86_400;

/// The routes of the authorization server, for the front door to merge.
pub fn routes<S: Clone + Send + Sync + 'static>(server: Arc<AuthServer>) -> axum::Router<S> {
    let mut r = axum::Router::new();
    let mut meta_paths = vec![
        "/.well-known/oauth-authorization-server".to_owned(),
        "/.well-known/openid-configuration".to_owned(),
    ];
    let path = server.resource.path().to_owned();
    if !path.is_empty() {
        meta_paths.push(format!("/.well-known/oauth-authorization-server{path}"));
        meta_paths.push(format!("/.well-known/openid-configuration{path}"));
        meta_paths.push(format!("{path}/.well-known/openid-configuration"));
        meta_paths.push(format!("{path}/.well-known/oauth-authorization-server"));
    }
    for p in meta_paths {
        r = r.route(&p, get(metadata).options(preflight));
    }
    r = r
        .route("/oauth/jwks.json", get(jwks).options(preflight))
        .route("/authorize", get(authorize))
        .route("/oauth/callback", get(callback))
        .route("/oauth/login", post(login))
        .route("/oauth/consent", post(consent))
        .route("/token", post(token).options(preflight))
        .route("/revoke", post(revoke).options(preflight));
    if server.cfg.registration {
        r = r.route("/register", post(register).options(preflight));
    }
    r.layer(axum::middleware::from_fn_with_state(server.clone(), count))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(server)
}

/// Counts what each answer was (refusal by error code, tokens by grant type).
async fn count(
    State(s): State<Arc<AuthServer>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let endpoint = match req.uri().path() {
        "/authorize" | "/oauth/callback" | "/oauth/login" | "/oauth/consent" => "authorize",
        "/token" => "token",
        "/register" => "register",
        "/revoke" => "revoke",
        _ => "other",
    };
    let resp = next.run(req).await;
    if let Some(pages::Refused(code)) = resp.extensions().get::<pages::Refused>() {
        super::Stats::bump(&s.stats.refused, (endpoint, *code));
    }
    if let Some(Issued(grant)) = resp.extensions().get::<Issued>() {
        super::Stats::bump(&s.stats.issued, *grant);
    }
    resp
}

/// Whom per-address limits count this request against (see `client_key`).
fn peer(
    s: &AuthServer,
    extensions: &axum::http::Extensions,
    headers: &HeaderMap,
) -> std::net::IpAddr {
    let addr = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|p| p.0.ip())
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let forwarded = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok());
    super::client_key(&s.trusted, addr, forwarded)
}

fn slow_down(what: &str) -> Response {
    let mut r = pages::error(
        StatusCode::TOO_MANY_REQUESTS,
        "temporarily_unavailable",
        &format!("Too many {what} from this address; wait a minute and try again."),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
    r
}

/// CORS for the endpoints browser-based clients call directly.
fn cors(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Authorization, Content-Type, MCP-Protocol-Version"),
    );
    resp
}

async fn preflight() -> Response {
    cors(StatusCode::NO_CONTENT.into_response())
}

fn no_store(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    resp
}

async fn metadata(State(s): State<Arc<AuthServer>>) -> Response {
    let mut resp = axum::Json(s.metadata()).into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    cors(resp)
}

async fn jwks(State(s): State<Arc<AuthServer>>) -> Response {
    match s.keys.verifying().await {
        Ok(keys) => {
            let keys: Vec<&jsonwebtoken::jwk::Jwk> = keys.iter().map(|k| &k.jwk).collect();
            let mut resp = axum::Json(json!({ "keys": keys })).into_response();
            resp.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            );
            cors(resp)
        }
        Err(e) => {
            tracing::error!(error = %e, "signing keys unavailable");
            cors(StatusCode::SERVICE_UNAVAILABLE.into_response())
        }
    }
}

/// Form or query parameters, with RFC 6749 §3.1's "at most once" checked per name.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(raw: &[u8]) -> Self {
        Self(
            url::form_urlencoded::parse(raw)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The one value of `k` (empty counts as absent); `Err` when repeated.
    fn one(&self, k: &str) -> Result<Option<&str>, String> {
        let mut it = self.0.iter().filter(|(n, _)| n == k);
        match (it.next(), it.next()) {
            (Some(_), Some(_)) => Err(format!("the parameter `{k}` is repeated")),
            (Some((_, v)), None) if !v.is_empty() => Ok(Some(v.as_str())),
            _ => Ok(None),
        }
    }

    fn all(&self, k: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// The browser cookie's name: `__Host-` (Secure, this origin only) over https.
fn cookie_name(s: &AuthServer) -> &'static str {
    if s.secure {
        "__Host-gantry-browser"
    } else {
        "gantry-browser"
    }
}

fn read_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|p| p.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .filter(|v| {
            v.len() == 43
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The redirect back to the client: `params` + `state` + `iss` (RFC 9207).
fn back_to_client(
    s: &AuthServer,
    redirect_uri: &str,
    state: Option<&str>,
    params: &[(&str, &str)],
) -> Response {
    let Ok(mut url) = reqwest::Url::parse(redirect_uri) else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "The redirect URI is not usable.",
        );
    };
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in params {
            q.append_pair(k, v);
        }
        if let Some(st) = state {
            q.append_pair("state", st);
        }
        q.append_pair("iss", &s.issuer);
    }
    let mut resp = StatusCode::FOUND.into_response();
    if let Ok(v) = HeaderValue::from_str(url.as_str()) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    no_store(resp)
}

fn redirect_error(
    s: &AuthServer,
    redirect_uri: &str,
    state: Option<&str>,
    code: &'static str,
    description: &str,
) -> Response {
    tracing::info!(code, description, "authorization refused");
    let mut resp = back_to_client(
        s,
        redirect_uri,
        state,
        &[("error", code), ("error_description", description)],
    );
    resp.extensions_mut().insert(pages::Refused(code));
    resp
}

/// Where a consent form's redirect may go (for the CSP `form-action`): the origin of
/// the redirect URI the client asked for (its port too, for a loopback one).
fn form_target(redirect_uri: &str) -> String {
    match reqwest::Url::parse(redirect_uri) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u.origin().ascii_serialization(),
        Ok(u) => format!("{}:", u.scheme()),
        Err(_) => String::new(),
    }
}

async fn authorize(
    State(s): State<Arc<AuthServer>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    if !super::admit(&s.authorizations, peer(&s, &extensions, &headers)) {
        return slow_down("authorization requests");
    }
    let p = Params::parse(q.unwrap_or_default().as_bytes());
    let bad = |why: &str| pages::error(StatusCode::BAD_REQUEST, "invalid_request", why);
    // Until the redirect URI is known to be the client's, errors are shown here.
    let client_id = match p.one("client_id") {
        Ok(Some(c)) => c,
        Ok(None) => return bad("The request names no client (client_id)."),
        Err(e) => return bad(&e),
    };
    let client = match s.client(client_id).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return pages::error(
                StatusCode::BAD_REQUEST,
                "invalid_client",
                "This application is not registered here. Remove and add the server again in your application.",
            )
        }
        Err(why) => {
            return pages::error(
                StatusCode::BAD_REQUEST,
                "invalid_client",
                &format!("The application's registration cannot be used: {why}"),
            )
        }
    };
    let (redirect_uri, redirect_given) = match p.one("redirect_uri") {
        Err(e) => return bad(&e),
        Ok(Some(u)) if client.redirect_matches(u) => (u.to_owned(), true),
        Ok(Some(_)) => return bad("The redirect URI is not one registered for this application."),
        Ok(None) => match client.redirect_uris.as_slice() {
            [only] => (only.clone(), false),
            _ => return bad("The request names no redirect URI (redirect_uri)."),
        },
    };
    let state = match p.one("state") {
        Ok(st) => st,
        Err(e) => return redirect_error(&s, &redirect_uri, None, "invalid_request", &e),
    };
    let fail = |code: &'static str, why: &str| redirect_error(&s, &redirect_uri, state, code, why);
    for k in [
        "response_type",
        "code_challenge",
        "code_challenge_method",
        "scope",
    ] {
        if let Err(e) = p.one(k) {
            return fail("invalid_request", &e);
        }
    }
    if p.one("response_type").ok().flatten() != Some("code") {
        return fail(
            "unsupported_response_type",
            "only response_type=code is supported",
        );
    }
    if !client.may("authorization_code") {
        return fail(
            "unauthorized_client",
            "this client may not use the authorization code flow",
        );
    }
    let Some(challenge) = p.one("code_challenge").ok().flatten() else {
        return fail(
            "invalid_request",
            "PKCE is required: send code_challenge (S256)",
        );
    };
    if p.one("code_challenge_method").ok().flatten() != Some("S256") {
        return fail("invalid_request", "code_challenge_method must be S256");
    }
    if challenge.len() != 43
        || !challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return fail(
            "invalid_request",
            "code_challenge is not a base64url SHA-256",
        );
    }
    for r in p.all("resource") {
        if !s.resource.is_audience(r) {
            return fail(
                "invalid_target",
                "this server issues tokens for its own resource only",
            );
        }
    }
    let scopes = s.narrow(&client, p.one("scope").ok().flatten());
    let (browser, set_cookie) = match read_cookie(&headers, cookie_name(&s)) {
        Some(v) => (v.to_owned(), false),
        None => (random_token(), true),
    };
    let request = random_token();
    let mut pending = Pending {
        client_id: client.client_id.clone(),
        redirect_uri: redirect_uri.clone(),
        redirect_given,
        state: state.map(str::to_owned),
        challenge: challenge.to_owned(),
        scopes,
        resource: s.resource.url().to_owned(),
        browser: digest(&browser),
        csrf: random_token(),
        attempt: None,
        user: None,
    };
    let mut resp = if let Some(up) = &s.upstream {
        match up.start(&request).await {
            Ok((url, attempt)) => {
                pending.attempt = Some(attempt);
                let mut r = StatusCode::FOUND.into_response();
                if let Ok(v) = HeaderValue::from_str(&url) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                no_store(r)
            }
            Err(e) => {
                tracing::warn!(error = %e, "upstream login cannot start");
                return fail(
                    "temporarily_unavailable",
                    "the identity provider is unavailable",
                );
            }
        }
    } else {
        pages::login(&request, &pending.csrf, client.display_name(), false)
    };
    if let Err(e) = save_pending(&s, &request, &pending).await {
        tracing::error!(error = %e, "cannot store the authorization request");
        return fail("server_error", "the authorization state cannot be stored");
    }
    if set_cookie {
        let secure = if s.secure { "; Secure" } else { "" };
        let c = format!(
            "{}={browser}; Path=/; Max-Age={BROWSER_COOKIE_SECS}; HttpOnly; SameSite=Lax{secure}",
            cookie_name(&s)
        );
        if let Ok(v) = HeaderValue::from_str(&c) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    resp
}

async fn save_pending(s: &AuthServer, request: &str, p: &Pending) -> Result<(), super::StoreError> {
    let bytes = serde_json::to_vec(p).unwrap_or_default();
    s.store
        .put(Kind::Pending, request, &bytes, Some(super::PENDING_TTL))
        .await
}

/// The pending request `request`, if this browser started it.
async fn pending_for(
    s: &AuthServer,
    headers: &HeaderMap,
    request: &str,
) -> Result<Pending, Response> {
    let expired = || {
        pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "This authorization expired or was already completed. Start again from your application.",
        )
    };
    if request.len() != 43 {
        return Err(expired());
    }
    let p: Pending = match s.store.get(Kind::Pending, request).await {
        Ok(Some(b)) => serde_json::from_slice(&b).map_err(|_| expired())?,
        Ok(None) => return Err(expired()),
        Err(e) => {
            tracing::error!(error = %e, "auth state unavailable");
            return Err(pages::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "Try again in a moment.",
            ));
        }
    };
    let same_browser = read_cookie(headers, cookie_name(s))
        .is_some_and(|c| bool::from(digest(c).as_bytes().ct_eq(p.browser.as_bytes())));
    if !same_browser {
        return Err(pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "This authorization was started in another browser (or cookies are blocked).",
        ));
    }
    Ok(p)
}

async fn callback(
    State(s): State<Arc<AuthServer>>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    let p = Params::parse(q.unwrap_or_default().as_bytes());
    let Some(request) = p.one("state").ok().flatten() else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "The identity provider sent no state.",
        );
    };
    let mut pending = match pending_for(&s, &headers, request).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let (Some(up), Some(attempt)) = (&s.upstream, pending.attempt.take()) else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "No login is under way.",
        );
    };
    // One callback per login, whatever happens next.
    let _ = s.store.delete(Kind::Pending, request).await;
    let back_err = |code: &'static str, why: &str| {
        redirect_error(
            &s,
            &pending.redirect_uri,
            pending.state.as_deref(),
            code,
            why,
        )
    };
    if let Ok(Some(e)) = p.one("error") {
        let why = format!(
            "the identity provider refused the login ({})",
            e.chars().take(64).collect::<String>()
        );
        return back_err("access_denied", &why);
    }
    let Some(code) = p.one("code").ok().flatten() else {
        return back_err("server_error", "the identity provider sent no code");
    };
    let user = match up.finish(code, &attempt).await {
        Ok(u) => u,
        Err(LoginError::NotAllowed(why)) => {
            tracing::info!(%why, "login refused by the allow-lists");
            return back_err("access_denied", &why);
        }
        Err(e) => {
            tracing::warn!(error = %e, "upstream login failed");
            return back_err("temporarily_unavailable", &e.to_string());
        }
    };
    pending.user = Some(user);
    after_login(&s, request, pending).await
}

async fn login(
    State(s): State<Arc<AuthServer>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !super::admit(&s.logins, peer(&s, &extensions, &headers)) {
        return slow_down("login attempts");
    }
    let f = Params::parse(&body);
    let field = |k: &str| f.one(k).ok().flatten().unwrap_or_default().to_owned();
    let request = field("request");
    let mut pending = match pending_for(&s, &headers, &request).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    if !bool::from(field("csrf").as_bytes().ct_eq(pending.csrf.as_bytes()))
        || pending.user.is_some()
    {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "This form is stale. Start again from your application.",
        );
    }
    let (name, password) = (field("username"), field("password"));
    let hash = s
        .users
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| h.clone());
    // Unknown users cost the same hashing as known ones.
    let hash = hash.unwrap_or_else(|| {
        "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc".into()
    });
    let known = s.users.iter().any(|(n, _)| *n == name);
    let ok = tokio::task::spawn_blocking(move || super::password_ok(&hash, &password))
        .await
        .unwrap_or(false);
    if !(ok && known) {
        tracing::info!(user = %name.chars().take(64).collect::<String>(), "login failed");
        let client = s.client(&pending.client_id).await.ok().flatten();
        let name = client
            .as_ref()
            .map(|c| c.display_name().to_owned())
            .unwrap_or_default();
        return pages::login(&request, &pending.csrf, &name, true);
    }
    pending.user = Some(User {
        subject: name,
        claims: serde_json::Map::new(),
    });
    after_login(&s, &request, pending).await
}

fn consent_key(user: &str, client: &str) -> String {
    digest(&format!("{user}\n{client}"))
}

/// A user is known: with a remembered consent covering the scopes, straight back
/// to the client with a code; otherwise the consent page.
async fn after_login(s: &AuthServer, request: &str, pending: Pending) -> Response {
    let Some(user) = pending.user.clone() else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "No user is logged in.",
        );
    };
    let key = consent_key(&user.subject, &pending.client_id);
    let remembered: Option<Vec<String>> = s
        .store
        .get(Kind::Consent, &key)
        .await
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok());
    if remembered.is_some_and(|r| pending.scopes.iter().all(|x| r.contains(x))) {
        let _ = s.store.delete(Kind::Pending, request).await;
        return issue_code(s, &pending, user).await;
    }
    let client = match s.client(&pending.client_id).await {
        Ok(Some(c)) => c,
        _ => {
            return pages::error(
                StatusCode::BAD_REQUEST,
                "invalid_client",
                "The application is no longer registered.",
            )
        }
    };
    if let Err(e) = save_pending(s, request, &pending).await {
        tracing::error!(error = %e, "cannot store the authorization request");
        return pages::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "temporarily_unavailable",
            "Try again in a moment.",
        );
    }
    pages::consent(&pages::Consent {
        client_name: client.display_name(),
        client_id: &client.client_id,
        redirect_uri: &pending.redirect_uri,
        user: &user.subject,
        scopes: &pending.scopes,
        resource: &pending.resource,
        request,
        csrf: &pending.csrf,
        target: form_target(&pending.redirect_uri),
    })
}

async fn consent(State(s): State<Arc<AuthServer>>, headers: HeaderMap, body: Bytes) -> Response {
    let f = Params::parse(&body);
    let field = |k: &str| f.one(k).ok().flatten().unwrap_or_default().to_owned();
    let request = field("request");
    let pending = match pending_for(&s, &headers, &request).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let Some(user) = pending.user.clone() else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "No user is logged in.",
        );
    };
    if !bool::from(field("csrf").as_bytes().ct_eq(pending.csrf.as_bytes())) {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "This form is stale. Start again from your application.",
        );
    }
    // Single use: of two submissions, one goes on.
    match s.store.take(Kind::Pending, &request).await {
        Ok(Some(_)) => {}
        _ => {
            return pages::error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "This authorization was already completed.",
            )
        }
    }
    if field("decision") != "approve" {
        return redirect_error(
            &s,
            &pending.redirect_uri,
            pending.state.as_deref(),
            "access_denied",
            "the user denied the request",
        );
    }
    let key = consent_key(&user.subject, &pending.client_id);
    let scopes = serde_json::to_vec(&pending.scopes).unwrap_or_default();
    if let Err(e) = s
        .store
        .put(Kind::Consent, &key, &scopes, Some(s.cfg.consent_ttl))
        .await
    {
        tracing::warn!(error = %e, "consent not remembered");
    }
    tracing::info!(user = %user.subject, client = %pending.client_id, "client approved");
    issue_code(&s, &pending, user).await
}

async fn issue_code(s: &AuthServer, p: &Pending, user: User) -> Response {
    let code = random_token();
    let grant = CodeGrant {
        client_id: p.client_id.clone(),
        redirect_uri: p.redirect_uri.clone(),
        redirect_given: p.redirect_given,
        challenge: p.challenge.clone(),
        scopes: p.scopes.clone(),
        resource: p.resource.clone(),
        user,
        grant: random_token(),
    };
    let bytes = serde_json::to_vec(&grant).unwrap_or_default();
    if let Err(e) = s
        .store
        .put(Kind::Code, &digest(&code), &bytes, Some(s.cfg.code_ttl))
        .await
    {
        tracing::error!(error = %e, "cannot store the code");
        return redirect_error(
            s,
            &p.redirect_uri,
            p.state.as_deref(),
            "server_error",
            "the code cannot be stored",
        );
    }
    back_to_client(s, &p.redirect_uri, p.state.as_deref(), &[("code", &code)])
}

/// An OAuth error answer of the token, revocation and registration endpoints.
fn oauth_error(status: StatusCode, code: &'static str, description: &str) -> Response {
    let mut resp = (
        status,
        axum::Json(json!({ "error": code, "error_description": description })),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"gantry\""),
        );
    }
    resp.extensions_mut().insert(pages::Refused(code));
    cors(no_store(resp))
}

fn grant_error(code: &'static str, description: &str) -> Response {
    tracing::info!(code, description, "token request refused");
    oauth_error(StatusCode::BAD_REQUEST, code, description)
}

/// The client a token or revocation request authenticates as (RFC 6749 §2.3).
async fn authenticate_client(
    s: &AuthServer,
    headers: &HeaderMap,
    f: &Params,
) -> Result<Arc<Client>, Response> {
    use base64::Engine as _;
    let invalid = |why: &str| oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", why);
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Basic ")
                .or_else(|| v.strip_prefix("basic "))
        })
        .map(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
                .and_then(|raw| String::from_utf8(raw).ok())
                .and_then(|s| {
                    let (id, secret) = s.split_once(':')?;
                    let dec = |x: &str| {
                        url::form_urlencoded::parse(format!("x={x}").as_bytes())
                            .next()
                            .map(|(_, v)| v.into_owned())
                    };
                    Some((dec(id)?, dec(secret)?))
                })
        });
    let (form_id, form_secret) = match (f.one("client_id"), f.one("client_secret")) {
        (Ok(i), Ok(sec)) => (i, sec),
        _ => {
            return Err(oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "a client parameter is repeated",
            ))
        }
    };
    let (id, secret, method) = match basic {
        Some(None) => return Err(invalid("the Basic credentials are malformed")),
        Some(Some(_)) if form_secret.is_some() => {
            return Err(oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "use one client authentication method",
            ))
        }
        Some(Some((id, secret))) => {
            if form_id.is_some_and(|f| f != id) {
                return Err(invalid("client_id differs from the authenticated client"));
            }
            (id, Some(secret), "client_secret_basic")
        }
        None => match form_id {
            Some(id) => (
                id.to_owned(),
                form_secret.map(str::to_owned),
                if form_secret.is_some() {
                    "client_secret_post"
                } else {
                    "none"
                },
            ),
            None => return Err(invalid("the request names no client")),
        },
    };
    let client = match s.client(&id).await {
        Ok(Some(c)) => c,
        Ok(None) => return Err(invalid("unknown client")),
        Err(why) => return Err(invalid(&why)),
    };
    match (&client.secret_sha256, secret) {
        (Some(want), Some(got)) => {
            if !bool::from(digest(&got).as_bytes().ct_eq(want.as_bytes())) {
                return Err(invalid("client authentication failed"));
            }
        }
        (Some(_), None) => {
            return Err(invalid(
                "this client must authenticate (client_secret_basic or client_secret_post)",
            ))
        }
        (None, Some(_)) => return Err(invalid("this is a public client; it has no secret")),
        (None, None) => {}
    }
    let _ = method;
    Ok(client)
}

/// Marks a response as tokens issued under this grant type (for the metrics).
#[derive(Debug, Clone, Copy)]
struct Issued(&'static str);

fn token_answer(
    grant: &'static str,
    access: &str,
    ttl: Duration,
    scopes: &[String],
    refresh: Option<&str>,
) -> Response {
    let mut v = json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": ttl.as_secs(),
        "scope": scopes.join(" "),
    });
    if let (Some(r), Some(o)) = (refresh, v.as_object_mut()) {
        o.insert("refresh_token".into(), Value::String(r.to_owned()));
    }
    let mut resp = cors(no_store(axum::Json(v).into_response()));
    resp.extensions_mut().insert(Issued(grant));
    resp
}

async fn token(State(s): State<Arc<AuthServer>>, headers: HeaderMap, body: Bytes) -> Response {
    let f = Params::parse(&body);
    let client = match authenticate_client(&s, &headers, &f).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    for k in [
        "grant_type",
        "code",
        "redirect_uri",
        "code_verifier",
        "refresh_token",
        "scope",
    ] {
        if let Err(e) = f.one(k) {
            return grant_error("invalid_request", &e);
        }
    }
    for r in f.all("resource") {
        if !s.resource.is_audience(r) {
            return grant_error(
                "invalid_target",
                "this server issues tokens for its own resource only",
            );
        }
    }
    let one = |k: &str| f.one(k).ok().flatten();
    match one("grant_type") {
        Some("authorization_code") => code_grant(&s, &client, &f).await,
        Some("refresh_token") => refresh_grant(&s, &client, &f).await,
        Some("client_credentials") => {
            if client.secret_sha256.is_none() || !client.may("client_credentials") {
                return grant_error(
                    "unauthorized_client",
                    "this client may not use client_credentials",
                );
            }
            let scopes = s.narrow(&client, one("scope"));
            let user = User {
                subject: client.client_id.clone(),
                claims: serde_json::Map::new(),
            };
            match s
                .access_token(
                    &user,
                    &client.client_id,
                    &scopes,
                    s.resource.url(),
                    &random_token(),
                )
                .await
            {
                Ok(at) => token_answer(
                    "client_credentials",
                    &at,
                    s.cfg.access_token_ttl,
                    &scopes,
                    None,
                ),
                Err(e) => server_error(&e),
            }
        }
        Some(_) => grant_error(
            "unsupported_grant_type",
            "grant types: authorization_code, refresh_token, client_credentials",
        ),
        None => grant_error("invalid_request", "grant_type is missing"),
    }
}

fn server_error(e: &str) -> Response {
    tracing::error!(error = %e, "token endpoint failed");
    oauth_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "temporarily_unavailable",
        "try again in a moment",
    )
}

async fn code_grant(s: &AuthServer, client: &Client, f: &Params) -> Response {
    let one = |k: &str| f.one(k).ok().flatten();
    let Some(code) = one("code") else {
        return grant_error("invalid_request", "code is missing");
    };
    let h = digest(code);
    let rec: CodeGrant = match s.store.get(Kind::Code, &h).await {
        Ok(Some(b)) => match serde_json::from_slice(&b) {
            Ok(r) => r,
            Err(_) => return grant_error("invalid_grant", "the code is not valid"),
        },
        Ok(None) => {
            if let Ok(Some(g)) = s.store.get(Kind::CodeUsed, &h).await {
                let grant = String::from_utf8_lossy(&g).into_owned();
                if let Err(e) = s
                    .revoke_grant(&grant, "code_replayed", "authorization code replayed")
                    .await
                {
                    tracing::error!(error = %e, "cannot revoke a replayed code's grant");
                }
                return grant_error(
                    "invalid_grant",
                    "the code was already used; what it issued is revoked",
                );
            }
            return grant_error(
                "invalid_grant",
                "the code is not valid (unknown or expired)",
            );
        }
        Err(e) => return server_error(&e.to_string()),
    };
    if rec.client_id != client.client_id {
        return grant_error("invalid_grant", "the code was issued to another client");
    }
    match one("redirect_uri") {
        Some(u) if u != rec.redirect_uri => {
            return grant_error(
                "invalid_grant",
                "redirect_uri differs from the authorization request's",
            )
        }
        None if rec.redirect_given => {
            return grant_error(
                "invalid_grant",
                "redirect_uri is required (it was in the authorization request)",
            )
        }
        _ => {}
    }
    let Some(verifier) = one("code_verifier") else {
        return grant_error("invalid_grant", "code_verifier is missing (PKCE)");
    };
    if !super::pkce_ok(verifier, &rec.challenge) {
        return grant_error(
            "invalid_grant",
            "code_verifier does not match the code_challenge",
        );
    }
    match s.store.take(Kind::Code, &h).await {
        Ok(Some(_)) => {}
        Ok(None) => return grant_error("invalid_grant", "the code was already used"),
        Err(e) => return server_error(&e.to_string()),
    }
    if let Err(e) = s
        .store
        .put(
            Kind::CodeUsed,
            &h,
            rec.grant.as_bytes(),
            Some(USED_CODE_TTL),
        )
        .await
    {
        tracing::warn!(error = %e, "a used code is not remembered");
    }
    issue(
        s,
        client,
        RefreshGrant {
            client_id: rec.client_id,
            scopes: rec.scopes,
            resource: rec.resource,
            user: rec.user,
            grant: rec.grant,
        },
        "authorization_code",
    )
    .await
}

async fn issue(s: &AuthServer, client: &Client, g: RefreshGrant, grant: &'static str) -> Response {
    let at = match s
        .access_token(&g.user, &g.client_id, &g.scopes, &g.resource, &g.grant)
        .await
    {
        Ok(t) => t,
        Err(e) => return server_error(&e),
    };
    let rt = if client.may("refresh_token") {
        match s.refresh_token(&g).await {
            Ok(t) => Some(t),
            Err(e) => return server_error(&e.to_string()),
        }
    } else {
        None
    };
    token_answer(grant, &at, s.cfg.access_token_ttl, &g.scopes, rt.as_deref())
}

async fn refresh_grant(s: &AuthServer, client: &Client, f: &Params) -> Response {
    let one = |k: &str| f.one(k).ok().flatten();
    if !client.may("refresh_token") {
        return grant_error(
            "unauthorized_client",
            "this client may not use refresh tokens",
        );
    }
    let Some(token) = one("refresh_token") else {
        return grant_error("invalid_request", "refresh_token is missing");
    };
    let h = digest(token);
    let mut rec: RefreshGrant = match s.store.get(Kind::Refresh, &h).await {
        Ok(Some(b)) => match serde_json::from_slice(&b) {
            Ok(r) => r,
            Err(_) => return grant_error("invalid_grant", "the refresh token is not valid"),
        },
        Ok(None) => {
            return grant_error(
                "invalid_grant",
                "the refresh token is not valid (unknown or expired)",
            )
        }
        Err(e) => return server_error(&e.to_string()),
    };
    if rec.client_id != client.client_id {
        return grant_error(
            "invalid_grant",
            "the refresh token was issued to another client",
        );
    }
    match s.store.get(Kind::Revoked, &rec.grant).await {
        Ok(Some(_)) => return grant_error("invalid_grant", "the grant was revoked"),
        Ok(None) => {}
        Err(e) => return server_error(&e.to_string()),
    }
    let now = now_secs();
    match s
        .store
        .put_new(
            Kind::RefreshUsed,
            &h,
            now.to_string().as_bytes(),
            Some(s.cfg.refresh_token_ttl),
        )
        .await
    {
        Ok(None) => {}
        Ok(Some(at)) => {
            let at: u64 = String::from_utf8_lossy(&at).parse().unwrap_or(0);
            if now.saturating_sub(at) > s.cfg.refresh_grace.as_secs() {
                if let Err(e) = s
                    .revoke_grant(
                        &rec.grant,
                        "refresh_reused",
                        "a rotated-out refresh token was presented",
                    )
                    .await
                {
                    return server_error(&e.to_string());
                }
                return grant_error(
                    "invalid_grant",
                    "the refresh token was already used; the grant is revoked",
                );
            }
        }
        Err(e) => return server_error(&e.to_string()),
    }
    if let Some(asked) = one("scope") {
        let asked: Vec<String> = asked.split_whitespace().map(str::to_owned).collect();
        if asked.iter().any(|a| !rec.scopes.contains(a)) {
            return grant_error("invalid_scope", "a refresh cannot widen the grant's scopes");
        }
        rec.scopes = asked;
    }
    issue(s, client, rec, "refresh_token").await
}

async fn revoke(State(s): State<Arc<AuthServer>>, headers: HeaderMap, body: Bytes) -> Response {
    let f = Params::parse(&body);
    let client = match authenticate_client(&s, &headers, &f).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Some(token) = f.one("token").ok().flatten() else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "token is missing",
        );
    };
    let grant = match s.store.get(Kind::Refresh, &digest(token)).await {
        Ok(Some(b)) => serde_json::from_slice::<RefreshGrant>(&b)
            .ok()
            .filter(|r| r.client_id == client.client_id)
            .map(|r| r.grant),
        _ => None,
    };
    let grant = match grant {
        Some(g) => Some(g),
        None => access_grant(&s, token, &client.client_id).await,
    };
    if let Some(g) = grant {
        if let Err(e) = s.revoke_grant(&g, "client", "revoked by its client").await {
            return server_error(&e.to_string());
        }
    }
    // RFC 7009 §2.2: 200 whether or not the token was known.
    cors(no_store(StatusCode::OK.into_response()))
}

/// The grant of one of Gantry's access tokens issued to `client_id`.
async fn access_grant(s: &AuthServer, token: &str, client_id: &str) -> Option<String> {
    let header = jsonwebtoken::decode_header(token).ok()?;
    let jwk = s.verifying_key(header.kid.as_deref()?).await.ok()??;
    let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).ok()?;
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    v.validate_aud = false;
    v.set_issuer(&[s.issuer.as_str()]);
    let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &v).ok()?;
    let c = data.claims;
    (c.get("client_id").and_then(Value::as_str) == Some(client_id))
        .then(|| c.get("gid").and_then(Value::as_str).map(str::to_owned))
        .flatten()
}

async fn register(
    State(s): State<Arc<AuthServer>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !super::admit(&s.registrations, peer(&s, &extensions, &headers)) {
        let mut r = oauth_error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            "too many registrations from this address; try again later",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("600"));
        return r;
    }
    let bad = |code: &'static str, why: &str| {
        tracing::info!(code, why, "registration refused");
        oauth_error(StatusCode::BAD_REQUEST, code, why)
    };
    let Ok(doc) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid_client_metadata", "the body is not a JSON object");
    };
    if !doc.is_object() {
        return bad("invalid_client_metadata", "the body is not a JSON object");
    }
    let reg: Registration = match serde_json::from_value(doc.clone()) {
        Ok(r) => r,
        Err(e) => {
            return bad(
                "invalid_client_metadata",
                &format!("malformed metadata: {e}"),
            )
        }
    };
    let mut client = match clients::from_registration(
        &reg,
        doc.clone(),
        &s.cfg.redirect_schemes,
        &s.grantable,
        false,
    ) {
        Ok(c) => c,
        Err(r) => return bad(r.code, &r.description),
    };
    client.client_id = format!("gc-{}", random_token().get(..22).unwrap_or_default());
    client.issued_at = now_secs();
    let secret = (client.auth_method != "none").then(random_token);
    client.secret_sha256 = secret.as_deref().map(digest);
    let bytes = serde_json::to_vec(&client).unwrap_or_default();
    if let Err(e) = s
        .store
        .put(Kind::Client, &client.client_id, &bytes, None)
        .await
    {
        return server_error(&e.to_string());
    }
    tracing::info!(client_id = %client.client_id, name = client.display_name(), "client registered");
    super::Stats::bump(&s.stats.registered, "dynamic");
    let mut answer = match doc {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    answer.insert("client_id".into(), client.client_id.clone().into());
    answer.insert("client_id_issued_at".into(), client.issued_at.into());
    answer.insert(
        "token_endpoint_auth_method".into(),
        client.auth_method.clone().into(),
    );
    answer.insert("grant_types".into(), json!(client.grant_types));
    answer.insert("response_types".into(), json!(["code"]));
    answer.insert("redirect_uris".into(), json!(client.redirect_uris));
    if let Some(sc) = &client.scopes {
        answer.insert("scope".into(), sc.join(" ").into());
    }
    if let Some(sec) = secret {
        answer.insert("client_secret".into(), sec.into());
        answer.insert("client_secret_expires_at".into(), 0.into());
    } else {
        answer.remove("client_secret");
    }
    cors(no_store(
        (StatusCode::CREATED, axum::Json(Value::Object(answer))).into_response(),
    ))
}

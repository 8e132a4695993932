//! Gantry as its own OAuth 2.1 authorization server (`auth.mode = "builtin"`): the
//! official TypeScript SDK client registers (DCR and a client ID metadata document),
//! logs in through a real upstream OpenID provider (tests/oidc/provider.mjs), approves
//! Gantry's consent page, calls a tool, refreshes, and has its grant revoked when a
//! rotated-out refresh token comes back; every malformed or hostile request is
//! refused with the error the RFCs name; registrations and refresh tokens survive a
//! restart (SQLite, and Redis shared by two replicas).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use base64::Engine as _;
use common::oidc::Provider;
use common::*;
use serde_json::{json, Value};
use sha2::Digest as _;

const REDIRECT: &str = "http://127.0.0.1:8976/callback";

/// An argon2 hash of `pw`, made by the binary (`gantry hash-password`).
fn hash_pw(pw: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new(gantry_bin())
        .arg("hash-password")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{pw}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `[auth]` in builtin mode with the development users alice/pw and bob/pw, state in
/// `db`, plus `extra` lines in `[auth.builtin]`.
fn builtin_dev(db: &std::path::Path, extra: &str) -> String {
    let h = hash_pw("pw");
    format!(
        "[auth]\nmode = \"builtin\"\n[auth.builtin]\npath = {:?}\n{extra}\n\
         [[auth.builtin.users]]\nname = \"alice\"\npassword_hash = {h:?}\n\
         [[auth.builtin.users]]\nname = \"bob\"\npassword_hash = {h:?}\n",
        db.to_str().unwrap()
    )
}

/// A PKCE pair: (verifier, S256 challenge).
fn pkce() -> (String, String) {
    let verifier = format!("v{}", "x".repeat(50)) + &format!("{:x}", rand_u64());
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

fn rand_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::Relaxed)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
}

/// A browser without redirects and with one cookie jar (enough for Gantry's pages).
struct Browser {
    http: reqwest::Client,
    base: String,
    /// What `iss` says in redirects back (the origin of `server.public_url`).
    issuer: String,
    cookie: Option<String>,
}

/// What an answer was: its status, `Location`, body.
struct Page {
    status: u16,
    location: Option<String>,
    body: String,
    headers: reqwest::header::HeaderMap,
}

fn hidden(body: &str, name: &str) -> Option<String> {
    let needle = format!("name=\"{name}\" value=\"");
    let i = body.find(&needle)? + needle.len();
    let j = body[i..].find('"')?;
    Some(body[i..i + j].to_owned())
}

impl Browser {
    fn new(g: &Gantry) -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: g.base.clone(),
            issuer: g.base.clone(),
            cookie: None,
        }
    }

    async fn answer(&mut self, r: reqwest::Response) -> Page {
        for c in r.headers().get_all("set-cookie") {
            let c = c.to_str().unwrap();
            self.cookie = Some(c.split(';').next().unwrap().to_owned());
        }
        Page {
            status: r.status().as_u16(),
            location: r
                .headers()
                .get("location")
                .map(|l| l.to_str().unwrap().to_owned()),
            headers: r.headers().clone(),
            body: r.text().await.unwrap(),
        }
    }

    async fn get(&mut self, path_and_query: &str) -> Page {
        let mut req = self.http.get(format!("{}{path_and_query}", self.base));
        if let Some(c) = &self.cookie {
            req = req.header("cookie", c);
        }
        let r = req.send().await.unwrap();
        self.answer(r).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let mut req = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some(c) = &self.cookie {
            req = req.header("cookie", c);
        }
        let r = req.send().await.unwrap();
        self.answer(r).await
    }

    /// `/authorize` with these parameters (percent-encoded here).
    async fn authorize(&mut self, params: &[(&str, &str)]) -> Page {
        let q: String = url_encode(params);
        self.get(&format!("/authorize?{q}")).await
    }

    /// Logs in on the login page `p` and returns the next page.
    async fn log_in(&mut self, p: &Page, user: &str, pw: &str) -> Page {
        assert!(matches!(p.status, 200 | 401), "a login page: {}", p.body);
        let request = hidden(&p.body, "request").expect("request field");
        let csrf = hidden(&p.body, "csrf").expect("csrf field");
        self.post(
            "/oauth/login",
            &[
                ("request", &request),
                ("csrf", &csrf),
                ("username", user),
                ("password", pw),
            ],
        )
        .await
    }

    /// Submits the consent page `p` with `decision`.
    async fn decide(&mut self, p: &Page, decision: &str) -> Page {
        assert_eq!(p.status, 200, "a consent page: {}", p.body);
        assert!(p.body.contains("/oauth/consent"), "{}", p.body);
        let request = hidden(&p.body, "request").unwrap();
        let csrf = hidden(&p.body, "csrf").unwrap();
        self.post(
            "/oauth/consent",
            &[
                ("request", &request),
                ("csrf", &csrf),
                ("decision", decision),
            ],
        )
        .await
    }
}

fn url_encode(params: &[(&str, &str)]) -> String {
    params
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                k,
                url::form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The query parameters of a redirect.
fn query(location: &str) -> std::collections::HashMap<String, String> {
    let u = reqwest::Url::parse(location).unwrap();
    u.query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Registers a client (RFC 7591): status and answer.
async fn register(g: &Gantry, metadata: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/register", g.base))
        .json(&metadata)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A public client redirecting to [`REDIRECT`] (and an https one), refresh allowed.
async fn public_client(g: &Gantry) -> String {
    let (s, c) = register(
        g,
        json!({
            "client_name": "test client",
            "redirect_uris": [REDIRECT, "https://app.example/cb"],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
            "some_future_field": {"x": 1},
        }),
    )
    .await;
    assert_eq!(s, 201, "{c}");
    c["client_id"].as_str().unwrap().to_owned()
}

/// POST /token: status and answer.
async fn token(g: &Gantry, form: &[(&str, &str)]) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/token", g.base))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    assert_eq!(
        r.headers()
            .get("cache-control")
            .map(|v| v.to_str().unwrap()),
        Some("no-store")
    );
    (status, r.json().await.unwrap())
}

/// The whole browser part for `client_id` as `user`: a code for `challenge`.
async fn code_for(b: &mut Browser, client_id: &str, challenge: &str, user: &str) -> String {
    let p = b
        .authorize(&[
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", REDIRECT),
            ("code_challenge", challenge),
            ("code_challenge_method", "S256"),
            ("state", "st-1"),
        ])
        .await;
    let p = b.log_in(&p, user, "pw").await;
    let p = if p.status == 200 {
        b.decide(&p, "approve").await
    } else {
        p
    };
    assert_eq!(p.status, 302, "{}", p.body);
    let q = query(p.location.as_deref().unwrap());
    assert_eq!(q["state"], "st-1");
    assert_eq!(q["iss"], b.issuer, "RFC 9207 iss");
    q["code"].clone()
}

/// initialize with a bearer token: the HTTP status.
async fn call_with(g: &Gantry, access: &str) -> u16 {
    let r = g
        .bearer(access)
        .post_builder()
        .body(
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
                "protocolVersion":"2025-11-25","capabilities":{},
                "clientInfo":{"name":"t","version":"1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    r.status().as_u16()
}

/// The code exchange at `/token` (no verifier when `verifier` is empty).
async fn exchange(
    g: &Gantry,
    code: String,
    verifier: String,
    client: String,
    redirect: &str,
) -> (u16, Value) {
    let mut form = vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code),
        ("client_id", client),
        ("redirect_uri", redirect.to_owned()),
    ];
    if !verifier.is_empty() {
        form.push(("code_verifier", verifier));
    }
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    token(g, &form).await
}

/// A refresh at `/token` by a public client.
async fn refresh_with(g: &Gantry, refresh: &str, client: &str) -> (u16, Value) {
    token(
        g,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", client),
        ],
    )
    .await
}

/// `/authorize` for `client` with [`REDIRECT`] and `challenge`.
async fn authorize_for(b: &mut Browser, client: &str, challenge: &str) -> Page {
    b.authorize(&[
        ("response_type", "code"),
        ("client_id", client),
        ("redirect_uri", REDIRECT),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
    ])
    .await
}

/// Runs tests/oidc/builtin_flow.mjs (the official TS SDK v1 client): its JSON line.
fn builtin_flow(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--url", url];
    all.extend_from_slice(args);
    common::oidc::run_script("builtin_flow.mjs", &all)
}

/// Gantry in builtin mode logging users in at `idp` (as the relying party
/// `gantry-rp`, registered there once Gantry's callback URL is known).
async fn with_upstream(idp: &Provider, db: &std::path::Path, extra: &str) -> Gantry {
    let toml = format!(
        "[auth]\nmode = \"builtin\"\n[auth.builtin]\npath = {:?}\nrefresh_grace = \"1s\"\n{extra}\n\
         [auth.builtin.upstream]\nissuer = {:?}\nclient_id = \"gantry-rp\"\nclient_secret = \"rp-secret\"\n\
         scopes = [\"openid\", \"email\", \"groups\"]\nclaims = [\"email\", \"groups\"]\nallowed_groups = [\"staff\"]\n",
        db.to_str().unwrap(),
        idp.issuer()
    );
    let g = gantry().section(&toml).backend(example()).start();
    let admin = idp.info["admin_resources_url"]
        .as_str()
        .unwrap()
        .replace("/__test/resources", "/__test/web-clients");
    let r = reqwest::Client::new()
        .post(admin)
        .json(
            &json!({"client_id": "gantry-rp", "client_secret": "rp-secret",
                      "redirect_uri": format!("{}/oauth/callback", g.base)}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "register gantry at the provider");
    g
}

/// The official TypeScript SDK client, registered by DCR, runs the whole flow
/// against Gantry with login at a real OpenID provider: 401 → metadata → DCR →
/// authorize → upstream login → Gantry's consent → token → tool call → refresh →
/// the rotated-out refresh token is refused and revokes the grant (the newest
/// refresh token and the access token stop working too). Then the same with a
/// client ID metadata document instead of registration.
#[tokio::test]
async fn the_sdk_client_logs_in_through_a_real_provider_and_a_reused_refresh_token_revokes_the_grant(
) {
    let idp = Provider::start(&[]);
    let dir = Scratch::new("builtin-up");
    let g = with_upstream(
        &idp,
        &dir.file("auth.db"),
        "allow_loopback_client_ids = true",
    )
    .await;

    let flow = builtin_flow(
        &g.url,
        &[
            "--tool",
            "echo",
            "--args",
            r#"{"message":"hi"}"#,
            "--grace-ms",
            "2500",
        ],
    );
    assert_eq!(flow["ok"], true, "{flow}");
    assert_eq!(flow["registration"], "dcr", "{flow}");
    assert_eq!(flow["call"]["content"][0]["text"], "hi", "{flow}");
    assert_eq!(flow["issuer"], g.base, "{flow}");
    assert_eq!(flow["callback_iss"], g.base, "{flow}");
    assert_eq!(flow["refresh_rotated"], true, "{flow}");
    assert_eq!(flow["after_refresh_call_ok"], true, "{flow}");
    assert_eq!(flow["replay"]["status"], 400, "{flow}");
    assert_eq!(flow["replay"]["error"], "invalid_grant", "{flow}");
    assert_eq!(
        flow["newest_after_replay"]["error"], "invalid_grant",
        "{flow}"
    );
    assert!(flow["access_refused_after_ms"].is_u64(), "{flow}");

    let cimd = builtin_flow(
        &g.url,
        &[
            "--tool",
            "echo",
            "--args",
            r#"{"message":"doc"}"#,
            "--cimd-port",
            "0",
        ],
    );
    assert_eq!(cimd["ok"], true, "{cimd}");
    assert_eq!(cimd["registration"], "cimd", "{cimd}");
    assert_eq!(cimd["call"]["content"][0]["text"], "doc", "{cimd}");
    assert_eq!(cimd["cimd_fetches"], 1, "{cimd}");
    assert!(
        cimd["client_id"]
            .as_str()
            .unwrap()
            .ends_with("/client.json"),
        "{cimd}"
    );
}

/// The upstream's allow-list: a user outside the allowed groups is sent back to
/// the client with `access_denied`, and gets no token.
#[tokio::test]
async fn a_user_outside_the_allowed_groups_is_refused() {
    let idp = Provider::start(&[]);
    let dir = Scratch::new("builtin-groups");
    let g = with_upstream(&idp, &dir.file("auth.db"), "").await;
    // carol is in no group (tests/oidc/provider.mjs).
    let flow = builtin_flow(&g.url, &["--username", "carol"]);
    assert_eq!(flow["ok"], false, "{flow}");
    let error = flow["error"].as_str().unwrap();
    assert!(error.contains("access_denied"), "{flow}");
}

/// Every request the RFCs say to refuse, refused with the error they name, and
/// redirects only ever to a registered redirect URI.
#[tokio::test]
async fn hostile_and_malformed_requests_get_the_errors_the_rfcs_name() {
    let dir = Scratch::new("builtin-neg");
    let g = gantry()
        .section(&builtin_dev(&dir.file("auth.db"), ""))
        .backend(example())
        .start();

    // Registration: non-https non-loopback redirect URIs, custom schemes not allowed.
    for bad in [
        "http://app.example/cb",
        "cursor://x/cb",
        "https://app.example/cb#frag",
        "/relative",
    ] {
        let (s, r) = register(
            &g,
            json!({"redirect_uris": [bad], "token_endpoint_auth_method": "none"}),
        )
        .await;
        assert_eq!(
            (s, r["error"].as_str()),
            (400, Some("invalid_redirect_uri")),
            "{bad}: {r}"
        );
    }
    let (s, r) = register(
        &g,
        json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "private_key_jwt"}),
    )
    .await;
    assert_eq!(
        (s, r["error"].as_str()),
        (400, Some("invalid_client_metadata")),
        "{r}"
    );
    let client = public_client(&g).await;
    let other = public_client(&g).await;
    let (_, challenge) = pkce();

    let mut b = Browser::new(&g);
    let base = [
        ("response_type", "code"),
        ("client_id", client.as_str()),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("state", "s1"),
    ];
    let with = |extra: &[(&'static str, &'static str)], drop: &[&str]| -> Vec<(&str, &str)> {
        let mut v: Vec<(&str, &str)> = base
            .iter()
            .filter(|(k, _)| !drop.contains(k))
            .copied()
            .collect();
        v.extend_from_slice(extra);
        v
    };

    // Open-redirect attempts: an unregistered redirect URI is never redirected to.
    for bad in [
        "https://app.example/cb/x",
        "https://app.example/cb?x=1",
        "https://app.example:8443/cb",
        "https://evil.example/cb",
        "http://127.0.0.1:8976/other",
        "http://127.0.0.1:8976/callback?extra=1",
    ] {
        let p = b.authorize(&with(&[("redirect_uri", bad)], &[])).await;
        assert_eq!(p.status, 400, "{bad}");
        assert!(p.location.is_none(), "{bad} was redirected to");
        let csp = p.headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    }
    // A loopback redirect URI with another port is the same URI (RFC 8252).
    let p = b
        .authorize(&with(
            &[("redirect_uri", "http://127.0.0.1:40123/callback")],
            &[],
        ))
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("name=\"password\""));

    // Errors after the redirect URI is validated go back to it, with state and iss.
    let back = |p: &Page| {
        assert_eq!(p.status, 302, "{}", p.body);
        let loc = p.location.clone().unwrap();
        assert!(loc.starts_with("https://app.example/cb?"), "{loc}");
        let q = query(&loc);
        assert_eq!(q["state"], "s1");
        assert_eq!(q["iss"], g.base);
        q["error"].clone()
    };
    let app = ("redirect_uri", "https://app.example/cb");
    let p = b
        .authorize(&with(
            &[app, ("code_challenge_method", "plain")],
            &["code_challenge_method"],
        ))
        .await;
    assert_eq!(back(&p), "invalid_request", "PKCE plain");
    let p = b
        .authorize(&with(&[app], &["code_challenge", "code_challenge_method"]))
        .await;
    assert_eq!(back(&p), "invalid_request", "no PKCE");
    let p = b.authorize(&with(&[app], &["code_challenge_method"])).await;
    assert_eq!(
        back(&p),
        "invalid_request",
        "PKCE method omitted (plain by default)"
    );
    let p = b
        .authorize(&with(
            &[app, ("resource", "https://other.example/mcp")],
            &[],
        ))
        .await;
    assert_eq!(back(&p), "invalid_target");
    let p = b
        .authorize(&with(
            &[app, ("response_type", "token")],
            &["response_type"],
        ))
        .await;
    assert_eq!(back(&p), "unsupported_response_type");
    let p = b.authorize(&with(&[app, ("state", "again")], &[])).await;
    assert_eq!(p.status, 302);
    assert_eq!(
        query(p.location.as_deref().unwrap())["error"],
        "invalid_request",
        "repeated state"
    );

    // Token endpoint.
    let (verifier, challenge) = pkce();
    let code = code_for(&mut b, &client, &challenge, "alice").await;
    let (wrong, _) = pkce();
    for (what, v, c, r) in [
        ("missing verifier", String::new(), client.clone(), REDIRECT),
        ("wrong verifier", wrong, client.clone(), REDIRECT),
        (
            "another client's code",
            verifier.clone(),
            other.clone(),
            REDIRECT,
        ),
        (
            "another redirect URI",
            verifier.clone(),
            client.clone(),
            "https://app.example/cb",
        ),
    ] {
        let (s, r) = exchange(&g, code.clone(), v, c, r).await;
        assert_eq!(
            (s, r["error"].as_str()),
            (400, Some("invalid_grant")),
            "{what}: {r}"
        );
    }
    let (s, r) = token(
        &g,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &client),
            ("redirect_uri", REDIRECT),
            ("code_verifier", &verifier),
            ("resource", "https://other.example/mcp"),
        ],
    )
    .await;
    assert_eq!(
        (s, r["error"].as_str()),
        (400, Some("invalid_target")),
        "{r}"
    );
    // None of the refusals used the code up.
    let (s, tokens) = exchange(&g, code.clone(), verifier.clone(), client.clone(), REDIRECT).await;
    assert_eq!(s, 200, "{tokens}");
    assert_eq!(tokens["token_type"], "Bearer");
    let access = tokens["access_token"].as_str().unwrap().to_owned();
    let refresh = tokens["refresh_token"].as_str().unwrap().to_owned();
    assert_eq!(call_with(&g, &access).await, 200);
    let claims = common::oidc::jwt_claims(&access);
    assert_eq!(claims["iss"], g.base);
    assert_eq!(claims["aud"], g.url);
    assert_eq!(claims["sub"], "alice");
    assert!(claims["exp"].as_u64().unwrap() > claims["iat"].as_u64().unwrap());

    // A replayed code: refused, and what it issued is revoked.
    let (s, r) = exchange(&g, code.clone(), verifier.clone(), client.clone(), REDIRECT).await;
    assert_eq!(
        (s, r["error"].as_str()),
        (400, Some("invalid_grant")),
        "{r}"
    );
    assert_eq!(
        call_with(&g, &access).await,
        401,
        "the replayed code's access token"
    );
    let (s, r) = refresh_with(&g, &refresh, &client).await;
    assert_eq!(
        (s, r["error"].as_str()),
        (400, Some("invalid_grant")),
        "{r}"
    );

    // What /metrics says of it (the replay is the one revocation, one code exchanged).
    let m = |series: &'static str| {
        let g = &g;
        async move { metric(g, series).await.unwrap_or(0.0) }
    };
    assert_eq!(
        m("gantry_oauth_server_grants_revoked_total{reason=\"code_replayed\"}").await,
        1.0
    );
    assert_eq!(
        m("gantry_oauth_server_tokens_issued_total{grant=\"authorization_code\"}").await,
        1.0
    );
    assert!(
        m("gantry_oauth_server_refusals_total{endpoint=\"token\",error=\"invalid_grant\"}").await
            >= 5.0
    );
    assert!(
        m("gantry_oauth_server_refusals_total{endpoint=\"authorize\",error=\"invalid_request\"}")
            .await
            >= 4.0
    );
    assert_eq!(
        m("gantry_oauth_server_registrations_total{via=\"dynamic\"}").await,
        2.0
    );

    // Unknown grant types and clients.
    let (s, r) = token(&g, &[("grant_type", "password"), ("client_id", &client)]).await;
    assert_eq!(
        (s, r["error"].as_str()),
        (400, Some("unsupported_grant_type")),
        "{r}"
    );
    let (s, r) = token(
        &g,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "nobody"),
        ],
    )
    .await;
    assert_eq!(
        (s, r["error"].as_str()),
        (401, Some("invalid_client")),
        "{r}"
    );

    // Client ID metadata documents that are never fetched: private addresses
    // (literal, or a name resolving to loopback) with the test switch off.
    for id in [
        "https://127.0.0.1/client.json",
        "https://localhost:9/client.json",
        "https://10.0.0.1/c.json",
    ] {
        let p = b
            .authorize(&[
                ("response_type", "code"),
                ("client_id", id),
                ("redirect_uri", REDIRECT),
            ])
            .await;
        assert_eq!(p.status, 400, "{id}");
        assert!(p.location.is_none());
        assert!(
            p.body.contains("private address") || p.body.contains("no public address"),
            "{id}: {}",
            p.body
        );
    }
}

/// A client ID metadata document whose `client_id` is not its own URL is refused
/// (served by the test on loopback, under the test switch).
#[tokio::test]
async fn a_metadata_document_naming_another_client_id_is_refused() {
    let dir = Scratch::new("builtin-cimd");
    let g = gantry()
        .section(&builtin_dev(
            &dir.file("auth.db"),
            "allow_loopback_client_ids = true",
        ))
        .backend(example())
        .start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .route(
            "/liar.json",
            axum::routing::get(|| async {
                axum::Json(
                    json!({"client_id": "https://claude.ai/oauth/mcp-oauth-client-metadata",
                    "client_name": "not me", "redirect_uris": [REDIRECT]}),
                )
            }),
        )
        .route(
            "/good.json",
            axum::routing::get(move || async move {
                axum::Json(
                    json!({"client_id": format!("http://127.0.0.1:{port}/good.json"),
                    "client_name": "Good Doc", "redirect_uris": [REDIRECT],
                    "token_endpoint_auth_method": "none"}),
                )
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut b = Browser::new(&g);
    let (_, challenge) = pkce();
    let liar = format!("http://127.0.0.1:{port}/liar.json");
    let p = b
        .authorize(&[
            ("response_type", "code"),
            ("client_id", &liar),
            ("redirect_uri", REDIRECT),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ])
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("is not its URL"), "{}", p.body);
    assert!(p.location.is_none());
    let good = format!("http://127.0.0.1:{port}/good.json");
    let p = b
        .authorize(&[
            ("response_type", "code"),
            ("client_id", &good),
            ("redirect_uri", REDIRECT),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ])
        .await;
    let p = b.log_in(&p, "alice", "pw").await;
    assert!(
        p.body.contains("Good Doc"),
        "the consent page names the client: {}",
        p.body
    );
    assert!(p.body.contains("127.0.0.1"), "and its redirect host");
}

/// Consent is asked once per (user, client); a denial goes back as `access_denied`;
/// the forms refuse another browser and a stale CSRF token; a wrong password
/// shows the login page again.
#[tokio::test]
async fn consent_is_per_user_and_client_and_the_forms_resist_forgery() {
    let dir = Scratch::new("builtin-consent");
    let g = gantry()
        .section(&builtin_dev(&dir.file("auth.db"), ""))
        .backend(example())
        .start();
    let client = public_client(&g).await;
    let other = public_client(&g).await;
    let (_, challenge) = pkce();
    let mut b = Browser::new(&g);
    // Wrong password: the login page again, 401.
    let p = authorize_for(&mut b, &client, &challenge).await;
    let again = b.log_in(&p, "alice", "nope").await;
    assert_eq!(again.status, 401);
    assert!(again.body.contains("Wrong user name or password"));
    let consent = b.log_in(&again, "alice", "pw").await;
    assert!(consent.body.contains("test client"), "{}", consent.body);
    // Another browser (no cookie) cannot submit it; nor a forged CSRF token.
    let request = hidden(&consent.body, "request").unwrap();
    let csrf = hidden(&consent.body, "csrf").unwrap();
    let mut stranger = Browser::new(&g);
    let p = stranger
        .post(
            "/oauth/consent",
            &[
                ("request", &request),
                ("csrf", &csrf),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(p.status, 400);
    assert!(p.location.is_none());
    let p = b
        .post(
            "/oauth/consent",
            &[
                ("request", &request),
                ("csrf", "forged"),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(p.status, 400);
    // Deny.
    let p = b.decide(&consent, "deny").await;
    assert_eq!(
        query(p.location.as_deref().unwrap())["error"],
        "access_denied"
    );
    // Approve once: the next authorization of alice for this client skips consent.
    let p = authorize_for(&mut b, &client, &challenge).await;
    let p = b.log_in(&p, "alice", "pw").await;
    let p = b.decide(&p, "approve").await;
    assert!(query(p.location.as_deref().unwrap()).contains_key("code"));
    let p = authorize_for(&mut b, &client, &challenge).await;
    let p = b.log_in(&p, "alice", "pw").await;
    assert_eq!(p.status, 302, "remembered consent: {}", p.body);
    assert!(query(p.location.as_deref().unwrap()).contains_key("code"));
    // Not for another client, not for another user.
    let p = authorize_for(&mut b, &other, &challenge).await;
    let p = b.log_in(&p, "alice", "pw").await;
    assert_eq!(p.status, 200, "another client asks again");
    let p = authorize_for(&mut b, &client, &challenge).await;
    let p = b.log_in(&p, "bob", "pw").await;
    assert_eq!(p.status, 200, "another user is asked");
}

/// A restart keeps registered clients and refresh tokens: the SQLite file (and the
/// state key beside it) hold them.
#[tokio::test]
async fn a_restart_keeps_registered_clients_and_refresh_tokens() {
    let dir = Scratch::new("builtin-restart");
    let spec = gantry()
        .server("public_url = \"http://127.0.0.1:9/mcp\"")
        .section(&builtin_dev(&dir.file("auth.db"), ""))
        .backend(example());
    let g = spec.clone().start();
    let client = public_client(&g).await;
    let (verifier, challenge) = pkce();
    let mut b = Browser::new(&g);
    b.issuer = "http://127.0.0.1:9".into();
    let code = code_for(&mut b, &client, &challenge, "alice").await;
    let (s, t) = exchange(&g, code.clone(), verifier.clone(), client.clone(), REDIRECT).await;
    assert_eq!(s, 200, "{t}");
    let refresh = t["refresh_token"].as_str().unwrap().to_owned();
    drop(g);

    let g = spec.start();
    let (s, t) = refresh_with(&g, &refresh, &client).await;
    assert_eq!(s, 200, "the refresh token survived: {t}");
    assert_ne!(t["refresh_token"].as_str().unwrap(), refresh, "rotated");
    assert_eq!(
        call_with(&g, t["access_token"].as_str().unwrap()).await,
        200
    );
    let mut b = Browser::new(&g);
    let (_, challenge) = pkce();
    let p = b
        .authorize(&[
            ("response_type", "code"),
            ("client_id", &client),
            ("redirect_uri", REDIRECT),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ])
        .await;
    assert_eq!(p.status, 200, "the registration survived: {}", p.body);
}

/// Machine clients: `client_credentials` for a configured confidential client; a
/// wrong secret is `invalid_client` (401), a public client may not use the grant.
#[tokio::test]
async fn a_machine_client_gets_tokens_with_client_credentials() {
    let dir = Scratch::new("builtin-cc");
    let extra = format!(
        "[[auth.builtin.clients]]\nclient_id = \"ci-bot\"\nclient_secret_sha256 = {:?}\ngrant_types = [\"client_credentials\"]\n",
        sha256_hex("bot-secret")
    );
    let g = gantry()
        .section(&format!("{}{extra}", builtin_dev(&dir.file("auth.db"), "")))
        .backend(example())
        .start();
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/token", g.base))
        .basic_auth("ci-bot", Some("bot-secret"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let t: Value = r.json().await.unwrap();
    assert!(t.get("refresh_token").is_none());
    let access = t["access_token"].as_str().unwrap();
    assert_eq!(common::oidc::jwt_claims(access)["sub"], "ci-bot");
    assert_eq!(call_with(&g, access).await, 200);
    let r = http
        .post(format!("{}/token", g.base))
        .basic_auth("ci-bot", Some("wrong"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    let client = public_client(&g).await;
    let (s, r) = token(
        &g,
        &[("grant_type", "client_credentials"), ("client_id", &client)],
    )
    .await;
    assert_eq!(
        (s, r["error"].as_str()),
        (400, Some("unauthorized_client")),
        "{r}"
    );
    // RFC 7009: the machine revokes its token; Gantry refuses it from then on.
    let r = http
        .post(format!("{}/revoke", g.base))
        .basic_auth("ci-bot", Some("bot-secret"))
        .form(&[("token", access)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(call_with(&g, access).await, 401);
}

/// Two replicas sharing Redis: a client registered at one logs in at the other,
/// a token from one is accepted by the other, and refresh tokens survive both
/// restarting (the signing keys are shared, sealed under the common state key).
#[tokio::test]
async fn two_replicas_share_their_state_through_redis() {
    let redis = common::redis::Redis::start();
    let section = builtin_dev(
        std::path::Path::new("unused.db"),
        &format!(
            "store = \"redis\"\nredis_url = {:?}\nstate_key = \"{}\"",
            redis.url(),
            base64::engine::general_purpose::STANDARD.encode([7u8; 32])
        ),
    );
    let spec = gantry()
        .server("public_url = \"http://127.0.0.1:9/mcp\"")
        .section(&section)
        .backend(example());
    let a = spec.clone().start();
    let b = spec.clone().start();
    let client = public_client(&a).await;
    let (verifier, challenge) = pkce();
    let mut browser = Browser::new(&b);
    browser.issuer = "http://127.0.0.1:9".into();
    let code = code_for(&mut browser, &client, &challenge, "alice").await;
    let (s, t) = exchange(&a, code.clone(), verifier.clone(), client.clone(), REDIRECT).await;
    assert_eq!(s, 200, "{t}");
    let access = t["access_token"].as_str().unwrap();
    assert_eq!(
        call_with(&b, access).await,
        200,
        "a token from A works at B"
    );
    let refresh = t["refresh_token"].as_str().unwrap().to_owned();
    drop((a, b));
    let c = spec.start();
    let (s, t) = refresh_with(&c, &refresh, &client).await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(
        call_with(&c, t["access_token"].as_str().unwrap()).await,
        200
    );
}

/// Password guessing at the development login is slowed down per address: after ten
/// attempts in a minute, 429 with Retry-After (and the right password does not help).
#[tokio::test]
async fn password_guessing_is_slowed_down() {
    let dir = Scratch::new("builtin-guess");
    let g = gantry()
        .section(&builtin_dev(&dir.file("auth.db"), ""))
        .backend(example())
        .start();
    let client = public_client(&g).await;
    let (_, challenge) = pkce();
    let mut b = Browser::new(&g);
    let mut page = authorize_for(&mut b, &client, &challenge).await;
    // Ten are let through at once; refills come one per 6 s, slower than guessing.
    let mut tries = 0;
    while page.status != 429 {
        assert!(tries < 30, "no 429 after {tries} wrong passwords");
        assert_eq!(page.status, if tries == 0 { 200 } else { 401 });
        let last = page;
        page = b.log_in(&last, "alice", "guess").await;
        tries += 1;
        if page.status == 429 {
            page = last;
            break;
        }
    }
    assert!(tries >= 10, "refused after {tries}");
    let request = hidden(&page.body, "request").unwrap();
    let csrf = hidden(&page.body, "csrf").unwrap();
    let p = b
        .post(
            "/oauth/login",
            &[
                ("request", &request),
                ("csrf", &csrf),
                ("username", "alice"),
                ("password", "pw"),
            ],
        )
        .await;
    assert_eq!(p.status, 429, "{}", p.body);
    assert_eq!(p.headers["retry-after"], "60");
}

/// The login and consent pages in a real headless browser (Debian's chromium, driven
/// by puppeteer-core: tests/oidc/chromium_flow.mjs): they render, the forms submit
/// by real clicks, the browser follows the consent POST's redirect to the client
/// under the pages' CSP, and the code it brings back works.
#[tokio::test]
async fn the_login_and_consent_pages_work_in_a_real_browser() {
    let dir = Scratch::new("builtin-chromium");
    let g = gantry()
        .section(&builtin_dev(&dir.file("auth.db"), ""))
        .backend(example())
        .start();
    let r = common::oidc::run_script(
        "chromium_flow.mjs",
        &["--base", &g.base, "--username", "alice", "--password", "pw"],
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["consent_mentions_client"], true, "{r}");
    assert_eq!(r["mcp_status"], 200, "{r}");
    assert_eq!(r["csp_violations"], json!([]), "{r}");
}

/// Registrations are limited per client: behind a trusted proxy (`[limits]
/// trusted_proxies`) the client is the `X-Forwarded-For` address, so one client
/// flooding does not lock out the others behind the same proxy.
#[tokio::test]
async fn registrations_are_limited_per_client_behind_a_trusted_proxy() {
    let dir = Scratch::new("builtin-reg-limit");
    let g = gantry()
        .section(&format!(
            "[limits]\ntrusted_proxies = [\"127.0.0.1/32\"]\n{}",
            builtin_dev(&dir.file("auth.db"), "registrations_per_hour = 2")
        ))
        .backend(example())
        .start();
    let http = reqwest::Client::new();
    let reg = |from: &'static str| {
        let http = http.clone();
        let url = format!("{}/register", g.base);
        async move {
            http.post(url)
                .header("x-forwarded-for", from)
                .json(&json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(reg("203.0.113.5").await, 201);
    assert_eq!(reg("203.0.113.5").await, 201);
    assert_eq!(reg("203.0.113.5").await, 429, "the third from one client");
    assert_eq!(
        reg("203.0.113.6").await,
        201,
        "another client behind the proxy"
    );
}

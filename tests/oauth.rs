//! Gantry as an OAuth 2.1 resource server in front of a real OpenID provider
//! (`oidc-provider`, tests/oidc): its tokens are accepted, every kind of bad token is
//! refused with the status and `WWW-Authenticate` the specifications give, the
//! protected-resource metadata is what clients need, sessions belong to a subject,
//! and no token ever reaches a backend.

// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::oidc::{jwt_claims, now, Provider};
use common::*;
use serde_json::{json, Value};

/// Gantry trusting `providers` (the first is where clients log in), requiring
/// `mcp:read`, in front of `backend`; each provider knows Gantry's URL as a resource.
async fn protected(providers: &[&Provider], backend: BackendSpec) -> Gantry {
    let mut oauth = String::from(
        "[auth.oauth]\nrequired_scopes = [\"mcp:read\"]\njwks_refetch_interval = \"1s\"\n",
    );
    for p in providers {
        oauth.push_str(&format!(
            "[[auth.oauth.issuers]]\nissuer = {:?}\n",
            p.issuer()
        ));
    }
    let g = gantry().section(&oauth).backend(backend).start();
    for p in providers {
        p.add_resource(&g.url, "jwt").await;
    }
    g
}

fn metadata_url(g: &Gantry) -> String {
    format!("{}/.well-known/oauth-protected-resource/mcp", g.base)
}

/// One initialize with these headers: status, `WWW-Authenticate`, body.
async fn try_initialize(g: &Gantry, c: &Client) -> (u16, String, Value) {
    let _ = g;
    let r = c
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
    let status = r.status().as_u16();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = r.json().await.unwrap_or(Value::Null);
    (status, challenge, body)
}

#[tokio::test]
async fn provider_tokens_are_accepted_and_every_bad_token_refused() {
    let idp = Provider::start(&[]);
    let other_idp = Provider::start(&[]);
    let g = protected(&[&idp], example()).await;
    let rm = metadata_url(&g);

    // A real token of the provider for Gantry's URL: a session and a call.
    let good = idp.client_token(&g.url, "mcp:read").await;
    let mut c = g.bearer(&good);
    c.initialize().await;
    let r = c
        .call_tool(json!(2), "echo", json!({"message": "hi"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "hi", "{r}");

    // No token: 401, a bare challenge naming the metadata and the scope.
    let (status, challenge, body) = try_initialize(&g, &g.client()).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        challenge,
        format!("Bearer scope=\"mcp:read\", resource_metadata=\"{rm}\"")
    );

    // Refused tokens: 401 invalid_token, each for its own reason.
    idp.add_resource(&format!("{}-evil", g.url), "jwt").await;
    other_idp.add_resource(&g.url, "jwt").await;
    let wrong_audience = idp
        .client_token(&format!("{}-evil", g.url), "mcp:read")
        .await;
    let foreign = other_idp.client_token(&g.url, "mcp:read").await;
    let t = now();
    let bad_signature = {
        // One character in the middle of the signature changed.
        let (signed, sig) = good.rsplit_once('.').unwrap();
        let mut sig: Vec<char> = sig.chars().collect();
        let mid = sig.len() / 2;
        sig[mid] = if sig[mid] == 'A' { 'B' } else { 'A' };
        format!("{signed}.{}", sig.into_iter().collect::<String>())
    };
    let (head, rest) = good.split_once('.').unwrap();
    let payload = rest.split('.').next().unwrap();
    let alg_none = {
        use base64::Engine as _;
        let h = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(r#"{"alg":"none","typ":"JWT"}"#);
        format!("{h}.{payload}.")
    };
    let _ = head;
    let hs256_with_public_key = {
        let jwk = &idp.keys[0]["public_jwk"];
        let secret = serde_json::to_vec(jwk).unwrap();
        let claims: Value = {
            use base64::Engine as _;
            serde_json::from_slice(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(payload)
                    .unwrap(),
            )
            .unwrap()
        };
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        h.kid = idp.keys[0]["kid"].as_str().map(str::to_owned);
        jsonwebtoken::encode(
            &h,
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(&secret),
        )
        .unwrap()
    };
    let unknown_kid = {
        // Signed by the other provider's key, under a kid nobody publishes.
        let key = &other_idp.keys[0];
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        h.kid = Some("no-such-key".into());
        let claims = json!({"iss": idp.issuer(), "sub": "alice", "aud": g.url, "iat": t, "exp": t + 300, "scope": "mcp:read"});
        let enc = jsonwebtoken::EncodingKey::from_rsa_pem(
            key["private_pem"].as_str().unwrap().as_bytes(),
        )
        .unwrap();
        jsonwebtoken::encode(&h, &claims, &enc).unwrap()
    };
    let cases: Vec<(&str, String, &str)> = vec![
        ("wrong audience", wrong_audience, "audience"),
        (
            "audience below Gantry's URL",
            idp.sign(&format!("{}/extra", g.url), json!({})),
            "audience",
        ),
        (
            "expired",
            idp.sign(&g.url, json!({"iat": t - 900, "exp": t - 120})),
            "expired",
        ),
        (
            "not yet valid",
            idp.sign(&g.url, json!({"nbf": t + 600})),
            "not valid yet",
        ),
        (
            "issued in the future",
            idp.sign(&g.url, json!({"iat": t + 600, "exp": t + 900})),
            "future",
        ),
        ("no exp", idp.sign(&g.url, json!({"exp": null})), "exp"),
        ("bad signature", bad_signature, "signature"),
        ("alg none", alg_none, "algorithm"),
        (
            "HS256 with the public key",
            hs256_with_public_key,
            "algorithm",
        ),
        ("unknown kid", unknown_kid, "key"),
        ("another issuer", foreign, "does not trust"),
        (
            "not a JWT",
            "opaque-but-unknown".into(),
            "not a readable JWT",
        ),
    ];
    for (what, token, why) in cases {
        let (status, challenge, body) = try_initialize(&g, &g.bearer(&token)).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\", error_description=\""),
            "{what}: {challenge}"
        );
        assert!(
            challenge.ends_with(&format!("resource_metadata=\"{rm}\"")),
            "{what}: {challenge}"
        );
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{what}: {message}");
        assert!(
            !message.contains(&token) && !challenge.contains(&token),
            "{what}: the token echoed"
        );
    }

    // Valid but without the required scope: 403, asking for granted + missing.
    let writer = idp.client_token(&g.url, "mcp:write").await;
    let (status, challenge, body) = try_initialize(&g, &g.bearer(&writer)).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("scope=\"mcp:write mcp:read\""),
        "{challenge}"
    );

    // A token in the query string: 400 invalid_request, even a good one.
    let r = reqwest::Client::new()
        .post(format!("{}?access_token={good}", g.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(
        challenge.starts_with("Bearer error=\"invalid_request\""),
        "{challenge}"
    );
}

#[tokio::test]
async fn a_refused_request_leaves_no_trace_and_a_refreshed_token_keeps_the_session() {
    let idp = Provider::start(&[]);
    let g = protected(&[&idp], example()).await;
    let first = idp.sign(&g.url, json!({"sub": "alice"}));
    let mut c = g.bearer(&first);
    c.initialize().await;
    // The same call refused (expired token), then sent again as is with a new
    // token of the same subject: it runs once, on the same session.
    let session = c.session.clone();
    let expired = idp.sign(
        &g.url,
        json!({"sub": "alice", "iat": now() - 900, "exp": now() - 120}),
    );
    let mut refused = g.bearer(&expired);
    refused.session = session.clone();
    let body = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"once"}}});
    let r = refused.post(&body).await;
    assert_eq!(r.status, 401, "{}", r.raw);
    let mut renewed = g.bearer(&idp.sign(&g.url, json!({"sub": "alice"})));
    renewed.session = session.clone();
    let r = renewed.post(&body).await;
    assert_eq!(
        r.response(&json!(7)).unwrap()["result"]["content"][0]["text"],
        "once",
        "{}",
        r.raw
    );
    // Another subject's valid token on that session: 404, as for an unknown session.
    let mut bob = g.bearer(&idp.sign(&g.url, json!({"sub": "bob"})));
    bob.session = session;
    let r = bob.request(json!(8), "tools/list", json!({})).await;
    assert_eq!(r.status, 404, "{}", r.raw);
}

#[tokio::test]
async fn the_protected_resource_metadata_is_what_clients_need() {
    let idp = Provider::start(&[]);
    let g = protected(&[&idp], example()).await;
    let http = reqwest::Client::new();
    for (path, resource) in [
        ("/.well-known/oauth-protected-resource/mcp", g.url.clone()),
        (
            "/.well-known/oauth-protected-resource/mcp/",
            format!("{}/", g.url),
        ),
        ("/.well-known/oauth-protected-resource", g.url.clone()),
    ] {
        let r = http
            .get(format!("{}{path}", g.base))
            .header("origin", "https://claude.ai")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["access-control-allow-origin"], "*", "{path}");
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let doc: Value = r.json().await.unwrap();
        assert_eq!(doc["resource"], resource.as_str(), "{path}: {doc}");
        assert_eq!(doc["authorization_servers"], json!([idp.issuer()]), "{doc}");
        assert_eq!(doc["scopes_supported"], json!(["mcp:read"]), "{doc}");
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");
        assert!(doc["resource_name"].is_string(), "{doc}");
    }
    // The metadata the challenge names is the path-inserted one.
    let (_, challenge, _) = try_initialize(&g, &g.client()).await;
    assert!(challenge.contains(&format!("resource_metadata=\"{}\"", metadata_url(&g))));
}

#[tokio::test]
async fn a_backend_never_sees_the_clients_token() {
    let idp = Provider::start(&[]);
    let dir = Scratch::new("passthrough");
    let seen = dir.0.join("headers.jsonl");
    let backend = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", seen.to_str().unwrap())]);
    let g = protected(&[&idp], http_backend("web", &backend.url)).await;
    let token = idp.client_token(&g.url, "mcp:read").await;
    let mut c = g.bearer(&token);
    c.initialize().await;
    let r = c.call_tool(json!(2), "echo", json!({"message": "x"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "x", "{r}");
    let requests = recorded(&seen);
    assert!(requests.len() >= 2, "{requests:?}");
    for req in &requests {
        let headers = req["headers"].as_object().unwrap();
        assert!(!headers.contains_key("authorization"), "{req}");
        assert!(
            !headers
                .values()
                .any(|v| v.as_str().is_some_and(|v| v.contains(&token))),
            "{req}"
        );
    }
}

/// Runs the official TypeScript SDK's OAuth client (tests/oidc/sdk_flow.mjs) against
/// `url`: its one JSON line.
fn sdk_flow(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--url", url];
    all.extend_from_slice(args);
    common::oidc::run_script("sdk_flow.mjs", &all)
}

/// The official TypeScript SDK client logs in on its own: 401 → protected-resource
/// metadata → the provider's metadata → dynamic registration → authorization code with
/// PKCE (the test plays the browser) → a tool call through Gantry, asking for what the
/// challenge names and for Gantry's resource; as it does against an SDK server
/// protected directly (the baseline).
#[tokio::test]
async fn the_typescript_sdk_logs_in_through_gantry_as_it_does_directly() {
    let idp = Provider::start(&[]);
    let g = protected(&[&idp], example()).await;
    let through = sdk_flow(&g.url, &["--tool", "echo", "--args", r#"{"message":"hi"}"#]);
    assert_eq!(through["ok"], true, "{through}");
    assert!(
        through["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "echo"),
        "{through}"
    );
    assert_eq!(through["call"]["content"][0]["text"], "hi", "{through}");
    assert_eq!(through["authorizations"], 1, "{through}");
    assert_eq!(
        through["scopes_requested"],
        json!(["mcp:read"]),
        "{through}"
    );
    assert_eq!(through["resource_requested"], json!([g.url]), "{through}");

    // The same client against the SDK's own protected server, directly.
    let server = common::oidc::ProtectedServer::start(idp.issuer());
    idp.add_resource(&server.url, "jwt").await;
    let direct = sdk_flow(
        &server.url,
        &["--tool", "echo", "--args", r#"{"message":"hi"}"#],
    );
    assert_eq!(direct["ok"], true, "{direct}");
    assert_eq!(
        direct["authorizations"], through["authorizations"],
        "{direct}"
    );
}

/// Tokens naming keys the issuer does not publish (an attacker spraying random
/// `kid`s) make Gantry fetch the issuer's keys again at most once per
/// `jwks_refetch_interval` (1s here), as the provider itself counts.
#[tokio::test]
async fn unknown_key_ids_cannot_make_gantry_hammer_the_issuer() {
    let idp = Provider::start(&[]);
    let g = protected(&[&idp], example()).await;
    // The keys are fetched once at start (a good token works).
    let mut c = g.bearer(&idp.sign(&g.url, json!({})));
    c.initialize().await;
    let before = idp.jwks_fetches().await;
    assert!(before >= 1);
    // Past the interval: the first unknown kid may look again, once.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let started = std::time::Instant::now();
    for i in 0..30 {
        let t = idp.sign_as(&g.url, json!({}), &format!("spray-{i}"));
        let (status, _, body) = try_initialize(&g, &g.bearer(&t)).await;
        assert_eq!(status, 401, "{body}");
    }
    let sprayed = idp.jwks_fetches().await - before;
    let windows = started.elapsed().as_secs() + 1;
    assert!(
        sprayed <= windows,
        "{sprayed} fetches in {windows} interval(s)"
    );
    assert!(sprayed >= 1, "an unknown kid never made Gantry look again");
}

/// A token Gantry has checked is taken as checked for a while (`jwt_cache_ttl`), but
/// never past its `exp`: the session it opened is refused the moment it expires, as
/// with the cache turned off.
#[tokio::test]
async fn a_checked_token_is_refused_once_it_expires() {
    let idp = Provider::start(&[]);
    for ttl in ["60s", "0s"] {
        let oauth = format!(
            "[auth.oauth]\nrequired_scopes = [\"mcp:read\"]\nleeway = \"0s\"\njwt_cache_ttl = \"{ttl}\"\n\
             [[auth.oauth.issuers]]\nissuer = {:?}\n",
            idp.issuer()
        );
        let g = gantry().section(&oauth).backend(example()).start();
        let exp = now() + 3;
        let mut c = g.bearer(&idp.sign(&g.url, json!({ "exp": exp })));
        c.initialize().await;
        for i in 0..5 {
            let r = c
                .call_tool(json!(i + 2), "echo", json!({"message": "hi"}))
                .await;
            assert_eq!(r["result"]["content"][0]["text"], "hi", "ttl {ttl}: {r}");
        }
        // Past `exp` (the clock has second resolution; bounded: exp is 3 s away).
        while now() <= exp {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let r = c
            .post_builder()
            .body(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"message":"late"}}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "ttl {ttl}: an expired token was accepted");
        let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
        assert!(
            challenge.contains("error=\"invalid_token\"") && challenge.contains("expired"),
            "ttl {ttl}: {challenge}"
        );
    }
}

/// Opaque tokens are checked with the provider's introspection endpoint, as
/// Gantry's own client: the provider's token for Gantry works, an unknown one is
/// 401, and wrong introspection credentials are Gantry's problem (503), not the
/// client's.
#[tokio::test]
async fn opaque_tokens_are_introspected() {
    let idp = Provider::start(&[]);
    let client = &idp.info["clients"]["introspector"];
    let with_secret = |secret: &str| {
        format!(
            "[auth.oauth]\nrequired_scopes = [\"mcp:read\"]\n[[auth.oauth.issuers]]\nissuer = {:?}\n\
             introspection = {{ client_id = {:?}, client_secret = {secret:?} }}\n",
            idp.issuer(),
            client["client_id"].as_str().unwrap(),
        )
    };
    let g = gantry()
        .section(&with_secret(client["client_secret"].as_str().unwrap()))
        .backend(example())
        .start();
    idp.add_resource(&g.url, "opaque").await;
    let token = idp.client_token(&g.url, "mcp:read").await;
    assert_eq!(
        token.split('.').count(),
        1,
        "expected an opaque token: {token}"
    );
    let mut c = g.bearer(&token);
    c.initialize().await;
    let r = c
        .call_tool(json!(2), "echo", json!({"message": "opaque"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "opaque", "{r}");

    let (status, challenge, body) =
        try_initialize(&g, &g.bearer("not-a-token-the-issuer-knows")).await;
    assert_eq!(status, 401, "{body}");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not active"),
        "{body}"
    );

    // Active, but for another resource: refused.
    let elsewhere = format!("{}-other", g.url);
    idp.add_resource(&elsewhere, "opaque").await;
    let other = idp.client_token(&elsewhere, "mcp:read").await;
    let (status, _, body) = try_initialize(&g, &g.bearer(&other)).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("audience"),
        "{body}"
    );

    let wrong = gantry()
        .section(&with_secret("wrong-secret"))
        .backend(example())
        .start();
    let (status, _, body) = try_initialize(&wrong, &wrong.bearer(&token)).await;
    assert_eq!(status, 503, "{body}");
}

/// `[[auth.rules]]`: a tool that needs a scope is missing from the lists of a caller
/// without it, and calling it gets the 403 step-up challenge; the official SDK
/// client steps up (a second authorization asking for granted + needed scopes) and
/// its resent call works. A tool kept for other principals is as unknown, and
/// absent from the list, for everyone else.
#[tokio::test]
async fn per_tool_rules_hide_tools_and_the_sdk_steps_up_for_a_scope() {
    let idp = Provider::start(&[]);
    let oauth = format!(
        "[auth.oauth]\nrequired_scopes = [\"mcp:read\"]\n[[auth.oauth.issuers]]\nissuer = {:?}\n\
         [[auth.rules]]\ntools = [\"echo\"]\nscopes = [\"mcp:admin\"]\n\
         [[auth.rules]]\ntools = [\"slow\"]\nprincipals = [\"ops\"]\n",
        idp.issuer()
    );
    let g = gantry()
        .section(&oauth)
        .api_key("ops", "ops-key")
        .backend(example())
        .start();
    idp.add_resource(&g.url, "jwt").await;

    // A reader: neither tool listed; echo asks for a step-up, slow is unknown.
    let mut reader = g.bearer(&idp.sign(&g.url, json!({"scope": "mcp:read"})));
    reader.initialize().await;
    let names = |r: &Reply| -> Vec<String> {
        r.response(&json!(1)).unwrap()["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let listed = names(&reader.request(json!(1), "tools/list", json!({})).await);
    assert!(
        !listed.iter().any(|n| n == "echo" || n == "slow"),
        "{listed:?}"
    );
    assert!(!listed.is_empty());
    let r = reader
        .request(
            json!(2),
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "x"}}),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.raw);
    let challenge = r.headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("scope=\"mcp:read mcp:admin\""),
        "{challenge}"
    );
    let r = reader.call_tool(json!(3), "slow", json!({})).await;
    assert_rpc_error(&r, -32602, None);
    assert_eq!(r["error"]["message"], "unknown tool: slow", "{r}");

    // With the scope: echo listed and callable.
    let mut admin = g.bearer(&idp.sign(&g.url, json!({"scope": "mcp:read mcp:admin"})));
    admin.initialize().await;
    assert!(
        names(&admin.request(json!(1), "tools/list", json!({})).await).contains(&"echo".to_owned())
    );
    // The key principal named by the rule sees `slow`; it has no scopes, so no echo.
    let mut ops = g.bearer("ops-key");
    ops.initialize().await;
    let listed = names(&ops.request(json!(1), "tools/list", json!({})).await);
    assert!(
        listed.contains(&"slow".to_owned()) && !listed.contains(&"echo".to_owned()),
        "{listed:?}"
    );

    // The official SDK: logs in with mcp:read, steps up for echo, and the call works.
    let flow = sdk_flow(
        &g.url,
        &["--tool", "echo", "--args", r#"{"message":"stepped"}"#],
    );
    assert_eq!(flow["ok"], true, "{flow}");
    assert_eq!(flow["call"]["content"][0]["text"], "stepped", "{flow}");
    assert_eq!(flow["authorizations"], 2, "{flow}");
    assert_eq!(
        flow["scopes_requested"],
        json!(["mcp:read", "mcp:read mcp:admin"]),
        "{flow}"
    );
}

/// `http.oauth`: an HTTP backend gets Gantry's own client-credentials token from the
/// provider — audience-restricted to the backend, never the client's — and a new
/// one once the old nears its expiry.
#[tokio::test]
async fn an_http_backend_gets_gantrys_own_token_renewed_before_expiry() {
    let idp = Provider::start(&["--ttl", "3"]);
    let dir = Scratch::new("backend-token");
    let seen = dir.0.join("headers.jsonl");
    let backend = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", seen.to_str().unwrap())]);
    idp.add_resource(&backend.url, "jwt").await;
    let minter = &idp.info["clients"]["minter"];
    let g = gantry()
        .backend(http_backend("web", &backend.url).transport_field(&format!(
            "oauth = {{ token_url = {:?}, client_id = {:?}, client_secret = {:?}, resource = {:?}, scope = \"mcp:read\" }}",
            idp.info["token_endpoint"].as_str().unwrap(),
            minter["client_id"].as_str().unwrap(),
            minter["client_secret"].as_str().unwrap(),
            backend.url,
        )))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let call = |id: i64| {
        let c = c.clone();
        async move {
            c.call_tool(json!(id), "echo", json!({"message": "x"}))
                .await
        }
    };
    assert_eq!(call(2).await["result"]["content"][0]["text"], "x");
    let tokens = || -> Vec<String> {
        recorded(&seen)
            .iter()
            .filter_map(|r| r["headers"]["authorization"].as_str())
            .map(|a| {
                a.strip_prefix("Bearer ")
                    .expect("a bearer token")
                    .to_owned()
            })
            .collect()
    };
    let first = tokens();
    assert!(
        !first.is_empty() && first.len() == recorded(&seen).len(),
        "every request carries it"
    );
    let c0 = jwt_claims(&first[0]);
    assert_eq!(c0["aud"], backend.url.as_str(), "{c0}");
    assert_eq!(c0["sub"], minter["client_id"], "{c0}");
    // Past its lifetime (3s, renewed with a fifth left): a new token.
    tokio::time::sleep(std::time::Duration::from_millis(3000)).await;
    assert_eq!(call(3).await["result"]["content"][0]["text"], "x");
    let last = tokens().pop().unwrap();
    assert_ne!(last, first[0], "the token was not renewed");
    assert!(jwt_claims(&last)["exp"].as_u64().unwrap() > now());
}

/// `stdio.principal_env`: each principal's own `per-user` process is told whose it
/// is — an API key's principal, or `<sub>@<issuer>` for a token.
#[tokio::test]
async fn a_per_user_process_is_told_its_principal() {
    let idp = Provider::start(&[]);
    let oauth = format!(
        "[auth.oauth]\n[[auth.oauth.issuers]]\nissuer = {:?}\n",
        idp.issuer()
    );
    let script = common::fixture("misbehaving_server.py");
    let g = gantry()
        .section(&oauth)
        .api_key("ops", "ops-key")
        .backend(
            stdio("mb", "python3", &[script.to_str().unwrap()])
                .mode("per-user")
                .transport_field("principal_env = \"MCP_PRINCIPAL\""),
        )
        .start();
    idp.add_resource(&g.url, "jwt").await;
    let whose = |c: Client| async move {
        let r = c
            .call_tool(json!(9), "env", json!({"name": "MCP_PRINCIPAL"}))
            .await;
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let mut key = g.bearer("ops-key");
    key.initialize().await;
    assert_eq!(whose(key.clone()).await, "ops");
    let mut alice = g.bearer(&idp.sign(&g.url, json!({"sub": "alice"})));
    alice.initialize().await;
    assert_eq!(
        whose(alice.clone()).await,
        format!("alice@{}", idp.issuer())
    );
}

/// `grant = "token_exchange"` (RFC 8693): each user's `per-user` connection to an
/// HTTP backend carries a token for that user — exchanged at the provider for the
/// user's own token to Gantry, audience-restricted to the backend, naming Gantry as
/// the actor — and never the user's token itself.
#[tokio::test]
async fn a_per_user_backend_gets_a_token_exchanged_for_its_user() {
    let idp = Provider::start(&[]);
    let dir = Scratch::new("exchange");
    let seen = dir.0.join("headers.jsonl");
    let backend = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", seen.to_str().unwrap())]);
    idp.add_resource(&backend.url, "jwt").await;
    let ex = &idp.info["clients"]["exchanger"];
    let g = gantry()
        .section(&format!(
            "[auth.oauth]\n[[auth.oauth.issuers]]\nissuer = {:?}\n",
            idp.issuer()
        ))
        .backend(
            http_backend("web", &backend.url)
                .mode("per-user")
                .transport_field(&format!(
                    "oauth = {{ grant = \"token_exchange\", token_url = {:?}, client_id = {:?}, client_secret = {:?}, resource = {:?}, scope = \"mcp:read\" }}",
                    idp.info["token_endpoint"].as_str().unwrap(),
                    ex["client_id"].as_str().unwrap(),
                    ex["client_secret"].as_str().unwrap(),
                    backend.url,
                )),
        )
        .start();
    idp.add_resource(&g.url, "jwt").await;
    let mut seen_subjects = Vec::new();
    for user in ["alice", "bob"] {
        let own = idp.sign(&g.url, json!({"sub": user, "scope": "mcp:read mcp:write"}));
        let mut c = g.bearer(&own);
        c.initialize().await;
        let r = c
            .call_tool(json!(2), "echo", json!({"message": user}))
            .await;
        assert_eq!(r["result"]["content"][0]["text"], user, "{r}");
        let last = recorded(&seen).pop().unwrap();
        let token = last["headers"]["authorization"]
            .as_str()
            .and_then(|a| a.strip_prefix("Bearer "))
            .unwrap_or_else(|| panic!("no token: {last}"))
            .to_owned();
        assert_ne!(token, own, "the user's own token reached the backend");
        let c = jwt_claims(&token);
        assert_eq!(c["sub"], user, "{c}");
        assert_eq!(c["aud"], backend.url.as_str(), "{c}");
        assert_eq!(c["scope"], "mcp:read", "{c}");
        assert_eq!(c["act"]["sub"], ex["client_id"], "{c}");
        seen_subjects.push(c["sub"].clone());
    }
    for r in recorded(&seen) {
        let a = r["headers"]["authorization"].as_str().unwrap_or_default();
        assert!(!a.is_empty(), "a request without the exchanged token: {r}");
    }
    assert_eq!(seen_subjects, vec![json!("alice"), json!("bob")]);
}

/// Several issuers trusted at once: each one's tokens are accepted (each user its
/// own principal), the metadata lists both, the first first.
#[tokio::test]
async fn several_issuers_are_trusted_at_once() {
    let (a, b) = (Provider::start(&[]), Provider::start(&[]));
    let g = protected(&[&a, &b], example()).await;
    for (idp, user) in [(&a, "ann"), (&b, "ben")] {
        let mut c = g.bearer(&idp.sign(&g.url, json!({"sub": user})));
        c.initialize().await;
        let r = c
            .call_tool(json!(2), "echo", json!({"message": user}))
            .await;
        assert_eq!(r["result"]["content"][0]["text"], user, "{r}");
    }
    let doc: Value = reqwest::get(metadata_url(&g))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        doc["authorization_servers"],
        json!([a.issuer(), b.issuer()]),
        "{doc}"
    );
    // The same subject at two issuers is two principals: ann@a's session is not ann@b's.
    let mut at_a = g.bearer(&a.sign(&g.url, json!({"sub": "ann"})));
    at_a.initialize().await;
    let mut at_b = g.bearer(&b.sign(&g.url, json!({"sub": "ann"})));
    at_b.session = at_a.session.clone();
    let r = at_b.request(json!(3), "tools/list", json!({})).await;
    assert_eq!(r.status, 404, "{}", r.raw);
}

/// `audiences`: an issuer whose tokens name Gantry otherwise (Entra ID's client id,
/// Okta's `api://default`) is trusted with that audience — and only that issuer.
#[tokio::test]
async fn an_issuer_may_name_gantry_with_its_own_audience() {
    let (entra, other) = (Provider::start(&[]), Provider::start(&[]));
    let g = gantry()
        .section(&format!(
            "[auth.oauth]\n[[auth.oauth.issuers]]\nissuer = {:?}\naudiences = [\"api://gantry\"]\n\
             [[auth.oauth.issuers]]\nissuer = {:?}\n",
            entra.issuer(),
            other.issuer()
        ))
        .backend(example())
        .start();
    let mut c = g.bearer(&entra.sign("api://gantry", json!({})));
    c.initialize().await;
    let (status, _, body) =
        try_initialize(&g, &g.bearer(&other.sign("api://gantry", json!({})))).await;
    assert_eq!(status, 401, "{body}");
    let (status, _, body) =
        try_initialize(&g, &g.bearer(&entra.sign("api://gantry-evil", json!({})))).await;
    assert_eq!(status, 401, "{body}");
}

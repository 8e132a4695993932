//! API-key authentication as a client sees it: 401 challenges in RFC 6750's shape,
//! keys by `Authorization: Bearer` and `X-API-Key`, sessions bound to the principal
//! that created them (someone else's session is 404), the legacy transport guarded
//! too, probes and CORS preflights open, keys never logged, bad key config refused by
//! `gantry check-config`. Real gantry, real example backend over stdio, real HTTP.
// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;
use common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

/// Two principals' keys, random per test so a leak cannot be a coincidence.
struct Keys {
    alice: String,
    bob: String,
}

impl Keys {
    fn new() -> Self {
        Self {
            alice: format!("alice-{:032x}", rand::random::<u128>()),
            bob: format!("bob-{:032x}", rand::random::<u128>()),
        }
    }
}

fn config(keys: &Keys) -> String {
    format!(
        r#"
[[backends]]
name = "example"
stdio = {{ command = "{bin}" }}

[[auth.api_keys]]
principal = "alice"
sha256 = "{alice}"

[[auth.api_keys]]
principal = "bob"
sha256 = "{bob}"
"#,
        bin = example_bin().to_str().unwrap(),
        alice = sha256_hex(&keys.alice),
        bob = sha256_hex(&keys.bob),
    )
}

fn client_with(g: &Gantry, header: &str, value: &str) -> Client {
    g.client_with(header, value)
}

fn bearer(g: &Gantry, key: &str) -> Client {
    client_with(g, "authorization", &format!("Bearer {key}"))
}

fn initialize_body() -> String {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},
        "clientInfo":{"name":"gantry-tests","version":"1"}}})
    .to_string()
}

fn echo_text(resp: &Value) -> &str {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {resp}"))
}

/// A refusal: this status, this `WWW-Authenticate`, a JSON-RPC error with `"id": null`.
fn assert_refused(r: &Reply, status: u16, challenge: &str) {
    assert_eq!(r.status, status, "status; body: {}", r.raw);
    let got = r
        .headers
        .get("www-authenticate")
        .unwrap_or_else(|| panic!("no WWW-Authenticate; body: {}", r.raw))
        .to_str()
        .unwrap();
    assert_eq!(got, challenge, "WWW-Authenticate; body: {}", r.raw);
    assert!(
        r.content_type().starts_with("application/json"),
        "content-type {:?}",
        r.content_type()
    );
    let v: Value = serde_json::from_str(&r.raw).expect("JSON-RPC error body");
    assert_eq!(v["jsonrpc"], "2.0", "{}", r.raw);
    assert!(v["id"].is_null(), "{}", r.raw);
    assert!(v["error"]["code"].is_i64(), "{}", r.raw);
    assert!(v["error"]["message"].is_string(), "{}", r.raw);
}

const MISSING: &str = "Bearer realm=\"gantry\"";
const INVALID: &str = "Bearer realm=\"gantry\", error=\"invalid_token\"";

/// An MCP-endpoint request with this method, session and extra header.
async fn send(
    g: &Gantry,
    method: reqwest::Method,
    session: Option<&str>,
    header: Option<(&str, &str)>,
) -> Reply {
    let http = reqwest::Client::new();
    let mut rb = http
        .request(method.clone(), &g.url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if method == reqwest::Method::POST {
        rb = rb
            .header("content-type", "application/json")
            .body(if session.is_some() {
                json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                       "params":{"name":"echo","arguments":{"message":"x"}}})
                .to_string()
            } else {
                initialize_body()
            });
    }
    if let Some(s) = session {
        rb = rb.header("mcp-session-id", s);
    }
    if let Some((k, v)) = header {
        rb = rb.header(k, v);
    }
    // GET on a live session would stream forever: keep only the head.
    let resp = tokio::time::timeout(Duration::from_secs(30), rb.send())
        .await
        .expect("response head in time")
        .unwrap();
    if resp.status().is_success() && method == reqwest::Method::GET {
        return Reply {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            messages: vec![],
            event_ids: vec![],
            raw: String::new(),
        };
    }
    Client::read(resp).await
}

#[tokio::test]
async fn no_credentials_get_a_bare_bearer_challenge() {
    let keys = Keys::new();
    let g = Gantry::with_config(&config(&keys));
    for method in [
        reqwest::Method::POST,
        reqwest::Method::GET,
        reqwest::Method::DELETE,
    ] {
        let r = send(&g, method.clone(), None, None).await;
        assert_refused(&r, 401, MISSING);
        // A scheme Gantry does not use counts as no credentials (RFC 6750 §3).
        let r = send(
            &g,
            method,
            None,
            Some(("authorization", "Basic YWxpY2U6eA==")),
        )
        .await;
        assert_refused(&r, 401, MISSING);
    }
    // With a session id but no key: still 401, never 404 (nothing is looked up).
    let mut alice = bearer(&g, &keys.alice);
    alice.initialize().await;
    let sid = alice.session.clone().unwrap();
    let r = send(&g, reqwest::Method::POST, Some(&sid), None).await;
    assert_refused(&r, 401, MISSING);
}

#[tokio::test]
async fn wrong_key_is_invalid_token() {
    let keys = Keys::new();
    let g = Gantry::with_config(&config(&keys));
    let wrong = format!("{}x", keys.alice);
    for header in [
        ("authorization", format!("Bearer {wrong}")),
        ("x-api-key", wrong.clone()),
        // The digest from the config is not a key.
        ("x-api-key", sha256_hex(&keys.alice)),
    ] {
        let r = send(&g, reqwest::Method::POST, None, Some((header.0, &header.1))).await;
        assert_refused(&r, 401, INVALID);
        assert!(!r.raw.contains(&wrong), "the key echoed back: {}", r.raw);
    }
    // Two ways at once is a malformed request (RFC 6750 §2): 400, invalid_request.
    let http = reqwest::Client::new();
    let r = Client::read(
        http.post(&g.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", format!("Bearer {}", keys.alice))
            .header("x-api-key", &keys.alice)
            .body(initialize_body())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_refused(
        &r,
        400,
        "Bearer realm=\"gantry\", error=\"invalid_request\"",
    );
}

#[tokio::test]
async fn right_key_by_bearer_or_x_api_key_works() {
    let keys = Keys::new();
    let g = Gantry::with_config(&config(&keys));
    let by_bearer = bearer(&g, &keys.alice);
    let by_header = client_with(&g, "x-api-key", &keys.bob);
    for (mut c, who) in [(by_bearer, "alice"), (by_header, "bob")] {
        let init = c.initialize().await;
        assert!(init.get("result").is_some(), "{init}");
        let resp = c
            .call_tool(json!(7), "echo", json!({"message": format!("hi {who}")}))
            .await;
        assert_eq!(echo_text(&resp), format!("hi {who}"), "{resp}");
        let sid = c.session.clone().unwrap();
        assert!(
            g.wait_log(&sid, Duration::from_secs(5)),
            "session start not logged"
        );
        let line = g
            .log_text()
            .lines()
            .find(|l| l.contains(&sid) && l.contains("session started"))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no session-start line: {}", g.log_text()));
        assert!(line.contains(who), "principal not logged: {line}");
    }
    // The scheme name is case-insensitive (RFC 7235 §2.1).
    let mut c = client_with(&g, "authorization", &format!("bearer {}", keys.alice));
    c.initialize().await;

    let log = g.log_text();
    for secret in [&keys.alice, &keys.bob] {
        assert!(!log.contains(secret.as_str()), "a key was logged:\n{log}");
    }
}

#[tokio::test]
async fn sessions_belong_to_the_principal_that_created_them() {
    let keys = Keys::new();
    let g = Gantry::with_config(&config(&keys));
    let mut alice = bearer(&g, &keys.alice);
    alice.initialize().await;
    let sid = alice.session.clone().unwrap();
    let bob_key = format!("Bearer {}", keys.bob);
    let bob = Some(("authorization", bob_key.as_str()));

    // Bob with Alice's session id: as unknown as a session never issued (404, not 403).
    let post = send(&g, reqwest::Method::POST, Some(&sid), bob).await;
    assert_eq!(post.status, 404, "{}", post.raw);
    let r = send(&g, reqwest::Method::GET, Some(&sid), bob).await;
    assert_eq!(r.status, 404, "{}", r.raw);
    let r = send(&g, reqwest::Method::DELETE, Some(&sid), bob).await;
    assert_eq!(r.status, 404, "{}", r.raw);
    let never = send(
        &g,
        reqwest::Method::POST,
        Some("0123456789abcdef0123456789abcdef"),
        bob,
    )
    .await;
    assert_eq!(never.status, 404);
    assert_eq!(
        post.raw, never.raw,
        "someone else's session must look never issued"
    );

    // Bob's DELETE did not end it: Alice's session still works.
    let resp = alice
        .call_tool(json!(3), "echo", json!({"message": "still mine"}))
        .await;
    assert_eq!(echo_text(&resp), "still mine", "{resp}");
    let r = send(
        &g,
        reqwest::Method::GET,
        Some(&sid),
        Some(("x-api-key", &keys.alice)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let r = send(
        &g,
        reqwest::Method::DELETE,
        Some(&sid),
        Some(("x-api-key", &keys.alice)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.raw);
}

type Body = std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// Reads the legacy stream until `text` (all read so far) satisfies `done`.
async fn read_until(
    body: &mut Body,
    text: &mut String,
    done: impl Fn(&str) -> Option<String>,
) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(found) = done(text) {
            return found;
        }
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(b))) => text.push_str(&String::from_utf8_lossy(&b)),
            other => panic!("stream ended or timed out ({other:?}): {text}"),
        }
    }
}

#[tokio::test]
async fn legacy_transport_requires_a_key_and_binds_the_session() {
    let keys = Keys::new();
    let g = Gantry::with_config(&config(&keys));
    let http = reqwest::Client::new();
    let sse = format!("{}/sse", g.base);

    let r = Client::read(http.get(&sse).send().await.unwrap()).await;
    assert_refused(&r, 401, MISSING);
    let r = Client::read(
        http.get(&sse)
            .header("x-api-key", "nope")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_refused(&r, 401, INVALID);

    let resp = http
        .get(&sse)
        .header("x-api-key", &keys.alice)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The stream is the session: keep it open until the end of the test.
    let mut stream: Body = Box::pin(resp.bytes_stream());
    let mut seen = String::new();
    let endpoint = read_until(&mut stream, &mut seen, |t| {
        let rest = t.split("event: endpoint\ndata: ").nth(1)?;
        Some(rest.split_once('\n')?.0.trim().to_owned())
    })
    .await;
    let messages = format!("{}{endpoint}", g.base);
    let body = initialize_body();

    let r = Client::read(
        http.post(&messages)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_refused(&r, 401, MISSING);
    let r = Client::read(
        http.post(&messages)
            .header("content-type", "application/json")
            .header("x-api-key", &keys.bob)
            .body(body.clone())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 404, "bob on alice's legacy session: {}", r.raw);
    let r = Client::read(
        http.post(&messages)
            .header("content-type", "application/json")
            .header("x-api-key", &keys.alice)
            .body(body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.raw);
    // Alice's answer arrives on her stream.
    read_until(&mut stream, &mut seen, |t| {
        t.contains("\"serverInfo\"").then(String::new)
    })
    .await;
}

#[tokio::test]
async fn probes_and_cors_preflights_need_no_key() {
    let keys = Keys::new();
    let g = Gantry::with_config(&config(&keys));
    let http = reqwest::Client::new();
    for probe in ["/healthz", "/readyz"] {
        let r = http.get(format!("{}{probe}", g.base)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{probe}");
    }
    let port = g.base.rsplit(':').next().unwrap();
    let r = http
        .request(reqwest::Method::OPTIONS, &g.url)
        .header("origin", format!("http://localhost:{port}"))
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "x-api-key, content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let allowed = r
        .headers()
        .get("access-control-allow-headers")
        .unwrap()
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("authorization"), "{allowed}");
    assert!(allowed.contains("x-api-key"), "{allowed}");
    // A browser can read the challenge of a refused request.
    let r = http
        .post(&g.url)
        .header("origin", format!("http://localhost:{port}"))
        .header("content-type", "application/json")
        .body(initialize_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let exposed = r
        .headers()
        .get("access-control-expose-headers")
        .unwrap()
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("www-authenticate"), "{exposed}");
}

#[test]
fn check_config_names_a_bad_key_path() {
    let dir = std::env::temp_dir().join(format!(
        "gantry-auth-test-{}-{:x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad-auth.toml");
    let plain = "plain-text-key-pasted-by-mistake";
    let keys = Keys::new();
    let text = config(&keys).replacen(&sha256_hex(&keys.bob), plain, 1);
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(gantry_bin())
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {stderr}");
    assert!(
        stderr.contains("auth.api_keys[1].sha256"),
        "key path missing: {stderr}"
    );
    assert!(!stderr.contains(plain), "the value was echoed: {stderr}");
}

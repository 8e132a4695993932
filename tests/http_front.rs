//! The HTTP surface as a client sees it: response shapes (JSON / SSE), the GET
//! stream, session lifecycle, DNS-rebinding protection, request validation,
//! resumption, the legacy HTTP+SSE transport, idle expiry, colliding request ids,
//! ping / re-initialize, and cancellation. Real gantry, real example backend over
//! stdio, real HTTP on 127.0.0.1.
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
use gantry::sse::Event;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

/// A POST to the MCP endpoint with exactly this Accept (none if `None`) and the
/// client's session headers; nothing else added.
fn post_accepting(c: &Client, accept: Option<&str>) -> reqwest::RequestBuilder {
    let mut rb = c
        .http
        .post(&c.url)
        .header("content-type", "application/json");
    if let Some(a) = accept {
        rb = rb.header("accept", a);
    }
    if let Some(s) = &c.session {
        rb = rb
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", &c.version);
    }
    rb
}

fn rpc(id: Value, method: &str, params: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string()
}

fn echo(id: Value, message: &str) -> String {
    rpc(
        id,
        "tools/call",
        json!({"name":"echo","arguments":{"message":message}}),
    )
}

/// The body of an HTTP-level rejection: a JSON-RPC error with `"id": null`.
fn assert_http_error(r: &Reply, status: u16, code: Option<i64>) {
    assert_eq!(r.status, status, "status; body: {}", r.raw);
    assert!(
        r.content_type().starts_with("application/json"),
        "content-type {:?}; body: {}",
        r.content_type(),
        r.raw
    );
    let v: Value = serde_json::from_str(&r.raw)
        .unwrap_or_else(|e| panic!("error body is not JSON ({e}): {}", r.raw));
    assert_eq!(v["jsonrpc"], "2.0", "{}", r.raw);
    assert!(
        v.get("id").is_some_and(Value::is_null),
        "error body must carry \"id\": null: {}",
        r.raw
    );
    assert!(v["error"]["code"].is_i64(), "error.code: {}", r.raw);
    assert!(
        v["error"]["message"].is_string(),
        "error.message: {}",
        r.raw
    );
    if let Some(code) = code {
        assert_eq!(v["error"]["code"], json!(code), "{}", r.raw);
    }
}

/// All events of a complete SSE body.
fn sse_events(raw: &str) -> Vec<Event> {
    gantry::sse::Parser::new(64 << 20)
        .feed(raw.as_bytes())
        .unwrap()
}

fn config_with(server: &str) -> String {
    format!(
        "[server]\n{server}\n\n[[backends]]\nname = \"example\"\nstdio = {{ command = \"{}\" }}\n",
        example_bin().to_str().unwrap()
    )
}

fn text_of(resp: &Value) -> &str {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {resp}"))
}

// ---------------------------------------------------------------------------------
// 1. Response shapes and id types
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn json_response_when_client_accepts_only_json() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    let resp = post_accepting(&c, Some("application/json"))
        .body(echo(json!(5), "as json"))
        .send()
        .await
        .unwrap();
    let r = Client::read(resp).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert!(
        r.content_type().starts_with("application/json"),
        "content-type {}",
        r.content_type()
    );
    let v: Value = serde_json::from_str(&r.raw).expect("one JSON object");
    assert_eq!(v["jsonrpc"], "2.0");
    assert_eq!(v["id"], json!(5));
    assert_eq!(text_of(&v), "as json");
}

#[tokio::test]
async fn sse_response_with_priming_event_and_event_ids() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    // A call that is still running after Gantry's short inline window is answered
    // with a live SSE stream (a quick one gets its SSE body whole: see the next test).
    let resp = post_accepting(&c, Some("application/json, text/event-stream"))
        .body(rpc(
            json!(6),
            "tools/call",
            json!({"name":"slow","arguments":{"ms":200}}),
        ))
        .send()
        .await
        .unwrap();
    let r = Client::read(resp).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert!(
        r.content_type().starts_with("text/event-stream"),
        "content-type {}",
        r.content_type()
    );
    assert_stream_not_cached_or_buffered(&r.headers);
    let events = sse_events(&r.raw);
    assert!(events.len() >= 2, "expected priming + response: {}", r.raw);
    // 2025-11-25: the first event primes reconnection: an id and empty data.
    let priming = &events[0];
    assert!(
        priming.data.trim().is_empty(),
        "first event must be the priming event: {}",
        r.raw
    );
    // Event ids are opaque (2025-11-25, Transports §Resumability): every event has
    // one, and no two are alike. (Resuming from one is tested below.)
    let priming_id = priming.id.clone().expect("priming event id");
    assert!(!priming_id.is_empty(), "{}", r.raw);
    let messages: Vec<&Event> = events
        .iter()
        .filter(|e| !e.data.trim().is_empty())
        .collect();
    assert!(!messages.is_empty(), "{}", r.raw);
    let mut ids = vec![priming_id];
    for e in &messages {
        let id =
            e.id.clone()
                .unwrap_or_else(|| panic!("message without id: {}", r.raw));
        assert!(!ids.contains(&id), "event id {id} used twice: {}", r.raw);
        ids.push(id);
    }
    let resp = r
        .response(&json!(6))
        .unwrap_or_else(|| panic!("no response: {}", r.raw));
    assert_eq!(text_of(resp), "done");
}

/// What a proxy between Gantry and its client must be told of an SSE answer, whole or
/// live: not to cache or transform it, and (nginx) not to hold it back in a buffer.
fn assert_stream_not_cached_or_buffered(h: &reqwest::header::HeaderMap) {
    let cache = h.get("cache-control").and_then(|v| v.to_str().ok());
    assert_eq!(cache, Some("no-cache, no-transform"), "{h:?}");
    let buffering = h.get("x-accel-buffering").and_then(|v| v.to_str().ok());
    assert_eq!(buffering, Some("no"), "{h:?}");
}

/// A call that completes at once is still an SSE response (priming event first, for
/// 2025-11-25), written whole; one that sends notifications streams them, losing none.
#[tokio::test]
async fn quick_answers_and_streamed_answers_are_both_sse() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    let quick = c
        .request(
            json!(1),
            "tools/call",
            json!({"name":"echo","arguments":{"message":"q"}}),
        )
        .await;
    assert!(
        quick.content_type().starts_with("text/event-stream"),
        "{}",
        quick.content_type()
    );
    assert_eq!(
        quick.event_ids.len(),
        2,
        "priming event and response: {}",
        quick.raw
    );
    // A complete body with its length: the keep-alive connection stays usable (a body
    // delimited by closing the connection would cost a new connection per call).
    assert!(
        quick.headers.get("content-length").is_some(),
        "{:?}",
        quick.headers
    );
    assert!(quick.headers.get("connection").is_none_or(|v| v != "close"));
    assert_stream_not_cached_or_buffered(&quick.headers);
    assert_eq!(text_of(quick.response(&json!(1)).unwrap()), "q");
    // A large answer is sent after its framing as it is: the length announced is the
    // body's, and the text comes back whole, twice on the same connection.
    for id in [3, 4] {
        let message = format!("{id}:{}", "0123456789abcdef".repeat(8 * 1024));
        let big = c
            .request(
                json!(id),
                "tools/call",
                json!({"name":"echo","arguments":{"message":message}}),
            )
            .await;
        assert!(big.content_type().starts_with("text/event-stream"));
        assert_stream_not_cached_or_buffered(&big.headers);
        assert_eq!(big.event_ids.len(), 2, "priming event and response");
        let length = big.headers.get("content-length").expect("content-length");
        assert_eq!(length.to_str().unwrap(), big.raw.len().to_string());
        assert_eq!(text_of(big.response(&json!(id)).unwrap()), message);
    }
    let with_progress = c
        .request(
            json!(2),
            "tools/call",
            json!({"name":"test_tool_with_progress","arguments":{},"_meta":{"progressToken":"t"}}),
        )
        .await;
    assert!(with_progress
        .content_type()
        .starts_with("text/event-stream"));
    assert_stream_not_cached_or_buffered(&with_progress.headers);
    let progress = with_progress
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(
        progress, 3,
        "no notification lost in the switch: {}",
        with_progress.raw
    );
    assert!(with_progress.response(&json!(2)).is_some());
}

#[tokio::test]
async fn response_ids_keep_their_json_type() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    for accept in ["application/json", "application/json, text/event-stream"] {
        for (id, msg) in [(json!("1"), "string id"), (json!(1), "number id")] {
            let resp = post_accepting(&c, Some(accept))
                .body(echo(id.clone(), msg))
                .send()
                .await
                .unwrap();
            let r = Client::read(resp).await;
            assert_eq!(r.status, 200, "{}", r.raw);
            let responses: Vec<&Value> = r
                .messages
                .iter()
                .filter(|m| m.get("result").is_some() || m.get("error").is_some())
                .collect();
            assert_eq!(responses.len(), 1, "{}", r.raw);
            // serde_json::Value keeps 1 and "1" apart.
            assert_eq!(
                responses[0]["id"], id,
                "[{accept}] id type changed: {}",
                r.raw
            );
            assert_eq!(text_of(responses[0]), msg);
            let exact = format!("\"id\":{id}");
            assert!(
                r.raw.replace(' ', "").contains(&exact),
                "[{accept}] raw body lacks {exact}: {}",
                r.raw
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// 2. The GET stream
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn get_stream_delivers_resource_updates() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .request(
            json!(2),
            "resources/subscribe",
            json!({"uri": "test://watched-resource"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let sub = r
        .response(&json!(2))
        .unwrap_or_else(|| panic!("no subscribe response: {}", r.raw));
    assert!(sub.get("error").is_none(), "subscribe failed: {sub}");

    let resp = c
        .http
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", c.session.as_deref().unwrap())
        .header("mcp-protocol-version", &c.version)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let ct = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
    let mut sse = SseReader::new(resp);
    // Updates come every second; allow a generous bound on a loaded machine.
    let n = sse
        .message_where(deadline(10), |m| {
            m["method"] == "notifications/resources/updated"
        })
        .await;
    assert_eq!(n["params"]["uri"], "test://watched-resource", "{n}");
    assert!(n.get("id").is_none(), "a notification has no id: {n}");
}

// ---------------------------------------------------------------------------------
// 3. Session lifecycle
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn delete_ends_the_session() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    let sid = c.session.clone().unwrap();
    let del = c
        .http
        .delete(&c.url)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", &c.version)
        .send()
        .await
        .unwrap();
    assert!(
        del.status().is_success(),
        "DELETE answered {}",
        del.status()
    );
    let r = Client::read(
        post_accepting(&c, Some("application/json, text/event-stream"))
            .body(echo(json!(1), "x"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 404, None);
    // A second DELETE of the same session finds nothing either.
    let del2 = c
        .http
        .delete(&c.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(del2.status(), 404);
}

#[tokio::test]
async fn unknown_session_is_404_and_missing_session_is_400() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    // Well-formed but never issued, and malformed: both simply unknown.
    for bogus in ["0123456789abcdef0123456789abcdef", "not-a-session"] {
        let mut other = g.client();
        other.session = Some(bogus.to_owned());
        let r = other.request(json!(1), "tools/list", json!({})).await;
        assert_http_error(&r, 404, None);
    }
    let r = Client::read(
        c.http
            .post(&c.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(rpc(json!(1), "tools/list", json!({})))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 400, None);
    // The real session is unaffected.
    let r = c
        .call_tool(json!(9), "echo", json!({"message": "still here"}))
        .await;
    assert_eq!(text_of(&r), "still here");
}

// ---------------------------------------------------------------------------------
// 4. DNS-rebinding protection
// ---------------------------------------------------------------------------------

fn init_body() -> String {
    rpc(
        json!(0),
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"gantry-tests","version":"1"}}),
    )
}

#[tokio::test]
async fn foreign_host_and_origin_are_refused_loopback_origin_accepted() {
    let g = Gantry::example_stdio();
    let c = g.client();
    let post = |host: Option<&str>, origin: Option<&str>| {
        let mut rb =
            post_accepting(&c, Some("application/json, text/event-stream")).body(init_body());
        if let Some(h) = host {
            rb = rb.header("host", h);
        }
        if let Some(o) = origin {
            rb = rb.header("origin", o);
        }
        rb
    };
    let r = Client::read(post(Some("evil.example.com"), None).send().await.unwrap()).await;
    assert_http_error(&r, 403, Some(-32000));
    assert!(r.headers.get("mcp-session-id").is_none());
    let r = Client::read(
        post(None, Some("http://evil.example.com"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 403, None);
    let r = Client::read(
        post(Some("evil.example.com:80"), Some("http://evil.example.com"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 403, None);
    // GET and DELETE are protected as well.
    let r = Client::read(
        c.http
            .get(&c.url)
            .header("accept", "text/event-stream")
            .header("origin", "http://evil.example.com")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.raw);

    let port = g.base.rsplit(':').next().unwrap().to_owned();
    for origin in [
        "http://localhost:3000",
        "http://127.0.0.1:5173",
        &format!("http://127.0.0.1:{port}"),
    ] {
        let r = Client::read(post(None, Some(origin)).send().await.unwrap()).await;
        assert_eq!(r.status, 200, "Origin {origin} refused: {}", r.raw);
        assert!(
            r.headers.get("mcp-session-id").is_some(),
            "Origin {origin}: no session"
        );
        assert!(
            r.response(&json!(0))
                .is_some_and(|m| m.get("result").is_some()),
            "{}",
            r.raw
        );
    }
    let r = Client::read(
        post(
            Some(&format!("localhost:{port}")),
            Some("http://localhost:3000"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.raw);
}

// ---------------------------------------------------------------------------------
// 5. Request validation
// ---------------------------------------------------------------------------------

/// An official SDK client (TypeScript v1, on Node's fetch) sending more than
/// `server.max_body_bytes` gets the 413 and its message, call after call on the same
/// connection, and the session goes on: with the body's length declared, and sent
/// as a stream over a slow uplink. Gantry reads such a body to its end (within
/// 16 MiB past the limit) before answering: refused while the client was still
/// sending, the client saw `EPIPE` and nothing else.
#[tokio::test]
async fn an_sdk_client_over_the_body_limit_reads_the_refusal() {
    let g = Gantry::with_config(&config_with("max_body_bytes = 1048576"));
    for uplink in [None, Some("2")] {
        let line = oversized_calls(&g.url, 3_000_000, uplink).await;
        let outcomes = line["outcomes"].as_array().unwrap();
        assert_eq!(outcomes.len(), 3, "{line}");
        for o in outcomes {
            assert_eq!(
                o["status"], 413,
                "uplink {uplink:?}: the client did not read the refusal: {line}"
            );
            let error = o["error"].as_str().unwrap_or_default();
            assert!(
                error.contains("Request body larger than 1048576 bytes"),
                "{line}"
            );
        }
        assert_eq!(
            line["after"]["text_bytes"], 5,
            "the session goes on: {line}"
        );
    }
}

/// A plain HTTP/1.1 client that writes its whole request (declared length, sent in
/// pieces as a network would deliver them) before it reads: over the limit, it can
/// still write all of it and then reads the 413; the connection is not reset under
/// it while it is sending.
#[tokio::test]
async fn a_client_sending_an_over_limit_body_can_finish_and_read_the_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let g = Gantry::with_config(&config_with("max_body_bytes = 65536"));
    let addr = g.base.trim_start_matches("http://").to_owned();
    let body = echo(json!(1), &"x".repeat(2_000_000)).into_bytes();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    for (i, piece) in body.chunks(64 * 1024).enumerate() {
        if let Err(e) = tcp.write_all(piece).await {
            panic!(
                "the connection broke after {} bytes of the body: {e}",
                i * 64 * 1024
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
        .await
        .expect("the answer within 10 s")
        .expect("the answer, not a reset");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        text.contains("Request body larger than 65536 bytes"),
        "{text}"
    );

    // What is declared more than 16 MiB past the limit is not waited for: refused
    // before any of it arrives.
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        65536 + 17 * 1024 * 1024
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut answer))
        .await
        .expect("refused at once")
        .unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
}

/// tests/interop/clients/oversized.mjs against `url`: its JSON line.
async fn oversized_calls(url: &str, bytes: usize, uplink_ms: Option<&str>) -> Value {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop/clients/oversized.mjs");
    let mut cmd = std::process::Command::new(oidc::node());
    cmd.arg(script)
        .args(["--url", url, "--bytes", &bytes.to_string(), "--calls", "3"]);
    if let Some(ms) = uplink_ms {
        cmd.args(["--uplink-ms", ms]);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap_or_else(|_| {
        panic!(
            "no JSON line: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test]
async fn malformed_requests_get_precise_http_errors() {
    let g = Gantry::with_config(&config_with("max_body_bytes = 2048"));
    let mut c = g.client();
    c.initialize().await;
    let both = Some("application/json, text/event-stream");

    // Oversized, with a Content-Length...
    let big = echo(json!(1), &"x".repeat(4096));
    let r = Client::read(
        post_accepting(&c, both)
            .body(big.clone())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 413, None);
    // ...and chunked, without one.
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = big
        .as_bytes()
        .chunks(512)
        .map(|b| Ok(bytes::Bytes::copy_from_slice(b)))
        .collect();
    // Gantry reads the rest of an over-limit body (up to 16 MiB past the limit)
    // before answering, so a client still sending reads the 413, not a reset.
    let r = Client::read(
        post_accepting(&c, both)
            .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 413, None);
    // A body within the limit still works.
    let r = c
        .call_tool(json!(2), "echo", json!({"message": "small"}))
        .await;
    assert_eq!(text_of(&r), "small");

    // Not JSON.
    let r = Client::read(
        post_accepting(&c, both)
            .body("{\"jsonrpc\":\"2.0\",")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 400, Some(-32700));
    // JSON, but not JSON-RPC.
    let r = Client::read(
        post_accepting(&c, both)
            .body("{\"hello\":\"world\"}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 400, Some(-32600));
    // Wrong Content-Type.
    let r = Client::read(
        c.http
            .post(&c.url)
            .header("content-type", "text/plain")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", c.session.as_deref().unwrap())
            .header("mcp-protocol-version", &c.version)
            .body(echo(json!(3), "x"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 415, Some(-32600));
    // Accept lists neither JSON nor SSE.
    let r = Client::read(
        post_accepting(&c, Some("text/html"))
            .body(echo(json!(4), "x"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 406, Some(-32600));
    // Unsupported protocol version header.
    let r = Client::read(
        c.http
            .post(&c.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", c.session.as_deref().unwrap())
            .header("mcp-protocol-version", "1999-01-01")
            .body(echo(json!(5), "x"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_http_error(&r, 400, None);
    // None of that hurt the session.
    let r = c
        .call_tool(json!(6), "echo", json!({"message": "fine"}))
        .await;
    assert_eq!(text_of(&r), "fine");
}

// ---------------------------------------------------------------------------------
// 6. Resumption
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn resumes_a_dropped_response_stream_with_last_event_id() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    let body = rpc(
        json!(11),
        "tools/call",
        json!({"name":"slow","arguments":{"ms":800}}),
    );
    let resp = post_accepting(&c, Some("application/json, text/event-stream"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    let priming = sse.expect_event(deadline(10)).await;
    assert!(
        priming.data.trim().is_empty(),
        "first event is not the priming event: {priming:?}"
    );
    let last = priming.id.clone().expect("priming event id");
    drop(sse); // the connection goes away before the response exists

    let resp = c.resume(&last).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    let answer = sse
        .message_where(deadline(10), |m| m.get("id") == Some(&json!(11)))
        .await;
    assert_eq!(text_of(&answer), "done", "{answer}");
    // The resumed stream is the request's stream: it ends after the response.
    match sse.next(deadline(10)).await {
        Next::End => {}
        other => panic!(
            "resumed stream did not end after the response: {other:?}; {}",
            sse.raw
        ),
    }
}

// ---------------------------------------------------------------------------------
// 7. Legacy HTTP+SSE
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn legacy_http_sse_round_trip() {
    let g = Gantry::example_stdio();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let resp = http
        .get(format!("{}/sse", g.base))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    let endpoint = sse.expect_event(deadline(10)).await;
    assert_eq!(endpoint.event, "endpoint", "{endpoint:?}");
    let path = endpoint.data.trim().to_owned();
    assert!(path.starts_with("/messages?sessionId="), "{path}");
    let post_url = format!("{}{}", g.base, path);
    let send = |body: String| {
        let http = http.clone();
        let url = post_url.clone();
        async move {
            http.post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };

    let init = rpc(
        json!(1),
        "initialize",
        json!({"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"legacy-test","version":"1"}}),
    );
    assert_eq!(send(init).await, 202);
    let init = sse
        .message_where(deadline(15), |m| m.get("id") == Some(&json!(1)))
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05", "{init}");
    assert_eq!(
        send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string()).await,
        202
    );
    assert_eq!(send(echo(json!("e"), "legacy hello")).await, 202);
    let answer = sse
        .message_where(deadline(15), |m| m.get("id") == Some(&json!("e")))
        .await;
    assert_eq!(text_of(&answer), "legacy hello", "{answer}");
}

// ---------------------------------------------------------------------------------
// 8. Idle expiry
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn idle_session_expires() {
    let g = Gantry::with_config(&config_with("session_idle_timeout = \"1s\""));
    let mut c = g.client();
    c.initialize().await;
    // Every request that finds the session keeps it alive, so probe less often than
    // the idle timeout; give up after ~10 s.
    let start = Instant::now();
    let mut last = 0;
    for _ in 0..8 {
        if start.elapsed() > Duration::from_secs(10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let r = c.request(json!(1), "ping", json!({})).await;
        last = r.status;
        if r.status == 404 {
            assert_http_error(&r, 404, None);
            return;
        }
        assert_eq!(r.status, 200, "{}", r.raw);
    }
    panic!(
        "session still usable after {:?} (last status {last})",
        start.elapsed()
    );
}

// ---------------------------------------------------------------------------------
// 9. Colliding request ids
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_ids_across_and_within_sessions() {
    let g = Gantry::example_stdio();
    let sessions = (0..50).map(|s| {
        let url = g.url.clone();
        tokio::spawn(async move {
            let mut c = Client::new(&url);
            c.initialize().await;
            let c = &c;
            // Same id twice in flight (SSE and JSON), and the string "1".
            let calls = [
                (
                    json!(1),
                    format!("session {s} first"),
                    "application/json, text/event-stream",
                ),
                (json!(1), format!("session {s} second"), "application/json"),
                (
                    json!(1),
                    format!("session {s} third"),
                    "application/json, text/event-stream",
                ),
                (
                    json!("1"),
                    format!("session {s} string"),
                    "application/json, text/event-stream",
                ),
                (
                    json!("1"),
                    format!("session {s} string json"),
                    "application/json",
                ),
            ];
            let replies =
                futures::future::join_all(calls.iter().map(|(id, msg, accept)| async move {
                    let r = Client::read(
                        post_accepting(c, Some(accept))
                            .body(echo(id.clone(), msg))
                            .send()
                            .await
                            .unwrap(),
                    )
                    .await;
                    (id, msg, r)
                }))
                .await;
            for (id, msg, r) in replies {
                assert_eq!(r.status, 200, "{}", r.raw);
                let responses: Vec<&Value> = r
                    .messages
                    .iter()
                    .filter(|m| m.get("result").is_some() || m.get("error").is_some())
                    .collect();
                assert_eq!(responses.len(), 1, "session {s}: {}", r.raw);
                assert_eq!(
                    &responses[0]["id"], id,
                    "session {s}: id changed: {}",
                    r.raw
                );
                assert_eq!(
                    text_of(responses[0]),
                    msg.as_str(),
                    "session {s}: crossed replies: {}",
                    r.raw
                );
            }
        })
    });
    for t in futures::future::join_all(sessions).await {
        t.unwrap();
    }
}

// ---------------------------------------------------------------------------------
// 10. ping and re-initialize
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn ping_is_answered_with_an_empty_object() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    for accept in ["application/json", "application/json, text/event-stream"] {
        let r = Client::read(
            post_accepting(&c, Some(accept))
                .body(rpc(json!("p"), "ping", json!({})))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.raw);
        let p = r
            .response(&json!("p"))
            .unwrap_or_else(|| panic!("no ping response: {}", r.raw));
        assert_eq!(p["result"], json!({}), "{p}");
    }
    // `params` is optional for ping.
    let r = c
        .post(&json!({"jsonrpc":"2.0","id":3,"method":"ping"}))
        .await;
    assert_eq!(
        r.response(&json!(3)).unwrap()["result"],
        json!({}),
        "{}",
        r.raw
    );
}

#[tokio::test]
async fn second_initialize_on_an_established_session_is_an_error() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    let sid = c.session.clone().unwrap();
    let body = rpc(
        json!(42),
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"again","version":"1"}}),
    );
    let r = Client::read(
        post_accepting(&c, Some("application/json, text/event-stream"))
            .body(body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    // Either an HTTP-level rejection or a JSON-RPC error response: never a success.
    let err = r
        .messages
        .iter()
        .find(|m| m.get("error").is_some())
        .unwrap_or_else(|| {
            panic!(
                "second initialize was not an error (status {}): {}",
                r.status, r.raw
            )
        });
    assert!(err["error"]["code"].is_i64(), "{err}");
    assert!(
        r.response(&json!(42))
            .is_none_or(|m| m.get("result").is_none()),
        "{}",
        r.raw
    );
    let new_sid = r
        .headers
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    assert!(
        new_sid.is_none() || new_sid.as_deref() == Some(sid.as_str()),
        "a second session was created: {new_sid:?}"
    );
    // The established session still works.
    let ok = c
        .call_tool(json!(43), "echo", json!({"message": "unchanged"}))
        .await;
    assert_eq!(text_of(&ok), "unchanged");
}

// ---------------------------------------------------------------------------------
// 11. Cancellation
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn cancelled_request_ends_its_stream_without_a_response() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    c.initialize().await;
    let started = Instant::now();
    let body = rpc(
        json!(7),
        "tools/call",
        json!({"name":"slow","arguments":{"ms":5000}}),
    );
    let resp = post_accepting(&c, Some("application/json, text/event-stream"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    let priming = sse.expect_event(deadline(10)).await;
    assert!(priming.data.trim().is_empty(), "{priming:?}");

    let status = c
        .notify(
            "notifications/cancelled",
            json!({"requestId": 7, "reason": "user pressed stop"}),
        )
        .await;
    assert_eq!(status, 202);
    let end_by = started + Duration::from_millis(4000);
    loop {
        match sse.next(end_by).await {
            Next::End => break,
            Next::Timeout => panic!(
                "stream still open {:?} after the cancellation: {}",
                started.elapsed(),
                sse.raw
            ),
            Next::Event(e) => {
                if e.data.trim().is_empty() {
                    continue;
                }
                let m: Value = serde_json::from_str(&e.data).unwrap();
                assert!(
                    m.get("id") != Some(&json!(7)),
                    "a cancelled request was answered: {m}"
                );
            }
        }
    }
    assert!(
        started.elapsed() < Duration::from_millis(4000),
        "{:?}",
        started.elapsed()
    );
    // The session carries on.
    let ok = c
        .call_tool(json!(8), "echo", json!({"message": "after cancel"}))
        .await;
    assert_eq!(text_of(&ok), "after cancel");
}

/// A browser page on an allowed origin can read the session id (CORS), and its
/// preflight needs no session.
#[tokio::test]
async fn cors_for_allowed_origins() {
    let g = Gantry::example_stdio();
    let http = reqwest::Client::new();
    let origin = "http://localhost:6274";
    let pre = http
        .request(reqwest::Method::OPTIONS, &g.url)
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type, mcp-session-id",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status().as_u16(), 204);
    let h = pre.headers();
    assert_eq!(h.get("access-control-allow-origin").unwrap(), origin);
    let allowed = h
        .get("access-control-allow-headers")
        .unwrap()
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("mcp-session-id") && allowed.contains("content-type"));
    let mut c = g.client();
    let r = c
        .post_builder()
        .header("origin", origin)
        .body(
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
                "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let expose = r
        .headers()
        .get("access-control-expose-headers")
        .unwrap()
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(expose.contains("mcp-session-id"));
    assert_eq!(
        r.headers().get("access-control-allow-origin").unwrap(),
        origin
    );
    c.session = None;
    // A refused origin gets no CORS grant at all.
    let bad = http
        .request(reqwest::Method::OPTIONS, &g.url)
        .header("origin", "http://evil.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 403);
    assert!(bad.headers().get("access-control-allow-origin").is_none());
}

/// MCP over HTTP/2 without TLS (prior knowledge): hyper serves each stream on a task
/// of its own, spawned through Gantry's executor; a session is opened and a tool
/// called over one connection as over HTTP/1.1.
#[tokio::test]
async fn a_session_works_over_http2_with_prior_knowledge() {
    let g = Gantry::with_config(&config_with(""));
    let tcp = common::h2::tcp(&g.base).await;
    common::h2::session_over(tcp, &g.url, "over h2").await;
}

/// A `HEAD` of the MCP endpoint is refused (405, with what is allowed) and has no
/// body, over HTTP/1.1 and over HTTP/2, where a body sent with it is a protocol
/// error the client sees instead of the answer.
#[tokio::test]
async fn head_of_the_mcp_endpoint_is_405_without_a_body_over_both_protocols() {
    let g = Gantry::with_config(&config_with(""));
    let tcp = common::h2::tcp(&g.base).await;
    let (status, headers, body) = common::h2::head(tcp, &g.url).await;
    assert_eq!(status, 405);
    assert_eq!(headers["allow"], "GET, POST, DELETE");
    assert_eq!(body.as_deref(), Ok(&b""[..]));
    let r = reqwest::Client::new().head(&g.url).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, POST, DELETE");
    assert_eq!(r.bytes().await.unwrap().len(), 0);
}

//! How Gantry connects to Streamable HTTP backends: keep-alive connections reused and
//! sized to the requests in flight, HTTP/2 spoken when configured (prior knowledge) or
//! agreed over TLS (ALPN), an internal CA trusted through `http.ca_file`. A TCP relay
//! in front of the real backend shows the connections Gantry opened.

// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::pki::Pki;
use common::relay::{Relay, H2_PREFACE};
use common::*;
use serde_json::{json, Value};
use std::net::SocketAddr;

/// The socket address of an `http://127.0.0.1:PORT/…` URL.
fn socket_of(url: &str) -> SocketAddr {
    let rest = url.split_once("://").unwrap().1;
    rest.split('/').next().unwrap().parse().unwrap()
}

/// `n` calls of `echo` at once on `c`, each answered with its own text.
async fn burst(c: &Client, first_id: u64, n: u64) {
    let calls = (first_id..first_id + n).map(|i| async move {
        let r = c
            .call_tool(json!(i), "echo", json!({ "message": format!("m{i}") }))
            .await;
        (i, r)
    });
    for (i, r) in futures::future::join_all(calls).await {
        assert_eq!(text_of(&r), format!("m{i}"), "{r}");
    }
}

#[tokio::test]
async fn http1_connections_are_kept_alive_and_sized_to_the_requests_in_flight() {
    let backend = HttpServer::example(&[]);
    let relay = Relay::start(socket_of(&backend.url)).await;
    let url = backend.url.replace(
        &socket_of(&backend.url).to_string(),
        &relay.addr.to_string(),
    );
    let g = gantry().backend(http_backend("remote", &url)).start();
    let mut c = g.client();
    c.initialize().await;
    for i in 0..40 {
        burst(&c, i, 1).await;
    }
    // The handshake, the standalone GET stream and the calls: a few connections,
    // not one per request.
    let sequential = relay.connections();
    assert!(
        (1..=4).contains(&sequential),
        "{sequential} connections for 40 calls one after another"
    );
    burst(&c, 100, 16).await;
    let concurrent = relay.connections();
    assert!(
        concurrent <= sequential + 16,
        "{concurrent} connections after 16 calls at once"
    );
    // Another burst as large finds them kept (but for a few whose response stream
    // the backend had not closed yet).
    burst(&c, 200, 16).await;
    let again = relay.connections();
    assert!(
        again <= concurrent + 6,
        "another 16 calls opened {} more connections",
        again - concurrent
    );
    for o in relay.openings() {
        assert!(
            o.starts_with(b"POST ") || o.starts_with(b"GET ") || o.starts_with(b"DELETE "),
            "not HTTP/1.1: {:?}",
            String::from_utf8_lossy(&o)
        );
    }
}

#[tokio::test]
async fn http2_by_prior_knowledge_multiplexes_every_request_on_one_connection() {
    // Gantry serves h2c on its plain listener: a real HTTP/2 backend.
    let backend = gantry().backend(example()).start();
    let relay = Relay::start(socket_of(&backend.base)).await;
    let url = format!("http://{}/mcp", relay.addr);
    let g = gantry()
        .backend(http_backend("remote", &url).transport_field(r#"version = "2""#))
        .start();
    let mut c = g.client();
    c.initialize().await;
    for i in 0..10 {
        burst(&c, i, 1).await;
    }
    burst(&c, 100, 16).await;
    let openings = relay.openings();
    assert_eq!(openings.len(), 1, "HTTP/2 connections: {}", openings.len());
    assert_eq!(
        openings[0],
        H2_PREFACE,
        "{:?}",
        String::from_utf8_lossy(&openings[0])
    );
}

#[tokio::test]
async fn an_https_backend_of_an_internal_ca_is_trusted_through_ca_file_and_speaks_h2() {
    let pki = Pki::new();
    pki.issue("backend");
    let backend = gantry()
        .server(&pki.server_line())
        .backend(example())
        .start();
    let relay = Relay::start(socket_of(&backend.base)).await;
    let url = format!("https://localhost:{}/mcp", relay.addr.port());
    let g = gantry()
        .backend(
            http_backend("remote", &url).transport_field(&format!("ca_file = {:?}", pki.ca_file())),
        )
        .start();
    let mut c = g.client();
    c.initialize().await;
    burst(&c, 1, 16).await;
    // ALPN agreed on HTTP/2: one connection for the handshake, the GET stream and
    // 16 calls at once.
    assert_eq!(relay.connections(), 1);

    // Without the CA the certificate is refused, and the client is told why.
    let untrusted = gantry().backend(http_backend("remote", &url)).start();
    let c = untrusted.client();
    let r = c
        .post(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "gantry-tests", "version": "1"}}}),
        )
        .await;
    let r: Value = serde_json::from_str(&r.raw).unwrap();
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`remote`") && message.contains("invalid peer certificate"),
        "{r}"
    );
}

/// A large call's params go to an HTTP backend as they are, after the head of the
/// request's envelope (parts of one body): the backend receives exactly the params the
/// client sent, compact or pretty-printed, and the answer carries them back whole;
/// over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn large_params_reach_an_http_backend_whole() {
    let dir = Scratch::new("http-large-params");
    // HTTP/1.1: the example server over HTTP, recording what it receives.
    let record = dir.file("http1.jsonl");
    let backend = HttpServer::example_with_env(&[("MB_RECORD", record.to_str().unwrap())]);
    let g = gantry()
        .backend(http_backend("remote", &backend.url))
        .start();
    large_calls_arrive_whole(&g, &record).await;
    // HTTP/2 (prior knowledge): a Gantry serving h2c in front of the recording
    // example server.
    let record = dir.file("http2.jsonl");
    let inner = gantry().backend(example().record(&record)).start();
    let url = format!("{}/mcp", inner.base);
    let g = gantry()
        .backend(http_backend("remote", &url).transport_field(r#"version = "2""#))
        .start();
    large_calls_arrive_whole(&g, &record).await;
}

async fn large_calls_arrive_whole(g: &Gantry, record: &std::path::Path) {
    let mut c = g.client();
    c.initialize().await;
    // Well above the size from which params go apart.
    let (message, params, bodies) = large_echo_calls(1024);
    for (id, body) in bodies {
        let resp = c.post_builder().body(body).send().await.unwrap();
        let r = Client::read(resp).await;
        let answer = r.response(&json!(id)).unwrap_or_else(|| {
            panic!("call {id}: {}", r.raw.chars().take(300).collect::<String>())
        });
        let back = text_of(answer);
        assert!(
            back == message,
            "call {id}: {} bytes came back for {}: {}",
            back.len(),
            message.len(),
            answer.to_string().chars().take(300).collect::<String>()
        );
    }
    let got: Vec<Value> = recorded(record)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(got.len(), 2, "the backend did not get both calls whole");
    for (m, id) in got.iter().zip([1, 2]) {
        assert!(
            m["params"] == params,
            "the params of call {id} changed on the way"
        );
        assert_eq!(m["jsonrpc"], "2.0");
        assert!(m["id"].is_u64(), "{}", m["id"]);
    }
}

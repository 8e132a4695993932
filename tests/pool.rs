//! Connection limits and the warm pool of per-session stdio backends.
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
use serde_json::json;
use std::time::{Duration, Instant};

/// The example server with these `[backends.pool]` settings.
fn pooled(pool: &str) -> BackendSpec {
    example().set(&format!("pool = {{ {pool} }}"))
}

/// The `clientInfo.name` of every `initialize` the backend processes received.
fn initialized_as(record: &std::path::Path) -> Vec<String> {
    recorded(record)
        .iter()
        .filter(|m| m["method"] == "initialize")
        .map(|m| {
            m["params"]["clientInfo"]["name"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

fn wait_children(g: &Gantry, n: usize) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if children_of(g.pid()).len() == n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[tokio::test]
async fn warm_pool_keeps_min_idle_processes_ready() {
    let dir = Scratch::new("warm");
    let record = dir.file("received.jsonl");
    let g = gantry()
        .backend(pooled("min_idle = 2").record(&record))
        .start();
    assert!(
        wait_children(&g, 2),
        "two warm processes before any client: {:?}",
        children_of(g.pid())
    );
    let end = Instant::now() + Duration::from_secs(10);
    while initialized_as(&record).len() < 2 {
        assert!(
            Instant::now() < end,
            "the warm processes were not initialized"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = g.client();
    c.initialize().await;
    // The session adopted a warm process (initialized as Gantry before it came: no
    // process was ever initialized as this client); the pool is topped up again.
    assert!(wait_children(&g, 3), "{:?}", children_of(g.pid()));
    let end = Instant::now() + Duration::from_secs(10);
    while initialized_as(&record).len() < 3 {
        assert!(Instant::now() < end, "the pool was not topped up");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(initialized_as(&record), ["gantry", "gantry", "gantry"]);
    let r = c
        .call_tool(json!(1), "echo", json!({"message": "warm"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "warm");
    let del = c
        .http
        .delete(&c.url)
        .header("mcp-session-id", c.session.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 200);
    assert!(
        wait_children(&g, 2),
        "the session's process is gone, the warm ones stay"
    );
}

#[tokio::test]
async fn connection_cap_is_a_clear_error() {
    let g = gantry().backend(pooled("max_connections = 2")).start();
    let mut a = g.client();
    a.initialize().await;
    let mut b = g.client();
    b.initialize().await;
    let third = g
        .client()
        .post(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
        .await;
    let err = assert_rpc_error(third.response(&json!(0)).unwrap(), -32000, None);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("connection limit (2)"),
        "{err}"
    );
    assert!(
        third.headers.get("mcp-session-id").is_none(),
        "no session for a refused initialize"
    );
    assert_eq!(children_of(g.pid()).len(), 2);
    // A slot frees up when a session ends.
    let del = a
        .http
        .delete(&a.url)
        .header("mcp-session-id", a.session.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 200);
    let mut c = g.client();
    c.initialize().await;
    assert_eq!(
        c.call_tool(json!(1), "echo", json!({"message": "in"}))
            .await["result"]["content"][0]["text"],
        "in"
    );
}

#[tokio::test]
async fn in_flight_limit_queues_then_refuses() {
    let g = gantry()
        .backend(pooled("max_in_flight = 1, queue = 1"))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let started = Instant::now();
    let first = async {
        let r = c.call_tool(json!(1), "slow", json!({"ms": 1000})).await;
        (r, Instant::now())
    };
    // Each next request is sent once the previous one is in flight (or queued).
    let second = async {
        assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await);
        let r = c.call_tool(json!(2), "slow", json!({"ms": 10})).await;
        (r, Instant::now())
    };
    let third = async {
        assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 2.0).await);
        c.call_tool(json!(3), "echo", json!({"message": "x"})).await
    };
    let ((a, a_done), (b, b_done), busy) = tokio::join!(first, second, third);
    assert_eq!(a["result"]["content"][0]["text"], "done");
    assert_eq!(b["result"]["content"][0]["text"], "done");
    // The 10 ms call waited for the 1 s one: it finished after it, not 990 ms before.
    assert!(b_done > a_done, "the queued request ran after the first");
    assert!(started.elapsed() >= Duration::from_millis(1000));
    let err = assert_rpc_error(&busy, -32000, Some("example"));
    assert!(err["message"].as_str().unwrap().contains("busy"), "{busy}");
}

/// A request queued for a backend's in-flight slot spends its own time waiting: it
/// times out `request_timeout` after it was sent, not after it got the slot.
#[tokio::test]
async fn a_queued_requests_wait_counts_against_its_timeout() {
    let g = gantry()
        .backend(pooled("max_in_flight = 1, queue = 1").set("request_timeout = \"1500ms\""))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let first = c.call_tool(json!(1), "slow", json!({"ms": 1000}));
    let second = async {
        assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await);
        let sent = Instant::now();
        // About 1 s queued, then 1 s running: past 1.5 s in all, within 1.5 s of
        // getting the slot.
        let r = c.call_tool(json!(2), "slow", json!({"ms": 1000})).await;
        (r, sent.elapsed())
    };
    let (a, (b, took)) = tokio::join!(first, second);
    assert_eq!(a["result"]["content"][0]["text"], "done", "{a}");
    let err = assert_rpc_error(&b, -32001, Some("example"));
    // The limit the client is told of is the configured one.
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("1.5s") || message.contains("1500ms"),
        "{b}"
    );
    assert!(
        took < Duration::from_millis(1900),
        "timed out {took:?} after it was sent: its wait for the slot did not count"
    );
}

/// An idle session expires like a DELETEd one: its backend process (and the
/// process's group) goes, and the reaping is counted in the metrics.
#[tokio::test]
async fn idle_expiry_stops_the_session_process_and_is_counted() {
    let g = gantry()
        .server("session_idle_timeout = \"1s\"")
        .backend(example())
        .start();
    let mut c = g.client();
    c.initialize().await;
    assert_eq!(children_of(g.pid()).len(), 1);
    assert!(
        wait_children(&g, 0),
        "the expired session's process is gone"
    );
    assert_eq!(metric(&g, "gantry_sessions_reaped_total").await, Some(1.0));
}

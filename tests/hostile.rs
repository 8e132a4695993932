//! Hostile clients and misbehaving backends (chaos suite): whatever a client does
//! with its streams and whatever a backend floods Gantry with, an answer is never
//! lost and nothing grows without bound. Real `gantry`, real backend processes, real
//! HTTP.

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
use serde_json::{json, Value};

fn flooding() -> Gantry {
    gantry()
        .backend(python_fixture("mb", "misbehaving_server.py"))
        .start()
}

/// A call that sends far more notifications than a stream keeps (256 events, 8 MiB)
/// before its answer, while the client reads nothing: resuming the stream afterwards
/// still delivers the answer (some notifications may be gone; the answer never is).
#[tokio::test]
async fn an_answer_survives_a_flood_of_notifications_the_client_did_not_read() {
    let g = flooding();
    let mut c = g.client();
    c.initialize().await;
    let resp = c
        .post_builder()
        .body(
            json!({"jsonrpc":"2.0","id":"f","method":"tools/call",
                   "params":{"name":"flood","arguments":{"n":3000,"bytes":200}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(resp);
    let priming = sse.expect_event(deadline(10)).await;
    let last = priming.id.clone().expect("priming event id");
    drop(sse); // the client goes away before reading anything else
    assert!(
        metric_until(&g, "gantry_calls_in_flight", |n| n == 0.0).await,
        "the call did not finish"
    );
    let resumed = c
        .http
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", c.session.as_deref().unwrap())
        .header("mcp-protocol-version", &c.version)
        .header("last-event-id", &last)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let mut sse = SseReader::new(resumed);
    let answer = sse
        .message_where(deadline(10), |m| m.get("id") == Some(&json!("f")))
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "flooded 3000",
        "{answer}"
    );
}

/// The same flood read live by a client that reads as it comes: everything arrives,
/// answer last.
#[tokio::test]
async fn a_client_that_reads_gets_the_whole_flood_and_the_answer() {
    let g = flooding();
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .request(
            json!(1),
            "tools/call",
            json!({"name":"flood","arguments":{"n":1000,"bytes":50}}),
        )
        .await;
    let logs = r
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count();
    assert!(logs > 0, "{}", r.raw);
    let last = r.messages.last().unwrap();
    assert_eq!(last["id"], 1, "the answer comes last: {last}");
    assert_eq!(last["result"]["content"][0]["text"], "flooded 1000");
}

/// A 2025-03-26 batch of more requests than a stream keeps events: every one is
/// answered.
#[tokio::test]
async fn a_batch_larger_than_the_event_buffer_is_answered_whole() {
    let g = gantry().backend(example()).start();
    let mut c = g.client();
    c.version = "2025-03-26".into();
    c.initialize().await;
    let batch: Vec<Value> = (0..300)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"ping"}))
        .collect();
    let r = c.post(&Value::Array(batch)).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let mut ids: Vec<i64> = r
        .messages
        .iter()
        .filter(|m| m.get("result").is_some())
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..300).collect::<Vec<i64>>());
}

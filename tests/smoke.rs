// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]
//! The basic path: a client initializes through Gantry and calls a tool of the
//! example server over stdio.
mod common;
use common::*;
use serde_json::json;

#[tokio::test]
async fn initialize_and_call_a_tool_over_stdio() {
    let g = Gantry::example_stdio();
    let mut c = g.client();
    let init = c.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    let r = c
        .call_tool(json!("a"), "echo", json!({"message": "hello"}))
        .await;
    assert_eq!(r["id"], json!("a"));
    assert_eq!(r["result"]["content"][0]["text"], "hello");
}

/// With no backend options, `gantry` serves its built-in demo (the example server,
/// run by the same executable): a newcomer's first command needs no set-up.
#[tokio::test]
async fn no_arguments_serves_the_builtin_demo() {
    let g = Gantry::start(&[]);
    let mut c = g.client();
    let init = c.initialize().await;
    assert_eq!(init["result"]["serverInfo"]["name"], "gantry-example");
    let r = c
        .call_tool(json!(1), "echo", json!({"message": "demo"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "demo");
}

/// `--log-format json` writes one JSON object per log line.
#[tokio::test]
async fn json_logs() {
    let g = Gantry::start(&[
        "--log-format",
        "json",
        "--stdio",
        example_bin().to_str().unwrap(),
    ]);
    let mut c = g.client();
    c.initialize().await;
    assert!(g.wait_log("session started", std::time::Duration::from_secs(10)));
    let text = g.log_text();
    let line = text
        .lines()
        .find(|l| l.contains("session started"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
    assert_eq!(v["level"], "INFO");
    assert!(v["session"].is_string());
}

/// Many sessions on one `shared` backend connection, all reusing the same ids
/// concurrently (as some real clients do): every answer reaches the request that
/// asked, with the id exactly as it was sent, and progress reaches its owner.
#[tokio::test]
async fn colliding_ids_on_a_shared_backend() {
    let example = example_bin();
    let g = Gantry::with_config(&format!(
        "[[backends]]\nname = \"example\"\nsession_mode = \"shared\"\nstdio = {{ command = {:?} }}\n",
        example.to_str().unwrap()
    ));
    let mut sessions = Vec::new();
    for _ in 0..40 {
        let mut c = g.client();
        c.initialize().await;
        sessions.push(c);
    }
    let calls = sessions.iter().enumerate().flat_map(|(s, c)| {
        (0..3).map(move |k| async move {
            let id = if k == 2 { json!("1") } else { json!(1) };
            let msg = format!("session {s} call {k}");
            let r = c
                .request(
                    id.clone(),
                    "tools/call",
                    json!({"name":"echo","arguments":{"message": msg},"_meta":{"progressToken": 1}}),
                )
                .await;
            let resp = r.response(&id).unwrap_or_else(|| panic!("no response: {}", r.raw)).clone();
            assert_eq!(resp["id"], id, "id type and value preserved");
            assert_eq!(resp["result"]["content"][0]["text"], msg, "answer reached its own request");
            // Every session uses progress token 1 at once: each call's progress
            // reaches that call's own stream, with the token it chose.
            let r = c
                .request(
                    json!(1),
                    "tools/call",
                    json!({"name":"test_tool_with_progress","arguments":{},"_meta":{"progressToken": 1}}),
                )
                .await;
            let progress: Vec<_> = r
                .messages
                .iter()
                .filter(|m| m["method"] == "notifications/progress")
                .collect();
            assert_eq!(progress.len(), 3, "session {s}: {}", r.raw);
            assert!(progress.iter().all(|m| m["params"]["progressToken"] == 1), "{}", r.raw);
            assert!(r.response(&json!(1)).is_some(), "{}", r.raw);
        })
    });
    futures::future::join_all(calls).await;
    // One backend process served them all.
    let kids = children_of(g.pid());
    assert_eq!(
        kids.len(),
        1,
        "shared mode runs one backend process: {kids:?}"
    );
}

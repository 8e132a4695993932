#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
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

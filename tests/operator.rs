//! What an operator relies on about backends (README "Backend health, readiness and
//! cost"): restarts that fail only the calls in flight, start-up failures explained,
//! readiness and status that reflect reality. Real `gantry`, real backend processes,
//! real HTTP.

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

async fn pid_of(c: &Client, id: i64) -> u32 {
    let r = c.call_tool(json!(id), "pid", json!({})).await;
    r["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no pid: {r}"))
}

/// After a `kill -9` of a backend, the calls that were in flight fail at once, and
/// a call sent right after — while the backend restarts — waits for it and works.
#[tokio::test]
async fn a_call_during_a_restart_waits_for_the_backend() {
    for round in 0..3 {
        let g = gantry()
            .backend(python_fixture("mb", "misbehaving_server.py").mode("shared"))
            .start();
        let mut c = g.client();
        c.initialize().await;
        let first = pid_of(&c, 1).await;
        let hanging = {
            let c = c.clone();
            tokio::spawn(async move { c.call_tool(json!(2), "hang", json!({})).await })
        };
        assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await);
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &first.to_string()])
            .status();
        let in_flight = hanging.await.unwrap();
        assert_rpc_error(&in_flight, -32000, Some("mb"));
        // Right away: the backend is restarting (backoff 200ms, then start-up).
        let started = Instant::now();
        let r = c
            .call_tool(json!(3), "echo", json!({"message": "after"}))
            .await;
        assert_eq!(
            r["result"]["content"][0]["text"], "after",
            "round {round}: a call during the restart failed: {r}"
        );
        assert!(started.elapsed() < Duration::from_secs(20));
        assert_ne!(pid_of(&c, 4).await, first, "a new process answers");
    }
}

/// A backend that dies at start-up explains itself to the client: the error names
/// the exit status and carries the last lines of its stderr.
#[tokio::test]
async fn a_backend_failing_at_start_tells_the_client_why() {
    let g = gantry()
        .backend(stdio(
            "broken",
            "sh",
            &[
                "-c",
                "echo 'loading config' >&2; echo 'FATAL: MY_API_KEY is not set' >&2; exit 2",
            ],
        ))
        .start();
    let c = g.client();
    let r = c
        .post(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
        .await;
    let resp = r.response(&json!(0)).unwrap_or_else(|| panic!("{}", r.raw));
    let err = assert_rpc_error(resp, -32000, Some("broken"));
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("exit status: 2"), "{err}");
    assert!(msg.contains("FATAL: MY_API_KEY is not set"), "{err}");
    assert_eq!(
        err["data"]["stderr"],
        json!(["loading config", "FATAL: MY_API_KEY is not set"]),
        "{err}"
    );
}

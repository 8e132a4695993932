//! Rate limits (`[[limits.rules]]`) as clients meet them: a limited tool call gets
//! `-32029` with `data.retryAfterMs` (or a tool result a model can read) and never
//! reaches the backend; anything refused as a whole gets 429 with `Retry-After`; each
//! key (principal, address behind a trusted proxy, tool) counts on its own; both eras.

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

fn rule(body: &str) -> String {
    format!("[[limits.rules]]\n{body}\n")
}

/// How many `tools/call` requests the backend received.
fn calls_received(record: &std::path::Path) -> usize {
    recorded(record)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count()
}

#[tokio::test]
async fn a_principal_over_its_budget_is_told_when_to_retry_and_the_backend_never_sees_it() {
    let dir = Scratch::new("limits");
    let record = dir.0.join("received.jsonl");
    let g = gantry()
        .api_key("alice", "alice-key")
        .api_key("bob", "bob-key")
        .section(&rule(
            "name = \"calls\"\nrate = \"2/m\"\nmethods = [\"tools/call\"]",
        ))
        .backend(python_fixture("mb", "misbehaving_server.py").record(&record))
        .start();
    let mut alice = g.bearer("alice-key");
    alice.initialize().await;
    for i in 0..2 {
        let r = alice
            .call_tool(json!(i), "echo", json!({"message": "ok"}))
            .await;
        assert_eq!(r["result"]["content"][0]["text"], "ok", "{r}");
    }
    let r = alice
        .request(
            json!(9),
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "x"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let e = &r.response(&json!(9)).unwrap()["error"];
    assert_eq!(e["code"], -32029, "{e}");
    assert_eq!(e["data"]["rule"], "calls");
    assert_eq!(e["data"]["limit"], "2/m");
    let wait = e["data"]["retryAfterMs"].as_u64().unwrap();
    assert!(wait > 0 && wait <= 30_000, "{e}");
    assert!(e["message"].as_str().unwrap().contains("retry in"), "{e}");
    assert_eq!(
        calls_received(&record),
        2,
        "the limited call reached the backend"
    );
    // Other methods and other principals are not counted by it.
    let r = alice.request(json!(10), "tools/list", json!({})).await;
    assert!(r.response(&json!(10)).unwrap()["result"].is_object());
    let mut bob = g.bearer("bob-key");
    bob.initialize().await;
    let r = bob
        .call_tool(json!(1), "echo", json!({"message": "bob"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "bob", "{r}");
}

#[tokio::test]
async fn a_rule_may_answer_with_a_tool_result_and_counts_per_tool() {
    let g = gantry()
        .section(&rule(
            "name = \"per-tool\"\nrate = \"1/h\"\nkey = [\"principal\", \"tool\"]\ntools = [\"echo\", \"pid\"]\nanswer = \"tool_result\"",
        ))
        .backend(python_fixture("mb", "misbehaving_server.py"))
        .start();
    let mut c = g.client();
    c.initialize().await;
    assert_eq!(
        c.call_tool(json!(1), "echo", json!({"message": "a"})).await["result"]["content"][0]
            ["text"],
        "a"
    );
    let r = c.call_tool(json!(2), "echo", json!({"message": "b"})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("Rate limited by rule `per-tool`") && text.contains("retry in"),
        "{text}"
    );
    // Another tool has its own budget; a tool the rule does not name is not limited.
    assert!(c.call_tool(json!(3), "pid", json!({})).await["result"]["content"].is_array());
    for i in 4..7 {
        let r = c.call_tool(json!(i), "env", json!({"name": "HOME"})).await;
        assert!(
            r["result"].get("isError").is_none() || r["result"]["isError"] == false,
            "{r}"
        );
    }
}

#[tokio::test]
async fn an_initialize_flood_gets_429_before_a_session_is_made() {
    let g = gantry()
        .section(&rule(
            "name = \"sessions\"\nrate = \"2/m\"\nkey = [\"ip\"]\nmethods = [\"initialize\"]",
        ))
        .backend(example())
        .start();
    for _ in 0..2 {
        g.client().initialize().await;
    }
    let r = g
        .client()
        .post(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
        .await;
    assert_eq!(r.status, 429, "{}", r.raw);
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    assert!(r.headers.get("mcp-session-id").is_none());
    let body: Value = serde_json::from_str(&r.raw).unwrap();
    assert_eq!(body["error"]["code"], -32029, "{body}");
    assert_eq!(body["error"]["data"]["rule"], "sessions", "{body}");
}

/// Behind a trusted proxy each `X-Forwarded-For` client has its own budget; from an
/// untrusted peer the header is ignored (it cannot buy a fresh budget).
#[tokio::test]
async fn clients_behind_a_trusted_proxy_count_apart() {
    let limits = |trusted: &str| {
        format!(
            "[limits]\ntrusted_proxies = [{trusted}]\n{}",
            rule("name = \"by-ip\"\nrate = \"1/h\"\nkey = [\"ip\"]\nmethods = [\"tools/call\"]")
        )
    };
    let from = |g: &Gantry, ip: &str| g.client_with("x-forwarded-for", ip);
    let call = |c: Client| async move {
        let mut c = c;
        c.initialize().await;
        let r = c.call_tool(json!(1), "echo", json!({"message": "m"})).await;
        r["error"]["code"].as_i64().unwrap_or(0)
    };
    let trusted = gantry()
        .section(&limits("\"127.0.0.1\""))
        .backend(example())
        .start();
    assert_eq!(call(from(&trusted, "198.51.100.1")).await, 0);
    assert_eq!(call(from(&trusted, "198.51.100.2")).await, 0);
    assert_eq!(call(from(&trusted, "198.51.100.1")).await, -32029);
    let untrusted = gantry().section(&limits("")).backend(example()).start();
    assert_eq!(call(from(&untrusted, "198.51.100.1")).await, 0);
    assert_eq!(call(from(&untrusted, "198.51.100.2")).await, -32029);
}

/// The 2026-07-28 era: the same rule, the same answer.
#[tokio::test]
async fn the_stateless_era_is_limited_alike() {
    let g = gantry()
        .section(&rule(
            "name = \"calls\"\nrate = \"1/h\"\nmethods = [\"tools/call\"]",
        ))
        .backend(example())
        .start();
    let c = Stateless::new(&g);
    let first = c
        .call(json!(1), "echo", json!({"message": "s"}), json!({}))
        .await;
    assert!(
        first.response(&json!(1)).unwrap()["result"].is_object(),
        "{}",
        first.raw
    );
    let second = c
        .call(json!(2), "echo", json!({"message": "s"}), json!({}))
        .await;
    assert_eq!(second.status, 200, "{}", second.raw);
    let e = &second.response(&json!(2)).unwrap()["error"];
    assert_eq!(e["code"], -32029, "{e}");
    assert!(e["data"]["retryAfterMs"].as_u64().unwrap() > 0);
}

/// `[[limits.concurrency]]`: one `slow` call at a time across sessions; the next
/// waits its turn, one more than the queue holds is refused at once, and a call that
/// cannot get a place within `queue_timeout` is refused then.
#[tokio::test]
async fn calls_beyond_the_concurrency_limit_queue_then_are_refused() {
    let g = gantry()
        .section(
            "[[limits.concurrency]]\nname = \"one-slow\"\nkey = [\"tool\"]\nmax = 1\nqueue = 1\nqueue_timeout = \"5s\"\ntools = [\"slow\"]\n",
        )
        .backend(example())
        .start();
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let mut c = g.client();
        c.initialize().await;
        sessions.push(c);
    }
    let started = std::time::Instant::now();
    let slow = |c: Client, id: i64| async move {
        let r = c.call_tool(json!(id), "slow", json!({"ms": 1500})).await;
        (r, started.elapsed())
    };
    // Each call is in Gantry's hands (running or queued) before the next is sent.
    let first = tokio::spawn(slow(sessions[0].clone(), 1));
    assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await);
    let second = tokio::spawn(slow(sessions[1].clone(), 2));
    assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 2.0).await);
    let (third, at) = slow(sessions[2].clone(), 3).await;
    assert_eq!(third["error"]["code"], -32029, "{third}");
    assert!(
        third["error"]["message"]
            .as_str()
            .unwrap()
            .contains("queue is full"),
        "{third}"
    );
    let (a, at_a) = first.await.unwrap();
    assert!(
        at < at_a,
        "refused at once, while the first still ran: {at:?} {at_a:?}"
    );
    let (b, at_b) = second.await.unwrap();
    assert_eq!(a["result"]["content"][0]["text"], "done", "{a}");
    assert_eq!(b["result"]["content"][0]["text"], "done", "{b}");
    assert!(
        at_b >= at_a + std::time::Duration::from_millis(1000),
        "the second waited its turn: {at_a:?} {at_b:?}"
    );
    // Another tool is not limited.
    assert_eq!(
        sessions[2]
            .call_tool(json!(4), "echo", json!({"message": "e"}))
            .await["result"]["content"][0]["text"],
        "e"
    );
}

#[tokio::test]
async fn a_call_that_cannot_get_a_place_in_time_is_refused() {
    let g = gantry()
        .section("[[limits.concurrency]]\nname = \"backend\"\nmax = 1\nqueue_timeout = \"500ms\"\n")
        .backend(example())
        .start();
    let mut a = g.client();
    a.initialize().await;
    let mut b = g.client();
    b.initialize().await;
    let busy =
        tokio::spawn(async move { a.call_tool(json!(1), "slow", json!({"ms": 2500})).await });
    assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await);
    let t = std::time::Instant::now();
    let r = b.call_tool(json!(2), "echo", json!({"message": "x"})).await;
    assert_eq!(r["error"]["code"], -32029, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no place within 500ms"),
        "{r}"
    );
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(450),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(busy.await.unwrap()["result"]["content"][0]["text"], "done");
}

/// `[[limits.timeouts]]`: a tool's own time limit replaces its backend's
/// `request_timeout`, shorter (the backend is told to cancel) or longer; in both eras.
#[tokio::test]
async fn a_tools_own_timeout_replaces_its_backends_request_timeout() {
    let dir = Scratch::new("limits-timeouts");
    let record = dir.0.join("received.jsonl");
    let quick = gantry()
        .section("[[limits.timeouts]]\nname = \"quick\"\ntools = [\"hang\"]\ntimeout = \"300ms\"\n")
        .backend(python_fixture("mb", "misbehaving_server.py").record(&record))
        .start();
    let mut c = quick.client();
    c.initialize().await;
    let call = c.call_tool(json!(1), "hang", json!({}));
    let r = tokio::time::timeout(std::time::Duration::from_secs(10), call)
        .await
        .expect("the 300ms limit did not end the call (request_timeout is 60s)");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer within 300ms"), "{r}");
    assert!(
        poll_until(std::time::Duration::from_secs(5), || {
            recorded(&record)
                .iter()
                .any(|m| m["method"] == "notifications/cancelled")
                .then_some(())
        })
        .await
        .is_some(),
        "the backend was not told to cancel the call"
    );
    let s = Stateless::new(&quick);
    let r = s.call(json!(2), "hang", json!({}), json!({})).await;
    let message = r.response(&json!(2)).unwrap()["error"]["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap_or_default()
            .contains("within 300ms"),
        "{message}"
    );

    // Longer: `slow` gets 5s where the backend allows 500ms; others keep 500ms.
    let patient = gantry()
        .section("[[limits.timeouts]]\nname = \"patient\"\ntools = [\"slow\"]\ntimeout = \"5s\"\n")
        .backend(example().set("request_timeout = \"500ms\""))
        .start();
    let mut c = patient.client();
    c.initialize().await;
    let r = c.call_tool(json!(1), "slow", json!({"ms": 1500})).await;
    assert_eq!(r["result"]["content"][0]["text"], "done", "{r}");
}

/// `key = ["backend"]` counts each backend's calls together (a burst of 2, then
/// refused), `key = ["method"]` each method apart, and `methods` takes globs.
#[tokio::test]
async fn backend_and_method_keys_count_apart_with_their_bursts() {
    let g = gantry()
        .section(&rule(
            "name = \"per-backend\"\nrate = \"1/h\"\nburst = 2\nkey = [\"backend\"]\nmethods = [\"tools/call\"]",
        ))
        .section(&rule(
            "name = \"lists\"\nrate = \"1/h\"\nkey = [\"method\"]\nmethods = [\"*/list\"]",
        ))
        .backend(example().named("a"))
        .backend(example().named("b"))
        .start();
    let mut c = g.client();
    c.initialize().await;
    for i in 0..2 {
        let r = c
            .call_tool(json!(i), "a__echo", json!({"message": "m"}))
            .await;
        assert_eq!(r["result"]["content"][0]["text"], "m", "{r}");
    }
    let r = c
        .call_tool(json!(5), "a__echo", json!({"message": "m"}))
        .await;
    assert_eq!(
        r["error"]["code"], -32029,
        "backend a's burst of 2 is spent: {r}"
    );
    assert_eq!(r["error"]["data"]["rule"], "per-backend");
    let r = c
        .call_tool(json!(6), "b__echo", json!({"message": "m"}))
        .await;
    assert_eq!(
        r["result"]["content"][0]["text"], "m",
        "backend b has its own: {r}"
    );

    // One tools/list, one prompts/list; the second of each is refused whole (429).
    for method in ["tools/list", "prompts/list"] {
        let r = c.request(json!(method), method, json!({})).await;
        assert!(
            r.response(&json!(method)).unwrap()["result"].is_object(),
            "{}",
            r.raw
        );
        let r = c.request(json!(9), method, json!({})).await;
        assert_eq!(r.status, 429, "second {method}: {}", r.raw);
        assert!(r.headers.get("retry-after").is_some());
    }
    // Not covered: a method no glob names.
    let r = c
        .request(json!(10), "resources/templates/list", json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.raw);
}

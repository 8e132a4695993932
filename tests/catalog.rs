//! The merged catalog of several backends (two example servers and the npm
//! `@modelcontextprotocol/server-everything`): resources are found without the
//! session having listed them — a URI a tool just returned as a `resource_link`, a
//! one-shot `resources/read` — and a URI no backend announced is refused, not guessed.

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
use std::path::PathBuf;

/// server-everything over stdio, run by the Node the interop matrix pins.
fn everything() -> BackendSpec {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        script.is_file(),
        "{} is missing: npm ci in tests/interop",
        script.display()
    );
    stdio(
        "everything",
        common::oidc::node().to_str().unwrap(),
        &[script.to_str().unwrap(), "stdio"],
    )
}

fn three() -> Gantry {
    gantry()
        .backend(example().named("one"))
        .backend(example().named("two"))
        .backend(everything())
        .start()
}

fn contents(r: &Reply, id: &Value) -> Value {
    r.response(id)
        .unwrap_or_else(|| panic!("no response: {}", r.raw))["result"]["contents"]
        .clone()
}

#[tokio::test]
async fn a_resource_link_a_tool_returned_reads_without_listing_first() {
    let g = three();
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .call_tool(
            json!(1),
            "everything__get-resource-links",
            json!({"count": 2}),
        )
        .await;
    let links: Vec<String> = r["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .filter(|c| c["type"] == "resource_link")
        .map(|c| c["uri"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(links.len(), 2, "{r}");
    for (i, uri) in links.iter().enumerate() {
        let id = json!(10 + i);
        let r = c
            .request(id.clone(), "resources/read", json!({"uri": uri}))
            .await;
        let got = contents(&r, &id);
        assert_eq!(got[0]["uri"], uri.as_str(), "{}", r.raw);
    }
}

#[tokio::test]
async fn a_one_shot_read_in_a_fresh_session_finds_its_backend() {
    let g = three();
    // Like the Inspector CLI: initialize, then read at once.
    let mut c = g.client();
    c.initialize().await;
    let id = json!(1);
    let r = c
        .request(
            id.clone(),
            "resources/read",
            json!({"uri": "test://static-text"}),
        )
        .await;
    assert!(
        contents(&r, &id)[0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{}",
        r.raw
    );
    // Under a template of server-everything, never listed.
    let id = json!(2);
    let r = c
        .request(
            id.clone(),
            "resources/read",
            json!({"uri": "demo://resource/dynamic/text/7"}),
        )
        .await;
    assert_eq!(
        contents(&r, &id)[0]["uri"],
        "demo://resource/dynamic/text/7",
        "{}",
        r.raw
    );
}

/// Two backends announce one URI: the one configured first serves it, whatever
/// order their lists arrive in.
#[tokio::test]
async fn a_uri_two_backends_announce_goes_to_the_first_configured() {
    let dir = Scratch::new("catalog-priority");
    let (r1, r2) = (dir.file("one.jsonl"), dir.file("two.jsonl"));
    let g = gantry()
        .backend(example().named("one").record(&r1))
        .backend(example().named("two").record(&r2))
        .start();
    let mut c = g.client();
    c.initialize().await;
    for id in 1..4 {
        let r = c.request(json!(id), "resources/list", json!({})).await;
        assert!(r.response(&json!(id)).is_some(), "{}", r.raw);
        let rid = json!(100 + id);
        let r = c
            .request(
                rid.clone(),
                "resources/read",
                json!({"uri": "test://static-text"}),
            )
            .await;
        assert!(contents(&r, &rid).is_array(), "{}", r.raw);
    }
    let reads = |f: &std::path::Path| {
        recorded(f)
            .into_iter()
            .filter(|m| m["method"] == "resources/read")
            .count()
    };
    assert_eq!((reads(&r1), reads(&r2)), (3, 0));
}

#[tokio::test]
async fn a_uri_no_backend_announced_is_refused_not_guessed() {
    // Only one of the two serves resources at all: still not a reason to send it a
    // URI it never announced.
    let dir = Scratch::new("catalog-guess");
    let record = dir.file("ex.jsonl");
    let g = gantry()
        .backend(example().named("ex").record(&record))
        .backend(python_fixture("mb", "misbehaving_server.py"))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .request(json!(1), "resources/read", json!({"uri": "nobody://x"}))
        .await;
    let e = &r.response(&json!(1)).unwrap()["error"];
    assert_eq!(e["code"], -32002, "{}", r.raw);
    assert_eq!(e["data"]["uri"], "nobody://x");
    let reads = recorded(&record)
        .into_iter()
        .filter(|m| m["method"] == "resources/read")
        .count();
    assert_eq!(
        reads, 0,
        "the URI was sent to a backend that never announced it"
    );
}

/// The error's code is `code` and its message says `needle`.
fn error_says(resp: &Value, code: i64, needle: &str) {
    assert_eq!(resp["error"]["code"], code, "{resp}");
    let msg = resp["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(needle), "expected {needle:?} in {resp}");
}

/// The text of a tool result's first content item.
fn text_of(resp: &Value) -> String {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {resp}"))
        .to_owned()
}

/// Every item of a list, page by page (at most 200 pages), and the pages' sizes.
async fn walk(c: &Client, method: &str, field: &str) -> (Vec<Value>, Vec<usize>) {
    let (mut items, mut sizes) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    for page in 0..200 {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let id = json!(format!("walk-{page}"));
        let r = c.request(id.clone(), method, params).await;
        let result = r
            .response(&id)
            .and_then(|m| m.get("result"))
            .unwrap_or_else(|| panic!("{method} page {page}: {}", r.raw))
            .clone();
        let list = result[field].as_array().unwrap().clone();
        sizes.push(list.len());
        items.extend(list);
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (items, sizes),
        }
    }
    panic!("{method}: more than 200 pages");
}

fn names(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The tools of `spec` alone, through a transparent Gantry (its lists pass through
/// untouched), each with `prefix` + `__` in front.
async fn tools_alone(spec: BackendSpec, prefix: &str) -> Vec<String> {
    let g = gantry().backend(spec).start();
    let mut c = g.client();
    c.initialize().await;
    let (items, _) = walk(&c, "tools/list", "tools").await;
    names(&items)
        .into_iter()
        .map(|n| format!("{prefix}__{n}"))
        .collect()
}

#[tokio::test]
async fn a_client_walks_every_page_of_the_merged_lists_and_stale_cursors_are_refused() {
    let mut expected = tools_alone(example(), "one").await;
    expected.extend(tools_alone(example(), "two").await);
    expected.extend(tools_alone(everything(), "everything").await);
    let g = gantry()
        .backend(example().named("one"))
        .backend(example().named("two"))
        .backend(everything())
        .section("[catalog]\npage_size = 3")
        .start();
    let mut c = g.client();
    c.initialize().await;
    let (items, sizes) = walk(&c, "tools/list", "tools").await;
    let got = names(&items);
    assert!(sizes.iter().all(|&n| n <= 3), "{sizes:?}");
    assert!(sizes.len() > 10, "{sizes:?}");
    assert_eq!(got, expected, "every tool once, in the backends' order");
    // The same walk again gives the same pages (a deterministic order).
    let (again, _) = walk(&c, "tools/list", "tools").await;
    assert_eq!(names(&again), got);
    // Resources and templates page likewise; nothing is lost.
    let (resources, rsizes) = walk(&c, "resources/list", "resources").await;
    assert!(rsizes.iter().all(|&n| n <= 3), "{rsizes:?}");
    let uris: std::collections::HashSet<&str> = resources
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris.len(), resources.len(), "no URI twice");
    assert!(uris.contains("test://static-text"), "{uris:?}");

    // A cursor Gantry never gave.
    let r = c
        .request(
            json!("bad"),
            "tools/list",
            json!({"cursor": "not-a-cursor"}),
        )
        .await;
    error_says(r.response(&json!("bad")).unwrap(), -32602, "invalid cursor");
    // A cursor of a list that has changed since.
    let r = c.request(json!("p1"), "tools/list", json!({})).await;
    let cursor = r.response(&json!("p1")).unwrap()["result"]["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let changed = c
        .call_tool(json!("t"), "one__test_trigger_tool_change", json!({}))
        .await;
    assert!(changed["result"].is_object(), "{changed}");
    let mut refused = None;
    for i in 0..100 {
        let id = json!(format!("stale-{i}"));
        let r = c
            .request(id.clone(), "tools/list", json!({"cursor": cursor}))
            .await;
        let m = r.response(&id).unwrap().clone();
        if m.get("error").is_some() {
            refused = Some(m);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let refused = refused.expect("the old cursor was still served after the list changed");
    error_says(&refused, -32602, "stale cursor");
    let (after, _) = walk(&c, "tools/list", "tools").await;
    assert!(
        names(&after).contains(&"one__test_dynamic_tool".to_owned()),
        "{:?}",
        names(&after)
    );
}

#[tokio::test]
async fn prefixes_collisions_and_policies_shape_what_clients_see_and_can_call() {
    let scratch = Scratch::new("catalog-policy");
    let rec = scratch.file("one.jsonl");
    let g = gantry()
        .backend(example().named("one").record(&rec).set(
            r#"tools = { deny = ["test_*"], rename = { echo = "say" }, override = { echo = { description = "Says it back.", annotations = { destructiveHint = true } } } }"#,
        ))
        .backend(example().named("two").set(r#"prefix = """#).set(
            r#"tools = { allow = ["echo", "slow"] }"#,
        ))
        .backend(everything().set(r#"prefix = """#))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let (items, _) = walk(&c, "tools/list", "tools").await;
    let got = names(&items);
    // `one`: no test_* tools, echo renamed and overridden, the rest under `one__`.
    assert!(!got.iter().any(|n| n.starts_with("one__test_")), "{got:?}");
    assert!(!got.contains(&"one__echo".to_owned()), "{got:?}");
    let say = items
        .iter()
        .find(|t| t["name"] == "one__say")
        .unwrap_or_else(|| panic!("{got:?}"));
    assert_eq!(say["description"], "Says it back.");
    assert_eq!(say["annotations"]["destructiveHint"], true, "{say}");
    assert!(
        say["inputSchema"]["properties"]["message"].is_object(),
        "{say}"
    );
    assert!(got.contains(&"one__slow".to_owned()), "{got:?}");
    // `two` without a prefix, only what it allows.
    assert!(
        got.contains(&"echo".to_owned()) && got.contains(&"slow".to_owned()),
        "{got:?}"
    );
    assert!(!got.contains(&"test_simple_text".to_owned()), "{got:?}");
    // server-everything without a prefix: its `echo` collides with two's and is
    // left out (two is configured first); its other tools are there.
    assert_eq!(got.iter().filter(|n| *n == "echo").count(), 1, "{got:?}");
    assert!(got.contains(&"get-sum".to_owned()), "{got:?}");
    let echo = c
        .call_tool(json!(1), "echo", json!({"message": "hi"}))
        .await;
    assert_eq!(text_of(&echo), "hi", "two's echo, not everything's: {echo}");
    let sum = c
        .call_tool(json!(2), "get-sum", json!({"a": 2, "b": 3}))
        .await;
    assert!(text_of(&sum).contains('5'), "{sum}");
    assert!(
        metric_until(
            &g,
            "gantry_catalog_conflicts_total{backend=\"everything\"}",
            |n| n >= 1.0
        )
        .await
    );

    // The renamed tool reaches the backend under its own name.
    let said = c
        .call_tool(json!(3), "one__say", json!({"message": "yo"}))
        .await;
    assert_eq!(text_of(&said), "yo", "{said}");
    assert_eq!(
        tools_called(&rec),
        [json!("echo")],
        "the backend's own name"
    );
    // A name the backend never listed, under its prefix, is the backend's to
    // judge (as on a direct connection).
    let unknown = c
        .call_tool(json!(4), "one__no_such_thing_at_all", json!({}))
        .await;
    assert!(
        unknown["error"].is_object() || unknown["result"]["isError"] == true,
        "{unknown}"
    );
    // Hidden names answer as names no backend has, and never reach the backend.
    for (id, hidden) in [
        (5, "one__echo"),
        (6, "one__test_simple_text"),
        (7, "test_simple_text"),
        (8, "nobody__echo"),
    ] {
        let r = c
            .call_tool(json!(id), hidden, json!({"message": "x"}))
            .await;
        error_says(&r, -32602, &format!("unknown tool: {hidden}"));
    }
    let calls = tools_called(&rec);
    assert_eq!(
        calls,
        [json!("echo"), json!("no_such_thing_at_all")],
        "hidden tools must not reach the backend"
    );
}

#[test]
fn prefixes_that_would_collide_are_refused_at_load() {
    let scratch = Scratch::new("catalog-prefix");
    let file = scratch.file("gantry.toml");
    let ex = example_bin();
    std::fs::write(
        &file,
        format!(
            "[[backends]]\nname = \"a\"\nstdio = {{ command = {ex:?} }}\n\
             [[backends]]\nname = \"b\"\nprefix = \"a\"\nstdio = {{ command = {ex:?} }}\n\
             [[backends]]\nname = \"a__x\"\nstdio = {{ command = {ex:?} }}\n\
             [[backends]]\nname = \"c\"\nstdio = {{ command = {ex:?} }}\n\
             tools = {{ rename = {{ echo = \"same\", slow = \"same\" }} }}\n\
             resources = {{ rename = {{ \"test://x\" = \"y\" }} }}\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(gantry_bin())
        .args(["check-config", "--file-only"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("backends[1].prefix: `a` is also the prefix of backend `a`"),
        "{err}"
    );
    assert!(err.contains("backends[2].prefix: `a__x` and `a`"), "{err}");
    assert!(
        err.contains("backends[3].tools.rename: `echo` and `slow` are both renamed to `same`"),
        "{err}"
    );
    assert!(err.contains("backends[3].resources.rename"), "{err}");
}

/// Reads `stream` until `within` passes; the `notifications/*/list_changed` seen.
async fn list_changes(stream: &mut SseReader, within: std::time::Duration) -> Vec<String> {
    let end = tokio::time::Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        match stream.next(end).await {
            Next::Event(e) => {
                if let Ok(m) = serde_json::from_str::<Value>(&e.data) {
                    let method = m["method"].as_str().unwrap_or_default();
                    if method.ends_with("/list_changed") {
                        seen.push(method.to_owned());
                    }
                }
            }
            Next::End | Next::Timeout => return seen,
        }
    }
}

/// The tool names the backend recording to `rec` was called with, in order.
fn tools_called(rec: &std::path::Path) -> Vec<Value> {
    recorded(rec)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| m["params"]["name"].clone())
        .collect()
}

fn lists_of(rec: &std::path::Path, method: &str) -> usize {
    recorded(rec)
        .iter()
        .filter(|m| m["method"] == method)
        .count()
}

#[tokio::test]
async fn a_backend_list_change_reaches_the_session_once_and_lists_come_from_the_cache() {
    let scratch = Scratch::new("catalog-changes");
    let rec = scratch.file("one.jsonl");
    let g = gantry()
        .backend(example().named("one").record(&rec))
        .backend(example().named("two"))
        .backend(everything())
        .start();
    let mut c = g.client();
    c.initialize().await;
    let mut stream = SseReader::new(c.open_get().await);
    for _ in 0..5 {
        let (items, _) = walk(&c, "tools/list", "tools").await;
        assert!(!names(&items).contains(&"one__test_dynamic_tool".to_owned()));
    }
    assert_eq!(lists_of(&rec, "tools/list"), 1, "the backend is asked once");

    // A change: the session hears of it once.
    let r = c
        .call_tool(json!(1), "one__test_trigger_tool_change", json!({}))
        .await;
    assert!(text_of(&r).contains("added"), "{r}");
    let first = list_changes(&mut stream, std::time::Duration::from_secs(2)).await;
    assert_eq!(first, ["notifications/tools/list_changed"]);
    // Another before it listed again: nothing new to tell.
    let r = c
        .call_tool(json!(2), "one__test_trigger_tool_change", json!({}))
        .await;
    assert!(text_of(&r).contains("removed"), "{r}");
    let second = list_changes(&mut stream, std::time::Duration::from_secs(1)).await;
    assert!(second.is_empty(), "{second:?}");
    // Listing again asks the backend again, and the next change is told again.
    let (items, _) = walk(&c, "tools/list", "tools").await;
    assert!(!names(&items).contains(&"one__test_dynamic_tool".to_owned()));
    assert_eq!(lists_of(&rec, "tools/list"), 2);
    c.call_tool(json!(3), "one__test_trigger_tool_change", json!({}))
        .await;
    let third = list_changes(&mut stream, std::time::Duration::from_secs(2)).await;
    assert_eq!(third, ["notifications/tools/list_changed"]);
    let (items, _) = walk(&c, "tools/list", "tools").await;
    assert!(names(&items).contains(&"one__test_dynamic_tool".to_owned()));
    // Prompts have their own notification.
    walk(&c, "prompts/list", "prompts").await;
    c.call_tool(json!(4), "one__test_trigger_prompt_change", json!({}))
        .await;
    let prompts = list_changes(&mut stream, std::time::Duration::from_secs(2)).await;
    assert_eq!(prompts, ["notifications/prompts/list_changed"]);
}

#[tokio::test]
async fn a_list_change_reaches_a_stateless_clients_listen_stream() {
    let g = gantry()
        .backend(example().named("one"))
        .backend(example().named("two"))
        .start();
    let c = Stateless::new(&g);
    let mut listen = Listen::open(&c, json!("l"), json!({"toolsListChanged": true})).await;
    let ack = listen
        .next(std::time::Duration::from_secs(10))
        .await
        .expect("no acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let r = c
        .request(json!(1), "tools/list", json!({}), json!({}))
        .await;
    let result = r.response(&json!(1)).unwrap()["result"].clone();
    assert!(result["tools"].as_array().unwrap().len() > 10, "{result}");
    assert!(result["ttlMs"].as_u64().is_some(), "{result}");
    let r = c
        .call(
            json!(2),
            "two__test_trigger_tool_change",
            json!({}),
            json!({}),
        )
        .await;
    assert!(r.raw.contains("added"), "{}", r.raw);
    let n = listen
        .next(std::time::Duration::from_secs(5))
        .await
        .expect("no list_changed on the listen stream");
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "l",
        "{n}"
    );
    assert_eq!(
        listen.next(std::time::Duration::from_millis(500)).await,
        None
    );
    let r = c
        .request(json!(3), "tools/list", json!({}), json!({}))
        .await;
    assert!(r.raw.contains("two__test_dynamic_tool"), "{}", r.raw);
}

/// The misbehaving fixture as backend `mb`, restarted only after a minute once it
/// crashes (so it stays down for the test).
fn mb_down_after_crash() -> BackendSpec {
    python_fixture("mb", "misbehaving_server.py")
        .set(r#"restart = { initial_backoff = "60s", max_backoff = "60s" }"#)
}

#[tokio::test]
async fn a_backend_down_at_list_time_keeps_its_last_good_entries_and_fails_fast() {
    let g = gantry()
        .backend(example().named("one"))
        .backend(mb_down_after_crash())
        .start();
    let mut c = g.client();
    c.initialize().await;
    let (before, _) = walk(&c, "tools/list", "tools").await;
    assert!(
        names(&before).contains(&"mb__echo".to_owned()),
        "{:?}",
        names(&before)
    );
    let crashed = c.call_tool(json!(1), "mb__crash", json!({})).await;
    assert!(crashed["error"].is_object(), "{crashed}");
    // Down: its tools are still listed, and a call fails at once, naming it.
    let (after, _) = walk(&c, "tools/list", "tools").await;
    assert_eq!(names(&after), names(&before));
    let started = std::time::Instant::now();
    let r = c
        .call_tool(json!(2), "mb__echo", json!({"message": "x"}))
        .await;
    assert_rpc_error(&r, -32000, Some("mb"));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "not fast: {r}"
    );
    assert!(
        metric_until(
            &g,
            "gantry_catalog_fallbacks_total{backend=\"mb\",served=\"last_good\"}",
            |n| n >= 1.0
        )
        .await
    );
}

#[tokio::test]
async fn a_backend_down_at_list_time_is_omitted_when_so_configured_and_the_session_is_told() {
    let g = gantry()
        .backend(example().named("one"))
        .backend(mb_down_after_crash())
        .section("[catalog]\non_unavailable = \"omit\"")
        .start();
    let mut c = g.client();
    c.initialize().await;
    let mut stream = SseReader::new(c.open_get().await);
    let (before, _) = walk(&c, "tools/list", "tools").await;
    assert!(names(&before).contains(&"mb__echo".to_owned()));
    c.call_tool(json!(1), "mb__crash", json!({})).await;
    let told = list_changes(&mut stream, std::time::Duration::from_secs(2)).await;
    assert_eq!(told, ["notifications/tools/list_changed"]);
    let (after, _) = walk(&c, "tools/list", "tools").await;
    let after = names(&after);
    assert!(!after.iter().any(|n| n.starts_with("mb__")), "{after:?}");
    assert!(after.contains(&"one__echo".to_owned()), "{after:?}");
}

#[tokio::test]
async fn a_slow_backend_does_not_hold_the_list_past_the_deadline() {
    let g = gantry()
        .backend(example().named("one"))
        .backend(python_fixture("mb", "misbehaving_server.py").env("MB_LIST_DELAY", "3"))
        .section("[catalog]\ndeadline = \"300ms\"")
        .start();
    let mut c = g.client();
    c.initialize().await;
    let mut stream = SseReader::new(c.open_get().await);
    let started = std::time::Instant::now();
    let (first, _) = walk(&c, "tools/list", "tools").await;
    let waited = started.elapsed();
    let first = names(&first);
    assert!(
        waited < std::time::Duration::from_secs(2),
        "waited {waited:?}"
    );
    assert!(first.contains(&"one__echo".to_owned()), "{first:?}");
    assert!(!first.iter().any(|n| n.starts_with("mb__")), "{first:?}");
    // Its list still comes, fills the cache, and the session is told.
    let told = list_changes(&mut stream, std::time::Duration::from_millis(4500)).await;
    assert_eq!(told, ["notifications/tools/list_changed"]);
    let started = std::time::Instant::now();
    let (second, _) = walk(&c, "tools/list", "tools").await;
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert!(
        names(&second).contains(&"mb__echo".to_owned()),
        "{:?}",
        names(&second)
    );
}

#[tokio::test]
async fn one_backend_with_a_policy_is_shaped_by_it_under_its_own_names() {
    let scratch = Scratch::new("catalog-single");
    let rec = scratch.file("only.jsonl");
    let g = gantry()
        .backend(
            example()
                .named("only")
                .record(&rec)
                .set(r#"tools = { deny = ["slow", "test_*"], rename = { echo = "say" } }"#),
        )
        .start();
    let mut c = g.client();
    let init = c.initialize().await;
    // Still the backend's own identity.
    assert_ne!(init["result"]["serverInfo"]["name"], "gantry", "{init}");
    let (items, _) = walk(&c, "tools/list", "tools").await;
    let got = names(&items);
    assert!(got.contains(&"say".to_owned()), "{got:?}");
    assert!(
        got.contains(&"json_schema_2020_12_tool".to_owned()),
        "{got:?}"
    );
    assert!(
        !got.iter()
            .any(|n| n == "slow" || n == "echo" || n.starts_with("test_")),
        "{got:?}"
    );
    let said = c
        .call_tool(json!(1), "say", json!({"message": "one"}))
        .await;
    assert_eq!(text_of(&said), "one", "{said}");
    for (id, hidden) in [(2, "slow"), (3, "echo"), (4, "test_simple_text")] {
        let r = c
            .call_tool(json!(id), hidden, json!({"message": "x", "ms": 1}))
            .await;
        error_says(&r, -32602, &format!("unknown tool: {hidden}"));
    }
    let calls = tools_called(&rec);
    assert_eq!(
        calls,
        [json!("echo")],
        "hidden tools must not reach the backend"
    );
}

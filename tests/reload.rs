//! Hot reload: on SIGHUP (or a changed file, with `server.watch_config`) Gantry
//! applies a new configuration's backends while a client session stays open and
//! keeps calling — a backend added, one changed, one removed (its call in flight
//! finishes), one untouched (the same process serves on) — and a file that does
//! not load changes nothing.

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
use std::time::Duration;

fn text_of(resp: &Value) -> String {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {resp}"))
        .to_owned()
}

async fn tool_names(c: &Client, id: &str) -> Vec<String> {
    let r = c.request(json!(id), "tools/list", json!({})).await;
    r.response(&json!(id))
        .unwrap_or_else(|| panic!("{}", r.raw))["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", r.raw))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Lists tools until `pred` holds (at most 10 s).
async fn tools_until(c: &Client, pred: impl Fn(&[String]) -> bool) -> Vec<String> {
    for i in 0..200 {
        let names = tool_names(c, &format!("poll-{i}")).await;
        if pred(&names) {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the tools never became what was expected");
}

fn mb() -> BackendSpec {
    python_fixture("mb", "misbehaving_server.py")
}

#[tokio::test]
async fn a_reload_adds_changes_and_removes_backends_while_a_session_keeps_calling() {
    let before = gantry()
        .backend(mb())
        .backend(example().named("two"))
        .backend(example().named("gone"));
    let g = before.clone().start();
    let mut c = g.client();
    c.initialize().await;
    let mut stream = SseReader::new(c.open_get().await);
    let names = tool_names(&c, "l1").await;
    assert!(names.contains(&"gone__echo".to_owned()), "{names:?}");
    let pid = text_of(&c.call_tool(json!(1), "mb__pid", json!({})).await);
    let env = c
        .call_tool(json!(2), "two__echo", json!({"message": "before"}))
        .await;
    assert_eq!(text_of(&env), "before");

    // A call on the backend about to go is in flight during the reload.
    let slow = c.call_tool(json!(3), "gone__slow", json!({"ms": 1500}));
    let reload = async {
        // Once the call is in flight.
        assert!(metric_until(&g, "gantry_calls_in_flight", |n| n >= 1.0).await);
        let after = gantry()
            .backend(mb())
            .backend(example().named("two").set("tools = { deny = [\"slow\"] }"))
            .backend(example().named("three"));
        g.reload(&after.toml());
    };
    let (slow, ()) = tokio::join!(slow, reload);
    assert!(
        slow["result"].is_object() && slow["result"]["isError"] != true,
        "the call in flight on the removed backend must finish: {slow}"
    );

    let names = tools_until(&c, |n| n.iter().any(|t| t.starts_with("three__"))).await;
    assert!(!names.iter().any(|t| t.starts_with("gone__")), "{names:?}");
    assert!(names.contains(&"two__echo".to_owned()), "{names:?}");
    assert!(
        !names.contains(&"two__slow".to_owned()),
        "two's new policy: {names:?}"
    );
    // The session heard of it.
    let mut told = false;
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    while let Next::Event(e) = stream.next(end).await {
        if e.data.contains("notifications/tools/list_changed") {
            told = true;
            break;
        }
    }
    assert!(
        told,
        "no tools/list_changed after the reload: {}",
        stream.raw
    );
    // The same session calls on: the untouched backend is the same process, the
    // new and the changed ones answer, the removed one is unknown.
    let same = text_of(&c.call_tool(json!(4), "mb__pid", json!({})).await);
    assert_eq!(same, pid, "the untouched backend was restarted");
    let r = c
        .call_tool(json!(5), "three__echo", json!({"message": "new"}))
        .await;
    assert_eq!(text_of(&r), "new", "{r}");
    let r = c
        .call_tool(json!(6), "two__echo", json!({"message": "changed"}))
        .await;
    assert_eq!(text_of(&r), "changed", "{r}");
    let r = c.call_tool(json!(7), "two__slow", json!({"ms": 1})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = c
        .call_tool(json!(8), "gone__echo", json!({"message": "x"}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // The removed backend's process has stopped.
    let gantry_pid = g.pid();
    let stopped = poll_until(Duration::from_secs(15), || {
        (children_of(gantry_pid).len() == 3).then_some(())
    })
    .await;
    assert!(stopped.is_some(), "{:?}", children_of(gantry_pid));
    // A new session sees the new configuration.
    let mut fresh = g.client();
    fresh.initialize().await;
    let names = tool_names(&fresh, "l2").await;
    assert!(names.contains(&"three__echo".to_owned()), "{names:?}");
    assert!(!names.iter().any(|t| t.starts_with("gone__")), "{names:?}");
}

#[tokio::test]
async fn a_reload_with_an_invalid_file_keeps_the_running_configuration() {
    let spec = gantry().backend(example().named("one")).backend(mb());
    let g = spec.clone().start();
    let mut c = g.client();
    c.initialize().await;
    g.reload("[[backends]]\nname = \"broken\"\nstdio = { command = 42 }\n");
    // Time for the reload to be tried (and refused).
    assert!(g.wait_log("not valid", Duration::from_secs(5)));
    let names = tool_names(&c, "l").await;
    assert!(names.contains(&"one__echo".to_owned()), "{names:?}");
    let r = c
        .call_tool(json!(1), "one__echo", json!({"message": "still"}))
        .await;
    assert_eq!(text_of(&r), "still");
    let mut other = g.client();
    other.initialize().await;
    assert!(tool_names(&other, "l2")
        .await
        .contains(&"mb__echo".to_owned()));
}

#[tokio::test]
async fn watch_config_reloads_when_the_file_changes() {
    let g = gantry()
        .server("watch_config = true")
        .backend(example().named("one"))
        .backend(mb())
        .start();
    let mut c = g.client();
    c.initialize().await;
    let after = gantry()
        .server("watch_config = true")
        .backend(example().named("one"))
        .backend(mb())
        .backend(example().named("three"));
    std::fs::write(g.config_path(), after.toml()).unwrap();
    tools_until(&c, |n| n.contains(&"three__echo".to_owned())).await;
}

#[test]
fn check_config_shows_what_a_reload_would_change() {
    let scratch = Scratch::new("reload-diff");
    let (old, new) = (scratch.file("old.toml"), scratch.file("new.toml"));
    std::fs::write(
        &old,
        gantry()
            .backend(example().named("one"))
            .backend(example().named("two"))
            .toml(),
    )
    .unwrap();
    std::fs::write(
        &new,
        gantry()
            .server("max_sessions = 7")
            .backend(example().named("one"))
            .backend(example().named("two").set("prefix = \"b\""))
            .backend(example().named("three"))
            .toml(),
    )
    .unwrap();
    let out = std::process::Command::new(gantry_bin())
        .arg("check-config")
        .arg(&new)
        .arg("--against")
        .arg(&old)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("added: three; changed: two; removed: none; unchanged: one"),
        "{stdout}"
    );
    assert!(
        stdout.contains("needs restart to take effect: server"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_reload_applies_new_keys_and_limits_at_once() {
    let g = gantry()
        .api_key("alice", "k1")
        .backend(example().named("one"))
        .backend(mb())
        .start();
    let mut old = g.bearer("k1");
    old.initialize().await;
    let r = old
        .call_tool(json!(1), "one__echo", json!({"message": "a"}))
        .await;
    assert_eq!(text_of(&r), "a");
    let after = gantry()
        .section(
            "[[limits.rules]]\nname = \"calls\"\nrate = \"1/m\"\nmethods = [\"tools/call\"]\nkey = [\"principal\"]\n",
        )
        .api_key("alice", "k2")
        .backend(example().named("one"))
        .backend(mb());
    g.reload(&after.toml());
    // The old key stops working; the new one works, under the new limit.
    let mut refused = false;
    for _ in 0..200 {
        let r = old
            .post(&json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}))
            .await;
        if r.status == 401 {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "the removed key still works after the reload");
    let mut new = g.bearer("k2");
    new.initialize().await;
    let first = new
        .call_tool(json!(1), "one__echo", json!({"message": "b"}))
        .await;
    assert_eq!(text_of(&first), "b", "{first}");
    let second = new
        .call_tool(json!(2), "one__echo", json!({"message": "c"}))
        .await;
    assert_eq!(second["error"]["code"], -32029, "the new limit: {second}");
}

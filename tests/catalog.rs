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

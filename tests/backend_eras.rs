//! Backends of the stateless era (2026-07-28) behind Gantry: detection, per-request
//! `_meta`, `input_required` translated for session-era clients and relayed (sealed)
//! to stateless-era ones, list changes from the backend's listen stream. The backend
//! is `tests/fixtures/stateless_server.py`, a real process that refuses anything
//! without 2026 `_meta`.

// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::{
    call_answering, fixture, metric_until, recorded, sha256_hex, text_of, Client, Gantry, Scratch,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const PROMPT: Duration = Duration::from_secs(10);

fn stateless_backend(record: &std::path::Path, extra: &str) -> Gantry {
    Gantry::with_config(&format!(
        "{extra}\n[[backends]]\nname = \"modern\"\n\
         stdio = {{ command = \"python3\", args = [{:?}], env = {{ MB_RECORD = {:?} }} }}\n",
        fixture("stateless_server.py").to_str().unwrap(),
        record.to_str().unwrap()
    ))
}

#[tokio::test]
async fn a_stateless_backend_is_detected_and_told_the_client_on_every_request() {
    let dir = Scratch::new("detect");
    let record = dir.0.join("received.jsonl");
    let g = stateless_backend(&record, "");
    let mut c = g.client();
    let init = c
        .initialize_with(json!({"elicitation": {}, "roots": {}}))
        .await;
    assert_eq!(
        init["result"]["serverInfo"]["name"], "stateless-fixture",
        "{init}"
    );

    let r = c
        .call_tool(json!(1), "echo", json!({"message": "hi"}))
        .await;
    assert_eq!(text_of(&r), "hi", "{r}");
    // Session-era clients see session-era results.
    assert!(r["result"].get("resultType").is_none(), "{r}");
    let r = c.call_tool(json!(2), "caps", json!({})).await;
    let caps: Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert_eq!(
        caps,
        json!({"elicitation": {}, "roots": {}}),
        "the session's own capabilities"
    );

    // A session-era client's connection offers the session era first; refused, it
    // falls back to the stateless era (and later connections know it at once).
    let msgs = recorded(&record);
    let handshakes: Vec<&str> = msgs
        .iter()
        .filter_map(|m| m["method"].as_str())
        .filter(|m| *m == "initialize" || *m == "server/discover")
        .collect();
    assert_eq!(handshakes, ["initialize", "server/discover"], "{msgs:?}");
    let mut second = g.client();
    second.initialize().await;
    let again: Vec<String> = recorded(&record)
        .iter()
        .filter_map(|m| m["method"].as_str().map(str::to_owned))
        .filter(|m| m == "initialize" || m == "server/discover")
        .collect();
    assert_eq!(
        again,
        ["initialize", "server/discover", "server/discover"],
        "the backend's era is remembered"
    );
    let call = msgs
        .iter()
        .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "echo")
        .unwrap();
    let meta = &call["params"]["_meta"];
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
        "{call}"
    );
    // ping and setLevel are answered by Gantry: the stateless era has neither.
    assert_eq!(c.request(json!(3), "ping", json!({})).await.status, 200);
    let r = c
        .request(json!(4), "logging/setLevel", json!({"level": "info"}))
        .await;
    assert!(
        r.response(&json!(4)).unwrap().get("error").is_none(),
        "{}",
        r.raw
    );
    assert!(recorded(&record)
        .iter()
        .all(|m| m["method"] != "ping" && m["method"] != "logging/setLevel"));
}

#[tokio::test]
async fn a_stateless_clients_meta_reaches_a_stateless_backend_as_declared() {
    let dir = Scratch::new("meta");
    let record = dir.0.join("received.jsonl");
    let keys = format!(
        "[[auth.api_keys]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n",
        sha256_hex("alice-key")
    );
    let g = stateless_backend(&record, &keys);
    let args = r#"{"message":  "hi",  "n": 1.50}"#;
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{args},"_meta":{{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {{ "roots" : {{"listChanged": true}},
                "elicitation":{{ "form": {{}} }} }},
            "io.modelcontextprotocol/clientInfo":{{"name":"probe","version":"1"}},
            "io.modelcontextprotocol/logLevel":"error",
            "example.com/tag":"t1"}}}}}}"#
    );
    let r = post_stateless_call(&g, "alice-key", "echo", 1, body).await;
    assert_eq!(text_of(&r), "hi", "{r}");
    let call = recorded(&record)
        .into_iter()
        .find(|m| m["method"] == "tools/call")
        .unwrap();
    // Every key of the client's `_meta` arrives, with the values it declared.
    assert_eq!(
        call["params"]["_meta"],
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":
                {"roots": {"listChanged": true}, "elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
            "io.modelcontextprotocol/logLevel": "error",
            "example.com/tag": "t1",
        }),
        "{call}"
    );
    assert_eq!(
        call["params"]["arguments"],
        json!({"message": "hi", "n": 1.5})
    );
}

#[tokio::test]
async fn a_session_client_answers_a_stateless_backends_input_request_as_a_server_request() {
    let dir = Scratch::new("mrtr");
    let record = dir.0.join("received.jsonl");
    let g = stateless_backend(&record, "");
    let mut c = g.client();
    c.initialize_with(json!({"elicitation": {}})).await;
    let answer = json!({"action": "accept", "content": {"text": "blue"}});
    let (asked, resp) = tokio::time::timeout(
        PROMPT,
        call_answering(
            &c,
            json!("q"),
            "ask",
            json!({"question": "Colour?"}),
            answer,
        ),
    )
    .await
    .unwrap();
    // The client saw one ordinary elicitation request, then the call's result.
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["method"], "elicitation/create");
    assert_eq!(asked[0]["params"]["message"], "Colour?");
    assert_eq!(resp["id"], "q");
    assert_eq!(
        text_of(&resp),
        "answer: {\"action\": \"accept\", \"content\": {\"text\": \"blue\"}}",
        "{resp}"
    );
    assert!(resp["result"].get("resultType").is_none(), "{resp}");
    // The backend got the retry with the answer and its own state echoed.
    let retry = recorded(&record)
        .into_iter()
        .find(|m| m["method"] == "tools/call" && m["params"].get("inputResponses").is_some())
        .unwrap();
    assert_eq!(retry["params"]["requestState"], "s1:Colour?", "{retry}");

    // A session that did not declare elicitation gets a clear error, nobody is asked.
    let mut plain = g.client();
    plain.initialize().await;
    let (asked, resp) =
        call_answering(&plain, json!(1), "ask", json!({"question": "?"}), json!({})).await;
    assert!(asked.is_empty());
    assert!(
        resp["error"]["message"]
            .as_str()
            .unwrap()
            .contains("elicitation"),
        "{resp}"
    );
}

/// A stateless-era client of a stateless-era backend.
async fn stateless_call(g: &Gantry, key: &str, id: i64, args: Value, extra: Value) -> Value {
    let mut params = json!({"name": "ask", "arguments": args, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    }});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    post_stateless_call(g, key, "ask", id, body.to_string()).await
}

/// POSTs `body`, a stateless-era `tools/call` of `tool` with id `id`, as the caller
/// of API key `key`; the response to it.
async fn post_stateless_call(g: &Gantry, key: &str, tool: &str, id: i64, body: String) -> Value {
    let resp = reqwest::Client::new()
        .post(&g.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .bearer_auth(key)
        .body(body)
        .send()
        .await
        .unwrap();
    let r = Client::read(resp).await;
    r.response(&json!(id))
        .cloned()
        .unwrap_or_else(|| panic!("{}", r.raw))
}

#[tokio::test]
async fn a_stateless_backends_request_state_is_sealed_for_its_caller() {
    let dir = Scratch::new("sealed");
    let record = dir.0.join("received.jsonl");
    let keys = format!(
        "[[auth.api_keys]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n\
         [[auth.api_keys]]\nprincipal = \"bob\"\nsha256 = \"{}\"\n",
        sha256_hex("alice-key"),
        sha256_hex("bob-key")
    );
    let g = stateless_backend(&record, &keys);
    let args = json!({"question": "Name?"});
    let first = stateless_call(&g, "alice-key", 1, args.clone(), json!({})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["answer"]["method"],
        "elicitation/create"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    assert_ne!(
        state, "s1:Name?",
        "the backend's state is not handed out as is"
    );

    let answer =
        json!({"inputResponses": {"answer": {"action": "accept", "content": {"text": "Ada"}}}});
    let with_state = |s: &str| {
        let mut a = answer.clone();
        a["requestState"] = json!(s);
        a
    };
    let r = stateless_call(&g, "bob-key", 2, args.clone(), with_state(&state)).await;
    assert_eq!(r["error"]["code"], -32602, "another principal: {r}");
    let r = stateless_call(
        &g,
        "alice-key",
        3,
        args.clone(),
        with_state(&format!("{state}x")),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "tampered: {r}");
    let r = stateless_call(&g, "alice-key", 4, args.clone(), with_state(&state)).await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert!(text_of(&r).contains("Ada"), "{r}");
    // The backend calls its tool list public; with callers told apart, it is not.
    let resp = reqwest::Client::new()
        .post(&g.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .bearer_auth("bob-key")
        .body(
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let list = Client::read(resp).await;
    let list = &list.response(&json!(9)).unwrap()["result"];
    assert_eq!(list["cacheScope"], "private", "{list}");
    assert_eq!(list["resultType"], "complete", "{list}");
    // The backend only ever saw its own state.
    let states: Vec<Value> = recorded(&record)
        .into_iter()
        .filter_map(|m| m["params"].get("requestState").cloned())
        .collect();
    assert_eq!(states, [json!("s1:Name?")], "{states:?}");
}

#[tokio::test]
async fn list_changes_from_a_stateless_backend_reach_session_clients() {
    let dir = Scratch::new("listen");
    let record = dir.0.join("received.jsonl");
    let g = stateless_backend(&record, "");
    let mut c = g.client();
    c.initialize().await;
    // The listen Gantry keeps open on the backend.
    let deadline = Instant::now() + PROMPT;
    while !recorded(&record)
        .iter()
        .any(|m| m["method"] == "subscriptions/listen")
    {
        assert!(Instant::now() < deadline, "no listen reached the backend");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut get = common::SseReader::new(c.open_get().await);
    let r = c.call_tool(json!(1), "change", json!({})).await;
    assert_eq!(text_of(&r), "changed");
    let got = get
        .message_where(common::deadline(10), |m| {
            m["method"] == "notifications/tools/list_changed"
        })
        .await;
    assert!(got.get("id").is_none(), "{got}");
    // Gantry's listen is its own: not a client request waiting on the backend.
    assert!(
        metric_until(
            &g,
            "gantry_backend_pending_requests{backend=\"modern\"}",
            |n| n == 0.0
        )
        .await
    );
}

#[tokio::test]
async fn a_session_clients_subscription_to_a_stateless_backend_is_in_force_when_answered() {
    // The subscription travels on the listen stream Gantry keeps on the backend:
    // `resources/subscribe` returns once the backend acknowledged the stream that
    // carries it, so an update the client causes right after reaches it.
    let dir = Scratch::new("subscribe");
    let record = dir.0.join("received.jsonl");
    // The backend's listen streams take effect 200 ms after they arrive (as over
    // HTTP, once the stream is set up); the calls in between are served at once.
    let g = Gantry::with_config(&format!(
        "[[backends]]\nname = \"modern\"\n\
         stdio = {{ command = \"python3\", args = [{:?}], env = {{ MB_RECORD = {:?}, MB_LISTEN_DELAY_MS = \"200\" }} }}\n",
        fixture("stateless_server.py").to_str().unwrap(),
        record.to_str().unwrap()
    ));
    let mut c = g.client();
    c.initialize().await;
    let mut get = common::SseReader::new(c.open_get().await);
    for i in 0..3 {
        let uri = format!("test://r{i}");
        let r = c
            .request(json!(100 + i), "resources/subscribe", json!({"uri": uri}))
            .await;
        assert!(
            r.response(&json!(100 + i)).unwrap()["result"].is_object(),
            "{}",
            r.raw
        );
        let t = c.call_tool(json!(i), "touch", json!({"uri": uri})).await;
        // At least one listen stream carries it. While Gantry replaces its listen
        // stream (the new one opened before the old one ends, so nothing is missed
        // in between), the backend may briefly count both.
        let listeners: u32 = text_of(&t)
            .strip_prefix("touched ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected touch answer: {t}"));
        assert!(listeners >= 1, "the backend had no listener for {uri}");
        get.message_where(common::deadline(10), |m| {
            m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri.as_str()
        })
        .await;
    }
}

#[tokio::test]
async fn a_session_era_http_backend_is_detected_and_serves_both_eras_of_clients() {
    // The example server over HTTP, refusing the stateless era (a pre-2026 server).
    let backend = common::HttpServer::example(&["--session-era-only"]);
    let g = Gantry::start(&["--http", &backend.url]);
    // A session-era client, as before.
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .call_tool(json!(1), "echo", json!({"message": "old"}))
        .await;
    assert_eq!(text_of(&r), "old", "{r}");
    // A stateless-era client: its call's elicitation comes back as input_required.
    let call = |id: i64, extra: Value| {
        let mut params = json!({"name": "test_elicitation", "arguments": {"message": "Name?"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        reqwest::Client::new()
            .post(&g.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "test_elicitation")
            .body(
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
                    .to_string(),
            )
            .send()
    };
    let r = Client::read(call(2, json!({})).await.unwrap()).await;
    let first = r.response(&json!(2)).unwrap()["result"].clone();
    assert_eq!(first["resultType"], "input_required", "{}", r.raw);
    let (key, _) = first["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let retry = json!({
        "inputResponses": {key.clone(): {"action": "accept", "content": {"username": "ada", "email": "a@b.c"}}},
        "requestState": first["requestState"],
    });
    let r = Client::read(call(3, retry).await.unwrap()).await;
    let done = r.response(&json!(3)).unwrap();
    assert!(text_of(done).contains("ada"), "{}", r.raw);
}

#[tokio::test]
async fn a_backend_that_dies_of_the_probe_is_restarted_and_never_probed_again() {
    let dir = Scratch::new("probe-death");
    let record = dir.0.join("received.jsonl");
    let g = Gantry::with_config(&format!(
        "[[backends]]\nname = \"old\"\nsession_mode = \"per-session\"\n\
         restart = {{ initial_backoff = \"50ms\" }}\n\
         stdio = {{ command = \"python3\", args = [{:?}], \
         env = {{ MB_RECORD = {:?}, MB_DIE_ON_DISCOVER = \"1\" }} }}\n",
        fixture("misbehaving_server.py").to_str().unwrap(),
        record.to_str().unwrap()
    ));
    let handshakes = || -> Vec<String> {
        recorded(&record)
            .iter()
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .filter(|m| m == "server/discover" || m == "initialize")
            .collect()
    };
    // A stateless-era caller's connection probes with server/discover; the process
    // dies of it and is started again at once with initialize, without a failure.
    let s = common::Stateless::new(&g);
    let r = s
        .call(json!(1), "echo", json!({"message": "ok"}), json!({}))
        .await;
    assert_eq!(text_of(r.response(&json!(1)).unwrap()), "ok", "{}", r.raw);
    // (The caller is anonymous: its route keeps one connection of Gantry's own, and
    // each request gets one of its own: the listing of the tools' headers, the call.)
    assert_eq!(
        handshakes(),
        ["server/discover", "initialize", "initialize", "initialize"]
    );
    // Later connections, of either era, are never probed again.
    let r = s
        .call(json!(2), "echo", json!({"message": "ok"}), json!({}))
        .await;
    assert_eq!(text_of(r.response(&json!(2)).unwrap()), "ok", "{}", r.raw);
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .call_tool(json!(3), "echo", json!({"message": "ok"}))
        .await;
    assert_eq!(text_of(&r), "ok", "{r}");
    assert_eq!(
        handshakes(),
        [
            "server/discover",
            "initialize",
            "initialize",
            "initialize",
            "initialize",
            "initialize"
        ]
    );
}

//! The stateless era (2026-07-28) on Gantry's endpoint, in front of session-era
//! backends: validation, discover, result shaping, multi-round-trip requests
//! translated from a backend's server→client requests, and close-to-cancel. Real
//! `gantry`, real backend processes, real HTTP.

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
    example_bin, fixture, metric, metric_until, recorded, sha256_hex, stateless_meta as meta,
    text_of, Gantry, Listen, Reply, Stateless,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const V: &str = common::STATELESS_VERSION;
const PROMPT: Duration = Duration::from_secs(10);

fn the_response(r: &Reply, id: &Value) -> Value {
    r.response(id)
        .cloned()
        .unwrap_or_else(|| panic!("no response with id {id}: {} {}", r.status, r.raw))
}

fn error_code(r: &Reply, id: &Value) -> i64 {
    the_response(r, id)["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {}", r.raw))
}

async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PROMPT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PROMPT:?}"))
}

#[tokio::test]
async fn requests_are_checked_in_the_specified_order_with_the_specified_errors() {
    let g = Gantry::example_stdio();
    let c = Stateless::new(&g);
    let discover = |id: i64, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": params});

    // No MCP-Protocol-Version header, modern _meta: header mismatch.
    let rb = c
        .http
        .post(&g.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-method", "server/discover");
    let r = c
        .send(rb, discover(1, json!({"_meta": meta(json!({}))})))
        .await;
    assert_eq!(
        (r.status, error_code(&r, &json!(1))),
        (400, -32020),
        "{}",
        r.raw
    );

    // Header present, _meta missing or incomplete: invalid params (before any mismatch).
    for (id, params) in [
        (2, json!({})),
        (
            3,
            json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
        ),
        (
            4,
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V}}),
        ),
    ] {
        let r = c
            .send(c.builder("server/discover", None), discover(id, params))
            .await;
        assert_eq!(
            (r.status, error_code(&r, &json!(id))),
            (400, -32602),
            "{}",
            r.raw
        );
    }

    // Header and _meta disagree: mismatch, even though _meta's version is unknown.
    let mut m = meta(json!({}));
    m["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let r = c
        .send(
            c.builder("server/discover", None),
            discover(5, json!({"_meta": m.clone()})),
        )
        .await;
    assert_eq!(
        (r.status, error_code(&r, &json!(5))),
        (400, -32020),
        "{}",
        r.raw
    );

    // Both name an unknown version: unsupported, with what is supported.
    let rb = c.builder_for("v999.0.0", "server/discover", None);
    let r = c.send(rb, discover(6, json!({"_meta": m}))).await;
    assert_eq!(
        (r.status, error_code(&r, &json!(6))),
        (400, -32022),
        "{}",
        r.raw
    );
    let data = &the_response(&r, &json!(6))["error"]["data"];
    assert_eq!(data["requested"], "v999.0.0");
    let supported: Vec<&str> = data["supported"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        supported.contains(&V) && supported.contains(&"2025-11-25"),
        "{supported:?}"
    );

    // Mcp-Method and Mcp-Name must agree with the body.
    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "echo", "arguments": {"message": "x"}, "_meta": meta(json!({}))}})
    };
    let r = c.send(c.builder("tools/list", Some("echo")), call(7)).await;
    assert_eq!(
        (r.status, error_code(&r, &json!(7))),
        (400, -32020),
        "{}",
        r.raw
    );
    let r = c.send(c.builder("TOOLS/CALL", Some("echo")), call(8)).await;
    assert_eq!(
        (r.status, error_code(&r, &json!(8))),
        (400, -32020),
        "{}",
        r.raw
    );
    let r = c.send(c.builder("tools/call", None), call(9)).await;
    assert_eq!(
        (r.status, error_code(&r, &json!(9))),
        (400, -32020),
        "{}",
        r.raw
    );
    let r = c
        .send(c.builder("tools/call", Some("other")), call(10))
        .await;
    assert_eq!(
        (r.status, error_code(&r, &json!(10))),
        (400, -32020),
        "{}",
        r.raw
    );
    let r = c
        .send(c.builder("tools/call", Some("=?base64?ZWNobw?=")), call(11))
        .await;
    assert_eq!(
        (r.status, error_code(&r, &json!(11))),
        (400, -32020),
        "bad padding: {}",
        r.raw
    );
    let rb = c
        .http
        .post(&g.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("MCP-PROTOCOL-VERSION", V)
        .header("mcp-method", "tools/call")
        .header("Mcp-Name", "  echo  ");
    let r = c.send(rb, call(12)).await;
    assert_eq!(
        text_of(&the_response(&r, &json!(12))),
        "x",
        "trimmed name: {}",
        r.raw
    );
    let r = c
        .send(
            c.builder("tools/call", Some("=?base64?ZWNobw==?=")),
            call(13),
        )
        .await;
    assert_eq!(
        text_of(&the_response(&r, &json!(13))),
        "x",
        "base64 name: {}",
        r.raw
    );

    // Methods the era removed, and unknown ones: 404 with -32601, the request's id.
    for (id, method) in [
        (20, "initialize"),
        (21, "ping"),
        (22, "logging/setLevel"),
        (23, "resources/subscribe"),
        (24, "resources/unsubscribe"),
        (25, "unknown/method"),
    ] {
        let r = c.request(json!(id), method, json!({}), json!({})).await;
        assert_eq!(
            (r.status, error_code(&r, &json!(id))),
            (404, -32601),
            "{method}: {}",
            r.raw
        );
    }
    g.client().initialize().await; // the gateway is still fine for session-era clients
}

#[tokio::test]
async fn discover_and_results_carry_the_era_fields_and_session_clients_are_unchanged() {
    let g = Gantry::example_stdio();
    let c = Stateless::new(&g);
    let r = c
        .request(json!(1), "server/discover", json!({}), json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let d = &the_response(&r, &json!(1))["result"];
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["supportedVersions"][0], V);
    assert!(d["capabilities"]["tools"].is_object(), "{d}");
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "gantry"
    );
    assert!(
        d["ttlMs"].as_u64().is_some() && d["cacheScope"] == "public",
        "{d}"
    );

    let r = c
        .request(json!("l"), "tools/list", json!({}), json!({}))
        .await;
    let l = &the_response(&r, &json!("l"))["result"];
    assert_eq!(l["resultType"], "complete");
    assert!(l["ttlMs"].is_u64() && l["cacheScope"].is_string(), "{l}");
    assert!(l["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "echo"));

    let r = c
        .call(json!(2), "echo", json!({"message": "hello"}), json!({}))
        .await;
    let resp = the_response(&r, &json!(2));
    assert_eq!(text_of(&resp), "hello");
    assert_eq!(resp["result"]["resultType"], "complete");
    assert!(
        resp["result"].get("ttlMs").is_none(),
        "tools/call is not cacheable: {resp}"
    );

    // A missing resource is -32602 naming the URI in this era.
    let uri = "test://nonexistent-resource-for-conformance-testing";
    let r = c
        .request(json!(3), "resources/read", json!({"uri": uri}), json!({}))
        .await;
    let e = &the_response(&r, &json!(3))["error"];
    assert_eq!(e["code"], -32602, "{e}");

    // Session-era clients on the same URL see the session era, untouched.
    let mut s = g.client();
    s.initialize().await;
    let resp = s
        .call_tool(json!(1), "echo", json!({"message": "old"}))
        .await;
    assert_eq!(text_of(&resp), "old");
    assert!(resp["result"].get("resultType").is_none(), "{resp}");
}

#[tokio::test]
async fn progress_streams_and_logs_only_when_asked() {
    progress_and_logs(&Gantry::example_stdio()).await;
}

/// The same through a stateless-era HTTP backend, whose notifications and result
/// can all come in one read of its response stream.
#[tokio::test]
async fn a_stateless_http_backends_progress_and_logs_reach_the_client() {
    let backend = common::HttpServer::start(&example_bin(), &[], &[]);
    let g = Gantry::with_config(&format!(
        "[[backends]]\nname = \"example\"\nhttp = {{ url = {:?} }}\n",
        backend.url
    ));
    progress_and_logs(&g).await;
}

async fn progress_and_logs(g: &Gantry) {
    let c = Stateless::new(g);
    let mut params = json!({"name": "test_tool_with_progress", "arguments": {}});
    params["_meta"] = json!({"progressToken": "p-1"});
    let r = bounded(
        "progress",
        c.request(json!(1), "tools/call", params, json!({})),
    )
    .await;
    assert!(
        r.content_type().starts_with("text/event-stream"),
        "{}",
        r.raw
    );
    let progress: Vec<&Value> = r
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 3, "{}", r.raw);
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "p-1"),
        "{}",
        r.raw
    );
    assert_eq!(
        the_response(&r, &json!(1))["result"]["resultType"],
        "complete"
    );

    let logs = |r: &Reply| {
        r.messages
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .count()
    };
    let r = bounded(
        "no logs",
        c.call(json!(2), "test_tool_with_logging", json!({}), json!({})),
    )
    .await;
    assert_eq!(logs(&r), 0, "logs without _meta logLevel: {}", r.raw);
    assert!(
        the_response(&r, &json!(2))["result"].is_object(),
        "{}",
        r.raw
    );
    let mut params = json!({"name": "test_tool_with_logging", "arguments": {}});
    params["_meta"] = json!({"io.modelcontextprotocol/logLevel": "debug"});
    let r = bounded("logs", c.request(json!(3), "tools/call", params, json!({}))).await;
    assert!(logs(&r) > 0, "no logs with logLevel debug: {}", r.raw);
    let mut params = json!({"name": "echo", "arguments": {"message": "x"}});
    params["_meta"] = json!({"io.modelcontextprotocol/logLevel": "loud"});
    let r = c.request(json!(4), "tools/call", params, json!({})).await;
    assert_eq!(
        (r.status, error_code(&r, &json!(4))),
        (400, -32602),
        "{}",
        r.raw
    );
}

fn two_principals(extra_server: &str) -> Gantry {
    two_principals_recorded(extra_server, None)
}

/// Like [`two_principals`], the backend recording what it receives in `record`.
fn two_principals_recorded(extra_server: &str, record: Option<&std::path::Path>) -> Gantry {
    let env = record
        .map(|r| format!(", env = {{ MB_RECORD = {:?} }}", r.to_str().unwrap()))
        .unwrap_or_default();
    Gantry::with_config(&format!(
        "[server]\n{extra_server}\n\
         [[auth.api_keys]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n\
         [[auth.api_keys]]\nprincipal = \"bob\"\nsha256 = \"{}\"\n\
         [[backends]]\nname = \"example\"\n\
         stdio = {{ command = {:?}, args = [\"--session-era-only\"]{env} }}\n",
        sha256_hex("alice-key"),
        sha256_hex("bob-key"),
        example_bin().to_str().unwrap()
    ))
}

/// Asks `test_elicitation` (the backend sends `elicitation/create` mid-call); returns
/// the input request key and the request state.
async fn ask_for_input(c: &Stateless, id: Value) -> (String, String, Value) {
    let r = bounded(
        "first round",
        c.call(
            id.clone(),
            "test_elicitation",
            json!({"message": "Your name?"}),
            json!({"elicitation": {}}),
        ),
    )
    .await;
    let result = the_response(&r, &id)["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{}", r.raw);
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{result}");
    let (key, req) = requests.iter().next().unwrap();
    assert_eq!(req["method"], "elicitation/create", "{req}");
    assert_eq!(req["params"]["message"], "Your name?", "{req}");
    let state = result["requestState"].as_str().unwrap().to_owned();
    (key.clone(), state, req.clone())
}

fn retry_params(key: &str, state: &str, answer: Value) -> Value {
    json!({
        "name": "test_elicitation",
        "arguments": {"message": "Your name?"},
        "inputResponses": {key: answer},
        "requestState": state,
    })
}

#[tokio::test]
async fn a_session_era_backends_elicitation_becomes_a_multi_round_trip_request() {
    let g = two_principals("");
    let alice = Stateless::with_key(&g, "alice-key");
    let bob = Stateless::with_key(&g, "bob-key");
    let caps = json!({"elicitation": {}});

    let (key, state, _) = ask_for_input(&alice, json!(1)).await;
    assert!(metric_until(&g, "gantry_calls_awaiting_input", |v| v == 1.0).await);

    // Another principal cannot redeem alice's state; a tampered one is refused.
    let answer =
        json!({"action": "accept", "content": {"username": "alice", "email": "a@example.com"}});
    let r = bob
        .request(
            json!(2),
            "tools/call",
            retry_params(&key, &state, answer.clone()),
            caps.clone(),
        )
        .await;
    assert_eq!(error_code(&r, &json!(2)), -32602, "{}", r.raw);
    let tampered = format!("{state}-TAMPERED");
    let r = alice
        .request(
            json!(3),
            "tools/call",
            retry_params(&key, &tampered, answer.clone()),
            caps.clone(),
        )
        .await;
    assert_eq!(error_code(&r, &json!(3)), -32602, "{}", r.raw);
    // An answer that is not a result object is refused without using up the state.
    let r = alice
        .request(
            json!(4),
            "tools/call",
            retry_params(&key, &state, json!(12345)),
            caps.clone(),
        )
        .await;
    assert_eq!(error_code(&r, &json!(4)), -32602, "{}", r.raw);

    // The retry with the answer completes the backend's call, under the retry's id.
    let r = bounded(
        "retry",
        alice.request(
            json!("retry"),
            "tools/call",
            retry_params(&key, &state, answer.clone()),
            caps.clone(),
        ),
    )
    .await;
    let resp = the_response(&r, &json!("retry"));
    assert_eq!(resp["result"]["resultType"], "complete", "{}", r.raw);
    let text = text_of(&resp);
    assert!(
        text.contains("action=accept") && text.contains("a@example.com"),
        "{text}"
    );
    assert!(metric_until(&g, "gantry_calls_awaiting_input", |v| v == 0.0).await);

    // Replaying the state is refused.
    let r = alice
        .request(
            json!(5),
            "tools/call",
            retry_params(&key, &state, answer),
            caps.clone(),
        )
        .await;
    assert_eq!(error_code(&r, &json!(5)), -32602, "{}", r.raw);

    // A client that did not declare elicitation gets the era's error, at once.
    let r = bounded(
        "undeclared",
        alice.call(
            json!(6),
            "test_elicitation",
            json!({"message": "?"}),
            json!({}),
        ),
    )
    .await;
    assert_eq!(
        (r.status, error_code(&r, &json!(6))),
        (400, -32021),
        "{}",
        r.raw
    );
    let data = &the_response(&r, &json!(6))["error"]["data"];
    assert!(
        data["requiredCapabilities"]["elicitation"].is_object(),
        "{data}"
    );

    // Declining is an answer too.
    let (key, state, _) = ask_for_input(&bob, json!(7)).await;
    let r = bounded(
        "decline",
        bob.request(
            json!(8),
            "tools/call",
            retry_params(&key, &state, json!({"action": "decline"})),
            caps,
        ),
    )
    .await;
    assert!(
        text_of(&the_response(&r, &json!(8))).contains("action=decline"),
        "{}",
        r.raw
    );
}

#[tokio::test]
async fn an_unanswered_input_request_expires_and_its_call_is_cancelled() {
    let dir = common::Scratch::new("expiry");
    let record = dir.file("received.jsonl");
    let g = two_principals_recorded("input_timeout = \"1s\"", Some(&record));
    let alice = Stateless::with_key(&g, "alice-key");
    let (key, state, _) = ask_for_input(&alice, json!(1)).await;
    let parked = Instant::now();
    // The backend's call is cancelled upstream once the input timeout has passed
    // (not before it; the expiry sweep runs every second).
    let call_id = recorded(&record)
        .iter()
        .find(|m| m["method"] == "tools/call")
        .map(|m| m["id"].clone())
        .expect("the call reached the backend");
    let deadline = parked + Duration::from_secs(5);
    loop {
        let cancelled = recorded(&record).iter().any(|m| {
            m["method"] == "notifications/cancelled" && m["params"]["requestId"] == call_id
        });
        if cancelled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the expired call was not cancelled upstream"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        parked.elapsed() >= Duration::from_millis(900),
        "cancelled after {:?}, before the 1 s input timeout",
        parked.elapsed()
    );
    assert!(metric_until(&g, "gantry_calls_awaiting_input", |v| v == 0.0).await);
    let r = alice
        .request(
            json!(2),
            "tools/call",
            retry_params(
                &key,
                &state,
                json!({"action": "accept", "content": {"username": "a", "email": "b"}}),
            ),
            json!({"elicitation": {}}),
        )
        .await;
    let e = &the_response(&r, &json!(2))["error"];
    assert_eq!(e["code"], -32602, "{e}");
    assert!(e["message"].as_str().unwrap().contains("expired"), "{e}");
    // No call is left in flight.
    assert!(metric_until(&g, "gantry_calls_in_flight", |v| v == 0.0).await);
    assert_eq!(metric(&g, "gantry_calls_awaiting_input").await, Some(0.0));
}

#[tokio::test]
async fn closing_the_response_stream_cancels_the_call_upstream() {
    let dir = std::env::temp_dir().join(format!("gantry-stateless-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("received.jsonl");
    let _ = std::fs::remove_file(&record);
    let g = Gantry::recorded_misbehaving(&record);
    let c = Stateless::new(&g);
    let rb = c.builder("tools/call", Some("hang"));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "hang", "arguments": {}, "_meta": meta(json!({}))}});
    let pending = tokio::spawn(async move { rb.body(body.to_string()).send().await });
    // Once the call has reached the backend, the client gives up: its connection
    // closes with the call pending.
    let deadline = Instant::now() + PROMPT;
    while !recorded(&record)
        .iter()
        .any(|m| m["method"] == "tools/call")
    {
        assert!(
            Instant::now() < deadline,
            "the call never reached the backend"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!pending.is_finished(), "hang answered");
    pending.abort();

    let deadline = Instant::now() + PROMPT;
    let (call, cancel) = loop {
        let msgs = recorded(&record);
        let call = msgs.iter().find(|m| m["method"] == "tools/call").cloned();
        let cancel = msgs
            .iter()
            .find(|m| m["method"] == "notifications/cancelled")
            .cloned();
        if let (Some(call), Some(cancel)) = (&call, &cancel) {
            break (call.clone(), cancel.clone());
        }
        assert!(
            Instant::now() < deadline,
            "no cancellation reached the backend: {msgs:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(cancel["params"]["requestId"], call["id"], "{cancel}");
    // What reached the session-era backend carried no stateless-era _meta.
    assert!(call["params"].get("_meta").is_none(), "{call}");
    assert!(metric_until(&g, "gantry_calls_in_flight", |v| v == 0.0).await);
    let _ = std::fs::remove_dir_all(&dir);
}

fn mb_gantry(record: Option<&PathBuf>) -> Gantry {
    let env = record
        .map(|r| format!("env = {{ MB_RECORD = {:?} }}, ", r.to_str().unwrap()))
        .unwrap_or_default();
    Gantry::with_config(&format!(
        "[[backends]]\nname = \"mb\"\n\
         stdio = {{ {env}command = \"python3\", args = [{:?}] }}\n",
        fixture("misbehaving_server.py").to_str().unwrap()
    ))
}

#[tokio::test]
async fn listen_streams_get_only_the_list_changes_they_asked_for() {
    let g = mb_gantry(None);
    let c = Stateless::new(&g);
    let mut tools = Listen::open(&c, json!(41), json!({"toolsListChanged": true})).await;
    let mut prompts = Listen::open(&c, json!("p"), json!({"promptsListChanged": true})).await;

    // The acknowledgement comes first and names what is honoured.
    let ack = tools.next(PROMPT).await.expect("no acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    let ack = prompts.next(PROMPT).await.expect("no acknowledgement");
    // The backend has no prompts: nothing of that request is honoured.
    assert_eq!(ack["params"]["notifications"], json!({}), "{ack}");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "p"
    );

    let r = c.call(json!(1), "change", json!({}), json!({})).await;
    assert_eq!(
        text_of(&the_response(&r, &json!(1))),
        "changed",
        "{}",
        r.raw
    );
    let n = tools
        .next(PROMPT)
        .await
        .expect("no list_changed on the listen stream");
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 41,
        "{n}"
    );
    assert!(n.get("id").is_none(), "{n}");
    assert_eq!(prompts.next(Duration::from_millis(500)).await, None);

    // (That a closed stream frees its place is shown by
    // a_caller_holds_a_bounded_number_of_listen_streams.)
}

#[tokio::test]
async fn listen_streams_share_resource_subscriptions_upstream() {
    let g = Gantry::example_stdio();
    let c = Stateless::new(&g);
    let uri = "test://watched-resource";
    let want = json!({"resourceSubscriptions": [uri]});
    let mut a = Listen::open(&c, json!(1), want.clone()).await;
    let mut b = Listen::open(&c, json!(2), want.clone()).await;
    for s in [&mut a, &mut b] {
        let ack = s.next(PROMPT).await.unwrap();
        assert_eq!(ack["params"]["notifications"], want, "{ack}");
    }
    let update = |m: &Option<Value>, id: i64| {
        let m = m.as_ref().expect("no update");
        assert_eq!(m["method"], "notifications/resources/updated", "{m}");
        assert_eq!(m["params"]["uri"], uri, "{m}");
        assert_eq!(
            m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], id,
            "{m}"
        );
    };
    update(&a.next(PROMPT).await, 1);
    update(&b.next(PROMPT).await, 2);
    // Closing one stream leaves the other's subscription in place upstream: updates
    // keep coming for several watch intervals, long after the closed stream's
    // clean-up (which would unsubscribe upstream if it were the last).
    drop(a);
    for _ in 0..3 {
        update(&b.next(PROMPT).await, 2);
    }
    drop(b);
    // And after both closed, a new stream subscribes again.
    let mut c2 = Listen::open(&c, json!(3), want.clone()).await;
    assert!(c2.next(PROMPT).await.is_some());
    update(&c2.next(PROMPT).await, 3);
}

#[tokio::test]
async fn a_caller_holds_a_bounded_number_of_listen_streams() {
    let g = mb_gantry(None);
    let c = Stateless::new(&g);
    let mut open = Vec::new();
    for i in 0..32 {
        let mut l = Listen::open(&c, json!(i), json!({"toolsListChanged": true})).await;
        assert!(
            l.next(PROMPT).await.is_some(),
            "no acknowledgement for stream {i}"
        );
        open.push(l);
    }
    let r = c
        .request(
            json!("over"),
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
            json!({}),
        )
        .await;
    let e = &the_response(&r, &json!("over"))["error"];
    assert_eq!(e["code"], -32600, "{}", r.raw);
    // A closed stream makes room again.
    drop(open.pop());
    let deadline = Instant::now() + PROMPT;
    loop {
        let body = json!({"jsonrpc": "2.0", "id": "again", "method": "subscriptions/listen",
                          "params": {"notifications": {}, "_meta": meta(json!({}))}});
        let resp = c
            .builder("subscriptions/listen", None)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let sse = resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream");
        if sse {
            break;
        }
        assert!(Instant::now() < deadline, "no room after a stream closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_stray_session_id_on_a_stateless_request_is_ignored() {
    let g = Gantry::example_stdio();
    let c = Stateless::new(&g);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"message": "x"}, "_meta": meta(json!({}))}});
    let rb = c
        .builder("tools/call", Some("echo"))
        .header("mcp-session-id", "0123456789abcdef0123456789abcdef");
    let r = c.send(rb, body).await;
    assert_eq!(text_of(&the_response(&r, &json!(1))), "x", "{}", r.raw);
    // A session-era request with an unknown session is still 404.
    let mut old = g.client();
    old.session = Some("0123456789abcdef0123456789abcdef".into());
    assert_eq!(
        old.request(json!(2), "tools/list", json!({})).await.status,
        404
    );
}

#[tokio::test]
async fn a_session_era_backend_gets_the_clients_params_without_the_stateless_eras_own() {
    let dir = common::Scratch::new("session-backend-params");
    let record = dir.file("received.jsonl");
    let g = Gantry::recorded_misbehaving(&record);
    let c = Stateless::new(&g);
    // The client's own `_meta` keys beside the era's, and arguments written with
    // spacing and number forms a re-serialization would change.
    let args = r#"{ "message" : "hi", "n": 1.50 }"#;
    let mut m = meta(json!({"elicitation": {}}));
    m["x.example/tag"] = json!("mine");
    m["io.modelcontextprotocol/logLevel"] = json!("info");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{args},"_meta":{m}}}}}"#
    );
    let rb = c.builder("tools/call", Some("echo"));
    let r = bounded("the call", async {
        common::Client::read(rb.body(body).send().await.unwrap()).await
    })
    .await;
    assert_eq!(text_of(&the_response(&r, &json!(1))), "hi", "{}", r.raw);
    let call = recorded(&record)
        .into_iter()
        .find(|m| m["method"] == "tools/call")
        .expect("the call reached the backend");
    let params = call["params"].as_object().unwrap();
    let keys: Vec<&str> = params.keys().map(String::as_str).collect();
    assert_eq!(keys, ["name", "arguments", "_meta"], "{call}");
    assert_eq!(params["_meta"], json!({"x.example/tag": "mine"}), "{call}");
    assert_eq!(
        params["arguments"],
        json!({"message": "hi", "n": 1.5}),
        "{call}"
    );
}

/// A call that sends nothing before its answer is answered as one JSON body when
/// the client takes JSON (every client of the era must): its length announced, its
/// text whole, no SSE framing around it. A client that takes only SSE gets the same
/// answer as one SSE event.
#[tokio::test]
async fn a_lone_answer_comes_as_json_or_as_one_sse_event_for_an_sse_only_client() {
    let g = Gantry::example_stdio();
    let c = Stateless::new(&g);
    let message = "0123456789abcdef".repeat(8 * 1024);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"message": message},
                                 "_meta": meta(json!({}))}});
    for (accept, answered_as) in [
        ("application/json, text/event-stream", "application/json"),
        ("text/event-stream", "text/event-stream"),
    ] {
        let rb = c.builder_accepting(accept, V, "tools/call", Some("echo"));
        let r = c.send(rb, body.clone()).await;
        assert!(
            r.content_type().starts_with(answered_as),
            "{accept}: {}",
            r.content_type()
        );
        assert_eq!(r.messages.len(), 1, "{accept}");
        let length = r.headers.get("content-length").expect("content-length");
        assert_eq!(length.to_str().unwrap(), r.raw.len().to_string());
        assert_eq!(text_of(&the_response(&r, &json!(1))), message);
    }
}

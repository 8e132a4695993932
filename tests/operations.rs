//! Behaviours the README promises operators, each checked against what a real client
//! or a real backend process received: shutdown draining, the session cap, the idle
//! reaper sparing busy sessions, the child environment allow-list, no token
//! passthrough, capability gating, multi-backend routing of resources, templates
//! and completions (and `initialize` with a backend down), HTTP backend restart,
//! warm-connection replacement, and the stateless era's headers to HTTP backends.

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
use std::time::{Duration, Instant};

const PROMPT: Duration = Duration::from_secs(10);

fn example_http_backend(url: &str) -> String {
    format!("[[backends]]\nname = \"example\"\nhttp = {{ url = {url:?} }}\n")
}

/// Request methods and headers an HTTP backend recorded (`MB_RECORD_HEADERS`).
fn http_requests(file: &std::path::Path) -> Vec<Value> {
    recorded(file)
}

#[tokio::test]
async fn sigterm_drains_calls_refuses_new_sessions_and_ends_backend_sessions() {
    let dir = Scratch::new("drain");
    let headers = dir.file("headers.jsonl");
    let backend = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", headers.to_str().unwrap())]);
    let mut g = Gantry::with_config(&format!(
        "[server]\nshutdown_grace = \"5s\"\n{}",
        example_http_backend(&backend.url)
    ));
    let mut c = g.client();
    c.initialize().await;
    // A call in flight when SIGTERM arrives, on a kept-alive connection.
    let slow = c.call_tool(json!("slow"), "slow", json!({"ms": 1500}));
    let during = async {
        assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await);
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &g.child.id().to_string()])
            .status();
        // While it drains, /readyz stops saying ready (503 on a connection still
        // open, or no connection at all once the listener is closed).
        let end = Instant::now() + Duration::from_secs(3);
        let probe = loop {
            let p = c
                .http
                .get(format!("{}/readyz", g.base))
                .send()
                .await
                .map(|r| r.status().as_u16());
            if !matches!(p, Ok(200)) || Instant::now() > end {
                break p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let init = c
            .http
            .post(&c.url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(json!({"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"late","version":"1"}}}).to_string())
            .send()
            .await
            .map(|r| r.status().as_u16());
        (probe, init)
    };
    let (r, (probe, init)) = tokio::join!(slow, during);
    // The call in flight was allowed to finish.
    assert_eq!(text_of(&r), "done", "{r}");
    // Nothing new is started: a new session is refused (503) or cannot connect.
    assert!(
        matches!(probe, Ok(503) | Err(_)),
        "/readyz during shutdown: {probe:?}"
    );
    assert!(
        matches!(init, Ok(503) | Err(_)),
        "initialize during shutdown: {init:?}"
    );
    let status = g.terminate(PROMPT).expect("gantry did not exit");
    assert!(status.success(), "{status:?}");
    // The backend's session was ended with a DELETE naming it.
    let backend_session = http_requests(&headers)
        .iter()
        .find_map(|r| r["headers"]["mcp-session-id"].as_str().map(str::to_owned))
        .expect("the backend session id");
    assert!(
        http_requests(&headers)
            .iter()
            .any(|r| r["method"] == "DELETE"
                && r["headers"]["mcp-session-id"] == backend_session.as_str()),
        "no DELETE of the backend session: {:?}",
        http_requests(&headers)
    );
}

#[tokio::test]
async fn the_session_cap_refuses_further_sessions_with_503() {
    let g = gantry()
        .server("max_sessions = 2")
        .backend(example())
        .start();
    let mut a = g.client();
    a.initialize().await;
    let mut b = g.client();
    b.initialize().await;
    let third = g
        .client()
        .post(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
        .await;
    assert_eq!(third.status, 503, "{}", third.raw);
    assert!(third.headers.get("mcp-session-id").is_none());
    assert!(third.messages[0]["error"]["code"].is_i64(), "{}", third.raw);
    // The live sessions are untouched.
    assert_eq!(
        text_of(&a.call_tool(json!(1), "echo", json!({"message": "a"})).await),
        "a"
    );
}

#[tokio::test]
async fn the_idle_reaper_spares_a_session_with_a_call_in_flight() {
    let g = gantry()
        .server("session_idle_timeout = \"1s\"")
        .backend(example())
        .start();
    let mut busy = g.client();
    busy.initialize().await;
    let mut idle = g.client();
    idle.initialize().await;
    // 3 s of work: three idle timeouts pass while it runs.
    let r = busy.call_tool(json!(1), "slow", json!({"ms": 3000})).await;
    assert_eq!(text_of(&r), "done", "{r}");
    // The busy session still works; the idle one was reaped (404, as for any
    // unknown session).
    let again = busy
        .call_tool(json!(2), "echo", json!({"message": "on"}))
        .await;
    assert_eq!(text_of(&again), "on", "{again}");
    let gone = idle.request(json!(3), "tools/list", json!({})).await;
    assert_eq!(gone.status, 404, "{}", gone.raw);
}

#[tokio::test]
async fn a_stdio_child_gets_only_the_allowed_environment() {
    let dir = Scratch::new("env");
    let dump = dir.file("env.txt");
    let cmd = format!(
        "env > {}; exec {}",
        shlex_quote(dump.to_str().unwrap()),
        shlex_quote(example_bin().to_str().unwrap())
    );
    let g = Gantry::with_config_env(
        &format!(
            "[[backends]]\nname = \"example\"\n\
             stdio = {{ command = \"sh\", args = [\"-c\", {cmd:?}], env = {{ SET_FOR_CHILD = \"yes\", FROM_GANTRY = \"${{GANTRY_TEST_PASSED}}\" }} }}\n"
        ),
        &[
            ("GANTRY_TEST_SECRET", "must-not-leak"),
            ("GANTRY_TEST_PASSED", "passed-on"),
            ("LANG", "C.UTF-8"),
        ],
    );
    let mut c = g.client();
    c.initialize().await;
    let env = std::fs::read_to_string(&dump).unwrap();
    let vars: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(vars.contains(&"PATH"), "{env}");
    assert!(
        env.contains("LANG=C.UTF-8"),
        "an allow-listed variable: {env}"
    );
    assert!(env.contains("SET_FOR_CHILD=yes"), "{env}");
    assert!(
        env.contains("FROM_GANTRY=passed-on"),
        "${{VAR}} in env: {env}"
    );
    assert!(
        !env.contains("must-not-leak"),
        "Gantry's own environment leaked: {env}"
    );
    assert!(!vars.contains(&"GANTRY_TEST_PASSED"), "{env}");
}

fn shlex_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[tokio::test]
async fn a_clients_credentials_never_reach_an_http_backend() {
    let dir = Scratch::new("passthrough");
    let headers = dir.file("headers.jsonl");
    let backend = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", headers.to_str().unwrap())]);
    let g = Gantry::with_config(&format!(
        "[[auth.api_keys]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n\
         [[backends]]\nname = \"example\"\n\
         http = {{ url = {:?}, headers = {{ X-Backend-Credential = \"backend-own\" }} }}\n",
        sha256_hex("client-secret-key"),
        backend.url
    ));
    let mut c = g.client();
    c.http = reqwest::Client::builder()
        .default_headers({
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("authorization", "Bearer client-secret-key".parse().unwrap());
            h.insert("cookie", "session=client-cookie".parse().unwrap());
            h
        })
        .build()
        .unwrap();
    c.initialize().await;
    assert_eq!(
        text_of(&c.call_tool(json!(1), "echo", json!({"message": "x"})).await),
        "x"
    );
    let seen = http_requests(&headers);
    assert!(!seen.is_empty());
    for r in &seen {
        let h = &r["headers"];
        assert_eq!(h["x-backend-credential"], "backend-own", "{r}");
        for leaked in ["authorization", "cookie", "x-api-key"] {
            assert!(h.get(leaked).is_none(), "{leaked} reached the backend: {r}");
        }
        assert!(!r.to_string().contains("client-secret-key"), "{r}");
    }
}

#[tokio::test]
async fn a_server_request_needs_the_clients_declared_capability() {
    // A shared session-era backend that was told clients can sample: a session that
    // did not declare sampling must not be asked; the backend gets -32601.
    let dir = Scratch::new("gating");
    let record = dir.file("received.jsonl");
    let g = Gantry::with_config(&format!(
        "[[backends]]\nname = \"example\"\nsession_mode = \"shared\"\n\
         client_capabilities = {{ sampling = {{}} }}\n\
         stdio = {{ command = {:?}, args = [\"--session-era-only\"], env = {{ MB_RECORD = {:?} }} }}\n",
        example_bin().to_str().unwrap(),
        record.to_str().unwrap()
    ));
    let mut c = g.client();
    c.initialize().await;
    let (asked, resp) = call_answering(
        &c,
        json!(1),
        "test_sampling",
        json!({"prompt": "q"}),
        json!({"role": "assistant", "content": {"type": "text", "text": "no"}, "model": "m"}),
    )
    .await;
    assert!(asked.is_empty(), "the client was asked: {asked:?}");
    assert_eq!(resp["result"]["isError"], true, "{resp}");
    let refusal = recorded(&record)
        .into_iter()
        .find(|m| m.get("method").is_none() && m.get("error").is_some())
        .unwrap_or_else(|| panic!("the backend got no answer: {:?}", recorded(&record)));
    assert_eq!(refusal["error"]["code"], -32601, "{refusal}");
    // Refused for the capability (the call was the only one in flight: attributable).
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not declare the `sampling` capability"),
        "{refusal}"
    );
}

#[tokio::test]
async fn several_backends_route_resources_templates_and_completions_and_survive_one_down() {
    let g = Gantry::with_config(&format!(
        "[[backends]]\nname = \"ex\"\nstdio = {{ command = {:?} }}\n\
         [[backends]]\nname = \"dual\"\nstdio = {{ command = \"python3\", args = [{:?}] }}\n\
         [[backends]]\nname = \"down\"\nstdio = {{ command = \"/nonexistent/mcp-server\" }}\n",
        example_bin().to_str().unwrap(),
        fixture("dual_era_server.py").to_str().unwrap()
    ));
    let mut c = g.client();
    let init = c.initialize().await;
    assert!(
        init["result"]["capabilities"]["resources"].is_object(),
        "{init}"
    );
    let list = c.request(json!(1), "resources/list", json!({})).await;
    let uris: Vec<String> = list.response(&json!(1)).unwrap()["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect();
    assert!(uris.contains(&"test://static-text".to_owned()), "{uris:?}");
    assert!(uris.contains(&"test://static".to_owned()), "{uris:?}");
    let read = |id: i64, uri: &'static str| {
        let c = &c;
        async move {
            let r = c
                .request(json!(id), "resources/read", json!({"uri": uri}))
                .await;
            r.response(&json!(id)).unwrap()["result"]["contents"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }
    };
    assert_eq!(
        read(2, "test://static").await,
        "static text",
        "the dual fixture's"
    );
    assert!(
        !read(3, "test://static-text").await.is_empty(),
        "the example's"
    );
    // A URI no backend listed, but the example's template matches.
    let templates = c
        .request(json!(4), "resources/templates/list", json!({}))
        .await;
    assert!(
        templates.raw.contains("test://template/{id}/data"),
        "{}",
        templates.raw
    );
    let t = read(5, "test://template/42/data").await;
    assert!(t.contains("42"), "{t}");
    // Completion of a prompt argument goes to the prompt's backend.
    let r = c
        .request(
            json!(6),
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "ex__test_prompt_with_arguments"},
                   "argument": {"name": "arg1", "value": "par"}}),
        )
        .await;
    let values = &r.response(&json!(6)).unwrap()["result"]["completion"]["values"];
    assert_eq!(values, &json!(["paris", "park", "party"]), "{}", r.raw);
    // A URI nobody announced is refused, never guessed.
    let r = c
        .request(json!(7), "resources/read", json!({"uri": "test://nobody"}))
        .await;
    assert!(
        r.response(&json!(7)).unwrap()["error"].is_object(),
        "{}",
        r.raw
    );
    // The backend that is down is named when called.
    let r = c.call_tool(json!(8), "down__anything", json!({})).await;
    assert_rpc_error(&r, -32000, Some("down"));
}

#[tokio::test]
async fn an_http_backend_that_restarts_is_reconnected() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let first = HttpServer::start_at(&example_bin(), &[], &[], &addr);
    let g = Gantry::with_config(&format!(
        "[[backends]]\nname = \"example\"\nsession_mode = \"shared\"\n\
         restart = {{ initial_backoff = \"50ms\", max_backoff = \"200ms\" }}\n\
         http = {{ url = {:?} }}\n",
        first.url
    ));
    let mut c = g.client();
    c.initialize().await;
    assert_eq!(
        text_of(&c.call_tool(json!(1), "echo", json!({"message": "1"})).await),
        "1"
    );
    drop(first);
    let dir = Scratch::new("http-restart");
    let record = dir.file("received.jsonl");
    let _second = HttpServer::start_at(
        &example_bin(),
        &[],
        &[("MB_RECORD", record.to_str().unwrap())],
        &addr,
    );
    // The new server knows nothing of the old session: Gantry initializes again and
    // the client's session goes on.
    let end = Instant::now() + PROMPT;
    loop {
        let r = c.call_tool(json!(2), "echo", json!({"message": "2"})).await;
        if text_of(&r) == "2" {
            break;
        }
        assert!(Instant::now() < end, "never reconnected: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recorded(&record)
        .iter()
        .any(|m| m["method"] == "initialize"));
}

#[tokio::test]
async fn a_warm_connection_older_than_max_lifetime_is_replaced() {
    let g = Gantry::with_config(&format!(
        "[[backends]]\nname = \"example\"\nstdio = {{ command = {:?} }}\n\
         [backends.pool]\nmin_idle = 1\nmax_lifetime = \"1s\"\n",
        example_bin().to_str().unwrap()
    ));
    let first = poll_until(PROMPT, || children_of(g.pid()).first().map(|c| c.0))
        .await
        .expect("no warm process");
    // Replaced after its lifetime, and the pool stays at one.
    let next = poll_until(Duration::from_secs(5), || {
        let kids = children_of(g.pid());
        (kids.len() == 1 && kids[0].0 != first).then(|| kids[0].0)
    })
    .await
    .expect("the warm process was not replaced");
    assert!(!alive(first) || next != first);
}

#[tokio::test]
async fn a_stateless_http_backend_gets_the_eras_headers() {
    let dir = Scratch::new("headers");
    let headers = dir.file("headers.jsonl");
    let backend = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", headers.to_str().unwrap())]);
    let g = Gantry::with_config(&example_http_backend(&backend.url));
    let s = Stateless::new(&g);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "test_custom_headers", "arguments": {"region": "eu-west", "priority": 3},
        "_meta": stateless_meta(json!({}))}});
    let rb = s
        .builder("tools/call", Some("test_custom_headers"))
        .header("mcp-param-region", "eu-west")
        .header("mcp-param-priority", "3");
    let r = s.send(rb, body).await;
    assert!(
        r.response(&json!(1)).unwrap()["result"].is_object(),
        "{}",
        r.raw
    );
    let call = http_requests(&headers)
        .into_iter()
        .find(|r| r["headers"]["mcp-method"] == "tools/call")
        .unwrap_or_else(|| panic!("{:?}", http_requests(&headers)));
    let h = &call["headers"];
    assert_eq!(h["mcp-name"], "test_custom_headers", "{call}");
    assert_eq!(h["mcp-protocol-version"], "2026-07-28", "{call}");
    assert_eq!(h["mcp-param-region"], "eu-west", "{call}");
    assert_eq!(h["mcp-param-priority"], "3", "{call}");
    assert!(h.get("mcp-session-id").is_none(), "{call}");
}

#[tokio::test]
async fn calls_at_once_to_a_stateless_http_backend_list_its_tools_once() {
    let dir = Scratch::new("headers-once");
    let headers = dir.file("headers.jsonl");
    let backend = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", headers.to_str().unwrap())]);
    let g = Gantry::with_config(&example_http_backend(&backend.url));
    let s = Stateless::new(&g);
    // The tools' header declarations are not known yet when eight calls arrive:
    // one of them lists the tools, the others wait for its list.
    let calls = (0..8).map(|i| {
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
            "name": "test_custom_headers", "arguments": {"region": format!("r{i}"), "priority": i},
            "_meta": stateless_meta(json!({}))}});
        let rb = s
            .builder("tools/call", Some("test_custom_headers"))
            .header("mcp-param-region", format!("r{i}"))
            .header("mcp-param-priority", i.to_string());
        s.send(rb, body)
    });
    for (i, r) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        assert!(
            r.response(&json!(i)).unwrap()["result"].is_object(),
            "{}",
            r.raw
        );
    }
    let seen = http_requests(&headers);
    let method = |m: &str| {
        seen.iter()
            .filter(|r| r["headers"]["mcp-method"] == m)
            .count()
    };
    assert_eq!(method("tools/call"), 8, "{seen:?}");
    // One listing for the catalog the client's headers are checked against, one
    // for the backend's own declarations; none per call.
    assert!(method("tools/list") <= 2, "{seen:?}");
    for r in seen
        .iter()
        .filter(|r| r["headers"]["mcp-method"] == "tools/call")
    {
        assert!(r["headers"]["mcp-param-region"].is_string(), "{r}");
    }
}

#[tokio::test]
async fn a_client_has_at_most_64_server_requests_waiting_for_its_answers() {
    let dir = Scratch::new("ask-cap");
    let record = dir.file("received.jsonl");
    let g = Gantry::recorded_misbehaving(&record);
    let mut c = g.client();
    c.initialize_with(json!({"roots": {}})).await;
    // 65 requests at once, none answered by the client: the 65th is refused to the
    // backend at once; 64 reach the client.
    let resp = c
        .post_builder()
        .body(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_many","arguments":{"n":65}}}).to_string())
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(resp);
    let mut asked = 0;
    while asked < 64 {
        let m = sse
            .message_where(deadline(10), |m| m["method"] == "roots/list")
            .await;
        assert!(m.get("id").is_some(), "{m}");
        asked += 1;
    }
    let refused = poll_until(PROMPT, || {
        let errors: Vec<Value> = recorded(&record)
            .into_iter()
            .filter(|m| m.get("method").is_none() && m.get("error").is_some())
            .collect();
        (!errors.is_empty()).then_some(errors)
    })
    .await
    .expect("no request was refused to the backend");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["error"]["code"], -32603, "{}", refused[0]);
    // And no 65th reached the client.
    match sse
        .next(tokio::time::Instant::now() + Duration::from_millis(300))
        .await
    {
        Next::Timeout => {}
        other => panic!("more reached the client: {other:?}"),
    }
}

#[tokio::test]
async fn request_outcomes_say_whose_fault_a_failure_is() {
    let g = gantry()
        .backend(
            example()
                .named("ex")
                .set("pool = { max_in_flight = 1, queue = 0 }"),
        )
        .backend(
            python_fixture("mb", "misbehaving_server.py")
                .set("restart = { initial_backoff = \"50ms\" }"),
        )
        .start();
    let mut c = g.client();
    c.initialize().await;
    let ok = c
        .call_tool(json!(1), "ex__echo", json!({"message": "x"}))
        .await;
    assert_eq!(text_of(&ok), "x", "{ok}");
    // The backend's own error answer (it has no such tool), relayed.
    let own = c.call_tool(json!(2), "ex__no_such_tool", json!({})).await;
    assert!(own["error"].is_object(), "{own}");
    // A name no backend has: the request's fault.
    let client = c.call_tool(json!(3), "nobody__tool", json!({})).await;
    assert!(client["error"].is_object(), "{client}");
    // A backend that dies mid-call: the backend's fault.
    let crashed = c.call_tool(json!(4), "mb__crash", json!({})).await;
    assert_rpc_error(&crashed, -32000, Some("mb"));
    // Gantry's own limit (one call in flight, no queue): Gantry's.
    let slow = c.call_tool(json!(5), "ex__slow", json!({"ms": 1000}));
    let busy = async {
        assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await);
        c.call_tool(json!(6), "ex__echo", json!({"message": "y"}))
            .await
    };
    let (_, busy) = tokio::join!(slow, busy);
    assert_rpc_error(&busy, -32000, Some("ex"));
    let count = |outcome: &'static str| {
        let g = &g;
        async move {
            metric(
                g,
                &format!("gantry_requests_total{{method=\"tools/call\",outcome=\"{outcome}\"}}"),
            )
            .await
            .unwrap_or(0.0)
        }
    };
    assert_eq!(count("ok").await, 2.0, "echo and slow");
    assert_eq!(count("error").await, 1.0);
    assert_eq!(count("client_error").await, 1.0);
    assert_eq!(count("backend_error").await, 1.0);
    assert_eq!(count("gateway_error").await, 1.0);
    // Per tool: each real tool by its backend; a name no backend has is `other`.
    let tool = |backend: &'static str, tool: &'static str, outcome: &'static str| {
        let g = &g;
        async move {
            metric(
                g,
                &format!("gantry_tool_calls_total{{backend=\"{backend}\",outcome=\"{outcome}\",tool=\"{tool}\"}}"),
            )
            .await
            .unwrap_or(0.0)
        }
    };
    assert_eq!(tool("ex", "ex__echo", "ok").await, 1.0);
    assert_eq!(tool("ex", "ex__echo", "gateway_error").await, 1.0);
    assert_eq!(tool("ex", "ex__slow", "ok").await, 1.0);
    assert_eq!(tool("ex", "ex__no_such_tool", "error").await, 1.0);
    assert_eq!(
        tool("other", "other", "client_error").await,
        1.0,
        "unknown names collapse"
    );
    assert_eq!(
        tool("mb", "other", "backend_error").await,
        1.0,
        "a crash is no answer"
    );
    assert_eq!(
        metric(
            &g,
            "gantry_tool_call_duration_seconds_count{backend=\"ex\",tool=\"ex__slow\"}"
        )
        .await,
        Some(1.0)
    );
    // gantry_build_info (version and commit): tests/metrics.rs.
}

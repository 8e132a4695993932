//! One backend connection shared by many client sessions: everything the backend
//! says reaches exactly the session it belongs to, or nobody.
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
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn shared_config(extra: &str) -> String {
    format!(
        "[[backends]]\nname = \"example\"\nsession_mode = \"shared\"\nstdio = {{ command = {:?} }}\n{extra}",
        example_bin().to_str().unwrap()
    )
}

/// A shared example backend that only speaks the session era (so its server→client
/// requests are real requests, whose owner Gantry must work out).
fn shared_session_era_config(extra: &str) -> String {
    format!(
        "[[backends]]\nname = \"example\"\nsession_mode = \"shared\"\n\
         stdio = {{ command = {:?}, args = [\"--session-era-only\"] }}\n{extra}",
        example_bin().to_str().unwrap()
    )
}

/// Gantry with one `shared` example backend that records every message it receives
/// into `record` (read with `recorded`).
fn shared_recorded(record: &std::path::Path) -> Gantry {
    Gantry::with_config(&format!(
        "[[backends]]\nname = \"example\"\nsession_mode = \"shared\"\n\
         stdio = {{ command = {:?}, env = {{ MB_RECORD = {:?} }} }}\n",
        example_bin().to_str().unwrap(),
        record.to_str().unwrap()
    ))
}

async fn sessions(g: &Gantry, n: usize, caps: Value) -> Vec<Client> {
    let mut out = Vec::new();
    for _ in 0..n {
        let mut c = g.client();
        c.initialize_with(caps.clone()).await;
        out.push(c);
    }
    out
}

/// Reads SSE messages from a streaming response until `stop` says so or the
/// deadline passes; returns what was read.
async fn read_until(
    resp: reqwest::Response,
    within: Duration,
    mut stop: impl FnMut(&[Value]) -> bool,
) -> Vec<Value> {
    let mut body = resp.bytes_stream();
    let mut parser = gantry::sse::Parser::new(1 << 24);
    let mut got = Vec::new();
    let end = Instant::now() + within;
    while Instant::now() < end && !stop(&got) {
        match tokio::time::timeout_at(end.into(), body.next()).await {
            Ok(Some(Ok(chunk))) => {
                for ev in parser.feed(&chunk).unwrap() {
                    if !ev.data.trim().is_empty() {
                        got.push(serde_json::from_str(&ev.data).unwrap());
                    }
                }
            }
            _ => break,
        }
    }
    got
}

#[tokio::test]
async fn progress_reaches_only_its_owner() {
    let g = Gantry::with_config(&shared_config(""));
    let clients = sessions(&g, 20, json!({})).await;
    let calls = clients.iter().enumerate().map(|(i, c)| async move {
        // Every session uses the same progress token, and half of them the same id.
        let token = if i % 2 == 0 { json!(1) } else { json!("p") };
        let id = json!(1);
        let r = c
            .request(id.clone(), "tools/call", json!({"name":"test_tool_with_progress","arguments":{},"_meta":{"progressToken": token}}))
            .await;
        let progress: Vec<&Value> = r.messages.iter().filter(|m| m["method"] == "notifications/progress").collect();
        assert_eq!(progress.len(), 3, "session {i} got its three progress notifications: {}", r.raw);
        for p in progress {
            assert_eq!(p["params"]["progressToken"], token, "the client's own token comes back");
        }
        assert!(r.response(&id).is_some());
    });
    futures::future::join_all(calls).await;
}

#[tokio::test]
async fn log_levels_are_per_session() {
    let g = Gantry::with_config(&shared_config(""));
    let clients = sessions(&g, 2, json!({})).await;
    let (quiet, chatty) = (&clients[0], &clients[1]);
    assert!(quiet
        .request(json!(1), "logging/setLevel", json!({"level":"error"}))
        .await
        .response(&json!(1))
        .unwrap()["result"]
        .is_object());
    assert!(chatty
        .request(json!(1), "logging/setLevel", json!({"level":"debug"}))
        .await
        .response(&json!(1))
        .unwrap()["result"]
        .is_object());
    let logs = |r: &Reply| {
        r.messages
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .count()
    };
    let q = quiet
        .request(
            json!(2),
            "tools/call",
            json!({"name":"test_tool_with_logging","arguments":{}}),
        )
        .await;
    let c = chatty
        .request(
            json!(2),
            "tools/call",
            json!({"name":"test_tool_with_logging","arguments":{}}),
        )
        .await;
    assert!(q.response(&json!(2)).is_some() && c.response(&json!(2)).is_some());
    assert_eq!(
        logs(&q),
        0,
        "info logs filtered for the session at `error`: {}",
        q.raw
    );
    assert!(
        logs(&c) >= 1,
        "info logs delivered to the session at `debug`: {}",
        c.raw
    );
    let bad = quiet
        .request(json!(3), "logging/setLevel", json!({"level":"loud"}))
        .await;
    assert_eq!(bad.response(&json!(3)).unwrap()["error"]["code"], -32602);
}

#[tokio::test]
async fn resource_updates_reach_only_subscribers() {
    let g = Gantry::with_config(&shared_config(""));
    let clients = sessions(&g, 3, json!({})).await;
    let uri = "test://watched-resource";
    for c in &clients[..2] {
        let r = c
            .request(json!(1), "resources/subscribe", json!({"uri": uri}))
            .await;
        assert!(
            r.response(&json!(1)).unwrap()["result"].is_object(),
            "{}",
            r.raw
        );
    }
    let updated = |m: &[Value]| {
        m.iter()
            .any(|m| m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri)
    };
    let streams = futures::future::join_all(clients.iter().map(Client::open_get)).await;
    let mut reads = Vec::new();
    for (i, s) in streams.into_iter().enumerate() {
        // Subscribers: until the first update (bounded). The bystander: a fixed window.
        let window = if i < 2 {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(3)
        };
        reads.push(read_until(s, window, move |m| updated(m)));
    }
    let got = futures::future::join_all(reads).await;
    assert!(
        updated(&got[0]) && updated(&got[1]),
        "subscribers get updates: {got:?}"
    );
    assert!(
        !updated(&got[2]),
        "a session that did not subscribe gets none: {:?}",
        got[2]
    );
    // One subscriber leaves; the other still gets updates (the backend stays subscribed).
    let r = clients[0]
        .request(json!(2), "resources/unsubscribe", json!({"uri": uri}))
        .await;
    assert!(r.response(&json!(2)).unwrap()["result"].is_object());
    let again = read_until(clients[1].open_get().await, Duration::from_secs(10), |m| {
        updated(m)
    })
    .await;
    assert!(updated(&again));
}

#[tokio::test]
async fn server_requests_go_to_the_only_caller_and_never_to_a_guess() {
    let g = Gantry::with_config(&shared_session_era_config(
        "client_capabilities = { sampling = {} }\n",
    ));
    let clients = sessions(&g, 2, json!({"sampling": {}})).await;
    let answer = json!({"role":"assistant","content":{"type":"text","text":"42"},"model":"m","stopReason":"endTurn"});
    // Alone on the backend: the sampling request reaches the caller and its answer the backend.
    let (asked, resp) = call_answering(
        &clients[0],
        json!(1),
        "test_sampling",
        json!({"prompt":"q"}),
        answer.clone(),
    )
    .await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["method"], "sampling/createMessage");
    assert!(
        resp["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("42"),
        "{resp}"
    );
    // With another session's call in flight, whose request it is cannot be known:
    // nobody is asked, and the backend gets an error instead.
    let other = clients[1].call_tool(json!(9), "slow", json!({"ms": 3000}));
    let mine = async {
        // Only once `slow` is waiting on the backend are two calls in flight.
        assert!(
            metric_until(
                &g,
                "gantry_backend_pending_requests{backend=\"example\"}",
                |n| n >= 1.0
            )
            .await
        );
        call_answering(
            &clients[0],
            json!(2),
            "test_sampling",
            json!({"prompt":"q"}),
            answer.clone(),
        )
        .await
    };
    let (slow, (asked, resp)) = tokio::join!(other, mine);
    assert!(asked.is_empty(), "no client was asked: {asked:?}");
    assert_eq!(
        resp["result"]["isError"], true,
        "the tool saw the refusal: {resp}"
    );
    assert_eq!(slow["result"]["content"][0]["text"], "done");
}

/// The done-when stress test of session multiplexing: 200 sessions on one shared
/// stdio backend, interleaving requests with colliding ids (numbers and strings, the
/// same id as other sessions, the same id twice in flight within a session),
/// progress tokens and cancellations. Every response reaches the right session with
/// the right id, every progress notification its owner, and nothing is left pending.
#[tokio::test]
async fn two_hundred_sessions_with_colliding_ids_progress_and_cancellation() {
    let dir = Scratch::new("two-hundred");
    let record = dir.file("received.jsonl");
    let g = shared_recorded(&record);
    let clients = futures::future::join_all((0..200).map(|_| async {
        let mut c = g.client();
        c.initialize().await;
        c
    }))
    .await;
    let work = clients.iter().enumerate().map(|(s, c)| async move {
        let echo = |id: Value, k: usize| async move {
            let msg = format!("s{s}-k{k}");
            let r = c.call_tool(id.clone(), "echo", json!({"message": msg})).await;
            assert_eq!(r["id"], id);
            assert_eq!(r["result"]["content"][0]["text"], msg, "session {s} call {k}");
        };
        let progress = async {
            let token = json!(7);
            let r = c
                .request(json!(1), "tools/call", json!({"name":"test_tool_with_progress","arguments":{},"_meta":{"progressToken": token}}))
                .await;
            let p: Vec<&Value> = r.messages.iter().filter(|m| m["method"] == "notifications/progress").collect();
            assert_eq!(p.len(), 3, "session {s}: {}", r.raw);
            assert!(p.iter().all(|m| m["params"]["progressToken"] == token));
            assert!(r.response(&json!(1)).is_some());
        };
        let cancelled = async {
            if s % 4 != 0 {
                return;
            }
            // A slow call with a string id, cancelled by the client: its stream ends
            // without a response, and it must not linger upstream.
            let resp = c
                .post_builder()
                .body(json!({"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"slow","arguments":{"ms":5000}}}).to_string())
                .send()
                .await
                .unwrap();
            // The headers came back, so the call is registered and can be cancelled.
            assert_eq!(c.notify("notifications/cancelled", json!({"requestId":"x","reason":"test"})).await, 202);
            let r = Client::read(resp).await;
            assert!(r.response(&json!("x")).is_none(), "a cancelled request gets no response");
        };
        tokio::join!(echo(json!(1), 0), echo(json!(1), 1), echo(json!("1"), 2), progress, cancelled);
    });
    futures::future::join_all(work).await;
    // The backend got each of the 50 cancelled calls under an id of its own, and a
    // notifications/cancelled naming that id, well before the calls' own 5 s end.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let msgs = recorded(&record);
        let slow_ids: Vec<&Value> = msgs
            .iter()
            .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "slow")
            .map(|m| &m["id"])
            .collect();
        let cancelled: Vec<&Value> = msgs
            .iter()
            .filter(|m| m["method"] == "notifications/cancelled")
            .map(|m| &m["params"]["requestId"])
            .collect();
        let all_cancelled =
            slow_ids.len() == 50 && slow_ids.iter().all(|id| cancelled.contains(id));
        if all_cancelled {
            let mut distinct: Vec<String> = slow_ids.iter().map(|v| v.to_string()).collect();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), 50, "upstream ids are unique: {slow_ids:?}");
            assert!(
                slow_ids.iter().all(|id| id.is_u64()),
                "Gantry's own ids: {slow_ids:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every cancelled call was cancelled upstream: {} slow calls, cancelled {cancelled:?}",
            slow_ids.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Nothing pending upstream once every call has ended (bounded poll: cancels and
    // late responses settle asynchronously).
    assert!(
        metric_until(
            &g,
            "gantry_backend_pending_requests{backend=\"example\"}",
            |n| n == 0.0
        )
        .await,
        "pending table empty at the end"
    );
    assert_eq!(
        metric(&g, "gantry_backend_connections{backend=\"example\"}").await,
        Some(1.0)
    );
    assert_eq!(
        children_of(g.pid()).len(),
        1,
        "one backend process for 200 sessions"
    );
}

/// A session that ends (DELETE) with a call in flight on a shared backend: the call
/// is cancelled upstream at once, not left running for the backend's own time, and
/// the other session's call on the same backend goes on.
#[tokio::test]
async fn ending_a_session_cancels_its_calls_upstream() {
    let dir = Scratch::new("end-cancels");
    let record = dir.file("received.jsonl");
    let g = shared_recorded(&record);
    let (mut ending, mut staying) = (g.client(), g.client());
    ending.initialize().await;
    staying.initialize().await;
    let slow = |ms: u64| {
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":ms}}}).to_string()
    };
    let doomed = ending.post_builder().body(slow(5000)).send().await.unwrap();
    let kept = staying.post_builder().body(slow(800)).send().await.unwrap();
    assert!(ending.delete().await.status().is_success());
    let deadline = Instant::now() + Duration::from_secs(3);
    let upstream_ids = loop {
        let msgs = recorded(&record);
        let ids: Vec<Value> = msgs
            .iter()
            .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "slow")
            .map(|m| (m["params"]["arguments"]["ms"].clone(), m["id"].clone()))
            .filter(|(ms, _)| ms == 5000)
            .map(|(_, id)| id)
            .collect();
        let cancelled = msgs.iter().any(|m| {
            m["method"] == "notifications/cancelled" && ids.contains(&m["params"]["requestId"])
        });
        if cancelled {
            break ids;
        }
        assert!(
            Instant::now() < deadline,
            "the ended session's call was not cancelled upstream: {msgs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(upstream_ids.len(), 1, "{upstream_ids:?}");
    let r = Client::read(kept).await;
    assert!(
        r.response(&json!(1)).is_some(),
        "the other session's call: {}",
        r.raw
    );
    let r = Client::read(doomed).await;
    assert!(
        r.response(&json!(1))
            .is_none_or(|m| m.get("error").is_some()),
        "{}",
        r.raw
    );
}

/// `per-user`: one backend process per principal, shared by that principal's
/// sessions, and gone when the principal's last session ends.
#[tokio::test]
async fn per_user_connections() {
    let g = Gantry::with_config(&format!(
        "[[auth.api_keys]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n[[auth.api_keys]]\nprincipal = \"bob\"\nsha256 = \"{}\"\n\
         [[backends]]\nname = \"example\"\nsession_mode = \"per-user\"\nstdio = {{ command = {:?} }}\n",
        sha256_hex("alice-key"),
        sha256_hex("bob-key"),
        example_bin().to_str().unwrap()
    ));
    let with_key = |key: &str| {
        let mut c = g.client();
        c.http = reqwest::Client::builder()
            .default_headers(
                [(
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {key}").parse().unwrap(),
                )]
                .into_iter()
                .collect(),
            )
            .build()
            .unwrap();
        c
    };
    let (mut a1, mut a2, mut b1) = (
        with_key("alice-key"),
        with_key("alice-key"),
        with_key("bob-key"),
    );
    a1.initialize().await;
    a2.initialize().await;
    assert_eq!(
        children_of(g.pid()).len(),
        1,
        "two sessions of one principal share one process"
    );
    b1.initialize().await;
    assert_eq!(
        children_of(g.pid()).len(),
        2,
        "another principal gets its own process"
    );
    for c in [&a1, &a2, &b1] {
        let r = c
            .call_tool(json!(1), "echo", json!({"message": "hi"}))
            .await;
        assert_eq!(r["result"]["content"][0]["text"], "hi");
    }
    // Alice's first session ends: her process stays for her second one.
    let del = |c: &Client| {
        c.http
            .delete(&c.url)
            .header("mcp-session-id", c.session.clone().unwrap())
            .send()
    };
    assert_eq!(del(&a1).await.unwrap().status().as_u16(), 200);
    assert_eq!(children_of(g.pid()).len(), 2);
    assert_eq!(
        a2.call_tool(json!(2), "echo", json!({"message": "still"}))
            .await["result"]["content"][0]["text"],
        "still"
    );
    // Her last session ends: her process goes; Bob's stays.
    assert_eq!(del(&a2).await.unwrap().status().as_u16(), 200);
    let end = Instant::now() + Duration::from_secs(10);
    while children_of(g.pid()).len() != 1 && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(children_of(g.pid()).len(), 1);
    assert_eq!(
        b1.call_tool(json!(3), "echo", json!({"message": "bob"}))
            .await["result"]["content"][0]["text"],
        "bob"
    );
}

/// A client that stops reading its streams costs Gantry a bounded buffer and never
/// slows anyone else down, even on the same backend connection.
#[tokio::test]
async fn a_slow_reader_does_not_stall_other_sessions() {
    let g = Gantry::with_config(&shared_config(""));
    let clients = sessions(&g, 2, json!({})).await;
    let (slow, fast) = (&clients[0], &clients[1]);
    let big = "x".repeat(256 * 1024);
    // The slow client sends 16 large calls and never reads a byte of the answers.
    let mut unread = Vec::new();
    for i in 0..16 {
        let body = json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"echo","arguments":{"message": big}}});
        unread.push(
            slow.post_builder()
                .body(body.to_string())
                .send()
                .await
                .unwrap(),
        );
    }
    let started = Instant::now();
    for i in 0..20 {
        let r = fast
            .call_tool(json!(i), "echo", json!({"message": format!("m{i}")}))
            .await;
        assert_eq!(r["result"]["content"][0]["text"], format!("m{i}"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the other session was not held up"
    );
    drop(unread);
    // Gantry is still healthy and the slow client's session still works.
    let r = slow
        .call_tool(json!("after"), "echo", json!({"message": "ok"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "ok");
}

/// A shared connection past `pool.max_lifetime` takes no new sessions: they get a new
/// process, the old one keeps serving its sessions and stops after the last.
#[tokio::test]
async fn shared_connection_is_recycled_after_max_lifetime() {
    let g = Gantry::with_config(&shared_config("[backends.pool]\nmax_lifetime = \"1s\"\n"));
    let old = sessions(&g, 1, json!({})).await;
    let first = children_of(g.pid());
    assert_eq!(first.len(), 1);
    // Let the connection outlive its lifetime (the policy under test is time itself).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let new = sessions(&g, 1, json!({})).await;
    let both = children_of(g.pid());
    assert_eq!(both.len(), 2, "a new process for the new session: {both:?}");
    for c in old.iter().chain(&new) {
        assert_eq!(
            c.call_tool(json!(1), "echo", json!({"message": "x"})).await["result"]["content"][0]
                ["text"],
            "x"
        );
    }
    let del = old[0]
        .http
        .delete(&old[0].url)
        .header("mcp-session-id", old[0].session.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 200);
    let end = Instant::now() + Duration::from_secs(10);
    while children_of(g.pid()).len() != 1 && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = children_of(g.pid());
    assert_eq!(
        left.len(),
        1,
        "the retired process stopped with its last session"
    );
    assert_ne!(left[0].0, first[0].0, "the process left is the new one");
    assert_eq!(
        new[0]
            .call_tool(json!(2), "echo", json!({"message": "y"}))
            .await["result"]["content"][0]["text"],
        "y"
    );
}

/// Answers of every size, around the pipe's and the read buffer's sizes and with
/// characters JSON escapes, reach their sessions byte for byte while other sessions'
/// answers share the same backend stdout.
#[tokio::test]
async fn answers_of_every_size_come_back_exact_through_one_pipe() {
    let g = Gantry::with_config(&shared_config(""));
    let clients = sessions(&g, 3, json!({})).await;
    let sizes = [
        0usize,
        1,
        4095,
        8191,
        8192,
        8193,
        32 * 1024,
        64 * 1024 - 1,
        64 * 1024 + 1,
        300_000,
    ];
    // Not a repeated byte: an answer cut, doubled or spliced at the wrong place
    // would not compare equal.
    let text = |n: usize, who: usize| -> String {
        let alphabet = ['a', 'b', '"', '\\', '\n', 'é', '{', '}', '0', ' '];
        let mut s = format!("{who}:");
        let mut i = 0usize;
        while s.len() < n {
            s.push(alphabet[(i * 7 + who) % alphabet.len()]);
            i += 1;
        }
        s
    };
    let calls = clients.iter().enumerate().map(|(who, c)| {
        let text = &text;
        async move {
            for (k, &n) in sizes.iter().enumerate() {
                let want = text(n, who);
                let r = c
                    .call_tool(json!(k), "echo", json!({ "message": want }))
                    .await;
                let got = r["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default();
                assert!(
                    got == want,
                    "client {who}, {n} bytes: got {} bytes",
                    got.len()
                );
            }
        }
    });
    futures::future::join_all(calls).await;
}

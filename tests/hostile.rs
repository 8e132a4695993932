//! Hostile clients and misbehaving backends (chaos suite): whatever a client does
//! with its streams and whatever a backend floods Gantry with, an answer is never
//! lost and nothing grows without bound. Real `gantry`, real backend processes, real
//! HTTP.

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

fn flooding() -> Gantry {
    gantry()
        .backend(python_fixture("mb", "misbehaving_server.py"))
        .start()
}

/// A call that sends far more notifications than a stream keeps (256 events, 8 MiB)
/// before its answer, while the client reads nothing: resuming the stream afterwards
/// still delivers the answer (some notifications may be gone; the answer never is).
#[tokio::test]
async fn an_answer_survives_a_flood_of_notifications_the_client_did_not_read() {
    let g = flooding();
    let mut c = g.client();
    c.initialize().await;
    let resp = c
        .post_builder()
        .body(
            json!({"jsonrpc":"2.0","id":"f","method":"tools/call",
                   "params":{"name":"flood","arguments":{"n":3000,"bytes":200}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(resp);
    let priming = sse.expect_event(deadline(10)).await;
    let last = priming.id.clone().expect("priming event id");
    drop(sse); // the client goes away before reading anything else
    assert!(
        metric_until(&g, "gantry_calls_in_flight", |n| n == 0.0).await,
        "the call did not finish"
    );
    let resumed = c.resume(&last).await;
    assert_eq!(resumed.status(), 200);
    let mut sse = SseReader::new(resumed);
    let answer = sse
        .message_where(deadline(10), |m| m.get("id") == Some(&json!("f")))
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "flooded 3000",
        "{answer}"
    );
}

/// The same flood read live by a client that reads as it comes: everything arrives,
/// answer last.
#[tokio::test]
async fn a_client_that_reads_gets_the_whole_flood_and_the_answer() {
    let g = flooding();
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .request(
            json!(1),
            "tools/call",
            json!({"name":"flood","arguments":{"n":1000,"bytes":50}}),
        )
        .await;
    let logs = r
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count();
    assert!(logs > 0, "{}", r.raw);
    let last = r.messages.last().unwrap();
    assert_eq!(last["id"], 1, "the answer comes last: {last}");
    assert_eq!(last["result"]["content"][0]["text"], "flooded 1000");
}

/// A 2025-03-26 batch of more requests than a stream keeps events: every one is
/// answered.
#[tokio::test]
async fn a_batch_larger_than_the_event_buffer_is_answered_whole() {
    let g = gantry().backend(example()).start();
    let mut c = g.client();
    c.version = "2025-03-26".into();
    c.initialize().await;
    let batch: Vec<Value> = (0..300)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"ping"}))
        .collect();
    let r = c.post(&Value::Array(batch)).await;
    assert_eq!(r.status, 200, "{}", r.raw);
    let mut ids: Vec<i64> = r
        .messages
        .iter()
        .filter(|m| m.get("result").is_some())
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..300).collect::<Vec<i64>>());
}

// ---- connections: every phase bounded, a cap before the file-descriptor limit ----

use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr_of(g: &Gantry) -> String {
    g.base.trim_start_matches("http://").to_owned()
}

async fn raw(g: &Gantry) -> TcpStream {
    TcpStream::connect(addr_of(g)).await.unwrap()
}

/// Reads until the peer closes the connection (Ok: everything read) or `within`
/// passes (Err: still open, with what was read so far).
async fn read_to_close(s: &mut TcpStream, within: Duration) -> Result<Vec<u8>, Vec<u8>> {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return Err(got),
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// SIGTERM completes although a client holds a half-sent request open, and the
/// backend processes are stopped.
#[tokio::test]
async fn shutdown_completes_while_a_client_holds_a_half_sent_request() {
    let mut g = gantry()
        .server("shutdown_grace = \"1s\"")
        .backend(example().mode("shared"))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let _ = c
        .call_tool(json!(1), "echo", json!({"message": "up"}))
        .await;
    let backends: Vec<u32> = descendants_of(g.pid()).iter().map(|d| d.0).collect();
    assert!(!backends.is_empty(), "the shared backend runs");
    let mut half = raw(&g).await;
    half.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\nX: a")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = g.terminate(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "gantry did not exit cleanly: {status:?}"
    );
    for p in backends {
        assert!(!alive(p), "backend process {p} outlived gantry");
    }
}

/// A request head that arrives too slowly, and a kept-alive connection left idle,
/// are closed after `header_timeout`; other clients are served meanwhile.
#[tokio::test]
async fn slow_heads_and_idle_connections_are_closed() {
    let g = gantry()
        .server("header_timeout = \"1s\"")
        .backend(example())
        .start();
    let mut slow = raw(&g).await;
    slow.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let mut idle = raw(&g).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut c = g.client();
    c.initialize().await; // others are served while those two wait
    assert!(
        read_to_close(&mut slow, Duration::from_secs(10))
            .await
            .is_ok(),
        "a half-sent head held its connection open"
    );
    let answered = read_to_close(&mut idle, Duration::from_secs(10))
        .await
        .expect("an idle keep-alive connection was held open");
    assert!(
        String::from_utf8_lossy(&answered).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answered)
    );
}

/// A body that stops arriving gets 408 with a JSON-RPC error after `body_timeout`.
#[tokio::test]
async fn a_stalled_body_gets_408() {
    let g = gantry()
        .server("body_timeout = \"1s\"")
        .backend(example())
        .start();
    let mut s = raw(&g).await;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"",
        addr_of(&g)
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let got = read_to_close(&mut s, Duration::from_secs(10))
        .await
        .expect("a stalled body held its connection open");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["id"], Value::Null);
}

/// Beyond `max_connections` a connection is answered 503 (a liveness probe 200) and
/// closed; once connections close, new ones are served again.
#[tokio::test]
async fn beyond_the_connection_cap_503_and_healthz_still_answers() {
    let g = gantry()
        .server("max_connections = 3")
        .backend(example())
        .start();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(raw(&g).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = raw(&g).await;
    over.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let got = read_to_close(&mut over, Duration::from_secs(5))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.to_lowercase().contains("retry-after: 1"), "{text}");
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
    assert_eq!(body["error"]["code"], -32000, "{body}");
    let mut probe = raw(&g).await;
    probe
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut probe, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    drop(held);
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let c = g.client();
        let r = c
            .post(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
                "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
            .await;
        if r.status == 200 {
            break;
        }
        assert!(
            Instant::now() < end,
            "still refused after the others closed: {}",
            r.raw
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that stops reading a stream is disconnected after `write_timeout`
/// instead of holding its connection forever, and what it missed, answer included,
/// is still there when it resumes.
#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_and_resumes_its_answer() {
    let g = gantry()
        .server("write_timeout = \"1s\"")
        .backend(python_fixture("mb", "misbehaving_server.py"))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock.connect(addr_of(&g).parse().unwrap()).await.unwrap();
    // An answer larger than any socket buffer (wmem max is 4 MiB here): it cannot all
    // be written while the client reads nothing, whatever the timing. (A flood of
    // notifications could shrink to what fits: the oldest are dropped.)
    let body = json!({"jsonrpc":"2.0","id":"f","method":"tools/call",
                      "params":{"name":"huge","arguments":{"bytes": 10_000_000}}})
    .to_string();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {}\r\n\
         MCP-Protocol-Version: {}\r\nContent-Length: {}\r\n\r\n{body}",
        addr_of(&g),
        c.session.as_deref().unwrap(),
        c.version,
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    assert!(
        metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await,
        "the call did not start"
    );
    // 8 MB through a Python backend: slow on a loaded machine.
    assert!(
        metric_within(&g, "gantry_calls_in_flight", Duration::from_secs(40), |n| n
            == 0.0)
        .await,
        "the call did not finish"
    );
    // Stalled longer than write_timeout once Gantry has the answer to write (turning
    // 10 MB into SSE takes a while on a loaded machine; a read starting before the
    // stall timer runs out would be progress).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let got = read_to_close(&mut s, Duration::from_secs(20))
        .await
        .unwrap_or_else(|got| {
            panic!(
                "a client that stopped reading kept its connection ({} bytes read)",
                got.len()
            )
        });
    let text = String::from_utf8_lossy(&got);
    let first_id = text
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .expect("the stream's first event id")
        .to_owned();
    let resumed = c.resume(&first_id).await;
    assert_eq!(resumed.status(), 200);
    let answer = SseReader::new(resumed)
        .message_where(deadline(10), |m| m.get("id") == Some(&json!("f")))
        .await;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text.len(), 10_000_000, "the resumed answer is not whole");
}

// ---- backends that break the framing ----

/// A stdio backend that closes its stdout but keeps running can never answer again:
/// its call fails at once (not after `request_timeout`), it is restarted, and the
/// next calls work.
#[tokio::test]
async fn a_backend_that_closes_its_stdout_is_restarted() {
    let g = gantry()
        .backend(
            python_fixture("mb", "misbehaving_server.py")
                .mode("shared")
                .set("request_timeout = \"60s\""),
        )
        .start();
    let mut c = g.client();
    c.initialize().await;
    let before = c.call_tool(json!(1), "pid", json!({})).await;
    let started = Instant::now();
    let r = c.call_tool(json!(2), "close_stdout", json!({})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("closed its stdout"), "{r}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "waited for the timeout"
    );
    let end = Instant::now() + Duration::from_secs(15);
    let after = loop {
        let r = c.call_tool(json!(3), "pid", json!({})).await;
        if r.get("result").is_some() {
            break r;
        }
        assert!(Instant::now() < end, "never came back: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(
        before["result"]["content"][0]["text"], after["result"]["content"][0]["text"],
        "a new process answers"
    );
}

/// An answer larger than `max_message_bytes` fails its own call at once with an
/// error that says so, whichever order the backend writes its members in; the
/// session goes on.
#[tokio::test]
async fn an_answer_over_the_message_limit_fails_its_call_at_once() {
    let g = gantry()
        .backend(
            python_fixture("mb", "misbehaving_server.py")
                .set("max_message_bytes = 100000")
                .set("request_timeout = \"60s\""),
        )
        .start();
    let mut c = g.client();
    c.initialize().await;
    for (id, id_last) in [(1, false), (2, true)] {
        let started = Instant::now();
        let r = c
            .call_tool(
                json!(id),
                "huge",
                json!({"bytes": 300_000, "id_last": id_last}),
            )
            .await;
        assert_eq!(r["id"], id, "{r}");
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("more than max_message_bytes (100000)"), "{r}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "waited for the timeout"
        );
    }
    let ok = c.call_tool(json!(3), "huge", json!({"bytes": 1000})).await;
    assert_eq!(
        ok["result"]["content"][0]["text"].as_str().map(str::len),
        Some(1000),
        "{ok}"
    );
}

// ---- malformed input ----

/// A request with `"id": null` is no notification: it is refused with -32600 (and
/// `id: null`), in a session, in a 2025-03-26 batch and in the stateless era; the
/// backend never sees it.
#[tokio::test]
async fn a_request_with_a_null_id_is_invalid() {
    let dir = Scratch::new("null-id");
    let record = dir.file("record.jsonl");
    let g = gantry().backend(example().record(&record)).start();
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .post(&json!({"jsonrpc":"2.0","id":null,"method":"tools/call",
                      "params":{"name":"echo","arguments":{"message":"null-id"}}}))
        .await;
    assert_eq!(r.status, 400, "{}", r.raw);
    let body: Value = serde_json::from_str(&r.raw).unwrap();
    assert_rpc_error(&body, -32600, None);
    assert_eq!(body["id"], Value::Null);

    let s = Stateless::new(&g);
    let r = s
        .send(
            s.builder("tools/call", Some("echo")),
            json!({"jsonrpc":"2.0","id":null,"method":"tools/call","params":{
                "name":"echo","arguments":{"message":"null-id"},
                "_meta": stateless_meta(json!({}))}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.raw);
    assert_rpc_error(&serde_json::from_str(&r.raw).unwrap(), -32600, None);

    // An ordinary call afterwards reaches the backend; the null-id ones never did.
    let ok = c
        .call_tool(json!(2), "echo", json!({"message": "after"}))
        .await;
    assert_eq!(ok["result"]["content"][0]["text"], "after", "{ok}");
    let seen = std::fs::read_to_string(&record).unwrap_or_default();
    assert!(
        !seen.contains("null-id"),
        "a null-id request reached the backend"
    );
}

// ---- per-client session quotas ----

fn init_body() -> Value {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"q","version":"1"}}})
}

async fn open_as(g: &Gantry, key: Option<&str>) -> Reply {
    let c = g.client();
    let mut rb = c.post_builder().body(init_body().to_string());
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    Client::read(rb.send().await.unwrap()).await
}

/// One client cannot hold more than `max_sessions_per_client` sessions (429 with
/// Retry-After and a JSON-RPC error); another principal is not affected; ending a
/// session gives its place back.
#[tokio::test]
async fn one_client_cannot_take_every_session() {
    let g = gantry()
        .server("max_sessions_per_client = 3")
        .api_key("alice", "alice-key")
        .api_key("bob", "bob-key")
        .backend(example())
        .start();
    let mut alice = Vec::new();
    for _ in 0..3 {
        let r = open_as(&g, Some("alice-key")).await;
        assert_eq!(r.status, 200, "{}", r.raw);
        alice.push(r.headers["mcp-session-id"].to_str().unwrap().to_owned());
    }
    let refused = open_as(&g, Some("alice-key")).await;
    assert_eq!(refused.status, 429, "{}", refused.raw);
    assert!(refused.headers.get("retry-after").is_some());
    assert!(refused.headers.get("mcp-session-id").is_none());
    let body: Value = serde_json::from_str(&refused.raw).unwrap();
    assert_rpc_error(&body, -32000, None);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_sessions_per_client"),
        "{body}"
    );
    let bob = open_as(&g, Some("bob-key")).await;
    assert_eq!(bob.status, 200, "another principal is refused: {}", bob.raw);
    let ended = g
        .client()
        .http
        .delete(&g.url)
        .bearer_auth("alice-key")
        .header("mcp-session-id", &alice[0])
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert!(ended.status().is_success(), "{}", ended.status());
    let again = open_as(&g, Some("alice-key")).await;
    assert_eq!(again.status, 200, "{}", again.raw);
}

/// Anonymous clients are told apart by address; creation is rate limited per client
/// with a burst, and the refusal says when to retry.
#[tokio::test]
async fn an_anonymous_client_opening_sessions_in_a_loop_is_slowed_down() {
    let g = gantry()
        .server("session_rate_per_client = 60")
        .server("session_burst_per_client = 2")
        .backend(example())
        .start();
    for _ in 0..2 {
        let r = open_as(&g, None).await;
        assert_eq!(r.status, 200, "{}", r.raw);
    }
    let refused = open_as(&g, None).await;
    assert_eq!(refused.status, 429, "{}", refused.raw);
    assert_eq!(refused.headers["retry-after"], "1");
    let body: Value = serde_json::from_str(&refused.raw).unwrap();
    let wait = body["error"]["data"]["retryAfterMs"].as_u64().unwrap();
    assert!(wait > 0 && wait <= 1000, "{body}");
    tokio::time::sleep(Duration::from_millis(wait + 50)).await;
    let later = open_as(&g, None).await;
    assert_eq!(later.status, 200, "{}", later.raw);
}

/// A backend that writes 100,000 junk lines to stdout and as many to stderr gets a
/// bounded share of Gantry's log, with a count of what was left out, and still
/// answers.
#[tokio::test]
async fn a_noisy_backend_cannot_flood_the_log() {
    let g = gantry()
        .backend(python_fixture("mb", "misbehaving_server.py").env("MB_NOISE", "100000"))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let r = c
        .call_tool(json!(1), "echo", json!({"message": "still here"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "still here", "{r}");
    // Both floods are read to their end (the summary comes when a window closes or
    // the stream ends): stop the backend by ending the session.
    let _ = c.delete().await;
    let end = Instant::now() + Duration::from_secs(10);
    while !g
        .log
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("stderr lines"))
    {
        assert!(Instant::now() < end, "no summary of the stderr noise");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = g.log.lock().unwrap().clone();
    let bytes: usize = log.iter().map(String::len).sum();
    assert!(
        bytes < 200_000,
        "{bytes} bytes of log for one noisy backend"
    );
    let left_out: u64 = log
        .iter()
        .filter(|l| l.contains("backend noise not logged"))
        .filter_map(|l| {
            let (_, rest) = l.split_once("lines=")?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(
        left_out > 190_000,
        "the summaries count what was left out: {left_out}"
    );
}

// ---- no process outlives gantry ----

/// A backend whose grandchild (`sleep 300`, which reads no stdin) runs in a new
/// session when `setsid`, else in the backend's process group.
fn with_grandchild(dir: &Scratch, setsid: bool) -> (BackendSpec, std::path::PathBuf) {
    let pidfile = dir.file("backend.pid");
    let grandfile = dir.file("grandchild.pid");
    let mut b = python_fixture("mb", "misbehaving_server.py")
        .env("MB_PIDFILE", pidfile.to_str().unwrap())
        .env("MB_GRANDCHILD", grandfile.to_str().unwrap());
    if setsid {
        b = b.env("MB_SETSID", "1");
    }
    let _ = pidfile;
    (b, grandfile)
}

async fn pid_in(file: &std::path::Path) -> u32 {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(p) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return p;
        }
        assert!(Instant::now() < end, "{} never written", file.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn gone_within(pids: &[u32], within: Duration) -> bool {
    let end = Instant::now() + within;
    while pids.iter().any(|p| alive(*p)) {
        if Instant::now() > end {
            for p in pids {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &p.to_string()])
                    .status();
            }
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// `kill -9` of gantry (the process a supervisor knows) still stops every backend
/// process, grandchildren that read no stdin included.
#[tokio::test]
async fn kill_9_of_gantry_leaves_no_backend_process() {
    let dir = Scratch::new("kill9");
    let (backend, grandfile) = with_grandchild(&dir, false);
    let mut g = gantry()
        .server("shutdown_grace = \"1s\"")
        .backend(backend.mode("shared"))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let grandchild = pid_in(&grandfile).await;
    let tree: Vec<u32> = descendants_of(g.supervisor_pid())
        .iter()
        .map(|d| d.0)
        .collect();
    assert!(tree.contains(&grandchild), "{tree:?}");
    g.child.kill().unwrap();
    let _ = g.child.wait();
    assert!(
        gone_within(&tree, Duration::from_secs(15)).await,
        "processes outlived a kill -9 of gantry: {tree:?}"
    );
}

/// `kill -9` of the gateway process itself (an OOM kill): the backends it leaves
/// are stopped, and gantry exits with 128 + 9.
#[tokio::test]
async fn an_oom_killed_gateway_leaves_no_backend_process() {
    let dir = Scratch::new("oom");
    let (backend, grandfile) = with_grandchild(&dir, false);
    let mut g = gantry().backend(backend.mode("shared")).start();
    let mut c = g.client();
    c.initialize().await;
    let grandchild = pid_in(&grandfile).await;
    let worker = g.pid();
    let tree: Vec<u32> = descendants_of(worker).iter().map(|d| d.0).collect();
    assert!(tree.contains(&grandchild), "{tree:?}");
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &worker.to_string()])
        .status();
    let end = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Ok(Some(s)) = g.child.try_wait() {
            break Some(s);
        }
        if Instant::now() > end {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.and_then(|s| s.code()), Some(137), "{status:?}");
    assert!(
        gone_within(&tree, Duration::from_secs(5)).await,
        "processes outlived the gateway: {tree:?}"
    );
}

/// A grandchild that left its process group (`setsid`) is stopped with its backend
/// when the session ends, and on a clean SIGTERM.
#[tokio::test]
async fn grandchildren_that_called_setsid_are_stopped_too() {
    let dir = Scratch::new("setsid");
    let (backend, grandfile) = with_grandchild(&dir, true);
    let mut g = gantry().backend(backend).start();
    let mut c = g.client();
    c.initialize().await;
    let first = pid_in(&grandfile).await;
    let _ = std::fs::remove_file(&grandfile);
    let ended = c.delete().await;
    assert!(ended.status().is_success());
    assert!(
        gone_within(&[first], Duration::from_secs(10)).await,
        "a setsid grandchild outlived its session"
    );
    let mut c = g.client();
    c.initialize().await;
    let second = pid_in(&grandfile).await;
    assert_ne!(first, second);
    let status = g.terminate(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(
        gone_within(&[second], Duration::from_secs(5)).await,
        "a setsid grandchild outlived gantry"
    );
}

// ---- all of it at once ----

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Hostile clients and crashing, hanging, oversized backends all at once: every
/// misbehaviour gets its precise answer, a bystander session is served throughout,
/// and afterwards the gateway holds as many open files and backend processes as
/// before (and about as much memory).
#[tokio::test]
async fn chaos_leaves_the_gateway_as_it_was() {
    let g = gantry()
        .server("header_timeout = \"1s\"")
        .server("body_timeout = \"1s\"")
        .server("write_timeout = \"1s\"")
        .backend(
            python_fixture("mb", "misbehaving_server.py")
                .set("max_message_bytes = 100000")
                .set("request_timeout = \"60s\""),
        )
        .start();
    let worker = g.pid();
    let mut bystander = g.client();
    bystander.initialize().await;
    let _ = bystander
        .call_tool(json!(0), "echo", json!({"message": "warm"}))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (fds_before, rss_before) = (open_fds(worker), rss_kib(worker));
    let procs_before = descendants_of(worker).len();

    let stop = tokio_util::sync::CancellationToken::new();
    let served = {
        let (c, stop) = (bystander.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.is_cancelled() {
                let r = c
                    .call_tool(json!(n), "echo", json!({"message": n.to_string()}))
                    .await;
                assert_eq!(
                    r["result"]["content"][0]["text"],
                    n.to_string(),
                    "bystander: {r}"
                );
                n += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            n
        })
    };

    // Slow heads and stalled bodies.
    let mut sockets = Vec::new();
    for i in 0..40 {
        let mut s = raw(&g).await;
        let part: &[u8] = if i % 2 == 0 {
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        } else {
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: 50\r\n\r\n{"
        };
        s.write_all(part).await.unwrap();
        sockets.push(s);
    }
    // Sessions whose backends crash, hang, or answer too much.
    let mut chaos = Vec::new();
    for tool in ["crash", "crash", "huge", "huge", "hang", "hang"] {
        let mut c = g.client();
        c.initialize().await;
        chaos.push((tool, c));
    }
    let calls = chaos.iter().map(|(tool, c)| async move {
        let args = if *tool == "huge" {
            json!({"bytes": 300_000})
        } else {
            json!({})
        };
        let call = c.call_tool(json!(1), tool, args);
        match *tool {
            "hang" => {
                // Abandoned by its client: the session ends under it.
                let _ = tokio::time::timeout(Duration::from_millis(500), call).await;
                None
            }
            _ => Some((*tool, call.await)),
        }
    });
    for (tool, r) in futures::future::join_all(calls).await.into_iter().flatten() {
        let msg = r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match tool {
            "crash" => assert!(msg.contains("backend `mb` failed"), "{tool}: {r}"),
            _ => assert!(msg.contains("max_message_bytes"), "{tool}: {r}"),
        }
    }
    // The heads and bodies were cut off by the server.
    for mut s in sockets {
        assert!(
            read_to_close(&mut s, Duration::from_secs(10)).await.is_ok(),
            "a slow client kept its connection"
        );
    }
    for (_, c) in &chaos {
        let _ = c.delete().await;
    }
    stop.cancel();
    let n = served.await.unwrap();
    assert!(n > 5, "the bystander was barely served: {n} calls");

    // Back to where it was: files, processes, memory.
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let (fds, procs) = (open_fds(worker), descendants_of(worker).len());
        if fds <= fds_before + 2 && procs == procs_before {
            break;
        }
        assert!(
            Instant::now() < end,
            "open files {fds_before} -> {fds}, backend processes {procs_before} -> {procs}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss_after = rss_kib(worker);
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS {rss_before} KiB -> {rss_after} KiB"
    );
}

/// A backend that ignores both the closing of its stdin and SIGTERM is killed
/// (SIGKILL after the graces), and ending its session does not wait for that.
#[tokio::test]
async fn a_backend_that_ignores_sigterm_is_killed_and_delete_does_not_wait() {
    let dir = Scratch::new("stubborn");
    let pidfile = dir.file("backend.pid");
    let g = gantry()
        .backend(
            python_fixture("mb", "misbehaving_server.py")
                .env("MB_STUBBORN", "1")
                .env("MB_PIDFILE", pidfile.to_str().unwrap()),
        )
        .start();
    let mut c = g.client();
    c.initialize().await;
    let backend = pid_in(&pidfile).await;
    let started = Instant::now();
    let ended = c.delete().await;
    let took = started.elapsed();
    assert!(ended.status().is_success());
    assert!(
        gone_within(&[backend], Duration::from_secs(15)).await,
        "a backend ignoring SIGTERM survived"
    );
    assert!(
        took < Duration::from_secs(2),
        "DELETE waited {took:?} for the backend to stop"
    );
}

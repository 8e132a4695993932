//! Backends that misbehave: crashes, garbage on stdout, requests that never end,
//! shutdown with live children, HTTP backends that die, several backends at once,
//! per-session processes, and configuration checking.
//!
//! Everything runs against the real `gantry` binary and real backend processes: the
//! example server (`gantry-example`) and `tests/fixtures/misbehaving_server.py`.
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
use std::future::Future;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Upper bound for anything that should be "prompt" on a loaded CI machine.
const PROMPT: Duration = Duration::from_secs(10);
/// Interval between two looks at something we are waiting for.
const POLL: Duration = Duration::from_millis(20);

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

/// A TOML basic string holding `s` (JSON string escapes are valid TOML escapes).
fn toml_str(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

fn path_str(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// One `[[backends]]` table running the misbehaving server, restarted 100ms after a
/// crash. `extra` is more keys of the backend table (e.g. `request_timeout = "500ms"`).
fn mb_backend(name: &str, extra: &str, env: &[(&str, String)]) -> String {
    mb_backend_with_backoff(name, extra, "100ms", env)
}

fn mb_backend_with_backoff(
    name: &str,
    extra: &str,
    backoff: &str,
    env: &[(&str, String)],
) -> String {
    let script = fixture("misbehaving_server.py");
    let env: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k} = {}", toml_str(v)))
        .collect();
    format!(
        "[[backends]]\nname = {}\n{extra}\nrestart = {{ initial_backoff = {} }}\n\
         stdio = {{ command = \"python3\", args = [{}], env = {{ {} }} }}\n",
        toml_str(name),
        toml_str(backoff),
        toml_str(&path_str(&script)),
        env.join(", ")
    )
}

/// One `[[backends]]` table running the example server over stdio.
fn example_backend(name: &str) -> String {
    format!(
        "[[backends]]\nname = {}\nstdio = {{ command = {} }}\n",
        toml_str(name),
        toml_str(&path_str(&example_bin()))
    )
}

/// Polls `check` every [`POLL`] until it returns `Some`, for at most `within`.
async fn poll<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Awaits `fut`, failing the test (instead of hanging) after `within`.
async fn bounded<T>(what: &str, within: Duration, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(within, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {within:?} (hang)"),
    }
}

fn count(g: &Gantry, needle: &str) -> usize {
    g.log_text().matches(needle).count()
}

async fn wait_log(g: &Gantry, needle: &str, within: Duration) {
    if poll(within, || g.log_text().contains(needle).then_some(()))
        .await
        .is_none()
    {
        panic!(
            "gantry never logged {needle:?} within {within:?}; log:\n{}",
            g.log_text()
        );
    }
}

/// Reads a pid written by the fixture (the write is atomic, so no partial reads).
async fn read_pid(file: &Path) -> u32 {
    poll(PROMPT, || {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await
    .unwrap_or_else(|| panic!("no pid in {}", file.display()))
}

/// The text of a successful `tools/call` response.
fn tool_text(r: &Value) -> String {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("not a successful tool result: {r}"))
        .to_owned()
}

/// Calls the fixture's `pid` tool.
async fn backend_pid(c: &Client, id: i64) -> u32 {
    let r = bounded("pid tool", PROMPT, c.call_tool(json!(id), "pid", json!({}))).await;
    tool_text(&r).parse().unwrap()
}

/// Asserts `r` is a JSON-RPC error from Gantry that names `backend`.
fn assert_backend_error(r: &Value, code: i64, backend: &str) {
    let err = assert_rpc_error(r, code, Some(backend));
    let msg = err["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains(&format!("`{backend}`")),
        "message does not name backend `{backend}`: {r}"
    );
}

/// Kills, when dropped, the fixture's `sleep` grandchildren that are still alive, so
/// a failing test (whose gantry is SIGKILLed by the harness and so cannot clean up)
/// leaves nothing behind. Each pid is checked to still be a `sleep` first.
struct ReapSleepers(Vec<u32>);

impl Drop for ReapSleepers {
    fn drop(&mut self) {
        for pid in &self.0 {
            let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if alive(*pid) && cmd.starts_with("sleep") {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// Ends a session with DELETE; returns the HTTP status.
async fn delete_session(c: &Client) -> u16 {
    let rb = c
        .http
        .delete(&c.url)
        .header("mcp-session-id", c.session.as_deref().unwrap())
        .header("mcp-protocol-version", &c.version);
    bounded("DELETE", PROMPT, rb.send())
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Runs a short command to its end (bounded); returns (exit code, stdout, stderr).
fn run_bounded(cmd: &mut Command, within: Duration) -> (Option<i32>, String, String) {
    let scratch = Scratch::new("cmd");
    let (out, err) = (scratch.file("stdout"), scratch.file("stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let end = Instant::now() + within;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {within:?}");
        }
        std::thread::sleep(POLL);
    };
    (
        status.code(),
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(err).unwrap(),
    )
}

// ---------------------------------------------------------------------------------
// 1. A stdio backend that crashes mid-request
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn crash_mid_request_fails_promptly_and_the_backend_restarts() {
    let g = Gantry::with_config(&mb_backend("mb", "request_timeout = \"60s\"", &[]));
    let mut c = g.client();
    c.initialize().await;
    let first = backend_pid(&c, 1).await;

    let t = Instant::now();
    let r = bounded(
        "crash call",
        Duration::from_secs(30),
        c.call_tool(json!(2), "crash", json!({})),
    )
    .await;
    let took = t.elapsed();
    assert_eq!(r["id"], json!(2));
    assert_backend_error(&r, -32000, "mb");
    assert!(
        took < PROMPT,
        "crash reported after {took:?}, not promptly (request_timeout is 60s)"
    );

    // Synchronise on the restart itself: the second incarnation is initialized.
    if poll(Duration::from_secs(20), || {
        (count(&g, "backend initialized") >= 2).then_some(())
    })
    .await
    .is_none()
    {
        panic!("backend was not restarted; log:\n{}", g.log_text());
    }
    let r = bounded(
        "echo after restart",
        PROMPT,
        c.call_tool(json!(3), "echo", json!({"message": "again"})),
    )
    .await;
    assert_eq!(tool_text(&r), "again", "{r}");
    let second = backend_pid(&c, 4).await;
    assert_ne!(first, second, "the same process answered after the crash");
    assert!(!alive(first), "the crashed process {first} is still alive");
    assert!(g.log_text().contains("backend stopped; restarting"));
}

/// A session whose call just crashed the `mb` backend (the call failed naming it).
async fn crashed_session(g: &Gantry) -> Client {
    let mut c = g.client();
    c.initialize().await;
    let r = bounded(
        "crash call",
        Duration::from_secs(30),
        c.call_tool(json!(1), "crash", json!({})),
    )
    .await;
    assert_backend_error(&r, -32000, "mb");
    c
}

#[tokio::test]
async fn a_request_between_crash_and_restart_waits_for_the_restart() {
    // A long backoff keeps the backend down while the next request arrives.
    let g = Gantry::with_config(&mb_backend_with_backoff(
        "mb",
        "request_timeout = \"60s\"",
        "2s",
        &[],
    ));
    let c = crashed_session(&g).await;
    // Sent during the backoff: it waits for the new incarnation and is answered.
    let r = bounded(
        "echo during backoff",
        Duration::from_secs(30),
        c.call_tool(json!(2), "echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(tool_text(&r), "x", "{r}");
}

#[tokio::test]
async fn a_request_is_not_held_for_a_restart_beyond_the_init_timeout() {
    // The backoff (3s) outlasts init_timeout (1s): waiting could not help.
    let g = Gantry::with_config(&mb_backend_with_backoff(
        "mb",
        "request_timeout = \"60s\"\ninit_timeout = \"1s\"",
        "3s",
        &[],
    ));
    let c = crashed_session(&g).await;
    let t = Instant::now();
    let r = bounded(
        "echo during backoff",
        Duration::from_secs(30),
        c.call_tool(json!(2), "echo", json!({"message": "x"})),
    )
    .await;
    let took = t.elapsed();
    assert!(took < Duration::from_millis(500), "held {took:?}: {r}");
    assert_backend_error(&r, -32000, "mb");
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("restarting in"), "{r}");
    if poll(Duration::from_secs(20), || {
        (count(&g, "backend initialized") >= 2).then_some(())
    })
    .await
    .is_none()
    {
        panic!("backend was not restarted; log:\n{}", g.log_text());
    }
    let r = bounded(
        "echo after restart",
        PROMPT,
        c.call_tool(json!(3), "echo", json!({"message": "back"})),
    )
    .await;
    assert_eq!(tool_text(&r), "back", "{r}");
}

// ---------------------------------------------------------------------------------
// 2. Garbage and over-long lines on stdout
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn garbage_and_overlong_lines_on_stdout_are_logged_and_skipped() {
    let env = [
        ("MB_GARBAGE", "1".to_owned()),
        ("MB_LONG_LINE", "200000".to_owned()),
    ];
    let g = Gantry::with_config(&mb_backend("mb", "max_message_bytes = 65536", &env));
    let mut c = g.client();
    let init = bounded("initialize", PROMPT, c.initialize()).await;
    assert_eq!(
        init["result"]["serverInfo"]["name"], "misbehaving-server",
        "{init}"
    );

    let r = bounded(
        "tools/list",
        PROMPT,
        c.request(json!("l"), "tools/list", json!({})),
    )
    .await;
    let list = r
        .response(&json!("l"))
        .unwrap_or_else(|| panic!("no tools/list response: {}", r.raw));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "echo",
            "pid",
            "env",
            "crash",
            "hang",
            "change",
            "flood",
            "huge",
            "pipes",
            "close_stdout",
            "ask_many",
            "progress_burst",
            "stall"
        ]
    );

    for i in 0..3 {
        let msg = format!("through the noise {i}");
        let r = bounded(
            "echo",
            PROMPT,
            c.call_tool(json!(i), "echo", json!({"message": msg})),
        )
        .await;
        assert_eq!(r["id"], json!(i));
        assert_eq!(tool_text(&r), msg, "{r}");
    }

    wait_log(&g, "not JSON-RPC; skipped", PROMPT).await;
    wait_log(&g, "larger than max_message_bytes; skipped", PROMPT).await;
    let log = g.log_text();
    assert_eq!(
        count(&g, "backend process started"),
        1,
        "the backend was restarted; log:\n{log}"
    );
    assert!(!log.contains("backend stopped"), "log:\n{log}");
    assert!(!log.contains("panicked"), "log:\n{log}");
}

/// A message larger than a backend's pipe grows that pipe, as the backend itself
/// sees it: a large request its stdin before it is written, a large answer its
/// stdout for the next one; small messages leave both as they are.
#[tokio::test]
async fn a_backends_pipes_grow_for_messages_larger_than_them() {
    let g = Gantry::with_config(&mb_backend("mb", "", &[]));
    let mut c = g.client();
    c.initialize().await;
    let sizes = |r: &Value| -> (u64, u64) {
        let v: Value = serde_json::from_str(&tool_text(r)).unwrap_or_else(|e| panic!("{e}: {r}"));
        (v["stdin"].as_u64().unwrap(), v["stdout"].as_u64().unwrap())
    };
    let grown = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20)
        .min(256 * 1024);
    let small = 64 * 1024;
    let r = bounded("pipes", PROMPT, c.call_tool(json!(1), "pipes", json!({}))).await;
    assert_eq!(sizes(&r), (small, small));
    let r = bounded(
        "echo",
        PROMPT,
        c.call_tool(json!(2), "echo", json!({"message": "x".repeat(60_000)})),
    )
    .await;
    assert_eq!(tool_text(&r).len(), 60_000);
    let r = bounded("pipes", PROMPT, c.call_tool(json!(3), "pipes", json!({}))).await;
    assert_eq!(
        sizes(&r),
        (small, small),
        "messages that fit changed the pipes"
    );

    let pad = "p".repeat(200_000);
    let r = bounded(
        "pipes",
        PROMPT,
        c.call_tool(json!(4), "pipes", json!({ "pad": pad })),
    )
    .await;
    assert_eq!(sizes(&r), (grown, small), "a 200 KB request");

    let r = bounded(
        "huge",
        PROMPT,
        c.call_tool(json!(5), "huge", json!({"bytes": 150_000})),
    )
    .await;
    assert_eq!(tool_text(&r).len(), 150_000);
    let r = bounded("pipes", PROMPT, c.call_tool(json!(6), "pipes", json!({}))).await;
    assert_eq!(sizes(&r), (grown, grown), "after a 150 KB answer");
}

/// Large params reach a stdio backend exactly as the client wrote them, whether they
/// go after the request's head as they are (several writes for more than a pipe
/// holds) or, holding raw newlines between tokens, framed onto one line.
#[tokio::test]
async fn large_params_reach_a_stdio_backend_whole() {
    let dir = Scratch::new("large-params");
    let record = dir.file("mb.jsonl");
    let g = Gantry::recorded_misbehaving(&record);
    let mut c = g.client();
    c.initialize().await;
    // A message larger than a grown pipe (1 MiB at most).
    let (message, params, bodies) = large_echo_calls(2560);
    for (id, body) in bodies {
        let r = bounded(
            "echo",
            PROMPT,
            Client::read(c.post_builder().body(body).send().await.unwrap()),
        )
        .await;
        let answer = r
            .response(&json!(id))
            .unwrap_or_else(|| panic!("{}", r.raw));
        assert_eq!(tool_text(answer), message, "call {id}");
    }
    let got: Vec<Value> = recorded(&record)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| m["params"].clone())
        .collect();
    assert_eq!(got.len(), 2, "the backend did not get both calls whole");
    assert!(
        got.iter().all(|p| *p == params),
        "the params changed on the way"
    );
}

/// Progress a backend writes together with its answer (read by Gantry in one piece)
/// reaches the client on the call's stream ahead of the answer: an answer is sent
/// alone only when nothing came before it.
#[tokio::test]
async fn progress_read_with_the_answer_comes_before_it() {
    let dir = Scratch::new("progress-burst");
    let g = Gantry::recorded_misbehaving(&dir.file("mb.jsonl"));
    let mut c = g.client();
    c.initialize().await;
    for id in 1..=5 {
        let token = format!("t{id}");
        let params = json!({"name": "progress_burst", "arguments": {"n": 3},
                            "_meta": {"progressToken": token}});
        let r = bounded("burst", PROMPT, c.request(json!(id), "tools/call", params)).await;
        let seen: Vec<String> = r
            .messages
            .iter()
            .map(|m| match m["method"].as_str() {
                Some(method) => format!(
                    "{method} {} {}",
                    m["params"]["progressToken"], m["params"]["progress"]
                ),
                None => format!("answer {} {}", m["id"], tool_text(m)),
            })
            .collect();
        let want: Vec<String> = (1..=3)
            .map(|p| format!("notifications/progress \"{token}\" {p}"))
            .chain([format!("answer {id} burst")])
            .collect();
        assert_eq!(seen, want, "call {id}: {}", r.raw);
    }
}

/// A request cut short while a backend does not read its stdin (its call timed out
/// with the pipe full) leaves part of a line in the pipe: the messages after it
/// still reach the backend, the cancellation of the call that timed out first
/// included, instead of being glued to the torn line.
#[tokio::test]
async fn a_write_cut_short_costs_the_backend_no_later_message() {
    let dir = Scratch::new("torn-write");
    let record = dir.file("mb.jsonl");
    let g = Gantry::with_config(&mb_backend(
        "mb",
        "request_timeout = \"1s\"",
        &[("MB_RECORD", path_str(&record))],
    ));
    let mut c = g.client();
    c.initialize().await;
    // The backend reads nothing for 3 s; its call times out after 1 s and is
    // cancelled upstream while a 2.5 MB request (more than its pipe holds) is being
    // written, until that call times out too.
    let stall = c.call_tool(json!(1), "stall", json!({"seconds": 3}));
    let big = async {
        // Once the backend has recorded the stall call, it is stalling.
        let stalling = poll(PROMPT, || {
            recorded(&record)
                .iter()
                .any(|m| m["params"]["name"] == "stall")
                .then_some(())
        })
        .await;
        assert!(
            stalling.is_some(),
            "the stall call never reached the backend"
        );
        c.call_tool(json!(2), "echo", json!({"message": "z".repeat(2_500_000)}))
            .await
    };
    let (stalled, big) = bounded("calls", PROMPT, async { tokio::join!(stall, big) }).await;
    assert!(stalled.get("error").is_some(), "{stalled}");
    assert!(
        big.get("error").is_some(),
        "the large call did not time out"
    );
    // Then the backend reads again (after its 3 s): a later call is answered, and
    // the stall's cancellation, written after the torn line, arrived whole.
    let mut answered = false;
    for id in 3..13 {
        let r = bounded(
            "echo",
            PROMPT,
            c.call_tool(json!(id), "echo", json!({"message": "after"})),
        )
        .await;
        if r["result"]["content"][0]["text"] == "after" {
            answered = true;
            break;
        }
    }
    assert!(
        answered,
        "the backend answered nothing after the torn write"
    );
    let stall_id = recorded(&record)
        .into_iter()
        .find(|m| m["params"]["name"] == "stall")
        .map(|m| m["id"].clone())
        .expect("the stall call reached the backend");
    let cancelled = poll(PROMPT, || {
        recorded(&record)
            .into_iter()
            .find(|m| {
                m["method"] == "notifications/cancelled" && m["params"]["requestId"] == stall_id
            })
            .map(|_| ())
    })
    .await;
    assert!(
        cancelled.is_some(),
        "the stall's cancellation was lost: {:?}",
        recorded(&record)
            .iter()
            .map(|m| m["method"].clone())
            .collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------
// 3. A backend that never answers
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_request_that_is_never_answered_times_out_and_is_cancelled_upstream() {
    let dir = Scratch::new("hang");
    let record = dir.file("received.jsonl");
    let g = Gantry::with_config(&mb_backend(
        "mb",
        "request_timeout = \"500ms\"",
        &[("MB_RECORD", path_str(&record))],
    ));
    let mut c = g.client();
    c.initialize().await;

    let t = Instant::now();
    let r = bounded(
        "hang call",
        Duration::from_secs(30),
        c.call_tool(json!("h"), "hang", json!({})),
    )
    .await;
    let took = t.elapsed();
    assert_eq!(r["id"], json!("h"));
    assert_backend_error(&r, -32001, "mb");
    assert!(
        took >= Duration::from_millis(450),
        "timed out after only {took:?}"
    );
    assert!(took < PROMPT, "timeout reported after {took:?}");

    // The backend saw the call under an upstream id, then a cancellation of that id.
    let upstream_id = recorded(&record)
        .into_iter()
        .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "hang")
        .map(|m| m["id"].clone())
        .unwrap_or_else(|| {
            panic!(
                "the backend never received the call: {:?}",
                recorded(&record)
            )
        });
    let cancelled = poll(PROMPT, || {
        recorded(&record)
            .into_iter()
            .find(|m| m["method"] == "notifications/cancelled" && m.get("id").is_none())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "no notifications/cancelled reached the backend: {:?}",
            recorded(&record)
        )
    });
    assert_eq!(cancelled["params"]["requestId"], upstream_id, "{cancelled}");

    // The connection is still usable.
    let r = bounded(
        "echo after timeout",
        PROMPT,
        c.call_tool(json!(2), "echo", json!({"message": "still here"})),
    )
    .await;
    assert_eq!(tool_text(&r), "still here", "{r}");
    assert_eq!(count(&g, "backend process started"), 1);
}

// ---------------------------------------------------------------------------------
// 4. Shutdown: SIGTERM and DELETE leave no process behind
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn sigterm_exits_cleanly_and_leaves_no_child_or_grandchild() {
    let dir = Scratch::new("term");
    let (pidfile, grandfile) = (dir.file("pid"), dir.file("grandchild"));
    let mut g = Gantry::with_config(&mb_backend(
        "mb",
        "",
        &[
            ("MB_PIDFILE", path_str(&pidfile)),
            ("MB_GRANDCHILD", path_str(&grandfile)),
        ],
    ));
    let mut c = g.client();
    c.initialize().await;
    let r = bounded(
        "echo",
        PROMPT,
        c.call_tool(json!(1), "echo", json!({"message": "hi"})),
    )
    .await;
    assert_eq!(tool_text(&r), "hi");

    let child = read_pid(&pidfile).await;
    let grandchild = read_pid(&grandfile).await;
    let _reap = ReapSleepers(vec![grandchild]);
    let kids: Vec<u32> = children_of(g.pid()).into_iter().map(|(p, _)| p).collect();
    assert_eq!(kids, [child], "gantry's children");
    assert!(alive(grandchild), "the fixture's `sleep` did not start");

    let status = g
        .terminate(Duration::from_secs(20))
        .expect("gantry did not exit within 20s of SIGTERM");
    assert!(
        status.success(),
        "gantry exited with {status}; log:\n{}",
        g.log_text()
    );
    let gone = poll(PROMPT, || {
        (!alive(child) && !alive(grandchild)).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "left behind after shutdown: child {child} alive={}, grandchild {grandchild} alive={}",
        alive(child),
        alive(grandchild)
    );
}

#[tokio::test]
async fn delete_stops_only_that_sessions_backend() {
    let dir = Scratch::new("delete");
    let g = Gantry::with_config(&mb_backend(
        "mb",
        "",
        &[("MB_GRANDCHILD", path_str(&dir.file("grandchild")))],
    ));
    let (mut c1, mut c2) = (g.client(), g.client());
    c1.initialize().await;
    c2.initialize().await;
    let (p1, p2) = (backend_pid(&c1, 1).await, backend_pid(&c2, 1).await);
    assert_ne!(p1, p2, "per-session mode shares a process");
    let sleeper = |pid: u32| {
        children_of(pid)
            .into_iter()
            .find(|(_, cmd)| cmd.starts_with("sleep"))
            .map(|(p, _)| p)
    };
    let s1 = poll(PROMPT, || sleeper(p1))
        .await
        .expect("session 1's backend has no `sleep` child");
    let s2 = poll(PROMPT, || sleeper(p2))
        .await
        .expect("session 2's backend has no `sleep` child");
    let _reap = ReapSleepers(vec![s1, s2]);

    assert_eq!(delete_session(&c1).await, 200);
    let gone = poll(PROMPT, || (!alive(p1) && !alive(s1)).then_some(())).await;
    assert!(
        gone.is_some(),
        "after DELETE: backend {p1} alive={}, its sleep {s1} alive={}",
        alive(p1),
        alive(s1)
    );

    // The other session is untouched.
    assert!(alive(p2) && alive(s2));
    let tree: Vec<u32> = descendants_of(g.pid())
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let mut expected = vec![p2, s2];
    expected.sort_unstable();
    let mut tree_sorted = tree.clone();
    tree_sorted.sort_unstable();
    assert_eq!(
        tree_sorted, expected,
        "gantry's process tree after the DELETE"
    );
    let r = bounded(
        "echo",
        PROMPT,
        c2.call_tool(json!(2), "echo", json!({"message": "alive"})),
    )
    .await;
    assert_eq!(tool_text(&r), "alive");

    // Ending the last session leaves gantry without children.
    assert_eq!(delete_session(&c2).await, 200);
    let gone = poll(PROMPT, || {
        (!alive(p2) && !alive(s2) && descendants_of(g.pid()).is_empty()).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "after the second DELETE: backend {p2} alive={}, its sleep {s2} alive={}, gantry's children {:?}",
        alive(p2),
        alive(s2),
        children_of(g.pid())
    );

    // The ended session is gone.
    let r = bounded(
        "request on ended session",
        PROMPT,
        c1.request(json!(3), "tools/list", json!({})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.raw);
}

// ---------------------------------------------------------------------------------
// 5. A Streamable HTTP backend
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn http_backend_works_and_its_death_is_a_clear_error() {
    let mut backend = HttpServer::example(&[]);
    let g = Gantry::start(&["--http", &backend.url]);
    let mut c = g.client();
    let init = bounded("initialize", PROMPT, c.initialize()).await;
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    let r = bounded(
        "echo",
        PROMPT,
        c.call_tool(json!(1), "echo", json!({"message": "over http"})),
    )
    .await;
    assert_eq!(tool_text(&r), "over http", "{r}");

    backend.child.kill().unwrap();
    backend.child.wait().unwrap();

    let t = Instant::now();
    let r = bounded(
        "echo to a dead HTTP backend",
        Duration::from_secs(30),
        c.call_tool(json!(2), "echo", json!({"message": "anyone?"})),
    )
    .await;
    let took = t.elapsed();
    assert_eq!(r["id"], json!(2));
    assert_backend_error(&r, -32000, "http");
    assert!(took < PROMPT, "the error took {took:?}");
}

// ---------------------------------------------------------------------------------
// 6. Two backends in one configuration
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn two_backends_are_namespaced() {
    let g = Gantry::with_config(&format!(
        "{}\n{}",
        example_backend("a"),
        example_backend("b")
    ));
    let mut c = g.client();
    let init = bounded("initialize", PROMPT, c.initialize()).await;
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );

    let r = bounded(
        "tools/list",
        PROMPT,
        c.request(json!("l"), "tools/list", json!({})),
    )
    .await;
    let list = r
        .response(&json!("l"))
        .unwrap_or_else(|| panic!("no tools/list response: {}", r.raw));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"a__echo") && names.contains(&"b__echo"),
        "tools: {names:?}"
    );
    assert!(
        !names.contains(&"echo"),
        "an un-namespaced tool leaked: {names:?}"
    );

    let r = bounded(
        "b__echo",
        PROMPT,
        c.call_tool(json!(1), "b__echo", json!({"message": "from b"})),
    )
    .await;
    assert_eq!(tool_text(&r), "from b", "{r}");

    let r = bounded(
        "zzz__echo",
        PROMPT,
        c.call_tool(json!(2), "zzz__echo", json!({"message": "x"})),
    )
    .await;
    assert_eq!(r["error"]["code"], json!(-32602), "{r}");
}

// ---------------------------------------------------------------------------------
// 7. Per-session mode: one process per client session
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn concurrent_sessions_get_separate_backend_processes() {
    let g = Gantry::with_config(&mb_backend("mb", "session_mode = \"per-session\"", &[]));
    let (mut c1, mut c2) = (g.client(), g.client());
    bounded("two initializes", Duration::from_secs(30), async {
        tokio::join!(c1.initialize(), c2.initialize())
    })
    .await;
    assert_ne!(c1.session, c2.session);

    let (p1, p2) = bounded("two pid calls", PROMPT, async {
        tokio::join!(backend_pid(&c1, 1), backend_pid(&c2, 1))
    })
    .await;
    assert_ne!(p1, p2, "two sessions share one backend process");
    let mut kids: Vec<u32> = children_of(g.pid()).into_iter().map(|(p, _)| p).collect();
    kids.sort_unstable();
    let mut want = vec![p1, p2];
    want.sort_unstable();
    assert_eq!(kids, want, "gantry's children");
}

// ---------------------------------------------------------------------------------
// 8. gantry check-config
// ---------------------------------------------------------------------------------

fn check_config(toml: &str) -> (Option<i32>, String, String) {
    let dir = Scratch::new("check");
    let file = dir.file("gantry.toml");
    std::fs::write(&file, toml).unwrap();
    run_bounded(
        Command::new(gantry_bin()).arg("check-config").arg(&file),
        Duration::from_secs(30),
    )
}

#[test]
fn check_config_names_the_bad_key() {
    let (code, _, err) = check_config(&format!(
        "{}\n{}",
        example_backend("dup"),
        example_backend("dup")
    ));
    assert_ne!(code, Some(0), "duplicate names accepted");
    assert!(
        err.contains("backends[1].name") && err.contains("used twice"),
        "stderr: {err}"
    );

    let bad = format!("{}bogus_key = 1\n", example_backend("a"));
    let (code, _, err) = check_config(&bad);
    assert_ne!(code, Some(0), "unknown key accepted");
    assert!(err.contains("bogus_key"), "stderr: {err}");

    let (code, _, err) = check_config(&format!(
        "[server]\nlisen = \"127.0.0.1:1\"\n\n{}",
        example_backend("a")
    ));
    assert_ne!(code, Some(0), "unknown server key accepted");
    assert!(err.contains("lisen"), "stderr: {err}");

    // Every problem is reported, each with its key.
    let several = format!(
        "{}request_timeout = \"1ms\"\n{}",
        example_backend("dup"),
        example_backend("dup")
    );
    let (code, _, err) = check_config(&several);
    assert_ne!(code, Some(0));
    assert!(err.contains("backends[0].request_timeout"), "stderr: {err}");
    assert!(err.contains("backends[1].name"), "stderr: {err}");

    let (code, out, err) = check_config(&format!(
        "{}\n{}",
        example_backend("a"),
        example_backend("b")
    ));
    assert_eq!(code, Some(0), "good file refused: {err}");
    assert!(out.contains("ok") && out.contains("a, b"), "stdout: {out}");
}

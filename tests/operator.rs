//! What an operator relies on about backends (README "Backend health, readiness and
//! cost"): restarts that fail only the calls in flight, start-up failures explained,
//! readiness and status that reflect reality. Real `gantry`, real backend processes,
//! real HTTP.

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
use serde_json::json;
use std::time::{Duration, Instant};

async fn pid_of(c: &Client, id: i64) -> u32 {
    let r = c.call_tool(json!(id), "pid", json!({})).await;
    r["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no pid: {r}"))
}

/// After a `kill -9` of a backend, the calls that were in flight fail at once, and
/// a call sent right after — while the backend restarts — waits for it and works.
#[tokio::test]
async fn a_call_during_a_restart_waits_for_the_backend() {
    for round in 0..3 {
        let g = gantry()
            .backend(python_fixture("mb", "misbehaving_server.py").mode("shared"))
            .start();
        let mut c = g.client();
        c.initialize().await;
        let first = pid_of(&c, 1).await;
        let hanging = {
            let c = c.clone();
            tokio::spawn(async move { c.call_tool(json!(2), "hang", json!({})).await })
        };
        assert!(metric_until(&g, "gantry_calls_in_flight", |n| n == 1.0).await);
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &first.to_string()])
            .status();
        let in_flight = hanging.await.unwrap();
        assert_rpc_error(&in_flight, -32000, Some("mb"));
        // Right away: the backend is restarting (backoff 200ms, then start-up).
        let started = Instant::now();
        let r = c
            .call_tool(json!(3), "echo", json!({"message": "after"}))
            .await;
        assert_eq!(
            r["result"]["content"][0]["text"], "after",
            "round {round}: a call during the restart failed: {r}"
        );
        assert!(started.elapsed() < Duration::from_secs(20));
        assert_ne!(pid_of(&c, 4).await, first, "a new process answers");
    }
}

/// A backend that dies at start-up explains itself to the client: the error names
/// the exit status and carries the last lines of its stderr.
#[tokio::test]
async fn a_backend_failing_at_start_tells_the_client_why() {
    let g = gantry()
        .backend(stdio(
            "broken",
            "sh",
            &[
                "-c",
                "echo 'loading config' >&2; echo 'FATAL: MY_API_KEY is not set' >&2; exit 2",
            ],
        ))
        .start();
    let c = g.client();
    let r = c
        .post(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
        .await;
    let resp = r.response(&json!(0)).unwrap_or_else(|| panic!("{}", r.raw));
    let err = assert_rpc_error(resp, -32000, Some("broken"));
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("exit status: 2"), "{err}");
    assert!(msg.contains("FATAL: MY_API_KEY is not set"), "{err}");
    assert_eq!(
        err["data"]["stderr"],
        json!(["loading config", "FATAL: MY_API_KEY is not set"]),
        "{err}"
    );
}

async fn readyz(g: &Gantry) -> (u16, serde_json::Value) {
    let r = reqwest::get(format!("{}/readyz", g.base)).await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or_default())
}

async fn until_ready(g: &Gantry, want: u16, within: Duration) -> serde_json::Value {
    let end = Instant::now() + within;
    loop {
        let (code, body) = readyz(g).await;
        if code == want {
            return body;
        }
        assert!(Instant::now() < end, "/readyz never {want}: {code} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `/readyz` waits for a required backend that starts slowly, follows it when it
/// crashes and comes back, and says why; `gantry_backend_up` and `/status` agree.
#[tokio::test]
async fn readiness_and_status_follow_a_required_backend_down_and_up() {
    let script = fixture("misbehaving_server.py");
    let g = gantry()
        .backend(
            stdio(
                "mb",
                "sh",
                &["-c", &format!("sleep 1; exec python3 {}", script.display())],
            )
            .mode("shared")
            .set("required = true")
            .set("restart = { initial_backoff = \"2s\" }"),
        )
        .backend(example().named("optional").mode("per-session"))
        .start();
    let (code, body) = readyz(&g).await;
    assert_eq!(code, 503, "ready before the required backend: {body}");
    assert_eq!(body["status"], "waiting for required backends", "{body}");
    assert_eq!(body["waiting"], json!(["mb"]));
    let body = until_ready(&g, 200, Duration::from_secs(15)).await;
    assert_eq!(body["backends"][0]["state"], "up", "{body}");
    assert!(metric_until(&g, "gantry_backend_up{backend=\"mb\"}", |v| v == 1.0).await);

    // The backend crashes: not ready while it restarts (2s backoff), then ready.
    let mut c = g.client();
    c.initialize().await;
    let r = c.call_tool(json!(1), "mb__crash", json!({})).await;
    assert_rpc_error(&r, -32000, Some("mb"));
    let body = until_ready(&g, 503, Duration::from_secs(5)).await;
    assert_eq!(body["backends"][0]["state"], "restarting", "{body}");
    assert!(
        body["backends"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("exited"),
        "{body}"
    );
    assert!(metric_until(&g, "gantry_backend_up{backend=\"mb\"}", |v| v == 0.0).await);
    // `gantry status` says the same, and exits 2 (not ready).
    let (code, out, _) = gantry_status(&g.base, None);
    assert_eq!(code, Some(2), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("mb "))
        .unwrap_or_default();
    assert!(row.contains("restarting") && row.contains("yes"), "{out}");
    assert!(out.contains("mb: restarting now: process exited"), "{out}");
    until_ready(&g, 200, Duration::from_secs(15)).await;
    let (code, out, _) = gantry_status(&g.base, None);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(": ready;"), "{out}");
    assert!(out.contains("mb: last error"), "{out}");
    assert!(metric_until(&g, "gantry_backend_up{backend=\"mb\"}", |v| v == 1.0).await);

    let status: serde_json::Value = c
        .http
        .get(format!("{}/status", g.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mb = &status["backends"][0];
    assert_eq!(mb["name"], "mb", "{status}");
    assert_eq!(mb["state"], "up", "{status}");
    assert_eq!(mb["restarts"], 1, "{status}");
    assert_eq!(mb["session_mode"], "shared", "{status}");
    assert_eq!(status["backends"][1]["name"], "optional");
}

/// A required backend that cannot start stops Gantry with the reason, said once.
#[tokio::test]
async fn a_required_backend_that_cannot_start_stops_gantry() {
    let mut g = gantry()
        .backend(
            stdio(
                "broken",
                "sh",
                &["-c", "echo 'FATAL: no database' >&2; exit 3"],
            )
            .set("required = true"),
        )
        .start();
    let end = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Ok(Some(s)) = g.child.try_wait() {
            break s;
        }
        assert!(
            Instant::now() < end,
            "gantry kept running without its required backend"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = g.log_text();
    let said = log
        .matches("required backend `broken` could not start")
        .count();
    assert_eq!(said, 1, "{log}");
    assert!(log.contains("FATAL: no database"), "{log}");
}

/// `/status` is behind the same credentials as the MCP endpoint.
#[tokio::test]
async fn status_needs_credentials_when_keys_are_configured() {
    let g = gantry()
        .api_key("ops", "ops-key")
        .backend(example())
        .start();
    let http = reqwest::Client::new();
    let anon = http.get(format!("{}/status", g.base)).send().await.unwrap();
    assert_eq!(anon.status(), 401);
    let ok = http
        .get(format!("{}/status", g.base))
        .bearer_auth("ops-key")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let body: serde_json::Value = ok.json().await.unwrap();
    assert_eq!(body["backends"][0]["name"], "example", "{body}");

    let (code, _, err) = gantry_status(&format!("{}/mcp", g.base), None);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("answered 401") && err.contains("GANTRY_API_KEY"),
        "{err}"
    );
    let (code, out, err) = gantry_status(&format!("{}/mcp", g.base), Some("ops-key"));
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with("example ")), "{out}");
}

/// Runs `gantry status URL` (the key through `GANTRY_API_KEY`): exit code, stdout,
/// stderr.
fn gantry_status(url: &str, key: Option<&str>) -> (Option<i32>, String, String) {
    let mut cmd = std::process::Command::new(gantry_bin());
    cmd.args(["status", url]).env_remove("GANTRY_API_KEY");
    if let Some(k) = key {
        cmd.env("GANTRY_API_KEY", k);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A command that is not there, and a shell-style `$VAR` in `args` (only `${VAR}` is
/// replaced), are
/// reported by `check-config` (exit 1) and warned about at start-up.
#[tokio::test]
async fn missing_commands_and_unexpanded_args_are_reported() {
    let dir = Scratch::new("preflight");
    let file = dir.file("gantry.toml");
    std::fs::write(
        &file,
        "[[backends]]\nname = \"files\"\nstdio = { command = \"no-such-cmd-xyz\", args = [\"--root\", \"$HOME/data\", \"${HOME}/x\"] }\n",
    )
    .unwrap();
    let out = std::process::Command::new(gantry_bin())
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("backends[0] (`files`).stdio.command: `no-such-cmd-xyz` is not found in the child's PATH"),
        "{err}"
    );
    assert!(
        err.contains("backends[0] (`files`).stdio.args[1]: `$HOME/data` is passed as written"),
        "{err}"
    );
    assert!(err.contains("write `${HOME}`"), "{err}");
    assert!(!err.contains("args[2]"), "`${{HOME}}` is replaced: {err}");

    let g = gantry()
        .backend(stdio("files", "no-such-cmd-xyz", &[]))
        .start();
    assert!(
        g.log_text()
            .contains("`no-such-cmd-xyz` is not found in the child's PATH"),
        "{}",
        g.log_text()
    );
}

fn fixture_line() -> String {
    format!("python3 {}", fixture("misbehaving_server.py").display())
}

async fn tool_names(c: &Client) -> Vec<String> {
    let r = c.request(json!(90), "tools/list", json!({})).await;
    let list = r.response(&json!(90)).unwrap().clone();
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `--stdio NAME=CMD`, `--http NAME=URL`, `--env`, `--env-pass` and `--session-mode`
/// configure the backend given before them.
#[tokio::test]
async fn the_command_line_names_and_configures_each_backend() {
    let dir = Scratch::new("cli");
    let (set, passed) = (dir.file("set.pid"), dir.file("passed.pid"));
    let a = format!("files={}", fixture_line());
    let b = format!("notes={}", fixture_line());
    let http = HttpServer::example_with_env(&[]);
    let h = format!("docs={}", http.url);
    let set_env = format!("MB_PIDFILE={}", set.display());
    let g = Gantry::start_env(
        &[
            "--stdio",
            &a,
            "--env",
            &set_env,
            "--session-mode",
            "shared",
            "--stdio",
            &b,
            "--env-pass",
            "MB_PIDFILE",
            "--http",
            &h,
        ],
        &[("MB_PIDFILE", passed.to_str().unwrap())],
    );
    let mut c = g.client();
    c.initialize().await;
    let names = tool_names(&c).await;
    for want in ["files__pid", "notes__pid", "docs__echo"] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    // --env reached `files`, --env-pass reached `notes`: each wrote its pid file.
    let files_pid = pid_of_tool(&c, "files__pid").await;
    let notes_pid = pid_of_tool(&c, "notes__pid").await;
    let end = Instant::now() + Duration::from_secs(5);
    while !(set.exists() && passed.exists()) {
        assert!(
            Instant::now() < end,
            "pid files: {} {}",
            set.exists(),
            passed.exists()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        std::fs::read_to_string(&set).unwrap().trim(),
        files_pid.to_string()
    );
    assert_eq!(
        std::fs::read_to_string(&passed).unwrap().trim(),
        notes_pid.to_string()
    );
    // --session-mode shared: a second session meets the same `files` process, and
    // its own `notes` one.
    let mut c2 = g.client();
    c2.initialize().await;
    assert_eq!(pid_of_tool(&c2, "files__pid").await, files_pid);
    assert_ne!(pid_of_tool(&c2, "notes__pid").await, notes_pid);
}

async fn pid_of_tool(c: &Client, tool: &str) -> u32 {
    let r = c.call_tool(json!(tool), tool, json!({})).await;
    r["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{tool}: {r}"))
}

/// Misplaced or malformed backend options are refused with a message saying what
/// to write, once.
#[test]
fn misplaced_backend_options_are_refused_precisely() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--env", "A=1", "--stdio", "cat"],
            "--env A=1: give it after the --stdio or --http it is for",
        ),
        (
            &["--stdio", "cat", "--session-mode", "sometimes"],
            "--session-mode sometimes: expected per-session, shared or per-user",
        ),
        (
            &["--http", "http://127.0.0.1:1/mcp", "--env", "A=1"],
            "--env A=1: only a --stdio backend has an environment",
        ),
        (
            &["--stdio", "cat", "--env", "novalue"],
            "--env novalue: expected KEY=VALUE",
        ),
    ];
    for (args, want) in cases {
        let out = std::process::Command::new(gantry_bin())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.matches(want).count(), 1, "{args:?}: {err}");
    }
}

/// `check-config` reports every typo of a file in one run, with the key probably
/// meant and what a duration looks like; and so does starting Gantry with it.
#[test]
fn every_typo_is_reported_in_one_run() {
    let dir = Scratch::new("typos");
    let file = dir.file("gantry.toml");
    std::fs::write(
        &file,
        "[server]\nlistn = \"127.0.0.1:1\"\nsession_idle_timeout = \"30 minuts\"\n\n\
         [[backends]]\nname = \"a\"\nstdio = { command = \"cat\" }\nsesion_mode = \"shared\"\n",
    )
    .unwrap();
    for args in [
        vec!["check-config".to_owned(), file.display().to_string()],
        vec!["--config".to_owned(), file.display().to_string()],
    ] {
        let out = std::process::Command::new(gantry_bin())
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        for want in [
            "line 2, column 1",
            "(`listn`: did you mean `listen`?)",
            "line 3, column 24",
            "(a duration is written like \"200ms\", \"15s\", \"30m\" or \"1h 30m\")",
            "line 8, column 1",
            "(`sesion_mode`: did you mean `session_mode`?)",
        ] {
            assert_eq!(err.matches(want).count(), 1, "{args:?}: {want} in {err}");
        }
    }
}

/// Broken TOML syntax on several lines — an unterminated string, an unquoted
/// duration, an unclosed array, a broken table header — is reported line by line in
/// one run, and the settings are still checked (the typo below the broken header).
#[test]
fn every_syntax_error_is_reported_in_one_run() {
    let dir = Scratch::new("syntax");
    let file = dir.file("gantry.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:8080\nsession_idle_timeout = 5m\n\n\
         [[backends]]\nname = \"a\"\nstdio = { command = \"cat\", args = [\"x\" }\n\n\
         [[backends\nname = \"b\"\nhttp = { url = \"http://127.0.0.1:1/mcp\" }\nrequest_timout = \"2s\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(gantry_bin())
        .args(["check-config", &file.display().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for want in [
        "line 2, column 25",
        "line 3, column 25",
        "(text and durations are quoted: `session_idle_timeout = \"5m\"`)",
        "line 7, column",
        "line 9, column 11",
        "line 12, column 1",
        "(`request_timout`: did you mean `request_timeout`?)",
    ] {
        assert_eq!(err.matches(want).count(), 1, "{want} in {err}");
    }
    // Nothing the broken lines merely caused: no duplicate `name`, no missing field.
    assert!(!err.contains("duplicate key"), "{err}");
    assert!(!err.contains("missing field"), "{err}");
}

/// `check-config --file-only` checks a file meant for another machine: its commands
/// need not exist here.
#[test]
fn file_only_skips_the_machine_checks() {
    let dir = Scratch::new("file-only");
    let file = dir.file("gantry.toml");
    std::fs::write(
        &file,
        "[[backends]]\nname = \"files\"\nstdio = { command = \"only-in-the-image\" }\n",
    )
    .unwrap();
    let out = std::process::Command::new(gantry_bin())
        .args(["check-config", "--file-only"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `idle_timeout`: a per-session process idle that long is stopped, and the session's
/// next call starts a new one (re-initialized with the client's own `initialize`) and
/// is answered; the session itself lives on. A call in progress is never cut off.
#[tokio::test]
async fn idle_per_session_processes_are_stopped_and_started_again_on_demand() {
    let dir = Scratch::new("idle");
    let record = dir.0.join("received.jsonl");
    let g = gantry()
        .backend(
            python_fixture("mb", "misbehaving_server.py")
                .record(&record)
                .set("idle_timeout = \"1s\""),
        )
        .start();
    let mut c = g.client();
    c.initialize().await;
    let first = pid_of(&c, 1).await;
    // A call that outlasts the idle timeout keeps its process.
    let hanging = {
        let c = c.clone();
        tokio::spawn(async move { c.call_tool(json!(2), "hang", json!({})).await })
    };
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(alive(first), "a process with a call in flight was stopped");
    hanging.abort();
    c.notify("notifications/cancelled", json!({"requestId": 2}))
        .await;
    // Idle now: stopped within the timeout (and a check interval).
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(first) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(first), "the idle process {first} still runs");
    // The next call of the same session starts a new one and is answered.
    let r = c
        .call_tool(json!(3), "echo", json!({"message": "back"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "back", "{r}");
    let second = pid_of(&c, 4).await;
    assert_ne!(second, first);
    // Both processes were initialized as this client.
    let inits: Vec<serde_json::Value> = recorded(&record)
        .into_iter()
        .filter(|m| m["method"] == "initialize")
        .collect();
    assert_eq!(inits.len(), 2, "{inits:?}");
    for i in &inits {
        assert_eq!(
            i["params"]["clientInfo"], inits[0]["params"]["clientInfo"],
            "{inits:?}"
        );
    }
}

/// A parked process does not count against `pool.max_connections`: with a cap of
/// one, a second session gets the place once the first one's process is idle-stopped;
/// the first session, calling while the place is taken, gets the capacity error, and
/// is served once the second is idle in turn.
#[tokio::test]
async fn parked_connections_give_their_place_under_max_connections() {
    let g = gantry()
        .backend(
            python_fixture("mb", "misbehaving_server.py")
                .set("idle_timeout = \"1s\"")
                .set("pool = { max_connections = 1 }"),
        )
        .start();
    let mut a = g.client();
    a.initialize().await;
    let pid_a = pid_of(&a, 1).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid_a) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(pid_a));
    let mut b = g.client();
    b.initialize().await;
    pid_of(&b, 1).await;
    let refused = a.call_tool(json!(2), "echo", json!({"message": "a"})).await;
    let err = assert_rpc_error(&refused, -32000, Some("mb"));
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("connection limit"),
        "{refused}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = a.call_tool(json!(3), "echo", json!({"message": "a"})).await;
        if r["result"]["content"][0]["text"] == "a" {
            break;
        }
        assert!(Instant::now() < deadline, "never served again: {r}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Runs `gantry healthcheck ARGS…`: exit code and its one line of output.
fn gantry_healthcheck(args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(gantry_bin())
        .arg("healthcheck")
        .args(args)
        .env_remove("GANTRY_HEALTHCHECK_URL")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `gantry healthcheck` (a container's HEALTHCHECK without curl): alive while the
/// process serves, ready only once every required backend is; 1 when unreachable.
#[tokio::test]
async fn healthcheck_says_alive_and_ready_in_one_line() {
    let g = gantry()
        .backend(
            stdio("slow", "sh", &["-c", "sleep 30"])
                .set("required = true")
                .set("init_timeout = \"60s\""),
        )
        .start();
    let (code, out) = gantry_healthcheck(&[&g.base]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with("healthy: ") && out.contains("/healthz"),
        "{out}"
    );
    // A required backend that never initializes: alive, not ready.
    let (code, out) = gantry_healthcheck(&["--ready", &g.url]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.starts_with("unhealthy: ") && out.contains("503"),
        "{out}"
    );
    assert!(out.contains("slow"), "names what it waits for: {out}");
    // Nobody there.
    let port = free_port();
    let (code, out) = gantry_healthcheck(&[&format!("http://127.0.0.1:{port}"), "--timeout", "2s"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("cannot reach"), "{out}");
    let (code, out) = gantry_healthcheck(&["ftp://x"]);
    assert_eq!(code, Some(1), "{out}");
}

/// For containers: `GANTRY_SERVER_*` set `[server]` keys (flags still win), a secret
/// comes from a file (`sha256_file`), and `${VAR}` works in any string value.
#[tokio::test]
async fn the_environment_sets_server_keys_secrets_and_any_string() {
    let dir = Scratch::new("environ");
    let digest = dir.file("key.sha256");
    std::fs::write(&digest, format!("{}\n", sha256_hex("k1"))).unwrap();
    let g = gantry()
        .backend(
            example()
                .named("one")
                .set(r#"tools = { override = { echo = { description = "${ECHO_TEXT}" } } }"#),
        )
        .section(&format!(
            "[[auth.api_keys]]\nprincipal = \"p\"\nsha256_file = {:?}\n",
            digest.to_str().unwrap()
        ))
        .env("GANTRY_SERVER_PATH", "/via-env")
        .env("GANTRY_SERVER_MAX_SESSIONS", "1")
        // `--listen` (the harness's) wins over this.
        .env("GANTRY_SERVER_LISTEN", "127.0.0.1:1")
        .env("ECHO_TEXT", "from the environment")
        .start();
    assert!(g.url.ends_with("/via-env"), "{}", g.url);
    let mut c = g.bearer("k1");
    c.initialize().await;
    let r = c.request(json!(1), "tools/list", json!({})).await;
    let tools = r.response(&json!(1)).unwrap()["result"]["tools"].clone();
    let echo = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap_or_else(|| panic!("{tools}"))
        .clone();
    assert_eq!(echo["description"], "from the environment", "{echo}");
    // max_sessions = 1 from the environment: a second session is refused.
    let second = g
        .bearer("k1")
        .post(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        )
        .await;
    assert_eq!(second.status, 503, "{}", second.raw);
    // A wrong key is still refused.
    let wrong = g
        .bearer("k2")
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!(wrong.status, 401, "{}", wrong.raw);
}

/// `check-config --effective`: defaults filled in, the environment applied, secrets
/// never printed.
#[test]
fn check_config_shows_the_effective_configuration_without_secrets() {
    let dir = Scratch::new("effective");
    let file = dir.file("gantry.toml");
    let token = dir.file("token");
    std::fs::write(&token, "Bearer very-secret-token\n").unwrap();
    std::fs::write(
        &file,
        format!(
            "[limits]\nstore = \"redis\"\n[limits.redis]\nurl = \"redis://:${{REDIS_PASSWORD}}@127.0.0.1:6379/0\"\n\
             [[limits.rules]]\nname = \"r\"\nrate = \"1/s\"\n\
             [[backends]]\nname = \"remote\"\nhttp = {{ url = \"http://127.0.0.1:9/mcp\", headers = {{ Authorization_file = {:?} }} }}\n",
            token.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(gantry_bin())
        .args(["check-config", "--file-only", "--effective"])
        .arg(&file)
        .env("REDIS_PASSWORD", "hunter2")
        .env("GANTRY_SERVER_MAX_SESSIONS", "7")
        .env("GANTRY_BACKENDS_REMOTE_REQUEST_TIMEOUT", "3s")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("max_sessions = 7"), "{text}");
    assert!(text.contains("request_timeout = \"3s\""), "{text}");
    assert!(
        text.contains("sse_keepalive = \"15s\""),
        "defaults are shown: {text}"
    );
    assert!(text.contains("Authorization = \"<redacted>\""), "{text}");
    assert!(
        text.contains("redis://:redacted@127.0.0.1:6379/0"),
        "{text}"
    );
    assert!(
        !text.contains("hunter2") && !text.contains("very-secret"),
        "{text}"
    );
}

/// The gateway process's runtime worker threads (tokio names them `tokio-rt-worker`).
fn worker_threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim() == "tokio-rt-worker")
        })
        .count()
}

/// `TOKIO_WORKER_THREADS` sets how many worker threads the gateway runs; a value
/// that is not a number of threads stops Gantry with a message naming it, not a
/// panic.
#[tokio::test]
async fn worker_threads_follow_tokio_worker_threads() {
    for n in ["1", "3"] {
        let g = Gantry::start_env(&[], &[("TOKIO_WORKER_THREADS", n)]);
        let mut c = g.client();
        c.initialize().await;
        let r = c
            .call_tool(json!(2), "echo", json!({"message": "hi"}))
            .await;
        assert!(r["result"].is_object(), "{r}");
        assert_eq!(worker_threads_of(g.pid()).to_string(), n);
    }
    for bad in ["abc", "0", "-1", ""] {
        let out = std::process::Command::new(gantry_bin())
            .args(["--listen", "127.0.0.1:0"])
            .env("TOKIO_WORKER_THREADS", bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {err}");
        assert!(
            err.contains(&format!("TOKIO_WORKER_THREADS={bad}: give a whole number")),
            "{bad:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{bad:?}: {err}");
    }
}

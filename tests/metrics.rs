//! `/metrics` after real traffic (tool calls, SSE streams, an auth failure, a rate
//! limit, Redis gone, a backend crash): `promtool check metrics` accepts it, its
//! names are exactly those the dashboard and alerts are built on
//! (`deploy/monitoring/metrics.txt`), and the counters moved with the traffic.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::redis::Redis;
use common::*;
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

async fn scrape(g: &Gantry) -> String {
    reqwest::get(format!("{}/metrics", g.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of a sample line (`name{labels}`), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run promtool ({e}): apt-get install prometheus"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[tokio::test]
async fn metrics_after_real_traffic_pass_promtool_and_are_the_dashboards_names() {
    let mut redis = Redis::start();
    let section = format!(
        "[limits]\nstore = \"redis\"\n[limits.redis]\nurl = \"{}\"\ntimeout = \"300ms\"\n\
         [[limits.rules]]\nname = \"pid-budget\"\nrate = \"1/h\"\ntools = [\"pid\"]\non_store_error = \"local\"\n\
         [[limits.rules]]\nname = \"env-budget\"\nrate = \"1/h\"\ntools = [\"env\"]\n\
         [[limits.concurrency]]\nname = \"echo-at-once\"\nmax = 2\ntools = [\"echo\"]\n",
        redis.url()
    );
    let g = gantry()
        .api_key("alice", "alice-key")
        .section(&section)
        .backend(python_fixture("mb", "misbehaving_server.py"))
        .start();
    let before = scrape(&g).await;

    // An auth failure.
    let r = g
        .bearer("wrong-key")
        .request(json!(1), "ping", json!({}))
        .await;
    assert_eq!(r.status, 401);
    let mut c = g.bearer("alice-key");
    c.initialize().await;
    // A listening stream, open while we scrape.
    let listen = c.open_get().await;
    assert_eq!(listen.status(), 200);
    for i in 0..3 {
        let r = c.call_tool(json!(i), "echo", json!({"message": "m"})).await;
        assert_eq!(r["result"]["content"][0]["text"], "m", "{r}");
    }
    // Rate limited, then decided without Redis.
    let _ = c.call_tool(json!(10), "pid", json!({})).await;
    let r = c.call_tool(json!(11), "pid", json!({})).await;
    assert_eq!(r["error"]["code"], -32029, "{r}");
    redis.kill();
    let _ = c.call_tool(json!(12), "env", json!({"name": "HOME"})).await;
    // A backend process that dies (status 3), restarted.
    let _ = c.call_tool(json!(13), "crash", json!({})).await;
    assert!(
        metric_until(
            &g,
            "gantry_backend_exits_total{backend=\"mb\",reason=\"error\"}",
            |v| v >= 1.0
        )
        .await,
        "the crash was not counted"
    );

    let text = scrape(&g).await;
    let (ok, said) = promtool_check(&text);
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );

    // Exactly the names the dashboard and alerts may use.
    let listed: BTreeSet<String> = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring/metrics.txt"),
    )
    .unwrap()
    .lines()
    .map(str::trim)
    .filter(|l| !l.is_empty())
    .map(str::to_owned)
    .collect();
    let exported: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    let unlisted: Vec<_> = exported.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "exported but not in metrics.txt: {unlisted:?}"
    );
    // Only the OAuth ones need an authorization server (tests/oauth.rs moves them).
    let missing: Vec<_> = listed
        .difference(&exported)
        .filter(|n| !n.starts_with("gantry_oauth_"))
        .collect();
    assert!(
        missing.is_empty(),
        "listed but not exported after the traffic: {missing:?}"
    );

    // The counters moved with the traffic.
    let moved = |series: &str, by: f64| {
        let was = sample(&before, series).unwrap_or(0.0);
        let now = sample(&text, series).unwrap_or(0.0);
        assert!(now - was >= by, "{series}: {was} -> {now}");
    };
    moved(
        "gantry_tool_calls_total{backend=\"mb\",outcome=\"ok\",tool=\"echo\"}",
        3.0,
    );
    moved(
        "gantry_tool_call_duration_seconds_count{backend=\"mb\",tool=\"echo\"}",
        3.0,
    );
    moved(
        "gantry_queue_wait_seconds_count{rule=\"echo-at-once\"}",
        3.0,
    );
    moved("gantry_rate_limited_total{rule=\"pid-budget\"}", 1.0);
    moved(
        "gantry_rate_limit_fallbacks_total{policy=\"open\",rule=\"env-budget\"}",
        1.0,
    );
    moved("gantry_auth_failures_total{reason=\"invalid_key\"}", 1.0);
    moved(
        "gantry_backend_exits_total{backend=\"mb\",reason=\"error\"}",
        1.0,
    );
    moved("gantry_backend_sent_bytes_total{backend=\"mb\"}", 100.0);
    moved("gantry_backend_received_bytes_total{backend=\"mb\"}", 100.0);
    moved("gantry_client_received_bytes_total", 500.0);
    moved("gantry_client_sent_bytes_total", 500.0);
    let redis_errors: f64 = ["connect", "timeout", "response"]
        .iter()
        .filter_map(|r| {
            sample(
                &text,
                &format!("gantry_redis_errors_total{{reason=\"{r}\"}}"),
            )
        })
        .sum();
    assert!(redis_errors >= 1.0, "no Redis error counted");
    assert_eq!(
        sample(&text, "gantry_sse_streams{kind=\"listen\"}"),
        Some(1.0),
        "the open GET stream"
    );
    drop(listen);
    assert!(
        metric_until(&g, "gantry_sse_streams{kind=\"listen\"}", |v| v == 0.0).await,
        "a closed stream still counted"
    );
}

/// `server.metrics_listen`: metrics (and the probes) on an address of their own,
/// while the client port serves none when `metrics = false`.
#[tokio::test]
async fn metrics_can_have_a_listener_of_their_own() {
    let port = free_port();
    let g = gantry()
        .server(&format!("metrics_listen = \"127.0.0.1:{port}\""))
        .server("metrics = false")
        .backend(example())
        .start();
    let mut c = g.client();
    c.initialize().await;
    let main = reqwest::get(format!("{}/metrics", g.base)).await.unwrap();
    assert_eq!(main.status(), 404, "metrics on the client port");
    let own = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap();
    assert_eq!(own.status(), 200);
    let text = own.text().await.unwrap();
    assert!(
        sample(&text, "gantry_sessions").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    let ready = reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    // Nothing else is served there.
    let mcp = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 404);
}

/// `gantry --version` names the commit (and its date) it was built from, and
/// `gantry_build_info` carries the same commit.
#[tokio::test]
async fn the_version_names_its_commit_in_the_cli_and_the_metrics() {
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("--version")
        .output()
        .unwrap();
    let line = String::from_utf8(out.stdout).unwrap();
    let rest = line
        .trim()
        .strip_prefix(&format!("gantry {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{line}"));
    let (commit, date) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", "))
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{line}"
    );
    assert!(date == "unknown" || date.len() == 10, "{line}");
    let g = gantry().backend(example()).start();
    let text = scrape(&g).await;
    let series = format!(
        "gantry_build_info{{commit=\"{commit}\",version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(sample(&text, &series), Some(1.0), "{series} in {text}");
}

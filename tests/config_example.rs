//! The shipped example configurations stay valid and boot.
//!
//! - `gantry check-config` (the real binary) accepts `config/gantry.example.toml`, and
//!   rejects a broken copy of it with the key path of every problem on stderr.
//! - `every_example_boots`: every `config/*.toml` is checked as shipped
//!   (`check-config --file-only`), then started with the real `gantry` binary (on an
//!   ephemeral loopback port: the harness adds `--listen 127.0.0.1:0`) with local
//!   stand-ins for what needs the network, and a real client reaches `initialize`
//!   through it. A file without a boot case fails the test.
//!
//! The stand-ins come in two ways. Where the file uses `${VAR:-default}` (allowed in
//! the keys README "Configuration reference" names: HTTP backend URLs,
//! `limits.redis.url`, …) the test sets VAR. Elsewhere (stdio `command` / `args`, the
//! OAuth issuer, `allowed_hosts`, `metrics_listen`) it replaces text by a small table
//! per file ([`Swap`]), each entry required to occur exactly as often as it says, so
//! a table cannot silently stop matching its file:
//!
//! | file | replaced | by |
//! | --- | --- | --- |
//! | every file with `command = "npx"` | `command = "npx"`, `args = ["-y", …]` | the example server (`gantry-example`), `args = []` |
//! | `gantry.example.toml` | `url = "https://mcp.example.com/mcp"` | the example server over HTTP |
//! | `aggregate.toml` | — (`DOCS_MCP_URL` set) | the example server over HTTP |
//! | `external-idp.toml` | `issuer = "https://idp.example.com/realms/main"`; `allowed_hosts` | a real OpenID provider (oidc-provider, issuer path `/realms/main`); `127.0.0.1` added |
//! | `redis-limits.toml` | — (`REDIS_URL` set) | a real `redis-server` |
//! | `multi-replica.toml` | `metrics_listen = "0.0.0.0:9090"`; `allowed_hosts`; `command = "gantry-example"` | a free loopback port; `127.0.0.1` added; the example server's path (`REDIS_URL` set: a real `redis-server`) |
// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::oidc::Provider;
use common::redis::Redis;
use common::{Client, Gantry, HttpServer};
use serde_json::{json, Value};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/gantry.example.toml")
}

fn check_config(file: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("check-config")
        .arg(file)
        .output()
        .expect("cannot run gantry")
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "gantry-config-example-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn example_config_is_valid() {
    let out = check_config(&example());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "check-config failed:\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains("ok (2 backends: everything, remote)"),
        "unexpected output: {stdout}"
    );
}

#[test]
fn broken_copy_is_rejected_with_key_paths() {
    let text = std::fs::read_to_string(example()).unwrap();
    let broken = text
        .replacen("listen = \"127.0.0.1:8080\"", "listen = \"nowhere\"", 1)
        .replacen("name = \"remote\"", "name = \"not a valid name\"", 1)
        .replacen(
            "url = \"https://mcp.example.com/mcp\"",
            "url = \"ftp://mcp.example.com/mcp\"",
            1,
        );
    assert_ne!(broken, text, "the example changed shape; update this test");
    let dir = TempDir::new();
    let file = dir.0.join("broken.toml");
    std::fs::write(&file, broken).unwrap();

    let out = check_config(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a broken config was accepted: {stderr}"
    );
    for key in ["server.listen", "backends[1].name", "backends[1].http.url"] {
        assert!(stderr.contains(key), "missing `{key}` in stderr:\n{stderr}");
    }
}

#[test]
fn unknown_key_is_rejected_by_name() {
    let text = std::fs::read_to_string(example()).unwrap();
    let broken = text.replacen("[server]\n", "[server]\nlisten_on = \"0.0.0.0:8080\"\n", 1);
    assert_ne!(broken, text, "the example changed shape; update this test");
    let dir = TempDir::new();
    let file = dir.0.join("unknown-key.toml");
    std::fs::write(&file, broken).unwrap();

    let out = check_config(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an unknown key was accepted: {stderr}"
    );
    assert!(
        stderr.contains("listen_on"),
        "missing `listen_on` in stderr:\n{stderr}"
    );
}

// ---------------------------------------------------------------------------------
// Every config/*.toml boots.
// ---------------------------------------------------------------------------------

fn config_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config")
}

/// Variables the examples read with `${…}`: removed from `check-config`'s
/// environment, so a file is checked as shipped whatever the test's environment holds.
const EXAMPLE_VARS: &[&str] = &[
    "DOCS_MCP_URL",
    "DOCS_MCP_TOKEN",
    "REDIS_URL",
    "INTROSPECTION_SECRET",
    "IDP_CLIENT_SECRET",
];

/// One entry of a file's replacement table: `from` (the file's text) becomes `to`,
/// and the file must say `from` exactly `times` times.
struct Swap {
    from: String,
    to: String,
    times: usize,
}

fn swap(from: &str, to: impl Into<String>, times: usize) -> Swap {
    Swap {
        from: from.to_owned(),
        to: to.into(),
        times,
    }
}

/// `command = "<the example server>"` (a TOML string).
fn example_command() -> String {
    format!("command = {:?}", common::example_bin().to_str().unwrap())
}

/// The npx command line of a stdio backend → the example server over stdio.
fn npx_to_example(args: &str, times: usize) -> [Swap; 2] {
    [
        swap(r#"command = "npx""#, example_command(), times),
        swap(args, "args = []", times),
    ]
}

/// `config/NAME` with its replacement table applied.
fn rewritten(name: &str, table: &[Swap]) -> String {
    let mut text = std::fs::read_to_string(config_dir().join(name))
        .unwrap_or_else(|e| panic!("config/{name}: {e}"));
    for s in table {
        let n = text.matches(&s.from).count();
        assert_eq!(
            n, s.times,
            "config/{name} says `{}` {n} times, the test's table expects {}: update the table",
            s.from, s.times
        );
        text = text.replace(&s.from, &s.to);
    }
    text
}

/// `gantry check-config --file-only config/NAME` accepts the file as shipped, with only
/// `env` of the example variables set.
fn check_as_shipped(name: &str, env: &[(&str, &str)]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gantry"));
    cmd.arg("check-config")
        .arg("--file-only")
        .arg(config_dir().join(name));
    for v in EXAMPLE_VARS {
        cmd.env_remove(v);
    }
    let out = cmd
        .envs(env.iter().copied())
        .output()
        .expect("cannot run gantry");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(": ok ("),
        "check-config config/{name}:\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The item names (`uri`s for resources) of one whole list, following `nextCursor`;
/// `None` when a page is refused (a list that changed between pages).
async fn list(c: &Client, method: &str) -> Option<Vec<String>> {
    let (field, key) = match method {
        "tools/list" => ("tools", "name"),
        "prompts/list" => ("prompts", "name"),
        "resources/list" => ("resources", "uri"),
        _ => panic!("not a list method: {method}"),
    };
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..100 {
        let id = json!(format!("{method} {page}"));
        let params = cursor
            .as_ref()
            .map_or_else(|| json!({}), |next| json!({ "cursor": next }));
        let r = c.request(id.clone(), method, params).await;
        let m = r
            .response(&id)
            .unwrap_or_else(|| panic!("no answer to {method}: {}", r.raw));
        let items = m["result"][field].as_array()?;
        names.extend(
            items
                .iter()
                .map(|i| i[key].as_str().unwrap_or_default().to_owned()),
        );
        match m["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Some(names),
        }
    }
    panic!("{method}: more than 100 pages");
}

/// The list of `method` once it names every one of `want` (backends still connecting
/// are waited for, at most 20 s).
async fn list_until(c: &Client, method: &str, want: &[&str]) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while Instant::now() < end {
        if let Some(names) = list(c, method).await {
            if want.iter().all(|w| names.iter().any(|n| n == w)) {
                return names;
            }
            last = Some(names);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{method} never listed all of {want:?}; last: {last:?}");
}

/// The example server's `echo`, called as `name`, answers.
async fn echo(c: &Client, id: u64, name: &str) {
    let r = c
        .call_tool(json!(id), name, json!({ "message": "hi" }))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "hi", "{name}: {r}");
}

/// Scripts Redis ran for the rate limits.
fn scripts(redis: &Redis) -> u64 {
    redis.calls("evalsha") + redis.calls("eval")
}

async fn boot_gantry_example() {
    check_as_shipped("gantry.example.toml", &[]);
    let remote = HttpServer::example(&[]);
    let mut table = Vec::from(npx_to_example(
        r#"args = ["-y", "@modelcontextprotocol/server-everything"]"#,
        1,
    ));
    table.push(swap(
        r#"url = "https://mcp.example.com/mcp""#,
        format!("url = {:?}", remote.url),
        1,
    ));
    let g = Gantry::with_config(&rewritten("gantry.example.toml", &table));
    let mut c = g.client();
    c.initialize().await;
    list_until(&c, "tools/list", &["everything__echo", "remote__echo"]).await;
    echo(&c, 1, "everything__echo").await;
    echo(&c, 2, "remote__echo").await;
}

async fn boot_stdio() {
    check_as_shipped("stdio.toml", &[]);
    let table = npx_to_example(
        r#"args = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]"#,
        1,
    );
    let g = Gantry::with_config(&rewritten("stdio.toml", &table));
    let mut c = g.client();
    let init = c.initialize().await;
    // Transparent: the backend's own identity, its names unchanged.
    assert_eq!(
        init["result"]["serverInfo"]["name"], "gantry-example",
        "{init}"
    );
    let tools = list_until(&c, "tools/list", &["echo"]).await;
    assert!(!tools.iter().any(|t| t.contains("__")), "{tools:?}");
    echo(&c, 1, "echo").await;
}

async fn boot_aggregate() {
    // The default of ${DOCS_MCP_URL:-…} makes the file valid without the variable.
    check_as_shipped("aggregate.toml", &[]);
    let docs = HttpServer::example(&[]);
    let table = [
        swap(r#"command = "npx""#, example_command(), 2),
        swap(
            r#"args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/shared"]"#,
            "args = []",
            1,
        ),
        swap(
            r#"args = ["-y", "@modelcontextprotocol/server-everything"]"#,
            "args = []",
            1,
        ),
    ];
    let g = Gantry::with_config_env(
        &rewritten("aggregate.toml", &table),
        &[("DOCS_MCP_URL", docs.url.as_str())],
    );
    let mut c = g.client();
    let init = c.initialize().await;
    assert_ne!(
        init["result"]["serverInfo"]["name"], "gantry-example",
        "several backends: Gantry's own serverInfo: {init}"
    );
    // `files` under its prefix `fs`, `everything` without one, `docs` under its name.
    let tools = list_until(&c, "tools/list", &["fs__echo", "echo", "docs__echo"]).await;
    assert!(
        !tools
            .iter()
            .any(|t| t.starts_with("files__") || t.starts_with("everything__")),
        "{tools:?}"
    );
    // `everything` shows only the prompts it allows, none of which the stand-in has.
    let prompts = list_until(
        &c,
        "prompts/list",
        &["fs__test_simple_prompt", "docs__test_simple_prompt"],
    )
    .await;
    assert!(
        !prompts.iter().any(|p| !p.contains("__")),
        "prompts of `everything` outside its allow list: {prompts:?}"
    );
    echo(&c, 1, "fs__echo").await;
    echo(&c, 2, "echo").await;
    echo(&c, 3, "docs__echo").await;
}

async fn boot_external_idp() {
    const PUBLIC_URL: &str = "https://mcp.example.com/mcp";
    check_as_shipped("external-idp.toml", &[]);
    let idp = Provider::start(&[
        "--issuer-path",
        "/realms/main",
        "--scopes",
        "mcp:tools mcp:admin",
        "--resource",
        PUBLIC_URL,
    ]);
    let mut table = Vec::from(npx_to_example(
        r#"args = ["-y", "@modelcontextprotocol/server-everything"]"#,
        1,
    ));
    table.push(swap(
        r#"issuer = "https://idp.example.com/realms/main""#,
        format!("issuer = {:?}", idp.issuer()),
        1,
    ));
    table.push(swap(
        r#"allowed_hosts = ["mcp.example.com", "localhost"]"#,
        r#"allowed_hosts = ["mcp.example.com", "localhost", "127.0.0.1"]"#,
        1,
    ));
    let g = Gantry::with_config(&rewritten("external-idp.toml", &table));

    // No token: 401 with the RFC 9728 challenge naming the metadata at the public URL.
    let r = g
        .client()
        .post(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "config-example", "version": "1"}}}),
        )
        .await;
    assert_eq!(r.status, 401, "{}", r.raw);
    let challenge = r
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(
        challenge.as_deref(),
        Some(
            r#"Bearer scope="mcp:tools", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp""#
        )
    );
    // The metadata it names (and the root one) answer without credentials.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let resp = reqwest::get(format!("{}{path}", g.base)).await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        let m: Value = resp.json().await.unwrap();
        assert_eq!(m["resource"], PUBLIC_URL, "{path}: {m}");
        assert_eq!(m["authorization_servers"], json!([idp.issuer()]), "{m}");
        assert_eq!(m["scopes_supported"], json!(["mcp:tools"]), "{m}");
    }
    // A real token of the provider for the public URL: a session and a call.
    let token = idp.client_token(PUBLIC_URL, "mcp:tools").await;
    let mut c = g.bearer(&token);
    c.initialize().await;
    list_until(&c, "tools/list", &["echo"]).await;
    echo(&c, 1, "echo").await;
}

async fn boot_builtin_idp() {
    check_as_shipped("builtin-idp.toml", &[("IDP_CLIENT_SECRET", "s3cret")]);
    let idp = Provider::start(&["--issuer-path", "/realms/main"]);
    let dir = common::Scratch::new("builtin-idp");
    let db = dir.file("auth.db");
    let mut table = Vec::from(npx_to_example(
        r#"args = ["-y", "@modelcontextprotocol/server-everything"]"#,
        1,
    ));
    table.push(swap(
        r#"issuer = "https://idp.example.com/realms/main""#,
        format!("issuer = {:?}", idp.issuer()),
        1,
    ));
    table.push(swap(
        r#"path = "/var/lib/gantry/auth.db""#,
        format!("path = {:?}", db.to_str().unwrap()),
        1,
    ));
    table.push(swap(
        r#"allowed_hosts = ["mcp.example.com", "localhost"]"#,
        r#"allowed_hosts = ["mcp.example.com", "localhost", "127.0.0.1"]"#,
        1,
    ));
    let g = Gantry::with_config_env(
        &rewritten("builtin-idp.toml", &table),
        &[("IDP_CLIENT_SECRET", "s3cret")],
    );
    // The authorization server's metadata names the public origin as issuer, and the
    // protected-resource metadata names it as the authorization server.
    let meta: Value = reqwest::get(format!("{}/.well-known/oauth-authorization-server", g.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["issuer"], "https://mcp.example.com", "{meta}");
    assert_eq!(
        meta["authorization_endpoint"],
        "https://mcp.example.com/authorize"
    );
    assert_eq!(meta["code_challenge_methods_supported"], json!(["S256"]));
    let prm: Value = reqwest::get(format!(
        "{}/.well-known/oauth-protected-resource/mcp",
        g.base
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        prm["authorization_servers"],
        json!(["https://mcp.example.com"]),
        "{prm}"
    );
    // Cursor registers its private-use redirect URI (allowed by redirect_schemes).
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let reg: Value = http
        .post(format!("{}/register", g.base))
        .json(
            &json!({"client_name": "Cursor", "token_endpoint_auth_method": "none",
            "redirect_uris": ["cursor://anysphere.cursor-mcp/oauth/callback"],
            "grant_types": ["authorization_code", "refresh_token"]}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client_id = reg["client_id"].as_str().unwrap_or_else(|| panic!("{reg}"));
    // Its authorization goes to the IdP's login, as Gantry's client there, with PKCE.
    let r = http
        .get(format!("{}/authorize", g.base))
        .query(&[
            ("response_type", "code"),
            ("client_id", client_id),
            (
                "redirect_uri",
                "cursor://anysphere.cursor-mcp/oauth/callback",
            ),
            (
                "code_challenge",
                "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            ),
            ("code_challenge_method", "S256"),
            ("state", "x"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 302);
    let to = reqwest::Url::parse(r.headers()["location"].to_str().unwrap()).unwrap();
    let at = idp.info["authorization_endpoint"].as_str().unwrap();
    assert!(to.as_str().starts_with(at), "{to} is not the IdP's {at}");
    let q: std::collections::HashMap<String, String> = to.query_pairs().into_owned().collect();
    assert_eq!(q["client_id"], "gantry");
    assert_eq!(q["redirect_uri"], "https://mcp.example.com/oauth/callback");
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["scope"], "openid email");
    assert!(q.contains_key("nonce"));
}

async fn boot_redis_limits() {
    // The default of ${REDIS_URL:-…} makes the file valid without the variable.
    check_as_shipped("redis-limits.toml", &[]);
    let redis = Redis::start();
    let table = npx_to_example(
        r#"args = ["-y", "@modelcontextprotocol/server-everything"]"#,
        1,
    );
    let g = Gantry::with_config_env(
        &rewritten("redis-limits.toml", &table),
        &[("REDIS_URL", redis.url().as_str())],
    );
    let mut c = g.client();
    c.initialize().await;
    echo(&c, 1, "echo").await;
    // `sessions` covered the initialize and `calls` the call, each checked in Redis.
    let n = scripts(&redis);
    assert!(
        n >= 2,
        "the rules were not checked in Redis: {n} script runs"
    );
}

async fn boot_multi_replica() {
    // ${REDIS_URL} has no default: the file is valid only with the variable set.
    check_as_shipped(
        "multi-replica.toml",
        &[("REDIS_URL", "redis://gantry-redis:6379/0")],
    );
    let redis = Redis::start();
    let metrics_port = common::free_port();
    let table = [
        swap(
            r#"metrics_listen = "0.0.0.0:9090""#,
            format!(r#"metrics_listen = "127.0.0.1:{metrics_port}""#),
            1,
        ),
        swap(
            "allowed_hosts = [\n",
            "allowed_hosts = [\n  \"127.0.0.1\",\n",
            1,
        ),
        swap(
            r#"stdio = { command = "gantry-example" }"#,
            format!("stdio = {{ {} }}", example_command()),
            1,
        ),
    ];
    let g = Gantry::with_config_env(
        &rewritten("multi-replica.toml", &table),
        &[("REDIS_URL", redis.url().as_str())],
    );
    let mut c = g.client();
    c.initialize().await;
    echo(&c, 1, "echo").await;
    let n = scripts(&redis);
    assert!(
        n >= 2,
        "the rules were not checked in Redis: {n} script runs"
    );
    // The metrics port of its own serves /metrics and /readyz.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let base = format!("http://127.0.0.1:{metrics_port}");
    let end = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        match http.get(format!("{base}/metrics")).send().await {
            Ok(r) if r.status().as_u16() == 200 => break r.text().await.unwrap(),
            other => assert!(
                Instant::now() < end,
                "{base}/metrics did not answer: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(metrics.contains("gantry_"), "{metrics}");
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
}

/// A boot case: starts Gantry with one file and reaches `initialize` through it.
type Boot = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The boot case of `config/NAME`; `None` when there is none (a new example: add one).
fn boot_case(name: &str) -> Option<Boot> {
    let boot: Boot = match name {
        "gantry.example.toml" => Box::pin(boot_gantry_example()),
        "stdio.toml" => Box::pin(boot_stdio()),
        "aggregate.toml" => Box::pin(boot_aggregate()),
        "external-idp.toml" => Box::pin(boot_external_idp()),
        "redis-limits.toml" => Box::pin(boot_redis_limits()),
        "multi-replica.toml" => Box::pin(boot_multi_replica()),
        "builtin-idp.toml" => Box::pin(boot_builtin_idp()),
        _ => return None,
    };
    Some(boot)
}

fn panic_text(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return e.to_string();
    }
    let p = e.into_panic();
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panicked".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_boots() {
    let mut files: Vec<String> = std::fs::read_dir(config_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "config/ lost its examples: {files:?}");
    let mut failed = Vec::new();
    for name in &files {
        let Some(boot) = boot_case(name) else {
            failed.push(format!(
                "config/{name}: no boot case; add one to `boot_case` in tests/config_example.rs"
            ));
            continue;
        };
        let started = Instant::now();
        let mut task = tokio::spawn(boot);
        match tokio::time::timeout(Duration::from_secs(180), &mut task).await {
            Ok(Ok(())) => eprintln!("config/{name}: booted in {:?}", started.elapsed()),
            Ok(Err(e)) => failed.push(format!("config/{name}: {}", panic_text(e))),
            Err(_) => {
                task.abort();
                failed.push(format!("config/{name}: not done within 180 s"));
            }
        }
    }
    assert!(failed.is_empty(), "\n{}", failed.join("\n"));
}

//! Test fixtures: the real `gantry` binary on an ephemeral loopback port, real
//! backend processes, and a small MCP client over real HTTP.
// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Path of the example MCP server binary built with the package.
pub(crate) fn example_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gantry-example"))
}

/// Path of the gantry binary.
pub(crate) fn gantry_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gantry"))
}

/// Path of a file under tests/fixtures.
pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A running gantry process. Killed (SIGKILL) on drop if still running.
pub(crate) struct Gantry {
    pub child: Child,
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub log: Arc<Mutex<Vec<String>>>,
    _dir: Option<tempdir::TempDir>,
}

pub mod h2;
pub mod oidc;
pub mod pki;
pub mod redis;
pub mod relay;

mod tempdir {
    pub(super) struct TempDir(pub std::path::PathBuf);
    impl TempDir {
        pub(super) fn new() -> Self {
            let p = std::env::temp_dir().join(format!(
                "gantry-test-{}-{}",
                std::process::id(),
                rand_suffix()
            ));
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }
    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Gantry {
    /// Starts gantry with these extra arguments (`--listen 127.0.0.1:0` is added).
    pub(crate) fn start(args: &[&str]) -> Self {
        Self::spawn(args, None)
    }

    /// [`Gantry::start`] with these variables added to Gantry's environment.
    pub(crate) fn start_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_env(args, None, env)
    }

    /// Starts gantry in front of the example server over stdio.
    pub(crate) fn example_stdio() -> Self {
        let bin = example_bin();
        Self::start(&["--stdio", bin.to_str().unwrap()])
    }

    /// Starts gantry with a TOML config. `listen` is forced to an ephemeral port.
    pub(crate) fn with_config(toml: &str) -> Self {
        Self::with_config_env(toml, &[])
    }

    /// Gantry in front of one backend, `mb`: `misbehaving_server.py` over stdio,
    /// recording every message it receives in `record` (`MB_RECORD`).
    pub(crate) fn recorded_misbehaving(record: &std::path::Path) -> Self {
        Self::with_config(&format!(
            "[[backends]]\nname = \"mb\"\n\
             stdio = {{ command = \"python3\", args = [{:?}], env = {{ MB_RECORD = {:?} }} }}\n",
            fixture("misbehaving_server.py").to_str().unwrap(),
            record.to_str().unwrap()
        ))
    }

    /// [`Gantry::with_config`] with these variables added to Gantry's environment.
    pub(crate) fn with_config_env(toml: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempdir::TempDir::new();
        let path = dir.0.join("gantry.toml");
        std::fs::write(&path, toml).unwrap();
        let p = path.to_str().unwrap().to_owned();
        Self::spawn_env(&["--config", &p], Some(dir), env)
    }

    fn spawn(args: &[&str], dir: Option<tempdir::TempDir>) -> Self {
        Self::spawn_env(args, dir, &[])
    }

    fn spawn_env(args: &[&str], dir: Option<tempdir::TempDir>, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(gantry_bin())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .env(
                "RUST_LOG",
                std::env::var("GANTRY_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gantry");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if std::env::var("GANTRY_TEST_ECHO").is_ok() {
                        eprintln!("[gantry] {line}");
                    }
                    if let Some(rest) = line.strip_prefix("gantry listening on ") {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(rest.trim().to_owned());
                        }
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!("gantry did not start: {:?}", log.lock().unwrap());
            }
        };
        let base = url.trim_end_matches("/mcp").to_owned();
        Self {
            child,
            url,
            base,
            log,
            _dir: dir,
        }
    }

    /// Everything gantry logged so far.
    pub(crate) fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits until the log contains `needle` (bounded).
    pub(crate) fn wait_log(&self, needle: &str, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if self.log_text().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Sends SIGTERM and waits (bounded) for exit; returns the exit status.
    pub(crate) fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The gateway process (the worker): the parent of the backend processes.
    /// `gantry` is the supervisor ([`Gantry::supervisor_pid`]) with one child, the
    /// worker, which is up once it has printed its address.
    pub(crate) fn pid(&self) -> u32 {
        let sup = self.child.id();
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some((pid, _)) = children_of(sup).into_iter().next() {
                return pid;
            }
            assert!(Instant::now() < end, "gantry {sup} has no worker process");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The configuration file it was started with (`with_config`).
    pub(crate) fn config_path(&self) -> std::path::PathBuf {
        self._dir
            .as_ref()
            .expect("started with a config file")
            .0
            .join("gantry.toml")
    }

    /// Writes `toml` over its configuration file and sends SIGHUP (to the
    /// supervisor, which passes it on).
    pub(crate) fn reload(&self, toml: &str) {
        std::fs::write(self.config_path(), toml).unwrap();
        let ok = Command::new("kill")
            .args(["-HUP", &self.supervisor_pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -HUP failed");
    }

    /// The process started as `gantry` (the supervisor).
    pub(crate) fn supervisor_pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn client(&self) -> Client {
        Client::new(&self.url)
    }

    /// A client that sends this header on every request.
    pub(crate) fn client_with(&self, header: &str, value: &str) -> Client {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            reqwest::header::HeaderName::from_bytes(header.as_bytes()).unwrap(),
            reqwest::header::HeaderValue::from_str(value).unwrap(),
        );
        let mut c = Client::new(&self.url);
        c.http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .default_headers(h)
            .build()
            .unwrap();
        c
    }

    /// A client that sends `Authorization: Bearer <token>` on every request.
    pub(crate) fn bearer(&self, token: &str) -> Client {
        self.client_with("authorization", &format!("Bearer {token}"))
    }
}

impl Drop for Gantry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes (pid, command line) whose parent is `ppid`, from /proc.
pub(crate) fn children_of(ppid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(ppid)
            && fields.first() != Some(&"Z")
        {
            let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .unwrap_or_default()
                .replace('\0', " ");
            out.push((pid, cmd));
        }
    }
    out
}

/// Whether a process exists (and is not a zombie).
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .map(|x| x.1.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// What one POST produced: status, headers, and the JSON-RPC messages in the body
/// (one for JSON, each `data` for SSE).
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub messages: Vec<Value>,
    pub event_ids: Vec<String>,
    pub raw: String,
}

impl Reply {
    /// The response message with this id.
    pub(crate) fn response(&self, id: &Value) -> Option<&Value> {
        self.messages.iter().find(|m| {
            m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
        })
    }
    pub(crate) fn content_type(&self) -> String {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }
}

/// A minimal MCP client over Streamable HTTP (session era).
#[derive(Clone)]
pub(crate) struct Client {
    pub http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub version: String,
}

pub(crate) fn parse_sse(text: &str) -> (Vec<Value>, Vec<String>) {
    let mut p = gantry::sse::Parser::new(64 << 20);
    let evs = p
        .feed(text.as_bytes())
        .unwrap_or_else(|e| panic!("not an SSE stream ({e}): {text}"));
    let mut msgs = Vec::new();
    let mut ids = Vec::new();
    for e in evs {
        if let Some(id) = e.id {
            ids.push(id);
        }
        if !e.data.trim().is_empty() {
            msgs.push(
                serde_json::from_str(&e.data)
                    .unwrap_or_else(|e2| panic!("SSE data that is not JSON ({e2}): {}", e.data)),
            );
        }
    }
    (msgs, ids)
}

/// Processes (pid, command line) descended from `pid`: children, grandchildren, …
pub(crate) fn descendants_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for child in children_of(p) {
            frontier.push(child.0);
            out.push(child);
        }
    }
    out
}

impl Client {
    pub(crate) fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            url: url.to_owned(),
            session: None,
            version: "2025-11-25".into(),
        }
    }

    /// A POST with the session headers and `Accept: application/json, text/event-stream`.
    pub(crate) fn post_builder(&self) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = &self.session {
            rb = rb
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", &self.version);
        }
        rb
    }

    /// Resumes the session's stream after `last_event_id` (GET with `Last-Event-ID`).
    pub(crate) async fn resume(&self, last_event_id: &str) -> reqwest::Response {
        self.http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", self.session.as_deref().unwrap())
            .header("mcp-protocol-version", &self.version)
            .header("last-event-id", last_event_id)
            .send()
            .await
            .unwrap()
    }

    /// Ends the session (DELETE).
    pub(crate) async fn delete(&self) -> reqwest::Response {
        self.http
            .delete(&self.url)
            .header("mcp-session-id", self.session.as_deref().unwrap())
            .header("mcp-protocol-version", &self.version)
            .send()
            .await
            .unwrap()
    }

    /// POSTs a body and reads the whole reply (JSON or SSE to its end).
    pub(crate) async fn post(&self, body: &Value) -> Reply {
        Self::read(
            self.post_builder()
                .body(body.to_string())
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    pub(crate) async fn read(resp: reqwest::Response) -> Reply {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let raw = resp.text().await.unwrap();
        let ct = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        // A body that claims to be JSON or SSE must parse: a test that checks for the
        // absence of a message must not pass because the body was garbage.
        let (messages, event_ids) = if ct.starts_with("text/event-stream") {
            parse_sse(&raw)
        } else if raw.trim().is_empty() {
            assert!(
                status != 200 || !ct.starts_with("application/json"),
                "HTTP 200 application/json with an empty body"
            );
            (vec![], vec![])
        } else {
            match serde_json::from_str::<Value>(&raw) {
                Ok(Value::Array(a)) => (a, vec![]),
                Ok(v) => (vec![v], vec![]),
                Err(e) if ct.starts_with("application/json") => {
                    panic!("HTTP {status}: an application/json body that is not JSON ({e}): {raw}")
                }
                Err(_) => (vec![], vec![]),
            }
        };
        Reply {
            status,
            headers,
            messages,
            event_ids,
            raw,
        }
    }

    /// Initializes a session (and sends `notifications/initialized`).
    pub(crate) async fn initialize(&mut self) -> Value {
        self.initialize_with(json!({})).await
    }

    pub(crate) async fn initialize_with(&mut self, capabilities: Value) -> Value {
        let r = self
            .post(
                &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
                "protocolVersion": self.version, "capabilities": capabilities,
                "clientInfo": {"name":"gantry-tests","version":"1"}}}),
            )
            .await;
        assert_eq!(r.status, 200, "initialize failed: {}", r.raw);
        self.session = Some(
            r.headers
                .get("mcp-session-id")
                .expect("session id")
                .to_str()
                .unwrap()
                .to_owned(),
        );
        let result = r.response(&json!(0)).expect("initialize response").clone();
        let n = self
            .post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .await;
        assert_eq!(n.status, 202);
        result
    }

    /// Sends a request and returns the whole reply.
    pub(crate) async fn request(&self, id: Value, method: &str, params: Value) -> Reply {
        self.post(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await
    }

    /// Calls a tool and returns the response message.
    pub(crate) async fn call_tool(&self, id: Value, name: &str, args: Value) -> Value {
        let r = self
            .request(
                id.clone(),
                "tools/call",
                json!({"name":name,"arguments":args}),
            )
            .await;
        r.response(&id)
            .unwrap_or_else(|| panic!("no response to {id} in {}", r.raw))
            .clone()
    }

    /// Sends a notification.
    pub(crate) async fn notify(&self, method: &str, params: Value) -> u16 {
        self.post(&json!({"jsonrpc":"2.0","method":method,"params":params}))
            .await
            .status
    }
}

/// The value of one metric line (`name` includes any labels) from `/metrics`.
pub(crate) async fn metric(g: &Gantry, name: &str) -> Option<f64> {
    let text = reqwest::get(format!("{}/metrics", g.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.split(' ').next() == Some(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Polls a metric (bounded, 10 s) until `ok` holds; false if it never did.
pub(crate) async fn metric_until(g: &Gantry, name: &str, ok: impl Fn(f64) -> bool) -> bool {
    metric_within(g, name, Duration::from_secs(10), ok).await
}

/// [`metric_until`] with another bound (work that takes long on a loaded machine).
pub(crate) async fn metric_within(
    g: &Gantry,
    name: &str,
    within: Duration,
    ok: impl Fn(f64) -> bool,
) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if metric(g, name).await.is_some_and(&ok) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Answers server→client requests on a call's stream, then returns the call's response.
pub(crate) async fn call_answering(
    c: &Client,
    id: Value,
    name: &str,
    args: Value,
    answer: Value,
) -> (Vec<Value>, Value) {
    let resp = c
        .post_builder()
        .body(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args}}).to_string())
        .send()
        .await
        .unwrap();
    let json_answer = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("application/json"));
    if json_answer {
        // Answered at once, without asking anything.
        return (Vec::new(), resp.json().await.unwrap());
    }
    let mut body = resp.bytes_stream();
    let mut parser = gantry::sse::Parser::new(1 << 24);
    let mut asked = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        let Ok(Some(Ok(chunk))) =
            tokio::time::timeout_at(end.into(), futures::StreamExt::next(&mut body)).await
        else {
            break;
        };
        for ev in parser.feed(&chunk).unwrap() {
            if ev.data.trim().is_empty() {
                continue;
            }
            let m: Value = serde_json::from_str(&ev.data).unwrap();
            if m.get("method").is_some() && m.get("id").is_some() {
                asked.push(m.clone());
                let reply = json!({"jsonrpc":"2.0","id": m["id"], "result": answer});
                assert_eq!(c.post(&reply).await.status, 202);
            } else if m.get("id") == Some(&id) {
                return (asked, m);
            }
        }
    }
    panic!("no response to {id}");
}

/// A large call of `echo`: its message (escapes, non-ASCII text and `kib` KiB of
/// digits), its params, and the call as a body written compact (id 1) and
/// pretty-printed (id 2, raw newlines between tokens).
pub(crate) fn large_echo_calls(kib: usize) -> (String, Value, [(u64, String); 2]) {
    let message = format!("\"é\\\t{}", "0123456789abcdef".repeat(kib * 64));
    let params = serde_json::json!({"name": "echo", "arguments": {"message": message}});
    let call = |id: u64| serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let bodies = [
        (1, call(1).to_string()),
        (2, serde_json::to_string_pretty(&call(2)).unwrap()),
    ];
    (message, params, bodies)
}

/// The messages a test backend recorded (`MB_RECORD`), one JSON object per line.
pub(crate) fn recorded(file: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The SHA-256 of an API key, as `[[auth.api_keys]] sha256` wants it.
pub(crate) fn sha256_hex(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A scratch directory removed on drop.
pub(crate) struct Scratch(pub PathBuf);

impl Scratch {
    pub(crate) fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "gantry-test-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The stateless-era protocol version.
pub(crate) const STATELESS_VERSION: &str = "2026-07-28";

/// A stateless-era client: every request carries `_meta` and the headers.
pub(crate) struct Stateless {
    pub http: reqwest::Client,
    pub url: String,
    pub key: Option<String>,
}

/// An open `subscriptions/listen` stream, read event by event.
pub(crate) struct Listen {
    resp: reqwest::Response,
    parser: gantry::sse::Parser,
    ready: std::collections::VecDeque<Value>,
}

impl Listen {
    pub(crate) async fn open(c: &Stateless, id: Value, notifications: Value) -> Self {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                          "params": {"notifications": notifications, "_meta": stateless_meta(json!({}))}});
        let resp = c
            .http
            .post(&c.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", STATELESS_VERSION)
            .header("mcp-method", "subscriptions/listen")
            .timeout(Duration::from_secs(300))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Self {
            resp,
            parser: gantry::sse::Parser::new(1 << 20),
            ready: Default::default(),
        }
    }

    /// The next message, or `None` if none arrives within `within`.
    pub(crate) async fn next(&mut self, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(m) = self.ready.pop_front() {
                return Some(m);
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .ok()?
                .unwrap()?;
            for e in self.parser.feed(&chunk).unwrap() {
                if !e.data.trim().is_empty() {
                    self.ready.push_back(serde_json::from_str(&e.data).unwrap());
                }
            }
        }
    }
}

pub(crate) fn stateless_meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "stateless-test", "version": "1"},
    })
}

impl Stateless {
    pub(crate) fn new(g: &Gantry) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            url: g.url.clone(),
            key: None,
        }
    }

    pub(crate) fn with_key(g: &Gantry, key: &str) -> Self {
        Self {
            key: Some(key.into()),
            ..Self::new(g)
        }
    }

    /// The request builder with the era's headers for `method` (and `name`).
    pub(crate) fn builder(&self, method: &str, name: Option<&str>) -> reqwest::RequestBuilder {
        self.builder_for(STATELESS_VERSION, method, name)
    }

    pub(crate) fn builder_for(
        &self,
        version: &str,
        method: &str,
        name: Option<&str>,
    ) -> reqwest::RequestBuilder {
        self.builder_accepting("application/json, text/event-stream", version, method, name)
    }

    /// [`Stateless::builder_for`] with `Accept: accept`.
    pub(crate) fn builder_accepting(
        &self,
        accept: &str,
        version: &str,
        method: &str,
        name: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", accept)
            .header("mcp-protocol-version", version)
            .header("mcp-method", method);
        if let Some(n) = name {
            rb = rb.header("mcp-name", n);
        }
        if let Some(k) = &self.key {
            rb = rb.bearer_auth(k);
        }
        rb
    }

    pub(crate) async fn send(&self, rb: reqwest::RequestBuilder, body: Value) -> Reply {
        Client::read(rb.body(body.to_string()).send().await.unwrap()).await
    }

    /// A conformant request: `params` gets `_meta` with `caps`.
    pub(crate) async fn request(
        &self,
        id: Value,
        method: &str,
        mut params: Value,
        caps: Value,
    ) -> Reply {
        let name = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .filter(|_| matches!(method, "tools/call" | "prompts/get" | "resources/read"));
        let m = params
            .as_object_mut()
            .unwrap()
            .entry("_meta")
            .or_insert_with(|| json!({}));
        for (k, v) in stateless_meta(caps).as_object().unwrap() {
            m.as_object_mut()
                .unwrap()
                .entry(k.clone())
                .or_insert(v.clone());
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(self.builder(method, name.as_deref()), body).await
    }

    pub(crate) async fn call(&self, id: Value, name: &str, args: Value, caps: Value) -> Reply {
        self.request(
            id,
            "tools/call",
            json!({"name": name, "arguments": args}),
            caps,
        )
        .await
    }
}

/// A backend process serving Streamable HTTP, started with `--http 127.0.0.1:0`; its
/// URL is read from the `listening on URL` line it prints to stderr. Killed on drop.
pub(crate) struct HttpServer {
    pub child: Child,
    pub url: String,
}

impl HttpServer {
    /// Starts `program args… --http 127.0.0.1:0` with `env` added.
    pub(crate) fn start(program: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_at(program, args, env, "127.0.0.1:0")
    }

    /// [`HttpServer::start`] on a given address.
    pub(crate) fn start_at(
        program: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
        addr: &str,
    ) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .args(["--http", addr])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            // Keeps draining stderr so the server never blocks on a full pipe.
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.split("listening on ").nth(1) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(url.trim().to_owned());
                    }
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => Self { child, url },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} --http did not report its address", program.display());
            }
        }
    }

    /// The example server over HTTP, with extra arguments.
    pub(crate) fn example(args: &[&str]) -> Self {
        Self::start(&example_bin(), args, &[])
    }

    /// The example server over HTTP, with extra environment (`MB_RECORD`, …).
    pub(crate) fn example_with_env(env: &[(&str, &str)]) -> Self {
        Self::start(&example_bin(), &[], env)
    }

    /// `tests/fixtures/NAME` run by python3 over HTTP.
    pub(crate) fn python(name: &str, env: &[(&str, &str)]) -> Self {
        let script = fixture(name);
        Self::start(
            std::path::Path::new("python3"),
            &[script.to_str().unwrap()],
            env,
        )
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts that `resp` (a JSON-RPC response message) is an error with `code` whose
/// `data.backend` names `backend` (when given); returns the error object.
pub(crate) fn assert_rpc_error<'a>(resp: &'a Value, code: i64, backend: Option<&str>) -> &'a Value {
    let err = &resp["error"];
    assert_eq!(err["code"], code, "expected error {code}: {resp}");
    assert!(
        err["message"].is_string(),
        "error without a message: {resp}"
    );
    if let Some(b) = backend {
        assert_eq!(
            err["data"]["backend"], b,
            "error not naming backend {b}: {resp}"
        );
    }
    err
}

/// A loopback port that was free a moment ago.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` every 20 ms until it returns `Some`, for at most `within`.
pub(crate) async fn poll_until<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------
// Reading SSE streams event by event
// ---------------------------------------------------------------------------------

/// Upper bound on chunks read from one SSE body (every loop is bounded in count too).
const MAX_CHUNKS: usize = 100_000;

/// An SSE body read incrementally, event by event, each read bounded by a deadline.
pub(crate) struct SseReader {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    parser: gantry::sse::Parser,
    queue: std::collections::VecDeque<gantry::sse::Event>,
    chunks: usize,
    /// Everything received so far (for failure messages).
    pub raw: String,
}

/// What one bounded read found.
#[derive(Debug)]
pub(crate) enum Next {
    Event(gantry::sse::Event),
    /// The server ended the body.
    End,
    /// The deadline passed first.
    Timeout,
}

impl SseReader {
    pub(crate) fn new(resp: reqwest::Response) -> Self {
        Self {
            body: Box::pin(resp.bytes_stream()),
            parser: gantry::sse::Parser::new(16 << 20),
            queue: std::collections::VecDeque::new(),
            chunks: 0,
            raw: String::new(),
        }
    }

    /// The next event (keep-alive comments are skipped by the parser).
    pub(crate) async fn next(&mut self, deadline: tokio::time::Instant) -> Next {
        loop {
            if let Some(e) = self.queue.pop_front() {
                return Next::Event(e);
            }
            assert!(
                self.chunks < MAX_CHUNKS,
                "too many chunks on one SSE stream: {}",
                self.raw
            );
            self.chunks += 1;
            match tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut self.body)).await
            {
                Err(_) => return Next::Timeout,
                Ok(None) => return Next::End,
                // A reset connection is an end too; the caller asserts what it expected.
                Ok(Some(Err(_))) => return Next::End,
                Ok(Some(Ok(bytes))) => {
                    self.raw.push_str(&String::from_utf8_lossy(&bytes));
                    self.queue
                        .extend(self.parser.feed(&bytes).expect("well-formed SSE"));
                }
            }
        }
    }

    /// The next event, which must come before `deadline`.
    pub(crate) async fn expect_event(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> gantry::sse::Event {
        match self.next(deadline).await {
            Next::Event(e) => e,
            other => panic!(
                "expected an SSE event, got {other:?}; stream so far: {}",
                self.raw
            ),
        }
    }

    /// Reads until a JSON-RPC message satisfying `pred` arrives (before `deadline`).
    pub(crate) async fn message_where(
        &mut self,
        deadline: tokio::time::Instant,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        loop {
            let e = self.expect_event(deadline).await;
            if e.data.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(&e.data).expect("SSE data is JSON");
            if pred(&v) {
                return v;
            }
        }
    }
}

pub(crate) fn deadline(secs: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(secs)
}

impl Client {
    /// Opens the session's GET stream (which must be accepted: 200).
    pub(crate) async fn open_get(&self) -> reqwest::Response {
        let r = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", self.session.as_deref().unwrap())
            .header("mcp-protocol-version", &self.version)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "GET stream refused");
        r
    }
}

// ---------------------------------------------------------------------------------
// A typed builder for a Gantry with backends:
//   gantry().backend(example().mode("shared").record(&file)).server("max_sessions = 2").start()
// ---------------------------------------------------------------------------------

/// One `[[backends]]` table, built.
#[derive(Clone)]
pub struct BackendSpec {
    name: String,
    /// `stdio = {…}` or `http = {…}`, as TOML.
    transport: Transport,
    /// More `key = value` lines of the table.
    keys: Vec<String>,
}

#[derive(Clone)]
enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        /// More `key = value` fields of the `stdio` table.
        fields: Vec<String>,
    },
    Http {
        url: String,
        /// More `key = value` fields of the `http` table.
        fields: Vec<String>,
    },
}

/// The text of a tool result's first content block ("" when it has none).
pub fn text_of(resp: &Value) -> String {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The example server over stdio, named `example`.
pub fn example() -> BackendSpec {
    stdio("example", example_bin().to_str().unwrap(), &[])
}

/// `tests/fixtures/NAME` run by python3 over stdio, named `name`.
pub fn python_fixture(name: &str, script: &str) -> BackendSpec {
    stdio(name, "python3", &[fixture(script).to_str().unwrap()])
}

/// A stdio backend.
pub fn stdio(name: &str, command: &str, args: &[&str]) -> BackendSpec {
    BackendSpec {
        name: name.into(),
        transport: Transport::Stdio {
            command: command.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
            fields: Vec::new(),
        },
        keys: Vec::new(),
    }
}

/// A Streamable HTTP backend.
pub fn http_backend(name: &str, url: &str) -> BackendSpec {
    BackendSpec {
        name: name.into(),
        transport: Transport::Http {
            url: url.into(),
            fields: Vec::new(),
        },
        keys: Vec::new(),
    }
}

impl BackendSpec {
    /// Another name.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// More arguments (stdio).
    pub fn arg(mut self, a: &str) -> Self {
        if let Transport::Stdio { args, .. } = &mut self.transport {
            args.push(a.into());
        }
        self
    }

    /// An environment variable of the child (stdio).
    pub fn env(mut self, k: &str, v: &str) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.push((k.into(), v.into()));
        }
        self
    }

    /// The backend records what it receives in `file` (`MB_RECORD`).
    pub fn record(self, file: &std::path::Path) -> Self {
        self.env("MB_RECORD", file.to_str().unwrap())
    }

    /// Another field of the `stdio` or `http` table (`oauth = { … }`).
    pub fn transport_field(mut self, field: &str) -> Self {
        match &mut self.transport {
            Transport::Http { fields, .. } | Transport::Stdio { fields, .. } => {
                fields.push(field.into())
            }
        }
        self
    }

    /// `session_mode`.
    pub fn mode(self, mode: &str) -> Self {
        self.set(&format!("session_mode = {mode:?}"))
    }

    /// `era`.
    pub fn era(self, era: &str) -> Self {
        self.set(&format!("era = {era:?}"))
    }

    /// Any other key of the table, as a TOML line (`pool = { min_idle = 1 }`).
    pub fn set(mut self, line: &str) -> Self {
        self.keys.push(line.into());
        self
    }

    fn toml(&self) -> String {
        let transport = match &self.transport {
            Transport::Stdio {
                command,
                args,
                env,
                fields,
            } => {
                let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
                let more: String = fields.iter().map(|f| format!(", {f}")).collect();
                format!(
                    "stdio = {{ command = {command:?}, args = {args:?}, env = {{ {} }}{more} }}",
                    env.join(", ")
                )
            }
            Transport::Http { url, fields } => {
                let more: String = fields.iter().map(|f| format!(", {f}")).collect();
                format!("http = {{ url = {url:?}{more} }}")
            }
        };
        format!(
            "[[backends]]\nname = {:?}\n{}\n{transport}\n",
            self.name,
            self.keys.join("\n")
        )
    }
}

/// A Gantry to start, built.
#[derive(Default, Clone)]
pub struct GantrySpec {
    server: Vec<String>,
    sections: Vec<String>,
    keys: Vec<(String, String)>,
    backends: Vec<BackendSpec>,
    env: Vec<(String, String)>,
}

/// A Gantry with no backends yet.
pub fn gantry() -> GantrySpec {
    GantrySpec::default()
}

impl GantrySpec {
    /// A backend.
    pub fn backend(mut self, b: BackendSpec) -> Self {
        self.backends.push(b);
        self
    }

    /// A `[server]` key, as a TOML line (`max_sessions = 2`).
    pub fn server(mut self, line: &str) -> Self {
        self.server.push(line.into());
        self
    }

    /// More TOML after `[server]` (`[auth.oauth]` …).
    pub fn section(mut self, toml: &str) -> Self {
        self.sections.push(toml.into());
        self
    }

    /// An API key for `principal` (authentication on).
    pub fn api_key(mut self, principal: &str, key: &str) -> Self {
        self.keys.push((principal.into(), key.into()));
        self
    }

    /// A variable in Gantry's own environment.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// The configuration file this builds.
    pub fn toml(&self) -> String {
        let mut t = format!("[server]\n{}\n", self.server.join("\n"));
        for s in &self.sections {
            t.push_str(s);
            t.push('\n');
        }
        for (principal, key) in &self.keys {
            t.push_str(&format!(
                "[[auth.api_keys]]\nprincipal = {principal:?}\nsha256 = {:?}\n",
                sha256_hex(key)
            ));
        }
        for b in &self.backends {
            t.push_str(&b.toml());
        }
        t
    }

    /// Starts it.
    pub fn start(self) -> Gantry {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Gantry::with_config_env(&self.toml(), &env)
    }
}

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
//! The example server over stdio in both protocol eras: a 2026-07-28 client with
//! no `initialize`, a session-era client, and `--session-era-only`.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc::{self, Receiver},
    time::Duration,
};

use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(10);

/// The example server as a child process, spoken to line by line.
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: u64,
}

impl Server {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gantry-example"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn gantry-example");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
            next_id: 1,
        }
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").expect("write");
        self.stdin.flush().expect("flush");
    }

    /// Sends a request and returns its response, skipping notifications.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let line = self.lines.recv_timeout(TIMEOUT).expect("a response");
            let message: Value = serde_json::from_str(&line).expect("JSON line");
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The 2026-07-28 request envelope.
fn meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": { "name": "example-eras-test", "version": "1" }
    })
}

fn initialize(server: &mut Server, capabilities: Value) -> Value {
    let response = server.request(
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "clientInfo": { "name": "example-eras-test", "version": "1" }
        }),
    );
    server.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    response
}

#[test]
fn stdio_serves_the_stateless_era_without_initialize() {
    let mut server = Server::start(&[]);
    let discover = server.request("server/discover", json!({ "_meta": meta(json!({})) }));
    let versions = &discover["result"]["supportedVersions"];
    assert!(versions
        .as_array()
        .expect("versions")
        .contains(&json!("2026-07-28")));
    assert!(versions
        .as_array()
        .expect("versions")
        .contains(&json!("2025-11-25")));

    let call = json!({
        "name": "test_input_required_result_multi_round",
        "arguments": {},
        "_meta": meta(json!({ "elicitation": {} }))
    });
    let first = server.request("tools/call", call.clone());
    assert_eq!(first["result"]["resultType"], "input_required");
    let state = first["result"]["requestState"].as_str().expect("state");

    let mut tampered = call.clone();
    tampered["requestState"] = json!(format!("{state}-TAMPERED"));
    tampered["inputResponses"] =
        json!({ "step1": { "action": "accept", "content": { "name": "Ada" } } });
    let rejected = server.request("tools/call", tampered);
    assert_eq!(rejected["error"]["code"], -32602);

    let mut retry = call.clone();
    retry["requestState"] = json!(state);
    retry["inputResponses"] =
        json!({ "step1": { "action": "accept", "content": { "name": "Ada" } } });
    let second = server.request("tools/call", retry);
    assert_eq!(second["result"]["resultType"], "input_required");
    let state2 = second["result"]["requestState"].as_str().expect("state");
    assert_ne!(state, state2);

    let mut last = call;
    last["requestState"] = json!(state2);
    last["inputResponses"] =
        json!({ "step2": { "action": "accept", "content": { "color": "teal" } } });
    let done = server.request("tools/call", last);
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Hello, Ada! Your favorite color is teal."
    );

    let missing = server.request(
        "tools/call",
        json!({ "name": "test_missing_capability", "arguments": {}, "_meta": meta(json!({})) }),
    );
    assert_eq!(missing["error"]["code"], -32021);
    assert!(missing["error"]["data"]["requiredCapabilities"]["sampling"].is_object());
}

#[test]
fn stdio_still_serves_a_session_era_client() {
    let mut server = Server::start(&[]);
    let init = initialize(&mut server, json!({}));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    let echo = server.request(
        "tools/call",
        json!({ "name": "echo", "arguments": { "message": "hi" } }),
    );
    assert_eq!(echo["result"]["content"][0]["text"], "hi");
    assert!(echo["result"].get("resultType").is_none());
    // Without the elicitation capability the MRTR fixture cannot ask; it says so.
    let mrtr = server.request(
        "tools/call",
        json!({ "name": "test_input_required_result_elicitation", "arguments": {} }),
    );
    assert_eq!(mrtr["result"]["isError"], true);
}

#[test]
fn session_era_only_refuses_the_stateless_era() {
    let mut server = Server::start(&["--session-era-only"]);
    let discover = server.request("server/discover", json!({ "_meta": meta(json!({})) }));
    assert_eq!(discover["error"]["code"], -32601);
    let early = server.request("tools/list", json!({ "_meta": meta(json!({})) }));
    assert_eq!(early["error"]["code"], -32600);
    let init = initialize(&mut server, json!({}));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    let list = server.request("tools/list", json!({ "_meta": meta(json!({})) }));
    assert!(list["result"]["tools"].is_array());
    assert!(list["result"].get("resultType").is_none());
}

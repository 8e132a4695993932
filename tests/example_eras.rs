// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
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

impl Server {
    /// Sends a request and returns its response, answering every request the
    /// server sends meanwhile with `answer(request)`; returns those requests too.
    fn request_answering(
        &mut self,
        method: &str,
        params: Value,
        answer: impl Fn(&Value) -> Value,
    ) -> (Value, Vec<Value>) {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let mut asked = Vec::new();
        loop {
            let line = self.lines.recv_timeout(TIMEOUT).expect("a response");
            let message: Value = serde_json::from_str(&line).expect("JSON line");
            if message.get("method").is_some() {
                if let Some(request_id) = message.get("id") {
                    let result = answer(&message);
                    self.send(&json!({ "jsonrpc": "2.0", "id": request_id, "result": result }));
                    asked.push(message);
                }
            } else if message["id"] == json!(id) {
                return (message, asked);
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

/// The four session-era tools that ask the client something, their arguments,
/// the `inputRequests` key of the stateless era, and a canned client answer.
fn peer_tools() -> Vec<(&'static str, Value, &'static str, Value)> {
    let accepted = |content: Value| json!({ "action": "accept", "content": content });
    vec![
        (
            "test_sampling",
            json!({ "prompt": "What is the capital of France?" }),
            "sampling",
            json!({
                "role": "assistant",
                "content": { "type": "text", "text": "Paris" },
                "model": "test-model",
                "stopReason": "endTurn"
            }),
        ),
        (
            "test_elicitation",
            json!({ "message": "Who are you?" }),
            "elicitation",
            accepted(json!({ "username": "ada", "email": "ada@example.com" })),
        ),
        (
            "test_elicitation_sep1034_defaults",
            json!({}),
            "elicitation",
            accepted(json!({ "name": "John Doe", "age": 30, "score": 95.5,
                             "status": "active", "verified": true })),
        ),
        (
            "test_elicitation_sep1330_enums",
            json!({}),
            "elicitation",
            json!({ "action": "decline" }),
        ),
    ]
}

fn all_capabilities() -> Value {
    json!({ "sampling": {}, "elicitation": {}, "roots": {} })
}

/// Calls `tool` statelessly and answers its one input request with `answer`;
/// returns the input request and the final response.
fn stateless_round_trip(
    server: &mut Server,
    tool: &str,
    arguments: &Value,
    key: &str,
    answer: &Value,
) -> (Value, Value) {
    let call = json!({ "name": tool, "arguments": arguments, "_meta": meta(all_capabilities()) });
    let first = server.request("tools/call", call.clone());
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{tool}: {first}");
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{tool}: one input request: {first}");
    let asked = requests.get(key).expect("the input request key").clone();
    let state = result["requestState"].as_str().expect("a requestState");

    let mut retry = call;
    retry["inputResponses"] = json!({ key: answer });
    retry["requestState"] = json!(state);
    let done = server.request("tools/call", retry);
    assert_eq!(done["result"]["resultType"], "complete", "{tool}: {done}");
    (asked, done)
}

#[test]
fn stdio_stateless_peer_tools_match_the_session_era() {
    let mut session = Server::start(&[]);
    initialize(&mut session, all_capabilities());
    let mut stateless = Server::start(&[]);

    for (tool, arguments, key, answer) in peer_tools() {
        let (session_done, session_asked) = session.request_answering(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
            |_| answer.clone(),
        );
        assert_eq!(session_asked.len(), 1, "{tool}: one request to the client");
        let session_request = &session_asked[0];

        let (stateless_request, stateless_done) =
            stateless_round_trip(&mut stateless, tool, &arguments, key, &answer);

        // The same question: method and params (rmcp adds a progressToken `_meta`
        // to every request it sends on a session; that is the transport's, not
        // the question's).
        assert_eq!(
            stateless_request["method"], session_request["method"],
            "{tool}"
        );
        let mut session_params = session_request["params"].clone();
        if let Some(params) = session_params.as_object_mut() {
            params.remove("_meta");
        }
        assert_eq!(stateless_request["params"], session_params, "{tool}");
        // The same answer.
        assert_eq!(
            stateless_done["result"]["content"], session_done["result"]["content"],
            "{tool}"
        );
        assert_eq!(
            stateless_done["result"].get("isError"),
            session_done["result"].get("isError"),
            "{tool}"
        );
    }
}

#[test]
fn stdio_stateless_sampling_and_elicitation_round_trip() {
    let mut server = Server::start(&[]);

    let (asked, done) = stateless_round_trip(
        &mut server,
        "test_sampling",
        &json!({ "prompt": "Say hi" }),
        "sampling",
        &json!({ "role": "assistant", "content": { "type": "text", "text": "hi" },
                 "model": "m" }),
    );
    assert_eq!(asked["method"], "sampling/createMessage");
    assert_eq!(asked["params"]["messages"][0]["content"]["text"], "Say hi");
    assert_eq!(asked["params"]["maxTokens"], 100);
    assert_eq!(done["result"]["content"][0]["text"], "LLM response: hi");

    let (asked, done) = stateless_round_trip(
        &mut server,
        "test_elicitation",
        &json!({ "message": "Your name?" }),
        "elicitation",
        &json!({ "action": "accept", "content": { "username": "ada", "email": "a@b.c" } }),
    );
    assert_eq!(asked["method"], "elicitation/create");
    assert_eq!(asked["params"]["message"], "Your name?");
    assert!(asked["params"]["requestedSchema"]["properties"]["username"].is_object());
    assert_eq!(
        done["result"]["content"][0]["text"],
        r#"User response: action=accept, content={"username":"ada","email":"a@b.c"}"#
    );
}

#[test]
fn stdio_stateless_peer_tools_refuse_bad_retries() {
    let mut server = Server::start(&[]);
    let call = json!({
        "name": "test_sampling",
        "arguments": { "prompt": "Say hi" },
        "_meta": meta(json!({ "sampling": {} }))
    });
    let answer = json!({
        "sampling": { "role": "assistant", "content": { "type": "text", "text": "hi" },
                      "model": "m" }
    });
    let first = server.request("tools/call", call.clone());
    assert_eq!(first["result"]["resultType"], "input_required");
    let state = first["result"]["requestState"].as_str().expect("state");

    // A tampered requestState is refused.
    let mut tampered = call.clone();
    tampered["inputResponses"] = answer.clone();
    tampered["requestState"] = json!(format!("{state}x"));
    let refused = server.request("tools/call", tampered);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .expect("message")
        .contains("requestState integrity check failed"));

    // A state sealed for another tool is refused.
    let elicit = server.request(
        "tools/call",
        json!({ "name": "test_elicitation_sep1034_defaults", "arguments": {},
                "_meta": meta(json!({ "elicitation": {} })) }),
    );
    let mut misbound = call.clone();
    misbound["inputResponses"] = answer.clone();
    misbound["requestState"] = elicit["result"]["requestState"].clone();
    assert_eq!(
        server.request("tools/call", misbound)["error"]["code"],
        -32602
    );

    // The state answers the question asked, not one with other arguments.
    let mut other_prompt = call.clone();
    other_prompt["arguments"]["prompt"] = json!("Say bye");
    other_prompt["inputResponses"] = answer.clone();
    other_prompt["requestState"] = json!(state);
    assert_eq!(
        server.request("tools/call", other_prompt)["error"]["code"],
        -32602
    );

    // A malformed answer is -32602.
    let mut malformed = call.clone();
    malformed["inputResponses"] = json!({ "sampling": { "nonsense": true } });
    malformed["requestState"] = json!(state);
    assert_eq!(
        server.request("tools/call", malformed)["error"]["code"],
        -32602
    );

    // An answer without the state does not count: the question comes again.
    let mut stateless_answer = call.clone();
    stateless_answer["inputResponses"] = answer.clone();
    let again = server.request("tools/call", stateless_answer);
    assert_eq!(again["result"]["resultType"], "input_required");
    assert!(again["result"]["inputRequests"]["sampling"].is_object());

    // Without the capability in this request's _meta: -32021, as test_missing_capability.
    for (tool, arguments, capability) in [
        ("test_sampling", json!({ "prompt": "Say hi" }), "sampling"),
        (
            "test_elicitation",
            json!({ "message": "Hi?" }),
            "elicitation",
        ),
    ] {
        let mut undeclared = json!({ "name": tool, "arguments": arguments,
                                     "_meta": meta(json!({ "roots": {} })) });
        let missing = server.request("tools/call", undeclared.clone());
        assert_eq!(missing["error"]["code"], -32021, "{missing}");
        assert!(missing["error"]["data"]["requiredCapabilities"][capability].is_object());
        if tool == "test_sampling" {
            // Even on a retry carrying a valid state and an answer.
            undeclared["requestState"] = json!(state);
            undeclared["inputResponses"] = answer.clone();
            assert_eq!(
                server.request("tools/call", undeclared)["error"]["code"],
                -32021
            );
        }
    }

    // The untampered retry still completes.
    let mut retry = call;
    retry["inputResponses"] = answer;
    retry["requestState"] = json!(state);
    let done = server.request("tools/call", retry);
    assert_eq!(done["result"]["content"][0]["text"], "LLM response: hi");
}

//! Each client keeps its own era and its own state, in front of a backend that speaks
//! both eras but, like many real servers, asks the client mid-call (sampling,
//! elicitation, roots) only in the session era (`tests/fixtures/dual_era_server.py`,
//! a real process over stdio and over HTTP). Through Gantry a session-era client
//! must get what it gets directly: the session era, with its own identity and
//! capabilities; a stateless-era caller the stateless era; and stateless callers
//! Gantry cannot tell apart never inherit another's connection state.

// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::{
    call_answering, gantry, http_backend, python_fixture, recorded, text_of, BackendSpec, Client,
    Gantry, GantrySpec, HttpServer, Scratch, Stateless,
};
use serde_json::{json, Value};

/// The dual-era fixture behind Gantry, over one transport.
enum Transport {
    Stdio,
    Http,
}

/// Gantry in front of the dual-era fixture; `backend_extra` goes into its
/// `[[backends]]` table, `extra` before it. Keeps the HTTP server alive.
struct Setup {
    g: Gantry,
    _http: Option<HttpServer>,
    _dir: Scratch,
    record: std::path::PathBuf,
}

fn dual(
    transport: Transport,
    backend: impl FnOnce(BackendSpec) -> BackendSpec,
    gateway: impl FnOnce(GantrySpec) -> GantrySpec,
) -> Setup {
    let dir = Scratch::new("dual");
    let record = dir.file("received.jsonl");
    let (spec, http) = match transport {
        Transport::Stdio => (
            python_fixture("dual", "dual_era_server.py").record(&record),
            None,
        ),
        Transport::Http => {
            let rec = record.to_str().unwrap();
            let server = HttpServer::python("dual_era_server.py", &[("MB_RECORD", rec)]);
            (http_backend("dual", &server.url), Some(server))
        }
    };
    let g = gateway(gantry().backend(backend(spec))).start();
    Setup {
        g,
        _http: http,
        _dir: dir,
        record,
    }
}

/// What `whoami` says reached the backend.
async fn whoami_session(c: &Client, id: i64) -> Value {
    let r = c.call_tool(json!(id), "whoami", json!({})).await;
    serde_json::from_str(&text_of(&r)).unwrap_or_else(|_| panic!("whoami: {r}"))
}

async fn whoami_stateless(s: &Stateless, id: i64) -> Value {
    let r = s.call(json!(id), "whoami", json!({}), json!({})).await;
    let resp = r
        .response(&json!(id))
        .unwrap_or_else(|| panic!("{}", r.raw));
    serde_json::from_str(&text_of(resp)).unwrap_or_else(|_| panic!("whoami: {resp}"))
}

async fn session_client_keeps_the_session_era(transport: Transport) {
    let s = dual(transport, |b| b, |g| g);
    let mut c = s.g.client();
    c.version = "2025-06-18".into();
    c.initialize_with(json!({"sampling": {}, "elicitation": {}, "roots": {}}))
        .await;
    let who = whoami_session(&c, 1).await;
    assert_eq!(who["era"], "session", "{who}");
    // Initialized as this client, not as Gantry: its version, identity, capabilities.
    assert_eq!(who["protocolVersion"], "2025-06-18", "{who}");
    assert_eq!(who["clientInfo"]["name"], "gantry-tests", "{who}");
    assert_eq!(
        who["capabilities"],
        json!({"sampling": {}, "elicitation": {}, "roots": {}})
    );

    // The backend's own session-era request reaches the client mid-call.
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "sampled:hi"}, "model": "m"});
    let (asked, resp) =
        call_answering(&c, json!(2), "sample", json!({"prompt": "hi"}), sampled).await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["method"], "sampling/createMessage");
    assert_eq!(
        asked[0]["params"]["messages"][0]["content"]["text"], "hi",
        "{asked:?}"
    );
    assert_eq!(text_of(&resp), "LLM response: sampled:hi", "{resp}");

    let accepted = json!({"action": "accept", "content": {"name": "x"}});
    let (asked, resp) = call_answering(
        &c,
        json!(3),
        "elicit",
        json!({"message": "name?"}),
        accepted,
    )
    .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["method"], "elicitation/create");
    assert_eq!(
        text_of(&resp),
        r#"User response: action=accept, content={"name":"x"}"#,
        "{resp}"
    );

    let roots = json!({"roots": [{"uri": "file:///mine", "name": "mine"}]});
    let (asked, resp) = call_answering(&c, json!(4), "roots", json!({}), roots).await;
    assert_eq!(asked[0]["method"], "roots/list", "{asked:?}");
    assert_eq!(
        text_of(&resp),
        r#"[{"uri":"file:///mine","name":"mine"}]"#,
        "{resp}"
    );

    // What reached the backend was session-era traffic only.
    let msgs = recorded(&s.record);
    assert!(
        msgs.iter()
            .all(|m| m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].is_null()),
        "{msgs:?}"
    );
}

#[tokio::test]
async fn a_session_client_gets_the_session_era_of_a_dual_era_stdio_backend() {
    session_client_keeps_the_session_era(Transport::Stdio).await;
}

#[tokio::test]
async fn a_session_client_gets_the_session_era_of_a_dual_era_http_backend() {
    session_client_keeps_the_session_era(Transport::Http).await;
}

async fn stateless_caller_gets_the_stateless_era(transport: Transport) {
    let s = dual(transport, |b| b, |g| g);
    let sl = Stateless::new(&s.g);
    let who = whoami_stateless(&sl, 1).await;
    assert_eq!(who["era"], "stateless", "{who}");
    assert_eq!(who["protocolVersion"], "2026-07-28", "{who}");
    // The caller's own identity, as a direct request would carry it.
    assert_eq!(who["clientInfo"]["name"], "stateless-test", "{who}");
    // The backend's own stateless answer, as directly: no translation invented.
    let r = sl
        .call(
            json!(2),
            "sample",
            json!({"prompt": "hi"}),
            json!({"sampling": {}}),
        )
        .await;
    let resp = r.response(&json!(2)).unwrap();
    assert_eq!(
        text_of(resp),
        "Sampling not supported or error: MCP error -32601: Method not found",
        "{resp}"
    );
    assert_eq!(resp["result"]["isError"], true, "{resp}");
    // No session was opened for the stateless caller.
    assert!(
        recorded(&s.record)
            .iter()
            .all(|m| m["method"] != "initialize"),
        "{:?}",
        recorded(&s.record)
    );
}

#[tokio::test]
async fn a_stateless_caller_gets_the_stateless_era_of_a_dual_era_stdio_backend() {
    stateless_caller_gets_the_stateless_era(Transport::Stdio).await;
}

#[tokio::test]
async fn a_stateless_caller_gets_the_stateless_era_of_a_dual_era_http_backend() {
    stateless_caller_gets_the_stateless_era(Transport::Http).await;
}

/// Calls `roots` statelessly; answers the `roots/list` input request (if asked) with
/// `roots`. Returns whether it was asked and the tool's text.
async fn stateless_roots(s: &Stateless, id: i64, roots: Value) -> (bool, String) {
    let caps = json!({"roots": {}});
    let r = s.call(json!(id), "roots", json!({}), caps.clone()).await;
    let first = r
        .response(&json!(id))
        .unwrap_or_else(|| panic!("{}", r.raw))
        .clone();
    if first["result"]["resultType"] != "input_required" {
        return (false, text_of(&first));
    }
    let requests = first["result"]["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let (key, req) = requests.iter().next().unwrap();
    assert_eq!(req["method"], "roots/list", "{req}");
    let state = first["result"]["requestState"].clone();
    let r = s
        .request(
            json!(id),
            "tools/call",
            json!({"name": "roots", "arguments": {}, "inputResponses": {key: {"roots": roots}},
                   "requestState": state}),
            caps,
        )
        .await;
    let done = r
        .response(&json!(id))
        .unwrap_or_else(|| panic!("{}", r.raw))
        .clone();
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    (true, text_of(&done))
}

async fn anonymous_callers_never_share_roots(transport: Transport) {
    // `era = "session"`: a backend of the session era only, which caches the roots
    // it was told per connection (as @modelcontextprotocol/server-everything does).
    let s = dual(transport, |b| b.era("session"), |g| g);
    let (a, b) = (Stateless::new(&s.g), Stateless::new(&s.g));
    let (asked, text) = stateless_roots(&a, 1, json!([{"uri": "file:///a"}])).await;
    assert!(asked, "the first caller is asked for its roots");
    assert_eq!(text, r#"[{"uri":"file:///a"}]"#);
    // Another caller, indistinguishable (no authentication): asked for its own
    // roots, never shown the first caller's.
    let (asked, text) = stateless_roots(&b, 2, json!([{"uri": "file:///b"}])).await;
    assert!(asked, "the second caller was not asked: got {text}");
    assert_eq!(text, r#"[{"uri":"file:///b"}]"#);
    // Not even the first caller inherits its own earlier answer: every request is
    // on its own, as the stateless era promises.
    let (asked, text) = stateless_roots(&a, 3, json!([{"uri": "file:///a2"}])).await;
    assert!(asked, "got {text}");
    assert_eq!(text, r#"[{"uri":"file:///a2"}]"#);
}

#[tokio::test]
async fn anonymous_stateless_callers_never_share_a_stdio_backends_roots() {
    anonymous_callers_never_share_roots(Transport::Stdio).await;
}

#[tokio::test]
async fn anonymous_stateless_callers_never_share_an_http_backends_roots() {
    anonymous_callers_never_share_roots(Transport::Http).await;
}

#[tokio::test]
async fn an_authenticated_principal_keeps_its_own_connection_and_nobody_elses() {
    let s = dual(
        Transport::Stdio,
        |b| b.era("session"),
        |g| g.api_key("alice", "alice-key").api_key("bob", "bob-key"),
    );
    let alice = Stateless::with_key(&s.g, "alice-key");
    let bob = Stateless::with_key(&s.g, "bob-key");
    let (asked, text) = stateless_roots(&alice, 1, json!([{"uri": "file:///alice"}])).await;
    assert!(asked);
    assert_eq!(text, r#"[{"uri":"file:///alice"}]"#);
    let (asked, text) = stateless_roots(&bob, 2, json!([{"uri": "file:///bob"}])).await;
    assert!(asked, "bob was shown: {text}");
    assert_eq!(text, r#"[{"uri":"file:///bob"}]"#);
    // A principal's own requests share its connection (and what it told it).
    let (asked, text) = stateless_roots(&alice, 3, json!([{"uri": "file:///other"}])).await;
    assert!(!asked);
    assert_eq!(text, r#"[{"uri":"file:///alice"}]"#);
}

#[tokio::test]
async fn shared_mode_serves_each_era_on_a_connection_of_that_era() {
    let s = dual(Transport::Stdio, |b| b.mode("shared"), |g| g);
    let mut c1 = s.g.client();
    c1.initialize().await;
    let sl = Stateless::new(&s.g);
    let mut c2 = s.g.client();
    c2.initialize().await;
    assert_eq!(whoami_session(&c1, 1).await["era"], "session");
    assert_eq!(whoami_stateless(&sl, 2).await["era"], "stateless");
    let who = whoami_session(&c2, 3).await;
    assert_eq!(who["era"], "session", "{who}");
    // A shared connection is Gantry's, not one client's.
    assert_eq!(who["clientInfo"]["name"], "gantry", "{who}");
    // One session-era process for both session clients (and one for stateless).
    let inits = recorded(&s.record)
        .iter()
        .filter(|m| m["method"] == "initialize")
        .count();
    assert_eq!(inits, 1, "{:?}", recorded(&s.record));
}

#[tokio::test]
async fn a_warm_connection_is_of_the_era_its_taker_speaks() {
    let s = dual(
        Transport::Stdio,
        |b| b.set("pool = { min_idle = 1 }"),
        |g| g,
    );
    // The pool is warm: its connection initialized (as Gantry) before any client.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !recorded(&s.record)
        .iter()
        .any(|m| m["method"] == "notifications/initialized")
    {
        assert!(std::time::Instant::now() < deadline, "no warm connection");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut c = s.g.client();
    c.initialize().await;
    let who = whoami_session(&c, 1).await;
    assert_eq!(who["era"], "session", "{who}");
    assert_eq!(
        who["clientInfo"]["name"], "gantry",
        "adopted the warm one: {who}"
    );
    let sl = Stateless::new(&s.g);
    assert_eq!(whoami_stateless(&sl, 2).await["era"], "stateless");
}

#[tokio::test]
async fn session_clients_never_see_the_stateless_era_fields_of_a_stateless_backend() {
    let dir = Scratch::new("transparent");
    let record = dir.file("received.jsonl");
    let g = gantry()
        .backend(python_fixture("modern", "stateless_server.py").record(&record))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let r = c.call_tool(json!(1), "echo", json!({"message": "x"})).await;
    assert_eq!(text_of(&r), "x", "{r}");
    let list = c.request(json!(2), "tools/list", json!({})).await;
    let list = list.response(&json!(2)).unwrap().clone();
    assert!(list["result"]["tools"].is_array(), "{list}");
    for result in [&r["result"], &list["result"]] {
        for field in ["resultType", "ttlMs", "cacheScope", "_meta"] {
            assert!(result.get(field).is_none(), "{field} in {result}");
        }
    }
    // (The fixture puts them on every result: Gantry removed them.)
    assert!(recorded(&record)
        .iter()
        .any(|m| m["method"] == "tools/call"));
}

#[tokio::test]
async fn a_stateless_caller_gets_every_progress_notification_sent_just_before_the_result() {
    // The fixture answers right after its last progress notification: the two
    // reach Gantry back to back, and the notification must not lose to the result.
    let s = dual(Transport::Stdio, |b| b, |g| g);
    let sl = Stateless::new(&s.g);
    for i in 0..40 {
        let r = sl
            .request(
                json!(i),
                "tools/call",
                json!({"name": "progress", "arguments": {"steps": 3},
                       "_meta": {"progressToken": format!("t{i}")}}),
                json!({}),
            )
            .await;
        let progress: Vec<&Value> = r
            .messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 3, "call {i}: {}", r.raw);
        assert_eq!(progress[2]["params"]["progress"], 3, "{}", r.raw);
        assert!(progress
            .iter()
            .all(|m| m["params"]["progressToken"] == format!("t{i}").as_str()));
        assert_eq!(
            text_of(r.response(&json!(i)).unwrap()),
            "done 3",
            "{}",
            r.raw
        );
    }
}

/// `supportedVersions` of Gantry's `server/discover`.
async fn discovered_versions(g: &Gantry) -> Vec<String> {
    let r = Stateless::new(g)
        .request(json!(1), "server/discover", json!({}), json!({}))
        .await;
    let resp = r.response(&json!(1)).unwrap_or_else(|| panic!("{}", r.raw));
    resp["result"]["supportedVersions"]
        .as_array()
        .unwrap_or_else(|| panic!("{resp}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_stateless_era_is_offered_only_when_every_backend_speaks_it() {
    // A client that can speak either era (the SDKs' `auto`) picks from this list:
    // offered the stateless era in front of a session-era-only backend, it would
    // get translation where a direct connection gives it the session era.
    let both = dual(Transport::Stdio, |b| b, |g| g);
    assert_eq!(
        discovered_versions(&both.g).await.first().unwrap(),
        "2026-07-28"
    );
    let old = dual(Transport::Stdio, |b| b.era("session"), |g| g);
    let v = discovered_versions(&old.g).await;
    assert!(!v.iter().any(|v| v == "2026-07-28"), "{v:?}");
    assert_eq!(v.first().unwrap(), "2025-11-25", "{v:?}");
    // A stateless request is still served (translated) for a client that sends one.
    let who = whoami_stateless(&Stateless::new(&old.g), 2).await;
    assert_eq!(who["era"], "session", "{who}");
    // Several backends: all must speak it.
    let mixed = gantry()
        .backend(python_fixture("a", "dual_era_server.py"))
        .backend(python_fixture("b", "dual_era_server.py").era("session"))
        .start();
    let v = discovered_versions(&mixed).await;
    assert!(!v.iter().any(|v| v == "2026-07-28"), "{v:?}");
}

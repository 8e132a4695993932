//! The bridge between eras on one connection: params shaped for the backend's era,
//! results shaped for the caller's, and a stateless-era backend's `input_required`
//! rounds answered through a session-era client's server→client requests.

use super::core::{parse_object, Core, OutParams};
use super::error::UpstreamError;
use super::handshake::own_meta;
use super::listen::LISTEN_ACK_WAIT;
use crate::call::CallCtx;
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, empty_object, raw_object, to_raw, RequestId, Response, RpcError};
use crate::mcp::results::{Fields, InputRound};
use crate::mcp::{Era, META_PREFIX, STATELESS_VERSION};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Rounds of `input_required` Gantry answers for a session-era client, per call.
const MAX_INPUT_ROUNDS: usize = 16;

/// Params for a session-era backend: nothing of the stateless era (its `_meta` keys,
/// `inputResponses`, `requestState`). Params without them pass through untouched;
/// others are written again around their own text in one pass over their members
/// (only the top level and `_meta` are read, a tool's arguments are copied as
/// written; a key named twice is written twice, and its reader keeps the last).
pub(super) fn for_session_era(params: Option<Raw>) -> Option<Raw> {
    use crate::jsonrpc::members::{key_is, key_starts_with, ObjectWriter};
    let raw = params?;
    let era_key = |k: &str| key_is(k, "inputResponses") || key_is(k, "requestState");
    let lacks = match raw.any_key(era_key, |k| key_starts_with(k, META_PREFIX)) {
        Some(found) => !found,
        None => {
            let needles = [
                crate::needle!(META_PREFIX),
                crate::needle!("inputResponses"),
                crate::needle!("requestState"),
            ];
            crate::jsonrpc::surely_lacks(raw.get(), &needles)
        }
    };
    if lacks || !raw.get().starts_with('{') {
        return Some(raw);
    }
    let mut out = String::with_capacity(raw.get().len());
    let mut dropped = false;
    let o = ObjectWriter::begin(&mut out);
    for (k, v) in raw.members() {
        if era_key(k) {
            dropped = true;
        } else if key_is(k, "_meta") && v.starts_with('{') {
            // Written, then taken back if none of its keys is the client's own.
            let mark = out.len();
            o.written_member(&mut out, k, "");
            let m = ObjectWriter::begin(&mut out);
            for (mk, mv) in raw.members_of(v) {
                if key_starts_with(mk, META_PREFIX) {
                    dropped = true;
                } else {
                    m.written_member(&mut out, mk, mv);
                }
            }
            if m.is_empty(&out) {
                out.truncate(mark);
            } else {
                m.end(&mut out);
            }
        } else {
            o.written_member(&mut out, k, v);
        }
    }
    o.end(&mut out);
    if !dropped {
        return Some(raw);
    }
    Some(Raw::written(out))
}

/// Params for a stateless-era backend: `_meta` says which version, and what the
/// client can do and wants to hear. Written around the params' own text in one pass
/// over their members: only the top level and `_meta` are read, the rest (a tool's
/// arguments) is copied as written, and a key named twice is written twice (its
/// reader keeps the last). Params that are not an object count as none. Also
/// returns what names the request's subject (`Mcp-Name`: a tool's name, a
/// resource's URI), if any.
///
/// The text is valid JSON by construction ([`super::core::OutParams::Written`]):
/// every key and value is copied from the checked params or the client's checked
/// capabilities, or written by serde or `push_json_string`.
pub(super) fn for_stateless_era(
    method: &str,
    params: Option<&Raw>,
    client: &crate::call::ClientView,
) -> StatelessParams {
    use crate::jsonrpc::members::{key_is, string_value, ObjectWriter};
    let text = params.map_or("", Raw::get);
    let mut out = String::with_capacity(text.len() + 256);
    let o = ObjectWriter::begin(&mut out);
    let name_field = crate::mcp::header::name_field(method);
    let mut named = None;
    let mut has_meta = false;
    let mut progress = false;
    if let Some(raw) = params.filter(|p| p.get().starts_with('{')) {
        for (k, v) in raw.members() {
            if key_is(k, "_meta") {
                has_meta = true;
                if v.starts_with('{') {
                    o.written_member(&mut out, k, "");
                    progress |= write_stateless_meta(&mut out, raw.members_of(v), client);
                } else {
                    // Not an object: left as it was written.
                    o.written_member(&mut out, k, v);
                }
            } else {
                if name_field.is_some_and(|f| key_is(k, f)) {
                    named = string_value(v).map(std::borrow::Cow::into_owned);
                }
                o.written_member(&mut out, k, v);
            }
        }
    }
    if !has_meta {
        o.key(&mut out, "_meta");
        write_stateless_meta(&mut out, std::iter::empty(), client);
    }
    o.end(&mut out);
    StatelessParams {
        text: out,
        named,
        progress,
    }
}

/// What [`for_stateless_era`] wrote: the params, what names their subject, and
/// whether their `_meta` holds a progress token (copied from the client's).
pub(super) struct StatelessParams {
    pub(super) text: String,
    pub(super) named: Option<String>,
    pub(super) progress: bool,
}

/// The `_meta` object of a request to a stateless-era backend: the params' own keys
/// (a stateless-era client's `io.modelcontextprotocol/clientInfo` among them), then
/// those Gantry states itself from the request's view of the client, which replace
/// the params' copies. Says whether a progress token was among the keys copied.
fn write_stateless_meta<'a>(
    out: &mut String,
    meta: impl Iterator<Item = (&'a str, &'a str)>,
    client: &crate::call::ClientView,
) -> bool {
    use crate::jsonrpc::members::key_is;
    use crate::mcp::{META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION};
    let restated = [
        META_PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES,
        META_LOG_LEVEL,
    ];
    let o = crate::jsonrpc::members::ObjectWriter::begin(out);
    let mut progress = false;
    for (k, v) in meta {
        if !restated.iter().any(|r| key_is(k, r)) {
            progress |= key_is(k, "progressToken");
            o.written_member(out, k, v);
        }
    }
    o.key(out, META_PROTOCOL_VERSION);
    crate::jsonrpc::push_json_string(out, STATELESS_VERSION);
    o.key(out, META_CLIENT_CAPABILITIES);
    out.push_str(client.capabilities.as_ref().map_or("{}", |c| c.as_str()));
    if let Some(l) = client.log_level {
        o.key(out, META_LOG_LEVEL);
        crate::jsonrpc::push_json_string(out, l);
    }
    o.end(out);
    progress
}

/// A stateless-era result as a session-era client expects it: without what only
/// the stateless era has (`resultType`, `ttlMs`, `cacheScope`, the era's `_meta`
/// keys such as `serverInfo`), which a direct connection would not have shown it.
pub(super) fn for_session_client(mut resp: Response) -> Response {
    let Ok(result) = &resp.outcome else {
        return resp;
    };
    if !crate::mcp::may_hold_stateless_fields(result.get()) {
        return resp;
    }
    if let Some(mut r) = parse_object(Some(result)) {
        if crate::mcp::strip_stateless_result(&mut r) {
            resp.outcome = Ok(to_raw(&r));
        }
    }
    resp
}

/// A call to a stateless-era backend. A stateless-era client gets its answer as
/// is; for a session-era client, each round of `input_required` becomes
/// server→client requests to the client, whose answers go back to the backend
/// in a retry (`inputResponses`, the backend's `requestState` echoed).
pub(super) async fn call_stateless(
    core: &Arc<Core>,
    gen: u64,
    method: &str,
    params: Option<Raw>,
    ctx: &CallCtx,
    deadline: tokio::time::Instant,
    trace_headers: super::core::ExtraHeaders,
) -> Result<Response, UpstreamError> {
    let done = || Ok(Response::ok(RequestId::from_u64(0), empty_object()));
    match method {
        // Gone in the stateless era: the level travels with each request, and
        // liveness is the connection's business.
        "ping" | "logging/setLevel" => return done(),
        "resources/subscribe" | "resources/unsubscribe" => {
            let Some(uri) = crate::jsonrpc::string_field(params.as_ref(), "uri") else {
                let e = RpcError::new(code::INVALID_PARAMS, "params.uri (a string) is required");
                return Ok(Response::err(None, &e));
            };
            let changed = {
                let mut uris = core.listen_uris.lock();
                let changed = if method == "resources/subscribe" {
                    uris.insert(uri)
                } else {
                    uris.remove(&uri)
                };
                changed.then(|| core.listen_version.fetch_add(1, Ordering::AcqRel) + 1)
            };
            if let Some(version) = changed {
                core.listen_changed.notify_one();
                if method == "resources/subscribe" {
                    // Answered once the backend's listen stream carries the URI, so
                    // an update the client causes right after is not missed.
                    let mut acked = core.listen_acked.subscribe();
                    let wait = acked.wait_for(|a| *a >= version);
                    if tokio::time::timeout(LISTEN_ACK_WAIT, wait).await.is_err() {
                        tracing::debug!(backend = %core.name, "the backend did not acknowledge the subscription in time");
                    }
                }
            }
            return done();
        }
        _ => {}
    }
    let StatelessParams {
        text: base,
        named,
        progress,
    } = for_stateless_era(method, params.as_ref(), &ctx.client);
    let mut headers = match &named {
        Some(tool) if method == "tools/call" && !core.direct => {
            param_headers(core, gen, tool, &base).await
        }
        _ => Vec::new(),
    };
    // The headers that mirror the body, from what was just read of it (HTTP). A
    // method or name that is not a valid header value is sent without the header
    // (the backend answers with its own error).
    use http::HeaderValue;
    if let Ok(v) = HeaderValue::from_str(method) {
        headers.push((crate::mcp::header::METHOD, v));
    }
    if let Some(v) = named
        .as_deref()
        .and_then(|n| HeaderValue::from_str(&crate::mcp::header::encode(n)).ok())
    {
        headers.push((crate::mcp::header::NAME, v));
    }
    headers.extend(trace_headers);
    let mut outgoing = Some(OutParams::Written {
        text: base,
        progress,
    });
    for _ in 0..MAX_INPUT_ROUNDS {
        // A stateless-era client is answered after the first round: its headers go
        // without a copy.
        let round_headers = if ctx.client.era == Era::Stateless {
            std::mem::take(&mut headers)
        } else {
            headers.clone()
        };
        let resp = core
            .request_with(
                gen,
                method,
                outgoing.take().unwrap_or(OutParams::Checked(None)),
                Some(ctx.sink.clone()),
                &ctx.cancel,
                deadline.saturating_duration_since(tokio::time::Instant::now()),
                round_headers,
            )
            .await?;
        if ctx.client.era == Era::Stateless {
            return Ok(resp);
        }
        let Some(round) = resp.outcome.as_ref().ok().and_then(InputRound::of) else {
            return Ok(for_session_client(resp));
        };
        let mut answers = serde_json::Map::new();
        for (key, method, request_params) in round.requests {
            match ctx.sink.ask(method.clone(), request_params).await {
                Ok(answer) => {
                    let v = serde_json::from_str(answer.get()).unwrap_or(serde_json::Value::Null);
                    answers.insert(key, v);
                }
                Err(e) => {
                    let why: serde_json::Value =
                        serde_json::from_str(e.get()).unwrap_or(serde_json::Value::Null);
                    let err = RpcError::new(
                        code::INVALID_REQUEST,
                        format!(
                            "the backend `{}` needs input the client could not give ({method})",
                            core.name
                        ),
                    )
                    .with_data(serde_json::json!({ "reason": why }));
                    return Ok(Response::err(resp.id, &err));
                }
            }
        }
        // Rare (a backend asking for input): the params are written again and
        // their top level parsed here.
        let base = for_stateless_era(method, params.as_ref(), &ctx.client).text;
        let mut next: Fields = serde_json::from_str(&base).unwrap_or_default();
        next.insert(
            "inputResponses".into(),
            to_raw(&serde_json::Value::Object(answers)),
        );
        if let Some(state) = round.state {
            next.insert("requestState".into(), to_raw(&state));
        }
        outgoing = Some(OutParams::Checked(Some(raw_object(&next))));
    }
    Err(UpstreamError::Protocol {
        backend: core.name.clone(),
        reason: format!("still asking for input after {MAX_INPUT_ROUNDS} rounds"),
    })
}

/// The `Mcp-Param-*` headers of a `tools/call` to a stateless-era HTTP backend,
/// from the tool's `x-mcp-header` declarations (listed from the backend once,
/// and again after it announces a change).
async fn param_headers(
    core: &Arc<Core>,
    gen: u64,
    name: &str,
    params: &str,
) -> super::core::ExtraHeaders {
    let declared = core
        .tool_headers
        .get_or_list(|| list_tool_headers(core, gen))
        .await;
    let Some(mirrored) = declared.get(name).filter(|m| !m.is_empty()) else {
        return Vec::new();
    };
    // Parsed only for a tool that declares headers.
    let arguments = crate::jsonrpc::members::member(params, "arguments")
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or(serde_json::Value::Null);
    crate::mcp::param::headers_for(mirrored, &arguments)
}

async fn list_tool_headers(core: &Arc<Core>, gen: u64) -> (crate::mcp::param::ToolHeaders, bool) {
    let never = CancellationToken::new();
    crate::mcp::param::list_all(|cursor| {
        let never = &never;
        async move {
            let mut params = serde_json::json!({ "_meta": own_meta(core) });
            if let (Some(c), Some(p)) = (cursor, params.as_object_mut()) {
                p.insert("cursor".into(), c);
            }
            let resp = core
                .request(
                    gen,
                    "tools/list",
                    Some(to_raw(&params)),
                    None,
                    never,
                    core.request_timeout,
                )
                .await;
            let result = resp.ok()?.outcome.ok()?;
            serde_json::from_str(result.get()).ok()
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::{for_session_era, for_stateless_era};
    use crate::jsonrpc::Raw;

    fn raw(s: &str) -> Option<Raw> {
        Raw::from_string(s.to_owned()).ok()
    }

    /// Params as a request's check keeps them, with their members and `_meta`'s.
    fn indexed(s: &str) -> Option<Raw> {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{s}}}"#);
        match crate::jsonrpc::Message::parse(text.as_bytes()) {
            Ok(crate::jsonrpc::Message::Request(r)) => r.params,
            _ => None,
        }
    }

    #[test]
    fn session_era_params_lose_only_what_the_stateless_era_added() {
        for raw in [raw, indexed] {
            session_era_params_of(raw);
        }
    }

    fn session_era_params_of(raw: fn(&str) -> Option<Raw>) {
        // Arguments keep their exact bytes (spacing, key order, number forms).
        let args = r#"{ "b": 1.50, "a" : [1,2] }"#;
        let params = format!(
            r#"{{"name":"echo","arguments":{args},"requestState":"s","inputResponses":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":7}}}}"#
        );
        let out = for_session_era(raw(&params)).map(|r| r.get().to_owned());
        assert_eq!(
            out.as_deref(),
            Some(
                format!(r#"{{"name":"echo","arguments":{args},"_meta":{{"progressToken":7}}}}"#)
                    .as_str()
            )
        );
        // `_meta` with nothing left goes entirely.
        let params = r#"{"name":"echo","_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}"#;
        let out = for_session_era(raw(params)).map(|r| r.get().to_owned());
        assert_eq!(out.as_deref(), Some(r#"{"name":"echo"}"#));
        // Params without any of it pass untouched, also when the arguments name it.
        for params in [
            r#"{"name": "echo", "arguments": {"x": 1}}"#,
            r#"{"name":"echo","arguments":{"requestState":"io.modelcontextprotocol/x","_meta":{"io.modelcontextprotocol/y":1}}}"#,
        ] {
            let out = for_session_era(raw(params)).map(|r| r.get().to_owned());
            assert_eq!(out.as_deref(), Some(params));
        }
        // A key written with escapes is still that key.
        let params = r#"{"name":"echo","request\u0053tate":"s"}"#;
        let out = for_session_era(raw(params)).map(|r| r.get().to_owned());
        assert_eq!(out.as_deref(), Some(r#"{"name":"echo"}"#));
    }

    #[test]
    fn stateless_era_params_carry_the_clients_meta_and_the_arguments_as_written() {
        let args = r#"{ "b": 1.50, "a" : [1,2] }"#;
        // A stateless-era client's params: its own version and capabilities are
        // restated from the request's view of the client, its other keys kept.
        let params = format!(
            r#"{{"name":"echo","arguments":{args},"_meta":{{"progressToken":7,"io.modelcontextprotocol/clientInfo":{{"name":"c"}},"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{{}}}}}}"#
        );
        let client = crate::call::ClientView {
            capabilities: Some(crate::call::Capabilities::of_value(
                &serde_json::json!({"roots": {}}),
            )),
            log_level: Some("info"),
            ..Default::default()
        };
        let super::StatelessParams {
            text: out,
            named,
            progress,
        } = for_stateless_era("tools/call", raw(&params).as_ref(), &client);
        assert!(progress, "the client's progress token was copied");
        let out: crate::mcp::results::Fields = serde_json::from_str(&out).unwrap();
        assert_eq!(out.get("arguments").map(|a| a.get()), Some(args));
        assert_eq!(named.as_deref(), Some("echo"));
        let meta: serde_json::Value =
            serde_json::from_str(out.get("_meta").map_or("null", |m| m.get())).unwrap_or_default();
        assert_eq!(
            meta,
            serde_json::json!({
                "progressToken": 7,
                "io.modelcontextprotocol/clientInfo": {"name": "c"},
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
                "io.modelcontextprotocol/logLevel": "info",
            })
        );
        // No params at all: just the `_meta` Gantry states.
        let out = for_stateless_era("ping", None, &crate::call::ClientView::default()).text;
        let out: crate::mcp::results::Fields = serde_json::from_str(&out).unwrap();
        let keys: Vec<&str> = out.keys().map(String::as_str).collect();
        assert_eq!(keys, ["_meta"]);
    }
}

#[cfg(test)]
mod props {
    //! What Gantry writes for a stateless-era backend without checking it again is
    //! valid JSON, and says what the client's params and view say, for any params.
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::for_stateless_era;
    use crate::mcp::{META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION};
    use crate::testkit::config;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    /// Keys with what quoting must get right, and the protocol's own.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            2 => "[a-c\"\\\\\u{1}\u{7f}é]{1,3}",
            1 => prop::sample::select(vec![
                META_PROTOCOL_VERSION.to_owned(),
                META_CLIENT_CAPABILITIES.to_owned(),
                META_LOG_LEVEL.to_owned(),
                "io.modelcontextprotocol/clientInfo".to_owned(),
                "_meta".to_owned(),
                "name".to_owned(),
            ]),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        crate::testkit::json_tree(crate::testkit::json_scalar(), key().boxed(), (3, 16, 4))
    }

    /// An object of members (key, value text) written with optional `\u` escapes
    /// in its keys and spacing.
    fn written(m: &[(String, String)], escape: bool, ws: &str) -> String {
        let mut s = format!("{{{ws}");
        for (i, (k, v)) in m.iter().enumerate() {
            if i > 0 {
                s.push_str(&format!("{ws},{ws}"));
            }
            let k = if escape {
                let mut e = String::from("\"");
                for u in k.encode_utf16() {
                    e.push_str(&format!("\\u{u:04x}"));
                }
                e + "\""
            } else {
                serde_json::to_string(k).unwrap()
            };
            s.push_str(&format!("{k}{ws}:{ws}{v}"));
        }
        s + ws + "}"
    }

    fn texts(m: Vec<(String, Value)>) -> Vec<(String, String)> {
        m.into_iter().map(|(k, v)| (k, v.to_string())).collect()
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn params_for_a_stateless_era_backend_are_valid_and_complete(
            top in prop::collection::vec((key(), value()), 0..5),
            meta in prop::option::of(prop::collection::vec((key(), value()), 0..5)),
            escape in any::<bool>(),
            ws in prop::sample::select(vec!["", " ", "\n"]),
            // Capabilities are an object, as `initialize` and the era's `_meta` check.
            caps in prop::option::of(
                prop::collection::btree_map("[a-z\"]{1,6}", value(), 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ),
            level in prop::option::of(prop::sample::select(vec!["debug", "error"])),
        ) {
            let mut top = texts(top);
            if let Some(meta) = meta {
                top.push(("_meta".into(), written(&texts(meta), escape, ws)));
            }
            let params = written(&top, escape, ws);
            let raw = crate::jsonrpc::Raw::from_string(params.clone()).unwrap();
            let client = crate::call::ClientView {
                capabilities: caps.as_ref().map(crate::call::Capabilities::of_value),
                log_level: level,
                ..Default::default()
            };
            let out = for_stateless_era("tools/call", Some(&raw), &client).text;
            let out: Map<String, Value> = serde_json::from_str(&out)
                .map_err(|e| TestCaseError::fail(format!("{e}: {out}")))?;
            let sent: Map<String, Value> = serde_json::from_str(&params).unwrap();
            for (k, v) in &sent {
                if k != "_meta" {
                    prop_assert_eq!(out.get(k), Some(v));
                }
            }
            prop_assert_eq!(out.len(), sent.len() + usize::from(!sent.contains_key("_meta")));
            // A `_meta` that is no object is left as it was.
            if let Some(m) = sent.get("_meta").filter(|m| !m.is_object()) {
                prop_assert_eq!(&out["_meta"], m);
                return Ok(());
            }
            let m = out["_meta"].as_object().unwrap();
            prop_assert_eq!(&m[META_PROTOCOL_VERSION], "2026-07-28");
            // As parsed from text, as the output is (a float's last digit may differ
            // from the generated value's after a round trip).
            let reparsed = |v: &Value| serde_json::from_str::<Value>(&v.to_string()).unwrap();
            let caps = caps.map_or_else(|| Value::Object(Map::new()), |c| reparsed(&c));
            prop_assert_eq!(&m[META_CLIENT_CAPABILITIES], &caps);
            let level = level.map(Value::from);
            prop_assert_eq!(m.get(META_LOG_LEVEL), level.as_ref());
            // The params' other `_meta` keys are kept (the last of a key named twice,
            // as a reader takes it).
            let restated = [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_LOG_LEVEL];
            if let Some(Value::Object(sent_meta)) = sent.get("_meta") {
                for (k, v) in sent_meta.iter().filter(|(k, _)| !restated.contains(&k.as_str())) {
                    prop_assert_eq!(m.get(k), Some(v));
                }
                let kept = sent_meta.keys().filter(|k| !restated.contains(&k.as_str())).count();
                prop_assert_eq!(m.len(), kept + 2 + usize::from(level.is_some()));
            }
        }
    }
}

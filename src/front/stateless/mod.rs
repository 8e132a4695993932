//! The stateless era (2026-07-28) on the MCP endpoint, beside the session era.
//!
//! A POST without `Mcp-Session-Id` whose `MCP-Protocol-Version` header is not a
//! session-era version, or whose `params._meta` carries `io.modelcontextprotocol/…`
//! keys, or whose method exists only in this era, is served here. Checks, in the
//! order the conformance suite pins down: version header present (-32020) →
//! required `_meta` present and well-typed (-32602) → header equals `_meta` version
//! (-32020) → version supported (-32022, with the supported list) → `Mcp-Method` /
//! `Mcp-Name` agree with the body (-32020) → method exists in this era (404, -32601).
//! All of these are HTTP 400 except the last.
//!
//! Every caller (principal) has one internal route to the backends (`route`), opened
//! on its first stateless request the way a session-era client's `initialize` would
//! be, and used by all its stateless requests (README "Each caller keeps its era").
//! Where a backend lacks the stateless era, Gantry translates at this edge:
//! - results get `resultType`, cacheable ones `ttlMs` / `cacheScope`, every one
//!   Gantry's `serverInfo` in `_meta`; modern `_meta` keys never reach a backend;
//! - a backend's progress reaches the request's own response stream (SSE), its log
//!   messages only when the request asked for them with `_meta` `logLevel`;
//! - a backend's server→client request becomes an `input_required` result and the
//!   call waits, parked (`mrtr`), for the client's retry (`call`); one the
//!   client's capabilities do not allow ends the call with -32021;
//! - the client closing its response stream cancels the call upstream;
//! - `subscriptions/listen` streams are fed by the backends' changes (`listen`).
//!
//! The request is checked in `validate`; this file dispatches it.

mod call;
mod listen;
mod mrtr;
mod route;
mod up;
mod validate;

pub(crate) use self::call::Running;
pub(crate) use self::mrtr::Mrtr;
pub(crate) use self::route::Internal;

use super::http::Accepts;
use super::{App, FrontError};
use crate::auth::Principal;
use crate::jsonrpc::members::{key_is, string_value, Object, ObjectWriter};
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, to_raw, Message, Request, RequestId, Response, RpcError};
use crate::mcp::Era;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::sync::Arc;

use crate::mcp::{all_versions, META_PREFIX, META_SERVER_INFO, SESSION_VERSIONS};

use crate::mcp::methods::REMOVED_IN_STATELESS as REMOVED;

/// Methods that may answer `input_required`, and the param naming what they act on
/// (the same field `Mcp-Name` mirrors).
fn input_capable(method: &str) -> Option<&'static str> {
    crate::mcp::header::name_field(method)
}

/// Whether a session-less message belongs to the stateless era.
/// `version`: the first `MCP-Protocol-Version` header, if any.
pub(crate) fn is_stateless(version: Option<&HeaderValue>, m: &Message) -> bool {
    let header_modern = version
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| !SESSION_VERSIONS.contains(&v.trim_ascii()));
    if header_modern {
        return true;
    }
    let (method, params) = match m {
        Message::Request(r) => (r.method.as_str(), r.params.as_ref()),
        Message::Notification(n) => (n.method.as_str(), n.params.as_ref()),
        Message::Response(_) => return false,
    };
    if matches!(method, "server/discover" | "subscriptions/listen") {
        return true;
    }
    params
        .and_then(|p| Object::of_raw_with(p, "_meta"))
        .and_then(|(_, meta)| meta)
        .is_some_and(|m| m.iter().any(|(k, _)| k.starts_with(META_PREFIX)))
}

/// A request's params as written: lookups go over the members the message's check
/// found (keys compared as written, nothing decoded or parsed, no map built), so a
/// tool's `arguments`, the bulk of a large call, are relayed as the client wrote
/// them. A repeated key counts by its last value, as in the backends' parsers.
pub(super) struct Params<'a> {
    /// The params as the client sent them (indexed by the message's check).
    pub(super) raw: Option<&'a Raw>,
    /// The text of `_meta`, if it is an object.
    meta: Option<&'a str>,
    /// The text of `name` (read several times per call), found in the same pass.
    name: Option<&'a str>,
    /// `name`'s string value, decoded once.
    name_value: Option<Cow<'a, str>>,
}

impl<'a> Params<'a> {
    /// `None` when the params are not an object.
    pub(super) fn read(raw: Option<&'a Raw>) -> Option<Self> {
        let Some(raw) = raw else {
            return Some(Params {
                raw: None,
                meta: None,
                name: None,
                name_value: None,
            });
        };
        if !raw.get().starts_with('{') {
            return None;
        }
        let (mut meta, mut name) = (None, None);
        for (k, v) in raw.members() {
            if key_is(k, "_meta") {
                meta = Some(v);
            } else if key_is(k, "name") {
                name = Some(v);
            }
        }
        Some(Params {
            raw: Some(raw),
            meta: meta.filter(|m| m.starts_with('{')),
            name,
            name_value: name.and_then(string_value),
        })
    }

    /// The text of a top-level field.
    pub(super) fn get(&self, field: &str) -> Option<&'a str> {
        match field {
            "name" => self.name,
            _ => self.raw?.member(field),
        }
    }

    /// The string value of a top-level field.
    pub(super) fn str(&self, field: &str) -> Option<Cow<'a, str>> {
        match field {
            "name" => self.name_value.clone(),
            _ => string_value(self.get(field)?),
        }
    }

    /// A top-level field parsed (for fields read on the rarer paths).
    pub(super) fn value(&self, field: &str) -> Option<Value> {
        serde_json::from_str(self.get(field)?).ok()
    }

    /// The members of `_meta` (keys as written), if it is an object.
    pub(super) fn meta_members(&self) -> Option<crate::jsonrpc::RawMembers<'a>> {
        Some(self.raw?.members_of(self.meta?))
    }
}

use crate::front::stateless::call::call;
use crate::front::stateless::listen::listen;
use crate::front::stateless::route::internal_route;
use crate::front::stateless::route::tool_headers;
use crate::front::stateless::validate::validate;
use crate::front::stateless::validate::Refusal;

pub(super) fn answer(status: StatusCode, id: Option<RequestId>, e: &RpcError) -> HttpResponse {
    json_body(status, Response::err(id, e).to_json())
}

pub(super) fn json_body(status: StatusCode, body: String) -> HttpResponse {
    super::http::json_response_with(status, body)
}

/// At most 80 characters of a client-supplied string, for error messages.
pub(super) fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Serves one stateless-era message.
pub(crate) async fn post(
    app: Arc<App>,
    principal: Principal,
    headers: &HeaderMap,
    heads: &super::http::Heads<'_>,
    m: Message,
    accepts: Accepts,
) -> HttpResponse {
    let req = match m {
        // The era defines no client notifications over HTTP; they are accepted and
        // ignored. Responses have nothing to answer (there are no server requests).
        Message::Notification(_) => return StatusCode::ACCEPTED.into_response(),
        Message::Response(_) => {
            return FrontError::Invalid(
                "the 2026-07-28 protocol has no server→client requests to answer".into(),
            )
            .into_response()
        }
        Message::Request(r) => r,
    };
    let Request { id, method, params } = req;
    let Some(params) = Params::read(params.as_ref()) else {
        return answer(
            StatusCode::BAD_REQUEST,
            Some(id),
            &RpcError::new(code::INVALID_PARAMS, "params must be an object"),
        );
    };
    let declared = match validate(heads, &method, &params) {
        Ok(d) => d,
        Err(Refusal(status, e)) => {
            tracing::debug!(method = %clip(&method), code = e.code, "stateless request refused");
            return answer(status, Some(id), &e);
        }
    };
    if REMOVED.contains(&method.as_str()) {
        return answer(
            StatusCode::NOT_FOUND,
            Some(id),
            &RpcError::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "Method not found: {} does not exist in protocol 2026-07-28",
                    method
                ),
            ),
        );
    }
    if app.is_stopping() {
        return FrontError::Unavailable("Gantry is shutting down").into_response();
    }
    let internal = match internal_route(&app, principal.as_str()).await {
        Ok(i) => i,
        Err(e) => return e,
    };
    if method == "tools/call" {
        let name = params.str("name").unwrap_or_default();
        // The declarations as listed, read in place (no count of their users taken).
        let checked = internal
            .tools
            .listed()
            .as_deref()
            .map(|declared| param_headers(declared, &name, headers, &params));
        let checked = match checked {
            Some(c) => c,
            None => {
                let declared = tool_headers(&app, &internal).await;
                param_headers(&declared, &name, headers, &params)
            }
        };
        if let Err(why) = checked {
            return answer(
                StatusCode::BAD_REQUEST,
                Some(id),
                &RpcError::new(code::HEADER_MISMATCH, format!("Header mismatch: {why}")),
            );
        }
    }
    match method.as_str() {
        "server/discover" => discover(&app, &internal, id),
        "subscriptions/listen" => {
            let notifications = params.value("notifications");
            listen(app, internal, id, notifications.as_ref()).await
        }
        _ => {
            call(
                app, principal, internal, id, method, &params, declared, accepts,
            )
            .await
        }
    }
}

/// Checks a tool call's `Mcp-Param-*` headers against the arguments they mirror, by
/// the tool's declarations.
fn param_headers(
    declared: &crate::mcp::param::ToolHeaders,
    name: &str,
    headers: &HeaderMap,
    params: &Params<'_>,
) -> Result<(), String> {
    let mirrored = declared.get(name).map_or(&[][..], Vec::as_slice);
    let sent_any = headers.keys().any(|k| k.as_str().starts_with("mcp-param-"));
    if mirrored.is_empty() && !sent_any {
        return Ok(());
    }
    let arguments = params.value("arguments").unwrap_or(Value::Null);
    crate::mcp::param::check(mirrored, &arguments, |h| {
        headers.get(h).map(HeaderValue::as_bytes)
    })
}

pub(super) fn server_info() -> Value {
    crate::mcp::gantry_implementation()
}

/// [`server_info`] serialized, once.
pub(super) fn server_info_raw() -> &'static Raw {
    static RAW: std::sync::OnceLock<Raw> = std::sync::OnceLock::new();
    RAW.get_or_init(|| to_raw(&server_info()))
}

/// The params of a retry to a stateless-era backend, written around the client's own
/// text (a tool's arguments are not parsed), with the backend's own `state`, unwrapped
/// from what the client brought back, as `requestState`.
pub(super) fn with_request_state(params: &Params<'_>, state: &str) -> Raw {
    // Each key once, at its first place with its last value (a rare path: the
    // params read into an `Object`).
    let top = params
        .raw
        .and_then(|raw| Object::of_raw_with(raw, "_meta"))
        .map(|(top, _)| top)
        .unwrap_or_default();
    let mut out = String::with_capacity(
        top.iter()
            .map(|(k, v)| k.len() + v.len() + 4)
            .sum::<usize>()
            + state.len()
            + 2,
    );
    let o = ObjectWriter::begin(&mut out);
    for (k, v) in top.iter() {
        match k {
            "requestState" => o.member(&mut out, k, &crate::jsonrpc::json_string(state)),
            _ => o.member(&mut out, k, v),
        }
    }
    o.end(&mut out);
    Raw::written(out)
}

/// `cacheScope` of Gantry's answers: `private` as soon as callers are told apart
/// (what a backend returns may depend on who asks).
pub(super) fn cache_scope(app: &App) -> &'static str {
    if !app.auth().is_required() {
        "public"
    } else {
        "private"
    }
}

pub(super) fn discover(app: &App, internal: &Internal, id: RequestId) -> HttpResponse {
    let mut caps = internal
        .init
        .get("capabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(c) = caps.as_object_mut() {
        c.remove("tasks");
    }
    // The stateless era is offered only when every backend speaks it: a client
    // that can speak either (the SDKs' `auto`) then takes the session era, which
    // every backend serves without loss, as it would directly. Stateless requests
    // are still served, translated, for clients that send them anyway.
    let versions: Vec<&str> = if app.router.all_speak(Era::Stateless) {
        all_versions()
    } else {
        SESSION_VERSIONS.to_vec()
    };
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": versions,
        "capabilities": caps,
        "_meta": { META_SERVER_INFO: server_info() },
        "ttlMs": 0,
        "cacheScope": cache_scope(app),
    });
    if let (Some(i), Some(obj)) = (internal.init.get("instructions"), result.as_object_mut()) {
        obj.insert("instructions".into(), i.clone());
    }
    json_body(StatusCode::OK, Response::ok(id, to_raw(&result)).to_json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_read_as_their_parsers_read_them() {
        // Small params are walked, large ones indexed: both read alike.
        for pad in [0, 64 * 1024] {
            let text = format!(
                r#"{{"name":"first","_meta":{{"a":1}},"arguments":{{"x":"{}"}},"n\u0061me":"last","_meta":3}}"#,
                "y".repeat(pad)
            );
            let raw = Raw::from_string(text).unwrap();
            let p = Params::read(Some(&raw)).unwrap();
            // A repeated key counts by its last value, escapes decoded.
            assert_eq!(p.str("name").as_deref(), Some("last"));
            // The last `_meta` is not an object: there is none.
            assert!(p.meta_members().is_none());
            assert_eq!(
                p.value("arguments")
                    .and_then(|a| a["x"].as_str().map(str::len)),
                Some(pad)
            );
            assert_eq!(p.get("missing"), None);
        }
        let raw = Raw::from_string(r#"{"_meta":{"k":"v"}}"#.into()).unwrap();
        let meta: Vec<_> = Params::read(Some(&raw))
            .and_then(|p| p.meta_members())
            .map(Iterator::collect)
            .unwrap_or_default();
        assert_eq!(meta, [(r#""k""#, r#""v""#)]);
        let list = Raw::from_string("[1]".into()).unwrap();
        assert!(Params::read(Some(&list)).is_none());
        assert!(Params::read(None).is_some_and(|p| p.str("name").is_none()));
    }
}

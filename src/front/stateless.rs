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
//! Every caller (principal) has one internal route to the backends, opened on its
//! first stateless request the way a session-era client's `initialize` would be, and
//! used by all its stateless requests. Session-era backends therefore serve stateless
//! clients unchanged; Gantry translates at this edge:
//! - results get `resultType`, cacheable ones `ttlMs` / `cacheScope`, every one
//!   Gantry's `serverInfo` in `_meta`; modern `_meta` keys never reach a backend;
//! - a backend's progress reaches the request's own response stream (SSE), its log
//!   messages only when the request asked for them with `_meta` `logLevel`;
//! - a backend's server→client request becomes an `input_required` result and the
//!   call waits, parked (see [`super::mrtr`]), for the client's retry; one the
//!   client's capabilities do not allow ends the call with -32021;
//! - the client closing its response stream cancels the call upstream.

use super::mrtr::{Ask, Binding, StateError};
use super::{run_tracked_as, with_sse_headers, Accepts, App, FrontError};
use crate::auth::Principal;
use crate::call::{ClientAnswer, Downstream, Sink};
use crate::jsonrpc::{code, to_raw, Message, Notification, Request, RequestId, Response, RpcError};
use crate::mcp::param::ToolHeaders;
use crate::mcp::{Era, LATEST_SESSION_VERSION};
use crate::router::{level_rank, Caller, ClientInit};
use crate::session::Session;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use futures::future::BoxFuture;
use indexmap::IndexMap;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, OnceCell};
use tokio_util::sync::CancellationToken;

use crate::mcp::{
    all_versions, META_CLIENT_CAPABILITIES as META_CAPS, META_LOG_LEVEL, META_PREFIX,
    META_PROTOCOL_VERSION as META_VERSION, META_SERVER_INFO,
    META_SUBSCRIPTION_ID as META_SUBSCRIPTION, SESSION_VERSIONS, STATELESS_VERSIONS,
};

/// Methods of the session era that 2026-07-28 removed.
const REMOVED: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Methods whose complete results must say how long they may be cached.
const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Methods that may answer `input_required`, and the param naming what they act on
/// (the same field `Mcp-Name` mirrors).
fn input_capable(method: &str) -> Option<&'static str> {
    crate::mcp::header::name_field(method)
}

/// Whether a session-less message belongs to the stateless era.
pub(crate) fn is_stateless(headers: &HeaderMap, m: &Message) -> bool {
    let header_modern = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| !SESSION_VERSIONS.contains(&v.trim()));
    if header_modern {
        return true;
    }
    let (method, params) = match m {
        Message::Request(r) => (r.method.as_str(), r.params.as_deref()),
        Message::Notification(n) => (n.method.as_str(), n.params.as_deref()),
        Message::Response(_) => return false,
    };
    if matches!(method, "server/discover" | "subscriptions/listen") {
        return true;
    }
    meta_of(params).is_some_and(|m| m.keys().any(|k| k.starts_with(META_PREFIX)))
}

fn meta_of(params: Option<&RawValue>) -> Option<Map<String, Value>> {
    #[derive(serde::Deserialize)]
    struct P {
        #[serde(rename = "_meta")]
        meta: Option<Map<String, Value>>,
    }
    serde_json::from_str::<P>(params?.get()).ok()?.meta
}

/// A refusal: HTTP status and JSON-RPC error.
struct Refusal(StatusCode, RpcError);

fn bad(code: i64, msg: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, RpcError::new(code, msg))
}

fn answer(status: StatusCode, id: Option<RequestId>, e: &RpcError) -> HttpResponse {
    json_body(status, Response::err(id, e).to_json())
}

fn json_body(status: StatusCode, body: String) -> HttpResponse {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// What a valid stateless request declared about its caller.
struct Declared {
    capabilities: Value,
    /// Log messages at or above this rank reach the client; `None`: none do.
    log_rank: Option<u8>,
}

/// A header value as the spec compares it (see [`crate::mcp::header::decode`]);
/// `Err` when it is not valid.
fn header_text(headers: &HeaderMap, name: &str) -> Result<Option<String>, ()> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => crate::mcp::header::decode(v.as_bytes()).map(Some).ok_or(()),
    }
}

fn validate(
    headers: &HeaderMap,
    method: &str,
    params: &Map<String, Value>,
) -> Result<Declared, Refusal> {
    let Some(header_version) = headers.get("mcp-protocol-version") else {
        return Err(bad(
            code::HEADER_MISMATCH,
            "Header mismatch: the MCP-Protocol-Version header is required",
        ));
    };
    let header_version = header_version.to_str().unwrap_or_default().trim();
    let meta = params.get("_meta").and_then(Value::as_object);
    let Some(meta) = meta else {
        return Err(bad(
            code::INVALID_PARAMS,
            format!("params._meta is required (with `{META_VERSION}` and `{META_CAPS}`)"),
        ));
    };
    let Some(version) = meta.get(META_VERSION).and_then(Value::as_str) else {
        return Err(bad(
            code::INVALID_PARAMS,
            format!("params._meta[\"{META_VERSION}\"] (a string) is required"),
        ));
    };
    let capabilities = match meta.get(META_CAPS) {
        Some(c @ Value::Object(_)) => c.clone(),
        _ => {
            return Err(bad(
                code::INVALID_PARAMS,
                format!("params._meta[\"{META_CAPS}\"] (an object) is required"),
            ))
        }
    };
    if header_version != version {
        return Err(bad(
            code::HEADER_MISMATCH,
            format!(
                "Header mismatch: MCP-Protocol-Version header value '{}' does not match body value '{}'",
                clip(header_version),
                clip(version)
            ),
        ));
    }
    if !STATELESS_VERSIONS.contains(&version) {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            RpcError::new(
                code::UNSUPPORTED_PROTOCOL_VERSION,
                format!("Unsupported protocol version: {}", clip(version)),
            )
            .with_data(json!({ "supported": all_versions(), "requested": version })),
        ));
    }
    match header_text(headers, "mcp-method") {
        Ok(Some(m)) if m == method => {}
        Ok(Some(m)) => {
            return Err(bad(
                code::HEADER_MISMATCH,
                format!(
                    "Header mismatch: Mcp-Method header value '{}' does not match body value '{}'",
                    clip(&m),
                    clip(method)
                ),
            ))
        }
        Ok(None) => {
            return Err(bad(
                code::HEADER_MISMATCH,
                "Header mismatch: the Mcp-Method header is required",
            ))
        }
        Err(()) => {
            return Err(bad(
                code::HEADER_MISMATCH,
                "Header mismatch: the Mcp-Method header value is not valid",
            ))
        }
    }
    if let Some(field) = input_capable(method) {
        let body = params
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default();
        match header_text(headers, "mcp-name") {
            Ok(Some(n)) if n == body => {}
            Ok(Some(n)) => {
                return Err(bad(
                    code::HEADER_MISMATCH,
                    format!(
                    "Header mismatch: Mcp-Name header value '{}' does not match body value '{}'",
                    clip(&n),
                    clip(body)
                ),
                ))
            }
            Ok(None) => {
                return Err(bad(
                    code::HEADER_MISMATCH,
                    format!("Header mismatch: the Mcp-Name header is required for {method}"),
                ))
            }
            Err(()) => {
                return Err(bad(
                    code::HEADER_MISMATCH,
                    "Header mismatch: the Mcp-Name header value is not valid",
                ))
            }
        }
    }
    let log_rank = match meta.get(META_LOG_LEVEL) {
        None => None,
        Some(l) => match l.as_str().and_then(level_rank) {
            Some(r) => Some(r),
            None => {
                return Err(bad(
                    code::INVALID_PARAMS,
                    format!("params._meta[\"{META_LOG_LEVEL}\"] is not a logging level"),
                ))
            }
        },
    };
    Ok(Declared {
        capabilities,
        log_rank,
    })
}

/// At most 80 characters of a client-supplied string, for error messages.
fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Serves one stateless-era message.
pub(crate) async fn post(
    app: Arc<App>,
    principal: Principal,
    headers: &HeaderMap,
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
    let params: Map<String, Value> =
        match req.params.as_deref().map(|p| serde_json::from_str(p.get())) {
            None => Map::new(),
            Some(Ok(Value::Object(p))) => p,
            Some(_) => {
                return answer(
                    StatusCode::BAD_REQUEST,
                    Some(req.id),
                    &RpcError::new(code::INVALID_PARAMS, "params must be an object"),
                )
            }
        };
    let declared = match validate(headers, &req.method, &params) {
        Ok(d) => d,
        Err(Refusal(status, e)) => {
            tracing::debug!(method = %clip(&req.method), code = e.code, "stateless request refused");
            return answer(status, Some(req.id), &e);
        }
    };
    if REMOVED.contains(&req.method.as_str()) {
        return answer(
            StatusCode::NOT_FOUND,
            Some(req.id),
            &RpcError::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "Method not found: {} does not exist in protocol 2026-07-28",
                    req.method
                ),
            ),
        );
    }
    if app.stopping.is_cancelled() {
        return FrontError::Unavailable("Gantry is shutting down").into_response();
    }
    let internal = match internal_route(&app, principal.as_str()).await {
        Ok(i) => i,
        Err(e) => return e,
    };
    if req.method == "tools/call" {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let declared = tool_headers(&app, &internal).await;
        let none = Vec::new();
        let mirrored = declared.get(name).unwrap_or(&none);
        let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
        let sent_any = headers.keys().any(|k| k.as_str().starts_with("mcp-param-"));
        if !mirrored.is_empty() || sent_any {
            if let Err(why) = crate::mcp::param::check(mirrored, &arguments, |h| {
                headers.get(h).map(HeaderValue::as_bytes)
            }) {
                return answer(
                    StatusCode::BAD_REQUEST,
                    Some(req.id),
                    &RpcError::new(code::HEADER_MISMATCH, format!("Header mismatch: {why}")),
                );
            }
        }
    }
    match req.method.as_str() {
        "server/discover" => discover(&app, &internal, req.id),
        "subscriptions/listen" => listen(app, internal, req.id, &params).await,
        _ => call(app, principal, internal, req, params, declared, accepts).await,
    }
}

/// One principal's route to the backends for its stateless requests.
pub(crate) struct Internal {
    session: Arc<Session>,
    /// What the backends declared (the answer to the route's `initialize`).
    init: Value,
    /// The principal's open `subscriptions/listen` streams.
    listeners: Arc<Listeners>,
    /// Its tools' `Mcp-Param-*` declarations (`None`: not listed since the last change).
    tools: Arc<tokio::sync::Mutex<Option<Arc<ToolHeaders>>>>,
}

/// The principal's route: opened on its first stateless request, used by all its
/// requests. A caller Gantry cannot tell apart from others (no authentication)
/// reaches `per-session` backends that lack the stateless era with a connection
/// per call instead (see [`crate::router::Caller`]).
async fn internal_route(app: &Arc<App>, principal: &str) -> Result<Arc<Internal>, HttpResponse> {
    let caller = Caller {
        era: Era::Stateless,
        per_call: !app.auth.is_required(),
    };
    for _ in 0..2 {
        let cell: Arc<OnceCell<Arc<Internal>>> = app
            .stateless
            .entry(principal.to_owned())
            .or_default()
            .clone();
        let got = cell
            .get_or_try_init(|| open_internal(app, principal, caller))
            .await?
            .clone();
        if !got.session.cancel.is_cancelled() {
            return Ok(got);
        }
        // Expired (idle) since: open a new one.
        app.stateless
            .remove_if(principal, |_, c| Arc::ptr_eq(c, &cell));
    }
    Err(FrontError::Unavailable("the backends are not available; try again").into_response())
}

async fn open_internal(
    app: &Arc<App>,
    principal: &str,
    caller: Caller,
) -> Result<Arc<Internal>, HttpResponse> {
    let session = app.sessions.create(principal, false).map_err(|_| {
        FrontError::Unavailable("Too many sessions; try again later").into_response()
    })?;
    let init = ClientInit::for_stateless_callers();
    let listeners = Arc::new(Listeners::default());
    let tools = Arc::new(tokio::sync::Mutex::new(None));
    let owner: Sink = Arc::new(InternalOwner {
        listeners: listeners.clone(),
        tools: tools.clone(),
    });
    match app
        .router
        .open_session(&init, caller, principal, owner, &session.cancel)
        .await
    {
        Ok((route, result)) => {
            session.establish(LATEST_SESSION_VERSION.to_owned(), init.capabilities, route);
            tracing::info!(%principal, per_call = caller.per_call, "stateless route opened");
            Ok(Arc::new(Internal {
                session,
                init: result,
                listeners,
                tools,
            }))
        }
        Err(e) => {
            app.sessions.end(&session.id).await;
            Err(json_body(
                StatusCode::SERVICE_UNAVAILABLE,
                RpcError::new(code::BACKEND_ERROR, e.to_string()).to_null_id_response(),
            ))
        }
    }
}

/// Receives backend traffic of a stateless route that no call claims: list changes
/// and resource updates go to the listen streams that asked for them. Server→client
/// requests outside any call cannot reach a stateless client: refused at once.
struct InternalOwner {
    listeners: Arc<Listeners>,
    tools: Arc<tokio::sync::Mutex<Option<Arc<ToolHeaders>>>>,
}

impl Downstream for InternalOwner {
    fn notify(&self, n: Notification) {
        if n.method == "notifications/tools/list_changed" {
            let tools = self.tools.clone();
            tokio::spawn(async move { *tools.lock().await = None });
        }
        self.listeners.deliver(&n);
    }

    fn ask(&self, method: String, _: Option<Box<RawValue>>) -> BoxFuture<'static, ClientAnswer> {
        Box::pin(async move {
            Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "{method}: a stateless-era client can only be asked within one of its requests"
                ),
            )
            .to_raw())
        })
    }
}

fn server_info() -> Value {
    crate::mcp::gantry_implementation()
}

/// `cacheScope` of Gantry's answers: `private` as soon as callers are told apart
/// (what a backend returns may depend on who asks).
fn cache_scope(app: &App) -> &'static str {
    if !app.auth.is_required() {
        "public"
    } else {
        "private"
    }
}

fn discover(app: &App, internal: &Internal, id: RequestId) -> HttpResponse {
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

/// Backend traffic of one stateless call, for its HTTP handler.
enum Up {
    Note(Notification),
    Ask(Ask),
    /// The backend needs a capability the client did not declare.
    Missing(&'static str),
}

/// The [`Downstream`] of one stateless call.
struct CallSink {
    tx: mpsc::Sender<Up>,
    capabilities: Value,
    log_rank: Option<u8>,
    cancel: CancellationToken,
}

impl Downstream for CallSink {
    fn notify(&self, n: Notification) {
        let wanted = match n.method.as_str() {
            "notifications/progress" => true,
            "notifications/message" => self.log_rank.is_some_and(|min| {
                crate::jsonrpc::string_field(n.params.as_deref(), "level")
                    .and_then(|l| level_rank(&l))
                    .is_some_and(|r| r >= min)
            }),
            _ => false,
        };
        if wanted && self.tx.try_send(Up::Note(n)).is_err() {
            tracing::debug!("stateless call: notification dropped (client not reading)");
        }
    }

    fn ask(
        &self,
        method: String,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, ClientAnswer> {
        let tx = self.tx.clone();
        let cancel = self.cancel.clone();
        let missing = crate::session::required_capability(&method)
            .filter(|cap| self.capabilities.get(*cap).is_none());
        Box::pin(async move {
            let gone = || {
                Err(RpcError::new(code::INTERNAL_ERROR, "the client request has ended").to_raw())
            };
            if let Some(cap) = missing {
                let _ = tx.try_send(Up::Missing(cap));
                return Err(RpcError::new(
                    code::METHOD_NOT_FOUND,
                    format!("the client did not declare the `{cap}` capability"),
                )
                .to_raw());
            }
            let (reply, rx) = oneshot::channel();
            if tx
                .send(Up::Ask(Ask {
                    method,
                    params,
                    reply,
                }))
                .await
                .is_err()
            {
                return gone();
            }
            tokio::select! {
                r = rx => r.unwrap_or_else(|_| gone()),
                _ = cancel.cancelled() => gone(),
            }
        })
    }
}

/// A stateless call in progress. Dropping it cancels the call upstream (the client
/// closed its stream, or its parked call expired).
pub(crate) struct Running {
    done: oneshot::Receiver<Option<Response>>,
    up: mpsc::Receiver<Up>,
    cancel: CancellationToken,
    /// Input requests asked so far (names the keys).
    asked: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[allow(clippy::too_many_arguments)]
async fn call(
    app: Arc<App>,
    principal: Principal,
    internal: Arc<Internal>,
    req: Request,
    params: Map<String, Value>,
    declared: Declared,
    accepts: Accepts,
) -> HttpResponse {
    let method = req.method.clone();
    let binding = input_capable(&method).map(|field| Binding {
        principal: principal.as_str().to_owned(),
        method: method.clone(),
        name: params
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    });
    let mut params = params;
    let state = params
        .get("requestState")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let (Some(state), Some(binding)) = (state, &binding) {
        if state.starts_with("g2.") {
            // A stateless-era backend's own state, wrapped by Gantry: unwrapped for it.
            match app.mrtr.open_foreign(&state, binding) {
                Ok(inner) => {
                    params.insert("requestState".into(), Value::String(inner));
                }
                Err(e) => {
                    tracing::info!(principal = %binding.principal, error = %e, "stateless retry refused");
                    return answer(
                        StatusCode::OK,
                        Some(req.id),
                        &RpcError::new(code::INVALID_PARAMS, e.to_string()),
                    );
                }
            }
        } else {
            return resume(
                app,
                req.id,
                &method,
                binding.clone(),
                state,
                &params,
                declared,
                accepts,
            )
            .await;
        }
    }
    let session = internal.session.clone();
    let client = crate::call::ClientView {
        capabilities: Some(Arc::new(declared.capabilities.clone())),
        log_level: declared
            .log_rank
            .and_then(|r| crate::router::LOG_LEVELS.get(usize::from(r)).copied()),
        era: crate::mcp::Era::Stateless,
    };
    // Modern `_meta` keys, `inputResponses` and `requestState` travel on: a
    // stateless-era backend needs them, and they are removed for session-era ones.
    let upstream = Request {
        id: req.id.clone(),
        method: req.method,
        params: Some(to_raw(&params)),
    };
    let guard = session.track(&upstream.id);
    let cancel = guard.token();
    let (tx, up) = mpsc::channel(64);
    let sink: Sink = Arc::new(CallSink {
        tx,
        capabilities: declared.capabilities,
        log_rank: declared.log_rank,
        cancel: cancel.clone(),
    });
    let (done_tx, done) = oneshot::channel();
    let task_app = app.clone();
    tokio::spawn(async move {
        let r = run_tracked_as(&task_app, &session, upstream, sink, guard, client).await;
        let _ = done_tx.send(r);
    });
    let running = Running {
        done,
        up,
        cancel,
        asked: 0,
    };
    drive(app, running, req.id, method, binding, accepts).await
}

/// A retry with `inputResponses`: the parked call gets its answers and goes on.
#[allow(clippy::too_many_arguments)]
async fn resume(
    app: Arc<App>,
    id: RequestId,
    method: &str,
    binding: Binding,
    state: String,
    params: &Map<String, Value>,
    _declared: Declared,
    accepts: Accepts,
) -> HttpResponse {
    let responses = match params.get("inputResponses") {
        Some(Value::Object(r)) if r.values().all(Value::is_object) => r.clone(),
        _ => {
            return answer(
                StatusCode::OK,
                Some(id),
                &RpcError::new(
                    code::INVALID_PARAMS,
                    "inputResponses must be an object mapping each input request's key to its result object",
                ),
            )
        }
    };
    let mut parked = match app.mrtr.redeem(&state, &binding) {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(principal = %binding.principal, error = %e, "stateless retry refused");
            let e: &StateError = &e;
            return answer(
                StatusCode::OK,
                Some(id),
                &RpcError::new(code::INVALID_PARAMS, e.to_string()),
            );
        }
    };
    let mut open = IndexMap::new();
    for (key, ask) in parked.asks.drain(..) {
        match responses.get(&key) {
            Some(v) => {
                let _ = ask.reply.send(Ok(to_raw(v)));
            }
            None => {
                open.insert(key, ask);
            }
        }
    }
    let running = parked.call;
    if !open.is_empty() {
        // Some answers are missing: ask again for those.
        let (status, body) = park(&app, running, open, binding, id);
        return json_body(status, body);
    }
    drive(app, running, id, method.to_owned(), Some(binding), accepts).await
}

/// How long Gantry waits for more input requests after the first, so that requests
/// a backend sends together reach the client in one `input_required`.
const ASK_GATHER: Duration = Duration::from_millis(20);

/// Waits for the call's next step and answers the client: its result, an
/// `input_required` (the call parked), or an SSE stream when the call sends progress
/// or logs first.
async fn drive(
    app: Arc<App>,
    mut running: Running,
    id: RequestId,
    method: String,
    binding: Option<Binding>,
    accepts: Accepts,
) -> HttpResponse {
    loop {
        // What the call sent before its result is taken first: a notification
        // pushed just before the result must not lose to it.
        let up = tokio::select! {
            biased;
            up = running.up.recv() => up,
            r = &mut running.done => return complete(&app, &method, binding.as_ref(), id, r.ok().flatten(), accepts),
        };
        match up {
            None => {
                // The sink is gone: only the result can come now.
                let r = (&mut running.done).await.ok().flatten();
                return complete(&app, &method, binding.as_ref(), id, r, accepts);
            }
            Some(Up::Note(n)) => {
                if accepts.sse {
                    return stream(app, running, id, method, binding, n);
                }
            }
            Some(Up::Ask(first)) => {
                let asks = gather(&mut running, first).await;
                let (status, body) = step(&app, running, asks, id, &method, binding);
                return json_body(status, body);
            }
            Some(Up::Missing(cap)) => {
                let (status, body) = stuck(id, &method, Some(cap));
                return json_body(status, body);
            }
        }
    }
}

/// The first input request plus any others that follow within [`ASK_GATHER`], keyed.
async fn gather(running: &mut Running, first: Ask) -> IndexMap<String, Ask> {
    let mut asks = IndexMap::new();
    let mut next = Some(first);
    let deadline = tokio::time::Instant::now() + ASK_GATHER;
    while let Some(ask) = next.take() {
        running.asked += 1;
        let kind = match ask.method.as_str() {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => "input",
        };
        asks.insert(format!("{kind}-{}", running.asked), ask);
        if asks.len() >= 16 {
            break;
        }
        if let Ok(Some(Up::Ask(a))) = tokio::time::timeout_at(deadline, running.up.recv()).await {
            next = Some(a);
        }
    }
    asks
}

fn input_requests(asks: &IndexMap<String, Ask>) -> Map<String, Value> {
    let mut requests = Map::new();
    for (key, ask) in asks {
        let mut r = json!({ "method": ask.method });
        if let (Some(p), Some(obj)) = (&ask.params, r.as_object_mut()) {
            if let Ok(v) = serde_json::from_str::<Value>(p.get()) {
                obj.insert("params".into(), v);
            }
        }
        requests.insert(key.clone(), r);
    }
    requests
}

/// Parks the call and builds the `input_required` answer naming its open requests.
fn park(
    app: &App,
    running: Running,
    asks: IndexMap<String, Ask>,
    binding: Binding,
    id: RequestId,
) -> (StatusCode, String) {
    let requests = input_requests(&asks);
    match app.mrtr.park(running, asks, binding) {
        Ok(state) => {
            let body = json!({
                "resultType": "input_required",
                "inputRequests": requests,
                "requestState": state,
                "_meta": { META_SERVER_INFO: server_info() },
            });
            (StatusCode::OK, Response::ok(id, to_raw(&body)).to_json())
        }
        Err((e, running)) => {
            drop(running);
            let e = RpcError::new(code::INTERNAL_ERROR, e.to_string());
            (StatusCode::OK, Response::err(Some(id), &e).to_json())
        }
    }
}

/// The call cannot continue: the backend asked for input during a request that
/// cannot return `input_required`, or the client lacks the capability it needs.
fn stuck(id: RequestId, method: &str, missing: Option<&str>) -> (StatusCode, String) {
    let (status, e) = match missing {
        Some(cap) => {
            let mut required = Map::new();
            required.insert(cap.to_owned(), json!({}));
            (
                StatusCode::BAD_REQUEST,
                RpcError::new(
                    code::MISSING_CLIENT_CAPABILITY,
                    format!("Missing required client capability: {cap}"),
                )
                .with_data(json!({ "requiredCapabilities": required })),
            )
        }
        None => (
            StatusCode::OK,
            RpcError::new(
                code::INTERNAL_ERROR,
                format!("the backend asked the client for input during {method}, which cannot return input_required"),
            ),
        ),
    };
    (status, Response::err(Some(id), &e).to_json())
}

/// The next step of a call that is not a notification, as the client's answer.
fn step(
    app: &App,
    running: Running,
    asks: IndexMap<String, Ask>,
    id: RequestId,
    method: &str,
    binding: Option<Binding>,
) -> (StatusCode, String) {
    match binding {
        Some(b) => park(app, running, asks, b, id),
        None => stuck(id, method, None),
    }
}

/// Shapes a backend's final answer for a stateless client.
fn final_message(
    app: &App,
    method: &str,
    binding: Option<&Binding>,
    id: RequestId,
    r: Option<Response>,
) -> (StatusCode, String) {
    let Some(r) = r else {
        let e = RpcError::new(code::INTERNAL_ERROR, "the request was cancelled");
        return (StatusCode::OK, Response::err(Some(id), &e).to_json());
    };
    match r.outcome {
        Ok(result) => {
            let mut obj: Map<String, Value> =
                serde_json::from_str(result.get()).unwrap_or_default();
            obj.entry("resultType").or_insert_with(|| json!("complete"));
            let complete = obj.get("resultType") == Some(&json!("complete"));
            if obj.get("resultType") == Some(&json!("input_required")) {
                // A stateless-era backend asks for input: its state goes to the client
                // sealed, so only this caller can bring it back, for this call.
                let Some(binding) = binding else {
                    return stuck(id, method, None);
                };
                if let Some(Value::String(state)) = obj.get("requestState") {
                    let sealed = app.mrtr.seal_foreign(state, binding);
                    obj.insert("requestState".into(), Value::String(sealed));
                }
            }
            if complete && CACHEABLE.contains(&method) {
                obj.entry("ttlMs").or_insert_with(|| json!(0));
                // Callers are told apart: what one is shown is not for the others,
                // whatever the backend thinks of it.
                let scope = obj.entry("cacheScope").or_insert_with(|| json!("public"));
                if cache_scope(app) == "private" {
                    *scope = json!("private");
                }
            }
            let meta = obj.entry("_meta").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                meta.entry(META_SERVER_INFO).or_insert_with(server_info);
            }
            (StatusCode::OK, Response::ok(id, to_raw(&obj)).to_json())
        }
        Err(error) => {
            let mut e: Map<String, Value> = serde_json::from_str(error.get()).unwrap_or_default();
            let code_of = e
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(code::INTERNAL_ERROR);
            if code_of == code::RESOURCE_NOT_FOUND {
                // 2026-07-28: a missing resource is invalid params, naming the URI.
                e.insert("code".into(), json!(code::INVALID_PARAMS));
            }
            let status = match e.get("code").and_then(Value::as_i64) {
                Some(code::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
                Some(
                    code::HEADER_MISMATCH
                    | code::MISSING_CLIENT_CAPABILITY
                    | code::UNSUPPORTED_PROTOCOL_VERSION,
                ) => StatusCode::BAD_REQUEST,
                _ => StatusCode::OK,
            };
            let raw = to_raw(&e);
            (
                status,
                Response {
                    id: Some(id),
                    outcome: Err(raw),
                }
                .to_json(),
            )
        }
    }
}

fn complete(
    app: &App,
    method: &str,
    binding: Option<&Binding>,
    id: RequestId,
    r: Option<Response>,
    accepts: Accepts,
) -> HttpResponse {
    let (status, body) = final_message(app, method, binding, id, r);
    reply(status, body, accepts)
}

/// An answer in one write: an SSE event when the client takes SSE (as a server of
/// this era usually answers a call), JSON otherwise and for HTTP-level errors.
fn reply(status: StatusCode, body: String, accepts: Accepts) -> HttpResponse {
    if status == StatusCode::OK && accepts.sse {
        let event = crate::sse::message_event(None, &body);
        with_sse_headers(HttpResponse::new(Body::from(event)))
    } else {
        json_body(status, body)
    }
}

/// Streams the rest of a call as SSE: its notifications, then its result (or an
/// `input_required`). The client closing the stream cancels the call.
fn stream(
    app: Arc<App>,
    mut running: Running,
    id: RequestId,
    method: String,
    binding: Option<Binding>,
    first: Notification,
) -> HttpResponse {
    let (tx, rx) = mpsc::channel::<bytes::Bytes>(64);
    let event = |json: String| bytes::Bytes::from(crate::sse::message_event(None, &json));
    tokio::spawn(async move {
        if tx.send(event(first.to_json())).await.is_err() {
            return;
        }
        loop {
            // Notifications sent before the result go first (see `drive`).
            let up = tokio::select! {
                biased;
                up = running.up.recv() => up,
                r = &mut running.done => {
                    let (_, body) = final_message(&app, &method, binding.as_ref(), id, r.ok().flatten());
                    let _ = tx.send(event(body)).await;
                    return;
                }

                // The client went away: dropping `running` cancels the call.
                _ = tx.closed() => return,
            };
            let out = match up {
                None => {
                    let r = (&mut running.done).await.ok().flatten();
                    let (_, body) = final_message(&app, &method, binding.as_ref(), id, r);
                    let _ = tx.send(event(body)).await;
                    return;
                }
                Some(Up::Note(n)) => n.to_json(),
                Some(Up::Ask(first)) => {
                    let asks = gather(&mut running, first).await;
                    let (_, body) = step(&app, running, asks, id, &method, binding);
                    let _ = tx.send(event(body)).await;
                    return;
                }
                Some(Up::Missing(cap)) => {
                    let (_, body) = stuck(id, &method, Some(cap));
                    let _ = tx.send(event(body)).await;
                    return;
                }
            };
            if tx.send(event(out)).await.is_err() {
                return;
            }
        }
    });
    let body = Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>),
    );
    with_sse_headers(HttpResponse::new(body))
}

use futures::StreamExt as _;

/// What one listen stream asked for (and Gantry honours).
#[derive(Debug, Clone, Default)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Vec<String>,
}

impl Filter {
    fn wants(&self, n: &Notification) -> bool {
        match n.method.as_str() {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => {
                crate::jsonrpc::string_field(n.params.as_deref(), "uri")
                    .is_some_and(|u| self.uris.contains(&u))
            }
            _ => false,
        }
    }

    /// The filter as the acknowledgement echoes it.
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if self.tools {
            m.insert("toolsListChanged".into(), json!(true));
        }
        if self.prompts {
            m.insert("promptsListChanged".into(), json!(true));
        }
        if self.resources {
            m.insert("resourcesListChanged".into(), json!(true));
        }
        if !self.uris.is_empty() {
            m.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(m)
    }
}

struct Listener {
    n: u64,
    /// The listen request's id: every notification carries it.
    subscription: Value,
    filter: Filter,
    tx: mpsc::Sender<bytes::Bytes>,
}

/// The listen streams of one principal, and its resource subscriptions upstream
/// (counted, so the backend sees one subscribe per URI however many streams ask).
#[derive(Default)]
pub(crate) struct Listeners {
    list: Mutex<Vec<Listener>>,
    uri_refs: Mutex<HashMap<String, usize>>,
    next: AtomicU64,
}

/// Listen streams one principal may hold open.
const MAX_LISTENS_PER_PRINCIPAL: usize = 32;

/// A notification for one listen stream: `params._meta` names the subscription.
fn tagged(n: &Notification, subscription: &Value) -> String {
    let mut params: Map<String, Value> = n
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_SUBSCRIPTION.into(), subscription.clone());
    }
    json!({ "jsonrpc": "2.0", "method": n.method, "params": params }).to_string()
}

impl Listeners {
    fn deliver(&self, n: &Notification) {
        let mut list = self.list.lock();
        list.retain(|l| !l.tx.is_closed());
        for l in list.iter().filter(|l| l.filter.wants(n)) {
            let event = crate::sse::message_event(None, &tagged(n, &l.subscription));
            if l.tx.try_send(bytes::Bytes::from(event)).is_err() {
                tracing::warn!(method = %n.method, "listen stream not read fast enough; notification dropped");
            }
        }
    }

    /// URIs whose count went from 0 to 1 (to subscribe upstream).
    fn add_uris(&self, uris: &[String]) -> Vec<String> {
        let mut refs = self.uri_refs.lock();
        uris.iter()
            .filter(|u| {
                let c = refs.entry((*u).clone()).or_insert(0);
                *c += 1;
                *c == 1
            })
            .cloned()
            .collect()
    }

    /// URIs whose count went to 0 (to unsubscribe upstream).
    fn drop_uris(&self, uris: &[String]) -> Vec<String> {
        let mut refs = self.uri_refs.lock();
        let mut last = Vec::new();
        for u in uris {
            if let Some(c) = refs.get_mut(u) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    refs.remove(u);
                    last.push(u.clone());
                }
            }
        }
        last
    }
}

/// Honoured subset of a listen request's `notifications`, or a -32602.
fn filter_of(params: &Map<String, Value>, caps: &Value) -> Result<Filter, RpcError> {
    let asked = match params.get("notifications") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "params.notifications must be an object",
            ))
        }
    };
    let flag = |k: &str| asked.get(k).and_then(Value::as_bool).unwrap_or(false);
    let declared = |p: &str| caps.pointer(p) == Some(&Value::Bool(true));
    let uris =
        match asked.get("resourceSubscriptions") {
            None => Vec::new(),
            Some(Value::Array(a)) => {
                let mut v = Vec::with_capacity(a.len());
                for u in a {
                    match u.as_str() {
                        Some(u) if !v.iter().any(|x: &String| x == u) => v.push(u.to_owned()),
                        Some(_) => {}
                        None => return Err(RpcError::new(
                            code::INVALID_PARAMS,
                            "params.notifications.resourceSubscriptions must be an array of URIs",
                        )),
                    }
                }
                v
            }
            Some(_) => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    "params.notifications.resourceSubscriptions must be an array of URIs",
                ))
            }
        };
    if uris.len() > 256 {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            "at most 256 resourceSubscriptions per listen stream",
        ));
    }
    Ok(Filter {
        tools: flag("toolsListChanged") && declared("/tools/listChanged"),
        prompts: flag("promptsListChanged") && declared("/prompts/listChanged"),
        resources: flag("resourcesListChanged") && declared("/resources/listChanged"),
        uris: if declared("/resources/subscribe") {
            uris
        } else {
            Vec::new()
        },
    })
}

/// Subscribes or unsubscribes one URI on the principal's route.
async fn upstream_subscription(
    app: &App,
    internal: &Internal,
    method: &str,
    uri: &str,
) -> Result<(), String> {
    own_request(app, internal, method, json!({ "uri": uri }))
        .await
        .map(|_| ())
}

/// A request Gantry itself makes on a principal's route (no client is asked
/// anything); the result, or the error object as text.
async fn own_request(
    app: &App,
    internal: &Internal,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let Some(route) = internal.session.route() else {
        return Err("no route".into());
    };
    let req = Request {
        id: RequestId::from_string("gantry"),
        method: method.to_owned(),
        params: Some(to_raw(&params)),
    };
    let ctx = crate::call::CallCtx {
        sink: internal.session.standalone_sink(),
        cancel: internal.session.cancel.child_token(),
        client: crate::call::ClientView {
            capabilities: None,
            log_level: None,
            era: crate::mcp::Era::Stateless,
        },
    };
    match app.router.dispatch(route, req, ctx).await {
        Some(Response { outcome: Ok(r), .. }) => {
            serde_json::from_str(r.get()).map_err(|e| e.to_string())
        }
        Some(Response {
            outcome: Err(e), ..
        }) => Err(e.get().to_owned()),
        None => Err("cancelled".into()),
    }
}

/// The `x-mcp-header` declarations of the principal's tools, listed once and again
/// after a `tools/list_changed`.
async fn tool_headers(app: &App, internal: &Internal) -> Arc<ToolHeaders> {
    let mut cached = internal.tools.lock().await;
    if let Some(t) = cached.as_ref() {
        return t.clone();
    }
    let mut all = ToolHeaders::new();
    let mut cursor: Option<Value> = None;
    for _ in 0..100 {
        let mut params = json!({});
        if let (Some(c), Some(p)) = (cursor.take(), params.as_object_mut()) {
            p.insert("cursor".into(), c);
        }
        let Ok(page) = own_request(app, internal, "tools/list", params).await else {
            // Unknown: nothing is checked (the backend still checks what it declares).
            return Arc::new(all);
        };
        if let Some(tools) = page.get("tools").and_then(Value::as_array) {
            crate::mcp::param::of_tools(tools, &mut all);
        }
        match page.get("nextCursor") {
            Some(c) if !c.is_null() => cursor = Some(c.clone()),
            _ => break,
        }
    }
    let all = Arc::new(all);
    *cached = Some(all.clone());
    all
}

/// `subscriptions/listen`: a long-lived SSE stream, acknowledged first, fed by the
/// backends' list changes and resource updates. The client closing it ends it.
async fn listen(
    app: Arc<App>,
    internal: Arc<Internal>,
    id: RequestId,
    params: &Map<String, Value>,
) -> HttpResponse {
    let caps = internal
        .init
        .get("capabilities")
        .cloned()
        .unwrap_or_default();
    let open = {
        let mut list = internal.listeners.list.lock();
        list.retain(|l| !l.tx.is_closed());
        list.len()
    };
    if open >= MAX_LISTENS_PER_PRINCIPAL {
        return answer(
            StatusCode::OK,
            Some(id),
            &RpcError::new(
                code::INVALID_REQUEST,
                format!("at most {MAX_LISTENS_PER_PRINCIPAL} listen streams per caller are open at once"),
            ),
        );
    }
    let filter = match filter_of(params, &caps) {
        Ok(f) => f,
        Err(e) => return answer(StatusCode::OK, Some(id), &e),
    };
    let subscription: Value = serde_json::from_str(id.raw().get()).unwrap_or(Value::Null);
    for uri in internal.listeners.add_uris(&filter.uris) {
        if let Err(e) = upstream_subscription(&app, &internal, "resources/subscribe", &uri).await {
            internal.listeners.drop_uris(&filter.uris);
            tracing::info!(uri = %clip(&uri), error = %clip(&e), "listen: upstream subscribe failed");
            return answer(
                StatusCode::OK,
                Some(id),
                &RpcError::new(
                    code::INVALID_PARAMS,
                    format!("cannot subscribe to {}: {}", clip(&uri), clip(&e)),
                ),
            );
        }
    }
    let (tx, rx) = mpsc::channel::<bytes::Bytes>(256);
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": { "_meta": { META_SUBSCRIPTION: subscription }, "notifications": filter.to_json() },
    });
    // Cannot fail: the channel is new and empty.
    let _ = tx.try_send(bytes::Bytes::from(crate::sse::message_event(
        None,
        &ack.to_string(),
    )));
    let n = internal.listeners.next.fetch_add(1, Ordering::Relaxed);
    internal.listeners.list.lock().push(Listener {
        n,
        subscription: subscription.clone(),
        filter: filter.clone(),
        tx: tx.clone(),
    });
    // Keeps the route busy (never reaped while a stream is open), sends keep-alives,
    // and cleans up when the client goes away or Gantry stops.
    let guard = internal.session.track(&id);
    let keepalive = app.cfg.server.sse_keepalive;
    tokio::spawn(async move {
        let _guard = guard;
        let ended = internal.session.cancel.clone();
        loop {
            tokio::select! {
                _ = tx.closed() => break,
                _ = ended.cancelled() => {
                    // A graceful end: the listen request's result, then close.
                    let done = json!({
                        "jsonrpc": "2.0", "id": subscription,
                        "result": { "resultType": "complete", "_meta": { META_SUBSCRIPTION: subscription } },
                    });
                    let _ = tx.try_send(bytes::Bytes::from(crate::sse::message_event(None, &done.to_string())));
                    break;
                }
                _ = tokio::time::sleep(keepalive) => {
                    if tx.send(bytes::Bytes::from_static(b":\n\n")).await.is_err() {
                        break;
                    }
                }
            }
        }
        internal.listeners.list.lock().retain(|l| l.n != n);
        for uri in internal.listeners.drop_uris(&filter.uris) {
            if let Err(e) = subscription_end(&app, &internal, &uri).await {
                tracing::debug!(uri = %clip(&uri), error = %clip(&e), "listen: upstream unsubscribe failed");
            }
        }
        tracing::debug!("listen stream ended");
    });
    let body = Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>),
    );
    with_sse_headers(HttpResponse::new(body))
}

async fn subscription_end(app: &App, internal: &Internal, uri: &str) -> Result<(), String> {
    if internal.session.cancel.is_cancelled() {
        return Ok(()); // the route is closing: its subscriptions go with it
    }
    upstream_subscription(app, internal, "resources/unsubscribe", uri).await
}

//! The session era on the MCP endpoint (2025-03-26 … 2025-11-25): POST (single
//! messages and, in 2025-03-26, batches), the GET stream with `Last-Event-ID`
//! resumption, DELETE; `initialize` opens a session. Requests of the stateless era
//! are handed to [`super::stateless`].

use super::edge::Answer;
use super::error::FrontError;
use crate::auth::Principal;
use crate::call::{CallCtx, Sink};
use crate::front::edge::quota_key;
use crate::front::http::json_response;
use crate::front::http::json_response_of;
use crate::front::http::read_body;
use crate::front::http::sse_of;
use crate::front::http::Accepts;
use crate::front::http::Heads;
use crate::front::http::{sse_response, SseKind};
use crate::front::stateless;
use crate::front::App;
use crate::jsonrpc::{
    code, Incoming, Message, Notification, Request, RequestId, Response, RpcError,
};
use crate::mcp::SESSION_VERSIONS;
use crate::router::ClientInit;
use crate::session::{sse_body, EventStream, Session};
use crate::telemetry::metrics::{self};
use axum::body::Body;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use std::sync::Arc;
use std::time::Duration;

pub(super) fn lookup(
    app: &App,
    principal: &Principal,
    heads: &Heads<'_>,
) -> Result<Arc<Session>, FrontError> {
    let Some(id) = heads.session_id() else {
        return Err(FrontError::BadRequest(
            "Mcp-Session-Id header is required".into(),
        ));
    };
    // Someone else's session is as unknown as one never issued: 404, not 403.
    match app.sessions.get(id, principal.as_str()) {
        Ok(s) if !s.legacy => Ok(s),
        _ => Err(FrontError::SessionNotFound),
    }
}

/// `MCP-Protocol-Version` (its first value) is absent or a session-era version.
pub(super) fn check_version_header(v: Option<&HeaderValue>) -> Result<(), FrontError> {
    let Some(v) = v else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or_default();
    if SESSION_VERSIONS.contains(&v) {
        Ok(())
    } else {
        Err(FrontError::UnsupportedVersion(v.chars().take(40).collect()))
    }
}

/// The MCP endpoint: [`admit`](super::edge::admit)ted, then by method.
pub(super) async fn mcp(State(app): State<Arc<App>>, req: HttpRequest) -> HttpResponse {
    let peer = super::edge::peer_of(req.extensions());
    serve(app, req, peer).await
}

/// [`mcp`] for a request that came from `peer` (when known).
pub(super) async fn serve(
    app: Arc<App>,
    req: HttpRequest,
    peer: Option<std::net::SocketAddr>,
) -> HttpResponse {
    let inner = app.clone();
    super::edge::admit(&app, req, |req, principal| async move {
        let method = req.method().clone();
        match method {
            Method::POST => post(inner, principal, req, peer).await,
            Method::GET => get_stream(inner, &principal, req.headers()),
            Method::DELETE => delete(inner, &principal, req.headers()).await,
            _ => FrontError::MethodNotAllowed.into_response(),
        }
    })
    .await
}

/// A POST to the MCP endpoint, in phases: what the client accepts and sent
/// (406 / 415), the body (413, 400 / -32700), which era and session it belongs to,
/// then the message itself.
pub(super) async fn post(
    app: Arc<App>,
    principal: Principal,
    req: HttpRequest,
    from: Option<std::net::SocketAddr>,
) -> HttpResponse {
    let (parts, body) = req.into_parts();
    let peer = from.map(|p| p.ip());
    let headers = parts.headers;
    let heads = Heads::read(&headers);
    let accepts = match negotiate(&heads, &headers) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let mut incoming = match read_message(&app, body, &headers).await {
        Ok(i) => i,
        Err(e) => return e.into_response(),
    };
    if heads.traceparent.is_some() {
        match &mut incoming {
            Incoming::Single(m) => super::edge::adopt_trace_header(&headers, [m]),
            Incoming::Batch(ms) => super::edge::adopt_trace_header(&headers, ms.iter_mut()),
        }
    }
    match classify(&app, &principal, &heads, incoming) {
        Target::Stateless(m) => {
            if let Message::Request(r) = &m {
                if let Err(e) = super::edge::step_up(&app, &principal, [r]) {
                    return e.into_response();
                }
                if let Some(resp) = super::edge::rate_limit(
                    &app,
                    &principal,
                    peer,
                    &headers,
                    [r],
                    Answer::Inline { stateless: true },
                )
                .await
                {
                    return resp;
                }
            }
            // Boxed, as every branch off the session era's call path: an async fn's
            // future is as large as its largest branch, and the call path's future is
            // allocated and moved on every request.
            crate::boxed_in_place(|| stateless::post(app, principal, &headers, &heads, m, accepts))
                .await
        }
        Target::Initialize(r) => match check_version_header(heads.protocol_version) {
            Ok(()) => {
                if let Some(resp) = super::edge::rate_limit(
                    &app,
                    &principal,
                    peer,
                    &headers,
                    [&r],
                    Answer::Inline { stateless: false },
                )
                .await
                {
                    return resp;
                }
                // Whom the new session counts against: formatted only here, not per call.
                let client = quota_key(&principal, from);
                Box::pin(initialize(app, principal, client.as_deref(), r, accepts)).await
            }
            Err(e) => e.into_response(),
        },
        Target::Session(session, incoming) => {
            if let Err(e) = check_version_header(heads.protocol_version) {
                return e.into_response();
            }
            let requests: Vec<&crate::jsonrpc::Request> = match &incoming {
                Incoming::Single(Message::Request(r)) => vec![r],
                Incoming::Batch(ms) => ms
                    .iter()
                    .filter_map(|m| match m {
                        Message::Request(r) => Some(r),
                        _ => None,
                    })
                    .collect(),
                Incoming::Single(_) => Vec::new(),
            };
            if let Err(e) = super::edge::step_up(&app, &principal, requests.iter().copied()) {
                return e.into_response();
            }
            if let Some(resp) = super::edge::rate_limit(
                &app,
                &principal,
                peer,
                &headers,
                requests,
                Answer::Inline { stateless: false },
            )
            .await
            {
                return resp;
            }
            session.set_caller(&principal);
            match incoming {
                Incoming::Single(m) => single(app, session, m, accepts).await,
                Incoming::Batch(ms) if session.version() == Some("2025-03-26") => {
                    Box::pin(batch(app, session, ms, accepts)).await
                }
                Incoming::Batch(_) => FrontError::Invalid(
                    "JSON-RPC batches are only accepted in protocol 2025-03-26".into(),
                )
                .into_response(),
            }
        }
        Target::Refused(e) => e.into_response(),
    }
}

/// What the client's `Accept` allows (406 if neither JSON nor SSE) and whether it
/// sent JSON (415).
fn negotiate(heads: &Heads<'_>, headers: &HeaderMap) -> Result<Accepts, FrontError> {
    let accepts = Accepts::of(heads, headers);
    if !accepts.json && !accepts.sse {
        return Err(FrontError::NotAcceptable(
            "Client must accept application/json or text/event-stream",
        ));
    }
    let ctype = heads
        .content_type
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    const JSON: &[u8] = b"application/json";
    if !ctype
        .get(..JSON.len())
        .is_some_and(|t| t.eq_ignore_ascii_case(JSON))
    {
        return Err(FrontError::UnsupportedMediaType);
    }
    Ok(accepts)
}

/// The body, within the limit, parsed once into JSON-RPC messages.
async fn read_message(app: &App, body: Body, headers: &HeaderMap) -> Result<Incoming, FrontError> {
    let body = read_body(app, body, headers).await?;
    Incoming::parse_shared(body).map_err(FrontError::from)
}

/// Where a POST goes.
enum Target {
    /// A stateless-era message (no live session of this caller named).
    Stateless(Message),
    /// `initialize` without a live session: opens one.
    Initialize(Request),
    /// Anything for the caller's live session.
    Session(Arc<Session>, Incoming),
    /// No session, or one that is not the caller's.
    Refused(FrontError),
}

/// Decides the era and session of a message. The session named by
/// `Mcp-Session-Id` is looked up once. A stateless-era request is served as such;
/// a session id on it is ignored unless it names a live session of this caller
/// (as the era asks of servers). `initialize` on a live session is dispatched like
/// any request (and refused there as "already initialized").
fn classify(app: &App, principal: &Principal, heads: &Heads<'_>, incoming: Incoming) -> Target {
    match (lookup(app, principal, heads), incoming) {
        (Ok(session), incoming) => Target::Session(session, incoming),
        (Err(_), Incoming::Single(m)) if stateless::is_stateless(heads.protocol_version, &m) => {
            Target::Stateless(m)
        }
        (Err(_), Incoming::Single(Message::Request(r))) if r.method == "initialize" => {
            Target::Initialize(r)
        }
        (Err(e), _) => Target::Refused(e),
    }
}

pub(super) async fn initialize(
    app: Arc<App>,
    principal: Principal,
    client: Option<&str>,
    req: Request,
    accepts: Accepts,
) -> HttpResponse {
    let init = match ClientInit::parse(req.params.as_ref()) {
        Ok(i) => i,
        Err(e) => {
            let body = Response::err(Some(req.id), &e).to_json();
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response();
        }
    };
    if app.is_stopping() {
        return FrontError::Unavailable("Gantry is shutting down").into_response();
    }
    let session = match app.sessions.create(principal.as_str(), false, client) {
        Ok(s) => s,
        Err(e) => return FrontError::from(e).into_response(),
    };
    let answer = establish(&app, &session, &init, req.id).await;
    let failed = answer.outcome.is_err();
    let body = answer.to_json();
    let mut resp = if accepts.json {
        json_response(body)
    } else {
        sse_of(Body::from(crate::sse::message_event(None, &body)))
    };
    if failed {
        app.sessions.end(&session.id).await;
    } else if let Ok(v) = HeaderValue::from_str(&session.id) {
        resp.headers_mut().insert(crate::mcp::header::SESSION_ID, v);
        tracing::info!(session = %session.id, %principal, version = ?session.version(), client = %init.client_info, "session started");
    }
    resp
}

/// Connects a session to its backends and builds the answer to `initialize`.
pub(crate) async fn establish(
    app: &App,
    session: &Arc<Session>,
    init: &ClientInit,
    id: RequestId,
) -> Response {
    let owner: Sink = session.standalone_sink();
    match app
        .router
        .open_session(
            init,
            crate::router::Caller::SESSION,
            &session.principal,
            owner,
            &session.cancel,
        )
        .await
    {
        Ok((route, result)) => {
            session.establish(
                init.negotiated().to_owned(),
                init.capabilities.clone(),
                route,
            );
            Response::ok(id, crate::jsonrpc::to_raw(&result))
        }
        // The backend's own failure, with its data (which backend, its stderr).
        Err(crate::router::RouteError::NoBackend(e)) => Response::err(Some(id), &e.to_rpc()),
    }
}

/// Handles a client notification or response. Returns nothing: they get 202.
pub(crate) fn absorb(app: &App, session: &Session, m: Message) {
    match m {
        Message::Notification(n) => notification(app, session, n),
        Message::Response(r) => {
            let Some(id) = r.id else { return };
            if !session.answer(&id, r.outcome) {
                tracing::debug!(session = %session.id, ?id, "client answered no pending request; dropped");
            }
        }
        Message::Request(_) => {}
    }
}

pub(super) fn notification(app: &App, session: &Session, n: Notification) {
    match n.method.as_str() {
        "notifications/initialized" => {}
        "notifications/cancelled" => {
            let id = n
                .params
                .as_ref()
                .and_then(|p| {
                    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(p.get()).ok()
                })
                .and_then(|p| p.get("requestId").cloned())
                .and_then(|v| RequestId::from_raw(crate::jsonrpc::to_raw(&v)).ok());
            if let Some(id) = id {
                let n = session.cancel_request(&id);
                tracing::debug!(session = %session.id, ?id, cancelled = n, "client cancelled a request");
            }
        }
        _ => {
            if let Some(route) = session.route() {
                app.router.notify(route, &n);
            }
        }
    }
}

/// Runs one client request to its response (or `None` if it was cancelled).
pub(crate) async fn run_call(
    app: &App,
    session: &Arc<Session>,
    req: Request,
    sink: Sink,
) -> Option<Response> {
    let guard = session.track(&req.id);
    run_tracked(app, session, req, sink, guard).await
}

/// Like [`run_call`], for a request already registered for cancellation (so a
/// `notifications/cancelled` racing the spawn of its task still reaches it).
pub(crate) async fn run_tracked(
    app: &App,
    session: &Arc<Session>,
    req: Request,
    sink: Sink,
    guard: crate::session::InflightGuard,
) -> Option<Response> {
    let mut client = session.client_view();
    // Fails closed: a request whose caller was not recorded counts as the session's
    // principal without any token scopes.
    let caller = session
        .caller()
        .unwrap_or_else(|| crate::auth::Principal::named(&session.principal));
    client.access = app.access(&caller);
    let tool = (req.method == "tools/call")
        .then(|| crate::jsonrpc::string_field(req.params.as_ref(), "name"))
        .flatten();
    run_tracked_as(app, session, req, tool, sink, guard, client).await
}

/// Like [`run_tracked`], on behalf of `client` (a stateless-era client on its
/// principal's internal session), for a call of `tool` (the name a `tools/call`
/// gives, read once by the caller: limits and metrics).
pub(crate) async fn run_tracked_as(
    app: &App,
    session: &Arc<Session>,
    req: Request,
    tool: Option<String>,
    sink: Sink,
    guard: crate::session::InflightGuard,
    client: crate::call::ClientView,
) -> Option<Response> {
    let _call = app.call_guard();
    let ctx = CallCtx {
        sink,
        cancel: guard.token(),
        client,
        timeout: app
            .limits()
            .as_ref()
            .zip(tool.as_deref())
            .and_then(|(l, t)| l.timeout_for(t)),
        trace: app.tracing.as_ref().map(|t| {
            let parent = crate::telemetry::trace::from_meta(req.params.as_ref());
            t.request(&req.method, tool.as_deref(), parent.as_ref())
        }),
    };
    let Some(route) = session.route() else {
        return Some(Response::err(
            Some(req.id),
            &RpcError::new(code::INVALID_REQUEST, "the session is not initialized"),
        ));
    };
    let method = metrics::method_label(&req.method);
    let started = tokio::time::Instant::now();
    // A place under `[[limits.concurrency]]`, held for the call.
    let _places = match &app.limits() {
        Some(limits) if req.method == "tools/call" => {
            let name = tool.as_deref();
            let principal = ctx.client.access.as_ref().map_or_else(
                || session.principal.clone(),
                |a| a.caller.as_str().to_owned(),
            );
            let ask = crate::limits::Ask {
                principal: &principal,
                ip: None,
                method: &req.method,
                name,
                backend: name.and_then(|n| app.backend_of(n)),
            };
            let waited = |rule: &str, d: std::time::Duration| {
                if let Ok(h) = app.metrics.queue_wait.get_metric_with_label_values(&[rule]) {
                    h.observe(d.as_secs_f64());
                }
            };
            match limits.acquire(&ask, &ctx.cancel, &waited).await {
                Ok(Some(p)) => Some(p),
                Ok(None) => return None,
                Err(busy) => {
                    tracing::info!(method = %req.method, rule = %busy.rule, "no place for the call");
                    if let Some(span) = &ctx.trace {
                        span.set_error(&busy.message());
                    }
                    let outcome = metrics::Outcome::Failed(crate::fault::Fault::Gateway);
                    app.metrics
                        .observe_request(method, outcome, started.elapsed());
                    if let Some(t) = &tool {
                        app.metrics
                            .observe_tool(app.backend_of(t), t, outcome, started.elapsed());
                    }
                    return Some(Response::err(
                        Some(req.id),
                        &RpcError::new(crate::limits::RATE_LIMITED, busy.message())
                            .with_data(busy.data()),
                    ));
                }
            }
        }
        _ => None,
    };
    let span = ctx.trace.clone();
    let (resp, outcome) = app.router.dispatch(route, req, ctx).await;
    if let (Some(span), metrics::Outcome::Failed(_)) = (&span, outcome) {
        let why = resp
            .as_ref()
            .and_then(|r| r.outcome.as_ref().err())
            .and_then(|e| crate::jsonrpc::string_field(Some(e), "message"));
        span.set_error(why.as_deref().unwrap_or("failed"));
    }
    app.metrics
        .observe_request(method, outcome, started.elapsed());
    if let Some(t) = &tool {
        app.metrics
            .observe_tool(app.backend_of(t), t, outcome, started.elapsed());
    }
    resp
}

pub(super) async fn single(
    app: Arc<App>,
    session: Arc<Session>,
    m: Message,
    accepts: Accepts,
) -> HttpResponse {
    let req = match m {
        Message::Request(r) => r,
        other => {
            absorb(&app, &session, other);
            return StatusCode::ACCEPTED.into_response();
        }
    };
    if req.method == "ping" || !accepts.sse {
        // Answered as one JSON object; nested traffic (if any) uses the GET stream.
        // Boxed: inline, the call path's future would be part of every POST's.
        let sink = session.standalone_sink();
        return match crate::boxed_in_place(|| run_call(&app, &session, req, sink)).await {
            Some(r) => json_response_of(r),
            None => StatusCode::ACCEPTED.into_response(),
        };
    }
    let stream = session.open_stream();
    // The call runs right here while it is quick (no task hop); if it sends anything
    // before its response, or is still running after its quick window (16–32 ms), it
    // moves to its own task and the client gets the live, resumable stream from its
    // first event.
    // Dropping the handler (the client went away) also moves it: a disconnect is not
    // a cancellation.
    let mut call = InlineCall {
        run: Some(crate::boxed_in_place(|| {
            call_answer(app.clone(), session.clone(), req, stream.clone())
        })),
        stream: stream.clone(),
    };
    let answered = match call.run.as_mut() {
        Some(fut) => tokio::select! {
            biased;
            resp = fut => Some(resp),
            _ = stream.wait_event(app.quick.window()) => None,
        },
        None => None,
    };
    if let Some(resp) = answered {
        call.run = None;
        match resp {
            // A quick call that sent nothing before its response: one complete SSE
            // body (priming event and response), no stream kept, a large result
            // sent as it is.
            Some(resp) if stream.close_if_untouched() => {
                session.forget_stream(stream.id);
                let len = match &resp.outcome {
                    Ok(v) | Err(v) => v.get().len(),
                };
                let (body, id) = quick_head(&app, &session, &stream, len);
                return crate::front::http::sse_response_body(body, Some(&id), resp);
            }
            resp => stream.finish(resp.map(|r| r.to_json())),
        }
    }
    drop(call);
    // A quick call with nothing but its response: a complete SSE body written at once
    // (priming event and response), no stream kept.
    if let Some(only) = stream.final_within(Duration::ZERO).await {
        session.forget_stream(stream.id);
        let (body, id) = quick_head(&app, &session, &stream, only.len());
        return crate::front::http::sse_message_body(body, Some(&id), only);
    }
    let opts = app.body_options(&session, true, true);
    sse_response(&app, SseKind::Response, sse_body(stream, 0, opts))
}

/// The start of a quick call's complete SSE body (its priming event, if the session
/// has one), and the id of the response's event.
fn quick_head(app: &App, session: &Session, stream: &EventStream, len: usize) -> (String, String) {
    let mut body = crate::front::http::sse_head_for(len);
    // Digits written by itoa: `format!` machinery costs more than the rest of the
    // framing together.
    let mut digits = itoa::Buffer::new();
    let stream_id = digits.format(stream.id);
    if let Some(retry) = app.body_options(session, true, true).priming {
        let mut millis = itoa::Buffer::new();
        for part in [
            "id: ",
            stream_id,
            "_0\nretry: ",
            millis.format(retry.as_millis()),
        ] {
            body.push_str(part);
        }
        body.push_str("\ndata: \n\n");
    }
    let mut id = String::with_capacity(stream_id.len() + 2);
    id.push_str(stream_id);
    id.push_str("_1");
    (body, id)
}

/// A call being run inline by its HTTP handler; if dropped unfinished, it moves to
/// its own task, which writes its response into `stream`.
pub(super) struct InlineCall {
    run: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Option<Response>> + Send>>>,
    stream: Arc<EventStream>,
}

impl Drop for InlineCall {
    fn drop(&mut self) {
        if let Some(f) = self.run.take() {
            let stream = self.stream.clone();
            tokio::spawn(async move {
                let resp = f.await;
                stream.finish(resp.map(|r| r.to_json()));
            });
        }
    }
}

/// A call whose traffic before its response goes into `stream`; its response is
/// returned. Registered for cancellation at once, before it is first polled.
/// Inlined, so that the future is built where it is boxed.
#[inline(always)]
fn call_answer(
    app: Arc<App>,
    session: Arc<Session>,
    req: Request,
    stream: Arc<EventStream>,
) -> impl std::future::Future<Output = Option<Response>> + Send + 'static {
    let guard = session.track(&req.id);
    async move {
        let sink = session.sink_for(stream);
        run_tracked(&app, &session, req, sink, guard).await
    }
}

pub(super) async fn batch(
    app: Arc<App>,
    session: Arc<Session>,
    ms: Vec<Message>,
    accepts: Accepts,
) -> HttpResponse {
    let mut requests = Vec::new();
    for m in ms {
        match m {
            Message::Request(r) if r.method == "initialize" => {
                return FrontError::Invalid("initialize must not be part of a batch".into())
                    .into_response();
            }
            Message::Request(r) => requests.push(r),
            other => absorb(&app, &session, other),
        }
    }
    if requests.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    if !accepts.sse {
        let sink = session.standalone_sink();
        let answers = futures::future::join_all(
            requests
                .into_iter()
                .map(|r| run_call(&app, &session, r, sink.clone())),
        )
        .await;
        let parts: Vec<String> = answers.into_iter().flatten().map(|r| r.to_json()).collect();
        return json_response(format!("[{}]", parts.join(",")));
    }
    let stream = session.open_stream();
    {
        let (app, session, stream) = (app.clone(), session.clone(), stream.clone());
        tokio::spawn(async move {
            let sink = session.sink_for(stream.clone());
            let calls = requests.into_iter().map(|r| {
                let (app, session, sink, stream) = (&app, &session, sink.clone(), &stream);
                async move {
                    if let Some(resp) = run_call(app, session, r, sink).await {
                        stream.push(resp.to_json());
                    }
                }
            });
            futures::future::join_all(calls).await;
            stream.close();
        });
    }
    let opts = app.body_options(&session, true, true);
    sse_response(&app, SseKind::Response, sse_body(stream, 0, opts))
}

pub(super) fn get_stream(
    app: Arc<App>,
    principal: &Principal,
    headers: &HeaderMap,
) -> HttpResponse {
    let heads = Heads::read(headers);
    if !Accepts::of(&heads, headers).sse {
        return FrontError::NotAcceptable("Client must accept text/event-stream").into_response();
    }
    let session = match lookup(&app, principal, &heads) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_version_header(heads.protocol_version) {
        return e.into_response();
    }
    if let Some(last) = headers.get(crate::mcp::header::LAST_EVENT_ID) {
        let parsed = last
            .to_str()
            .ok()
            .and_then(|s| s.split_once('_'))
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
        let Some((stream_id, seq)) = parsed else {
            return FrontError::BadRequest("invalid Last-Event-ID".into()).into_response();
        };
        let Some(stream) = session.stream(stream_id) else {
            return FrontError::StreamGone.into_response();
        };
        let opts = app.body_options(&session, true, false);
        return sse_response(&app, SseKind::Response, sse_body(stream, seq, opts));
    }
    let after = session.standalone.delivered();
    let opts = app.body_options(&session, true, true);
    sse_response(
        &app,
        SseKind::Listen,
        sse_body(session.standalone.clone(), after, opts),
    )
}

pub(super) async fn delete(
    app: Arc<App>,
    principal: &Principal,
    headers: &HeaderMap,
) -> HttpResponse {
    let session = match lookup(&app, principal, &Heads::read(headers)) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    app.sessions.end(&session.id).await;
    tracing::info!(session = %session.id, %principal, "session ended by the client");
    StatusCode::OK.into_response()
}

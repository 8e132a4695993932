//! The HTTP surface: the MCP endpoint (POST / GET / DELETE), the legacy HTTP+SSE
//! transport, health endpoints.
//!
//! Check order for the MCP endpoint (spec-checklist §1.1): Host/Origin (403) →
//! credentials (401 / 400, [`crate::auth`]; also on the legacy transport, never on
//! health probes or CORS preflights) → method (405) → Accept (406) → Content-Type
//! (415) → body size (413) → JSON (400, -32700) → session (400 / 404, someone else's
//! session is 404) → `MCP-Protocol-Version` (400) → dispatch. Every HTTP-level error
//! carries a JSON-RPC error body with `"id": null`.

mod error;
mod legacy;

mod origin;
mod stateless;

pub use error::FrontError;
pub use origin::OriginPolicy;

use crate::auth::{Authenticator, Principal};
use crate::call::{CallCtx, Sink};
use crate::config::Config;
use crate::jsonrpc::{
    code, Incoming, Message, Notification, Request, RequestId, Response, RpcError,
};
use crate::mcp::SESSION_VERSIONS;
use crate::router::{ClientInit, Router};
use crate::session::{sse_body, BodyOptions, EventStream, Session, SessionError, SessionStore};
use crate::telemetry::metrics::{self, Metrics, MetricsError, Outcome};
use crate::upstream::BackendStats;
use axum::body::Body;
use axum::extract::{Extension, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{any, get};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Shared state of the front door.
pub struct App {
    /// The validated configuration.
    pub cfg: Config,
    /// Backends and dispatch.
    pub router: Router,
    /// Live client sessions.
    pub sessions: SessionStore,
    /// Who is calling (API keys, or everyone anonymous).
    pub auth: Authenticator,
    /// Prometheus metrics.
    pub metrics: Metrics,
    origin: OriginPolicy,
    calls: AtomicUsize,
    /// Cancelled when the server stops accepting work.
    pub stopping: CancellationToken,
    /// Stateless-era calls waiting for their client's input.
    mrtr: stateless::Mrtr<stateless::Running>,
    /// Each principal's route to the backends for its stateless-era requests.
    stateless: dashmap::DashMap<String, Arc<tokio::sync::OnceCell<Arc<stateless::Internal>>>>,
}

/// Counts a call in progress (graceful shutdown waits for them).
struct CallGuard<'a>(&'a AtomicUsize);
impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl App {
    /// Builds the front door for `cfg`.
    pub fn new(cfg: Config) -> Result<Arc<Self>, MetricsError> {
        let loopback = cfg.listen.ip().is_loopback();
        Ok(Arc::new(Self {
            metrics: Metrics::new()?,
            origin: OriginPolicy::new(
                &cfg.server.allowed_hosts,
                &cfg.server.allowed_origins,
                loopback,
            ),
            router: Router::new(&cfg),
            sessions: SessionStore::new(
                cfg.server.max_sessions,
                cfg.server.session_idle_timeout,
                cfg.server.event_buffer,
            ),
            auth: Authenticator::new(&cfg.auth),
            calls: AtomicUsize::new(0),
            stopping: CancellationToken::new(),
            mrtr: stateless::Mrtr::new(cfg.server.input_timeout),
            stateless: dashmap::DashMap::new(),
            cfg,
        }))
    }

    fn call_guard(&self) -> CallGuard<'_> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        CallGuard(&self.calls)
    }

    /// Client requests being answered right now.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    fn body_options(&self, session: &Session, with_ids: bool, prime: bool) -> BodyOptions {
        let priming = (prime && with_ids && session.version().is_some_and(|v| v >= "2025-11-25"))
            .then_some(self.cfg.server.sse_retry);
        BodyOptions {
            with_ids,
            priming,
            preamble: None,
            keepalive: self.cfg.server.sse_keepalive,
            cancel: session.cancel.clone(),
            on_drop: None,
        }
    }
}

/// The axum router for the whole HTTP surface.
pub fn routes(app: Arc<App>) -> axum::Router {
    // Every route here needs a principal; only the probes below are public.
    let mut protected = axum::Router::new().route(&app.cfg.server.path, any(mcp));
    if app.cfg.server.legacy_sse {
        protected = protected
            .route("/sse", get(legacy::open))
            .route("/messages", axum::routing::post(legacy::message));
    }
    let protected = protected.route_layer(axum::middleware::from_fn_with_state(
        app.clone(),
        authenticate,
    ));
    // Host/Origin first (403), then credentials (401).
    let protected = protected.layer(axum::middleware::from_fn_with_state(
        app.clone(),
        check_origin,
    ));
    // Probes and metrics sit outside both: orchestrators send the pod IP as Host.
    let mut r = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready));
    if app.cfg.server.metrics {
        r = r.route("/metrics", get(metrics));
    }
    r.merge(protected).with_state(app)
}

async fn metrics(State(app): State<Arc<App>>) -> HttpResponse {
    let m = &app.metrics;
    m.sessions
        .set(i64::try_from(app.sessions.len()).unwrap_or(i64::MAX));
    Metrics::catch_up(
        &m.sessions_reaped,
        app.sessions.reaped.load(Ordering::Relaxed),
    );
    m.calls_in_flight
        .set(i64::try_from(app.calls_in_flight()).unwrap_or(i64::MAX));
    m.calls_awaiting_input
        .set(i64::try_from(app.mrtr.len()).unwrap_or(i64::MAX));
    for (name, stats) in app.router.backend_stats() {
        let (conns, pending) = stats.load();
        m.backend_connections
            .with_label_values(&[name])
            .set(i64::try_from(conns).unwrap_or(i64::MAX));
        m.backend_pending
            .with_label_values(&[name])
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        Metrics::catch_up(
            &m.backend_restarts.with_label_values(&[name]),
            BackendStats::get(&stats.restarts),
        );
        Metrics::catch_up(
            &m.backend_unattributed.with_label_values(&[name]),
            BackendStats::get(&stats.unattributed),
        );
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        m.render(),
    )
        .into_response()
}

async fn ready(State(app): State<Arc<App>>) -> HttpResponse {
    if app.stopping.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping").into_response()
    } else {
        "ready".into_response()
    }
}

fn json_response(body: String) -> HttpResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn sse_response(
    body: impl futures::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send + 'static,
) -> HttpResponse {
    with_sse_headers(HttpResponse::new(Body::from_stream(body)))
}

/// Marks a response as an SSE stream (type, no caching, no proxy buffering).
fn with_sse_headers(mut resp: HttpResponse) -> HttpResponse {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Puts the caller's [`Principal`] in the request extensions, or refuses the request
/// (401 / 400 with `WWW-Authenticate`) before any handler runs or any stream starts.
/// CORS preflights never get here: [`check_origin`] answers them.
async fn authenticate(
    State(app): State<Arc<App>>,
    mut req: HttpRequest,
    next: Next,
) -> HttpResponse {
    match app.auth.authenticate(req.headers()) {
        Ok(principal) => {
            req.extensions_mut().insert(principal);
            next.run(req).await
        }
        Err(e) => {
            // The reason only: never the presented credentials.
            if e == crate::auth::AuthError::Missing {
                tracing::debug!(method = %req.method(), path = req.uri().path(), "request refused: no credentials");
            } else {
                tracing::info!(method = %req.method(), path = req.uri().path(), reason = %e, "request refused: bad credentials");
            }
            FrontError::from(e).into_response()
        }
    }
}

async fn check_origin(State(app): State<Arc<App>>, req: HttpRequest, next: Next) -> HttpResponse {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok());
    if let Err(why) = app.origin.check(host.as_deref(), origin) {
        tracing::info!(%why, "request refused (DNS-rebinding protection)");
        return FrontError::Forbidden(why).into_response();
    }
    // The Origin passed the policy: browsers may talk to us (CORS). Preflights never
    // need a session or credentials.
    let cors_origin = origin.and_then(|o| HeaderValue::from_str(o).ok());
    let mut resp = if req.method() == Method::OPTIONS && cors_origin.is_some() {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "Authorization, X-API-Key, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name",
            ),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        r
    } else {
        next.run(req).await
    };
    if let Some(o) = cors_origin {
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate"),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    resp
}

/// What the client's `Accept` allows.
#[derive(Clone, Copy)]
pub(crate) struct Accepts {
    json: bool,
    sse: bool,
}

impl Accepts {
    fn from(headers: &HeaderMap) -> Self {
        let mut json = false;
        let mut sse = false;
        let mut any = false;
        let values: Vec<&str> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if values.is_empty() {
            // Lenient: a client that states nothing accepts what it gets.
            return Self {
                json: true,
                sse: true,
            };
        }
        for part in values.iter().flat_map(|v| v.split(',')) {
            let mime = part
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            match mime.as_str() {
                "application/json" | "application/*" => json = true,
                "text/event-stream" | "text/*" => sse = true,
                "*/*" => any = true,
                _ => {}
            }
        }
        Self {
            json: json || any,
            sse: sse || any,
        }
    }
}

fn session_header(headers: &HeaderMap) -> Option<&str> {
    headers.get("mcp-session-id").and_then(|v| v.to_str().ok())
}

fn lookup(
    app: &App,
    principal: &Principal,
    headers: &HeaderMap,
) -> Result<Arc<Session>, FrontError> {
    let Some(id) = session_header(headers) else {
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

fn check_version_header(headers: &HeaderMap) -> Result<(), FrontError> {
    let Some(v) = headers.get("mcp-protocol-version") else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or_default();
    if SESSION_VERSIONS.contains(&v) {
        Ok(())
    } else {
        Err(FrontError::UnsupportedVersion(v.chars().take(40).collect()))
    }
}

async fn mcp(
    State(app): State<Arc<App>>,
    Extension(principal): Extension<Principal>,
    req: HttpRequest,
) -> HttpResponse {
    let method = req.method().clone();
    match method {
        Method::POST => post(app, principal, req).await,
        Method::GET => get_stream(app, &principal, req.headers()),
        Method::DELETE => delete(app, &principal, req.headers()).await,
        _ => FrontError::MethodNotAllowed.into_response(),
    }
}

/// Reads a request body within the configured limit.
pub(crate) async fn read_body(
    app: &App,
    body: Body,
    headers: &HeaderMap,
) -> Result<bytes::Bytes, FrontError> {
    let limit = app.cfg.server.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(FrontError::TooLarge(limit));
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| FrontError::TooLarge(limit))
}

async fn post(app: Arc<App>, principal: Principal, req: HttpRequest) -> HttpResponse {
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let accepts = Accepts::from(&headers);
    if !accepts.json && !accepts.sse {
        return FrontError::NotAcceptable(
            "Client must accept application/json or text/event-stream",
        )
        .into_response();
    }
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !ctype.to_ascii_lowercase().starts_with("application/json") {
        return FrontError::UnsupportedMediaType.into_response();
    }
    let body = match read_body(&app, body, &headers).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let incoming = match Incoming::parse(&body) {
        Ok(i) => i,
        Err(e) => return FrontError::from(e).into_response(),
    };
    // The session named by `Mcp-Session-Id`, looked up once.
    let found = lookup(&app, &principal, &headers);
    // A stateless-era request is served as such; a session id on it is ignored
    // unless it names a live session of this caller (as the era asks of servers).
    if found.is_err() {
        if let Incoming::Single(m) = &incoming {
            if stateless::is_stateless(&headers, m) {
                let Incoming::Single(m) = incoming else {
                    return FrontError::SessionNotFound.into_response();
                };
                return stateless::post(app, principal, &headers, m, accepts).await;
            }
        }
    }
    if let (Incoming::Single(Message::Request(r)), Err(_)) = (&incoming, &found) {
        // `initialize` on a live session is dispatched like any request (and refused
        // there as "already initialized"); only without one does it open a session.
        if r.method == "initialize" {
            if let Err(e) = check_version_header(&headers) {
                return e.into_response();
            }
            let Incoming::Single(Message::Request(r)) = incoming else {
                return FrontError::SessionNotFound.into_response();
            };
            return initialize(app, principal, r, accepts).await;
        }
    }
    let session = match found {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_version_header(&headers) {
        return e.into_response();
    }
    match incoming {
        Incoming::Single(m) => single(app, session, m, accepts).await,
        Incoming::Batch(ms) => {
            if session.version() != Some("2025-03-26") {
                return FrontError::Invalid(
                    "JSON-RPC batches are only accepted in protocol 2025-03-26".into(),
                )
                .into_response();
            }
            batch(app, session, ms, accepts).await
        }
    }
}

async fn initialize(
    app: Arc<App>,
    principal: Principal,
    req: Request,
    accepts: Accepts,
) -> HttpResponse {
    let init = match ClientInit::parse(req.params.as_deref()) {
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
    if app.stopping.is_cancelled() {
        return FrontError::Unavailable("Gantry is shutting down").into_response();
    }
    let session = match app.sessions.create(principal.as_str(), false) {
        Ok(s) => s,
        Err(SessionError::Full | SessionError::NotFound) => {
            return FrontError::Unavailable("Too many sessions; try again later").into_response();
        }
    };
    let answer = establish(&app, &session, &init, req.id).await;
    let failed = answer.outcome.is_err();
    let body = answer.to_json();
    let mut resp = if accepts.json {
        json_response(body)
    } else {
        with_sse_headers(HttpResponse::new(Body::from(crate::sse::message_event(
            None, &body,
        ))))
    };
    if failed {
        app.sessions.end(&session.id).await;
    } else if let Ok(v) = HeaderValue::from_str(&session.id) {
        resp.headers_mut().insert("mcp-session-id", v);
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
        Err(e) => Response::err(Some(id), &RpcError::new(code::BACKEND_ERROR, e.to_string())),
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

fn notification(app: &App, session: &Session, n: Notification) {
    match n.method.as_str() {
        "notifications/initialized" => {}
        "notifications/cancelled" => {
            let id = n
                .params
                .as_deref()
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
    let client = session.client_view();
    run_tracked_as(app, session, req, sink, guard, client).await
}

/// Like [`run_tracked`], on behalf of `client` (a stateless-era client on its
/// principal's internal session).
pub(crate) async fn run_tracked_as(
    app: &App,
    session: &Arc<Session>,
    req: Request,
    sink: Sink,
    guard: crate::session::InflightGuard,
    client: crate::call::ClientView,
) -> Option<Response> {
    let _call = app.call_guard();
    let ctx = CallCtx {
        sink,
        cancel: guard.token(),
        client,
    };
    let Some(route) = session.route() else {
        return Some(Response::err(
            Some(req.id),
            &RpcError::new(code::INVALID_REQUEST, "the session is not initialized"),
        ));
    };
    let method = metrics::method_label(&req.method);
    let started = tokio::time::Instant::now();
    let resp = app.router.dispatch(route, req, ctx).await;
    let outcome = match &resp {
        None => Outcome::Cancelled,
        Some(r) if r.outcome.is_err() => Outcome::Error,
        Some(_) => Outcome::Ok,
    };
    app.metrics
        .observe_request(method, outcome, started.elapsed());
    resp
}

async fn single(
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
        let sink = session.standalone_sink();
        return match run_call(&app, &session, req, sink).await {
            Some(r) => json_response(r.to_json()),
            None => StatusCode::ACCEPTED.into_response(),
        };
    }
    let stream = session.open_stream();
    // The call runs right here while it is quick (no task hop); if it sends anything
    // before its response, or is still running after QUICK_WINDOW, it moves to its
    // own task and the client gets the live, resumable stream from its first event.
    // Dropping the handler (the client went away) also moves it: a disconnect is not
    // a cancellation.
    let mut call = InlineCall(Some(Box::pin(call_task(
        app.clone(),
        session.clone(),
        req,
        stream.clone(),
    ))));
    let finished = match call.0.as_mut() {
        Some(fut) => tokio::select! {
            biased;
            _ = fut => true,
            _ = stream.wait_event(QUICK_WINDOW) => false,
        },
        None => false,
    };
    if finished {
        call.0 = None;
    }
    drop(call);
    // A quick call with nothing but its response: a complete SSE body written at once
    // (priming event and response), no stream kept.
    if let Some(only) = stream.final_within(Duration::ZERO).await {
        session.forget_stream(stream.id);
        let mut body = String::with_capacity(only.len() + 96);
        if let Some(retry) = app.body_options(&session, true, true).priming {
            body.push_str(&format!(
                "id: {}_0\nretry: {}\ndata: \n\n",
                stream.id,
                retry.as_millis()
            ));
        }
        body.push_str(&crate::sse::message_event(
            Some(&format!("{}_1", stream.id)),
            &only,
        ));
        // A complete body: sent with Content-Length, the connection stays open.
        return with_sse_headers(HttpResponse::new(Body::from(body)));
    }
    let opts = app.body_options(&session, true, true);
    sse_response(sse_body(stream, 0, opts))
}

/// How long a request may run inline and be answered in one write rather than streamed.
const QUICK_WINDOW: Duration = Duration::from_millis(25);

/// A call being run inline by its HTTP handler; if dropped unfinished, it moves to
/// its own task.
struct InlineCall(Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>);

impl Drop for InlineCall {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            tokio::spawn(f);
        }
    }
}

/// A call that writes its response into `stream`, then closes it. Registered for
/// cancellation at once, before it is first polled.
fn call_task(
    app: Arc<App>,
    session: Arc<Session>,
    req: Request,
    stream: Arc<EventStream>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let guard = session.track(&req.id);
    async move {
        let sink = session.sink_for(stream.clone());
        let resp = run_tracked(&app, &session, req, sink, guard).await;
        stream.finish(resp.map(|r| r.to_json()));
    }
}

async fn batch(
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
    sse_response(sse_body(stream, 0, opts))
}

fn get_stream(app: Arc<App>, principal: &Principal, headers: &HeaderMap) -> HttpResponse {
    if !Accepts::from(headers).sse {
        return FrontError::NotAcceptable("Client must accept text/event-stream").into_response();
    }
    let session = match lookup(&app, principal, headers) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_version_header(headers) {
        return e.into_response();
    }
    if let Some(last) = headers.get("last-event-id") {
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
        return sse_response(sse_body(stream, seq, opts));
    }
    let after = session.standalone.delivered();
    let opts = app.body_options(&session, true, true);
    sse_response(sse_body(session.standalone.clone(), after, opts))
}

async fn delete(app: Arc<App>, principal: &Principal, headers: &HeaderMap) -> HttpResponse {
    let session = match lookup(&app, principal, headers) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    app.sessions.end(&session.id).await;
    tracing::info!(session = %session.id, %principal, "session ended by the client");
    StatusCode::OK.into_response()
}

/// Serves until `stop` is cancelled, then drains: in-flight calls get up to
/// `shutdown_grace` to finish, streams end, sessions and backends are shut down.
pub async fn serve(
    app: Arc<App>,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let reaper = {
        let app = app.clone();
        tokio::spawn(async move {
            let every = (app.cfg.server.session_idle_timeout / 4)
                .clamp(Duration::from_millis(250), Duration::from_secs(30));
            let mut last_reap = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(every.min(Duration::from_secs(1))).await;
                let expired = app.mrtr.sweep();
                if expired > 0 {
                    tracing::info!(
                        calls = expired,
                        "calls waiting for client input expired; cancelled"
                    );
                }
                if last_reap.elapsed() >= every {
                    last_reap = tokio::time::Instant::now();
                    app.sessions.reap().await;
                }
            }
        })
    };
    let pools = {
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move { app.router.maintain_pools(stop).await })
    };
    let drained = CancellationToken::new();
    let drain = {
        let (app, stop, drained) = (app.clone(), stop.clone(), drained.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            app.stopping.cancel();
            // Calls waiting for a stateless client's input end now (cancelled).
            app.mrtr.clear();
            let grace = app.cfg.server.shutdown_grace;
            let deadline = tokio::time::Instant::now() + grace;
            while app.calls_in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if app.calls_in_flight() > 0 {
                tracing::warn!(
                    calls = app.calls_in_flight(),
                    "shutdown grace expired; ending calls still in flight"
                );
            }
            app.sessions.end_all().await;
            drained.cancel();
        })
    };
    let routes = routes(app.clone());
    // Small SSE writes must not wait for the peer's delayed ACK (Nagle): ~40 ms a call.
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    let result = axum::serve(listener, routes)
        .with_graceful_shutdown({
            let stop = stop.clone();
            async move { stop.cancelled().await }
        })
        .await;
    reaper.abort();
    stop.cancel();
    let _ = drain.await;
    drained.cancelled().await;
    app.sessions.end_all().await;
    let _ = pools.await;
    app.router.shutdown().await;
    result
}

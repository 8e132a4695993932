//! The checks every protected request passes first: Host / Origin (403, with CORS
//! answered here) and then credentials (401 / 400), before any handler runs or any
//! stream starts.

use super::error::FrontError;
use crate::auth::{AuthError, Principal};
use crate::front::App;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response as HttpResponse};
use std::sync::Arc;

/// The checks of a protected request, in order: Host / Origin (403, a CORS preflight
/// answered here), then credentials (401 / 400 with `WWW-Authenticate`), before any
/// handler runs or any stream starts. `inner` runs with the caller's principal; every
/// answer gets the CORS headers its Origin earned. Called by the MCP endpoint itself
/// (no middleware layers on the hot path) and, as [`admit_layer`], for the rest.
pub(super) async fn admit<F, Fut>(app: &App, req: HttpRequest, inner: F) -> HttpResponse
where
    F: FnOnce(HttpRequest, Principal) -> Fut,
    Fut: std::future::Future<Output = HttpResponse>,
{
    gate(app, req, |req| async move {
        match authenticate(app, req.method(), req.uri(), req.headers()).await {
            Ok(principal) => inner(req, principal).await,
            Err(refused) => refused.into_response(),
        }
    })
    .await
}

/// Any other path: 404 (a preflight from an allowed Origin 204, as on every path),
/// after the same Host / Origin check: a refused Origin learns nothing about which
/// paths exist.
pub(super) async fn not_found(State(app): State<Arc<App>>, req: HttpRequest) -> HttpResponse {
    gate(&app, req, |_| async {
        StatusCode::NOT_FOUND.into_response()
    })
    .await
}

/// Host / Origin (403), a CORS preflight from an allowed Origin answered, else
/// `inner`; every answer gets the CORS headers its Origin earned.
async fn gate<F, Fut>(app: &App, req: HttpRequest, inner: F) -> HttpResponse
where
    F: FnOnce(HttpRequest) -> Fut,
    Fut: std::future::Future<Output = HttpResponse>,
{
    let cors_origin = match check_origin(app, &req) {
        Ok(o) => o,
        Err(refused) => return refused.into_response(),
    };
    // Preflights never need a session or credentials.
    let mut resp = if req.method() == Method::OPTIONS && cors_origin.is_some() {
        preflight()
    } else {
        inner(req).await
    };
    with_cors(&mut resp, cors_origin);
    resp
}

/// The CORS headers for an allowed Origin.
fn with_cors(resp: &mut HttpResponse, origin: Option<HeaderValue>) {
    if let Some(o) = origin {
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate"),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
}

/// [`admit`] as a middleware: the principal goes into the request's extensions.
pub(super) async fn admit_layer(
    State(app): State<Arc<App>>,
    req: HttpRequest,
    next: Next,
) -> HttpResponse {
    admit(&app, req, |mut req, principal| {
        req.extensions_mut().insert(principal);
        next.run(req)
    })
    .await
}

/// The caller's [`Principal`], or the refusal (401 / 400 with `WWW-Authenticate`).
/// (The request's parts, not the request: its body is not `Sync`.)
async fn authenticate(
    app: &App,
    method: &Method,
    uri: &axum::http::Uri,
    headers: &axum::http::HeaderMap,
) -> Result<Principal, FrontError> {
    let auth = app.auth();
    match auth.authenticate(headers, uri.query()).await {
        Ok(principal) => Ok(principal),
        Err(e) => {
            // The reason only: never the presented credentials.
            if matches!(e, AuthError::Missing | AuthError::NoToken) {
                tracing::debug!(%method, path = uri.path(), "request refused: no credentials");
            } else {
                tracing::info!(%method, path = uri.path(), reason = %e, "request refused: bad credentials");
            }
            app.metrics
                .auth_failures
                .with_label_values(&[e.label()])
                .inc();
            let challenge = auth.challenge(&e);
            Err(FrontError::Unauthorized(e, challenge))
        }
    }
}

/// `GET /.well-known/oauth-protected-resource[/<path>]`: the RFC 9728 metadata,
/// unauthenticated and readable from any origin (browser-based clients fetch it).
pub(super) async fn resource_metadata(
    State(app): State<Arc<App>>,
    req: HttpRequest,
) -> HttpResponse {
    let auth = app.auth();
    let Some(rs) = auth.oauth() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut resp = if req.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        axum::Json(rs.metadata(req.uri().path())).into_response()
    };
    let h = resp.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("MCP-Protocol-Version, Content-Type, Authorization"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    resp
}

/// Host / Origin against the DNS-rebinding policy (403 if refused); the Origin to
/// echo in CORS headers when there is one.
fn check_origin(app: &App, req: &HttpRequest) -> Result<Option<HeaderValue>, FrontError> {
    let authority = req.uri().authority().map(|a| a.as_str());
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or(authority);
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok());
    if let Err(why) = app.origin.check(host, origin) {
        tracing::info!(%why, "request refused (DNS-rebinding protection)");
        return Err(FrontError::Forbidden(why));
    }
    // The Origin passed the policy: browsers may talk to us (CORS).
    Ok(origin.and_then(|o| HeaderValue::from_str(o).ok()))
}

/// The answer to a CORS preflight from an allowed Origin.
fn preflight() -> HttpResponse {
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
}

/// The address of the connection a request came on, as the router's handlers learn it
/// (Gantry's own listener puts it there; the MCP endpoint is told it directly).
pub(super) fn peer_of(extensions: &axum::http::Extensions) -> Option<std::net::SocketAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0)
}

/// Whom a new session counts against: its principal when authenticated, else the
/// client's address (an IPv6 client by its /64, which one host can fill at will).
/// `None` when the address is unknown (not served by Gantry's own listener).
pub(super) fn quota_key(
    principal: &crate::auth::Principal,
    peer: Option<std::net::SocketAddr>,
) -> Option<String> {
    use std::net::IpAddr;
    if !principal.is_anonymous() {
        return Some(format!("principal {}", principal.as_str()));
    }
    Some(match peer?.ip() {
        IpAddr::V4(v4) => format!("ip {v4}"),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("ip {v4}"),
            None => {
                let [a, b, c, d, ..] = v6.segments();
                format!("ip {a:x}:{b:x}:{c:x}:{d:x}::/64")
            }
        },
    })
}

/// Before anything is dispatched: a request for an item whose `[[auth.rules]]` scopes
/// the caller's token lacks is refused as a whole with 403 `insufficient_scope`, so
/// the client can step up and resend it (nothing of it ran). Items the caller may
/// not use at all are left to the router, which answers as for an unknown one.
pub(super) fn step_up<'a>(
    app: &App,
    principal: &crate::auth::Principal,
    requests: impl IntoIterator<Item = &'a crate::jsonrpc::Request>,
) -> Result<(), FrontError> {
    use crate::auth::oauth::OAuthError;
    use crate::auth::policy::{item_of, Decision};
    let Some(access) = app.access(principal) else {
        return Ok(());
    };
    for r in requests {
        let Some((item, name)) = item_of(&r.method, r.params.as_ref()) else {
            continue;
        };
        if let Decision::StepUp { missing, ask } = access.decide(item, &name) {
            tracing::info!(principal = %principal, method = %r.method, scope = %missing, "request needs a step-up");
            app.metrics
                .auth_failures
                .with_label_values(&["insufficient_scope"])
                .inc();
            let e = AuthError::Token(OAuthError::InsufficientScope { missing, ask });
            let challenge = app.auth().challenge(&e);
            return Err(FrontError::Unauthorized(e, challenge));
        }
    }
    Ok(())
}

/// How a limited `tools/call` alone in its POST can be answered.
#[derive(Clone, Copy)]
pub(super) enum Answer {
    /// In the POST's response (the era says how a result is shaped).
    Inline { stateless: bool },
    /// Not at all (the legacy transport answers on its SSE stream): 429.
    Refuse,
}

/// Rate limits, before anything is dispatched (and before a session is created). A
/// limited `tools/call` alone in its POST is answered as the rule says (JSON-RPC
/// error `-32029`, or a tool result with `isError`); anything else limited refuses
/// the POST as a whole: 429 with `Retry-After`. Returns the refusal, if any.
pub(super) async fn rate_limit<'a>(
    app: &App,
    principal: &crate::auth::Principal,
    peer: Option<std::net::IpAddr>,
    headers: &axum::http::HeaderMap,
    requests: impl IntoIterator<Item = &'a crate::jsonrpc::Request>,
    answer: Answer,
) -> Option<HttpResponse> {
    let limits = app.limits()?;
    const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
    let forwarded = headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok());
    let ip = limits.client_ip(peer, forwarded);
    let requests: Vec<&crate::jsonrpc::Request> = requests.into_iter().collect();
    let alone = requests.len() == 1;
    for r in &requests {
        let name = match r.method.as_str() {
            "tools/call" | "prompts/get" => crate::jsonrpc::string_field(r.params.as_ref(), "name"),
            _ => None,
        };
        let ask = crate::limits::Ask {
            principal: principal.as_str(),
            ip,
            method: &r.method,
            name: name.as_deref(),
            backend: name.as_deref().and_then(|n| app.backend_of(n)),
        };
        let Err(limited) = limits.check(&ask).await else {
            continue;
        };
        tracing::info!(principal = %principal, method = %r.method, rule = %limited.rule, "rate limited");
        if let (true, "tools/call", Answer::Inline { stateless }) =
            (alone, r.method.as_str(), answer)
        {
            return Some(limited_call(r, &limited, stateless));
        }
        return Some(FrontError::RateLimited(limited).into_response());
    }
    None
}

/// The answer to a limited `tools/call`: an error, or a tool result a model reads.
fn limited_call(
    r: &crate::jsonrpc::Request,
    limited: &crate::limits::Limited,
    stateless: bool,
) -> HttpResponse {
    use crate::jsonrpc::{Response, RpcError};
    let resp = if limited.tool_result {
        let mut result = serde_json::json!({
            "content": [{ "type": "text", "text": limited.message() }],
            "isError": true,
            "_meta": { "io.gantry/rateLimit": limited.data() },
        });
        if let (true, Some(obj)) = (stateless, result.as_object_mut()) {
            obj.insert(
                "resultType".into(),
                serde_json::json!(crate::mcp::results::COMPLETE),
            );
        }
        Response::ok(r.id.clone(), crate::jsonrpc::to_raw(&result))
    } else {
        Response::err(
            Some(r.id.clone()),
            &RpcError::new(crate::limits::RATE_LIMITED, limited.message())
                .with_data(limited.data()),
        )
    };
    super::http::json_response(resp.to_json())
}

/// A client's `traceparent` (and `tracestate`) header, for requests that carry no
/// trace context in `_meta`: moved into `_meta`, where the MCP specification carries
/// it to every backend (stdio ones have no headers).
pub(super) fn adopt_trace_header<'a>(
    headers: &axum::http::HeaderMap,
    messages: impl IntoIterator<Item = &'a mut crate::jsonrpc::Message>,
) {
    const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
    const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
    let Some(traceparent) = headers.get(TRACEPARENT).and_then(|v| v.to_str().ok()) else {
        return;
    };
    let w3c = crate::telemetry::trace::W3c {
        traceparent: traceparent.trim().to_owned(),
        tracestate: headers
            .get(TRACESTATE)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_owned()),
    };
    if w3c.span_context().is_none() {
        return;
    }
    for m in messages {
        if let crate::jsonrpc::Message::Request(r) = m {
            if crate::telemetry::trace::from_meta(r.params.as_ref()).is_none() {
                r.params = crate::telemetry::trace::with_meta(r.params.take(), &w3c);
            }
        }
    }
}

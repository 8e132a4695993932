//! HTTP building blocks of the front door: what a client's `Accept` allows, bodies
//! read within the limit, JSON and SSE responses.

use super::error::FrontError;
use crate::front::App;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};

pub(super) fn json_response(body: String) -> HttpResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Which SSE stream (the `kind` label of `gantry_sse_streams`).
#[derive(Clone, Copy)]
pub(crate) enum SseKind {
    /// A POST's response stream (or its resumption).
    Response,
    /// The standalone GET stream, or a stateless `subscriptions/listen`.
    Listen,
    /// The legacy HTTP+SSE transport's stream.
    Legacy,
}

impl SseKind {
    fn label(self) -> &'static str {
        match self {
            Self::Response => "response",
            Self::Listen => "listen",
            Self::Legacy => "legacy",
        }
    }
}

/// Counts an open SSE stream until it is dropped.
struct OpenStream(prometheus::IntGauge);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pub(crate) fn sse_response(
    app: &App,
    kind: SseKind,
    body: impl futures::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send + 'static,
) -> HttpResponse {
    use futures::StreamExt as _;
    let gauge = app.metrics.sse_streams.with_label_values(&[kind.label()]);
    gauge.inc();
    let open = OpenStream(gauge);
    let body = body.map(move |chunk| {
        let _counted = &open;
        chunk
    });
    with_sse_headers(HttpResponse::new(Body::from_stream(body)))
}

/// Marks a response as an SSE stream (type, no caching, no proxy buffering).
pub(super) fn with_sse_headers(mut resp: HttpResponse) -> HttpResponse {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    // A constant name: not parsed from a string per response.
    const X_ACCEL_BUFFERING: header::HeaderName =
        header::HeaderName::from_static("x-accel-buffering");
    h.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    resp
}

/// What the client's `Accept` allows.
#[derive(Clone, Copy)]
pub(crate) struct Accepts {
    pub(super) json: bool,
    pub(super) sse: bool,
}

impl Accepts {
    pub(super) fn from(headers: &HeaderMap) -> Self {
        // What the specification has clients send, and nearly all do: one compare
        // instead of splitting and trimming (1.3k instructions per request).
        let mut all = headers.get_all(header::ACCEPT).iter();
        if let (Some(v), None) = (all.next(), all.next()) {
            if matches!(
                v.as_bytes(),
                b"application/json, text/event-stream" | b"text/event-stream, application/json"
            ) {
                return Self {
                    json: true,
                    sse: true,
                };
            }
        }
        let mut json = false;
        let mut sse = false;
        let mut any = false;
        let mut stated = false;
        let parts = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .inspect(|_| stated = true)
            .flat_map(|v| v.split(','));
        for part in parts {
            let mime = part.split(';').next().unwrap_or_default().trim();
            let is = |m: &str| mime.eq_ignore_ascii_case(m);
            if is("application/json") || is("application/*") {
                json = true;
            } else if is("text/event-stream") || is("text/*") {
                sse = true;
            } else if is("*/*") {
                any = true;
            }
        }
        if !stated {
            // Lenient: a client that states nothing accepts what it gets.
            return Self {
                json: true,
                sse: true,
            };
        }
        Self {
            json: json || any,
            sse: sse || any,
        }
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
    let within = app.cfg.server.body_timeout;
    match tokio::time::timeout(within, axum::body::to_bytes(body, limit)).await {
        Ok(read) => read.map_err(|_| FrontError::TooLarge(limit)),
        Err(_) => Err(FrontError::BodyTimeout(within)),
    }
}

pub(super) fn session_header(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(crate::mcp::header::SESSION_ID)
        .and_then(|v| v.to_str().ok())
}

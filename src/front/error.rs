//! The front door's error type: every way a request is refused at the HTTP layer,
//! each mapped to one status and one JSON-RPC error body (`"id": null`) in exactly
//! one place, [`FrontError::into_response`].

use crate::auth::AuthError;
use crate::fault::Fault;
use crate::jsonrpc::{code, ParseError, RpcError};
use crate::mcp::SESSION_VERSIONS;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Why a request was refused before dispatch. The message is what the client sees.
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    /// Host or Origin not allowed (DNS-rebinding protection): 403.
    #[error("Forbidden: {0}")]
    Forbidden(String),
    /// No valid credentials (401), unreadable ones (400), a token without a required
    /// scope (403), tokens that cannot be checked now (503); decided before anything
    /// else but the Host/Origin check. Carries its `WWW-Authenticate` challenge.
    #[error("{0}")]
    Unauthorized(AuthError, String),
    /// Method other than POST/GET/DELETE on the MCP endpoint: 405.
    #[error("Method not allowed")]
    MethodNotAllowed,
    /// `Accept` allows nothing Gantry can send: 406.
    #[error("Not Acceptable: {0}")]
    NotAcceptable(&'static str),
    /// `Content-Type` is not JSON: 415.
    #[error("Unsupported Media Type: Content-Type must be application/json")]
    UnsupportedMediaType,
    /// Body over `server.max_body_bytes`: 413.
    #[error("Request body larger than {0} bytes")]
    TooLarge(usize),
    /// The body did not arrive whole within `server.body_timeout`: 408.
    #[error("Request Timeout: the request body did not arrive within {}", crate::telemetry::human(*.0))]
    BodyTimeout(std::time::Duration),
    /// Body is not JSON: 400, -32700.
    #[error("Parse error: {0}")]
    Parse(String),
    /// Body is JSON but not an acceptable JSON-RPC message: 400, -32600.
    #[error("Invalid Request: {0}")]
    Invalid(String),
    /// A required header or parameter is missing or malformed: 400.
    #[error("Bad Request: {0}")]
    BadRequest(String),
    /// `MCP-Protocol-Version` names a version Gantry does not speak: 400.
    #[error("Bad Request: unsupported MCP-Protocol-Version `{0}` (supported: {versions})", versions = SESSION_VERSIONS.join(", "))]
    UnsupportedVersion(String),
    /// Unknown, expired, ended or someone else's session: 404.
    #[error("Session not found")]
    SessionNotFound,
    /// `Last-Event-ID` names a stream this session no longer keeps: 404.
    #[error("Last-Event-ID names a stream that no longer exists")]
    StreamGone,
    /// Shutting down, or the session table is full: 503.
    #[error("{0}")]
    Unavailable(&'static str),
    /// This client's session quota forbids a new session now: 429 with `Retry-After`.
    #[error("Too Many Requests: {0}")]
    Quota(#[from] crate::session::QuotaError),
    /// A `[[limits.rules]]` rule refuses the request now: 429 with `Retry-After`.
    #[error("Too Many Requests: {}", .0.message())]
    RateLimited(crate::limits::Limited),
}

impl From<crate::session::SessionError> for FrontError {
    fn from(e: crate::session::SessionError) -> Self {
        use crate::session::SessionError;
        match e {
            SessionError::NotFound => Self::SessionNotFound,
            SessionError::Full => Self::Unavailable("Too many sessions; try again later"),
            SessionError::Quota(q) => Self::Quota(q),
        }
    }
}

impl From<ParseError> for FrontError {
    fn from(e: ParseError) -> Self {
        match e {
            ParseError::Json(m) => Self::Parse(m),
            ParseError::Invalid(m) => Self::Invalid(m.to_owned()),
        }
    }
}

impl FrontError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Unauthorized(e, _) => {
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED)
            }
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Parse(_)
            | Self::Invalid(_)
            | Self::BadRequest(_)
            | Self::UnsupportedVersion(_) => StatusCode::BAD_REQUEST,
            Self::SessionNotFound | Self::StreamGone => StatusCode::NOT_FOUND,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Quota(_) | Self::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// Whose fault the refusal is: the client's, except when Gantry cannot take
    /// the request now (shutting down, session table full).
    pub fn fault(&self) -> Fault {
        match self {
            Self::Unavailable(_) => Fault::Gateway,
            Self::Unauthorized(e, _) if e.status() == 503 => Fault::Gateway,
            _ => Fault::Client,
        }
    }

    /// The JSON-RPC error code in the body: the specific one where JSON-RPC or MCP
    /// has it (parse error, invalid request for a message or transport the request
    /// got wrong, session error), else the implementation-defined server error
    /// (credentials, Origin, overload), whose HTTP status says more.
    pub fn code(&self) -> i64 {
        match self {
            Self::Parse(_) => code::PARSE_ERROR,
            Self::Invalid(_)
            | Self::TooLarge(_)
            | Self::BodyTimeout(_)
            | Self::MethodNotAllowed
            | Self::NotAcceptable(_)
            | Self::UnsupportedMediaType
            | Self::BadRequest(_)
            | Self::UnsupportedVersion(_) => code::INVALID_REQUEST,
            Self::SessionNotFound | Self::StreamGone => code::SESSION_ERROR,
            Self::Forbidden(_) | Self::Unauthorized(..) | Self::Unavailable(_) | Self::Quota(_) => {
                code::SERVER_ERROR
            }
            Self::RateLimited(_) => crate::limits::RATE_LIMITED,
        }
    }
}

impl IntoResponse for FrontError {
    fn into_response(self) -> Response {
        let mut err = RpcError::new(self.code(), self.to_string());
        if let Self::Quota(q) = &self {
            let ms = u64::try_from(q.retry_after().as_millis()).unwrap_or(u64::MAX);
            err = err.with_data(serde_json::json!({ "retryAfterMs": ms }));
        }
        if let Self::RateLimited(l) = &self {
            err = err.with_data(l.data());
        }
        let body = err.to_null_id_response();
        let mut resp = (
            self.status(),
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if matches!(self, Self::TooLarge(_) | Self::BodyTimeout(_)) {
            // The rest of the body was not read: the connection cannot carry another
            // request, and the client must not reuse it.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let retry = match &self {
            Self::Quota(q) => Some(q.retry_after()),
            Self::RateLimited(l) => Some(l.retry_after),
            _ => None,
        };
        if let Some(wait) = retry {
            // Whole seconds, rounded up (RFC 9110 delay-seconds).
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if matches!(self, Self::MethodNotAllowed) {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
        }
        if let Self::Unauthorized(e, challenge) = &self {
            let value = HeaderValue::from_str(challenge)
                .unwrap_or_else(|_| HeaderValue::from_static(e.challenge()));
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, value);
            if e.status() == 503 {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
        }
        resp
    }
}

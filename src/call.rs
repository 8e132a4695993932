//! The types that carry traffic *up* from backends to clients.
//!
//! A backend connection never knows which era or transport a client speaks: every
//! message it must hand to a client goes through a [`Downstream`] sink, implemented by
//! the front door (an SSE stream of one request, or the session's standalone stream).

use crate::jsonrpc::Notification;
use crate::jsonrpc::Raw;
use crate::mcp::Era;
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The outcome of a request answered by a client: its `result`, or its `error` object.
pub type ClientAnswer = Result<Raw, Raw>;

/// Where a backend's messages for one client go.
pub trait Downstream: Send + Sync {
    /// Delivers a notification (progress, log, list_changed …), already rewritten.
    fn notify(&self, notification: Notification);
    /// Sends a server→client request (sampling, elicitation, roots) to the client and
    /// resolves with its answer, or with an error object if the client cannot be asked.
    fn ask(&self, method: String, params: Option<Raw>) -> BoxFuture<'static, ClientAnswer>;
}

/// A shared handle on a [`Downstream`].
pub type Sink = Arc<dyn Downstream>;

/// One client request travelling through Gantry.
#[derive(Clone)]
pub struct CallCtx {
    /// Where nested traffic caused by this request goes (its own SSE stream when it
    /// has one, else the session's standalone stream).
    pub sink: Sink,
    /// Cancelled when the client cancels the request or its session ends.
    pub cancel: CancellationToken,
    /// Who is asking, as a stateless-era backend must be told on every request.
    pub client: ClientView,
    /// How long the backend has to answer, when not its `request_timeout`
    /// (`[[limits.timeouts]]`).
    pub timeout: Option<std::time::Duration>,
    /// The client request's span, when tracing is on: backend hops are its children.
    pub trace: Option<crate::telemetry::trace::RequestSpan>,
}

/// What a backend of the stateless era needs to know about the client with each
/// request (session-era backends learned it once, at `initialize`).
#[derive(Clone)]
pub struct ClientView {
    /// The client's capabilities (`None`: Gantry's own request, declares none).
    pub capabilities: Option<Capabilities>,
    /// The least severe log level the client wants (`None`: no log messages).
    pub log_level: Option<&'static str>,
    /// The client's era. A stateless-era client gets an `input_required` result as
    /// is; a session-era client gets it translated into server→client requests.
    pub era: Era,
    /// The caller under `[[auth.rules]]` (`None`: no rules, or Gantry's own request).
    pub access: Option<Arc<crate::auth::policy::Access>>,
}

/// The capabilities a client declared: the JSON object's text, kept as the client
/// wrote it (a stateless-era client sends it with every request), so that relaying
/// it to a stateless-era backend neither parses nor serializes it.
#[derive(Clone, Debug)]
pub struct Capabilities(Arc<str>);

impl Capabilities {
    /// Capabilities from the text of a JSON object, already checked to be one.
    pub fn of_object_text(text: &str) -> Self {
        // JSON text: its whitespace is ASCII.
        Self(text.trim_ascii().into())
    }

    /// Capabilities from a parsed value (`initialize`), written once.
    pub fn of_value(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Object(m) if !m.is_empty() => Self(
                serde_json::to_string(m)
                    .unwrap_or_else(|_| "{}".to_owned())
                    .into(),
            ),
            _ => Self("{}".into()),
        }
    }

    /// Whether the client declared capability `name` (a top-level key).
    pub fn declares(&self, name: &str) -> bool {
        crate::jsonrpc::members::member(&self.0, name).is_some()
    }

    /// The JSON object's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for ClientView {
    /// Gantry's own requests: no capabilities, no logs, session-era results.
    fn default() -> Self {
        Self {
            capabilities: None,
            log_level: None,
            era: Era::Session,
            access: None,
        }
    }
}

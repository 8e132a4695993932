//! Session-era-only mode (`--session-era-only`): makes the example server look,
//! on the wire, like a server written before protocol 2026-07-28, so gateway tests
//! can exercise era translation against a real session-era backend.
//!
//! rmcp 3.11 serves both eras on the same transport and picks the era from each
//! request (Streamable HTTP) or from the first request (stdio); it has no switch
//! to turn the stateless era off. Narrowing the supported versions is not enough:
//! rmcp would still answer stateless requests itself with 2026-era errors
//! (`-32602` for missing `_meta`, `-32022` for an unsupported version), which a
//! pre-2026 server never sends. So a thin gate in front of rmcp turns away what a
//! 2025-11-25 server would turn away, before rmcp sees it:
//!
//! - `server/discover` → `-32601` Method not found (it does not exist before 2026);
//! - over HTTP, an `MCP-Protocol-Version` header naming a version newer than
//!   2025-11-25 → `400` "Unsupported MCP-Protocol-Version", and any message but
//!   `initialize` without `Mcp-Session-Id` → `400` "Session ID is required"
//!   (the plain-text bodies rmcp's session transport uses);
//! - over stdio, any request but `initialize`/`ping` before `initialize` →
//!   `-32600` (the server is not initialized); notifications before it are dropped;
//! - the stateless-era `_meta` keys (`io.modelcontextprotocol/protocolVersion`,
//!   `…/clientCapabilities`, `…/clientInfo`, `…/logLevel`) are removed from every
//!   request that gets through, as a server that does not know them ignores them.

use std::future::Future;

use axum::{
    body::Body,
    extract::Request,
    http::{
        header::{CONTENT_LENGTH, CONTENT_TYPE},
        HeaderValue, Method, StatusCode,
    },
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, ErrorCode, GetMeta, ServerJsonRpcMessage},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
    ErrorData, RoleServer,
};
use serde_json::{json, Value};

use crate::state::Eras;

/// The request `_meta` keys of the stateless era (2026-07-28, SEP-2575).
const STATELESS_META_KEYS: [&str; 4] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/logLevel",
];
const DISCOVER: &str = "server/discover";
const INITIALIZE: &str = "initialize";
/// Largest POST body the HTTP gate reads (rmcp's own default limit).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

fn discover_not_found() -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("Method not found: {DISCOVER}"),
        None,
    )
}

// ------------------------------------------------------------------ stdio

/// A stdio transport that admits only session-era traffic (see the module docs).
pub(super) struct SessionEraOnly<T> {
    inner: T,
    initialized: bool,
}

impl<T> SessionEraOnly<T> {
    pub(super) fn new(inner: T) -> Self {
        Self {
            inner,
            initialized: false,
        }
    }
}

/// What the gate does with one inbound message.
enum Verdict {
    Pass(ClientJsonRpcMessage),
    Drop,
    Reply(ServerJsonRpcMessage),
}

fn gate(mut message: ClientJsonRpcMessage, initialized: &mut bool) -> Verdict {
    let ClientJsonRpcMessage::Request(request) = &mut message else {
        return if *initialized {
            Verdict::Pass(message)
        } else {
            Verdict::Drop
        };
    };
    let id = request.id.clone();
    match &request.request {
        ClientRequest::DiscoverRequest(_) => {
            return Verdict::Reply(ServerJsonRpcMessage::error(discover_not_found(), Some(id)));
        }
        ClientRequest::InitializeRequest(_) => *initialized = true,
        ClientRequest::PingRequest(_) => {}
        _ if !*initialized => {
            return Verdict::Reply(ServerJsonRpcMessage::error(
                ErrorData::invalid_request("Server not initialized: send initialize first", None),
                Some(id),
            ));
        }
        _ => {}
    }
    let meta = request.request.get_meta_mut();
    for key in STATELESS_META_KEYS {
        meta.remove(key);
    }
    Verdict::Pass(message)
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for SessionEraOnly<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let message = self.inner.receive().await?;
            match gate(message, &mut self.initialized) {
                Verdict::Pass(message) => return Some(message),
                Verdict::Drop => {}
                Verdict::Reply(reply) => {
                    if let Err(error) = self.inner.send(reply).await {
                        tracing::debug!(%error, "could not answer a refused message");
                        return None;
                    }
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

// ------------------------------------------------------------------- HTTP

fn plain(status: StatusCode, text: String) -> Response {
    (status, text).into_response()
}

fn jsonrpc_error(id: Option<Value>, error: &ErrorData) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": error });
    let mut response = (StatusCode::OK, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Axum middleware in front of rmcp's Streamable HTTP service (see the module docs).
pub(super) async fn http_gate(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let header_version = request
        .headers()
        .get("mcp-protocol-version")
        .map(|value| value.to_str().unwrap_or("<invalid>").to_owned());
    if let Some(version) = header_version {
        let known = Eras::SessionOnly
            .versions()
            .iter()
            .any(|supported| supported.as_str() == version);
        if !known {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("Bad Request: Unsupported MCP-Protocol-Version: {version}"),
            );
        }
    }
    let has_session = request.headers().contains_key("mcp-session-id");
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Payload Too Large".to_owned(),
            )
        }
    };
    // Not JSON: rmcp answers that itself.
    let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let method = message.get("method").and_then(Value::as_str);
    let is_request = message.get("id").is_some() && method.is_some();
    let is_initialize = is_request && method == Some(INITIALIZE);
    if !has_session && !is_initialize {
        return plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: Session ID is required".to_owned(),
        );
    }
    if is_request && method == Some(DISCOVER) {
        return jsonrpc_error(message.get("id").cloned(), &discover_not_found());
    }
    let mut stripped = false;
    if let Some(meta) = message
        .get_mut("params")
        .and_then(|params| params.get_mut("_meta"))
        .and_then(Value::as_object_mut)
    {
        for key in STATELESS_META_KEYS {
            stripped |= meta.remove(key).is_some();
        }
    }
    let mut parts = parts;
    let body = if stripped {
        parts.headers.remove(CONTENT_LENGTH);
        Body::from(message.to_string())
    } else {
        Body::from(bytes)
    };
    next.run(Request::from_parts(parts, body)).await
}

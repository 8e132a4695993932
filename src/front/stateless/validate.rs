//! Validation of a stateless-era request, in the order the conformance suite pins:
//! version header, `_meta`, header against `_meta`, supported version, `Mcp-Method` /
//! `Mcp-Name` against the body.

use crate::front::http::Heads;
use crate::front::stateless::clip;
use crate::front::stateless::input_capable;
use crate::front::stateless::Params;
use crate::jsonrpc::{code, RpcError};
use crate::mcp::meta::RequestMeta;
use crate::mcp::{all_versions, STATELESS_VERSIONS};
use axum::http::{HeaderValue, StatusCode};
use serde_json::json;

/// A refusal: HTTP status and JSON-RPC error.
pub(super) struct Refusal(pub(super) StatusCode, pub(super) RpcError);

pub(super) fn bad(code: i64, msg: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, RpcError::new(code, msg))
}

/// What a valid stateless request declared about its caller.
pub(super) struct Declared {
    pub(super) capabilities: crate::call::Capabilities,
    /// Log messages at or above this rank reach the client; `None`: none do.
    pub(super) log_rank: Option<u8>,
}

/// A header value as the spec compares it (see [`crate::mcp::header::decode`]);
/// `Err` when it is not valid.
pub(super) fn header_text(
    value: Option<&HeaderValue>,
) -> Result<Option<std::borrow::Cow<'_, str>>, ()> {
    match value {
        None => Ok(None),
        Some(v) => crate::mcp::header::decode(v.as_bytes()).map(Some).ok_or(()),
    }
}

pub(super) fn validate(
    heads: &Heads<'_>,
    method: &str,
    params: &Params<'_>,
) -> Result<Declared, Refusal> {
    let Some(header_version) = heads.protocol_version else {
        return Err(bad(
            code::HEADER_MISMATCH,
            "Header mismatch: the MCP-Protocol-Version header is required",
        ));
    };
    let header_version = header_version.to_str().unwrap_or_default().trim_ascii();
    let meta = RequestMeta::read(params.meta_members())
        .map_err(|e| bad(code::INVALID_PARAMS, e.to_string()))?;
    let version = meta.protocol_version.as_ref();
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
    match header_text(heads.method) {
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
        let body = params.str(field).unwrap_or_default();
        let body = body.as_ref();
        match header_text(heads.name) {
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
    let log_rank = meta
        .log_rank()
        .map_err(|e| bad(code::INVALID_PARAMS, e.to_string()))?;
    // An object (checked by `read`): relayed as the client wrote it.
    let capabilities = crate::call::Capabilities::of_object_text(meta.client_capabilities);
    Ok(Declared {
        capabilities,
        log_rank,
    })
}

//! Who a route is for: what a client said in `initialize` (or what Gantry says for
//! stateless callers), and the caller's era.

use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, to_raw, RpcError};
use crate::mcp::{Era, LATEST_SESSION_VERSION};
use serde_json::{json, Value};

/// What a client said in `initialize` (or, for stateless-era callers, what Gantry
/// says for them when it initializes a session-era backend on their behalf).
#[derive(Debug, Clone)]
pub struct ClientInit {
    /// The version the client asked for.
    pub protocol_version: String,
    /// Its capabilities.
    pub capabilities: Value,
    /// Its implementation info.
    pub client_info: Value,
}

impl ClientInit {
    /// Reads `initialize` params; missing pieces are a precise `-32602`.
    pub fn parse(params: Option<&Raw>) -> Result<Self, RpcError> {
        let p: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let protocol_version = p
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                RpcError::new(
                    code::INVALID_PARAMS,
                    "initialize: params.protocolVersion (a string) is required",
                )
            })?
            .to_owned();
        let capabilities = match p.get("capabilities") {
            Some(c @ Value::Object(_)) => c.clone(),
            None => json!({}),
            Some(_) => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    "initialize: params.capabilities must be an object",
                ))
            }
        };
        let client_info = p
            .get("clientInfo")
            .cloned()
            .unwrap_or_else(|| json!({"name":"unknown","version":"0"}));
        Ok(Self {
            protocol_version,
            capabilities,
            client_info,
        })
    }

    /// What Gantry declares to a session-era backend for stateless-era callers:
    /// every client capability it can translate into `input_required` (a caller
    /// that did not declare one gets `-32021` when the backend asks for it).
    pub fn for_stateless_callers() -> Self {
        Self {
            protocol_version: LATEST_SESSION_VERSION.to_owned(),
            capabilities: json!({ "sampling": {}, "elicitation": {}, "roots": {} }),
            client_info: crate::mcp::gantry_implementation(),
        }
    }

    /// The version Gantry answers with: the client's if supported, else the newest.
    pub fn negotiated(&self) -> &'static str {
        crate::mcp::negotiate_session(&self.protocol_version)
    }

    pub(super) fn params(&self) -> Raw {
        to_raw(&json!({
            "protocolVersion": self.negotiated(),
            "capabilities": self.capabilities,
            "clientInfo": self.client_info,
        }))
    }
}

/// Who a route is for: the era its callers speak, and whether Gantry can tell
/// them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The callers' era.
    pub era: Era,
    /// Stateless-era callers Gantry cannot tell apart (no authentication): each
    /// call to a `per-session` backend that lacks the stateless era gets a
    /// connection of its own, so no caller inherits another's connection state.
    pub per_call: bool,
}

impl Caller {
    /// A session-era client session.
    pub const SESSION: Caller = Caller {
        era: Era::Session,
        per_call: false,
    };
}

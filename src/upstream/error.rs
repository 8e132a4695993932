//! Why a request to a backend failed, and the JSON-RPC error a client gets for it.

use crate::jsonrpc::{code, RpcError};
use std::time::Duration;

/// Why a request to a backend failed. The JSON-RPC error the client sees is made in
/// [`UpstreamError::to_rpc`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The backend could not be started or reached, or has not finished initializing.
    #[error("backend `{backend}` is unavailable: {reason}{}", stderr_ends(stderr))]
    Unavailable {
        /// Backend name.
        backend: String,
        /// What went wrong.
        reason: String,
        /// A stdio backend that failed before it was ready: the last lines of its
        /// stderr (bounded), where its own explanation usually is.
        stderr: Vec<String>,
    },
    /// The backend exited or its connection broke while the request was in flight.
    #[error("backend `{backend}` failed while handling the request: {reason}")]
    Crashed {
        /// Backend name.
        backend: String,
        /// Exit status or transport error.
        reason: String,
    },
    /// No answer within the configured timeout; the request was cancelled upstream.
    #[error("backend `{backend}` did not answer within {}", crate::telemetry::human(*after))]
    Timeout {
        /// Backend name.
        backend: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// The client cancelled the request (or its session ended).
    #[error("request cancelled")]
    Cancelled,
    /// The connection's in-flight limit and queue are both full.
    #[error("backend `{backend}` is busy: {in_flight} requests in flight and the queue is full")]
    Busy {
        /// Backend name.
        backend: String,
        /// The in-flight limit.
        in_flight: usize,
    },
    /// The backend's connection limit is reached.
    #[error("backend `{backend}` has reached its connection limit ({max})")]
    AtCapacity {
        /// Backend name.
        backend: String,
        /// `pool.max_connections`.
        max: usize,
    },
    /// The backend answered with something that is not acceptable.
    #[error("backend `{backend}` sent an invalid reply: {reason}")]
    Protocol {
        /// Backend name.
        backend: String,
        /// What was wrong.
        reason: String,
    },
    /// The connection has been shut down.
    #[error("backend `{backend}` connection is closed")]
    Closed {
        /// Backend name.
        backend: String,
    },
}

/// `; its stderr ends: <last line>` when there is one.
fn stderr_ends(stderr: &[String]) -> String {
    stderr
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!("; its stderr ends: {}", l.trim()))
        .unwrap_or_default()
}

impl UpstreamError {
    /// Whose fault the failure is: the backend's, except for Gantry's own limits
    /// (busy, at capacity) and the client's cancellation.
    pub fn fault(&self) -> crate::fault::Fault {
        use crate::fault::Fault;
        match self {
            Self::Busy { .. } | Self::AtCapacity { .. } => Fault::Gateway,
            Self::Cancelled => Fault::Client,
            Self::Unavailable { .. }
            | Self::Crashed { .. }
            | Self::Timeout { .. }
            | Self::Protocol { .. }
            | Self::Closed { .. } => Fault::Backend,
        }
    }

    /// The JSON-RPC error a client gets for this failure.
    pub fn to_rpc(&self) -> RpcError {
        let backend = match self {
            Self::Unavailable { backend, .. }
            | Self::Crashed { backend, .. }
            | Self::Timeout { backend, .. }
            | Self::Protocol { backend, .. }
            | Self::Busy { backend, .. }
            | Self::AtCapacity { backend, .. }
            | Self::Closed { backend } => Some(backend.clone()),
            Self::Cancelled => None,
        };
        let code = match self {
            Self::Timeout { .. } | Self::Cancelled => code::REQUEST_TIMEOUT,
            _ => code::SERVER_ERROR,
        };
        let err = RpcError::new(code, self.to_string());
        match (backend, self) {
            (Some(b), Self::Unavailable { stderr, .. }) if !stderr.is_empty() => {
                err.with_data(serde_json::json!({ "backend": b, "stderr": stderr }))
            }
            (Some(b), _) => err.with_data(serde_json::json!({ "backend": b })),
            (None, _) => err,
        }
    }
}

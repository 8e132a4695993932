//! Whose fault a failure is (pingora's habit): the client's, Gantry's, or a
//! backend's. One fact per error, from which the JSON-RPC code, the HTTP status and
//! the metrics outcome follow, so no layer has to guess it again.

/// Who caused a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The request itself was wrong or not allowed (4xx; retrying it unchanged fails).
    Client,
    /// Gantry could not serve it now (limits, shutdown, its own bug; may be retried).
    Gateway,
    /// A backend failed or answered wrongly (may be retried).
    Backend,
}

impl Fault {
    /// The label of the fault in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Client => "client_error",
            Fault::Gateway => "gateway_error",
            Fault::Backend => "backend_error",
        }
    }

    /// Whether the same request may succeed if sent again later.
    pub fn retryable(self) -> bool {
        !matches!(self, Fault::Client)
    }
}

//! Backend connections: stdio child processes and Streamable HTTP servers.
//!
//! A [`Conn`] is one MCP client session with one backend. It owns the upstream id
//! space: every forwarded request gets a fresh integer id from a per-connection
//! counter, and the pending table maps it back to the exact call (its reply channel
//! and its [`Sink`]), never to the client's id — so clients that reuse ids can never
//! be cross-wired. Progress tokens are rewritten the same way. The transport tasks
//! (`stdio`, `http`) only move bytes; everything id-shaped happens in [`core`].
//!
//! Invariants: a pending entry is removed on response, cancel, timeout, crash and
//! shutdown; nothing the backend sends can panic Gantry; a crashed backend fails its
//! in-flight requests at once with an error naming it, restarts with backoff and
//! re-initializes.

mod core;
mod http;
mod stdio;

pub use self::core::{Conn, InitInfo};

use crate::mcp::Era;

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;

/// Counters of one configured backend, across all its connections (exported as
/// Prometheus metrics).
#[derive(Default)]
pub struct BackendStats {
    /// Backend messages attributable to no single client, dropped.
    pub unattributed: AtomicU64,
    /// Times a connection was restarted after its process exited or its session broke.
    pub restarts: AtomicU64,
    /// Live connections (counted from start until the connection is dropped).
    live: std::sync::atomic::AtomicUsize,
    conns: Mutex<Vec<Weak<core::Core>>>,
    /// Which eras the backend was found to speak (`era = "auto"`), so that later
    /// connections go straight to the right handshake.
    pub eras: EraSupport,
}

/// What Gantry has learnt about the eras one backend speaks: for each, unknown,
/// yes or no. Learnt by the handshakes of its connections.
#[derive(Default, Debug)]
pub struct EraSupport([std::sync::atomic::AtomicU8; 2]);

impl EraSupport {
    const YES: u8 = 1;
    const NO: u8 = 2;

    /// Whether the backend speaks `era` (`None`: not known yet).
    pub fn get(&self, era: Era) -> Option<bool> {
        match self.0.get(era.index())?.load(Ordering::Relaxed) {
            Self::YES => Some(true),
            Self::NO => Some(false),
            _ => None,
        }
    }

    /// Records what a handshake found out.
    pub fn set(&self, era: Era, speaks: bool) {
        if let Some(a) = self.0.get(era.index()) {
            a.store(if speaks { Self::YES } else { Self::NO }, Ordering::Relaxed);
        }
    }

    /// The era a caller of `era` is served in: its own unless the backend is known
    /// not to speak it (then the other, with translation).
    pub fn serving(&self, era: Era) -> Era {
        if self.get(era) == Some(false) && self.get(era.other()) != Some(false) {
            era.other()
        } else {
            era
        }
    }
}

impl BackendStats {
    fn track(&self, c: &std::sync::Arc<core::Core>) {
        let mut v = self.conns.lock();
        v.retain(|w| w.strong_count() > 0);
        v.push(std::sync::Arc::downgrade(c));
    }

    /// Reserves a connection under `max` (0 = no limit); false when the cap is reached.
    /// The reservation is released when the connection's core is dropped.
    pub fn try_reserve(&self, max: usize) -> bool {
        use std::sync::atomic::Ordering::AcqRel;
        let mut cur = self.live.load(Ordering::Acquire);
        loop {
            if max > 0 && cur >= max {
                return false;
            }
            match self
                .live
                .compare_exchange(cur, cur + 1, AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    pub(crate) fn release(&self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
    }

    /// (live connections, requests waiting for the backend) right now.
    pub fn load(&self) -> (usize, usize) {
        let mut v = self.conns.lock();
        v.retain(|w| w.strong_count() > 0);
        let live: Vec<_> = v
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| !c.is_closed())
            .collect();
        (live.len(), live.iter().map(|c| c.pending_len()).sum())
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

use crate::jsonrpc::{code, RpcError};
use std::time::Duration;

/// Why a request to a backend failed. The JSON-RPC error the client sees is made in
/// [`UpstreamError::to_rpc`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The backend could not be started or reached, or has not finished initializing.
    #[error("backend `{backend}` is unavailable: {reason}")]
    Unavailable {
        /// Backend name.
        backend: String,
        /// What went wrong.
        reason: String,
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
    #[error("backend `{backend}` did not answer within {}", humantime::format_duration(*after))]
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

impl UpstreamError {
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
            Self::Timeout { .. } => code::REQUEST_TIMEOUT,
            Self::Cancelled => code::REQUEST_TIMEOUT,
            _ => code::BACKEND_ERROR,
        };
        let err = RpcError::new(code, self.to_string());
        match backend {
            Some(b) => err.with_data(serde_json::json!({ "backend": b })),
            None => err,
        }
    }
}

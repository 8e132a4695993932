//! Backend connections: stdio child processes and Streamable HTTP servers.
//!
//! A [`Conn`] is one MCP client session with one backend. It owns the upstream id
//! space: every forwarded request gets a fresh integer id from a per-connection
//! counter, and the pending table (`pending`) maps it back to the exact call (its reply channel
//! and its [`Sink`]), never to the client's id — so clients that reuse ids can never
//! be cross-wired. Progress tokens are rewritten the same way. The transport tasks
//! (`stdio`, `http`) only move bytes; everything id-shaped happens in `core`, and the attribution of what a backend sends in `incoming`.
//!
//! Invariants: a pending entry is removed on response, cancel, timeout, crash and
//! shutdown; nothing the backend sends can panic Gantry; a crashed backend fails its
//! in-flight requests at once with an error naming it, restarts with backoff and
//! re-initializes.

mod bridge;
mod client;
mod conn;
mod core;
mod credentials;
mod error;
mod handshake;
mod http;
mod idle;
mod incoming;
mod lines;
mod listen;
mod lists;
mod pending;
mod pipes;
mod stats;
mod stdio;
mod supervise;

pub use self::conn::Availability;
pub use self::conn::Conn;
pub use self::error::UpstreamError;
pub use self::lists::{ListCache, ListKind, Listed};
pub use self::stats::{BackendState, BackendStats, EraSupport};

use self::core::{Core, State, OUTGOING_QUEUE};
use self::listen::keep_listening;
use crate::call::Sink;
use crate::config::BackendConfig;
use crate::jsonrpc::Raw;
use std::collections::HashMap;

pub use self::core::InitInfo;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::mcp::Era;

use parking_lot::Mutex;
use std::sync::atomic::AtomicU64;

/// Where a connection's transport is chosen: the only place that knows both.
impl Conn {
    /// Starts a connection to `cfg`'s backend for callers of era `want` (spoken if
    /// the backend speaks it). The caller must have reserved it with
    /// [`BackendStats::try_reserve`]; the reservation ends when it is
    /// dropped. A session-era handshake sends `init_params` (again after every
    /// restart); traffic no call can claim goes to `owner`.
    pub fn start(
        cfg: &BackendConfig,
        want: Era,
        init_params: Raw,
        owner: Option<Sink>,
        stats: Arc<BackendStats>,
    ) -> Arc<Self> {
        // A warm connection (no owner yet) is not idle until a session adopts it.
        let owner_known = owner.is_some();
        let (out_tx, out_rx) = mpsc::channel(OUTGOING_QUEUE);
        let (state, _) = watch::channel(State::Starting);
        let core = Arc::new(Core {
            name: cfg.name.clone(),
            next_id: AtomicU64::new(1),
            pending: Default::default(),
            asks: Mutex::new(HashMap::new()),
            out: out_tx,
            state,
            live_gen: AtomicU64::new(0),
            owner: Mutex::new(owner),
            slots: (cfg.pool.max_in_flight > 0).then(|| {
                (
                    tokio::sync::Semaphore::new(cfg.pool.max_in_flight),
                    cfg.pool.max_in_flight,
                )
            }),
            queue: cfg.pool.queue,
            waiting: std::sync::atomic::AtomicUsize::new(0),
            started: tokio::time::Instant::now(),
            init_params,
            era: cfg.era,
            want,
            request_timeout: cfg.request_timeout,
            init_timeout: cfg.init_timeout,
            max_message_bytes: cfg.max_message_bytes,
            stats,
            stdin: tokio::sync::Mutex::new(None),
            direct: cfg.stdio.is_some(),
            http: parking_lot::RwLock::new(None),
            listen_uris: Mutex::new(std::collections::BTreeSet::new()),
            listen_changed: tokio::sync::Notify::new(),
            listen_version: AtomicU64::new(0),
            listen_acked: watch::channel(0).0,
            tool_headers: Default::default(),
            lists: lists::ListCache::default(),
            probing: Mutex::new(None),
            start_stderr: Mutex::new(Vec::new()),
            idle: cfg
                .idle_timeout
                .map(|after| idle::IdleStop::new(after, owner_known)),
            reserved: std::sync::atomic::AtomicBool::new(true),
            max_connections: cfg.pool.max_connections,
        });
        core.stats.track(&core);
        let shutdown = CancellationToken::new();
        let task = match (&cfg.stdio, &cfg.http) {
            (Some(s), _) => tokio::spawn(stdio::supervise(
                core.clone(),
                s.clone(),
                cfg.restart.clone(),
                out_rx,
                shutdown.clone(),
            )),
            (None, Some(h)) => tokio::spawn(http::supervise(
                core.clone(),
                h.clone(),
                cfg.restart.clone(),
                out_rx,
                shutdown.clone(),
            )),
            (None, None) => {
                let _ = core.state.send_replace(State::Failed {
                    reason: "no transport configured".into(),
                });
                tokio::spawn(async {})
            }
        };
        tokio::spawn(keep_listening(core.clone(), shutdown.clone()));
        Arc::new(Self {
            core,
            shutdown,
            task: Mutex::new(Some(task)),
        })
    }
}

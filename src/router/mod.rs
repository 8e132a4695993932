//! Dispatch: answer here (ping, the merged catalog) or pick one backend.
//!
//! With one backend Gantry is transparent: names, URIs and cursors pass through
//! unchanged. With several, tools and prompts are exposed as `<backend><sep><name>`
//! (kept within `^[A-Za-z0-9_-]{1,64}$` by deterministic hash-shortening, so names are
//! stable across restarts), resource URIs are kept and remembered per backend, and
//! lists are fetched to the last page from every backend so nothing is truncated.
//!
//! Which connection a caller gets (see `README.md` "Session modes" and "Protocol
//! versions"): every connection is started for callers of one era and speaks that
//! era when the backend does, so translation happens only for a backend that lacks
//! the caller's era. Connections shared by several callers are kept per era they
//! serve; a stateless-era connection keeps no per-caller state, so stateless callers
//! of a `per-session` backend share one; a session-era connection does, so a
//! stateless caller Gantry cannot tell apart from others gets a connection of its
//! own for each call.

mod catalog;
mod hub;

pub use hub::{level_rank, Hub, LOG_LEVELS};

use crate::call::{CallCtx, Sink};
use crate::config::{BackendConfig, Config, SessionMode};
use crate::jsonrpc::{code, empty_object, to_raw, Notification, Request, Response, RpcError};
use crate::mcp::{Era, LATEST_SESSION_VERSION};
use crate::upstream::{BackendStats, Conn, InitInfo, UpstreamError};
use catalog::Catalog;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

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
    pub fn parse(params: Option<&RawValue>) -> Result<Self, RpcError> {
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

    fn params(&self) -> Box<RawValue> {
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

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// Not one backend could be initialized.
    #[error("{0}")]
    NoBackend(UpstreamError),
}

/// A connection shared by several sessions, with its fan-out hub.
type SharedConn = (Arc<Conn>, Arc<Hub>);

struct Slot {
    cfg: BackendConfig,
    stats: Arc<BackendStats>,
    /// The current shared connections, by the era they speak (replaced after
    /// `pool.max_lifetime`; an old one serves its sessions until the last leaves).
    /// `shared` mode uses both; `per-session` mode the stateless one, for
    /// stateless-era callers.
    shared: tokio::sync::Mutex<[Option<SharedConn>; 2]>,
    /// `per-user` connections, by principal and the era they speak.
    users: tokio::sync::Mutex<HashMap<(String, Era), SharedConn>>,
    /// Warm connections, by the era of the callers they are for.
    warm: Mutex<[Vec<Arc<Conn>>; 2]>,
    /// A stateless-era caller needed a connection of its own: the warm pool keeps
    /// some for them too.
    stateless_demand: AtomicBool,
    /// What the backend said about itself the last time a connection came up
    /// (for routes that keep no connection of their own to it).
    last_info: Mutex<Option<Arc<InitInfo>>>,
}

impl Slot {
    /// Starts a connection for callers of `want` within `pool.max_connections`.
    fn start(
        &self,
        want: Era,
        params: Box<RawValue>,
        owner: Option<Sink>,
    ) -> Result<Arc<Conn>, UpstreamError> {
        if !self.stats.try_reserve(self.cfg.pool.max_connections) {
            return Err(UpstreamError::AtCapacity {
                backend: self.cfg.name.clone(),
                max: self.cfg.pool.max_connections,
            });
        }
        Ok(Conn::start(
            &self.cfg,
            want,
            params,
            owner,
            self.stats.clone(),
        ))
    }

    /// A ready warm connection for callers of `era`, if the pool has one.
    fn take_warm(&self, era: Era) -> Option<Arc<Conn>> {
        let mut warm = self.warm.lock();
        let pool = warm.get_mut(era.index())?;
        let pos = pool.iter().position(|c| c.info().is_some())?;
        Some(pool.swap_remove(pos))
    }

    /// A connection of its own for a stateless-era caller: warm if one is ready.
    fn own_stateless(&self, owner: Sink) -> Result<Arc<Conn>, UpstreamError> {
        self.stateless_demand.store(true, Ordering::Relaxed);
        if let Some(c) = self.take_warm(Era::Stateless) {
            c.set_owner(owner);
            return Ok(c);
        }
        self.start(Era::Stateless, self.stateless_init(), Some(owner))
    }

    /// Initialize params for a connection shared by several sessions: Gantry's own
    /// identity and only the client capabilities configured for this backend.
    fn shared_init(&self) -> Box<RawValue> {
        to_raw(&json!({
            "protocolVersion": LATEST_SESSION_VERSION,
            "capabilities": self.cfg.client_capabilities,
            "clientInfo": gantry_info(),
        }))
    }

    /// Initialize params for a session-era backend serving stateless-era callers.
    fn stateless_init(&self) -> Box<RawValue> {
        ClientInit::for_stateless_callers().params()
    }

    /// Initialize params for a connection started for `caller` outside any one
    /// client session (shared, per-user, warm).
    fn init_for(&self, era: Era) -> Box<RawValue> {
        match era {
            Era::Session => self.shared_init(),
            Era::Stateless => self.stateless_init(),
        }
    }

    fn remember(&self, info: &Arc<InitInfo>) {
        *self.last_info.lock() = Some(info.clone());
    }

    /// The era a new connection for callers of `era` speaks, once it is up: known
    /// from the backend's earlier connections, or found out by waiting for this one
    /// (bounded by `init_timeout`; a backend that does not come up counts as
    /// speaking the callers' era, and the connection keeps retrying).
    async fn era_of(&self, conn: &Conn, cancel: &CancellationToken) -> Era {
        match conn.ready(cancel).await {
            Ok(info) => {
                self.remember(&info);
                info.era
            }
            Err(_) => self.stats.eras.serving(conn.want()),
        }
    }

    /// The connection callers of `era` share (`shared` mode, and stateless-era
    /// callers of a `per-session` backend): one per era the backend serves them in.
    async fn shared_conn(
        &self,
        era: Era,
        cancel: &CancellationToken,
    ) -> Result<SharedConn, UpstreamError> {
        let mut table = self.shared.lock().await;
        // Past its maximum lifetime, a shared connection takes no new sessions: it
        // serves the ones it has until the last leaves, then stops. (Only `shared`
        // mode: the stateless connection of a per-session backend is only Gantry's.)
        if self.cfg.session_mode == SessionMode::Shared {
            for entry in table.iter_mut() {
                let expired = entry
                    .as_ref()
                    .is_some_and(|(c, _)| c.age() >= self.cfg.pool.max_lifetime);
                if expired {
                    if let Some((old, hub)) = entry.take() {
                        tracing::info!(backend = %self.cfg.name, "shared connection reached max_lifetime; new sessions get a new one");
                        if hub.is_empty() {
                            tokio::spawn(async move { old.shutdown().await });
                        }
                    }
                }
            }
        }
        let serving = self.stats.eras.serving(era);
        if let Some(c) = table.get(serving.index()).and_then(Option::as_ref) {
            return Ok(c.clone());
        }
        let hub = Arc::new(Hub::new(&self.cfg.name, self.stats.clone()));
        let sink: Sink = hub.clone();
        let conn = self.start(era, self.init_for(era), Some(sink))?;
        // Published under the era it really speaks (other callers wait on the lock).
        let spoken = if self.stats.eras.get(era) == Some(true) {
            era
        } else {
            self.era_of(&conn, cancel).await
        };
        if let Some(existing) = table.get(spoken.index()).and_then(Option::as_ref) {
            let existing = existing.clone();
            tokio::spawn(async move { conn.shutdown().await });
            return Ok(existing);
        }
        let made = (conn, hub);
        if let Some(entry) = table.get_mut(spoken.index()) {
            *entry = Some(made.clone());
        }
        Ok(made)
    }

    /// The connection of a principal's callers of `era` (`per-user` mode).
    async fn user_conn(
        &self,
        principal: &str,
        era: Era,
        cancel: &CancellationToken,
    ) -> Result<SharedConn, UpstreamError> {
        let mut users = self.users.lock().await;
        let serving = self.stats.eras.serving(era);
        if let Some(c) = users.get(&(principal.to_owned(), serving)) {
            return Ok(c.clone());
        }
        let hub = Arc::new(Hub::new(&self.cfg.name, self.stats.clone()));
        let sink: Sink = hub.clone();
        let conn = match self.take_warm(era) {
            Some(c) => {
                c.set_owner(sink);
                c
            }
            None => self.start(era, self.init_for(era), Some(sink))?,
        };
        let spoken = if self.stats.eras.get(era) == Some(true) {
            era
        } else {
            self.era_of(&conn, cancel).await
        };
        let key = (principal.to_owned(), spoken);
        if let Some(existing) = users.get(&key) {
            let existing = existing.clone();
            tokio::spawn(async move { conn.shutdown().await });
            return Ok(existing);
        }
        users.insert(key, (conn.clone(), hub.clone()));
        Ok((conn, hub))
    }
}

/// The backends and how requests reach them.
pub struct Router {
    slots: Vec<Arc<Slot>>,
    sep: String,
}

/// How one client session reaches one backend.
enum Link {
    /// A connection of the session's own.
    Own(Arc<Conn>),
    /// A connection shared with other sessions, and its fan-out hub.
    Shared(Arc<Conn>, Arc<Hub>),
    /// A new connection for every call (stateless callers Gantry cannot tell apart,
    /// on a backend that keeps per-connection state). The one kept is Gantry's own:
    /// it carries the resource subscriptions of the route's listen streams and
    /// never a client's call.
    PerCall(Arc<Conn>),
    /// None: the backend could not be reached when the session opened.
    Down,
}

/// One client session's view of the backends.
pub struct SessionRoute {
    key: u64,
    principal: String,
    slots: Vec<Arc<Slot>>,
    conns: Vec<Option<Arc<Conn>>>,
    /// For connections shared with other sessions: their fan-out hub.
    hubs: Vec<Option<Arc<Hub>>>,
    /// Backends this route reaches with a connection per call.
    per_call: Vec<bool>,
    /// Where backend traffic no call claims goes.
    owner: Sink,
    catalog: Mutex<Catalog>,
    single: bool,
    /// The session's `logging/setLevel` rank (255: never set, everything passes).
    log_level: AtomicU8,
}

static NEXT_ROUTE: AtomicU64 = AtomicU64::new(1);

impl SessionRoute {
    /// Ends this session's use of its backends: per-session connections shut down;
    /// on shared ones its subscriptions are dropped (the last one upstream too), and a
    /// per-user connection whose last session this was shuts down.
    pub async fn close(&self) {
        let mut stops = Vec::new();
        for (idx, conn) in self.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            let Some(hub) = self.hubs.get(idx).and_then(Option::as_ref) else {
                stops.push(conn.clone());
                continue;
            };
            let Some(slot) = self.slots.get(idx) else {
                continue;
            };
            // Per-user: hold the user table while leaving, so a new session of the same
            // principal cannot join a connection that is being shut down.
            let users = if slot.cfg.session_mode == SessionMode::PerUser {
                Some(slot.users.lock().await)
            } else {
                None
            };
            let left = hub.leave(self.key);
            if left.empty && slot.cfg.session_mode == SessionMode::Shared {
                // A retired shared connection (past max_lifetime) stops with its last session.
                let current = slot.shared.lock().await;
                let is_current = current.iter().flatten().any(|(c, _)| Arc::ptr_eq(c, conn));
                if !is_current {
                    stops.push(conn.clone());
                    continue;
                }
            }
            if left.empty && slot.cfg.session_mode == SessionMode::PerUser {
                if let Some(mut users) = users {
                    users.retain(|(p, _), (c, _)| !(p == &self.principal && Arc::ptr_eq(c, conn)));
                }
                stops.push(conn.clone());
            } else {
                drop(users);
                let mut tell: Vec<(&str, Value)> = left
                    .unsubscribe
                    .into_iter()
                    .map(|uri| ("resources/unsubscribe", json!({ "uri": uri })))
                    .collect();
                if let Some(name) = left.level.and_then(|l| LOG_LEVELS.get(usize::from(l))) {
                    tell.push(("logging/setLevel", json!({ "level": name })));
                }
                for (method, params) in tell {
                    let conn = conn.clone();
                    tokio::spawn(async move {
                        // Gantry's own request: nothing it causes belongs to a client.
                        let ctx = CallCtx {
                            sink: Arc::new(Hub::new(
                                conn.name(),
                                Arc::new(BackendStats::default()),
                            )),
                            cancel: CancellationToken::new(),
                            client: crate::call::ClientView::default(),
                        };
                        let _ = conn.call(method, Some(to_raw(&params)), &ctx).await;
                    });
                }
            }
        }
        futures::future::join_all(stops.iter().map(|c| c.shutdown())).await;
    }

    /// Requests in flight on this session's backend connections.
    pub fn pending(&self) -> usize {
        self.conns.iter().flatten().map(|c| c.pending()).sum()
    }

    /// Whether some backend is reached with a connection per call (such a route
    /// cannot hold a resource subscription open).
    pub fn has_per_call(&self) -> bool {
        self.per_call.iter().any(|p| *p)
    }

    /// What backend `idx` said about itself: its connection's initialize result, or
    /// for a backend reached per call, the last one seen.
    fn info(&self, idx: usize) -> Option<Arc<InitInfo>> {
        let own = self.conns.get(idx).and_then(Option::as_ref)?.info();
        own.or_else(|| {
            (self.per_call.get(idx) == Some(&true))
                .then(|| self.slots.get(idx).and_then(|s| s.last_info.lock().clone()))
                .flatten()
        })
    }

    /// The least severe level the session wants (`debug` until it calls `setLevel`).
    pub fn log_level(&self) -> &'static str {
        let min = self.log_level.load(Ordering::Relaxed);
        LOG_LEVELS
            .get(usize::from(min))
            .copied()
            .unwrap_or(LOG_LEVELS[0])
    }

    /// Whether the session wants a log message of this level (by its `setLevel`).
    pub fn wants_log(&self, level: &str) -> bool {
        let min = self.log_level.load(Ordering::Relaxed);
        min == u8::MAX || level_rank(level).is_none_or(|r| r >= min)
    }
}

fn gantry_info() -> Value {
    crate::mcp::gantry_implementation()
}

impl Router {
    /// A router over the configured backends.
    pub fn new(cfg: &Config) -> Self {
        Self {
            slots: cfg
                .backends
                .iter()
                .map(|b| {
                    let stats = Arc::new(BackendStats::default());
                    // A fixed era is known from the start.
                    match b.era {
                        crate::config::Era::Auto => {}
                        crate::config::Era::Session => {
                            stats.eras.set(Era::Session, true);
                            stats.eras.set(Era::Stateless, false);
                        }
                        crate::config::Era::Stateless => {
                            stats.eras.set(Era::Stateless, true);
                            stats.eras.set(Era::Session, false);
                        }
                    }
                    Arc::new(Slot {
                        cfg: b.clone(),
                        stats,
                        shared: tokio::sync::Mutex::new([None, None]),
                        users: tokio::sync::Mutex::new(HashMap::new()),
                        warm: Mutex::new([Vec::new(), Vec::new()]),
                        stateless_demand: AtomicBool::new(false),
                        last_info: Mutex::new(None),
                    })
                })
                .collect(),
            sep: cfg.namespacing.separator.clone(),
        }
    }

    /// Shuts down the shared and per-user backend connections (per-session ones end
    /// with their sessions).
    pub async fn shutdown(&self) {
        let mut conns: Vec<Arc<Conn>> = Vec::new();
        for s in &self.slots {
            conns.extend(
                s.shared
                    .lock()
                    .await
                    .iter_mut()
                    .filter_map(Option::take)
                    .map(|(c, _)| c),
            );
            conns.extend(s.users.lock().await.drain().map(|(_, (c, _))| c));
        }
        futures::future::join_all(conns.iter().map(|c| c.shutdown())).await;
    }

    /// Each backend's name and counters, in configuration order.
    pub fn backend_stats(&self) -> Vec<(&str, &BackendStats)> {
        self.slots
            .iter()
            .map(|s| (s.cfg.name.as_str(), &*s.stats))
            .collect()
    }

    /// Whether every backend is known to speak `era`.
    pub fn all_speak(&self, era: Era) -> bool {
        self.slots
            .iter()
            .all(|s| s.stats.eras.get(era) == Some(true))
    }

    /// Backend names, in configuration order.
    pub fn backend_names(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.cfg.name.clone()).collect()
    }

    /// Connects a new client session of `principal` to every backend and builds the
    /// `initialize` result. `owner` receives backend traffic no single call can claim.
    pub async fn open_session(
        &self,
        init: &ClientInit,
        caller: Caller,
        principal: &str,
        owner: Sink,
        cancel: &CancellationToken,
    ) -> Result<(SessionRoute, Value), RouteError> {
        let version = init.negotiated();
        let key = NEXT_ROUTE.fetch_add(1, Ordering::Relaxed);
        let mut links = Vec::with_capacity(self.slots.len());
        let mut first_err = None;
        for slot in &self.slots {
            match self
                .connect(slot, key, caller, principal, init, &owner, cancel)
                .await
            {
                Ok(link) => links.push(link),
                Err(e) => {
                    tracing::warn!(backend = %slot.cfg.name, error = %e, "no connection for new session");
                    first_err.get_or_insert(e);
                    links.push(Link::Down);
                }
            }
        }
        let mut conns = Vec::with_capacity(links.len());
        let mut hubs = Vec::with_capacity(links.len());
        let mut per_call = Vec::with_capacity(links.len());
        for link in links {
            let (c, h, p) = match link {
                Link::Own(c) => (Some(c), None, false),
                Link::Shared(c, h) => (Some(c), Some(h), false),
                Link::PerCall(c) => (Some(c), None, true),
                Link::Down => (None, None, false),
            };
            conns.push(c);
            hubs.push(h);
            per_call.push(p);
        }
        let ready = futures::future::join_all(conns.iter().map(|c| async move {
            match c {
                Some(c) => Some(c.ready(cancel).await),
                None => None,
            }
        }))
        .await;
        let mut infos: Vec<Option<Arc<InitInfo>>> = Vec::with_capacity(ready.len());
        for (idx, (conn, r)) in conns.iter().zip(ready).enumerate() {
            let slot = self.slots.get(idx);
            match (conn, r) {
                (_, Some(Ok(info))) => {
                    if let Some(s) = slot {
                        s.remember(&info);
                    }
                    infos.push(Some(info));
                }
                (Some(conn), Some(Err(e))) => {
                    tracing::warn!(backend = conn.name(), error = %e, "backend unavailable for new session");
                    first_err.get_or_insert(e);
                    // Kept: it retries in the background and may serve later calls.
                    infos.push(None);
                }
                _ => infos.push(None),
            }
        }
        let route = SessionRoute {
            key,
            principal: principal.to_owned(),
            slots: self.slots.clone(),
            conns,
            hubs,
            per_call,
            owner,
            catalog: Mutex::new(Catalog::default()),
            single: self.slots.len() == 1,
            log_level: AtomicU8::new(u8::MAX),
        };
        if infos.iter().all(Option::is_none) {
            route.close().await;
            return Err(RouteError::NoBackend(first_err.unwrap_or(
                UpstreamError::Closed {
                    backend: "none".into(),
                },
            )));
        }
        let result = self.initialize_result(version, &infos);
        Ok((route, result))
    }

    /// How a new session reaches `slot` (see the module docs).
    #[allow(clippy::too_many_arguments)]
    async fn connect(
        &self,
        slot: &Arc<Slot>,
        key: u64,
        caller: Caller,
        principal: &str,
        init: &ClientInit,
        owner: &Sink,
        cancel: &CancellationToken,
    ) -> Result<Link, UpstreamError> {
        let joined = |(conn, hub): SharedConn| {
            hub.join(key, owner.clone());
            Link::Shared(conn, hub)
        };
        match (slot.cfg.session_mode, caller.era) {
            (SessionMode::PerSession, Era::Session) => {
                if let Some(conn) = slot.take_warm(Era::Session) {
                    conn.set_owner(owner.clone());
                    return Ok(Link::Own(conn));
                }
                let conn = slot.start(Era::Session, init.params(), Some(owner.clone()))?;
                Ok(Link::Own(conn))
            }
            (SessionMode::PerSession, Era::Stateless) => {
                match slot.stats.eras.serving(Era::Stateless) {
                    Era::Stateless if slot.stats.eras.get(Era::Stateless) == Some(true) => {
                        Ok(joined(slot.shared_conn(Era::Stateless, cancel).await?))
                    }
                    Era::Session if caller.per_call => {
                        Ok(Link::PerCall(slot.own_stateless(owner.clone())?))
                    }
                    Era::Session => Ok(Link::Own(slot.own_stateless(owner.clone())?)),
                    Era::Stateless => {
                        // Not known yet: a connection of its own, which tells.
                        let conn = slot.start(Era::Stateless, slot.stateless_init(), None)?;
                        match slot.era_of(&conn, cancel).await {
                            Era::Stateless => {
                                // No per-caller state: it becomes the one all
                                // stateless callers share (unless one exists).
                                let mut table = slot.shared.lock().await;
                                let idx = Era::Stateless.index();
                                let existing = table.get(idx).and_then(Option::as_ref).cloned();
                                let shared = match existing {
                                    Some(e) => {
                                        tokio::spawn(async move { conn.shutdown().await });
                                        e
                                    }
                                    None => {
                                        let hub =
                                            Arc::new(Hub::new(&slot.cfg.name, slot.stats.clone()));
                                        conn.set_owner(hub.clone());
                                        if let Some(e) = table.get_mut(idx) {
                                            *e = Some((conn.clone(), hub.clone()));
                                        }
                                        (conn, hub)
                                    }
                                };
                                Ok(joined(shared))
                            }
                            Era::Session => {
                                conn.set_owner(owner.clone());
                                if caller.per_call {
                                    slot.stateless_demand.store(true, Ordering::Relaxed);
                                    Ok(Link::PerCall(conn))
                                } else {
                                    Ok(Link::Own(conn))
                                }
                            }
                        }
                    }
                }
            }
            (SessionMode::Shared, era) => Ok(joined(slot.shared_conn(era, cancel).await?)),
            (SessionMode::PerUser, era) => {
                Ok(joined(slot.user_conn(principal, era, cancel).await?))
            }
        }
    }

    /// Keeps every warm pool at `pool.min_idle` ready connections, replacing those
    /// older than `pool.max_lifetime`: for session-era clients, and for
    /// stateless-era callers of a `per-session` backend that lacks their era once
    /// one has needed a connection of its own. Runs until `stop`.
    pub async fn maintain_pools(&self, stop: CancellationToken) {
        if self.slots.iter().all(|s| s.cfg.pool.min_idle == 0) {
            return;
        }
        loop {
            for slot in &self.slots {
                if slot.cfg.pool.min_idle == 0 {
                    continue;
                }
                for era in [Era::Session, Era::Stateless] {
                    let wanted = match era {
                        Era::Session => slot.cfg.pool.min_idle,
                        Era::Stateless
                            if slot.stateless_demand.load(Ordering::Relaxed)
                                && slot.cfg.session_mode == SessionMode::PerSession
                                && slot.stats.eras.serving(Era::Stateless) == Era::Session =>
                        {
                            slot.cfg.pool.min_idle
                        }
                        Era::Stateless => 0,
                    };
                    let expired: Vec<Arc<Conn>> = {
                        let mut warm = slot.warm.lock();
                        match warm.get_mut(era.index()) {
                            Some(pool) => {
                                let (old, keep): (Vec<_>, Vec<_>) = pool
                                    .drain(..)
                                    .partition(|c| c.age() >= slot.cfg.pool.max_lifetime);
                                *pool = keep;
                                old
                            }
                            None => Vec::new(),
                        }
                    };
                    for c in expired {
                        tokio::spawn(async move { c.shutdown().await });
                    }
                    let have = |s: &Slot| s.warm.lock().get(era.index()).map_or(0, Vec::len);
                    while have(slot) < wanted {
                        match slot.start(era, slot.init_for(era), None) {
                            Ok(c) => {
                                if let Some(pool) = slot.warm.lock().get_mut(era.index()) {
                                    pool.push(c);
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
                _ = stop.cancelled() => break,
            }
        }
        for slot in &self.slots {
            let warm: Vec<Arc<Conn>> = slot
                .warm
                .lock()
                .iter_mut()
                .flat_map(|p| p.drain(..))
                .collect();
            futures::future::join_all(warm.iter().map(|c| c.shutdown())).await;
        }
    }

    fn initialize_result(&self, version: &str, infos: &[Option<Arc<InitInfo>>]) -> Value {
        if let [Some(only)] = infos {
            // Transparent: the backend's identity and capabilities, as it declared them.
            let mut caps = only.capabilities().clone();
            if let Some(obj) = caps.as_object_mut() {
                obj.remove("tasks");
            }
            let mut r = json!({
                "protocolVersion": version,
                "capabilities": caps,
                "serverInfo": only.result.get("serverInfo").cloned().unwrap_or_else(gantry_info),
            });
            if let (Some(i), Some(obj)) = (only.result.get("instructions"), r.as_object_mut()) {
                obj.insert("instructions".into(), i.clone());
            }
            return r;
        }
        let has = |k: &str| {
            infos
                .iter()
                .flatten()
                .any(|i| i.capabilities().get(k).is_some())
        };
        let mut caps = serde_json::Map::new();
        if has("tools") {
            caps.insert("tools".into(), json!({ "listChanged": true }));
        }
        if has("prompts") {
            caps.insert("prompts".into(), json!({ "listChanged": true }));
        }
        if has("resources") {
            let subscribe = infos.iter().flatten().any(|i| {
                i.capabilities().pointer("/resources/subscribe") == Some(&Value::Bool(true))
            });
            caps.insert(
                "resources".into(),
                json!({ "listChanged": true, "subscribe": subscribe }),
            );
        }
        if has("logging") {
            caps.insert("logging".into(), json!({}));
        }
        if has("completions") {
            caps.insert("completions".into(), json!({}));
        }
        let mut instructions = String::new();
        for (slot, info) in self.slots.iter().zip(infos) {
            if let Some(text) = info
                .as_ref()
                .and_then(|i| i.result.get("instructions"))
                .and_then(Value::as_str)
            {
                instructions.push_str(&format!("## {}\n{}\n\n", slot.cfg.name, text.trim()));
            }
        }
        let mut r = json!({ "protocolVersion": version, "capabilities": caps, "serverInfo": gantry_info() });
        if let (false, Some(obj)) = (instructions.is_empty(), r.as_object_mut()) {
            obj.insert(
                "instructions".into(),
                Value::String(instructions.trim_end().to_owned()),
            );
        }
        r
    }

    /// Answers one client request. `None` means the request was cancelled and, as the
    /// spec asks, gets no response.
    pub async fn dispatch(
        &self,
        route: &SessionRoute,
        req: Request,
        ctx: CallCtx,
    ) -> Option<Response> {
        let id = req.id.clone();
        let outcome = match req.method.as_str() {
            "ping" => Ok(empty_object()),
            "initialize" => Err(Fail::Own(RpcError::new(
                code::INVALID_REQUEST,
                "the session is already initialized",
            ))),
            "logging/setLevel" => self.set_level(route, req.params, &ctx).await,
            "resources/subscribe" | "resources/unsubscribe" => {
                match self.owner_of_uri(route, req.params.as_deref()) {
                    Ok(idx) => {
                        self.subscription(route, idx, &req.method, req.params, &ctx)
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
            _ if route.single => forward(route, 0, &req.method, req.params, &ctx).await,
            _ => {
                self.dispatch_many(route, &req.method, req.params, &ctx)
                    .await
            }
        };
        match outcome {
            Ok(result) => Some(Response::ok(id, result)),
            Err(Fail::Cancelled) => None,
            Err(Fail::Raw(e)) => Some(Response {
                id: Some(id),
                outcome: Err(e),
            }),
            Err(Fail::Own(e)) => Some(Response::err(Some(id), &e)),
        }
    }

    /// `logging/setLevel`: remembered per session (Gantry filters what the session
    /// gets); per-session backends get it as is, shared ones run at the most verbose
    /// level any of their sessions asked for.
    async fn set_level(
        &self,
        route: &SessionRoute,
        params: Option<Box<RawValue>>,
        ctx: &CallCtx,
    ) -> Result<Box<RawValue>, Fail> {
        let level = crate::jsonrpc::string_field(params.as_deref(), "level").unwrap_or_default();
        let Some(rank) = level_rank(&level) else {
            return Err(Fail::Own(RpcError::new(
                code::INVALID_PARAMS,
                format!(
                    "invalid log level `{level}`; expected one of {}",
                    LOG_LEVELS.join(", ")
                ),
            )));
        };
        route.log_level.store(rank, Ordering::Relaxed);
        let mut calls = Vec::new();
        for (idx, conn) in route.conns.iter().enumerate() {
            let declares = conn
                .as_ref()
                .and_then(|c| c.info())
                .is_some_and(|i| i.capabilities().get("logging").is_some());
            if !declares {
                continue;
            }
            let upstream = match route.hubs.get(idx).and_then(Option::as_ref) {
                Some(hub) => hub.set_level(route.key, rank),
                None => Some(rank),
            };
            if let Some(r) = upstream {
                let name = LOG_LEVELS.get(usize::from(r)).copied().unwrap_or("debug");
                calls.push(forward(
                    route,
                    idx,
                    "logging/setLevel",
                    Some(to_raw(&json!({ "level": name }))),
                    ctx,
                ));
            }
        }
        for r in futures::future::join_all(calls).await {
            match r {
                Err(Fail::Cancelled) => return Err(Fail::Cancelled),
                Err(Fail::Raw(e)) if route.single => return Err(Fail::Raw(e)),
                _ => {}
            }
        }
        Ok(empty_object())
    }

    fn owner_of_uri(&self, route: &SessionRoute, params: Option<&RawValue>) -> Result<usize, Fail> {
        if route.single {
            return Ok(0);
        }
        let uri = crate::jsonrpc::string_field(params, "uri").ok_or_else(|| {
            Fail::Own(RpcError::new(
                code::INVALID_PARAMS,
                "params.uri (a string) is required",
            ))
        })?;
        self.resolve_uri(route, &uri).ok_or_else(|| {
            Fail::Own(
                RpcError::new(code::RESOURCE_NOT_FOUND, "Resource not found")
                    .with_data(json!({ "uri": uri })),
            )
        })
    }

    /// `resources/subscribe` / `unsubscribe`: on a shared connection, counted per URI
    /// so the backend sees the first subscribe and the last unsubscribe only.
    async fn subscription(
        &self,
        route: &SessionRoute,
        idx: usize,
        method: &str,
        params: Option<Box<RawValue>>,
        ctx: &CallCtx,
    ) -> Result<Box<RawValue>, Fail> {
        let Some(hub) = route.hubs.get(idx).and_then(Option::as_ref) else {
            return forward(route, idx, method, params, ctx).await;
        };
        let uri = crate::jsonrpc::string_field(params.as_deref(), "uri").ok_or_else(|| {
            Fail::Own(RpcError::new(
                code::INVALID_PARAMS,
                "params.uri (a string) is required",
            ))
        })?;
        if method == "resources/subscribe" {
            if !hub.subscribe(route.key, &uri) {
                return Ok(empty_object());
            }
            let r = forward(route, idx, method, params, ctx).await;
            if r.is_err() {
                hub.unsubscribe(route.key, &uri);
            }
            r
        } else if hub.unsubscribe(route.key, &uri) {
            forward(route, idx, method, params, ctx).await
        } else {
            Ok(empty_object())
        }
    }

    /// Forwards a client notification to the session's backends.
    pub fn notify(&self, route: &SessionRoute, n: &Notification) {
        for c in route.conns.iter().flatten() {
            c.notify(n);
        }
    }
}

/// How a routed request failed.
pub(crate) enum Fail {
    /// The backend's own error object, relayed untouched.
    Raw(Box<RawValue>),
    /// An error Gantry produced.
    Own(RpcError),
    /// Cancelled by the client: no response at all.
    Cancelled,
}

impl From<RpcError> for Fail {
    fn from(e: RpcError) -> Self {
        Self::Own(e)
    }
}

/// Sends one request to backend `idx` of the session.
pub(crate) async fn forward(
    route: &SessionRoute,
    idx: usize,
    method: &str,
    params: Option<Box<RawValue>>,
    ctx: &CallCtx,
) -> Result<Box<RawValue>, Fail> {
    let gantrys_own = matches!(method, "resources/subscribe" | "resources/unsubscribe");
    if route.per_call.get(idx) == Some(&true) && !gantrys_own {
        return forward_per_call(route, idx, method, params, ctx).await;
    }
    let Some(Some(conn)) = route.conns.get(idx) else {
        return Err(Fail::Own(RpcError::new(
            code::INTERNAL_ERROR,
            "no such backend",
        )));
    };
    relay(conn, method, params, ctx).await
}

/// One request on a connection of its own, stopped when the request ends: its
/// `input_required` rounds included, since the call waits for them. Everything the
/// backend sends meanwhile belongs to this call.
async fn forward_per_call(
    route: &SessionRoute,
    idx: usize,
    method: &str,
    params: Option<Box<RawValue>>,
    ctx: &CallCtx,
) -> Result<Box<RawValue>, Fail> {
    let Some(slot) = route.slots.get(idx) else {
        return Err(Fail::Own(RpcError::new(
            code::INTERNAL_ERROR,
            "no such backend",
        )));
    };
    let owner: Sink = Arc::new(PerCallSink {
        call: ctx.sink.clone(),
        route: route.owner.clone(),
    });
    let conn = slot
        .own_stateless(owner)
        .map_err(|e| Fail::Own(e.to_rpc()))?;
    let r = relay(&conn, method, params, ctx).await;
    if let Some(info) = conn.info() {
        slot.remember(&info);
    }
    tokio::spawn(async move { conn.shutdown().await });
    r
}

/// The owner of a connection made for one call: what the backend asks and sends
/// about the call goes to the call; list changes go to the route (its listen
/// streams), as from any of its connections.
struct PerCallSink {
    call: Sink,
    route: Sink,
}

impl crate::call::Downstream for PerCallSink {
    fn notify(&self, n: Notification) {
        if n.method.ends_with("/list_changed") {
            self.route.notify(n);
        } else {
            self.call.notify(n);
        }
    }

    fn ask(
        &self,
        method: String,
        params: Option<Box<RawValue>>,
    ) -> futures::future::BoxFuture<'static, crate::call::ClientAnswer> {
        self.call.ask(method, params)
    }
}

async fn relay(
    conn: &Conn,
    method: &str,
    params: Option<Box<RawValue>>,
    ctx: &CallCtx,
) -> Result<Box<RawValue>, Fail> {
    match conn.call(method, params, ctx).await {
        Ok(resp) => resp.outcome.map_err(Fail::Raw),
        Err(UpstreamError::Cancelled) => Err(Fail::Cancelled),
        Err(e) => Err(Fail::Own(e.to_rpc())),
    }
}

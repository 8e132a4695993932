//! Dispatch: answer here (ping, the merged catalog) or pick one backend.
//!
//! With one backend Gantry is transparent: names, URIs and cursors pass through
//! unchanged. With several, tools and prompts are exposed as `<backend><sep><name>`
//! (kept within `^[A-Za-z0-9_-]{1,64}$` by deterministic hash-shortening, so names are
//! stable across restarts), resource URIs are kept and remembered per backend, and
//! lists are fetched to the last page from every backend so nothing is truncated.

mod catalog;
mod hub;

pub use hub::{level_rank, Hub, LOG_LEVELS};

use crate::call::{CallCtx, Sink};
use crate::config::{BackendConfig, Config, SessionMode};
use crate::jsonrpc::{code, empty_object, to_raw, Notification, Request, Response, RpcError};
use crate::upstream::{BackendStats, Conn, InitInfo, UpstreamError};
use catalog::Catalog;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Protocol versions of the session era Gantry speaks, newest first.
pub const SESSION_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// What a client said in `initialize`.
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

    /// The version Gantry answers with: the client's if supported, else the newest.
    pub fn negotiated(&self) -> &'static str {
        SESSION_VERSIONS
            .iter()
            .find(|v| **v == self.protocol_version)
            .copied()
            .unwrap_or(SESSION_VERSIONS[0])
    }
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
    /// The current shared connection (replaced after `pool.max_lifetime`; the old one
    /// serves its sessions until the last leaves).
    shared: tokio::sync::Mutex<Option<SharedConn>>,
    users: tokio::sync::Mutex<HashMap<String, SharedConn>>,
    warm: Mutex<Vec<Arc<Conn>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Slot {
    /// Starts a connection within `pool.max_connections`.
    fn start(
        &self,
        params: Box<RawValue>,
        owner: Option<Sink>,
    ) -> Result<Arc<Conn>, UpstreamError> {
        if !self.stats.try_reserve(self.cfg.pool.max_connections) {
            return Err(UpstreamError::AtCapacity {
                backend: self.cfg.name.clone(),
                max: self.cfg.pool.max_connections,
            });
        }
        Ok(Conn::start(&self.cfg, params, owner, self.stats.clone()))
    }

    /// A ready warm connection, if the pool has one.
    fn take_warm(&self) -> Option<Arc<Conn>> {
        let mut warm = lock(&self.warm);
        let pos = warm.iter().position(|c| c.info().is_some())?;
        Some(warm.swap_remove(pos))
    }

    /// Initialize params for a connection shared by several sessions: Gantry's own
    /// identity and only the client capabilities configured for this backend.
    fn shared_init(&self) -> Box<RawValue> {
        to_raw(&json!({
            "protocolVersion": SESSION_VERSIONS[0],
            "capabilities": self.cfg.client_capabilities,
            "clientInfo": gantry_info(),
        }))
    }
}

/// The backends and how requests reach them.
pub struct Router {
    slots: Vec<Arc<Slot>>,
    sep: String,
}

/// One client session's view of the backends.
pub struct SessionRoute {
    key: u64,
    principal: String,
    slots: Vec<Arc<Slot>>,
    conns: Vec<Option<Arc<Conn>>>,
    /// For connections shared with other sessions: their fan-out hub.
    hubs: Vec<Option<Arc<Hub>>>,
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
                if !current.as_ref().is_some_and(|(c, _)| Arc::ptr_eq(c, conn)) {
                    stops.push(conn.clone());
                    continue;
                }
            }
            if left.empty && slot.cfg.session_mode == SessionMode::PerUser {
                if let Some(mut users) = users {
                    if users
                        .get(&self.principal)
                        .is_some_and(|(c, _)| Arc::ptr_eq(c, conn))
                    {
                        users.remove(&self.principal);
                    }
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
    json!({ "name": "gantry", "title": "Gantry MCP gateway", "version": env!("CARGO_PKG_VERSION") })
}

impl Router {
    /// A router over the configured backends.
    pub fn new(cfg: &Config) -> Self {
        Self {
            slots: cfg
                .backends
                .iter()
                .map(|b| {
                    Arc::new(Slot {
                        cfg: b.clone(),
                        stats: Arc::new(BackendStats::default()),
                        shared: tokio::sync::Mutex::new(None),
                        users: tokio::sync::Mutex::new(HashMap::new()),
                        warm: Mutex::new(Vec::new()),
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
            conns.extend(s.shared.lock().await.take().map(|(c, _)| c));
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

    /// Backend names, in configuration order.
    pub fn backend_names(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.cfg.name.clone()).collect()
    }

    /// Connects a new client session of `principal` to every backend and builds the
    /// `initialize` result. `owner` receives backend traffic no single call can claim.
    pub async fn open_session(
        &self,
        init: &ClientInit,
        principal: &str,
        owner: Sink,
        cancel: &CancellationToken,
    ) -> Result<(SessionRoute, Value), RouteError> {
        let version = init.negotiated();
        let key = NEXT_ROUTE.fetch_add(1, Ordering::Relaxed);
        let mut conns = Vec::with_capacity(self.slots.len());
        let mut hubs = Vec::with_capacity(self.slots.len());
        let mut first_err = None;
        for slot in &self.slots {
            match self
                .connect(slot, key, principal, version, init, &owner)
                .await
            {
                Ok((conn, hub)) => {
                    conns.push(Some(conn));
                    hubs.push(hub);
                }
                Err(e) => {
                    tracing::warn!(backend = %slot.cfg.name, error = %e, "no connection for new session");
                    first_err.get_or_insert(e);
                    conns.push(None);
                    hubs.push(None);
                }
            }
        }
        let ready = futures::future::join_all(conns.iter().map(|c| async move {
            match c {
                Some(c) => Some(c.ready(cancel).await),
                None => None,
            }
        }))
        .await;
        let mut infos: Vec<Option<Arc<InitInfo>>> = Vec::with_capacity(ready.len());
        for (conn, r) in conns.iter().zip(ready) {
            match (conn, r) {
                (_, Some(Ok(info))) => infos.push(Some(info)),
                (Some(conn), Some(Err(e))) => {
                    tracing::warn!(backend = conn.name(), error = %e, "backend unavailable for new session");
                    first_err.get_or_insert(e);
                    // Kept: it retries in the background and may serve later calls.
                    infos.push(None);
                }
                _ => infos.push(None),
            }
        }
        let live = conns;
        let route = SessionRoute {
            key,
            principal: principal.to_owned(),
            slots: self.slots.clone(),
            conns: live,
            hubs,
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

    /// The connection a new session uses for `slot`: its own (warm from the pool if
    /// one is ready), the shared one, or its principal's.
    async fn connect(
        &self,
        slot: &Arc<Slot>,
        key: u64,
        principal: &str,
        version: &str,
        init: &ClientInit,
        owner: &Sink,
    ) -> Result<(Arc<Conn>, Option<Arc<Hub>>), UpstreamError> {
        match slot.cfg.session_mode {
            SessionMode::PerSession => {
                if let Some(conn) = slot.take_warm() {
                    conn.set_owner(owner.clone());
                    return Ok((conn, None));
                }
                let params = to_raw(&json!({
                    "protocolVersion": version,
                    "capabilities": init.capabilities,
                    "clientInfo": init.client_info,
                }));
                Ok((slot.start(params, Some(owner.clone()))?, None))
            }
            SessionMode::Shared => {
                let mut current = slot.shared.lock().await;
                // Past its maximum lifetime, the connection takes no new sessions: it
                // serves the ones it has until the last leaves, then stops.
                let expired = current
                    .as_ref()
                    .is_some_and(|(c, _)| c.age() >= slot.cfg.pool.max_lifetime);
                if expired {
                    if let Some((old, hub)) = current.take() {
                        tracing::info!(backend = %slot.cfg.name, "shared connection reached max_lifetime; new sessions get a new one");
                        if hub.is_empty() {
                            tokio::spawn(async move { old.shutdown().await });
                        }
                    }
                }
                let (conn, hub) = match current.as_ref() {
                    Some(c) => c.clone(),
                    None => {
                        let hub = Arc::new(Hub::new(&slot.cfg.name, slot.stats.clone()));
                        let sink: Sink = hub.clone();
                        let made = (slot.start(slot.shared_init(), Some(sink))?, hub);
                        *current = Some(made.clone());
                        made
                    }
                };
                hub.join(key, owner.clone());
                Ok((conn, Some(hub)))
            }
            SessionMode::PerUser => {
                let mut users = slot.users.lock().await;
                let (conn, hub) = match users.get(principal) {
                    Some(existing) => existing.clone(),
                    None => {
                        let hub = Arc::new(Hub::new(&slot.cfg.name, slot.stats.clone()));
                        let sink: Sink = hub.clone();
                        let conn = match slot.take_warm() {
                            Some(c) => {
                                c.set_owner(sink);
                                c
                            }
                            None => slot.start(slot.shared_init(), Some(sink))?,
                        };
                        users.insert(principal.to_owned(), (conn.clone(), hub.clone()));
                        (conn, hub)
                    }
                };
                hub.join(key, owner.clone());
                Ok((conn, Some(hub)))
            }
        }
    }

    /// Keeps every warm pool at `pool.min_idle` ready connections, replacing those
    /// older than `pool.max_lifetime`. Runs until `stop`.
    pub async fn maintain_pools(&self, stop: CancellationToken) {
        if self.slots.iter().all(|s| s.cfg.pool.min_idle == 0) {
            return;
        }
        loop {
            for slot in &self.slots {
                if slot.cfg.pool.min_idle == 0 {
                    continue;
                }
                let expired: Vec<Arc<Conn>> = {
                    let mut warm = lock(&slot.warm);
                    let (old, keep): (Vec<_>, Vec<_>) = warm
                        .drain(..)
                        .partition(|c| c.age() >= slot.cfg.pool.max_lifetime);
                    *warm = keep;
                    old
                };
                for c in expired {
                    tokio::spawn(async move { c.shutdown().await });
                }
                while lock(&slot.warm).len() < slot.cfg.pool.min_idle {
                    match slot.start(slot.shared_init(), None) {
                        Ok(c) => lock(&slot.warm).push(c),
                        Err(_) => break,
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
                _ = stop.cancelled() => break,
            }
        }
        for slot in &self.slots {
            let warm: Vec<Arc<Conn>> = lock(&slot.warm).drain(..).collect();
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
    let Some(Some(conn)) = route.conns.get(idx) else {
        return Err(Fail::Own(RpcError::new(
            code::INTERNAL_ERROR,
            "no such backend",
        )));
    };
    match conn.call(method, params, ctx).await {
        Ok(resp) => resp.outcome.map_err(Fail::Raw),
        Err(UpstreamError::Cancelled) => Err(Fail::Cancelled),
        Err(e) => Err(Fail::Own(e.to_rpc())),
    }
}

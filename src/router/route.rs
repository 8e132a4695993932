//! One client session's view of the backends ([`SessionRoute`]): how it reaches each
//! (its own connection, a shared one, one per call), opened by `open_session`.

use super::catalog::Catalog;
use super::client::{Caller, ClientInit};
use super::hub::{level_rank, Hub, LOG_LEVELS};
use super::slot::SharedConn;
use crate::call::{CallCtx, Sink};
use crate::config::SessionMode;
use crate::jsonrpc::to_raw;
use crate::mcp::Era;
use crate::router::gantry_info;
use crate::router::RouteError;
use crate::router::Router;
use crate::router::Slot;
use crate::upstream::{BackendStats, Conn, InitInfo, UpstreamError};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How one client session reaches one backend.
pub(super) enum Link {
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

/// A session's backends, index by index. Indices never change for the session:
/// a reload appends backends it adds, replaces the connection of one it changes in
/// place and leaves a removed one as an entry without connection.
pub(super) struct Links {
    pub(super) slots: Vec<Arc<Slot>>,
    pub(super) conns: Vec<Option<Arc<Conn>>>,
    /// For connections shared with other sessions: their fan-out hub.
    pub(super) hubs: Vec<Option<Arc<Hub>>>,
    /// Backends this route reaches with a connection per call.
    pub(super) per_call: Vec<bool>,
}

/// One client session's view of the backends.
pub struct SessionRoute {
    pub(super) key: u64,
    pub(super) principal: String,
    pub(super) links: parking_lot::RwLock<Arc<Links>>,
    /// Where backend traffic no call claims goes.
    pub(super) owner: Sink,
    /// The session itself (`owner` without the catalog's filter).
    pub(super) session: Sink,
    /// How the session connected (a reload connects it to new backends alike).
    pub(super) init: ClientInit,
    pub(super) caller: Caller,
    pub(super) catalog: Mutex<Catalog>,
    /// What each list was last served from (the catalog watcher's baseline).
    pub(super) served: Arc<super::catalog::Served>,
    /// Stops the catalog watcher (multi-backend sessions).
    pub(super) watcher: Mutex<CancellationToken>,
    pub(super) single: bool,
    /// Opened with one backend: names carry no prefix unless `prefix` sets one.
    pub(super) bare: bool,
    /// The session's `logging/setLevel` rank (255: never set, everything passes).
    pub(super) log_level: AtomicU8,
}

pub(super) static NEXT_ROUTE: AtomicU64 = AtomicU64::new(1);

impl Drop for SessionRoute {
    fn drop(&mut self) {
        self.watcher.lock().cancel();
    }
}

impl SessionRoute {
    /// Ends this session's use of its backends: per-session connections shut down;
    /// on shared ones its subscriptions are dropped (the last one upstream too), and a
    /// per-user connection whose last session this was shuts down.
    pub async fn close(&self) {
        self.watcher.lock().cancel();
        let links = self.links();
        let mut stops = Vec::new();
        for idx in 0..links.conns.len() {
            stops.extend(self.leave(&links, idx).await);
        }
        futures::future::join_all(stops.iter().map(|c| c.shutdown())).await;
    }

    /// The session's backends now.
    pub(super) fn links(&self) -> Arc<Links> {
        self.links.read().clone()
    }

    /// Ends the session's use of backend `idx` of `links`; returns the connection
    /// to shut down, if one is the session's to stop.
    pub(super) async fn leave(&self, links: &Links, idx: usize) -> Option<Arc<Conn>> {
        let mut stops = Vec::new();
        {
            let Some(Some(conn)) = links.conns.get(idx) else {
                return None;
            };
            let Some(hub) = links.hubs.get(idx).and_then(Option::as_ref) else {
                return Some(conn.clone());
            };
            let slot = links.slots.get(idx)?;
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
                    return Some(conn.clone());
                }
            }
            if left.empty && slot.cfg.session_mode == SessionMode::PerUser {
                if let Some(mut users) = users {
                    users.retain(|(p, _), (c, _)| !(p == &self.principal && Arc::ptr_eq(c, conn)));
                }
                stops.push(conn.clone());
            } else {
                drop(users);
                // Gantry's own requests: nothing they cause belongs to a client.
                let own_ctx = |conn: &Arc<Conn>| CallCtx {
                    sink: Arc::new(Hub::new(conn.name(), Arc::new(BackendStats::default()))),
                    cancel: CancellationToken::new(),
                    client: crate::call::ClientView::default(),
                    timeout: None,
                    trace: None,
                };
                for uri in left.unsubscribe {
                    let (conn, hub, ctx) = (conn.clone(), hub.clone(), own_ctx(conn));
                    tokio::spawn(async move {
                        let params = Some(to_raw(&json!({ "uri": uri })));
                        let _ = hub
                            .upstream_subs()
                            .reconcile(
                                &uri,
                                || hub.is_subscribed(&uri),
                                |m| conn.call(m, params, &ctx),
                            )
                            .await;
                    });
                }
                if let Some(name) = left.level.and_then(|l| LOG_LEVELS.get(usize::from(l))) {
                    let (conn, ctx) = (conn.clone(), own_ctx(conn));
                    tokio::spawn(async move {
                        let params = Some(to_raw(&json!({ "level": name })));
                        let _ = conn.call("logging/setLevel", params, &ctx).await;
                    });
                }
            }
        }
        stops.pop()
    }

    /// Requests in flight on this session's backend connections.
    pub fn pending(&self) -> usize {
        self.links()
            .conns
            .iter()
            .flatten()
            .map(|c| c.pending())
            .sum()
    }

    /// Whether some backend is reached with a connection per call (such a route
    /// cannot hold a resource subscription open).
    pub fn has_per_call(&self) -> bool {
        self.links().per_call.iter().any(|p| *p)
    }

    /// What backend `idx` said about itself: its connection's initialize result, or
    /// for a backend reached per call, the last one seen.
    pub(super) fn info(&self, idx: usize) -> Option<Arc<InitInfo>> {
        let links = self.links();
        let own = links.conns.get(idx).and_then(Option::as_ref)?.info();
        own.or_else(|| {
            (links.per_call.get(idx) == Some(&true))
                .then(|| {
                    links
                        .slots
                        .get(idx)
                        .and_then(|s| s.last_info.lock().clone())
                })
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

impl Router {
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
        let slots = self.slots();
        // One backend: transparent, unless its policy shapes what clients see (then
        // the catalog serves it, its names without a prefix unless one is set).
        let bare = slots.len() == 1;
        let single = bare
            && slots.first().is_some_and(|s| {
                s.cfg.tools == Default::default()
                    && s.cfg.prompts == Default::default()
                    && s.cfg.resources == Default::default()
            });
        // Several backends: their list changes reach the session through the
        // catalog's watcher (once per change), not as they come.
        let session = owner;
        let owner: Sink = if single {
            session.clone()
        } else {
            Arc::new(super::catalog::QuietLists(session.clone()))
        };
        let mut links = Vec::with_capacity(slots.len());
        let mut first_err = None;
        for slot in slots.iter() {
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
            let slot = slots.get(idx);
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
            links: parking_lot::RwLock::new(Arc::new(Links {
                slots: slots.to_vec(),
                conns,
                hubs,
                per_call,
            })),
            owner,
            session,
            init: init.clone(),
            caller,
            catalog: Mutex::new(Catalog::default()),
            served: Arc::new(Mutex::new(Default::default())),
            watcher: Mutex::new(CancellationToken::new()),
            single,
            bare,
            log_level: AtomicU8::new(u8::MAX),
        };
        if infos.iter().all(Option::is_none) {
            route.close().await;
            return Err(RouteError::NoBackend(first_err.unwrap_or_else(|| {
                UpstreamError::Closed {
                    backend: "none".into(),
                }
            })));
        }
        if !single {
            self.watch_catalog(&route);
        }
        let result = self.initialize_result(version, &infos);
        Ok((route, result))
    }

    /// How a new session reaches `slot` (see the module docs).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn connect(
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

    pub(super) fn initialize_result(
        &self,
        version: &str,
        infos: &[Option<Arc<InitInfo>>],
    ) -> Value {
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
        for (slot, info) in self.slots().iter().zip(infos) {
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
}

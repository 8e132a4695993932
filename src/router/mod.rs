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

mod access;
mod catalog;
mod client;
mod forward;
mod hub;
mod reload;
mod route;
mod slot;

pub use client::{Caller, ClientInit};
pub(crate) use forward::{forward, Fail};
pub use reload::ReloadPlan;
pub use route::SessionRoute;

pub use hub::{level_rank, Hub, UpstreamSubs, LOG_LEVELS};

use crate::call::CallCtx;
use crate::config::Config;
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, empty_object, to_raw, Notification, Request, Response, RpcError};
use crate::mcp::Era;
use crate::router::slot::Slot;
use crate::telemetry::metrics::Outcome;
use crate::upstream::{BackendStats, Conn, UpstreamError};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// Not one backend could be initialized.
    #[error("{0}")]
    NoBackend(UpstreamError),
}

/// The backends and how requests reach them.
pub struct Router {
    /// The configured backends (replaced by a reload).
    slots: parking_lot::RwLock<Arc<Vec<Arc<Slot>>>>,
    sep: String,
    catalog: parking_lot::RwLock<crate::config::CatalogConfig>,
}

fn gantry_info() -> Value {
    crate::mcp::gantry_implementation()
}

impl Router {
    /// A router over the configured backends.
    pub fn new(cfg: &Config) -> Self {
        Self {
            slots: parking_lot::RwLock::new(Arc::new(cfg.backends.iter().map(Slot::new).collect())),
            sep: cfg.namespacing.separator.clone(),
            catalog: parking_lot::RwLock::new(cfg.catalog.clone()),
        }
    }

    /// The configured backends now.
    fn slots(&self) -> Arc<Vec<Arc<Slot>>> {
        self.slots.read().clone()
    }

    /// `[catalog]` now.
    fn catalog(&self) -> crate::config::CatalogConfig {
        self.catalog.read().clone()
    }

    /// Shuts down the shared and per-user backend connections (per-session ones end
    /// with their sessions).
    pub async fn shutdown(&self) {
        let mut conns: Vec<Arc<Conn>> = Vec::new();
        for s in self.slots().iter() {
            conns.extend(s.take_all().await);
        }
        futures::future::join_all(conns.iter().map(|c| c.shutdown())).await;
    }

    /// The backends' settings now (what a reload compares a new file with).
    pub fn backend_configs(&self) -> Vec<crate::config::BackendConfig> {
        self.slots().iter().map(|s| s.cfg.clone()).collect()
    }

    /// Starts every `required` backend and waits until it is initialized (each within
    /// its `init_timeout`). A shared backend keeps the connection (it starts eagerly);
    /// for the other modes it was a check and is stopped. Returns the first backend
    /// that could not start, with why.
    pub async fn start_required(&self) -> Result<(), (String, UpstreamError)> {
        let cancel = CancellationToken::new();
        let slots = self.slots();
        let checks = slots.iter().filter(|s| s.cfg.required).map(|slot| {
            let cancel = cancel.clone();
            async move {
                let name = slot.cfg.name.clone();
                let r = if slot.cfg.session_mode == crate::config::SessionMode::Shared {
                    match slot.shared_conn(Era::Session, &cancel).await {
                        Ok((conn, _)) => conn.ready(&cancel).await.map(|_| ()),
                        Err(e) => Err(e),
                    }
                } else {
                    match slot.start(Era::Session, slot.shared_init(), None) {
                        Ok(conn) => {
                            let r = conn.ready(&cancel).await.map(|_| ());
                            conn.shutdown().await;
                            r
                        }
                        Err(e) => Err(e),
                    }
                };
                r.map_err(|e| (name, e))
            }
        });
        futures::future::join_all(checks)
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()
            .map(|_| ())
    }

    /// Each backend's name, whether it is required, and its state.
    pub fn backend_states(&self) -> Vec<(String, bool, crate::upstream::BackendState)> {
        self.slots()
            .iter()
            .map(|s| (s.cfg.name.clone(), s.cfg.required, s.stats.state()))
            .collect()
    }

    /// Each backend's name and counters, in configuration order.
    pub fn backend_stats(&self) -> Vec<(String, Arc<BackendStats>)> {
        self.slots()
            .iter()
            .map(|s| (s.cfg.name.clone(), s.stats.clone()))
            .collect()
    }

    /// Whether every backend is known to speak `era`.
    pub fn all_speak(&self, era: Era) -> bool {
        self.slots()
            .iter()
            .all(|s| s.stats.eras.get(era) == Some(true))
    }

    /// Backend names, in configuration order.
    pub fn backend_names(&self) -> Vec<String> {
        self.slots().iter().map(|s| s.cfg.name.clone()).collect()
    }

    /// Answers one client request, and says how it ended (for the metrics). No
    /// response means the request was cancelled and, as the spec asks, gets none.
    pub async fn dispatch(
        &self,
        route: &SessionRoute,
        req: Request,
        ctx: CallCtx,
    ) -> (Option<Response>, Outcome) {
        let id = req.id.clone();
        if let Some(refused) = ctx
            .client
            .access
            .as_deref()
            .and_then(|a| access::hidden(a, &req))
        {
            return (
                Some(Response::err(Some(id), &refused)),
                Outcome::Failed(crate::fault::Fault::Client),
            );
        }
        let list_method = req.method.clone();
        let outcome = match req.method.as_str() {
            "ping" => Ok(empty_object()),
            "initialize" => Err(Fail::Own(RpcError::new(
                code::INVALID_REQUEST,
                "the session is already initialized",
            ))),
            // Rare methods are boxed: this future is part of every call's.
            "logging/setLevel" => Box::pin(self.set_level(route, req.params, &ctx)).await,
            "resources/subscribe" | "resources/unsubscribe" => {
                Box::pin(async {
                    let idx = self.owner_of_uri(route, req.params.as_ref(), &ctx).await?;
                    self.subscription(route, idx, &req.method, req.params, &ctx)
                        .await
                })
                .await
            }
            _ if route.single => forward(route, 0, &req.method, req.params, &ctx).await,
            _ => {
                self.dispatch_many(route, &req.method, req.params, &ctx)
                    .await
            }
        };
        let outcome = match (outcome, ctx.client.access.as_deref()) {
            (Ok(result), Some(access)) => Ok(access::visible_only(access, &list_method, result)),
            (o, _) => o,
        };
        match outcome {
            Ok(result) => (Some(Response::ok(id, result)), Outcome::Ok),
            Err(fail) => {
                let (answer, how) = fail.settle();
                let resp = answer.map(|outcome| Response {
                    id: Some(id),
                    outcome,
                });
                (resp, how)
            }
        }
    }

    /// `logging/setLevel`: remembered per session (Gantry filters what the session
    /// gets); per-session backends get it as is, shared ones run at the most verbose
    /// level any of their sessions asked for.
    async fn set_level(
        &self,
        route: &SessionRoute,
        params: Option<Raw>,
        ctx: &CallCtx,
    ) -> Result<Raw, Fail> {
        let level = crate::jsonrpc::string_field(params.as_ref(), "level").unwrap_or_default();
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
        let links = route.links();
        for (idx, conn) in links.conns.iter().enumerate() {
            let declares = conn
                .as_ref()
                .and_then(|c| c.info())
                .is_some_and(|i| i.capabilities().get("logging").is_some());
            if !declares {
                continue;
            }
            let upstream = match links.hubs.get(idx).and_then(Option::as_ref) {
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

    async fn owner_of_uri(
        &self,
        route: &SessionRoute,
        params: Option<&Raw>,
        ctx: &CallCtx,
    ) -> Result<usize, Fail> {
        if route.single {
            return Ok(0);
        }
        let uri = crate::jsonrpc::string_field(params, "uri").ok_or_else(|| {
            Fail::Own(RpcError::new(
                code::INVALID_PARAMS,
                "params.uri (a string) is required",
            ))
        })?;
        self.resolve_uri(route, &uri, ctx).await?.ok_or_else(|| {
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
        params: Option<Raw>,
        ctx: &CallCtx,
    ) -> Result<Raw, Fail> {
        let Some(hub) = route
            .links()
            .hubs
            .get(idx)
            .and_then(Option::as_ref)
            .cloned()
        else {
            return forward(route, idx, method, params, ctx).await;
        };
        let uri = crate::jsonrpc::string_field(params.as_ref(), "uri").ok_or_else(|| {
            Fail::Own(RpcError::new(
                code::INVALID_PARAMS,
                "params.uri (a string) is required",
            ))
        })?;
        // Counted per session here; what goes upstream is decided by the reconciler.
        let subscribing = method == "resources/subscribe";
        if subscribing {
            hub.subscribe(route.key, &uri);
        } else {
            hub.unsubscribe(route.key, &uri);
        }
        let sent = hub
            .upstream_subs()
            .reconcile(
                &uri,
                || hub.is_subscribed(&uri),
                |m| forward(route, idx, m, params, ctx),
            )
            .await;
        match sent {
            Ok(answer) => Ok(answer.unwrap_or_else(empty_object)),
            Err(e) => {
                if subscribing {
                    hub.unsubscribe(route.key, &uri);
                }
                Err(e)
            }
        }
    }

    /// Forwards a client notification to the session's backends.
    pub fn notify(&self, route: &SessionRoute, n: &Notification) {
        for c in route.links().conns.iter().flatten() {
            c.notify(n);
        }
    }
}

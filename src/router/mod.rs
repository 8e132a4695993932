//! Dispatch: answer here (ping, the merged catalog) or pick one backend.
//!
//! With one backend Gantry is transparent: names, URIs and cursors pass through
//! unchanged. With several, tools and prompts are exposed as `<backend><sep><name>`
//! (kept within `^[A-Za-z0-9_-]{1,64}$` by deterministic hash-shortening, so names are
//! stable across restarts), resource URIs are kept and remembered per backend, and
//! lists are fetched to the last page from every backend so nothing is truncated.

mod catalog;

use crate::call::{CallCtx, Sink};
use crate::config::{BackendConfig, Config, SessionMode};
use crate::jsonrpc::{code, empty_object, to_raw, Notification, Request, Response, RpcError};
use crate::upstream::{Conn, InitInfo, UpstreamError};
use catalog::Catalog;
use serde_json::value::RawValue;
use serde_json::{json, Value};
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

struct Slot {
    cfg: BackendConfig,
    shared: tokio::sync::OnceCell<Arc<Conn>>,
}

/// The backends and how requests reach them.
pub struct Router {
    slots: Vec<Slot>,
    sep: String,
}

/// One client session's view of the backends.
pub struct SessionRoute {
    conns: Vec<Option<Arc<Conn>>>,
    per_session: Vec<bool>,
    catalog: Mutex<Catalog>,
    single: bool,
}

impl SessionRoute {
    /// Shuts down the backend connections that belong to this session only.
    pub async fn close(&self) {
        let own = self
            .conns
            .iter()
            .zip(&self.per_session)
            .filter_map(|(c, own)| c.as_ref().filter(|_| *own));
        futures::future::join_all(own.map(|c| c.shutdown())).await;
    }

    /// Requests in flight on this session's backend connections.
    pub fn pending(&self) -> usize {
        self.conns.iter().flatten().map(|c| c.pending()).sum()
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
                .map(|b| Slot {
                    cfg: b.clone(),
                    shared: tokio::sync::OnceCell::new(),
                })
                .collect(),
            sep: cfg.namespacing.separator.clone(),
        }
    }

    /// Shuts down the shared backend connections (per-session ones end with their
    /// sessions).
    pub async fn shutdown(&self) {
        let shared = self.slots.iter().filter_map(|s| s.shared.get());
        futures::future::join_all(shared.map(|c| c.shutdown())).await;
    }

    /// Backend names, in configuration order.
    pub fn backend_names(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.cfg.name.clone()).collect()
    }

    /// Connects a new client session to every backend and builds the `initialize`
    /// result. `owner` receives backend traffic no single call can claim.
    pub async fn open_session(
        &self,
        init: &ClientInit,
        owner: Sink,
        cancel: &CancellationToken,
    ) -> Result<(SessionRoute, Value), RouteError> {
        let version = init.negotiated();
        let mut conns = Vec::with_capacity(self.slots.len());
        let mut per_session = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            let conn = match slot.cfg.session_mode {
                SessionMode::PerSession => {
                    let params = to_raw(&json!({
                        "protocolVersion": version,
                        "capabilities": init.capabilities,
                        "clientInfo": init.client_info,
                    }));
                    Conn::start(&slot.cfg, params, Some(owner.clone()))
                }
                SessionMode::Shared => slot
                    .shared
                    .get_or_init(|| async {
                        let params = to_raw(&json!({
                            "protocolVersion": SESSION_VERSIONS[0],
                            "capabilities": {},
                            "clientInfo": gantry_info(),
                        }));
                        Conn::start(&slot.cfg, params, None)
                    })
                    .await
                    .clone(),
            };
            per_session.push(slot.cfg.session_mode == SessionMode::PerSession);
            conns.push(conn);
        }
        let ready = futures::future::join_all(conns.iter().map(|c| c.ready(cancel))).await;
        let mut infos: Vec<Option<Arc<InitInfo>>> = Vec::with_capacity(ready.len());
        let mut live = Vec::with_capacity(conns.len());
        let mut first_err = None;
        for (conn, r) in conns.into_iter().zip(ready) {
            match r {
                Ok(info) => {
                    infos.push(Some(info));
                    live.push(Some(conn));
                }
                Err(e) => {
                    tracing::warn!(backend = conn.name(), error = %e, "backend unavailable for new session");
                    first_err.get_or_insert(e);
                    infos.push(None);
                    // Keep it: it retries in the background and may serve later calls.
                    live.push(Some(conn));
                }
            }
        }
        let route = SessionRoute {
            conns: live,
            per_session,
            catalog: Mutex::new(Catalog::default()),
            single: self.slots.len() == 1,
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

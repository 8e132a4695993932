//! Each caller's route to the backends for its stateless requests, and the requests
//! Gantry itself makes on it (tool header declarations, subscriptions).

use super::super::{App, FrontError};
use crate::call::{ClientAnswer, Downstream, Sink};
use crate::front::stateless::json_body;
use crate::front::stateless::listen::Listeners;
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, to_raw, Notification, Request, RequestId, Response, RpcError};
use crate::mcp::param::{ToolCache, ToolHeaders};
use crate::mcp::{Era, LATEST_SESSION_VERSION};
use crate::router::{Caller, ClientInit};
use crate::session::Session;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use futures::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// One principal's route to the backends for its stateless requests.
pub(crate) struct Internal {
    pub(super) session: Arc<Session>,
    /// What the backends declared (the answer to the route's `initialize`).
    pub(super) init: Value,
    /// The principal's open `subscriptions/listen` streams.
    pub(super) listeners: Arc<Listeners>,
    /// Its tools' `Mcp-Param-*` declarations.
    pub(super) tools: Arc<ToolCache>,
}

/// The principal's route: opened on its first stateless request, used by all its
/// requests. A caller Gantry cannot tell apart from others (no authentication)
/// reaches `per-session` backends that lack the stateless era with a connection
/// per call instead (see [`crate::router::Caller`]).
pub(super) async fn internal_route(
    app: &Arc<App>,
    principal: &str,
) -> Result<Arc<Internal>, HttpResponse> {
    let caller = Caller {
        era: Era::Stateless,
        per_call: !app.auth().is_required(),
    };
    // The route in use: a shared lock of the map, not an entry's exclusive one.
    let open = app.stateless.get(principal).and_then(|c| c.get().cloned());
    if let Some(got) = open.filter(|i| !i.session.is_ended()) {
        return Ok(got);
    }
    for _ in 0..2 {
        let cell: Arc<OnceCell<Arc<Internal>>> = app
            .stateless
            .entry(principal.to_owned())
            .or_default()
            .clone();
        let got = cell
            .get_or_try_init(|| open_internal(app, principal, caller))
            .await?
            .clone();
        if !got.session.is_ended() {
            return Ok(got);
        }
        // Expired (idle) since: open a new one.
        app.stateless
            .remove_if(principal, |_, c| Arc::ptr_eq(c, &cell));
    }
    Err(FrontError::Unavailable("the backends are not available; try again").into_response())
}

pub(super) async fn open_internal(
    app: &Arc<App>,
    principal: &str,
    caller: Caller,
) -> Result<Arc<Internal>, HttpResponse> {
    let session = app.sessions.create(principal, false, None).map_err(|_| {
        FrontError::Unavailable("Too many sessions; try again later").into_response()
    })?;
    let init = ClientInit::for_stateless_callers();
    let listeners = Arc::new(Listeners::default());
    let tools = Arc::new(ToolCache::default());
    let owner: Sink = Arc::new(InternalOwner {
        listeners: listeners.clone(),
        tools: tools.clone(),
    });
    match app
        .router
        .open_session(&init, caller, principal, owner, &session.cancel)
        .await
    {
        Ok((route, result)) => {
            session.establish(LATEST_SESSION_VERSION.to_owned(), init.capabilities, route);
            tracing::info!(%principal, per_call = caller.per_call, "stateless route opened");
            Ok(Arc::new(Internal {
                session,
                init: result,
                listeners,
                tools,
            }))
        }
        Err(e) => {
            app.sessions.end(&session.id).await;
            Err(json_body(
                StatusCode::SERVICE_UNAVAILABLE,
                RpcError::new(code::BACKEND_ERROR, e.to_string()).to_null_id_response(),
            ))
        }
    }
}

/// Receives backend traffic of a stateless route that no call claims: list changes
/// and resource updates go to the listen streams that asked for them. Server→client
/// requests outside any call cannot reach a stateless client: refused at once.
pub(super) struct InternalOwner {
    pub(super) listeners: Arc<Listeners>,
    pub(super) tools: Arc<ToolCache>,
}

impl Downstream for InternalOwner {
    fn notify(&self, n: Notification) {
        if n.method == "notifications/tools/list_changed" {
            self.tools.changed();
        }
        self.listeners.deliver(&n);
    }

    fn ask(&self, method: String, _: Option<Raw>) -> BoxFuture<'static, ClientAnswer> {
        Box::pin(async move {
            Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "{method}: a stateless-era client can only be asked within one of its requests"
                ),
            )
            .to_raw())
        })
    }
}

/// A request Gantry itself makes on a principal's route (no client is asked
/// anything); the result, or the error object as text.
pub(super) async fn own_request(
    app: &App,
    internal: &Internal,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let Some(route) = internal.session.route() else {
        return Err("no route".into());
    };
    let req = Request {
        id: RequestId::from_string("gantry"),
        method: method.to_owned(),
        params: Some(to_raw(&params)),
    };
    let ctx = crate::call::CallCtx {
        sink: internal.session.standalone_sink(),
        cancel: internal.session.cancel.child_token(),
        client: crate::call::ClientView {
            capabilities: None,
            log_level: None,
            era: crate::mcp::Era::Stateless,
            access: None,
        },
        timeout: None,
        trace: None,
    };
    match app.router.dispatch(route, req, ctx).await.0 {
        Some(Response { outcome: Ok(r), .. }) => {
            serde_json::from_str(r.get()).map_err(|e| e.to_string())
        }
        Some(Response {
            outcome: Err(e), ..
        }) => Err(e.get().to_owned()),
        None => Err("cancelled".into()),
    }
}

/// The `x-mcp-header` declarations of the principal's tools, listed once and again
/// after a `tools/list_changed`.
pub(super) async fn tool_headers(app: &App, internal: &Internal) -> Arc<ToolHeaders> {
    internal
        .tools
        .get_or_list(|| {
            crate::mcp::param::list_all(|cursor| async move {
                let mut params = json!({});
                if let (Some(c), Some(p)) = (cursor, params.as_object_mut()) {
                    p.insert("cursor".into(), c);
                }
                own_request(app, internal, "tools/list", params).await.ok()
            })
        })
        .await
}

//! Each caller's route to the backends for its stateless requests, and the requests
//! Gantry itself makes on it (tool header declarations, subscriptions).

use super::super::{App, FrontError};
use crate::call::{ClientAnswer, Downstream, Sink};
use crate::front::stateless::json_body;
use crate::front::stateless::listen::Listeners;
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, to_raw, Notification, Request, RequestId, Response, RpcError};
use crate::mcp::param::ToolHeaders;
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

/// A principal's tool header declarations, listed once and again after a
/// `notifications/tools/list_changed`. Every `tools/call` reads them: a read is
/// a load, with no lock or counter that the principal's calls would share.
#[derive(Default)]
pub(super) struct ToolCache {
    /// `None`: not listed since the last change.
    listed: arc_swap::ArcSwapOption<ToolHeaders>,
    /// Changes seen; a listing under way keeps what it read only if none came
    /// meanwhile.
    changes: std::sync::atomic::AtomicU64,
    /// Held while listing, so that calls waiting for the list do not all list.
    listing: tokio::sync::Mutex<()>,
}

impl ToolCache {
    /// The declarations as listed, if they are.
    pub(super) fn listed(&self) -> arc_swap::Guard<Option<Arc<ToolHeaders>>> {
        self.listed.load()
    }

    /// Forgets the list: the tools changed.
    fn changed(&self) {
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.listed.store(None);
    }

    /// The declarations, listed by `list` (what it read, and whether that was all)
    /// if they are not at hand: by one caller at a time, the others waiting for its
    /// list. A list that is not complete is used once and not kept.
    async fn get_or_list<F, Fut>(&self, list: F) -> Arc<ToolHeaders>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = (ToolHeaders, bool)>,
    {
        use std::sync::atomic::Ordering;
        if let Some(t) = self.listed.load_full() {
            return t;
        }
        let _listing = self.listing.lock().await;
        if let Some(t) = self.listed.load_full() {
            return t;
        }
        let changes = self.changes.load(Ordering::SeqCst);
        let (all, complete) = list().await;
        let all = Arc::new(all);
        if complete {
            // Kept unless the tools changed while they were listed; a change after
            // this look forgets it again (it counts before it forgets).
            self.listed.store(Some(all.clone()));
            if self.changes.load(Ordering::SeqCst) != changes {
                self.listed.store(None);
            }
        }
        all
    }
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
            meta: None,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn declared(tool: &str) -> ToolHeaders {
        let mut t = ToolHeaders::new();
        t.insert(tool.to_owned(), Vec::new());
        t
    }

    #[tokio::test]
    async fn declarations_are_listed_once_until_the_tools_change() {
        let cache = ToolCache::default();
        let lists = AtomicUsize::new(0);
        let list = |tool: &'static str| {
            let lists = &lists;
            move || async move {
                lists.fetch_add(1, Ordering::SeqCst);
                (declared(tool), true)
            }
        };
        assert!(cache.get_or_list(list("a")).await.contains_key("a"));
        assert!(cache.get_or_list(list("b")).await.contains_key("a"));
        assert!(cache.listed().is_some());
        assert_eq!(lists.load(Ordering::SeqCst), 1);
        cache.changed();
        assert!(cache.listed().is_none());
        assert!(cache.get_or_list(list("b")).await.contains_key("b"));
        assert_eq!(lists.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_list_the_tools_changed_under_or_that_is_not_complete_is_not_kept() {
        let cache = ToolCache::default();
        let got = cache
            .get_or_list(|| async {
                // The backend says its tools changed while they are being listed.
                cache.changed();
                (declared("old"), true)
            })
            .await;
        assert!(
            got.contains_key("old"),
            "the caller still gets what was read"
        );
        assert!(
            cache.listed().is_none(),
            "a list older than a change was kept"
        );
        let got = cache
            .get_or_list(|| async { (declared("part"), false) })
            .await;
        assert!(got.contains_key("part"));
        assert!(cache.listed().is_none(), "an incomplete list was kept");
        cache
            .get_or_list(|| async { (declared("new"), true) })
            .await;
        assert!(cache
            .listed()
            .as_deref()
            .is_some_and(|t| t.contains_key("new")));
    }

    #[tokio::test]
    async fn callers_waiting_for_a_list_share_it() {
        let cache = Arc::new(ToolCache::default());
        let lists = Arc::new(AtomicUsize::new(0));
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (cache, lists) = (cache.clone(), lists.clone());
            tokio::spawn(async move {
                cache
                    .get_or_list(|| async move {
                        lists.fetch_add(1, Ordering::SeqCst);
                        let _ = wait.await;
                        (declared("a"), true)
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        let second = {
            let (cache, lists) = (cache.clone(), lists.clone());
            tokio::spawn(async move {
                cache
                    .get_or_list(|| async move {
                        lists.fetch_add(1, Ordering::SeqCst);
                        (declared("b"), true)
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        let _ = go.send(());
        assert!(first.await.unwrap().contains_key("a"));
        assert!(second.await.unwrap().contains_key("a"));
        assert_eq!(lists.load(Ordering::SeqCst), 1);
    }
}

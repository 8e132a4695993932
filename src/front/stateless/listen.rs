//! `subscriptions/listen`: the principal's listen streams, their filters, and the
//! resource subscriptions they hold upstream (counted per URI).

use super::super::App;
use super::route::Internal;
use crate::jsonrpc::{code, Notification, RequestId, RpcError};
use crate::mcp::META_SUBSCRIPTION_ID as META_SUBSCRIPTION;
use axum::http::StatusCode;
use axum::response::Response as HttpResponse;
use futures::StreamExt as _;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

use crate::front::stateless::answer;
use crate::front::stateless::clip;
use crate::front::stateless::route::own_request;
use crate::mcp::listen::ListenFilter as Filter;
use crate::router::UpstreamSubs;

pub(super) struct Listener {
    pub(super) n: u64,
    /// The listen request's id: every notification carries it.
    pub(super) subscription: Value,
    pub(super) filter: Filter,
    pub(super) tx: mpsc::Sender<bytes::Bytes>,
}

/// The listen streams of one principal, and its resource subscriptions upstream
/// (counted, so the backend sees one subscribe per URI however many streams ask).
#[derive(Default)]
pub(crate) struct Listeners {
    pub(super) list: Mutex<Vec<Listener>>,
    pub(super) uri_refs: Mutex<HashMap<String, usize>>,
    pub(super) upstream: UpstreamSubs,
    pub(super) next: AtomicU64,
}

/// Listen streams one principal may hold open.
pub(super) const MAX_LISTENS_PER_PRINCIPAL: usize = 32;

/// A notification for one listen stream: `params._meta` names the subscription.
pub(super) fn tagged(n: &Notification, subscription: &Value) -> String {
    let mut params: Map<String, Value> = n
        .params
        .as_ref()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_SUBSCRIPTION.into(), subscription.clone());
    }
    json!({ "jsonrpc": "2.0", "method": n.method, "params": params }).to_string()
}

impl Listeners {
    pub(super) fn deliver(&self, n: &Notification) {
        let mut list = self.list.lock();
        list.retain(|l| !l.tx.is_closed());
        let uri = crate::jsonrpc::string_field(n.params.as_ref(), "uri");
        for l in list
            .iter()
            .filter(|l| l.filter.wants(&n.method, uri.as_deref()))
        {
            let event = crate::sse::message_event(None, &tagged(n, &l.subscription));
            if l.tx.try_send(bytes::Bytes::from(event)).is_err() {
                tracing::warn!(method = %n.method, "listen stream not read fast enough; notification dropped");
            }
        }
    }

    /// Counts one more stream wanting each of `uris`.
    pub(super) fn add_uris(&self, uris: &[String]) {
        let mut refs = self.uri_refs.lock();
        for u in uris {
            *refs.entry(u.clone()).or_insert(0) += 1;
        }
    }

    /// Counts one stream fewer wanting each of `uris`.
    pub(super) fn drop_uris(&self, uris: &[String]) {
        let mut refs = self.uri_refs.lock();
        for u in uris {
            if let Some(c) = refs.get_mut(u) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    refs.remove(u);
                }
            }
        }
    }

    fn wanted(&self, uri: &str) -> bool {
        self.uri_refs.lock().contains_key(uri)
    }

    /// Brings the upstream subscription to `uri` in line with the open streams.
    async fn reconcile(&self, app: &App, internal: &Internal, uri: &str) -> Result<(), String> {
        self.upstream
            .reconcile(
                uri,
                || self.wanted(uri),
                |method| upstream_subscription(app, internal, method, uri),
            )
            .await
            .map(|_| ())
    }
}

/// Honoured subset of a listen request's `notifications`, or a -32602.
pub(super) fn filter_of(notifications: Option<&Value>, caps: &Value) -> Result<Filter, RpcError> {
    Filter::parse(notifications)
        .map(|f| f.within(caps))
        .map_err(|why| RpcError::new(code::INVALID_PARAMS, why))
}

/// Subscribes or unsubscribes one URI on the principal's route.
async fn upstream_subscription(
    app: &App,
    internal: &Internal,
    method: &str,
    uri: &str,
) -> Result<(), String> {
    own_request(app, internal, method, json!({ "uri": uri }))
        .await
        .map(|_| ())
}

/// `subscriptions/listen`: a long-lived SSE stream, acknowledged first, fed by the
/// backends' list changes and resource updates. The client closing it ends it.
pub(super) async fn listen(
    app: Arc<App>,
    internal: Arc<Internal>,
    id: RequestId,
    notifications: Option<&Value>,
) -> HttpResponse {
    let caps = internal
        .init
        .get("capabilities")
        .cloned()
        .unwrap_or_default();
    let open = {
        let mut list = internal.listeners.list.lock();
        list.retain(|l| !l.tx.is_closed());
        list.len()
    };
    if open >= MAX_LISTENS_PER_PRINCIPAL {
        return answer(
            StatusCode::OK,
            Some(id),
            &RpcError::new(
                code::INVALID_REQUEST,
                format!("at most {MAX_LISTENS_PER_PRINCIPAL} listen streams per caller are open at once"),
            ),
        );
    }
    let filter = match filter_of(notifications, &caps) {
        Ok(f) => f,
        Err(e) => return answer(StatusCode::OK, Some(id), &e),
    };
    let subscription: Value = serde_json::from_str(id.raw().get()).unwrap_or(Value::Null);
    internal.listeners.add_uris(&filter.uris);
    for uri in &filter.uris {
        if let Err(e) = internal.listeners.reconcile(&app, &internal, uri).await {
            internal.listeners.drop_uris(&filter.uris);
            for uri in &filter.uris {
                let _ = internal.listeners.reconcile(&app, &internal, uri).await;
            }
            tracing::info!(uri = %clip(uri), error = %clip(&e), "listen: upstream subscribe failed");
            return answer(
                StatusCode::OK,
                Some(id),
                &RpcError::new(
                    code::INVALID_PARAMS,
                    format!("cannot subscribe to {}: {}", clip(uri), clip(&e)),
                ),
            );
        }
    }
    let (tx, rx) = mpsc::channel::<bytes::Bytes>(256);
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": { "_meta": { META_SUBSCRIPTION: subscription }, "notifications": filter.to_json() },
    });
    // Cannot fail: the channel is new and empty.
    let _ = tx.try_send(bytes::Bytes::from(crate::sse::message_event(
        None,
        &ack.to_string(),
    )));
    let n = internal.listeners.next.fetch_add(1, Ordering::Relaxed);
    internal.listeners.list.lock().push(Listener {
        n,
        subscription: subscription.clone(),
        filter: filter.clone(),
        tx: tx.clone(),
    });
    // Keeps the route busy (never reaped while a stream is open), sends keep-alives,
    // and cleans up when the client goes away or Gantry stops.
    let guard = internal.session.track(&id);
    let keepalive = app.cfg.server.sse_keepalive;
    let streams = app.clone();
    tokio::spawn(async move {
        let _guard = guard;
        let ended = internal.session.cancel.clone();
        loop {
            tokio::select! {
                _ = tx.closed() => break,
                _ = ended.cancelled() => {
                    // A graceful end: the listen request's result, then close.
                    let done = json!({
                        "jsonrpc": "2.0", "id": subscription,
                        "result": { "resultType": "complete", "_meta": { META_SUBSCRIPTION: subscription } },
                    });
                    let _ = tx.try_send(bytes::Bytes::from(crate::sse::message_event(None, &done.to_string())));
                    break;
                }
                _ = tokio::time::sleep(keepalive) => {
                    if tx.send(bytes::Bytes::from_static(b":\n\n")).await.is_err() {
                        break;
                    }
                }
            }
        }
        internal.listeners.list.lock().retain(|l| l.n != n);
        internal.listeners.drop_uris(&filter.uris);
        if !internal.session.is_ended() {
            // (A closing route's subscriptions go with it.)
            for uri in &filter.uris {
                if let Err(e) = internal.listeners.reconcile(&app, &internal, uri).await {
                    tracing::debug!(uri = %clip(uri), error = %clip(&e), "listen: upstream unsubscribe failed");
                }
            }
        }
        tracing::debug!("listen stream ended");
    });
    crate::front::http::sse_response(
        &streams,
        crate::front::http::SseKind::Listen,
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>),
    )
}

//! Backend→client traffic: which call or which owner each message a backend sends
//! belongs to (README "Which client gets what"). Responses go to their pending
//! call, progress to the call whose rewritten token it carries, logs and
//! server→client requests to the call whose stream carried them or the only call in
//! flight, else to the owner; what nobody can claim is dropped and counted.

use super::core::{parse_object, Core};
use crate::call::Sink;
use crate::jsonrpc::{
    code, empty_object, to_raw, Message, Notification, Request, RequestId, Response, RpcError,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Core {
    pub(super) fn attribute(&self, related: Option<u64>) -> Option<Sink> {
        self.pending.attribute(related)
    }

    pub(super) fn owner(&self) -> Option<Sink> {
        self.owner.lock().clone()
    }

    pub(super) fn drop_unattributed(&self, what: &str) {
        self.stats.unattributed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(backend = %self.name, what, "backend message with no client to deliver it to; dropped");
    }

    /// Handles one message from the backend (incarnation `gen`). `related` is the
    /// upstream id of the request whose response stream carried it, if any.
    pub(crate) fn incoming(self: &Arc<Self>, gen: u64, msg: Message, related: Option<u64>) {
        match msg {
            Message::Response(r) => {
                let entry =
                    r.id.as_ref()
                        .and_then(RequestId::as_u64)
                        .and_then(|id| self.pending.take(id));
                match entry {
                    Some(p) => {
                        let _ = p.reply.send(Ok(r));
                    }
                    None => tracing::debug!(backend = %self.name, id = ?r.id,
                        "response to no pending request (late, cancelled or unknown); dropped"),
                }
            }
            Message::Notification(n) => self.incoming_notification(n, related),
            Message::Request(req) => self.incoming_request(gen, req, related),
        }
    }

    pub(super) fn incoming_notification(&self, n: Notification, related: Option<u64>) {
        match n.method.as_str() {
            "notifications/progress" => {
                let Some(mut params) = parse_object(n.params.as_ref()) else {
                    return self.drop_unattributed("malformed progress");
                };
                let token = params
                    .get("progressToken")
                    .and_then(serde_json::Value::as_u64);
                let route = token.and_then(|t| self.pending.progress_route(t));
                match route {
                    Some((sink, client_token)) => {
                        params.insert("progressToken".into(), client_token);
                        sink.notify(Notification::new(&n.method, Some(to_raw(&params))));
                    }
                    None => self.drop_unattributed("progress for no active request"),
                }
            }
            "notifications/cancelled" => {
                // The backend withdraws one of its own requests to the client.
                let key = parse_object(n.params.as_ref())
                    .and_then(|p| p.get("requestId").map(|v| v.to_string()));
                if let Some(h) = key.and_then(|k| self.asks.lock().remove(&k)) {
                    h.abort();
                }
            }
            // A stateless-era backend acknowledging Gantry's listen: nothing for clients.
            "notifications/subscriptions/acknowledged" => {
                // Which listen it acknowledges: its subscriptionId is the listen
                // request's id (an old, cancelled listen's counts for nothing).
                let listen = parse_object(n.params.as_ref())
                    .and_then(|p| {
                        p.get("_meta")?
                            .get(crate::mcp::META_SUBSCRIPTION_ID)?
                            .as_u64()
                    })
                    .and_then(|id| self.pending.listen_version(id));
                let Some(v) = listen else { return };
                self.listen_acked.send_if_modified(|acked| {
                    let newer = v > *acked;
                    if newer {
                        *acked = v;
                    }
                    newer
                });
            }
            "notifications/tools/list_changed"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed" => {
                if n.method == "notifications/tools/list_changed" {
                    self.tool_headers.changed();
                }
                self.lists
                    .announce(super::lists::ListKind::changed_by(&n.method));
                match self.owner() {
                    Some(sink) => sink.notify(n),
                    None => self.drop_unattributed("notification"),
                }
            }
            "notifications/message" => match self.attribute(related).or_else(|| self.owner()) {
                Some(sink) => sink.notify(n),
                None => self.drop_unattributed("log message"),
            },
            // list_changed, resources/updated …: about the connection, not one call,
            // whichever stream carried them; the owner (session or hub) fans out.
            _ => match self.owner() {
                Some(sink) => sink.notify(n),
                None => self.drop_unattributed("notification"),
            },
        }
    }

    pub(super) fn incoming_request(self: &Arc<Self>, gen: u64, req: Request, related: Option<u64>) {
        if req.method == "ping" {
            self.send_line(gen, Response::ok(req.id, empty_object()).to_json());
            return;
        }
        let Some(sink) = self.attribute(related).or_else(|| self.owner()) else {
            self.drop_unattributed("server-to-client request");
            let err = RpcError::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "no client session can answer `{}` for this backend",
                    req.method
                ),
            );
            self.send_line(gen, Response::err(Some(req.id), &err).to_json());
            return;
        };
        let core = self.clone();
        let key = req.id.key().to_owned();
        let key2 = key.clone();
        let task = tokio::spawn(async move {
            let answer = sink.ask(req.method, req.params).await;
            core.asks.lock().remove(&key2);
            let resp = Response {
                id: Some(req.id),
                outcome: answer,
            };
            core.send_line(gen, resp.to_json());
        });
        self.asks.lock().insert(key, task.abort_handle());
    }
}

//! The fan-out point of a backend connection shared by several client sessions
//! (`shared` and `per-user` modes).
//!
//! What a shared backend sends outside any call goes through its [`Hub`]:
//! `resources/updated` reaches only the sessions subscribed to that URI (subscriptions
//! are reference-counted: the backend sees one subscribe per URI), `*/list_changed`
//! reaches every session on the connection, and anything that cannot be attributed to
//! exactly one client — a log line, a server→client request — is never broadcast: it
//! is dropped (requests get a JSON-RPC error) and counted. Log levels are kept per
//! session; the backend runs at the most verbose level any session asked for.

use crate::call::{ClientAnswer, Downstream, Sink};
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, Notification, RpcError};
use crate::upstream::BackendStats;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use crate::mcp::methods::{level_rank, LOG_LEVELS};

struct Member {
    sink: Sink,
    level: Option<u8>,
}

/// The sessions using one shared backend connection.
pub struct Hub {
    backend: String,
    members: Mutex<HashMap<u64, Member>>,
    subs: Mutex<HashMap<String, HashSet<u64>>>,
    upstream_level: Mutex<Option<u8>>,
    upstream_subs: UpstreamSubs,
    stats: Arc<BackendStats>,
}

/// The URIs a backend connection is subscribed to, as far as Gantry has told it.
///
/// Several clients' subscribes and unsubscribes of one URI race (a stream closing while
/// another opens). Sending "the first subscribe" and "the last unsubscribe" as their
/// counts change lets the two requests overtake each other and leave the backend
/// unsubscribed while someone waits for updates. So changes go upstream one at a
/// time, each decided under the lock from what the clients want *now*: whatever the
/// interleaving, the backend ends in the state the clients' last wish asks for.
#[derive(Default)]
pub struct UpstreamSubs(tokio::sync::Mutex<HashSet<String>>);

impl UpstreamSubs {
    /// Brings the backend's subscription to `uri` in line with `wanted()` (read under
    /// the lock), sending `resources/subscribe` or `resources/unsubscribe` through
    /// `send` if it differs. `Ok(None)`: nothing needed sending. On an error the
    /// recorded state is unchanged.
    pub async fn reconcile<T, E, Fut>(
        &self,
        uri: &str,
        wanted: impl FnOnce() -> bool,
        send: impl FnOnce(&'static str) -> Fut,
    ) -> Result<Option<T>, E>
    where
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let mut up = self.0.lock().await;
        let want = wanted();
        if want == up.contains(uri) {
            return Ok(None);
        }
        let method = if want {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        let answer = send(method).await?;
        if want {
            up.insert(uri.to_owned());
        } else {
            up.remove(uri);
        }
        Ok(Some(answer))
    }
}

impl Hub {
    /// An empty hub for `backend`.
    pub fn new(backend: &str, stats: Arc<BackendStats>) -> Self {
        Self {
            backend: backend.to_owned(),
            members: Mutex::new(HashMap::new()),
            subs: Mutex::new(HashMap::new()),
            upstream_level: Mutex::new(None),
            upstream_subs: UpstreamSubs::default(),
            stats,
        }
    }

    /// Adds a session; `sink` is its standalone stream.
    pub fn join(&self, key: u64, sink: Sink) {
        self.members
            .lock()
            .insert(key, Member { sink, level: None });
    }

    /// Removes a session. Returns what the backend must now be told: the URIs
    /// nobody subscribes to any more, and the log level to run at if the most
    /// verbose session just left; and whether the hub is now empty.
    pub fn leave(&self, key: u64) -> Leaving {
        let (empty, wanted) = {
            let mut m = self.members.lock();
            m.remove(&key);
            (m.is_empty(), m.values().filter_map(|x| x.level).min())
        };
        let level = {
            let mut up = self.upstream_level.lock();
            match (wanted, *up) {
                (Some(w), Some(u)) if w > u => {
                    *up = Some(w);
                    Some(w)
                }
                _ => None,
            }
        };
        let mut gone = Vec::new();
        self.subs.lock().retain(|uri, keys| {
            keys.remove(&key);
            if keys.is_empty() {
                gone.push(uri.clone());
                false
            } else {
                true
            }
        });
        Leaving {
            unsubscribe: gone,
            level,
            empty,
        }
    }

    /// Number of sessions on the hub.
    pub fn len(&self) -> usize {
        self.members.lock().len()
    }

    /// Whether no session uses the hub.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether some session subscribes to `uri`.
    pub fn is_subscribed(&self, uri: &str) -> bool {
        self.subs.lock().contains_key(uri)
    }

    /// What the backend is subscribed to; see [`UpstreamSubs`].
    pub fn upstream_subs(&self) -> &UpstreamSubs {
        &self.upstream_subs
    }

    /// Records a subscription; true if it is the URI's first (send it upstream).
    pub fn subscribe(&self, key: u64, uri: &str) -> bool {
        let mut subs = self.subs.lock();
        let set = subs.entry(uri.to_owned()).or_default();
        let first = set.is_empty();
        set.insert(key);
        first
    }

    /// Drops a subscription; true if it was the URI's last (send it upstream).
    pub fn unsubscribe(&self, key: u64, uri: &str) -> bool {
        let mut subs = self.subs.lock();
        let Some(set) = subs.get_mut(uri) else {
            return false;
        };
        if !set.remove(&key) {
            return false;
        }
        if set.is_empty() {
            subs.remove(uri);
            true
        } else {
            false
        }
    }

    /// Sets a session's log level. Returns the level the backend must now run at,
    /// if that changed (the most verbose any session asked for).
    pub fn set_level(&self, key: u64, level: u8) -> Option<u8> {
        let wanted = {
            let mut m = self.members.lock();
            if let Some(member) = m.get_mut(&key) {
                member.level = Some(level);
            }
            m.values().filter_map(|x| x.level).min()
        };
        let mut up = self.upstream_level.lock();
        if wanted.is_some() && wanted != *up {
            *up = wanted;
            wanted
        } else {
            None
        }
    }

    fn drop_unattributed(&self, what: &str) {
        self.stats.unattributed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(backend = %self.backend, what, "shared backend message attributable to no single client; dropped");
    }
}

/// What a session's departure means for the shared backend.
#[derive(Debug, PartialEq, Eq)]
pub struct Leaving {
    /// URIs to unsubscribe upstream (their last subscriber left).
    pub unsubscribe: Vec<String>,
    /// A less verbose log level the backend may now run at.
    pub level: Option<u8>,
    /// No session uses the connection any more.
    pub empty: bool,
}

fn uri_of(n: &Notification) -> Option<String> {
    crate::jsonrpc::string_field(n.params.as_ref(), "uri")
}

impl Downstream for Hub {
    fn notify(&self, n: Notification) {
        match n.method.as_str() {
            "notifications/resources/updated" => {
                let Some(uri) = uri_of(&n) else {
                    return self.drop_unattributed("resources/updated without uri");
                };
                let keys: Vec<u64> = self
                    .subs
                    .lock()
                    .get(&uri)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default();
                let sinks: Vec<Sink> = {
                    let m = self.members.lock();
                    keys.iter()
                        .filter_map(|k| m.get(k).map(|x| x.sink.clone()))
                        .collect()
                };
                for s in sinks {
                    s.notify(n.clone());
                }
            }
            "notifications/tools/list_changed"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed" => {
                let sinks: Vec<Sink> = self
                    .members
                    .lock()
                    .values()
                    .map(|x| x.sink.clone())
                    .collect();
                for s in sinks {
                    s.notify(n.clone());
                }
            }
            other => self.drop_unattributed(other),
        }
    }

    fn ask(&self, method: String, _params: Option<Raw>) -> BoxFuture<'static, ClientAnswer> {
        self.drop_unattributed("server-to-client request");
        let err = RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("`{method}` cannot be attributed to a single client of this shared connection"),
        );
        Box::pin(async move { Err(err.to_raw()) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[derive(Default)]
    struct Rec(Mutex<Vec<String>>);
    impl Downstream for Rec {
        fn notify(&self, n: Notification) {
            (self.0).lock().push(n.to_json());
        }
        fn ask(&self, _: String, _: Option<Raw>) -> BoxFuture<'static, ClientAnswer> {
            Box::pin(async { Err(crate::jsonrpc::empty_object()) })
        }
    }

    #[test]
    fn updates_reach_only_subscribers_and_subscriptions_are_counted() {
        let hub = Hub::new("b", Arc::new(BackendStats::default()));
        let (a, b) = (Arc::new(Rec::default()), Arc::new(Rec::default()));
        hub.join(1, a.clone());
        hub.join(2, b.clone());
        assert!(hub.subscribe(1, "x://1"));
        assert!(!hub.subscribe(2, "x://1"));
        let upd = Notification::new(
            "notifications/resources/updated",
            Some(crate::jsonrpc::to_raw(&serde_json::json!({"uri":"x://1"}))),
        );
        hub.notify(upd.clone());
        assert!(!hub.unsubscribe(1, "x://1"));
        hub.notify(upd);
        assert_eq!((a.0).lock().len(), 1);
        assert_eq!((b.0).lock().len(), 2);
        let left = hub.leave(2);
        assert_eq!(left.unsubscribe, vec!["x://1".to_owned()]);
        assert!(!left.empty);
        hub.notify(Notification::new("notifications/message", None));
        assert_eq!(hub.stats.unattributed.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn backend_runs_at_the_most_verbose_level() {
        let hub = Hub::new("b", Arc::new(BackendStats::default()));
        hub.join(1, Arc::new(Rec::default()));
        hub.join(2, Arc::new(Rec::default()));
        assert_eq!(hub.set_level(1, 3), Some(3));
        assert_eq!(hub.set_level(2, 5), None);
        assert_eq!(hub.set_level(2, 0), Some(0));
        // The verbose session leaves: the backend may go back to the other's level.
        assert_eq!(hub.leave(2).level, Some(3));
        assert_eq!(hub.leave(1).level, None);
    }

    /// A stream closing (its unsubscribe slow to reach the backend) while another opens
    /// (its subscribe fast): the backend must end subscribed, as the clients want.
    #[tokio::test]
    async fn racing_subscribe_and_unsubscribe_leave_the_backend_as_the_clients_want() {
        use std::sync::atomic::AtomicBool;
        use std::time::Duration;
        let up = Arc::new(UpstreamSubs::default());
        let wanted = Arc::new(AtomicBool::new(true));
        // The backend: applies each request when it arrives.
        let backend = Arc::new(AtomicBool::new(false));
        let apply = |backend: Arc<AtomicBool>, m: &'static str, delay: u64| async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            backend.store(m == "resources/subscribe", Ordering::SeqCst);
            Ok::<_, ()>(())
        };
        up.reconcile(
            "x://1",
            || wanted.load(Ordering::SeqCst),
            |m| apply(backend.clone(), m, 0),
        )
        .await
        .unwrap();
        assert!(backend.load(Ordering::SeqCst));
        // The last stream closes: its unsubscribe takes 100 ms to arrive...
        wanted.store(false, Ordering::SeqCst);
        let closing = {
            let (up, wanted, backend) = (up.clone(), wanted.clone(), backend.clone());
            tokio::spawn(async move {
                up.reconcile(
                    "x://1",
                    || wanted.load(Ordering::SeqCst),
                    |m| apply(backend, m, 100),
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        // ...and a new stream opens meanwhile, its subscribe instant.
        wanted.store(true, Ordering::SeqCst);
        up.reconcile(
            "x://1",
            || wanted.load(Ordering::SeqCst),
            |m| apply(backend.clone(), m, 0),
        )
        .await
        .unwrap();
        closing.await.unwrap().unwrap();
        assert!(
            backend.load(Ordering::SeqCst),
            "the backend was left unsubscribed"
        );
    }
}

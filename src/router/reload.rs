//! A new configuration's backends, applied to the running router and its sessions:
//! new backends start, removed ones drain and stop, changed ones are replaced, and
//! the others — and every client session — keep running.
//!
//! A session's backends keep their indices ([`super::route::Links`]): a backend
//! added is appended, one changed is replaced in place, one removed stays as an
//! entry without connection. A session opened with one backend stays transparent
//! (its tool names cannot change under it): it follows changes of that backend
//! but is not given new ones.

use super::route::{Link, Links, SessionRoute};
use super::slot::Slot;
use super::Router;
use crate::config::Config;
use crate::jsonrpc::Notification;
use crate::upstream::{Conn, ListKind};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a reload does to the backends, by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadPlan {
    /// Backends the new configuration adds.
    pub added: Vec<String>,
    /// Backends whose settings changed (restarted with the new ones).
    pub changed: Vec<String>,
    /// Backends the new configuration no longer has (drained, then stopped).
    pub removed: Vec<String>,
    /// Backends that stay as they are.
    pub unchanged: Vec<String>,
    /// Settings applied at once (`auth`, `limits`).
    pub live: Vec<String>,
    /// Settings that differ but take effect only after a restart.
    pub needs_restart: Vec<String>,
}

impl ReloadPlan {
    /// Compares a running configuration (`old`, with the backends it runs now,
    /// `backends`) with a new one.
    pub fn between(old: &Config, backends: &[crate::config::BackendConfig], new: &Config) -> Self {
        let mut plan = ReloadPlan::default();
        let before: HashMap<&str, &crate::config::BackendConfig> =
            backends.iter().map(|b| (b.name.as_str(), b)).collect();
        for b in &new.backends {
            match before.get(b.name.as_str()) {
                None => plan.added.push(b.name.clone()),
                Some(o) if *o != b => plan.changed.push(b.name.clone()),
                Some(_) => plan.unchanged.push(b.name.clone()),
            }
        }
        for b in backends {
            if !new.backends.iter().any(|n| n.name == b.name) {
                plan.removed.push(b.name.clone());
            }
        }
        let mut restart = |what: &str, differs: bool| {
            if differs {
                plan.needs_restart.push(what.to_owned());
            }
        };
        restart("server", old.server != new.server);
        restart("namespacing", old.namespacing != new.namespacing);
        restart("tracing", old.tracing != new.tracing);
        if old.auth != new.auth {
            plan.live.push("auth".into());
        }
        if old.limits != new.limits {
            plan.live.push("limits".into());
        }
        plan
    }

    /// Whether the backends or the catalog change.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }

    /// One line for the log and `check-config`.
    pub fn summary(&self) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        let mut s = format!(
            "added: {}; changed: {}; removed: {}; unchanged: {}",
            list(&self.added),
            list(&self.changed),
            list(&self.removed),
            list(&self.unchanged)
        );
        if !self.live.is_empty() {
            s.push_str(&format!("; applied at once: {}", self.live.join(", ")));
        }
        if !self.needs_restart.is_empty() {
            s.push_str(&format!(
                "; needs restart to take effect: {}",
                self.needs_restart.join(", ")
            ));
        }
        s
    }
}

/// Connections a reload took from the sessions, stopped once idle (or after the
/// grace).
type Retired = Vec<Arc<Conn>>;

impl Router {
    /// Applies `new`'s backends and `[catalog]` to the running router and to every
    /// session in `routes` (see the module docs). In-flight calls on connections
    /// that go finish within `grace`; then those connections stop.
    pub async fn reload(&self, new: &Config, routes: &[&SessionRoute], grace: Duration) {
        let old = self.slots();
        let by_name: HashMap<&str, &Arc<Slot>> =
            old.iter().map(|s| (s.cfg.name.as_str(), s)).collect();
        let slots: Vec<Arc<Slot>> = new
            .backends
            .iter()
            .map(|b| match by_name.get(b.name.as_str()) {
                Some(s) if s.cfg == *b => (*s).clone(),
                _ => Slot::new(b),
            })
            .collect();
        // Slots no longer configured as they were: their shared, per-user and
        // warm connections go once the sessions have let go.
        let gone: Vec<Arc<Slot>> = old
            .iter()
            .filter(|o| !slots.iter().any(|s| Arc::ptr_eq(s, o)))
            .cloned()
            .collect();
        *self.slots.write() = Arc::new(slots.clone());
        *self.catalog.write() = new.catalog.clone();
        let mut retired: Retired = Vec::new();
        for route in routes {
            retired.extend(self.relink(route, &slots).await);
        }
        for slot in &gone {
            retired.extend(slot.take_all().await);
        }
        tokio::spawn(async move {
            let until = tokio::time::Instant::now() + grace;
            while tokio::time::Instant::now() < until && retired.iter().any(|c| c.pending() > 0) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            futures::future::join_all(retired.iter().map(|c| c.shutdown())).await;
        });
    }

    /// Brings one session's backends in line with `slots`; returns the connections
    /// it no longer uses.
    async fn relink(&self, route: &SessionRoute, slots: &[Arc<Slot>]) -> Retired {
        let old = route.links();
        let mut next = Links {
            slots: old.slots.clone(),
            conns: old.conns.clone(),
            hubs: old.hubs.clone(),
            per_call: old.per_call.clone(),
        };
        let mut leaving: Vec<usize> = Vec::new();
        let cancel = CancellationToken::new();
        let mut wanted: Vec<(usize, Arc<Slot>)> = Vec::new();
        for (idx, had) in old.slots.iter().enumerate() {
            match slots.iter().find(|s| s.cfg.name == had.cfg.name) {
                Some(s) if Arc::ptr_eq(s, had) => {}
                Some(s) => {
                    leaving.push(idx);
                    wanted.push((idx, s.clone()));
                }
                None => {
                    leaving.push(idx);
                    if let (Some(c), Some(h), Some(p)) = (
                        next.conns.get_mut(idx),
                        next.hubs.get_mut(idx),
                        next.per_call.get_mut(idx),
                    ) {
                        (*c, *h, *p) = (None, None, false);
                    }
                }
            }
        }
        if !route.single {
            for s in slots {
                if !old.slots.iter().any(|o| o.cfg.name == s.cfg.name) {
                    next.slots.push(s.clone());
                    next.conns.push(None);
                    next.hubs.push(None);
                    next.per_call.push(false);
                    wanted.push((next.slots.len() - 1, s.clone()));
                }
            }
        }
        for (idx, slot) in wanted {
            let link = self
                .connect(
                    &slot,
                    route.key,
                    route.caller,
                    &route.principal,
                    &route.init,
                    &route.owner,
                    &cancel,
                )
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(backend = %slot.cfg.name, error = %e, "reload: no connection for a session");
                    Link::Down
                });
            let (c, h, p) = match link {
                Link::Own(c) => (Some(c), None, false),
                Link::Shared(c, h) => (Some(c), Some(h), false),
                Link::PerCall(c) => (Some(c), None, true),
                Link::Down => (None, None, false),
            };
            if let (Some(s), Some(cs), Some(hs), Some(ps)) = (
                next.slots.get_mut(idx),
                next.conns.get_mut(idx),
                next.hubs.get_mut(idx),
                next.per_call.get_mut(idx),
            ) {
                (*s, *cs, *hs, *ps) = (slot, c, h, p);
            }
        }
        *route.links.write() = Arc::new(next);
        let mut retired = Vec::new();
        for idx in leaving {
            retired.extend(route.leave(&old, idx).await);
        }
        if !route.single {
            self.watch_catalog(route);
            // Whatever the session was shown may have changed.
            let mut told = Vec::new();
            {
                let mut served = route.served.lock();
                for kind in ListKind::ALL {
                    if let Some(s) = served.get_mut(kind.index()) {
                        if s.take().is_some() && !told.contains(&kind.notification()) {
                            told.push(kind.notification());
                        }
                    }
                }
            }
            for method in told {
                route.session.notify(Notification {
                    method: method.into(),
                    params: None,
                });
            }
        }
        retired
    }
}

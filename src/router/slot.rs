//! One configured backend's connections: started within `pool.max_connections`,
//! shared per era they speak, per user, warm per taker era.

use super::client::ClientInit;
use super::hub::Hub;
use crate::call::Sink;
use crate::config::{BackendConfig, SessionMode};
use crate::jsonrpc::to_raw;
use crate::jsonrpc::Raw;
use crate::mcp::{Era, LATEST_SESSION_VERSION};
use crate::router::gantry_info;
use crate::router::Router;
use crate::upstream::{BackendStats, Conn, InitInfo, UpstreamError};
use parking_lot::Mutex;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A connection shared by several sessions, with its fan-out hub.
pub(super) type SharedConn = (Arc<Conn>, Arc<Hub>);

pub(super) struct Slot {
    pub(super) cfg: BackendConfig,
    pub(super) stats: Arc<BackendStats>,
    /// The current shared connections, by the era they speak (replaced after
    /// `pool.max_lifetime`; an old one serves its sessions until the last leaves).
    /// `shared` mode uses both; `per-session` mode the stateless one, for
    /// stateless-era callers.
    pub(super) shared: tokio::sync::Mutex<[Option<SharedConn>; 2]>,
    /// `per-user` connections, by principal and the era they speak.
    pub(super) users: tokio::sync::Mutex<HashMap<(String, Era), SharedConn>>,
    /// Warm connections, by the era of the callers they are for.
    pub(super) warm: Mutex<[Vec<Arc<Conn>>; 2]>,
    /// A stateless-era caller needed a connection of its own: the warm pool keeps
    /// some for them too.
    pub(super) stateless_demand: AtomicBool,
    /// What the backend said about itself the last time a connection came up
    /// (for routes that keep no connection of their own to it).
    pub(super) last_info: Mutex<Option<Arc<InitInfo>>>,
    /// Names of this backend's items left out for another's (each logged and
    /// counted once), by list kind.
    pub(super) conflicts: Mutex<std::collections::HashSet<(usize, String)>>,
}

impl Slot {
    /// A backend with no connection yet.
    pub(super) fn new(b: &BackendConfig) -> Arc<Self> {
        let stats = Arc::new(BackendStats::default());
        // A fixed era is known from the start.
        match b.era {
            crate::config::Era::Auto => {}
            crate::config::Era::Session => {
                stats.eras.set(Era::Session, true);
                stats.eras.set(Era::Stateless, false);
            }
            crate::config::Era::Stateless => {
                stats.eras.set(Era::Stateless, true);
                stats.eras.set(Era::Session, false);
            }
        }
        Arc::new(Slot {
            cfg: b.clone(),
            stats,
            shared: tokio::sync::Mutex::new([None, None]),
            users: tokio::sync::Mutex::new(HashMap::new()),
            warm: Mutex::new([Vec::new(), Vec::new()]),
            stateless_demand: AtomicBool::new(false),
            last_info: Mutex::new(None),
            conflicts: Mutex::new(std::collections::HashSet::new()),
        })
    }

    /// Takes every connection the backend keeps for sessions to come: shared,
    /// per-user and warm ones (to stop them).
    pub(super) async fn take_all(&self) -> Vec<Arc<Conn>> {
        let mut conns: Vec<Arc<Conn>> = self
            .shared
            .lock()
            .await
            .iter_mut()
            .filter_map(Option::take)
            .map(|(c, _)| c)
            .collect();
        conns.extend(self.users.lock().await.drain().map(|(_, (c, _))| c));
        let warm = std::mem::take(&mut *self.warm.lock());
        conns.extend(warm.into_iter().flatten());
        conns
    }

    /// Starts a connection for callers of `want` within `pool.max_connections`.
    pub(super) fn start(
        &self,
        want: Era,
        params: Raw,
        owner: Option<Sink>,
    ) -> Result<Arc<Conn>, UpstreamError> {
        self.start_as(&self.cfg, want, params, owner)
    }

    /// [`Slot::start`] with a configuration of its own (a principal's environment).
    fn start_as(
        &self,
        cfg: &BackendConfig,
        want: Era,
        params: Raw,
        owner: Option<Sink>,
    ) -> Result<Arc<Conn>, UpstreamError> {
        if !self.stats.try_reserve(self.cfg.pool.max_connections) {
            return Err(UpstreamError::AtCapacity {
                backend: self.cfg.name.clone(),
                max: self.cfg.pool.max_connections,
            });
        }
        Ok(Conn::start(cfg, want, params, owner, self.stats.clone()))
    }

    /// The configuration of `principal`'s own connection, when it differs: a stdio
    /// process told whose it is (`principal_env`), an HTTP connection with that
    /// user's exchanged token (`token_exchange`).
    fn for_principal(&self, principal: &str) -> Option<BackendConfig> {
        let env = self
            .cfg
            .stdio
            .as_ref()
            .and_then(|s| s.principal_env.as_ref());
        let exchange = self
            .cfg
            .http
            .as_ref()
            .and_then(|h| h.oauth.as_ref())
            .is_some_and(|o| o.grant == "token_exchange");
        if env.is_none() && !exchange {
            return None;
        }
        let mut cfg = self.cfg.clone();
        if let (Some(var), Some(s)) = (env.cloned(), cfg.stdio.as_mut()) {
            s.env.insert(var, principal.to_owned());
        }
        if let Some(o) = cfg.http.as_mut().and_then(|h| h.oauth.as_mut()) {
            o.for_principal = Some(principal.to_owned());
        }
        Some(cfg)
    }

    /// A ready warm connection for callers of `era`, if the pool has one.
    pub(super) fn take_warm(&self, era: Era) -> Option<Arc<Conn>> {
        let mut warm = self.warm.lock();
        let pool = warm.get_mut(era.index())?;
        let pos = pool.iter().position(|c| c.info().is_some())?;
        Some(pool.swap_remove(pos))
    }

    /// A connection of its own for a stateless-era caller: warm if one is ready.
    pub(super) fn own_stateless(&self, owner: Sink) -> Result<Arc<Conn>, UpstreamError> {
        self.stateless_demand.store(true, Ordering::Relaxed);
        if let Some(c) = self.take_warm(Era::Stateless) {
            c.set_owner(owner);
            return Ok(c);
        }
        self.start(Era::Stateless, self.stateless_init(), Some(owner))
    }

    /// Initialize params for a connection shared by several sessions: Gantry's own
    /// identity and only the client capabilities configured for this backend.
    pub(super) fn shared_init(&self) -> Raw {
        to_raw(&json!({
            "protocolVersion": LATEST_SESSION_VERSION,
            "capabilities": self.cfg.client_capabilities,
            "clientInfo": gantry_info(),
        }))
    }

    /// Initialize params for a session-era backend serving stateless-era callers.
    pub(super) fn stateless_init(&self) -> Raw {
        ClientInit::for_stateless_callers().params()
    }

    /// Initialize params for a connection started for `caller` outside any one
    /// client session (shared, per-user, warm).
    pub(super) fn init_for(&self, era: Era) -> Raw {
        match era {
            Era::Session => self.shared_init(),
            Era::Stateless => self.stateless_init(),
        }
    }

    pub(super) fn remember(&self, info: &Arc<InitInfo>) {
        *self.last_info.lock() = Some(info.clone());
    }

    /// The era a new connection for callers of `era` speaks, once it is up: known
    /// from the backend's earlier connections, or found out by waiting for this one
    /// (bounded by `init_timeout`; a backend that does not come up counts as
    /// speaking the callers' era, and the connection keeps retrying).
    pub(super) async fn era_of(&self, conn: &Conn, cancel: &CancellationToken) -> Era {
        match conn.ready(cancel).await {
            Ok(info) => {
                self.remember(&info);
                info.era
            }
            Err(_) => self.stats.eras.serving(conn.want()),
        }
    }

    /// The connection callers of `era` share (`shared` mode, and stateless-era
    /// callers of a `per-session` backend): one per era the backend serves them in.
    pub(super) async fn shared_conn(
        &self,
        era: Era,
        cancel: &CancellationToken,
    ) -> Result<SharedConn, UpstreamError> {
        let mut table = self.shared.lock().await;
        // Past its maximum lifetime, a shared connection takes no new sessions: it
        // serves the ones it has until the last leaves, then stops. (Only `shared`
        // mode: the stateless connection of a per-session backend is only Gantry's.)
        if self.cfg.session_mode == SessionMode::Shared {
            for entry in table.iter_mut() {
                let expired = entry
                    .as_ref()
                    .is_some_and(|(c, _)| c.age() >= self.cfg.pool.max_lifetime);
                if expired {
                    if let Some((old, hub)) = entry.take() {
                        tracing::info!(backend = %self.cfg.name, "shared connection reached max_lifetime; new sessions get a new one");
                        if hub.is_empty() {
                            tokio::spawn(async move { old.shutdown().await });
                        }
                    }
                }
            }
        }
        let serving = self.stats.eras.serving(era);
        if let Some(c) = table.get(serving.index()).and_then(Option::as_ref) {
            return Ok(c.clone());
        }
        let hub = Arc::new(Hub::new(&self.cfg.name, self.stats.clone()));
        let sink: Sink = hub.clone();
        let conn = self.start(era, self.init_for(era), Some(sink))?;
        // Published under the era it really speaks (other callers wait on the lock).
        let spoken = if self.stats.eras.get(era) == Some(true) {
            era
        } else {
            self.era_of(&conn, cancel).await
        };
        if let Some(existing) = table.get(spoken.index()).and_then(Option::as_ref) {
            let existing = existing.clone();
            tokio::spawn(async move { conn.shutdown().await });
            return Ok(existing);
        }
        let made = (conn, hub);
        if let Some(entry) = table.get_mut(spoken.index()) {
            *entry = Some(made.clone());
        }
        Ok(made)
    }

    /// The connection of a principal's callers of `era` (`per-user` mode).
    pub(super) async fn user_conn(
        &self,
        principal: &str,
        era: Era,
        cancel: &CancellationToken,
    ) -> Result<SharedConn, UpstreamError> {
        let mut users = self.users.lock().await;
        let serving = self.stats.eras.serving(era);
        if let Some(c) = users.get(&(principal.to_owned(), serving)) {
            return Ok(c.clone());
        }
        let hub = Arc::new(Hub::new(&self.cfg.name, self.stats.clone()));
        let sink: Sink = hub.clone();
        let whose = self.for_principal(principal);
        // A warm connection is nobody's: not for a backend told whose one it is.
        let warm = if whose.is_none() {
            self.take_warm(era)
        } else {
            None
        };
        let conn = match (whose, warm) {
            (None, Some(c)) => {
                c.set_owner(sink);
                c
            }
            (Some(cfg), _) => self.start_as(&cfg, era, self.init_for(era), Some(sink))?,
            (None, None) => self.start(era, self.init_for(era), Some(sink))?,
        };
        let spoken = if self.stats.eras.get(era) == Some(true) {
            era
        } else {
            self.era_of(&conn, cancel).await
        };
        let key = (principal.to_owned(), spoken);
        if let Some(existing) = users.get(&key) {
            let existing = existing.clone();
            tokio::spawn(async move { conn.shutdown().await });
            return Ok(existing);
        }
        users.insert(key, (conn.clone(), hub.clone()));
        Ok((conn, hub))
    }
}

impl Router {
    /// Keeps every warm pool at `pool.min_idle` ready connections, replacing those
    /// older than `pool.max_lifetime`: for session-era clients, and for
    /// stateless-era callers of a `per-session` backend that lacks their era once
    /// one has needed a connection of its own. Runs until `stop`.
    pub async fn maintain_pools(&self, stop: CancellationToken) {
        if self.slots().iter().all(|s| s.cfg.pool.min_idle == 0) {
            return;
        }
        loop {
            for slot in self.slots().iter() {
                if slot.cfg.pool.min_idle == 0 {
                    continue;
                }
                for era in [Era::Session, Era::Stateless] {
                    let wanted = match era {
                        Era::Session => slot.cfg.pool.min_idle,
                        Era::Stateless
                            if slot.stateless_demand.load(Ordering::Relaxed)
                                && slot.cfg.session_mode == SessionMode::PerSession
                                && slot.stats.eras.serving(Era::Stateless) == Era::Session =>
                        {
                            slot.cfg.pool.min_idle
                        }
                        Era::Stateless => 0,
                    };
                    let expired: Vec<Arc<Conn>> = {
                        let mut warm = slot.warm.lock();
                        match warm.get_mut(era.index()) {
                            Some(pool) => {
                                let (old, keep): (Vec<_>, Vec<_>) = pool
                                    .drain(..)
                                    .partition(|c| c.age() >= slot.cfg.pool.max_lifetime);
                                *pool = keep;
                                old
                            }
                            None => Vec::new(),
                        }
                    };
                    for c in expired {
                        tokio::spawn(async move { c.shutdown().await });
                    }
                    let have = |s: &Slot| s.warm.lock().get(era.index()).map_or(0, Vec::len);
                    while have(slot) < wanted {
                        match slot.start(era, slot.init_for(era), None) {
                            Ok(c) => {
                                if let Some(pool) = slot.warm.lock().get_mut(era.index()) {
                                    pool.push(c);
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
                _ = stop.cancelled() => break,
            }
        }
        for slot in self.slots().iter() {
            let warm: Vec<Arc<Conn>> = slot
                .warm
                .lock()
                .iter_mut()
                .flat_map(|p| p.drain(..))
                .collect();
            futures::future::join_all(warm.iter().map(|c| c.shutdown())).await;
        }
    }
}

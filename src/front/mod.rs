//! The HTTP surface: the MCP endpoint (POST / GET / DELETE), the legacy HTTP+SSE
//! transport, health endpoints.
//!
//! Check order for the MCP endpoint (spec-checklist §1.1): Host/Origin (403) →
//! credentials (401 / 400, [`crate::auth`]; also on the legacy transport, never on
//! health probes or CORS preflights) → method (405) → Accept (406) → Content-Type
//! (415) → body size (413) → JSON (400, -32700) → session (400 / 404, someone else's
//! session is 404) → `MCP-Protocol-Version` (400) → dispatch. Every HTTP-level error
//! carries a JSON-RPC error body with `"id": null`.

mod conn;
mod edge;
mod error;
mod http;
mod legacy;

mod origin;
pub mod own_wakes;
mod quick;
mod session_era;
mod stateless;
pub mod tls;

pub use conn::raise_open_file_limit;
pub use error::FrontError;
pub use origin::OriginPolicy;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::front::session_era::mcp;
use crate::router::Router;
use crate::session::{BodyOptions, Session, SessionStore};
use crate::telemetry::metrics::{Metrics, MetricsError};
use crate::upstream::BackendStats;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{any, get};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Shared state of the front door.
pub struct App {
    /// The validated configuration.
    pub cfg: Config,
    /// Backends and dispatch.
    pub router: Router,
    /// Live client sessions.
    pub sessions: SessionStore,
    /// Who is calling (API keys, or everyone anonymous); replaced by a reload.
    auth: parking_lot::RwLock<Arc<Authenticator>>,
    /// `[[limits.rules]]`, if any; replaced by a reload.
    limits: parking_lot::RwLock<Option<Arc<crate::limits::Limits>>>,
    /// The `[auth]` and `[limits]` in force (what a reload compares with).
    applied: parking_lot::Mutex<(crate::config::AuthConfig, crate::config::LimitsConfig)>,
    /// `[tracing]`, if configured.
    pub tracing: Option<Arc<crate::telemetry::trace::Tracing>>,
    /// HTTPS (`server.tls`), if configured.
    pub tls: Option<Arc<tls::Tls>>,
    /// `[[auth.rules]]`, if any; replaced by a reload.
    policy: parking_lot::RwLock<Option<Arc<crate::auth::policy::Policy>>>,
    /// Prometheus metrics.
    pub metrics: Metrics,
    /// The built-in authorization server (`auth.mode = "builtin"`), built once.
    pub builtin: Option<Arc<crate::auth::builtin::AuthServer>>,
    origin: OriginPolicy,
    calls: AtomicUsize,
    /// Set when the server stops accepting work (a flag, not a token: every request
    /// looks at it, and a token's look locks it).
    stopping: AtomicBool,
    /// Stateless-era calls waiting for their client's input.
    mrtr: stateless::Mrtr<stateless::Running>,
    /// The quick windows of session-era calls run inline.
    quick: quick::Windows,
    /// Each principal's route to the backends for its stateless-era requests.
    stateless: dashmap::DashMap<String, Arc<tokio::sync::OnceCell<Arc<stateless::Internal>>>>,
}

impl App {
    /// Applies a reloaded configuration: its backends and `[catalog]` go to the
    /// running router and every session (see `router::reload`); the plan returned
    /// names what changed and the settings that need a restart to take effect.
    pub async fn reload(&self, new: Config) -> crate::router::ReloadPlan {
        let mut plan =
            crate::router::ReloadPlan::between(&self.cfg, &self.router.backend_configs(), &new);
        plan.live.clear();
        let (auth_changed, limits_changed) = {
            let applied = self.applied.lock();
            (applied.0 != new.auth, applied.1 != new.limits)
        };
        let builtin_changed = {
            let applied = self.applied.lock();
            applied.0.mode != new.auth.mode || applied.0.builtin != new.auth.builtin
        };
        if builtin_changed {
            plan.needs_restart.push("auth.mode / [auth.builtin]".into());
        }
        // Both built before either is swapped in, and the limits first: a key that
        // the new auth accepts never meets the old limits (a reload applies both at
        // once, as far as any request can tell).
        let auth = (auth_changed && !builtin_changed).then(|| {
            Authenticator::with_oauth(
                &new.auth,
                self.cfg.server.public_url.as_deref(),
                self.auth().keeps_tokens(),
                self.builtin.clone(),
            )
        });
        if let Some(Ok(auth)) = &auth {
            if let Some(rs) = auth.oauth() {
                rs.warm_up();
            }
        }
        if limits_changed {
            // New budgets: what clients had spent under the old rules is forgotten.
            *self.limits.write() = crate::limits::Limits::new(&new.limits);
            self.applied.lock().1 = new.limits.clone();
        }
        match auth {
            Some(Ok(auth)) => {
                *self.policy.write() = crate::auth::policy::Policy::new(&new.auth.rules);
                *self.auth.write() = Arc::new(auth);
                self.applied.lock().0 = new.auth.clone();
                plan.live.push("auth".into());
            }
            Some(Err(e)) => plan.needs_restart.push(format!("auth (not applied: {e})")),
            None => {}
        }
        if limits_changed {
            plan.live.push("limits".into());
        }
        let sessions = self.sessions.all();
        let routes: Vec<&crate::router::SessionRoute> =
            sessions.iter().filter_map(|s| s.route()).collect();
        self.router
            .reload(&new, &routes, self.cfg.server.shutdown_grace)
            .await;
        plan
    }
}

/// Counts a call in progress (graceful shutdown waits for them).
struct CallGuard<'a>(&'a AtomicUsize);
impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why the front door cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error("auth.oauth: {0}")]
    Auth(String),
    #[error(transparent)]
    Builtin(#[from] crate::auth::builtin::BuildError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Tracing(#[from] crate::telemetry::trace::TraceError),
}

impl App {
    /// Builds the front door for `cfg`. With `[auth.oauth]`, `server.public_url`
    /// must be set (the caller derives it from the bound address on loopback).
    pub fn new(cfg: Config) -> Result<Arc<Self>, AppError> {
        let loopback = cfg.listen.ip().is_loopback();
        let exchanges = cfg.backends.iter().any(|b| {
            b.http
                .as_ref()
                .and_then(|h| h.oauth.as_ref())
                .is_some_and(|o| o.grant == "token_exchange")
        });
        let builtin = match cfg.auth.mode {
            crate::config::AuthMode::Builtin => Some(crate::auth::builtin::AuthServer::new(&cfg)?),
            crate::config::AuthMode::External => None,
        };
        let auth = Authenticator::with_oauth(
            &cfg.auth,
            cfg.server.public_url.as_deref(),
            exchanges,
            builtin.clone(),
        )
        .map_err(AppError::Auth)?;
        if let Some(rs) = auth.oauth() {
            rs.warm_up();
        }
        Ok(Arc::new(Self {
            metrics: Metrics::new()?,
            builtin,
            origin: OriginPolicy::new(
                &cfg.server.allowed_hosts,
                &cfg.server.allowed_origins,
                loopback,
            ),
            router: Router::new(&cfg),
            sessions: SessionStore::new(
                cfg.server.max_sessions,
                cfg.server.session_idle_timeout,
                cfg.server.event_buffer,
                crate::session::QuotaConfig {
                    max_live: cfg.server.max_sessions_per_client,
                    per_minute: cfg.server.session_rate_per_client,
                    burst: cfg.server.session_burst_per_client,
                },
            ),
            auth: parking_lot::RwLock::new(Arc::new(auth)),
            policy: parking_lot::RwLock::new(crate::auth::policy::Policy::new(&cfg.auth.rules)),
            limits: parking_lot::RwLock::new(crate::limits::Limits::new(&cfg.limits)),
            applied: parking_lot::Mutex::new((cfg.auth.clone(), cfg.limits.clone())),
            tracing: match &cfg.tracing {
                Some(t) => Some(crate::telemetry::trace::Tracing::new(t)?),
                None => None,
            },
            tls: match &cfg.server.tls {
                Some(t) => Some(tls::Tls::new(&t.cert, &t.key)?),
                None => None,
            },
            calls: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            mrtr: stateless::Mrtr::new(cfg.server.input_timeout),
            quick: quick::Windows::default(),
            stateless: dashmap::DashMap::new(),
            cfg,
        }))
    }

    /// The backend serving the tool or prompt a client names (one backend: it;
    /// several: the name's prefix, when it is a backend's).
    pub fn backend_of(&self, name: &str) -> Option<&str> {
        match self.cfg.backends.as_slice() {
            [only] => Some(only.name.as_str()),
            all => {
                let (prefix, _) = name.split_once(self.cfg.namespacing.separator.as_str())?;
                all.iter().map(|b| b.name.as_str()).find(|b| *b == prefix)
            }
        }
    }

    /// Who is calling: API keys, tokens, or everyone anonymous (as now configured).
    pub fn auth(&self) -> Arc<Authenticator> {
        self.auth.read().clone()
    }

    /// `[[limits.rules]]`, `[[limits.concurrency]]`, `[[limits.timeouts]]` in force.
    pub fn limits(&self) -> Option<Arc<crate::limits::Limits>> {
        self.limits.read().clone()
    }

    /// `who` under `[[auth.rules]]` (`None` without rules: nothing to check).
    pub fn access(&self, who: &crate::auth::Principal) -> Option<Arc<crate::auth::policy::Access>> {
        self.policy.read().clone().map(|policy| {
            Arc::new(crate::auth::policy::Access {
                policy: policy.clone(),
                caller: who.clone(),
            })
        })
    }

    fn call_guard(&self) -> CallGuard<'_> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        CallGuard(&self.calls)
    }

    /// Whether the server has stopped accepting work.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Client requests being answered right now.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    fn body_options(&self, session: &Session, with_ids: bool, prime: bool) -> BodyOptions {
        let priming = (prime && with_ids && session.version().is_some_and(|v| v >= "2025-11-25"))
            .then_some(self.cfg.server.sse_retry);
        BodyOptions {
            with_ids,
            priming,
            preamble: None,
            keepalive: self.cfg.server.sse_keepalive,
            cancel: session.cancel.clone(),
            on_drop: None,
        }
    }
}

/// The axum router for the whole HTTP surface.
pub fn routes(app: Arc<App>) -> axum::Router {
    // Every route here needs a principal; only the probes below are public. Host /
    // Origin first (403), then credentials (401): `edge::admit`, called by the MCP
    // endpoint itself (the hot path has no middleware layers), a layer for the rest.
    let mut protected = axum::Router::new().route("/status", get(status));
    if app.cfg.server.legacy_sse {
        protected = protected
            .route("/sse", get(legacy::open))
            .route("/messages", axum::routing::post(legacy::message));
    }
    let protected = protected
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            edge::admit_layer,
        ))
        .route(&app.cfg.server.path, any(mcp))
        .fallback(edge::not_found);
    // Probes and metrics sit outside both: orchestrators send the pod IP as Host.
    let mut r = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready));
    // The protected-resource metadata (RFC 9728): public, for any origin.
    if let Some(rs) = app.auth().oauth() {
        for path in rs.resource().metadata_paths() {
            r = r.route(
                &path,
                get(edge::resource_metadata).options(edge::resource_metadata),
            );
        }
    }
    // The built-in authorization server: public, like the metadata.
    if let Some(b) = &app.builtin {
        r = r.merge(crate::auth::builtin::routes(b.clone()));
    }
    if app.cfg.server.metrics {
        r = r.route("/metrics", get(metrics));
    }
    r.merge(protected).with_state(app)
}

/// The HTTP surface as one service. A request for the MCP endpoint goes straight to
/// its handler: the router would look its path up, put the matched path, the
/// original URI and the (no) path parameters into the request's extensions, clone a
/// boxed service and box the handler's future again, about 2.5 k instructions and
/// six allocations on every call (BENCHMARKS.md). The handler is also handed the
/// connection's peer as it is, where the router's handlers find it in an extension
/// map allocated for each request. Everything else goes through the router, which
/// still holds the MCP route too: the same handler, and a path that would collide
/// with another route is refused when the routes are built, as before.
#[derive(Clone)]
pub(crate) struct Surface {
    app: Arc<App>,
    routes: axum::Router,
}

impl Surface {
    pub(crate) fn new(app: Arc<App>) -> Self {
        let routes = routes(app.clone());
        Self { app, routes }
    }
}

type McpFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<HttpResponse, Infallible>> + Send>>;

impl conn::Serve for Surface {
    type Future =
        futures::future::Either<McpFuture, axum::routing::future::RouteFuture<Infallible>>;

    fn serve(
        &self,
        req: hyper::Request<hyper::body::Incoming>,
        peer: std::net::SocketAddr,
    ) -> Self::Future {
        if req.uri().path() == self.app.cfg.server.path {
            let req = req.map(axum::body::Body::new);
            // The peer goes to the handler as it is: no extension map per request.
            let app = self.app.clone();
            let head = req.method() == axum::http::Method::HEAD;
            futures::future::Either::Left(crate::boxed_in_place(|| async move {
                Ok(as_routed(
                    session_era::serve(app, req, Some(peer)).await,
                    head,
                ))
            }))
        } else {
            futures::future::Either::Right(conn::Serve::serve(&self.routes, req, peer))
        }
    }
}

/// What the router does to every answer it routes, done for the endpoint it is
/// bypassed for: no body in the answer to a `HEAD` (over HTTP/2 the body would be
/// sent, and a client takes that for a protocol error), and with it the
/// `Content-Length` the body would have had. (Any other answer of known length gets
/// its `Content-Length` from hyper, written straight into the head: the router's
/// header value costs an allocation per answer.)
fn as_routed(mut resp: HttpResponse, head: bool) -> HttpResponse {
    use axum::body::HttpBody as _;
    if head {
        if !resp.headers().contains_key(header::CONTENT_LENGTH) {
            if let Some(n) = resp.body().size_hint().exact() {
                resp.headers_mut()
                    .insert(header::CONTENT_LENGTH, header::HeaderValue::from(n));
            }
        }
        *resp.body_mut() = axum::body::Body::empty();
    }
    resp
}

async fn metrics(State(app): State<Arc<App>>) -> HttpResponse {
    let m = &app.metrics;
    m.sessions
        .set(i64::try_from(app.sessions.len()).unwrap_or(i64::MAX));
    Metrics::catch_up(
        &m.sessions_reaped,
        app.sessions.reaped.load(Ordering::Relaxed),
    );
    m.calls_in_flight
        .set(i64::try_from(app.calls_in_flight()).unwrap_or(i64::MAX));
    m.calls_awaiting_input
        .set(i64::try_from(app.mrtr.len()).unwrap_or(i64::MAX));
    if let Some(rs) = app.auth().oauth() {
        for (issuer, ok, failed) in rs.jwks_fetches() {
            Metrics::catch_up(&m.jwks_fetches.with_label_values(&[issuer, "ok"]), ok);
            Metrics::catch_up(
                &m.jwks_fetches.with_label_values(&[issuer, "failed"]),
                failed,
            );
        }
    }
    if let Some(b) = &app.builtin {
        for ((endpoint, error), n) in b.stats.refused() {
            Metrics::catch_up(&m.as_refusals.with_label_values(&[endpoint, error]), n);
        }
        for (grant, n) in b.stats.issued() {
            Metrics::catch_up(&m.as_tokens.with_label_values(&[grant]), n);
        }
        for (reason, n) in b.stats.revoked() {
            Metrics::catch_up(&m.as_revocations.with_label_values(&[reason]), n);
        }
        for (via, n) in b.stats.registered() {
            Metrics::catch_up(&m.as_registrations.with_label_values(&[via]), n);
        }
    }
    if let Some(l) = &app.limits() {
        for (rule, n) in &l.refused {
            Metrics::catch_up(
                &m.rate_limited.with_label_values(&[rule.as_str()]),
                n.load(Ordering::Relaxed),
            );
        }
        for (rule, policy, n) in &l.fallbacks {
            Metrics::catch_up(
                &m.rate_limit_fallbacks
                    .with_label_values(&[rule.as_str(), policy.label()]),
                n.load(Ordering::Relaxed),
            );
        }
        for (reason, n) in l.store_errors() {
            Metrics::catch_up(&m.redis_errors.with_label_values(&[reason]), n);
        }
    }
    for (name, stats) in app.router.backend_stats() {
        let name = name.as_str();
        m.backend_up
            .with_label_values(&[name])
            .set(i64::from(stats.state().is_up()));
        let (conns, pending) = stats.load();
        m.backend_connections
            .with_label_values(&[name])
            .set(i64::try_from(conns).unwrap_or(i64::MAX));
        m.backend_pending
            .with_label_values(&[name])
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        Metrics::catch_up(
            &m.backend_restarts.with_label_values(&[name]),
            BackendStats::get(&stats.restarts),
        );
        Metrics::catch_up(
            &m.backend_unattributed.with_label_values(&[name]),
            BackendStats::get(&stats.unattributed),
        );
        Metrics::catch_up(
            &m.backend_received_bytes.with_label_values(&[name]),
            BackendStats::get(&stats.received_bytes),
        );
        Metrics::catch_up(
            &m.backend_sent_bytes.with_label_values(&[name]),
            BackendStats::get(&stats.sent_bytes),
        );
        for (why, n) in stats.exits() {
            Metrics::catch_up(&m.backend_exits.with_label_values(&[name, why.label()]), n);
        }
        for (served, n) in [
            ("last_good", &stats.catalog_last_good),
            ("omitted", &stats.catalog_omitted),
        ] {
            Metrics::catch_up(
                &m.catalog_fallbacks.with_label_values(&[name, served]),
                BackendStats::get(n),
            );
        }
        Metrics::catch_up(
            &m.catalog_conflicts.with_label_values(&[name]),
            BackendStats::get(&stats.catalog_conflicts),
        );
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        m.render(),
    )
        .into_response()
}

/// `/readyz`: 200 once every `required` backend is up (and while it stays up), 503
/// before, while one is down, and while shutting down; the body says why.
async fn ready(State(app): State<Arc<App>>) -> HttpResponse {
    let backends = app.router.backend_states();
    let waiting: Vec<&str> = backends
        .iter()
        .filter(|(_, required, state)| *required && !state.is_up())
        .map(|(name, _, _)| name.as_str())
        .collect();
    let status = if app.is_stopping() {
        "stopping"
    } else if !waiting.is_empty() {
        "waiting for required backends"
    } else {
        "ready"
    };
    let code = if status == "ready" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let list: Vec<serde_json::Value> = backends
        .iter()
        .map(|(name, required, state)| {
            with_backend_state(
                serde_json::json!({ "name": name, "required": required }),
                state,
            )
        })
        .collect();
    (
        code,
        axum::Json(serde_json::json!({
            "status": status,
            "waiting": waiting,
            "backends": list,
        })),
    )
        .into_response()
}

/// `fields` with the backend's `state` (and `reason`) added.
fn with_backend_state(
    mut fields: serde_json::Value,
    state: &crate::upstream::BackendState,
) -> serde_json::Value {
    if let (Some(obj), Ok(serde_json::Value::Object(st))) =
        (fields.as_object_mut(), serde_json::to_value(state))
    {
        obj.extend(st);
    }
    fields
}

/// `/status`: what an operator needs about each backend (behind the same checks
/// as the MCP endpoint: its errors may say more than the public probes should).
async fn status(State(app): State<Arc<App>>) -> HttpResponse {
    let states = app.router.backend_states();
    let backends: Vec<serde_json::Value> = app
        .router
        .backend_stats()
        .into_iter()
        .zip(states)
        .zip(app.cfg.backends.iter())
        .map(|(((name, stats), (_, required, state)), cfg)| {
            let (connections, pending) = stats.load();
            let era = |e: crate::mcp::Era| stats.eras.get(e);
            let last_error = stats.last_failure().map(|(ago, reason)| {
                serde_json::json!({ "reason": reason, "seconds_ago": ago.as_secs() })
            });
            let b = serde_json::json!({
                "name": name,
                "required": required,
                "transport": if cfg.stdio.is_some() { "stdio" } else { "http" },
                "session_mode": cfg.session_mode,
                "connections": connections,
                "pending_requests": pending,
                "restarts": BackendStats::get(&stats.restarts),
                "last_error": last_error,
                "speaks": {
                    "session": era(crate::mcp::Era::Session),
                    "stateless": era(crate::mcp::Era::Stateless),
                },
            });
            with_backend_state(b, &state)
        })
        .collect();
    axum::Json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "stopping": app.is_stopping(),
        "sessions": app.sessions.len(),
        "calls_in_flight": app.calls_in_flight(),
        "backends": backends,
    }))
    .into_response()
}

/// Serves until `stop` is cancelled, then drains: in-flight calls get up to
/// `shutdown_grace` to finish, streams end, sessions and backends are shut down.
pub async fn serve(
    app: Arc<App>,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let metrics_listener = match &app.cfg.server.metrics_listen {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("server.metrics_listen {addr}: {e}"))
        })?),
        None => None,
    };
    if let Some(l) = metrics_listener {
        let routes = axum::Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(ready))
            .with_state(app.clone());
        let server = &app.cfg.server;
        // Bounded like the main door (head timeout, write stalls, a small cap); a
        // scrape is not client traffic, so its bytes are not counted as such.
        let limits = conn::ConnLimits {
            header_timeout: server.header_timeout,
            write_timeout: server.write_timeout,
            max_connections: 64,
        };
        let bytes = conn::ByteCounters {
            received: prometheus::IntCounter::new("unregistered", "-")
                .map_err(std::io::Error::other)?,
            sent: prometheus::IntCounter::new("unregistered", "-")
                .map_err(std::io::Error::other)?,
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            let conns = conn::accept(l, routes, limits, bytes, None, stop).await;
            conns.close(Duration::from_secs(1)).await;
        });
    }
    let reaper = {
        let app = app.clone();
        tokio::spawn(async move {
            let every = (app.cfg.server.session_idle_timeout / 4)
                .clamp(Duration::from_millis(250), Duration::from_secs(30));
            let mut last_reap = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(every.min(Duration::from_secs(1))).await;
                let expired = app.mrtr.sweep();
                if expired > 0 {
                    tracing::info!(
                        calls = expired,
                        "calls waiting for client input expired; cancelled"
                    );
                }
                if last_reap.elapsed() >= every {
                    last_reap = tokio::time::Instant::now();
                    app.sessions.reap().await;
                }
            }
        })
    };
    let pools = {
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move { app.router.maintain_pools(stop).await })
    };
    // Required backends are started now; one that cannot start stops Gantry.
    let fatal = Arc::new(parking_lot::Mutex::new(None::<String>));
    let required = {
        let (app, stop, fatal) = (app.clone(), stop.clone(), fatal.clone());
        tokio::spawn(async move {
            if !app.cfg.backends.iter().any(|b| b.required) {
                return;
            }
            match app.router.start_required().await {
                Ok(()) => tracing::info!("required backends are up"),
                Err((name, e)) => {
                    // Reported once, by whoever runs the server, as the reason it stopped.
                    *fatal.lock() = Some(format!("required backend `{name}` could not start: {e}"));
                    stop.cancel();
                }
            }
        })
    };
    let drained = CancellationToken::new();
    let drain = {
        let (app, stop, drained) = (app.clone(), stop.clone(), drained.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            app.stopping.store(true, Ordering::SeqCst);
            // Calls waiting for a stateless client's input end now (cancelled).
            app.mrtr.clear();
            let grace = app.cfg.server.shutdown_grace;
            let deadline = tokio::time::Instant::now() + grace;
            while app.calls_in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if app.calls_in_flight() > 0 {
                tracing::warn!(
                    calls = app.calls_in_flight(),
                    "shutdown grace expired; ending calls still in flight"
                );
            }
            app.sessions.end_all().await;
            drained.cancel();
        })
    };
    let surface = Surface::new(app.clone());
    let server = &app.cfg.server;
    let limits = conn::ConnLimits {
        header_timeout: server.header_timeout,
        write_timeout: server.write_timeout,
        max_connections: conn::connection_cap(server.max_connections),
    };
    tracing::debug!(
        max_connections = limits.max_connections,
        "accepting connections"
    );
    if let Some(t) = &app.tls {
        tokio::spawn(t.clone().watch(stop.clone()));
    }
    {
        // Keys not seen for a while are forgotten (their buckets are full again).
        let (stop, app) = (stop.clone(), app.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(60)) => {
                        if let Some(l) = app.limits() {
                            l.tidy();
                        }
                    }
                    _ = stop.cancelled() => return,
                }
            }
        });
    }
    let bytes = conn::ByteCounters {
        received: app.metrics.client_received_bytes.clone(),
        sent: app.metrics.client_sent_bytes.clone(),
    };
    let conns = conn::accept(
        listener,
        surface,
        limits,
        bytes,
        app.tls.clone(),
        stop.clone(),
    )
    .await;
    reaper.abort();
    stop.cancel();
    let _ = drain.await;
    drained.cancelled().await;
    app.sessions.end_all().await;
    // Every exchange had its grace; what a client still holds open (a half-sent
    // request, an unread stream) is closed a moment later, whatever it does.
    conns.close(Duration::from_secs(1)).await;
    let _ = pools.await;
    required.abort();
    app.router.shutdown().await;
    // The spans still buffered are exported (bounded by tracing.timeout).
    if let Some(t) = app.tracing.clone() {
        let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
    }
    let fatal = fatal.lock().take();
    match fatal {
        Some(why) => Err(std::io::Error::other(why)),
        None => Ok(()),
    }
}

//! The configuration file as written: every table and key, with its meaning, unit
//! and default (serde, unknown keys refused).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The configuration file as written.
#[derive(Debug, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The HTTP front door.
    #[serde(default)]
    pub server: ServerConfig,
    /// How names of several backends are combined.
    #[serde(default)]
    pub namespacing: NamespacingConfig,
    /// The MCP servers behind Gantry.
    #[serde(default)]
    pub backends: Vec<BackendConfig>,
    /// Who may call Gantry. Default: no keys, every caller is anonymous.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Rate limits. Default: none.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// OpenTelemetry traces. Default: off.
    #[serde(default)]
    pub tracing: Option<TracingConfig>,
    /// The merged catalog of several backends (`[catalog]`).
    #[serde(default)]
    pub catalog: CatalogConfig,
}

/// How the lists of several backends are merged and served (`[catalog]`). With one
/// backend Gantry is transparent and none of this applies.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogConfig {
    /// Items per page of a merged list (`nextCursor` leads on). 0 (default): every
    /// item in one page, as clients that never follow a cursor need.
    pub page_size: usize,
    /// A backend's list must come within this, or the merged list goes without it
    /// (its last good entries, or none: `on_unavailable`). Default `5s`.
    #[serde(with = "humantime_serde")]
    pub deadline: Duration,
    /// What a merged list shows of a backend that is down or missed the deadline:
    /// `last-good` (default: what it listed last) or `omit`.
    pub on_unavailable: OnUnavailable,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        Self {
            page_size: 0,
            deadline: Duration::from_secs(5),
            on_unavailable: OnUnavailable::LastGood,
        }
    }
}

/// `catalog.on_unavailable`.
#[derive(Debug, Deserialize, serde::Serialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum OnUnavailable {
    /// The backend's last good entries are listed (calls to them fail fast).
    #[default]
    LastGood,
    /// The backend's entries are left out until it answers again.
    Omit,
}

/// What of one kind of a backend's items (tools, prompts, resources) clients see
/// (`[backends.tools]` …).
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ItemPolicy {
    /// Globs (`*`, `?`) of the backend's own names (URIs for resources): when set,
    /// only matching items are listed and usable.
    pub allow: Vec<String>,
    /// Globs of the backend's own names (URIs) that are neither listed nor usable
    /// (deny wins over allow).
    pub deny: Vec<String>,
    /// The backend's name → the name clients see (before the prefix). Tools and
    /// prompts only.
    pub rename: BTreeMap<String, String>,
    /// The backend's name (URI) → fields to replace in the item as listed.
    #[serde(rename = "override")]
    pub overrides: BTreeMap<String, ItemOverride>,
}

/// Fields of a listed item replaced by the operator.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ItemOverride {
    /// Replaces `title`.
    pub title: Option<String>,
    /// Replaces `description`.
    pub description: Option<String>,
    /// Merged over the item's `annotations` (e.g. `{ destructiveHint = true }`).
    pub annotations: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Traces exported over OTLP/HTTP (`[tracing]`).
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP address, e.g. `http://otel-collector:4318` (spans go
    /// to its `/v1/traces`, protobuf). `${VAR}` is replaced with the variable's value.
    pub endpoint: String,
    /// `service.name` of the spans. Default `gantry`.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Share of traces started here that are kept, 0.0-1.0 (a client's sampled flag
    /// is followed). Default 1.0.
    #[serde(default = "default_sample_ratio")]
    pub sample_ratio: f64,
    /// An export must finish within this. Default `10s`.
    #[serde(default = "default_export_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Headers sent with every export (a collector's credentials); values may use
    /// `${VAR}`.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
}

fn default_service_name() -> String {
    "gantry".into()
}

fn default_sample_ratio() -> f64 {
    1.0
}

fn default_export_timeout() -> Duration {
    Duration::from_secs(10)
}

/// Rate limits (`[limits]`, `[[limits.rules]]`).
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Ordered rules; a request must pass every rule that covers it.
    pub rules: Vec<LimitRuleConfig>,
    /// Calls in progress at once (`[[limits.concurrency]]`).
    pub concurrency: Vec<ConcurrencyConfig>,
    /// How long tools may take (`[[limits.timeouts]]`): the first rule naming a tool
    /// replaces its backend's `request_timeout` for its calls.
    pub timeouts: Vec<TimeoutConfig>,
    /// Proxies (addresses or CIDR blocks) whose `X-Forwarded-For` names the client:
    /// the client's address is then the right-most one in it not in this list.
    /// Default: none (the connection's address is the client's).
    pub trusted_proxies: Vec<String>,
    /// Where the rules' budgets are kept: `memory` (this process, default) or `redis`
    /// (shared by every Gantry using the same Redis: `[limits.redis]`).
    pub store: String,
    /// The Redis of `store = "redis"`.
    pub redis: Option<RedisConfig>,
}

/// The Redis that keeps shared budgets (`[limits.redis]`).
#[derive(Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user:password@]host[:port][/db]` or `rediss://` (TLS). `${VAR}` is
    /// replaced with the variable's value.
    pub url: String,
    /// Prefix of every key Gantry writes. Default `gantry:limits:`.
    #[serde(default = "default_redis_prefix")]
    pub prefix: String,
    /// A check waits at most this long for Redis (connecting included); past it the
    /// rule's `on_store_error` decides. Default `250ms`.
    #[serde(default = "default_redis_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// After a failure, Redis is not asked again for this long (each rule's
    /// `on_store_error` decides meanwhile). Default `1s`.
    #[serde(default = "default_redis_retry", with = "humantime_serde")]
    pub retry_interval: Duration,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password.
        f.debug_struct("RedisConfig")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            rules: Vec::new(),
            concurrency: Vec::new(),
            timeouts: Vec::new(),
            trusted_proxies: Vec::new(),
            store: "memory".into(),
            redis: None,
        }
    }
}

fn default_redis_prefix() -> String {
    "gantry:limits:".into()
}

fn default_redis_timeout() -> Duration {
    Duration::from_millis(250)
}

fn default_redis_retry() -> Duration {
    Duration::from_secs(1)
}

/// One rate limit (GCRA): `rate` on average, `burst` at once, counted per key.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LimitRuleConfig {
    /// Names the rule in answers, logs and metrics: 1-64 of `A-Z a-z 0-9 _ - .`.
    pub name: String,
    /// What is counted separately, combined: `principal`, `ip`, `tool`, `backend`,
    /// `method` or `global`. Default `["principal"]`.
    #[serde(default = "default_limit_key")]
    pub key: Vec<String>,
    /// `N/s`, `N/m` or `N/h`.
    pub rate: String,
    /// Requests admitted at once beyond the average. Default: N of `rate`.
    #[serde(default)]
    pub burst: Option<u32>,
    /// Covers these methods only (globs: `tools/call`, `initialize`, `resources/*`, …).
    /// Default: all.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Covers calls of these tools only (globs over the names clients see).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Covers gets of these prompts only (globs).
    #[serde(default)]
    pub prompts: Vec<String>,
    /// A limited `tools/call` gets a JSON-RPC error (`error`, default) or a tool
    /// result with `isError: true` a model can read (`tool_result`).
    #[serde(default = "default_limit_answer")]
    pub answer: String,
    /// With `store = "redis"`, what a request gets while Redis cannot answer: `open`
    /// (admitted, default), `closed` (refused) or `local` (this process's own budget
    /// for the rule, as with `store = "memory"`).
    #[serde(default = "default_store_error")]
    pub on_store_error: String,
}

fn default_store_error() -> String {
    "open".into()
}

/// At most `max` calls in progress at once per key; more wait in a bounded queue.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyConfig {
    /// Names the limit in answers: 1-64 of `A-Z a-z 0-9 _ - .`.
    pub name: String,
    /// What is counted separately: `principal`, `tool`, `backend`, `global` (or a
    /// list). Default `["backend"]`.
    #[serde(default = "default_concurrency_key")]
    pub key: Vec<String>,
    /// Calls in progress at once.
    pub max: u32,
    /// Calls that may wait for a place; one more is refused at once. Default 64.
    #[serde(default = "default_concurrency_queue")]
    pub queue: u32,
    /// A call waits at most this long for a place, then is refused. Default `10s`.
    #[serde(default = "default_queue_timeout", with = "humantime_serde")]
    pub queue_timeout: Duration,
    /// Covers calls of these tools only (globs over the names clients see).
    #[serde(default)]
    pub tools: Vec<String>,
}

/// A tool call's time limit, in place of its backend's `request_timeout`.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimeoutConfig {
    /// Names the rule: 1-64 of `A-Z a-z 0-9 _ - .`.
    pub name: String,
    /// The tools (globs over the names clients see); at least one.
    pub tools: Vec<String>,
    /// The backend must answer within this; then the call fails with a timeout and
    /// the backend is told to cancel it.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

fn default_concurrency_key() -> Vec<String> {
    vec!["backend".into()]
}

fn default_concurrency_queue() -> u32 {
    64
}

fn default_queue_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_limit_key() -> Vec<String> {
    vec!["principal".into()]
}

fn default_limit_answer() -> String {
    "error".into()
}

/// The HTTP front door.
#[derive(Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on. Default `127.0.0.1:8080`.
    pub listen: String,
    /// Path of the MCP endpoint. Default `/mcp`.
    pub path: String,
    /// Host header values accepted (host or host:port; `*` accepts any). Default: when
    /// bound to loopback, `localhost`, `127.0.0.1` and `[::1]` on any port; otherwise any.
    pub allowed_hosts: Vec<String>,
    /// Origin header values accepted (e.g. `https://app.example.com`; `*` accepts any).
    /// A request without Origin is always accepted; a same-origin one too. Default: when
    /// bound to loopback, loopback origins on any port.
    pub allowed_origins: Vec<String>,
    /// Largest accepted request body, in bytes. Default 4 MiB.
    pub max_body_bytes: usize,
    /// A session unused for this long is ended. Default `30m`.
    #[serde(with = "humantime_serde")]
    pub session_idle_timeout: Duration,
    /// At most this many live sessions; more get 503. Default 10000.
    pub max_sessions: usize,
    /// Interval of SSE keep-alive comments. Default `15s`.
    #[serde(with = "humantime_serde")]
    pub sse_keepalive: Duration,
    /// Events kept per SSE stream for `Last-Event-ID` resumption. Default 256.
    pub event_buffer: usize,
    /// `retry` (reconnect delay) announced on resumable streams. Default `1s`.
    #[serde(with = "humantime_serde")]
    pub sse_retry: Duration,
    /// Serve the legacy 2024-11-05 HTTP+SSE transport at `/sse` + `/messages`. Default true.
    pub legacy_sse: bool,
    /// Serve Prometheus metrics at `/metrics` (outside the Host and auth checks, like
    /// the health endpoints). Default true.
    pub metrics: bool,
    /// Also serve `/metrics` (and `/healthz`, `/readyz`) on this address of its own,
    /// e.g. `0.0.0.0:9090` for a scraper on another network than the clients.
    /// Default: none.
    pub metrics_listen: Option<String>,
    /// On SIGTERM, how long in-flight requests may take to finish. Default `10s`.
    /// Also how long calls on a backend a reload removes or changes may take.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Reload the configuration when the file's contents change (checked every
    /// 2 s), as on SIGHUP. Default false.
    pub watch_config: bool,
    /// Stateless-era (2026-07-28) clients: how long a call that asked the client for
    /// input (`input_required`) waits for the client's retry before it is cancelled.
    /// Default `5m`.
    #[serde(with = "humantime_serde")]
    pub input_timeout: Duration,
    /// A connection must deliver a complete request head within this long of opening
    /// or of its previous response (slow heads, idle keep-alive). Default `30s`.
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
    /// A request body must arrive whole within this long. Default `30s`.
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
    /// A response write that makes no progress for this long ends the connection (the
    /// client stopped reading; what it missed stays resumable). Default `30s`.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// At most this many open client connections; one more is answered 503 and closed.
    /// Default 0: half the open-file limit (raised to its hard limit at start), at most
    /// 10000.
    pub max_connections: usize,
    /// Live sessions one client (its principal, or its address when anonymous) may
    /// hold; 0 = no limit. Default 1000.
    pub max_sessions_per_client: usize,
    /// New sessions one client may open per minute, on average; 0 = no limit.
    /// Default 1200.
    pub session_rate_per_client: u32,
    /// New sessions one client may open at once beyond that average. Default 1000.
    pub session_burst_per_client: u32,
    /// The MCP endpoint's URL as clients reach it (`https://mcp.example.com/mcp`):
    /// the OAuth resource identifier (tokens' `aud`), the `resource` of the
    /// protected-resource metadata and the base of `resource_metadata`. Required with
    /// `[auth.oauth]` unless Gantry listens on loopback (then `http://<listen><path>`).
    pub public_url: Option<String>,
    /// Serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN) with this certificate chain and
    /// key (PEM files), reloaded when they change. Default: plain HTTP.
    pub tls: Option<TlsConfig>,
}

/// The front door's certificate (`server.tls`).
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            path: "/mcp".into(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            session_idle_timeout: Duration::from_secs(30 * 60),
            max_sessions: 10_000,
            sse_keepalive: Duration::from_secs(15),
            event_buffer: 256,
            sse_retry: Duration::from_secs(1),
            legacy_sse: true,
            metrics: true,
            metrics_listen: None,
            shutdown_grace: Duration::from_secs(10),
            watch_config: false,
            input_timeout: Duration::from_secs(5 * 60),
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_connections: 0,
            max_sessions_per_client: 1000,
            session_rate_per_client: 1200,
            session_burst_per_client: 1000,
            public_url: None,
            tls: None,
        }
    }
}

/// How the names of several backends are combined into one catalog.
#[derive(Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NamespacingConfig {
    /// Between backend name and tool/prompt name. Default `__`.
    pub separator: String,
}

impl Default for NamespacingConfig {
    fn default() -> Self {
        Self {
            separator: "__".into(),
        }
    }
}

/// Who may call Gantry (`[auth]`).
#[derive(Debug, Default, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Static API keys (`[[auth.api_keys]]`). Empty (default): authentication is off
    /// and every caller is the one anonymous principal. Otherwise every request to
    /// the MCP endpoint and the legacy transport must present one of these keys.
    pub api_keys: Vec<ApiKeyConfig>,
    /// OAuth 2.1 access tokens from trusted authorization servers (`[auth.oauth]`).
    /// API keys keep working beside it.
    pub oauth: Option<OAuthConfig>,
    /// Who may use which tool, prompt or resource (`[[auth.rules]]`).
    pub rules: Vec<RuleConfig>,
    /// Where access tokens come from: `external` (default; the issuers of
    /// `[auth.oauth]`, if any) or `builtin` (Gantry is its own authorization server,
    /// `[auth.builtin]`; `[auth.oauth]` then only adds more trusted issuers and scope
    /// settings).
    pub mode: AuthMode,
    /// The built-in authorization server (`[auth.builtin]`), for `mode = "builtin"`.
    pub builtin: Option<BuiltinConfig>,
}

/// `auth.mode`.
#[derive(Debug, Default, Deserialize, serde::Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// API keys and/or the issuers of `[auth.oauth]`.
    #[default]
    External,
    /// Gantry issues the tokens itself (`[auth.builtin]`).
    Builtin,
}

/// The built-in OAuth 2.1 authorization server (`[auth.builtin]`). Its issuer is the
/// origin of `server.public_url`; its endpoints are `/authorize`, `/token`,
/// `/register`, `/revoke` there.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BuiltinConfig {
    /// Where its state (clients, consents, codes, refresh tokens, signing keys) is
    /// kept: `sqlite` (default, the file `path`) or `redis` (`redis_url`; for several
    /// replicas).
    pub store: String,
    /// The SQLite file. Default `gantry-auth.db` (beside the working directory).
    pub path: PathBuf,
    /// The Redis URL for `store = "redis"` (`redis://`, `rediss://`).
    pub redis_url: Option<String>,
    /// 32 bytes, base64: encrypts the private signing keys at rest (AES-256-GCM).
    /// `state_key_file` reads it from a file. Required with `store = "redis"`;
    /// with SQLite, default: a key generated once into `<path>.key` (mode 0600).
    pub state_key: Option<String>,
    /// Lifetime of an access token (a JWT). Default `15m`.
    #[serde(with = "humantime_serde")]
    pub access_token_ttl: Duration,
    /// Lifetime of a refresh token (each refresh rotates it). Default `30d`.
    #[serde(with = "humantime_serde")]
    pub refresh_token_ttl: Duration,
    /// A refresh token already rotated out still refreshes this long (two requests
    /// of one client racing); after that, presenting it revokes the whole grant.
    /// Default `10s`.
    #[serde(with = "humantime_serde")]
    pub refresh_grace: Duration,
    /// Lifetime of an authorization code (single use). Default `60s`.
    #[serde(with = "humantime_serde")]
    pub code_ttl: Duration,
    /// How long an approval on the consent page is remembered for (user, client).
    /// Default `30d`.
    #[serde(with = "humantime_serde")]
    pub consent_ttl: Duration,
    /// A signing key signs for this long, then the next one takes over (the old one
    /// still verifies for another period). Default `30d`.
    #[serde(with = "humantime_serde")]
    pub key_rotation: Duration,
    /// The scopes a client may be granted. Default: `[auth.oauth]` `scopes_supported`
    /// and `required_scopes`.
    pub scopes: Option<Vec<String>>,
    /// Private-use URI schemes allowed in redirect URIs (RFC 8252 §7.1), such as
    /// `cursor` and `vscode`. Default: none (https and loopback http only).
    pub redirect_schemes: Vec<String>,
    /// Open dynamic client registration (RFC 7591) at `/register`. Default true.
    pub registration: bool,
    /// Registrations accepted per client IP address and hour. Default 20.
    pub registrations_per_hour: u32,
    /// Client ID metadata documents: an https `client_id` is fetched and used as
    /// the client's registration. Default true.
    pub client_id_metadata_documents: bool,
    /// Test switch: also fetch client ID metadata documents from `http://` loopback
    /// URLs. Never for production. Default false.
    pub allow_loopback_client_ids: bool,
    /// Login through an upstream OpenID provider (`[auth.builtin.upstream]`).
    pub upstream: Option<UpstreamIdpConfig>,
    /// A static user list for development (`[[auth.builtin.users]]`), instead of an
    /// upstream provider.
    pub users: Vec<StaticUserConfig>,
    /// Pre-registered clients (`[[auth.builtin.clients]]`).
    pub clients: Vec<StaticClientConfig>,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        Self {
            store: "sqlite".into(),
            path: PathBuf::from("gantry-auth.db"),
            redis_url: None,
            state_key: None,
            access_token_ttl: Duration::from_secs(15 * 60),
            refresh_token_ttl: Duration::from_secs(30 * 86_400),
            refresh_grace: Duration::from_secs(10),
            code_ttl: Duration::from_secs(60),
            consent_ttl: Duration::from_secs(30 * 86_400),
            key_rotation: Duration::from_secs(30 * 86_400),
            scopes: None,
            redirect_schemes: Vec::new(),
            registration: true,
            registrations_per_hour: 20,
            client_id_metadata_documents: true,
            allow_loopback_client_ids: false,
            upstream: None,
            users: Vec::new(),
            clients: Vec::new(),
        }
    }
}

/// The OpenID provider users log in with (`[auth.builtin.upstream]`).
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamIdpConfig {
    /// Its issuer (`https://accounts.example.com`); its endpoints are discovered
    /// (OpenID Connect Discovery, then RFC 8414).
    pub issuer: String,
    /// Gantry's client id there. Gantry's redirect URI to register there is
    /// `<origin of server.public_url>/oauth/callback`.
    pub client_id: String,
    /// Gantry's client secret there (`client_secret_file` reads it from a file).
    /// Empty: a public client (PKCE only).
    #[serde(default)]
    pub client_secret: String,
    /// `client_secret_basic` (default) or `client_secret_post`.
    #[serde(default = "default_auth_method")]
    pub auth_method: String,
    /// Scopes asked for. Default `["openid", "email", "profile"]`.
    #[serde(default = "default_upstream_scopes")]
    pub scopes: Vec<String>,
    /// The ID-token claim that becomes the user's name (the tokens' `sub`).
    /// Default `sub`; `email` needs `email_verified`.
    #[serde(default = "default_subject_claim")]
    pub subject_claim: String,
    /// ID-token claims copied into Gantry's access tokens (`email`, `groups`, …).
    #[serde(default)]
    pub claims: Vec<String>,
    /// Only these users (their subject as above, or a verified `email`) may log in.
    #[serde(default)]
    pub allowed_users: Vec<String>,
    /// Only users with a verified `email` in one of these domains may log in.
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// Only members of one of these groups (`groups_claim`) may log in.
    #[serde(default)]
    pub allowed_groups: Vec<String>,
    /// The claim listing a user's groups. Default `groups`.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// What the login link says ("Log in with …"). Default: the issuer's host.
    #[serde(default)]
    pub display_name: Option<String>,
}

fn default_auth_method() -> String {
    "client_secret_basic".into()
}

fn default_upstream_scopes() -> Vec<String> {
    vec!["openid".into(), "email".into(), "profile".into()]
}

fn default_subject_claim() -> String {
    "sub".into()
}

fn default_groups_claim() -> String {
    "groups".into()
}

/// A development user (`[[auth.builtin.users]]`).
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StaticUserConfig {
    /// The user name (the tokens' `sub`).
    pub name: String,
    /// An argon2 hash of the password (PHC string, `gantry hash-password`).
    pub password_hash: String,
}

/// A pre-registered client (`[[auth.builtin.clients]]`).
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StaticClientConfig {
    /// Its `client_id`.
    pub client_id: String,
    /// Hex SHA-256 of its secret, for a confidential client (`client_secret_basic`
    /// or `_post`). None: a public client.
    #[serde(default)]
    pub client_secret_sha256: Option<String>,
    /// What the consent page calls it. Default: the client id.
    #[serde(default)]
    pub name: Option<String>,
    /// Its redirect URIs (exact; loopback with any port).
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    /// `authorization_code`, `refresh_token`, `client_credentials`. Default the
    /// first two.
    #[serde(default = "default_client_grants")]
    pub grant_types: Vec<String>,
    /// The scopes it may be granted. Default: all the server grants.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

fn default_client_grants() -> Vec<String> {
    vec!["authorization_code".into(), "refresh_token".into()]
}

/// One access rule: the items it covers and what using them takes.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RuleConfig {
    /// Globs (`*`, `?`) over tool names as clients see them (`github__delete_*`).
    pub tools: Vec<String>,
    /// Globs over prompt names as clients see them.
    pub prompts: Vec<String>,
    /// Globs over resource URIs.
    pub resources: Vec<String>,
    /// Scopes the caller's token must carry (all): an OAuth caller without them is
    /// asked to step up (403); a key cannot, and does not see the items.
    pub scopes: Vec<String>,
    /// Principals allowed (any; `alice` for a key, `<sub>@<issuer>` for a token);
    /// anyone else does not see the items. Empty: anyone.
    pub principals: Vec<String>,
}

/// Gantry as an OAuth 2.1 resource server (`[auth.oauth]`).
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The authorization servers whose tokens are accepted (`[[auth.oauth.issuers]]`),
    /// at least one (none needed with `auth.mode = "builtin"`). The first is the one
    /// clients are sent to log in with.
    #[serde(default)]
    pub issuers: Vec<IssuerConfig>,
    /// Scopes every request must carry (`scope` or `scp` claim). Default: none.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// `scopes_supported` of the protected-resource metadata (what clients ask for
    /// when the challenge names none). Default: `required_scopes`. `offline_access`
    /// is never published.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// Signature algorithms accepted. Default: every asymmetric one (`RS256`,
    /// `RS384`, `RS512`, `PS256`, `PS384`, `PS512`, `ES256`, `ES384`, `EdDSA`); `HS*`
    /// and `none` are never accepted.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp`, `nbf` and `iat`. Default `60s`.
    #[serde(default = "default_leeway", with = "humantime_serde")]
    pub leeway: Duration,
    /// A token naming a key the issuer's JWKS lacks makes Gantry fetch the JWKS again,
    /// at most once per this interval (random `kid`s cannot make it hammer the
    /// issuer). Default `1m`.
    #[serde(default = "default_jwks_refetch", with = "humantime_serde")]
    pub jwks_refetch_interval: Duration,
    /// `resource_name` of the protected-resource metadata. Default `Gantry`.
    #[serde(default = "default_resource_name")]
    pub resource_name: String,
    /// An introspected token's answer is reused this long (at most until the token
    /// expires; an inactive answer at most 10s). Default `60s`.
    #[serde(default = "default_introspection_ttl", with = "humantime_serde")]
    pub introspection_cache_ttl: Duration,
    /// Introspection answers kept at most. Default 10000.
    #[serde(default = "default_introspection_entries")]
    pub introspection_cache_entries: usize,
    /// A JWT whose signature and claims were checked is taken as checked for this
    /// long (never past its `exp`; a grant of the built-in server is checked for
    /// revocation on every request anyway). `0s`: every request is checked in full.
    /// Default `60s`.
    #[serde(default = "default_jwt_cache_ttl", with = "humantime_serde")]
    pub jwt_cache_ttl: Duration,
    /// Checked JWTs kept at most. Default 10000.
    #[serde(default = "default_introspection_entries")]
    pub jwt_cache_entries: usize,
}

impl OAuthConfig {
    /// The settings in force with `auth.mode = "builtin"` and no `[auth.oauth]`:
    /// no other issuer, the defaults.
    pub fn builtin_only() -> Self {
        Self {
            issuers: Vec::new(),
            required_scopes: Vec::new(),
            scopes_supported: None,
            algorithms: default_algorithms(),
            leeway: default_leeway(),
            jwks_refetch_interval: default_jwks_refetch(),
            resource_name: default_resource_name(),
            introspection_cache_ttl: default_introspection_ttl(),
            introspection_cache_entries: default_introspection_entries(),
            jwt_cache_ttl: default_jwt_cache_ttl(),
            jwt_cache_entries: default_introspection_entries(),
        }
    }
}

fn default_introspection_ttl() -> Duration {
    Duration::from_secs(60)
}

fn default_jwt_cache_ttl() -> Duration {
    Duration::from_secs(60)
}

fn default_introspection_entries() -> usize {
    10_000
}

/// One trusted authorization server.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// Its issuer identifier, exactly as in its metadata and its tokens' `iss`
    /// (`https://idp.example.com/realms/main`). Its metadata is discovered from it
    /// (RFC 8414, then OpenID Connect Discovery).
    pub issuer: String,
    /// Where its signing keys are, instead of the discovered `jwks_uri`.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// Audiences of this issuer's tokens that also name Gantry (exact strings), for
    /// IdPs that cannot put its URL in `aud`: Entra ID v2 (the API's client id),
    /// Okta (`api://default`). Default: none, `aud` must name `server.public_url`.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Opaque (non-JWT) tokens are checked with this issuer's RFC 7662 introspection
    /// endpoint, as this client.
    #[serde(default)]
    pub introspection: Option<IntrospectionConfig>,
}

/// Gantry's credentials at an issuer's introspection endpoint.
#[derive(Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionConfig {
    /// Default: the `introspection_endpoint` of the issuer's metadata.
    #[serde(default)]
    pub endpoint: Option<String>,
    pub client_id: String,
    /// `${VAR}` is replaced with the variable's value.
    pub client_secret: String,
    /// `client_secret_basic` (default) or `client_secret_post`.
    #[serde(default = "default_client_auth")]
    pub auth_method: String,
}

impl std::fmt::Debug for IntrospectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionConfig")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("auth_method", &self.auth_method)
            .finish()
    }
}

fn default_client_auth() -> String {
    "client_secret_basic".into()
}

fn default_algorithms() -> Vec<String> {
    super::ACCEPTABLE_ALGORITHMS
        .iter()
        .map(|a| (*a).to_owned())
        .collect()
}

fn default_leeway() -> Duration {
    Duration::from_secs(60)
}

fn default_jwks_refetch() -> Duration {
    Duration::from_secs(60)
}

fn default_resource_name() -> String {
    "Gantry".into()
}

/// One API key, stored as its SHA-256 only (`printf %s KEY | sha256sum`).
#[derive(Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// Whom the key identifies: 1-64 characters of `A-Z a-z 0-9 _ - . @`; not
    /// `anonymous`. Several keys may name one principal (rotation).
    pub principal: String,
    /// SHA-256 of the key, 64 hexadecimal characters (either case). Unique.
    pub sha256: String,
}

impl std::fmt::Debug for ApiKeyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeyConfig")
            .field("principal", &self.principal)
            .field("sha256", &"<redacted>")
            .finish()
    }
}

/// One MCP server behind Gantry: exactly one of `stdio` or `http`.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Unique name; also the namespace prefix (`[A-Za-z0-9_-]`, 1–32 chars).
    pub name: String,
    /// The namespace of its tools and prompts when several backends are merged
    /// (`<prefix><separator><name>`), instead of the name. `""`: none, for a backend
    /// whose names are unique already.
    #[serde(default)]
    pub prefix: Option<String>,
    /// How long a merged list keeps this backend's items of a kind it does not
    /// announce changes of (`listChanged`); kinds it announces are kept until it
    /// does (or restarts). `0s`: listed afresh every time. Default `60s`.
    #[serde(default = "default_list_ttl", with = "humantime_serde")]
    pub list_ttl: Duration,
    /// Which tools clients see, under which names and descriptions.
    #[serde(default)]
    pub tools: ItemPolicy,
    /// Which prompts clients see, likewise.
    #[serde(default)]
    pub prompts: ItemPolicy,
    /// Which resources (and templates, by `uriTemplate`) clients see (no `rename`).
    #[serde(default)]
    pub resources: ItemPolicy,
    /// Run a local child process speaking MCP on stdin/stdout.
    pub stdio: Option<StdioConfig>,
    /// Connect to a Streamable HTTP MCP server.
    pub http: Option<HttpConfig>,
    /// A request without an answer after this long fails and is cancelled upstream.
    /// Default `60s`.
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Starting and initializing the backend must finish within this. Default `30s`.
    #[serde(default = "default_init_timeout", with = "humantime_serde")]
    pub init_timeout: Duration,
    /// Largest message accepted from the backend, in bytes. Default 16 MiB.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// `per-session` (default; one connection per client session, exact attribution of
    /// server→client traffic), `shared` (one connection for all sessions) or
    /// `per-user` (one connection per principal).
    #[serde(default)]
    pub session_mode: SessionMode,
    /// Which protocol era the backend speaks: `auto` (default: probe with
    /// `server/discover`, fall back to `initialize`; the answer is remembered for the
    /// backend's later connections), `session` (initialize only, never probed) or
    /// `stateless` (2026-07-28 only).
    #[serde(default)]
    pub era: Era,
    /// Client capabilities Gantry declares to a `shared` or `per-user` backend
    /// (e.g. `{ roots = {} }`). Default `{}`: such a backend is not offered sampling,
    /// elicitation or roots, since its requests cannot always be attributed to one
    /// client. (`per-session` backends get the client's own capabilities.)
    #[serde(default = "empty_table")]
    pub client_capabilities: serde_json::Value,
    /// Crash restart backoff.
    #[serde(default)]
    pub restart: RestartConfig,
    /// Connection limits and the warm pool.
    #[serde(default)]
    pub pool: PoolConfig,
    /// Gantry is not ready (`/readyz` 503) while this backend is down, and exits if
    /// it cannot be started and initialized at start-up. Default false.
    #[serde(default)]
    pub required: bool,
    /// Opt-in: a `per-session` or `per-user` connection that has served no request for
    /// this long is stopped (its process ends; it no longer counts against
    /// `pool.max_connections`) and started again, re-initialized with the client's
    /// `initialize`, by the session's next request, which waits for it. What the
    /// backend kept for the session (resource subscriptions, log level, anything a
    /// tool remembered) is lost, as after a crash: use it for servers that keep no
    /// per-session state. Default: never.
    #[serde(default, with = "humantime_serde")]
    pub idle_timeout: Option<Duration>,
}

/// Limits on a backend's connections, and warm connections kept ready.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Connections started ahead of need for `per-session` / `per-user` backends, so a
    /// new session does not wait for a process to start. They are initialized as
    /// Gantry (with `client_capabilities`), not as the client that later adopts one.
    /// Default 0.
    pub min_idle: usize,
    /// A warm connection older than this is replaced, and a `shared` connection older
    /// than this takes no new sessions (a new one is started for them; the old one
    /// stops when its last session ends). Default `1h`.
    #[serde(with = "humantime_serde")]
    pub max_lifetime: Duration,
    /// At most this many live connections (processes / HTTP sessions) of this backend;
    /// a session that would need another gets a clear error. 0 = no limit. Default:
    /// 64 for a stdio backend (each connection is a process, often 70-170 MiB), no
    /// limit for an HTTP one.
    pub max_connections: usize,
    /// Requests in flight at once on one connection (many stdio servers handle one at
    /// a time). 0 = no limit. Default 0.
    pub max_in_flight: usize,
    /// Requests that may wait for an in-flight slot; beyond it a request is refused at
    /// once with "busy". Waiting counts against `request_timeout`. Default 64.
    pub queue: usize,
}

/// `pool.max_connections` not set: resolved by transport when validated.
pub(super) const DEFAULT_MAX_CONNECTIONS: usize = usize::MAX;

/// The default cap on a stdio backend's live processes.
pub const DEFAULT_STDIO_MAX_CONNECTIONS: usize = 64;

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            min_idle: 0,
            max_lifetime: Duration::from_secs(3600),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_in_flight: 0,
            queue: 64,
        }
    }
}

pub(super) fn empty_table() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

pub(super) fn default_list_ttl() -> Duration {
    Duration::from_secs(60)
}
pub(super) fn default_request_timeout() -> Duration {
    Duration::from_secs(60)
}
pub(super) fn default_init_timeout() -> Duration {
    Duration::from_secs(30)
}
pub(super) fn default_max_message_bytes() -> usize {
    16 * 1024 * 1024
}

/// How client sessions map onto backend connections.
#[derive(Debug, Deserialize, serde::Serialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SessionMode {
    /// One backend connection (process / HTTP session) per client session.
    #[default]
    PerSession,
    /// One backend connection shared by every client session.
    Shared,
    /// One backend connection per authenticated principal, shared by its sessions.
    PerUser,
}

/// The protocol era of a backend.
#[derive(Debug, Deserialize, serde::Serialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Era {
    /// Detect at connect: `server/discover`, falling back to `initialize`.
    #[default]
    Auto,
    /// Session era (`initialize`, 2024-11-05 … 2025-11-25).
    Session,
    /// Stateless era (2026-07-28: per-request `_meta`, no session).
    Stateless,
}

/// Restart policy of a crashed backend.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RestartConfig {
    /// First delay before a restart. Default `200ms`.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest delay between restarts (doubling from the initial one). Default `30s`.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
}

impl Default for RestartConfig {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// A stdio backend: a child process.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StdioConfig {
    /// The program to run (looked up in `PATH`).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for the child (values may use `${VAR}`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables passed through from Gantry's own environment. Default: `PATH`, `HOME`,
    /// `USER`, `LANG`, `LC_ALL`, `TERM`, `TMPDIR`, `TZ`, `NODE_PATH`, `NPM_CONFIG_CACHE`,
    /// `XDG_CACHE_HOME`, `XDG_CONFIG_HOME`, `XDG_DATA_HOME`. Nothing else leaks.
    #[serde(default = "default_inherit_env")]
    pub inherit_env: Vec<String>,
    /// Working directory. Default: Gantry's.
    pub cwd: Option<PathBuf>,
    /// `per-user` backends: the child gets its principal's name in this environment
    /// variable (an API key's principal, or `<sub>@<issuer>` for a token).
    #[serde(default)]
    pub principal_env: Option<String>,
}

/// Environment variables a child inherits unless configured otherwise.
pub fn default_inherit_env() -> Vec<String> {
    [
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "TERM",
        "TMPDIR",
        "TZ",
        "NODE_PATH",
        "NPM_CONFIG_CACHE",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// A Streamable HTTP backend.
#[derive(Debug, Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// The backend's MCP endpoint URL.
    pub url: String,
    /// Extra headers sent with every request (values may use `${VAR}`), e.g. the
    /// backend's own credentials. A client's token is never forwarded.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Gantry's own OAuth client at the backend's authorization server
    /// (client credentials): its token goes in `Authorization` on every request.
    #[serde(default)]
    pub oauth: Option<BackendOAuthConfig>,
    /// Extra CA certificates (PEM) an https backend's certificate may chain to,
    /// beside the web PKI roots (an internal CA, a cluster's own).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// The HTTP version: `auto` (HTTP/2 when an https backend offers it, else
    /// HTTP/1.1), `"1.1"`, or `"2"` (also over plain http: prior knowledge).
    #[serde(default)]
    pub version: HttpVersion,
}

/// `http.version`.
#[derive(Debug, Deserialize, serde::Serialize, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpVersion {
    /// HTTP/2 when the server agrees over TLS (ALPN), else HTTP/1.1.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// HTTP/1.1 only.
    #[serde(rename = "1.1")]
    Http1,
    /// HTTP/2 only (prior knowledge over plain TCP; required over TLS).
    #[serde(rename = "2")]
    Http2,
}

/// OAuth 2.1 client credentials for an HTTP backend.
#[derive(Deserialize, serde::Serialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendOAuthConfig {
    /// The authorization server's token endpoint.
    pub token_url: String,
    pub client_id: String,
    /// `${VAR}` is replaced with the variable's value.
    pub client_secret: String,
    /// Scopes to ask for (space-separated).
    #[serde(default)]
    pub scope: Option<String>,
    /// RFC 8707 `resource`: the backend's URL, for an audience-restricted token.
    #[serde(default)]
    pub resource: Option<String>,
    /// `audience` (Auth0 and others) instead of or beside `resource`.
    #[serde(default)]
    pub audience: Option<String>,
    /// `client_secret_basic` (default) or `client_secret_post`.
    #[serde(default = "default_client_auth")]
    pub auth_method: String,
    /// `client_credentials` (default: a token for Gantry itself) or
    /// `token_exchange` (RFC 8693: each `per-user` connection gets a token for its
    /// user, exchanged for the user's own token to Gantry).
    #[serde(default = "default_grant")]
    pub grant: String,
    /// Set by Gantry for a `token_exchange` connection: whose token it exchanges.
    #[serde(skip)]
    pub for_principal: Option<String>,
}

fn default_grant() -> String {
    "client_credentials".into()
}

impl std::fmt::Debug for BackendOAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendOAuthConfig")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("scope", &self.scope)
            .field("resource", &self.resource)
            .field("grant", &self.grant)
            .finish()
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the durations in the configuration file (humantime form).
    use crate::config::{Config, ConfigFile};
    use crate::testkit::config;
    use proptest::prelude::*;
    use std::time::Duration;

    /// A valid file with `session_idle_timeout` set to the TOML value `value`.
    fn file(value: &str) -> String {
        format!(
            "[server]\nsession_idle_timeout = {value}\n\
             [[backends]]\nname = \"x\"\nstdio = {{ command = \"a\" }}\n"
        )
    }

    /// A TOML string literal holding `s`.
    fn toml_string(s: &str) -> String {
        toml::Value::String(s.to_owned()).to_string()
    }

    /// Text that looks like a duration: numbers, units, spaces, signs, overflow.
    fn duration_like() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "0",
            "1",
            "9",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999",
            "ns",
            "us",
            "µs",
            "ms",
            "s",
            "sec",
            "m",
            "min",
            "h",
            "d",
            "w",
            "M",
            "y",
            "years",
            " ",
            "-",
            "+",
            ".",
            "e",
            "",
        ]);
        prop_oneof![
            any::<String>(),
            prop::collection::vec(piece, 0..8).prop_map(|p| p.concat()),
        ]
    }

    proptest! {
        #![proptest_config(config(128))]

        /// Any string as the timeout: an error or a duration, never a panic; when it
        /// loads, it is what humantime reads.
        #[test]
        fn any_timeout_string_loads_or_errs(s in duration_like()) {
            let text = file(&toml_string(&s));
            let parsed = humantime::parse_duration(&s);
            let file: Result<ConfigFile, _> = toml::from_str(&text);
            prop_assert_eq!(
                file.as_ref().ok().map(|f| f.server.session_idle_timeout),
                parsed.as_ref().ok().copied(),
                "{}", text
            );
            match Config::from_toml(&text, "t.toml") {
                Ok(cfg) => prop_assert_eq!(Ok(cfg.server.session_idle_timeout), parsed),
                Err(e) => prop_assert!(
                    parsed.as_ref().map_or(true, |d| *d < Duration::from_secs(1)),
                    "{s:?} ({parsed:?}) refused: {e}"
                ),
            }
        }

        /// Any TOML value in its place (numbers, tables, arrays, booleans): an error
        /// or a duration, never a panic.
        #[test]
        fn any_timeout_value_loads_or_errs(v in "[-+0-9a-z.:\"'\\[\\]{} =_]{0,16}") {
            let _ = Config::from_toml(&file(&v), "t.toml");
        }

        /// A duration written as Gantry's docs and errors write it reads back exactly.
        #[test]
        fn formatted_durations_read_back(ms in prop_oneof![
            0u64..10_000,
            0u64..100_000_000_000,
            any::<u64>(),
        ]) {
            let d = Duration::from_millis(ms);
            let written = humantime::format_duration(d).to_string();
            prop_assert_eq!(humantime::parse_duration(&written).ok(), Some(d), "{}", written);
            let text = file(&toml_string(&written));
            match Config::from_toml(&text, "t.toml") {
                Ok(cfg) => prop_assert_eq!(cfg.server.session_idle_timeout, d),
                Err(e) => prop_assert!(d < Duration::from_secs(1), "{written} refused: {e}"),
            }
        }
    }
}

//! Typed configuration: the TOML file as written ([`ConfigFile`]) and its validated,
//! immutable runtime form ([`Config`]).
//!
//! Validation reports *every* problem with its key path, so a bad file never starts a
//! half-working gateway. `${VAR}` in backend env values, headers and URLs is replaced
//! by the environment variable `VAR` at load time (a missing variable is an error).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that can be wrong with a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the schema.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's message, with line and key.
        message: String,
    },
    /// The file parsed, but some values are wrong: one line per problem.
    #[error("{path}: invalid configuration:\n{}", problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        /// The file (or `command line`).
        path: String,
        /// Each problem as `key.path: what is wrong`.
        problems: Vec<String>,
    },
}

/// The configuration file as written.
#[derive(Debug, Default, Deserialize)]
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
}

/// The HTTP front door.
#[derive(Debug, Deserialize)]
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
    /// On SIGTERM, how long in-flight requests may take to finish. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Stateless-era (2026-07-28) clients: how long a call that asked the client for
    /// input (`input_required`) waits for the client's retry before it is cancelled.
    /// Default `5m`.
    #[serde(with = "humantime_serde")]
    pub input_timeout: Duration,
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
            shutdown_grace: Duration::from_secs(10),
            input_timeout: Duration::from_secs(5 * 60),
        }
    }
}

/// How the names of several backends are combined into one catalog.
#[derive(Debug, Deserialize)]
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
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Static API keys (`[[auth.api_keys]]`). Empty (default): authentication is off
    /// and every caller is the one anonymous principal. Otherwise every request to
    /// the MCP endpoint and the legacy transport must present one of these keys.
    pub api_keys: Vec<ApiKeyConfig>,
}

/// One API key, stored as its SHA-256 only (`printf %s KEY | sha256sum`).
#[derive(Deserialize, Clone)]
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
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Unique name; also the namespace prefix (`[A-Za-z0-9_-]`, 1–32 chars).
    pub name: String,
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
}

/// Limits on a backend's connections, and warm connections kept ready.
#[derive(Debug, Deserialize, Clone)]
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
    /// a session that would need another gets a clear error. 0 = no limit. Default 0.
    pub max_connections: usize,
    /// Requests in flight at once on one connection (many stdio servers handle one at
    /// a time). 0 = no limit. Default 0.
    pub max_in_flight: usize,
    /// Requests that may wait for an in-flight slot; beyond it a request is refused at
    /// once with "busy". Waiting counts against `request_timeout`. Default 64.
    pub queue: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            min_idle: 0,
            max_lifetime: Duration::from_secs(3600),
            max_connections: 0,
            max_in_flight: 0,
            queue: 64,
        }
    }
}

fn empty_table() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_init_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_max_message_bytes() -> usize {
    16 * 1024 * 1024
}

/// How client sessions map onto backend connections.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
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
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
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
#[derive(Debug, Deserialize, Clone)]
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
#[derive(Debug, Deserialize, Clone)]
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
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// The backend's MCP endpoint URL.
    pub url: String,
    /// Extra headers sent with every request (values may use `${VAR}`), e.g. the
    /// backend's own credentials. A client's token is never forwarded.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// The validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Front door settings.
    pub server: ServerConfig,
    /// Resolved listen address.
    pub listen: SocketAddr,
    /// Namespacing.
    pub namespacing: NamespacingConfig,
    /// Backends, at least one.
    pub backends: Vec<BackendConfig>,
    /// Authentication (validated: principals well-formed, digests 64 hex, unique).
    pub auth: AuthConfig,
}

impl Config {
    /// Reads, parses and validates a TOML file.
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_toml(&text, &shown)
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
        file.validate(origin, &|k| std::env::var(k).ok())
    }
}

impl ConfigFile {
    /// Validates and resolves the file; `env` looks up `${VAR}` references.
    pub fn validate(
        mut self,
        origin: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let listen = match self.server.listen.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                problems.push(format!(
                    "server.listen: `{}` is not an address like 127.0.0.1:8080",
                    self.server.listen
                ));
                None
            }
        };
        if !self.server.path.starts_with('/') || self.server.path.len() < 2 {
            problems.push(format!(
                "server.path: `{}` must start with `/` and name a path, like /mcp",
                self.server.path
            ));
        }
        if ["/healthz", "/readyz", "/metrics", "/sse", "/messages"]
            .contains(&self.server.path.as_str())
        {
            problems.push(format!(
                "server.path: `{}` is already used by Gantry; choose another, like /mcp",
                self.server.path
            ));
        }
        if self.server.sse_retry < Duration::from_millis(10) {
            problems.push("server.sse_retry: must be at least 10ms".into());
        }
        if self.server.max_body_bytes < 1024 {
            problems.push("server.max_body_bytes: must be at least 1024".into());
        }
        if self.server.max_sessions == 0 {
            problems.push("server.max_sessions: must be at least 1".into());
        }
        if self.server.event_buffer == 0 {
            problems.push("server.event_buffer: must be at least 1".into());
        }
        if self.server.input_timeout < Duration::from_secs(1) {
            problems.push("server.input_timeout: must be at least 1s".into());
        }
        if self.server.session_idle_timeout < Duration::from_secs(1) {
            problems.push("server.session_idle_timeout: must be at least 1s".into());
        }
        if self.server.sse_keepalive < Duration::from_millis(100) {
            problems.push("server.sse_keepalive: must be at least 100ms".into());
        }
        if self.namespacing.separator.is_empty()
            || !self
                .namespacing
                .separator
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            problems.push(
                "namespacing.separator: must be non-empty and use only A-Z a-z 0-9 _ -".into(),
            );
        }
        if self.backends.is_empty() {
            problems.push("backends: at least one backend is needed".into());
        }
        let mut seen = std::collections::HashSet::new();
        for (i, b) in self.backends.iter_mut().enumerate() {
            let key = format!("backends[{i}]");
            let valid_name = !b.name.is_empty()
                && b.name.len() <= 32
                && b.name
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
            if !valid_name {
                problems.push(format!(
                    "{key}.name: `{}` must be 1-32 characters of A-Z a-z 0-9 _ -",
                    b.name
                ));
            } else if !seen.insert(b.name.clone()) {
                problems.push(format!("{key}.name: `{}` is used twice", b.name));
            }
            match (&mut b.stdio, &mut b.http) {
                (Some(_), Some(_)) => {
                    problems.push(format!("{key}: set either `stdio` or `http`, not both"))
                }
                (None, None) => problems.push(format!("{key}: set one of `stdio` or `http`")),
                (Some(s), None) => {
                    if s.command.trim().is_empty() {
                        problems.push(format!("{key}.stdio.command: must not be empty"));
                    }
                    for (k, v) in s.env.iter_mut() {
                        match interpolate(v, env) {
                            Ok(r) => *v = r,
                            Err(var) => problems.push(format!(
                                "{key}.stdio.env.{k}: environment variable `{var}` is not set"
                            )),
                        }
                    }
                    if let Some(cwd) = &s.cwd {
                        if !cwd.is_dir() {
                            problems.push(format!(
                                "{key}.stdio.cwd: `{}` is not a directory",
                                cwd.display()
                            ));
                        }
                    }
                }
                (None, Some(h)) => {
                    match interpolate(&h.url, env) {
                        Ok(u) => h.url = u,
                        Err(var) => problems.push(format!(
                            "{key}.http.url: environment variable `{var}` is not set"
                        )),
                    }
                    match reqwest::Url::parse(&h.url) {
                        Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
                        Ok(u) => problems.push(format!(
                            "{key}.http.url: scheme `{}` is not http or https",
                            u.scheme()
                        )),
                        Err(e) => problems.push(format!("{key}.http.url: `{}`: {e}", h.url)),
                    }
                    for (k, v) in h.headers.iter_mut() {
                        if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                            problems
                                .push(format!("{key}.http.headers.{k}: not a valid header name"));
                        }
                        match interpolate(v, env) {
                            Ok(r) => {
                                if http::HeaderValue::from_str(&r).is_err() {
                                    problems.push(format!(
                                        "{key}.http.headers.{k}: not a valid header value"
                                    ));
                                }
                                *v = r;
                            }
                            Err(var) => problems.push(format!(
                                "{key}.http.headers.{k}: environment variable `{var}` is not set"
                            )),
                        }
                    }
                }
            }
            if b.request_timeout < Duration::from_millis(10) {
                problems.push(format!("{key}.request_timeout: must be at least 10ms"));
            }
            if b.pool.min_idle > 0 && b.session_mode == SessionMode::Shared {
                problems.push(format!(
                    "{key}.pool.min_idle: a shared backend has one connection; a warm pool needs per-session or per-user"
                ));
            }
            if b.pool.max_connections > 0 && b.pool.min_idle > b.pool.max_connections {
                problems.push(format!(
                    "{key}.pool.min_idle: must not exceed pool.max_connections"
                ));
            }
            if b.pool.max_lifetime < Duration::from_secs(1) {
                problems.push(format!("{key}.pool.max_lifetime: must be at least 1s"));
            }
            if !b.client_capabilities.is_object() {
                problems.push(format!("{key}.client_capabilities: must be a table"));
            }
            if b.init_timeout < Duration::from_millis(100) {
                problems.push(format!("{key}.init_timeout: must be at least 100ms"));
            }
            if b.restart.initial_backoff < Duration::from_millis(1) {
                problems.push(format!(
                    "{key}.restart.initial_backoff: must be at least 1ms"
                ));
            }
            if b.max_message_bytes < 1024 {
                problems.push(format!("{key}.max_message_bytes: must be at least 1024"));
            }
            if b.restart.initial_backoff > b.restart.max_backoff {
                problems.push(format!(
                    "{key}.restart: initial_backoff must not exceed max_backoff"
                ));
            }
        }
        validate_auth(&mut self.auth, &mut problems);
        match (problems.is_empty(), listen) {
            (true, Some(listen)) => Ok(Config {
                server: self.server,
                listen,
                namespacing: self.namespacing,
                backends: self.backends,
                auth: self.auth,
            }),
            _ => Err(ConfigError::Invalid {
                path: origin.to_owned(),
                problems,
            }),
        }
    }
}

/// Checks `[auth]`; lower-cases the digests. A digest's value is never echoed (a key
/// pasted there by mistake must not reach a terminal or a CI log).
fn validate_auth(auth: &mut AuthConfig, problems: &mut Vec<String>) {
    // SHA-256 of the empty string: what `printf %s "$UNSET" | sha256sum` gives.
    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, k) in auth.api_keys.iter_mut().enumerate() {
        let key = format!("auth.api_keys[{i}]");
        let valid_name = !k.principal.is_empty()
            && k.principal.len() <= 64
            && k.principal
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"_-.@".contains(&c));
        if !valid_name {
            problems.push(format!(
                "{key}.principal: `{}` must be 1-64 characters of A-Z a-z 0-9 _ - . @",
                k.principal.escape_debug()
            ));
        } else if k.principal == "anonymous" {
            // crate::auth::ANONYMOUS: the principal of callers when no key is configured.
            problems.push(format!(
                "{key}.principal: `anonymous` is reserved; choose another name"
            ));
        }
        k.sha256 = k.sha256.trim().to_ascii_lowercase();
        if k.sha256.len() != 64 || !k.sha256.bytes().all(|c| c.is_ascii_hexdigit()) {
            problems.push(format!(
                "{key}.sha256: must be 64 hexadecimal characters, the SHA-256 of the key \
                 (`printf %s KEY | sha256sum`); got {} characters",
                k.sha256.chars().count()
            ));
        } else if k.sha256 == EMPTY_SHA256 {
            problems.push(format!(
                "{key}.sha256: is the SHA-256 of an empty key; hash the key itself"
            ));
        } else if let Some(first) = seen.get(&k.sha256) {
            problems.push(format!(
                "{key}.sha256: the same key as auth.api_keys[{first}]; each key must be unique"
            ));
        } else {
            seen.insert(k.sha256.clone(), i);
        }
    }
}

/// Replaces `${VAR}` with the variable's value; `$$` is a literal `$`.
/// Returns the name of the first missing variable as the error.
pub fn interpolate(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(rest.get(..pos).unwrap_or_default());
        let after = rest.get(pos + 1..).unwrap_or_default();
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{') {
            match body.find('}') {
                Some(end) => {
                    let name = body.get(..end).unwrap_or_default();
                    match env(name) {
                        Some(v) => out.push_str(&v),
                        None => return Err(name.to_owned()),
                    }
                    rest = body.get(end + 1..).unwrap_or_default();
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A backend made from a command line, as `--stdio "cmd args"` gives it.
pub fn stdio_backend(name: &str, command_line: &str) -> Result<BackendConfig, String> {
    let words = shlex::split(command_line).ok_or_else(|| {
        format!("cannot split the command line `{command_line}` (unbalanced quotes?)")
    })?;
    let mut it = words.into_iter();
    let command = it
        .next()
        .ok_or_else(|| "the stdio command line is empty".to_owned())?;
    Ok(BackendConfig {
        stdio: Some(StdioConfig {
            command,
            args: it.collect(),
            env: BTreeMap::new(),
            inherit_env: default_inherit_env(),
            cwd: None,
        }),
        ..backend_defaults(name)
    })
}

/// A backend made from `--http URL`.
pub fn http_backend(name: &str, url: &str) -> BackendConfig {
    BackendConfig {
        http: Some(HttpConfig {
            url: url.to_owned(),
            headers: BTreeMap::new(),
        }),
        ..backend_defaults(name)
    }
}

/// A backend with every setting at its default and no transport yet.
fn backend_defaults(name: &str) -> BackendConfig {
    BackendConfig {
        name: name.to_owned(),
        stdio: None,
        http: None,
        request_timeout: default_request_timeout(),
        init_timeout: default_init_timeout(),
        max_message_bytes: default_max_message_bytes(),
        session_mode: SessionMode::default(),
        era: Era::default(),
        client_capabilities: empty_table(),
        restart: RestartConfig::default(),
        pool: PoolConfig::default(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn env(k: &str) -> Option<String> {
        (k == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn interpolation() {
        assert_eq!(
            interpolate("Bearer ${TOKEN}", &env).unwrap(),
            "Bearer s3cret"
        );
        assert_eq!(interpolate("a$$b$c", &env).unwrap(), "a$b$c");
        assert_eq!(interpolate("${NOPE}", &env).unwrap_err(), "NOPE");
    }

    #[test]
    fn reports_every_problem_with_its_key() {
        let text = r#"
            [server]
            listen = "nowhere"
            [[backends]]
            name = "bad name"
            [[backends]]
            name = "x"
            stdio = { command = "a" }
            http = { url = "ftp://x", headers = { Authorization = "${NOPE}" } }
        "#;
        let file: ConfigFile = toml::from_str(text).unwrap();
        let err = file.validate("t.toml", &env).unwrap_err().to_string();
        for want in [
            "server.listen",
            "backends[0].name",
            "backends[0]: set one of",
            "backends[1]: set either",
        ] {
            assert!(err.contains(want), "missing {want} in {err}");
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = Config::from_toml("[server]\nlisten_on = \"x\"\n", "t.toml").unwrap_err();
        assert!(err.to_string().contains("listen_on"), "{err}");
    }

    #[test]
    fn good_file() {
        let text = r#"
            [[backends]]
            name = "remote"
            http = { url = "http://127.0.0.1:9/mcp", headers = { Authorization = "Bearer ${TOKEN}" } }
            request_timeout = "2s"
        "#;
        let file: ConfigFile = toml::from_str(text).unwrap();
        let cfg = file.validate("t.toml", &env).unwrap();
        let b = cfg.backends.first().unwrap();
        let h = b.http.as_ref().unwrap();
        assert_eq!(h.headers.get("Authorization").unwrap(), "Bearer s3cret");
        assert_eq!(b.request_timeout, Duration::from_secs(2));
    }

    #[test]
    fn auth_keys_are_validated_with_their_key_paths() {
        let good = "72ee9d4355ccb9d3a4c9dbf37382e38e75c1b1a225b5bd1f729ee91bbda30c20";
        let text = format!(
            r#"
            [[backends]]
            name = "x"
            stdio = {{ command = "a" }}
            [[auth.api_keys]]
            principal = "alice"
            sha256 = "{good}"
            [[auth.api_keys]]
            principal = ""
            sha256 = "my-plain-secret-key"
            [[auth.api_keys]]
            principal = "bob"
            sha256 = "{upper}"
            [[auth.api_keys]]
            principal = "anonymous"
            sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            "#,
            upper = good.to_ascii_uppercase()
        );
        let file: ConfigFile = toml::from_str(&text).unwrap();
        let err = file.validate("t.toml", &env).unwrap_err().to_string();
        for want in [
            "auth.api_keys[1].principal",
            "auth.api_keys[1].sha256: must be 64 hexadecimal",
            "auth.api_keys[2].sha256: the same key as auth.api_keys[0]",
            "auth.api_keys[3].principal: `anonymous` is reserved",
            "auth.api_keys[3].sha256: is the SHA-256 of an empty key",
        ] {
            assert!(err.contains(want), "missing {want} in {err}");
        }
        assert!(!err.contains("my-plain-secret-key"), "{err}");
        assert!(!err.contains("auth.api_keys[0]."), "{err}");

        let ok = format!(
            "[[backends]]\nname = \"x\"\nstdio = {{ command = \"a\" }}\n\
             [[auth.api_keys]]\nprincipal = \"alice@example.com\"\nsha256 = \"{}\"\n",
            good.to_ascii_uppercase()
        );
        let cfg = Config::from_toml(&ok, "t.toml").unwrap();
        let k = cfg.auth.api_keys.first().unwrap();
        assert_eq!(k.sha256, good, "digests are normalised to lower case");
        assert!(
            !format!("{cfg:?}").contains(good),
            "Debug must not print digests"
        );
    }
}

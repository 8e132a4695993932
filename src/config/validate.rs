//! From the file as written to the validated [`Config`]: every problem reported with
//! its key path, `${VAR}` interpolation, and the backends the command line adds.

use crate::config::default_inherit_env;
use crate::config::default_init_timeout;
use crate::config::default_list_ttl;
use crate::config::default_max_message_bytes;
use crate::config::default_request_timeout;
use crate::config::empty_table;
use crate::config::AuthConfig;
use crate::config::BackendConfig;
use crate::config::Config;
use crate::config::ConfigError;
use crate::config::ConfigFile;
use crate::config::Era;
use crate::config::HttpConfig;
use crate::config::ItemPolicy;
use crate::config::PoolConfig;
use crate::config::RestartConfig;
use crate::config::SessionMode;
use crate::config::StdioConfig;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

impl ConfigFile {
    /// Validates and resolves the file (its `${VAR}`, `*_file` and `GANTRY_*` were
    /// applied when it was read: [`super::parse_all`]).
    pub fn validate(mut self, origin: &str) -> Result<Config, ConfigError> {
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
        if let Some(m) = &self.server.metrics_listen {
            match m.parse::<SocketAddr>() {
                Ok(a) if Some(a) == listen => problems.push(format!(
                    "server.metrics_listen: `{m}` is server.listen itself (metrics are served there already; say another port)"
                )),
                Ok(_) => {}
                Err(_) => problems.push(format!(
                    "server.metrics_listen: `{m}` is not an address like 0.0.0.0:9090"
                )),
            }
        }
        if !self.server.path.starts_with('/') || self.server.path.len() < 2 {
            problems.push(format!(
                "server.path: `{}` must start with `/` and name a path, like /mcp",
                self.server.path
            ));
        }
        if [
            "/healthz",
            "/readyz",
            "/metrics",
            "/status",
            "/sse",
            "/messages",
        ]
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
        for (key, d) in [
            ("header_timeout", self.server.header_timeout),
            ("body_timeout", self.server.body_timeout),
            ("write_timeout", self.server.write_timeout),
        ] {
            if d < Duration::from_millis(100) {
                problems.push(format!("server.{key}: must be at least 100ms"));
            }
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
        let oauth_on = self.auth.oauth.is_some();
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
            check_names(&key, b, &mut problems);
            match (&mut b.stdio, &mut b.http) {
                (Some(_), Some(_)) => {
                    problems.push(format!("{key}: set either `stdio` or `http`, not both"))
                }
                (None, None) => problems.push(format!("{key}: set one of `stdio` or `http`")),
                (Some(s), None) => {
                    if s.command.trim().is_empty() {
                        problems.push(format!("{key}.stdio.command: must not be empty"));
                    }
                    if let Some(var) = &s.principal_env {
                        if b.session_mode != SessionMode::PerUser {
                            problems.push(format!(
                                "{key}.stdio.principal_env: needs session_mode = \"per-user\" (one process per principal)"
                            ));
                        }
                        let ok = !var.is_empty()
                            && !var.starts_with(|c: char| c.is_ascii_digit())
                            && var.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
                        if !ok {
                            problems.push(format!(
                                "{key}.stdio.principal_env: `{var}` is not an environment variable name"
                            ));
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
                    match reqwest::Url::parse(&h.url) {
                        Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
                        Ok(u) => problems.push(format!(
                            "{key}.http.url: scheme `{}` is not http or https",
                            u.scheme()
                        )),
                        Err(e) => problems.push(format!("{key}.http.url: `{}`: {e}", h.url)),
                    }
                    if let Some(ca) = &h.ca_file {
                        if let Err(e) = load_ca_file(ca) {
                            problems.push(format!("{key}.{e}"));
                        }
                    }
                    for (k, v) in h.headers.iter_mut() {
                        if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                            problems
                                .push(format!("{key}.http.headers.{k}: not a valid header name"));
                        }
                        if http::HeaderValue::from_str(v).is_err() {
                            problems
                                .push(format!("{key}.http.headers.{k}: not a valid header value"));
                        }
                    }
                    if let Some(o) = h.oauth.as_mut() {
                        let okey = format!("{key}.http.oauth");
                        if h.headers
                            .keys()
                            .any(|k| k.eq_ignore_ascii_case("authorization"))
                        {
                            problems.push(format!(
                                "{okey}: the backend gets its token in Authorization; remove that header"
                            ));
                        }
                        match reqwest::Url::parse(&o.token_url) {
                            Ok(u) if u.scheme() == "https"
                                || u.host_str().is_some_and(crate::config::is_loopback_host) => {}
                            _ => problems.push(format!(
                                "{okey}.token_url: `{}` must be an https URL (plain http only on loopback)",
                                o.token_url
                            )),
                        }
                        match o.grant.as_str() {
                            "client_credentials" => {}
                            "token_exchange" => {
                                if b.session_mode != SessionMode::PerUser {
                                    problems.push(format!(
                                        "{okey}.grant: token_exchange needs session_mode = \"per-user\" (each user's connection gets that user's token)"
                                    ));
                                }
                                if !oauth_on {
                                    problems.push(format!(
                                        "{okey}.grant: token_exchange exchanges the callers' OAuth tokens; configure [auth.oauth]"
                                    ));
                                }
                            }
                            other => problems.push(format!(
                                "{okey}.grant: `{other}` is not client_credentials or token_exchange"
                            )),
                        }
                        super::validate_oauth::check_client_auth(
                            &okey,
                            &o.auth_method,
                            &mut problems,
                        );
                    }
                }
            }
            if b.request_timeout < Duration::from_millis(10) {
                problems.push(format!("{key}.request_timeout: must be at least 10ms"));
            }
            if b.idle_timeout.is_some() && b.session_mode == SessionMode::Shared {
                problems.push(format!(
                    "{key}.idle_timeout: stops a per-session or per-user connection when idle; a shared backend's one connection serves every session (remove it or use another session_mode)"
                ));
            }
            if b.idle_timeout.is_some_and(|d| d < Duration::from_secs(1)) {
                problems.push(format!("{key}.idle_timeout: must be at least 1s"));
            }
            if b.pool.min_idle > 0 && b.session_mode == SessionMode::Shared {
                problems.push(format!(
                    "{key}.pool.min_idle: a shared backend has one connection; a warm pool needs per-session or per-user"
                ));
            }
            if b.pool.max_connections == super::file::DEFAULT_MAX_CONNECTIONS {
                b.pool.max_connections = if b.stdio.is_some() {
                    super::file::DEFAULT_STDIO_MAX_CONNECTIONS
                } else {
                    0
                };
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
        check_prefixes(&self.backends, &self.namespacing.separator, &mut problems);
        if self.catalog.deadline < Duration::from_millis(10) {
            problems.push("catalog.deadline: must be at least 10ms".into());
        }
        validate_auth(&mut self.auth, &mut problems);
        validate_limits(&mut self.limits, &mut problems);
        if let Some(t) = self.tracing.as_mut() {
            validate_tracing(t, &mut problems);
        }
        super::validate_oauth::check(&mut self.server, listen, &mut self.auth, &mut problems);
        match (problems.is_empty(), listen) {
            (true, Some(listen)) => Ok(Config {
                server: self.server,
                listen,
                namespacing: self.namespacing,
                backends: self.backends,
                auth: self.auth,
                limits: self.limits,
                tracing: self.tracing,
                catalog: self.catalog,
            }),
            _ => Err(ConfigError::Invalid {
                path: origin.to_owned(),
                problems,
            }),
        }
    }
}

/// Whether `s` may be (part of) a name clients see: `A-Z a-z 0-9 _ -`.
fn name_chars(s: &str) -> bool {
    s.bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

/// A backend's `prefix` and its tool, prompt and resource policies.
fn check_names(key: &str, b: &BackendConfig, problems: &mut Vec<String>) {
    if let Some(p) = b.prefix.as_deref() {
        if p.len() > 32 || !name_chars(p) {
            problems.push(format!(
                "{key}.prefix: `{p}` must be 0-32 characters of A-Z a-z 0-9 _ -"
            ));
        }
    }
    let policies: [(&str, &ItemPolicy); 3] = [
        ("tools", &b.tools),
        ("prompts", &b.prompts),
        ("resources", &b.resources),
    ];
    for (kind, policy) in policies {
        for (list, globs) in [("allow", &policy.allow), ("deny", &policy.deny)] {
            if globs.iter().any(String::is_empty) {
                problems.push(format!(
                    "{key}.{kind}.{list}: an empty pattern matches nothing; remove it"
                ));
            }
        }
        if kind == "resources" && !policy.rename.is_empty() {
            problems.push(format!(
                "{key}.resources.rename: resources keep their URIs; only tools and prompts can be renamed"
            ));
            continue;
        }
        let mut targets: HashMap<&str, &str> = HashMap::new();
        for (from, to) in &policy.rename {
            if to.is_empty() || to.len() > 64 || !name_chars(to) {
                problems.push(format!(
                    "{key}.{kind}.rename.{from}: `{to}` must be 1-64 characters of A-Z a-z 0-9 _ -"
                ));
            } else if let Some(other) = targets.insert(to, from) {
                problems.push(format!(
                    "{key}.{kind}.rename: `{other}` and `{from}` are both renamed to `{to}`"
                ));
            }
        }
    }
}

/// Two backends' prefixes must not make one name of each read alike: equal
/// prefixes, or one that with the separator begins the other (`a` and `a__b`).
/// Backends without a prefix are told apart by their names at list time.
fn check_prefixes(backends: &[BackendConfig], sep: &str, problems: &mut Vec<String>) {
    let prefixes: Vec<&str> = backends
        .iter()
        .map(|b| b.prefix.as_deref().unwrap_or(&b.name))
        .collect();
    for (i, a) in prefixes.iter().enumerate() {
        for (j, b) in prefixes.iter().enumerate().skip(i + 1) {
            if a.is_empty() || b.is_empty() {
                continue;
            }
            let (an, bn) = (
                backends.get(i).map_or("", |x| x.name.as_str()),
                backends.get(j).map_or("", |x| x.name.as_str()),
            );
            if a == b {
                problems.push(format!(
                    "backends[{j}].prefix: `{b}` is also the prefix of backend `{an}`; their names would collide (set `prefix` on one)"
                ));
            } else if b.starts_with(&format!("{a}{sep}")) || a.starts_with(&format!("{b}{sep}")) {
                problems.push(format!(
                    "backends[{j}].prefix: `{b}` and `{a}` (backend `{an}`) with the separator `{sep}` can name one tool of each alike; choose prefixes where neither starts with the other and `{sep}` (backend `{bn}`)"
                ));
            }
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

/// `N/s`, `N/m`, `N/h` as (N, the period).
pub fn parse_rate(rate: &str) -> Option<(u32, Duration)> {
    let (n, unit) = rate.trim().split_once('/')?;
    let n: u32 = n.trim().parse().ok().filter(|n| *n > 0)?;
    let period = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return None,
    };
    Some((n, period))
}

/// Checks `[tracing]`.
fn validate_tracing(t: &mut crate::config::TracingConfig, problems: &mut Vec<String>) {
    match reqwest::Url::parse(&t.endpoint) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(u) => problems.push(format!(
            "tracing.endpoint: scheme `{}` is not http or https (OTLP/HTTP, e.g. http://otel-collector:4318)",
            u.scheme()
        )),
        Err(e) => problems.push(format!("tracing.endpoint: `{}`: {e}", t.endpoint)),
    }
    if !(0.0..=1.0).contains(&t.sample_ratio) {
        problems.push(format!(
            "tracing.sample_ratio: {} is not between 0.0 and 1.0",
            t.sample_ratio
        ));
    }
    if t.timeout.is_zero() {
        problems.push("tracing.timeout: must be more than 0".into());
    }
    for (k, v) in t.headers.iter_mut() {
        if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
            problems.push(format!(
                "tracing.headers: `{}` is not an HTTP header name",
                k.escape_debug()
            ));
        }
        if reqwest::header::HeaderValue::from_str(v).is_err() {
            problems.push(format!(
                "tracing.headers.{k}: the value is not a valid HTTP header value (control characters?)"
            ));
        }
    }
}

/// A limit's name: 1-64 of `A-Z a-z 0-9 _ - .` (it appears in answers and labels).
fn rule_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` must be 1-64 characters of A-Z a-z 0-9 _ - .",
            name.escape_debug()
        ))
    }
}

/// Checks `[limits]`.
fn validate_limits(limits: &mut crate::config::LimitsConfig, problems: &mut Vec<String>) {
    match (limits.store.as_str(), limits.redis.as_mut()) {
        ("memory", None) => {}
        ("memory", Some(_)) => problems.push(
            "limits.redis: set, but limits.store is \"memory\" (say store = \"redis\" to use it)"
                .into(),
        ),
        ("redis", None) => problems.push(
            "limits.store = \"redis\" needs [limits.redis] with url = \"redis://host:6379\"".into(),
        ),
        ("redis", Some(r)) => {
            if let Err(e) = crate::limits::redis_url(&r.url) {
                problems.push(format!("limits.redis.url: {e}"));
            }
            if r.timeout.is_zero() {
                problems.push("limits.redis.timeout: must be more than 0".into());
            }
            if r.prefix.len() > 256 {
                problems.push("limits.redis.prefix: at most 256 bytes".into());
            }
        }
        (other, _) => problems.push(format!(
            "limits.store: `{}` is not memory or redis",
            other.escape_debug()
        )),
    }
    let mut names = std::collections::HashSet::new();
    for (i, r) in limits.rules.iter().enumerate() {
        let key = format!("limits.rules[{i}]");
        if let Err(e) = rule_name(&r.name) {
            problems.push(format!("{key}.name: {e}"));
        } else if !names.insert(r.name.clone()) {
            problems.push(format!("{key}.name: `{}` is used twice", r.name));
        }
        if parse_rate(&r.rate).is_none() {
            problems.push(format!(
                "{key}.rate: `{}` is not like \"60/m\" (N per s, m or h; N at least 1)",
                r.rate
            ));
        }
        if r.burst == Some(0) {
            problems.push(format!("{key}.burst: must be at least 1"));
        }
        if r.key.is_empty() {
            problems.push(format!(
                "{key}.key: name what is counted (e.g. [\"principal\"])"
            ));
        }
        for k in &r.key {
            if !["principal", "ip", "tool", "backend", "method", "global"].contains(&k.as_str()) {
                problems.push(format!(
                    "{key}.key: `{k}` is not principal, ip, tool, backend, method or global"
                ));
            }
        }
        if !matches!(r.on_store_error.as_str(), "open" | "closed" | "local") {
            problems.push(format!(
                "{key}.on_store_error: `{}` is not open, closed or local",
                r.on_store_error.escape_debug()
            ));
        }
        if !matches!(r.answer.as_str(), "error" | "tool_result") {
            problems.push(format!(
                "{key}.answer: `{}` is not error or tool_result",
                r.answer
            ));
        }
    }
    for (i, c) in limits.concurrency.iter().enumerate() {
        let key = format!("limits.concurrency[{i}]");
        if let Err(e) = rule_name(&c.name) {
            problems.push(format!("{key}.name: {e}"));
        } else if !names.insert(c.name.clone()) {
            problems.push(format!("{key}.name: `{}` is used twice", c.name));
        }
        if c.max == 0 {
            problems.push(format!("{key}.max: must be at least 1"));
        }
        for k in &c.key {
            if !["principal", "tool", "backend", "global"].contains(&k.as_str()) {
                problems.push(format!(
                    "{key}.key: `{k}` is not principal, tool, backend or global"
                ));
            }
        }
        if c.key.is_empty() {
            problems.push(format!(
                "{key}.key: name what is counted (e.g. [\"backend\"])"
            ));
        }
    }
    for (i, t) in limits.timeouts.iter().enumerate() {
        let key = format!("limits.timeouts[{i}]");
        if let Err(e) = rule_name(&t.name) {
            problems.push(format!("{key}.name: {e}"));
        } else if !names.insert(t.name.clone()) {
            problems.push(format!("{key}.name: `{}` is used twice", t.name));
        }
        if t.tools.is_empty() {
            problems.push(format!(
                "{key}.tools: name the tools it is for (globs, e.g. [\"build_*\"])"
            ));
        }
        if t.timeout.is_zero() {
            problems.push(format!("{key}.timeout: must be more than 0"));
        }
    }
    for (i, p) in limits.trusted_proxies.iter().enumerate() {
        if crate::limits::Cidr::parse(p).is_none() {
            problems.push(format!(
                "limits.trusted_proxies[{i}]: `{p}` is not an address or CIDR block (10.0.0.0/8, ::1)"
            ));
        }
    }
}

/// Replaces `${VAR}` with the variable's value, `${VAR:-default}` with it or (unset or
/// empty) the default; `$$` is a literal `$`.
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
                    // `${VAR:-default}`: the default when VAR is unset or empty.
                    match name.split_once(":-") {
                        Some((var, default)) => match env(var).filter(|v| !v.is_empty()) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(default),
                        },
                        None => match env(name) {
                            Some(v) => out.push_str(&v),
                            None => return Err(name.to_owned()),
                        },
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
            principal_env: None,
        }),
        ..backend_defaults(name)
    })
}

/// The CA certificates (PEM) of an HTTP backend's `ca_file`.
pub fn load_ca_file(
    path: &std::path::Path,
) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>, String> {
    use rustls_pki_types::pem::PemObject as _;
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("http.ca_file: {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "http.ca_file: {}: no CERTIFICATE in the file",
            path.display()
        ));
    }
    Ok(certs)
}

/// A backend made from `--http URL`.
pub fn http_backend(name: &str, url: &str) -> BackendConfig {
    BackendConfig {
        http: Some(HttpConfig {
            url: url.to_owned(),
            headers: BTreeMap::new(),
            oauth: None,
            ca_file: None,
            version: Default::default(),
        }),
        ..backend_defaults(name)
    }
}

/// A backend with every setting at its default and no transport yet.
fn backend_defaults(name: &str) -> BackendConfig {
    BackendConfig {
        name: name.to_owned(),
        prefix: None,
        list_ttl: default_list_ttl(),
        tools: ItemPolicy::default(),
        prompts: ItemPolicy::default(),
        resources: ItemPolicy::default(),
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
        required: false,
        idle_timeout: None,
    }
}

//! Typed configuration: the TOML file as written ([`ConfigFile`]) and its validated,
//! immutable runtime form ([`Config`]).
//!
//! Validation reports *every* problem with its key path, so a bad file never starts a
//! half-working gateway. `${VAR}` in backend env values, headers and URLs is replaced
//! by the environment variable `VAR` at load time (a missing variable is an error).

use std::net::SocketAddr;

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

mod environ;
mod file;
pub mod preflight;
mod validate;
mod validate_oauth;

pub use file::*;
pub use validate::*;
pub use validate_oauth::{is_loopback_host, ACCEPTABLE_ALGORITHMS};

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
    /// Rate limits (validated: rates, keys, names).
    pub limits: LimitsConfig,
    /// `[tracing]` (validated: endpoint, ratio; `${VAR}` replaced).
    pub tracing: Option<TracingConfig>,
    /// `[catalog]`.
    pub catalog: CatalogConfig,
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
        let file = parse_all(text).map_err(|errors| ConfigError::Syntax {
            path: origin.to_owned(),
            message: errors.join("\n"),
        })?;
        file.validate(origin)
    }
}

impl Config {
    /// The configuration in force, every default filled in and the environment
    /// applied, as TOML, with every secret (`client_secret`, `sha256`, tokens,
    /// `headers` and `env` values, URL passwords) shown as `<redacted>`.
    pub fn effective_toml(&self) -> Result<String, String> {
        let mut t = toml::Table::new();
        let mut put = |k: &str, v: Result<toml::Value, toml::ser::Error>| match v {
            Ok(v) => {
                t.insert(k.into(), v);
                Ok(())
            }
            Err(e) => Err(format!("{k}: {e}")),
        };
        put("server", toml::Value::try_from(&self.server))?;
        put("namespacing", toml::Value::try_from(&self.namespacing))?;
        put("catalog", toml::Value::try_from(&self.catalog))?;
        put("auth", toml::Value::try_from(&self.auth))?;
        put("limits", toml::Value::try_from(&self.limits))?;
        if let Some(tr) = &self.tracing {
            put("tracing", toml::Value::try_from(tr))?;
        }
        put("backends", toml::Value::try_from(&self.backends))?;
        let mut v = toml::Value::Table(t);
        redact(&mut v, "");
        toml::to_string(&v).map_err(|e| e.to_string())
    }
}

/// Keys whose values are secrets.
const SECRETS: [&str; 8] = [
    "client_secret",
    "sha256",
    "token",
    "password",
    "secret",
    "state_key",
    "password_hash",
    "client_secret_sha256",
];

fn redact(v: &mut toml::Value, key: &str) {
    match v {
        toml::Value::Table(t) => {
            let whole = key == "headers" || key == "env";
            for (k, x) in t.iter_mut() {
                if whole || SECRETS.contains(&k.as_str()) {
                    *x = toml::Value::String("<redacted>".into());
                } else {
                    redact(x, k);
                }
            }
        }
        toml::Value::Array(items) => items.iter_mut().for_each(|x| redact(x, key)),
        toml::Value::String(s) if s.contains("://") && s.contains('@') => {
            // scheme://user:password@host…: the password goes.
            if let Ok(mut u) = reqwest::Url::parse(s) {
                if u.password().is_some() && u.set_password(Some("redacted")).is_ok() {
                    *s = u.to_string();
                }
            }
        }
        _ => {}
    }
}

/// Parses a configuration file, reporting every problem the parser finds rather
/// than the first. Syntax first: the line of each syntax error is set aside and
/// parsing goes on, so every broken line is reported. Then the settings: after an
/// error on a one-line `key = value` (an unknown key, a value of the wrong kind), that
/// line is set aside likewise. When a syntax error cost a table header, the settings
/// are not checked (every key below it would seem misplaced), and "missing" errors
/// after a syntax error are left out (the line set aside may be what holds the key).
pub fn parse_all(text: &str) -> Result<ConfigFile, Vec<String>> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    parse_all_with(text, &|k| std::env::var(k).ok(), &vars)
}

/// [`parse_all`] with this environment: `env` for `${VAR}`, `vars` for the
/// `GANTRY_*` overrides (see [`environ`]).
pub fn parse_all_with(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    vars: &[(String, String)],
) -> Result<ConfigFile, Vec<String>> {
    let (mut text, mut errors, lost_header) = syntax_pass(text);
    if lost_header {
        return Err(errors);
    }
    let after_syntax = !errors.is_empty();
    // The file with the environment applied: what is read. Its errors have no line;
    // the file's own are found with lines below.
    let mut late: Vec<String> = Vec::new();
    if !after_syntax {
        if let Ok(mut tree) = toml::from_str::<toml::Table>(&text) {
            late = environ::prepare(&mut tree, env, vars);
            if late.is_empty() {
                match toml::Value::Table(tree).try_into::<ConfigFile>() {
                    Ok(file) => return Ok(file),
                    Err(e) => late.push(format!(
                        "{} (with the GANTRY_* variables and *_file keys applied)",
                        hint(e.to_string())
                    )),
                }
            }
        }
    }
    for _ in 0..32 {
        let e = match toml::from_str::<ConfigFile>(&text) {
            Ok(_) => break,
            Err(e) => e,
        };
        let message = e.to_string();
        // `<key>_file` is read before the file is checked (see `environ`).
        let file_key = message.contains("unknown field `") && message.contains("_file`");
        if !(file_key || after_syntax && message.contains("missing field")) {
            errors.push(hint(message));
        }
        let Some(line) = e.span().and_then(|span| simple_line(&text, span.start)) else {
            break;
        };
        // Blanked (same length, newline kept) so later errors keep their positions.
        let blank = " ".repeat(line.len());
        text.replace_range(line, &blank);
    }
    if errors.is_empty() {
        errors = late;
    }
    if errors.is_empty() {
        errors.push("the configuration could not be read".into());
    }
    Err(errors)
}

/// Most syntax errors reported in one run.
const MAX_SYNTAX_ERRORS: usize = 16;

/// Every syntax error, each line in error blanked in the text returned; and whether
/// one of those lines was a table header.
fn syntax_pass(text: &str) -> (String, Vec<String>, bool) {
    let mut text = text.to_owned();
    let mut errors = Vec::new();
    let mut lost_header = false;
    while errors.len() < MAX_SYNTAX_ERRORS {
        let Err(e) = toml::from_str::<toml::Table>(&text) else {
            break;
        };
        let line = e.span().and_then(|span| line_at(&text, span.start));
        let Some(line) = line.filter(|l| !text.get(l.clone()).unwrap_or("").trim().is_empty())
        else {
            errors.push(e.to_string());
            lost_header = true; // nothing to set aside: stop here
            break;
        };
        let content = text.get(line.clone()).unwrap_or("").trim().to_owned();
        errors.push(syntax_hint(e.to_string(), &content));
        // A broken header is mended (`[[backends` → `[[backends]]`) so the keys below
        // stay in their table; one that cannot be is lost.
        let replacement = if content.starts_with('[') {
            let mended = mend_header(&content);
            lost_header |= mended.is_none();
            mended.unwrap_or_default()
        } else {
            String::new()
        };
        let padded = format!("{replacement:<width$}", width = line.len());
        text.replace_range(line, &padded);
    }
    (text, errors, lost_header)
}

/// `[name` / `[[name` / `[name.sub]x` → the header meant, when its name is plain.
fn mend_header(line: &str) -> Option<String> {
    let double = line.starts_with("[[");
    let rest = line.trim_start_matches('[');
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .collect();
    let name = name.trim_matches('.');
    if name.is_empty() {
        return None;
    }
    Some(if double {
        format!("[[{name}]]")
    } else {
        format!("[{name}]")
    })
}

/// The byte range of the line holding `at` (without its newline).
fn line_at(text: &str, at: usize) -> Option<std::ops::Range<usize>> {
    let at = at.min(text.len());
    let start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
    let end = text.get(at..)?.find('\n').map_or(text.len(), |i| at + i);
    Some(start..end)
}

/// A syntax error, with what an unquoted value usually means.
fn syntax_hint(message: String, line: &str) -> String {
    let value = line.split_once('=').map(|(_, v)| v.trim()).unwrap_or("");
    let bare = !value.is_empty()
        && !value.starts_with(['"', '\'', '[', '{'])
        && value.parse::<f64>().is_err()
        && !matches!(value, "true" | "false");
    if bare {
        format!(
            "{message}\n(text and durations are quoted: `{}= \"{value}\"`)",
            line.split_once('=').map_or("", |(k, _)| k)
        )
    } else {
        message
    }
}

/// The byte range of the line holding `at`, if it is a whole `key = value` line
/// (balanced brackets and quotes), which can be set aside on its own.
fn simple_line(text: &str, at: usize) -> Option<std::ops::Range<usize>> {
    let start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
    let end = text.get(at..)?.find('\n').map_or(text.len(), |i| at + i);
    let line = text.get(start..end)?.trim();
    let count = |c: char| line.matches(c).count();
    let key_first = line.split_once('=').is_some_and(|(k, _)| {
        !k.trim().is_empty() && !k.contains(['[', '{', '"']) || k.trim().starts_with('"')
    });
    (key_first
        && count('[') == count(']')
        && count('{') == count('}')
        && count('"') % 2 == 0
        && !line.starts_with('['))
    .then_some(start..end)
}

/// Adds what the parser's message does not say: the key probably meant, or what a
/// duration looks like.
fn hint(message: String) -> String {
    if message.contains("expected a duration") || message.contains("time unit") {
        return format!(
            "{message}\n(a duration is written like \"200ms\", \"15s\", \"30m\" or \"1h 30m\")"
        );
    }
    // "unknown field `listn`, expected one of `listen`, `path`, …"
    let unknown = message
        .split("unknown field `")
        .nth(1)
        .and_then(|r| r.split('`').next());
    let meant = unknown.and_then(|u| {
        let expected = message.split("expected one of ").nth(1)?;
        expected
            .split(", ")
            .map(|k| k.trim().trim_matches('`'))
            .filter(|k| edit_distance(u, k) <= 2)
            .min_by_key(|k| edit_distance(u, k))
    });
    match (unknown, meant) {
        (Some(u), Some(m)) => format!("{message}\n(`{u}`: did you mean `{m}`?)"),
        _ => message,
    }
}

/// Levenshtein distance (short keys only, so the quadratic cost does not matter).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row.first().copied().unwrap_or(0);
        if let Some(first) = row.first_mut() {
            *first = i + 1;
        }
        for (j, cb) in b.iter().enumerate() {
            let here = row.get(j + 1).copied().unwrap_or(0);
            let left = row.get(j).copied().unwrap_or(0);
            let best = (here + 1).min(left + 1).min(prev + usize::from(ca != *cb));
            if let Some(cell) = row.get_mut(j + 1) {
                *cell = best;
            }
            prev = here;
        }
    }
    row.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::time::Duration;

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
        assert_eq!(interpolate("${NOPE:-dflt}", &env).unwrap(), "dflt");
        assert_eq!(interpolate("${TOKEN:-dflt}", &env).unwrap(), "s3cret");
        assert_eq!(interpolate("${NOPE:-}x", &env).unwrap(), "x");
        assert_eq!(
            interpolate("http://${NOPE:-localhost:6379}/0", &env).unwrap(),
            "http://localhost:6379/0"
        );
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
            http = { url = "ftp://x" }
        "#;
        let file = parse_all_with(text, &env, &[]).unwrap();
        let err = file.validate("t.toml").unwrap_err().to_string();
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
    fn a_redis_store_is_checked_before_start() {
        let check = |limits: &str| {
            let text = format!(
                "[[backends]]\nname = \"a\"\nstdio = {{ command = \"a\" }}\n[limits]\n{limits}"
            );
            parse_all_with(&text, &env, &[])
                .map_err(|e| e.join("\n"))
                .and_then(|f| f.validate("t.toml").map_err(|e| e.to_string()))
        };
        let ok = check(
            "store = \"redis\"\n[limits.redis]\nurl = \"redis://:${TOKEN}@cache:6379/2\"\n[[limits.rules]]\nname = \"r\"\nrate = \"1/s\"\non_store_error = \"local\"\n",
        )
        .unwrap();
        assert_eq!(ok.limits.redis.unwrap().url, "redis://:s3cret@cache:6379/2");
        for (limits, want) in [
            ("store = \"redis\"\n", "needs [limits.redis]"),
            ("store = \"rdis\"\n", "`rdis` is not memory or redis"),
            (
                "[limits.redis]\nurl = \"redis://x\"\n",
                "limits.store is \"memory\"",
            ),
            (
                "store = \"redis\"\n[limits.redis]\nurl = \"http://x\"\n",
                "limits.redis.url",
            ),
            (
                "store = \"redis\"\n[limits.redis]\nurl = \"redis://${NOPE}\"\n",
                "`NOPE` is not set",
            ),
            (
                "[[limits.timeouts]]\nname = \"t\"\ntools = []\ntimeout = \"1s\"\n",
                "limits.timeouts[0].tools: name the tools",
            ),
            (
                "[[limits.rules]]\nname = \"r\"\nrate = \"1/s\"\non_store_error = \"fail-open\"\n",
                "limits.rules[0].on_store_error: `fail-open` is not open, closed or local",
            ),
        ] {
            let err = check(limits).unwrap_err().to_string();
            assert!(err.contains(want), "{limits}: {err}");
        }
    }

    #[test]
    fn tracing_is_checked_before_start() {
        let check = |tracing: &str| {
            let text = format!(
                "[[backends]]\nname = \"a\"\nstdio = {{ command = \"a\" }}\n[tracing]\n{tracing}"
            );
            parse_all_with(&text, &env, &[])
                .map_err(|e| e.join("\n"))
                .and_then(|f| f.validate("t.toml").map_err(|e| e.to_string()))
        };
        let ok = check(
            "endpoint = \"http://otel:4318\"\nheaders = { authorization = \"Bearer ${TOKEN}\" }\n",
        )
        .unwrap()
        .tracing
        .unwrap();
        assert_eq!(ok.headers["authorization"], "Bearer s3cret");
        assert_eq!(ok.sample_ratio, 1.0);
        for (tracing, want) in [
            (
                "endpoint = \"grpc://otel:4317\"\n",
                "scheme `grpc` is not http or https",
            ),
            (
                "endpoint = \"http://otel:4318\"\nsample_ratio = 2.0\n",
                "tracing.sample_ratio",
            ),
            ("endpoint = \"${NOPE}\"\n", "`NOPE` is not set"),
            (
                "endpoint = \"http://otel:4318\"\nheaders = { \"bad name\" = \"x\" }\n",
                "`bad name` is not an HTTP header name",
            ),
        ] {
            let err = check(tracing).unwrap_err().to_string();
            assert!(err.contains(want), "{tracing}: {err}");
        }
    }

    #[test]
    fn idle_timeout_is_for_per_client_connections() {
        let with = |mode: &str, idle: &str| {
            let text = format!(
                "[[backends]]\nname = \"a\"\nstdio = {{ command = \"a\" }}\nsession_mode = \"{mode}\"\nidle_timeout = \"{idle}\"\n"
            );
            let file = parse_all_with(&text, &env, &[]).unwrap();
            file.validate("t.toml").map(|c| c.backends[0].idle_timeout)
        };
        assert_eq!(
            with("per-session", "2m").unwrap(),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            with("per-user", "1s").unwrap(),
            Some(Duration::from_secs(1))
        );
        let err = with("shared", "2m").unwrap_err().to_string();
        assert!(
            err.contains("backends[0].idle_timeout: stops a per-session"),
            "{err}"
        );
        let err = with("per-session", "10ms").unwrap_err().to_string();
        assert!(err.contains("at least 1s"), "{err}");
    }

    #[test]
    fn oauth_settings_are_checked() {
        let with = |server: &str, oauth: &str| {
            let text = format!(
                "[server]\n{server}\n[auth.oauth]\n{oauth}\n[[backends]]\nname = \"a\"\nstdio = {{ command = \"a\" }}\n"
            );
            let file = parse_all_with(&text, &env, &[]).unwrap();
            file.validate("t.toml")
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let issuer = "[[auth.oauth.issuers]]\nissuer = \"https://idp.example.com\"";
        assert!(with("", issuer).is_ok(), "loopback needs no public_url");
        let err = with("listen = \"0.0.0.0:8080\"", issuer).unwrap_err();
        assert!(
            err.contains("server.public_url: required with [auth.oauth]"),
            "{err}"
        );
        let err = with(
            "listen = \"0.0.0.0:8080\"\npublic_url = \"http://mcp.example.com/mcp\"",
            issuer,
        )
        .unwrap_err();
        assert!(err.contains("plain http beyond loopback"), "{err}");
        assert!(with(
            "listen = \"0.0.0.0:8080\"\npublic_url = \"https://mcp.example.com/mcp\"",
            issuer
        )
        .is_ok());
        let err = with("", &format!("algorithms = [\"HS256\", \"none\"]\n{issuer}")).unwrap_err();
        assert!(
            err.contains("`HS256` is not accepted") && err.contains("`none` is not accepted"),
            "{err}"
        );
        let err = with(
            "",
            "[[auth.oauth.issuers]]\nissuer = \"http://idp.example.com\"",
        )
        .unwrap_err();
        assert!(
            err.contains("auth.oauth.issuers[0].issuer") && err.contains("plain http"),
            "{err}"
        );
        let err = with("", "issuers = []").unwrap_err();
        assert!(
            err.contains("auth.oauth.issuers: name at least one"),
            "{err}"
        );
        let err = with("", &format!("required_scopes = [\"a b\"]\n{issuer}")).unwrap_err();
        assert!(err.contains("scope `a b`"), "{err}");
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
        let file = parse_all_with(text, &env, &[]).unwrap();
        let cfg = file.validate("t.toml").unwrap();
        let b = cfg.backends.first().unwrap();
        let h = b.http.as_ref().unwrap();
        assert_eq!(h.headers.get("Authorization").unwrap(), "Bearer s3cret");
        assert_eq!(b.request_timeout, Duration::from_secs(2));
    }

    #[test]
    fn stdio_backends_are_capped_by_default_and_http_ones_not() {
        let text = r#"
            [[backends]]
            name = "proc"
            stdio = { command = "a" }
            [[backends]]
            name = "remote"
            http = { url = "http://127.0.0.1:9/mcp" }
            [[backends]]
            name = "unbounded"
            stdio = { command = "a" }
            pool = { max_connections = 0 }
        "#;
        let file = parse_all_with(text, &env, &[]).unwrap();
        let cfg = file.validate("t.toml").unwrap();
        let caps: Vec<usize> = cfg
            .backends
            .iter()
            .map(|b| b.pool.max_connections)
            .collect();
        assert_eq!(caps, [DEFAULT_STDIO_MAX_CONNECTIONS, 0, 0]);
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
        let file = parse_all_with(&text, &env, &[]).unwrap();
        let err = file.validate("t.toml").unwrap_err().to_string();
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

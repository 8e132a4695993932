//! Checks of `[auth.oauth]` and `server.public_url`: URLs that can serve as an issuer
//! and a resource identifier, algorithms that cannot be abused, and no OAuth over
//! plain HTTP beyond loopback.

use crate::config::{AuthConfig, AuthMode, BuiltinConfig, ServerConfig};
use std::net::SocketAddr;
use std::time::Duration;

/// Algorithms Gantry verifies: asymmetric only (an `HS*` token would be checked
/// with a public key as the secret; `none` is no signature).
pub const ACCEPTABLE_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// Whether `host` (as in a URL) is a loopback name or address.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An absolute http(s) URL without query or fragment; `why` names the key.
fn url_problem(key: &str, value: &str) -> Option<String> {
    let Ok(u) = reqwest::Url::parse(value) else {
        return Some(format!(
            "{key}: `{value}` is not an absolute URL like https://idp.example.com"
        ));
    };
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Some(format!("{key}: `{value}` must be an http(s) URL"));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Some(format!("{key}: `{value}` must have no query or fragment"));
    }
    if u.scheme() == "http" && !u.host_str().is_some_and(is_loopback_host) {
        return Some(format!(
            "{key}: `{value}` uses plain http beyond loopback; tokens and keys would travel in clear (use https)"
        ));
    }
    None
}

/// How a confidential client authenticates: `client_secret_basic` or `_post`.
pub(super) fn check_client_auth(key: &str, method: &str, problems: &mut Vec<String>) {
    if !matches!(method, "client_secret_basic" | "client_secret_post") {
        problems.push(format!(
            "{key}.auth_method: `{method}` is not client_secret_basic or client_secret_post"
        ));
    }
}

/// Checks `server.public_url` and `[auth.oauth]`.
pub(super) fn check(
    server: &mut ServerConfig,
    listen: Option<SocketAddr>,
    auth: &mut AuthConfig,
    problems: &mut Vec<String>,
) {
    if let Some(p) = &server.public_url {
        match reqwest::Url::parse(p) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
                if u.query().is_some() || u.fragment().is_some() {
                    problems.push(format!(
                        "server.public_url: `{p}` must have no query or fragment"
                    ));
                }
            }
            _ => problems.push(format!(
                "server.public_url: `{p}` is not an absolute http(s) URL like https://mcp.example.com/mcp"
            )),
        }
    }
    for (i, r) in auth.rules.iter().enumerate() {
        let key = format!("auth.rules[{i}]");
        if r.tools.is_empty() && r.prompts.is_empty() && r.resources.is_empty() {
            problems.push(format!(
                "{key}: name the items it covers (tools, prompts or resources globs)"
            ));
        }
        if r.scopes.is_empty() && r.principals.is_empty() {
            problems.push(format!(
                "{key}: say what using the items takes (scopes and/or principals)"
            ));
        }
        if !r.scopes.is_empty() && auth.oauth.is_none() && auth.mode != AuthMode::Builtin {
            problems.push(format!(
                "{key}.scopes: only OAuth tokens carry scopes; configure [auth.oauth] or use principals"
            ));
        }
    }
    let builtin = auth.mode == AuthMode::Builtin;
    match (&mut auth.builtin, builtin) {
        (Some(_), false) => problems.push(
            "auth.builtin: set auth.mode = \"builtin\" to use the built-in authorization server"
                .into(),
        ),
        (b, true) => check_builtin(b.get_or_insert_with(BuiltinConfig::default), problems),
        (None, false) => {}
    }
    if builtin {
        public_url_for_tokens(server, listen, "auth.mode = \"builtin\"", problems);
    }
    let Some(oauth) = auth.oauth.as_mut() else {
        return;
    };
    if oauth.issuers.is_empty() && !builtin {
        problems.push(
            "auth.oauth.issuers: name at least one authorization server ([[auth.oauth.issuers]] issuer = \"https://…\")"
                .into(),
        );
    }
    let mut seen = std::collections::HashSet::new();
    for (i, iss) in oauth.issuers.iter_mut().enumerate() {
        let key = format!("auth.oauth.issuers[{i}]");
        if let Some(p) = url_problem(&format!("{key}.issuer"), &iss.issuer) {
            problems.push(p);
        }
        if let Some(p) = iss
            .jwks_uri
            .as_deref()
            .and_then(|j| url_problem(&format!("{key}.jwks_uri"), j))
        {
            problems.push(p);
        }
        if let Some(intro) = iss.introspection.as_mut() {
            let key = format!("{key}.introspection");
            if let Some(p) = intro
                .endpoint
                .as_deref()
                .and_then(|e| url_problem(&format!("{key}.endpoint"), e))
            {
                problems.push(p);
            }
            if intro.client_secret.is_empty() {
                problems.push(format!("{key}.client_secret: is empty"));
            }
            if intro.client_id.is_empty() {
                problems.push(format!("{key}.client_id: is empty"));
            }
            check_client_auth(&key, &intro.auth_method, problems);
        }
        if !seen.insert(iss.issuer.clone()) {
            problems.push(format!("{key}.issuer: `{}` is listed twice", iss.issuer));
        }
    }
    if oauth.algorithms.is_empty() {
        problems.push("auth.oauth.algorithms: name at least one algorithm".into());
    }
    for a in &oauth.algorithms {
        if !ACCEPTABLE_ALGORITHMS.contains(&a.as_str()) {
            problems.push(format!(
                "auth.oauth.algorithms: `{a}` is not accepted (asymmetric algorithms only: {})",
                ACCEPTABLE_ALGORITHMS.join(", ")
            ));
        }
    }
    if oauth.leeway > Duration::from_secs(300) {
        problems.push("auth.oauth.leeway: at most 5m".into());
    }
    if oauth.introspection_cache_entries == 0 {
        problems.push("auth.oauth.introspection_cache_entries: must be at least 1".into());
    }
    if oauth.jwt_cache_entries == 0 {
        problems.push("auth.oauth.jwt_cache_entries: must be at least 1".into());
    }
    if oauth.jwt_cache_ttl > Duration::from_secs(3600) {
        problems.push("auth.oauth.jwt_cache_ttl: at most 1h".into());
    }
    if oauth.jwks_refetch_interval < Duration::from_secs(1) {
        problems.push("auth.oauth.jwks_refetch_interval: must be at least 1s".into());
    }
    let scopes = oauth
        .required_scopes
        .iter()
        .chain(oauth.scopes_supported.iter().flatten());
    for s in scopes {
        let ok = !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
        if !ok {
            problems.push(format!(
                "auth.oauth: scope `{}` must be visible ASCII without spaces, quotes or backslashes",
                s.escape_debug()
            ));
        }
    }
    if !builtin {
        public_url_for_tokens(server, listen, "[auth.oauth]", problems);
    }
}

/// With tokens, `server.public_url` is their audience: https beyond loopback, and
/// required there.
fn public_url_for_tokens(
    server: &ServerConfig,
    listen: Option<SocketAddr>,
    what: &str,
    problems: &mut Vec<String>,
) {
    match (&server.public_url, listen) {
        (Some(p), _) => {
            if let Ok(u) = reqwest::Url::parse(p) {
                if u.scheme() == "http" && !u.host_str().is_some_and(is_loopback_host) {
                    problems.push(format!(
                        "server.public_url: `{p}` is plain http beyond loopback; with {what} clients must reach Gantry over https (terminate TLS in front and give the https:// URL)"
                    ));
                }
            }
        }
        (None, Some(l)) if !l.ip().is_loopback() => problems.push(format!(
            "server.public_url: required with {what} when listening beyond loopback: the URL clients use (https://mcp.example.com/mcp) is the tokens' audience, and Gantry cannot guess it behind a proxy"
        )),
        _ => {}
    }
}

/// Checks `[auth.builtin]`.
fn check_builtin(b: &mut BuiltinConfig, problems: &mut Vec<String>) {
    let k = "auth.builtin";
    match b.store.as_str() {
        "sqlite" => {
            if b.path.as_os_str().is_empty() {
                problems.push(format!("{k}.path: is empty"));
            }
        }
        "redis" => {
            match b.redis_url.as_deref() {
                None => problems.push(format!("{k}.redis_url: required with store = \"redis\"")),
                Some(u) => {
                    if let Err(e) = crate::limits::redis_url(u) {
                        problems.push(format!("{k}.redis_url: {e}"));
                    }
                }
            }
            if b.state_key.is_none() {
                problems.push(format!(
                    "{k}.state_key: required with store = \"redis\" (32 random bytes, base64: openssl rand -base64 32), the same on every replica"
                ));
            }
        }
        other => problems.push(format!("{k}.store: `{other}` is not sqlite or redis")),
    }
    if let Some(key) = &b.state_key {
        use base64::Engine as _;
        let n = base64::engine::general_purpose::STANDARD
            .decode(key.trim())
            .map(|v| v.len());
        if n != Ok(32) {
            problems.push(format!(
                "{k}.state_key: must be 32 bytes in base64 (openssl rand -base64 32)"
            ));
        }
    }
    let range = |name: &str, v: Duration, lo: u64, hi: u64, problems: &mut Vec<String>| {
        if v < Duration::from_secs(lo) || v > Duration::from_secs(hi) {
            problems.push(format!(
                "{k}.{name}: {} is outside {} .. {}",
                humantime::format_duration(v),
                humantime::format_duration(Duration::from_secs(lo)),
                humantime::format_duration(Duration::from_secs(hi))
            ));
        }
    };
    range("access_token_ttl", b.access_token_ttl, 60, 86_400, problems);
    range("code_ttl", b.code_ttl, 10, 600, problems);
    range("refresh_grace", b.refresh_grace, 0, 60, problems);
    range(
        "refresh_token_ttl",
        b.refresh_token_ttl,
        3600,
        400 * 86_400,
        problems,
    );
    range("consent_ttl", b.consent_ttl, 0, 400 * 86_400, problems);
    range("key_rotation", b.key_rotation, 3600, 400 * 86_400, problems);
    if b.key_rotation < b.access_token_ttl {
        problems.push(format!(
            "{k}.key_rotation: must be longer than access_token_ttl"
        ));
    }
    for s in &b.redirect_schemes {
        let ok = s.len() <= 64
            && s.bytes().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
        let reserved = matches!(
            s.to_ascii_lowercase().as_str(),
            "http" | "https" | "javascript" | "data" | "file" | "about" | "blob" | "vbscript"
        );
        if !ok || reserved {
            problems.push(format!(
                "{k}.redirect_schemes: `{s}` is not a private-use URI scheme (like cursor or vscode)"
            ));
        }
    }
    match (&b.upstream, b.users.is_empty()) {
        (None, true) => problems.push(format!(
            "{k}: say how users log in: [auth.builtin.upstream] (an OpenID provider) or [[auth.builtin.users]] (development)"
        )),
        (Some(_), false) => problems.push(format!(
            "{k}: [auth.builtin.upstream] and [[auth.builtin.users]] exclude each other; keep one"
        )),
        _ => {}
    }
    if let Some(u) = &b.upstream {
        let uk = format!("{k}.upstream");
        if let Some(p) = url_problem(&format!("{uk}.issuer"), &u.issuer) {
            problems.push(p);
        }
        if u.client_id.is_empty() {
            problems.push(format!("{uk}.client_id: is empty"));
        }
        check_client_auth(&uk, &u.auth_method, problems);
        if !u.scopes.iter().any(|s| s == "openid") {
            problems.push(format!(
                "{uk}.scopes: must include openid (the login is OpenID Connect)"
            ));
        }
        if u.subject_claim.is_empty() {
            problems.push(format!("{uk}.subject_claim: is empty"));
        }
    }
    let mut names = std::collections::HashSet::new();
    for (i, user) in b.users.iter().enumerate() {
        let uk = format!("{k}.users[{i}]");
        if user.name.is_empty() || user.name.len() > 128 || user.name.chars().any(char::is_control)
        {
            problems.push(format!("{uk}.name: 1 to 128 printable characters"));
        }
        if !names.insert(user.name.clone()) {
            problems.push(format!("{uk}.name: `{}` is listed twice", user.name));
        }
        let phc = argon2::password_hash::PasswordHash::new(&user.password_hash);
        if !phc.is_ok_and(|h| h.algorithm.as_str().starts_with("argon2")) {
            problems.push(format!(
                "{uk}.password_hash: not an argon2 hash (make one with `gantry hash-password`)"
            ));
        }
    }
    let mut ids = std::collections::HashSet::new();
    for (i, c) in b.clients.iter().enumerate() {
        let ck = format!("{k}.clients[{i}]");
        if c.client_id.is_empty() || c.client_id.len() > 200 {
            problems.push(format!("{ck}.client_id: 1 to 200 characters"));
        }
        if !ids.insert(c.client_id.clone()) {
            problems.push(format!("{ck}.client_id: `{}` is listed twice", c.client_id));
        }
        if let Some(h) = &c.client_secret_sha256 {
            if h.len() != 64 || !h.bytes().all(|x| x.is_ascii_hexdigit()) {
                problems.push(format!("{ck}.client_secret_sha256: not 64 hex digits"));
            }
        }
        for g in &c.grant_types {
            if !matches!(
                g.as_str(),
                "authorization_code" | "refresh_token" | "client_credentials"
            ) {
                problems.push(format!("{ck}.grant_types: `{g}` is not authorization_code, refresh_token or client_credentials"));
            }
            if g == "client_credentials" && c.client_secret_sha256.is_none() {
                problems.push(format!(
                    "{ck}: client_credentials needs a secret (client_secret_sha256)"
                ));
            }
        }
        if c.grant_types.iter().any(|g| g == "authorization_code") && c.redirect_uris.is_empty() {
            problems.push(format!(
                "{ck}.redirect_uris: the authorization code flow needs at least one"
            ));
        }
        for u in &c.redirect_uris {
            if let Some(why) =
                crate::auth::builtin::clients::redirect_problem(u, &b.redirect_schemes)
            {
                problems.push(format!("{ck}.redirect_uris: {why}"));
            }
        }
    }
}

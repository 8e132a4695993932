//! Checks of `[auth.oauth]` and `server.public_url`: URLs that can serve as an issuer
//! and a resource identifier, algorithms that cannot be abused, and no OAuth over
//! plain HTTP beyond loopback.

use crate::config::{AuthConfig, ServerConfig};
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
        if !r.scopes.is_empty() && auth.oauth.is_none() {
            problems.push(format!(
                "{key}.scopes: only OAuth tokens carry scopes; configure [auth.oauth] or use principals"
            ));
        }
    }
    let Some(oauth) = auth.oauth.as_mut() else {
        return;
    };
    if oauth.issuers.is_empty() {
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
    match (&server.public_url, listen) {
        (Some(p), _) => {
            if let Ok(u) = reqwest::Url::parse(p) {
                if u.scheme() == "http" && !u.host_str().is_some_and(is_loopback_host) {
                    problems.push(format!(
                        "server.public_url: `{p}` is plain http beyond loopback; with [auth.oauth] clients must reach Gantry over https (terminate TLS in front and give the https:// URL)"
                    ));
                }
            }
        }
        (None, Some(l)) if !l.ip().is_loopback() => problems.push(
            "server.public_url: required with [auth.oauth] when listening beyond loopback: the URL clients use (https://mcp.example.com/mcp) is the tokens' audience, and Gantry cannot guess it behind a proxy"
                .into(),
        ),
        _ => {}
    }
}

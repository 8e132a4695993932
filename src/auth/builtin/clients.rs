//! OAuth clients of the built-in authorization server: pre-registered (config),
//! dynamically registered (RFC 7591, kept in the store) and client ID metadata
//! documents (an https `client_id` is the URL of the client's registration). The
//! redirect-URI rules are here: exact match, loopback with any port (RFC 8252 §7.3),
//! https, private-use schemes only when allowed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A client as the server knows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Client {
    pub client_id: String,
    /// Hex SHA-256 of its secret (confidential clients).
    #[serde(default)]
    pub secret_sha256: Option<String>,
    /// `none`, `client_secret_basic`, `client_secret_post`.
    pub auth_method: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    pub grant_types: Vec<String>,
    /// The scopes it may be granted (`None`: any the server grants).
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// The registration as the client sent it (echoed by `/register`).
    #[serde(default)]
    pub metadata: Value,
    /// When it was registered (Unix seconds; 0 for configured clients).
    #[serde(default)]
    pub issued_at: u64,
}

impl Client {
    /// What the consent page calls it.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.client_id)
    }

    /// Whether it may use `grant`.
    pub fn may(&self, grant: &str) -> bool {
        self.grant_types.iter().any(|g| g == grant)
    }

    /// The registered redirect URI that `asked` matches (exactly, or a loopback one
    /// up to the port).
    pub fn redirect_matches(&self, asked: &str) -> bool {
        self.redirect_uris.iter().any(|r| redirect_equal(r, asked))
    }
}

/// Whether `host` is a loopback IP literal or `localhost`.
fn loopback_host(u: &reqwest::Url) -> bool {
    match u.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// `registered` and `asked` are the same redirect URI: byte for byte, or both
/// `http` loopback URIs differing only in the port (RFC 8252 §7.3, OAuth 2.1 §8.4.2).
pub fn redirect_equal(registered: &str, asked: &str) -> bool {
    if registered == asked {
        return true;
    }
    let (Ok(r), Ok(a)) = (reqwest::Url::parse(registered), reqwest::Url::parse(asked)) else {
        return false;
    };
    if r.scheme() != "http" || a.scheme() != "http" || !loopback_host(&r) {
        return false;
    }
    // Everything but the port, on the parsed forms; the asked URI must be in its
    // normal form already (no `..`, no case games), so "exact" stays exact.
    if asked != a.as_str() {
        return false;
    }
    let (mut r, mut a) = (r, a);
    if r.set_port(None).is_err() || a.set_port(None).is_err() {
        return false;
    }
    r.as_str() == a.as_str()
}

/// Why a redirect URI cannot be registered (`None`: it can).
pub fn redirect_problem(uri: &str, schemes: &[String]) -> Option<String> {
    let Ok(u) = reqwest::Url::parse(uri) else {
        return Some(format!("`{uri}` is not an absolute URI"));
    };
    if u.fragment().is_some() {
        return Some(format!("`{uri}` has a fragment"));
    }
    match u.scheme() {
        "https" if u.host_str().is_some() => None,
        "http" if loopback_host(&u) => None,
        "http" => Some(format!(
            "`{uri}` is plain http to a host that is not loopback (use https, or http://127.0.0.1:PORT/… for a native app)"
        )),
        s if matches!(s, "javascript" | "data" | "file" | "about" | "blob" | "vbscript") => {
            Some(format!("`{uri}`: the scheme `{s}` is never a redirect URI"))
        }
        s if schemes.iter().any(|a| a.eq_ignore_ascii_case(s)) => None,
        s => Some(format!(
            "`{uri}`: the private-use scheme `{s}` is not allowed here (auth.builtin.redirect_schemes)"
        )),
    }
}

/// What `/register` or a metadata document asks for.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Registration {
    pub redirect_uris: Vec<String>,
    pub token_endpoint_auth_method: Option<String>,
    pub grant_types: Option<Vec<String>>,
    pub response_types: Option<Vec<String>>,
    pub client_name: Option<String>,
    pub scope: Option<String>,
    pub client_id: Option<String>,
}

/// A registration's problem: the RFC 7591 error code and a description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub description: String,
}

fn refuse(code: &'static str, description: impl Into<String>) -> Refusal {
    Refusal {
        code,
        description: description.into(),
    }
}

/// Checks a registration and turns it into a client (without id or secret).
/// `document`: from a client ID metadata document (public clients only).
pub fn from_registration(
    reg: &Registration,
    metadata: Value,
    schemes: &[String],
    grantable: &[String],
    document: bool,
) -> Result<Client, Refusal> {
    let auth_method = reg.token_endpoint_auth_method.clone().unwrap_or_else(|| {
        if document {
            "none".into()
        } else {
            "client_secret_basic".into()
        }
    });
    let allowed: &[&str] = if document {
        &["none"]
    } else {
        &["none", "client_secret_basic", "client_secret_post"]
    };
    if !allowed.contains(&auth_method.as_str()) {
        return Err(refuse(
            "invalid_client_metadata",
            format!(
                "token_endpoint_auth_method `{auth_method}` is not supported (use one of {})",
                allowed.join(", ")
            ),
        ));
    }
    let grant_types = reg
        .grant_types
        .clone()
        .unwrap_or_else(|| vec!["authorization_code".into()]);
    for g in &grant_types {
        let ok = match g.as_str() {
            "authorization_code" | "refresh_token" => true,
            "client_credentials" => auth_method != "none",
            _ => false,
        };
        if !ok {
            return Err(refuse(
                "invalid_client_metadata",
                format!("grant type `{g}` is not supported for this client"),
            ));
        }
    }
    if let Some(r) = &reg.response_types {
        if r.iter().any(|t| t != "code") {
            return Err(refuse(
                "invalid_client_metadata",
                "only the response type `code` is supported",
            ));
        }
    }
    let code_flow = grant_types.iter().any(|g| g == "authorization_code");
    if code_flow && reg.redirect_uris.is_empty() {
        return Err(refuse(
            "invalid_redirect_uri",
            "redirect_uris: at least one is required for the authorization code flow",
        ));
    }
    if reg.redirect_uris.len() > 20 {
        return Err(refuse("invalid_redirect_uri", "redirect_uris: at most 20"));
    }
    for u in &reg.redirect_uris {
        if u.len() > 2000 {
            return Err(refuse(
                "invalid_redirect_uri",
                "a redirect URI is longer than 2000 bytes",
            ));
        }
        if let Some(why) = redirect_problem(u, schemes) {
            return Err(refuse("invalid_redirect_uri", why));
        }
    }
    // A registration's `scope` is what the client expects to ask for, not a limit:
    // MCP clients register the first challenge's scopes and step up later (SEP-835),
    // so what a client may get is decided per request (and per consent).
    let _ = grantable;
    let scopes = None;
    let name = reg
        .client_name
        .as_ref()
        .map(|n| n.chars().filter(|c| !c.is_control()).take(100).collect());
    Ok(Client {
        client_id: String::new(),
        secret_sha256: None,
        auth_method,
        name,
        redirect_uris: reg.redirect_uris.clone(),
        grant_types,
        scopes,
        metadata,
        issued_at: 0,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn redirects_match_exactly_or_up_to_a_loopback_port() {
        assert!(redirect_equal(
            "https://app.example/cb",
            "https://app.example/cb"
        ));
        for bad in [
            "https://app.example/cb/",
            "https://app.example/cb?x=1",
            "https://app.example:8443/cb",
            "https://app.example/cb2",
            "https://evil.example/cb",
            "https://app.example/CB",
        ] {
            assert!(!redirect_equal("https://app.example/cb", bad), "{bad}");
        }
        assert!(redirect_equal(
            "http://127.0.0.1/callback",
            "http://127.0.0.1:53121/callback"
        ));
        assert!(redirect_equal(
            "http://127.0.0.1:1/callback",
            "http://127.0.0.1:2/callback"
        ));
        assert!(redirect_equal("http://[::1]:1/cb", "http://[::1]:9/cb"));
        assert!(redirect_equal(
            "http://localhost:33418/",
            "http://localhost:4000/"
        ));
        for bad in [
            "http://127.0.0.1:2/callback?x=1",
            "http://127.0.0.1:2/other",
            "http://127.0.0.2:2/callback",
            "http://localhost:2/callback",
            "https://127.0.0.1:2/callback",
        ] {
            assert!(!redirect_equal("http://127.0.0.1:1/callback", bad), "{bad}");
        }
        // Not loopback: the port is part of the match.
        assert!(!redirect_equal(
            "http://app.example:1/cb",
            "http://app.example:2/cb"
        ));
    }

    #[test]
    fn registrable_redirects() {
        let schemes = vec!["cursor".to_owned()];
        assert!(redirect_problem("https://claude.ai/api/mcp/auth_callback", &schemes).is_none());
        assert!(redirect_problem("http://127.0.0.1:8976/callback", &schemes).is_none());
        assert!(redirect_problem("http://localhost/cb", &schemes).is_none());
        assert!(
            redirect_problem("cursor://anysphere.cursor-mcp/oauth/callback", &schemes).is_none()
        );
        assert!(redirect_problem("vscode://x/cb", &schemes).is_some());
        assert!(redirect_problem("http://app.example/cb", &schemes).is_some());
        assert!(redirect_problem("https://app.example/cb#f", &schemes).is_some());
        assert!(redirect_problem("javascript:alert(1)", &["javascript".into()]).is_some());
        assert!(redirect_problem("/relative", &schemes).is_some());
    }
}

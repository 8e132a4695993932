//! Gantry's resource identifier (RFC 8707 / RFC 9728): which `aud` values name it,
//! where its protected-resource metadata is, and that document.

use serde_json::{json, Value};

/// Where the protected-resource metadata lives (RFC 9728 §3).
pub const PRM_PREFIX: &str = "/.well-known/oauth-protected-resource";

/// The MCP endpoint as clients reach it.
#[derive(Debug, Clone)]
pub struct Resource {
    /// `server.public_url` as configured (what `resource` says, byte for byte).
    url: String,
    /// Its normalized form, for comparing audiences.
    canonical: String,
    /// `scheme://host[:port]`.
    origin: String,
    /// The path of the endpoint (`/mcp`; empty for the origin itself).
    path: String,
}

/// `https://HOST/mcp/` → `https://host/mcp`: lower-case scheme and host (the URL
/// parser does it), default port dropped, one trailing slash ignored. `None` for
/// anything that is not an absolute http(s) URL without query and fragment.
pub fn canonical(u: &str) -> Option<String> {
    let url = reqwest::Url::parse(u).ok()?;
    if !matches!(url.scheme(), "http" | "https")
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return None;
    }
    let host = url.host_str()?;
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let path = url.path();
    let path = path.strip_suffix('/').unwrap_or(path);
    Some(format!("{}://{host}{port}{path}", url.scheme()))
}

impl Resource {
    /// The resource at `public_url` (validated by the config loader).
    pub fn new(public_url: &str) -> Option<Self> {
        let url = reqwest::Url::parse(public_url).ok()?;
        let host = url.host_str()?;
        let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
        let origin = format!("{}://{host}{port}", url.scheme());
        let path = url.path().trim_end_matches('/').to_owned();
        Some(Self {
            url: public_url.to_owned(),
            canonical: canonical(public_url)?,
            origin,
            path,
        })
    }

    /// The URL as configured.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The endpoint's path below the origin (`/mcp`; empty for the origin itself).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether an `aud` value names this resource: the same URL up to the case of
    /// scheme and host, a default port and a trailing slash. Nothing else — not a
    /// longer path, not another port.
    pub fn is_audience(&self, aud: &str) -> bool {
        canonical(aud).is_some_and(|c| c == self.canonical)
    }

    /// The absolute URL of the metadata for this resource (path-inserted form), for
    /// `resource_metadata` in challenges.
    pub fn metadata_url(&self) -> String {
        format!("{}{PRM_PREFIX}{}", self.origin, self.path)
    }

    /// The paths (below the origin) at which the metadata is served: the
    /// path-inserted form, its trailing-slash twin, and the root form.
    pub fn metadata_paths(&self) -> Vec<String> {
        let mut v = vec![PRM_PREFIX.to_owned()];
        if !self.path.is_empty() {
            v.push(format!("{PRM_PREFIX}{}", self.path));
            v.push(format!("{PRM_PREFIX}{}/", self.path));
        }
        v
    }

    /// The metadata document for a request to `path` (one of [`Self::metadata_paths`]):
    /// `resource` is the URL the client derived that path from — the endpoint's URL,
    /// with a trailing slash when the path has one.
    pub fn metadata(&self, path: &str, issuers: &[String], scopes: &[String], name: &str) -> Value {
        let resource = if path.len() > PRM_PREFIX.len() && path.ends_with('/') {
            format!("{}{}/", self.origin, self.path)
        } else {
            self.url.clone()
        };
        let scopes: Vec<&String> = scopes.iter().filter(|s| *s != "offline_access").collect();
        let mut doc = json!({
            "resource": resource,
            "authorization_servers": issuers,
            "bearer_methods_supported": ["header"],
            "resource_name": name,
        });
        if let (false, Some(obj)) = (scopes.is_empty(), doc.as_object_mut()) {
            obj.insert("scopes_supported".into(), json!(scopes));
        }
        doc
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn audiences_are_this_url_and_its_twins_only() {
        let r = Resource::new("https://mcp.example.com/mcp").unwrap();
        for ok in [
            "https://mcp.example.com/mcp",
            "https://mcp.example.com/mcp/",
            "HTTPS://MCP.EXAMPLE.COM/mcp",
            "https://mcp.example.com:443/mcp",
        ] {
            assert!(r.is_audience(ok), "{ok}");
        }
        for bad in [
            "https://mcp.example.com/mcp-evil",
            "https://mcp.example.com/mcp/x",
            "https://mcp.example.com/MCP",
            "https://mcp.example.com",
            "https://mcp.example.com:8443/mcp",
            "http://mcp.example.com/mcp",
            "https://mcp.example.com.evil/mcp",
            "https://mcp.example.com/mcp?x=1",
            "mcp.example.com/mcp",
            "",
        ] {
            assert!(!r.is_audience(bad), "{bad}");
        }
    }

    #[test]
    fn metadata_names_the_url_the_client_used() {
        let r = Resource::new("https://mcp.example.com/mcp").unwrap();
        assert_eq!(
            r.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            r.metadata_paths(),
            vec![
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource/mcp/"
            ]
        );
        let iss = vec!["https://idp.example.com".to_owned()];
        let scopes = vec!["mcp:tools".to_owned(), "offline_access".to_owned()];
        let d = r.metadata(
            "/.well-known/oauth-protected-resource/mcp",
            &iss,
            &scopes,
            "G",
        );
        assert_eq!(d["resource"], "https://mcp.example.com/mcp");
        assert_eq!(
            d["authorization_servers"],
            json!(["https://idp.example.com"])
        );
        assert_eq!(d["scopes_supported"], json!(["mcp:tools"]));
        assert_eq!(d["bearer_methods_supported"], json!(["header"]));
        let d = r.metadata("/.well-known/oauth-protected-resource/mcp/", &iss, &[], "G");
        assert_eq!(d["resource"], "https://mcp.example.com/mcp/");
        assert!(
            d.get("scopes_supported").is_none(),
            "zero values are omitted"
        );
        let d = r.metadata("/.well-known/oauth-protected-resource", &iss, &[], "G");
        assert_eq!(d["resource"], "https://mcp.example.com/mcp");
    }
}

//! DNS-rebinding protection: `Host` and `Origin` checks, decided before anything else.
//!
//! Defaults: bound to loopback, only loopback hosts and origins are accepted (a
//! browser page on `evil.example` that resolves to 127.0.0.1 is refused); bound
//! elsewhere, any Host, and an Origin only when it is same-origin or allow-listed.
//! A request without Origin (every non-browser client) is never refused for it.

/// The validated Host/Origin policy.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    hosts: Vec<String>,
    origins: Vec<String>,
    loopback_only: bool,
}

fn is_loopback_host(host: &str) -> bool {
    ["localhost", "127.0.0.1", "[::1]", "::1"]
        .iter()
        .any(|l| l.eq_ignore_ascii_case(host))
}

/// The host part of `host[:port]` (with IPv6 brackets), trimmed; compared without
/// regard to ASCII case, so nothing is allocated for the check on every request.
fn host_part(hostport: &str) -> &str {
    // A header value (visible ASCII): ASCII whitespace is all there is to trim.
    let h = hostport.trim_ascii();
    if h.starts_with('[') {
        return match h.find(']') {
            Some(i) => h.get(..=i).unwrap_or(h),
            None => h,
        };
    }
    match h.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => h,
    }
}

impl OriginPolicy {
    /// A policy from the configured lists; `loopback` says where Gantry listens.
    pub fn new(allowed_hosts: &[String], allowed_origins: &[String], loopback: bool) -> Self {
        Self {
            hosts: allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            origins: allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            loopback_only: loopback,
        }
    }

    /// Checks a request's Host and Origin; `Err` says what was refused.
    pub fn check(&self, host: Option<&str>, origin: Option<&str>) -> Result<(), String> {
        let host_ok = match host {
            None => self.hosts.is_empty() && !self.loopback_only,
            Some(h) => {
                if self.hosts.is_empty() {
                    !self.loopback_only || is_loopback_host(host_part(h))
                } else {
                    // The allow-list is lowercased when the policy is made.
                    self.hosts.iter().any(|a| {
                        a == "*"
                            || a.eq_ignore_ascii_case(h)
                            || a.eq_ignore_ascii_case(host_part(h))
                    })
                }
            }
        };
        if !host_ok {
            return Err(format!(
                "Host header `{}` is not allowed",
                host.unwrap_or("")
            ));
        }
        let Some(origin) = origin else { return Ok(()) };
        let o = origin.trim_end_matches('/');
        if self
            .origins
            .iter()
            .any(|a| a == "*" || a.eq_ignore_ascii_case(o))
        {
            return Ok(());
        }
        if o.eq_ignore_ascii_case("null") {
            return Err("Origin `null` is not allowed".into());
        }
        let authority = o.split_once("://").map(|(_, a)| a).unwrap_or("");
        let same_origin = host.is_some_and(|h| h.eq_ignore_ascii_case(authority));
        let loopback_origin = self.loopback_only && is_loopback_host(host_part(authority));
        if same_origin || loopback_origin {
            Ok(())
        } else {
            Err(format!("Origin `{origin}` is not allowed"))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn loopback_defaults_refuse_rebinding() {
        let p = OriginPolicy::new(&[], &[], true);
        assert!(p.check(Some("localhost:8080"), None).is_ok());
        assert!(p
            .check(Some("127.0.0.1:8080"), Some("http://localhost:3000"))
            .is_ok());
        assert!(p.check(Some("[::1]:8080"), None).is_ok());
        assert!(p
            .check(Some("evil.example.com"), Some("http://evil.example.com"))
            .is_err());
        assert!(p
            .check(Some("localhost:8080"), Some("http://evil.example.com"))
            .is_err());
        assert!(p.check(Some("localhost"), Some("null")).is_err());
    }

    #[test]
    fn public_binding_allows_hosts_and_same_origin() {
        let p = OriginPolicy::new(&[], &["https://app.example.com".into()], false);
        assert!(p.check(Some("mcp.example.com"), None).is_ok());
        assert!(p
            .check(Some("mcp.example.com"), Some("https://mcp.example.com"))
            .is_ok());
        assert!(p
            .check(Some("mcp.example.com"), Some("https://app.example.com/"))
            .is_ok());
        assert!(p
            .check(Some("mcp.example.com"), Some("https://evil.example.com"))
            .is_err());
        let strict = OriginPolicy::new(&["mcp.example.com".into()], &[], false);
        assert!(strict.check(Some("mcp.example.com:443"), None).is_ok());
        assert!(strict.check(Some("other.example.com"), None).is_err());
    }

    #[test]
    fn hosts_and_origins_match_in_any_ascii_case() {
        let p = OriginPolicy::new(&[], &[], true);
        assert!(p.check(Some("LocalHost:8080"), None).is_ok());
        assert!(p.check(Some(" [::1]:8080 "), None).is_ok());
        assert!(p
            .check(Some("127.0.0.1:8080"), Some("HTTP://LOCALHOST:3000/"))
            .is_ok());
        assert!(p.check(Some("localhost"), Some("NULL")).is_err());
        assert!(p.check(Some("LOCALHOST.evil.example"), None).is_err());
        assert!(p.check(Some("[::1"), None).is_err());
        let strict = OriginPolicy::new(
            &["MCP.Example.com".into()],
            &["https://App.Example.com/".into()],
            false,
        );
        assert!(strict.check(Some("mcp.EXAMPLE.com:443"), None).is_ok());
        assert!(strict.check(Some("mcp.example.com:x"), None).is_err());
        assert!(strict
            .check(Some("mcp.example.com"), Some("https://app.example.COM"))
            .is_ok());
        assert!(strict
            .check(
                Some("mcp.example.com"),
                Some("https://app.example.com.evil")
            )
            .is_err());
    }
}

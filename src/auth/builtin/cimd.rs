//! Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document, MCP
//! SEP-991): a `client_id` that is an https URL names the client's registration,
//! which Gantry fetches — as a hostile URL. Only https; no private, loopback,
//! link-local or otherwise special address after DNS resolution (the connection
//! uses the checked addresses, so a second lookup cannot swap them); every redirect
//! hop checked again (at most 3); 5 s and 64 KB at most; the answer cached as HTTP
//! caching says, between 1 minute and 24 hours, failures for 30 s.

use super::clients::{self, Client, Registration};
use dashmap::DashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CACHE_TTL: Duration = Duration::from_secs(24 * 3600);
const MIN_CACHE_TTL: Duration = Duration::from_secs(60);
const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(300);
const FAILURE_TTL: Duration = Duration::from_secs(30);
const MAX_CACHED: usize = 10_000;
const MAX_REDIRECTS: usize = 3;

/// Whether an address may be fetched: a public unicast one (or loopback, under the
/// test switch).
pub fn address_allowed(ip: IpAddr, loopback_ok: bool) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    };
    if ip.is_loopback() {
        return loopback_ok;
    }
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            !(a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || a.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64/10 shared
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0/24
                || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18/15 benchmarking
                || o[0] >= 240)
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            !(a.is_unspecified()
                || a.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64
                || (s[0] == 0x2002)) // 6to4 can embed private v4
        }
    }
}

/// A resolver that only returns allowed addresses.
struct Guarded {
    loopback_ok: bool,
}

impl reqwest::dns::Resolve for Guarded {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let loopback_ok = self.loopback_ok;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addrs
                .iter()
                .copied()
                .filter(|a| address_allowed(a.ip(), loopback_ok))
                .collect();
            if allowed.is_empty() {
                return Err(format!(
                    "{host} resolves to no public address ({} refused)",
                    addrs.len()
                )
                .into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Why a URL may not be fetched at all (scheme, literal address, shape).
pub fn url_problem(u: &reqwest::Url, loopback_ok: bool) -> Option<String> {
    let scheme_ok = u.scheme() == "https"
        || (loopback_ok
            && u.scheme() == "http"
            && matches!(u.host(), Some(url::Host::Ipv4(ip)) if ip.is_loopback()));
    if !scheme_ok {
        return Some("a client ID metadata document URL must be https".into());
    }
    if !u.username().is_empty() || u.password().is_some() || u.fragment().is_some() {
        return Some("a client ID URL has no user info and no fragment".into());
    }
    match u.host() {
        Some(url::Host::Ipv4(ip)) if !address_allowed(IpAddr::V4(ip), loopback_ok) => {
            Some("the client ID URL names a private address".into())
        }
        Some(url::Host::Ipv6(ip)) if !address_allowed(IpAddr::V6(ip), loopback_ok) => {
            Some("the client ID URL names a private address".into())
        }
        None => Some("the client ID URL has no host".into()),
        _ => None,
    }
}

/// Whether a `client_id` is to be treated as a metadata document URL.
pub fn is_document_id(client_id: &str, loopback_ok: bool) -> bool {
    client_id.starts_with("https://") || (loopback_ok && client_id.starts_with("http://127.0.0.1"))
}

/// Fetches and caches documents.
pub struct Documents {
    http: reqwest::Client,
    loopback_ok: bool,
    cache: DashMap<String, (Result<Arc<Client>, String>, Instant)>,
}

impl Documents {
    pub fn new(loopback_ok: bool) -> Result<Self, String> {
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error("too many redirects");
            }
            match url_problem(attempt.url(), loopback_ok) {
                Some(why) => attempt.error(why),
                None => attempt.follow(),
            }
        });
        let http = reqwest::Client::builder()
            .dns_resolver(Arc::new(Guarded { loopback_ok }))
            .redirect(policy)
            .no_proxy()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(Duration::from_secs(3))
            .user_agent(concat!("gantry/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the metadata-document client: {e}"))?;
        Ok(Self {
            http,
            loopback_ok,
            cache: DashMap::new(),
        })
    }

    /// The client a document URL describes (validated), or why not; and whether
    /// it was fetched just now (not from the cache).
    pub async fn client(
        &self,
        client_id: &str,
        schemes: &[String],
        grantable: &[String],
    ) -> Result<(Arc<Client>, bool), String> {
        if let Some(e) = self.cache.get(client_id) {
            if e.1 > Instant::now() {
                return e.0.clone().map(|c| (c, false));
            }
        }
        let (answer, ttl) = match self.fetch(client_id, schemes, grantable).await {
            Ok((c, ttl)) => (Ok(Arc::new(c)), ttl),
            Err(why) => {
                tracing::info!(client_id, %why, "client ID metadata document refused");
                (Err(why), FAILURE_TTL)
            }
        };
        if self.cache.len() >= MAX_CACHED {
            let now = Instant::now();
            self.cache.retain(|_, e| e.1 > now);
            if self.cache.len() >= MAX_CACHED {
                self.cache.clear();
            }
        }
        self.cache
            .insert(client_id.to_owned(), (answer.clone(), Instant::now() + ttl));
        answer.map(|c| (c, true))
    }

    async fn fetch(
        &self,
        client_id: &str,
        schemes: &[String],
        grantable: &[String],
    ) -> Result<(Client, Duration), String> {
        let url =
            reqwest::Url::parse(client_id).map_err(|_| "the client ID is not a URL".to_owned())?;
        if let Some(why) = url_problem(&url, self.loopback_ok) {
            return Err(why);
        }
        if url.path() == "/" || url.path().is_empty() {
            return Err("a client ID URL must have a path".into());
        }
        let resp = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| {
                format!(
                    "cannot fetch the client's metadata: {}",
                    crate::telemetry::error_chain(&e)
                )
            })?;
        if !resp.status().is_success() {
            return Err(format!(
                "the client's metadata document answered HTTP {}",
                resp.status().as_u16()
            ));
        }
        let ttl = cache_ttl(resp.headers());
        let body = crate::bounded::read_bounded(resp, MAX_DOCUMENT_BYTES)
            .await
            .map_err(|e| format!("the client's metadata document: {e}"))?;
        let doc: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| "the client's metadata document is not JSON".to_owned())?;
        let reg: Registration = serde_json::from_value(doc.clone())
            .map_err(|e| format!("the client's metadata document is malformed: {e}"))?;
        if reg.client_id.as_deref() != Some(client_id) {
            return Err(format!(
                "the metadata document's client_id ({}) is not its URL",
                reg.client_id.as_deref().unwrap_or("missing")
            ));
        }
        let mut client = clients::from_registration(&reg, doc, schemes, grantable, true)
            .map_err(|r| r.description)?;
        client.client_id = client_id.to_owned();
        Ok((client, ttl))
    }
}

/// How long an answer may be reused: `max-age` within [1 min, 24 h]; `no-store` /
/// `no-cache` the minimum; none given, 5 min.
fn cache_ttl(h: &reqwest::header::HeaderMap) -> Duration {
    let Some(cc) = h
        .get(reqwest::header::CACHE_CONTROL)
        .and_then(|v| v.to_str().ok())
    else {
        return DEFAULT_CACHE_TTL;
    };
    let mut ttl = DEFAULT_CACHE_TTL;
    for d in cc.split(',').map(str::trim) {
        let d = d.to_ascii_lowercase();
        if d == "no-store" || d == "no-cache" {
            return MIN_CACHE_TTL;
        }
        if let Some(v) = d.strip_prefix("max-age=") {
            if let Ok(s) = v.trim_matches('"').parse::<u64>() {
                ttl = Duration::from_secs(s);
            }
        }
    }
    ttl.clamp(MIN_CACHE_TTL, MAX_CACHE_TTL)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn only_public_addresses_are_fetched() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!address_allowed(bad.parse().unwrap(), false), "{bad}");
        }
        for good in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(address_allowed(good.parse().unwrap(), false), "{good}");
        }
        assert!(address_allowed("127.0.0.1".parse().unwrap(), true));
        assert!(
            !address_allowed("10.0.0.1".parse().unwrap(), true),
            "the test switch is loopback only"
        );
    }

    #[test]
    fn urls_that_are_never_fetched() {
        let p = |s: &str, lo| url_problem(&reqwest::Url::parse(s).unwrap(), lo);
        assert!(p("https://app.example/client.json", false).is_none());
        assert!(p("http://app.example/client.json", false).is_some());
        assert!(p("https://127.0.0.1/c.json", false).is_some());
        assert!(p("https://[::1]/c.json", false).is_some());
        assert!(p("https://169.254.169.254/latest", false).is_some());
        assert!(p("https://u:p@app.example/c.json", false).is_some());
        assert!(p("http://127.0.0.1:9/c.json", true).is_none());
        assert!(p("http://10.0.0.1:9/c.json", true).is_some());
    }

    #[test]
    fn cache_lifetimes_are_bounded() {
        let h = |v: &str| {
            let mut m = reqwest::header::HeaderMap::new();
            m.insert(reqwest::header::CACHE_CONTROL, v.parse().unwrap());
            cache_ttl(&m)
        };
        assert_eq!(h("max-age=3600"), Duration::from_secs(3600));
        assert_eq!(h("public, max-age=999999"), MAX_CACHE_TTL);
        assert_eq!(h("max-age=1"), MIN_CACHE_TTL);
        assert_eq!(h("no-store"), MIN_CACHE_TTL);
        assert_eq!(
            cache_ttl(&reqwest::header::HeaderMap::new()),
            DEFAULT_CACHE_TTL
        );
    }
}

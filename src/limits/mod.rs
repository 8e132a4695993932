//! Rate limits (`[[limits.rules]]`): ordered GCRA rules (the `governor` crate), each
//! counted per key — principal, client address, tool, backend, method, global, or a
//! combination — checked at the front door before anything goes upstream (and before
//! a session is created). A limited request learns how long to wait, in a form it can
//! act on: a JSON-RPC error (or a tool result) for a `tools/call`, HTTP 429 with
//! `Retry-After` for anything refused as a whole.

mod cidr;
mod concurrency;

pub use cidr::Cidr;
pub use concurrency::{Busy, Permits};

use crate::auth::policy::glob;
use crate::config::{parse_rate, LimitRuleConfig, LimitsConfig};
use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// JSON-RPC error code of a limited request (in the implementation-defined range).
pub const RATE_LIMITED: i64 = -32029;

/// Keys a rule keeps at most; beyond it, keys not seen for a while are forgotten.
pub(crate) const MAX_KEYS: usize = 100_000;

/// The key every new request shares while a rule holds `MAX_KEYS` live keys.
const OVERFLOW_KEY: &str = "\u{1f}overflow";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Principal,
    Ip,
    Tool,
    Backend,
    Method,
    Global,
}

struct Rule {
    name: String,
    parts: Vec<Part>,
    /// As configured (`60/m`), for the answer.
    rate: String,
    burst: u32,
    methods: Vec<String>,
    tools: Vec<String>,
    prompts: Vec<String>,
    tool_result: bool,
    limiter: DefaultKeyedRateLimiter<String>,
}

/// Who asks for what: what the keys are made of.
pub struct Ask<'a> {
    pub principal: &'a str,
    pub ip: Option<IpAddr>,
    pub method: &'a str,
    /// The tool or prompt named (`tools/call`, `prompts/get`).
    pub name: Option<&'a str>,
    /// The backend that serves it, when known.
    pub backend: Option<&'a str>,
}

/// Why a request is not admitted now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    pub rule: String,
    pub rate: String,
    pub burst: u32,
    pub retry_after: Duration,
    /// Answer a `tools/call` with a tool result (`isError`) instead of an error.
    pub tool_result: bool,
}

impl Limited {
    /// What the client (or the model) reads.
    pub fn message(&self) -> String {
        format!(
            "Rate limited by rule `{}` ({}, burst {}): retry in {}",
            self.rule,
            self.rate,
            self.burst,
            crate::telemetry::human(self.retry_after)
        )
    }

    /// Milliseconds to wait, rounded up, at least 1.
    pub fn retry_after_ms(&self) -> u64 {
        let ms = self.retry_after.as_micros().div_ceil(1000);
        u64::try_from(ms).unwrap_or(u64::MAX).max(1)
    }

    /// `error.data`.
    pub fn data(&self) -> serde_json::Value {
        serde_json::json!({
            "retryAfterMs": self.retry_after_ms(),
            "rule": self.rule,
            "limit": self.rate,
            "burst": self.burst,
        })
    }
}

/// The configured rules.
pub struct Limits {
    rules: Vec<Rule>,
    concurrency: Vec<concurrency::Rule>,
    trusted: Vec<Cidr>,
    /// Requests refused, by rule (metrics).
    pub refused: Vec<(String, std::sync::atomic::AtomicU64)>,
}

impl Part {
    fn parse(k: &str) -> Option<Self> {
        Some(match k {
            "principal" => Self::Principal,
            "ip" => Self::Ip,
            "tool" => Self::Tool,
            "backend" => Self::Backend,
            "method" => Self::Method,
            "global" => Self::Global,
            _ => return None,
        })
    }
}

/// The key a request is counted under, of these parts.
fn key_of(parts: &[Part], a: &Ask<'_>) -> String {
    let mut k = String::new();
    for p in parts {
        let v = match p {
            Part::Principal => a.principal.to_owned(),
            Part::Ip => a.ip.map(|i| i.to_string()).unwrap_or_default(),
            Part::Tool => a.name.unwrap_or("").to_owned(),
            Part::Backend => a.backend.unwrap_or("").to_owned(),
            Part::Method => a.method.to_owned(),
            Part::Global => String::new(),
        };
        k.push_str(&v);
        k.push('\u{1f}');
    }
    k
}

fn rule(cfg: &LimitRuleConfig) -> Option<Rule> {
    let (n, period) = parse_rate(&cfg.rate)?;
    let burst = NonZeroU32::new(cfg.burst.unwrap_or(n))?;
    let quota = Quota::with_period(period / n)?.allow_burst(burst);
    let parts = cfg.key.iter().filter_map(|k| Part::parse(k)).collect();
    Some(Rule {
        name: cfg.name.clone(),
        parts,
        rate: cfg.rate.clone(),
        burst: burst.get(),
        methods: cfg.methods.clone(),
        tools: cfg.tools.clone(),
        prompts: cfg.prompts.clone(),
        tool_result: cfg.answer == "tool_result",
        limiter: DefaultKeyedRateLimiter::keyed(quota),
    })
}

impl Rule {
    /// Whether the rule covers this request.
    fn covers(&self, a: &Ask<'_>) -> bool {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == a.method) {
            return false;
        }
        let named = |globs: &[String], method: &str| {
            globs.is_empty()
                || (a.method == method && a.name.is_some_and(|n| globs.iter().any(|g| glob(g, n))))
        };
        named(&self.tools, "tools/call") && named(&self.prompts, "prompts/get")
    }

    /// The key this request is counted under.
    fn key(&self, a: &Ask<'_>) -> String {
        key_of(&self.parts, a)
    }
}

impl Limits {
    /// The rules of a validated config; `None` when there are none.
    pub fn new(cfg: &LimitsConfig) -> Option<Arc<Self>> {
        if cfg.rules.is_empty() && cfg.concurrency.is_empty() {
            return None;
        }
        let rules: Vec<Rule> = cfg.rules.iter().filter_map(rule).collect();
        Some(Arc::new(Self {
            refused: rules
                .iter()
                .map(|r| (r.name.clone(), Default::default()))
                .collect(),
            rules,
            concurrency: cfg.concurrency.iter().map(concurrency::rule).collect(),
            trusted: cfg
                .trusted_proxies
                .iter()
                .filter_map(|c| Cidr::parse(c))
                .collect(),
        }))
    }

    /// The client's address: the connection's, or — from a trusted proxy — the
    /// right-most address of `X-Forwarded-For` that is not a trusted proxy.
    pub fn client_ip(&self, peer: Option<IpAddr>, forwarded: Option<&str>) -> Option<IpAddr> {
        let peer = peer?;
        if !self.trusted.iter().any(|c| c.contains(peer)) {
            return Some(peer);
        }
        let Some(chain) = forwarded else {
            return Some(peer);
        };
        for hop in chain.rsplit(',') {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) if self.trusted.iter().any(|c| c.contains(ip)) => continue,
                Ok(ip) => return Some(ip),
                Err(_) => return Some(peer),
            }
        }
        Some(peer)
    }

    /// Admits the request under every rule that covers it, or says which refused it
    /// first and how long to wait. A request refused by one rule is not counted by
    /// the later ones.
    pub fn check(&self, a: &Ask<'_>) -> Result<(), Limited> {
        for (i, r) in self.rules.iter().enumerate() {
            if !r.covers(a) {
                continue;
            }
            if r.limiter.len() > MAX_KEYS {
                r.limiter.retain_recent();
            }
            // Still full of live keys (a client spraying tool names or addresses):
            // new keys share one bucket, so memory stays bounded and limits hold.
            let key = if r.limiter.len() > MAX_KEYS {
                OVERFLOW_KEY.to_owned()
            } else {
                r.key(a)
            };
            if let Err(not_until) = r.limiter.check_key(&key) {
                if let Some((_, n)) = self.refused.get(i) {
                    n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let wait = not_until.wait_time_from(r.limiter.clock().now());
                return Err(Limited {
                    rule: r.name.clone(),
                    rate: r.rate.clone(),
                    burst: r.burst,
                    retry_after: wait,
                    tool_result: r.tool_result && a.method == "tools/call",
                });
            }
        }
        Ok(())
    }

    /// Forgets keys not seen for a while (called periodically).
    pub fn tidy(&self) {
        for r in &self.rules {
            r.limiter.retain_recent();
        }
        concurrency::tidy(&self.concurrency);
    }

    /// A place for a call under every `[[limits.concurrency]]` rule covering it,
    /// held until the returned permits drop; `Ok(None)`: cancelled while waiting.
    pub async fn acquire(
        &self,
        a: &Ask<'_>,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Option<Permits>, Busy> {
        concurrency::acquire(&self.concurrency, a, cancel).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn limits(toml: &str) -> Arc<Limits> {
        let cfg: LimitsConfig = toml::from_str(toml).unwrap();
        Limits::new(&cfg).unwrap()
    }

    fn ask<'a>(principal: &'a str, method: &'a str, name: Option<&'a str>) -> Ask<'a> {
        Ask {
            principal,
            ip: None,
            method,
            name,
            backend: None,
        }
    }

    #[test]
    fn bursts_then_refuses_with_the_wait() {
        let l = limits("[[rules]]\nname = \"r\"\nrate = \"60/m\"\nburst = 3\n");
        for _ in 0..3 {
            assert!(l.check(&ask("a", "tools/call", Some("t"))).is_ok());
        }
        let e = l.check(&ask("a", "tools/call", Some("t"))).unwrap_err();
        assert_eq!(e.rule, "r");
        assert!(
            e.retry_after > Duration::from_millis(900) && e.retry_after <= Duration::from_secs(1),
            "{e:?}"
        );
        // Another principal has its own budget.
        assert!(l.check(&ask("b", "tools/call", Some("t"))).is_ok());
    }

    #[test]
    fn scopes_and_combined_keys() {
        let l = limits(
            "[[rules]]\nname = \"gh\"\nrate = \"1/h\"\nkey = [\"principal\", \"tool\"]\ntools = [\"gh__*\"]\n",
        );
        assert!(l.check(&ask("a", "tools/call", Some("gh__x"))).is_ok());
        assert!(l.check(&ask("a", "tools/call", Some("gh__x"))).is_err());
        assert!(
            l.check(&ask("a", "tools/call", Some("gh__y"))).is_ok(),
            "per tool"
        );
        assert!(
            l.check(&ask("b", "tools/call", Some("gh__x"))).is_ok(),
            "per principal"
        );
        assert!(
            l.check(&ask("a", "tools/call", Some("other"))).is_ok(),
            "not covered"
        );
        assert!(
            l.check(&ask("a", "tools/list", None)).is_ok(),
            "not covered"
        );
    }

    #[test]
    fn the_client_address_behind_trusted_proxies() {
        let l =
            limits("trusted_proxies = [\"10.0.0.0/8\"]\n[[rules]]\nname = \"r\"\nrate = \"1/s\"\n");
        let proxy: IpAddr = "10.1.2.3".parse().unwrap();
        let direct: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(
            l.client_ip(Some(direct), Some("1.2.3.4")),
            Some(direct),
            "untrusted peers cannot claim"
        );
        assert_eq!(
            l.client_ip(Some(proxy), Some("1.2.3.4, 198.51.100.7, 10.9.9.9")),
            Some("198.51.100.7".parse().unwrap())
        );
        assert_eq!(l.client_ip(Some(proxy), None), Some(proxy));
        assert_eq!(l.client_ip(Some(proxy), Some("garbage")), Some(proxy));
    }
}

//! Rate limits (`[[limits.rules]]`): ordered GCRA rules (the `governor` crate), each
//! counted per key — principal, client address, tool, backend, method, global, or a
//! combination — checked at the front door before anything goes upstream (and before
//! a session is created). A limited request learns how long to wait, in a form it can
//! act on: a JSON-RPC error (or a tool result) for a `tools/call`, HTTP 429 with
//! `Retry-After` for anything refused as a whole.

mod cidr;
mod concurrency;
mod store;

pub use cidr::Cidr;
pub use concurrency::{Busy, Permits};
pub use store::{redis_url, StoreError};

use crate::auth::policy::glob;
use crate::config::{parse_rate, LimitRuleConfig, LimitsConfig};
use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

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
    /// The average time between two admitted requests, in µs (the Redis script's).
    interval_us: u64,
    policy: Policy,
    limiter: DefaultKeyedRateLimiter<String>,
}

/// What a request gets while Redis cannot answer (`on_store_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Open,
    Closed,
    Local,
}

impl Policy {
    pub fn label(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
            Self::Local => "local",
        }
    }
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
    /// Refused because the shared store cannot answer (`on_store_error = "closed"`).
    pub store_down: bool,
}

impl Limited {
    /// What the client (or the model) reads.
    pub fn message(&self) -> String {
        if self.store_down {
            return format!(
                "Rate limit `{}` cannot be checked now (its store does not answer): retry in {}",
                self.rule,
                crate::telemetry::human(self.retry_after)
            );
        }
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
    /// `[[limits.timeouts]]`: tool globs and their time limit, first match wins.
    timeouts: Vec<(Vec<String>, Duration)>,
    /// `store = "redis"`.
    store: Option<store::RedisStore>,
    /// Requests refused, by rule (metrics).
    pub refused: Vec<(String, AtomicU64)>,
    /// Requests decided by `on_store_error` because Redis did not answer, by rule.
    pub fallbacks: Vec<(String, Policy, AtomicU64)>,
}

/// Keys longer than this are counted under their digest (a client-chosen tool name
/// must not make a key, here or in Redis, as large as a request).
const MAX_KEY_BYTES: usize = 128;

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
    if k.len() > MAX_KEY_BYTES {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(k.as_bytes());
        k = String::with_capacity(65);
        k.push('#');
        for b in digest.iter() {
            k.push_str(&format!("{b:02x}"));
        }
    }
    k
}

fn rule(cfg: &LimitRuleConfig) -> Option<Rule> {
    let (n, period) = parse_rate(&cfg.rate)?;
    let burst = NonZeroU32::new(cfg.burst.unwrap_or(n))?;
    let quota = Quota::with_period(period / n)?.allow_burst(burst);
    let parts = cfg.key.iter().filter_map(|k| Part::parse(k)).collect();
    let interval = period / n;
    Some(Rule {
        interval_us: u64::try_from(interval.as_micros()).unwrap_or(u64::MAX),
        policy: match cfg.on_store_error.as_str() {
            "closed" => Policy::Closed,
            "local" => Policy::Local,
            _ => Policy::Open,
        },
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
        if !self.methods.is_empty() && !self.methods.iter().any(|m| glob(m, a.method)) {
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
        if cfg.rules.is_empty() && cfg.concurrency.is_empty() && cfg.timeouts.is_empty() {
            return None;
        }
        let rules: Vec<Rule> = cfg.rules.iter().filter_map(rule).collect();
        let store = match (cfg.store.as_str(), &cfg.redis) {
            ("redis", Some(r)) => store::RedisStore::new(r),
            _ => None,
        };
        Some(Arc::new(Self {
            timeouts: cfg
                .timeouts
                .iter()
                .map(|t| (t.tools.clone(), t.timeout))
                .collect(),
            store,
            refused: rules
                .iter()
                .map(|r| (r.name.clone(), Default::default()))
                .collect(),
            fallbacks: rules
                .iter()
                .map(|r| (r.name.clone(), r.policy, Default::default()))
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
    /// first and how long to wait. With the memory store a request refused by one
    /// rule is not counted by the later ones; with Redis, by none of them.
    pub async fn check(&self, a: &Ask<'_>) -> Result<(), Limited> {
        let Some(store) = &self.store else {
            for (i, r) in self.rules.iter().enumerate() {
                if r.covers(a) {
                    self.check_here(i, a)?;
                }
            }
            return Ok(());
        };
        let covering: Vec<usize> = (0..self.rules.len())
            .filter(|&i| self.rules.get(i).is_some_and(|r| r.covers(a)))
            .collect();
        if covering.is_empty() {
            return Ok(());
        }
        let asks: Vec<store::Ask> = covering
            .iter()
            .filter_map(|&i| self.rules.get(i))
            .map(|r| store::Ask {
                key: store.key(&r.name, &r.key(a)),
                interval_us: r.interval_us,
                burst: r.burst,
            })
            .collect();
        let now = Instant::now();
        // Certainly over: Redis refused this key, and its wait is not over.
        for (j, ask) in asks.iter().enumerate() {
            if let (Some(wait), Some(&i)) = (store.refused_for(&ask.key, now), covering.get(j)) {
                return Err(self.refusal(i, wait, a, false));
            }
        }
        let answer = if store.resting(now) {
            None
        } else {
            store.check(&asks).await.ok()
        };
        match answer {
            Some(None) => Ok(()),
            Some(Some((j, wait))) => {
                let i = covering.get(j).copied().unwrap_or_default();
                Err(self.refusal(i, wait, a, false))
            }
            // Redis did not answer: each rule's own policy, in order.
            None => {
                for &i in &covering {
                    let Some(r) = self.rules.get(i) else { continue };
                    if let Some((_, _, n)) = self.fallbacks.get(i) {
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    match r.policy {
                        Policy::Open => {}
                        Policy::Closed => {
                            return Err(self.refusal(i, store.retry_interval(), a, true))
                        }
                        Policy::Local => self.check_here(i, a)?,
                    }
                }
                Ok(())
            }
        }
    }

    /// Rule `i` against this process's own budget.
    fn check_here(&self, i: usize, a: &Ask<'_>) -> Result<(), Limited> {
        let Some(r) = self.rules.get(i) else {
            return Ok(());
        };
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
        match r.limiter.check_key(&key) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(r.limiter.clock().now());
                Err(self.refusal(i, wait, a, false))
            }
        }
    }

    /// Counts a refusal by rule `i` and says why.
    fn refusal(&self, i: usize, wait: Duration, a: &Ask<'_>, store_down: bool) -> Limited {
        if let Some((_, n)) = self.refused.get(i) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let r = self.rules.get(i);
        Limited {
            rule: r.map(|r| r.name.clone()).unwrap_or_default(),
            rate: r.map(|r| r.rate.clone()).unwrap_or_default(),
            burst: r.map_or(0, |r| r.burst),
            retry_after: wait,
            tool_result: r.is_some_and(|r| r.tool_result) && a.method == "tools/call",
            store_down,
        }
    }

    /// The time limit of a call of `tool`, if a `[[limits.timeouts]]` rule names it.
    pub fn timeout_for(&self, tool: &str) -> Option<Duration> {
        self.timeouts
            .iter()
            .find(|(globs, _)| globs.iter().any(|g| glob(g, tool)))
            .map(|(_, t)| *t)
    }

    /// Redis failures so far, by reason (metrics); empty with the memory store.
    pub fn store_errors(&self) -> Vec<(&'static str, u64)> {
        self.store.as_ref().map_or_else(Vec::new, |s| {
            StoreError::ALL
                .iter()
                .zip(&s.errors)
                .map(|(e, n)| (e.label(), n.load(Ordering::Relaxed)))
                .collect()
        })
    }

    /// Forgets keys not seen for a while (called periodically).
    pub fn tidy(&self) {
        for r in &self.rules {
            r.limiter.retain_recent();
        }
        if let Some(s) = &self.store {
            s.tidy();
        }
        concurrency::tidy(&self.concurrency);
    }

    /// A place for a call under every `[[limits.concurrency]]` rule covering it,
    /// held until the returned permits drop; `Ok(None)`: cancelled while waiting.
    /// `waited` learns each rule's wait.
    pub async fn acquire(
        &self,
        a: &Ask<'_>,
        cancel: &tokio_util::sync::CancellationToken,
        waited: &(dyn Fn(&str, Duration) + Sync),
    ) -> Result<Option<Permits>, Busy> {
        concurrency::acquire(&self.concurrency, a, cancel, waited).await
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

    #[tokio::test]
    async fn bursts_then_refuses_with_the_wait() {
        let l = limits("[[rules]]\nname = \"r\"\nrate = \"60/m\"\nburst = 3\n");
        for _ in 0..3 {
            assert!(l.check(&ask("a", "tools/call", Some("t"))).await.is_ok());
        }
        let e = l
            .check(&ask("a", "tools/call", Some("t")))
            .await
            .unwrap_err();
        assert_eq!(e.rule, "r");
        assert!(
            e.retry_after > Duration::from_millis(900) && e.retry_after <= Duration::from_secs(1),
            "{e:?}"
        );
        // Another principal has its own budget.
        assert!(l.check(&ask("b", "tools/call", Some("t"))).await.is_ok());
    }

    #[tokio::test]
    async fn scopes_and_combined_keys() {
        let l = limits(
            "[[rules]]\nname = \"gh\"\nrate = \"1/h\"\nkey = [\"principal\", \"tool\"]\ntools = [\"gh__*\"]\n",
        );
        assert!(l
            .check(&ask("a", "tools/call", Some("gh__x")))
            .await
            .is_ok());
        assert!(l
            .check(&ask("a", "tools/call", Some("gh__x")))
            .await
            .is_err());
        assert!(
            l.check(&ask("a", "tools/call", Some("gh__y")))
                .await
                .is_ok(),
            "per tool"
        );
        assert!(
            l.check(&ask("b", "tools/call", Some("gh__x")))
                .await
                .is_ok(),
            "per principal"
        );
        assert!(
            l.check(&ask("a", "tools/call", Some("other")))
                .await
                .is_ok(),
            "not covered"
        );
        assert!(
            l.check(&ask("a", "tools/list", None)).await.is_ok(),
            "not covered"
        );
    }

    #[test]
    fn a_long_client_chosen_name_is_counted_under_its_digest() {
        let long_a = "a".repeat(10_000);
        let long_b = format!("{}b", "a".repeat(9_999));
        let key = |n: &str| {
            key_of(
                &[Part::Principal, Part::Tool],
                &ask("p", "tools/call", Some(n)),
            )
        };
        assert!(
            key(&long_a).len() <= MAX_KEY_BYTES,
            "{}",
            key(&long_a).len()
        );
        assert_ne!(key(&long_a), key(&long_b));
        assert_eq!(key("short"), "p\u{1f}short\u{1f}");
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

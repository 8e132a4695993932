//! Opaque access tokens, checked with the issuer's RFC 7662 introspection endpoint;
//! answers kept in a bounded cache keyed by the token's SHA-256 (never the token),
//! for at most `introspection_cache_ttl` and never past the token's `exp`.

use super::{OAuthError, Resource, TokenInfo};
use parking_lot::Mutex;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::time::Instant;

/// An inactive answer is reused at most this long (a token may become active only
/// by being issued anew, but keep the window short).
const NEGATIVE_TTL: Duration = Duration::from_secs(10);

type Answer = Result<TokenInfo, OAuthError>;
/// Answers by token digest, with when each stops being used; and insertion order.
type Entries = (HashMap<[u8; 32], (Instant, Answer)>, VecDeque<[u8; 32]>);

pub(super) struct Cache {
    ttl: Duration,
    max: usize,
    inner: Mutex<Entries>,
    /// Answers found in the cache, and introspection calls made (metrics).
    pub hits: std::sync::atomic::AtomicU64,
    pub calls: std::sync::atomic::AtomicU64,
}

pub(super) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Cache {
    pub(super) fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max: max.max(1),
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
            hits: Default::default(),
            calls: Default::default(),
        }
    }

    pub(super) fn get(&self, key: &[u8; 32]) -> Option<Answer> {
        let mut g = self.inner.lock();
        match g.0.get(key) {
            Some((until, a)) if *until > Instant::now() => {
                self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Some(a.clone())
            }
            Some(_) => {
                g.0.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `answer` until `until` (bounded by the TTLs); the oldest entry goes
    /// when the cache is full.
    pub(super) fn put(&self, key: [u8; 32], answer: Answer, expires: Option<u64>) {
        let now = Instant::now();
        let mut keep = if answer.is_ok() {
            self.ttl
        } else {
            NEGATIVE_TTL.min(self.ttl)
        };
        if let Some(exp) = expires {
            let left = exp.saturating_sub(super::now_secs());
            keep = keep.min(Duration::from_secs(left));
        }
        if keep.is_zero() {
            return;
        }
        let mut g = self.inner.lock();
        let (map, order) = &mut *g;
        while map.len() >= self.max {
            match order.pop_front() {
                Some(old) => {
                    map.remove(&old);
                }
                None => break,
            }
        }
        if map.insert(key, (now + keep, answer)).is_none() {
            order.push_back(key);
        }
    }
}

/// What an introspection answer says, checked: active, for this resource, of this
/// issuer, not expired, with a subject. `Err` for an answer that does not let the
/// token in; the `u64` is the token's `exp`, if given.
pub(super) fn read_answer(
    doc: &Value,
    issuer: &str,
    resource: &Resource,
    audiences: &[String],
) -> (Answer, Option<u64>) {
    let invalid = |label: &'static str, why: String| Err(OAuthError::Invalid(label, why));
    let exp = doc.get("exp").and_then(Value::as_u64);
    if doc.get("active") != Some(&Value::Bool(true)) {
        return (
            invalid(
                "inactive",
                "the token is not active (expired, revoked or unknown to the issuer)".into(),
            ),
            None,
        );
    }
    if exp.is_some_and(|e| e <= super::now_secs()) {
        return (invalid("expired", "the token has expired".into()), exp);
    }
    if let Some(iss) = doc.get("iss").and_then(Value::as_str) {
        if iss != issuer {
            return (
                invalid(
                    "untrusted_issuer",
                    "the token's issuer does not match".into(),
                ),
                exp,
            );
        }
    }
    let for_us = super::names_us(doc.get("aud"), resource, audiences);
    if !for_us {
        return (
            invalid(
                "audience",
                format!(
                    "the token's audience is not this server ({})",
                    resource.url()
                ),
            ),
            exp,
        );
    }
    let Some(subject) = doc
        .get("sub")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return (
            invalid("missing_claim", "the token has no subject".into()),
            exp,
        );
    };
    let scopes = doc
        .get("scope")
        .and_then(Value::as_str)
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    (
        Ok(TokenInfo {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
            client_id: doc
                .get("client_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            scopes,
            expires_at: exp,
        }),
        exp,
    )
}

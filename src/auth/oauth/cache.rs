//! What Gantry learned about a token, kept by the token's SHA-256 (never the token) in
//! a bounded map: introspection answers for opaque tokens, and the outcome of checking
//! a JWT's signature and claims. An entry lives for at most the cache's TTL and never
//! past the token's `exp`; when the cache is full the oldest entry goes.

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// A token's key in the cache.
pub(super) type Key = [u8; 32];

/// Values by token digest, with when each stops being used; and insertion order.
type Entries<V> = (HashMap<Key, (Instant, V)>, VecDeque<Key>);

pub(super) struct TokenCache<V> {
    ttl: Duration,
    max: usize,
    inner: Mutex<Entries<V>>,
    /// Values found in the cache, and the work done because none was (metrics).
    pub hits: AtomicU64,
    pub calls: AtomicU64,
}

pub(super) fn digest(token: &str) -> Key {
    Sha256::digest(token.as_bytes()).into()
}

impl<V: Clone> TokenCache<V> {
    /// A cache keeping values for at most `ttl` (zero: nothing is kept) and at most
    /// `max` of them.
    pub(super) fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max: max.max(1),
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
            hits: AtomicU64::new(0),
            calls: AtomicU64::new(0),
        }
    }

    /// Whether anything is ever kept.
    pub(super) fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    pub(super) fn get(&self, key: &Key) -> Option<V> {
        if !self.enabled() {
            return None;
        }
        let mut g = self.inner.lock();
        match g.0.get(key) {
            Some((until, v)) if *until > Instant::now() => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(v.clone())
            }
            Some(_) => {
                g.0.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `keep` at most, bounded by the TTL and by the token's `exp`
    /// (Unix seconds) when it has one.
    pub(super) fn put(&self, key: Key, value: V, keep: Duration, expires: Option<u64>) {
        let mut keep = keep.min(self.ttl);
        if let Some(exp) = expires {
            let left = exp.saturating_sub(crate::auth::now_secs());
            keep = keep.min(Duration::from_secs(left));
        }
        if keep.is_zero() {
            return;
        }
        let now = Instant::now();
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
        if map.insert(key, (now + keep, value)).is_none() {
            order.push_back(key);
        }
    }

    /// The TTL values are kept for.
    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn values_live_for_the_ttl_and_never_past_exp() {
        let c = TokenCache::new(Duration::from_secs(60), 10);
        let now = crate::auth::now_secs();
        c.put(digest("a"), 1, Duration::MAX, None);
        c.put(digest("b"), 2, Duration::MAX, Some(now + 5));
        c.put(digest("expired"), 3, Duration::MAX, Some(now));
        assert_eq!(c.get(&digest("a")), Some(1));
        assert_eq!(c.get(&digest("b")), Some(2));
        assert_eq!(c.get(&digest("expired")), None);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(c.get(&digest("a")), Some(1));
        assert_eq!(c.get(&digest("b")), None, "kept past the token's exp");
        tokio::time::advance(Duration::from_secs(55)).await;
        assert_eq!(c.get(&digest("a")), None, "kept past the TTL");
    }

    #[test]
    fn the_oldest_goes_when_full_and_a_zero_ttl_keeps_nothing() {
        let c = TokenCache::new(Duration::from_secs(60), 2);
        for t in ["a", "b", "c"] {
            c.put(digest(t), t, Duration::MAX, None);
        }
        assert_eq!(c.get(&digest("a")), None);
        assert_eq!(c.get(&digest("b")), Some("b"));
        assert_eq!(c.get(&digest("c")), Some("c"));
        let off = TokenCache::new(Duration::ZERO, 2);
        off.put(digest("a"), 1, Duration::MAX, None);
        assert_eq!(off.get(&digest("a")), None);
        assert!(!off.enabled());
    }
}

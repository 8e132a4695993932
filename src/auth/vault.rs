//! The latest access token each OAuth principal presented, kept only when a backend
//! exchanges callers' tokens (RFC 8693 `token_exchange`): what Gantry exchanges for
//! that user's backend token. Tokens leave only for the token endpoint, never for a
//! backend; an entry goes when its token expires. Bounded.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::LazyLock;

/// Principals remembered at most (the oldest-expiring go first beyond it).
const MAX_ENTRIES: usize = 100_000;

static TOKENS: LazyLock<Mutex<HashMap<String, (String, u64)>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Remembers `token` (valid until `exp`, Unix seconds) as `principal`'s latest.
pub fn remember(principal: &str, token: &str, exp: u64) {
    let mut m = TOKENS.lock();
    if m.len() >= MAX_ENTRIES && !m.contains_key(principal) {
        let t = now();
        m.retain(|_, (_, e)| *e > t);
        if m.len() >= MAX_ENTRIES {
            if let Some(k) = m
                .iter()
                .min_by_key(|(_, (_, e))| *e)
                .map(|(k, _)| k.clone())
            {
                m.remove(&k);
            }
        }
    }
    m.insert(principal.to_owned(), (token.to_owned(), exp));
}

/// `principal`'s latest token, if it has not expired.
pub fn latest(principal: &str) -> Option<(String, u64)> {
    let m = TOKENS.lock();
    m.get(principal).filter(|(_, exp)| *exp > now()).cloned()
}

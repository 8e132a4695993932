//! Per-client session quotas: how many live sessions one client may hold, and how
//! fast it may open new ones, so no single client can fill `max_sessions` and lock
//! everyone else out. A client is its principal when authenticated, else its
//! address (README "Timeouts, caps and quotas").

use dashmap::DashMap;
use std::time::Duration;
use tokio::time::Instant;

/// The limits (0 = none).
#[derive(Debug, Clone, Copy)]
pub struct QuotaConfig {
    /// Live sessions one client may hold.
    pub max_live: usize,
    /// New sessions per minute, on average.
    pub per_minute: u32,
    /// New sessions at once beyond the average.
    pub burst: u32,
}

/// Why a client may not open a session now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// The client holds `max` live sessions.
    #[error("this client already has {max} sessions (server.max_sessions_per_client); end one (DELETE) or let one expire")]
    Live {
        /// `max_sessions_per_client`.
        max: usize,
    },
    /// The client opens sessions faster than allowed.
    #[error("this client opens sessions too fast (server.session_rate_per_client: {per_minute} per minute); retry in {}", crate::telemetry::human(*retry_after))]
    Rate {
        /// `session_rate_per_client`.
        per_minute: u32,
        /// When the next one is allowed.
        retry_after: Duration,
    },
}

impl QuotaError {
    /// How long the client should wait (for `Retry-After`).
    pub fn retry_after(&self) -> Duration {
        match self {
            Self::Live { .. } => Duration::from_secs(1),
            Self::Rate { retry_after, .. } => *retry_after,
        }
    }
}

struct Client {
    live: usize,
    /// Token bucket: tokens held at `at`.
    tokens: f64,
    at: Instant,
}

/// Live sessions and creation budget per client.
pub(crate) struct Quotas {
    cfg: QuotaConfig,
    clients: DashMap<String, Client>,
}

impl Quotas {
    pub(crate) fn new(cfg: QuotaConfig) -> Self {
        Self {
            cfg,
            clients: DashMap::new(),
        }
    }

    fn capacity(&self) -> f64 {
        f64::from(self.cfg.burst.max(1))
    }

    fn per_sec(&self) -> f64 {
        f64::from(self.cfg.per_minute) / 60.0
    }

    /// Takes one session for `key`, or says why not. Released with [`Quotas::release`].
    pub(crate) fn admit(&self, key: &str) -> Result<(), QuotaError> {
        let now = Instant::now();
        let (capacity, per_sec) = (self.capacity(), self.per_sec());
        let mut c = self
            .clients
            .entry(key.to_owned())
            .or_insert_with(|| Client {
                live: 0,
                tokens: capacity,
                at: now,
            });
        if self.cfg.max_live > 0 && c.live >= self.cfg.max_live {
            return Err(QuotaError::Live {
                max: self.cfg.max_live,
            });
        }
        if self.cfg.per_minute > 0 {
            let elapsed = now.saturating_duration_since(c.at).as_secs_f64();
            c.tokens = (c.tokens + elapsed * per_sec).min(capacity);
            c.at = now;
            if c.tokens < 1.0 {
                let wait = Duration::from_secs_f64((1.0 - c.tokens) / per_sec);
                return Err(QuotaError::Rate {
                    per_minute: self.cfg.per_minute,
                    retry_after: wait.max(Duration::from_millis(1)),
                });
            }
            c.tokens -= 1.0;
        }
        c.live += 1;
        Ok(())
    }

    /// Gives back a session of `key`.
    pub(crate) fn release(&self, key: &str) {
        if let Some(mut c) = self.clients.get_mut(key) {
            c.live = c.live.saturating_sub(1);
        }
    }

    /// Forgets clients with no session and a full budget (nothing to remember).
    pub(crate) fn prune(&self) {
        let now = Instant::now();
        let (capacity, per_sec) = (self.capacity(), self.per_sec());
        self.clients.retain(|_, c| {
            let refilled = c.tokens + now.saturating_duration_since(c.at).as_secs_f64() * per_sec;
            c.live > 0 || (self.cfg.per_minute > 0 && refilled < capacity)
        });
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn live_sessions_are_capped_per_client_and_given_back() {
        let q = Quotas::new(QuotaConfig {
            max_live: 2,
            per_minute: 0,
            burst: 0,
        });
        assert!(q.admit("a").is_ok());
        assert!(q.admit("a").is_ok());
        assert_eq!(q.admit("a"), Err(QuotaError::Live { max: 2 }));
        assert!(q.admit("b").is_ok(), "another client is not affected");
        q.release("a");
        assert!(q.admit("a").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn creation_is_rate_limited_with_a_burst_and_a_precise_retry() {
        let q = Quotas::new(QuotaConfig {
            max_live: 0,
            per_minute: 60,
            burst: 3,
        });
        for _ in 0..3 {
            assert!(q.admit("a").is_ok());
        }
        let Err(QuotaError::Rate { retry_after, .. }) = q.admit("a") else {
            panic!("not limited");
        };
        assert!(retry_after > Duration::from_millis(900) && retry_after <= Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(q.admit("a").is_ok(), "one more a second later");
        assert!(q.admit("a").is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_clients_are_forgotten() {
        let q = Quotas::new(QuotaConfig {
            max_live: 10,
            per_minute: 60,
            burst: 2,
        });
        q.admit("a").unwrap();
        q.release("a");
        q.prune();
        assert_eq!(q.tracked(), 1, "its budget is not full yet");
        tokio::time::advance(Duration::from_secs(2)).await;
        q.prune();
        assert_eq!(q.tracked(), 0);
    }
}

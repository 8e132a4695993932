//! Budgets shared through Redis (`limits.store = "redis"`): every replica checks a
//! request with one atomic script over all the rules covering it (GCRA on the Redis
//! clock, so replicas' clocks do not matter, and no read-modify-write race between
//! them). A key Redis refused is remembered here until its wait ends, so requests
//! that are certainly over are refused without asking Redis again.

use dashmap::DashMap;
use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Admits a request under every rule (KEYS[i], ARGV[2i-1] = emission interval in µs,
/// ARGV[2i] = burst) or none: returns `{0, 0}` and advances each key, or `{i, wait µs}`
/// for the first rule that refuses, writing nothing. Times are Redis's own.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tats = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now) or now
  if tat < now then tat = now end
  local next_tat = tat + interval
  local allow_at = next_tat - burst * interval
  if allow_at > now then
    return {i, math.ceil(allow_at - now)}
  end
  tats[i] = next_tat
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], string.format('%.0f', tats[i]), 'PX', math.ceil((tats[i] - now) / 1000) + 1)
end
return {0, 0}
";

/// Why Redis could not answer (the `reason` label of `gantry_redis_errors_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreError {
    /// No connection (refused, reset, DNS, TLS, authentication).
    Connect,
    /// No answer within `limits.redis.timeout`.
    Timeout,
    /// An answer that is an error or not the script's (e.g. a read-only replica).
    Response,
}

impl StoreError {
    pub const ALL: [StoreError; 3] = [Self::Connect, Self::Timeout, Self::Response];

    pub fn label(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::Response => "response",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Connect => 0,
            Self::Timeout => 1,
            Self::Response => 2,
        }
    }
}

/// One rule's part of a check: its Redis key and quota.
pub(super) struct Ask {
    pub key: String,
    pub interval_us: u64,
    pub burst: u32,
}

pub(super) struct RedisStore {
    client: redis::Client,
    conn: Mutex<ConnectionManager>,
    script: redis::Script,
    prefix: String,
    timeout: Duration,
    retry_interval: Duration,
    /// Redis is not asked before this instant (it failed just now).
    resting_until: Mutex<Option<Instant>>,
    /// Keys Redis refused, until their wait ends (the local pre-check).
    denied: DashMap<String, Instant>,
    healthy: AtomicBool,
    /// Failures by `StoreError::index`.
    pub(super) errors: [AtomicU64; 3],
}

/// The URL's problem, if any (check-config).
pub fn redis_url(url: &str) -> Result<(), String> {
    match redis::Client::open(url) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("`{}`: {e}", without_password(url))),
    }
}

/// The URL with its password (if any) replaced, for messages.
fn without_password(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

fn manager(client: &redis::Client, timeout: Duration) -> Option<ConnectionManager> {
    let cfg = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(0);
    ConnectionManager::new_lazy_with_config(client.clone(), cfg).ok()
}

impl RedisStore {
    /// `None` if the URL does not parse (validated before).
    pub(super) fn new(cfg: &crate::config::RedisConfig) -> Option<Self> {
        let client = redis::Client::open(cfg.url.as_str()).ok()?;
        let conn = manager(&client, cfg.timeout)?;
        Some(Self {
            client,
            conn: Mutex::new(conn),
            script: redis::Script::new(GCRA),
            prefix: cfg.prefix.clone(),
            timeout: cfg.timeout,
            retry_interval: cfg.retry_interval,
            resting_until: Mutex::new(None),
            denied: DashMap::new(),
            healthy: AtomicBool::new(true),
            errors: Default::default(),
        })
    }

    /// The Redis key of a rule's key.
    pub(super) fn key(&self, rule: &str, key: &str) -> String {
        format!("{}{rule}:{key}", self.prefix)
    }

    /// How long a key Redis refused is still certainly refused.
    pub(super) fn refused_for(&self, key: &str, now: Instant) -> Option<Duration> {
        let until = *self.denied.get(key)?;
        if until > now {
            Some(until - now)
        } else {
            drop(self.denied.remove_if(key, |_, u| *u <= now));
            None
        }
    }

    /// How long Redis rests after a failure.
    pub(super) fn retry_interval(&self) -> Duration {
        self.retry_interval
    }

    /// Whether Redis failed so recently that it is not asked now.
    pub(super) fn resting(&self, now: Instant) -> bool {
        self.resting_until.lock().is_some_and(|u| u > now)
    }

    /// Asks Redis: `Ok(None)` admitted under every rule; `Ok(Some((i, wait)))` the
    /// i-th (0-based) refuses for `wait`.
    pub(super) async fn check(
        &self,
        asks: &[Ask],
    ) -> Result<Option<(usize, Duration)>, StoreError> {
        let mut inv = self.script.prepare_invoke();
        for a in asks {
            inv.key(&a.key);
        }
        for a in asks {
            inv.arg(a.interval_us.max(1)).arg(a.burst);
        }
        let mut conn = self.conn.lock().clone();
        let sent = Instant::now();
        let answer =
            tokio::time::timeout(self.timeout, inv.invoke_async::<Vec<i64>>(&mut conn)).await;
        let result = match answer {
            Err(_) => Err(StoreError::Timeout),
            Ok(Err(e)) if e.is_timeout() => Err(StoreError::Timeout),
            Ok(Err(e))
                if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() =>
            {
                Err(StoreError::Connect)
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "redis answered with an error");
                Err(StoreError::Response)
            }
            Ok(Ok(v)) => match v.as_slice() {
                [0, _] => Ok(None),
                [i, wait] if *i >= 1 && usize::try_from(*i).is_ok_and(|i| i <= asks.len()) => {
                    let i = usize::try_from(*i - 1).unwrap_or_default();
                    let wait = Duration::from_micros(u64::try_from(*wait).unwrap_or(0));
                    Ok(Some((i, wait)))
                }
                _ => Err(StoreError::Response),
            },
        };
        match result {
            Ok(r) => {
                if !self.healthy.swap(true, Ordering::Relaxed) {
                    tracing::info!("rate-limit store: Redis answers again; shared budgets apply");
                }
                if let Some((i, wait)) = r {
                    if let Some(a) = asks.get(i) {
                        self.remember(&a.key, sent + wait);
                    }
                }
                Ok(r)
            }
            Err(e) => {
                self.failed(e);
                Err(e)
            }
        }
    }

    fn remember(&self, key: &str, until: Instant) {
        if self.denied.len() >= super::MAX_KEYS {
            let now = Instant::now();
            self.denied.retain(|_, u| *u > now);
            if self.denied.len() >= super::MAX_KEYS {
                return;
            }
        }
        self.denied.insert(key.to_owned(), until);
    }

    fn failed(&self, e: StoreError) {
        if let Some(n) = self.errors.get(e.index()) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        *self.resting_until.lock() = Some(Instant::now() + self.retry_interval);
        if self.healthy.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                reason = e.label(),
                retry_in = %crate::telemetry::human(self.retry_interval),
                "rate-limit store: Redis does not answer; each rule's on_store_error decides until it does"
            );
        }
        if e == StoreError::Timeout {
            // A connection that hangs is not reused: the next check opens a new one.
            if let Some(m) = manager(&self.client, self.timeout) {
                *self.conn.lock() = m;
            }
        }
    }

    /// Forgets refusals whose wait is over.
    pub(super) fn tidy(&self) {
        let now = Instant::now();
        self.denied.retain(|_, u| *u > now);
    }
}

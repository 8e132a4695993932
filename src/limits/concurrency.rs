//! Calls in progress at once (`[[limits.concurrency]]`): per backend over all its
//! connections, per principal, per tool, or combined. A call beyond `max` waits in a
//! bounded queue for up to `queue_timeout`; one more than the queue holds, or one
//! that waited too long, is refused with `-32029`.

use super::{Ask, Part};
use crate::auth::policy::glob;
use crate::config::ConcurrencyConfig;
use dashmap::DashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

struct Slot {
    sem: Arc<Semaphore>,
    waiting: AtomicUsize,
}

pub(super) struct Rule {
    name: String,
    parts: Vec<Part>,
    max: u32,
    queue: usize,
    queue_timeout: Duration,
    tools: Vec<String>,
    slots: DashMap<String, Arc<Slot>>,
}

/// Why a call did not get a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    pub rule: String,
    pub max: u32,
    /// The queue was full (refused at once) rather than the wait too long.
    pub queue_full: bool,
    pub waited: Duration,
}

impl Busy {
    pub fn message(&self) -> String {
        if self.queue_full {
            format!(
                "Too many calls in progress for rule `{}` (at most {} at once, and the queue is full): retry later",
                self.rule, self.max
            )
        } else {
            format!(
                "Too many calls in progress for rule `{}` (at most {} at once): no place within {}",
                self.rule,
                self.max,
                crate::telemetry::human(self.waited)
            )
        }
    }

    pub fn data(&self) -> serde_json::Value {
        serde_json::json!({ "rule": self.rule, "maxConcurrent": self.max, "retryAfterMs": 1000 })
    }
}

/// Places held by one call; released when it ends.
#[derive(Default)]
pub struct Permits(Vec<OwnedSemaphorePermit>);

pub(super) fn rule(c: &ConcurrencyConfig) -> Rule {
    Rule {
        name: c.name.clone(),
        parts: c.key.iter().filter_map(|k| Part::parse(k)).collect(),
        max: c.max.max(1),
        queue: usize::try_from(c.queue).unwrap_or(usize::MAX),
        queue_timeout: c.queue_timeout,
        tools: c.tools.clone(),
        slots: DashMap::new(),
    }
}

impl Rule {
    fn covers(&self, a: &Ask<'_>) -> bool {
        a.method == "tools/call"
            && (self.tools.is_empty()
                || a.name
                    .is_some_and(|n| self.tools.iter().any(|g| glob(g, n))))
    }

    fn slot(&self, key: String) -> Arc<Slot> {
        self.slots
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Slot {
                    sem: Arc::new(Semaphore::new(usize::try_from(self.max).unwrap_or(1))),
                    waiting: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    async fn acquire(
        &self,
        a: &Ask<'_>,
        cancel: &CancellationToken,
        waited: &(dyn Fn(&str, Duration) + Sync),
    ) -> Result<Option<OwnedSemaphorePermit>, Busy> {
        if self.slots.len() > super::MAX_KEYS {
            self.tidy();
        }
        // Still full of busy keys: new ones share one slot (bounded memory).
        let key = if self.slots.len() > super::MAX_KEYS {
            "\u{1f}overflow".to_owned()
        } else {
            super::key_of(&self.parts, a)
        };
        let slot = self.slot(key);
        if let Ok(p) = slot.sem.clone().try_acquire_owned() {
            waited(&self.name, Duration::ZERO);
            return Ok(Some(p));
        }
        let busy = |queue_full, waited| Busy {
            rule: self.name.clone(),
            max: self.max,
            queue_full,
            waited,
        };
        if slot.waiting.fetch_add(1, Ordering::AcqRel) >= self.queue {
            slot.waiting.fetch_sub(1, Ordering::AcqRel);
            waited(&self.name, Duration::ZERO);
            return Err(busy(true, Duration::ZERO));
        }
        let since = tokio::time::Instant::now();
        let r = tokio::select! {
            p = slot.sem.clone().acquire_owned() => p.map(Some).map_err(|_| busy(false, Duration::ZERO)),
            _ = tokio::time::sleep(self.queue_timeout) => Err(busy(false, self.queue_timeout)),
            _ = cancel.cancelled() => Ok(None),
        };
        slot.waiting.fetch_sub(1, Ordering::AcqRel);
        if !matches!(r, Ok(None)) {
            waited(&self.name, since.elapsed());
        }
        r
    }

    /// Forgets keys with nothing in progress or waiting.
    fn tidy(&self) {
        let max = usize::try_from(self.max).unwrap_or(1);
        self.slots.retain(|_, s| {
            Arc::strong_count(s) > 1
                || s.sem.available_permits() < max
                || s.waiting.load(Ordering::Acquire) > 0
        });
    }
}

/// Takes a place under every rule that covers the call, in order; `Ok(None)` when
/// the call was cancelled while it waited. `waited` learns how long each rule made
/// the call wait (refused ones included).
pub(super) async fn acquire(
    rules: &[Rule],
    a: &Ask<'_>,
    cancel: &CancellationToken,
    waited: &(dyn Fn(&str, Duration) + Sync),
) -> Result<Option<Permits>, Busy> {
    let mut held = Permits::default();
    for r in rules.iter().filter(|r| r.covers(a)) {
        match r.acquire(a, cancel, waited).await? {
            Some(p) => held.0.push(p),
            None => return Ok(None),
        }
    }
    Ok(Some(held))
}

pub(super) fn tidy(rules: &[Rule]) {
    for r in rules {
        r.tidy();
    }
}

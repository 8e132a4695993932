//! Restarting a backend connection: the backoff between incarnations.

use std::time::Duration;

/// Exponential backoff between restarts.
pub(crate) struct Backoff {
    next: Duration,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    pub(super) fn new(cfg: &crate::config::RestartConfig) -> Self {
        Self {
            next: cfg.initial_backoff,
            initial: cfg.initial_backoff,
            max: cfg.max_backoff,
        }
    }
    /// The delay to wait now; doubles the next one.
    pub(super) fn step(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
    /// Back to the initial delay (after a run that lasted).
    pub(super) fn reset(&mut self) {
        self.next = self.initial;
    }
}

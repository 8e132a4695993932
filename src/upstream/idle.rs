//! Stopping a per-client connection that sits idle (`idle_timeout`), and starting it
//! again when its session calls.
//!
//! A call holds a use guard from before it waits for the connection until its answer;
//! the idle watcher may stop the connection only when it can take the guard
//! exclusively, so no call is ever caught between "ready" and "sent" by a stop. A
//! stopped ("parked") connection's next caller wakes it and waits for it like for a
//! restart.

use super::core::{Core, State};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, RwLock, RwLockReadGuard};
use tokio::time::Instant;

/// How often an idle watcher that found a call in progress looks again, at most.
const BUSY_RECHECK: Duration = Duration::from_secs(1);

pub(crate) struct IdleStop {
    pub(super) after: Duration,
    in_use: RwLock<()>,
    last_used: Mutex<Instant>,
    pub(super) wake: Notify,
    /// Warm connections wait for a session before their idle time counts.
    armed: AtomicBool,
}

/// Held by a call for as long as it uses the connection.
pub(crate) struct InUse<'a> {
    _guard: RwLockReadGuard<'a, ()>,
    idle: &'a IdleStop,
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        *self.idle.last_used.lock() = Instant::now();
    }
}

impl IdleStop {
    pub(super) fn new(after: Duration, armed: bool) -> Self {
        Self {
            after,
            in_use: RwLock::new(()),
            last_used: Mutex::new(Instant::now()),
            wake: Notify::new(),
            armed: AtomicBool::new(armed),
        }
    }

    /// [`IdleStop::enter`] without waiting: `None` while the connection is being
    /// stopped for idleness.
    pub(crate) fn try_enter(&self) -> Option<InUse<'_>> {
        let guard = self.in_use.try_read().ok()?;
        Some(InUse {
            _guard: guard,
            idle: self,
        })
    }

    /// Marks the connection as in use until the guard drops.
    pub(crate) async fn enter(&self) -> InUse<'_> {
        let guard = self.in_use.read().await;
        InUse {
            _guard: guard,
            idle: self,
        }
    }

    /// Starts counting idle time (a warm connection adopted by a session).
    pub(super) fn arm(&self) {
        *self.last_used.lock() = Instant::now();
        self.armed.store(true, Ordering::Release);
    }

    /// Resolves once the connection has been idle for `after` with nothing in
    /// flight, having set its state to [`State::Stopping`] while no call could start.
    pub(super) async fn until_idle(&self, core: &Core) {
        loop {
            let last = *self.last_used.lock();
            tokio::time::sleep_until(last + self.after).await;
            if !self.armed.load(Ordering::Acquire) || *self.last_used.lock() > last {
                if !self.armed.load(Ordering::Acquire) {
                    tokio::time::sleep(self.after.min(BUSY_RECHECK)).await;
                }
                continue;
            }
            let Ok(_exclusive) = self.in_use.try_write() else {
                tokio::time::sleep(self.after.min(BUSY_RECHECK)).await;
                continue;
            };
            let ready = matches!(*core.state.borrow(), State::Ready { .. });
            if ready && core.pending_len() == 0 {
                let _ = core.state.send_replace(State::Stopping);
                return;
            }
            drop(_exclusive);
            tokio::time::sleep(self.after.min(BUSY_RECHECK)).await;
        }
    }
}

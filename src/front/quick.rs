//! The quick window of calls run inline by their HTTP handler (`session_era::single`),
//! timed by one shared coarse tick rather than by a runtime timer per call.
//!
//! A call answered within the window gets its SSE body whole; one still running after
//! it moves to a task of its own and its client gets the live stream. The window
//! almost never ends on the fast path, yet a runtime timer per call costs the timer
//! driver's lock twice (in, then out) and, because a 25 ms timer is usually the
//! runtime's earliest, a write to its eventfd so that the parked worker waits less:
//! one system call per call beside the call's four reads and writes. Here a call
//! takes a place in a slab; one task ticks every [`TICK`] while windows were opened
//! in the last second (then it stops, so an idle gateway is not woken), and wakes the
//! calls whose window has passed.

use parking_lot::Mutex;
use slab::Slab;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The tick of the shared clock.
const TICK: Duration = Duration::from_millis(16);
/// Ticks a window lasts: between one and two [`TICK`]s (16–32 ms) after it opened.
const TICKS: u64 = 2;
/// Ticks without a window opened after which the ticking task stops (about 1 s).
const IDLE_TICKS: u32 = 64;

/// The windows of one gateway. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Windows(Arc<Mutex<State>>);

#[derive(Default)]
struct State {
    /// Ticks since the clock was made.
    tick: u64,
    /// The open windows not yet woken: when each one ends, and its caller's waker.
    open: Slab<Open>,
    /// Whether a task is ticking.
    ticking: bool,
    /// Ticks since a window was last opened, counted while none is open.
    idle: u32,
}

struct Open {
    ends: u64,
    waker: Option<Waker>,
}

impl Windows {
    /// A window that opens when first polled and is ready once it has passed.
    pub(crate) fn window(&self) -> Window {
        Window {
            windows: self.0.clone(),
            key: None,
            ends: 0,
        }
    }
}

/// One call's window (see [`Windows::window`]).
pub(crate) struct Window {
    windows: Arc<Mutex<State>>,
    /// Its place among the open windows, once opened.
    key: Option<usize>,
    ends: u64,
}

impl Future for Window {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut state = this.windows.lock();
        let Some(key) = this.key else {
            this.ends = state.tick + TICKS;
            this.key = Some(state.open.insert(Open {
                ends: this.ends,
                waker: Some(cx.waker().clone()),
            }));
            state.idle = 0;
            if !state.ticking {
                state.ticking = true;
                tokio::spawn(tick(Ticking {
                    clock: this.windows.clone(),
                    armed: true,
                }));
            }
            return Poll::Pending;
        };
        if state.tick >= this.ends {
            state.open.try_remove(key);
            this.key = None;
            return Poll::Ready(());
        }
        if let Some(open) = state.open.get_mut(key) {
            match &mut open.waker {
                Some(w) => w.clone_from(cx.waker()),
                None => open.waker = Some(cx.waker().clone()),
            }
        }
        Poll::Pending
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.windows.lock().open.try_remove(key);
        }
    }
}

/// The ticking task's hold on the clock: should the task end without stopping (its
/// runtime going away), the next window opened starts a new one.
struct Ticking {
    clock: Arc<Mutex<State>>,
    /// Whether the task still counts as ticking.
    armed: bool,
}

impl Drop for Ticking {
    fn drop(&mut self) {
        if self.armed {
            self.clock.lock().ticking = false;
        }
    }
}

async fn tick(mut clock: Ticking) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // An interval's first tick is at once.
    interval.tick().await;
    let mut due = Vec::new();
    loop {
        interval.tick().await;
        let stop = {
            let mut state = clock.clock.lock();
            state.tick += 1;
            let now = state.tick;
            for (_, open) in state.open.iter_mut() {
                if open.ends <= now {
                    if let Some(w) = open.waker.take() {
                        due.push(w);
                    }
                }
            }
            if state.open.is_empty() {
                state.idle += 1;
            }
            // Stopped under the lock: a window opened after it starts the next task.
            let stop = state.idle >= IDLE_TICKS;
            if stop {
                state.ticking = false;
            }
            stop
        };
        due.drain(..).for_each(Waker::wake);
        if stop {
            clock.armed = false;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use tokio::time::Instant;

    /// Waits for `w` (at most 5 s) and says how long it took.
    async fn lasted(w: Window) -> Duration {
        let began = Instant::now();
        let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
        began.elapsed()
    }

    #[tokio::test]
    async fn a_window_ends_after_one_to_two_ticks() {
        let windows = Windows::default();
        for _ in 0..3 {
            let took = lasted(windows.window()).await;
            assert!(took >= TICK, "ended after {took:?}");
            assert!(took < TICK * 20, "ended after {took:?}");
        }
    }

    #[tokio::test]
    async fn a_dropped_window_leaves_nothing_open_and_others_still_end() {
        let windows = Windows::default();
        let mut w = windows.window();
        assert!(futures::poll!(&mut w).is_pending());
        assert_eq!(windows.0.lock().open.len(), 1);
        drop(w);
        assert!(windows.0.lock().open.is_empty());
        let took = lasted(windows.window()).await;
        assert!(took < TICK * 20, "ended after {took:?}");
    }

    /// An idle gateway is not woken every tick; the next window starts the clock again.
    #[tokio::test(start_paused = true)]
    async fn the_clock_stops_when_idle_and_starts_again() {
        let windows = Windows::default();
        lasted(windows.window()).await;
        assert!(windows.0.lock().ticking);
        tokio::time::sleep(TICK * (IDLE_TICKS + 2)).await;
        assert!(!windows.0.lock().ticking, "still ticking when idle");
        let took = lasted(windows.window()).await;
        assert!(took >= TICK && took <= TICK * 2, "ended after {took:?}");
    }
}

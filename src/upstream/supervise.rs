//! Restarting a backend connection, the same way for every transport: one
//! incarnation after another, each tagged with a generation so nothing meant for
//! a dead one reaches its successor; in-flight requests fail when an incarnation
//! ends; exponential backoff between them, reset by a run that lasted.

use super::core::{Core, Outgoing, State};
use crate::config::RestartConfig;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A run that lasted this long resets the restart backoff.
const STABLE_RUN: Duration = Duration::from_secs(30);

/// One kind of transport: how one incarnation of a connection runs.
pub(super) trait Transport {
    /// What the log says when an incarnation ended and another follows.
    const RESTARTING: &'static str;

    /// Runs incarnation `gen` (its handshake included) until it ends: `Some(why)`
    /// when it broke, `None` when it was shut down.
    async fn run(
        &mut self,
        core: &Arc<Core>,
        gen: u64,
        out_rx: &mut mpsc::Receiver<Outgoing>,
        shutdown: &CancellationToken,
    ) -> Option<String>;
}

/// Runs a connection until `shutdown`: incarnation after incarnation.
pub(super) async fn supervise<T: Transport>(
    core: Arc<Core>,
    mut transport: T,
    restart: RestartConfig,
    mut out_rx: mpsc::Receiver<Outgoing>,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::new(&restart);
    let mut gen = 0u64;
    while !shutdown.is_cancelled() {
        gen += 1;
        let _ = core.state.send_replace(State::Starting);
        core.live_gen.store(gen, Ordering::Release);
        let started = Instant::now();
        // Cancelled by the idle watcher (`idle_timeout`) or with `shutdown`.
        let park = shutdown.child_token();
        let outcome = {
            let run = transport.run(&core, gen, &mut out_rx, &park);
            tokio::pin!(run);
            tokio::select! {
                o = &mut run => o,
                () = until_idle(&core) => {
                    park.cancel();
                    run.await
                }
            }
        };
        core.live_gen.store(0, Ordering::Release);
        if park.is_cancelled() && !shutdown.is_cancelled() {
            if !parked(&core, &mut out_rx, &shutdown).await {
                break;
            }
            continue;
        }
        let Some(reason) = outcome.filter(|_| !shutdown.is_cancelled()) else {
            break;
        };
        if let Some(era) = core.take_probe_death() {
            // It died of a handshake of the era it lacks. Not a failure: the next
            // incarnation gets the other (so do the backend's later connections).
            tracing::info!(backend = %core.name, %era, "backend exited on the handshake of an era it does not speak; starting it again");
            core.fail_pending(Some(gen), &reason);
            while out_rx.try_recv().is_ok() {}
            continue;
        }
        // A backend that was serving and broke is restarted with calls waiting for
        // it; one that could not even start fails calls at once (a crash loop must
        // not hold every call for the init timeout).
        if started.elapsed() >= STABLE_RUN {
            backoff.reset();
        }
        let delay = backoff.step();
        core.stats.mark_failed(&reason);
        let was_ready = matches!(*core.state.borrow(), State::Ready { .. });
        let _ = core.state.send_replace(if was_ready {
            State::Restarting {
                reason: reason.clone(),
                at: Instant::now() + delay,
            }
        } else {
            State::Failed {
                reason: reason.clone(),
            }
        });
        core.fail_pending(Some(gen), &reason);
        core.stats.restarts.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(backend = %core.name, %reason, "{}", T::RESTARTING);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => break,
        }
        // Messages queued for the dead incarnation are stale.
        while out_rx.try_recv().is_ok() {}
    }
    let _ = core.state.send_replace(State::Closed);
    core.fail_pending(None, "backend shut down");
}

/// Resolves when an `idle_timeout` connection should stop; never without one.
async fn until_idle(core: &Core) {
    match &core.idle {
        Some(idle) => idle.until_idle(core).await,
        None => std::future::pending().await,
    }
}

/// A connection stopped for being idle: gives up its place under
/// `pool.max_connections` and waits until a request has taken one back for it
/// (`Core::unpark`). False when shut down meanwhile.
async fn parked(
    core: &Core,
    out_rx: &mut mpsc::Receiver<Outgoing>,
    shutdown: &CancellationToken,
) -> bool {
    let Some(idle) = &core.idle else {
        return true;
    };
    core.fail_pending(None, "backend stopped while idle");
    // The place is given up before requests can see the state that takes it back.
    if core.reserved.swap(false, Ordering::AcqRel) {
        core.stats.release();
    }
    let _ = core.state.send_replace(State::Parked);
    tracing::info!(backend = %core.name, idle = %crate::telemetry::human(idle.after), "idle connection stopped; the next request starts it again");
    while !core.reserved.load(Ordering::Acquire) {
        tokio::select! {
            () = idle.wake.notified() => {}
            () = shutdown.cancelled() => return false,
        }
    }
    // Nothing queued for the stopped incarnation is for the next.
    while out_rx.try_recv().is_ok() {}
    true
}

/// Exponential backoff between restarts.
struct Backoff {
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

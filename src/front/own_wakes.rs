//! A connection's task that is woken by its own work while it runs is polled again
//! right there, instead of through the runtime.
//!
//! A connection's task often finishes the very thing it waits for in the same poll:
//! hyper's dispatcher hands the handler a request body that asks the dispatcher for
//! more; a handler reads a backend's answer off the connection it is polling and
//! hands it to the channel it is also waiting on (an HTTP backend's POST, run beside
//! the wait for its answer). Each wakes the task while that task is running. Tokio
//! counts such a wake-up as a yield: once the poll ends it queues the task again and
//! rouses an idle worker thread to help, which wakes, finds nothing and sleeps
//! again: about two futex calls and a context switch per call for nothing
//! (BENCHMARKS.md). [`AbsorbOwnWakes`] polls the connection (and, through
//! [`Spawner`], each HTTP/2 stream hyper spawns) with a waker of its own that only
//! notes a wake-up arriving during that poll; the future is then polled once more
//! at once. Wake-ups from anywhere else, at any other time, reach the task as
//! before.

use futures::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Polls of the inner future within one poll of the wrapper, at most. A future that
/// keeps waking itself (tokio's cooperative budget spent, a deliberate yield) gets
/// its wake-up passed on after this many, and the task yields as it would have.
const MAX_POLLS: usize = 3;

/// The executor of the front's HTTP connections (hyper spawns each HTTP/2 stream
/// on it): every future it spawns runs inside [`AbsorbOwnWakes`], as the
/// connections themselves do ([`super::conn`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Spawner;

impl<F> hyper::rt::Executor<F> for Spawner
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(AbsorbOwnWakes::new(fut));
    }
}

/// A future whose wake-ups during its own poll are taken as "poll again now".
pub struct AbsorbOwnWakes<F> {
    inner: Pin<Box<F>>,
    gate: Arc<Gate>,
}

/// The waker the inner future sees.
struct Gate {
    /// The task's own waker, for wake-ups that come while the future is not polled.
    task: AtomicWaker,
    /// Set while the inner future is being polled.
    polling: AtomicBool,
    /// A wake-up came while polling.
    woken: AtomicBool,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
            // Polling may have ended just before the store: then it is passed on.
            if self.polling.load(Ordering::SeqCst) {
                return;
            }
        }
        self.task.wake();
    }
}

impl<F: Future> AbsorbOwnWakes<F> {
    /// `inner`, polled again at once when it wakes itself.
    pub fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            gate: Arc::new(Gate {
                task: AtomicWaker::new(),
                polling: AtomicBool::new(false),
                woken: AtomicBool::new(false),
            }),
        }
    }
}

impl<F: Future> Future for AbsorbOwnWakes<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.gate.task.register(cx.waker());
        let waker = Waker::from(this.gate.clone());
        let mut inner_cx = Context::from_waker(&waker);
        for _ in 0..MAX_POLLS {
            this.gate.woken.store(false, Ordering::SeqCst);
            this.gate.polling.store(true, Ordering::SeqCst);
            let r = this.inner.as_mut().poll(&mut inner_cx);
            this.gate.polling.store(false, Ordering::SeqCst);
            if r.is_ready() {
                return r;
            }
            if !this.gate.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still waking itself: let the runtime schedule it.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::AbsorbOwnWakes;
    use crate::testkit::CountedWaker;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};

    /// Wakes itself in each of its first `n` polls, then is ready; counts its polls.
    struct WakesItself {
        n: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for WakesItself {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let done = self.polls.fetch_add(1, Ordering::SeqCst);
            if done >= self.n {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn a_wake_during_its_own_poll_is_a_poll_again_not_a_wake_up() {
        let (task, waker) = CountedWaker::new();
        let mut cx = Context::from_waker(&waker);
        let polls = Arc::new(AtomicUsize::new(0));
        let mut f = AbsorbOwnWakes::new(WakesItself {
            n: 2,
            polls: polls.clone(),
        });
        assert!(Pin::new(&mut f).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 3);
        assert_eq!(task.count(), 0, "the task was woken");
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_to_the_runtime() {
        let (task, waker) = CountedWaker::new();
        let mut cx = Context::from_waker(&waker);
        let polls = Arc::new(AtomicUsize::new(0));
        let mut f = AbsorbOwnWakes::new(WakesItself {
            n: usize::MAX,
            polls: polls.clone(),
        });
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), super::MAX_POLLS);
        assert_eq!(task.count(), 1, "woken once, to yield");
    }

    #[tokio::test]
    async fn wake_ups_from_elsewhere_reach_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let handle = tokio::spawn(AbsorbOwnWakes::new(rx));
        tokio::task::yield_now().await;
        assert!(!handle.is_finished(), "polled once, waiting");
        tx.send(7).unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), handle)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.unwrap(), 7);
    }
}

//! Waiting for a [`CancellationToken`] beside other work, cheaply.
//!
//! `token.cancelled()` in a `select!` is polled every time its task is, and each such
//! poll of a waiting registration locks the token's waiter list to compare wakers. On
//! the hot path (a connection's stop and kill tokens, a call's cancellation) that was
//! a dozen locks per relayed call for tokens that are almost never cancelled.
//! [`Cancelled`] registers once, with a waker that notes being woken before it wakes
//! the task; later polls with the same task waker load that note (the token's own
//! `is_cancelled` locks a mutex).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

pin_project_lite::pin_project! {
    /// Completes when `token` is cancelled (at once if it already is).
    pub struct Cancelled<'a> {
        #[pin]
        wait: WaitForCancellationFuture<'a>,
        // The waker the registration holds, once registered.
        registered: Option<Arc<Noting>>,
    }
}

/// A task's waker that notes it was woken (only a cancellation wakes it).
struct Noting {
    woken: AtomicBool,
    task: Waker,
}

impl Wake for Noting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

impl<'a> Cancelled<'a> {
    pub fn new(token: &'a CancellationToken) -> Self {
        Self {
            wait: token.cancelled(),
            registered: None,
        }
    }
}

impl Future for Cancelled<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if let Some(n) = this.registered.as_ref() {
            // Not woken, and a wake of it reaches this task: nothing to ask.
            if n.task.will_wake(cx.waker()) && !n.woken.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        }
        // The first poll, another task waker, or woken: the wait itself is asked.
        let noting = Arc::new(Noting {
            woken: AtomicBool::new(false),
            task: cx.waker().clone(),
        });
        let waker = Waker::from(noting.clone());
        match this.wait.poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(()) => Poll::Ready(()),
            Poll::Pending => {
                *this.registered = Some(noting);
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::Cancelled;
    use crate::testkit::CountedWaker;
    use std::future::Future;
    use std::task::{Context, Poll};
    use tokio_util::sync::CancellationToken;

    #[test]
    fn a_cancellation_wakes_the_waiting_task_and_completes_the_wait() {
        let token = CancellationToken::new();
        let (task, waker) = CountedWaker::new();
        let mut cx = Context::from_waker(&waker);
        let mut wait = std::pin::pin!(Cancelled::new(&token));
        for _ in 0..3 {
            assert_eq!(wait.as_mut().poll(&mut cx), Poll::Pending);
        }
        assert_eq!(task.count(), 0);
        token.cancel();
        assert_eq!(task.count(), 1, "the task was not woken");
        assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(()));
    }

    #[test]
    fn a_new_waker_is_the_one_woken() {
        let token = CancellationToken::new();
        let (first, w1) = CountedWaker::new();
        let (second, w2) = CountedWaker::new();
        let mut wait = std::pin::pin!(Cancelled::new(&token));
        assert!(wait
            .as_mut()
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        assert!(wait
            .as_mut()
            .poll(&mut Context::from_waker(&w2))
            .is_pending());
        token.cancel();
        assert_eq!((first.count(), second.count()), (0, 1));
        assert!(wait.as_mut().poll(&mut Context::from_waker(&w2)).is_ready());
    }

    #[test]
    fn an_already_cancelled_token_completes_at_once() {
        let token = CancellationToken::new();
        token.cancel();
        let (_task, waker) = CountedWaker::new();
        let mut wait = std::pin::pin!(Cancelled::new(&token));
        assert!(wait
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_ready());
    }
}

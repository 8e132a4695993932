//! The way from one stateless call's backend traffic (its notifications and input
//! requests) to the HTTP handler answering it: a bounded queue of [`Up`] items.
//!
//! Most calls send nothing up, so the queue costs one small allocation and no
//! more until something is sent (a tokio `mpsc` channel allocates its first block
//! of slots at once, and its receiver registers with a semaphore on every poll).

use super::call::Up;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use tokio::sync::Notify;

/// Items a call may have queued before its handler takes them: notifications past
/// it are dropped (as a client not reading them would miss them anyway), an input
/// request waits for room.
pub(super) const CAPACITY: usize = 64;

/// The queue one call's [`UpSender`] writes and its [`UpReceiver`] reads.
#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    /// Signalled when an item is taken or the receiver goes: an input request
    /// waiting for room looks again.
    room: Notify,
}

#[derive(Default)]
struct State {
    items: VecDeque<Up>,
    /// The receiver's task, to wake when an item comes or the sender goes.
    waker: Option<Waker>,
    sender_gone: bool,
    receiver_gone: bool,
}

impl Queue {
    /// The state, even if a panic while it was held poisoned the lock: every change
    /// to it is a single step, so it is never left half done.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `up` now, or gives it back when the queue is full or its receiver gone.
    fn push(&self, up: Up) -> Result<(), SendError> {
        let mut s = self.lock();
        if s.receiver_gone {
            return Err(SendError::Closed(up));
        }
        if s.items.len() >= CAPACITY {
            return Err(SendError::Full(up));
        }
        s.items.push_back(up);
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

/// A new queue's two ends.
pub(super) fn queue() -> (UpSender, UpReceiver) {
    let q = Arc::new(Queue::default());
    (UpSender(q.clone()), UpReceiver(q))
}

/// The call's end of the queue. Dropping it tells the receiver nothing more comes.
pub(super) struct UpSender(Arc<Queue>);

/// Why an item was not queued; the item comes back.
pub(super) enum SendError {
    Full(Up),
    Closed(Up),
}

impl UpSender {
    /// Queues `up` now, or gives it back when the queue is full or its receiver gone.
    pub(super) fn try_send(&self, up: Up) -> Result<(), SendError> {
        self.0.push(up)
    }

    /// A handle for a sender that outlives this call to `ask` (its future is
    /// `'static`); it does not count as the call's sender.
    pub(super) fn handle(&self) -> UpHandle {
        UpHandle(self.0.clone())
    }
}

impl Drop for UpSender {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.sender_gone = true;
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A second way into the queue, for an input request's future.
pub(super) struct UpHandle(Arc<Queue>);

impl UpHandle {
    /// Queues `up`, waiting for room; gives it back if the receiver is gone.
    pub(super) async fn send(&self, mut up: Up) -> Result<(), Up> {
        loop {
            let room = self.0.room.notified();
            tokio::pin!(room);
            // Registered before looking, so that room made after the look wakes it.
            room.as_mut().enable();
            match self.0.push(up) {
                Ok(()) => return Ok(()),
                Err(SendError::Closed(u)) => return Err(u),
                Err(SendError::Full(u)) => up = u,
            }
            room.await;
        }
    }

    /// Queues `up` now if there is room (see [`UpSender::try_send`]).
    pub(super) fn try_send(&self, up: Up) -> Result<(), SendError> {
        self.0.push(up)
    }
}

/// The handler's end of the queue. Dropping it makes every later send fail.
pub(crate) struct UpReceiver(Arc<Queue>);

impl UpReceiver {
    /// The next item; `None` once the call's sender is gone and nothing is left.
    pub(super) async fn recv(&mut self) -> Option<Up> {
        poll_fn(|cx| {
            let mut s = self.0.lock();
            if let Some(up) = s.items.pop_front() {
                let full = s.items.len() + 1 >= CAPACITY;
                drop(s);
                if full {
                    self.0.room.notify_waiters();
                }
                return Poll::Ready(Some(up));
            }
            if s.sender_gone {
                return Poll::Ready(None);
            }
            match &mut s.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }

    /// Whether nothing is queued now.
    pub(super) fn is_empty(&self) -> bool {
        self.0.lock().items.is_empty()
    }
}

impl Drop for UpReceiver {
    fn drop(&mut self) {
        let items = {
            let mut s = self.0.lock();
            s.receiver_gone = true;
            s.waker = None;
            std::mem::take(&mut s.items)
        };
        // Queued input requests are dropped outside the lock: their reply channels
        // closing wakes the calls waiting on them.
        drop(items);
        self.0.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::front::stateless::mrtr::Ask;
    use crate::jsonrpc::Notification;
    use std::time::Duration;

    fn note(n: usize) -> Up {
        Up::Note(Notification::new(&format!("n/{n}"), None))
    }

    fn method(up: Option<Up>) -> String {
        match up {
            Some(Up::Note(n)) => n.method,
            Some(Up::Ask(a)) => a.method,
            Some(Up::Missing(cap)) => format!("missing {cap}"),
            None => "none".into(),
        }
    }

    fn ask(
        name: &str,
    ) -> (
        Up,
        tokio::sync::oneshot::Receiver<crate::call::ClientAnswer>,
    ) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let up = Up::Ask(Ask {
            method: name.into(),
            params: None,
            reply,
        });
        (up, rx)
    }

    #[tokio::test]
    async fn items_come_in_order_and_the_end_after_them() {
        let (tx, mut rx) = queue();
        let handle = tx.handle();
        assert!(tx.try_send(note(1)).is_ok());
        let (a, _reply) = ask("a");
        assert!(handle.send(a).await.is_ok());
        assert!(tx.try_send(note(2)).is_ok());
        drop(tx);
        assert_eq!(method(rx.recv().await), "n/1");
        assert_eq!(method(rx.recv().await), "a");
        assert_eq!(method(rx.recv().await), "n/2");
        // The call's sender is gone: nothing more comes, though a handle lives on.
        let end = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(method(end.expect("the end was not told")), "none");
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_by_an_item_and_by_the_end() {
        let (tx, mut rx) = queue();
        let waiting = tokio::spawn(async move {
            let first = method(rx.recv().await);
            let second = method(rx.recv().await);
            (first, second)
        });
        tokio::task::yield_now().await;
        assert!(tx.try_send(note(1)).is_ok());
        tokio::task::yield_now().await;
        drop(tx);
        let got = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the receiver was not woken")
            .unwrap();
        assert_eq!(got, ("n/1".into(), "none".into()));
    }

    #[tokio::test]
    async fn a_full_queue_drops_notes_and_holds_an_ask_until_there_is_room() {
        let (tx, mut rx) = queue();
        for n in 0..CAPACITY {
            assert!(tx.try_send(note(n)).is_ok());
        }
        assert!(matches!(tx.try_send(note(99)), Err(SendError::Full(_))));
        let handle = tx.handle();
        let (a, _reply) = ask("late");
        let sending = tokio::spawn(async move { handle.send(a).await.is_ok() });
        tokio::task::yield_now().await;
        assert!(!sending.is_finished(), "an ask went past a full queue");
        assert_eq!(method(rx.recv().await), "n/0");
        let sent = tokio::time::timeout(Duration::from_secs(5), sending)
            .await
            .expect("room made was not noticed")
            .unwrap();
        assert!(sent);
        for n in 1..CAPACITY {
            assert_eq!(method(rx.recv().await), format!("n/{n}"));
        }
        assert_eq!(method(rx.recv().await), "late");
        assert!(rx.is_empty());
    }

    #[tokio::test]
    async fn once_the_receiver_is_gone_sends_fail_and_queued_asks_are_answered_by_closing() {
        let (tx, rx) = queue();
        let handle = tx.handle();
        for n in 0..CAPACITY - 1 {
            assert!(tx.try_send(note(n)).is_ok());
        }
        let (queued, reply) = ask("queued");
        assert!(handle.send(queued).await.is_ok());
        let (waiting, _r) = ask("waiting");
        let sending = tokio::spawn(async move { handle.send(waiting).await.is_err() });
        tokio::task::yield_now().await;
        drop(rx);
        // The ask that was queued learns that no answer comes.
        assert!(reply.await.is_err());
        // The one waiting for room is refused.
        let refused = tokio::time::timeout(Duration::from_secs(5), sending)
            .await
            .expect("a sender waiting for room was not told")
            .unwrap();
        assert!(refused);
        assert!(matches!(tx.try_send(note(0)), Err(SendError::Closed(_))));
    }
}

//! One SSE stream's bounded event log, and the HTTP body that reads it.
//!
//! Writers append without ever blocking; readers follow with a cursor. A reader that
//! disconnects loses nothing the log still holds: a client resumes with
//! `Last-Event-ID: <stream>_<seq>`. A new reader replaces the old one (only one at a
//! time, so no message is delivered on two connections). When the log overflows, the
//! oldest *notifications* (progress, logs) are dropped; responses and server→client
//! requests are never dropped (a call's answer always reaches a client that reads
//! or resumes the stream; requests are bounded per session elsewhere), and a reader
//! that was behind simply continues after what is gone.

use bytes::Bytes;
use futures::Stream;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Bytes of notifications one stream's log may hold; beyond it the oldest ones are
/// dropped. With the per-stream event count this bounds what a slow or absent reader
/// can make Gantry buffer besides the answers themselves.
pub(super) const MAX_STREAM_BYTES: usize = 8 * 1024 * 1024;

/// A bounded, resumable log of one SSE stream's events.
pub struct EventStream {
    /// The stream's number within its session (0 = the standalone stream).
    pub id: u64,
    inner: Mutex<Inner>,
    notify: Notify,
    cap: usize,
    /// The bytes the log holds, once a reader has read the finished stream to its
    /// end (0 before): what keeping it only for a resumption costs. An atomic, so
    /// the session can weigh all its kept streams without taking their locks.
    read_whole: AtomicUsize,
}

/// One event of the log: its sequence number, the message, and whether it may be
/// dropped when the log overflows (notifications only).
struct Event {
    seq: u64,
    // `Arc<String>`, not `Arc<str>`: taking the String in costs no copy.
    json: Arc<String>,
    droppable: bool,
}

struct Inner {
    events: VecDeque<Event>,
    bytes: usize,
    next_seq: u64,
    closed: bool,
    reader: u64,
    attached: bool,
    delivered: u64,
}

impl Inner {
    /// Appends an event, then drops the oldest droppable ones while the log holds
    /// more than `cap` events or more than [`MAX_STREAM_BYTES`] (never the last).
    fn add(&mut self, json: String, droppable: bool, cap: usize) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += json.len();
        self.events.push_back(Event {
            seq,
            json: Arc::new(json),
            droppable,
        });
        while self.events.len() > cap || self.bytes > MAX_STREAM_BYTES {
            let last = self.events.len().saturating_sub(1);
            let Some(pos) = self.events.iter().take(last).position(|e| e.droppable) else {
                break;
            };
            if let Some(old) = self.events.remove(pos) {
                self.bytes -= old.json.len();
            }
        }
    }
}

/// What a reader finds at its cursor.
pub enum StreamRead {
    /// Events after the cursor.
    Events(Vec<(u64, Arc<String>)>),
    /// Nothing yet.
    Pending,
    /// The stream is finished and fully read.
    Closed,
    /// Another reader took over.
    Superseded,
}

impl EventStream {
    /// An empty stream keeping at most `cap` events.
    pub fn new(id: u64, cap: usize) -> Self {
        Self {
            id,
            inner: Mutex::new(Inner {
                events: VecDeque::new(),
                bytes: 0,
                next_seq: 1,
                closed: false,
                reader: 0,
                attached: false,
                delivered: 0,
            }),
            notify: Notify::new(),
            cap: cap.max(1),
            read_whole: AtomicUsize::new(0),
        }
    }

    /// Appends a response or a server→client request: never dropped. Returns false
    /// if the stream is already closed.
    pub fn push(&self, json: String) -> bool {
        self.append(json, false)
    }

    /// Appends a notification (progress, log, list change): dropped first when the
    /// log overflows. Returns false if the stream is already closed.
    pub fn push_notification(&self, json: String) -> bool {
        self.append(json, true)
    }

    fn append(&self, json: String, droppable: bool) -> bool {
        {
            let mut g = self.inner.lock();
            if g.closed {
                return false;
            }
            g.add(json, droppable, self.cap);
        }
        self.notify.notify_waiters();
        true
    }

    /// Appends the final message (if any) and closes the stream, atomically: a reader
    /// never sees the final message of a stream that is not yet closed.
    pub fn finish(&self, last: Option<String>) {
        {
            let mut g = self.inner.lock();
            if !g.closed {
                if let Some(json) = last {
                    g.add(json, false, self.cap);
                }
                g.closed = true;
            }
        }
        self.notify.notify_waiters();
    }

    /// Waits until the stream holds an event or is closed, or `until` is ready.
    pub async fn wait_event(&self, until: impl std::future::Future<Output = ()>) {
        tokio::pin!(until);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let g = self.inner.lock();
                if g.closed || !g.events.is_empty() {
                    return;
                }
            }
            tokio::select! {
                biased;
                _ = notified => {}
                _ = &mut until => return,
            }
        }
    }

    /// Waits up to `window` for the stream to close holding exactly one event (and
    /// nothing ever dropped): that event, taken out of the log (without a copy when
    /// no reader holds it), which the caller then delivers itself. `None` as soon as
    /// it is clear the stream is more than that.
    pub async fn final_within(&self, window: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + window;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut g = self.inner.lock();
                if g.closed {
                    return match (g.events.len(), g.next_seq) {
                        (1, 2) => {
                            g.delivered = 1;
                            let e = g.events.pop_front()?;
                            g.bytes -= e.json.len();
                            Some(Arc::try_unwrap(e.json).unwrap_or_else(|j| (*j).clone()))
                        }
                        _ => None,
                    };
                }
                if !g.events.is_empty() {
                    return None;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Closes the stream if nothing was ever written into it, for a response its
    /// caller delivers itself: `true` then. Atomic with writes, so nothing pushed
    /// before the close is lost and nothing after it is accepted.
    pub fn close_if_untouched(&self) -> bool {
        let untouched = {
            let mut g = self.inner.lock();
            let untouched = !g.closed && g.next_seq == 1;
            if untouched {
                g.closed = true;
                // The response, event 1, is delivered by the caller.
                g.next_seq = 2;
                g.delivered = 1;
            }
            untouched
        };
        if untouched {
            self.notify.notify_waiters();
        }
        untouched
    }

    /// Marks the stream finished; readers end after the last event.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// Whether the stream is finished.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Whether a reader is attached now.
    pub fn has_reader(&self) -> bool {
        self.inner.lock().attached
    }

    /// The bytes of a finished stream a reader has read to its end (its body ended
    /// because nothing was left, not because the client went away); 0 for any other
    /// stream. Such a stream is kept only in case the connection broke after its
    /// last bytes were handed over.
    pub fn read_whole_bytes(&self) -> usize {
        self.read_whole.load(Ordering::Relaxed)
    }

    /// The sequence number of the last event handed to any reader.
    pub fn delivered(&self) -> u64 {
        self.inner.lock().delivered
    }

    /// Attaches a new reader, detaching any previous one. Returns its token.
    pub fn attach(&self) -> u64 {
        let r = {
            let mut g = self.inner.lock();
            g.reader += 1;
            g.attached = true;
            g.reader
        };
        self.notify.notify_waiters();
        r
    }

    fn detach(&self, reader: u64) {
        let mut g = self.inner.lock();
        if g.reader == reader {
            g.attached = false;
        }
    }

    /// Reads what follows `after` for reader `reader`.
    pub fn read(&self, after: u64, reader: u64) -> StreamRead {
        let mut g = self.inner.lock();
        if g.reader != reader {
            return StreamRead::Superseded;
        }
        let out: Vec<(u64, Arc<String>)> = g
            .events
            .iter()
            .filter(|e| e.seq > after)
            .map(|e| (e.seq, e.json.clone()))
            .collect();
        if let Some(last) = out.last() {
            g.delivered = g.delivered.max(last.0);
            return StreamRead::Events(out);
        }
        if g.closed {
            // `max(1)`: an empty finished stream counts as read whole too.
            self.read_whole.store(g.bytes.max(1), Ordering::Relaxed);
            StreamRead::Closed
        } else {
            StreamRead::Pending
        }
    }
}

/// How a reader's HTTP body is shaped.
pub struct BodyOptions {
    /// Write `id:` lines (resumable streams).
    pub with_ids: bool,
    /// Send a priming event (`id` + empty data, plus `retry`) first (2025-11-25+).
    pub priming: Option<Duration>,
    /// Text written before anything else (the legacy `endpoint` event).
    pub preamble: Option<String>,
    /// Interval of keep-alive comments.
    pub keepalive: Duration,
    /// Ends the body (session end, server shutdown).
    pub cancel: CancellationToken,
    /// Called when the body is dropped (the client went away or the stream ended).
    pub on_drop: Option<Box<dyn FnOnce() + Send>>,
}

struct ReaderState {
    stream: Arc<EventStream>,
    cursor: u64,
    reader: u64,
    opts: BodyOptions,
    first: Option<String>,
    /// Parts of events read but not yet handed to the body.
    parts: VecDeque<Bytes>,
}

/// An event's message, shared with the log, as the bytes of a body part.
struct Shared(Arc<String>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The parts of `events`' SSE framing: the framing and small messages copied into
/// one part, each large message (without a raw newline to blank) a part of its own
/// sharing the log's bytes.
fn frame_events(
    events: &[(u64, Arc<String>)],
    stream: u64,
    with_ids: bool,
    parts: &mut VecDeque<Bytes>,
) {
    let mut out = String::new();
    for (seq, json) in events {
        let id = with_ids.then(|| format!("{stream}_{seq}"));
        if crate::sse::push_message_event_or_head(&mut out, id.as_deref(), json) {
            parts.push_back(Bytes::from(std::mem::take(&mut out)));
            parts.push_back(Bytes::from_owner(Shared(json.clone())));
            out.push_str(crate::sse::EVENT_END);
        }
    }
    if !out.is_empty() {
        parts.push_back(Bytes::from(out));
    }
}

impl Drop for ReaderState {
    fn drop(&mut self) {
        self.stream.detach(self.reader);
        if let Some(f) = self.opts.on_drop.take() {
            f();
        }
    }
}

/// The SSE body of a reader that starts after event `after`.
pub fn sse_body(
    stream: Arc<EventStream>,
    after: u64,
    opts: BodyOptions,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let reader = stream.attach();
    let mut first = opts.preamble.clone().unwrap_or_default();
    if let Some(retry) = opts.priming {
        first.push_str(&format!(
            "id: {}_{}\nretry: {}\ndata: \n\n",
            stream.id,
            after,
            retry.as_millis()
        ));
    }
    let st = ReaderState {
        stream,
        cursor: after,
        reader,
        opts,
        first: (!first.is_empty()).then_some(first),
        parts: VecDeque::new(),
    };
    futures::stream::unfold(st, |mut st| async move {
        if let Some(first) = st.first.take() {
            return Some((Ok(Bytes::from(first)), st));
        }
        if let Some(part) = st.parts.pop_front() {
            return Some((Ok(part), st));
        }
        loop {
            let stream = st.stream.clone();
            let notified = stream.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match st.stream.read(st.cursor, st.reader) {
                StreamRead::Events(evs) => {
                    frame_events(&evs, st.stream.id, st.opts.with_ids, &mut st.parts);
                    if let Some((seq, _)) = evs.last() {
                        st.cursor = *seq;
                    }
                    match st.parts.pop_front() {
                        Some(part) => return Some((Ok(part), st)),
                        None => continue,
                    }
                }
                StreamRead::Closed | StreamRead::Superseded => return None,
                StreamRead::Pending => {
                    tokio::select! {
                        _ = &mut notified => continue,
                        _ = tokio::time::sleep(st.opts.keepalive) => {
                            return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st));
                        }
                        _ = st.opts.cancel.cancelled() => return None,
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use futures::StreamExt;

    fn opts() -> BodyOptions {
        BodyOptions {
            with_ids: true,
            priming: None,
            preamble: None,
            keepalive: Duration::from_secs(60),
            cancel: CancellationToken::new(),
            on_drop: None,
        }
    }

    #[tokio::test]
    async fn replays_after_cursor_and_ends_when_closed() {
        let s = Arc::new(EventStream::new(3, 8));
        s.push("{\"a\":1}".into());
        s.push("{\"a\":2}".into());
        s.close();
        let (text, _) = body_of(&s, 1).await;
        assert_eq!(text, "id: 3_2\nevent: message\ndata: {\"a\":2}\n\n");
    }

    /// The body of a reader after `after`, read to its end: its text and its parts.
    async fn body_of(s: &Arc<EventStream>, after: u64) -> (String, Vec<Bytes>) {
        let body: Vec<Bytes> = sse_body(s.clone(), after, opts())
            .map(|b| b.unwrap())
            .collect()
            .await;
        let text = body
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        (text, body)
    }

    #[tokio::test]
    async fn large_messages_are_sent_apart_and_framed_alike() {
        let big = format!("{{\"t\":\"{}\"}}", "x".repeat(crate::sse::SENT_APART));
        let big_nl = format!("{{\"t\":\r\n\"{}\"}}", "y".repeat(crate::sse::SENT_APART));
        let messages = ["{\"a\":1}", &big, &big_nl, "{\"a\":2}", &big];
        let s = Arc::new(EventStream::new(2, 8));
        for m in messages {
            s.push(m.to_owned());
        }
        s.close();
        let (text, body) = body_of(&s, 0).await;
        let framed: String = (1..)
            .zip(messages)
            .map(|(seq, m)| crate::sse::message_event(Some(&format!("2_{seq}")), m))
            .collect();
        assert_eq!(text, framed);
        // Each large message without a newline to blank is a part of its own.
        let apart = body.iter().filter(|b| b.as_ref() == big.as_bytes()).count();
        assert_eq!(apart, 2, "{} parts", body.len());
    }

    fn seqs(s: &EventStream, after: u64, r: u64) -> Vec<u64> {
        match s.read(after, r) {
            StreamRead::Events(v) => v.into_iter().map(|e| e.0).collect(),
            _ => Vec::new(),
        }
    }

    #[tokio::test]
    async fn overflow_drops_the_oldest_notifications_never_answers() {
        let s = Arc::new(EventStream::new(1, 3));
        s.push("ask".into()); // 1: a server→client request
        for i in 0..5 {
            s.push_notification(format!("{i}")); // 2..=6
        }
        s.finish(Some("answer".into())); // 7
        let r = s.attach();
        // The request and the answer stay; of the notifications, the newest that fit.
        assert_eq!(seqs(&s, 0, r), [1, 6, 7]);
        // A reader far behind continues after what is gone, and still gets the answer.
        assert_eq!(seqs(&s, 3, r), [6, 7]);
    }

    #[tokio::test]
    async fn answers_are_kept_whatever_their_number() {
        // A 2025-03-26 batch of many requests: every response is kept.
        let s = Arc::new(EventStream::new(1, 2));
        for i in 0..300 {
            s.push(format!("{i}"));
        }
        s.close();
        let r = s.attach();
        assert_eq!(seqs(&s, 0, r).len(), 300);
    }

    #[tokio::test]
    async fn bytes_are_bounded_too() {
        let s = Arc::new(EventStream::new(1, 1000));
        let big = "x".repeat(MAX_STREAM_BYTES / 2 + 1);
        for _ in 0..3 {
            s.push_notification(big.clone());
        }
        let r = s.attach();
        assert_eq!(seqs(&s, 0, r), [3], "the oldest were dropped");
    }

    #[tokio::test]
    async fn new_reader_supersedes_old() {
        let s = Arc::new(EventStream::new(0, 8));
        let a = s.attach();
        let b = s.attach();
        assert!(matches!(s.read(0, a), StreamRead::Superseded));
        assert!(matches!(s.read(0, b), StreamRead::Pending));
    }
}

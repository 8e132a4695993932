//! Server-Sent Events: a bounded incremental parser (for HTTP backends) and the
//! formatting of events Gantry writes (for clients). No I/O here.

/// One parsed SSE event.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field; empty means `message`.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `id:` field, if the event set one.
    pub id: Option<String>,
    /// The `retry:` field in milliseconds, if set.
    pub retry: Option<u64>,
}

/// Why the parser gave up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    /// One event grew beyond the configured limit.
    #[error("SSE event larger than {0} bytes")]
    TooLarge(usize),
}

/// An incremental SSE parser with a cap on the size of one event.
#[derive(Debug)]
pub struct Parser {
    buf: Vec<u8>,
    current: Event,
    has_data: bool,
    size: usize,
    max: usize,
    skip_lf: bool,
}

impl Parser {
    /// A parser that refuses events larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            buf: Vec::new(),
            current: Event::default(),
            has_data: false,
            size: 0,
            max: max_event_bytes,
            skip_lf: false,
        }
    }

    /// Feeds bytes; returns the events completed by them.
    ///
    /// A line that arrives whole is read where it lies; only a line split across
    /// feeds is gathered (its start kept until its end comes).
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<Event>, SseError> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            if self.skip_lf {
                self.skip_lf = false;
                if bytes.first() == Some(&b'\n') {
                    bytes = bytes.get(1..).unwrap_or_default();
                    continue;
                }
            }
            let Some(i) = memchr::memchr2(b'\n', b'\r', bytes) else {
                self.buf.extend_from_slice(bytes);
                if self.buf.len() + self.size > self.max {
                    return Err(SseError::TooLarge(self.max));
                }
                break;
            };
            let (line, rest) = bytes.split_at(i);
            if rest.first() == Some(&b'\r') {
                self.skip_lf = true;
            }
            bytes = rest.get(1..).unwrap_or_default();
            let ev = if self.buf.is_empty() {
                self.line(line)?
            } else {
                let mut whole = std::mem::take(&mut self.buf);
                whole.extend_from_slice(line);
                let ev = self.line(&whole);
                // The buffer is kept for the next split line unless one very long
                // line made it large.
                if whole.capacity() <= KEPT_BUFFER {
                    whole.clear();
                    self.buf = whole;
                }
                ev?
            };
            out.extend(ev);
        }
        Ok(out)
    }

    fn line(&mut self, line: &[u8]) -> Result<Option<Event>, SseError> {
        if line.is_empty() {
            let done = std::mem::take(&mut self.current);
            let had = std::mem::replace(&mut self.has_data, false);
            self.size = 0;
            // An event with only an id (a priming event) is still reported: the id matters.
            return Ok((had || done.id.is_some() || done.retry.is_some()).then_some(done));
        }
        self.size += line.len();
        if self.size > self.max {
            return Err(SseError::TooLarge(self.max));
        }
        if line.first() == Some(&b':') {
            return Ok(None);
        }
        // The field is what precedes the first colon, the value what follows it and
        // one space. A colon is ASCII, so decoding the two parts apart reads the same
        // text as decoding the line (invalid UTF-8 becomes U+FFFD either way); valid
        // text, nearly always, is checked by the vectorized `from_utf8` alone.
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = line.get(i + 1..).unwrap_or_default();
                (
                    line.get(..i).unwrap_or_default(),
                    v.strip_prefix(b" ").unwrap_or(v),
                )
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(&utf8_lossy(value));
                self.has_data = true;
            }
            b"event" => self.current.event = utf8_lossy(value).into_owned(),
            b"id" if !value.contains(&0) => {
                self.current.id = Some(utf8_lossy(value).into_owned());
            }
            b"retry" => {
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                    self.current.retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(None)
    }
}

/// A line buffer larger than this is not kept between split lines.
const KEPT_BUFFER: usize = 64 * 1024;

/// `bytes` as text, invalid UTF-8 replaced by U+FFFD: `from_utf8` first (vectorized),
/// `from_utf8_lossy`'s byte-at-a-time walk (~7 instructions a byte) only for text
/// that is not valid.
fn utf8_lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Formats one `message` event. Raw newlines in `data` (only ever whitespace between
/// JSON tokens) are blanked so the event stays one `data:` line.
pub fn message_event(id: Option<&str>, data: &str) -> String {
    let mut s = String::with_capacity(data.len() + 48);
    push_message_event(&mut s, id, data);
    s
}

/// [`message_event`], appended to `s`.
pub fn push_message_event(s: &mut String, id: Option<&str>, data: &str) {
    push_event_head(s, id);
    if memchr::memchr2(b'\n', b'\r', data.as_bytes()).is_some() {
        push_blanked(s, data);
    } else {
        s.push_str(data);
    }
    s.push_str(EVENT_END);
}

/// [`push_message_event`] for data sent apart: the event's head goes into `s`, and
/// `true` says the data is to be sent after it as it is, followed by [`EVENT_END`],
/// so that a large message is not copied to be framed. Data with a raw newline (to
/// be blanked) is framed into `s` whole instead, and `false` returned.
pub fn push_message_event_head(s: &mut String, id: Option<&str>, data: &str) -> bool {
    push_event_head(s, id);
    if memchr::memchr2(b'\n', b'\r', data.as_bytes()).is_some() {
        push_blanked(s, data);
        s.push_str(EVENT_END);
        return false;
    }
    true
}

/// A `message` event of `data` framed into `s`, or, for data from [`SENT_APART`] on,
/// only its head as [`push_message_event_head`] writes it: `true` then says the data
/// is to be sent after `s` as it is, followed by [`EVENT_END`].
pub fn push_message_event_or_head(s: &mut String, id: Option<&str>, data: &str) -> bool {
    if data.len() < SENT_APART {
        push_message_event(s, id, data);
        return false;
    }
    push_message_event_head(s, id, data)
}

/// A `message` event's lines up to its data.
pub(crate) fn push_event_head(s: &mut String, id: Option<&str>) {
    if let Some(id) = id {
        s.push_str("id: ");
        s.push_str(id);
        s.push('\n');
    }
    s.push_str("event: message\ndata: ");
}

/// `data` with its raw newlines (whitespace between JSON tokens) blanked.
fn push_blanked(s: &mut String, data: &str) {
    s.extend(
        data.chars()
            .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
    );
}

/// Messages from this size on are sent apart from their event's framing, as they are;
/// a smaller one is cheaper copied into it than handed to the connection as one more
/// part.
pub const SENT_APART: usize = 4096;

/// What ends an event whose data was sent after [`push_message_event_head`].
pub const EVENT_END: &str = "\n\n";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn parses_split_events_and_priming() {
        let mut p = Parser::new(1024);
        assert!(
            p.feed(b"id: 1\nretry: 500\ndata:\n\n: keepalive\n\nevent: message\nda")
                .unwrap()
                .len()
                == 1
        );
        let evs = p.feed(b"ta: {\"a\":1}\r\ndata: x\r\n\r\n").unwrap();
        assert_eq!(
            evs,
            vec![Event {
                event: "message".into(),
                data: "{\"a\":1}\nx".into(),
                id: None,
                retry: None
            }]
        );
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        // As the SSE standard decodes a stream: U+FFFD for each invalid sequence;
        // a character split between two feeds is whole again.
        let mut p = Parser::new(1024);
        let evs = p
            .feed(b"id: \xff1\nevent: m\xc3\ndata: a\xffb\n\n")
            .unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, "a\u{FFFD}b");
        assert_eq!(evs[0].event, "m\u{FFFD}");
        assert_eq!(evs[0].id.as_deref(), Some("\u{FFFD}1"));
        assert!(p.feed(b"data: a\xe4").unwrap().is_empty());
        let evs = p.feed(b"\xb8\x96b\r\n\r\n").unwrap();
        assert_eq!(evs[0].data, "a\u{4e16}b");
    }

    #[test]
    fn caps_event_size() {
        let mut p = Parser::new(16);
        assert_eq!(p.feed(&[b'x'; 40]).unwrap_err(), SseError::TooLarge(16));
        let mut p = Parser::new(16);
        assert!(p.feed(b"data: 0123456789\ndata: 0123456789\n").is_err());
    }

    #[test]
    fn frames_owned_data_around_it_unless_it_must_be_blanked() {
        let mut head = String::new();
        assert!(push_message_event_head(&mut head, Some("3_1"), "{\"a\":1}"));
        let whole = format!("{head}{}{EVENT_END}", "{\"a\":1}");
        assert_eq!(whole, message_event(Some("3_1"), "{\"a\":1}"));
        let mut head = String::from("x\n");
        assert!(!push_message_event_head(&mut head, None, "{\r\n\"a\":1}"));
        assert_eq!(head, format!("x\n{}", message_event(None, "{\r\n\"a\":1}")));
    }

    #[test]
    fn formats_one_line() {
        assert_eq!(
            message_event(Some("3_1"), "{\n\"a\":1}"),
            "id: 3_1\nevent: message\ndata: { \"a\":1}\n\n"
        );
    }
}

#[cfg(test)]
mod props {
    //! Property tests: the parser never panics on what a backend sends, does not care
    //! how the bytes are chunked, and reads back what is written in SSE form.
    use super::*;
    use crate::testkit::config;
    use proptest::prelude::*;

    /// Feeds `chunks` one after the other: the events of each, or the first error.
    fn feed_chunks(max: usize, chunks: &[&[u8]]) -> Result<Vec<Event>, SseError> {
        let mut p = Parser::new(max);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(p.feed(c)?);
        }
        Ok(out)
    }

    /// `bytes` cut at `cuts` (positions taken modulo the length, in any order).
    fn split<'b>(bytes: &'b [u8], cuts: &[usize]) -> Vec<&'b [u8]> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        at.sort_unstable();
        let mut out = Vec::new();
        let mut from = 0;
        for i in at {
            out.push(&bytes[from..i]);
            from = i;
        }
        out.push(&bytes[from..]);
        out
    }

    /// Bytes that look like an SSE stream: field names, separators, line endings,
    /// a BOM, invalid UTF-8, mixed at random.
    fn sse_like() -> impl Strategy<Value = Vec<u8>> {
        let token = prop::sample::select(vec![
            &b"data"[..],
            b"data:",
            b"data: ",
            b"event:",
            b"id:",
            b"id: 1",
            b"retry:",
            b"retry: 10",
            b": c",
            b":",
            b" ",
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"x",
            b"{}",
            b"\0",
            b"\xef\xbb\xbf",
            b"\xff",
            b"\xe4\xb8",
            b"\x96",
        ]);
        prop::collection::vec(token, 0..60).prop_map(|t| t.concat())
    }

    #[derive(Debug, Clone)]
    enum Line {
        /// `data` and one of its spellings of the separator.
        Data(String, u8),
        Event(String),
        Id(String),
        Retry(u64),
        Comment(String),
        /// A field the parser ignores.
        Other(String, String),
    }

    /// A value on one line: no CR or LF.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof!["[^\r\n]{0,12}", "[ a-z:{}\"]{0,12}",]
    }

    fn line() -> impl Strategy<Value = Line> {
        prop_oneof![
            4 => (text(), 0u8..3).prop_map(|(d, s)| Line::Data(d, s)),
            1 => text().prop_map(Line::Event),
            1 => "[^\r\n\0]{0,8}".prop_map(Line::Id),
            1 => any::<u64>().prop_map(Line::Retry),
            1 => text().prop_map(Line::Comment),
            1 => ("[a-z]{1,6}".prop_filter("ignored field", |f| {
                !matches!(f.as_str(), "data" | "event" | "id" | "retry")
            }), text()).prop_map(|(f, v)| Line::Other(f, v)),
        ]
    }

    /// One event as written: its lines, and the event the parser must report.
    fn event() -> impl Strategy<Value = (Vec<Line>, Option<Event>)> {
        prop::collection::vec(line(), 0..6).prop_map(|lines| {
            let mut ev = Event::default();
            let mut has_data = false;
            for l in &lines {
                match l {
                    Line::Data(d, _) => {
                        if has_data {
                            ev.data.push('\n');
                        }
                        ev.data.push_str(d);
                        has_data = true;
                    }
                    Line::Event(e) => ev.event = e.clone(),
                    Line::Id(i) => ev.id = Some(i.clone()),
                    Line::Retry(r) => ev.retry = Some(*r),
                    Line::Comment(_) | Line::Other(..) => {}
                }
            }
            let reported = has_data || ev.id.is_some() || ev.retry.is_some();
            (lines, reported.then_some(ev))
        })
    }

    /// The text of a line (without its ending).
    fn written(l: &Line) -> String {
        match l {
            Line::Data(d, 0) if d.is_empty() => "data".into(),
            Line::Data(d, 1) if !d.starts_with(' ') => format!("data:{d}"),
            Line::Data(d, _) => format!("data: {d}"),
            Line::Event(e) => format!("event: {e}"),
            Line::Id(i) => format!("id: {i}"),
            Line::Retry(r) => format!("retry: {r}"),
            Line::Comment(c) => format!(":{c}"),
            Line::Other(f, v) => format!("{f}: {v}"),
        }
    }

    /// Writes events, each line (and each blank line that ends an event) with one of
    /// LF, CRLF and CR. An empty line right after a CR is never ended by a lone LF
    /// (that would make the pair one CRLF).
    fn write(events: &[(Vec<Line>, Option<Event>)], endings: &[u8]) -> String {
        let mut out = String::new();
        let mut endings = endings.iter().cycle();
        let mut after_cr = false;
        let mut end = |out: &mut String, empty: bool| {
            let mut e = match endings.next().copied().unwrap_or(0) % 3 {
                0 => "\n",
                1 => "\r\n",
                _ => "\r",
            };
            if empty && after_cr && e == "\n" {
                e = "\r\n";
            }
            after_cr = e == "\r";
            out.push_str(e);
        };
        for (lines, _) in events {
            for l in lines {
                let w = written(l);
                let empty = w.is_empty();
                out.push_str(&w);
                end(&mut out, empty);
            }
            end(&mut out, true);
        }
        out
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn any_chunking_gives_the_same_events(
            bytes in prop_oneof![any::<Vec<u8>>(), sse_like()],
            cuts in prop::collection::vec(any::<usize>(), 0..8),
            max in prop_oneof![0usize..64, Just(1 << 20)],
        ) {
            let whole = feed_chunks(max, &[&bytes]);
            let pieces = feed_chunks(max, &split(&bytes, &cuts));
            let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
            let bytewise = feed_chunks(max, &bytewise);
            prop_assert_eq!(&pieces, &whole);
            prop_assert_eq!(&bytewise, &whole);
            if let Ok(events) = &whole {
                for e in events {
                    // One event never outgrows the cap.
                    prop_assert!(e.data.len() <= 3 * max, "{e:?}");
                }
            }
        }

        #[test]
        fn written_events_come_back(
            events in prop::collection::vec(event(), 0..6),
            endings in prop::collection::vec(any::<u8>(), 1..16),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
        ) {
            let text = write(&events, &endings);
            let want: Vec<Event> = events.iter().filter_map(|(_, e)| e.clone()).collect();
            let got = feed_chunks(1 << 20, &split(text.as_bytes(), &cuts));
            prop_assert_eq!(got, Ok(want), "{:?}", text);
        }

        /// What Gantry writes to clients reads back: the id as is, the data with raw
        /// line breaks blanked.
        #[test]
        fn message_events_come_back(
            id in proptest::option::of("[0-9]{1,5}_[0-9]{1,5}"),
            data in prop_oneof![any::<String>(), "[a\r\n :{}\"]{0,12}"],
        ) {
            let text = message_event(id.as_deref(), &data);
            let got = feed_chunks(usize::MAX, &[text.as_bytes()]);
            let want = Event {
                event: "message".into(),
                data: data.replace(['\n', '\r'], " "),
                id,
                retry: None,
            };
            prop_assert_eq!(got, Ok(vec![want]));
        }
    }
}

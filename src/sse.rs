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
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    let (line, rest) = bytes.split_at(i);
                    self.buf.extend_from_slice(line);
                    if rest.first() == Some(&b'\r') {
                        self.skip_lf = true;
                    }
                    bytes = rest.get(1..).unwrap_or_default();
                    let line = std::mem::take(&mut self.buf);
                    if let Some(ev) = self.line(&line)? {
                        out.push(ev);
                    }
                }
                None => {
                    self.buf.extend_from_slice(bytes);
                    if self.buf.len() + self.size > self.max {
                        return Err(SseError::TooLarge(self.max));
                    }
                    bytes = &[];
                }
            }
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
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.find(':') {
            Some(i) => {
                let v = text.get(i + 1..).unwrap_or_default();
                (
                    text.get(..i).unwrap_or_default(),
                    v.strip_prefix(' ').unwrap_or(v),
                )
            }
            None => (text.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.current.event = value.to_owned(),
            "id" if !value.contains('\0') => self.current.id = Some(value.to_owned()),
            "retry" => {
                if let Ok(ms) = value.parse() {
                    self.current.retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(None)
    }
}

/// Formats one `message` event. Raw newlines in `data` (only ever whitespace between
/// JSON tokens) are blanked so the event stays one `data:` line.
pub fn message_event(id: Option<&str>, data: &str) -> String {
    let mut s = String::with_capacity(data.len() + 48);
    if let Some(id) = id {
        s.push_str("id: ");
        s.push_str(id);
        s.push('\n');
    }
    s.push_str("event: message\ndata: ");
    if data.contains(['\n', '\r']) {
        s.extend(
            data.chars()
                .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
        );
    } else {
        s.push_str(data);
    }
    s.push_str("\n\n");
    s
}

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
    fn caps_event_size() {
        let mut p = Parser::new(16);
        assert_eq!(p.feed(&[b'x'; 40]).unwrap_err(), SseError::TooLarge(16));
        let mut p = Parser::new(16);
        assert!(p.feed(b"data: 0123456789\ndata: 0123456789\n").is_err());
    }

    #[test]
    fn formats_one_line() {
        assert_eq!(
            message_event(Some("3_1"), "{\n\"a\":1}"),
            "id: 3_1\nevent: message\ndata: { \"a\":1}\n\n"
        );
    }
}

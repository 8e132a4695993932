//! Newline-delimited messages read from a pipe, each bounded in bytes.
//!
//! The bytes are read straight into one buffer and a line that arrived whole is handed
//! out where the read put it: no second buffer it is copied into (as a `BufReader` and
//! `read_until` would), and a line of any size takes as few reads as the pipe allows
//! instead of one per 8 KiB. A line longer than the limit is never buffered whole: its
//! first and last bytes are kept ([`Oversize`]) and the rest is dropped as it arrives.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The least room offered to each read. The pipe's own buffer is 64 KiB on Linux; a
/// read of 32 KiB takes a typical large answer in one system call, and only the bytes
/// actually read are touched.
const READ_ROOM: usize = 32 * 1024;

/// A buffer grown past this by a large message is given back once it is drained.
const KEEP_BUFFER: usize = 64 * 1024;

/// A line at least this long that starts the buffer is handed out with the buffer
/// ([`Line::Taken`]) rather than as a slice of it: its bytes reach the parser, and
/// its values the client, without a copy. (The buffer, past [`KEEP_BUFFER`], would
/// be given back anyway.)
const TAKE_FROM: usize = KEEP_BUFFER;

/// Bytes kept from the start and from the end of a discarded line.
const OVERSIZE_HEAD: usize = 4096;
const OVERSIZE_TAIL: usize = 256;

/// What one read produced.
pub(super) enum Line<'a> {
    /// A line, without its `\n`.
    Data(&'a [u8]),
    /// A large line, without its `\n`, handed out with the buffer it was read into.
    Taken(bytes::Bytes),
    /// A line over the limit, discarded; its first and last bytes are kept to tell
    /// whose answer it was.
    TooLong(Oversize),
    /// The pipe closed and every line before it was handed out.
    Eof,
}

/// What is kept of a discarded line.
#[derive(Default)]
pub(super) struct Oversize {
    /// Its length.
    pub bytes: usize,
    /// Its first bytes, up to [`OVERSIZE_HEAD`].
    pub head: Vec<u8>,
    /// Its last bytes, up to [`OVERSIZE_TAIL`].
    pub tail: Vec<u8>,
}

impl Oversize {
    fn feed(&mut self, part: &[u8]) {
        self.bytes += part.len();
        let room = OVERSIZE_HEAD.saturating_sub(self.head.len());
        self.head
            .extend_from_slice(part.get(..room.min(part.len())).unwrap_or_default());
        let keep = part.len().min(OVERSIZE_TAIL);
        self.tail
            .extend_from_slice(part.get(part.len() - keep..).unwrap_or_default());
        let over = self.tail.len().saturating_sub(OVERSIZE_TAIL);
        self.tail.drain(..over);
    }
}

/// Reads `\n`-terminated lines from `R`, each at most a given number of bytes.
pub(super) struct LineReader<R> {
    r: R,
    /// Bytes read; those before `start` were handed out.
    buf: Vec<u8>,
    start: usize,
    /// Where the search for the next `\n` goes on (the bytes before it have none).
    searched: usize,
    /// The length of the last line taken ([`Line::Taken`]): the room a large line
    /// under way is given at once, rather than by doublings that copy it each time.
    large: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(super) fn new(r: R) -> Self {
        Self {
            r,
            buf: Vec::new(),
            start: 0,
            searched: 0,
            large: 0,
        }
    }

    /// The next line; a line over `max` bytes is discarded and reported as
    /// [`Line::TooLong`]. The buffer never holds more than `max` bytes of a line
    /// plus one read, and its capacity stays under 2 × (`max` + [`READ_ROOM`]).
    pub(super) async fn next(&mut self, max: usize) -> std::io::Result<Line<'_>> {
        let mut oversize: Option<Oversize> = None;
        loop {
            let unsearched = self.buf.get(self.searched..).unwrap_or_default();
            if let Some(i) = memchr::memchr(b'\n', unsearched) {
                let end = self.searched + i;
                let line = self.start..end;
                let whole = self.start == 0 && end >= TAKE_FROM;
                self.start = end + 1;
                self.searched = self.start;
                if oversize.is_none() && end <= max && whole {
                    // What follows the line (little, if anything) stays, copied.
                    let rest = self.buf.get(end + 1..).unwrap_or_default().to_vec();
                    let mut taken = std::mem::replace(&mut self.buf, rest);
                    taken.truncate(end);
                    self.start = 0;
                    self.searched = 0;
                    self.large = end + 1;
                    return Ok(Line::Taken(bytes::Bytes::from(taken)));
                }
                let part = self.buf.get(line).unwrap_or_default();
                if oversize.is_some() || part.len() > max {
                    let mut o = oversize.unwrap_or_default();
                    o.feed(part);
                    return Ok(Line::TooLong(o));
                }
                return Ok(Line::Data(part));
            }
            // No whole line: keep the partial one (unless it is already too long) at
            // the front and read more after it.
            let pending = self.buf.get(self.start..).unwrap_or_default();
            if oversize.is_some() || pending.len() > max {
                oversize.get_or_insert_with(Oversize::default).feed(pending);
                self.buf.clear();
            } else if self.start > 0 {
                self.buf.copy_within(self.start.., 0);
                self.buf.truncate(self.buf.len() - self.start);
            }
            if self.buf.is_empty() && self.buf.capacity() > KEEP_BUFFER {
                self.buf = Vec::new();
            }
            self.start = 0;
            self.searched = self.buf.len();
            // A line under way gets the room the last large one took, at once (never
            // more than the limit allows); an idle reader keeps only the read room.
            let room = if self.buf.is_empty() {
                READ_ROOM
            } else {
                self.large
                    .min(max.saturating_add(1))
                    .saturating_sub(self.buf.len())
                    .max(READ_ROOM)
            };
            self.buf.reserve(room);
            if self.r.read_buf(&mut self.buf).await? == 0 {
                return Ok(self.at_eof(oversize));
            }
        }
    }

    /// The pipe closed: a last line without `\n` still counts.
    fn at_eof(&mut self, oversize: Option<Oversize>) -> Line<'_> {
        if let Some(o) = oversize {
            return Line::TooLong(o);
        }
        let last = self.start;
        self.start = self.buf.len();
        self.searched = self.start;
        match self.buf.get(last..) {
            Some(line) if !line.is_empty() => Line::Data(line),
            _ => Line::Eof,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use proptest::prelude::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// Hands out `data` at most `chunk` bytes per read.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        chunk: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self
                .chunk
                .min(out.remaining())
                .min(self.data.len() - self.at);
            let at = self.at;
            out.put_slice(&self.data[at..at + n]);
            self.at += n;
            Poll::Ready(Ok(()))
        }
    }

    fn reader(data: &[u8], chunk: usize) -> LineReader<Trickle> {
        LineReader::new(Trickle {
            data: data.to_vec(),
            at: 0,
            chunk,
        })
    }

    /// What a reader hands out, line by line, with `max` for each line.
    async fn read_all(r: &mut LineReader<Trickle>, max: usize) -> Vec<Result<Vec<u8>, usize>> {
        let mut out = Vec::new();
        for _ in 0..10_000 {
            match r.next(max).await.unwrap() {
                Line::Data(line) => out.push(Ok(line.to_vec())),
                Line::Taken(line) => out.push(Ok(line.to_vec())),
                Line::TooLong(o) => out.push(Err(o.bytes)),
                Line::Eof => return out,
            }
        }
        panic!("no end");
    }

    #[tokio::test]
    async fn bounded_lines() {
        for chunk in [1, 4, 7, 1000] {
            let mut r = reader(
                b"short\nthis line is far too long\nok\n\nlast-no-newline",
                chunk,
            );
            let got = read_all(&mut r, 15).await;
            let want: Vec<Result<Vec<u8>, usize>> = vec![
                Ok(b"short".to_vec()),
                Err(25),
                Ok(b"ok".to_vec()),
                Ok(Vec::new()),
                Ok(b"last-no-newline".to_vec()),
            ];
            assert_eq!(got, want, "chunk {chunk}");
        }
    }

    #[tokio::test]
    async fn an_oversize_line_keeps_its_head_and_tail() {
        let mut line = br#"{"jsonrpc":"2.0","id":41,"result":{"t":""#.to_vec();
        line.extend(std::iter::repeat_n(b'x', 100_000));
        line.extend_from_slice(br#""},"end":1}"#);
        let whole = line.len();
        line.extend_from_slice(b"\nnext\n");
        for chunk in [1000, 64 * 1024] {
            let mut r = reader(&line, chunk);
            let Line::TooLong(o) = r.next(10_000).await.unwrap() else {
                panic!("not too long");
            };
            assert_eq!(o.bytes, whole);
            assert_eq!(o.head, line[..OVERSIZE_HEAD]);
            assert_eq!(o.tail, line[whole - OVERSIZE_TAIL..whole]);
            assert!(matches!(r.next(10_000).await.unwrap(), Line::Data(b"next")));
            // The discarded line was never held whole.
            assert!(
                r.buf.capacity() < 10_000 + 2 * READ_ROOM,
                "{}",
                r.buf.capacity()
            );
        }
    }

    /// Large lines between small ones, read in chunks of any size, come out whole
    /// and in order; a large one that starts the buffer comes with the buffer
    /// ([`Line::Taken`]), and the buffer stays within its bound throughout.
    #[tokio::test]
    async fn large_lines_come_whole_with_their_buffer() {
        let sizes = [
            10,
            TAKE_FROM - 1,
            TAKE_FROM,
            3,
            TAKE_FROM + 1,
            150_000,
            0,
            7,
            200_000,
            5,
        ];
        let lines: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|k| b'a' + ((i + k) % 26) as u8).collect())
            .collect();
        let data = lines.join(&b'\n');
        let max = 300_000;
        for chunk in [1000, 4096, 65_536, 1 << 20] {
            let mut r = reader(&data, chunk);
            let mut taken = 0;
            for (i, want) in lines.iter().enumerate() {
                let got = match r.next(max).await.unwrap() {
                    Line::Data(l) => l.to_vec(),
                    Line::Taken(l) => {
                        taken += 1;
                        assert!(l.len() >= TAKE_FROM, "line {i} taken at {} bytes", l.len());
                        l.to_vec()
                    }
                    Line::TooLong(o) => panic!("line {i}: too long at {}", o.bytes),
                    Line::Eof => panic!("line {i}: eof"),
                };
                assert!(
                    got == *want,
                    "chunk {chunk}, line {i}: {} bytes for {}",
                    got.len(),
                    want.len()
                );
                assert!(
                    r.buf.capacity() <= 2 * (max + READ_ROOM),
                    "chunk {chunk}: {}",
                    r.buf.capacity()
                );
            }
            assert!(matches!(r.next(max).await.unwrap(), Line::Eof));
            // Each large line read in more than one piece started a fresh buffer.
            if chunk < TAKE_FROM {
                assert!(taken >= 3, "chunk {chunk}: {taken} lines taken");
            }
        }
    }

    proptest! {
        /// Any lines, read in any chunk size, come out as `split` makes them: those
        /// within the limit whole, the others as their length.
        #[test]
        fn lines_come_out_as_split_makes_them(
            lines in proptest::collection::vec(proptest::collection::vec(
                prop_oneof![Just(b'a'), Just(b'{'), Just(b'\r'), Just(b'"')], 0..300), 0..20),
            chunk in 1usize..600,
            max in 0usize..250,
            newline_at_end: bool,
        ) {
            let mut data = lines.join(&b'\n');
            if newline_at_end && !lines.is_empty() {
                data.push(b'\n');
            }
            let mut want: Vec<Result<Vec<u8>, usize>> = Vec::new();
            let mut parts: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
            if parts.last().is_some_and(|p| p.is_empty()) {
                parts.pop();
            }
            for p in parts {
                want.push(if p.len() > max { Err(p.len()) } else { Ok(p.to_vec()) });
            }
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let got = rt.block_on(async {
                let mut r = reader(&data, chunk);
                read_all(&mut r, max).await
            });
            prop_assert_eq!(got, want);
        }
    }
}

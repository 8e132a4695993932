//! Raw JSON text that Gantry relays without interpreting ([`Raw`]), and the check
//! that makes it from untrusted bytes ([`check`]).
//!
//! A call's params and a backend's result are most of a message's bytes and Gantry
//! reads little of them, but it must never pass on text that is not JSON. Checking
//! is what a large message costs: serde_json checks a value it skips eight bytes at
//! a time; [`check`] finds each string's end with a vectorized search for `"` and
//! `\`, checks the bytes before it for control characters with a vectorized minimum,
//! leaves UTF-8 to one pass over the whole message (`str::from_utf8`, or the
//! conversion to a shared [`ByteString`] that [`Source::shared`] parses), and hands
//! out an object's top-level members as it goes (a message's envelope). A 10 KB call went
//! from 191k to 152k instructions, a 100 KB one from 1.51M to 1.12M (BENCHMARKS.md).
//!
//! What [`check`] accepts is what serde_json accepts when it skips a value
//! (`IgnoredAny`, `RawValue`), which is what Gantry relied on before: RFC 8259 JSON,
//! any nesting depth, a `\u` escape only needing four hex digits (a lone surrogate is
//! the receiving parser's business), plus valid UTF-8 everywhere. Proptested against
//! serde_json below.

use super::members::{quote_or_backslash, short_special, skip_ws, Members};
use bytestring::ByteString;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// JSON text known to be one valid JSON value, with no whitespace around it.
///
/// Made from untrusted text only through [`Raw::from_string`] (which checks it), or
/// from text a JSON writer produced or a checked message held.
///
/// A large object also keeps where its top-level members are, found the first time
/// they are asked for ([`Raw::members`]): a call's params are read by several layers
/// (the tool's name, `_meta` for a trace context, a progress token, stateless-era
/// keys), and each walk of them skipped the whole of the arguments beside.
///
/// A request's params parsed with their message ([`check_message`]) keep what that
/// pass found instead: their members and those of their `_meta`, whatever their size.
#[derive(Clone)]
pub struct Raw {
    /// The text: its own, or a slice of the message it came in ([`Source::raw`]).
    text: ByteString,
    /// Shared by clones: a relayed call's params are cloned with their index.
    index: OnceLock<Arc<Index>>,
}

/// Where an object's members are, once found.
struct Index {
    /// `None`: too many members to keep (each reader walks them).
    members: Option<Vec<MemberSpan>>,
    /// The members of one member's object value (`_meta`), found by the check that
    /// made this `Raw`: where that value starts, and its members.
    nested: Option<(u32, Vec<MemberSpan>)>,
}

/// Where one member of an object is: its key (as written) and its value.
#[derive(Clone, Copy, Debug, PartialEq)]
struct MemberSpan {
    key: (u32, u32),
    value: (u32, u32),
}

impl MemberSpan {
    /// The spans of a member found in a text; `None` past 4 GiB.
    fn of(key: &Span, value: &Span) -> Option<Self> {
        let at = |r: &Span| Some((u32::try_from(r.start).ok()?, u32::try_from(r.end).ok()?));
        Some(MemberSpan {
            key: at(key)?,
            value: at(value)?,
        })
    }

    /// This member's place in a text that starts `origin` bytes into this one's.
    fn moved(&mut self, origin: u32) {
        let back = |(from, to): &mut (u32, u32)| {
            *from = from.saturating_sub(origin);
            *to = to.saturating_sub(origin);
        };
        back(&mut self.key);
        back(&mut self.value);
    }
}

/// Objects below this size are walked each time: the walk is cheaper than an index.
const INDEXED: usize = 2048;

/// Objects with more members than this are walked each time, so that an index never
/// costs more memory than a few KB (a 4 MB object of tiny members would need 10 MB).
/// A call's params have a handful.
const MAX_INDEXED_MEMBERS: usize = 256;

impl PartialEq for Raw {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Raw {}

impl std::hash::Hash for Raw {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

/// The text a message was parsed from, and the buffer holding it when the message
/// came in one: values are then taken from that buffer rather than copied, so a
/// call's params and a backend's result cross Gantry without a copy of their bytes.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    text: &'a str,
    shared: Option<&'a ByteString>,
}

/// Values shorter than this are copied out of a shared buffer rather than sliced: a
/// copy costs no more than sharing them, and an id or a method name kept for long
/// does not keep a large message alive.
const SHARE_FROM: usize = 1024;

impl<'a> Source<'a> {
    /// Text parsed where it is: values are copied out of it.
    pub(crate) fn borrowed(text: &'a str) -> Self {
        Self { text, shared: None }
    }

    /// A whole buffer: large values are slices of it.
    pub(crate) fn shared(buf: &'a ByteString) -> Self {
        Self {
            text: buf,
            shared: Some(buf),
        }
    }

    /// The text.
    pub(crate) fn text(&self) -> &'a str {
        self.text
    }

    /// `part`, a slice of this source's text, as a [`Raw`] (known valid JSON): the
    /// same bytes when the source is a buffer and `part` is large, a copy otherwise.
    pub(crate) fn raw(&self, part: &str) -> Raw {
        match self.shared {
            Some(buf) if part.len() >= SHARE_FROM && within(buf, part) => {
                Raw::trusted(buf.slice_ref(part))
            }
            _ => Raw::trusted(part),
        }
    }

    /// This source narrowed to `part` (a slice of it), for one element of a batch.
    pub(crate) fn narrowed(&self, part: &'a str) -> Self {
        Self {
            text: part,
            shared: self.shared.filter(|buf| within(buf, part)),
        }
    }
}

/// Whether `part` lies inside `outer` (as memory, not as text).
pub(crate) fn within(outer: &str, part: &str) -> bool {
    let (o, p) = (outer.as_ptr() as usize, part.as_ptr() as usize);
    p >= o && p.saturating_add(part.len()) <= o.saturating_add(outer.len())
}

/// Why text is not one JSON value: where it stops being JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {at}")]
pub struct NotJson {
    /// Byte offset of the first byte that cannot continue valid JSON (the text's
    /// length when it ends too early).
    pub at: usize,
}

impl Raw {
    /// Checks `text` and keeps the value it holds (surrounding whitespace dropped).
    pub fn from_string(text: String) -> Result<Self, NotJson> {
        let value = check(text.as_bytes())?;
        if value.len() == text.len() {
            return Ok(Self::trusted(text.into_boxed_str()));
        }
        Ok(Self::trusted(value))
    }

    /// Text written by Gantry from pieces that are each valid JSON (members of checked
    /// messages, strings it escaped): valid by construction, so not checked again,
    /// which for a large value is a pass over every byte. Checked in debug builds
    /// (the tests), where a writer that broke the rule panics.
    pub fn written(text: String) -> Self {
        debug_assert!(
            check(text.as_bytes()).is_ok_and(|v| v.len() == text.len()),
            "written JSON is not one value without surrounding space: {text}"
        );
        Self::trusted(text)
    }

    /// Text already known to be one JSON value with no whitespace around it: written
    /// by a JSON writer, or a slice of a checked message.
    pub(crate) fn trusted(text: impl Into<ByteString>) -> Self {
        Self {
            text: text.into(),
            index: OnceLock::new(),
        }
    }

    /// A message's `params` (or a response's `result`, see
    /// [`ParamsShape::with_result`]) (`text`, a slice of the checked `message`), with
    /// what [`check_message`] found of its members and its `_meta`'s.
    pub(crate) fn params_of(message: Source<'_>, text: &str, shape: ParamsShape) -> Self {
        let raw = message.raw(text);
        let origin = (text.as_ptr() as usize).wrapping_sub(message.text.as_ptr() as usize);
        let Some(origin) = shape
            .params
            .at
            .filter(|&at| usize::try_from(at).is_ok_and(|at| at == origin))
        else {
            return raw;
        };
        let relative = |mut spans: Vec<MemberSpan>| {
            spans.iter_mut().for_each(|s| s.moved(origin));
            spans
        };
        let nested = shape
            .meta
            .at
            .map(|at| (at.saturating_sub(origin), relative(shape.meta.spans)));
        let _ = raw.index.set(Arc::new(Index {
            members: Some(relative(shape.params.spans)),
            nested,
        }));
        raw
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        &self.text
    }

    /// The JSON text, owned.
    pub fn into_string(self) -> String {
        self.text.into()
    }

    /// The JSON text's bytes, without a copy.
    pub fn into_bytes(self) -> bytes::Bytes {
        self.text.into_bytes()
    }

    /// The top-level members of this value if it is an object (key as written,
    /// value text), in order, a repeated key each time; nothing otherwise. A large
    /// object is walked once and its members' places kept for the next reader.
    pub fn members(&self) -> RawMembers<'_> {
        let text: &str = &self.text;
        let index = match self.index.get() {
            Some(index) => index,
            None if text.len() < INDEXED || u32::try_from(text.len()).is_err() => {
                return RawMembers(Inner::Walk(super::members::members(text)));
            }
            None => self.index.get_or_init(|| {
                let mut walk = super::members::members(text);
                let spans: Option<Vec<MemberSpan>> = std::iter::from_fn(|| walk.next_spans())
                    .take(MAX_INDEXED_MEMBERS + 1)
                    .map(|(k, v)| MemberSpan::of(&k, &v))
                    .collect();
                Arc::new(Index {
                    members: spans.filter(|s| s.len() <= MAX_INDEXED_MEMBERS),
                    nested: None,
                })
            }),
        };
        match &index.members {
            Some(spans) => RawMembers(Inner::Indexed {
                text,
                spans: spans.iter(),
            }),
            None => RawMembers(Inner::Walk(super::members::members(text))),
        }
    }

    /// The text of the last member named `key` (JSON parsers that act on a repeated
    /// key keep its last value), found among [`Raw::members`].
    pub fn member(&self, key: &str) -> Option<&str> {
        super::members::last_named(self.members(), key)
    }

    /// The members of `value`, an object value of one of this object's members (a
    /// slice of [`Raw::get`]): as the check that made this `Raw` found them, or
    /// walked.
    pub fn members_of<'a>(&'a self, value: &'a str) -> RawMembers<'a> {
        self.nested_members(value)
            .unwrap_or_else(|| RawMembers(Inner::Walk(super::members::members(value))))
    }

    /// Whether a top-level key (as written) passes `top`, or a key of the object
    /// value of `_meta` passes `meta`, answered from the members the check that made
    /// this `Raw` kept ([`Raw::params_of`]): a look at a few keys, where a search of
    /// the text costs a vector scan per needle. `None` when they are not at hand (a
    /// `Raw` not made by that check, a large one indexed later without its `_meta`,
    /// a `_meta` named more than once or written with escapes): the caller then
    /// searches or walks the text.
    pub fn any_key(&self, top: impl Fn(&str) -> bool, meta: impl Fn(&str) -> bool) -> Option<bool> {
        let index = self.index.get()?;
        let part = |(from, to): (u32, u32)| self.text.get(from as usize..to as usize);
        let mut meta_value = None;
        for span in index.members.as_ref()? {
            let key = part(span.key)?;
            if top(key) {
                return Some(true);
            }
            if super::members::key_is(key, "_meta") && meta_value.replace(span.value).is_some() {
                return None;
            }
        }
        let Some(value) = meta_value else {
            return Some(false);
        };
        if !part(value)?.starts_with('{') {
            // Not an object: no keys.
            return Some(false);
        }
        match &index.nested {
            Some((at, spans)) if *at == value.0 => {
                Some(spans.iter().any(|s| part(s.key).is_some_and(&meta)))
            }
            _ => None,
        }
    }

    /// The members of `value`, the object value of one of this object's members
    /// (a slice of [`Raw::get`]), if the check that made this `Raw` found them
    /// (a request's `_meta`, see [`Raw::params_of`]).
    pub fn nested_members<'a>(&'a self, value: &'a str) -> Option<RawMembers<'a>> {
        let (at, spans) = self.index.get()?.nested.as_ref()?;
        let offset = (value.as_ptr() as usize).checked_sub(self.text.as_ptr() as usize)?;
        (u32::try_from(offset).ok()? == *at).then(|| {
            RawMembers(Inner::Indexed {
                text: &self.text,
                spans: spans.iter(),
            })
        })
    }
}

/// The iterator of [`Raw::members`].
pub struct RawMembers<'a>(Inner<'a>);

enum Inner<'a> {
    /// A small object, walked.
    Walk(Members<'a>),
    /// A large object's kept member places.
    Indexed {
        text: &'a str,
        spans: std::slice::Iter<'a, MemberSpan>,
    },
}

impl<'a> Iterator for RawMembers<'a> {
    type Item = Member<'a>;

    fn next(&mut self) -> Option<Member<'a>> {
        match &mut self.0 {
            Inner::Walk(walk) => walk.next(),
            Inner::Indexed { text, spans } => {
                let span = spans.next()?;
                let part = |(from, to): (u32, u32)| text.get(from as usize..to as usize);
                Some((part(span.key)?, part(span.value)?))
            }
        }
    }
}

impl From<Box<serde_json::value::RawValue>> for Raw {
    /// serde_json's raw value (already checked by its parser), without a copy.
    fn from(raw: Box<serde_json::value::RawValue>) -> Self {
        Self::trusted(Box::<str>::from(raw))
    }
}

impl fmt::Debug for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Display for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Raw {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<serde_json::value::RawValue>::deserialize(d).map(Self::from)
    }
}

/// Checks that `b` is one JSON value, optionally surrounded by whitespace, in
/// valid UTF-8; returns the value's text.
pub fn check(b: &[u8]) -> Result<&str, NotJson> {
    check_with_members(b, &mut Vec::new())
}

/// A member of an object: its key as written (quotes and escapes included) and its
/// value's text.
pub type Member<'a> = (&'a str, &'a str);

/// [`check`], and when the value is an object, its members in order (each repeat
/// of a key included) into `members`, found in the same pass.
pub fn check_with_members<'a>(
    b: &'a [u8],
    members: &mut Vec<Member<'a>>,
) -> Result<&'a str, NotJson> {
    check_message(b, members, None)
}

/// [`check_with_members`] for a JSON-RPC message, also finding, when given `shape`,
/// the members of its `params` and of their `_meta` (the last one), which several
/// layers read: kept with the params ([`Raw::params_of`]), they are not walked again.
pub fn check_message<'a>(
    b: &'a [u8],
    members: &mut Vec<Member<'a>>,
    shape: Option<&mut ParamsShape>,
) -> Result<&'a str, NotJson> {
    let text = std::str::from_utf8(b).map_err(|e| NotJson {
        at: e.valid_up_to(),
    })?;
    check_text(text, members, shape)
}

/// [`check_message`] of text already known to be UTF-8.
pub fn check_text<'a>(
    text: &'a str,
    members: &mut Vec<Member<'a>>,
    shape: Option<&mut ParamsShape>,
) -> Result<&'a str, NotJson> {
    let span = structure(text, members, shape).map_err(|at| NotJson { at })?;
    text.get(span).ok_or(NotJson { at: 0 })
}

type Span = std::ops::Range<usize>;

/// What [`check_message`] found of a message's `params`: the members of `params` if
/// it is an object, and those of its `_meta` if that is one, with where each opens.
/// With [`ParamsShape::with_result`], a response's `result` is kept the same way.
#[derive(Default)]
pub struct ParamsShape {
    params: Level,
    meta: Level,
    /// Whether `result` is kept as `params` is.
    result: bool,
}

/// One object of a [`ParamsShape`].
#[derive(Default)]
struct Level {
    /// Where the object opens in the message; `None` when it was not found.
    at: Option<u32>,
    /// Its members' keys (as written) and values.
    spans: Vec<MemberSpan>,
}

impl Level {
    fn begin(&mut self, at: usize) {
        self.spans.clear();
        // A message's params and `_meta` have a few members; none past 4 GiB.
        self.spans.reserve(8);
        self.at = u32::try_from(at).ok();
    }
}

impl ParamsShape {
    /// A shape that also keeps a response's `result` and its `_meta` (read by a
    /// stateless-era backend's connection and by the stateless front, which shape
    /// every result it answers for the era).
    pub fn with_result() -> Self {
        Self {
            result: true,
            ..Self::default()
        }
    }

    /// The object opening at `at` is the value of `params` (depth 1) or of its
    /// `_meta` (depth 2); a repeat replaces what the one before had.
    fn begin(&mut self, depth: usize, at: usize) {
        if depth == 1 {
            self.params.begin(at);
            self.meta.at = None;
            self.meta.spans.clear();
        } else {
            self.meta.begin(at);
        }
    }

    /// A member of the object at `depth` (2: params, 3: `_meta`).
    fn push(&mut self, depth: usize, key: &Span, value: &Span) {
        let level = if depth == 2 {
            &mut self.params
        } else {
            &mut self.meta
        };
        match MemberSpan::of(key, value) {
            Some(span) if level.at.is_some() && level.spans.len() < MAX_INDEXED_MEMBERS => {
                level.spans.push(span);
            }
            // Past 4 GiB, or more members than an index keeps (a body of tiny
            // members would take several times its size in places): not kept, and
            // read by walking.
            _ => {
                level.at = None;
                level.spans.clear();
            }
        }
    }
}

/// The keys (as written, unescaped) of the objects a [`ParamsShape`] holds, from
/// the message down (`result` in place of `params` when it keeps results).
const SHAPE_PATH: [&[u8]; 2] = [b"\"params\"", b"\"_meta\""];

/// Whether the member `key` (as written) of an object `depth` containers deep is
/// on the path a [`ParamsShape`] keeps.
fn on_shape_path(key: Option<&[u8]>, depth: usize, result: bool) -> bool {
    match (depth, key) {
        (1, Some(b"\"result\"")) => result,
        (_, Some(k)) => SHAPE_PATH.get(depth.wrapping_sub(1)) == Some(&k),
        (_, None) => false,
    }
}

/// The JSON grammar over `text`, iteratively: nesting costs a bit of stack per
/// level, bounded by the text's length. A top-level object's members go into
/// `members`, and those of the objects down [`SHAPE_PATH`] into `shape`.
fn structure<'a>(
    text: &'a str,
    members: &mut Vec<Member<'a>>,
    mut shape: Option<&mut ParamsShape>,
) -> Result<Span, usize> {
    let b = text.as_bytes();
    let result = shape.as_ref().is_some_and(|s| s.result);
    let mut open = Open::default();
    let start = skip_ws(b, 0);
    let top_object = b.get(start) == Some(&b'{');
    // How many of the open containers, from the outside, are objects whose members
    // are kept: the top-level object, then those down the path.
    let mut kept = usize::from(top_object);
    // The key and value start of the member being read in each of those.
    let mut member: [(Span, usize); 3] = Default::default();
    let mut i = start;
    loop {
        // A value starts at `i`.
        match b.get(i) {
            Some(b'"') => i = string(b, i)?,
            Some(b'{') => {
                let at = i;
                let depth = open.len();
                // The value of the member down the path in an object kept.
                let on_path = depth == kept
                    && member
                        .get(depth.wrapping_sub(1))
                        .is_some_and(|(key, _)| on_shape_path(b.get(key.clone()), depth, result));
                let shape_here = shape.as_deref_mut().filter(|_| on_path);
                if let Some(shape) = shape_here {
                    shape.begin(depth, at);
                }
                i = skip_ws(b, i + 1);
                if b.get(i) == Some(&b'}') {
                    i += 1;
                } else {
                    open.push(true);
                    if on_path && shape.is_some() {
                        kept += 1;
                    }
                    i = member_key(b, i, open.len(), kept, &mut member)?;
                    continue;
                }
            }
            Some(b'[') => {
                i = skip_ws(b, i + 1);
                if b.get(i) == Some(&b']') {
                    i += 1;
                } else {
                    open.push(false);
                    continue;
                }
            }
            Some(b't') => i = literal(b, i, b"true")?,
            Some(b'f') => i = literal(b, i, b"false")?,
            Some(b'n') => i = literal(b, i, b"null")?,
            Some(b'-' | b'0'..=b'9') => i = number(b, i)?,
            _ => return Err(i),
        }
        // A value ended at `i`: close what it completes, up to the next value.
        loop {
            let Some(object) = open.last() else {
                let end = i;
                return if skip_ws(b, i) == b.len() {
                    Ok(start..end)
                } else {
                    Err(skip_ws(b, i))
                };
            };
            let depth = open.len();
            if depth <= kept {
                if let Some((key, value_at)) = member.get(depth - 1) {
                    if depth == 1 {
                        // Spans start and end at ASCII bytes: char boundaries.
                        if let (Some(k), Some(v)) = (text.get(key.clone()), text.get(*value_at..i))
                        {
                            members.push((k, v));
                        }
                    } else if let Some(shape) = shape.as_deref_mut() {
                        shape.push(depth, key, &(*value_at..i));
                    }
                }
            }
            i = skip_ws(b, i);
            match (object, b.get(i)) {
                (_, Some(b',')) => {
                    i = skip_ws(b, i + 1);
                    if object {
                        i = member_key(b, i, open.len(), kept, &mut member)?;
                    }
                    break;
                }
                (false, Some(b']')) | (true, Some(b'}')) => {
                    if depth == kept && depth > 1 {
                        kept -= 1;
                    }
                    open.pop();
                    i += 1;
                }
                _ => return Err(i),
            }
        }
    }
}

/// The containers open around a value, innermost last: one bit each (an object or
/// not) in a word for the first 64, a byte each beyond.
#[derive(Default)]
struct Open {
    bits: u64,
    len: usize,
    deeper: Vec<bool>,
}

impl Open {
    fn push(&mut self, object: bool) {
        if self.len < 64 {
            self.bits = (self.bits << 1) | u64::from(object);
        } else {
            self.deeper.push(object);
        }
        self.len += 1;
    }

    fn pop(&mut self) {
        if self.len > 64 {
            self.deeper.pop();
        } else if self.len > 0 {
            self.bits >>= 1;
        }
        self.len = self.len.saturating_sub(1);
    }

    /// Whether the innermost container is an object; `None` at the top level.
    fn last(&self) -> Option<bool> {
        match self.len {
            0 => None,
            1..=64 => Some(self.bits & 1 == 1),
            _ => self.deeper.last().copied(),
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// [`key`] of a member of an object `depth` containers deep, kept in `member` when
/// that object's members are (`depth <= kept`); where its value starts.
fn member_key(
    b: &[u8],
    i: usize,
    depth: usize,
    kept: usize,
    member: &mut [(Span, usize); 3],
) -> Result<usize, usize> {
    let (key, value) = key(b, i)?;
    if depth <= kept {
        if let Some(m) = member.get_mut(depth - 1) {
            *m = (key, value);
        }
    }
    Ok(value)
}

/// A member's key at `i` and its colon: the key's span and where its value starts.
fn key(b: &[u8], i: usize) -> Result<(Span, usize), usize> {
    if b.get(i) != Some(&b'"') {
        return Err(i);
    }
    let end = string(b, i)?;
    let colon = skip_ws(b, end);
    if b.get(colon) != Some(&b':') {
        return Err(colon);
    }
    Ok((i..end, skip_ws(b, colon + 1)))
}

/// The string opening at `open`; where it ends (after its closing quote).
fn string(b: &[u8], open: usize) -> Result<usize, usize> {
    let mut i = open + 1;
    loop {
        let end = match short_special(b, i, true) {
            Ok(at) if b.get(at).is_some_and(|&c| c < 0x20) => return Err(at),
            Ok(at) => at,
            // A longer string: a vector search for its end or next escape, then a
            // vector check of the bytes before it.
            Err(from) => {
                let end = quote_or_backslash(b, from).ok_or(b.len())?;
                let plain = b.get(from..end).unwrap_or_default();
                if has_control(plain) {
                    let k = plain.iter().position(|&c| c < 0x20).unwrap_or(0);
                    return Err(from + k);
                }
                end
            }
        };
        i = end;
        if b.get(i) == Some(&b'"') {
            return Ok(i + 1);
        }
        // A backslash at `i`.
        match b.get(i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
            Some(b'u') => {
                let hex = b.get(i + 2..i + 6).ok_or(b.len())?;
                if let Some(k) = hex.iter().position(|c| !c.is_ascii_hexdigit()) {
                    return Err(i + 2 + k);
                }
                i += 6;
            }
            _ => return Err(i + 1),
        }
    }
}

/// Whether any byte is a control character (below 0x20), which a JSON string must
/// escape. A minimum over the bytes, which the compiler vectorizes; strings are
/// rarely invalid, so there is no early exit to pay for.
fn has_control(b: &[u8]) -> bool {
    b.iter().fold(u8::MAX, |m, &c| m.min(c)) < 0x20
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Result<usize, usize> {
    for (k, &w) in word.iter().enumerate() {
        if b.get(i + k) != Some(&w) {
            return Err(i + k);
        }
    }
    Ok(i + word.len())
}

/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` at `i`; where it ends.
fn number(b: &[u8], mut i: usize) -> Result<usize, usize> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => {
            i += 1;
            if matches!(b.get(i), Some(b'0'..=b'9')) {
                return Err(i);
            }
        }
        Some(b'1'..=b'9') => i = digits(b, i + 1),
        _ => return Err(i),
    }
    if b.get(i) == Some(&b'.') {
        let end = digits(b, i + 1);
        if end == i + 1 {
            return Err(end);
        }
        i = end;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = digits(b, i);
        if end == i {
            return Err(end);
        }
        i = end;
    }
    Ok(i)
}

fn digits(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b'0'..=b'9')) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::testkit::config;
    use proptest::prelude::*;
    use serde_json::Value;

    /// What serde_json accepts when it skips a value, with the UTF-8 check serde
    /// makes of a raw value's text, over the whole input.
    fn serde_accepts(b: &[u8]) -> bool {
        std::str::from_utf8(b).is_ok() && serde_json::from_slice::<serde::de::IgnoredAny>(b).is_ok()
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\\x00-\\x7f\"\\\\]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..8)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// JSON text as serde writes it (compact or pretty, some with a `\u` escape
    /// spelled out), then edited: bytes changed, removed or inserted, from the
    /// characters JSON is made of and from anywhere.
    fn edited() -> impl Strategy<Value = Vec<u8>> {
        let text = (json(), any::<bool>(), any::<bool>()).prop_map(|(v, pretty, esc)| {
            let mut s = if pretty {
                serde_json::to_string_pretty(&v).unwrap()
            } else {
                serde_json::to_string(&v).unwrap()
            };
            if esc {
                s = s.replacen('a', "\\u0061", 1);
            }
            s.into_bytes()
        });
        let byte = prop_oneof![
            prop::sample::select(
                b"{}[]\",:\\ \t\r\n0123456789-+.eEtrufalsn/bu\x00\x1f\x7f".to_vec()
            ),
            any::<u8>(),
        ];
        let edit = (any::<prop::sample::Index>(), 0u8..3, byte);
        (text, prop::collection::vec(edit, 0..4)).prop_map(|(mut t, edits)| {
            for (at, kind, c) in edits {
                let i = at.index(t.len() + 1);
                match kind {
                    0 if i < t.len() => t[i] = c,
                    1 if i < t.len() => {
                        t.remove(i);
                    }
                    _ => t.insert(i, c),
                }
            }
            t
        })
    }

    fn noise() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop::sample::select(b"{}[]\",:\\ 01-.eE+tfnrulase\\u0a\x01\xc3\xa9".to_vec()),
            0..24,
        )
    }

    #[test]
    fn the_edges_serde_draws() {
        for ok in [
            "0",
            "-0",
            "1.5e+3",
            "-1E-0",
            " \n\t\r[ ] ",
            "{\"a\":{}}",
            "\"\\ud800\"",
            "\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
            "\"é\u{7f}\"",
            "[[[[[[[[[[]]]]]]]]]]",
        ] {
            assert!(check(ok.as_bytes()).is_ok(), "{ok}");
            assert!(serde_accepts(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            " ",
            "01",
            "-",
            "1.",
            "1e",
            "1e+",
            ".5",
            "+1",
            "[1,]",
            "{\"a\":1,}",
            "{,}",
            "[1 2]",
            "{\"a\" 1}",
            "{1:2}",
            "tru",
            "nul",
            "\"\\x\"",
            "\"\\u12g4\"",
            "\"a\u{1}\"",
            "\"abc",
            "[",
            "{\"a\":",
            "1 2",
            "[}",
            "{]",
            "\"\\u12\"",
        ] {
            assert!(check(bad.as_bytes()).is_err(), "{bad}");
            assert!(!serde_accepts(bad.as_bytes()), "{bad}");
        }
        assert!(check(b"\"\xff\"").is_err());
        assert_eq!(
            check(b"  {\"a\" : [1, 2] }\n").unwrap(),
            "{\"a\" : [1, 2] }"
        );
        assert_eq!(check(b"[1, 2").unwrap_err().at, 5);
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert!(check(deep.as_bytes()).is_ok());
        // Past the 64 levels kept in a word: objects and arrays mixed, closed
        // right, and closed wrong at depths within and past the word.
        let (mut open, mut close) = (String::new(), String::new());
        for depth in 0..150 {
            if depth % 3 == 0 {
                open.push_str("{\"k\":");
                close.insert(0, '}');
            } else {
                open.push('[');
                close.insert(0, ']');
            }
        }
        let good = format!("{open}1{close}");
        assert!(check(good.as_bytes()).is_ok());
        assert!(serde_accepts(good.as_bytes()));
        for at in [5, 60, 90, 149] {
            let mut bad = good.clone().into_bytes();
            let i = open.len() + 1 + at;
            bad[i] = if bad[i] == b']' { b'}' } else { b']' };
            assert!(check(&bad).is_err(), "{at}");
            assert!(!serde_accepts(&bad), "{at}");
        }
    }

    #[test]
    fn strings_end_and_break_where_serde_says_at_every_offset() {
        // A string's bytes are looked at eight at a time, then by vector search: a
        // quote, escape, control byte or multibyte character at every place around
        // the word and search boundaries.
        for len in 0..80 {
            for at in 0..=len {
                for odd in [
                    "\"", "\\\"", "\\n", "\\u00e9", "\u{0}", "\u{1f}", "\u{7f}", "é", " ", "\\",
                ] {
                    let mut inner = "a".repeat(len);
                    inner.insert_str(at, odd);
                    for text in [
                        format!("\"{inner}\""),
                        format!("{{\"{inner}\":\"{inner}\",\"z\":1}}"),
                    ] {
                        let ours = check(text.as_bytes());
                        assert_eq!(ours.is_ok(), serde_accepts(text.as_bytes()), "{text:?}");
                        if ours.is_ok() && text.starts_with('{') {
                            let walked: Vec<Member<'_>> =
                                crate::jsonrpc::members::members(&text).collect();
                            let keys: serde_json::Map<String, Value> =
                                serde_json::from_str(&text).unwrap();
                            assert_eq!(walked.len(), 2, "{text:?}");
                            assert_eq!(walked[1], ("\"z\"", "1"), "{text:?}");
                            assert_eq!(keys.len(), 2, "{text:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_raw_is_trimmed_and_checked() {
        assert_eq!(
            Raw::from_string(" {\"a\": 1}\n".into()).unwrap().get(),
            "{\"a\": 1}"
        );
        assert_eq!(Raw::from_string("[]".into()).unwrap().get(), "[]");
        assert!(Raw::from_string("{".into()).is_err());
        let r: Raw = serde_json::from_str(" [1, {\"b\":null}] ").unwrap();
        assert_eq!(r.get(), "[1, {\"b\":null}]");
        let map: indexmap::IndexMap<String, Raw> =
            serde_json::from_str(r#"{"a":[1, {}],"q\"":null}"#).unwrap();
        let back = crate::jsonrpc::raw_object(&map);
        assert_eq!(back.get(), r#"{"a":[1, {}],"q\"":null}"#);
    }

    #[test]
    fn a_large_objects_members_are_found_once_and_read_alike() {
        let pad = "0123456789".repeat(300);
        let text = format!(
            "{{ \"name\" : \"a\", \"arguments\": {{\"text\":\"{pad}\",\"name\":\"inner\"}},\n\
             \"_meta\":{{\"progressToken\":7}}, \"n\\u0061me\":\"b\", \"list\":[1,{{}},\"]\"] }}"
        );
        let raw = Raw::from_string(text).unwrap();
        assert!(raw.get().len() >= INDEXED);
        let walked: Vec<Member<'_>> = crate::jsonrpc::members::members(raw.get()).collect();
        assert_eq!(walked.len(), 5);
        // The first read walks and keeps; later reads and a clone's read the same.
        assert_eq!(raw.members().collect::<Vec<_>>(), walked);
        assert_eq!(raw.members().collect::<Vec<_>>(), walked);
        let copy = raw.clone();
        assert_eq!(copy.members().collect::<Vec<_>>(), walked);
        assert_eq!(copy, raw);
        // What the layers read through it: the last `name` (escaped), `_meta`.
        assert_eq!(
            crate::jsonrpc::string_field(Some(&raw), "name").as_deref(),
            Some("b")
        );
        assert!(crate::jsonrpc::meta_mentions(
            &raw,
            crate::needle!("progressToken")
        ));
        assert!(!crate::jsonrpc::meta_mentions(
            &raw,
            crate::needle!("traceparent")
        ));
        let (top, meta) = crate::jsonrpc::members::Object::of_raw_with(&raw, "_meta").unwrap();
        assert_eq!(top.str("name").as_deref(), Some("b"));
        assert_eq!(meta.unwrap().get("progressToken"), Some("7"));
        // Too many members to keep: walked each time, read the same.
        let many: Vec<String> = (0..300).map(|i| format!("\"k{i}\":{i}")).collect();
        let many = Raw::from_string(format!("{{{},\"pad\":\"{pad}\"}}", many.join(","))).unwrap();
        let walked: Vec<Member<'_>> = crate::jsonrpc::members::members(many.get()).collect();
        assert_eq!(walked.len(), 301);
        assert_eq!(many.members().collect::<Vec<_>>(), walked);
        assert_eq!(many.members().collect::<Vec<_>>(), walked);
        // Not an object: no members, however large.
        let list = Raw::from_string(format!("[\"{pad}\"]")).unwrap();
        assert_eq!(list.members().count(), 0);
        assert!(crate::jsonrpc::members::Object::of_raw_with(&list, "_meta").is_none());
    }

    /// Params objects written the ways clients write them (compact or spaced, keys
    /// repeated, `_meta` an object or not, `params` and `_meta` nested deeper too).
    fn params() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("_meta".to_owned()),
            Just("params".to_owned()),
            Just("name".to_owned()),
            Just("_m\\u0065ta".to_owned()),
            "[a-z_]{0,6}",
        ];
        let value = prop_oneof![
            json().prop_map(|v| serde_json::to_string(&v).unwrap()),
            json().prop_map(|v| serde_json::to_string_pretty(&v).unwrap()),
            Just(r#"{"params":{"_meta":{}},"_meta":{"a":1}}"#.to_owned()),
        ];
        let gap = prop::sample::select(vec!["", " ", "\n  "]);
        prop::collection::vec((key, value, gap), 0..6).prop_map(|members| {
            let body: Vec<String> = members
                .into_iter()
                .map(|(k, v, g)| format!("{g}\"{k}\"{g}:{g}{v}{g}"))
                .collect();
            format!("{{{}}}", body.join(","))
        })
    }

    #[test]
    fn params_of_too_many_members_keep_no_index() {
        let many: Vec<String> = (0..=MAX_INDEXED_MEMBERS)
            .map(|i| format!("\"k{i}\":{i}"))
            .collect();
        let meta: Vec<String> = (0..=MAX_INDEXED_MEMBERS)
            .map(|i| format!("\"m{i}\":{i}"))
            .collect();
        for params in [
            format!("{{{}}}", many.join(",")),
            format!("{{\"_meta\":{{{}}},\"a\":1}}", meta.join(",")),
        ] {
            let text =
                format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{params}}}");
            let Ok(crate::jsonrpc::Message::Request(r)) =
                crate::jsonrpc::Message::parse(text.as_bytes())
            else {
                panic!("not a request");
            };
            let raw = r.params.unwrap();
            // No more places kept than an index holds, however many members.
            let kept = raw.index.get().map(|i| {
                i.members.as_ref().map_or(0, Vec::len)
                    + i.nested.as_ref().map_or(0, |(_, m)| m.len())
            });
            assert!(kept.unwrap_or(0) <= MAX_INDEXED_MEMBERS, "{kept:?}");
            let walked: Vec<Member<'_>> = crate::jsonrpc::members::members(raw.get()).collect();
            assert_eq!(raw.members().collect::<Vec<_>>(), walked);
            let (_, meta) = crate::jsonrpc::members::Object::of_raw_with(&raw, "_meta").unwrap();
            assert_eq!(
                meta.map_or(0, |m| m.len()),
                if params.contains("_meta") {
                    MAX_INDEXED_MEMBERS + 1
                } else {
                    0
                }
            );
        }
    }

    proptest! {
        #![proptest_config(config(2000))]

        #[test]
        fn accepts_exactly_what_serde_accepts(b in prop_oneof![edited(), noise()]) {
            let ours = check(&b);
            prop_assert_eq!(ours.is_ok(), serde_accepts(&b), "{:?}", String::from_utf8_lossy(&b));
            if let Ok(value) = ours {
                let text = std::str::from_utf8(&b).unwrap();
                let raw: Box<serde_json::value::RawValue> = serde_json::from_str(text).unwrap();
                prop_assert_eq!(value, raw.get());
                // The members found in the same pass are those a walk of the
                // checked text finds.
                let mut found = Vec::new();
                check_with_members(&b, &mut found).unwrap();
                let walked: Vec<Member<'_>> = crate::jsonrpc::members::members(value).collect();
                prop_assert_eq!(found, walked);
            }
        }

        #[test]
        fn a_messages_params_and_meta_are_found_as_a_walk_finds_them(
            params in params(),
            gap in prop::sample::select(vec!["", " ", "\n"]),
            after in prop::sample::select(vec!["", r#","x":{"a":{"_meta":{"b":1}}}"#]),
        ) {
            let text = format!(
                "{{{gap}\"jsonrpc\":\"2.0\",\"id\":1,{gap}\"method\":\"m\",\"params\":{gap}{params}{gap}{after}}}"
            );
            let Ok(crate::jsonrpc::Message::Request(r)) = crate::jsonrpc::Message::parse(text.as_bytes()) else {
                panic!("not a request: {text}");
            };
            let raw = r.params.unwrap();
            prop_assert_eq!(raw.get(), params.as_str());
            let walked: Vec<Member<'_>> = crate::jsonrpc::members::members(raw.get()).collect();
            prop_assert_eq!(&raw.members().collect::<Vec<_>>(), &walked);
            let (top, meta) = crate::jsonrpc::members::Object::of_raw_with(&raw, "_meta").unwrap();
            let (want_top, want_meta) =
                crate::jsonrpc::members::Object::parse_with(raw.get(), "_meta").unwrap();
            let entries = |o: &crate::jsonrpc::members::Object<'_>| -> Vec<(String, String)> {
                o.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
            };
            prop_assert_eq!(entries(&top), entries(&want_top));
            prop_assert_eq!(meta.as_ref().map(entries), want_meta.as_ref().map(entries));
            // `_meta`, when an object written without escapes, came from what the
            // check found, not a walk.
            let last_meta = walked
                .iter()
                .rfind(|(k, _)| crate::jsonrpc::members::key_is(k, "_meta"));
            if let Some((k, v)) = last_meta.filter(|(_, v)| v.starts_with('{')) {
                if *k == "\"_meta\"" {
                    prop_assert!(raw.nested_members(v).is_some(), "{}", text);
                }
            }
            // Keys looked at through what the check kept agree with a walk of every
            // `_meta`; with one `_meta` written plainly they are answered.
            use crate::jsonrpc::members::{key_is, key_starts_with, members};
            let top = |k: &str| key_is(k, "name");
            let meta = |k: &str| key_is(k, "a") || key_starts_with(k, "p");
            let walk = walked.iter().any(|(k, _)| top(k))
                || walked
                    .iter()
                    .filter(|(k, v)| key_is(k, "_meta") && v.starts_with('{'))
                    .any(|(_, v)| members(v).any(|(k, _)| meta(k)));
            let metas: Vec<_> = walked.iter().filter(|(k, _)| key_is(k, "_meta")).collect();
            match raw.any_key(top, meta) {
                Some(found) => prop_assert_eq!(found, walk, "{}", text),
                None => prop_assert!(
                    metas.len() > 1 || metas.iter().any(|(k, _)| *k != "\"_meta\""),
                    "not answered: {}", text
                ),
            }
        }
    }
}

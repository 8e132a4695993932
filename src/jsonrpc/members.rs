//! The top-level members of a JSON object, read from text already known to be valid
//! JSON (a [`Raw`](crate::jsonrpc::Raw)'s): each key as written and its
//! value's text, found by skipping strings with a vectorized search for `"` and `\`
//! and counting brackets, without decoding or validating anything.
//!
//! What Gantry reads of a request's params (the tool name, whether `_meta` holds
//! something for it) sits at the top level, beside arguments that can be megabytes:
//! serde skips a value only by scanning it as JSON, several times slower per byte
//! than this, and a text search for a needle looks inside the arguments too.

use std::borrow::Cow;
use std::collections::HashMap;

/// The members of the object `obj` (valid JSON text), in order; nothing if it is not
/// an object. A repeated key is yielded each time.
pub fn members(obj: &str) -> Members<'_> {
    Members { text: obj, at: 0 }
}

/// The value of the last member named `key` (JSON parsers that act on a repeated key
/// keep its last value: JavaScript's, Python's, serde_json's maps).
pub fn member<'a>(obj: &'a str, key: &str) -> Option<&'a str> {
    last_named(members(obj), key)
}

/// The value of the last of `members` (keys as written) named `key`.
pub fn last_named<'a>(
    members: impl Iterator<Item = (&'a str, &'a str)>,
    key: &str,
) -> Option<&'a str> {
    members
        .filter(|(k, _)| key_is(k, key))
        .last()
        .map(|(_, v)| v)
}

/// Whether a key as written (quotes and any escapes included) names `name`.
///
/// Decided without decoding for all but a rare key: an escape is always longer than
/// what it stands for (`\n`, `\u0061`: 2 and 6 bytes for 1), so a key written as
/// long as `name` names it only if it is `name` verbatim with no escape, a shorter one
/// never does, and a longer one only if it has an escape and starts as `name` does
/// or with an escape.
#[inline(always)]
pub fn key_is(written: &str, name: &str) -> bool {
    // Inlined where keys are compared one after another (a call's params, their
    // `_meta`): most keys differ in length and are told apart by one comparison.
    let (w, n) = (written.as_bytes(), name.as_bytes());
    match w.len().cmp(&(n.len() + 2)) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => {
            w.first() == Some(&b'"')
                && w.last() == Some(&b'"')
                && w.get(1..w.len() - 1) == Some(n)
                && !n.contains(&b'\\')
        }
        std::cmp::Ordering::Greater => escaped_key_is(written, name),
    }
}

/// [`key_is`] of a key written longer than `name`: it names it only with an escape.
#[inline(never)]
fn escaped_key_is(written: &str, name: &str) -> bool {
    let [b'"', k @ .., b'"'] = written.as_bytes() else {
        return false;
    };
    let may_start = match (k.first(), name.as_bytes().first()) {
        (Some(&a), Some(&b)) => a == b || a == b'\\',
        _ => false,
    };
    may_start
        && k.contains(&b'\\')
        && serde_json::from_str::<String>(written).is_ok_and(|k| k == name)
}

/// Whether a key as written (quotes and any escapes included) starts with `prefix`
/// (a name without a backslash) once decoded. Before its first escape a key decodes
/// byte for byte, so one written starting with `prefix` starts with it, and one
/// that does not can only if it has an escape (then it is decoded).
pub fn key_starts_with(written: &str, prefix: &str) -> bool {
    debug_assert!(
        !prefix.contains('\\'),
        "a prefix with a backslash: {prefix}"
    );
    let [b'"', k @ .., b'"'] = written.as_bytes() else {
        return false;
    };
    k.starts_with(prefix.as_bytes())
        || (k.contains(&b'\\')
            && serde_json::from_str::<String>(written).is_ok_and(|k| k.starts_with(prefix)))
}

/// A string's value from its JSON text (quotes and escapes included): the text
/// between the quotes when it has no escape, else decoded; `None` if it is not a
/// string.
pub fn string_value(written: &str) -> Option<Cow<'_, str>> {
    if let [b'"', inner @ .., b'"'] = written.as_bytes() {
        if !inner.contains(&b'\\') {
            // Between two ASCII quotes: still on character boundaries.
            return written.get(1..written.len() - 1).map(Cow::Borrowed);
        }
    } else {
        return None;
    }
    serde_json::from_str::<String>(written).ok().map(Cow::Owned)
}

/// An object read from valid JSON text as its parsers see it: each key decoded and
/// its value's text as written (nothing parsed), a repeated key once, with its last
/// value, at its first place (as serde_json's order-preserving map keeps it).
#[derive(Default)]
pub struct Object<'a> {
    entries: Vec<(Cow<'a, str>, &'a str)>,
    /// Key → place in `entries`, once there are too many for a linear search.
    index: Option<HashMap<Cow<'a, str>, usize>>,
}

/// Members up to which a repeated key is found by comparing with each.
const LINEAR: usize = 16;

impl<'a> Object<'a> {
    /// The members of `text`; `None` unless it is an object.
    pub fn parse(text: &'a str) -> Option<Self> {
        let open = skip_ws(text.as_bytes(), 0);
        Self::read_at(text, open, None).map(|(o, ..)| o)
    }

    /// The members of `text` and those of its member `key` when that is an object
    /// (`_meta` beside the params), read in one pass; `None` unless `text` is an
    /// object.
    pub fn parse_with(text: &'a str, key: &str) -> Option<(Self, Option<Self>)> {
        let open = skip_ws(text.as_bytes(), 0);
        Self::read_at(text, open, Some(key)).map(|(o, inner, _)| (o, inner))
    }

    /// [`Object::parse_with`] for a [`Raw`](crate::jsonrpc::Raw), whose members are
    /// found once however many readers ask (see [`Raw::members`](crate::jsonrpc::Raw::members)).
    pub fn of_raw_with(raw: &'a crate::jsonrpc::Raw, key: &str) -> Option<(Self, Option<Self>)> {
        if !raw.get().starts_with('{') {
            return None;
        }
        let mut o = Object {
            entries: Vec::with_capacity(8),
            index: None,
        };
        let mut inner = None;
        for (k, v) in raw.members() {
            let k = string_value(k)?;
            if k == key {
                // As `read_at`: the last one counts, and only if it is an object.
                inner = match v.starts_with('{') {
                    true => Some(Self::of_members(raw.members_of(v))?),
                    false => None,
                };
            }
            o.insert(k, v);
        }
        Some((o, inner))
    }

    /// An object from its members (keys as written), as [`Object::parse`] reads
    /// them; `None` if a key does not decode.
    fn of_members(members: impl Iterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        let mut o = Object {
            entries: Vec::with_capacity(8),
            index: None,
        };
        for (k, v) in members {
            o.insert(string_value(k)?, v);
        }
        Some(o)
    }

    /// The object opening at `open`, the object value of its member `nested` (the
    /// last one, if it is an object), and where the object ends.
    fn read_at(
        text: &'a str,
        open: usize,
        nested: Option<&str>,
    ) -> Option<(Self, Option<Self>, usize)> {
        let b = text.as_bytes();
        (b.get(open) == Some(&b'{')).then_some(())?;
        let mut o = Object {
            // Most params and `_meta` objects have a few members.
            entries: Vec::with_capacity(8),
            index: None,
        };
        let mut inner = None;
        let mut at = skip_ws(b, open + 1);
        if b.get(at) == Some(&b'}') {
            return Some((o, None, at + 1));
        }
        loop {
            let (key, value_at) = key_at(b, at)?;
            let key = string_value(text.get(key)?)?;
            let end = if nested.is_some_and(|n| key == n) {
                if b.get(value_at) == Some(&b'{') {
                    let (obj, _, end) = Self::read_at(text, value_at, None)?;
                    inner = Some(obj);
                    end
                } else {
                    inner = None;
                    value_end(b, value_at)?
                }
            } else {
                value_end(b, value_at)?
            };
            o.insert(key, text.get(value_at..end)?);
            let sep = skip_ws(b, end);
            match b.get(sep)? {
                b',' => at = skip_ws(b, sep + 1),
                b'}' => return Some((o, inner, sep + 1)),
                _ => return None,
            }
        }
    }

    fn insert(&mut self, key: Cow<'a, str>, value: &'a str) {
        let at = match &self.index {
            Some(index) => index.get(&key).copied(),
            None => self.entries.iter().position(|(k, _)| *k == key),
        };
        if let Some(slot) = at.and_then(|i| self.entries.get_mut(i)) {
            slot.1 = value;
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(key.clone(), self.entries.len());
        }
        self.entries.push((key, value));
        if self.index.is_none() && self.entries.len() > LINEAR {
            let index = self
                .entries
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect();
            self.index = Some(index);
        }
    }

    /// The text of the value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let at = match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| k == key),
        };
        at.and_then(|i| self.entries.get(i)).map(|(_, v)| *v)
    }

    /// The value of `key` if it is a string, decoded.
    pub fn str(&self, key: &str) -> Option<Cow<'a, str>> {
        string_value(self.get(key)?)
    }

    /// Keys and value texts, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &'a str)> + '_ {
        self.entries.iter().map(|(k, v)| (k.as_ref(), *v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Writes a JSON object into a string member by member, each value's text as given
/// (what [`Object`] read, or text Gantry wrote): the commas and quoting in one place.
pub struct ObjectWriter {
    /// Where the object's `{` is in the string.
    open: usize,
}

impl ObjectWriter {
    /// Opens an object at the end of `out`.
    pub fn begin(out: &mut String) -> Self {
        let open = out.len();
        out.push('{');
        ObjectWriter { open }
    }

    /// Writes the key of a member whose value the caller writes next.
    pub fn key(&self, out: &mut String, key: &str) {
        if !self.is_empty(out) {
            out.push(',');
        }
        crate::jsonrpc::push_json_string(out, key);
        out.push(':');
    }

    /// Writes a member.
    pub fn member(&self, out: &mut String, key: &str, value: &str) {
        self.key(out, key);
        out.push_str(value);
    }

    /// Writes a member whose key is JSON text as a checked message wrote it (quotes
    /// and escapes included), copied without being decoded and quoted again.
    pub fn written_member(&self, out: &mut String, key: &str, value: &str) {
        if !self.is_empty(out) {
            out.push(',');
        }
        out.push_str(key);
        out.push(':');
        out.push_str(value);
    }

    /// Whether no member has been written yet.
    pub fn is_empty(&self, out: &str) -> bool {
        out.len() <= self.open + 1
    }

    /// Closes the object.
    pub fn end(self, out: &mut String) {
        out.push('}');
    }
}

/// The elements of the array `text` (valid JSON text), in order; nothing if it is
/// not an array.
pub fn elements(text: &str) -> impl Iterator<Item = &str> + '_ {
    let b = text.as_bytes();
    let open = skip_ws(b, 0);
    let mut at = (b.get(open) == Some(&b'[')).then(|| skip_ws(b, open + 1));
    std::iter::from_fn(move || {
        let start = at?;
        let end = value_end(b, start).filter(|&e| e > start);
        at = end.and_then(|e| {
            let sep = skip_ws(b, e);
            (b.get(sep) == Some(&b',')).then(|| skip_ws(b, sep + 1))
        });
        text.get(start..end?)
    })
}

/// Iterator of [`members`]: (key as written, value text).
pub struct Members<'a> {
    text: &'a str,
    /// Where the next member's separator (`{` before the first, `,` after) is looked
    /// for; `usize::MAX` once done.
    at: usize,
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let (key, value) = self.next_spans()?;
        // Every boundary is at an ASCII byte, so these are char boundaries.
        Some((self.text.get(key)?, self.text.get(value)?))
    }
}

impl Members<'_> {
    /// The next member as byte ranges of the object's text: its key (as written)
    /// and its value.
    pub(super) fn next_spans(
        &mut self,
    ) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
        let b = self.text.as_bytes();
        let sep = skip_ws(b, self.at);
        let first = self.at == 0;
        match b.get(sep) {
            Some(b'{') if first => {}
            Some(b',') if !first => {}
            _ => {
                self.at = usize::MAX;
                return None;
            }
        }
        let key_at = skip_ws(b, sep + 1);
        if b.get(key_at) != Some(&b'"') {
            // `{}` or `}`: no more members.
            self.at = usize::MAX;
            return None;
        }
        let Some((key, value)) = member_at(b, key_at) else {
            self.at = usize::MAX;
            return None;
        };
        self.at = value.end;
        Some((key, value))
    }
}

/// The key and the value of the member whose key opens at `key_at`.
fn member_at(b: &[u8], key_at: usize) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let (key, value_at) = self::key_at(b, key_at)?;
    let value_end = value_end(b, value_at)?;
    Some((key, value_at..value_end))
}

/// The key of the member whose key opens at `key_at`, and where its value starts.
fn key_at(b: &[u8], key_at: usize) -> Option<(std::ops::Range<usize>, usize)> {
    (b.get(key_at) == Some(&b'"')).then_some(())?;
    let key_end = string_end(b, key_at)?;
    let colon = skip_ws(b, key_end);
    (b.get(colon) == Some(&b':')).then_some(())?;
    Some((key_at..key_end, skip_ws(b, colon + 1)))
}

pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// Words (eight bytes) of a string looked at before a vector search: most keys and
/// short values end within them, sooner than the search is set up.
const SHORT_WORDS: usize = 8;

const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// The bytes of `word` (eight, little-endian) that are `"` or `\`, or with `control`
/// below 0x20, as the high bit of each. Exact up to and including the first such
/// byte; bytes after it may be marked too (a borrow), which no caller looks at.
fn specials(word: u64, control: bool) -> u64 {
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut marks = zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\')));
    if control {
        marks |= word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    }
    marks
}

/// The first `"` or `\` (or with `control`, byte below 0x20) in the first
/// [`SHORT_WORDS`] words at `i`, eight bytes at a time: `Ok(where)`, or `Err(from)`
/// when there is none in them (or fewer than eight bytes are left), `from` being
/// where to look on.
pub(super) fn short_special(b: &[u8], mut i: usize, control: bool) -> Result<usize, usize> {
    for _ in 0..SHORT_WORDS {
        let Some(word) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) else {
            return Err(i);
        };
        let marks = specials(u64::from_le_bytes(*word), control);
        if marks != 0 {
            return Ok(i + (marks.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    Err(i)
}

/// Where the next `"` or `\` at or after `i` is (inside a string: its end or its
/// next escape).
pub(super) fn quote_or_backslash(b: &[u8], i: usize) -> Option<usize> {
    let from = match short_special(b, i, false) {
        Ok(at) => return Some(at),
        Err(from) => from,
    };
    let rest = b.get(from..)?;
    let k = if rest.len() < 8 {
        rest.iter().position(|c| matches!(c, b'"' | b'\\'))?
    } else {
        memchr::memchr2(b'"', b'\\', rest)?
    };
    Some(from + k)
}

/// The end (after the closing quote) of the string opening at `open`.
fn string_end(b: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    loop {
        let k = quote_or_backslash(b, i)?;
        if b.get(k) == Some(&b'\\') {
            // The escaped character (`"`, `\` or a letter of `\uXXXX`) is skipped.
            i = k + 2;
        } else {
            return Some(k + 1);
        }
    }
}

/// The end of the value starting at `at`.
fn value_end(b: &[u8], at: usize) -> Option<usize> {
    match b.get(at)? {
        b'"' => string_end(b, at),
        b'{' | b'[' => {
            // Valid JSON: brackets nest properly, so one depth counts both kinds.
            let mut depth = 0usize;
            let mut i = at;
            loop {
                // Numbers, literals, commas and colons are passed over in one tight
                // loop: `| 0x20` makes `[` `{` and `]` `}` (and leaves `"`; the only
                // other byte it makes one of these, 0x02, cannot occur in JSON).
                i += b
                    .get(i..)?
                    .iter()
                    .position(|c| matches!(c | 0x20, b'"' | b'{' | b'}'))?;
                match b.get(i)? {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    _ => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                }
                i += 1;
            }
        }
        _ => {
            // A number, `true`, `false` or `null`: up to the next delimiter.
            let len = b
                .get(at..)?
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))?;
            Some(at + len)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn reads_the_top_level_only() {
        let text = r#" { "name" : "echo", "arguments":{"name":"inner","a":[1,{"b":"}]"}]},
            "n":-1.5e3 ,"t":true,"z":null,"s":"a\"b\\","name":"last"} "#;
        let all: Vec<(&str, &str)> = members(text).collect();
        assert_eq!(
            all,
            vec![
                ("\"name\"", "\"echo\""),
                ("\"arguments\"", r#"{"name":"inner","a":[1,{"b":"}]"}]}"#),
                ("\"n\"", "-1.5e3"),
                ("\"t\"", "true"),
                ("\"z\"", "null"),
                ("\"s\"", r#""a\"b\\""#),
                ("\"name\"", "\"last\""),
            ]
        );
        assert_eq!(member(text, "name"), Some("\"last\""));
        assert_eq!(member(text, "missing"), None);
    }

    #[test]
    fn escaped_keys_and_non_objects() {
        assert_eq!(member(r#"{"n\u0061me":1}"#, "name"), Some("1"));
        assert_eq!(members("[1,2]").count(), 0);
        assert_eq!(members("{}").count(), 0);
        assert_eq!(members(" { } ").count(), 0);
        assert_eq!(members("\"x\"").count(), 0);
    }
    #[test]
    fn an_object_is_written_member_by_member() {
        let mut out = String::from("[");
        let o = ObjectWriter::begin(&mut out);
        assert!(o.is_empty(&out));
        o.member(&mut out, "a", "1");
        o.key(&mut out, "q\"k");
        ObjectWriter::begin(&mut out).end(&mut out);
        o.end(&mut out);
        assert_eq!(out, r#"[{"a":1,"q\"k":{}}"#);
    }

    #[test]
    fn an_object_keeps_each_key_once_with_its_last_value() {
        let o = Object::parse(r#"{"a":1,"b":"x","a":2,"\u0062":"y\n"}"#).unwrap();
        let all: Vec<(&str, &str)> = o.iter().collect();
        assert_eq!(all, vec![("a", "2"), ("b", r#""y\n""#)]);
        assert_eq!(o.str("b").as_deref(), Some("y\n"));
        assert_eq!(o.str("a"), None);
        assert!(Object::parse("[1]").is_none());
        assert!(Object::parse(" {}").unwrap().is_empty());
        // Past the linear search, the index finds repeats the same way.
        let mut text = String::from("{");
        for i in 0..40 {
            text.push_str(&format!("\"k{}\":{i},", i % 25));
        }
        text.push_str("\"k0\":\"end\"}");
        let o = Object::parse(&text).unwrap();
        assert_eq!(o.len(), 25);
        assert_eq!(o.get("k0"), Some("\"end\""));
        assert_eq!(o.get("k3"), Some("28"));
        assert_eq!(o.get("k24"), Some("24"));
        assert_eq!(o.iter().nth(3).map(|(k, _)| k), Some("k3"));
    }
}

#[cfg(test)]
mod props {
    //! Against serde_json itself: whatever the object, its members read here are the
    //! ones serde reads, repeated keys, escapes and whitespace included.
    use super::*;
    use crate::testkit::config;
    use proptest::prelude::*;
    use serde_json::Value;

    /// Any JSON value, with strings full of what the scan must not be fooled by.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            crate::testkit::json_scalar(),
            "[\\\\\"{}\\[\\], :a-z]{0,8}".prop_map(Value::String),
            // Long enough for every stage of the scan (bytes, the vector search).
            "[\\\\\"{}\\[\\], :a-zé\u{1}]{0,90}".prop_map(Value::String),
        ];
        crate::testkit::json_tree(leaf.boxed(), "[a-c]{1,2}".boxed(), (3, 24, 4))
    }

    /// A key as a client may write it: plain, or a letter as a `\u` escape.
    fn written_key(k: &str, escape: bool) -> String {
        if escape {
            let mut s = String::from("\"");
            for c in k.chars() {
                s.push_str(&format!("\\u{:04x}", c as u32));
            }
            s.push('"');
            s
        } else {
            serde_json::to_string(k).unwrap()
        }
    }

    /// A name to compare a key (`k`, `written` as [`written_key`]) with: `k` itself,
    /// `other`, or the key's written text taken literally.
    fn picked(k: &str, other: String, written: &str, pick: u8) -> String {
        match pick {
            0 => k.to_owned(),
            1 => other,
            _ => written[1..written.len() - 1].to_owned(),
        }
    }

    proptest! {
        #![proptest_config(config(256))]

        /// A key names what it decodes to, whatever the name or the key's escapes:
        /// the name itself, another, or the key's written text taken literally.
        #[test]
        fn a_key_names_what_it_decodes_to(
            k in "[ab\\\\\"é\u{1}]{0,4}",
            other in "[ab\\\\\"é\u{1}]{0,4}",
            escape in any::<bool>(),
            pick in 0..3u8,
        ) {
            let written = written_key(&k, escape);
            let name = picked(&k, other, &written, pick);
            prop_assert_eq!(key_is(&written, &name), k == name, "{} {}", written, name);
        }

        /// A key starts with what its decoded text starts with, whatever the key's
        /// escapes: a prefix (without a backslash) of it, of another, or of its
        /// written text.
        #[test]
        fn a_key_starts_with_what_it_decodes_to(
            k in "[ab\\\\\"é\u{1}]{0,4}",
            other in "[ab\\\\\"é\u{1}]{0,4}",
            escape in any::<bool>(),
            pick in 0..3u8,
            cut in 0..6usize,
        ) {
            let written = written_key(&k, escape);
            let prefix: String = picked(&k, other, &written, pick).chars().take(cut).collect();
            prop_assume!(!prefix.contains('\\'));
            prop_assert_eq!(
                key_starts_with(&written, &prefix),
                k.starts_with(&prefix),
                "{} {}", written, prefix
            );
        }

        #[test]
        fn members_are_what_serde_reads(
            entries in prop::collection::vec(("[a-c]{1,2}", value(), any::<bool>(), any::<bool>()), 0..6),
            ws in prop::sample::select(vec!["", " ", "\n\t", "\r\n  "]),
        ) {
            let mut text = format!("{ws}{{{ws}");
            for (i, (k, v, escape, pretty)) in entries.iter().enumerate() {
                if i > 0 {
                    text.push_str(&format!("{ws},{ws}"));
                }
                let v = if *pretty { serde_json::to_string_pretty(v) } else { serde_json::to_string(v) };
                text.push_str(&format!("{}{ws}:{ws}{}", written_key(k, *escape), v.unwrap()));
            }
            text.push_str(&format!("{ws}}}{ws}"));
            let expected: Value = serde_json::from_str(&text).unwrap();
            let mut read = serde_json::Map::new();
            let mut n = 0;
            for (k, v) in members(&text) {
                n += 1;
                let k: String = serde_json::from_str(k).unwrap();
                let v: Value = serde_json::from_str(v).unwrap();
                read.insert(k, v);
            }
            prop_assert_eq!(n, entries.len());
            prop_assert_eq!(&Value::Object(read), &expected);
            if let Some((k, _, _, _)) = entries.last() {
                let last = member(&text, k).map(|v| serde_json::from_str::<Value>(v).unwrap());
                prop_assert_eq!(last.as_ref(), expected.get(k));
            }
            // An `Object` holds what serde's order-preserving map holds, in its order.
            let object = Object::parse(&text).unwrap();
            let Value::Object(map) = &expected else { panic!("an object") };
            prop_assert_eq!(object.len(), map.len());
            for ((k, v), (mk, mv)) in object.iter().zip(map) {
                prop_assert_eq!(k, mk.as_str());
                prop_assert_eq!(&serde_json::from_str::<Value>(v).unwrap(), mv);
                prop_assert_eq!(object.str(k).map(|s| Value::String(s.into_owned())), mv.as_str().map(Value::from));
            }
            // Read in one pass with its member `a`: the same as read one by one.
            let (top, a) = Object::parse_with(&text, "a").unwrap();
            let pairs = |o: &Object| o.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect::<Vec<_>>();
            prop_assert_eq!(pairs(&top), pairs(&object));
            let a_alone = object.get("a").and_then(Object::parse);
            prop_assert_eq!(a.as_ref().map(pairs), a_alone.as_ref().map(pairs));
        }
    }
}

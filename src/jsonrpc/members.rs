//! The top-level members of a JSON object, read from text already known to be valid
//! JSON (a [`RawValue`](serde_json::value::RawValue)'s): each key as written and its
//! value's text, found by skipping strings with a vectorized search for `"` and `\`
//! and counting brackets, without decoding or validating anything.
//!
//! What Gantry reads of a request's params (the tool name, whether `_meta` holds
//! something for it) sits at the top level, beside arguments that can be megabytes:
//! serde skips a value only by scanning it as JSON, several times slower per byte
//! than this, and a text search for a needle looks inside the arguments too.

/// The members of the object `obj` (valid JSON text), in order; nothing if it is not
/// an object. A repeated key is yielded each time.
pub fn members(obj: &str) -> Members<'_> {
    Members { text: obj, at: 0 }
}

/// The value of the last member named `key` (JSON parsers that act on a repeated key
/// keep its last value: JavaScript's, Python's, serde_json's maps).
pub fn member<'a>(obj: &'a str, key: &str) -> Option<&'a str> {
    members(obj)
        .filter(|(k, _)| key_is(k, key))
        .last()
        .map(|(_, v)| v)
}

/// Whether a key as written (quotes and any escapes included) names `name`.
pub fn key_is(written: &str, name: &str) -> bool {
    let Some(inner) = written.strip_prefix('"').and_then(|k| k.strip_suffix('"')) else {
        return false;
    };
    if !inner.contains('\\') {
        return inner == name;
    }
    serde_json::from_str::<String>(written).is_ok_and(|k| k == name)
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
        // Every boundary is at an ASCII byte, so these are char boundaries.
        Some((self.text.get(key)?, self.text.get(value)?))
    }
}

/// The key and the value of the member whose key opens at `key_at`.
fn member_at(b: &[u8], key_at: usize) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let key_end = string_end(b, key_at)?;
    let colon = skip_ws(b, key_end);
    (b.get(colon) == Some(&b':')).then_some(())?;
    let value_at = skip_ws(b, colon + 1);
    let value_end = value_end(b, value_at)?;
    Some((key_at..key_end, value_at..value_end))
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end (after the closing quote) of the string opening at `open`.
fn string_end(b: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    loop {
        let k = i + memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
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
                match b.get(i)? {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
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

    proptest! {
        #![proptest_config(config(256))]

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
        }
    }
}

//! The request-metadata headers of the stateless era (2026-07-28, Streamable HTTP
//! §Request Metadata): which body field `Mcp-Name` mirrors, and the one value codec
//! for `Mcp-Name` and `Mcp-Param-*` (plain visible ASCII, else the `=?base64?…?=`
//! sentinel). Used both to check what clients send and to build what Gantry sends to
//! backends, so the two can never disagree.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// The Streamable HTTP headers Gantry reads and writes, as constant names (a header
/// looked up by a string is parsed and hashed from that string on every request).
pub const SESSION_ID: http::HeaderName = http::HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: http::HeaderName =
    http::HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID` (SSE resumption).
pub const LAST_EVENT_ID: http::HeaderName = http::HeaderName::from_static("last-event-id");
/// `Mcp-Method` (stateless era: the request's method).
pub const METHOD: http::HeaderName = http::HeaderName::from_static("mcp-method");
/// `Mcp-Name` (stateless era: the tool, prompt or resource the request names).
pub const NAME: http::HeaderName = http::HeaderName::from_static("mcp-name");

/// The sentinel that marks a Base64-encoded header value (case-sensitive).
const PREFIX: &str = "=?base64?";
const SUFFIX: &str = "?=";

/// The params field `Mcp-Name` mirrors for `method`, if the method has one.
pub fn name_field(method: &str) -> Option<&'static str> {
    named_method(method).map(|(_, field)| field)
}

/// [`name_field`], with the method's own name as a `'static` string.
pub fn named_method(method: &str) -> Option<(&'static str, &'static str)> {
    match method {
        "tools/call" => Some(("tools/call", "name")),
        "prompts/get" => Some(("prompts/get", "name")),
        "resources/read" => Some(("resources/read", "uri")),
        _ => None,
    }
}

/// A header value for `text`: as is when it is non-empty visible ASCII and spaces
/// without surrounding spaces and does not look like the sentinel; otherwise the
/// Base64 sentinel form (non-ASCII, control characters such as tab or newline,
/// surrounding whitespace, the empty string — some intermediaries drop empty
/// headers — and values that start with the sentinel prefix).
pub fn encode(text: &str) -> String {
    let plain = !text.is_empty()
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !text.starts_with(' ')
        && !text.ends_with(' ')
        && !text.starts_with(PREFIX);
    if plain {
        text.to_owned()
    } else {
        format!("{PREFIX}{}{SUFFIX}", STANDARD.encode(text.as_bytes()))
    }
}

/// A received header value as the spec compares it: surrounding spaces and tabs
/// trimmed (they are not part of an HTTP field value), the sentinel form decoded
/// strictly (padding and alphabet checked, UTF-8 required). `None`: the value holds
/// control characters or is not valid.
pub fn decode(raw: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    let v = std::str::from_utf8(raw).ok()?;
    // Spaces and tabs are ASCII: the cuts fall on character boundaries, and no
    // character is decoded to find them.
    let b = v.as_bytes();
    let blank = |c: &u8| matches!(c, b' ' | b'\t');
    let start = b.iter().position(|c| !blank(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !blank(c)).map_or(start, |i| i + 1);
    let v = v.get(start..end)?;
    if v.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return None;
    }
    match v.strip_prefix(PREFIX).and_then(|r| r.strip_suffix(SUFFIX)) {
        Some(encoded) => String::from_utf8(STANDARD.decode(encoded).ok()?)
            .ok()
            .map(std::borrow::Cow::Owned),
        None => Some(std::borrow::Cow::Borrowed(v)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// The spec's encoding examples, and the edges the three earlier copies of this
    /// codec disagreed on (empty strings, tabs, control characters).
    #[test]
    fn values_are_encoded_as_the_spec_shows() {
        let cases = [
            ("us-west1", "us-west1"),
            ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            (" padded ", "=?base64?IHBhZGRlZCA=?="),
            ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
            ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
            ("with space inside", "with space inside"),
            ("", "=?base64??="),
            ("tab\there", "=?base64?dGFiCWhlcmU=?="),
            ("=?base64?no-suffix", "=?base64?PT9iYXNlNjQ/bm8tc3VmZml4?="),
            ("file:///a/b.json", "file:///a/b.json"),
        ];
        for (text, header) in cases {
            assert_eq!(encode(text), header, "{text:?}");
            assert_eq!(decode(header.as_bytes()).as_deref(), Some(text), "{header}");
        }
    }

    #[test]
    fn received_values_are_trimmed_and_checked() {
        let cases: [(&[u8], Option<&str>); 9] = [
            (b"  Hello \t", Some("Hello")),
            (b"=?base64?SGVsbG8=?=", Some("Hello")),
            (b" =?base64?SGVsbG8=?= ", Some("Hello")),
            (b"=?base64?SGVsbG8?=", None),    // bad padding
            (b"=?base64?SGVs!!bG8=?=", None), // outside the alphabet
            (b"=?BASE64?SGVsbG8=?=", Some("=?BASE64?SGVsbG8=?=")), // case-sensitive: plain
            (b"a\x01b", None),                // control character
            (b"=?base64?/w==?=", None),       // not UTF-8
            (b"", Some("")),
        ];
        for (raw, want) in cases {
            assert_eq!(
                decode(raw).as_deref(),
                want,
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn name_sources() {
        assert_eq!(name_field("tools/call"), Some("name"));
        assert_eq!(name_field("prompts/get"), Some("name"));
        assert_eq!(name_field("resources/read"), Some("uri"));
        assert_eq!(name_field("tools/list"), None);
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the `Mcp-Name` / `Mcp-Param-*` value codec: decoding never
    //! panics on what a client sends, and every string survives encoding as a valid
    //! header value.
    use super::*;
    use crate::testkit::config;
    use proptest::prelude::*;

    /// Text that hits the codec's edges: the sentinel, spaces, tabs, controls, DEL,
    /// non-ASCII, next to any string at all.
    fn tricky() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "=?base64?",
            "?=",
            "=?",
            "?",
            "=",
            " ",
            "\t",
            "\n",
            "\r",
            "\0",
            "\u{7f}",
            "a",
            "Z9+/",
            "-_",
            "é",
            "世界",
            "\u{feff}",
            "\u{a0}",
            "\u{2028}",
        ]);
        prop_oneof![
            any::<String>(),
            "[ -~]{0,16}",
            prop::collection::vec(piece, 0..8).prop_map(|p| p.concat()),
        ]
    }

    /// Bytes a client could send: anything, or a sentinel around anything.
    fn raw() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<Vec<u8>>(),
            (any::<Vec<u8>>(), "[ \t]{0,2}", "[ \t]{0,2}").prop_map(|(b, l, r)| {
                [
                    l.as_bytes(),
                    PREFIX.as_bytes(),
                    &b,
                    SUFFIX.as_bytes(),
                    r.as_bytes(),
                ]
                .concat()
            }),
            "[A-Za-z0-9+/=]{0,12}".prop_map(|b| format!("{PREFIX}{b}{SUFFIX}").into_bytes()),
        ]
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn decoding_never_panics(raw in raw()) {
            if let Some(text) = decode(&raw) {
                // What decodes is text a header can carry again, unchanged.
                let again = encode(&text);
                prop_assert_eq!(decode(again.as_bytes()).map(std::borrow::Cow::into_owned), Some(text.into_owned()));
            }
        }

        #[test]
        fn every_string_round_trips(text in tricky()) {
            let header = encode(&text);
            prop_assert_eq!(decode(header.as_bytes()).map(std::borrow::Cow::into_owned), Some(text));
        }

        #[test]
        fn encoded_values_are_valid_header_values(text in tricky()) {
            let header = encode(&text);
            prop_assert!(!header.is_empty());
            prop_assert!(
                header.bytes().all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b)),
                "{header:?}"
            );
            // Nothing an HTTP stack would trim.
            prop_assert!(!header.starts_with([' ', '\t']) && !header.ends_with([' ', '\t']));
            prop_assert!(http::HeaderValue::from_str(&header).is_ok(), "{header:?}");
            // Plain when it can be, so intermediaries and logs can read it.
            let plain = !text.is_empty()
                && text.bytes().all(|b| (0x21..0x7f).contains(&b) || b == b' ')
                && !text.starts_with(' ')
                && !text.ends_with(' ')
                && !text.starts_with(PREFIX);
            prop_assert_eq!(header == text, plain);
        }

        /// Spaces and tabs around a received value are not part of it.
        #[test]
        fn surrounding_whitespace_is_ignored(raw in raw(), l in "[ \t]{0,3}", r in "[ \t]{0,3}") {
            let padded = [l.as_bytes(), &raw, r.as_bytes()].concat();
            prop_assert_eq!(decode(&padded), decode(&raw));
        }
    }
}

//! The pages a user sees: login (static users), consent, and errors. Plain HTML, no
//! script, everything interpolated escaped; served with a CSP that forbids framing
//! and limits where forms go.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Marks a response as a refusal with this OAuth error code (for the metrics).
#[derive(Debug, Clone, Copy)]
pub(super) struct Refused(pub(super) &'static str);

/// HTML-escapes text for element content and quoted attributes.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#222}\
h1{font-size:1.4rem}.box{border:1px solid #ccc;border-radius:8px;padding:1rem 1.2rem;margin:1rem 0}\
.warn{background:#fff4e0;border-color:#f0b050}code{background:#f3f3f3;padding:0 .2rem}\
button{font-size:1rem;padding:.5rem 1.2rem;margin-right:.5rem}input[type=text],input[type=password]{font-size:1rem;padding:.3rem;width:100%;margin:.2rem 0 .8rem}";

/// A page with the security headers; `form_targets`: origins a form here may end
/// up at (the client's redirect URI after a consent POST).
pub(super) fn page(
    status: StatusCode,
    title: &str,
    body: &str,
    form_targets: &[String],
) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        esc(title)
    );
    let mut resp = (status, html).into_response();
    let mut form_action = String::from("'self'");
    for t in form_targets.iter().filter(|t| !t.is_empty()) {
        form_action.push(' ');
        form_action.push_str(t);
    }
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; form-action {form_action}; frame-ancestors 'none'; base-uri 'none'"
    );
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// An error page (before the redirect URI is known to be the client's, or for the
/// user's eyes only).
pub(super) fn error(status: StatusCode, code: &'static str, description: &str) -> Response {
    let mut resp = page(
        status,
        "Authorization failed",
        &format!(
            "<h1>Authorization failed</h1><div class=\"box\"><p>{}</p><p><code>{}</code></p></div><p>Go back to your application and try again.</p>",
            esc(description),
            esc(code)
        ),
        &[],
    );
    resp.extensions_mut().insert(Refused(code));
    resp
}

/// What the consent page shows.
pub(super) struct Consent<'a> {
    pub(super) client_name: &'a str,
    pub(super) client_id: &'a str,
    pub(super) redirect_uri: &'a str,
    pub(super) user: &'a str,
    pub(super) scopes: &'a [String],
    pub(super) resource: &'a str,
    pub(super) request: &'a str,
    pub(super) csrf: &'a str,
    /// The consent form's redirect may go here.
    pub(super) target: String,
}

/// The redirect URI's host, as the user should read it.
fn redirect_host(uri: &str) -> (String, bool) {
    match reqwest::Url::parse(uri) {
        Ok(u) => match u.host_str() {
            Some(h) => {
                let lo = h == "localhost"
                    || h.trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                (h.to_owned(), lo)
            }
            None => (format!("{}:", u.scheme()), false),
        },
        Err(_) => (uri.to_owned(), false),
    }
}

pub(super) fn consent(c: &Consent<'_>) -> Response {
    let (host, loopback) = redirect_host(c.redirect_uri);
    let scopes = if c.scopes.is_empty() {
        "<li>use the server's tools, prompts and resources as you</li>".to_owned()
    } else {
        c.scopes
            .iter()
            .map(|s| format!("<li><code>{}</code></li>", esc(s)))
            .collect::<String>()
    };
    let warning = if loopback {
        "<div class=\"box warn\">This application receives the authorization on <b>this computer</b> (a local address). Approve only if you just started it yourself.</div>"
    } else {
        ""
    };
    let hidden = format!(
        "<input type=\"hidden\" name=\"request\" value=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(c.request),
        esc(c.csrf)
    );
    let body = format!(
        "<h1>Allow {name} to use {resource}?</h1>\
<div class=\"box\"><p><b>{name}</b> <small>(<code>{id}</code>)</small> asks to act as <b>{user}</b> on <code>{resource}</code>.</p>\
<p>It will be sent back to <b>{host}</b> (<code>{uri}</code>).</p><p>It asks to:</p><ul>{scopes}</ul></div>{warning}\
<form method=\"post\" action=\"/oauth/consent\">{hidden}<input type=\"hidden\" name=\"decision\" value=\"approve\"><button type=\"submit\">Allow</button></form>\
<form method=\"post\" action=\"/oauth/consent\">{hidden}<input type=\"hidden\" name=\"decision\" value=\"deny\"><button type=\"submit\">Deny</button></form>",
        name = esc(c.client_name),
        id = esc(c.client_id),
        user = esc(c.user),
        resource = esc(c.resource),
        host = esc(&host),
        uri = esc(c.redirect_uri),
    );
    page(
        StatusCode::OK,
        "Authorize access",
        &body,
        std::slice::from_ref(&c.target),
    )
}

/// The development login form.
pub(super) fn login(request: &str, csrf: &str, client_name: &str, failed: bool) -> Response {
    let note = if failed {
        "<div class=\"box warn\">Wrong user name or password.</div>"
    } else {
        ""
    };
    let body = format!(
        "<h1>Log in</h1><p>{} wants to connect.</p>{note}\
<form method=\"post\" action=\"/oauth/login\"><input type=\"hidden\" name=\"request\" value=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
<label>User name<input type=\"text\" name=\"username\" autocomplete=\"username\"></label>\
<label>Password<input type=\"password\" name=\"password\" autocomplete=\"current-password\"></label>\
<button type=\"submit\">Log in</button></form>",
        esc(client_name),
        esc(request),
        esc(csrf)
    );
    page(
        if failed {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::OK
        },
        "Log in",
        &body,
        &[],
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn everything_shown_is_escaped() {
        assert_eq!(
            esc("<script>\"x\"&'y'</script>\u{7}"),
            "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn pages_cannot_be_framed() {
        let r = error(StatusCode::BAD_REQUEST, "invalid_request", "x");
        let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(csp.contains("frame-ancestors 'none'"));
        assert_eq!(r.headers()[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    }
}

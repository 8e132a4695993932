//! HTTPS at the front door (`server.tls`), with a CA and certificates made at test
//! time: MCP over HTTP/1.1 and HTTP/2 (ALPN), a certificate swapped on disk served
//! to the next connection while open ones keep working, and the official SDK
//! client's OAuth login against Gantry's own TLS listener.

// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::oidc::Provider;
use common::pki::Pki;
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn addr(g: &Gantry) -> String {
    g.base.trim_start_matches("https://").to_owned()
}

/// An initialize and a call over HTTPS with `http`.
async fn mcp_over(g: &Gantry, http: reqwest::Client) -> Client {
    let mut c = Client::new(&g.url);
    c.http = http;
    c.initialize().await;
    let r = c
        .call_tool(json!(2), "echo", json!({"message": "tls"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "tls", "{r}");
    c
}

#[tokio::test]
async fn gantry_serves_https_and_a_renewed_certificate_to_new_connections() {
    let pki = Pki::new();
    pki.issue("first");
    let g = gantry()
        .server(&pki.server_line())
        .backend(example())
        .start();
    assert!(g.url.starts_with("https://"), "{}", g.url);
    let kept = mcp_over(&g, pki.http()).await;

    // ALPN: HTTP/2 when offered, HTTP/1.1 otherwise.
    let (proto, cn) = pki.handshake(&addr(&g), &[b"h2", b"http/1.1"]).await;
    assert_eq!(proto.as_deref(), Some(&b"h2"[..]));
    assert!(cn.contains("first"));
    let (proto, _) = pki.handshake(&addr(&g), &[b"http/1.1"]).await;
    assert_eq!(proto.as_deref(), Some(&b"http/1.1"[..]));
    // MCP over the HTTP/2 that ALPN chose.
    let h2 = pki.connect(&addr(&g), &[b"h2"]).await;
    common::h2::session_over(h2, &g.url, "tls over h2").await;
    // Plain HTTP on the TLS port gets nothing useful.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/healthz", addr(&g)))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.map(|r| !r.status().is_success()).unwrap_or(true));

    // The certificate is replaced on disk: the next connections get the new one.
    pki.issue("second");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, cn) = pki.handshake(&addr(&g), &[b"h2"]).await;
        if cn.contains("second") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate is never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The session opened before keeps working, and new clients work too.
    let r = kept
        .call_tool(json!(3), "echo", json!({"message": "still"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "still", "{r}");
    mcp_over(&g, pki.http()).await;
}

/// A broken key or certificate stops Gantry at start with the file and the reason
/// (and `check-config` says the same), rather than serving nothing.
#[tokio::test]
async fn an_unusable_certificate_is_refused_at_start() {
    let pki = Pki::new();
    pki.issue("ok");
    std::fs::write(pki.dir.file("key.pem"), "not a key").unwrap();
    let dir = Scratch::new("tls-bad");
    let file = dir.file("gantry.toml");
    std::fs::write(
        &file,
        format!(
            "[server]\n{}\n[[backends]]\nname = \"a\"\nstdio = {{ command = \"cat\" }}\n",
            pki.server_line()
        ),
    )
    .unwrap();
    for args in [
        vec!["check-config"],
        vec!["--listen", "127.0.0.1:0", "--config"],
    ] {
        let out = std::process::Command::new(gantry_bin())
            .args(&args)
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("server.tls.key") && err.contains("key.pem"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("listening"), "{err}");
    }
}

/// The official TypeScript SDK client logs in with OAuth against Gantry's own TLS
/// listener (trusting the test CA) and calls a tool.
#[tokio::test]
async fn the_sdk_logs_in_over_gantrys_https() {
    let pki = Pki::new();
    pki.issue("gantry");
    let idp = Provider::start(&[]);
    let g = gantry()
        .server(&pki.server_line())
        .section(&format!(
            "[auth.oauth]\nrequired_scopes = [\"mcp:read\"]\n[[auth.oauth.issuers]]\nissuer = {:?}\n",
            idp.issuer()
        ))
        .backend(example())
        .start();
    idp.add_resource(&g.url, "jwt").await;
    // The protected-resource metadata names the https URL.
    let doc: Value = pki
        .http()
        .get(format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            g.base
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["resource"], g.url.as_str(), "{doc}");
    let out = std::process::Command::new(common::oidc::node())
        .arg(common::oidc::oidc_script("sdk_flow.mjs"))
        .args([
            "--url",
            &g.url,
            "--tool",
            "echo",
            "--args",
            r#"{"message":"over tls"}"#,
        ])
        .env("NODE_EXTRA_CA_CERTS", pki.dir.file("ca.pem"))
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    let flow: Value =
        serde_json::from_str(line.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
    assert_eq!(
        flow["ok"],
        true,
        "{line} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(flow["call"]["content"][0]["text"], "over tls", "{flow}");
}

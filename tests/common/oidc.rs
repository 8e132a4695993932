//! A real OpenID provider for the OAuth tests: `tests/oidc/provider.mjs`
//! (`oidc-provider`, see tests/oidc/README.md) on an ephemeral loopback port, and the
//! ways tests get tokens from it: client credentials, and tokens signed with its own
//! key for the claims a provider would never issue (expired, foreign audience…).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The Node that runs the fixtures (pinned in tests/interop).
pub(crate) fn node() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/node_modules/.bin/node")
}

/// A file of tests/oidc.
pub(crate) fn oidc_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/oidc")
        .join(name)
}

/// Runs a tests/oidc script to its end: its last stdout line, as JSON (panics with
/// its output when there is none).
pub(crate) fn run_script(name: &str, args: &[&str]) -> Value {
    let out = Command::new(node())
        .arg(oidc_script(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.lines().last().unwrap_or("null")).unwrap_or_else(|_| {
        panic!(
            "{name} printed no JSON: {line} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Spawns a fixture that prints one JSON line on stdout once it is ready (and
/// exits when its stdin closes): the child and that line.
fn spawn_ready(mut cmd: Command, what: &str) -> (Child, Value) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if std::env::var("GANTRY_TEST_ECHO").is_ok() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap_or_else(|e| panic!("start {what} (npm ci in tests/interop): {e}"));
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what} did not start"));
    let info = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{what} printed {line}"));
    (child, info)
}

/// A running provider; stopped on drop (its stdin closes).
pub(crate) struct Provider {
    child: Child,
    /// Its JSON line: issuer, endpoints, clients.
    pub info: Value,
    /// Its signing keys (`--keys-out`).
    pub keys: Value,
    _dir: super::Scratch,
    http: reqwest::Client,
}

impl Drop for Provider {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    /// Starts `provider.mjs` with extra options.
    pub(crate) fn start(args: &[&str]) -> Self {
        let dir = super::Scratch::new("oidc");
        let keys = dir.0.join("keys.json");
        let mut cmd = Command::new(node());
        cmd.arg(oidc_script("provider.mjs"))
            .args(["--keys-out", keys.to_str().unwrap()])
            .args(args);
        let (child, info) = spawn_ready(cmd, "tests/oidc/provider.mjs");
        let keys: Value = serde_json::from_str(&std::fs::read_to_string(&keys).unwrap()).unwrap();
        Self {
            child,
            info,
            keys,
            _dir: dir,
            http: reqwest::Client::new(),
        }
    }

    pub(crate) fn issuer(&self) -> &str {
        self.info["issuer"].as_str().unwrap()
    }

    /// Registers a resource (`jwt` or `opaque` tokens) once Gantry's URL is known.
    pub(crate) async fn add_resource(&self, url: &str, format: &str) {
        let r = self
            .http
            .post(self.info["admin_resources_url"].as_str().unwrap())
            .json(&json!({ "resource": url, "format": format }))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "add resource: {}", r.status());
    }

    /// How many times the provider's JWKS was fetched.
    pub(crate) async fn jwks_fetches(&self) -> u64 {
        let url = self.info["admin_resources_url"]
            .as_str()
            .unwrap()
            .replace("/__test/resources", "/__test/requests");
        let v: Value = self
            .http
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["jwks"].as_u64().unwrap()
    }

    /// A real access token for `resource` from the client-credentials grant.
    pub(crate) async fn client_token(&self, resource: &str, scope: &str) -> String {
        let c = &self.info["clients"]["minter"];
        let r = self
            .http
            .post(self.info["token_endpoint"].as_str().unwrap())
            .basic_auth(
                c["client_id"].as_str().unwrap(),
                c["client_secret"].as_str(),
            )
            .form(&[
                ("grant_type", "client_credentials"),
                ("resource", resource),
                ("scope", scope),
            ])
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert!(status.is_success(), "token: {status} {body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    /// A token signed with the provider's own key: `claims` over the defaults
    /// (`iss`, `sub`, `aud`, `iat`, `exp` in 5 minutes, `scope`); a `null` removes one.
    pub(crate) fn sign(&self, aud: &str, claims: Value) -> String {
        self.sign_as(aud, claims, self.keys[0]["kid"].as_str().unwrap())
    }

    /// [`Provider::sign`] with the provider's key but another `kid` in the header.
    pub(crate) fn sign_as(&self, aud: &str, claims: Value, kid: &str) -> String {
        let key = &self.keys[0];
        let now = now();
        let mut c = json!({
            "iss": self.issuer(), "sub": "alice", "aud": aud, "iat": now, "exp": now + 300,
            "scope": "mcp:read", "client_id": "test-client", "jti": format!("t{now}{}", rand_u64()),
        });
        for (k, v) in claims.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(kid.to_owned());
        // As the provider's own access tokens (RFC 9068).
        header.typ = Some("at+jwt".into());
        let pem = key["private_pem"].as_str().unwrap();
        let enc = jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap();
        jsonwebtoken::encode(&header, &c, &enc).unwrap()
    }
}

/// The claims of a JWT, unverified (what a backend was given).
pub(crate) fn jwt_claims(token: &str) -> Value {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url claims");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn rand_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The SDK's own protected MCP server (tests/oidc/protected_server.mjs): the
/// baseline a protected Gantry is compared with. Stopped on drop.
pub(crate) struct ProtectedServer {
    child: Child,
    pub url: String,
}

impl Drop for ProtectedServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProtectedServer {
    pub(crate) fn start(issuer: &str) -> Self {
        let mut cmd = Command::new(node());
        cmd.arg(oidc_script("protected_server.mjs"))
            .args(["--issuer", issuer]);
        let (child, info) = spawn_ready(cmd, "tests/oidc/protected_server.mjs");
        Self {
            child,
            url: info["url"].as_str().unwrap().to_owned(),
        }
    }
}

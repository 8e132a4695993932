//! The shipped example configuration stays valid: `gantry check-config` (the real
//! binary) accepts `config/gantry.example.toml`, and rejects a broken copy of it with
//! the key path of every problem on stderr.
// Integration tests time real processes: wall-clock `std::time::Instant` is right here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/gantry.example.toml")
}

fn check_config(file: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("check-config")
        .arg(file)
        .output()
        .expect("cannot run gantry")
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "gantry-config-example-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn example_config_is_valid() {
    let out = check_config(&example());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "check-config failed:\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains("ok (2 backends: everything, remote)"),
        "unexpected output: {stdout}"
    );
}

#[test]
fn broken_copy_is_rejected_with_key_paths() {
    let text = std::fs::read_to_string(example()).unwrap();
    let broken = text
        .replacen("listen = \"127.0.0.1:8080\"", "listen = \"nowhere\"", 1)
        .replacen("name = \"remote\"", "name = \"not a valid name\"", 1)
        .replacen(
            "url = \"https://mcp.example.com/mcp\"",
            "url = \"ftp://mcp.example.com/mcp\"",
            1,
        );
    assert_ne!(broken, text, "the example changed shape; update this test");
    let dir = TempDir::new();
    let file = dir.0.join("broken.toml");
    std::fs::write(&file, broken).unwrap();

    let out = check_config(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a broken config was accepted: {stderr}"
    );
    for key in ["server.listen", "backends[1].name", "backends[1].http.url"] {
        assert!(stderr.contains(key), "missing `{key}` in stderr:\n{stderr}");
    }
}

#[test]
fn unknown_key_is_rejected_by_name() {
    let text = std::fs::read_to_string(example()).unwrap();
    let broken = text.replacen("[server]\n", "[server]\nlisten_on = \"0.0.0.0:8080\"\n", 1);
    assert_ne!(broken, text, "the example changed shape; update this test");
    let dir = TempDir::new();
    let file = dir.0.join("unknown-key.toml");
    std::fs::write(&file, broken).unwrap();

    let out = check_config(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an unknown key was accepted: {stderr}"
    );
    assert!(
        stderr.contains("listen_on"),
        "missing `listen_on` in stderr:\n{stderr}"
    );
}

//! Records which commit Gantry was built from, for `gantry --version` and the
//! `gantry_build_info` metric: `GANTRY_COMMIT` / `GANTRY_COMMIT_DATE` when set (a
//! container build without `.git`), else `git`, else "unknown". The commit's date, not
//! the build's, so the same source builds the same binary.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=GANTRY_COMMIT");
    println!("cargo:rerun-if-env-changed=GANTRY_COMMIT_DATE");
    println!("cargo:rerun-if-changed=.git/HEAD");
    if let Some(head) = git(&["rev-parse", "--symbolic-full-name", "HEAD"]) {
        println!("cargo:rerun-if-changed=.git/{head}");
    }
    let commit = std::env::var("GANTRY_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let date = std::env::var("GANTRY_COMMIT_DATE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["log", "-1", "--format=%cs"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=GANTRY_COMMIT={commit}");
    println!("cargo:rustc-env=GANTRY_COMMIT_DATE={date}");
}

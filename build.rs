//! Names the build: the crate's version, and the git commit it was built from when there is one
//! (`0.1.0 (4a584fd)`, `0.1.0 (4a584fd, modified)`), so a load test's report and the gateway's
//! `/metrics` say which code they measured.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    let build = match git(&["rev-parse", "--short=7", "HEAD"]) {
        Some(commit) if !commit.is_empty() => {
            // `--no-optional-locks`: a plain `git status` refreshes and rewrites `.git/index`.
            let modified = git(&[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=no",
            ])
            .is_some_and(|changes| !changes.is_empty());
            if modified {
                format!("{version} ({commit}, modified)")
            } else {
                format!("{version} ({commit})")
            }
        }
        // A source tarball, or no git: the version alone.
        _ => version.to_owned(),
    };
    println!("cargo:rustc-env=LIVEGATE_BUILD={build}");
    // Run again when the commit or the tracked files change; nothing else changes the name.
    // Not `.git/index`: every `git status` (the user's, an editor's) may rewrite it without a
    // change, and the tracked files it would catch are watched themselves.
    for path in [
        "src",
        "static",
        "clients/js/lib",
        "clients/js/examples",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    // The commit: HEAD (a checkout) and the branch it names (a commit); in a worktree the
    // branch lives in the main repository's folder. Only files that exist: cargo runs the
    // script again on every build for a watched path that is missing.
    let mut watched = Vec::new();
    if let Some(git_dir) = git(&["rev-parse", "--git-dir"]) {
        watched.push(format!("{git_dir}/HEAD"));
    }
    if let (Some(common_dir), Some(branch)) = (
        git(&["rev-parse", "--git-common-dir"]),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) {
        watched.push(format!("{common_dir}/{branch}"));
        watched.push(format!("{common_dir}/packed-refs"));
    }
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
}

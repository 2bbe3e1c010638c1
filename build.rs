//! Names the build: the crate's version, and the git commit it was built from when there is one
//! (`0.1.0 (4a584fd)`, `0.1.0 (4a584fd, modified)`), so a load test's report and the gateway's
//! `/metrics` say which code they measured.

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
            let modified = git(&["status", "--porcelain", "--untracked-files=no"])
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
    for path in ["src", "static", "Cargo.toml", "Cargo.lock", "build.rs"] {
        println!("cargo:rerun-if-changed={path}");
    }
    if let Some(git_dir) = git(&["rev-parse", "--git-dir"]) {
        for path in ["HEAD", "index", "refs", "packed-refs"] {
            println!("cargo:rerun-if-changed={git_dir}/{path}");
        }
    }
}
